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


def uses(cfg: ChipConfig, ops: list[MicroOp], cycles: list[int]) -> dict[str, list[Use]]:
    """Per multiplexer, the uses in time order, with the setting each needs."""
    table = fabric.by_name(cfg)
    out: dict[str, list[Use]] = defaultdict(list)
    for k, (op, t) in enumerate(zip(ops, cycles)):
        if op.op not in FABRIC_OPS:
            continue
        for name in op.needs:
            if name not in table:
                raise CompileError(f"{op}: no multiplexer {name!r}")
        ins = op.instr(t)
        for mux in table.values():
            span = timing.mux_use(cfg, ins, mux.name)
            if span is None:
                continue
            value = mux.value_of(op.needs[mux.name]) if mux.name in op.needs else mux.default
            out[mux.name].append(Use(mux.name, value, t + span[0], t + span[1], k))
    for lst in out.values():
        lst.sort(key=lambda u: u.lo)
    return out


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
    busy = set(cycles)
    at = assign_updates([w for w, *_ in found], per_cycle=cfg.max_config_updates_per_cycle,
                        interval=cfg.config_update_interval,
                        domain_budget=cfg.power_domain_budget,
                        allowed=lambda c: c >= 0 and c not in busy)
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
