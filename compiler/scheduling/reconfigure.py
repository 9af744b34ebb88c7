"""Configuration updates for a scheduled program (seed 002, Fig. 3-4).

Every op that uses the fabric needs some multiplexers set: its ``needs`` name the
settings it asks for, all others it passes keep their default (plain GEMM) routing.
From the schedule, each multiplexer gets config windows (consecutive uses with one
setting, ``timing.mux_use``) and, before each, an update window: from the last use of
the old setting (or cycle 0 for the first) to the cycle before the first use of the
new one. The first window of every multiplexer a program uses is always set, so a
program never depends on what an earlier one left behind.

Updates are then placed by ``config_updates.assign_updates`` under the chip's limits,
on cycles no other instruction issues in, and grouped into SETCFG instructions. When
the initial updates do not fit before the first uses, the whole schedule is shifted
later by whole update intervals until they do. Compiled networks and program text
(``cfg set``) both come through here (``plan_updates``); ``Routing`` is the part the
scheduler applies while it places ops, so that every later window has a place.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from systolica.arch import fabric, instructions, isa, timing
from systolica.arch.config import ChipConfig
from systolica.compiler.errors import CompileError
from systolica.compiler.microops.ir import MicroOp
from systolica.compiler.scheduling.busy import BusyIntervals
from systolica.compiler.scheduling.config_updates import (
    ConfigUpdateError,
    UpdateWindow,
    assign_updates,
    domain_limit,
    window_between,
)

FABRIC_OPS = tuple(op for op, entry in instructions.SPEC.items() if entry.uses_fabric)


@dataclass(frozen=True)
class Use:
    mux: str
    value: int
    lo: int            # absolute cycles [lo, hi) the op's data passes the multiplexer
    hi: int
    op: int            # index of the op in the program


def settings(cfg: ChipConfig, op: MicroOp) -> list[tuple[str, int, int, int]]:
    """``(mux, value, lo, hi)`` for every multiplexer the op's data passes, in cycles
    ``[lo, hi)`` after its issue, with the setting it needs there (its ``needs``, else
    the default). A need on a multiplexer the op does not pass is an error: it could
    never take effect."""
    if op.op not in FABRIC_OPS:
        if op.needs:
            raise CompileError(f"{op}: a {op.op.name} passes no multiplexer, so it cannot "
                               f"need {', '.join(op.needs)}")
        return []
    table = fabric.by_name(cfg)
    for name in op.needs:
        if name not in table:
            raise CompileError(f"{op}: no multiplexer {name!r}")
    ins = op.instr(0)
    out = []
    for mux in table.values():
        span = timing.mux_use(cfg, ins, mux.name)
        if span is None:
            continue
        try:
            value = mux.value_of(op.needs[mux.name]) if mux.name in op.needs else mux.default
        except ValueError as e:
            raise CompileError(f"{op}: {e}") from None
        out.append((mux.name, value, span[0], span[1]))
    passed = {name for name, *_ in out}
    missed = [name for name in op.needs if name not in passed]
    if missed:
        raise CompileError(f"{op}: its data does not pass {', '.join(missed)}, so it "
                           f"cannot need a setting there")
    return out


def uses(cfg: ChipConfig, ops: list[MicroOp], cycles: list[int]) -> dict[str, list[Use]]:
    """Per multiplexer, the uses in time order, with the setting each needs. A
    multiplexer every op needs at the same setting gets one use spanning them all
    (what :func:`windows` would merge them into): a network's hundreds of thousands
    of ops then cost a pass over the distinct ops, not one object per op and
    multiplexer."""
    # Copies of one op share their fields and needs dicts (lowering makes them so), so
    # the dicts' identities group them; equal ops from separate dicts are merely
    # grouped apart.
    groups: dict[tuple, list[int]] = defaultdict(list)
    for k, op in enumerate(ops):
        if op.op in FABRIC_OPS or op.needs:
            groups[(op.op, id(op.fields), id(op.needs))].append(k)
    at = np.asarray(cycles, dtype=np.int64)
    per_mux: dict[str, list[tuple]] = defaultdict(list)
    for idx in groups.values():
        spans = settings(cfg, ops[idx[0]])
        if spans:
            idx_arr = np.asarray(idx, dtype=np.int64)
            # the group's first issue (the first op issued then) and last, once for
            # all the multiplexers it passes
            cy = at[idx_arr]
            k = int(np.argmin(cy))
            bounds = (int(cy[k]), int(idx_arr[k]), int(cy.max()))
            for name, value, lo, hi in spans:
                per_mux[name].append((value, lo, hi, idx_arr, bounds))
    out: dict[str, list[Use]] = {}
    for name, lst in per_mux.items():
        if len({value for value, *_ in lst}) == 1:
            first, last, first_op = None, None, 0
            for _, lo, hi, _, (c_first, op_first, c_last) in lst:
                if first is None or c_first + lo < first:
                    first, first_op = c_first + lo, op_first
                end = c_last + hi
                last = end if last is None else max(last, end)
            out[name] = [Use(name, lst[0][0], first, last, first_op)]
            continue
        expanded = [Use(name, value, int(at[k]) + lo, int(at[k]) + hi, int(k))
                    for value, lo, hi, idx, _ in lst for k in idx]
        expanded.sort(key=lambda u: (u.lo, u.op))
        out[name] = expanded
    return out


Spans = list[tuple[str, int, int, int]]       # settings(): (mux, value, lo, hi)


class Routing:
    """The scheduler's side of configuration updates. An op that needs a setting other
    than the one earlier-placed ops use passes that multiplexer only after they all
    have, so one multiplexer's uses form phases of one setting each, one after another.
    When an op opens a phase (or becomes the new first use of the last one), the
    scheduler keeps an issue slot free in the update window before it (a multiple of
    ``cfg.config_update_interval``, within the per-cycle and power-domain limits), so
    the window solver always finds a place for the update. Ops that all use the
    defaults never wait and reserve nothing, so such programs schedule as if this did
    not exist."""

    def __init__(self, cfg: ChipConfig, ops: list[MicroOp]):
        self.cfg = cfg
        self.domain = {m.name: m.domain for m in fabric.muxes(cfg)}
        page = fabric.setcfg_format(cfg).page
        self.page = {m.name: page(m.index) for m in fabric.muxes(cfg)}
        table = fabric.by_name(cfg)
        distinct = {id(op.needs): op.needs for op in ops}   # copies share their needs
        self.active = any(name not in table or src not in table[name].sources
                          or table[name].value_of(src) != table[name].default
                          for needs in distinct.values() for name, src in needs.items())
        self.ends: dict[str, dict[int, int]] = defaultdict(dict)   # mux -> value -> end
        self.phase: dict[str, tuple[int, int]] = {}    # mux -> (value, first use) of
                                                       # the last phase

    def settings(self, op: MicroOp) -> Spans:
        return settings(self.cfg, op) if self.active else []

    def _after(self, name: str, value: int) -> int | None:
        """The last cycle another setting of `name` is in use (+1), or None."""
        return max((end for other, end in self.ends[name].items() if other != value),
                   default=None)

    def earliest(self, spans: Spans) -> int:
        """The first issue cycle at which the op passes every multiplexer it needs
        changed after the ops using the other settings."""
        return max((end - lo for name, value, lo, _ in spans
                    if (end := self._after(name, value)) is not None), default=0)

    def reserve(self, spans: Spans, t: int, slots: BusyIntervals) -> list[int] | None:
        """Free issue slots (other than `t`) for the updates the op needs when it
        issues at `t`, one or more per cycle as the limits allow; None if some update
        window holds no free allowed cycle (issue later)."""
        cfg = self.cfg
        taken: dict[int, list[str]] = {}             # slot -> domains of its updates
        page_of: dict[int, int] = {}                 # slot -> the page they share
        for name, value, lo, _ in sorted(spans, key=lambda s: s[2]):
            end = self._after(name, value)
            if end is None:
                continue                             # the first phase: from cycle 0
            phase = self.phase[name]
            if phase[0] == value and t + lo >= phase[1]:
                continue                             # inside a phase that has its slot
            first, last = max(end - 1, 0), t + lo - 1
            domain, page = self.domain[name], self.page[name]
            fits = next((c for c, ds in taken.items() if first <= c <= last
                         and len(ds) < cfg.max_config_updates_per_cycle
                         and ds.count(domain) < cfg.power_domain_budget
                         and page_of[c] == page), None)
            if fits is None:
                fits = next((c for c in range(last - last % cfg.config_update_interval,
                                              first - 1, -cfg.config_update_interval)
                             if c != t and c not in taken and slots.is_free(c, c + 1)),
                            None)
                if fits is None:
                    return None
            taken.setdefault(fits, []).append(domain)
            page_of[fits] = page
        return sorted(taken)

    def retry_after(self, spans: Spans, t: int) -> int:
        """After :meth:`reserve` found no slots at `t`: the next issue cycle at which
        it might, since the answer changes only where a window's end passes another
        multiple of ``config_update_interval``, a phase begins to cover the op, or
        the slot `t` itself (kept from its own updates) is no longer the issue cycle.
        Stepping one cycle at a time would cost a step per cycle of the interval."""
        every = self.cfg.config_update_interval
        points = [t + 1] if t % every == 0 else []
        for name, _, lo, _ in spans:
            last = t + lo - 1
            points.append((last // every + 1) * every - lo + 1)
            phase = self.phase.get(name)
            if phase is not None and phase[1] - lo > t:
                points.append(phase[1] - lo)
        return max(t + 1, min(points, default=t + 1))

    def place(self, spans: Spans, t: int) -> None:
        for name, value, lo, hi in spans:
            ends = self.ends[name]
            ends[value] = max(ends.get(value, t + hi), t + hi)
            phase = self.phase.get(name)
            if phase is None or phase[0] != value:
                self.phase[name] = (value, t + lo)
            else:
                self.phase[name] = (value, min(phase[1], t + lo))


def windows(cfg: ChipConfig, ops: list[MicroOp], cycles: list[int],
            who: Sequence[str] | None = None, used: dict[str, list[Use]] | None = None
            ) -> list[tuple[UpdateWindow, str, int, int]]:
    """The update windows: ``(window, mux, value, op index served)``. `who` names each
    op for messages (default: its disassembly); `used`: :func:`uses` of these cycles,
    if already known."""
    table = fabric.by_name(cfg)
    name_of = (lambda k: who[k]) if who is not None else (lambda k: str(ops[k]))
    out = []
    for name, lst in (used if used is not None else uses(cfg, ops, cycles)).items():
        domain, page = table[name].domain, fabric.setcfg_format(cfg).page(table[name].index)
        prev: Use | None = None
        for u in lst:
            if prev is not None and u.value == prev.value:
                if u.lo < prev.hi:
                    prev = Use(name, u.value, prev.lo, max(prev.hi, u.hi), prev.op)
                else:
                    prev = Use(name, u.value, prev.lo, u.hi, prev.op)
                continue
            label = f"{name}={table[name].sources[u.value]}@{u.lo}"
            if who is not None:
                label += f" for {who[u.op]}"
            if prev is None:
                w = UpdateWindow(label, 0, u.lo - 1, domain, page)
            else:
                w = window_between(label, (prev.lo, prev.hi), (u.lo, u.hi), domain, page)
                if w.lo > w.hi:
                    raise ConfigUpdateError(
                        f"multiplexer {name}: {name_of(prev.op)} needs "
                        f"{table[name].sources[prev.value]} until cycle {prev.hi - 1} but "
                        f"{name_of(u.op)} needs {table[name].sources[u.value]} from cycle "
                        f"{u.lo}; no cycle is left to reconfigure it — separate the two "
                        f"in time")
            out.append((w, name, u.value, u.op))
            prev = u
    return out


@dataclass(frozen=True)
class Update:
    """One multiplexer update placed in its window."""
    cycle: int         # issue cycle of its SETCFG
    mux: str
    value: int
    serves: int        # index of the first op that needs it
    window: UpdateWindow


def _place(cfg: ChipConfig, ops: list[MicroOp], cycles: list[int],
           who: Sequence[str] | None, used: dict[str, list[Use]] | None = None
           ) -> list[Update]:
    """The updates for a fixed schedule, in cycle order (`used`: its :func:`uses`, if
    known)."""
    found = windows(cfg, ops, cycles, who, used)
    at = assign_updates([w for w, *_ in found], per_cycle=cfg.max_config_updates_per_cycle,
                        interval=cfg.config_update_interval,
                        domain_budget=cfg.power_domain_budget, busy=cycles)
    return sorted((Update(at[w.name], name, value, served, w)
                   for w, name, value, served in found), key=lambda u: u.cycle)


def setcfgs(cfg: ChipConfig, updates: Sequence[Update]
            ) -> list[tuple[isa.Instr, list[Update]]]:
    """The updates grouped into one SETCFG per cycle, with the updates each carries."""
    table = fabric.by_name(cfg)
    per_cycle: dict[int, list[Update]] = defaultdict(list)
    for u in updates:
        per_cycle[u.cycle].append(u)
    fmt = fabric.setcfg_format(cfg)
    return [(isa.Instr(fmt.op, c, fmt.fields(
                [(table[u.mux].index, u.value) for u in group])), group)
            for c, group in sorted(per_cycle.items())]


def plan_updates(cfg: ChipConfig, ops: list[MicroOp], cycles: list[int],
                 who: Sequence[str] | None = None) -> tuple[list[int], list[Update]]:
    """Shift the schedule as little as needed for the configuration updates to fit;
    returns the shifted cycles and the updates. `who` names each op in messages. A
    schedule that the shift or an update takes past the instructions' cycle field is a
    ConfigUpdateError naming the interval (a large one allows few update cycles)."""
    shifted, updates = _plan_updates(cfg, ops, cycles, who)
    limit = 1 << isa.CYCLE_BITS
    late = max([*shifted, *(u.cycle for u in updates)], default=0)
    if late >= limit:
        raise ConfigUpdateError(
            f"the configuration updates put an instruction at cycle {late}, past the "
            f"{isa.CYCLE_BITS}-bit cycle field: SETCFG may issue only on multiples of "
            f"config_update_interval {cfg.config_update_interval}; make it smaller")
    return shifted, updates


def _plan_updates(cfg: ChipConfig, ops: list[MicroOp], cycles: list[int],
                  who: Sequence[str] | None = None) -> tuple[list[int], list[Update]]:
    step = cfg.config_update_interval
    used = uses(cfg, ops, cycles)        # a shift moves every use by as much

    def attempt(shift: int):
        shifted = [c + shift for c in cycles]
        moved = {name: [Use(u.mux, u.value, u.lo + shift, u.hi + shift, u.op) for u in lst]
                 for name, lst in used.items()}
        return shifted, _place(cfg, ops, shifted, who, moved)

    first = _least_shift(cfg, used, cycles)
    try:
        return attempt(first * step)
    except ConfigUpdateError:
        pass
    # With one free, allowed cycle per multiplexer before the first op, the initial
    # updates always fit; if updates still collide, they collide mid-program and no
    # shift helps (the error names them).
    generous = len(used) + 1 + first       # in steps
    # Gallop up from the bound, then bisect: the shift needed is usually near it.
    lo, gap, best = first, 1, None         # fails at lo (in steps)
    while best is None:
        hi = min(lo + gap, generous)
        try:
            best = attempt(hi * step)
        except ConfigUpdateError:
            if hi == generous:
                raise
            lo, gap = hi, gap * 2
    while hi - lo > 1:                     # fails at lo, fits at hi
        mid = (lo + hi) // 2
        try:
            best = attempt(mid * step)
            hi = mid
        except ConfigUpdateError:
            lo = mid
    return best


def _least_shift(cfg: ChipConfig, used: dict[str, list[Use]], cycles: list[int]) -> int:
    """A lower bound, in steps of the update interval, on the shift the updates need:
    the updates due by each cycle ``h`` need as many SETCFG cycles as their pages (one
    page a cycle, ``max_config_updates_per_cycle`` updates each) and power domains
    (their budgets) demand, and cycle ``h + shift`` has no more allowed cycles before
    it than multiples of the interval (at interval 1, less the issue slots of the ops
    issued by ``h``; at others, whether an op's slot is a multiple moves with the
    shift, so they are not counted)."""
    step, per_cycle = cfg.config_update_interval, cfg.max_config_updates_per_cycle
    budget = cfg.power_domain_budget
    table = fabric.by_name(cfg)
    fmt = fabric.setcfg_format(cfg)
    # each multiplexer's first update: issued by the cycle before its first use
    due = sorted((lst[0].lo - 1, fmt.page(table[name].index), table[name].domain)
                 for name, lst in used.items())
    taken = sorted(set(cycles))
    pages: dict[int, int] = defaultdict(int)
    domains: dict[str, int] = defaultdict(int)
    least = 0
    for k, (h, page, domain) in enumerate(due):
        pages[page] += 1
        domains[domain] += 1
        if k + 1 < len(due) and due[k + 1][0] == h:
            continue                       # count every update due by h first
        need = sum(-(-n // per_cycle) for n in pages.values())
        for d, n in domains.items():
            b = domain_limit(budget, d)
            if b:
                need = max(need, -(-n // b))
        if step == 1:                      # the ops issued by h take cycles too
            need += bisect_right(taken, h)
        # multiples of step in [0, h + shift] are (h + shift) // step + 1
        least = max(least, -(-((need - 1) * step - h) // step))
    return least


def add_updates(cfg: ChipConfig, ops: list[MicroOp], cycles: list[int]
                ) -> tuple[list[int], list[tuple[isa.Instr, int]]]:
    """:func:`plan_updates`, as SETCFG instructions (each with the index of the first
    op it configures)."""
    shifted, updates = plan_updates(cfg, ops, cycles)
    return shifted, [(ins, min(u.serves for u in group))
                     for ins, group in setcfgs(cfg, updates)]
