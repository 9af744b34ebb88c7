"""Splitting the array into tile groups for dense layers with small K and N
(docs/compiler.md, "Splitting the array"; layouts: docs/contract.md, "Split dense
layers").

A layer split into ``s`` groups computes ``M_s = ceil(M/s)`` rows of
``[A_0 | A_1 | ..] @ blockdiag(W, W, ..)``: group ``g`` (the ``g``-th diagonal block of
``R/s`` array rows and ``C/s`` columns) takes rows ``g*M_s ..`` of the input. This
module decides ``s`` per layer (the cost model) and packs and unpacks the data; the
dense rule lowers the packed layer as any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Mapping

import numpy as np

from ..arch.config import ChipConfig
from . import layout
from .errors import CompileError
from .graph import Graph, Node
from .ops import Dense


@dataclass(frozen=True)
class Split:
    """A layer's split: ``s`` tile groups (1: the whole array), the estimated busiest
    unit's rows per candidate, and why it is not split further."""
    s: int
    estimates: Mapping[int, int]
    why: str


def group_counts(cfg: ChipConfig) -> list[int]:
    """The splits the grid allows: ``s`` dividing both ``tile_rows`` and ``tile_cols``
    (each group a square of tiles on the diagonal)."""
    g = gcd(cfg.tile_rows, cfg.tile_cols)
    return [s for s in range(1, g + 1) if g % s == 0]


