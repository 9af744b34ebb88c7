"""Flatten (``Flatten``) in the map lowering: a view. The dense layer after it reads
the map's channel blocks pixel by pixel as its K-blocks (``Source.gather``)."""

from __future__ import annotations

from systolica.compiler.errors import CompileError
from systolica.compiler.graph.graph import Graph, Node
from systolica.compiler.graph.ops import Flatten
from systolica.compiler.lowering.maps.jobs import MapInputs
from systolica.compiler.lowering.registry import register
from systolica.compiler.lowering.rule import Rule


@register
class FlattenRule(Rule):
    op = Flatten
    maps = feature_map = True
    stores_blocks = False

    def macs(self, graph: Graph, node: Node) -> int:
        return 0

    def map_job(self, inputs: MapInputs, index: int, node: Node) -> None:
        cfg, R = inputs.cfg, inputs.cfg.rows
        shp = inputs.graph.tensor(node.inputs[0]).shape
        if shp[1] * shp[2] != 1:
            if shp[3] % R:
                raise CompileError(
                    f"layer {node.name!r}: Flatten of a {shp[1]}x{shp[2]} map needs "
                    f"a channel count that is a multiple of {R} on chip "
                    f"{cfg.name!r} (it has {shp[3]}), so that each K-block of the "
                    f"dense layer is one pixel's channels; use such channels or put "
                    f"a GlobalAvgPool before it")
            inputs.gathered[node.outputs[0]] = (shp[1] * shp[2], shp[3] // R)
        inputs.alias[node.outputs[0]] = inputs.alias.get(node.inputs[0], node.inputs[0])
        return None
