"""The residual add (``Add``) in the map lowering: the tile loop over both inputs, a
diagonal block of each input's multiplier, the zero points folded into the bias."""

from __future__ import annotations

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.compiler.graph.graph import Graph, Node
from systolica.compiler.graph.ops import Add
from systolica.compiler.lowering.maps.jobs import Job, MapInputs, Source, identity_steps
from systolica.compiler.lowering.registry import register
from systolica.compiler.lowering.rule import Rule


@register
class AddRule(Rule):
    op = Add
    maps = feature_map = True

    def macs(self, graph: Graph, node: Node) -> int:
        return node.op.macs(graph.tensor(node.outputs[0]).shape)

    def map_job(self, inputs: MapInputs, index: int, node: Node) -> Job:
        return add_job(inputs.cfg, inputs.graph, index, node, inputs.sources(node))


def add_job(cfg: ChipConfig, graph: Graph, index: int, node: Node, srcs: list[Source]
            ) -> Job:
    """The residual add as a job: a diagonal block of each input's multiplier."""
    op: Add = node.op
    out = graph.tensor(node.outputs[0])
    N, H, W, C = srcs[0].shape
    steps, weights, span = identity_steps(cfg, C, [(0, 0)], [op.mult_a, op.mult_b])
    za, zb = (graph.tensor(t).quant.zero_point for t in node.inputs)
    nbk = len(steps)
    job = Job(node.name, index, srcs, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 0, out.shape,
              "int8", steps, weights, macs=2 * N * H * W * C, span=span)
    job.post = "bias"
    job.post_rows = np.full((nbk, cfg.cols), -(op.mult_a * za + op.mult_b * zb),
                            dtype=np.int32)
    job.vrun = dict(requant=1, mult=1, shift=op.shift, zp=op.zp & 0xFF, use_bias=1,
                    relu=int(op.relu))
    return job
