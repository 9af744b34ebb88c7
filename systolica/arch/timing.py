"""When each instruction's effects happen, in the closed forms the compiler schedules
with: the contract between the RTL and the scheduler.

For an instruction issued at cycle ``t``:

* its unit accepts the next instruction at ``t + occupancy(...)``; the sequencer raises
  ``UNIT_BUSY`` if an instruction reaches its unit earlier;
* all its memory reads and writes lie in ``[t, t + done(...))``; writes are visible to
  any read issued at ``t + done(...)`` or later;
* the chip's run ends (interrupt, cycle counter frozen) at the first cycle ``T`` at which
  every instruction has issued and ``T >= t + done(...)`` for all of them, so the cycle
  counter reads ``max(t + done)`` over the program (0 for an empty program).

Each figure comes from the instruction's entry in :mod:`.instructions`; this module is
the compiler's way in. The golden model does not use it: it executes the entries'
cycle-level effects, so a wrong closed form here shows up there as a broken schedule.
"""

from __future__ import annotations

from functools import cache

from systolica.arch.config import ChipConfig
from systolica.arch.geometry import (  # noqa: F401
    array_span,
    feed_stages,
    matmul_pipeline,
    skew,
    skew_max,
    weight_shifts,
)
from systolica.arch.instructions import ACCUMULATE, SPEC, Dma, bank_shift, ranges
from systolica.arch.isa import Instr, Opcode

#: The unit that executes each opcode.
UNIT = {op: s.unit for op, s in SPEC.items()}


def dma_words(cfg: ChipConfig, kind: int, rows: int) -> int:
    """External-memory words a DMA of ``rows`` rows moves."""
    return Dma().words(cfg, {"kind": kind, "rows": rows})


def occupancy(cfg: ChipConfig, ins: Instr) -> int:
    return SPEC[ins.op].occupancy(cfg, ins.fields)


def done(cfg: ChipConfig, ins: Instr) -> int:
    return SPEC[ins.op].done(cfg, ins.fields)


def exit_lead(cfg: ChipConfig, ins: Instr) -> int:
    """Cycles by which a MATMUL's effects from the accumulate stage on come sooner
    than with ``early = 0``: its sums leave the array ``early`` tile rows up, past
    ``n + 1`` registers fewer per tile row (0 for any other opcode). Two MATMULs reach
    the accumulate stage in issue order: ``B`` issues at or after ``t_A + rows_A +
    max(0, exit_lead(B) - exit_lead(A))`` (docs/contract.md, "Partial-sum exits")."""
    if ins.op is not Opcode.MATMUL:
        return 0
    return ins.fields.get("early", 0) * (cfg.tile_size + 1)


def moving_field(op: Opcode) -> str | None:
    """The field that only moves `op` within one memory (``moves`` in its entry: a
    DMA's ``dram_addr``): nothing in this module depends on it. None: no such field."""
    moves = SPEC[op].moves
    return None if moves is None else moves[0]


def bank_claims(cfg: ChipConfig, ins: Instr) -> list[tuple[tuple[str, str, int], int, int]]:
    """``((memory, mode, bank), lo, hi)``: each bank port it may use, and the cycles
    ``[lo, hi)`` after issue that bound its use (:func:`port_windows` over the banks
    its ranges of that memory and mode meet; an accumulate range uses both ports)."""
    out = []
    windows = port_windows(cfg, ins)
    touched = ranges(cfg, ins.op, ins.fields) if windows else []
    for memory, mode, lo, hi in windows:
        shift = bank_shift(cfg, memory)
        banks = set()
        for r in touched:
            if r.memory == memory and r.touched and r.mode in (mode, ACCUMULATE):
                banks.update(range(r.lo >> shift, ((r.hi - 1) >> shift) + 1))
        out += [((memory, mode, b), lo, hi) for b in sorted(banks)]
    return out


def port_windows(cfg: ChipConfig, ins: Instr) -> list[tuple[str, str, int, int]]:
    """``(memory, mode, lo, hi)``: the CBUF and ACC bank ports it uses, the read
    (READ) or write (WRITE) port of each bank its ranges of that memory and mode meet,
    within cycles ``[lo, hi)`` after issue (docs/contract.md, "CBUF banks")."""
    return SPEC[ins.op].port_windows(cfg, ins.fields)


def bank_window(cfg: ChipConfig, ins: Instr) -> tuple[int, int]:
    """Cycles ``[lo, hi)`` after issue in which a WLOAD shifts its weight bank, or a
    MATMUL's rows meet its bank in the cells (the last row passes the far corner cell
    ``array_span`` cycles after it enters). A WLOAD may start shifting a bank once
    every MATMUL using it is past the cells, long before their sums are written."""
    window = SPEC[ins.op].bank_window(cfg, ins.fields)
    if window is None:
        raise ValueError(f"{ins.op!r} does not use a weight bank")
    return window


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
    kind, idx = _kind_and_index(mux_name)
    return SPEC[ins.op].mux_use(cfg, ins.fields, kind, idx)


@cache
def _kind_and_index(mux_name: str) -> tuple[str, tuple[int, ...]]:
    """``"act_in[1][0]"`` -> ``("act_in", (1, 0))``: parsed once per name (the
    scheduler asks every multiplexer of the chip about every distinct op)."""
    kind, _, rest = mux_name.partition("[")
    return kind, tuple(int(x) for x in rest.replace("]", " ").replace("[", " ").split())


__all__ = ["UNIT", "array_span", "bank_window", "dma_words", "done", "exit_lead", "feed_stages",
           "matmul_pipeline",
           "moving_field", "mux_use", "occupancy", "run_cycles", "skew", "skew_max",
           "weight_shifts"]
