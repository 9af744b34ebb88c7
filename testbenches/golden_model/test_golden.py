"""Golden model: instruction semantics on hand-built programs (including every
multiplexer), the sequencer's faults, counters, and the ISA's encode/decode."""

import numpy as np
import pytest

from systolica import golden
from systolica.arch import disasm, fabric, isa, timing
from systolica.arch.config import preset
from systolica.arch.instructions import SPEC
from systolica.arch.isa import DmaKind, Instr, Opcode
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode

from chip_runs import COUNTING, sample_cycles

CFG = preset("tiny")        # 2x2 tiles of 4x4: R = C = 8
R, C, n = CFG.rows, CFG.cols, CFG.tile_size
MUX = fabric.by_name(CFG)
rng = np.random.default_rng(11)


def serial(*ops, cfg=CFG):
    """Instructions one after another, each issued when the previous one is done."""
    program, t = [], 0
    for op, fields in ops:
        ins = Instr(op, t, fields)
        program.append(ins)
        t += timing.done(cfg, ins)
    return program


def image(program):
    return isa.to_bytes([isa.encode(i) for i in program])


def dma(kind, dram, buf, rows, stride=None):
    w = CFG.acc_row_words if kind in (DmaKind.LOAD_ACC, DmaKind.STORE_ACC) else 1
    return Opcode.DMA, dict(kind=kind, dram_addr=dram, dram_stride=stride or w,
                            buf_addr=buf, rows=rows)


def setcfg(name, source):
    return Opcode.SETCFG, dict(index=MUX[name].index, value=MUX[name].value_of(source))


def fresh_dram():
    dram = np.zeros((CFG.dram_words, R), dtype=np.uint8)
    dram[:64] = rng.integers(0, 256, (64, R))
    return dram


def gemm_program(*routing, accumulate=0):
    """Weights from DRAM words 0..7, 5 activation rows from words 8..12 -> ACC 0..4."""
    return serial(dma(DmaKind.LOAD_CBUF, 0, 0, 8 + 5), *routing,
                  (Opcode.WLOAD, dict(w_addr=0, bank=1)),
                  (Opcode.MATMUL, dict(act_addr=8, rows=5, acc_addr=0,
                                       accumulate=accumulate, bank=1)))


def operands(dram):
    return (dram[8:13].view(np.int8).astype(np.int64), dram[0:8].view(np.int8).astype(np.int64))


def run(program, dram):
    result = golden.run(CFG, Loadable.for_chip(CFG, image(program), dram))
    assert result.error is ErrorCode.NONE
    return result


def groups(x, order):
    """Column groups of n reordered: group g of the result is group order[g] (None: 0)."""
    out = np.zeros_like(x)
    for g, src in enumerate(order):
        if src is not None:
            out[:, g * n:(g + 1) * n] = x[:, src * n:(src + 1) * n]
    return out


def test_plain_gemm_and_counters():
    dram = fresh_dram()
    program = gemm_program()
    result = run(program, dram)
    act, w = operands(dram)
    assert np.array_equal(result.acc[:5], act @ w)
    assert result.cycles == timing.run_cycles(CFG, program)
    assert result.macs == 5 * R * C
    assert (result.dram_bytes_read, result.dram_bytes_written) == (13 * R, 0)
    assert result.issued == len(program)


@pytest.mark.parametrize("routing, expect", [
    # activations: tile row 0 fed from CBUF group 1 and tile row 1 from group 0
    ([setcfg("west_feed[0]", "cbuf.g1"), setcfg("west_feed[1]", "cbuf.g0")],
     lambda a, w: groups(a, [1, 0]) @ w),
    ([setcfg("west_feed[1]", "zero")], lambda a, w: groups(a, [0, None]) @ w),
    # weights: tile column 1 loaded from CBUF group 0
    ([setcfg("north_feed[1]", "cbuf.g0")], lambda a, w: a @ groups(w, [0, 0])),
    # tile (0, 0) does not pass activations east: tile (0, 1) sees zeros
    ([setcfg("act_in[0][1]", "zero")],
     lambda a, w: np.hstack([a @ w[:, :n], a[:, n:] @ w[n:, n:]])),
    ([setcfg("act_in[1][0]", "zero")], lambda a, w: a[:, :n] @ w[:n]),
    # weight lane cut at tile (1, 0): tile rows >= 1 of column 0 get zero weights
    ([setcfg("w_in[1][0]", "zero")],
     lambda a, w: np.hstack([a[:, :n] @ w[:n, :n], a @ w[:, n:]])),
    # new reduction chain at tile row 1 of column 1: only rows >= n summed there
    ([setcfg("psum_in[1][1]", "zero")],
     lambda a, w: np.hstack([a @ w[:, :n], a[:, n:] @ w[n:, n:]])),
    ([setcfg("psum_in[0][0]", "zero")], lambda a, w: a @ w),
    ([setcfg("acc_src[0]", "col.g1"), setcfg("acc_src[1]", "zero")],
     lambda a, w: groups(a @ w, [1, None])),
])
def test_multiplexer_routing(routing, expect):
    dram = fresh_dram()
    result = run(gemm_program(*routing), dram)
    assert np.array_equal(result.acc[:5], expect(*operands(dram)))


