"""DRAM layouts against the element-by-element statement in docs/contract.md."""

import numpy as np
import pytest

from systolica.arch.config import preset
from systolica.compiler.planning import layout

CFG = preset("tiny")  # R = C = 8, acc_row_words = 4
R, C = CFG.rows, CFG.cols
rng = np.random.default_rng(7)


@pytest.mark.parametrize("M, K", [(1, 1), (3, 8), (5, 19)])
def test_activations(M, K):
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    words = layout.pack_activations(CFG, a).view(np.int8)
    assert words.shape == (layout.activation_words(CFG, M, K), R)
    for kb in range(layout.blocks(K, R)):
        for m in range(M):
            for p in range(R):
                k = kb * R + p
                assert words[kb * M + m, p] == (a[m, k] if k < K else 0)


@pytest.mark.parametrize("K, N", [(1, 1), (8, 8), (19, 11)])
def test_weights(K, N):
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    words = layout.pack_weights(CFG, b).view(np.int8)
    KB, NB = layout.blocks(K, R), layout.blocks(N, C)
    assert words.shape == (layout.weight_words(CFG, K, N), R)
    for nb in range(NB):
        for kb in range(KB):
            for r in range(R):
                for c in range(C):
                    k, n = kb * R + r, nb * C + c
                    want = b[k, n] if k < K and n < N else 0
                    assert words[(nb * KB + kb) * R + r, c] == want


def test_bias_is_one_little_endian_acc_row_per_n_block():
    bias = rng.integers(-(1 << 31), 1 << 31, 11).astype(np.int32)
    words = layout.pack_bias(CFG, bias)
    assert words.shape == (2 * CFG.acc_row_words, R)
    raw = words.reshape(-1).tobytes()
    for n in range(16):
        want = int(bias[n]) if n < 11 else 0
        assert int.from_bytes(raw[4 * n:4 * n + 4], "little", signed=True) == want


@pytest.mark.parametrize("M, N", [(1, 1), (4, 8), (3, 13)])
def test_output_round_trip(M, N):
    y8 = rng.integers(-128, 128, (M, N)).astype(np.int8)
    NB = layout.blocks(N, C)
    words = np.zeros((NB * M, R), dtype=np.uint8)
    for nb in range(NB):                 # per N-block M words, as the contract says
        for m in range(M):
            cols = y8[m, nb * C:nb * C + C].view(np.uint8)
            words[nb * M + m, :len(cols)] = cols
    assert np.array_equal(layout.unpack_int8(CFG, words, M, N), y8)

    y32 = rng.integers(-(1 << 31), 1 << 31, (M, N)).astype(np.int32)
    padded = np.zeros((M, NB * C), dtype=np.int32)
    padded[:, :N] = y32
    rows = padded.reshape(M, NB, C).transpose(1, 0, 2).reshape(NB * M, C)
    words = layout.pack_acc_rows(CFG, rows)
    assert words.shape == (layout.output_words(CFG, M, N, "int32"), R)
    assert np.array_equal(layout.unpack_int32(CFG, words, M, N), y32)
