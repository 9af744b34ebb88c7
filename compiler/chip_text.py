"""Chip micro-ops printed as program text (``.stp`` chip statements), so that a
generated or compiled op list can be read, edited and parsed back by
:mod:`systolica.compiler.text` into the same micro-ops."""

from __future__ import annotations

from ..arch import fabric, isa
from ..arch.config import ChipConfig
from ..arch.isa import Opcode
from .ir import MicroOp
from .text import CHIP_OPS, Statement, format_statement


def _unit_op(mop: MicroOp) -> tuple[str, str, dict]:
    """The statement's unit and operation, and the fields its name fixes."""
    for (unit, op), (opcode, fixed) in CHIP_OPS.items():
        if opcode is mop.op and all(mop.fields.get(k) == v for k, v in fixed.items()):
            return unit, op, fixed
    raise ValueError(f"{mop}: no chip statement for {mop.op.name}")


def statement(cfg: ChipConfig, mop: MicroOp) -> Statement:
    """`mop` as a chip statement: every field by keyword, a SETCFG's pairs as
    multiplexer and source names."""
    unit, op, fixed = _unit_op(mop)
    if mop.op is Opcode.SETCFG:
        table = fabric.muxes(cfg)
        kwargs = {}
        for k, (index, value) in enumerate(isa.setcfg_pairs(mop.fields)):
            suffix = str(k) if k else ""
            mux = table[index]
            kwargs[f"mux{suffix}"] = mux.name
            kwargs[f"source{suffix}"] = mux.sources[value] if value < len(mux.sources) \
                else value
    else:
        kwargs = {k: v for k, v in mop.fields.items() if k not in fixed}
    return Statement((), op, unit, (), kwargs)


def format_ops(cfg: ChipConfig, ops: list[MicroOp]) -> str:
    """Program text with one chip statement per micro-op, in order."""
    return "".join(format_statement(statement(cfg, m)) + "\n" for m in ops)
