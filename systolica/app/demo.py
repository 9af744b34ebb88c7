"""The demo networks: the default small CNN (conv, ReLU, max pool, a residual block,
global average pool, dense) and a small int8 MLP (a chain of GEMMs with ReLU)."""

from __future__ import annotations

import numpy as np

from systolica.compiler import Dense, Network
from systolica.compiler.graph.reference import dense as reference_dense


def calibrate(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None,
              target: int = 100) -> tuple[int, int]:
    """``(mult, shift)`` mapping the largest accumulator magnitude seen on `x` to about
    `target`, as a post-training calibration pass would."""
    acc = x.astype(np.int64) @ w.astype(np.int64)
    if bias is not None:
        acc = acc + bias
    peak = max(int(np.abs(acc).max()), 1)
    shift = 16
    return max(1, min((1 << 16) - 1, round(target * (1 << shift) / peak))), shift


def mlp(batch: int = 16, widths: tuple[int, ...] = (64, 64, 32, 10), seed: int = 2026,
        name: str = "demo_mlp") -> Network:
    """An MLP ``widths[0] -> ... -> widths[-1]``, ReLU on every layer but the last,
    with random int8 weights and input (fixed seed) and calibrated requantisation."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, size=(batch, widths[0]), dtype=np.int8)
    layers, act = [], x
    for i, (k, n) in enumerate(zip(widths, widths[1:])):
        w = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
        b = rng.integers(-2000, 2000, size=n, dtype=np.int32)
        mult, shift = calibrate(act, w, b)
        layer = Dense(w, b, mult=mult, shift=shift, relu=i < len(widths) - 2, name=f"fc{i + 1}")
        layers.append(layer)
        act = reference_dense(act, layer)
    return Network(x, tuple(layers), name=name)


def concat(seed: int = 6):
    """Three dense branches 4 wide from one ``[120, 6]`` input, joined by a Concat
    through the general lanes and read by a dense layer
    (:func:`systolica.models.zoo.branches`; ``make bench``'s ``concat_120x4x4x4``)."""
    from systolica.models.zoo import branches
    return branches(120, (4, 4, 4), seed, name="demo_concat")


def cnn(seed: int = 0):
    """The default demo: :func:`systolica.models.zoo.small_cnn` on a 16x16x3
    image (a 3x3 convolution with ReLU, 2x2 max pool, a residual block of two 3x3
    convolutions and an add with ReLU, global average pool, flatten, dense to 10)."""
    from systolica.models.zoo import small_cnn
    return small_cnn(seed)
