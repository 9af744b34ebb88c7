"""Channel-wise layers (pools, depthwise convolutions, Add) whose input does not fit
the CBUF even in one-row tiles nor cut along the width (a global pool: one output
pixel) are cut along their channels (docs/cnn.md, "Channel-wise layers deeper than the
CBUF"): tiles over groups of channel blocks, each loading and writing only its own.
Each layer here failed to compile before; now it runs bit-exact against numpy on the
golden model, in the cycles the compiler predicts, and moves the DRAM bytes the cost
model counts. A layer that fits otherwise never takes the cut (the program census
holds every one of those byte for byte)."""

from __future__ import annotations

import numpy as np
import pytest
from layer_cuts import check_runs, chip, runs

from systolica.arch.config import preset
from systolica.compiler import CompileError, compile_network
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
    widest_columns,
)

from tiers import sample


def one_layer(kind: str, shape, seed=0):
    """One channel-wise layer over a random int8 map ``(N, H, W, C)`` with a zero
    point: every one of them has one output pixel per image, so no width cut helps."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder(f"{kind}{'x'.join(map(str, shape))}")
    x = g.input(rng.integers(-128, 128, shape, dtype=np.int8), zero_point=3)
    C = shape[3]
    if kind == "global_avg":
        g.global_avg_pool(x, name="p")
    elif kind == "max":                     # a window over the whole map
        g.max_pool2d(x, shape[1], 1, name="p")
    elif kind == "avg":
        g.avg_pool2d(x, 3, 2, name="p")
    elif kind == "depthwise":
        g.conv2d(x, rng.integers(-5, 6, (3, 3, 1, C), dtype=np.int8), groups=C, shift=5,
                 name="p")
    elif kind == "add":
        b = g.input(rng.integers(-128, 128, shape, dtype=np.int8), name="b", zero_point=-4)
        g.add(x, b, mult_a=50, mult_b=70, shift=7, zp=1, relu=True, name="p")
    return g.build()


def pooled_twice(seed=0):
    """A 2x2 max pool (fits) then a global average pool that does not."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder("pooled_twice")
    x = g.input(rng.integers(-128, 128, (1, 24, 24, 96), dtype=np.int8), zero_point=-2)
    g.global_avg_pool(g.max_pool2d(x, 2, name="m"), name="p")
    return g.build()


#: (chip, graph of the array's rows R): layer 'p' failed to compile before the cut
CASES = {
    "global_avg": ("tiny", lambda R: one_layer("global_avg", (1, 12, 12, 20 * R))),
    "global_avg_batch2": ("small", lambda R: one_layer("global_avg", (2, 6, 6, 192))),
    "global_avg_after_max": ("small", lambda R: pooled_twice()),
    "max_whole_map_batch2": ("tiny", lambda R: one_layer("max", (2, 11, 11, 17 * R))),
    "avg_3x3_stride2": ("small", lambda R: one_layer("avg", (1, 3, 3, 701))),
    "depthwise_3x3": ("small", lambda R: one_layer("depthwise", (1, 3, 3, 700))),
    "add": ("small", lambda R: one_layer("add", (1, 2, 1, 3200))),
}
RUNS = runs(CASES)


def assert_failed_before(cfg, graph, name: str):
    """Layer `name` fits whole output rows in no tiling, nor a width cut."""
    lay = network_layout(cfg)
    job = lower(cfg, graph, CompileOptions()).jobs[name]
    for t in (Tiling(w, b) for w in WEIGHTS for b in BUFFERS):
        mine = job_layout(cfg, lay, job, t)
        with pytest.raises(CompileError, match=repr(name)):
            output_tiles(cfg, mine, job)
        assert widest_columns(cfg, mine, job) is None


@pytest.mark.parametrize("grid, case", sample(RUNS, 4), ids=[f"{g}-{c}" for g, c in RUNS])
def test_channel_cut_layer_matches_numpy_and_the_golden_model(grid, case):
    which, make = CASES[case]
    cfg = chip(grid, which)
    graph = make(cfg.rows)
    compiled = compile_network(cfg, graph)
    tiling = compiled.tiling["p"]
    assert_failed_before(cfg, graph, "p")
    assert tiling.channels > 0 and tiling.buffers == 2 and tiling.columns == 0
    assert all(t.channels == 0 for n, t in compiled.tiling.items() if n != "p")
    check_runs(cfg, graph, compiled)


def test_squeezenet_global_pool_on_base():
    """SqueezeNet's last layer on `base`: 13 x 13 pixels in 63 channel blocks need
    10,647 CBUF rows, a tile buffer has at most 7,680; the pool runs in three tiles of
    21 channel blocks."""
    cfg = preset("base")
    graph = one_layer("global_avg", (1, 13, 13, 1000))
    assert_failed_before(cfg, graph, "p")
    compiled = compile_network(cfg, graph)
    assert compiled.tiling["p"] == Tiling("stream", 2, 0, 21)
    check_runs(cfg, graph, compiled)


def test_a_layer_that_fits_is_not_cut():
    compiled = compile_network(preset("tiny"), one_layer("global_avg", (1, 8, 8, 64)))
    assert compiled.tiling["p"].channels == 0


def test_a_layer_too_deep_for_one_channel_block_names_itself():
    """A global pool of a 40x40 map: one channel block is 1,600 CBUF rows, more than a
    tile buffer of tiny's."""
    with pytest.raises(CompileError, match="'p': even with one-row tiles, a tile needs "
                                           "1600 CBUF rows"):
        compile_network(preset("tiny"), one_layer("global_avg", (1, 40, 40, 8)))


@pytest.mark.parametrize("channels, buffers, columns", [(-1, 2, 0), (1.5, 2, 0),
                                                        (True, 2, 0), (3, 1, 0), (3, 2, 4)])
def test_tiling_refuses_bad_channels(channels, buffers, columns):
    with pytest.raises(CompileError, match="channel"):
        Tiling("stream", buffers, columns, channels)
