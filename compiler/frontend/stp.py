"""The ``.stp`` flow: parse, schedule datapath statements (exact timing) and chip
statements (buffer hazards, then their multiplexer settings through the same
update-window solver as compiled networks), and put the chip part into a program
image."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from systolica.arch import fabric, isa, timing
from systolica.arch.config import ChipConfig, require_config
from systolica.compiler.backend import trace
from systolica.compiler.errors import CompileError
from systolica.compiler.frontend.text import (
    ParseError,
    Program,
    Statement,
    cfg_settings,
    format_statement,
    parse_file,
    to_micro_ops,
)
from systolica.compiler.microops.ir import MicroOp, required_gap
from systolica.compiler.scheduling.config_updates import ConfigUpdateError
from systolica.compiler.scheduling.datapath import (
    CycleError,
    Schedule,
    check_latency,
    producers,
    schedule_program,
    topological_order,
)
from systolica.compiler.scheduling.reconfigure import Update, plan_updates, setcfgs
from systolica.compiler.scheduling.schedule import schedule
from systolica.compiler.scheduling.verify import verify


@dataclass(frozen=True)
class ChipSchedule:
    program: list[isa.Instr]            # sorted by issue cycle
    statements: list[Statement]         # the statement of each instruction (for a
                                        # placed SETCFG, a `cfg set` made for it)

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


def _routing(cfg: ChipConfig, prog: Program, statements: list[Statement]
             ) -> tuple[dict[str, dict[str, str]], dict[str, Statement]]:
    """The settings each ``cfg set`` value names (``{value: {mux: source}}``) and the
    statement defining each value. A setting nobody reads, or one that reads values,
    is an error: its place in time comes only from the statements that read it."""
    values: dict[str, dict[str, str]] = {}
    setter: dict[str, Statement] = {}
    for st in statements:
        if st.component != "cfg":
            continue
        settings = cfg_settings(cfg, st, prog.filename)
        if st.op != "set":
            raise ParseError(prog.filename, st.line, st.col,
                             f"{st.where()}: unit cfg has no operation '{st.op}'; it has set")
        if st.operands:
            raise ParseError(prog.filename, st.line, st.col,
                             f"{st.where()}: a cfg set reads no values; the statements "
                             f"that read its value say where the setting is needed, and "
                             f"the compiler chooses when to write it")
        if len(st.outputs) != 1:
            raise ParseError(prog.filename, st.line, st.col,
                             f"{st.where()}: a cfg set defines exactly one value (the "
                             f"setting), which the statements needing it read; write "
                             f"route = cfg set(...)")
        values[st.outputs[0]] = settings
        setter[st.outputs[0]] = st
    readers = {v: [st for st in statements if v in st.operands] for v in values}
    for v, rs in readers.items():
        if not rs:
            st = setter[v]
            raise ParseError(prog.filename, st.line, st.col,
                             f"{st.where()}: no chip statement reads '{v}', so nothing "
                             f"needs this setting and it would never take effect; name "
                             f"'{v}' among the arguments of the statements whose data "
                             f"must pass the multiplexer set so")
    for out in prog.outputs:
        if out in values:
            raise ParseError(prog.filename, setter[out].line, setter[out].col,
                             f"proc output '{out}' is a multiplexer setting, not data")
    return values, setter


def _needs(cfg: ChipConfig, prog: Program, st: Statement, op: MicroOp,
           values: dict[str, dict[str, str]], setter: dict[str, Statement]) -> dict:
    """The multiplexer settings a chip statement reads, checked against the
    multiplexers its data passes."""
    needs: dict[str, tuple[str, str]] = {}       # mux -> (source, value that asks)
    probe = op.instr(0)
    for v in st.operands:
        for mux, src in values.get(v, {}).items():
            where = f"{st.where()} reads '{v}' ({setter[v].where()})"
            if timing.mux_use(cfg, probe, mux) is None:
                raise ParseError(prog.filename, st.line, st.col,
                                 f"{where}, which sets {mux}, but this {op.op.name}'s "
                                 f"data does not pass {mux}; only a statement whose data "
                                 f"passes a multiplexer can need its setting")
            if mux in needs and needs[mux][0] != src:
                raise ParseError(prog.filename, st.line, st.col,
                                 f"{where}, which sets {mux} to {src}, and "
                                 f"'{needs[mux][1]}' ({setter[needs[mux][1]].where()}), "
                                 f"which sets it to {needs[mux][0]}; one instruction "
                                 f"sees one setting")
            needs[mux] = (src, v)
    return {mux: src for mux, (src, _) in needs.items()}


def schedule_chip(cfg: ChipConfig, prog: Program) -> ChipSchedule:
    """Chip statements in dependency order through compiler.schedule, then their
    multiplexer settings through the update-window solver (compiler.reconfigure), and
    the result through the schedule verifier, as for compiled networks. A named
    dependency the buffer hazards do not enforce is an error."""
    dp_values = {o for s in prog.datapath for o in s.outputs}
    for st in prog.chip:
        for a in st.operands:
            if a in dp_values:
                raise CycleError(f"{prog.filename}:{st.line}: {st.where()} reads datapath "
                                 f"value '{a}'; chip instructions read buffers, not wires")
    values, setter = _routing(cfg, prog, prog.chip)
    statements = [st for st in prog.chip if st.component != "cfg"]
    preds = producers(statements, (*prog.inputs, *values), prog.filename)
    order = topological_order(statements, preds, prog.filename)
    ops = to_micro_ops(cfg, [statements[i] for i in order], prog.filename)
    for op, i in zip(ops, order):
        op.needs = _needs(cfg, prog, statements[i], op, values, setter)
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
    mine = [statements[i] for i in order]
    try:
        cycles, updates = plan_updates(cfg, ops, cycles, [s.where() for s in mine])
    except ConfigUpdateError as e:
        raise ConfigUpdateError(f"{prog.filename}: {e}") from None
    placed = [(c, ops[k].instr(c), mine[k]) for k, c in enumerate(cycles)]
    for ins, group in setcfgs(cfg, updates):
        placed.append((ins.cycle, ins, _update_statement(cfg, group, mine, values)))
    placed.sort(key=lambda x: x[0])
    program = [ins for _, ins, _ in placed]
    verify(cfg, program, prog.filename)
    return ChipSchedule(program, [st for *_, st in placed])


def _update_statement(cfg: ChipConfig, group: list[Update], mine: list[Statement],
                      values: dict[str, dict[str, str]]) -> Statement:
    """A placed SETCFG as a ``cfg set`` statement, commented with the statements it
    serves and the settings they asked for (``default`` where they asked for none)."""
    table = fabric.by_name(cfg)
    kwargs: dict = {}
    asked: dict[int, list[str]] = {}           # served op -> cfg values it read
    for k, u in enumerate(group):
        suffix = str(k) if k else ""
        src = table[u.mux].sources[u.value]
        kwargs[f"mux{suffix}"], kwargs[f"source{suffix}"] = u.mux, src
        names = asked.setdefault(u.serves, [])
        names += [v for v in mine[u.serves].operands
                  if values.get(v, {}).get(u.mux) == src and v not in names]
    note = ", ".join(mine[k].name + (f" ({', '.join(vs)})" if vs else "")
                     for k, vs in asked.items())
    st = Statement((), "set", "cfg", (), kwargs, mine[min(asked)].line, 0)
    return dataclasses.replace(st, text=f"{format_statement(st)}  # for {note}")


def compile_program(cfg: ChipConfig, prog: Program, *, insert_delays: bool = False) -> Result:
    """Schedule a parsed program: its datapath statements (exact timing) and its chip
    statements (buffer hazards, then configuration updates)."""
    require_config(cfg, "compile_program(cfg, prog)", CompileError)
    if not isinstance(prog, Program):
        raise CompileError(f"compile_program(cfg, prog): prog must be a Program (from "
                           f"text.parse or text.parse_file), not {type(prog).__name__}")
    if not prog.statements:
        raise CompileError(f"{prog.filename} has no statements, so there is nothing to "
                           f"schedule; write one statement per line (docs/scheduling.md)")
    check_latency(cfg, prog)
    dp = schedule_program(cfg, prog, insert_delays=insert_delays) if prog.datapath else None
    chip = schedule_chip(cfg, prog) if prog.chip else None
    return Result(prog, dp, chip)


def compile_file(cfg: ChipConfig, path: str | Path, *, insert_delays: bool = False) -> Result:
    """Parse the program file at `path` and schedule it (:func:`compile_program`)."""
    require_config(cfg, "compile_file(cfg, path)", CompileError)
    return compile_program(cfg, parse_file(path), insert_delays=insert_delays)
