"""Lower a network to a latency-insensitive micro-op program and its DRAM image.
Entry point: :func:`lower`.

A graph holding a feature-map op (or one whose rules would rather go layer by layer
through DRAM) takes the map lowering (:func:`.maps.network.lower_maps`); a graph that
is one chain of convolutions, with a :class:`~.chain.ChainChoice`, runs in passes
(:func:`.chain.lower_chain`); the rest takes the dense lowering, in three parts:

1. ``planning.memory.plan_memory``: where every tensor, parameter and scratch area
   lives in CBUF, ACC and DRAM, by lifetime;
2. each layer's rule (:mod:`.registry`): its loop nest of micro-ops, each with the
   multiplexer settings it relies on;
3. ``scheduling.pipeline.pipeline``: the software-pipelined program order, verified
   against the loop order.
"""

from __future__ import annotations

from systolica.arch.config import ChipConfig
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.graph import Graph, as_graph

# every op family's rules, registered as they are imported
from systolica.compiler.lowering import add, concat, conv, dense, flatten, matmul_t, pool, transpose  # noqa: F401
from systolica.compiler.lowering.chain import ChainChoice, check_channels, lower_chain
from systolica.compiler.lowering.emitter import Emitter
from systolica.compiler.lowering.lowered import Lowered
from systolica.compiler.lowering.maps.network import lower_maps
from systolica.compiler.lowering.registry import rule_for
from systolica.compiler.lowering.zero_fill import zero_fill
from systolica.compiler.options import CompileOptions
from systolica.compiler.planning.memory import MemoryPlan, plan_memory
from systolica.compiler.scheduling.pipeline import hoist, loop_order, pipeline

__all__ = ["Lowered", "lower", "takes_maps"]


def lower(cfg: ChipConfig, network, options: CompileOptions = CompileOptions(), *,
          plan: MemoryPlan | None = None, choose_ubuf: bool = True) -> Lowered:
    """Lower `network` (Graph or Network) as `options` say (``chain``: a ChainChoice
    runs a graph that is one chain of convolutions in passes, a strategy name or None
    the cost model's chains in a convolutional network, as ``segments`` cut them;
    ``weights``, ``buffers``: a convolutional network's tiling per layer; ``split``:
    dense layers' tile groups), with `plan` or the planner's own; `choose_ubuf`: the
    UBUF a network's chains assume is the cost model's
    (:func:`.maps.network.lower_maps`)."""
    graph = as_graph(network)
    chain = options.chain
    if isinstance(chain, ChainChoice):
        if options.tiled or options.segments is not None:
            raise CompileError("weights, buffers and segments apply to a network lowered "
                               "layer by layer; a chain takes ChainChoice.weights")
        return lower_chain(cfg, graph, chain, options.mapping, options.dram_base or 0)
    if chain is not None and not isinstance(chain, str):
        raise CompileError(f"chain must be a ChainChoice (a graph that is one chain), a "
                           f"strategy name or None, not {chain!r}")
    if takes_maps(cfg, graph):
        if options.split not in (None, 1):
            raise CompileError(f"graph {graph.name!r}: split applies to dense layers "
                               f"lowered as GEMMs, not to a convolutional network")
        return lower_maps(cfg, graph, options, choose_ubuf)
    if options.tiled or options.segments is not None:
        raise CompileError(f"graph {graph.name!r}: weights, buffers and segments apply to "
                           f"convolutional networks (the GEMM lowering streams its "
                           f"weights)")
    plan = plan_memory(cfg, graph, options.split, options.dram_base or 0) \
        if plan is None else plan
    em = Emitter.for_plan(cfg, graph, plan)
    blocks = hoist([blk for i, node in enumerate(graph.nodes)
                    for blk in rule_for(node).emit(em, i, node)])
    plan = zero_fill(cfg, blocks, em, plan)
    return Lowered(pipeline(cfg, blocks), loop_order(blocks), plan)


def takes_maps(cfg: ChipConfig, graph: Graph) -> bool:
    """Whether `graph` takes the map lowering: it holds a feature-map op, or every
    layer's rule takes part in it and one would rather go layer by layer through DRAM
    (:meth:`.Rule.prefers_maps`: a transpose of a tensor the dense lowering keeps
    nowhere) while every layer's output channels fit one block on a non-square array
    (:func:`.chain.check_channels`: at most ``min(R, C)``; a graph with more, such as an
    int32 dense layer's N-blocks on a tall array transposed, takes the dense lowering,
    through DRAM as beside an ``A·Bᵀ``)."""
    rules = [rule_for(n) for n in graph.nodes]
    if any(r.feature_map for r in rules):
        return True
    if not all(r.maps for r in rules) or not any(
            r.prefers_maps(cfg, graph, n) for r, n in zip(rules, graph.nodes)):
        return False
    try:
        check_channels(cfg, graph)
    except CompileError:
        return False
    return True
