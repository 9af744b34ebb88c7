"""Assign every micro-op its issue cycle.

Greedy list scheduling in program order: each op goes to the earliest cycle that
(a) no other op issues in (the sequencer issues one instruction per cycle),
(b) keeps its unit's occupancy interval clear of every op already on that unit
(``busy.BusyIntervals``, as for datapath components),
(c) passes each multiplexer after every op already placed that needs it set
otherwise, with a free issue slot kept for the update (``reconfigure.Routing``),
(d) starts each access at or after the end of every earlier conflicting access (by
default an access spans the op's whole ``[issue, done)``; weight-bank accesses use
their exact ``timing.bank_window``; an accumulate after an accumulate only needs to
issue later).
Later ops may land before earlier ones in time when they are independent, which is
what overlaps loads, compute and stores. All latencies come from systolica.arch.timing.
"""

from __future__ import annotations

import numpy as np

from ..arch import isa, timing
from ..arch.config import ChipConfig
from .busy import BusyIntervals
from .graph import CompileError
from .ir import ACCUMULATE, READ, MicroOp, resource_sizes
from .reconfigure import Routing


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


def schedule(cfg: ChipConfig, ops: list[MicroOp]) -> list[int]:
    """Issue cycle of each op, in the order given."""
    resources = {name: _Resource(size) for name, size in resource_sizes(cfg).items()}
    units = {name: BusyIntervals() for name in set(timing.UNIT.values())}
    slots = BusyIntervals()         # issue cycles already taken
    routing = Routing(cfg, ops)
    cycles = []
    for op in ops:
        probe = op.instr(0)
        occupancy = timing.occupancy(cfg, probe)
        done = timing.done(cfg, probe)
        unit = units[timing.UNIT[op.op]]
        spans = routing.settings(op)
        t = max((resources[a.resource].earliest(a.lo, a.hi, a.mode) - a.start
                 for a in op.accesses), default=0)
        t = max(t, routing.earliest(spans), 0)
        while True:
            end = unit.clash_end(t, t + occupancy)
            if end is None:
                end = slots.clash_end(t, t + 1)
            if end is None:
                reserved = routing.reserve(spans, t, slots)
                if reserved is not None:
                    break
                end = t + 1
            t = end
        if t + done >= 1 << isa.CYCLE_BITS:
            raise CompileError(f"cannot schedule {op}: it would issue at cycle {t}, past "
                               f"the {isa.CYCLE_BITS}-bit cycle field")
        unit.add(t, t + occupancy)
        slots.add(t, t + 1)
        for c in reserved:                  # kept free for configuration updates
            slots.add(c, c + 1)
        routing.place(spans, t)
        for a in op.accesses:
            resources[a.resource].place(a.lo, a.hi, a.mode, t,
                                        t + (done if a.end is None else a.end))
        cycles.append(t)
    return cycles
