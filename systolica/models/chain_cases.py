"""Chains of convolutions for the tests and the benchmarks (seed 001): the seed's two
worked examples and random chains (kernels, strides, pads, dilations, channels)."""

from __future__ import annotations

import numpy as np

from systolica.compiler.graph.graph import Graph, GraphBuilder
from systolica.compiler.graph.ops import requant_for


def _chain(name: str, rng, size: tuple[int, int], channels: list[int],
           layers: list[dict]) -> Graph:
    """A chain with random int8 data; each layer's requantisation keeps its outputs
    spread over about 32 levels, so nothing saturates into constants."""
    H, W = size
    g = GraphBuilder(name)
    t = g.input(rng.integers(-128, 128, (1, H, W, channels[0]), dtype=np.int8),
                zero_point=int(rng.integers(-8, 9)))
    for k, (cin, cout, spec) in enumerate(zip(channels, channels[1:], layers)):
        kh, kw = spec["kernel"]
        w = rng.integers(-40, 41, (kh, kw, cin, cout), dtype=np.int8)
        bias = rng.integers(-2000, 2000, cout, dtype=np.int32)
        mult, shift = requant_for(32.0 / (60.0 * 24.0 * np.sqrt(kh * kw * cin)),
                                  per_channel=False)
        t = g.conv2d(t, w, bias, stride=spec.get("stride", 1), pads=spec["pads"],
                     dilation=spec.get("dilation", 1), mult=mult, shift=shift,
                     zp=int(rng.integers(-6, 7)), relu=bool(k % 2 == 0), name=f"conv{k}")
    return g.build(t)


def seed_two_layer(channels: int = 8, seed: int = 0) -> Graph:
    """Seed 001's worked example: a 16x16 map, a 7x7 convolution with padding 3, then
    a 5x5 with padding 2, stride 1 (channel counts are not given there)."""
    rng = np.random.default_rng(seed)
    return _chain("seed001_two_layer", rng, (16, 16), [channels] * 3,
                  [dict(kernel=(7, 7), pads=3), dict(kernel=(5, 5), pads=2)])


def seed_four_layer(channels: int = 8, seed: int = 0, width: int = 8) -> Graph:
    """Seed 001's second example: an input layer and three chained 3x3 layers over 24
    rows, run in three passes (the last layer, writing DRAM, keeps nothing)."""
    rng = np.random.default_rng(seed)
    return _chain("seed001_four_layer", rng, (24, width), [channels] * 4,
                  [dict(kernel=(3, 3), pads=1)] * 3)


def random_chain(seed: int, *, max_channels: int = 12) -> Graph:
    """Two or three layers, kernels 1..5 (non-square too), stride 1..2, asymmetric
    pads, dilation 1..2, channel counts around the array size."""
    rng = np.random.default_rng(seed)
    depth = int(rng.integers(2, 4))
    channels = [int(rng.integers(1, max_channels + 1)) for _ in range(depth + 1)]
    H, W = int(rng.integers(12, 26)), int(rng.integers(4, 12))
    layers = []
    for _ in range(depth):
        kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 4))
        dil = int(rng.integers(1, 3)) if kh > 1 and rng.random() < 0.3 else 1
        ext_h, ext_w = (kh - 1) * dil + 1, (kw - 1) * dil + 1
        pads = (int(rng.integers(0, ext_h)), int(rng.integers(0, ext_w)),
                int(rng.integers(0, ext_h)), int(rng.integers(0, ext_w)))
        stride = int(rng.integers(1, 3)) if rng.random() < 0.3 else 1
        layers.append(dict(kernel=(kh, kw), pads=pads, stride=stride, dilation=dil))
    return _chain(f"chain{seed}", rng, (H, W), channels, layers)


def bank_split_pair(wide: int = 32, narrow: int = 8, out: int = 128, seed: int = 0,
                    size: tuple[int, int] = (16, 16)) -> Graph:
    """Two 3x3 layers where the CBUF's banks go opposite ways: the first reads a
    wide map (`wide` channels) with small weights (`wide` -> `narrow`), the second a
    narrow map with large weights (`narrow` -> `out`): the seed's "10 weight banks +
    2 feature banks for one layer, 2 + 10 for the next", in small."""
    rng = np.random.default_rng(seed)
    return _chain("bank_split_pair", rng, size, [wide, narrow, out],
                  [dict(kernel=(3, 3), pads=1), dict(kernel=(3, 3), pads=1)])
