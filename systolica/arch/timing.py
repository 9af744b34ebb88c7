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


def bank_window(cfg: ChipConfig, ins: Instr) -> tuple[int, int]:
    """Cycles ``[lo, hi)`` after issue in which a WLOAD shifts its weight bank, or a
    MATMUL's rows meet its bank in the cells (the last row passes the far corner cell
    ``2 * skew_max`` cycles after it enters). A WLOAD may start shifting a bank once
    every MATMUL using it is past the cells, long before their sums are written."""
    first = cfg.latency["cbuf_read"] + 1
    if ins.op is Opcode.WLOAD:
        return first, first + weight_shifts(cfg)
    if ins.op is Opcode.MATMUL:
        return first, first + ins.rows + 2 * skew_max(cfg)
    raise ValueError(f"{ins.op!r} does not use a weight bank")


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


def mux_use(cfg: ChipConfig, ins: Instr, mux_name: str) -> tuple[int, int] | None:
    """Cycles ``[lo, hi)`` after issue in which ``ins``'s data passes multiplexer
    ``mux_name`` (a :mod:`systolica.arch.fabric` name), or None if it does not use it.

    A configuration register written by a SETCFG issued at cycle ``u`` holds its new
    value from ``u + 1``, so the instruction sees one setting iff no SETCFG changing
    that multiplexer issues in ``[t + lo, t + hi - 1)``; the last update it needs may
    issue at ``t + lo - 1``.
    """
    kind, _, rest = mux_name.partition("[")
    idx = [int(x) for x in rest.replace("]", " ").replace("[", " ").split()]
    n = cfg.tile_size
    op = ins.op
    if op is Opcode.MATMUL:
        m = ins.rows
        feed = cfg.latency["cbuf_read"] + 1       # cycle the first row leaves the CBUF
        if kind == "west_feed":
            return feed, feed + m
        if kind == "act_in":
            i, j = idx
            lo = feed + skew(cfg, i * n) + skew(cfg, j * n)
            return lo, feed + m + skew(cfg, i * n + n - 1) + skew(cfg, j * n)
        if kind == "psum_in":
            i, j = idx
            if i == 0:
                return None                       # the north edge carries zeros
            lo = feed + skew(cfg, i * n) + skew(cfg, j * n)
            return lo, feed + m + skew(cfg, i * n) + skew(cfg, j * n + n - 1)
        if kind == "acc_src":
            return matmul_pipeline(cfg), matmul_pipeline(cfg) + m
        return None
    if op is Opcode.WLOAD:
        if kind in ("north_feed", "w_in"):
            first = cfg.latency["cbuf_read"] + 1
            return first, first + weight_shifts(cfg)
        return None
    if op is Opcode.VRUN:
        if kind == "wb_src" and not ins.to_acc:
            first = 2 * cfg.latency["acc_read"] + 1 + cfg.latency["vpu"]
            return first, first + ins.rows
        return None
    return None
