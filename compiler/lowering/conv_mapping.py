"""Which mapping a convolution lowers (docs/matching.md): in ``static`` mode the fixed
deployment strategy; given by layer name, that one; else every realisable mapping the
matcher finds for the layer, ranked by the compiler's cycle model: the tiling cost model
(:func:`~systolica.compiler.planning.map_tiling.estimate_tiling`) for all, then the
layer compiled on its own, its exact predicted cycles, for those within
:data:`EXACT_WITHIN` of the best estimate. Cached per layer shape, input layout, mode
and chip, so a network's repeated shapes cost nothing."""

from __future__ import annotations

import time
from collections.abc import Mapping as NameMap
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.compiler.errors import CompileError, InternalError
from systolica.compiler.graph.graph import Graph, GraphBuilder, Node
from systolica.compiler.graph.ops import Conv2d
from systolica.compiler.lowering.conv_steps import conv_job
from systolica.compiler.lowering.maps.jobs import Source
from systolica.compiler.lowering.maps.layout import network_layout
from systolica.compiler.matching import match
from systolica.compiler.matching.mapping import Mapping
from systolica.compiler.planning.map_tiling import choose_tiling, estimate_tiling

#: Candidates whose estimate is within this fraction of the best one's are compiled on
#: their own and ranked by their exact cycles.
EXACT_WITHIN = 0.10


@dataclass(frozen=True)
class Ranked:
    """A mapping with its cycles: ``estimate`` by the tiling cost model, ``exact`` by
    the layer compiled on its own (None where not compiled); or not realisable (both
    None), with the reason."""
    mapping: Mapping
    estimate: int | None
    exact: int | None = None
    why: str = ""

    @property
    def cycles(self) -> int | None:
        return self.exact if self.exact is not None else self.estimate


@dataclass
class Choice:
    """A layer's chosen mapping, the ranked alternatives and the time the choice took."""
    mapping: Mapping
    ranked: tuple[Ranked, ...]
    seconds: float


_CACHE: dict[tuple, Choice] = {}
_SPENT = [0.0]          # seconds the choices not found in the cache took, in all


def seconds_spent() -> float:
    """Seconds spent choosing mappings so far in this process (the driver reports a
    compile's share as its ``match`` phase)."""
    return _SPENT[0]


def _key(cfg: ChipConfig, graph: Graph, node: Node, copies: int, mode: str | None) -> tuple:
    op: Conv2d = node.op
    return (cfg.key, graph.tensor(node.inputs[0]).shape, op.weights.shape, op.stride,
            op.pads, op.dilation, op.groups, op.out_dtype, copies, mode or "matcher")


def alone(graph: Graph, node: Node) -> Graph:
    """`node` as a network of its own (zero input data: cycles do not depend on it)."""
    t = graph.tensor(node.inputs[0])
    g = GraphBuilder(f"{node.name}_alone")
    x = g.input(np.zeros(t.shape, dtype=np.int8), name=node.inputs[0],
                zero_point=t.quant.zero_point)
    g.layer(node.op, x)
    return g.build()


def estimate(cfg: ChipConfig, graph: Graph, node: Node, src: Source, m: Mapping) -> Ranked:
    """`m`'s cycles by the tiling cost model, or why the chip cannot run it."""
    lay = network_layout(cfg)
    try:
        job = conv_job(cfg, graph, 0, node, src, m)
        return Ranked(m, estimate_tiling(cfg, lay, job, choose_tiling(cfg, lay, job))[0])
    except CompileError as e:
        return Ranked(m, None, why=str(e))


class CompileAlone(Protocol):
    """The compiler's exact cycles of a network with the given mappings by layer."""
    def __call__(self, cfg: ChipConfig, graph: Graph, mapping: dict[str, Mapping]) -> int: ...


_COMPILER: list[CompileAlone] = []


def exact_cycles_by(compile_alone: CompileAlone) -> CompileAlone:
    """Register the compiler (the driver does, as it is imported: lowering does not
    import the driver that imports it)."""
    _COMPILER[:] = [compile_alone]
    return compile_alone


def exact(cfg: ChipConfig, graph: Graph, node: Node, ranked: Ranked) -> Ranked:
    """`ranked` with the predicted cycles of its layer compiled on its own with it."""
    if not _COMPILER:
        raise InternalError("no compiler registered for exact cycles (importing "
                            "systolica.compiler registers it)")
    try:
        cycles = _COMPILER[0](cfg, alone(graph, node), {node.op.name: ranked.mapping})
    except CompileError as e:
        return Ranked(ranked.mapping, None, why=str(e))
    return Ranked(ranked.mapping, ranked.estimate, cycles)


