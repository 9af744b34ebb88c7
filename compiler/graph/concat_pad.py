"""Ragged inputs of a Concat of feature maps, padded to whole channel blocks
(docs/cnn.md, "Concat of feature maps").

A Concat of maps is a DRAM layout: each input's producer stores its channel blocks of
``R`` where they lie in the output's, so every input but the last must fill whole
blocks. An input of ``C`` channels that does not is widened here, before lowering, to
the next multiple of ``R``: its producer (a convolution) computes the extra channels
with zero weights and bias, and every layer that reads it, or the join, or a map
carried on from them by pools, a global pool or a Flatten, reads the channels at their
new places: a convolution or dense layer gets zero weight rows where the pad channels
lie, so their values never reach a sum. The graph's outputs keep their shapes: a
padded map may not be one.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.graph import Graph, Node, Tensor
from systolica.compiler.graph.ops import (
    AvgPool2d,
    Concat,
    Conv2d,
    Dense,
    Flatten,
    GlobalAvgPool,
    MaxPool2d,
)

# ops that keep channels where they are: their output is padded as their input
_CARRY = (MaxPool2d, AvgPool2d, GlobalAvgPool)


def pad_map_concats(cfg: ChipConfig, graph: Graph) -> Graph:
    """`graph` with every ragged non-last input of a Concat of maps widened to whole
    blocks of ``cfg.rows`` channels (the graph itself if there is none)."""
    R = cfg.rows
    widen = {}          # tensor -> its producer's new output channels
    for node in graph.nodes:
        if isinstance(node.op, Concat) and len(graph.tensor(node.outputs[0]).shape) == 4:
            for t in node.inputs[:-1]:
                c = graph.tensor(t).shape[3]
                if c % R:
                    widen[t] = -(-c // R) * R
    if not widen:
        return graph
    # places[t]: where the old last-axis indices of t lie in the padded t, and its width
    places: dict[str, tuple[np.ndarray, int]] = {}
    nodes, shapes = [], {}
    for node in graph.nodes:
        op, out = node.op, node.outputs[0]
        padded_in = [t for t in node.inputs if t in places]
        if out in widen:
            op = _widened(graph, node, widen[out], R)
            places[out] = (np.arange(graph.tensor(out).shape[3]), widen[out])
        if padded_in:
            op = _reading_padded(graph, node, op, places, R)
        if isinstance(node.op, _CARRY) and padded_in:
            places[out] = places[node.inputs[0]]
        elif isinstance(node.op, Flatten) and padded_in:
            pos, width = places[node.inputs[0]]
            _, h, w, _ = graph.tensor(node.inputs[0]).shape
            pixels = np.arange(h * w)[:, None] * width
            places[out] = ((pixels + pos[None, :]).ravel(), h * w * width)
        elif isinstance(node.op, Concat) and padded_in:
            pos, at = [], 0
            for t in node.inputs:
                p, width = places.get(t, (np.arange(graph.tensor(t).shape[-1]),
                                          graph.tensor(t).shape[-1]))
                pos.append(p + at)
                at += width
            places[out] = (np.concatenate(pos), at)
        if out in places:
            if out in graph.outputs:
                raise CompileError(
                    f"layer {node.name!r}: its output {out!r} is a graph output, but it "
                    f"holds channels padded for the join {_join_of(graph, out)!r} (each "
                    f"input but the last of a Concat of maps fills whole blocks of "
                    f"{R} channels on chip {cfg.name!r}); give the joined maps multiples "
                    f"of {R} channels, or read the join with a layer first")
            shape = graph.tensor(out).shape
            shapes[out] = (*shape[:-1], places[out][1])
        nodes.append(Node(op, node.inputs, node.outputs))
    tensors = tuple(Tensor(t.name, shapes.get(t.name, t.shape), t.dtype, t.quant)
                    for t in graph.tensors)
    return Graph(tensors, tuple(nodes), graph.inputs, graph.outputs, graph.data, graph.name)


def _join_of(graph: Graph, tensor: str) -> str:
    """The first Concat downstream of (or at) `tensor`'s producer, for messages."""
    seen, todo = set(), [tensor]
    while todo:
        t = todo.pop(0)
        node = graph.producer(t)
        if node is not None and isinstance(node.op, Concat):
            return node.name
        for reader in graph.consumers(t):
            if isinstance(reader.op, Concat):
                return reader.name
            if reader.outputs[0] not in seen:
                seen.add(reader.outputs[0])
                todo.append(reader.outputs[0])
    return "?"


def _widened(graph: Graph, node: Node, width: int, R: int):
    """The producer of a ragged join input, computing `width` channels: the extra
    ones with zero weights and bias."""
    op, t = node.op, node.outputs[0]
    c = graph.tensor(t).shape[3]
    if not isinstance(op, Conv2d) or op.groups > 1:
        raise CompileError(
            f"layer {node.name!r} makes {t!r}, a map of {c} channels that a Concat joins "
            f"before another input; the join needs whole blocks of {R} channels there, "
            f"and only a convolution's of one group (not a depthwise or grouped one's) "
            f"output can be widened with zero channels: give it "
            f"a multiple of {R} channels, put it last in the Concat, or pass it through "
            f"a convolution first")
    kh, kw, cin, _ = op.weights.shape
    weights = np.zeros((kh, kw, cin, width), np.int8)
    weights[..., :c] = op.weights
    bias = np.zeros(width, np.int32)
    if op.bias is not None:
        bias[:c] = op.bias

    def per_channel(value, fill):
        if np.ndim(value) == 0:
            return value
        out = np.full(width, fill, dtype=np.asarray(value).dtype)
        out[:c] = value
        return out

    return dataclasses.replace(op, weights=weights, bias=bias,
                               mult=per_channel(op.mult, 1), shift=per_channel(op.shift, 0))


def _reading_padded(graph: Graph, node: Node, op, places, R: int):
    """`op` (of `node`) reading its padded inputs at their new places: a convolution's
    or dense layer's weights get zero rows at the pad channels; ops that carry
    channels (pools, a Flatten) and a Concat need no change."""
    t = next(t for t in node.inputs if t in places)
    if isinstance(op, Conv2d) and op.groups == 1:
        pos, width = places[t]
        kh, kw, _, cout = op.weights.shape
        weights = np.zeros((kh, kw, width, cout), np.int8)
        weights[:, :, pos, :] = op.weights
        return dataclasses.replace(op, weights=weights)
    if isinstance(op, Dense) and len(node.inputs) == 1:
        pos, width = places[t]
        weights = np.zeros((width, op.weights.shape[1]), np.int8)
        weights[pos, :] = op.weights
        return dataclasses.replace(op, weights=weights)
    if isinstance(op, (*_CARRY, Flatten, Concat)):
        return op
    raise CompileError(
        f"layer {node.name!r} ({type(op).__name__}) reads {t!r}, whose channels are "
        f"padded for the join {_join_of(graph, t)!r} (each input but the last of a "
        f"Concat of maps fills whole blocks of {R} channels); only convolutions of one "
        f"group (not depthwise or grouped ones), dense layers, pools and Flatten can "
        f"read padded channels: "
        f"give the joined maps multiples of {R} channels, or read the join with a "
        f"convolution first")
