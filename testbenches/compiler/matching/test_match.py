"""The matcher's entry points (compiler/matching/match.py): the candidate mappings of a
DeepBench-like layer of each kind on ``base`` (16x16) and ``tiny`` (8x8), the cache,
the static strategy and the graph front door. Each case prints its solver time."""

from __future__ import annotations

import time

import pytest

from systolica.arch.config import preset
from systolica.compiler.errors import CompileError
from systolica.compiler.matching import match, realisable
from systolica.compiler.matching import workloads as W
from systolica.compiler.matching.mapping import Axis, Mapping
from systolica.models import zoo

import tiers

LAYERS = {
    "deepbench_20x5_c1": W.conv2d(h=341, w=79, cin=1, cout=32, kernel=(20, 5), stride=2),
    "stem_7x7s2_c3": W.conv2d(h=224, w=224, cin=3, cout=64, kernel=7, stride=2, pads=3),
    "c64_3x3": W.conv2d(h=56, w=56, cin=64, cout=64, kernel=3, pads=1),
    "resnext_g32": W.conv2d(h=56, w=56, cin=128, cout=128, kernel=3, pads=1, groups=32),
    "conv1d_c8": W.conv1d(length=100, cin=8, cout=32, kernel=5),
    "dense": W.dense(m=8, k=256, n=100),
    "bmm": W.bmm(b=4, m=16, k=64, n=32),
    "maxpool": W.pool2d(h=112, w=112, channels=64, kernel=3, stride=2, pads=1),
}

#: (chip, layer) -> the mappings found, best estimate first (rows | cols | layout).
EXPECTED = {
    ("base", "deepbench_20x5_c1"): ["t16 | k16 | replicated", "kh3 x kw5 | k16 | replicated",
                                    "c1 | k16 | blocks"],
    ("base", "stem_7x7s2_c3"): ["t5 x c3 | k16 | replicated", "kw5 x c3 | k16 | replicated",
                                "c3 | k16 | blocks"],
    ("base", "c64_3x3"): ["c16 | k16 | blocks"],
    ("base", "resnext_g32"): ["g4 x c4 | g4 x k4 | blocks", "t4 x c4 | k4 | replicated",
                              "kw3 x c4 | k4 | replicated", "c4 | k4 | blocks"],
    ("base", "conv1d_c8"): ["t2 x c8 | k16 | replicated", "kw2 x c8 | k16 | replicated",
                            "c8 | k16 | blocks"],
    ("base", "dense"): ["c16 | k16 | blocks"],
    ("base", "bmm"): ["c16 | k16 | blocks"],
    ("base", "maxpool"): ["g16 | g16 | blocks"],
    ("tiny", "deepbench_20x5_c1"): ["t8 | k8 | replicated", "kw5 | k8 | replicated",
                                    "c1 | k8 | blocks"],
    ("tiny", "stem_7x7s2_c3"): ["t2 x c3 | k8 | replicated", "kw2 x c3 | k8 | replicated",
                                "c3 | k8 | blocks"],
    ("tiny", "c64_3x3"): ["c8 | k8 | blocks"],
    ("tiny", "resnext_g32"): ["g2 x c4 | g2 x k4 | blocks", "t2 x c4 | k4 | replicated",
                              "kw2 x c4 | k4 | replicated", "c4 | k4 | blocks"],
    ("tiny", "conv1d_c8"): ["c8 | k8 | blocks"],
    ("tiny", "dense"): ["c8 | k8 | blocks"],
    ("tiny", "bmm"): ["c8 | k8 | blocks"],
    ("tiny", "maxpool"): ["g8 | g8 | blocks"],
}


def _short(m: Mapping) -> str:
    side = lambda axes: " x ".join(f"{a.dim}{a.extent}" for a in axes)  # noqa: E731
    return f"{side(m.rows)} | {side(m.cols)} | {m.layout}"


@pytest.mark.parametrize("chip, layer", tiers.sample(list(EXPECTED), every=3))
def test_candidates_per_layer_kind(chip, layer):
    cfg, wl = preset(chip), LAYERS[layer]
    match.clear_cache()
    t0 = time.perf_counter()
    found = match.candidates(cfg, wl)
    seconds = time.perf_counter() - t0
    print(f"{chip} {layer}: {len(found)} candidates in {seconds * 1000:.0f} ms")
    assert [_short(c.mapping) for c in found] == EXPECTED[chip, layer]
    for c in found:
        assert realisable.check(c.mapping, wl, cfg.rows, cfg.cols) is None
        assert 0 < c.utilisation <= 1 and c.seconds > 0
    assert [c.utilisation for c in found] == sorted((c.utilisation for c in found),
                                                    reverse=True)


