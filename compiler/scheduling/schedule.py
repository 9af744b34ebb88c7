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
issue later),
(e) keeps each CBUF and ACC bank port it uses (``timing.bank_claims``: the read or
write port of every bank its ranges meet, over the closed-form window of that port)
clear of every other unit's use (docs/contract.md, "CBUF banks": a bank has one read
and one write port),
(f) for a MATMUL, keeps the collector order with the MATMULs issued just before and
just after it (``busy.IssueOrder``; docs/contract.md, "Partial-sum exits": one with
a larger ``timing.exit_lead`` than the one before it waits the difference longer).
Later ops may land before earlier ones in time when they are independent, which is
what overlaps loads, compute and stores. All latencies come from systolica.arch.timing.
"""

from __future__ import annotations

from systolica.arch import isa, timing
from systolica.arch.config import ChipConfig
from systolica.compiler.errors import CompileError
from systolica.compiler.microops.ir import ACCUMULATE, READ, WRITE, MicroOp, resource_sizes
from systolica.compiler.microops.running_max import RunningMaxes
from systolica.compiler.scheduling.busy import BusyBanks, BusyIntervals, IssueOrder
from systolica.compiler.scheduling.reconfigure import Routing


class _Resource:
    """Per address, the first cycle each kind of access may start from
    (``since.max(lo, hi, COLUMN[mode])`` over its addresses): a read after every write
    and accumulate placed so far has ended, a write after every access has ended, an
    accumulate after every write and read has ended and every earlier accumulate has
    issued. The three are kept side by side, so placing an access is one update (two
    for an accumulate)."""

    COLUMN = {READ: 0, WRITE: 1, ACCUMULATE: 2}
    #: the columns that wait for the end of a placed access of each mode
    ENDS = {READ: slice(1, 3), WRITE: slice(0, 3), ACCUMULATE: slice(0, 2)}

    def __init__(self, size: int):
        self.since = RunningMaxes(size, len(self.COLUMN))


class _BankPorts:
    """Per CBUF or ACC port (read or write) and unit, the cycles the unit uses that
    port of each bank (``timing.bank_claims``)."""

    def __init__(self):
        # per port and unit: its uses of the port, and the cycle the last one ends
        # (none of them meets a claim from there on)
        self.ports: dict[tuple[str, str], dict[str, list]] = {}
        # per port and unit, the other units' uses of the port, in the order they came
        self.others: dict[tuple[tuple[str, str], str], list[list]] = {}

    def claims(self, unit: str, bank_claims) -> list[tuple]:
        """``timing.bank_claims`` of an op on `unit` as ``(lo, hi, banks, others,
        mine)``: the banks whose port it claims over the same cycles, as one mask, the
        other units' uses of that port (kept up to date as units come) and its own."""
        masks: dict[tuple[tuple[str, str], int, int], int] = {}
        for (memory, mode, bank), lo, hi in bank_claims:
            key = ((memory, mode), lo, hi)
            masks[key] = masks.get(key, 0) | 1 << bank
        out = []
        for (port, lo, hi), banks in masks.items():
            users = self.ports.setdefault(port, {})
            if unit not in users:       # a new user of the port: the others' lists take it in
                mine = [BusyBanks(), -1]
                self.others[(port, unit)] = list(users.values())
                for other in users:
                    self.others[(port, other)].append(mine)
                users[unit] = mine
            out.append((lo, hi, banks, self.others[(port, unit)], users[unit]))
        return out

    @staticmethod
    def clash_end(claims, t: int) -> int | None:
        for lo, hi, banks, others, _ in claims:
            start = t + lo
            for busy, ends in others:
                if ends > start and \
                        (end := busy.clash_end(start, t + hi, banks)) is not None:
                    return end - lo
        return None

    @staticmethod
    def add(claims, t: int) -> None:
        for lo, hi, banks, _, mine in claims:
            mine[0].add(t + lo, t + hi, banks)
            if t + hi > mine[1]:
                mine[1] = t + hi


_NEXT_ACCUMULATE = slice(2, 3)


def _waits(resources: dict[str, _Resource], accesses) -> list[tuple]:
    """Per access, where its earliest issue is read: ``(since, lo, hi, column,
    start)`` (see :class:`_Resource`)."""
    return [(resources[a.resource].since, a.lo, a.hi, _Resource.COLUMN[a.mode], a.start)
            for a in accesses]


