"""The one micro-op emitter every lowering rule writes through."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from systolica.arch import timing
from systolica.arch.config import ChipConfig
from systolica.arch.isa import Opcode
from systolica.compiler.lowering.registry import rule_for
from systolica.compiler.lowering.routing import gemm_routing
from systolica.compiler.microops.ir import MicroOp, make, moved

if TYPE_CHECKING:
    from systolica.compiler.graph.graph import Graph
    from systolica.compiler.planning.memory import MemoryPlan


@dataclass
class Emitter:
    """Makes the micro-ops of a graph's layers, each with the multiplexer settings it
    relies on, and keeps what the layers share while the graph is lowered: the
    counters that keep the weight ring, weight banks and accumulator halves
    alternating across layers (so one layer's first loads overlap the previous
    layer's last compute), and the tile rows and columns the layers use (the others
    are fed zeros for the whole program, so the routing never changes between
    layers).

    The dense lowering also hands the rules its ``graph``, memory ``plan`` and the
    ``passes`` of each layer read in passes (:meth:`for_plan`)."""
    cfg: ChipConfig
    tile_rows: int
    tile_cols: int
    steps: int = 0          # weight blocks so far: ring slot and bank
    blocks: int = 0         # output blocks so far: accumulator half
    graph: Graph | None = None
    plan: MemoryPlan | None = None
    passes: dict = field(default_factory=dict)   # layer -> [(first row, rows)] of its
                                                 # passes, for a layer read in passes
    _made: dict = field(default_factory=dict, repr=False)

    @classmethod
    def for_plan(cls, cfg: ChipConfig, graph: Graph, plan: MemoryPlan) -> Emitter:
        """The dense lowering's emitter: the tile rows and columns are the most any
        layer's blocks reach (a layer split into tile groups reaches every tile)."""
        used = [(cfg.tile_rows, cfg.tile_cols) if plan.split(n.name) > 1
                else rule_for(n).tiles_used(cfg, graph, n) for n in graph.nodes]
        return cls(cfg, max(r for r, _ in used), max(c for _, c in used), graph=graph,
                   plan=plan)

    def op(self, opcode: Opcode, layer: int, sub=0, *, west: bool = False,
           **fields) -> MicroOp:
        """A checked micro-op with the routing it relies on (:func:`gemm_routing`; a
        VRUN writes sub-block, slice or piece `sub`; with `west`, a WLOAD takes every
        tile's weights from the west lane). One with the fields of an earlier one
        shares its checked parts: a network repeats most of its instructions."""
        # A DMA is kept with its DRAM address at 0 (``timing.moving_field``) and moved
        # to each address it is made with: most differ in nothing else.
        moving = timing.moving_field(opcode)
        value = fields.get(moving, 0) if moving else 0
        if value:
            fields[moving] = 0
        # layers share them too: nothing checked depends on the layer
        key = (opcode, sub, west, tuple(fields.items()))   # one call site, one field order
        known = self._made.get(key)
        if known is None:
            known = make(self.cfg, opcode, layer, **fields)
            routing = gemm_routing(self.cfg, opcode, to_acc=bool(fields.get("to_acc")),
                                   tile_rows=self.tile_rows, tile_cols=self.tile_cols,
                                   sub=sub)
            if west and opcode is Opcode.WLOAD:
                routing.update({n: "west" for n in routing if n.startswith("w_in[")})
            known.needs = routing
            self._made[key] = known
        if value:
            mop = moved(self.cfg, known, value)
            mop.layer = layer
            return mop
        return MicroOp(known.op, known.fields, known.accesses, layer, known.needs)
