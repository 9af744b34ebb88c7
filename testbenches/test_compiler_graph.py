"""Input validation: every bad network is refused up front with a message that names
the layer and the problem."""

import numpy as np
import pytest

from systolica.compiler import CompileError, Dense, Network, gemm

A = np.ones((4, 8), dtype=np.int8)
B = np.ones((8, 5), dtype=np.int8)


def with_value(shape, index, value):
    x = np.zeros(shape, dtype=np.int64)
    x[index] = value
    return x


@pytest.mark.parametrize("build, words", [
    (lambda: gemm(np.zeros((0, 8)), B), ["input", "empty dimension"]),
    (lambda: gemm(A, np.zeros((8, 0))), ["'gemm'", "weights", "empty dimension"]),
    (lambda: gemm(A, np.ones(8)), ["weights", "2-D"]),
    (lambda: gemm(A, np.ones((7, 5))), ["'gemm'", "K = 7", "8 columns"]),
    (lambda: gemm(A, with_value((8, 5), (2, 3), 200)), ["weights[2, 3] = 200", "int8"]),
    (lambda: gemm(np.full((4, 8), -129), B), ["input[0, 0] = -129"]),
    (lambda: gemm(A, B, np.array([0, 0, 0, 1 << 31, 0])), ["bias[3] = 2147483648", "int32"]),
    (lambda: gemm(A, B, np.zeros(4)), ["bias has 4 elements", "N = 5"]),
    (lambda: gemm(A, B * 0.5), ["integers"]),
    (lambda: gemm(A, B, mult=1 << 16), ["mult = 65536", "[0, 65535]"]),
    (lambda: gemm(A, B, shift=64), ["shift = 64", "[0, 63]"]),
    (lambda: gemm(A, B, zp=128), ["zp = 128", "[-128, 127]"]),
    (lambda: gemm(A, B, out_dtype="int16"), ["out_dtype", "int16"]),
    (lambda: gemm(A, B, shift=3, out_dtype="int32"), ["int32 output is not requantised"]),
    (lambda: Network(A, []), ["no layers"]),
    (lambda: Network(A, [Dense(B, out_dtype="int32", name="fc1"), Dense(np.ones((5, 2)))]),
     ["'fc1'", "only the last layer may produce int32"]),
    (lambda: Network(A, [Dense(B, name="fc1"), Dense(np.ones((4, 2)), name="fc2")]),
     ["'fc2'", "K = 4", "layer 'fc1' has 5 columns"]),
    (lambda: Network(A, [Dense(B, name="x"), Dense(np.ones((5, 2)), name="x")]),
     ["unique"]),
])
def test_bad_network_is_refused_with_its_reason(build, words):
    with pytest.raises(CompileError) as info:
        build()
    for word in words:
        assert word in str(info.value)


def test_compile_error_is_a_value_error():
    assert issubclass(CompileError, ValueError)


def test_layers_get_default_names_and_int8_arrays():
    net = Network(np.arange(8).reshape(1, 8), [Dense(np.ones((8, 3))), Dense(np.ones((3, 2)))])
    assert [layer.name for layer in net.layers] == ["layer0", "layer1"]
    assert net.input.dtype == np.int8 and net.layers[0].weights.dtype == np.int8
    assert net.out_shape == (1, 2)
