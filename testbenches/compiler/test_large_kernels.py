"""Kernels up to the MATMUL's tap field (``ops.KERNEL_MAX`` = 2**isa.TAP_BITS = 64 taps
along each axis, docs/cnn.md): DeepBench's DeepSpeech layer (a 5x20 kernel over one
channel, stride 2) scaled to tiny, and kernels at the bound, compile and equal the
numpy reference on the golden model in the predicted cycles; one tap more is refused
by name."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch import isa
from systolica.arch.config import preset
from systolica.compiler import CompileError, GraphBuilder, compile_network
from systolica.compiler.graph import reference
from systolica.compiler.graph.ops import KERNEL_MAX, Conv2d, MaxPool2d

TINY = preset("tiny")


def _run(graph, cfg=TINY):
    comp = compile_network(cfg, graph)
    res = golden.run(cfg, comp.loadable)
    assert res.error.name == "NONE" and res.cycles == comp.predicted_cycles
    got, want = comp.results(res.dram), reference.outputs(graph)
    (t,) = graph.outputs
    np.testing.assert_array_equal(got[t], want[t])
    assert len(np.unique(want[t])) > 8                  # not saturated
    return res.cycles


def _conv(x_shape, kernel, cout, seed=0, **geometry):
    rng = np.random.default_rng(seed)
    g = GraphBuilder("large_kernel")
    x = g.input(rng.integers(-128, 128, x_shape, dtype=np.int8), name="x", zero_point=3)
    y = g.conv2d(x, rng.integers(-100, 100, (*kernel, x_shape[3], cout), dtype=np.int8),
                 rng.integers(-5000, 5000, cout, dtype=np.int32),
                 mult=rng.integers(100, 3000, cout), zp=-2, relu=True, name="c",
                 shift=17 + round(np.log2(np.prod(kernel) * x_shape[3]) / 2),   # unsaturated
                 **geometry)
    return g.build(y)


def test_the_bound_is_the_matmul_tap_field():
    assert KERNEL_MAX == 1 << isa.TAP_BITS
    matmul = dict(isa.PAYLOAD[isa.Opcode.MATMUL])
    assert matmul["dh"].shape == matmul["dw"].shape == isa.TAP_BITS
    # a tap table entry (the signed offset between two taps) spans every pair of taps
    assert -(1 << (isa.TAP_DELTA_BITS - 1)) <= -(KERNEL_MAX - 1)
    assert (1 << (isa.TAP_DELTA_BITS - 1)) - 1 >= KERNEL_MAX - 1


@pytest.mark.slow
def test_deepspeech_20x5_over_one_channel_on_tiny():
    """DeepBench's inference-server layer W=700, H=161, C=1, K=32, a 20-wide,
    5-high kernel, stride 2, on a 21x80 map: a (9, 31, 32) output."""
    assert _run(_conv((1, 21, 80, 1), (5, 20), 32, stride=2)) == 15232


@pytest.mark.parametrize("x_shape, kernel, geometry", [
    ((1, 2, 70, 1), (1, 64), {}),
    ((1, 66, 2, 3), (64, 1), {}),
    ((1, 70, 4, 5), (2, 2), dict(dilation=(63, 1))),      # extent 64 by dilation
])
def test_kernels_at_the_bound(x_shape, kernel, geometry):
    _run(_conv(x_shape, kernel, 8, **geometry))


def test_a_pool_of_forty_taps():
    rng = np.random.default_rng(1)
    g = GraphBuilder("pool")
    x = g.input(rng.integers(-128, 128, (1, 2, 50, 8), dtype=np.int8), name="x")
    _run(g.build(g.max_pool2d(x, (1, 40), 1, name="p")))


@pytest.mark.parametrize("build, words", [
    (lambda: Conv2d(np.ones((1, KERNEL_MAX + 1, 1, 1), np.int8), name="c"),
     ["layer 'c'", "KW = 65", "larger than 64", "6-bit field of the MATMUL"]),
    (lambda: MaxPool2d((KERNEL_MAX + 1, 1), name="p"), ["layer 'p'", "kh = 65", "[1, 64]"]),
])
def test_one_tap_more_is_refused(build, words):
    with pytest.raises(CompileError) as info:
        build()
    for word in words:
        assert word in str(info.value), str(info.value)
