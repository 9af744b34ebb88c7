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
later by whole update intervals until they do.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..arch import fabric, isa, timing
from ..arch.config import ChipConfig
from ..arch.isa import Opcode
from .busy import BusyIntervals
from .config_updates import ConfigUpdateError, UpdateWindow, assign_updates, window_between
from .graph import CompileError
from .ir import MicroOp

FABRIC_OPS = (Opcode.WLOAD, Opcode.MATMUL, Opcode.VRUN)


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
    """Per multiplexer, the uses in time order, with the setting each needs."""
    out: dict[str, list[Use]] = defaultdict(list)
    for k, (op, t) in enumerate(zip(ops, cycles)):
        for name, value, lo, hi in settings(cfg, op):
            out[name].append(Use(name, value, t + lo, t + hi, k))
    for lst in out.values():
        lst.sort(key=lambda u: u.lo)
    return out


class Routing:
    """The scheduler's view of multiplexer settings: an op that needs a setting other
    than the one earlier-placed ops use must pass the multiplexer after they all have,
    leaving an update window that holds at least one cycle where an update may issue
    (a multiple of ``cfg.config_update_interval``). Ops that all use the defaults never
    wait, so programs without routing needs schedule as if this did not exist."""

    def __init__(self, cfg: ChipConfig, ops: list[MicroOp]):
        self.cfg = cfg
        self.slack = cfg.config_update_interval - 1
        table = fabric.by_name(cfg)
        self.active = any(name not in table or src not in table[name].sources
                          or table[name].value_of(src) != table[name].default
                          for op in ops for name, src in op.needs.items())
        self.ends: dict[str, dict[int, int]] = defaultdict(dict)   # mux -> value -> end

    def settings(self, op: MicroOp) -> list[tuple[str, int, int, int]]:
        return settings(self.cfg, op) if self.active else []

    def earliest(self, spans: list[tuple[str, int, int, int]]) -> int:
        """The first issue cycle at which an op with these settings leaves room to
        update every multiplexer it needs changed."""
        t = 0
        for name, value, lo, _ in spans:
            for other, end in self.ends[name].items():
                if other != value:
                    t = max(t, end + self.slack - lo)
        return t

    def place(self, spans: list[tuple[str, int, int, int]], t: int) -> None:
        for name, value, _, hi in spans:
            ends = self.ends[name]
            ends[value] = max(ends.get(value, t + hi), t + hi)


def windows(cfg: ChipConfig, ops: list[MicroOp], cycles: list[int]
            ) -> list[tuple[UpdateWindow, str, int, int]]:
    """The update windows: ``(window, mux, value, op index served)``."""
    table = fabric.by_name(cfg)
    out = []
    for name, lst in uses(cfg, ops, cycles).items():
        domain = table[name].domain
        prev: Use | None = None
        for u in lst:
            if prev is not None and u.value == prev.value:
                if u.lo < prev.hi:
                    prev = Use(name, u.value, prev.lo, max(prev.hi, u.hi), prev.op)
                else:
                    prev = Use(name, u.value, prev.lo, u.hi, prev.op)
                continue
            label = f"{name}={table[name].sources[u.value]}@{u.lo}"
            if prev is None:
                w = UpdateWindow(label, 0, u.lo - 1, domain)
            else:
                w = window_between(label, (prev.lo, prev.hi), (u.lo, u.hi), domain)
                if w.lo > w.hi:
                    raise ConfigUpdateError(
                        f"multiplexer {name}: {ops[prev.op]} needs "
                        f"{table[name].sources[prev.value]} until cycle {prev.hi - 1} but "
                        f"{ops[u.op]} needs {table[name].sources[u.value]} from cycle "
                        f"{u.lo}; no cycle is left to reconfigure it — separate the two "
                        f"in time")
            out.append((w, name, u.value, u.op))
            prev = u
    return out


def _place(cfg: ChipConfig, ops: list[MicroOp], cycles: list[int]
           ) -> list[tuple[isa.Instr, int]]:
    """SETCFG instructions (with the op each serves first) for a fixed schedule."""
    found = windows(cfg, ops, cycles)
    slots = BusyIntervals()
    for c in cycles:
        slots.add(c, c + 1)
    at = assign_updates([w for w, *_ in found], per_cycle=cfg.max_config_updates_per_cycle,
                        interval=cfg.config_update_interval,
                        domain_budget=cfg.power_domain_budget,
                        allowed=lambda c: c >= 0 and slots.is_free(c, c + 1))
    per_cycle: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    table = fabric.by_name(cfg)
    for w, name, value, served in found:
        per_cycle[at[w.name]].append((table[name].index, value, served))
    return [(isa.Instr(Opcode.SETCFG, c, isa.setcfg_fields([(i, v) for i, v, _ in group])),
             min(s for *_, s in group))
            for c, group in sorted(per_cycle.items())]


def add_updates(cfg: ChipConfig, ops: list[MicroOp], cycles: list[int]
                ) -> tuple[list[int], list[tuple[isa.Instr, int]]]:
    """Shift the schedule as little as needed for the configuration updates to fit;
    returns the shifted cycles and the SETCFG instructions (each with the index of the
    first op it configures)."""
    step = cfg.config_update_interval

    def attempt(shift: int):
        shifted = [c + shift for c in cycles]
        return shifted, _place(cfg, ops, shifted)

    try:
        return attempt(0)
    except ConfigUpdateError:
        pass
    # With one free, allowed cycle per multiplexer before the first op, the initial
    # updates always fit; if updates still collide, they collide mid-program and no
    # shift helps (the error names them).
    generous = step * (len(uses(cfg, ops, cycles)) + 1)
    best = attempt(generous)
    lo, hi = 0, generous // step          # fails at lo, fits at hi (in steps)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            best = attempt(mid * step)
            hi = mid
        except ConfigUpdateError:
            lo = mid
    return best