def test_cin_at_least_rows_maps_only_channels_to_rows():
    for cin in (16, 24, 64):
        wl = W.conv2d(h=8, w=8, cin=cin, cout=32, kernel=3, pads=1)
        (only,) = match.candidates(preset("base"), wl)
        assert only.mapping.rows == (Axis("c", 16),) and only.mapping.layout == "blocks"


@pytest.mark.parametrize("tiles, groups", [(dict(tile_cols=1), 2), (dict(tile_rows=1), 2)])
def test_block_diagonal_packing_on_non_square_arrays(tiles, groups):
    # as many whole groups as both the rows (16 or 8) and the columns (8 or 16) hold
    cfg = preset("base").replace(**tiles)
    found = match.candidates(cfg, LAYERS["resnext_g32"])
    packed = [c.mapping for c in found if "g" in c.mapping.dims("rows")]
    assert [(m.rows, m.cols) for m in packed] == [
        ((Axis("g", groups), Axis("c", 4)), (Axis("g", groups), Axis("k", 4)))]


def test_tiling_factors_follow_the_extents():
    wl = LAYERS["stem_7x7s2_c3"]
    best = match.candidates(preset("base"), wl)[0]
    t = dict(best.tiling)
    assert t["t"] == 10 and t["c"] == 1 and t["k"] == 4 and t["oh"] == 1


def test_a_repeated_shape_is_cached():
    cfg, wl = preset("tiny"), LAYERS["c64_3x3"]
    match.clear_cache()
    first = match.candidates(cfg, wl)
    t0 = time.perf_counter()
    again = match.candidates(cfg, W.conv2d(h=56, w=56, cin=64, cout=64, kernel=3, pads=1))
    assert time.perf_counter() - t0 < 0.005 and again == first
    assert match.candidates(preset("base"), wl) != first          # keyed by the chip too


def test_an_unknown_workload_kind_is_refused():
    wl = W.Workload("softmax", ("m", "c"), (4, 8), frozenset({"c"}))
    with pytest.raises(CompileError, match="no instruction mapping .* 'softmax'"):
        match.candidates(preset("tiny"), wl)


def test_static_mapping_pads_channels_to_the_array():
    m = match.static_mapping(preset("base"), LAYERS["stem_7x7s2_c3"])
    assert m == Mapping((Axis("c", 16),), (Axis("k", 16),),
                        (Axis("oh", 112), Axis("ow", 112)), "blocks", "static")


def test_workload_of_graph_layers():
    g = zoo.small_cnn()
    kinds = [(type(n.op).__name__, match.workload_of(g, n)) for n in g.nodes]
    assert [k for k, w in kinds if w is not None] == ["Conv2d", "MaxPool2d", "Conv2d",
                                                      "Conv2d", "Dense"]
    stem = kinds[0][1]
    assert stem.kind == "conv" and stem.size("c") == 3 and stem.size("k") == 8
    assert kinds[1][1].kind == "maxpool" and kinds[-1][1].sizes == (1, 10, 8)
    assert all(w is None for k, w in kinds if k in ("Add", "GlobalAvgPool", "Flatten"))


@pytest.mark.regress
@pytest.mark.parametrize("chip", ["base", "tiny"])
def test_resnet50_distinct_shapes(chip):
    """The figure for the closing note: every matched layer of ResNet-50, cold cache."""
    g, cfg = zoo.resnet50(), preset(chip)
    match.clear_cache()
    t0 = time.perf_counter()
    shapes, total = set(), 0
    for node in g.nodes:
        wl = match.workload_of(g, node)
        if wl is not None:
            shapes.add(wl.key)
            found = match.candidates(cfg, wl)
            assert found, f"layer {node.name!r}: no mapping"
            total += len(found)
    seconds = time.perf_counter() - t0
    print(f"{chip}: ResNet-50, {len(shapes)} distinct shapes, {total} candidates over "
          f"the layers, {seconds:.2f} s solver time (cold)")
    assert len(shapes) == 25 and seconds < 10
