"""Depthwise convolution (docs/cnn.md, "Depthwise convolution"): one kernel per
channel, laid out as a pool is (a diagonal weight block per tap and channel block) and
requantised per channel as a convolution. Random depthwise layers and MobileNetV2's
inverted residual block compile on every preset grid and equal numpy on the golden
model in the predicted cycles; what the lowering does not take is refused by name.
The RTL runs are in `test_chip_cnn.py`."""

from __future__ import annotations

import numpy as np
import pytest
from test_concat_lanes import run_golden

from systolica.arch.config import preset
from systolica.compiler import CompileError, GraphBuilder, compile_network
from systolica.models import zoo as models

from tiers import sample

CHIPS = ("tiny", "tiny_tall", "tiny_wide", "base")


def _random_depthwise(seed: int):
    """A depthwise layer of random channels (1 to 39), kernel, stride, dilation, input
    and output zero points, per-channel multipliers and ReLU, sometimes followed by a
    1x1 convolution."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder(f"depthwise_{seed}")
    C, H, k = int(rng.integers(1, 40)), int(rng.integers(3, 12)), int(rng.choice([1, 3, 5]))
    x = g.input(rng.integers(-128, 128, (int(rng.integers(1, 3)), H, H, C), dtype=np.int8),
                name="x", zero_point=int(rng.integers(-20, 20)))
    dil = int(rng.integers(1, 3)) if k > 1 and H > 6 else 1
    y = g.conv2d(x, rng.integers(-60, 60, (k, k, 1, C), dtype=np.int8),
                 rng.integers(-2000, 2000, C, dtype=np.int32), stride=int(rng.integers(1, 3)),
                 pads=(k // 2) * dil, dilation=dil, groups=C,
                 mult=rng.integers(100, 3000, C), shift=14, zp=int(rng.integers(-10, 10)),
                 relu=bool(rng.integers(2)), name="dw")
    if rng.integers(2):
        y = g.conv2d(y, rng.integers(-30, 30, (1, 1, C, 7), dtype=np.int8), shift=9,
                     name="pw")
    return g.build(y)


# (seed % 4 picks the chip: every 7th seed reaches each chip once in the fast tier)
@pytest.mark.parametrize("seed", sample(range(24), 7))
def test_random_depthwise_layers_equal_numpy(seed):
    run_golden(preset(CHIPS[seed % 4]), _random_depthwise(seed))


@pytest.mark.parametrize("chip, options", sample(
    [(chip, options) for chip in CHIPS
     for options in (dict(), dict(stride=2, cout=12), dict(cin=6, expand=6, cout=6, size=10))],
    3), ids=str)
def test_an_inverted_residual_block_equals_numpy(chip, options):
    """Expansion, a 3x3 depthwise convolution (stride 1 or 2), projection, and the
    residual Add: each layer its own job; the depthwise one takes one step per tap."""
    comp = run_golden(preset(chip), models.inverted_residual_block(**options))
    assert "depthwise" in {r.name for r in comp.layers}


def test_a_depthwise_layer_is_not_chained():
    """A chain of convolutions takes convolutions over all input channels only: asked
    for, a chain through the depthwise layer is refused, saying so; left to the cost
    model, the network compiles."""
    graph = models.inverted_residual_block(stride=2, cout=12)
    compile_network(preset("tiny"), graph)
    with pytest.raises(CompileError, match="cannot chain 2 layers from 'expand'.*not "
                                           "depthwise ones"):
        compile_network(preset("tiny"), graph, segments={"expand": 2})


def test_a_depthwise_layer_reading_a_padded_join_is_refused():
    g = GraphBuilder("bad")
    x = g.input(np.zeros((1, 4, 4, 8), np.int8), name="x")
    a = g.conv2d(x, np.ones((1, 1, 8, 5), np.int8), name="a")
    b = g.conv2d(x, np.ones((1, 1, 8, 8), np.int8), name="b")
    j = g.concat(a, b, name="join")
    g.conv2d(j, np.ones((3, 3, 1, 13), np.int8), pads=1, groups=13, name="dw")
    with pytest.raises(CompileError, match="layer 'dw' \\(Conv2d\\) reads 'join'.*not "
                                           "depthwise"):
        compile_network(preset("tiny"), g.build())