def test_weight_bank_is_captured_at_wload():
    dram = fresh_dram()
    program = serial(dma(DmaKind.LOAD_CBUF, 0, 0, 13),
                     (Opcode.WLOAD, dict(w_addr=0, bank=0)),
                     dma(DmaKind.LOAD_CBUF, 20, 0, 8),          # overwrite the weights
                     (Opcode.MATMUL, dict(act_addr=8, rows=5, acc_addr=0, accumulate=0,
                                          bank=0)))
    act, w = operands(dram)
    assert np.array_equal(run(program, dram).acc[:5], act @ w)


def test_accumulate_wraps_int32():
    dram = fresh_dram()
    big = np.full((1, C), (1 << 31) - 1, dtype="<i4")
    dram[40:40 + CFG.acc_row_words] = big.view(np.uint8).reshape(-1, R)
    dram[0:8] = 1                                                # weights 1
    dram[8] = 1                                                  # activations 1
    program = serial(dma(DmaKind.LOAD_ACC, 40, 0, 1), dma(DmaKind.LOAD_CBUF, 0, 0, 9),
                     (Opcode.WLOAD, dict(w_addr=0, bank=0)),
                     (Opcode.MATMUL, dict(act_addr=8, rows=1, acc_addr=0, accumulate=1,
                                          bank=0)))
    assert np.all(run(program, dram).acc[0] == (1 << 31) - 1 + R - (1 << 32))


def vrun_program(x, bias, **f):
    """ACC rows x (and a bias row) from DRAM, one VRUN, its result stored to DRAM 100."""
    dram = np.zeros((CFG.dram_words, R), dtype=np.uint8)
    rows = np.vstack([x, bias[None]]).astype("<i4")
    dram[:len(rows) * CFG.acc_row_words] = rows.view(np.uint8).reshape(-1, R)
    k = len(x)
    fields = dict(src=0, rows=k, dst=10, bias_addr=k, use_bias=1, to_acc=0, requant=0,
                  relu=0, mult=0, shift=0, zp=0) | f
    store = (dma(DmaKind.STORE_ACC, 100, 10, k) if fields["to_acc"] else
             dma(DmaKind.STORE_CBUF, 100, 10, k))
    return serial(dma(DmaKind.LOAD_ACC, 0, 0, k + 1), (Opcode.VRUN, fields), store), dram


def vrun(x, bias, **f):
    program, dram = vrun_program(np.array(x), np.array(bias), **f)
    out = run(program, dram).dram[100:]
    if f.get("to_acc"):
        return out[:len(x) * CFG.acc_row_words].reshape(-1).view("<i4").reshape(len(x), C)
    return out[:len(x)].view(np.int8)


def row(*vals):
    return np.array(list(vals) + [0] * (C - len(vals)))


@pytest.mark.parametrize("x, bias, f, want", [
    # rounding: (x*mult + 2**(shift-1)) >> shift, arithmetic, then + zp
    ([row(3, -3, 5, -5, 1, -1)], row(), dict(requant=1, mult=1, shift=1),
     row(2, -1, 3, -2, 1, 0)),
    ([row(1000, -1000, 7)], row(0, 0, 1), dict(requant=1, mult=3, shift=0, zp=0xF6),
     row(127, -128, 14, -10, -10, -10, -10, -10)),                       # zp = -10
    ([row(-50, 50, 0)], row(), dict(requant=1, mult=1, shift=0, zp=0xF6, relu=1),
     row(-10, 40, -10, -10, -10, -10, -10, -10)),                        # relu at zp
    ([row(-300, 300, -7, 7)], row(), dict(), row(-128, 127, -7, 7)),     # int8 clamp
    ([row(-300, 300, -7, 7)], row(), dict(relu=1), row(0, 127, 0, 7)),
])
def test_vrun_to_cbuf(x, bias, f, want):
    assert np.array_equal(vrun(x, bias, **f)[0], want)


