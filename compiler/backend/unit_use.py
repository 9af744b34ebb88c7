"""Where a program's cycles go: each unit's busy cycles in a window of the run and
over time.

A unit is busy from an instruction's issue for its occupancy
(:func:`systolica.arch.timing.occupancy`: until the unit takes the next one), whatever
layer the instruction serves. In a layer's share of the run (from the end of the layers
before it to its own end: the report's cycles) the unit busiest, and how busy, says
what set the pace there: near 1, that unit; well below 1 for every unit, latencies
(waiting on results) rather than throughput.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from systolica.arch import isa, timing
from systolica.arch.config import ChipConfig
from systolica.arch.instructions import UNITS

#: units that take a configuration (SETCFG, CONVCFG, TAPS), busy a cycle or none:
#: left out
QUIET = {"cfg", "convcfg", "taps"}


@dataclass(frozen=True)
class Busy:
    """One instruction's occupancy: ``[start, end)`` on ``unit`` for ``layer``."""
    unit: str
    start: int
    end: int
    layer: int


def intervals(cfg: ChipConfig, program: Sequence[isa.Instr],
              layer_of: Sequence[int]) -> list[Busy]:
    """Every instruction's busy interval but configuration updates."""
    out = []
    for ins, layer in zip(program, layer_of):
        unit = timing.UNIT[ins.op]
        if unit in QUIET:
            continue
        out.append(Busy(unit, ins.cycle, ins.cycle + timing.occupancy(cfg, ins), layer))
    return out


def units(busy: Sequence[Busy]) -> list[str]:
    """The units that appear, in the instruction set's order."""
    seen = {b.unit for b in busy}
    return [u for u in UNITS if u in seen]


def in_window(busy: Sequence[Busy], lo: int, hi: int) -> dict[str, int]:
    """Unit -> its busy cycles within ``[lo, hi)`` (at most ``hi - lo``: a unit runs
    one instruction at a time)."""
    out: dict[str, int] = {}
    for b in busy:
        n = min(b.end, hi) - max(b.start, lo)
        if n > 0:
            out[b.unit] = out.get(b.unit, 0) + n
    return out


def busiest(per_unit: dict[str, int], cycles: int) -> tuple[str, float]:
    """The unit busy the longest and its share of ``cycles`` ('', 0.0 if none)."""
    if not per_unit or cycles <= 0:
        return "", 0.0
    unit = max(per_unit, key=lambda u: (per_unit[u], u))
    return unit, per_unit[unit] / cycles


def binned(busy: Sequence[Busy], unit: str, width: int, bins: int
           ) -> list[dict[int, int]]:
    """Busy cycles of `unit` per bin of ``width`` cycles, split by layer."""
    out: list[dict[int, int]] = [{} for _ in range(bins)]
    for b in busy:
        if b.unit != unit:
            continue
        c = b.start
        while c < b.end:
            k = c // width
            upto = min(b.end, (k + 1) * width)
            if k < bins:
                out[k][b.layer] = out[k].get(b.layer, 0) + upto - c
            c = upto
    return out
