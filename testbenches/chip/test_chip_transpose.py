"""The seed-004 transpose on the chip (``tiny``): a block read from the CBUF's row
partitions becomes the stationary weights through the west weight load
(``w_in = west``), an identity held in the CBUF streams through, and the accumulator
rows go back through the vector unit into the CBUF at a new address, transposed.

The seed's Fig. 3: partitions 0..3 hold 1-4, 5-8, 9-12, 13-16 from address 0; after
the transpose partitions 0..3 hold 1,5,9,13 / 2,6,10,14 / 3,7,11,15 / 4,8,12,16 from
the new address. Results equal numpy and the golden model; cycles equal the
schedule's prediction.

Then the compiler's transposes (``Transpose``: 64x64, 1000x37, random shapes, between
dense layers; 256x256 on base in ``make regress``) and ``a @ bᵀ`` (``MatMulT``, b's rows
loaded as array columns) on the RTL, their block counts, and ``make bench``'s
programs on the golden model."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch import fabric, isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Opcode
from systolica.arch.loadable import Loadable
from systolica.compiler.microops.ir import make
from systolica.compiler.scheduling.reconfigure import add_updates
from systolica.compiler.scheduling.schedule import schedule

from chip_runs import run_on_rtl
from tiers import sample

CFG = preset("tiny")
BASE = preset("base")
R = CFG.rows
BANK = CFG.cbuf_bank_rows
A_AT, I_AT, OUT_AT = 0, BANK, 2 * BANK         # CBUF rows, one bank each
WEST = {**{f"w_in[{i}][{j}]": "west" for i in range(CFG.tile_rows)
           for j in range(CFG.tile_cols)}}


def fig3_block() -> np.ndarray:
    """CBUF rows 0..3 as the seed stores its 4x4 matrix: partition p holds its row p,
    element a at address a, so CBUF row a is the matrix's column a."""
    seed = np.arange(1, 17, dtype=np.int8).reshape(4, 4)     # seed rows = partitions
    return seed.T.copy()                                      # [address, partition]


def transpose_ops(rows: int, cols: int, *, west=WEST):
    """Load a ``rows x cols`` block (CBUF rows x partitions) and an identity, transpose
    on the array, store the ``cols x rows`` result at DRAM word 100."""
    ident = make(CFG, Opcode.DMA, kind=DmaKind.LOAD_CBUF, dram_addr=16, dram_stride=1,
                 buf_addr=I_AT, rows=R)
    # all R rows: the rows past a ragged block are zeros, whatever an earlier program
    # in the same simulator left in the CBUF
    block = make(CFG, Opcode.DMA, kind=DmaKind.LOAD_CBUF, dram_addr=0, dram_stride=1,
                 buf_addr=A_AT, rows=R)
    wload = make(CFG, Opcode.WLOAD, w_addr=A_AT, bank=0)
    wload.needs = dict(west)
    mm = make(CFG, Opcode.MATMUL, act_addr=I_AT, rows=cols, acc_addr=0, accumulate=0,
              bank=0)
    vrun = make(CFG, Opcode.VRUN, src=0, rows=cols, dst=OUT_AT, to_acc=0)
    store = make(CFG, Opcode.DMA, kind=DmaKind.STORE_CBUF, dram_addr=100, dram_stride=1,
                 buf_addr=OUT_AT, rows=cols)
    ops = [ident, block, wload, mm, vrun, store]
    cycles, updates = add_updates(CFG, ops, schedule(CFG, ops))
    return sorted([op.instr(c) for op, c in zip(ops, cycles)] + [u for u, _ in updates],
                  key=lambda i: i.cycle)


def dram_with(block: np.ndarray) -> np.ndarray:
    dram = np.zeros((128, R), np.uint8)
    dram[:block.shape[0], :block.shape[1]] = block.view(np.uint8)
    dram[16:16 + R] = np.eye(R, dtype=np.uint8)
    return dram


def run(block: np.ndarray, west=WEST):
    program = transpose_ops(*block.shape, west=west)
    image = isa.to_bytes([isa.encode(i) for i in program])
    dram = dram_with(block)
    return program, image, dram