def test_vrun_to_acc_keeps_int32_and_wraps_bias():
    x = [row((1 << 31) - 1, -5, 70000)]
    out = vrun(x, row(1, 0, 0), to_acc=1, relu=0)
    assert list(out[0, :3]) == [-(1 << 31), -5, 70000]
    out = vrun(x, row(0, 0, 0), to_acc=1, relu=1)
    assert list(out[0, :3]) == [(1 << 31) - 1, 0, 70000]


def test_vrun_writeback_groups():
    x = [row(*range(1, 9))]
    out = vrun(x, row(), **{})
    assert list(out[0]) == list(range(1, 9))
    program, dram = vrun_program(np.array(x), row())
    program = serial(setcfg("wb_src[0]", "col.g1"), setcfg("wb_src[1]", "zero"),
                     *[(i.op, i.fields) for i in program])
    swapped = run(program, dram).dram[100].view(np.int8)
    assert list(swapped) == [5, 6, 7, 8, 0, 0, 0, 0]


def test_strided_dma_round_trip():
    dram = fresh_dram()
    program = serial(dma(DmaKind.LOAD_CBUF, 0, 0, 4, stride=3),
                     dma(DmaKind.STORE_CBUF, 200, 0, 4, stride=2))
    out = run(program, dram).dram
    assert np.array_equal(out[200:208:2], dram[0:12:3])


# -- faults -------------------------------------------------------------------------
def words_of(program):
    return [isa.encode(i) for i in program]


def with_opcode(word, opcode):
    return word & ~0xF | opcode        # the opcode is the word's low 4 bits


def faulting(program_words, cfg=CFG):
    dram = fresh_dram()
    return golden.run(cfg, Loadable.for_chip(cfg, isa.to_bytes(program_words), dram)), dram


NOP = setcfg("west_feed[0]", "cbuf.g0")


@pytest.mark.parametrize("opcode", [0, max(isa.Opcode) + 1, 15])
def test_illegal_opcode_at_arrival(opcode):
    program = serial(dma(DmaKind.LOAD_CBUF, 0, 0, 4), NOP)
    words = words_of(program)
    words[1] = with_opcode(words[1], opcode)
    result, dram = faulting(words)
    assert (result.error, result.fault_pc) == (ErrorCode.ILLEGAL_OPCODE, 1)
    assert result.fault_cycle == result.cycles == program[0].cycle + 1
    assert np.array_equal(result.cbuf[:4].view(np.uint8), dram[:4])   # first one ran
    assert result.issued == 1


def test_zero_word_is_illegal_at_cycle_zero():
    result, _ = faulting([0])
    assert (result.error, result.fault_pc, result.fault_cycle) == \
        (ErrorCode.ILLEGAL_OPCODE, 0, 0)


def test_late_instruction():
    words = words_of([Instr(NOP[0], 5, NOP[1]), Instr(NOP[0], 5, NOP[1])])
    result, _ = faulting(words)
    assert (result.error, result.fault_pc, result.fault_cycle, result.cycles) == \
        (ErrorCode.LATE, 1, 6, 6)


def test_unit_busy():
    first = Instr(Opcode.DMA, 0, dma(DmaKind.LOAD_CBUF, 0, 0, 4)[1])
    busy_until = timing.occupancy(CFG, first)
    second = Instr(Opcode.DMA, busy_until - 1, dma(DmaKind.LOAD_CBUF, 0, 8, 4)[1])
    result, _ = faulting(words_of([first, second]))
    assert (result.error, result.fault_pc, result.fault_cycle) == \
        (ErrorCode.UNIT_BUSY, 1, busy_until - 1)
    ok, _ = faulting(words_of([first, Instr(Opcode.DMA, busy_until, second.fields)]))
    assert ok.error is ErrorCode.NONE


