"""Convolutions (``Conv2d``) in the map lowering: a weight block per kernel tap and
channel block (or ``R // C`` taps packed into one block for a replicated input),
per N-block of ``C`` output channels, requantised per channel. Depthwise ones are
:mod:`.depthwise`'s. Convolutions are what chains (seed 001) are made of."""

from __future__ import annotations

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.compiler.graph.graph import Graph, Node
from systolica.compiler.graph.ops import Conv2d
from systolica.compiler.lowering.depthwise import depthwise_job
from systolica.compiler.lowering.maps.jobs import (
    Job,
    MapInputs,
    Source,
    WStep,
    channel_params,
    fits_int32,
)
from systolica.compiler.lowering.registry import register
from systolica.compiler.lowering.rule import Rule
from systolica.compiler.planning import layout


@register
class ConvRule(Rule):
    op = Conv2d
    maps = feature_map = True

    def macs(self, graph: Graph, node: Node) -> int:
        return node.op.macs(graph.tensor(node.outputs[0]).shape)

    def map_job(self, inputs: MapInputs, index: int, node: Node) -> Job:
        src, = inputs.sources(node)
        if node.op.depthwise:
            return depthwise_job(inputs.cfg, inputs.graph, index, node, src)
        return conv_job(inputs.cfg, inputs.graph, index, node, src)

    def chain_refusal(self, node: Node) -> str | None:
        if node.op.out_dtype != "int8":
            return (f"layer {node.name!r}: a chain's layers requantise to int8; an int32 "
                    f"output runs layer by layer")
        if node.op.depthwise:
            return (f"layer {node.name!r}: a chain is made of convolutions over all "
                    f"input channels, not depthwise ones; run it layer by layer")
        return None


def conv_job(cfg: ChipConfig, graph: Graph, index: int, node: Node, src: Source) -> Job:
    """A convolution over all its input channels as a job of the tile loop."""
    op: Conv2d = node.op
    R = cfg.rows
    KH, KW, Cin, Cout = op.weights.shape
    out = graph.tensor(node.outputs[0])
    C = cfg.cols             # an N-block: one ACC row of C output channels
    WC = max(R, C)           # a weight block's columns (past C, or on a tall grid past
                             # the N-block's C, zero)
    nb = layout.blocks(Cout, C)
    w = op.weights.astype(np.int64)
    taps = [(kh, kw) for kh in range(KH) for kw in range(KW)]
    dil = op.dilation
    blocks, steps = [], []
    for n in range(nb):
        cols = slice(n * C, min((n + 1) * C, Cout))
        mine = []
        if src.copies > 1:
            g = src.copies
            for j in range(0, len(taps), g):
                group = taps[j:j + g]
                blk = np.zeros((R, WC), dtype=np.int64)
                for r, (kh, kw) in enumerate(group):
                    blk[r * Cin:(r + 1) * Cin, :cols.stop - cols.start] = w[kh, kw, :, cols]
                mine.append(WStep(0, 0, tuple((kh * dil[0], kw * dil[1]) for kh, kw in group),
                                  len(blocks)))
                blocks.append(blk)
        else:
            for cb in range(layout.blocks(Cin, R)):
                rows = slice(cb * R, min((cb + 1) * R, Cin))
                for kh, kw in taps:
                    blk = np.zeros((R, WC), dtype=np.int64)
                    blk[:rows.stop - rows.start, :cols.stop - cols.start] = w[kh, kw, rows, cols]
                    mine.append(WStep(0, cb, ((kh * dil[0], kw * dil[1]),), len(blocks)))
                    blocks.append(blk)
        steps.append(mine)
    x_zp = graph.tensor(node.inputs[0]).quant.zero_point
    Ho, Wo = out.shape[1], out.shape[2]
    job = Job(node.name, index, [src], (KH, KW), op.stride, op.pads, dil,
              x_zp & 0xFF, out.shape, op.out_dtype, steps, np.stack(blocks).astype(np.int8),
              macs=out.shape[0] * Ho * Wo * KH * KW * Cin * Cout, span=C)
    if op.out_dtype == "int32":
        # the accumulator is the output: the vector unit adds the bias (the input zero
        # point folded in) in place, and the rows are stored as they are
        bias = np.zeros(Cout, dtype=np.int64) if op.bias is None else op.bias.astype(np.int64)
        bias = bias - x_zp * w.sum(axis=(0, 1, 2))
        fits_int32(node.name, bias)
        job.post = "bias"
        job.post_rows = np.zeros((nb, C), dtype=np.int32)
        job.post_rows.reshape(-1)[:Cout] = bias
        job.vrun = dict(use_bias=1)
        return job
    job.post = "params"
    job.post_rows = channel_params(cfg, node.name, op, x_zp, w.sum(axis=(0, 1, 2)), C)
    job.vrun = dict(requant=1, params=1, zp=op.zp & 0xFF)
    return job
