"""The convolution code generator lowers every realisable mapping (docs/matching.md):
each runs on the golden model equal to the numpy reference, in the cycles predicted;
the ranking, the cache, the static strategy and the refusals."""

import numpy as np
import pytest

from systolica import golden
from systolica.arch.config import preset
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode
from systolica.compiler import CompileError, compile_network
from systolica.compiler.graph import reference
from systolica.compiler.graph.graph import GraphBuilder
from systolica.compiler.graph.ops import requant_for
from systolica.compiler.lowering import conv_mapping
from systolica.compiler.matching.mapping import Axis, Mapping

TINY = preset("tiny")
STREAM = (Axis("oh", 1), Axis("ow", 1))
COLS = (Axis("k", TINY.cols),)


def conv(h, w, cin, cout, kernel, stride=1, pads=0, dilation=1, seed=0, name="c"):
    rng = np.random.default_rng(seed)
    g = GraphBuilder(name)
    x = g.input(rng.integers(-128, 128, size=(1, h, w, cin), dtype=np.int8), zero_point=3)
    kh, kw = kernel
    wt = rng.integers(-64, 65, size=(kh, kw, cin, cout), dtype=np.int8)
    mult, shift = requant_for(40.0 / (74 * 37 * np.sqrt(kh * kw * cin)), per_channel=False)
    t = g.conv2d(x, wt, rng.integers(-2000, 2000, size=cout, dtype=np.int32),
                 stride=stride, pads=pads, dilation=dilation, mult=mult, shift=shift,
                 relu=True, name=name)
    return g.build(t)


def run(cfg, graph, **options):
    compiled = compile_network(cfg, graph, **options)
    out = golden.run(cfg, Loadable.for_chip(cfg, compiled.image, compiled.dram))
    assert out.error is ErrorCode.NONE
    assert np.array_equal(compiled.result(out.dram), reference.run(graph))
    assert out.cycles == compiled.predicted_cycles
    return compiled


def replicated(*rows):
    return Mapping(tuple(Axis(d, e) for d, e in rows), COLS, STREAM, "replicated")


BLOCKS = Mapping((Axis("c", TINY.rows),), COLS, STREAM)


@pytest.mark.parametrize("graph, mapping", [
    (conv(9, 9, 16, 12, (3, 3), pads=1), BLOCKS),                       # two blocks
    (conv(10, 10, 1, 8, (5, 5), stride=2, pads=2), replicated(("t", 8), ("c", 1))),
    (conv(10, 10, 1, 8, (5, 5), stride=2, pads=2), replicated(("t", 3), ("c", 1))),
    # 2 x 3 rectangles over a 5 x 5 kernel: the edge ones hold dummy replicas
    (conv(10, 10, 1, 8, (5, 5), stride=2, pads=2),
     replicated(("kh", 2), ("kw", 3), ("c", 1))),
    (conv(8, 8, 3, 16, (7, 7), stride=2, pads=3),
     replicated(("kh", 1), ("kw", 2), ("c", 3))),
    (conv(9, 11, 2, 5, (3, 3), pads=2, dilation=2),
     replicated(("kh", 2), ("kw", 2), ("c", 2))),
    (conv(12, 12, 3, 8, (3, 3), pads=1), BLOCKS),                       # padded channels
], ids=["blocks", "t8", "t3", "kh2xkw3_dummies", "kh1xkw2_7x7", "dilated_2x2",
        "blocks_3ch"])
def test_every_realisable_mapping_lowers_exactly(graph, mapping):
    compiled = run(TINY, graph, mapping={"c": mapping})
    assert compiled.mappings["c"] == mapping


def test_the_ranked_mapping_beats_the_static_one():
    graph = conv(10, 10, 1, 8, (5, 5), stride=2, pads=2)
    matched = run(TINY, graph)
    static = run(TINY, graph, mapping="static")
    assert matched.mappings["c"].layout == "replicated"
    m = static.mappings["c"]
    assert (m.rows, m.cols, m.layout, m.origin) == ((Axis("c", TINY.rows),), COLS,
                                                    "blocks", "static")
    assert matched.predicted_cycles * 2 < static.predicted_cycles


def test_a_repeated_shape_is_chosen_once():
    graph = conv(7, 7, 2, 8, (3, 3), pads=1, seed=5)
    compile_network(TINY, graph)
    again = compile_network(TINY, conv(7, 7, 2, 8, (3, 3), pads=1, seed=6))
    assert again.phase_seconds["match"] == 0.0