@pytest.mark.rtl
def test_fig3_block_comes_back_transposed():
    block = fig3_block()
    program, image, dram = run(block)
    res = run_on_rtl(CFG, image, dram, readback=[(100, 4)])
    assert res.error_name == "NONE"
    got = res.readback[0].reshape(4, R).view(np.int8)
    # partition p of the result (column p of the CBUF rows) holds seed row p's column
    assert [list(got[:, p]) for p in range(4)] == [[1, 5, 9, 13], [2, 6, 10, 14],
                                                   [3, 7, 11, 15], [4, 8, 12, 16]]
    np.testing.assert_array_equal(got[:, :4], block.T)
    gold = golden.run(CFG, Loadable.for_chip(CFG, image, dram))
    np.testing.assert_array_equal(got, gold.dram[100:104].view(np.int8))
    assert res.cycles == gold.cycles == timing.run_cycles(CFG, program)


def test_fig3_on_the_golden_model():
    block = fig3_block()
    program, image, dram = run(block)
    got = golden.run(CFG, Loadable.for_chip(CFG, image, dram)).dram[100:104].view(np.int8)
    np.testing.assert_array_equal(got[:, :4], block.T)


def test_the_north_load_does_not_transpose():
    """The same program with the default weight routing computes block @ I (no
    transpose): the west lane is what transposes."""
    block = fig3_block()
    program, image, dram = run(block, west={})
    got = golden.run(CFG, Loadable.for_chip(CFG, image, dram)).dram[100:104].view(np.int8)
    np.testing.assert_array_equal(got[:, :4], block)


def test_a_west_tile_behind_a_north_tile_gets_zeros():
    """Tile (0, 1) takes the west lane but tile (0, 0) does not pass it on: tile
    (0, 1)'s weights are zero, tile (1, *)'s come from the west."""
    rng = np.random.default_rng(5)
    block = rng.integers(-128, 128, (R, R), dtype=np.int8)
    west = {**WEST, "w_in[0][0]": "lane"}
    program, image, dram = run(block, west=west)
    got = golden.run(CFG, Loadable.for_chip(CFG, image, dram)).dram[100:100 + R].view(np.int8)
    n = CFG.tile_size
    want = block.T.copy()
    want[:n, n:] = 0                                 # tile (0, 1): gated
    want[:n, :n] = block[:n, :n]                     # tile (0, 0): the north chain
    np.testing.assert_array_equal(got, want)


@pytest.mark.rtl
def test_full_and_mixed_blocks_on_the_rtl():
    """A full 8x8 block, a ragged 5x3 one, and a mixed routing (one tile on the north
    lane, the gate in front of the tile east of it) on the RTL, against the golden
    model (and numpy for the plain transposes)."""
    from chip_runs import run_many_on_rtl
    rng = np.random.default_rng(11)
    full = rng.integers(-128, 128, (R, R), dtype=np.int8)
    ragged = rng.integers(-128, 128, (5, 3), dtype=np.int8)
    cases = [(full, WEST), (ragged, WEST), (full, {**WEST, "w_in[0][0]": "lane",
                                                   "w_in[1][1]": "zero"})]
    jobs, golds = [], []
    for block, west in cases:
        program, image, dram = run(block, west=west)
        jobs.append(dict(program=image, dram=dram, readback=[(100, R)]))
        golds.append((golden.run(CFG, Loadable.for_chip(CFG, image, dram)), program))
    results = run_many_on_rtl(CFG, jobs)
    for (block, west), res, (gold, program) in zip(cases, results, golds):
        assert res.error_name == "NONE"
        rows, cols = block.shape
        got = res.readback[0].reshape(R, R).view(np.int8)
        np.testing.assert_array_equal(got[:cols], gold.dram[100:100 + cols].view(np.int8))
        if west is WEST:
            np.testing.assert_array_equal(got[:cols, :rows], block.T)
        assert res.cycles == gold.cycles == timing.run_cycles(CFG, program)


def test_west_is_a_source_of_every_tile_weight_input():
    table = fabric.by_name(CFG)
    for i in range(CFG.tile_rows):
        for j in range(CFG.tile_cols):
            assert table[f"w_in[{i}][{j}]"].sources == ("lane", fabric.ZERO, "west")
        assert table[f"west_wfeed[{i}]"].default == i


# -- compiled transposes (compiler/lowering/rules.py TransposeRule) -----------------------------
def transpose_graph(m: int, n: int, seed: int):
    from systolica.compiler import GraphBuilder
    rng = np.random.default_rng(seed)
    g = GraphBuilder(f"transpose_{m}x{n}")
    g.transpose(g.input(rng.integers(-128, 128, (m, n)), name="x"), name="t")
    return g.build()