@pytest.mark.parametrize("op, fields", [
    dma(DmaKind.LOAD_CBUF, 0, 0, 0),                                    # empty
    dma(DmaKind.LOAD_CBUF, CFG.dram_words - 1, 0, 2),                    # past DRAM
    dma(DmaKind.LOAD_ACC, CFG.dram_words - 4, 0, 2, stride=1),
    dma(DmaKind.STORE_CBUF, 0, CFG.cbuf_depth - 1, 2),
    dma(DmaKind.LOAD_ACC, 0, CFG.acc_depth - 1, 2),
    (Opcode.WLOAD, dict(w_addr=CFG.cbuf_depth - R + 1, bank=0)),
    (Opcode.MATMUL, dict(act_addr=CFG.cbuf_depth - 1, rows=2, acc_addr=0)),
    (Opcode.MATMUL, dict(act_addr=0, rows=2, acc_addr=CFG.acc_depth - 1)),
    (Opcode.MATMUL, dict(act_addr=0, rows=0, acc_addr=0)),
    (Opcode.VRUN, dict(src=CFG.acc_depth - 1, rows=2, dst=0)),
    (Opcode.VRUN, dict(src=0, rows=1, dst=0, bias_addr=CFG.acc_depth)),
    (Opcode.VRUN, dict(src=0, rows=2, dst=CFG.acc_depth - 1, to_acc=1)),
    (Opcode.VRUN, dict(src=0, rows=2, dst=CFG.cbuf_depth - 1)),
])
def test_addr_range(op, fields):
    program = serial(NOP, (op, fields))
    result, _ = faulting(words_of(program))
    assert (result.error, result.fault_pc) == (ErrorCode.ADDR_RANGE, 1)
    assert result.fault_cycle == result.cycles == program[1].cycle


def test_dmas_apart_only_in_dram_addr():
    """The timing pass prepares DMAs that differ only in ``dram_addr`` once and moves
    them: each keeps its own effects, and the one that runs past the DRAM faults
    ADDR_RANGE with its own range."""
    last = CFG.dram_words - 1
    ops = [dma(DmaKind.LOAD_CBUF, a, 0, 3, stride=5) for a in (0, 40, 7, 40, last - 10)]
    ops += [dma(DmaKind.STORE_ACC, a, 1, 2) for a in (100, 300)]
    program = serial(*ops, dma(DmaKind.LOAD_CBUF, last - 4, 0, 3, stride=5))
    timeline = golden.check(CFG, program)
    assert timeline.fault == (ErrorCode.ADDR_RANGE, len(ops), program[-1].cycle)
    assert f"dram range [{last - 4}, {last + 7})" in timeline.fault_reason
    for ins, fx in zip(timeline.issued, timeline.effects, strict=True):
        want = SPEC[ins.op].effects(CFG, ins.fields)
        assert fx.accept == want.accept
        for got, touches in ((fx.reads, want.reads), (fx.writes, want.writes)):
            assert [(t.resource, t.addrs.tolist(), t.cycles.tolist()) for t in got] == \
                [(t.resource, t.addrs.tolist(), t.cycles.tolist()) for t in touches]


@pytest.mark.parametrize("index, value", [(len(fabric.muxes(CFG)), 0),
                                          (MUX["act_in[0][0]"].index, 2),
                                          (MUX["west_feed[0]"].index, 3)])
def test_cfg_range(index, value):
    program = serial(NOP, (Opcode.SETCFG, dict(index=index, value=value)))
    result, _ = faulting(words_of(program))
    assert (result.error, result.fault_pc, result.fault_cycle) == \
        (ErrorCode.CFG_RANGE, 1, program[1].cycle)


@pytest.mark.parametrize("prog_addr, error", [(CFG.dram_words - 6, ErrorCode.PROG_RANGE),
                                              (CFG.dram_words - 7, ErrorCode.PROG_RANGE),
                                              (CFG.dram_words - 8, ErrorCode.NONE)])
def test_prog_range(prog_addr, error):
    """A program longer than the instruction memory is fetched from DRAM: PROG_RANGE
    at cycle 0 if its region (two words an instruction on tiny) runs past the end."""
    cfg = CFG.replace(imem_depth=2)
    program = [Instr(NOP[0], 10 * k, NOP[1]) for k in range(4)]   # fetched in time
    result = golden.run(cfg, Loadable.for_chip(cfg, isa.to_bytes(words_of(program)),
                                               fresh_dram(), prog_addr))
    expected = (error, 0, 0, 0) if error else (error, 0, 0, 4)
    assert (result.error, result.fault_pc, result.fault_cycle, result.issued) == expected


