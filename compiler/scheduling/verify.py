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

from bisect import bisect_right
from collections.abc import Callable

from systolica import golden
from systolica.arch import disasm, instructions, isa
from systolica.arch.config import ChipConfig
from systolica.arch.regs import ErrorCode
from systolica.compiler.errors import CompileError


class ScheduleError(CompileError):
    """A scheduled program the chip would not run as meant."""


def verify(cfg: ChipConfig, program: list[isa.Instr], what: str = "program",
           prog_addr: int | None = None, fetch_from: int | None = None) -> int:
    """Check a scheduled program (sorted by issue cycle), with its image at DRAM word
    ``prog_addr`` if given and fetched from instruction ``fetch_from`` (the PROG_FETCH
    register; None: its reset value); return the cycle count the chip will report, or
    raise :class:`ScheduleError` naming the instruction at fault and the rule it
    breaks."""
    return begin_verify(cfg, program, what, prog_addr, fetch_from)()


def begin_verify(cfg: ChipConfig, program: list[isa.Instr], what: str = "program",
                 prog_addr: int | None = None, fetch_from: int | None = None
                 ) -> Callable[[], int]:
    """:func:`verify` in two steps (:func:`systolica.golden.begin_check`): the caller
    may work while the golden model's forked process finishes, then calls the
    function returned, which returns or raises what :func:`verify` would."""
    timeline_of = golden.begin_check(cfg, program, prog_addr, fetch_from)
    return lambda: _judged(timeline_of(), program, what)


def _judged(timeline: golden.Timeline, program: list[isa.Instr], what: str) -> int:
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


def check_regions(cfg: ChipConfig, regions, program: list[isa.Instr], layer_of,
                  what: str = "program") -> None:
    """Every row an instruction writes (CBUF, ACC, DRAM) lies in a region of the memory
    plan live in the layer it serves (``layer_of[pc]``): a write outside the plan
    lands in rows no layer owns, which the replay and the outputs may never notice
    (the rows may be free). Reads are not held to it: a block's west load reads the
    rows past the block (the zero fill writes them if nothing else did). Raises
    :class:`ScheduleError` naming the instruction, the rows and the regions."""
    cover: dict[tuple[str, int], tuple[list[int], list[int]]] = {}

    def covered(memory: str, layer: int, lo: int, hi: int) -> bool:
        key = (memory, layer)
        if key not in cover:                # the live regions, merged, by address
            merged: list[list[int]] = []
            for r in sorted((r for r in regions if r.memory == memory
                             and r.first <= layer <= r.last), key=lambda r: r.lo):
                if merged and r.lo <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], r.hi)
                else:
                    merged.append([r.lo, r.hi])
            cover[key] = ([a for a, _ in merged], [b for _, b in merged])
        starts, ends = cover[key]
        i = bisect_right(starts, lo) - 1
        return i >= 0 and hi <= ends[i]

    # Most instructions repeat, or repeat with another DRAM address only (the entry's
    # ``moves`` field, which shifts that memory's rows and nothing else): their writes
    # are worked out once per shape, at address 0, and shifted.
    shapes: dict[tuple, int] = {}
    writes: list[list[tuple[str, int, int]]] = []
    known_of: dict[tuple, tuple[int, str | None, int]] = {}
    checked: set = set()
    for pc, (ins, layer) in enumerate(zip(program, layer_of)):
        key = (ins.op, *ins.fields.values())     # all spelled out, in payload order (make)
        known = known_of.get(key)
        if known is None:
            moves = instructions.spec(ins.op).moves
            field, moved = moves if moves else (None, None)
            fields = dict(ins.fields, **({field: 0} if field else {}))
            shape = (ins.op, *fields.values())
            n = shapes.get(shape)
            if n is None:
                n = shapes[shape] = len(writes)
                writes.append([(r.memory, int(r.lo), int(r.hi))
                               for r in instructions.ranges(cfg, ins.op, fields)
                               if r.mode != instructions.READ and r.touched
                               and r.memory in ("cbuf", "acc", "dram")])
            known = known_of[key] = (n, moved, ins.fields[field] if field else 0)
        n, moved, at = known
        once = (n, layer) in checked
        for memory, lo, hi in writes[n]:
            if memory == moved:
                lo, hi = lo + at, hi + at
            elif once:
                continue
            if not covered(memory, layer, lo, hi):
                live = sorted((r2 for r2 in regions if r2.memory == memory
                               and r2.first <= layer <= r2.last), key=lambda r2: r2.lo)
                near = ", ".join(f"{r2.what or r2.key} [{r2.lo}, {r2.hi})" for r2 in live
                                 if r2.lo < hi + 64 and lo < r2.hi + 64) or "none near"
                raise ScheduleError(
                    f"{what}: internal: pc {pc} ({_show(program, pc)}) writes "
                    f"{memory.upper()} rows [{lo}, {hi}), outside every region the "
                    f"memory plan holds live in its layer (number {layer}); regions "
                    f"near: {near}")
        if not once:
            checked.add((n, layer))


def _show(program: list[isa.Instr], pc: int) -> str:
    return disasm.disassemble_one(program[pc]).strip() if pc < len(program) else "end"