def dense_transpose_dense():
    """A transpose between two dense layers, its result also a graph output: read and
    written on chip."""
    from systolica.compiler import GraphBuilder
    rng = np.random.default_rng(1)
    g = GraphBuilder("dense_transpose_dense")
    x = g.input(rng.integers(-128, 128, (12, 20)), name="x")
    h = g.dense(x, rng.integers(-128, 128, (20, 13)), mult=150, shift=15, name="h")
    t = g.transpose(h, name="t")
    g.dense(t, rng.integers(-128, 128, (12, 5)), out_dtype="int32", name="y")
    return g.build(t, "y")


def random_shapes(count: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for k in range(count):
        m, n = (int(v) for v in rng.integers(1, 70, 2))
        out[f"random_{m}x{n}"] = (lambda m=m, n=n, k=k: transpose_graph(m, n, 100 + k))
    return out


def qk_graph(m: int, k: int, n: int, seed: int, *, int8: bool = False):
    """``q @ kᵀ`` of two graph inputs (attention's scores), int32 or requantised and
    read by a dense layer."""
    from systolica.compiler import GraphBuilder
    rng = np.random.default_rng(seed)
    g = GraphBuilder(f"qk_{m}x{k}x{n}")
    q = g.input(rng.integers(-128, 128, (m, k)), name="q")
    key = g.input(rng.integers(-128, 128, (n, k)), name="k")
    if not int8:
        g.matmul_t(q, key, out_dtype="int32", name="s")
        return g.build()
    s_ = g.matmul_t(q, key, mult=100, shift=14, zp=3, relu=True, name="s")
    g.dense(s_, rng.integers(-128, 128, (n, 6)), out_dtype="int32", name="y")
    return g.build(s_, "y")


def qk_on_chip_key():
    """``bᵀ`` where ``b`` is made on chip by a dense layer (its padding partitions hold
    its zero point; ``q``, a graph input, has zeros there)."""
    from systolica.compiler import GraphBuilder
    rng = np.random.default_rng(4)
    g = GraphBuilder("qk_on_chip_key")
    x = g.input(rng.integers(-128, 128, (11, 12)), name="x")
    q = g.input(rng.integers(-128, 128, (9, 12)), name="q")
    b = g.dense(x, rng.integers(-128, 128, (12, 12)), mult=100, shift=14, zp=-5, name="b")
    g.matmul_t(q, b, out_dtype="int32", name="s")
    return g.build()


COMPILED = {
    "64x64": lambda: transpose_graph(64, 64, 1),
    "qk_40x37x30": lambda: qk_graph(40, 37, 30, 5),
    "qk_16x24x10_int8": lambda: qk_graph(16, 24, 10, 6, int8=True),
    "qk_on_chip_key": qk_on_chip_key,
    "1000x37": lambda: transpose_graph(1000, 37, 2),
    "dense_transpose_dense": dense_transpose_dense,
    **random_shapes(4, 7),
}


@pytest.fixture(scope="module")
def compiled_runs():
    from chip_runs import compile_and_run_on_rtl
    return compile_and_run_on_rtl(CFG, COMPILED)


@pytest.mark.rtl
@pytest.mark.parametrize("name", list(COMPILED))
def test_compiled_transpose_matches_numpy_golden_and_prediction(compiled_runs, name):
    from chip_runs import assert_matches_prediction, assert_outputs_match
    compiled, res = compiled_runs[name]
    assert_outputs_match(CFG, compiled, res)
    assert_matches_prediction(CFG, compiled, res)


@pytest.mark.rtl
@pytest.mark.regress
def test_compiled_transpose_256x256():
    """On base: tiny's DRAM (16,384 words of 8 bytes) cannot hold a 256x256 input
    and output at once."""
    from chip_runs import assert_matches_prediction, assert_outputs_match, compile_and_run_on_rtl
    ((compiled, res),) = compile_and_run_on_rtl(
        BASE, {"256x256": lambda: transpose_graph(256, 256, 3)}).values()
    assert_outputs_match(BASE, compiled, res)
    assert_matches_prediction(BASE, compiled, res)


@pytest.mark.parametrize("m, n", [(1, 1), (8, 8), (9, 17), (1000, 37), (37, 1000)])
def test_block_count_is_the_seeds_k(m, n):
    """k = (floor((m-1)/p)+1) * (floor((n-1)/q)+1) blocks for p = q = R: one WLOAD, one
    identity MATMUL of the block's columns and one VRUN each."""
    from systolica.compiler.lowering.lower import lower
    ops = lower(CFG, transpose_graph(m, n, 0)).ops
    k = ((m - 1) // R + 1) * ((n - 1) // R + 1)
    by = {op: [o for o in ops if o.op is op] for op in (Opcode.WLOAD, Opcode.MATMUL,
                                                        Opcode.VRUN)}
    assert len(by[Opcode.WLOAD]) == len(by[Opcode.MATMUL]) == len(by[Opcode.VRUN]) == k
    assert sum(o.fields["rows"] for o in by[Opcode.MATMUL]) == n * ((m - 1) // R + 1)
    for o in by[Opcode.WLOAD]:
        assert all(o.needs[f"w_in[{i}][{j}]"] == "west" for i in range(CFG.tile_rows)
                   for j in range(CFG.tile_cols))


@pytest.mark.parametrize("m, n", sample([(1, 1), (5, 3), (64, 64), (300, 37), (37, 300)], 2))
def test_golden_model_agrees_with_numpy(m, n):
    from systolica.compiler import compile_network
    from systolica.compiler.graph import reference
    graph = transpose_graph(m, n, m + n)
    compiled = compile_network(CFG, graph)
    gold = golden.run(CFG, Loadable.for_chip(CFG, compiled.image, compiled.dram,
                                             compiled.prog_addr))
    got = compiled.results(gold.dram)["t"]
    np.testing.assert_array_equal(got, reference.outputs(graph)["t"])
    np.testing.assert_array_equal(got, graph.data["x"].T)
    assert gold.cycles == compiled.predicted_cycles


def test_bench_programs_transpose_on_the_golden_model():
    """``make bench``'s transpose programs (systolica/app/transpose_bench.py): the
    on-chip one and the DRAM round trip leave Xᵀ in DRAM; the on-chip one moves only
    the identity beyond the base program, and zeros to the rows past X that the
    last blocks' west loads read."""
    from systolica.app import transpose_bench
    from systolica.compiler.planning import layout
    x = np.random.default_rng(2).integers(-128, 128, (20, 11), dtype=np.int8)
    progs, image, (at, words) = transpose_bench.programs(CFG, x)
    runs = {}
    for name, program in progs.items():
        runs[name] = golden.run(CFG, Loadable.for_chip(
            CFG, isa.to_bytes([isa.encode(i) for i in program]), image))
        assert runs[name].cycles == timing.run_cycles(CFG, program)
    for name in ("on_chip", "dram_round_trip"):
        got = layout.unpack_int8(CFG, runs[name].dram[at:at + words], 11, 20)
        np.testing.assert_array_equal(got, x.T)
    moved = {k: r.dram_bytes_read + r.dram_bytes_written for k, r in runs.items()}
    # the identity, and the zeros past X's 20 rows (its last blocks' of 8 rows read 24)
    assert moved["on_chip"] - moved["base"] == R * R + (-20 % R) * R
    assert moved["dram_round_trip"] - moved["base"] == (2 * 20 + 3 * 11) * R


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (8, 8, 8), (5, 3, 2), (40, 37, 30),
                                     (130, 17, 21)])
def test_matmul_t_agrees_with_numpy_on_the_golden_model(m, k, n):
    """a @ bᵀ through west weight loads of b's rows (no transposed copy of b)."""
    from systolica.compiler import compile_network
    from systolica.compiler.graph import reference
    from systolica.compiler.lowering.lower import lower
    graph = qk_graph(m, k, n, m + k + n)
    compiled = compile_network(CFG, graph)
    gold = golden.run(CFG, Loadable.for_chip(CFG, compiled.image, compiled.dram,
                                             compiled.prog_addr))
    got = compiled.results(gold.dram)["s"]
    want = graph.data["q"].astype(np.int64) @ graph.data["k"].astype(np.int64).T
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, reference.outputs(graph)["s"])
    assert gold.cycles == compiled.predicted_cycles
    wloads = [o for o in lower(CFG, graph).ops if o.op is Opcode.WLOAD]
    assert wloads and all(o.needs["w_in[0][0]"] == "west" for o in wloads)