def rows(M: int, s: int) -> int:
    """``M_s``: rows the array streams for ``M`` output rows in ``s`` groups."""
    return -(-M // s)


def _refusal(cfg: ChipConfig, graph: Graph, node: Node, s: int) -> str | None:
    """Why `node` cannot run in `s` tile groups (None: it can)."""
    if type(node.op) is not Dense:
        return f"a {type(node.op).__name__} is never split"
    if len(node.inputs) != 1:
        return "it reads several tensors"
    (t,) = node.inputs
    out = node.outputs[0]
    if graph.producer(t) is not None or [c.name for c in graph.consumers(t)] != [node.name] \
            or t in graph.outputs:
        return f"its input {t!r} is made or read by other layers (only a graph input " \
               f"read by this layer alone is laid out split)"
    if graph.consumers(out) or out not in graph.outputs:
        return f"its output {out!r} is read by other layers (only a graph output is " \
               f"laid out split)"
    K, N = node.op.K, node.op.N
    if s not in group_counts(cfg):
        return f"the {cfg.tile_rows}x{cfg.tile_cols} tile grid has no {s} diagonal " \
               f"tile groups (splits: {', '.join(map(str, group_counts(cfg)))})"
    if K > cfg.rows // s:
        return f"K = {K} > {cfg.rows // s}, the rows of one of {s} tile groups"
    if N > cfg.cols // s:
        return f"N = {N} > {cfg.cols // s}, the columns of one of {s} tile groups"
    return None


def estimate(cfg: ChipConfig, M: int, out_dtype: str, s: int) -> int:
    """The busiest unit's cycles for a one-block layer of ``M`` rows in ``s`` groups:
    the DMA (input words, output words, the weight block, a bias row), the matmul
    unit (its rows and a weight load), the vector unit (its rows)."""
    m = rows(M, s)
    out_words = m * (cfg.acc_row_words if out_dtype == "int32" else 1)
    dma = m + out_words + cfg.rows + cfg.acc_row_words
    matmul = m + cfg.rows + cfg.tile_rows - 1
    return max(dma, matmul, m)


def choose(cfg: ChipConfig, graph: Graph, forced: int | Mapping[str, int] | None = None
           ) -> dict[str, Split]:
    """Each dense layer's split (layers absent: not dense). `forced`: ``1`` (never
    split) or ``{layer: s}`` overrides the cost model; a forced split the layer cannot
    take is an error naming the constraint."""
    if isinstance(forced, bool) or not (forced is None or isinstance(forced, (int, Mapping))):
        raise CompileError(f"split must be None (the cost model), 1 (never) or a mapping "
                           f"of layer name to tile groups, not {forced!r}")
    if isinstance(forced, int) and forced != 1:
        raise CompileError(f"split={forced}: a number splits no layer in particular; give "
                           f"1 (never split) or {{layer name: {forced}}}")
    if isinstance(forced, Mapping):
        names = {n.name for n in graph.nodes}
        unknown = sorted(set(forced) - names)
        if unknown:
            raise CompileError(f"split: graph {graph.name!r} has no layer(s) "
                               f"{', '.join(map(repr, unknown))}; its layers are "
                               f"{', '.join(map(repr, sorted(names)))}")
    out: dict[str, Split] = {}
    for node in graph.nodes:
        if type(node.op) is not Dense:
            continue
        M = graph.tensor(node.outputs[0]).shape[0]
        dtype = graph.tensor(node.outputs[0]).dtype
        refusals = {s: _refusal(cfg, graph, node, s) for s in group_counts(cfg)[1:]}
        estimates = {1: estimate(cfg, M, dtype, 1)}
        estimates.update({s: estimate(cfg, M, dtype, s)
                          for s, why in refusals.items() if why is None})
        if isinstance(forced, Mapping) and node.name in forced:
            s = forced[node.name]
            if not isinstance(s, int) or isinstance(s, bool) or s < 1:
                raise CompileError(f"split: layer {node.name!r}: tile groups must be a "
                                   f"positive integer, not {s!r}")
            why = None if s == 1 else _refusal(cfg, graph, node, s)
            if why is not None:
                raise CompileError(f"split: layer {node.name!r} cannot run in {s} tile "
                                   f"groups: {why}")
            out[node.name] = Split(s, estimates, "as asked")
            continue
        if forced == 1:
            out[node.name] = Split(1, estimates, "split=1 was asked")
            continue
        best = min(estimates, key=lambda s: (estimates[s], s))
        larger = [s for s in refusals if s > best]
        if larger and refusals[larger[0]] is not None:
            why = f"not {larger[0]} groups: {refusals[larger[0]]}"
        elif larger:
            why = f"{best} groups estimate {estimates[best]} cycles, {larger[0]} groups " \
                  f"{estimates[larger[0]]}"
        else:
            why = "the grid has no more diagonal tile groups" if best > 1 else \
                "the grid has one tile group"
        out[node.name] = Split(best, estimates, why)
    return out


def pack_input(cfg: ChipConfig, a: np.ndarray, s: int) -> np.ndarray:
    """``A[M, K]`` -> ``A'[M_s, R]``: row ``m`` holds ``A[g*M_s + m]`` at columns
    ``g*R/s``."""
    M, K = a.shape
    m, width = rows(M, s), cfg.rows // s
    out = np.zeros((m, cfg.rows), dtype=a.dtype)
    for g in range(s):
        part = a[g * m:(g + 1) * m]
        out[:part.shape[0], g * width:g * width + K] = part
    return out


def pack_weights(cfg: ChipConfig, w: np.ndarray, s: int) -> np.ndarray:
    """``W[K, N]`` -> the block-diagonal ``W'[R, C]``."""
    K, N = w.shape
    kw, nw = cfg.rows // s, cfg.cols // s
    out = np.zeros((cfg.rows, cfg.cols), dtype=w.dtype)
    for g in range(s):
        out[g * kw:g * kw + K, g * nw:g * nw + N] = w
    return out


def pack_bias(cfg: ChipConfig, bias: np.ndarray, s: int) -> np.ndarray:
    """``bias[N]`` -> ``bias'[C]``, one copy per group."""
    nw = cfg.cols // s
    out = np.zeros(cfg.cols, dtype=bias.dtype)
    for g in range(s):
        out[g * nw:g * nw + bias.shape[0]] = bias
    return out


def unpack_output(cfg: ChipConfig, y: np.ndarray, M: int, N: int, s: int) -> np.ndarray:
    """``out'[M_s, C]`` -> ``out[M, N]``."""
    m, nw = rows(M, s), cfg.cols // s
    parts = [y[:, g * nw:g * nw + N] for g in range(s)]
    return np.concatenate(parts, axis=0)[:M].copy()


def params(cfg: ChipConfig, layer: Dense, s: int) -> list[tuple[str, np.ndarray]]:
    """A split layer's parameters in the DRAM layouts: the block-diagonal weights,
    then the bias, one copy per group (the keys of ``DenseRule.params``)."""
    out = [("weights", layout.pack_weights(cfg, pack_weights(cfg, layer.weights, s)))]
    if layer.bias is not None:
        out.append(("bias", layout.pack_bias(cfg, pack_bias(cfg, layer.bias, s))))
    return out
