"""The default demo network: a small int8 MLP (a chain of GEMMs with ReLU)."""

from __future__ import annotations

import numpy as np

from .compiler import Dense, Network
from .compiler.reference import dense as reference_dense


def _calibrated(x: np.ndarray, w: np.ndarray, bias: np.ndarray, relu: bool,
                name: str) -> Dense:
    """A layer whose requantisation maps the largest accumulator magnitude seen on `x`
    to about 100, as a post-training calibration pass would."""
    acc = x.astype(np.int64) @ w.astype(np.int64) + bias
    peak = max(int(np.abs(acc).max()), 1)
    shift = 16
    mult = max(1, min((1 << 16) - 1, round(100 * (1 << shift) / peak)))
    return Dense(w, bias, mult=mult, shift=shift, zp=0, relu=relu, name=name)


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
        layer = _calibrated(act, w, b, relu=i < len(widths) - 2, name=f"fc{i + 1}")
        layers.append(layer)
        act = reference_dense(act, layer)
    return Network(x, tuple(layers), name=name)
