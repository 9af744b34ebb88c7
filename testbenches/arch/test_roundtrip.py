"""Property tests: the encoder, decoder, disassembler and chip program text are each
other's inverses on every opcode's payload, for random in-range fields."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systolica.arch import disasm, fabric, isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import CopyKind, DmaKind, Instr, Opcode
from systolica.compiler.frontend import stp, text
from systolica.compiler.frontend.chip_text import format_ops, parse_ops
from systolica.compiler.microops.ir import MicroOp, make
from systolica.sim import randprog

from tiers import examples, sample

CFG = preset("tiny")
OPCODES = [op for op in Opcode if op is not Opcode.ILLEGAL]
CYCLES = st.integers(0, (1 << isa.CYCLE_BITS) - 1)
#: The same examples in every run, and no example database left in the tree.
EXAMPLES = settings(database=None, derandomize=True, deadline=None,
                    max_examples=examples(150))


def fields_of(op: Opcode) -> st.SearchStrategy[dict]:
    """Every payload field of `op`, each anywhere in its width."""
    return st.fixed_dictionaries({name: st.integers(0, (1 << fld.width) - 1)
                                  for name, fld in isa.PAYLOAD[op]})


@st.composite
def instrs(draw, ops=tuple(OPCODES)):
    op = draw(st.sampled_from(ops))
    return Instr(op, draw(CYCLES), draw(fields_of(op)))


def setcfg_fields(pairs: list[tuple[int, int]], op: Opcode) -> dict:
    """SETCFG (or SETCFGW) fields for the pairs a disassembly shows (``more`` is 3 bits
    and names all ``SETCFG_PAIRS - 1`` further slots)."""
    fields = {name: 0 for name, _ in isa.PAYLOAD[op]}
    index_bits = isa.field_bits(op, "index")
    page = pairs[0][0] >> index_bits
    low = (1 << index_bits) - 1
    fields.update(index=pairs[0][0] & low, value=pairs[0][1], more=len(pairs) - 1,
                  page=page)
    assert len(pairs) <= isa.SETCFG_PAIRS
    for k, (index, value) in enumerate(pairs[1:], start=1):
        assert index >> index_bits == page, pairs
        fields[f"index{k}"], fields[f"value{k}"] = index & low, value
    return fields


def canonical(ins: Instr) -> Instr:
    """What the disassembly says of `ins`: a SETCFG's pair slots past ``more`` are
    not part of the instruction (the sequencer applies only the first ``more + 1``),
    so they read as zero."""
    if ins.op not in isa.SETCFGS:
        return ins
    return Instr(ins.op, ins.cycle, setcfg_fields(isa.setcfg_pairs(ins.fields, ins.op),
                                                  ins.op))


# -- encode / decode -------------------------------------------------------------------
@EXAMPLES
@given(instrs())
def test_instructions_survive_pickle_and_copy(ins):
    """Programs can go to another process (and be copied) whole."""
    import copy
    import pickle
    assert pickle.loads(pickle.dumps(ins)) == ins
    assert copy.deepcopy(ins) == ins


@EXAMPLES
@given(instrs())
def test_decode_inverts_encode(ins):
    word = isa.encode(ins)
    assert 0 <= word < 1 << isa.WORD_BITS
    assert isa.decode(word) == ins
    assert isa.from_bytes(isa.to_bytes([word])) == [word]


@EXAMPLES
@given(st.lists(instrs(), min_size=1, max_size=6), st.lists(CYCLES, min_size=1, max_size=6))
def test_encoding_a_program_at_once_matches_one_by_one(program, cycles):
    """``encode_all`` encodes each distinct instruction once and only sets the cycle
    of its copies: the same words as ``encode`` one by one."""
    program += [Instr(ins.op, c, ins.fields) for ins, c in zip(program, cycles)]
    assert isa.encode_all(program) == [isa.encode(ins) for ins in program]
    late = Instr(program[0].op, 1 << isa.CYCLE_BITS, program[0].fields)
    with pytest.raises(isa.EncodingError, match="cycle does not fit"):
        isa.encode_all(program + [late])


@EXAMPLES
@given(st.sampled_from(OPCODES), st.data())
def test_encode_rejects_a_field_past_its_width(op, data):
    fields = data.draw(fields_of(op))
    name, fld = data.draw(st.sampled_from(list(isa.PAYLOAD[op])))
    fields[name] = data.draw(st.sampled_from([1 << fld.width, -1]))
    with pytest.raises(isa.EncodingError, match=f"field {name}="):
        isa.encode(Instr(op, 0, fields))


@EXAMPLES
@given(st.integers(0, (1 << isa.WORD_BITS) - 1))
def test_any_word_decodes_and_reencodes_to_its_defined_bits(word):
    ins = isa.decode(word)
    opcode = word & ((1 << isa.HEADER["opcode"].width) - 1)
    if ins.op is Opcode.ILLEGAL:
        assert ins.fields == ({} if opcode == Opcode.ILLEGAL else {"raw_opcode": opcode})
        return
    assert int(ins.op) == opcode
    payload_bits = isa.Word["payload"].offset + isa.PAYLOAD[ins.op].size
    assert isa.encode(ins) == word & ((1 << payload_bits) - 1)


# -- disassembly -------------------------------------------------------------------------
_LINE = re.compile(r"\s*(?:(?P<pc>\d+)\s+)?(?P<cycle>\d+):\s+(?P<op>[A-Z]+)\s*(?P<args>.*)")


def parse_disassembly(line: str) -> Instr:
    """One line of :func:`systolica.arch.isa.disassemble` (with or without its pc) back
    into the instruction it shows."""
    m = _LINE.fullmatch(line)
    assert m, f"not a disassembly line: {line!r}"
    op = Opcode[m["op"]]
    args = [a.strip() for a in m["args"].split(",") if a.strip()]
    fields = {}
    if op is Opcode.DMA:
        fields["kind"] = int(DmaKind[args.pop(0)])
    if op is Opcode.COPY:
        fields["kind"] = int(CopyKind[args.pop(0)])
    pairs = []
    for arg in args:
        key, value = arg.split("=")
        if op in isa.SETCFGS:
            pairs.append((int(key.removeprefix("mux")), int(value)))
        else:
            fields[key] = int(value)
    if op in isa.SETCFGS:
        fields = setcfg_fields(pairs, op)
    return Instr(op, int(m["cycle"]), fields)


@EXAMPLES
@given(instrs())
def test_disassembly_parses_back_to_the_instruction(ins):
    assert parse_disassembly(disasm.disassemble_one(ins)) == canonical(ins)


@EXAMPLES
@given(st.lists(instrs(), min_size=1, max_size=12))
def test_program_listing_reassembles_to_the_image(program):
    program = [canonical(i) for i in program]
    image = isa.to_bytes([isa.encode(i) for i in program])
    lines = disasm.disassemble(image).split("\n")
    assert [int(line.split()[0]) for line in lines] == list(range(len(program)))
    again = [parse_disassembly(line) for line in lines]
    assert isa.to_bytes([isa.encode(i) for i in again]) == image


@EXAMPLES
@given(st.integers(0, (1 << isa.WORD_BITS) - 1))
def test_distinct_instructions_disassemble_differently(word):
    """Disassembly is injective on what an instruction means: a word and its canonical
    form read the same, and reading it back gives that canonical form."""
    ins = isa.decode(word)
    if ins.op is Opcode.ILLEGAL:
        raw = ins.fields.get("raw_opcode", 0)
        assert disasm.disassemble_one(ins).split() == [f"{ins.cycle}:", "ILLEGAL"] + \
            ([f"raw_opcode={raw}"] if raw else [])
        return
    assert disasm.disassemble_one(ins) == disasm.disassemble_one(canonical(ins))
    assert parse_disassembly(disasm.disassemble_one(ins)) == canonical(ins)


# -- chip program text -------------------------------------------------------------------
def routing(draw, op: MicroOp) -> dict:
    """Random settings for some of the multiplexers `op`'s data passes."""
    passed = [m for m in fabric.muxes(CFG) if timing.mux_use(CFG, op.instr(0), m.name)]
    chosen = draw(st.lists(st.sampled_from(passed), unique=True)) if passed else []
    return {m.name: draw(st.sampled_from(m.sources)) for m in chosen}


