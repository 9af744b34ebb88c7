"""Program images as text: one line per instruction, each formatted by its entry in
:mod:`systolica.arch.instructions`, and each checked as the sequencer checks the word
(:func:`problems`, the rules of :mod:`systolica.arch.word_rules`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from systolica.arch import (
    instructions,  # noqa: F401  (it fills isa.FIELD_FORMATS)
    word_rules,
)
from systolica.arch.config import ChipConfig
from systolica.arch.isa import Instr, Opcode, decode, from_bytes
from systolica.arch.regs import ErrorCode


def disassemble_one(instr: Instr) -> str:
    """``cycle: OPCODE fields``, the fields as the instruction's entry formats them."""
    return str(instr)


def disassemble(image: bytes) -> str:
    """The listing of a raw word stream (``isa.to_bytes``, e.g. ``Compiled.image``),
    without checks: ``Compiled.disassemble`` and ``compile --listing``."""
    return "\n".join(f"{pc:5d} {disassemble_one(decode(w))}"
                     for pc, w in enumerate(from_bytes(image)))


@dataclass(frozen=True)
class Problem:
    """What is wrong with instruction ``pc`` (named ``what``): ``code`` is the fault
    the sequencer raises when it reaches it, None for reserved bits (which it ignores)."""
    pc: int | None              # None: the program as a whole (its region)
    what: str
    code: ErrorCode | None
    why: str

    def __str__(self) -> str:
        then = (f"the sequencer faults {self.code.name}" if self.code is not None else
                "the sequencer ignores them; no compiler sets them")
        where = "the program" if self.pc is None else f"pc {self.pc}: {self.what}"
        return f"{where}: {self.why} ({then})"


def problems(cfg: ChipConfig, pc: int, ins: Instr, word: int,
             previous: Instr | None = None, known: dict | None = None) -> list[Problem]:
    """Instruction `pc` (`ins`, decoded from `word`) checked as the sequencer checks
    the word when it reaches it (:func:`word_rules.word_fault`), after `previous`
    (``LATE``), and for reserved bits. `known` caches the word checks of instructions
    alike but for their cycle (a program repeats most)."""
    what = ins.op.name
    out = []
    if previous is not None and ins.cycle < word_rules.earliest_issue(previous.cycle):
        out.append(Problem(pc, what, ErrorCode.LATE,
                           f"its cycle {ins.cycle} is not after pc {pc - 1}'s cycle "
                           f"{previous.cycle}: it reaches issue in cycle "
                           f"{word_rules.earliest_issue(previous.cycle)} at the earliest"))
    key = None
    if known is not None and ins.op is not Opcode.ILLEGAL:
        key = (ins.op, tuple(ins.fields.values()), ins.cycle if ins.op in
               (Opcode.SETCFG, Opcode.SETCFGW) else None)
    fault = known.get(key, False) if key is not None else False
    if fault is False:
        fault = word_rules.word_fault(cfg, ins)
        if key is not None:
            known[key] = fault
    if fault is not None:
        out.append(Problem(pc, what, *fault))
    extra = word_rules.reserved_bits(word)
    if extra:
        bits = [b for b in range(extra.bit_length()) if extra >> b & 1]
        named = ", ".join(map(str, bits[:6])) + (f" ... ({len(bits)} bits)" if
                                                 len(bits) > 6 else "")
        out.append(Problem(pc, what, None, f"reserved bit{'s' if len(bits) > 1 else ''} "
                                           f"{named} set, past its fields (bits 0 to "
                                           f"{word_rules.fields_end(ins.op) - 1})"))
    return out


def listing(cfg: ChipConfig, words: list[int], prog_addr: int | None = None,
            fetch_from: int | None = None) -> Iterator[tuple[str, Problem | None]]:
    """The checked listing of `words` for chip `cfg` (fetched from `prog_addr` past the
    instruction memory, or from instruction `fetch_from` on, the PROG_FETCH register):
    first the program region's problem (``PROG_RANGE``), if any;
    then per instruction its line ``(line, None)`` and a ``("#! ...", problem)`` line
    per problem it has (:func:`problems`). Every word is checked as if the sequencer
    reached it (a run stops at the first fault)."""
    why = word_rules.program_fault(cfg, len(words), prog_addr, fetch_from)
    if why:
        problem = Problem(None, "", ErrorCode.PROG_RANGE, why)
        yield f"#! {problem}", problem
    previous, known = None, {}
    for pc, word in enumerate(words):
        ins = decode(word)
        yield f"{pc:5d} {disassemble_one(ins)}", None
        for problem in problems(cfg, pc, ins, word, previous, known):
            yield f"#! {problem}", problem
        previous = ins
