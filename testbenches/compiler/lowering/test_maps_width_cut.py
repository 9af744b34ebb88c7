"""Layers whose input rows do not fit the CBUF even in one-row tiles, or whose output
rows are wider than an accumulator half, are cut along their width (docs/cnn.md,
"Layers wider than the CBUF"): each such layer failed to compile before; now it runs
bit-exact against numpy on the golden model, in the cycles the compiler predicts, and
moves the DRAM bytes the cost model counts. A layer that fits whole output rows never
takes the cut (the program census holds every one of those byte for byte)."""

from __future__ import annotations

import numpy as np
import pytest
from layer_cuts import check_runs, chip, runs, small_cbuf

from systolica import golden
from systolica.arch.config import preset
from systolica.compiler import CompileError, compile_network
from systolica.compiler.graph import reference
from systolica.compiler.graph.graph import GraphBuilder
from systolica.compiler.lowering.lower import lower
from systolica.compiler.lowering.maps.layout import network_layout
from systolica.compiler.options import CompileOptions
from systolica.compiler.planning.map_tiling import (
    BUFFERS,
    WEIGHTS,
    Tiling,
    job_layout,
    output_tiles,
)

from tiers import sample


def conv(shape, cout, kernel, *, stride=1, pads=0, dilation=1, seed=0):
    """One convolution of a random int8 map ``(N, H, W, C)`` with a zero point."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder(f"conv{'x'.join(map(str, shape))}")
    x = g.input(rng.integers(-128, 128, shape, dtype=np.int8), zero_point=3)
    w = rng.integers(-5, 6, (kernel, kernel, shape[3], cout), dtype=np.int8)
    g.conv2d(x, w, rng.integers(-500, 500, cout).astype(np.int32), stride=stride,
             pads=pads, dilation=dilation, shift=7, relu=True, zp=-5, name="c")
    return g.build()


def pools(width=262):
    rng = np.random.default_rng(1)
    g = GraphBuilder("pools")
    x = g.input(rng.integers(-128, 128, (1, 4, width, 8), dtype=np.int8))
    g.max_pool2d(x, 2, name="max")
    g.avg_pool2d(x, 3, 1, 1, name="avg")
    return g.build()


def add(width=140):
    rng = np.random.default_rng(2)
    g = GraphBuilder("add")
    a = g.input(rng.integers(-128, 128, (2, 3, width, 8), dtype=np.int8), zero_point=2)
    b = g.input(rng.integers(-128, 128, (2, 3, width, 8), dtype=np.int8), name="b",
                zero_point=-4)
    g.add(a, b, mult_a=50, mult_b=70, shift=7, zp=1, relu=True)
    return g.build()


def depthwise(width=150):
    rng = np.random.default_rng(3)
    g = GraphBuilder("depthwise")
    x = g.input(rng.integers(-128, 128, (1, 3, width, 16), dtype=np.int8))
    g.conv2d(x, rng.integers(-5, 6, (3, 3, 1, 16), dtype=np.int8), groups=16, pads=1,
             shift=5, name="dw")
    return g.build()


def stem(width=280):
    """Three channels, stored replicated: taps packed into each weight block."""
    rng = np.random.default_rng(4)
    g = GraphBuilder("stem")
    x = g.input(rng.integers(-128, 128, (1, 9, width, 3), dtype=np.int8))
    g.conv2d(x, rng.integers(-5, 6, (5, 5, 3, 8), dtype=np.int8), stride=2, pads=2,
             shift=6, name="stem")
    return g.build()


#: (chip, graph of the array's rows R): each layer failed to compile before the cut
CASES = {
    # input rows: 3 rows x 16 pixels x 8 channel blocks > the tile buffer
    "channels": ("small", lambda R: conv((1, 4, 16, 8 * R), 8, 3, pads=1)),
    "channels_batch2": ("small", lambda R: conv((2, 4, 16, 8 * R), 20, 3, pads=1)),
    "channels_stride2": ("small", lambda R: conv((1, 5, 17, 8 * R), 12, 3, stride=2,
                                                 pads=1)),
    "channels_dilated": ("small", lambda R: conv((2, 6, 20, 5 * R), 20, 3, pads=2,
                                                 dilation=2)),
    # output rows wider than an accumulator half (124 rows on tiny)
    "wide_row": ("tiny", lambda R: conv((1, 3, 130, 8), 8, 3, pads=1)),
    "wide_row_1x1_stride2": ("tiny", lambda R: conv((1, 4, 260, 8), 8, 1, stride=2)),
    "wide_pools": ("tiny", lambda R: pools()),
    "wide_add": ("tiny", lambda R: add()),
    "wide_depthwise": ("tiny", lambda R: depthwise()),
    "wide_replicated_stem": ("tiny", lambda R: stem()),
}
RUNS = runs(CASES)


@pytest.mark.parametrize("grid, case", sample(RUNS, 4), ids=[f"{g}-{c}" for g, c in RUNS])
def test_cut_layer_matches_numpy_and_the_golden_model(grid, case):
    which, make = CASES[case]
    cfg = chip(grid, which)
    graph = make(cfg.rows)
    lay = network_layout(cfg)
    compiled = compile_network(cfg, graph)
    jobs = lower(cfg, graph, CompileOptions()).jobs
    # every layer is cut, and none fits whole output rows in any tiling: it failed
    # to compile before
    for name, tiling in compiled.tiling.items():
        assert tiling.columns > 0, name
        for t in (Tiling(w, b) for w in WEIGHTS for b in BUFFERS):
            with pytest.raises(CompileError, match=repr(name)):
                output_tiles(cfg, job_layout(cfg, lay, jobs[name], t), jobs[name])
    check_runs(cfg, graph, compiled)


def test_vgg_width_row_of_256_channels_on_base():
    """VGG's 224-pixel rows with 256 input channels (a 3x3 convolution, six rows of
    it): three input rows of 224 pixels in 16 channel blocks need 10,752 CBUF rows, a
    tile buffer has at most 7,680; the layer runs in tiles of 112 columns."""
    cfg = preset("base")
    graph = conv((1, 6, 224, 256), 32, 3, pads=1)
    compiled = compile_network(cfg, graph)
    assert compiled.tiling["c"].columns == 112
    run = golden.run(cfg, compiled.loadable)
    np.testing.assert_array_equal(compiled.results(run.dram)["c"],
                                  reference.outputs(graph)["c"])
    assert run.cycles == compiled.predicted_cycles


def test_a_layer_that_fits_whole_rows_is_not_cut():
    cfg = small_cbuf("tiny")
    compiled = compile_network(cfg, conv((1, 4, 16, 32), 8, 3, pads=1))
    assert compiled.tiling["c"].columns == 0


def test_a_layer_too_large_for_one_column_names_itself():
    """40 channel blocks in a 3x3 window: not even a tile one output column wide fits
    (9 x 40 CBUF rows of input)."""
    with pytest.raises(CompileError, match="'c': even a tile of one output pixel .* "
                                           "needs 360 CBUF rows .* short by"):
        compile_network(small_cbuf("tiny"), conv((1, 3, 8, 320), 8, 3, pads=1))


@pytest.mark.parametrize("columns", [-1, 1.5, True])
def test_tiling_refuses_bad_columns(columns):
    with pytest.raises(CompileError, match="columns"):
        Tiling("stream", 2, columns)
