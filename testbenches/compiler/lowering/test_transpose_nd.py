"""N-D transposes (``Transpose(perm)``) and NCHW at a network's boundaries
(docs/contract.md, "Transposes"): a permutation that moves the last axis is a batch of
2-D block transposes on the array with strided DMAs, one that keeps it a copy of rows
through the array. Results equal ``np.transpose`` (called here, not through the
compiler's reference) on the golden model with predicted cycles, and on the RTL
(``tiny``) for the shapes of ``RTL_CASES``."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from systolica import golden
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Opcode
from systolica.arch.loadable import Loadable
from systolica.compiler import GraphBuilder, compile_network
from systolica.compiler.graph import reference
from systolica.compiler.graph.graph import NCHW_TO_NHWC, NHWC_TO_NCHW
from systolica.compiler.lowering.lower import lower
from systolica.compiler.lowering.transpose import TransposeRule
from systolica.compiler.planning.permute import plan_pieces as plan

from tiers import sample

TINY = preset("tiny")
R = TINY.rows


def perm_graph(shape, perm, seed=0):
    rng = np.random.default_rng(seed)
    g = GraphBuilder(f"perm_{'x'.join(map(str, shape))}")
    x = g.input(rng.integers(-128, 128, shape), name="x")
    g.transpose(x, perm, name="t")
    return g.build()


def run_golden(cfg, graph):
    compiled = compile_network(cfg, graph)
    gold = golden.run(cfg, Loadable.for_chip(cfg, compiled.image, compiled.dram,
                                             compiled.prog_addr))
    assert gold.cycles == compiled.predicted_cycles
    return compiled, compiled.results(gold.dram)


# (shape, perm): batched 2-D, every 3-D perm of one shape, ragged blocks, size-1 axes
# moved, NCHW <-> NHWC, a 6-D one
CASES = [((4, 20, 13), (0, 2, 1)), ((4, 20, 13), None),
         *[((3, 5, 7), p) for p in itertools.permutations(range(3))],
         ((2, 3, 4, 5), (3, 1, 0, 2)), ((1, 8, 16, 16), NCHW_TO_NHWC),
         ((1, 16, 16, 8), NHWC_TO_NCHW), ((1, 20, 9), (1, 0, 2)), ((20, 1, 9), (0, 2, 1)),
         ((20, 9, 1), (0, 2, 1)), ((12, 30), (0, 1)), ((2, 3, 2, 3, 2, 17), (5, 3, 1, 0, 2, 4)),
         ((3, 40, 20), (2, 1, 0)), ((2, 3, 4), (-1, 0, 1))]


@pytest.mark.parametrize("shape, perm", sample(CASES, 3), ids=lambda v: str(v).replace(" ", ""))
def test_permutation_matches_numpy_on_the_golden_model(shape, perm):
    graph = perm_graph(shape, perm, seed=len(shape))
    _, got = run_golden(TINY, graph)
    x = graph.data["x"]
    want = np.transpose(x, perm) if perm is not None else np.swapaxes(x, -1, -2)
    np.testing.assert_array_equal(got["t"], want)
    np.testing.assert_array_equal(reference.outputs(graph)["t"], want)


@pytest.mark.parametrize("chip", ["tiny_tall", pytest.param("base", marks=pytest.mark.slow)])
@pytest.mark.parametrize("shape, perm", [((4, 20, 13), (0, 2, 1)), ((3, 5, 7), (1, 0, 2)),
                                         ((2, 3, 4, 5), (3, 1, 0, 2)),
                                         ((3, 40, 20), (2, 1, 0))])
def test_permutation_on_other_chips(chip, shape, perm):
    """On a tall array (sub-blocks: a transpose's block rows, a copy's identity columns)
    and on base."""
    graph = perm_graph(shape, perm, seed=3)
    _, got = run_golden(preset(chip), graph)
    np.testing.assert_array_equal(got["t"], np.transpose(graph.data["x"], perm))


def test_random_permutations():
    rng = np.random.default_rng(11)
    for _ in range(8):
        rank = int(rng.integers(2, 6))
        shape = tuple(int(d) for d in rng.integers(1, 7, rank))
        perm = tuple(int(a) for a in rng.permutation(rank))
        graph = perm_graph(shape, perm, seed=int(rng.integers(1000)))
        _, got = run_golden(TINY, graph)
        np.testing.assert_array_equal(got["t"], np.transpose(graph.data["x"], perm),
                                      err_msg=f"{shape} {perm}")


def test_batched_transpose_is_b_2d_transposes():
    """[B, M, N] -> [B, N, M]: B times the 2-D transpose's k blocks, each block's rows
    loaded by one DMA and its transpose stored by one, both contiguous."""
    B, M, N = 4, 20, 13
    ops = lower(TINY, perm_graph((B, M, N), (0, 2, 1))).ops
    k = -(-M // R) * -(-N // R)
    by = {op: [o for o in ops if o.op is op] for op in (Opcode.WLOAD, Opcode.MATMUL,
                                                        Opcode.VRUN)}
    assert len(by[Opcode.WLOAD]) == len(by[Opcode.MATMUL]) == len(by[Opcode.VRUN]) == B * k
    dmas = [o.fields for o in ops if o.op is Opcode.DMA and o.fields["rows"] > 0]
    assert all(f["dram_stride"] == 1 for f in dmas)


def test_nchw_to_nhwc_uses_strided_dmas():
    """(N, C, H, W) -> (N, H, W, C): per (n, h) a [C, W] matrix whose rows (channels) are
    H rows apart in the input; its transposed rows (pixels) are consecutive."""
    N, C, H, W = 1, 8, 16, 16
    p = plan((N, C, H, W), NCHW_TO_NHWC, R, 65535)
    assert p.mode == "transpose" and (p.Q, p.L, p.sq, p.sl) == (C, W, H, 1)
    assert len(p.bases) == N * H
    lowered = lower(TINY, perm_graph((N, C, H, W), NCHW_TO_NHWC))
    ops = lowered.ops
    at, words = lowered.plan.dram_map.inputs["x"]
    loads = [o.fields for o in ops if o.op is Opcode.DMA
             and o.fields["kind"] == DmaKind.LOAD_CBUF and at <= o.fields["dram_addr"] < at + words]
    assert len(loads) == N * H * -(-W // R) and all(f["rows"] == C for f in loads)
    stores = [o.fields for o in ops if o.op is Opcode.DMA
              and o.fields["kind"] == DmaKind.STORE_CBUF]
    assert loads and all(f["dram_stride"] == H for f in loads)
    # a tile of the [C, W] matrix's 1 x 2 blocks: its transposed rows are stored by one DMA
    assert len(stores) == N * H and all(f["dram_stride"] == 1 and f["rows"] == W
                                        for f in stores)


def test_transpose_tiles_group_the_dmas():
    """[4, 64, 64] swapping the last two axes on tiny (R = 8): 8 x 8 blocks per batch
    in tiles of 4 x 4; one DMA per K-block loads a tile's column of 4 blocks (32 rows),
    one per output K-block stores its row: 8 DMAs per 16 blocks, not 32."""
    lowered = lower(TINY, perm_graph((4, 64, 64), (0, 2, 1)))
    at, words = lowered.plan.dram_map.inputs["x"]
    dmas = [o.fields for o in lowered.ops if o.op is Opcode.DMA
            and not (o.fields["kind"] == DmaKind.LOAD_CBUF
                     and not at <= o.fields["dram_addr"] < at + words)]
    assert TransposeRule.tile(TINY, plan((4, 64, 64), (0, 2, 1), R, 65535), True) == (4, 4)
    assert len(dmas) == 4 * 4 * 8 and all(f["rows"] == 4 * R for f in dmas)
    assert sum(f["rows"] for f in dmas) == 2 * 4 * 64 * 64 // R


def test_copy_runs():
    """A permutation that keeps the last axis copies rows: runs of at most R output rows
    whose input rows are evenly spaced (the identity: contiguous runs of R)."""
    p = plan((3, 5, 7), (1, 0, 2), R, 65535)
    assert p.mode == "copy"
    assert p.runs == ((0, 0, 5, 3), (3, 1, 5, 3), (6, 2, 5, 3), (9, 3, 5, 3), (12, 4, 5, 3))
    ident = plan((3, 5, 7), (0, 1, 2), R, 65535)
    assert ident.runs == ((0, 0, 1, 8), (8, 8, 1, 7))


def test_identity_transpose_between_dense_layers():
    """perm (0, 1) of a tensor made on chip, read on chip: a copy through the array
    from CBUF to CBUF."""
    rng = np.random.default_rng(5)
    g = GraphBuilder("copy")
    x = g.input(rng.integers(-128, 128, (12, 20)), name="x")
    h = g.dense(x, rng.integers(-128, 128, (20, 13)), mult=150, shift=15, name="h")
    t = g.transpose(h, (0, 1), name="t")
    g.dense(t, rng.integers(-128, 128, (13, 5)), out_dtype="int32", name="y")
    graph = g.build(t, "y")
    _, got = run_golden(TINY, graph)
    want = reference.outputs(graph)
    for name in ("t", "y"):
        np.testing.assert_array_equal(got[name], want[name])
    assert not any(o.op is Opcode.DMA and o.fields["kind"] == DmaKind.LOAD_CBUF
                   and o.layer == 1 and o.fields["rows"] != R for o in lower(TINY, graph).ops)


def test_chained_nd_transposes_run_through_dram():
    """N-D transposes reading each other's outputs: the graph is lowered layer by layer
    through DRAM (as a convolutional network), each output np.transpose of the last."""
    graph = chained()
    _, got = run_golden(TINY, graph)
    a = np.transpose(graph.data["x"], (2, 0, 1))
    np.testing.assert_array_equal(got["t1"], a)
    np.testing.assert_array_equal(got["t3"], a)


def chained():
    rng = np.random.default_rng(8)
    g = GraphBuilder("chained")
    x = g.input(rng.integers(-128, 128, (2, 5, 12)), name="x")
    t1 = g.transpose(x, (2, 0, 1), name="t1")
    t2 = g.transpose(t1, (1, 0, 2), name="t2")
    t3 = g.transpose(t2, (1, 0, 2), name="t3")
    return g.build(t1, t3)


def cnn_with_2d_transpose():
    """conv -> global pool -> flatten -> dense -> transpose -> dense: a 2-D transpose
    in a convolutional network, DRAM to DRAM between two dense layers."""
    rng = np.random.default_rng(9)
    g = GraphBuilder("cnn_dense_transpose")
    x = g.input(rng.integers(-128, 128, (2, 6, 6, 4)), name="x")
    y = g.conv2d(x, rng.integers(-128, 128, (3, 3, 4, 8)), pads=1, mult=200, shift=16,
                 name="c")
    f = g.flatten(g.global_avg_pool(y, name="gap"), name="f")
    d = g.dense(f, rng.integers(-128, 128, (8, 12)), mult=100, shift=12, name="d")
    t = g.transpose(d, name="t")
    g.dense(t, rng.integers(-128, 128, (2, 5)), mult=100, shift=10, name="e")
    return g.build()


def test_2d_transpose_in_a_convolutional_network():
    graph = cnn_with_2d_transpose()
    _, got = run_golden(TINY, graph)
    d = reference.evaluate(graph)["d"]
    np.testing.assert_array_equal(reference.outputs(graph)["e"], got["e"])
    np.testing.assert_array_equal(reference.evaluate(graph)["t"], d.T)


def nchw_net(n=1, c=3, h=12, w=10, cout=8, seed=0, pool=False, name="nchw"):
    """An (N, C, H, W) input, a convolution (and a pool), an (N, C, H, W) output."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder(name)
    x = g.input(rng.integers(-128, 128, (n, c, h, w)), name="x", layout="NCHW",
                zero_point=3)
    y = g.conv2d(x, rng.integers(-128, 128, (3, 3, c, cout)),
                 rng.integers(-5000, 5000, cout), pads=1, mult=300, shift=16, zp=-2,
                 relu=True, name="conv")
    if pool:
        y = g.max_pool2d(y, 2, name="pool")
    g.nchw(y, name="y")
    return g.build()