def _marks(resources: dict[str, _Resource], accesses, done: int) -> list[tuple]:
    """Per access, what placing the op raises: ``(since, lo, hi, columns, end after
    issue, accumulate)``; the columns wait for the access's end, and an accumulate's
    own column for its issue (see :class:`_Resource`)."""
    return [(resources[a.resource].since, a.lo, a.hi, _Resource.ENDS[a.mode],
             done if a.end is None else a.end, a.mode == ACCUMULATE) for a in accesses]


def schedule(cfg: ChipConfig, ops: list[MicroOp]) -> list[int]:
    """Issue cycle of each op, in the order given."""
    resources = {name: _Resource(size) for name, size in resource_sizes(cfg).items()}
    units = {name: BusyIntervals() for name in set(timing.UNIT.values())}
    slots = BusyIntervals()         # issue cycles already taken
    routing = Routing(cfg, ops)
    banks = _BankPorts()
    collector = IssueOrder()        # the MATMULs, for the collector order
    cycles = []
    # What an op's fields decide, once per distinct op: lowering shares one fields
    # dict (and one needs dict and accesses tuple) among the copies of a repeated
    # instruction. Each access comes with its resource and the column its mode waits
    # for. Its timing, routing and bank claims are also kept by the values of its
    # fields and needs, with a field that only moves it (``timing.moving_field``: a
    # DMA's DRAM address) at 0: most DMAs differ in nothing else.
    known: dict[tuple[int, int, int], tuple] = {}
    timed: dict[tuple, tuple] = {}
    limit = 1 << isa.CYCLE_BITS
    for op in ops:
        key = (id(op.fields), id(op.needs), id(op.accesses))
        got = known.get(key)
        if got is None:
            moving = timing.moving_field(op.op)
            fields = op.fields
            if moving is not None and fields.get(moving):
                fields = dict(fields)
                fields[moving] = 0
            same = (op.op, tuple(fields.items()), tuple(op.needs.items()))
            fixed = timed.get(same)
            if fixed is None:
                probe = op.instr(0)
                fixed = timed[same] = (timing.occupancy(cfg, probe), timing.done(cfg, probe),
                                       routing.settings(op),
                                       banks.claims(timing.UNIT[op.op],
                                                    timing.bank_claims(cfg, probe)),
                                       timing.exit_lead(cfg, probe)
                                       if op.op is isa.Opcode.MATMUL else None,
                                       units[timing.UNIT[op.op]])
            got = known[key] = (*fixed, _waits(resources, op.accesses),
                                _marks(resources, op.accesses, fixed[1]))
        occupancy, done, spans, claims, lead, unit, waits, marks = got
        t = 0
        for since, lo, hi, column, start in waits:
            after = since.max(lo, hi, column) - start
            if after > t:
                t = after
        if spans:
            t = max(t, routing.earliest(spans))
        while True:
            end = unit.clash_end(t, t + occupancy)
            if end is None and lead is not None:
                end = collector.clash_end(t, occupancy, lead)
            if end is None:
                end = slots.clash_end(t, t + 1)
            if end is None and claims:
                end = banks.clash_end(claims, t)
            if end is None:
                reserved = routing.reserve(spans, t, slots) if spans else ()
                if reserved is not None:
                    break
                end = routing.retry_after(spans, t)
            t = end
        if t + done >= limit:
            raise CompileError(f"cannot schedule {op}: it would issue at cycle {t}, past "
                               f"the {isa.CYCLE_BITS}-bit cycle field")
        unit.add(t, t + occupancy)
        if lead is not None:
            collector.add(t, occupancy, lead)
        slots.add(t, t + 1)
        if claims:
            banks.add(claims, t)
        for c in reserved:                  # kept free for configuration updates
            slots.add(c, c + 1)
        if spans:
            routing.place(spans, t)
        for since, lo, hi, ends, after, accumulate in marks:
            since.raise_to(lo, hi, ends, t + after)
            if accumulate:
                since.raise_to(lo, hi, _NEXT_ACCUMULATE, t + 1)
        cycles.append(t)
    return cycles