@pytest.mark.parametrize("chip", ["tiny", "tiny-tight", "base"])
@pytest.mark.parametrize("make_graph", [dense_transpose_dense, qk_on_chip_key,
                                        lambda: qk_graph(16, 24, 10, 6, int8=True)],
                         ids=["dense_transpose_dense", "qk_on_chip_key", "qk_int8"])
def test_graphs_with_transposes_compile_for_every_chip(chip, make_graph):
    """Between other layers (the pipeliner hoists a layer's first loads into the one
    before: the identity's rows may still be another region's there), with tight
    configuration-update limits (the west routing takes several SETCFGs), and on base."""
    from systolica.compiler import compile_network
    from systolica.compiler.graph import reference
    cfg = (preset("tiny").replace(name="tiny-tight", config_update_interval=2,
                                  max_config_updates_per_cycle=2, power_domain_budget=1)
           if chip == "tiny-tight" else preset(chip))
    graph = make_graph()
    compiled = compile_network(cfg, graph)
    gold = golden.run(cfg, Loadable.for_chip(cfg, compiled.image, compiled.dram,
                                             compiled.prog_addr))
    got = compiled.results(gold.dram)
    for name, want in reference.outputs(graph).items():
        np.testing.assert_array_equal(got[name], want, err_msg=name)
    assert gold.cycles == compiled.predicted_cycles


