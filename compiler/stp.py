"""The ``.stp`` flow: parse, schedule datapath statements (exact timing) and chip
statements (buffer hazards), and put the chip part into a program image."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..arch import isa, timing
from ..arch.config import ChipConfig
from . import trace
from .cycles import CycleError, Schedule, producers, schedule_program, topological_order
from .graph import CompileError
from .ir import required_gap
from .schedule import schedule
from .text import Program, Statement, parse_file, to_micro_ops


@dataclass(frozen=True)
class ChipSchedule:
    program: list[isa.Instr]            # sorted by issue cycle
    statements: list[Statement]         # the statement of each instruction

    @property
    def image(self) -> bytes:
        return isa.to_bytes([isa.encode(i) for i in self.program])


@dataclass(frozen=True)
class Result:
    source: Program
    datapath: Schedule | None
    chip: ChipSchedule | None

    def rows(self, cfg: ChipConfig) -> list[trace.Row]:
        rows = []
        if self.datapath is not None:
            rows += trace.schedule_rows(self.datapath)
        if self.chip is not None:
            rows += trace.chip_rows(cfg, self.chip.program,
                                    [s.text for s in self.chip.statements])
        return rows

    def events(self, cfg: ChipConfig) -> list[dict]:
        out = []
        if self.datapath is not None:
            out += trace.schedule_events(self.datapath, process="datapath", pid=0)
        if self.chip is not None:
            out += trace.chip_events(cfg, self.chip.program,
                                     [s.text for s in self.chip.statements],
                                     process=f"chip ({cfg.name})", pid=1)
        return out


def schedule_chip(cfg: ChipConfig, prog: Program) -> ChipSchedule:
    """Chip statements in dependency order through compiler.schedule; a named
    dependency the buffer hazards do not enforce is an error."""
    statements = prog.chip
    dp_values = {o for s in prog.datapath for o in s.outputs}
    for st in statements:
        for a in st.operands:
            if a in dp_values:
                raise CycleError(f"{prog.filename}:{st.line}: {st.where()} reads datapath "
                                 f"value '{a}'; chip instructions read buffers, not wires")
    preds = producers(statements, prog.inputs, prog.filename)
    order = topological_order(statements, preds)
    ops = to_micro_ops(cfg, [statements[i] for i in order], prog.filename)
    cycles = schedule(cfg, ops)
    at = {i: (cycles[k], ops[k]) for k, i in enumerate(order)}
    for i, ps in enumerate(preds):
        for p in ps:
            tp, op = at[p]
            gap = required_gap(cfg, op, at[i][1])
            ready = tp + (timing.done(cfg, op.instr(0)) if gap is None else gap)
            if at[i][0] < ready:
                st, sp = statements[i], statements[p]
                raise CompileError(
                    f"{prog.filename}:{st.line}: {st.where()} reads {sp.name} from "
                    f"{sp.where()}, but they share no buffer rows, so nothing orders "
                    f"them (issue {at[i][0]} before {sp.name} is done at {ready}); make "
                    f"the consumer read the rows the producer writes")
    pos = sorted(range(len(ops)), key=lambda k: cycles[k])
    return ChipSchedule([ops[k].instr(cycles[k]) for k in pos],
                        [statements[order[k]] for k in pos])


def compile_program(cfg: ChipConfig, prog: Program, *, insert_delays: bool = False) -> Result:
    dp = schedule_program(cfg, prog, insert_delays=insert_delays) if prog.datapath else None
    chip = schedule_chip(cfg, prog) if prog.chip else None
    return Result(prog, dp, chip)


def compile_file(cfg: ChipConfig, path: str | Path, *, insert_delays: bool = False) -> Result:
    return compile_program(cfg, parse_file(path), insert_delays=insert_delays)
