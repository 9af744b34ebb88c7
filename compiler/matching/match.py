"""PROVISIONAL, replaced by the constraint solver (docs/matching.md): the realisable
mappings of a convolution enumerated from the realisability table, so that the code
generator can be built and tested while the matcher is written."""

from __future__ import annotations

from dataclasses import dataclass

from systolica.compiler.matching.mapping import Axis, Mapping

STREAM = (Axis("oh", 1), Axis("ow", 1))


@dataclass
class Workload:
    op: object
    shape: tuple


@dataclass
class Candidate:
    mapping: Mapping


def workload_of(graph, node) -> Workload:
    return Workload(node.op, graph.tensor(node.inputs[0]).shape)


def static_mapping(cfg, work: Workload) -> Mapping:
    return Mapping((Axis("c", cfg.rows),), (Axis("k", cfg.cols),), STREAM, "blocks",
                   "static")


def candidates(cfg, work: Workload) -> list[Candidate]:
    op, R = work.op, cfg.rows
    cols = (Axis("k", cfg.cols),)
    out = [Candidate(Mapping((Axis("c", R),), cols, STREAM))]
    if 2 * op.Cin <= R:
        g = R // op.Cin
        out.append(Candidate(Mapping((Axis("t", g), Axis("c", op.Cin)), cols, STREAM,
                                     "replicated")))
        KH, KW = op.kernel
        out += [Candidate(Mapping((Axis("kh", a), Axis("kw", b), Axis("c", op.Cin)), cols,
                                  STREAM, "replicated"))
                for a in range(1, min(g, KH) + 1) for b in range(1, min(g // a, KW) + 1)]
    return out