def _fill_memories(cfg, seed: int):
    """A program that leaves random data in every CBUF and ACC row and both weight
    banks (what the chip keeps for the next program: a reset clears no memory), and
    its DRAM image."""
    words = cfg.cbuf_physical_rows + cfg.acc_depth * cfg.acc_row_words
    dram = np.random.default_rng(seed).integers(0, 256, (words, cfg.rows), dtype=np.uint8)
    ops = [make(cfg, Opcode.DMA, kind=DmaKind.LOAD_CBUF, dram_addr=0, dram_stride=1,
                buf_addr=0, rows=cfg.cbuf_physical_rows),
           make(cfg, Opcode.DMA, kind=DmaKind.LOAD_ACC, dram_addr=cfg.cbuf_physical_rows,
                dram_stride=cfg.acc_row_words, buf_addr=0, rows=cfg.acc_depth),
           *[make(cfg, Opcode.WLOAD, w_addr=bank * cfg.rows, bank=bank) for bank in (0, 1)]]
    cycles, updates = add_updates(cfg, ops, schedule(cfg, ops))
    program = sorted([op.instr(c) for op, c in zip(ops, cycles)] + [u for u, _ in updates],
                     key=lambda i: i.cycle)
    return program, dram


@pytest.mark.rtl
def test_a_transpose_after_a_program_that_filled_the_memories():
    """Two programs back to back in one simulator: one leaves random data in the CBUF,
    the ACC and the weight banks, then an NCHW map of 3 channels goes through a
    convolution and back to NCHW (ragged transpose blocks both ways). The second's
    DRAM words (their padding partitions too) are the golden model's from zeroed
    memories: it reads nothing the first left."""
    from systolica.compiler import GraphBuilder, compile_network
    from systolica.compiler.graph import reference

    from chip_runs import rtl_job, run_many_on_rtl
    rng = np.random.default_rng(8)
    g = GraphBuilder("nchw_conv_after")
    x = g.input(rng.integers(-128, 128, (1, 3, 4, 5), dtype=np.int8), name="x",
                layout="NCHW")
    g.nchw(g.conv2d(x, rng.integers(-20, 20, (3, 3, 3, 6), dtype=np.int8), pads=1,
                    shift=6, name="c"), name="y")
    fill, fill_dram = _fill_memories(CFG, 7)
    compiled = compile_network(CFG, g.build())
    (at, words), = compiled.dram_map.outputs.values()
    first, second = run_many_on_rtl(CFG, [
        rtl_job(CFG, fill, fill_dram, readback=[(0, 1)], name="fill_memories"),
        rtl_job(CFG, compiled, readback=[(at, words)], name="nchw_conv_after")])
    assert first.error_name == second.error_name == "NONE"
    gold = golden.run(CFG, compiled.loadable)
    np.testing.assert_array_equal(second.readback[0], gold.dram[at:at + words])
    assert second.cycles == gold.cycles == compiled.predicted_cycles
    want = reference.outputs(compiled.graph)
    image = np.zeros((at + words, CFG.rows), np.uint8)
    image[at:at + words] = second.readback[0]
    np.testing.assert_array_equal(compiled.results(image)["y"], want["y"])
