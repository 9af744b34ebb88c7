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

from systolica.arch.config import ChipConfig
from systolica.compiler.lowering.chain import ChainChoice, lower_chain
from systolica.compiler.lowering.cnn import check_channels, is_cnn, lower_cnn
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.graph import MatMulT, Transpose, as_graph
from systolica.compiler.microops.lowered import Lowered
from systolica.compiler.scheduling.pipeline import hoist, loop_order, pipeline
from systolica.compiler.planning.memory import DramMap, MemoryPlan, plan_memory
from systolica.compiler.lowering.rules import WEIGHT_SLOTS, Emitter, acc_half_rows, rule_for

__all__ = ["DramMap", "Lowered", "WEIGHT_SLOTS", "acc_half_rows", "lower"]


def lower(cfg: ChipConfig, network, plan: MemoryPlan | None = None, *,
          chain: ChainChoice | str | None = None, weights=None, buffers=None,
          segments=None, choose_ubuf: bool = True, split=None) -> Lowered:
    """Lower `network` (Graph or Network), with `plan` or the planner's own; with a
    ChainChoice `chain`, a graph that is one chain of convolutions in passes; `chain`
    as a strategy name (or None: the cost model's) and `segments`: which runs of
    convolutions in a convolutional network run as chains; `weights`, `buffers`: a
    convolutional network's tiling per layer; `choose_ubuf`: the UBUF a network's
    chains assume is the cost model's (:func:`.cnn.lower_cnn`); `split`: dense layers'
    tile groups (:func:`.split.choose`)."""
    graph = as_graph(network)
    tiled = weights is not None or buffers is not None
    if isinstance(chain, ChainChoice):
        if tiled or segments is not None:
            raise CompileError("weights, buffers and segments apply to a network lowered "
                               "layer by layer; a chain takes ChainChoice.weights")
        return lower_chain(cfg, graph, chain)
    if chain is not None and not isinstance(chain, str):
        raise CompileError(f"chain must be a ChainChoice (a graph that is one chain), a "
                           f"strategy name or None, not {chain!r}")
    if is_cnn(graph) or (_chained_nd_transposes(graph) and _channels_fit(cfg, graph)):
        if split not in (None, 1):
            raise CompileError(f"graph {graph.name!r}: split applies to dense layers "
                               f"lowered as GEMMs, not to a convolutional network")
        return lower_cnn(cfg, graph, weights, buffers, chain, segments, choose_ubuf)
    if tiled or segments is not None:
        raise CompileError(f"graph {graph.name!r}: weights, buffers and segments apply to "
                           f"convolutional networks (the GEMM lowering streams its "
                           f"weights)")
    plan = plan_memory(cfg, graph, split) if plan is None else plan
    emitter = Emitter(cfg, graph, plan)
    blocks = hoist([blk for i, node in enumerate(graph.nodes)
                    for blk in rule_for(node).emit(emitter, i, node)])
    return Lowered(pipeline(cfg, blocks), loop_order(blocks), plan)


def _chained_nd_transposes(graph) -> bool:
    """Whether a transpose of rank other than 2 reads a tensor a layer makes (another
    transpose's output), or any transpose an int32 one: the GEMM lowering keeps such
    tensors nowhere, so a graph of transposes and dense layers then runs layer by layer
    through DRAM, as a convolutional network does (which has no rule for MatMulT)."""
    return not any(isinstance(n.op, MatMulT) for n in graph.nodes) and any(
        isinstance(n.op, Transpose) and graph.producer(n.inputs[0]) is not None
        and (len(graph.tensor(n.inputs[0]).shape) != 2
             or graph.tensor(n.inputs[0]).dtype == "int32") for n in graph.nodes)


def _channels_fit(cfg: ChipConfig, graph) -> bool:
    """Whether `graph`'s layers' output channels fit one block on a non-square array
    (:func:`.cnn.check_channels`: at most ``min(R, C)``). A graph of dense layers and
    transposes with more (an int32 dense layer's N-blocks on a tall array, transposed)
    takes the GEMM lowering, through DRAM as beside a MatMulT (the layer-by-layer
    lowering would take it too, as it takes feature maps of any channels)."""
    try:
        check_channels(cfg, graph)
    except CompileError:
        return False
    return True