def test_fault_order_illegal_before_late():
    words = words_of([Instr(NOP[0], 5, NOP[1]), Instr(NOP[0], 5, NOP[1])])
    words[1] = with_opcode(words[1], 0)
    result, _ = faulting(words)
    assert result.error is ErrorCode.ILLEGAL_OPCODE


def test_empty_program_takes_no_cycles():
    result, _ = faulting([])
    assert (result.error, result.cycles) == (ErrorCode.NONE, 0)


# -- ISA -----------------------------------------------------------------------------
@pytest.mark.parametrize("ins", [
    Instr(Opcode.DMA, 12345, dict(kind=DmaKind.STORE_ACC, dram_addr=(1 << 24) - 1,
                                  dram_stride=65535, buf_addr=7, rows=3)),
    Instr(Opcode.WLOAD, 0, dict(w_addr=65535, bank=1)),
    Instr(Opcode.MATMUL, (1 << 32) - 1, dict(act_addr=1, rows=2, acc_addr=4095,
                                             accumulate=1, bank=0)),
    Instr(Opcode.VRUN, 9, dict(src=1, rows=2, dst=3, bias_addr=4, use_bias=1, to_acc=0,
                               requant=1, relu=1, mult=65535, shift=63, zp=255)),
    Instr(Opcode.SETCFG, 1, dict(index=127, value=15)),
])
def test_encode_decode_disassemble(ins):
    word = isa.encode(ins)
    back = isa.decode(word)
    assert back.op is ins.op and back.cycle == ins.cycle
    assert {k: back.fields[k] for k in ins.fields} == ins.fields
    assert all(v == 0 for k, v in back.fields.items() if k not in ins.fields)
    text = disasm.disassemble(isa.to_bytes([word]))
    assert ins.op.name in text and str(ins.cycle) in text


def test_encode_rejects_oversized_fields():
    with pytest.raises(isa.EncodingError, match="rows"):
        isa.encode(Instr(Opcode.MATMUL, 0, dict(rows=1 << 16)))


# -- the golden model checks timing itself ----------------------------------------------
def test_matmul_before_its_weights_are_in_is_a_hazard():
    program = gemm_program()
    wload, mm = program[-2], program[-1]
    early = [*program[:-1], Instr(Opcode.MATMUL, wload.cycle + timing.weight_shifts(CFG) - 1,
                                  mm.fields)]
    with pytest.raises(golden.GoldenError, match=r"read before write: pc 2 reads wbank1"):
        golden.run(CFG, Loadable.for_chip(CFG, image(early), fresh_dram()))
    on_time = [*program[:-1], Instr(Opcode.MATMUL, wload.cycle + timing.weight_shifts(CFG),
                                    mm.fields)]
    assert golden.run(CFG, Loadable.for_chip(CFG, image(on_time),
                                             fresh_dram())).error is ErrorCode.NONE


def test_store_before_the_vector_unit_wrote_is_a_hazard():
    load = Instr(Opcode.DMA, 0, dma(DmaKind.LOAD_ACC, 0, 0, 4)[1])
    t = timing.done(CFG, load)
    vrun = Instr(Opcode.VRUN, t, dict(src=0, rows=4, dst=16, bias_addr=0, use_bias=0,
                                      to_acc=0, requant=0, relu=0, mult=0, shift=0, zp=0))
    store = dma(DmaKind.STORE_CBUF, 100, 16, 4)[1]
    # the vector unit writes CBUF row 16 in cycle t+6; a store reads it in its t+1
    with pytest.raises(golden.GoldenError, match=rf"cbuf\[16\] in cycle {t + 6}"):
        golden.run(CFG, Loadable.for_chip(
            CFG, image([load, vrun, Instr(Opcode.DMA, t + 5, store)]), fresh_dram()))
    assert golden.run(CFG, Loadable.for_chip(
        CFG, image([load, vrun, Instr(Opcode.DMA, t + 6, store)]), fresh_dram())).error \
        is ErrorCode.NONE


