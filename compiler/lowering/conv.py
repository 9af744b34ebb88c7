"""Convolutions (``Conv2d``) in the map lowering: each lowers the mapping the matcher
chose for it (:mod:`.conv_mapping`, docs/matching.md) as weight steps
(:mod:`.conv_steps`), requantised per channel. Depthwise ones are :mod:`.depthwise`'s.
Convolutions are what chains (seed 001) are made of."""

from __future__ import annotations

from systolica.compiler.graph.graph import Graph, Node
from systolica.compiler.graph.ops import Conv2d
from systolica.compiler.lowering.conv_mapping import choose_mapping
from systolica.compiler.lowering.conv_steps import conv_job
from systolica.compiler.lowering.depthwise import depthwise_job
from systolica.compiler.lowering.maps.jobs import Job, MapInputs
from systolica.compiler.lowering.registry import register
from systolica.compiler.lowering.rule import Rule


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
        mapping = choose_mapping(inputs.cfg, inputs.graph, node, src, inputs.mapping)
        return conv_job(inputs.cfg, inputs.graph, index, node, src, mapping)

    def chain_refusal(self, node: Node) -> str | None:
        if node.op.out_dtype != "int8":
            return (f"layer {node.name!r}: a chain's layers requantise to int8; an int32 "
                    f"output runs layer by layer")
        if node.op.depthwise:
            return (f"layer {node.name!r}: a chain is made of convolutions over all "
                    f"input channels, not depthwise ones; run it layer by layer")
        return None
