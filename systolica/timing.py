"""When each instruction's effects happen: the contract between RTL and scheduler.

For an instruction issued at cycle ``t``:

* its unit accepts the next instruction at ``t + occupancy(...)``; the sequencer raises
  ``UNIT_BUSY`` if an instruction reaches its unit earlier;
* all its memory reads and writes lie in ``[t, t + done(...))``; writes are visible to
  any read issued at ``t + done(...)`` or later;
* the chip's run ends (interrupt, cycle counter frozen) at the first cycle ``T`` at which
  every instruction has issued and ``T >= t + done(...)`` for all of them, so the cycle
  counter reads ``max(t + done)`` over the program (0 for an empty program).

All figures derive from the configuration (geometry and latency table) and are
derived in the RTL from the same functions.
"""

from __future__ import annotations

from .config import ChipConfig
from .isa import DmaKind, Instr, Opcode


def skew(cfg: ChipConfig, i: int) -> int:
    """Register stages from the array edge to cell ``i`` along a row or column: one per
    cell, plus one conveyor register per tile boundary crossed."""
    return i + i // cfg.tile_size


def skew_max(cfg: ChipConfig) -> int:
    return skew(cfg, cfg.rows - 1)


def weight_shifts(cfg: ChipConfig) -> int:
    """Shifts to fill one weight bank: one per cell row plus one per tile conveyor."""
    return skew(cfg, cfg.rows - 1) + 1


def matmul_pipeline(cfg: ChipConfig) -> int:
    """Cycles from a MATMUL's issue to the accumulator read of its first row:
    CBUF read (1), row skew, cell stages across the array, the psum conveyor out
    of the last tile row (1), column de-skew, and the edge registers (2)."""
    return cfg.latency["cbuf_read"] + 2 * skew_max(cfg) + 3


def dma_words(cfg: ChipConfig, kind: int, rows: int) -> int:
    per_row = cfg.acc_row_words if kind in (DmaKind.LOAD_ACC, DmaKind.STORE_ACC) else 1
    return per_row * rows


UNIT = {Opcode.DMA: "dma", Opcode.WLOAD: "wload", Opcode.MATMUL: "mm",
        Opcode.VRUN: "vpu", Opcode.SETCFG: "cfg"}


def occupancy(cfg: ChipConfig, ins: Instr) -> int:
    op = ins.op
    if op is Opcode.DMA:
        return dma_words(cfg, ins.kind, ins.rows) + cfg.latency["dram_read"]
    if op is Opcode.WLOAD:
        return weight_shifts(cfg)
    if op is Opcode.MATMUL:
        return ins.rows
    if op is Opcode.VRUN:
        return ins.rows + cfg.latency["acc_read"]
    if op is Opcode.SETCFG:
        return 1
    raise ValueError(f"no timing for {op!r}")


def done(cfg: ChipConfig, ins: Instr) -> int:
    op = ins.op
    if op is Opcode.DMA:
        return dma_words(cfg, ins.kind, ins.rows) + cfg.latency["dram_read"] + 1
    if op is Opcode.WLOAD:
        return weight_shifts(cfg) + cfg.latency["cbuf_read"] + 1
    if op is Opcode.MATMUL:
        return ins.rows + matmul_pipeline(cfg) + cfg.latency["acc_read"]
    if op is Opcode.VRUN:
        return ins.rows + 2 * cfg.latency["acc_read"] + 1 + cfg.latency["vpu"]
    if op is Opcode.SETCFG:
        return 1
    raise ValueError(f"no timing for {op!r}")


def run_cycles(cfg: ChipConfig, program: list[Instr]) -> int:
    """The cycle count the chip reports for a scheduled program."""
    return max((i.cycle + done(cfg, i) for i in program), default=0)
