"""The array split's cost model, refusals and layouts (docs/compiler.md, "Splitting
the array"). The layouts are checked against numpy built here from the contract's
words, not against the packing code; whole compiles run on the golden model."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.app import demo
from systolica.arch.config import preset
from systolica.compiler import CompileError, compile_network, gemm
from systolica.compiler.graph import reference
from systolica.compiler.graph.graph import GraphBuilder, as_graph
from systolica.compiler.planning import split

from tiers import sample

TINY, BASE, TALL = preset("tiny"), preset("base"), preset("tiny_tall")


def _gemm(M, K, N, seed=0, **kw):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, size=(M, K), dtype=np.int8)
    b = rng.integers(-128, 128, size=(K, N), dtype=np.int8)
    c = rng.integers(-4000, 4000, size=N, dtype=np.int32)
    return gemm(a, b, c, out_dtype="int32", name="g", **kw)


@pytest.mark.parametrize("cfg, tiles, cells", [(TINY, 2, 8), (BASE, 2, 16), (TALL, 2, 8)])
def test_group_counts_reach_the_shorter_sides_cells(cfg, tiles, cells):
    """Diagonal tile squares up to the shorter side's tiles, then groups of cells."""
    assert split.group_counts(cfg) == list(range(1, cells + 1))
    assert [split.cell_groups(cfg, s) for s in (tiles, tiles + 1)] == [False, True]
    s = tiles + 1
    assert (split.group_rows(cfg, s), split.group_cols(cfg, s)) == \
        (cfg.rows // s, cfg.cols // s)


@pytest.mark.parametrize("cfg, M, K, N, s", [
    (BASE, 2048, 4, 4, 4), (BASE, 2048, 1, 2, 8), (TINY, 37, 1, 1, 8), (TINY, 37, 2, 2, 4),
    (TALL, 200, 4, 2, 4),            # 4 groups of one tile row and two columns
])
def test_groups_smaller_than_a_tile_split_further(cfg, M, K, N, s):
    """Past the shorter side's tiles a group is ``R/s x C/s`` cells: K and N that fit
    them split further, equal to numpy in the predicted cycles and faster."""
    c = _golden_equals_numpy(cfg, _gemm(M, K, N))
    assert c.layers[0].split == s
    tiles = min(cfg.tile_rows, cfg.tile_cols)
    fewer = _golden_equals_numpy(cfg, _gemm(M, K, N), split={"g": tiles})
    assert c.predicted_cycles < fewer.predicted_cycles


def test_a_chain_splits_where_its_packed_outputs_are_one_k_block():
    """Each inner layer's packed output is the next one's input as it lies: any groups
    whose outputs fit one R-byte row, tile groups or groups of cells, dividing the
    sides or not (3 groups on tiny: 3 x 2 of its 8 columns). A wide grid whose sides
    divide packs them by whole tile columns, so it takes tile groups that divide."""
    net = demo.mlp(batch=60, widths=(2, 2, 1, 2), name="chain")
    assert [l.split for l in _golden_equals_numpy(TINY, net).layers] == [4, 4, 4]
    three = _golden_equals_numpy(TINY, net, split={"fc1": 3})
    assert [l.split for l in three.layers] == [3, 3, 3]
    why = split.choose_split(preset("tiny_wide"), as_graph(net))["fc1"].why
    assert "not 3 groups: 3 groups on the wide 2x4 tile grid" in why


def test_any_count_up_to_the_shorter_side():
    """A 4x4 grid takes 1 to 4 tile groups: 3 of one tile each, the last tile row and
    column in none."""
    g44 = TINY.replace(name="g44", tile_rows=4, tile_cols=4, general_lanes=False)
    assert [s for s in split.group_counts(g44) if not split.cell_groups(g44, s)] == \
        [1, 2, 3, 4]
    assert (split.group_rows(g44, 3), split.group_cols(g44, 3)) == (4, 4)
    a = np.arange(1, 13, dtype=np.int8).reshape(6, 2)
    packed = split.pack_input(g44, a, 3)            # M_s = 2 rows, groups at 0, 4, 8
    assert packed.shape == (2, 16)
    np.testing.assert_array_equal(packed[:, 8:10], a[4:6])
    assert not packed[:, 12:].any()


@pytest.mark.parametrize("cfg, M, K, N, s", [
    (BASE, 2048, 4, 8, 2), (BASE, 2048, 8, 8, 2),
    (BASE, 2048, 12, 8, 1),          # K > R/2
    (BASE, 2048, 4, 9, 1),           # N > C/2
    (BASE, 1, 4, 8, 1),              # one row: nothing to share a cycle with
    (TINY, 37, 4, 4, 2), (TINY, 37, 5, 4, 1), (TALL, 50, 8, 4, 2), (TALL, 50, 8, 5, 1),
])
def test_the_cost_model_splits_when_k_and_n_fit_a_group(cfg, M, K, N, s):
    choice = split.choose_split(cfg, as_graph(_gemm(M, K, N)))["g"]
    assert choice.s == s
    assert choice.estimates[1] >= choice.estimates[s]
    assert compile_network(cfg, _gemm(M, K, N)).layers[0].split == s


@pytest.mark.parametrize("name, M, K, N, dtype", sample([
    ("base", 600, 2, 2, "int8"),        # 8 groups took 364 cycles, 5 groups 349
    ("tiny_wide", 130, 4, 4, "int8"),   # 2 groups took 384 cycles, the whole array 355
    ("tiny_tall", 600, 3, 1, "int8"),   # 5 groups took 549 cycles, 4 groups 486
    ("base", 2048, 4, 4, "int32"), ("tiny", 200, 2, 2, "int32"),
], 2))
def test_the_cost_model_takes_a_split_as_fast_as_the_fastest(name, M, K, N, dtype):
    """The cost model weighs a lone layer's passes (its first load, its last stores):
    the split it takes runs within 2 % of the fastest any number of groups gives, each
    compiled and scheduled. (Weighing only the busiest unit it took splits 4 to 13 %
    slower on the first three.)"""
    cfg = preset(name)
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, size=(M, K), dtype=np.int8)
    b = rng.integers(-128, 128, size=(K, N), dtype=np.int8)
    c = rng.integers(-4000, 4000, size=N, dtype=np.int32)
    net = lambda: gemm(a, b, c, out_dtype=dtype, name="g")     # noqa: E731
    chosen = compile_network(cfg, net())
    cycles = {}
    for s in split.group_counts(cfg):
        try:
            cycles[s] = compile_network(cfg, net(), split={"g": s}).predicted_cycles
        except CompileError:
            pass
    assert chosen.predicted_cycles <= 1.02 * min(cycles.values()), \
        (chosen.layers[0].split, cycles)


