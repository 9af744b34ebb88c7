"""Zero fill (compiler/lowering/zero_fill.py): every CBUF row a west load reads is
written before it, so a compiled program computes the same whatever the CBUF, ACC
and weight banks held when it started (a reset clears no memory: on the chip they
hold what the program before left)."""

import numpy as np
import pytest

from systolica import golden
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Opcode
from systolica.compiler import GraphBuilder, compile_network
from systolica.compiler.graph import reference
from systolica.compiler.scheduling.verify import ScheduleError


def transpose_3x5():
    """The smallest case: a [3, 5] input transposed. Its one block has 3 rows; the west
    load reads R, and the rows past the 3 land in partitions 3.. of every output
    word."""
    g = GraphBuilder("transpose_3x5")
    g.transpose(g.input(np.arange(15, dtype=np.int8).reshape(3, 5) - 7, name="x"),
                name="t")
    return g.build()


def nchw_conv():
    """An NCHW map of 3 channels into a 3x3 convolution (the input transposed to NHWC
    on the chip, in the replicated layout), and its output back to NCHW (a map of 4
    columns: blocks of 4 rows)."""
    rng = np.random.default_rng(1)
    g = GraphBuilder("nchw_conv")
    x = g.input(rng.integers(-128, 128, (1, 3, 5, 4), dtype=np.int8), name="x",
                layout="NCHW")
    y = g.conv2d(x, rng.integers(-20, 20, (3, 3, 3, 6), dtype=np.int8), pads=1, mult=1,
                 shift=6, name="c")
    g.nchw(y, name="y")
    return g.build()


def matmul_t_ragged():
    """``a @ bᵀ`` with ``b`` of 5 rows: the west load of its one block reads past
    them."""
    rng = np.random.default_rng(2)
    g = GraphBuilder("matmul_t_ragged")
    g.matmul_t(g.input(rng.integers(-128, 128, (6, 8)), name="a"),
               g.input(rng.integers(-128, 128, (5, 8)), name="b"),
               out_dtype="int32", name="s")
    return g.build()


CASES = {"transpose_3x5": transpose_3x5, "nchw_conv": nchw_conv,
         "matmul_t_ragged": matmul_t_ragged}
CHIPS = ("tiny", "tiny_tall", "tiny_wide")


def _random_memories(cfg, seed):
    rng = np.random.default_rng(seed)
    return {"cbuf": rng.integers(-128, 128, (cfg.cbuf_physical_rows, cfg.rows)),
            "acc": rng.integers(-(1 << 31), 1 << 31, (cfg.acc_depth, cfg.cols)),
            "banks": rng.integers(-128, 128, (2, cfg.rows, cfg.cols))}


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("case", list(CASES))
def test_the_result_does_not_depend_on_what_the_memories_held(case, chip):
    cfg = preset(chip)
    compiled = compile_network(cfg, CASES[case]())
    clean = golden.run(cfg, compiled.loadable)
    assert clean.cycles == compiled.predicted_cycles
    want = reference.outputs(compiled.graph)
    got = compiled.results(clean.dram)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    for seed in range(2):
        dirty = golden.run(cfg, compiled.loadable, memories=_random_memories(cfg, seed))
        # every word, the outputs' padding partitions too
        np.testing.assert_array_equal(dirty.dram, clean.dram)


@pytest.mark.parametrize("case", list(CASES))
def test_without_the_zero_fill_the_verifier_refuses_the_program(case, monkeypatch):
    """What the golden model's unwritten-read rule caught: the same programs without
    the fills read CBUF rows nothing wrote."""
    from systolica.compiler.lowering import chain, lower
    from systolica.compiler.lowering.maps import network
    for module in (lower, network, chain):
        monkeypatch.setattr(module, "zero_fill", lambda cfg, blocks, em, plan: plan)
    with pytest.raises(ScheduleError, match=r"WLOAD .* breaks 'unwritten read': .* reads cbuf"):
        compile_network(preset("tiny"), CASES[case]())


def test_a_ragged_block_is_zeroed_past_its_rows_before_its_west_load():
    """The 3x5 transpose's block loads 3 rows into its slot; one DMA of the zero word
    at stride 0 writes the slot's other R - 3 rows before the west load reads them,
    so the output words' partitions 3.. are 0."""
    cfg = preset("tiny")
    R = cfg.rows
    compiled = compile_network(cfg, transpose_3x5())
    program = compiled.program
    pc = next(k for k, i in enumerate(program) if i.op is Opcode.WLOAD)
    w_addr = program[pc].fields["w_addr"]
    dmas = [i.fields for i in program[:pc] if i.op is Opcode.DMA
            and i.fields["kind"] == DmaKind.LOAD_CBUF]
    assert dict(buf_addr=w_addr, rows=3) in [{k: f[k] for k in ("buf_addr", "rows")}
                                             for f in dmas]
    zeros = compiled.dram_map.params[("", "zeros")][0]
    assert np.all(compiled.dram[zeros] == 0)
    fills = [f for f in dmas if f["dram_stride"] == 0]
    assert [(f["dram_addr"], f["buf_addr"], f["rows"]) for f in fills] == \
        [(zeros, w_addr + 3, R - 3)]
    (at, words), = compiled.dram_map.outputs.values()
    out = golden.run(cfg, compiled.loadable).dram[at:at + words]
    assert out.shape == (5, R) and not out[:, 3:].any()


def test_a_square_transpose_of_whole_blocks_needs_no_fill():
    """On a square grid a transpose of whole blocks reads only rows it loads: no zero
    word, no fill (its program is what it was)."""
    g = GraphBuilder("transpose_16x8")
    g.transpose(g.input(np.ones((16, 8), dtype=np.int8), name="x"), name="t")
    compiled = compile_network(preset("tiny"), g.build())
    assert ("", "zeros") not in compiled.dram_map.params
    assert not [i for i in compiled.program
                if i.op is Opcode.DMA and i.fields["dram_stride"] == 0]
