"""Depthwise convolutions (``Conv2d`` with ``groups`` = channels) in the map lowering
(docs/cnn.md, "Depthwise convolution"): laid out as a pool is, one step per tap whose
weight block is the diagonal of that tap's weights over the block's channels."""

from __future__ import annotations

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.compiler.graph.graph import Graph, Node
from systolica.compiler.graph.ops import Conv2d
from systolica.compiler.lowering.maps.jobs import Job, Source, WStep, channel_params, diagonal_span
from systolica.compiler.planning import layout


def depthwise_job(cfg: ChipConfig, graph: Graph, index: int, node: Node, src: Source
                  ) -> Job:
    """A depthwise convolution (docs/cnn.md, "Depthwise convolution"): laid out as a
    pool is (:func:`identity_steps`: an N-block per channel block, or per sub-block on
    a tall array), one step per tap whose weight block is the diagonal of that tap's
    weights over the block's channels; requantised per channel as a convolution."""
    op: Conv2d = node.op
    R, WC = cfg.rows, cfg.weight_rows
    KH, KW, _, C = op.weights.shape
    out = graph.tensor(node.outputs[0])
    span = diagonal_span(cfg)
    k = min(R // span, layout.blocks(C, span))     # the sub-blocks any N-block takes
    nbk = layout.blocks(C, span)
    w = op.weights.astype(np.int64)[:, :, 0, :]    # [KH, KW, C]
    dil = op.dilation
    blocks, steps = [], []
    for nb in range(nbk):
        cb, sub = divmod(nb, k)
        mine = []
        for kh in range(KH):
            for kw in range(KW):
                diag = np.zeros(R, dtype=np.int64)
                part = w[kh, kw, cb * R:(cb + 1) * R]
                diag[:len(part)] = part
                blk = np.zeros((R, WC), dtype=np.int64)
                blk[:, :span] = np.diag(diag)[:, sub * span:(sub + 1) * span]
                mine.append(WStep(0, cb, ((kh * dil[0], kw * dil[1]),), len(blocks)))
                blocks.append(blk)
        steps.append(mine)
    x_zp = graph.tensor(node.inputs[0]).quant.zero_point
    Ho, Wo = out.shape[1], out.shape[2]
    return Job(node.name, index, [src], (KH, KW), op.stride, op.pads, dil, x_zp & 0xFF,
               out.shape, "int8", steps, np.stack(blocks).astype(np.int8),
               post="params",
               post_rows=channel_params(cfg, node.name, op, x_zp, w.sum(axis=(0, 1)), span),
               vrun=dict(requant=1, params=1, zp=op.zp & 0xFF),
               macs=out.shape[0] * Ho * Wo * KH * KW * C, span=span)