# A reset clears no memory: a program that reads a CBUF, ACC or weight-bank row it did
# not write would read what the program before it left there (the data pass's zeros
# are not the chip's). Each case: the program, the same with the rows written, and
# what the error must say.
def _mm(bank, accumulate=0):
    return Opcode.MATMUL, dict(act_addr=0, rows=4, acc_addr=0, accumulate=accumulate,
                               bank=bank)


def _vrun(src):
    return Opcode.VRUN, dict(src=src, rows=4, dst=16, bias_addr=0, use_bias=0, to_acc=0,
                             requant=0, relu=0, mult=0, shift=0, zp=0)


_LOAD_W = [dma(DmaKind.LOAD_CBUF, 0, 0, R), (Opcode.WLOAD, dict(w_addr=0, bank=0))]
UNWRITTEN = {
    "store of CBUF rows past those loaded": (
        [dma(DmaKind.LOAD_CBUF, 0, 0, 4), dma(DmaKind.STORE_CBUF, 100, 0, 6)],
        [dma(DmaKind.LOAD_CBUF, 0, 0, 6), dma(DmaKind.STORE_CBUF, 100, 0, 6)],
        ["unwritten read: pc 1 reads cbuf[4] in cycle", "(and 1 more of its rows)"]),
    "weight load of a block one row short": (
        [dma(DmaKind.LOAD_CBUF, 0, 0, R - 1), (Opcode.WLOAD, dict(w_addr=0, bank=0))],
        _LOAD_W, [f"pc 1 reads cbuf[{R - 1}]", "a reset does not clear the CBUF"]),
    "MATMUL on a bank never loaded": (
        [*_LOAD_W, _mm(bank=1)], [*_LOAD_W, _mm(bank=0)],
        ["pc 2 reads wbank1", "weight bank 1"]),
    "accumulate onto ACC rows nothing wrote": (
        [*_LOAD_W, _mm(bank=0, accumulate=1)],
        [*_LOAD_W, _mm(bank=0), _mm(bank=0, accumulate=1)],
        ["pc 2 reads acc[0]", "the ACC"]),
    "VRUN of ACC rows nothing wrote": (
        [*_LOAD_W, _mm(bank=0), _vrun(src=2)], [*_LOAD_W, _mm(bank=0), _vrun(src=0)],
        ["pc 3 reads acc[4]", "the ACC"]),
}


def test_what_the_memories_held_at_the_start_changes_nothing_a_program_reads():
    """The data pass started from other CBUF, ACC and weight-bank contents (as after
    another program) computes the same for a program that writes what it reads."""
    dram = fresh_dram()
    program = [*gemm_program(), *serial(dma(DmaKind.STORE_ACC, 200, 0, 5))]
    program = serial(*[(i.op, i.fields) for i in program])
    clean = run(program, dram)
    held = {"cbuf": rng.integers(-128, 128, clean.cbuf.shape),
            "acc": rng.integers(-(1 << 31), 1 << 31, clean.acc.shape),
            "banks": rng.integers(-128, 128, (2, R, C))}
    dirty = golden.run(CFG, Loadable.for_chip(CFG, image(program), dram), memories=held)
    assert np.array_equal(dirty.dram, clean.dram)
    assert np.array_equal(dirty.acc[:5], clean.acc[:5])
    with pytest.raises(ValueError, match="'acc' must be"):
        golden.run(CFG, Loadable.for_chip(CFG, image(program),
                                          dram), memories={"acc": held["cbuf"]})


@pytest.mark.parametrize("case", list(UNWRITTEN))
def test_a_read_of_a_row_no_instruction_wrote_is_an_error(case):
    undefined, defined, words = UNWRITTEN[case]
    with pytest.raises(golden.GoldenError) as err:
        golden.run(CFG, Loadable.for_chip(CFG, image(serial(*undefined)), fresh_dram()))
    for w in words:
        assert w in str(err.value), (w, str(err.value))
    assert [h.rule for h in golden.check(CFG, serial(*undefined)).hazards] == \
        ["unwritten read"]
    assert run(serial(*defined), fresh_dram()).cycles


