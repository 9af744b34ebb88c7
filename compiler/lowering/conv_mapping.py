"""Which mapping a convolution lowers (docs/matching.md): in ``static`` mode the fixed
deployment strategy; else every realisable mapping the matcher finds for the layer,
ranked by the compiler's cycle model (the layer's job under the tiling it would take,
:func:`~systolica.compiler.planning.map_tiling.estimate_tiling`). Cached per layer
shape, input layout, mode and chip, so a network's repeated shapes cost nothing."""

from __future__ import annotations

import time
from dataclasses import dataclass

from systolica.arch import isa
from systolica.arch.config import ChipConfig
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.graph import Graph, Node
from systolica.compiler.graph.ops import Conv2d
from systolica.compiler.lowering.maps.jobs import Job, Source
from systolica.compiler.lowering.maps.layout import network_layout
from systolica.compiler.matching import match
from systolica.compiler.matching.mapping import Mapping
from systolica.compiler.planning.map_tiling import choose_tiling, estimate_tiling


@dataclass(frozen=True)
class Ranked:
    """A mapping with the cycles the cost model gives its job (None: not realisable,
    with the reason)."""
    mapping: Mapping
    cycles: int | None
    why: str = ""


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


def tap_patterns(job: Job) -> int:
    """Tap tables the job's steps need (a step reading more than one tap: one per
    distinct pattern of offsets from its first tap)."""
    patterns = {tuple((h - st.taps[0][0], w - st.taps[0][1]) for h, w in st.taps)
                for steps in job.steps for st in steps if len(st.taps) > 1}
    return len(patterns)


def rank(cfg: ChipConfig, graph: Graph, node: Node, src: Source,
         mappings: list[Mapping]) -> list[Ranked]:
    """Each mapping's cycles by the cost model, fastest first (ties: the order given);
    a mapping whose job the chip cannot run ranks last, with the reason."""
    from systolica.compiler.lowering.conv import conv_job
    lay = network_layout(cfg)
    out = []
    for m in mappings:
        try:
            job = conv_job(cfg, graph, 0, node, src, m)
            if tap_patterns(job) > isa.TAP_TABLES - 1:
                raise CompileError(f"needs {tap_patterns(job)} tap tables, the chip has "
                                   f"{isa.TAP_TABLES - 1}")
            cycles = estimate_tiling(cfg, lay, job, choose_tiling(cfg, lay, job))[0]
            out.append(Ranked(m, cycles))
        except CompileError as e:
            out.append(Ranked(m, None, str(e)))
    order = sorted(range(len(out)), key=lambda i: (out[i].cycles is None,
                                                   out[i].cycles or 0, i))
    return [out[i] for i in order]


def choose(cfg: ChipConfig, graph: Graph, node: Node, src: Source,
           mode: str | None) -> Choice:
    """The mapping `node` lowers reading `src` (its layout fixed), in mapping `mode`."""
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
        [Ranked(m, None, "") for m in found]
    if not ranked or (ranked[0].cycles is None and len(found) > 1):
        why = "; ".join(f"{r.mapping.describe()}: {r.why}" for r in ranked) or \
            "the matcher found no invocation of the MATMUL in it"
        raise CompileError(f"layer {node.name!r}: no mapping onto the array runs it ({why})")
    choice = Choice(ranked[0].mapping, tuple(ranked), time.perf_counter() - t0)
    _CACHE[key] = choice
    _SPENT[0] += choice.seconds
    return choice


def choose_mapping(cfg: ChipConfig, graph: Graph, node: Node, src: Source,
                   mode: str | None) -> Mapping:
    return choose(cfg, graph, node, src, mode).mapping


def prefers_replicated(cfg: ChipConfig, graph: Graph, node: Node, copies: int,
                       mode: str | None) -> bool:
    """Whether `node` runs faster reading its input replicated (`copies` replicas) than
    in channel blocks: the layout follows the mapping the matcher ranks first."""
    if mode == "static" or node.op.depthwise:
        return False
    shape = graph.tensor(node.inputs[0]).shape
    cycles = []
    for c in (1, copies):
        src = Source(node.inputs[0], shape, c)
        try:
            choice = choose(cfg, graph, node, src, mode)
        except CompileError:
            cycles.append(None)
            continue
        best = choice.ranked[0]
        if best.cycles is None:     # a lone candidate, not ranked: rank it now
            best = rank(cfg, graph, node, src, [best.mapping])[0]
        cycles.append(best.cycles)
    blocks, replicated = cycles
    return replicated is not None and (blocks is None or replicated < blocks)
