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
from .ir import ACCUMULATE, READ, WRITE, MicroOp, resource_sizes
from .reconfigure import Routing


class _Resource:
    """Per address, the first cycle each kind of access may start from: a read after
    every write and accumulate placed so far has ended, a write after every access
    has ended, an accumulate after every write and read has ended and every earlier
    accumulate has issued. Each kind is one array, so a query is one maximum over the
    access's rows. An access to every address (an op passing the whole fabric, a
    weight bank) only raises a floor, and the array's peak is kept, so such accesses
    cost no pass over the addresses; small resources are lists, where a numpy call
    would cost more than the work."""

    def __init__(self, size: int):
        self.size = size
        self.small = size <= 64
        self.at = {kind: [0] * size if self.small else np.zeros(size, dtype=np.int64)
                   for kind in _KINDS}
        self.floor = dict.fromkeys(_KINDS, 0)    # holds for every address
        self.peak = dict.fromkeys(_KINDS, 0)     # the largest entry of ``at``

    def earliest(self, lo: int, hi: int, mode: str) -> int:
        if lo == 0 and hi == self.size:
            return max(self.floor[mode], self.peak[mode])
        arr = self.at[mode]
        if self.small:
            most = max(arr[lo:hi])
        elif hi - lo == 1:
            most = int(arr[lo])
        else:
            most = int(arr[lo:hi].max())
        return max(self.floor[mode], most)

    def place(self, lo: int, hi: int, mode: str, issue: int, end: int) -> None:
        whole = lo == 0 and hi == self.size
        for kind, t in ((READ, end if mode != READ else None), (WRITE, end),
                        (ACCUMULATE, issue + 1 if mode == ACCUMULATE else end)):
            if t is None:
                continue
            if whole:
                if t > self.floor[kind]:
                    self.floor[kind] = t
                continue
            arr = self.at[kind]
            if self.small or hi - lo == 1:
                for a in range(lo, hi):
                    if arr[a] < t:
                        arr[a] = t
            else:
                np.maximum(arr[lo:hi], t, out=arr[lo:hi])
            if t > self.peak[kind]:
                self.peak[kind] = t


_KINDS = (READ, WRITE, ACCUMULATE)


def schedule(cfg: ChipConfig, ops: list[MicroOp]) -> list[int]:
    """Issue cycle of each op, in the order given."""
    resources = {name: _Resource(size) for name, size in resource_sizes(cfg).items()}
    units = {name: BusyIntervals() for name in set(timing.UNIT.values())}
    slots = BusyIntervals()         # issue cycles already taken
    routing = Routing(cfg, ops)
    cycles = []
    # What an op's fields decide, once per distinct op: lowering shares one fields
    # dict (and one needs dict) among the copies of a repeated instruction.
    known: dict[tuple[int, int], tuple[int, int, list]] = {}
    for op in ops:
        key = (id(op.fields), id(op.needs))
        got = known.get(key)
        if got is None:
            probe = op.instr(0)
            got = known[key] = (timing.occupancy(cfg, probe), timing.done(cfg, probe),
                                routing.settings(op))
        occupancy, done, spans = got
        unit = units[timing.UNIT[op.op]]
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
