"""Lower a network to a latency-insensitive micro-op program and its DRAM image, in
three parts with one entry point each:

1. ``plan.plan_memory``: where every tensor, parameter and scratch area lives in
   CBUF, ACC and DRAM, by lifetime;
2. ``rules.RULES``: per op type, the layer's loop nest of micro-ops, each with the
   multiplexer settings it relies on;
3. ``pipeline.pipeline``: the software-pipelined program order, verified against
   the loop order.
"""

from __future__ import annotations

from ..arch.config import ChipConfig
from .chain_lower import ChainChoice, lower_chain
from .cnn import is_cnn, lower_cnn
from .errors import CompileError
from .graph import as_graph
from .lowered import Lowered
from .pipeline import loop_order, pipeline
from .plan import DramMap, MemoryPlan, plan_memory
from .rules import WEIGHT_SLOTS, Emitter, acc_half_rows, rule_for

__all__ = ["DramMap", "Lowered", "WEIGHT_SLOTS", "acc_half_rows", "lower"]


def lower(cfg: ChipConfig, network, plan: MemoryPlan | None = None, *,
          chain: ChainChoice | None = None, weights=None, buffers=None) -> Lowered:
    """Lower `network` (Graph or Network), with `plan` or the planner's own; with
    `chain`, as a chain of convolutions in passes; `weights`, `buffers`: a
    convolutional network's tiling per layer (:func:`.cnn.lower_cnn`)."""
    graph = as_graph(network)
    tiled = weights is not None or buffers is not None
    if chain is not None:
        if tiled:
            raise CompileError("weights and buffers apply to a network lowered layer by "
                               "layer; a chain takes ChainChoice.weights")
        return lower_chain(cfg, graph, chain)
    if is_cnn(graph):
        return lower_cnn(cfg, graph, weights, buffers)
    if tiled:
        raise CompileError(f"graph {graph.name!r}: weights and buffers apply to "
                           f"convolutional networks (the GEMM lowering streams its "
                           f"weights)")
    plan = plan_memory(cfg, graph) if plan is None else plan
    emitter = Emitter(cfg, graph, plan)
    blocks = [blk for i, node in enumerate(graph.nodes)
              for blk in rule_for(node).emit(emitter, i, node)]
    return Lowered(pipeline(cfg, blocks), loop_order(blocks), plan)
