"""What the sequencer checks of one instruction word by itself, in words: the rules
the golden model applies when it runs a program (:mod:`systolica.golden`) and the
disassembler applies to every word of an image (:mod:`systolica.arch.disasm`). The
rules themselves are the instruction entries' (:mod:`systolica.arch.instructions`:
``legal``, ``ranges``) and the fabric's; this module only says why one fails.

In the sequencer's order, the faults a word alone decides are ``ILLEGAL_OPCODE`` (an
opcode the ISA does not define, or a field combination its entry does not),
``ADDR_RANGE`` (a range empty or past the end of its memory), ``CFG_RANGE`` (a SETCFG
naming a multiplexer or source that does not exist) and ``CFG_LIMIT`` (a SETCFG over
the chip's update limits). ``LATE`` needs the instruction before it, the other faults
(``UNIT_BUSY``, ``CFG_IN_USE``, ``BANK_CONFLICT``, ``FETCH_LATE``) a run.
"""

from __future__ import annotations

import re

from systolica.arch import fabric, fetch, instructions, isa
from systolica.arch.config import ChipConfig
from systolica.arch.isa import Opcode
from systolica.arch.regs import ErrorCode


def program_fault(cfg: ChipConfig, count: int, prog_addr: int | None,
                  fetch_from: int | None = None) -> str | None:
    """The PROG_RANGE rule, checked at START: a program of `count` instructions that is
    fetched (longer than the instruction memory, or fetched from `fetch_from`, the
    PROG_FETCH register; None: its reset value) is read from its region at PROG_ADDR,
    which must lie inside the DRAM (`prog_addr` None: not known, not checked)."""
    if prog_addr is None or not fetch.fetches(cfg, count, fetch_from):
        return None
    end = prog_addr + count * fetch.words_per_instruction(cfg)
    if end > cfg.dram_words:
        return (f"the program region [{prog_addr}, {end}) runs past the end of the DRAM "
                f"({cfg.dram_words} words)")
    return None


def earliest_issue(previous_cycle: int) -> int:
    """The first cycle an instruction can issue in after one issued in
    `previous_cycle`: one instruction reaches issue per cycle (else ``LATE``)."""
    return previous_cycle + 1


def legal_fault(cfg: ChipConfig, ins: isa.Instr) -> str | None:
    """The ILLEGAL_OPCODE rule: an opcode the ISA defines, with a field combination its
    entry allows."""
    entry = instructions.SPEC.get(ins.op)
    if entry is None:
        raw = ins.fields.get("raw_opcode", int(ins.op))
        return f"opcode {raw} is not an instruction of the ISA"
    if not instructions.legal(cfg, ins.op, ins.fields):
        return entry.legal_rule
    return None


def range_fault(cfg: ChipConfig, op: Opcode, fields: dict) -> str | None:
    """The ADDR_RANGE rule: every range non-empty and inside its memory."""
    for r in instructions.ranges(cfg, op, fields):
        if not r.nonempty:
            # the fields the rule names, with their values
            named = [w for w in dict.fromkeys(re.findall(r"[a-z_]+", r.needs))
                     if w in isa.payload_fields(op)]
            values = ", ".join(f"{w} = {fields.get(w, 0)}" for w in named)
            return (f"its {r.memory} range is empty ({values}): {r.needs}" if r.memory in
                    ("cbuf", "acc", "dram") else f"its {r.memory} fields are out of range "
                    f"({values}): {r.needs}")
        if r.hi > r.bound:
            return (f"its {r.memory} range [{r.lo}, {r.hi}) runs past the end of that "
                    f"memory ({r.bound} rows)")
    return None


def table_fault(cfg: ChipConfig, ins: isa.Instr) -> str | None:
    """The CFG_RANGE rule: every pair names an existing multiplexer and source."""
    table = fabric.muxes(cfg)
    for index, value in isa.setcfg_pairs(ins.fields, ins.op):
        if index >= len(table):
            return f"there is no multiplexer {index} (the fabric has {len(table)})"
        if value >= len(table[index].sources):
            return (f"multiplexer {table[index].name} has no source {value} (it has "
                    f"{len(table[index].sources)})")
    return None


def limit_fault(cfg: ChipConfig, ins: isa.Instr) -> str | None:
    """The CFG_LIMIT rule: pairs per instruction, update interval, domain budget."""
    pairs = isa.setcfg_pairs(ins.fields, ins.op)
    if len(pairs) > cfg.max_config_updates_per_cycle:
        return (f"it carries {len(pairs)} updates; the chip takes at most "
                f"{cfg.max_config_updates_per_cycle} per cycle")
    if ins.cycle % cfg.config_update_interval:
        return (f"cycle {ins.cycle} is not a multiple of the update interval "
                f"{cfg.config_update_interval}")
    table = fabric.muxes(cfg)
    per_domain: dict[str, int] = {}
    for index, _ in pairs:
        per_domain[table[index].domain] = per_domain.get(table[index].domain, 0) + 1
    for domain, count in per_domain.items():
        if count > cfg.power_domain_budget:
            return (f"it updates {count} multiplexers of power domain {domain}; the "
                    f"budget is {cfg.power_domain_budget}")
    return None


def word_fault(cfg: ChipConfig, ins: isa.Instr) -> tuple[ErrorCode, str] | None:
    """The first fault the sequencer raises on this word by itself, in its order, and
    why (None: the word passes every check that needs no other instruction)."""
    why = legal_fault(cfg, ins)
    if why:
        return ErrorCode.ILLEGAL_OPCODE, why
    why = range_fault(cfg, ins.op, ins.fields)
    if why:
        return ErrorCode.ADDR_RANGE, why
    if ins.op in isa.SETCFGS:
        for code, rule in ((ErrorCode.CFG_RANGE, table_fault),
                           (ErrorCode.CFG_LIMIT, limit_fault)):
            why = rule(cfg, ins)
            if why:
                return code, why
    return None


def reserved_bits(word: int) -> int:
    """The bits of `word` set outside its opcode's fields (0 for an opcode the ISA does
    not define): the sequencer ignores them, and no encoder sets them."""
    try:
        op = Opcode(word & ((1 << isa.HEADER["opcode"].width) - 1))
    except ValueError:
        return 0
    used = fields_end(op)
    return word >> used << used


def fields_end(op: Opcode) -> int:
    """The bit of a word past `op`'s last field (header and payload)."""
    return isa.HEADER.size + isa.PAYLOAD[op].size
