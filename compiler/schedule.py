"""Assign every micro-op its issue cycle.

Greedy list scheduling in program order: each op goes to the earliest cycle that
(a) no other op issues in (the sequencer issues one instruction per cycle),
(b) keeps its unit's occupancy interval clear of every op already on that unit,
(c) starts each access at or after the end of every earlier conflicting access (by
default an access spans the op's whole ``[issue, done)``; weight-bank accesses use
their exact ``timing.bank_window``; an accumulate after an accumulate only needs to
issue later).
Later ops may land before earlier ones in time when they are independent, which is
what overlaps loads, compute and stores. All latencies come from systolica.arch.timing.
"""

from __future__ import annotations

from bisect import bisect_left, insort

import numpy as np

from ..arch import isa, timing
from ..arch.config import ChipConfig
from .graph import CompileError
from .ir import ACCUMULATE, READ, MicroOp, resource_sizes


class _Resource:
    """Per address: latest ``done`` of reads, writes and accumulates placed so far,
    and the latest accumulate issue cycle (+1)."""

    def __init__(self, size: int):
        self.read_end = np.zeros(size, dtype=np.int64)
        self.write_end = np.zeros(size, dtype=np.int64)
        self.acc_end = np.zeros(size, dtype=np.int64)
        self.acc_after = np.zeros(size, dtype=np.int64)

    def earliest(self, lo: int, hi: int, mode: str) -> int:
        s = slice(lo, hi)
        if mode == READ:
            return int(max(self.write_end[s].max(), self.acc_end[s].max()))
        if mode == ACCUMULATE:
            return int(max(self.write_end[s].max(), self.read_end[s].max(),
                           self.acc_after[s].max()))
        return int(max(self.write_end[s].max(), self.read_end[s].max(),
                       self.acc_end[s].max()))

    def place(self, lo: int, hi: int, mode: str, issue: int, end: int) -> None:
        s = slice(lo, hi)
        if mode == ACCUMULATE:
            np.maximum(self.acc_end[s], end, out=self.acc_end[s])
            np.maximum(self.acc_after[s], issue + 1, out=self.acc_after[s])
        else:
            arr = self.read_end if mode == READ else self.write_end
            np.maximum(arr[s], end, out=arr[s])


class _Unit:
    """Disjoint busy intervals of one unit, sorted by start."""

    def __init__(self):
        self.starts: list[int] = []
        self.ends: list[int] = []

    def conflict_end(self, t: int, length: int) -> int | None:
        """End of the interval overlapping ``[t, t+length)``, or None if it is free."""
        i = bisect_left(self.starts, t + length) - 1
        if i >= 0 and self.ends[i] > t:
            return self.ends[i]
        return None

    def add(self, t: int, length: int) -> None:
        i = bisect_left(self.starts, t)
        self.starts.insert(i, t)
        self.ends.insert(i, t + length)


def schedule(cfg: ChipConfig, ops: list[MicroOp]) -> list[int]:
    """Issue cycle of each op, in the order given."""
    resources = {name: _Resource(size) for name, size in resource_sizes(cfg).items()}
    units = {name: _Unit() for name in set(timing.UNIT.values())}
    issued: list[int] = []          # sorted issue cycles already taken
    cycles = []
    for op in ops:
        probe = op.instr(0)
        occupancy = timing.occupancy(cfg, probe)
        done = timing.done(cfg, probe)
        unit = units[timing.UNIT[op.op]]
        t = max((resources[a.resource].earliest(a.lo, a.hi, a.mode) - a.start
                 for a in op.accesses), default=0)
        t = max(t, 0)
        while True:
            end = unit.conflict_end(t, occupancy)
            if end is not None:
                t = end
                continue
            i = bisect_left(issued, t)
            if i < len(issued) and issued[i] == t:
                t += 1
                continue
            break
        if t + done >= 1 << isa.CYCLE_BITS:
            raise CompileError(f"cannot schedule {op}: it would issue at cycle {t}, past "
                               f"the {isa.CYCLE_BITS}-bit cycle field")
        unit.add(t, occupancy)
        insort(issued, t)
        for a in op.accesses:
            resources[a.resource].place(a.lo, a.hi, a.mode, t,
                                        t + (done if a.end is None else a.end))
        cycles.append(t)
    return cycles
