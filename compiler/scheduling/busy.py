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
    def of_cycles(cls, cycles) -> BusyIntervals:
        """Single busy cycles (an interval ``[c, c + 1)`` each), booked at once."""
        out = cls()
        for c in sorted(set(cycles)):
            if out._ends and out._ends[-1] == c:
                out._ends[-1] = c + 1
            else:
                out._starts.append(c)
                out._ends.append(c + 1)
        return out

    # The schedulers ask millions of times: each method checks its interval inline.
    @staticmethod
    def _reject(lo, hi):
        raise ValueError(f"a busy interval [lo, hi) needs integers lo < hi, "
                         f"not [{lo!r}, {hi!r})")

    def clash_end(self, lo: int, hi: int) -> int | None:
        """None if ``[lo, hi)`` is free, else the end of the latest busy interval that
        starts before ``hi``: no interval of this length fits before that end, so it is
        the next start worth trying."""
        if type(lo) is not int or type(hi) is not int or hi <= lo:
            self._reject(lo, hi)
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
        if type(lo) is not int or type(hi) is not int or hi <= lo:
            self._reject(lo, hi)
        starts, ends = self._starts, self._ends
        a = bisect_left(ends, lo)                 # first interval ending at/after lo
        b = bisect_right(starts, hi)              # intervals starting at/before hi
        if a == b:                                # apart from every one
            starts.insert(a, lo)
            ends.insert(a, hi)
        elif b == a + 1:                          # touching or overlapping one: grow it
            if lo < starts[a]:
                starts[a] = lo
            if hi > ends[a]:
                ends[a] = hi
        else:                                     # several: merge them
            starts[a:b] = [min(lo, starts[a])]
            ends[a:b] = [max(hi, ends[b - 1])]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """The busy intervals, merged, in time order."""
        return iter(zip(self._starts, self._ends))

    def __len__(self) -> int:
        return len(self._starts)

    def __repr__(self) -> str:
        return f"BusyIntervals({list(self)})"


class BusyBanks:
    """Half-open busy intervals ``[lo, hi)`` of one port of each of a set of banks (one
    unit's use of a CBUF or ACC port, say), for claims that book many banks over the
    same cycles at once. A set of banks is an int bit mask (bit ``b``: bank ``b``).

    Time is cut into disjoint pieces, each with the mask of the banks busy throughout
    it; touching pieces with equal masks are merged. A claim of sixteen banks is then
    one piece, not sixteen intervals, and a query is one bisection and a look at the
    pieces it overlaps."""

    def __init__(self):
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._masks: list[int] = []

    def clash_end(self, lo: int, hi: int, banks: int) -> int | None:
        """None if no bank of `banks` is busy in ``[lo, hi)``, else the end of the
        latest piece overlapping it with one of them busy: such a bank stays busy
        until then, so no interval of this length fits before it."""
        if type(lo) is not int or type(hi) is not int or hi <= lo:
            BusyIntervals._reject(lo, hi)
        ends = self._ends
        if not ends or ends[-1] <= lo:            # after every piece
            return None
        first = bisect_right(ends, lo)
        for k in range(bisect_left(self._starts, hi) - 1, first - 1, -1):
            if self._masks[k] & banks:
                return self._ends[k]
        return None

    def add(self, lo: int, hi: int, banks: int) -> None:
        """Mark `banks` busy in ``[lo, hi)``."""
        if type(lo) is not int or type(hi) is not int or hi <= lo:
            BusyIntervals._reject(lo, hi)
        starts, ends, masks = self._starts, self._ends, self._masks
        if not ends or lo >= ends[-1]:            # after every piece: the usual case
            if ends and ends[-1] == lo and masks[-1] == banks:
                ends[-1] = hi
            else:
                starts.append(lo)
                ends.append(hi)
                masks.append(banks)
            return
        a = bisect_right(ends, lo)                # pieces ending after lo ...
        b = bisect_left(starts, hi)               # ... and starting before hi overlap
        pieces: list[tuple[int, int, int]] = []
        at = lo
        for k in range(a, b):
            s, e, m = starts[k], ends[k], masks[k]
            if s < at:                            # its part before the claim
                pieces.append((s, at, m))
            elif at < s:                          # a gap in the claim's span
                pieces.append((at, s, banks))
            pieces.append((max(s, at), min(e, hi), m | banks))
            if e > hi:                            # its part after the claim
                pieces.append((hi, e, m))
            at = min(e, hi)
        if at < hi:
            pieces.append((at, hi, banks))
        # merge with the neighbours where they touch and agree
        if a > 0 and ends[a - 1] == pieces[0][0] and masks[a - 1] == pieces[0][2]:
            a -= 1
            pieces[0] = (starts[a], pieces[0][1], pieces[0][2])
        if b < len(starts) and starts[b] == pieces[-1][1] and masks[b] == pieces[-1][2]:
            pieces[-1] = (pieces[-1][0], ends[b], pieces[-1][2])
            b += 1
        merged = [pieces[0]]
        for p in pieces[1:]:
            last = merged[-1]
            if last[1] == p[0] and last[2] == p[2]:
                merged[-1] = (last[0], p[1], p[2])
            else:
                merged.append(p)
        starts[a:b] = [p[0] for p in merged]
        ends[a:b] = [p[1] for p in merged]
        masks[a:b] = [p[2] for p in merged]

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        """The pieces ``(lo, hi, banks)``, in time order."""
        return iter(zip(self._starts, self._ends, self._masks))

    def __repr__(self) -> str:
        return f"BusyBanks({list(self)})"


