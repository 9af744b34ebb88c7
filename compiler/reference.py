"""Numpy reference of the integer semantics: the oracle the compiled programs are
checked against. It shares no code with the lowering or the golden model."""

from __future__ import annotations

import numpy as np

from .graph import Dense, Graph, Network, as_graph


def wrap32(x: np.ndarray) -> np.ndarray:
    """Two's-complement int32 wrap of int64 values."""
    return ((x.astype(np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int64)


def requantise(x: np.ndarray, mult: int, shift: int, zp: int, relu: bool) -> np.ndarray:
    """VRUN's requantisation of int32 values to int8 (docs/contract.md)."""
    rounding = (1 << (shift - 1)) if shift else 0
    y = (x.astype(np.int64) * mult + rounding) >> shift
    y = np.clip(y + zp, -128, 127)
    if relu:
        y = np.maximum(y, zp)
    return y.astype(np.int8)


def dense(x: np.ndarray, layer: Dense) -> np.ndarray:
    acc = wrap32(x.astype(np.int64) @ layer.weights.astype(np.int64))
    if layer.bias is not None:
        acc = wrap32(acc + layer.bias.astype(np.int64))
    if layer.out_dtype == "int32":
        return (np.maximum(acc, 0) if layer.relu else acc).astype(np.int32)
    return requantise(acc, layer.mult, layer.shift, layer.zp, layer.relu)


def outputs(network: Graph | Network) -> dict[str, np.ndarray]:
    """Every graph output by tensor name (a layer reading several tensors reads them
    concatenated along K)."""
    graph = as_graph(network)
    values = dict(graph.data)
    for node in graph.nodes:
        x = np.concatenate([values[t] for t in node.inputs], axis=1)
        values[node.outputs[0]] = dense(x, node.op)
    return {t: values[t] for t in graph.outputs}


def run(network: Graph | Network) -> np.ndarray:
    """The output of a single-output network: int8 or int32 ``[M, N]``."""
    outs = outputs(network)
    if len(outs) != 1:
        raise ValueError(f"the network has {len(outs)} outputs; use outputs()")
    return next(iter(outs.values()))
