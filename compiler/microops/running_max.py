"""A running maximum per address of one resource, for the passes that ask, op after
op, "what is the latest cycle (or position) recorded on any of these addresses".

Networks make hundreds of thousands of such queries, most over tiny resources (a
weight bank, the multiplexer table) or over a whole resource at once, so those never
touch the per-address array: a query or update over every address uses a floor that
holds for all of them and the array's peak, and small resources are plain lists,
where a numpy call would cost more than the work.
"""

from __future__ import annotations

import numpy as np

#: Resources up to this many addresses are kept in lists.
SMALL = 64

_max = np.maximum.reduce       # ndarray.max without its Python wrapper


class RunningMax:
    """Per address of a resource of `size` addresses, the largest value raised so far
    (`initial` before any)."""

    def __init__(self, size: int, initial: int = 0):
        # Entries are kept as ``value - initial``: the array starts as zeros, which the
        # OS hands out lazily, so a large resource (the DRAM) costs only the pages a
        # pass touches.
        self.size = size
        self.small = size <= SMALL
        self.initial = initial
        self.at = [0] * size if self.small else np.zeros(size, dtype=np.int64)
        self.floor = initial          # holds for every address
        self.peak = initial           # the largest entry of ``at`` (plus `initial`)

    def max(self, lo: int, hi: int) -> int:
        """The largest value over addresses ``[lo, hi)``."""
        if lo == 0 and hi == self.size:
            return max(self.floor, self.peak)
        if self.small:
            most = max(self.at[lo:hi])
        elif hi - lo == 1:
            most = int(self.at[lo])
        else:
            most = int(_max(self.at[lo:hi]))
        return max(self.floor, most + self.initial)

    def raise_to(self, lo: int, hi: int, value: int) -> None:
        """Raise addresses ``[lo, hi)`` to at least `value`."""
        if lo == 0 and hi == self.size:
            if value > self.floor:
                self.floor = value
            return
        arr, above = self.at, value - self.initial
        if self.small or hi - lo == 1:
            for a in range(lo, hi):
                if arr[a] < above:
                    arr[a] = above
        else:
            np.maximum(arr[lo:hi], above, out=arr[lo:hi])
        if value > self.peak:
            self.peak = value


class RunningMaxes:
    """Per address of a resource of `size` addresses, `width` running maxima (columns)
    kept together (`initial` before any), so that an access raises several columns
    to one value in one step: a :class:`RunningMax` per column, in one array."""

    def __init__(self, size: int, width: int, initial: int = 0):
        self.size = size
        self.small = size <= SMALL
        self.initial = initial              # entries are kept as in RunningMax
        self.at = [[0] * size for _ in range(width)] if self.small else \
            np.zeros((width, size), dtype=np.int64)
        self.floor = [initial] * width      # per column, holds for every address
        self.peak = [initial] * width       # per column, the largest value in ``at``

    def max(self, lo: int, hi: int, column: int) -> int:
        """The largest value of `column` over addresses ``[lo, hi)``."""
        floor = self.floor[column]
        if lo == 0 and hi == self.size:
            most = self.peak[column]
        elif self.small:
            most = max(self.at[column][lo:hi]) + self.initial
        elif hi - lo == 1:
            most = int(self.at[column, lo]) + self.initial
        else:
            most = int(_max(self.at[column, lo:hi])) + self.initial
        return most if most > floor else floor

    def raise_to(self, lo: int, hi: int, columns: slice, value: int) -> None:
        """Raise `columns` (a slice ``first:last``) of addresses ``[lo, hi)`` to at
        least `value`."""
        first, last = columns.start, columns.stop
        if lo == 0 and hi == self.size:
            floor = self.floor
            for c in range(first, last):
                if value > floor[c]:
                    floor[c] = value
            return
        at, above = self.at, value - self.initial
        if self.small or hi - lo == 1:
            for c in range(first, last):
                column = at[c]
                for a in range(lo, hi):
                    if column[a] < above:
                        column[a] = above
        else:
            block = at[columns, lo:hi]
            np.maximum(block, above, out=block)
        peak = self.peak
        for c in range(first, last):
            if value > peak[c]:
                peak[c] = value
