"""The configurable fabric: every multiplexer whose control register the compiler sets.

Each multiplexer has a number (its ``SETCFG`` index), a name, and a list of sources; its
4-bit control register holds an index into that list. Every multiplexer has a
``"zero"`` source. All sources of one multiplexer on an instruction's path reach it
with the same latency, so a setting changes what flows, never when (the golden model
can stay functional). The general lanes' multiplexers (below) are the exception: a
skip link is a register shorter than the lane beside it, and no instruction's data
passes them.

Tile ``(i, j)`` is tile row ``i`` (north to south), tile column ``j`` (west to east).

* ``west_feed[i]``  west edge of tile row ``i``: which CBUF partition group feeds the
  activation lane (``cbuf.g<g>`` = partitions ``g*n .. g*n+n-1``).
* ``north_feed[j]`` north edge of tile column ``j``: which CBUF partition group feeds
  the weight lane.
* ``act_in[i][j]``  tile's west port: the eastbound lane, or zero.
* ``w_in[i][j]``    the tile's weight input: the southbound weight lane from the north
  (``lane``), zero, or the eastbound weight lane from the west (``west``: the tile's
  cells shift along their rows, so a CBUF row lands in an array column, the
  transposed load of seed 004). A lane passes data on only between tiles that take
  it: a tile whose neighbour upstream takes the other lane (or zero) receives zeros.
* ``psum_in[i][j]`` tile's partial-sum input: the partial-sum line from the north, or zero
  (zero starts a new reduction chain at this tile row).
* ``acc_src[g]``    accumulator partition group ``g``: which tile column's partial sums.
* ``wb_src[g]``     CBUF partition group ``g`` on vector-unit writeback: which accumulator
  partition group's results, zero, or ``keep`` (the group is not written: the row's
  bytes there stay, so ``R / C`` writebacks of ``C`` columns fill one ``R``-byte row,
  the sub-blocks of a tall array). Resets to group ``g`` (zero for ``g >= tile_cols``).
  It moves whole groups of ``n`` columns; every byte keeps its lane within the group,
  so it permutes blocks and does not transpose elements.
  Element transposes come from the west weight load (``w_in = west``): the block
  becomes the stationary weights with its CBUF rows in array columns, an identity
  streams through, and the accumulator rows are the transposed block (seed 004).
* ``west_wfeed[i]`` west edge of tile row ``i``: which CBUF partition group feeds the
  eastbound weight lane (every ``WLOAD`` drives both weight edges; ``w_in`` decides
  which one the cells take).
* ``gen_e[i][j]``, ``gen_w[i][j]``, ``gen_s[i][j]``, ``gen_n[i][j]`` (only with
  ``cfg.general_lanes``, numbered after all the others, each kind row-major): what the
  tile's east-, west-, south- and northbound general lane register takes, named by
  the side it arrives from: straight on (the reset value), turned at the crossing,
  back (out and back), ``skip`` (the hard-wired link from the tile two back, where
  there is one; not northbound) or zero (docs/contract.md, "General lanes").
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from systolica.arch.errors import ConfigError

if TYPE_CHECKING:       # config checks a chip's fabric through this module
    from systolica.arch.config import ChipConfig

ZERO = "zero"
KEEP = "keep"   # wb_src only: the writeback leaves this CBUF partition group as it is
GENERAL = ("gen_e", "gen_w", "gen_s", "gen_n")
TILE_MUXES = ("act_in", "w_in", "psum_in") + GENERAL


def general_sources(kind: str, i: int, j: int, t: int, tile_cols: int) -> tuple[str, ...]:
    """Sources of general-lane multiplexer ``kind[i][j]`` on a ``t x tile_cols`` grid:
    straight on first (the reset value), the two turns, back, the skip link if the
    tile two back exists, zero."""
    straight, turns, back, skip = {
        "gen_e": ("west", ("north", "south"), "east", j >= 2),
        "gen_w": ("east", ("north", "south"), "west", j <= tile_cols - 3),
        "gen_s": ("north", ("west", "east"), "south", i >= 2),
        "gen_n": ("south", ("west", "east"), "north", False),
    }[kind]
    return (straight, *turns, back) + (("skip",) if skip else ()) + (ZERO,)


@dataclass(frozen=True)
class Mux:
    index: int
    name: str
    sources: tuple[str, ...]
    default: int  # reset value: the plain GEMM routing
    domain: str   # power domain: "edge" for the array's edges, "row<i>" for tile row i

    def value_of(self, source: str) -> int:
        try:
            return self.sources.index(source)
        except ValueError:
            raise ValueError(f"multiplexer {self.name} has no source {source!r}; "
                             f"it has {list(self.sources)}") from None


def muxes(cfg: ChipConfig) -> tuple[Mux, ...]:
    return _muxes(cfg.tile_rows, cfg.tile_cols, cfg.general_lanes)


@cache
def _muxes(t: int, tile_cols: int, general: bool = False) -> tuple[Mux, ...]:
    groups = tuple(f"cbuf.g{g}" for g in range(t)) + (ZERO,)
    cols = tuple(f"col.g{g}" for g in range(tile_cols)) + (ZERO,)
    out: list[Mux] = []

    def add(name, sources, default):
        tile_row = name.split("[")[1].rstrip("]") if name.split("[")[0] in TILE_MUXES else None
        out.append(Mux(len(out), name, sources, default,
                       "edge" if tile_row is None else f"row{tile_row}"))

    for i in range(t):
        add(f"west_feed[{i}]", groups, i)
    # a wide grid's reset routing loads weights from the west (docs/contract.md,
    # "Wide grids"): its north chain is fed zeros and every tile takes the west lane
    wide = tile_cols > t
    for j in range(tile_cols):
        add(f"north_feed[{j}]", groups, t if wide else j)
    for i in range(t):
        for j in range(tile_cols):
            add(f"act_in[{i}][{j}]", ("lane", ZERO), 0)
    for i in range(t):
        for j in range(tile_cols):
            add(f"w_in[{i}][{j}]", ("lane", ZERO, "west"), 2 if wide else 0)
    for i in range(t):
        for j in range(tile_cols):
            add(f"psum_in[{i}][{j}]", ("north", ZERO), 0)
    for g in range(tile_cols):
        add(f"acc_src[{g}]", cols, g)
    for g in range(t):
        add(f"wb_src[{g}]", cols + (KEEP,), min(g, tile_cols))
    for i in range(t):
        add(f"west_wfeed[{i}]", groups, i)
    if general:
        for kind in GENERAL:
            for i in range(t):
                for j in range(tile_cols):
                    add(f"{kind}[{i}][{j}]", general_sources(kind, i, j, t, tile_cols), 0)
    if _format(len(out), max(len(m.sources) for m in out)) is None:
        from systolica.arch.isa import SETCFG_FORMATS, Opcode
        wide = SETCFG_FORMATS[Opcode.SETCFGW]
        raise ConfigError(f"a {t}x{tile_cols} tile grid has {len(out)} multiplexers with up "
                          f"to {max(len(m.sources) for m in out)} sources, more than "
                          f"SETCFGW's {wide.number_bits}-bit number (page and index) and "
                          f"{wide.value_bits}-bit value can name ({1 << wide.number_bits}, "
                          f"{1 << wide.value_bits}); use fewer tiles")
    return tuple(out)


def _format(count: int, sources: int):
    """The first SETCFG format whose numbers and values reach `count` multiplexers of
    up to `sources` sources, or None."""
    from systolica.arch.isa import SETCFG_FORMATS
    return next((f for f in SETCFG_FORMATS.values()
                 if count <= 1 << f.number_bits and sources <= 1 << f.value_bits), None)


def setcfg_format(cfg: ChipConfig):
    """The SETCFG format the chip takes (docs/contract.md, "SETCFG formats"): SETCFG
    where its 8-bit numbers and 4-bit values reach every multiplexer and source, else
    SETCFGW. The other opcode is ILLEGAL_OPCODE there."""
    return _setcfg_format(cfg.tile_rows, cfg.tile_cols, cfg.general_lanes)


@cache
def _setcfg_format(t: int, tile_cols: int, general: bool):
    table = _muxes(t, tile_cols, general)
    return _format(len(table), max(len(m.sources) for m in table))


def value_bits(cfg: ChipConfig) -> int:
    """The bits of a multiplexer's control register on the chip."""
    return setcfg_format(cfg).value_bits


def by_name(cfg: ChipConfig) -> dict[str, Mux]:
    return {m.name: m for m in muxes(cfg)}


def domains(cfg: ChipConfig) -> tuple[str, ...]:
    """Power domains in a fixed order (the RTL numbers them so)."""
    return ("edge",) + tuple(f"row{i}" for i in range(cfg.tile_rows))


def defaults(cfg: ChipConfig) -> list[int]:
    return [m.default for m in muxes(cfg)]
