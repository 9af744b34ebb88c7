"""Concat through the lanes (docs/compiler.md, "Concat through the lanes"): compiled
for the chips with general lanes, run on the golden model, equal to numpy's
concatenation, in the predicted cycles; the routes take the skip links where the
grid has them; what the chip cannot place is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch.config import preset
from systolica.arch.isa import Opcode
from systolica.compiler import CompileError, GraphBuilder, compile_network
from systolica.compiler.graph import reference
from systolica.compiler.planning import lanes
from systolica.models import zoo as models

LANE_CHIPS = ("tiny", "tiny_tall", "tiny_wide")


def concat_net(M, widths, seed, *, after=True, direct=False):
    return models.branches(M, widths, seed, after=after, direct=direct, name="cat")


def run_golden(cfg, graph, **options):
    """Compile, run on the golden model: no fault, the predicted cycles, numpy's
    outputs."""
    comp = compile_network(cfg, graph, **options)
    res = golden.run(cfg, comp.loadable)
    assert res.error.name == "NONE"
    assert res.cycles == comp.predicted_cycles
    got, want = comp.results(res.dram), reference.outputs(graph)
    for t in want:
        np.testing.assert_array_equal(got[t], want[t], err_msg=t)
    return comp


@pytest.mark.parametrize("name", LANE_CHIPS)
def test_concats_equal_numpy(name):
    cfg = preset(name)
    n = cfg.tile_size
    cases = [(40, (n, 2 * n, 3), True, False), (17, (2 * n, n), False, False),
             (33, (n, n, n, 1), True, False), (25, (3 * n, 5), False, True),
             (9, (n, cfg.rows + n, 2), True, True)]
    for seed, (M, widths, after, direct) in enumerate(cases):
        run_golden(cfg, concat_net(M, widths, seed, after=after, direct=direct))


@pytest.mark.slow
def test_random_concats_on_every_lane_chip():
    """Random widths and rows; a network the CBUF cannot hold (each tensor takes banks
    of its own) is refused by name, and most are not."""
    rng = np.random.default_rng(7)
    ran = 0
    for k in range(30):
        cfg = preset(LANE_CHIPS[k % 3])
        n = cfg.tile_size
        widths = [n * int(rng.integers(1, 6)) for _ in range(int(rng.integers(1, 4)))]
        widths.append(int(rng.integers(1, 3 * n)))
        graph = concat_net(int(rng.integers(1, 200)), widths, k, after=bool(k % 2),
                           direct=bool(k % 3 == 0))
        try:
            run_golden(cfg, graph)
        except CompileError as e:
            assert "CBUF" in str(e) and any(
                why in str(e) for why in ("no free range", "too small", "more CBUF banks")), e
            continue
        ran += 1
    assert ran >= 24


def test_a_graph_input_read_by_a_dense_layer_and_the_concat():
    cfg = preset("tiny")
    rng = np.random.default_rng(3)
    g = GraphBuilder("shared")
    x = g.input(rng.integers(-128, 128, (30, 4), dtype=np.int8), name="x")
    d = g.dense(x, rng.integers(-128, 128, (4, 4), dtype=np.int8), shift=7, name="d")
    g.concat(x, d, name="cat")
    run_golden(cfg, g.build())
    g = GraphBuilder("shared_first")
    x = g.input(rng.integers(-128, 128, (30, 4), dtype=np.int8), name="x")
    y = g.input(rng.integers(-128, 128, (30, 4), dtype=np.int8), name="y")
    c = g.concat(x, y, name="cat")
    g.dense([c, x], rng.integers(-128, 128, (12, 3), dtype=np.int8), shift=9, name="d")
    run_golden(cfg, g.build())


def _routes(comp):
    return [i for i in comp.program if i.op is Opcode.ROUTE]


def test_the_routes_take_the_skip_links():
    """On tiny_tall a group moving from tile row 0 goes down three tile rows: the
    skip link makes its route a register shorter, and the ROUTE's span is the plan's
    with skip links, not without."""
    cfg = preset("tiny_tall")
    n = cfg.tile_size
    comp = run_golden(cfg, concat_net(20, (n, n), 0, after=False, direct=True))
    spans = {i.fields["span"] for i in _routes(comp)}
    assert spans and all(s <= lanes.plan_route(cfg, {0: 0}).span for s in spans)
    assert lanes.plan_route(cfg, {0: 0}).span == lanes.plan_route(cfg, {0: 0}, skips=False).span - 1
    assert lanes.plan_route(cfg, {0: 0}).skips == 1


def test_plans_are_the_shortest_chains():
    cfg = preset("tiny_wide")
    route = lanes.plan_route(cfg, {3: 0, 1: 1})
    # row 0: E(0,0) -> skip -> E(0,2), turn at column 3, S(0,3), S(1,3): 4 registers
    assert route.latency == {3: 4, 1: 2} and route.span == 4
    assert route.routing["gen_e[0][2]"] == "skip" and route.routing["gen_s[0][3]"] == "west"
    assert route.delays() == {"delay3": 0, "delay1": 2}
    assert lanes.plan_route(cfg, {3: 0}, skips=False).latency == {3: 5}
    with pytest.raises(CompileError, match="off the 2x4 grid"):
        lanes.plan_route(cfg, {4: 0})
    with pytest.raises(CompileError, match="no general lanes"):
        lanes.plan_route(preset("base"), {0: 0})


def test_refusals_name_the_layer_and_the_fix():
    cfg = preset("tiny")
    with pytest.raises(CompileError, match=r"layer 'cat': input 'd1' would start at column "
                                           r"3.*multiple of the lane width 4.*pad 'd0'"):
        compile_network(cfg, concat_net(10, (3, 4), 0))
    with pytest.raises(CompileError, match=r"layer 'cat'.*general lanes.*'base'"):
        compile_network(preset("base"), concat_net(10, (8, 8), 0))
    g = GraphBuilder("bad")
    a = g.input(np.zeros((4, 4), np.int8), name="a")
    b = g.input(np.zeros((5, 4), np.int8), name="b")
    with pytest.raises(CompileError, match="same rows"):
        g.concat(a, b)
    g = GraphBuilder("zp")
    a = g.input(np.zeros((4, 4), np.int8), name="a", zero_point=1)
    b = g.input(np.zeros((4, 4), np.int8), name="b")
    with pytest.raises(CompileError, match="quantised differently"):
        g.concat(a, b)
    g = GraphBuilder("one")
    a = g.input(np.zeros((4, 4), np.int8), name="a")
    with pytest.raises(CompileError, match="cat"):
        g.concat(a, name="cat")


@pytest.mark.parametrize("name", LANE_CHIPS)
def test_concats_of_concats_and_into_other_ops(name):
    """A Concat of a Concat, one tensor twice, a graph input beside layers' outputs; a
    Concat read by a transpose; Concats as both operands of an A·Bᵀ."""
    cfg = preset(name)
    rng = np.random.default_rng(5)

    def w(k, n):
        return rng.integers(-128, 128, (k, n), dtype=np.int8)

    g = GraphBuilder("cat_cat")
    x = g.input(w(40, 6), name="x")
    a = g.dense(x, w(6, 4), shift=7, name="a")
    c = g.concat(a, a, name="c1")
    g.dense(g.concat(c, a, x, name="c2"), w(18, 3), shift=9, name="o")
    run_golden(cfg, g.build())
    g = GraphBuilder("cat_transpose")
    x = g.input(w(40, 6), name="x")
    c = g.concat(g.dense(x, w(6, 4), shift=7, name="a"),
                 g.dense(x, w(6, 8), shift=7, name="b"), name="cat")
    g.transpose(c, name="t")
    run_golden(cfg, g.build())
    if cfg.rows == 2 * cfg.tile_size:       # an A·Bᵀ with K = 8 = R
        g = GraphBuilder("cat_mmt")
        q = g.input(w(20, 4), name="q")
        k = g.input(w(30, 4), name="k")
        qq = g.concat(q, g.dense(q, w(4, 4), shift=7, name="qd"), name="qq")
        g.matmul_t(qq, g.concat(k, k, name="kk"), shift=8, name="s")
        run_golden(cfg, g.build())


def test_concats_the_chip_does_not_lower_are_refused_by_name():
    rng = np.random.default_rng(0)
    g = GraphBuilder("cnn_cat")
    x = g.input(rng.integers(-128, 128, (1, 8, 8, 4), dtype=np.int8), name="x")
    y = g.conv2d(x, rng.integers(-128, 128, (3, 3, 4, 4), dtype=np.int8), pads=1, shift=8,
                 name="c")
    f = g.flatten(g.global_avg_pool(y, name="gap"), name="f")
    g.dense(g.concat(f, f, name="cat"), rng.integers(-128, 128, (8, 3), dtype=np.int8),
            shift=8, name="d")
    with pytest.raises(CompileError, match="layer 'cat': a Concat runs in networks of "
                                           "dense layers"):
        compile_network(preset("tiny"), g.build())
    maps = GraphBuilder("maps")
    a = maps.input(np.zeros((1, 4, 4, 4), np.int8), name="a")
    f = maps.flatten(maps.global_avg_pool(a, name="gap"), name="f")
    with pytest.raises(CompileError, match="all of one kind"):
        maps.concat(a, f)


def test_a_concat_alone_in_passes():
    """A Concat of graph inputs whose rows do not fit goes in passes, each input and
    the output staging a pass at a time (blocks a pass apart): inputs of two K-blocks
    and an output of three, on every lane chip."""
    for name in LANE_CHIPS:
        cfg = preset(name)
        R, n = cfg.rows, cfg.tile_size
        comp = run_golden(cfg, concat_net(1000, (R + n, R - n, 3), 1, after=False,
                                          direct=True))
        assert comp.plan.rows["cat"] < 1000, "expected passes"


def test_a_join_takes_an_unknown_scale_as_its_known_one():
    """A layer's output scale is unknown (None) to the graph; joined to an input of a
    known scale at one zero point it is the same quantisation, not another."""
    g = GraphBuilder("scales")
    a = g.input(np.zeros((4, 4), np.int8), name="a", scale=0.5)
    b = g.dense(g.input(np.zeros((4, 4), np.int8), name="b"), np.eye(4, dtype=np.int8))
    assert g.tensor(g.concat(a, b, name="cat")).quant.scale == 0.5
    c = g.input(np.zeros((4, 4), np.int8), name="c", scale=0.25)
    with pytest.raises(CompileError, match="quantised differently"):
        g.concat(a, c, name="cat2")
