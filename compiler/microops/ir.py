"""The compiler's program representation: latency-insensitive micro-ops.

A micro-op is an instruction without a cycle, plus the memory ranges it touches. The
ranges are derived from the fields by one function (`accesses`), following the
functional semantics in docs/contract.md, so lowering cannot state them wrongly and
the scheduler's hazards are exactly the instruction's effects.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from dataclasses import dataclass, field

from systolica.arch import disasm, fabric, instructions, isa, timing
from systolica.arch.config import ChipConfig
from systolica.arch.instructions import ACCUMULATE, READ, WRITE
from systolica.arch.isa import Opcode
from systolica.compiler.errors import CompileError, InternalError
from systolica.compiler.microops.running_max import RunningMax


@dataclass(frozen=True)
class Access:
    """``[lo, hi)`` of a resource: "cbuf", "acc", "dram" (rows/words), "wbank0",
    "wbank1" (one unit each) or "cfg" (multiplexer indices). ``accumulate`` is a
    MATMUL's write through the accumulate pipeline: two of them on the same rows only
    need to issue in order."""
    resource: str
    lo: int
    hi: int
    mode: str
    start: int = 0            # cycles after issue the access begins ...
    end: int | None = None    # ... and ends (exclusive; None: the op's timing.done)


@dataclass
class MicroOp:
    op: Opcode
    fields: dict
    accesses: tuple[Access, ...] = ()
    layer: int = 0          # index of the network layer it belongs to
    needs: dict = field(default_factory=dict)   # multiplexer name -> source it needs;
                                                # others it passes keep their default

    def instr(self, cycle: int) -> isa.Instr:
        return isa.Instr(self.op, cycle, dict(self.fields))

    def __str__(self):
        return disasm.disassemble_one(self.instr(0)).split(":", 1)[1].strip()


def resource_sizes(cfg: ChipConfig) -> dict[str, int]:
    return {"cbuf": cfg.cbuf_physical_rows, "acc": cfg.acc_depth, "dram": cfg.dram_words,
            "wbank0": 1, "wbank1": 1, "cfg": len(fabric.muxes(cfg)),
            "geom": 1, "taps": isa.TAP_TABLES}


def accesses(cfg: ChipConfig, op: Opcode, f: dict,
             ranges: list[instructions.Range] | None = None) -> tuple[Access, ...]:
    """What an instruction reads and writes: its entry's memory ranges (conservative
    for strided DMA: the whole span between the first and last DRAM word; `ranges`
    if the caller has them already), the weight bank it shifts or streams through,
    and the fabric settings it passes."""
    entry = instructions.spec(op)
    if ranges is None:
        ranges = entry.ranges(cfg, instructions.Fields(f))
    out = [Access(r.memory, r.lo, r.hi, r.mode, *(r.window or ()))
           for r in ranges if r.touched]
    if entry.bank_mode is not None:
        out.append(Access(f"wbank{f['bank']}", 0, 1, entry.bank_mode,
                          *timing.bank_window(cfg, isa.Instr(op, 0, f))))
    if entry.uses_fabric:
        out.append(Access("cfg", 0, len(fabric.muxes(cfg)), READ))
    if op in isa.SETCFGS:
        out += [Access("cfg", i, i + 1, WRITE) for i, _ in isa.setcfg_pairs(f, op)]
    return tuple(out)


def make(cfg: ChipConfig, op: Opcode, layer: int = 0, **fields) -> MicroOp:
    """A checked micro-op: fields encodable and every range inside its memory, so a
    compiled program can never raise ILLEGAL_OPCODE, ADDR_RANGE or CFG_RANGE."""
    names = isa.payload_fields(op)
    unknown = fields.keys() - set(names)
    if unknown:
        raise CompileError(f"{op.name} has no field(s) {sorted(unknown)}")
    # every field spelled out (0 by default), as isa.decode returns them
    mop = MicroOp(op, {name: int(fields.get(name, 0)) for name in names},
                  (), layer)
    fields = mop.fields
    try:
        isa.encode(mop.instr(0))
    except isa.EncodingError as e:
        raise CompileError(f"{mop}: {e}") from None
    # the sequencer's ILLEGAL_OPCODE, ADDR_RANGE and CFG_RANGE rules, from the table
    if not instructions.legal(cfg, op, fields):
        raise CompileError(f"{mop}: {instructions.spec(op).legal_rule} (else "
                           f"the chip faults ILLEGAL_OPCODE)")
    ranges = instructions.ranges(cfg, op, fields)
    for r in ranges:
        if not r.nonempty:
            raise CompileError(f"{mop}: rows must be at least 1 (an instruction that "
                               f"moves no rows faults ADDR_RANGE)")
        if r.hi > r.bound:
            raise CompileError(f"{mop}: its {r.memory} range [{r.lo}, {r.hi}) runs past "
                               f"the end of that memory ({r.bound} rows on chip "
                               f"{cfg.name!r}); use addresses inside it")
    if op in isa.SETCFGS and not instructions.setcfg_in_table(cfg, fields, op):
        raise CompileError(f"{mop}: names a multiplexer or source the fabric does not "
                           f"have ({len(fabric.muxes(cfg))} multiplexers)")
    if op is Opcode.VRUN and fields["to_acc"] \
            and fields["src"] < fields["dst"] < fields["src"] + fields["rows"]:
        # It reads row i a few cycles before it writes row i: a destination starting
        # inside its own source would read rows it has already overwritten.
        raise CompileError(f"{mop}: destination rows [{fields['dst']}, "
                           f"{fields['dst'] + fields['rows']}) start inside the source rows "
                           f"[{fields['src']}, {fields['src'] + fields['rows']}) it has yet "
                           f"to read; write in place (dst = src) or to disjoint rows")
    mop.accesses = accesses(cfg, op, fields, ranges)
    return mop


def moved(cfg: ChipConfig, mop: MicroOp, value: int) -> MicroOp:
    """What ``make`` returns for `mop`'s fields with its moving field (the entry's
    ``moves``: a DMA's ``dram_addr``) at `value`. The field only moves the op's
    touches of one memory, so only their bounds and the field's width are checked
    again; anything out of bounds goes through ``make`` for its error."""
    name, memory = instructions.spec(mop.op).moves
    off = value - mop.fields[name]
    size = resource_sizes(cfg)[memory]
    if 0 <= value < 1 << isa.field_bits(mop.op, name) and all(
            0 <= a.lo + off and a.hi + off <= size
            for a in mop.accesses if a.resource == memory):
        fields = dict(mop.fields)
        fields[name] = value
        return MicroOp(mop.op, fields, tuple(
            Access(a.resource, a.lo + off, a.hi + off, a.mode, a.start, a.end)
            if a.resource == memory else a for a in mop.accesses), mop.layer, mop.needs)
    return make(cfg, mop.op, mop.layer, **{**mop.fields, name: value})


def required_gap(cfg: ChipConfig, earlier: MicroOp, later: MicroOp) -> int | None:
    """The fewest cycles ``later`` must issue after ``earlier`` for their accesses to
    stay in order, or None if their order does not matter. Each access spans
    ``[issue + start, issue + end)`` (``end`` defaults to the op's ``timing.done``);
    two accumulates into the same rows only need to issue in order."""
    done = timing.done(cfg, earlier.instr(0))
    gap = None
    for x in earlier.accesses:
        for y in later.accesses:
            if x.resource != y.resource or not (x.lo < y.hi and y.lo < x.hi) \
                    or (x.mode == READ and y.mode == READ):
                continue
            if x.mode == ACCUMULATE and y.mode == ACCUMULATE:
                need = 1
            else:
                need = (done if x.end is None else x.end) - y.start
            gap = need if gap is None else max(gap, need)
    return gap


def conflict(a: MicroOp, b: MicroOp) -> bool:
    """Whether the two ops' order matters (overlapping ranges, at least one writes;
    accumulates count as writes here because their order fixes the overwrite)."""
    for x in a.accesses:
        resource, lo, hi, writes = x.resource, x.lo, x.hi, x.mode != READ
        for y in b.accesses:
            if y.resource == resource and lo < y.hi and y.lo < hi \
                    and (writes or y.mode != READ):
                return True
    return False


def verify_reorder(cfg: ChipConfig, before: list[MicroOp], after: list[MicroOp]) -> None:
    """Raise unless `after` is a permutation of `before` keeping the relative order of
    every conflicting pair, i.e. computes the same thing."""
    pos = {id(m): i for i, m in enumerate(after)}
    order = [pos.get(id(m), -1) for m in before]
    if len(pos) != len(before) or -1 in order:
        raise InternalError("reordered program is not a permutation")
    # Only the pairs the permutation swaps need a look. Walking `before`, ``ahead``
    # holds the ops already seen that `after` places beyond the first position not yet
    # taken: the current op must not pass those of them that `after` places after it.
    # The pipeliner moves an op at most a block's length (a few hundred ops in
    # ResNet-50); a permutation that moves more ops further is checked address by
    # address instead.
    n = len(order)
    taken = bytearray(n)
    first_free = 0
    ahead: list[tuple[int, int]] = []     # (position in `after`, index in `before`), sorted
    for j, p in enumerate(order):
        if ahead and ahead[-1][0] > p:
            for _, i in ahead[bisect_right(ahead, (p, n)):]:
                if _touch_same(before[i], before[j]):
                    raise InternalError(f"reordering moved {before[j]} before "
                                        f"{before[i]}, which touches the same data")
        taken[p] = 1
        if p == first_free:
            while first_free < n and taken[first_free]:
                first_free += 1
            if ahead:
                del ahead[:bisect_right(ahead, (first_free, n))]
        else:
            insort(ahead, (p, j))
            if len(ahead) > _FAR:
                return _verify_reorder_by_address(cfg, before, pos)


#: More ops than this placed ahead of their turn at once: checked address by address.
_FAR = 4096


def _touch_same(a: MicroOp, b: MicroOp) -> bool:
    """Whether the two ops touch a common address and at least one of them writes
    (the reorder check's own test; the pipeliner decides with ``conflict``)."""
    for x in a.accesses:
        resource, lo, hi, reads = x.resource, x.lo, x.hi, x.mode == READ
        for y in b.accesses:
            if y.resource == resource and lo < y.hi and y.lo < hi \
                    and not (reads and y.mode == READ):
                return True
    return False


def _verify_reorder_by_address(cfg: ChipConfig, before: list[MicroOp], pos: dict
                               ) -> None:
    # per address: the highest position in `after` of any write / read seen so far
    sizes = resource_sizes(cfg)
    writes = {r: RunningMax(n, -1) for r, n in sizes.items()}
    reads = {r: RunningMax(n, -1) for r, n in sizes.items()}
    for m in before:
        p = pos[id(m)]
        for a in m.accesses:
            last = writes[a.resource].max(a.lo, a.hi)
            if a.mode != READ:
                last = max(last, reads[a.resource].max(a.lo, a.hi))
            if p <= last:
                raise InternalError(f"reordering moved {m} before a conflicting op")
        for a in m.accesses:
            (reads if a.mode == READ else writes)[a.resource].raise_to(a.lo, a.hi, p)