def test_the_refusal_names_the_constraint():
    why = split.choose_split(BASE, as_graph(_gemm(64, 12, 8)))["g"].why
    assert "K = 12 > 8" in why
    why = split.choose_split(BASE, as_graph(_gemm(64, 4, 9)))["g"].why
    assert "N = 9 > 8" in why


def _golden_equals_numpy(cfg, net, **options):
    c = compile_network(cfg, net, **options)
    run = golden.run(cfg, c.loadable)
    got, want = c.results(run.dram), reference.outputs(net)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    assert run.cycles == c.predicted_cycles
    return c


def test_a_chain_of_dense_layers_splits_as_one():
    """A graph input through dense layers to a graph output: every layer in the same
    groups, each reading the one before's packed output where it lies."""
    net = demo.mlp(batch=40, widths=(4, 4, 3, 2), name="chain")
    choices = split.choose_split(TINY, as_graph(net))
    assert [choices[n].s for n in ("fc1", "fc2", "fc3")] == [2, 2, 2]
    assert "one chain with 'fc1', 'fc2', 'fc3'" in choices["fc2"].why
    c = _golden_equals_numpy(TINY, net)
    assert [l.split for l in c.layers] == [2, 2, 2]
    assert c.predicted_cycles < _golden_equals_numpy(TINY, net, split=1).predicted_cycles


def test_a_network_of_dense_layers_holds_any_batch_its_cbuf_holds():
    """Only a pass is in the accumulator: 250 rows on tiny (whose half ACC is 127)."""
    net = demo.mlp(batch=250, widths=(3, 4, 2), name="long")
    assert [l.split for l in _golden_equals_numpy(TINY, net, split=1).layers] == [1, 1]
    assert [l.split for l in _golden_equals_numpy(TINY, net).layers] == [2, 2]


