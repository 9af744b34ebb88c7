"""DRAM layouts of activations, weights, biases and outputs (docs/contract.md,
"DRAM layouts"). A DRAM image is a uint8 array ``(words, cfg.rows)``: one word is one
CBUF row, and one accumulator row is ``cfg.acc_row_words`` consecutive words."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from systolica.arch.config import ChipConfig


def blocks(n: int, size: int) -> int:
    return -(-n // size)


@dataclass(frozen=True)
class Piece:
    """What of an N-block one VRUN writes into one block of ``R`` columns: CBUF
    partition group ``g`` takes ACC column group ``g + shift`` where that is one of the
    N-block's, else zero (`first`: the block's first writer) or what it holds
    (``wb_src = keep``); `last`: the block is whole after it (a store may follow)."""
    block: int
    shift: int
    first: bool
    last: bool


def pieces(cfg: ChipConfig, nb: int, n: int, span: int | None = None) -> list[Piece]:
    """The pieces of N-block `nb` (`span` columns, ``C`` unless given) of a tensor of
    `n` columns: one per block of ``R`` columns it overlaps. On a tall grid that is
    the block it is a sub-block of, on a wide one its slices; on a grid whose sides do
    not divide an N-block may end inside a block that the next one finishes."""
    R, span = cfg.rows, span or cfg.cols
    g = cfg.tile_size
    lo, hi = nb * span, min((nb + 1) * span, n)
    last_nb = (n - 1) // span
    out = []
    for b in range(lo // R, (hi - 1) // R + 1):
        out.append(Piece(b, (b * R - lo) // g, first=(b * R) // span == nb,
                         last=min(((b + 1) * R - 1) // span, last_nb) == nb))
    return out


def max_pieces(cfg: ChipConfig, span: int | None = None) -> int:
    """The most blocks of ``R`` columns an N-block of `span` (``C``) columns overlaps:
    it starts at a multiple of the tile size into a block."""
    span = span or cfg.cols
    return blocks(span + (cfg.rows - cfg.tile_size if span % cfg.rows else 0), cfg.rows)


def _pad(x: np.ndarray, rows: int, cols: int) -> np.ndarray:
    out = np.zeros((rows, cols), dtype=x.dtype)
    out[:x.shape[0], :x.shape[1]] = x
    return out


def activation_words(cfg: ChipConfig, M: int, K: int) -> int:
    return blocks(K, cfg.rows) * M


def weight_words(cfg: ChipConfig, K: int, N: int) -> int:
    return blocks(N, cfg.cols) * blocks(K, cfg.rows) * cfg.rows


def bias_words(cfg: ChipConfig, N: int) -> int:
    return blocks(N, cfg.cols) * cfg.acc_row_words


def output_words(cfg: ChipConfig, M: int, N: int, dtype: str) -> int:
    """int8: the activation layout (blocks of ``R`` columns, ``M`` words each); int32:
    per N-block of ``C`` columns ``M`` accumulator rows."""
    if dtype == "int32":
        return blocks(N, cfg.cols) * M * cfg.acc_row_words
    return blocks(N, cfg.rows) * M


def pack_activations(cfg: ChipConfig, a: np.ndarray) -> np.ndarray:
    """``A[M, K]`` int8 -> K-blocks of ``M`` words, block ``kb`` word ``m`` holding
    ``A[m, kb*R : kb*R+R]``."""
    M, K = a.shape
    R = cfg.rows
    kb = blocks(K, R)
    padded = _pad(a.astype(np.int8), M, kb * R)
    # [M, kb, R] -> [kb, M, R]: block-major, then rows
    return padded.reshape(M, kb, R).transpose(1, 0, 2).reshape(kb * M, R).view(np.uint8)


def pack_weights(cfg: ChipConfig, b: np.ndarray) -> np.ndarray:
    """``B[K, N]`` int8 -> blocks ordered ``(nb, kb)`` of ``R`` words, word ``r`` of a
    block holding ``B[kb*R + r, nb*C : nb*C+C]``; on a wide grid (loaded from the
    west, docs/contract.md "Wide grids") of ``C`` words, word ``c`` holding
    ``B[kb*R : kb*R+R, nb*C + c]``."""
    K, N = b.shape
    R, C = cfg.rows, cfg.cols
    kb, nb = blocks(K, R), blocks(N, C)
    padded = _pad(b.astype(np.int8), kb * R, nb * C)
    tiles = padded.reshape(kb, R, nb, C).transpose(2, 0, 1, 3)   # [nb, kb, R, C]
    if cfg.wide:
        return np.ascontiguousarray(tiles.transpose(0, 1, 3, 2)).reshape(
            nb * kb * C, R).view(np.uint8)
    words = np.zeros((nb, kb, R, R), dtype=np.int8)
    words[..., :C] = tiles
    return words.reshape(nb * kb * R, R).view(np.uint8)


def pack_acc_rows(cfg: ChipConfig, rows: np.ndarray) -> np.ndarray:
    """int32 ``[n, C]`` accumulator rows -> ``n * acc_row_words`` words (a padded
    row's last word ends in zero bytes)."""
    n = rows.shape[0]
    data = np.zeros((n, cfg.acc_row_words * cfg.rows), np.uint8)
    data[:, :4 * cfg.cols] = np.ascontiguousarray(rows.astype("<i4")).view(
        np.uint8).reshape(n, 4 * cfg.cols)
    return data.reshape(n * cfg.acc_row_words, cfg.rows)


def unpack_acc_rows(cfg: ChipConfig, words: np.ndarray) -> np.ndarray:
    """``n * acc_row_words`` words -> int32 ``[n, C]``."""
    raw = np.ascontiguousarray(words, dtype=np.uint8).reshape(
        -1, cfg.acc_row_words * cfg.rows)[:, :4 * cfg.cols]
    return np.ascontiguousarray(raw).view("<i4").reshape(-1, cfg.cols).astype(np.int32)


def pack_bias(cfg: ChipConfig, bias: np.ndarray) -> np.ndarray:
    """``bias[N]`` int32 -> one accumulator row per N-block."""
    C = cfg.cols
    nb = blocks(bias.shape[0], C)
    return pack_acc_rows(cfg, _pad(bias.astype(np.int32)[None, :], 1, nb * C).reshape(nb, C))


def unpack_int8(cfg: ChipConfig, words: np.ndarray, M: int, N: int) -> np.ndarray:
    """Per block of ``R`` columns ``M`` words -> int8 ``[M, N]`` (the activation
    layout; on a tall array an N-block of ``C`` columns is a sub-block of one)."""
    C = cfg.rows
    nb = blocks(N, C)
    tiles = np.asarray(words, dtype=np.uint8)[:nb * M, :C].view(np.int8).reshape(nb, M, C)
    return tiles.transpose(1, 0, 2).reshape(M, nb * C)[:, :N].copy()


def unpack_int32(cfg: ChipConfig, words: np.ndarray, M: int, N: int) -> np.ndarray:
    """Per N-block ``M`` accumulator rows -> int32 ``[M, N]``."""
    C = cfg.cols
    nb = blocks(N, C)
    rows = unpack_acc_rows(cfg, np.asarray(words)[:nb * M * cfg.acc_row_words])
    return rows.reshape(nb, M, C).transpose(1, 0, 2).reshape(M, nb * C)[:, :N].copy()


def tensor_words(cfg: ChipConfig, shape: tuple[int, ...], dtype: str) -> int:
    """DRAM words of a tensor, as its 2-D view ``[prod(shape[:-1]), shape[-1]]``: int8
    in the activation layout (blocks of ``R`` columns, ``M`` words each), int32 as per
    N-block ``M`` accumulator rows."""
    return output_words(cfg, int(np.prod(shape[:-1])), shape[-1], dtype)


def pack_tensor(cfg: ChipConfig, x: np.ndarray) -> np.ndarray:
    """An int8 tensor of any rank in the activation layout of its 2-D view
    ``[prod(shape[:-1]), shape[-1]]`` (a 2-D one: :func:`pack_activations`)."""
    return pack_activations(cfg, np.asarray(x).reshape(-1, x.shape[-1]))


def resident_rows(cfg: ChipConfig, K: int, rows: int) -> int:
    """CBUF rows of ``rows`` rows of an int8 ``[M, K]`` tensor on chip: K-block ``kb``
    at rows ``kb*rows .. kb*rows+rows-1`` (how a dense layer reads its input and writes
    its output for the next one)."""
    return blocks(K, cfg.rows) * rows


def staged_slices(cfg: ChipConfig, N: int) -> int:
    """Slices of `R` columns an N-block of a dense layer with `N` outputs fills: the
    staging slots one accumulator half needs (``k = C / R`` on a wide grid, fewer when
    ``N < C``; 1 on a tall or square grid; on one whose sides do not divide, the most
    blocks an N-block overlaps, :func:`max_pieces`)."""
    most = cfg.slices if cfg.sides_divide else max_pieces(cfg)
    return min(most, blocks(N, cfg.rows))
