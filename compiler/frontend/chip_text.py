"""Chip micro-ops printed as program text (``.stp`` chip statements) and read back, so
that a generated or lowered op list can be read, edited and scheduled from text
(:func:`systolica.compiler.frontend.stp.schedule_chip`) into the same program.

An op's multiplexer settings (``MicroOp.needs``) become a ``cfg set`` value that its
statement reads (one value per distinct set of settings); SETCFG instructions are not
statements: the compiler places them from the needs.
"""

from __future__ import annotations

from systolica.arch import instructions, isa
from systolica.arch.config import ChipConfig
from systolica.compiler.errors import CompileError
from systolica.compiler.frontend.text import (
    Statement,
    cfg_settings,
    format_statement,
    parse,
    to_micro_op,
)
from systolica.compiler.microops.ir import MicroOp


def statements(ops: list[MicroOp]) -> list[Statement]:
    """`ops` as chip statements, in order, each ``cfg set`` just before its first
    reader; every field is given by keyword."""
    routes: dict[tuple, str] = {}
    out: list[Statement] = []
    for mop in ops:
        if mop.op in isa.SETCFGS:
            raise CompileError(f"{mop}: a SETCFG is no statement of its own; print the ops "
                               f"before configuration updates are placed, with their needs")
        entry = instructions.spec(mop.op)
        op, fixed = next((name, fixed) for name, fixed in entry.text.items()
                         if all(mop.fields[k] == v for k, v in fixed.items()))
        args: tuple[str, ...] = ()
        if mop.needs:
            key = tuple(sorted(mop.needs.items()))
            if key not in routes:
                routes[key] = f"route{len(routes)}"
                pairs = {}
                for k, (mux, source) in enumerate(key):
                    suffix = str(k) if k else ""
                    pairs[f"mux{suffix}"], pairs[f"source{suffix}"] = mux, source
                out.append(Statement((routes[key],), "set", "cfg", (), pairs))
            args = (routes[key],)
        fields = {k: v for k, v in mop.fields.items() if k not in fixed}
        out.append(Statement((), op, entry.unit, args, fields))
    return out


def format_ops(ops: list[MicroOp]) -> str:
    """Program text with the chip statements of `ops`, one per line."""
    return "".join(format_statement(st) + "\n" for st in statements(ops))


def parse_ops(cfg: ChipConfig, source: str, filename: str = "<text>") -> list[MicroOp]:
    """The micro-ops of program text's chip statements in text order, each with the
    settings of the ``cfg set`` values it reads as its needs (unscheduled; the
    checks of :func:`systolica.compiler.frontend.stp.schedule_chip` apply when it is scheduled)."""
    prog = parse(source, filename)
    routes = {st.outputs[0]: cfg_settings(cfg, st, filename)
              for st in prog.chip if st.component == "cfg" and st.outputs}
    ops = []
    for st in prog.chip:
        if st.component == "cfg":
            continue
        mop = to_micro_op(cfg, st, filename)
        for value in st.operands:
            mop.needs.update(routes.get(value, {}))
        ops.append(mop)
    return ops
