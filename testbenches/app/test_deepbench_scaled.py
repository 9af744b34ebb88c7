"""DeepBench's layers scaled to a smaller chip (``deepbench.scaled``): what the RTL
runs of testbenches/chip/test_chip_matching.py take from each layer and what they
shrink."""

from __future__ import annotations

import pytest

from systolica.app import deepbench
from systolica.arch.config import preset

TINY, BASE = preset("tiny"), preset("base")


@pytest.mark.parametrize("layer", deepbench.layers(), ids=lambda layer: layer.name)
def test_a_scaled_layer_keeps_its_geometry_and_shrinks_channels_and_map(layer):
    small = deepbench.scaled(layer, TINY)
    assert (small.index, small.kh, small.kw, small.stride, small.pads, small.prepadded) == \
        (layer.index, layer.kh, layer.kw, layer.stride, layer.pads, layer.prepadded)
    ratio = BASE.rows // TINY.rows
    for big, c in ((layer.cin, small.cin), (layer.cout, small.cout)):
        assert c == (big if big in (1, 3) else max(1, big // ratio))
    assert small.h == min(layer.h, max(deepbench.SCALED_MAP, layer.kh))
    assert small.w == min(layer.w, max(deepbench.SCALED_MAP, layer.kw))
    assert min(small.out_hw) >= 1


def test_scaling_to_the_bench_chip_keeps_the_channels():
    """``base`` has as many rows as itself: only the map shrinks."""
    layer = deepbench.layers()[18]                      # 28x28x192 -> 32, 5x5
    small = deepbench.scaled(layer, BASE)
    assert (small.cin, small.cout, small.h, small.w) == (192, 32, 12, 12)
    assert small.name == "db18_12x12x192_k32_5x5s1p2"


def test_deepspeech_keeps_its_20_wide_kernel():
    """DeepSpeech's first layer (700 x 161 x 1, a 5x20 kernel of stride 2): the map
    keeps the kernel's 20 columns, the one channel stays one."""
    small = deepbench.scaled(deepbench.layers()[0], TINY)
    assert (small.h, small.w, small.cin, small.cout, small.out_hw) == (12, 20, 1, 16, (4, 1))
