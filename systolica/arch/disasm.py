"""Program images as text: one line per instruction, each formatted by its entry in
:mod:`systolica.arch.instructions`."""

from __future__ import annotations

from systolica.arch import instructions  # noqa: F401  (it fills isa.FIELD_FORMATS)
from systolica.arch.isa import Instr, decode, from_bytes


def disassemble_one(instr: Instr) -> str:
    """``cycle: OPCODE fields``, the fields as the instruction's entry formats them."""
    return str(instr)


def disassemble(image: bytes) -> str:
    return "\n".join(f"{pc:5d} {disassemble_one(decode(w))}"
                     for pc, w in enumerate(from_bytes(image)))
