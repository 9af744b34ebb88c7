"""Routes through the general lanes for ``ROUTE`` (docs/contract.md, "ROUTE"; design:
docs/compiler.md, "Concat through the lanes").

A move sends the west edge's tile row ``i`` (partition group ``i`` of a CBUF row) to
the south edge's column group ``j``: east along tile row ``i`` to tile column ``j``,
turned south there, down to the last tile row. One source may feed several column
groups (its eastbound chain passes them all); each column group has one source. The
chains take the skip links wherever they save a register (two tiles in one hop), so
the longest route, and with it the span every row waits, is as short as the grid
allows. The per-group delays then line every group up with the longest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from systolica.arch import fabric, geometry
from systolica.arch.config import ChipConfig
from systolica.compiler.errors import CompileError


@dataclass(frozen=True)
class LaneRoute:
    """The multiplexer settings a ROUTE needs (``routing``: every lane multiplexer on
    its paths), each column group's registers from the west edge (``latency``), and
    the ROUTE fields that line the groups up (``span``, ``delays``)."""
    moves: Mapping[int, int]          # column group -> west tile row
    routing: Mapping[str, str]
    latency: Mapping[int, int]
    span: int
    skips: int                        # skip links taken

    def delays(self) -> dict[str, int]:
        return {f"delay{j}": self.span - lat for j, lat in self.latency.items()}


def _chain(start: int, stops: list[int], skips: bool) -> list[tuple[int, bool]]:
    """Positions a lane chain's registers take from `start` through every stop (in
    increasing order), as ``(position, by skip link)``: two at a time where a skip
    link reaches and a stop is not jumped over."""
    out, at = [(start, False)], start
    for stop in stops:
        while at < stop:
            step = 2 if skips and stop - at >= 2 else 1
            at += step
            out.append((at, step == 2))
    return out


def plan_route(cfg: ChipConfig, moves: Mapping[int, int], *, skips: bool = True) -> LaneRoute:
    """The route taking west tile row ``moves[j]`` to column group ``j`` for every
    ``j`` in `moves`; without `skips`, every chain goes one tile per register."""
    if not cfg.general_lanes:
        raise CompileError(f"chip {cfg.name!r} has no general lanes to route through")
    t, tc = cfg.tile_rows, cfg.tile_cols
    for j, i in moves.items():
        if not (0 <= j < tc and 0 <= i < t):
            raise CompileError(f"lane move from tile row {i} to column group {j} is off "
                               f"the {t}x{tc} grid")
    table = fabric.by_name(cfg)
    routing: dict[str, str] = {}
    latency: dict[int, int] = {}
    taken = 0

    def put(name: str, source: str) -> None:
        if routing.get(name, source) != source:
            raise AssertionError(f"{name} needed as {routing[name]} and {source}")
        table[name].value_of(source)          # the grid has that source
        routing[name] = source

    east: dict[int, dict[int, int]] = {}      # tile row -> position -> registers so far
    for i in sorted(set(moves.values())):
        stops = sorted({j - 1 for j, src in moves.items() if src == i and j > 0})
        if not stops:
            east[i] = {}
            continue
        regs = {}
        for k, (p, skip) in enumerate(_chain(0, stops, skips)):
            put(f"gen_e[{i}][{p}]", "skip" if skip else "west")
            taken += skip
            regs[p] = k + 1
        east[i] = regs
    for j, i in sorted(moves.items()):
        before = east[i][j - 1] if j > 0 else 0
        chain = _chain(i, [t - 1], skips)
        for k, (p, skip) in enumerate(chain):
            put(f"gen_s[{p}][{j}]", "west" if k == 0 else "skip" if skip else "north")
            taken += skip
        latency[j] = before + len(chain)
    span = max(latency.values())
    if span > geometry.route_span_max(cfg):
        raise CompileError(f"lane route {dict(moves)} on chip {cfg.name!r} is {span} "
                           f"registers long, more than a ROUTE's delay lines hold "
                           f"({geometry.route_span_max(cfg)})")
    return LaneRoute(dict(moves), routing, latency, span, taken)