def nhwc_twin(graph):
    """The same network on the NHWC map (numpy's transpose of the input): what a user
    with NHWC data runs."""
    g = GraphBuilder("nhwc")
    x = g.input(np.transpose(graph.data["x"], NCHW_TO_NHWC), name="x",
                zero_point=graph.tensor("x").quant.zero_point)
    t = x
    for node in graph.nodes[1:-1]:
        t = g.layer(node.op, t)
    return g.build()


def test_nchw_network_matches_its_nhwc_twin():
    """A user with NCHW data runs the network unchanged: the chip transposes the input
    and the output, and the result is numpy's transpose of the NHWC network's."""
    graph = nchw_net()
    assert [type(n.op).__name__ for n in graph.nodes] == ["Transpose", "Conv2d", "Transpose"]
    _, got = run_golden(TINY, graph)
    want = np.transpose(reference.run(nhwc_twin(graph)), NHWC_TO_NCHW)
    np.testing.assert_array_equal(got["y"], want)
    assert got["y"].shape == (1, 8, 12, 10)


def test_nchw_input_is_transposed_into_the_replicated_layout():
    """The NHWC map of a 3-channel NCHW input, read only by a convolution, is written
    replicated (each block's channel rows loaded R // C times): the convolution packs
    taps as it does for an NHWC input and takes the NHWC network's cycles."""
    graph = nchw_net(c=3, h=16, w=16, cout=8)
    assert lower(TINY, graph).copies == {"x_nhwc": R // 3}
    compiled, got = run_golden(TINY, graph)
    twin = compile_network(TINY, nhwc_twin(graph))
    conv = {rec.name: rec.cycles for rec in compiled.layers}["conv1"]
    assert conv <= twin.predicted_cycles
    np.testing.assert_array_equal(
        got["y"], np.transpose(reference.run(nhwc_twin(graph)), NHWC_TO_NCHW))


@pytest.mark.slow
@pytest.mark.parametrize("chip", ["tiny", "tiny_tall", "base"])
@pytest.mark.parametrize("kw", [dict(pool=True), dict(n=2, c=5, h=7, w=9, cout=8)],
                         ids=["pool", "batch2"])
def test_nchw_networks(chip, kw):
    graph = nchw_net(**kw)
    _, got = run_golden(preset(chip), graph)
    want = np.transpose(reference.run(nhwc_twin(graph)), NHWC_TO_NCHW)
    np.testing.assert_array_equal(got["y"], want)


RTL_CASES = {
    "batched_4x20x13_021": lambda: perm_graph((4, 20, 13), (0, 2, 1), 1),
    "3x5x7_201": lambda: perm_graph((3, 5, 7), (2, 0, 1), 2),
    "3x5x7_102_copy": lambda: perm_graph((3, 5, 7), (1, 0, 2), 3),
    "2x3x4x5_3102": lambda: perm_graph((2, 3, 4, 5), (3, 1, 0, 2), 4),
    "nchw_to_nhwc_1x8x16x16": lambda: perm_graph((1, 8, 16, 16), NCHW_TO_NHWC, 5),
    "6d": lambda: perm_graph((2, 3, 2, 3, 2, 17), (5, 3, 1, 0, 2, 4), 6),
    "nchw_conv_pool_nchw": lambda: nchw_net(pool=True),
    "nchw_batch2": lambda: nchw_net(n=2, c=5, h=7, w=9, cout=8, name="nchw2"),
    "chained_3d": chained,
    "cnn_dense_transpose_dense": cnn_with_2d_transpose,
    "int32_20x9x13": lambda: int32_graph(20, 9, 13, seed=3),
    "int32_17x30x40_twice": lambda: int32_graph(17, 30, 40, seed=4, twice=True),
    "int32_64x8x64": lambda: int32_graph(64, 8, 64, seed=5),
    "nd_twice_with_matmul_t": lambda: nd_twice_with_matmul_t(),
    "int32_with_matmul_t": lambda: int32_with_matmul_t(),
}


@pytest.fixture(scope="module")
def rtl_runs():
    from chip_runs import compile_and_run_on_rtl
    return compile_and_run_on_rtl(TINY, RTL_CASES)


@pytest.mark.rtl
@pytest.mark.parametrize("name", list(RTL_CASES))
def test_permutation_on_the_rtl(rtl_runs, name):
    from chip_runs import assert_matches_prediction, assert_outputs_match
    compiled, res = rtl_runs[name]
    assert_outputs_match(TINY, compiled, res)
    assert_matches_prediction(TINY, compiled, res)


def test_bench_nd_programs_on_the_golden_model():
    """``make bench``'s N-D programs: the compiled one leaves np.transpose(x) in DRAM in
    its predicted cycles; the round trip only loads X and stores it (its bytes)."""
    from systolica.app import transpose_bench
    x = np.random.default_rng(3).integers(-128, 128, (2, 4, 5, 6), dtype=np.int8)
    jobs, compiled = transpose_bench.nd_programs(TINY, x, NCHW_TO_NHWC)
    runs = {name: golden.run(TINY, job.program) for name, job in jobs.items()}
    (at, n), = compiled.dram_map.outputs.values()
    got = compiled.results(transpose_bench._placed(compiled, runs["on_chip"].dram[at:at + n]))
    np.testing.assert_array_equal(got["t"], np.transpose(x, NCHW_TO_NHWC))
    assert runs["on_chip"].cycles == compiled.predicted_cycles
    (_, x_words), = compiled.dram_map.inputs.values()
    trip = runs["dram_round_trip"]
    assert trip.dram_bytes_read + trip.dram_bytes_written == (x_words + n) * R


def test_bench_int32_graphs_on_the_golden_model():
    """``make bench``'s int32 record: the transposed graph's output is the dense layer's
    output transposed, the other graph's is the dense layer's."""
    from systolica.app import transpose_bench
    transposed, dense = transpose_bench.int32_graphs(12, 8, 20)
    _, got = run_golden(TINY, transposed)
    _, d = run_golden(TINY, dense)
    assert got["t"].dtype == np.int32 and got["t"].shape == (20, 12)
    np.testing.assert_array_equal(got["t"], d["d"].T)
    np.testing.assert_array_equal(d["d"], reference.outputs(dense)["d"])


def int32_graph(m, k, n, perm=None, seed=0, twice=False):
    """int32 ``x @ w + bias`` (bias over the whole int32 range: every byte value) and its
    transpose (twice: back again)."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder(f"int32_{m}x{k}x{n}")
    x = g.input(rng.integers(-128, 128, (m, k)), name="x")
    d = g.dense(x, rng.integers(-128, 128, (k, n)),
                rng.integers(-2 ** 31, 2 ** 31 - 1, n), out_dtype="int32", name="d")
    t = g.transpose(d, perm, name="t")
    if twice:
        g.transpose(t, name="t2")
    return g.build()


@pytest.mark.parametrize("chip", ["tiny", pytest.param("base", marks=pytest.mark.slow)])
@pytest.mark.parametrize("m, k, n", [(8, 8, 8), (5, 3, 7), (20, 9, 13)])
@pytest.mark.parametrize("perm", [None, (0, 1)])
def test_int32_transpose_matches_numpy(chip, m, k, n, perm):
    graph = int32_graph(m, k, n, perm, seed=m + n)
    _, got = run_golden(preset(chip), graph)
    d = reference.evaluate(graph)["d"]
    assert got["t"].dtype == np.int32
    np.testing.assert_array_equal(got["t"], d.T if perm is None else d)


def nd_twice_with_matmul_t():
    """A transpose of an N-D transpose's output, beside a MatMulT (the GEMM lowering):
    t1 is stored and t2 reads it from DRAM."""
    rng = np.random.default_rng(7)
    g = GraphBuilder("nd_twice_matmul_t")
    t1 = g.transpose(g.input(rng.integers(-128, 128, (3, 5, 11)), name="x"), (1, 0, 2),
                     name="t1")
    g.transpose(t1, (2, 0, 1), name="t2")
    g.matmul_t(g.input(rng.integers(-128, 128, (6, 9)), name="q"),
               g.input(rng.integers(-128, 128, (7, 9)), name="k"), out_dtype="int32",
               name="s")
    return g.build()


def int32_with_matmul_t():
    """An int32 transpose beside a MatMulT whose int32 output it transposes too."""
    rng = np.random.default_rng(8)
    g = GraphBuilder("int32_matmul_t")
    h = g.dense(g.input(rng.integers(-128, 128, (20, 9)), name="x"),
                rng.integers(-128, 128, (9, 13)), rng.integers(-2 ** 31, 2 ** 31 - 1, 13),
                out_dtype="int32", name="fc")
    g.transpose(h, name="t")
    s = g.matmul_t(g.input(rng.integers(-128, 128, (6, 9)), name="q"),
                   g.input(rng.integers(-128, 128, (11, 9)), name="k"), out_dtype="int32",
                   name="s")
    g.transpose(s, name="st")
    return g.build()


@pytest.mark.parametrize("chip", ["tiny", "base", "tiny_tall", "tiny_wide"])
@pytest.mark.parametrize("make", sample([nd_twice_with_matmul_t, int32_with_matmul_t], 2))
def test_transposes_through_dram_beside_a_matmul_t(chip, make):
    """The GEMM lowering (a MatMulT has no rule in the layer-by-layer one) stores an
    N-D or int32 tensor a transpose reads and streams it back from DRAM."""
    graph = make()
    compiled, got = run_golden(preset(chip), graph)
    assert compiled.chain is None and not compiled.tiling      # the GEMM lowering
    want = reference.outputs(graph)
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def int32_few_columns_with_matmul_t():
    """An int32 transpose of a [5, 2] tensor beside a MatMulT of K = 3 (the GEMM
    lowering): no layer's int8 data reaches past the first tile row or column, but the
    transpose's words hold 8 bytes."""
    rng = np.random.default_rng(9)
    g = GraphBuilder("int32_few_columns")
    h = g.dense(g.input(rng.integers(-128, 128, (5, 3)), name="x"),
                rng.integers(-128, 128, (3, 2)), rng.integers(-2 ** 31, 2 ** 31 - 1, 2),
                out_dtype="int32", name="fc")
    g.transpose(h, name="t")
    g.matmul_t(g.input(rng.integers(-128, 128, (3, 3)), name="q"),
               g.input(rng.integers(-128, 128, (2, 3)), name="k"), out_dtype="int32",
               name="s")
    return g.build()


@pytest.mark.parametrize("chip", ["tiny", "base"])
def test_int32_transpose_reaches_the_tiles_of_its_bytes(chip):
    """The tile rows and columns the GEMM lowering feeds (the others get zeros) count
    an int32 transpose's bytes, not its elements: [5, 2] int32 is 8 bytes a row."""
    graph = int32_few_columns_with_matmul_t()
    _, got = run_golden(preset(chip), graph)
    np.testing.assert_array_equal(got["t"], reference.evaluate(graph)["fc"].T)


@pytest.mark.slow
def test_int32_transpose_shares_the_interleaving_loads():
    """64x64 int32 on tiny: 64 blocks of 8 x 8 elements, 4 input words each (a west load
    per word), and per group of 4 blocks one load of each of the 16 interleaving blocks
    (not 16 per block)."""
    from systolica.compiler.lowering.transpose_int32 import INT32_GROUP
    compiled = compile_network(TINY, int32_graph(64, 8, 64))
    t = [n.name for n in compiled.graph.nodes].index("t")
    wloads = [i for i, layer in zip(compiled.program, compiled.layer_of)
              if layer == t and i.op is Opcode.WLOAD]
    assert INT32_GROUP == 4 and len(wloads) == 64 * 4 + (64 // 4) * 16


@pytest.mark.slow
def test_int32_transpose_twice_is_the_identity():
    graph = int32_graph(17, 30, 40, twice=True)
    _, got = run_golden(TINY, graph)
    np.testing.assert_array_equal(got["t2"], reference.evaluate(graph)["d"])


TALL = preset("tiny_tall")                              # 16x8: R = 2C
TALL4 = TALL.replace(name="tiny_tall4", tile_cols=1)    # 16x4: R = 4C, one word per ACC row
WIDE = preset("tiny_wide")                              # 8x16: C = 2R
WIDE4 = WIDE.replace(name="tiny_wide4", tile_rows=1,    # 4x16: C = 4R, one element a word
                     dram_words=1 << 16)

# (m, k, n, perm) of int32_graph: one block, ragged blocks, a copy (the last axis kept),
# the explicit swap, fewer elements than a word, a transpose and back
INT32_NONSQUARE_CASES = [(8, 8, 8, None), (20, 9, 13, None), (5, 3, 7, (0, 1)),
                         (20, 9, 13, (1, 0)), (2, 3, 2, None), (33, 5, 17, (0, 1)),
                         (17, 30, 40, "twice"), (1, 2, 1, None), (16, 4, 16, None)]


@pytest.mark.parametrize(
    "m, k, n, perm, cfg",
    # every case on every grid; the fast tier four, each grid once with another case
    sample([pytest.param(*case, cfg, id=f"{str(case).replace(' ', '')}-{cfg.name}")
            for cfg in (TALL, TALL4, WIDE, WIDE4) for case in INT32_NONSQUARE_CASES], 10))
def test_int32_transpose_on_non_square_arrays(cfg, m, k, n, perm):
    """On a tall array (R = k*C): blocks of C input rows (a west load's) by R input
    columns, each output word built in k sub-blocks of C bytes; on a wide one (C = k*R)
    blocks of R x R elements, the interleaving blocks west-loaded, slice 0 written. The
    golden model's result (in the predicted cycles) equals np.transpose of the dense
    layer's numpy result."""
    twice = perm == "twice"
    graph = int32_graph(m, k, n, None if twice else perm, seed=m + n, twice=twice)
    _, got = run_golden(cfg, graph)
    d = reference.evaluate(graph)["d"]
    if twice:       # t is read from DRAM by t2, not an output
        np.testing.assert_array_equal(got["t2"], d)
        return
    assert got["t"].dtype == np.int32
    np.testing.assert_array_equal(got["t"], d.T if perm is None else np.transpose(d, perm))


def test_transposes_through_dram_beside_a_wide_dense_on_a_non_square_array():
    """A graph of dense layers and transposes read through DRAM whose dense layer has
    more than min(R, C) output channels on a non-square array takes the GEMM lowering
    (as beside a MatMulT), which writes its N-blocks in sub-blocks or slices directly."""
    rng = np.random.default_rng(7)
    g = GraphBuilder("nd_twice_dense")
    t1 = g.transpose(g.input(rng.integers(-128, 128, (3, 5, 11)), name="x"), (1, 0, 2),
                     name="t1")
    g.transpose(t1, (2, 0, 1), name="t2")
    h = g.dense(g.input(rng.integers(-128, 128, (6, 9)), name="q"),
                rng.integers(-128, 128, (9, 13)), mult=1, shift=8, name="fc")
    g.transpose(h, name="ht")
    graph = g.build()
    for cfg in (TALL, TALL4, WIDE):
        compiled, got = run_golden(cfg, graph)
        assert compiled.chain is None and not compiled.tiling      # the GEMM lowering
        np.testing.assert_array_equal(got["t2"], np.transpose(graph.data["x"], (2, 1, 0)))
        np.testing.assert_array_equal(got["ht"], reference.evaluate(graph)["fc"].T)


@pytest.mark.slow
def test_int32_transpose_on_a_tall_array_in_sub_blocks():
    """64x64 int32 on tiny_tall (16x8): 8 x 4 blocks of 8 x 16 elements, 4 input words
    each (a west load of 8 rows per word) and per group one load of each of the 16
    interleaving blocks (an output word's 2 sub-blocks of 8 bytes: 2 words x 2 sub-blocks
    x 4 bytes); the second sub-block's VRUN keeps the first's groups."""
    from systolica.arch import fabric, isa
    from systolica.compiler.lowering.transpose_int32 import int32_group
    from systolica.compiler.planning.memory import acc_half_rows
    compiled = compile_network(TALL, int32_graph(64, 8, 64))
    t = [n.name for n in compiled.graph.nodes].index("t")
    ops = [i for i, layer in zip(compiled.program, compiled.layer_of) if layer == t]
    G = int32_group(TALL, acc_half_rows(TALL))
    wloads = [i for i in ops if i.op is Opcode.WLOAD]
    assert len(wloads) == 32 * 4 + -(-32 // G) * 16
    table = fabric.muxes(TALL)
    assert any(table[i].name.startswith("wb_src") and table[i].sources[v] == fabric.KEEP
               for ins in ops if ins.op is Opcode.SETCFG
               for i, v in isa.setcfg_pairs(ins.fields))


def test_convolutional_network_with_an_int32_output():
    """The int32 output of a dense layer in a convolutional network lands at its DRAM
    region (it was stored at the region's address times acc_row_words)."""
    rng = np.random.default_rng(0)
    g = GraphBuilder("cnn_int32")
    x = g.input(rng.integers(-128, 128, (2, 6, 6, 4)), name="x")
    y = g.conv2d(x, rng.integers(-128, 128, (3, 3, 4, 8)), pads=1, mult=200, shift=16,
                 name="c")
    f = g.flatten(g.global_avg_pool(y, name="gap"), name="f")
    g.dense(f, rng.integers(-128, 128, (8, 12)), out_dtype="int32", name="d")
    graph = g.build()
    _, got = run_golden(TINY, graph)
    np.testing.assert_array_equal(got["d"], reference.outputs(graph)["d"])