def test_beside_other_layers_a_split_chain_holds_s_times_the_rows():
    """With a transpose in the network every layer is one pass in half the ACC, and
    the error counts the rows a group holds."""
    def net(M):
        rng = np.random.default_rng(M)
        g = GraphBuilder("mixed")
        x = g.input(rng.integers(-9, 9, size=(M, 3), dtype=np.int8), name="x")
        h = g.dense(x, rng.integers(-9, 9, size=(3, 4), dtype=np.int8), name="d0")
        g.dense(h, rng.integers(-9, 9, size=(4, 2), dtype=np.int8), name="d1")
        g.transpose(g.input(rng.integers(-9, 9, size=(8, 8), dtype=np.int8), name="y"),
                    name="t")
        return g.build()
    assert [l.split for l in _golden_equals_numpy(TINY, net(254)).layers][:2] == [2, 2]
    with pytest.raises(CompileError, match=r"M = 255 in 2 tile groups \(128 rows each\) "
                                           r"must be at most 127 rows each.*at most 254 rows"):
        compile_network(TINY, net(255))


def test_a_network_of_dense_layers_goes_in_passes(monkeypatch):
    """Each layer of a network of dense layers in passes of about PASS_ROWS rows, at
    their own rows of the tensors held whole: the same outputs as in one pass, in
    fewer cycles (a pass's VRUN and stores overlap the next pass's MATMUL)."""
    from systolica.compiler.planning import memory as plan_module
    net = demo.mlp(batch=300, widths=(20, 12, 9, 5), name="passes")
    c = _golden_equals_numpy(BASE, net)
    assert dict(c.plan.passes) == {"fc1": 60, "fc2": 60, "fc3": 60}
    monkeypatch.setattr(plan_module, "PASS_ROWS", 10 ** 6)
    once = _golden_equals_numpy(BASE, net)
    assert not once.plan.passes
    assert c.predicted_cycles < once.predicted_cycles


def test_layers_sharing_a_tensor_are_not_split():
    rng = np.random.default_rng(1)
    g = GraphBuilder("fork")
    x = g.input(rng.integers(-9, 9, size=(40, 4), dtype=np.int8), name="x")
    h = g.dense(x, rng.integers(-9, 9, size=(4, 4), dtype=np.int8), name="d0")
    g.dense(h, rng.integers(-9, 9, size=(4, 4), dtype=np.int8), name="d1")
    g.dense(h, rng.integers(-9, 9, size=(4, 2), dtype=np.int8), name="d2")
    graph = g.build()
    choices = split.choose_split(TINY, graph)
    assert [choices[n].s for n in ("d0", "d1", "d2")] == [1, 1, 1]
    assert "its output 'd0' is read by other layers" in choices["d0"].why
    assert "its input 'd0' is made or read by other layers" in choices["d1"].why
    _golden_equals_numpy(TINY, graph)


def test_a_later_layer_of_a_chain_takes_the_group_columns():
    """On tiny_tall a group's inputs are R/s = 8 wide, the outputs it hands on C/s =
    4: a second layer with K = 8 does not fit, and the refusal names it."""
    net = demo.mlp(batch=40, widths=(8, 8, 4), name="wide")
    why = split.choose_split(TALL, as_graph(net))["fc1"].why
    assert "layer 'fc1': N = 8 > 4" in why
    net = demo.mlp(batch=40, widths=(8, 4, 4), name="fits")
    assert [l.split for l in _golden_equals_numpy(TALL, net).layers] == [2, 2]


def test_a_forced_split_splits_the_whole_chain():
    net = demo.mlp(batch=40, widths=(4, 4, 2), name="chain")
    c = compile_network(TINY, net, split={"fc2": 2})
    assert [l.split for l in c.layers] == [2, 2]
    with pytest.raises(CompileError, match="'fc1' and 'fc2' are one chain"):
        compile_network(TINY, net, split={"fc1": 2, "fc2": 1})


