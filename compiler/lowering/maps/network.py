"""The map lowering of a whole network (docs/cnn.md). Entry point: :func:`lower_maps`.

Every feature map lives in DRAM in the channel-block layout; each layer streams its
input(s) through the CBUF in tiles of output rows and writes its output back
(:mod:`.tile_loop`). Pooling and the residual add are the same loop with fixed
weights; a dense layer is a 1x1 convolution over its ``M`` rows. Each layer has a
tiling (the cost model's unless the user gives one), and runs of convolutions may
run as chains in passes (seed 001), as the cost model picks."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.arch.instructions import PARAM_ROWS
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.concat_pad import pad_map_concats
from systolica.compiler.graph.graph import Graph
from systolica.compiler.graph.ops import Conv2d
from systolica.compiler.lowering.chain import emit_segment, segment_regions
from systolica.compiler.lowering.conv_mapping import prefers_replicated
from systolica.compiler.lowering.emitter import Emitter
from systolica.compiler.lowering.lowered import Lowered
from systolica.compiler.lowering.maps.jobs import Job, MapInputs, stored_weights
from systolica.compiler.lowering.maps.layout import (
    DramLayout,
    acc_param_rows,
    as_map,
    network_layout,
    out_words,
    pack_map,
    replicas,
)
from systolica.compiler.lowering.maps.tile_loop import TileLoop
from systolica.compiler.lowering.registry import rule_for
from systolica.compiler.lowering.zero_fill import zero_fill
from systolica.compiler.options import CompileOptions
from systolica.compiler.planning import layout, network_chains
from systolica.compiler.planning.map_tiling import BUFFERS, WEIGHTS, choose_tilings, per_layer
from systolica.compiler.planning.memory import DramMap, MemoryPlan, Region, check_plan
from systolica.compiler.scheduling.pipeline import Block, loop_order, pipeline


def replicable(cfg: ChipConfig, graph: Graph, t: str, mode: str | None) -> bool:
    """Whether map `t` is stored replicated: it has few channels, only convolutions read
    it, and the mapping each ranks first reads it so (docs/matching.md)."""
    shape = graph.tensor(t).shape
    readers = graph.consumers(t)
    if len(shape) != 4 or not readers or replicas(cfg, shape[3]) == 1:
        return False
    return all(isinstance(r.op, Conv2d) and not r.op.depthwise
               and prefers_replicated(cfg, graph, r, replicas(cfg, shape[3]), mode)
               for r in readers)


def lower_maps(cfg: ChipConfig, graph: Graph, options: CompileOptions = CompileOptions(),
               choose_ubuf: bool = True) -> Lowered:
    """Lower a graph with feature-map ops: plan DRAM, emit every layer's tile loops,
    software-pipeline them. `options`: ``weights`` (``stream`` or ``persistent``) and
    ``buffers`` (2 or 1): each layer's :class:`~systolica.compiler.planning.map_tiling.Tiling`, for
    all layers or per layer name; what is not given is the cost model's choice
    (:func:`~systolica.compiler.planning.map_tiling.choose_tiling`). ``chain`` (one of
    :data:`~systolica.compiler.planning.network_chains.NETWORK_STRATEGIES`, None: the
    cost model's pick per segment) and ``segments`` (the user's cut, by first layer
    name): which runs of convolutions run as chains in passes
    (:mod:`systolica.compiler.planning.network_chains`); with `choose_ubuf`, the
    UBUF the program assumes is the cost model's (``choose_ubuf``: the plan's ``cfg``
    says where), else the chip's.

    Each layer is its rule's job (:meth:`.Rule.map_job`), or a view."""
    weights, buffers = options.weights, options.buffers
    chain, segments = options.chain, options.segments
    graph = pad_map_concats(cfg, graph)     # ragged join inputs: whole channel blocks
    lay = network_layout(cfg)
    R = cfg.rows
    # the replicated layout for a graph input read only by convolutions with few
    # channels, and for a map a transpose makes (an NCHW input's NHWC map) that only
    # such convolutions read (the transpose writes it replicated), where every reader's
    # best mapping reads it so (docs/matching.md)
    copies = {}
    for t in graph.inputs:
        if replicable(cfg, graph, t, options.mapping):
            copies[t] = replicas(cfg, graph.tensor(t).shape[3])
    for node in graph.nodes:
        t = node.outputs[0]
        if t not in graph.outputs and rule_for(node).writes_replicated(cfg, graph, node) \
                and replicable(cfg, graph, t, options.mapping):
            copies[t] = replicas(cfg, graph.tensor(t).shape[3])
    views = MapInputs(cfg, graph, copies, options.mapping)
    # jobs, one per layer that is not a view
    jobs: list[Job | None] = []
    for i, node in enumerate(graph.nodes):
        rule = rule_for(node)
        if not rule.maps:
            raise CompileError(f"layer {node.name!r}: no lowering rule for "
                               f"{type(node.op).__name__} in a convolutional network")
        jobs.append(rule.map_job(views, i, node))
    alias = views.alias
    choices = choose_tilings(cfg, lay, jobs, weights, buffers)
    named = {j.name for j in jobs if j is not None}
    given = set(per_layer(named, weights, "weights", WEIGHTS)) | \
        set(per_layer(named, buffers, "buffers", BUFFERS))
    if choose_ubuf:
        cfg, chained = network_chains.choose_ubuf(cfg, lay, graph, jobs, choices, chain,
                                              segments, frozenset(given))
    else:
        chained = network_chains.choose_segments(cfg, lay, graph, jobs, choices, chain,
                                             segments, frozenset(given))
    inside: set[str] = set()        # maps a chain keeps in the CBUF: never in DRAM
    member: dict[int, int] = {}     # node index -> its chain's first node index
    for first, (seg, _) in chained.items():
        for j in seg.jobs[:-1]:
            inside.add(graph.nodes[j.index].outputs[0])
        for j in seg.jobs:
            member[j.index] = first
    # DRAM: inputs, parameters, intermediate maps, outputs
    steps = len(graph.nodes)
    dram = DramLayout(cfg, steps, options.dram_base or 0)
    place = dram.place
    inputs, params, outputs = {}, {}, {}
    where: dict[str, int] = {}

    for t in graph.inputs:
        x = np.asarray(graph.data[t])
        words = pack_map(cfg, x.reshape(as_map(x.shape)), copies.get(t, 1))
        where[t] = place(f"tensor {t}", words, f"input {t!r}")
        inputs[t] = (where[t], words.shape[0])
    job_dram = {}
    for job in jobs:
        if job is None:
            continue
        w = place(f"{job.name}.weights", stored_weights(cfg, job.weights),
                  f"weights of layer {job.name!r}")
        params[(job.name, "weights")] = (w, job.weights.shape[0] * cfg.weight_rows)
        p = None
        if job.post is not None:
            rows = acc_param_rows(cfg, job.post_rows)
            p = place(f"{job.name}.post", rows, f"epilogue parameters of layer {job.name!r}")
            params[(job.name, "post")] = (p, rows.shape[0])
        job_dram[job.name] = (w, p)
    for node in graph.nodes:            # a view's own parameters (a transpose's)
        pieces = rule_for(node).map_params(cfg, graph, node)
        if pieces:
            at = {}
            for what, words in pieces:
                at[what] = place(f"{node.name}.{what}", words,
                                 f"{what} of layer {node.name!r}")
                params[(node.name, what)] = (at[what], words.shape[0])
            job_dram[node.name] = (at, None)
    # a Concat of maps is a view: its inputs are written in its output's channel blocks
    joined = {t for n in graph.nodes if rule_for(n).lays_out_inputs for t in n.inputs}
    for t in joined:
        if t in inside:
            raise CompileError(f"tensor {t!r}: a Concat's input is kept in the CBUF by a "
                               f"chain of convolutions; compile with chain="
                               f"'layer_by_layer' or segments that end at {t!r}")
    for node in graph.nodes:
        for t in node.outputs:
            if t in alias or t in graph.outputs or t in inside or t in joined:
                continue
            tt = graph.tensor(t)
            where[t] = place(f"tensor {t}", out_words(cfg, tt), f"tensor {t!r}")
    for t in graph.outputs:
        tt = graph.tensor(t)
        if t in alias:
            raise CompileError(f"tensor {t!r}: a graph output cannot be a Flatten's")
        where[t] = place(f"tensor {t}", out_words(cfg, tt), f"output {t!r}")
        outputs[t] = (where[t], out_words(cfg, tt))
    for node in reversed(graph.nodes):      # an outer Concat's blocks before an inner's
        if rule_for(node).lays_out_inputs:
            shape = as_map(graph.tensor(node.outputs[0]).shape)
            at = where[node.outputs[0]]
            for t in node.inputs:
                where[t] = at
                at += layout.blocks(graph.tensor(t).shape[3], R) * shape[0] * shape[1] \
                    * shape[2]
    image = dram.image()

    loop = TileLoop(Emitter(cfg, cfg.tile_rows, cfg.tile_cols), lay)
    blocks: list[Block] = []
    chip_regions = []
    for index, job in enumerate(jobs):
        if job is None:
            node = graph.nodes[index]
            more, regions = rule_for(node).map_emit(
                loop, views, index, node, where,
                job_dram[node.name][0] if node.name in job_dram else {})
            blocks += more
            chip_regions += regions
            continue
        if job.index in member:
            if member[job.index] != job.index:
                continue                    # emitted with its chain
            seg = chained[job.index][0]
            for s in job.sources:
                s.dram = where[alias.get(s.tensor, s.tensor)]
            last = seg.jobs[-1]
            blocks += emit_segment(
                cfg, loop, seg, job.sources[0].dram,
                [job_dram[j.name][0] for j in seg.jobs],
                [job_dram[j.name][1] for j in seg.jobs],
                where[graph.nodes[last.index].outputs[0]])
            chip_regions += segment_regions(cfg, seg, job.index, last.index)
            continue
        for s in job.sources:
            s.dram = where[alias.get(s.tensor, s.tensor)]
        out_t = graph.nodes[job.index].outputs[0]
        w, p = job_dram[job.name]
        blocks += loop.job(job, w, p, where[out_t], choices[job.name])
        mine = loop.lay
        i = job.index
        chip_regions += [
            Region("cbuf", f"{job.name}.weights" if mine.persistent else "weight ring",
                   mine.ring, mine.staging - mine.ring, i, i,
                   f"weights of layer {job.name!r}" if mine.persistent else "weight ring"),
            Region("cbuf", f"{job.name}.staging and tiles", mine.staging,
                   mine.top - mine.staging, i, i,
                   f"output staging and input tile buffers of layer {job.name!r}")]
    # the ACC halves and slots, live but where a chain's own ACC split is
    spans, at = [], 0
    for first in sorted(chained):
        spans.append((at, first - 1))
        at = chained[first][0].jobs[-1].index + 1
    spans.append((at, steps - 1))
    for lo, hi in spans:
        if lo > hi:
            continue
        chip_regions += [
            Region("acc", "accumulator halves", lay.halves, 2 * lay.half_rows, lo, hi,
                   "accumulator halves"),
            Region("acc", "epilogue slots", lay.slots, 2 * PARAM_ROWS, lo, hi,
                   "epilogue parameter slots")]
    dmap = DramMap(MappingProxyType(inputs), MappingProxyType(params),
                   MappingProxyType(outputs), dram.cursor)
    plan = MemoryPlan(cfg, graph, MappingProxyType({}), tuple(chip_regions + dram.regions),
                      image, dmap)
    check_plan(plan)
    plan = zero_fill(cfg, blocks, loop.em, plan)
    return Lowered(pipeline(cfg, blocks), loop_order(blocks), plan, copies=copies,
                   jobs={j.name: j for j in jobs if j is not None},
                   tiling={name: t for name, t in choices.items()
                           if name not in {graph.nodes[i].name for i in member}},
                   segments={graph.nodes[first].name: c
                             for first, (_, c) in chained.items()})