def test_candidates_near_the_best_are_ranked_by_exact_cycles():
    graph = conv(10, 10, 1, 8, (5, 5), stride=2, pads=2, seed=7)
    node = graph.nodes[0]
    src = conv_mapping.Source(node.inputs[0], graph.tensor(node.inputs[0]).shape, 8)
    ms = [replicated(("t", 8), ("c", 1)), replicated(("kh", 1), ("kw", 8), ("c", 1))]
    ranked = conv_mapping.rank(TINY, graph, node, src, ms)
    assert all(r.estimate is not None for r in ranked)
    for r in ranked:
        if r.exact is not None:
            alone = compile_network(TINY, conv_mapping.alone(graph, node),
                                    mapping={"c": r.mapping})
            assert r.exact == alone.predicted_cycles
    assert [r.cycles for r in ranked] == sorted(r.cycles for r in ranked)


@pytest.mark.parametrize("mapping, words", [
    (replicated(("kh", 3), ("kw", 3), ("c", 1)), "9 rows x 8 columns exceed"),
    (replicated(("t", 4), ("c", 2)), "every channel"),
    (Mapping((Axis("c", 8),), COLS, STREAM, "replicated"), "every channel"),
    (Mapping((Axis("c", 8),), (Axis("oh", 8),), STREAM), "output channels"),
    (Mapping((Axis("c", 8),), COLS, (Axis("k", 8),)), "stream walks oh and ow"),
    (Mapping((Axis("t", 8),), COLS, STREAM), "blocks layout the rows hold"),
    (Mapping((Axis("c", 8),), COLS, STREAM, "nhwc"), "neither"),
])
def test_a_mapping_the_array_cannot_take_is_refused(mapping, words):
    graph = conv(10, 10, 1, 8, (5, 5), stride=2, pads=2)
    with pytest.raises(CompileError, match=words):
        compile_network(TINY, graph, mapping={"c": mapping})


def test_mapping_option_is_checked():
    with pytest.raises(CompileError, match="one of 'matcher', 'static'"):
        compile_network(TINY, conv(6, 6, 8, 8, (3, 3)), mapping="vta")
    with pytest.raises(CompileError, match="must be a matching.Mapping"):
        compile_network(TINY, conv(6, 6, 8, 8, (3, 3)), mapping={"c": "static"})


def grouped(h, w, cin, cout, groups, kernel=(3, 3), stride=1, pads=1, seed=0):
    rng = np.random.default_rng(seed)
    g = GraphBuilder("grouped")
    x = g.input(rng.integers(-128, 128, size=(1, h, w, cin), dtype=np.int8), zero_point=-5)
    kh, kw = kernel
    wt = rng.integers(-64, 65, size=(kh, kw, cin // groups, cout), dtype=np.int8)
    mult, shift = requant_for(40.0 / (74 * 37 * np.sqrt(kh * kw * cin / groups)),
                              per_channel=False)
    t = g.conv2d(x, wt, rng.integers(-2000, 2000, size=cout, dtype=np.int32),
                 stride=stride, pads=pads, groups=groups, mult=mult, shift=shift,
                 name="c")
    return g.build(t)


@pytest.mark.parametrize("cfg, graph", [
    (TINY, grouped(6, 6, 16, 16, 4)),             # ResNeXt-like: 4 channels a group
    (TINY, grouped(6, 7, 12, 12, 3, stride=2)),   # ShuffleNet-like: 3 groups
    (TINY, grouped(5, 5, 16, 8, 2, kernel=(1, 1), pads=0)),
    (preset("tiny_tall"), grouped(6, 6, 16, 16, 8)),
], ids=["4x4ch", "3_groups", "2_groups_1x1", "tall_8_groups"])
def test_grouped_convolutions_run_exactly_both_ways(cfg, graph):
    """Block-diagonal packings (the matcher) and one group at a time (static)."""
    matched = run(cfg, graph)
    static = run(cfg, graph, mapping="static")
    assert matched.predicted_cycles <= static.predicted_cycles
    assert static.mappings["c"].origin == "static"


def test_a_one_dimensional_convolution_runs_exactly():
    graph = conv(1, 40, 4, 8, (1, 7), stride=2, pads=(0, 3, 0, 3))
    compiled = run(TINY, graph)
    assert compiled.mappings["c"].layout == "replicated"


def test_a_grouped_convolution_with_an_int32_output_runs_exactly_both_ways():
    """ONNX's grouped ConvInteger: the accumulator is the output, each group's bias
    folding in the input zero point over its own channels."""
    rng = np.random.default_rng(4)
    g = GraphBuilder("g32")
    x = g.input(rng.integers(-128, 128, size=(1, 6, 7, 16), dtype=np.int8), zero_point=5)
    w = rng.integers(-128, 128, size=(3, 3, 4, 8), dtype=np.int8)
    t = g.conv2d(x, w, rng.integers(-1000, 1000, 8, dtype=np.int32), pads=1, groups=4,
                 out_dtype="int32", name="c")
    graph = g.build(t)
    assert run(TINY, graph).predicted_cycles < run(TINY, graph, mapping="static").predicted_cycles