@pytest.mark.parametrize("cfg", [TINY, BASE, TALL])
@pytest.mark.parametrize("seed", range(3))
def test_random_split_chains_on_the_golden_model(cfg, seed):
    rng = np.random.default_rng(seed)
    depth = int(rng.integers(2, 5))
    widths = [int(rng.integers(1, cfg.rows // 2 + 1))] \
        + [int(rng.integers(1, cfg.cols // 2 + 1)) for _ in range(depth)]
    M = int(rng.integers(2, 2 * (cfg.acc_depth // 2 - 1)))
    net = demo.mlp(batch=M, widths=tuple(widths), seed=seed, name="r")
    c = _golden_equals_numpy(cfg, net)
    splits = [l.split for l in c.layers]
    assert splits == [splits[0]] * depth and splits[0] >= 2, (M, widths)


@pytest.mark.parametrize("seed", range(4))
def test_random_split_chains_on_a_wide_grid(seed):
    """On tiny_wide an inner layer hands its outputs on packed into R/s partitions of
    one row: chains whose inner widths fit them split as one (the last layer's N up
    to C/s), equal to numpy in the predicted cycles."""
    cfg = preset("tiny_wide")
    rng = np.random.default_rng(seed)
    depth = int(rng.integers(2, 5))
    inner = cfg.rows // 2
    widths = [int(rng.integers(1, inner + 1)) for _ in range(depth)] \
        + [int(rng.integers(1, cfg.cols // 2 + 1))]
    M = int(rng.integers(2, 600))
    net = demo.mlp(batch=M, widths=tuple(widths), seed=seed, name="r")
    c = _golden_equals_numpy(cfg, net)
    assert [l.split for l in c.layers] == [2] * depth, (M, widths)


@pytest.mark.parametrize("bad, message", [
    ({"g": 2}, "cannot run in 2 tile groups: K = 12 > 8"),
    ({"g": 3}, "cannot run in 3 groups of cells: K = 12 > 5"),
    ({"g": 17}, "no 17 diagonal groups"),
    ({"nope": 2}, "no layer(s) 'nope'"),
    ({"g": 0}, "positive integer"),
    (2, "give 1 (never split)"),
    ("yes", "must be None"),
])
def test_a_forced_split_that_cannot_be_is_a_clear_error(bad, message):
    with pytest.raises(CompileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compile_network(BASE, _gemm(64, 12, 8), split=bad)


def test_the_input_layout_is_the_contracts():
    a = np.arange(5 * 3, dtype=np.int8).reshape(5, 3)
    got = split.pack_input(TINY, a, 2)          # M_s = 3, R/s = 4
    want = np.zeros((3, 8), np.int8)
    want[0, 0:3], want[1, 0:3], want[2, 0:3] = a[0], a[1], a[2]
    want[0, 4:7], want[1, 4:7] = a[3], a[4]
    np.testing.assert_array_equal(got, want)


def test_a_chained_layers_weights_sit_at_the_group_columns():
    """A layer reading the one before's packed output: group g's block at rows
    g*C/s (tiny_tall: 4, not R/s = 8) and columns g*C/s."""
    w = np.arange(1, 7, dtype=np.int8).reshape(2, 3)
    got = split.pack_weights(TALL, w, 2, kw=TALL.cols // 2)
    want = np.zeros((16, 8), np.int8)
    want[0:2, 0:3] = w
    want[4:6, 4:7] = w
    np.testing.assert_array_equal(got, want)


def test_the_weights_are_block_diagonal():
    w = np.arange(1, 7, dtype=np.int8).reshape(2, 3)
    got = split.pack_weights(TINY, w, 2)
    want = np.zeros((8, 8), np.int8)
    want[0:2, 0:3] = w
    want[4:6, 4:7] = w
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(split.pack_bias(TINY, np.array([7, 8, 9]), 2),
                                  [7, 8, 9, 0, 7, 8, 9, 0])


def test_the_output_comes_back_in_row_order():
    y = np.arange(3 * 8).reshape(3, 8)          # out' of M = 5 rows, N = 2, s = 2
    got = split.unpack_output(TINY, y, 5, 2, 2)
    np.testing.assert_array_equal(got, [y[0, 0:2], y[1, 0:2], y[2, 0:2],
                                        y[0, 4:6], y[1, 4:6]])


@pytest.mark.parametrize("cfg", [TINY, BASE, TALL])
@pytest.mark.parametrize("seed", range(4))
def test_random_split_gemms_on_the_golden_model(cfg, seed):
    rng = np.random.default_rng(seed)
    M = int(rng.integers(2, 700 if cfg is BASE else 400))
    K = int(rng.integers(1, cfg.rows // 2 + 1))
    N = int(rng.integers(1, cfg.cols // 2 + 1))
    net = _gemm(M, K, N, seed, relu=bool(seed % 2))
    whole = compile_network(cfg, net, split=1)
    c = compile_network(cfg, net)
    # K and N at most half the sides: 2 groups fit, and more where they are smaller
    assert c.layers[0].split >= 2
    assert K <= split.group_rows(cfg, c.layers[0].split)
    assert N <= split.group_cols(cfg, c.layers[0].split)
    run = golden.run(cfg, c.loadable)
    np.testing.assert_array_equal(c.result(run.dram), reference.outputs(net)["g"])
    assert run.cycles == c.predicted_cycles
    assert c.predicted_cycles < whole.predicted_cycles
    assert c.layers[0].macs == whole.layers[0].macs == M * K * N