def test_setcfg_inside_a_window_faults_and_before_it_routes():
    """A MATMUL issued at t passes west_feed from t+2; a SETCFG at t+1 (after the
    MATMUL, before its window) sets what it sees, one at t+2 is CFG_IN_USE."""
    dram = fresh_dram()
    program = gemm_program()
    t = program[-1].cycle
    swap = [(MUX["west_feed[0]"].index, MUX["west_feed[0]"].value_of("cbuf.g1")),
            (MUX["west_feed[1]"].index, MUX["west_feed[1]"].value_of("cbuf.g0"))]
    before = program + [Instr(Opcode.SETCFG, t + 1, isa.setcfg_fields(swap))]
    result = run(before, dram)
    act, w = operands(dram)
    assert np.array_equal(result.acc[:5], groups(act, [1, 0]) @ w)
    inside = program + [Instr(Opcode.SETCFG, t + 2, isa.setcfg_fields(swap))]
    result = golden.run(CFG, Loadable.for_chip(CFG, image(inside), dram))
    assert (result.error, result.fault_pc, result.fault_cycle, result.cycles) == \
        (ErrorCode.CFG_IN_USE, len(program), t + 2, t + 2)
    last_row = program[-1].cycle + 2 + 5 - 1     # the window's last cycle: u = it is legal
    after = program + [Instr(Opcode.SETCFG, last_row, isa.setcfg_fields(swap))]
    assert golden.run(CFG, Loadable.for_chip(CFG, image(after), dram)).error is ErrorCode.NONE


# -- the counters while the program runs ----------------------------------------------------
def test_counters_sampled_while_running():
    """What the counter registers read at a cycle of the run: a load's words from the
    cycle after each is read (cycles 1..13), a MATMUL's rows from the cycle after each
    is fed (two cycles after its CBUF read), the cycle counter itself; past the end,
    the run's totals."""
    program = gemm_program()
    mm = program[-1]
    at = [0, 1, 2, 13, 14, mm.cycle + 2, mm.cycle + 3, mm.cycle + 7, mm.cycle + 8, 10**6]
    result = golden.run(CFG, Loadable.for_chip(CFG, image(program), fresh_dram()), sample_at=at)
    end = timing.run_cycles(CFG, program)
    got = [(s["cycles"], s["dram_rd_bytes"] // R, s["macs"] // (R * C))
           for s in result.samples]
    assert got == [(0, 0, 0), (1, 0, 0), (2, 1, 0), (13, 12, 0), (14, 13, 0),
                   (mm.cycle + 2, 13, 0), (mm.cycle + 3, 13, 1), (mm.cycle + 7, 13, 5),
                   (mm.cycle + 8, 13, 5), (end, 13, 5)]
    assert all(s["dram_wr_bytes"] == s["fetch_rd_bytes"] == s["ubuf_wr_bytes"]
               == s["ubuf_rd_bytes"] == 0 for s in result.samples)
    assert set(result.samples[0]) == set(golden.SAMPLED)
    assert golden.run(CFG, Loadable.for_chip(CFG, image(program), fresh_dram())).samples == []


@pytest.mark.parametrize("case", sorted(COUNTING))
def test_samples_add_up_to_the_run(case):
    """Sampled every few cycles, every counter starts at 0, never falls, and reads the
    run's total from its end on; the cycle counter reads the cycle, then the end."""
    compiled = COUNTING[case]()
    end = compiled.predicted_cycles
    at = sample_cycles(end)
    result = golden.run(CFG, compiled.loadable, sample_at=at)
    totals = {"cycles": result.cycles, "macs": result.macs,
              "dram_rd_bytes": result.dram_bytes_read,
              "dram_wr_bytes": result.dram_bytes_written,
              "fetch_rd_bytes": result.fetch_bytes_read,
              "ubuf_wr_bytes": result.ubuf_bytes_written,
              "ubuf_rd_bytes": result.ubuf_bytes_read}
    assert result.samples[0] == dict.fromkeys(golden.SAMPLED, 0)
    assert [s["cycles"] for s in result.samples] == [min(c, end) for c in at]
    for name in golden.SAMPLED:
        values = [s[name] for s in result.samples]
        assert values == sorted(values), name
        assert all(v == totals[name] for c, v in zip(at, values) if c >= end), name
    # the totals are the compiler's, and the program moves what it is here for
    assert (totals["fetch_rd_bytes"], totals["ubuf_wr_bytes"], totals["ubuf_rd_bytes"]) \
        == (compiled.fetch_bytes_read, compiled.ubuf_bytes_written,
            compiled.ubuf_bytes_read)