@st.composite
def micro_ops(draw):
    """A micro-op the compiler accepts on CFG (every range inside its memory), with
    random multiplexer settings on its way."""
    op = draw(st.sampled_from([o for o in OPCODES if o not in isa.SETCFGS]))
    R, u16 = CFG.rows, (1 << 16) - 1

    def start(depth: int, length: int) -> int:
        return draw(st.integers(0, depth - length))

    if op is Opcode.DMA:
        kind = draw(st.sampled_from(list(DmaKind)))
        to_acc = kind in (DmaKind.LOAD_ACC, DmaKind.STORE_ACC)
        w, depth = (CFG.acc_row_words, CFG.acc_depth) if to_acc else (1, CFG.cbuf_depth)
        rows = draw(st.integers(1, depth))
        stride = draw(st.integers(0, min(u16, (CFG.dram_words - w) // max(rows - 1, 1))))
        f = dict(kind=kind, rows=rows, dram_stride=stride, buf_addr=start(depth, rows),
                 dram_addr=start(CFG.dram_words, (rows - 1) * stride + w))
    elif op is Opcode.WLOAD:
        f = dict(w_addr=start(CFG.cbuf_depth, R), bank=draw(st.integers(0, 1)))
    elif op is Opcode.MATMUL:
        rows = draw(st.integers(1, CFG.acc_depth))
        f = dict(rows=rows, act_addr=start(CFG.cbuf_depth, rows),
                 acc_addr=start(CFG.acc_depth, rows), accumulate=draw(st.integers(0, 1)),
                 bank=draw(st.integers(0, 1)))
        if draw(st.booleans()):         # a window walk instead
            in_w = draw(st.integers(1, 64))
            in_h = draw(st.integers(1, CFG.cbuf_depth // in_w))
            f.update(conv=1, max=draw(st.integers(0, 1)), dh=draw(st.integers(0, 63)),
                     dw=draw(st.integers(0, 63)), taps=draw(st.integers(0, 7)),
                     in_w=in_w, in_h=in_h, act_addr=start(CFG.cbuf_depth, in_w * in_h))
    elif op is Opcode.CONVCFG:
        f = dict(out_w=draw(st.integers(1, 4095)), sh=draw(st.integers(1, 7)),
                 sw=draw(st.integers(1, 7)), top=draw(st.integers(0, 63)),
                 left=draw(st.integers(0, 63)), pad=draw(st.integers(0, 255)))
    elif op is Opcode.TAPS:
        count = draw(st.integers(1, isa.TAPS_PER_WORD))
        f = dict(table=draw(st.integers(0, 7)), count=count,
                 first=draw(st.integers(0, R - count)),
                 **{f"t{a}{k}": draw(st.integers(0, 127)) for k in range(1, count + 1)
                    for a in "hw"})
    elif op is Opcode.COPY:
        rows = draw(st.integers(1, CFG.ubuf_rows))
        f = dict(kind=draw(st.sampled_from(list(CopyKind))), rows=rows,
                 cbuf_addr=start(CFG.cbuf_depth, rows), ubuf_addr=start(CFG.ubuf_rows, rows))
    elif op is Opcode.ROUTE:
        rows = draw(st.integers(1, CFG.cbuf_depth))
        span = draw(st.integers(1, 4))
        f = dict(rows=rows, src=start(CFG.cbuf_depth, rows), dst=start(CFG.cbuf_depth, rows),
                 span=span, col0=draw(st.integers(0, CFG.tile_cols - 1)),
                 keep=draw(st.integers(0, 255)),
                 **{f"delay{j}": draw(st.integers(0, span)) for j in range(CFG.tile_cols)})
    else:
        to_acc = draw(st.integers(0, 1))
        rows = draw(st.integers(1, CFG.acc_depth))
        f = dict(rows=rows, src=start(CFG.acc_depth, rows), to_acc=to_acc,
                 dst=start(CFG.acc_depth if to_acc else CFG.cbuf_depth, rows),
                 bias_addr=start(CFG.acc_depth, 1), use_bias=draw(st.integers(0, 1)),
                 requant=draw(st.integers(0, 1)), relu=draw(st.integers(0, 1)),
                 mult=draw(st.integers(0, u16)), shift=draw(st.integers(0, 63)),
                 zp=draw(st.integers(0, 255)))
        if to_acc and f["src"] < f["dst"] < f["src"] + rows:
            f["dst"] = f["src"]        # a destination inside the source is refused
    mop = make(CFG, op, **f)
    mop.needs = routing(draw, mop)
    return mop


@EXAMPLES
@given(st.lists(micro_ops(), min_size=1, max_size=10))
def test_chip_statements_print_and_parse_back(ops):
    source = format_ops(ops)
    again = parse_ops(CFG, source, "<printed>")
    assert [(m.op, m.fields, m.needs) for m in again] == \
        [(m.op, m.fields, m.needs) for m in ops], source
    assert [m.accesses for m in again] == [m.accesses for m in ops]


@pytest.mark.parametrize("seed", sample(range(12), 3))
def test_printed_random_program_schedules_from_text_as_from_ops(seed):
    """A random legal program's ops printed as text and scheduled by the program-text
    path (routes as ``cfg set`` values) give the very program the ops give directly."""
    prog = randprog.legal(CFG, seed)
    source = format_ops(list(prog.ops))
    from_text = stp.schedule_chip(CFG, text.parse(source, f"<seed {seed}>")).program
    assert from_text == list(prog.program), source
