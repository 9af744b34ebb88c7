"""The schedule verifier: every compiled program is checked before it is encoded.

From the instruction list alone it replays what the chip would do -- the sequencer's
issue and fault checks (late issue, a busy unit, address ranges, multiplexer table,
configuration-update limits, a multiplexer changed while in use) and every buffer
hazard at the cycles the instructions' effects happen -- using the golden model's
timing pass (:func:`systolica.golden.check`). It shares nothing with the scheduler:
neither its closed-form timing nor its decisions, so a scheduler bug shows up here as
the instruction and the rule it breaks.
"""

from __future__ import annotations

from .. import golden
from ..arch import isa
from ..arch.config import ChipConfig
from ..arch.regs import ErrorCode
from .graph import CompileError


class ScheduleError(CompileError):
    """A scheduled program the chip would not run as meant."""


def verify(cfg: ChipConfig, program: list[isa.Instr], what: str = "program",
           prog_addr: int | None = None) -> int:
    """Check a scheduled program (sorted by issue cycle), with its image at DRAM word
    ``prog_addr`` if given; return the cycle count the chip will report, or raise
    :class:`ScheduleError` naming the instruction at fault and the rule it breaks."""
    timeline = golden.check(cfg, program, prog_addr)
    if timeline.fault is not None:
        code, pc, cycle = timeline.fault
        if code is ErrorCode.BANK_CONFLICT:     # between two issued instructions
            raise ScheduleError(f"{what}: the chip would stop with {code.name} in cycle "
                                f"{cycle}: {timeline.fault_reason}")
        raise ScheduleError(
            f"{what}: pc {pc} ({_show(program, pc)}) would stop the chip with "
            f"{code.name} in cycle {cycle}: {timeline.fault_reason}")
    if timeline.hazards:
        h = timeline.hazards[0]
        more = (f" ({len(timeline.hazards) - 1} more hazard(s) follow)"
                if len(timeline.hazards) > 1 else "")
        raise ScheduleError(f"{what}: pc {h.pc} ({_show(program, h.pc)}) breaks "
                            f"'{h.rule}': {h.message}{more}")
    return timeline.cycles


def _show(program: list[isa.Instr], pc: int) -> str:
    return isa.disassemble_one(program[pc]).strip() if pc < len(program) else "end"
