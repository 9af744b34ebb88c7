"""A Concat of feature maps in a convolutional network (docs/cnn.md, "Concat of
feature maps"): a layout, not a computation. Each input's producer stores its channel
blocks where they lie in the output's, so the join moves no byte and takes no
instruction; the layers reading it equal numpy in the predicted cycles. What the
layout cannot hold is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from test_concat_lanes import run_golden

from systolica.arch.config import preset
from systolica.compiler import CompileError, GraphBuilder, compile_network
from systolica.models import zoo as models

TINY, BASE = preset("tiny"), preset("base")


def _conv(g, x, cout, k=1, *, seed, name, relu=True):
    rng = np.random.default_rng(seed)
    cin = g.tensor(x).shape[3]
    return g.conv2d(x, rng.integers(-20, 20, (k, k, cin, cout), dtype=np.int8),
                    rng.integers(-300, 300, cout, dtype=np.int32), pads=k // 2, shift=7,
                    relu=relu, name=name)


def _input(g, shape, seed=0):
    return g.input(np.random.default_rng(seed).integers(-128, 128, shape, dtype=np.int8),
                   name="x")


@pytest.mark.parametrize("cfg, widths", [(TINY, (8, 16, 8, 5)), (TINY, (16, 8, 8, 13)),
                                         (BASE, (16, 16, 16, 5)), (BASE, (32, 16, 16, 16))],
                         ids=lambda v: getattr(v, "name", None) or "x".join(map(str, v)))
def test_an_inception_block_equals_numpy(cfg, widths):
    """Four branches joined along their channels, read by a 1x1 convolution: the join
    has no instruction of its own, and its output is the branches' maps in their
    blocks (the last ragged)."""
    graph = models.inception_block(size=8, cin=16, widths=widths)
    comp = run_golden(cfg, graph)
    joined = [n.name for n in graph.nodes if n.name == "join"]
    assert joined and "join" not in {l.name for l in comp.layers}


def test_the_join_as_output_nested_and_read_twice():
    """A join that is a graph output, a join of a join, and a join read by a
    convolution and a pool: each input's blocks at its place in the outermost."""
    g = GraphBuilder("joins")
    x = _input(g, (2, 6, 6, 5))
    a, b, c = (_conv(g, x, 8, k, seed=k, name=f"c{k}") for k in (1, 3, 5))
    inner = g.concat(a, b, name="inner")
    outer = g.concat(inner, c, name="outer")
    y = _conv(g, outer, 6, 3, seed=9, name="y")
    p = g.max_pool2d(outer, 2, name="p")
    run_golden(TINY, g.build(y, p, outer))


def test_the_inputs_are_written_into_the_outputs_blocks():
    """No DRAM region of the join's inputs: the producers' stores land in the join's
    region, block after block."""
    graph = models.inception_block(size=8, cin=16, widths=(8, 16, 8, 5))
    comp = compile_network(TINY, graph)
    keys = {r.key for r in comp.plan.regions if r.memory == "dram"}
    assert "tensor join" in keys
    for t in ("branch1x1", "branch3x3", "branch5x5", "pool_proj"):
        assert f"tensor {t}" not in keys


def _bad(build):
    g = GraphBuilder("bad")
    x = _input(g, (1, 4, 4, 8))
    build(g, x)
    return g.build()


@pytest.mark.parametrize("build, words", [
    # a ragged input a pool makes: only a convolution's output widens
    (lambda g, x: g.concat(g.max_pool2d(_conv(g, x, 5, seed=1, name="a"), 1, name="p"),
                           _conv(g, x, 8, seed=2, name="b"), name="cat"),
     ["layer 'p' makes 'p'", "5 channels", "whole blocks of 8", "convolution", "put it last"]),
    # padded channels an Add would mix with another map's
    (lambda g, x: (lambda a, b: g.add(g.concat(a, b, name="cat"),
                                      _conv(g, x, 13, seed=3, name="c"), name="sum"))(
        _conv(g, x, 5, seed=1, name="a"), _conv(g, x, 8, seed=2, name="b")),
     ["layer 'sum' (Add) reads 'cat'", "padded for the join 'cat'", "multiples of 8"]),
    (lambda g, x: g.concat(x, _conv(g, x, 8, seed=2, name="b"), name="cat"),
     ["layer 'cat'", "input 'x' is a graph input", "pass it through a layer"]),
    (lambda g, x: (lambda a: g.concat(a, a, name="cat"))(_conv(g, x, 8, seed=1, name="a")),
     ["layer 'cat'", "joins one map twice"]),
    (lambda g, x: (lambda a, b: (g.concat(a, b, name="cat"), g.concat(b, a, name="cat2")))(
        _conv(g, x, 8, seed=1, name="a"), _conv(g, x, 8, seed=2, name="b")),
     ["layer 'cat'", "input 'a' is joined by 'cat2' too"]),
])
def test_what_the_layout_cannot_hold_is_refused_by_name(build, words):
    with pytest.raises(CompileError) as info:
        compile_network(TINY, _bad(build))
    for w in words:
        assert w in str(info.value), (w, str(info.value))