def rank(cfg: ChipConfig, graph: Graph, node: Node, src: Source,
         mappings: list[Mapping]) -> list[Ranked]:
    """Each mapping's cycles, fastest first (ties: the order given): the estimate of
    every one, the exact cycles of those near the best; one the chip cannot run ranks
    last, with the reason."""
    out = [estimate(cfg, graph, node, src, m) for m in mappings]
    known = [r.estimate for r in out if r.estimate is not None]
    if len(known) > 1:
        near = min(known) * (1 + EXACT_WITHIN)
        close = [i for i, r in enumerate(out) if r.estimate is not None and r.estimate <= near]
        if len(close) > 1:
            for i in close:
                out[i] = exact(cfg, graph, node, out[i])
    # the exact ones first (the rest were estimated slower than all of them), then by
    # estimate; what the chip cannot run last
    order = sorted(range(len(out)), key=lambda i: (out[i].cycles is None,
                                                   out[i].exact is None,
                                                   out[i].cycles or 0, i))
    return [out[i] for i in order]


def choose(cfg: ChipConfig, graph: Graph, node: Node, src: Source,
           mode: str | NameMap | None) -> Choice:
    """The mapping `node` lowers reading `src` (its layout fixed), in mapping `mode`."""
    if isinstance(mode, NameMap):
        if node.name in mode:
            return Choice(mode[node.name], (), 0.0)
        mode = None
    key = _key(cfg, graph, node, src.copies, mode)
    if key in _CACHE:
        return _CACHE[key]
    t0 = time.perf_counter()
    work = match.workload_of(graph, node)
    if mode == "static":
        found = [match.static_mapping(cfg, work)]
    else:
        layout = "replicated" if src.copies > 1 else "blocks"
        found = [c.mapping for c in match.candidates(cfg, work) if c.mapping.layout == layout]
    # one candidate needs no ranking: the lowering reports what the chip cannot run
    ranked = rank(cfg, graph, node, src, found) if len(found) > 1 else \
        [Ranked(m, None) for m in found]
    if not ranked or (ranked[0].cycles is None and len(found) > 1):
        why = "; ".join(f"{r.mapping.describe()}: {r.why}" for r in ranked) or \
            "the matcher found no invocation of the MATMUL in it"
        raise CompileError(f"layer {node.name!r}: no mapping onto the array runs it ({why})")
    choice = Choice(ranked[0].mapping, tuple(ranked), time.perf_counter() - t0)
    _CACHE[key] = choice
    _SPENT[0] += choice.seconds
    return choice


def choose_mapping(cfg: ChipConfig, graph: Graph, node: Node, src: Source,
                   mode: str | NameMap | None) -> Mapping:
    return choose(cfg, graph, node, src, mode).mapping


def prefers_replicated(cfg: ChipConfig, graph: Graph, node: Node, copies: int,
                       mode: str | NameMap | None) -> bool:
    """Whether `node` runs faster reading its input replicated (`copies` replicas) than
    in channel blocks: the layout follows the mapping ranked first."""
    if isinstance(mode, NameMap) and node.name in mode:
        return mode[node.name].layout == "replicated"
    if mode == "static" or node.op.depthwise:
        return False
    shape = graph.tensor(node.inputs[0]).shape
    best = []
    for c in (1, copies):
        src = Source(node.inputs[0], shape, c)
        try:
            choice = choose(cfg, graph, node, src, mode)
        except CompileError:
            best.append(None)
            continue
        best.append(choice.ranked[0] if choice.ranked[0].cycles is not None
                    else estimate(cfg, graph, node, src, choice.mapping))
    blocks, replicated = best
    if replicated is None or replicated.cycles is None:
        return False
    if blocks is None or blocks.cycles is None:
        return True
    if (blocks.exact is None) != (replicated.exact is None):
        # compare like with like: both exact
        blocks, replicated = (exact(cfg, graph, node, r) for r in (blocks, replicated))
        if replicated.cycles is None or blocks.cycles is None:
            return blocks.cycles is None and replicated.cycles is not None
    return replicated.cycles < blocks.cycles