class IssueOrder:
    """The MATMULs of one unit, by issue cycle, for the collector order rule
    (docs/contract.md, "Partial-sum exits"): a MATMUL's rows reach the accumulate
    stage ``lead`` cycles sooner (``timing.exit_lead``), yet after every row of the
    MATMUL issued before it. In collector time ``c = t - lead`` the MATMULs' intervals
    ``[c, c + rows)`` must then be disjoint and in issue order, besides their issue
    intervals ``[t, t + rows)``. A scheduler that fills gaps places ops out of time
    order, so both the MATMUL issued just before a candidate cycle and the one just
    after it are checked: sorted lists and one bisection.

    With every lead 0 the rule is the unit's occupancy, which ``BusyIntervals``
    checks: until the first lead, :meth:`clash_end` answers at once and :meth:`add`
    only appends (sorted when a lead first comes)."""

    def __init__(self):
        self._issues: list[int] = []      # issue cycles, sorted
        self._firsts: list[int] = []      # their collector cycles t - lead
        self._rows: list[int] = []
        self._unsorted: list[tuple[int, int, int]] | None = []   # None once a lead came

    def _sort(self) -> None:
        for t, c, m in sorted(self._unsorted):
            self._issues.append(t)
            self._firsts.append(c)
            self._rows.append(m)
        self._unsorted = None

    def clash_end(self, t: int, rows: int, lead: int) -> int | None:
        """None if a MATMUL of `rows` rows and `lead` may issue at `t` between the ones
        booked, else the next issue cycle worth trying: the first the one before allows,
        or, if it would reach the collector late for the one after, the first that
        allows it past that one (no cycle in between can keep both in order)."""
        if self._unsorted is not None:
            if not lead:
                return None
            self._sort()
        issues, firsts, rows_ = self._issues, self._firsts, self._rows
        k = bisect_left(issues, t)
        if k:                                     # the one before: issued before t
            need = max(issues[k - 1], firsts[k - 1] + lead) + rows_[k - 1]
            if t < need:
                return need
        if k < len(issues) and (t + rows > issues[k] or t - lead + rows > firsts[k]):
            return max(issues[k], firsts[k] + lead) + rows_[k]   # past the one after
        return None

    def add(self, t: int, rows: int, lead: int) -> None:
        if self._unsorted is not None:
            if not lead:
                self._unsorted.append((t, t, rows))
                return
            self._sort()
        k = bisect_left(self._issues, t)
        self._issues.insert(k, t)
        self._firsts.insert(k, t - lead)
        self._rows.insert(k, rows)

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        """``(issue cycle, collector cycle, rows)`` of each MATMUL, in issue order."""
        if self._unsorted is not None:
            return iter(sorted(self._unsorted))
        return iter(zip(self._issues, self._firsts, self._rows))

    def __repr__(self) -> str:
        return f"IssueOrder({list(self)})"