@pytest.mark.parametrize("cfg, widths", [
    (TINY, (5, 6, 3, 7)), (TINY, (13, 3, 17, 5)), (preset("tiny_tall"), (6, 10, 4, 9)),
    (preset("tiny_wide"), (5, 6, 3, 7)), (BASE, (6, 10, 4, 9))],
    ids=lambda v: getattr(v, "name", None) or "x".join(map(str, v)))
def test_ragged_inputs_are_padded_to_whole_blocks(cfg, widths):
    """Branches whose channels are not whole blocks of R: each producer computes zero
    channels up to the next block and the 1x1 convolution after the join reads them
    with zero weights. Its output equals numpy's of the graph as written; the join's
    DRAM region holds the padded blocks."""
    graph = models.inception_block(size=6, cin=8, widths=widths)
    comp = run_golden(cfg, graph)
    R = cfg.rows
    blocks = sum(-(-w // R) for w in widths[:-1]) + -(-widths[-1] // R)
    region = next(r for r in comp.plan.regions if r.key == "tensor join")
    assert region.size == 6 * 6 * blocks          # one word per pixel and block


def test_a_padded_join_carried_through_pools_and_flatten():
    """The pad channels travel on through a max pool and a global pool, and through a
    Flatten of a 2x2 map to a dense layer, whose weight rows for them are zero; a
    ragged join inside another join is padded at both."""
    g = GraphBuilder("carried")
    x = _input(g, (2, 4, 4, 6))
    a, b, c = (_conv(g, x, ch, k, seed=k, name=f"c{k}") for k, ch in ((1, 5), (3, 8), (5, 6)))
    inner = g.concat(a, b, name="inner")            # 5 channels padded to 8, then 8
    outer = g.concat(c, inner, name="outer")        # 6 padded to 8, then inner's 8 + 8
    pooled = g.max_pool2d(outer, 2, name="pool")    # (2, 2, 2, 19), padded 24
    rng = np.random.default_rng(7)
    flat = g.flatten(pooled, name="flat")
    head = g.dense(flat, rng.integers(-20, 20, (4 * 19, 5), dtype=np.int8), shift=8,
                   name="head")
    gap = g.flatten(g.global_avg_pool(outer, name="gap"), name="gflat")
    cls = g.dense(gap, rng.integers(-20, 20, (19, 3), dtype=np.int8), shift=6, name="cls")
    run_golden(TINY, g.build(head, cls))


def test_a_padded_join_may_not_be_a_graph_output():
    g = GraphBuilder("bad")
    x = _input(g, (1, 4, 4, 8))
    a, b = _conv(g, x, 5, seed=1, name="a"), _conv(g, x, 8, seed=2, name="b")
    with pytest.raises(CompileError, match="output 'cat' is a graph output.*padded for "
                                           "the join 'cat'.*multiples of 8"):
        compile_network(TINY, g.build(g.concat(a, b, name="cat")))


def test_an_input_that_is_also_a_graph_output_is_refused():
    g = GraphBuilder("bad")
    x = _input(g, (1, 4, 4, 8))
    a, b = _conv(g, x, 8, seed=1, name="a"), _conv(g, x, 8, seed=2, name="b")
    with pytest.raises(CompileError, match="input 'a' is also a graph output"):
        compile_network(TINY, g.build(g.concat(a, b, name="cat"), a))


def test_maps_of_different_sizes_do_not_join():
    g = GraphBuilder("bad")
    x = _input(g, (1, 4, 4, 8))
    with pytest.raises(CompileError, match=r"the input has \(N, H, W\) \(1, 4, 4\) and layer "
                                           r"'p' \(1, 2, 2\)"):
        g.concat(g.max_pool2d(x, 2, name="p"), x, name="cat")
