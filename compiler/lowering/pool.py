"""Pools (``MaxPool2d``, ``AvgPool2d``, ``GlobalAvgPool``) in the map lowering: the
tile loop with fixed weights, an identity block per tap."""

from __future__ import annotations

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.compiler.graph.graph import Graph, Node
from systolica.compiler.graph.ops import AvgPool2d, GlobalAvgPool, MaxPool2d, average_params
from systolica.compiler.lowering.maps.jobs import Job, MapInputs, Source, identity_steps, tap_list
from systolica.compiler.lowering.registry import register
from systolica.compiler.lowering.rule import Rule


class _PoolRule(Rule):
    maps = feature_map = True

    def macs(self, graph: Graph, node: Node) -> int:
        return node.op.macs(graph.tensor(node.outputs[0]).shape)

    def map_job(self, inputs: MapInputs, index: int, node: Node) -> Job:
        src, = inputs.sources(node)
        return pool_job(inputs.cfg, inputs.graph, index, node, src)


@register
class MaxPoolRule(_PoolRule):
    op = MaxPool2d


@register
class AvgPoolRule(_PoolRule):
    op = AvgPool2d


@register
class GlobalAvgPoolRule(_PoolRule):
    op = GlobalAvgPool


def pool_job(cfg: ChipConfig, graph: Graph, index: int, node: Node, src: Source) -> Job:
    """A pool as a job: an identity block per tap (max-accumulated for a max pool;
    an average pool's sum requantised by its multiplier)."""
    op = node.op
    out = graph.tensor(node.outputs[0])
    N, H, W, C = src.shape
    if isinstance(op, GlobalAvgPool):
        kernel, stride, pads = (H, W), (1, 1), (0, 0, 0, 0)
        mult, shift = (op.mult, op.shift) if getattr(op, "mult", None) is not None \
            else average_params(H * W)
    else:
        kernel, stride, pads = op.kernel, op.stride, op.pads
        mult, shift = (getattr(op, "mult", 1), getattr(op, "shift", 0))
    taps = tap_list(kernel, (1, 1))
    steps, weights, span = identity_steps(cfg, C, taps, [1])
    x_zp = graph.tensor(node.inputs[0]).quant.zero_point
    Ho, Wo = out.shape[1], out.shape[2]
    job = Job(node.name, index, [src], kernel, stride, pads, (1, 1), 0, out.shape, "int8",
              steps, weights, macs=N * Ho * Wo * kernel[0] * kernel[1] * C, span=span)
    if isinstance(op, MaxPool2d):
        job.use_max, job.pad_byte = True, 0x80          # padding never wins
        job.vrun = dict(requant=1, mult=1, shift=0, zp=0)
    else:
        job.pad_byte = x_zp & 0xFF
        nbk = len(steps)
        job.post = "bias"
        job.post_rows = np.full((nbk, cfg.cols), -x_zp * kernel[0] * kernel[1], dtype=np.int32)
        y_zp = out.quant.zero_point           # the input's, unless a global pool says
        job.vrun = dict(requant=1, mult=mult, shift=shift, zp=y_zp & 0xFF, use_bias=1)
    return job
