"""The matcher's entry points (docs/matching.md): a layer's :class:`Workload`, every
realisable :class:`Mapping` the search finds for a chip (:func:`candidates`, cached per
layer shape and chip), and the fixed strategy it is measured against
(:func:`static_mapping`)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from systolica.arch.config import ChipConfig
from systolica.compiler.graph import ops
from systolica.compiler.matching import realisable
from systolica.compiler.matching.csp import LADDER, Asset, Options, search
from systolica.compiler.matching.generalise import generalise, tiling, utilisation
from systolica.compiler.matching.instruction import instruction_graph
from systolica.compiler.matching.mapping import Axis, Mapping
from systolica.compiler.matching.polyhedral import SymbolicGraph
from systolica.compiler.matching.workloads import Workload, conv2d, dense, pool2d


@dataclass(frozen=True)
class Candidate:
    """A realisable mapping, the asset and relaxation rung that found it, the solver's
    time for it, and its estimated MAC utilisation (the order of the list)."""
    mapping: Mapping
    asset: Asset
    rung: int
    seconds: float
    utilisation: float
    tiling: tuple

    def describe(self) -> str:
        return f"{self.mapping.describe()}  ({self.utilisation:.2f} of the array)"


def workload_of(graph, node) -> Workload | None:
    """The matcher's view of a layer of `graph` (Conv2d, Dense, MaxPool2d,
    AvgPool2d), None for any other op."""
    op = node.op
    if isinstance(op, ops.Conv2d):
        n, h, w, cin = graph.tensor(node.inputs[0]).shape
        kh, kw, _, cout = op.weights.shape
        return conv2d(n=n, h=h, w=w, cin=cin, cout=cout, kernel=(kh, kw),
                      stride=tuple(op.stride), dilation=tuple(op.dilation),
                      pads=tuple(op.pads), groups=op.groups)
    if isinstance(op, ops.Dense):
        shape = graph.tensor(node.inputs[0]).shape
        k, n = op.weights.shape
        return dense(m=math.prod(shape[:-1]), k=k, n=n)
    if isinstance(op, (ops.MaxPool2d, ops.AvgPool2d)):
        n, h, w, c = graph.tensor(node.inputs[0]).shape
        return pool2d(n=n, h=h, w=w, channels=c, kernel=tuple(op.kernel),
                      stride=tuple(op.stride), pads=tuple(op.pads),
                      op="max" if isinstance(op, ops.MaxPool2d) else "avg")
    return None


_CACHE: dict = {}


def clear_cache() -> None:
    _CACHE.clear()


def candidates(cfg: ChipConfig, workload: Workload) -> list[Candidate]:
    """Every realisable mapping the search finds for `workload` on `cfg`, most
    promising (highest estimated utilisation) first. Solutions are collected over the
    whole relaxation ladder (the seed's paragraph 158: relaxing the access constraints
    adds solutions), one per portfolio asset, deduplicated. Cached per (workload key,
    chip key): a repeated shape costs nothing."""
    key = (workload.key, cfg.key)
    if key not in _CACHE:
        _CACHE[key] = _search(cfg, workload)
    return list(_CACHE[key])


def _search(cfg: ChipConfig, workload: Workload) -> list[Candidate]:
    rows, cols = cfg.rows, cfg.cols
    instr = instruction_graph(cfg)
    graphs = {}

    def graph_for(asset: Asset) -> SymbolicGraph:
        wl = workload.fused() if "t" in asset.rows else workload
        if wl.key not in graphs:
            graphs[wl.key] = SymbolicGraph(wl)
        return graphs[wl.key]
    found, seen = [], set()
    for level, rung in enumerate(LADDER[:3]):
        for asset in realisable.assets(workload, rows, cols, rung):
            if any(asset == c.asset for c in found):
                continue
            t0 = time.perf_counter()
            sols = search(instr, graph_for(asset), asset, replace(rung, limit=1))
            seconds = time.perf_counter() - t0
            for sol in sols:
                m = generalise(sol, workload, rows, cols)
                if m in seen or realisable.check(m, workload, rows, cols):
                    continue
                seen.add(m)
                found.append(Candidate(m, asset, level, seconds,
                                       utilisation(m, workload, rows, cols),
                                       tuple(sorted(tiling(m, workload).items()))))
    found.sort(key=lambda c: -c.utilisation)
    return found


def static_mapping(cfg: ChipConfig, workload: Workload) -> Mapping:
    """TVM VTA conv2d's fixed strategy: input channels on the rows and output channels
    on the columns, each zero-padded to the array (extent ``R`` / ``C``), one group at
    a time, the taps as loops, the ``blocks`` layout."""
    stream = tuple(Axis(d, workload.size(d)) for d in
                   (("oh", "ow") if "oh" in workload.dims else ("m",)))
    return Mapping((Axis("c", cfg.rows),), (Axis("k", cfg.cols),), stream, "blocks",
                   "static")


__all__ = ["Candidate", "Options", "candidates", "clear_cache", "static_mapping",
           "workload_of"]
