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


class RunningMax:
    """Per address of a resource of `size` addresses, the largest value raised so far
    (`initial` before any)."""

    def __init__(self, size: int, initial: int = 0):
        self.size = size
        self.small = size <= SMALL
        self.at = [initial] * size if self.small else np.full(size, initial, dtype=np.int64)
        self.floor = initial          # holds for every address
        self.peak = initial           # the largest entry of ``at``

    def max(self, lo: int, hi: int) -> int:
        """The largest value over addresses ``[lo, hi)``."""
        if lo == 0 and hi == self.size:
            return max(self.floor, self.peak)
        if self.small:
            most = max(self.at[lo:hi])
        elif hi - lo == 1:
            most = int(self.at[lo])
        else:
            most = int(self.at[lo:hi].max())
        return max(self.floor, most)

    def raise_to(self, lo: int, hi: int, value: int) -> None:
        """Raise addresses ``[lo, hi)`` to at least `value`."""
        if lo == 0 and hi == self.size:
            if value > self.floor:
                self.floor = value
            return
        arr = self.at
        if self.small or hi - lo == 1:
            for a in range(lo, hi):
                if arr[a] < value:
                    arr[a] = value
        else:
            np.maximum(arr[lo:hi], value, out=arr[lo:hi])
        if value > self.peak:
            self.peak = value
