"""Busy intervals of one resource: a chip unit, a datapath component or the issue slots.

Both schedulers ask the same two questions of a resource: is ``[lo, hi)`` free, and if
not, from when could it be; then they book it. Intervals are kept disjoint and sorted,
and touching ones are merged, so a query is one bisection.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator


class BusyIntervals:
    """Half-open busy intervals ``[lo, hi)`` of one resource."""

    def __init__(self):
        self._starts: list[int] = []
        self._ends: list[int] = []

    @classmethod
    def of_cycles(cls, cycles) -> "BusyIntervals":
        """Single busy cycles (an interval ``[c, c + 1)`` each), booked at once."""
        out = cls()
        for c in sorted(set(cycles)):
            if out._ends and out._ends[-1] == c:
                out._ends[-1] = c + 1
            else:
                out._starts.append(c)
                out._ends.append(c + 1)
        return out

    @staticmethod
    def _check(lo: int, hi: int) -> None:
        if not (isinstance(lo, int) and isinstance(hi, int)) or hi <= lo:
            raise ValueError(f"a busy interval [lo, hi) needs integers lo < hi, "
                             f"not [{lo!r}, {hi!r})")

    def clash_end(self, lo: int, hi: int) -> int | None:
        """None if ``[lo, hi)`` is free, else the end of the latest busy interval that
        starts before ``hi``: no interval of this length fits before that end, so it is
        the next start worth trying."""
        self._check(lo, hi)
        k = bisect_left(self._starts, hi) - 1
        if k >= 0 and self._ends[k] > lo:
            return self._ends[k]
        return None

    def is_free(self, lo: int, hi: int) -> bool:
        return self.clash_end(lo, hi) is None

    def first_free(self, t: int, length: int) -> int:
        """The earliest start ``>= t`` of a free interval of `length` cycles."""
        while (end := self.clash_end(t, t + length)) is not None:
            t = end
        return t

    def add(self, lo: int, hi: int) -> None:
        """Mark ``[lo, hi)`` busy (it may overlap or touch intervals already busy)."""
        self._check(lo, hi)
        a = bisect_left(self._ends, lo)           # first interval ending at/after lo
        b = bisect_right(self._starts, hi)        # intervals starting at/before hi
        if a < b:                                 # touching or overlapping: merge
            lo, hi = min(lo, self._starts[a]), max(hi, self._ends[b - 1])
        self._starts[a:b] = [lo]
        self._ends[a:b] = [hi]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """The busy intervals, merged, in time order."""
        return iter(zip(self._starts, self._ends))

    def __len__(self) -> int:
        return len(self._starts)

    def __repr__(self) -> str:
        return f"BusyIntervals({list(self)})"
