"""The map lowering's tiling per layer (docs/cnn.md, "Weights and tile buffers per
layer"): a layer's output-row tiles, what a :class:`Tiling` costs it (cycles and
DRAM bytes, by a model of its units), and the cost model's choice."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from systolica.arch import isa, timing
from systolica.arch.config import ChipConfig
from systolica.arch.instructions import PARAM_ROWS
from systolica.arch.isa import Opcode
from systolica.compiler.errors import CompileError
from systolica.compiler.lowering.maps.jobs import (
    Job,
    Source,
    channel_wise,
    check_window,
    group_blocks,
    input_cols,
    input_rows,
    stage_parts,
)
from systolica.compiler.lowering.maps.layout import WEIGHT_GROUP, Layout, bank_up, tiles_lo
from systolica.compiler.planning import layout

#: Where a layer keeps its weights, and how many tile buffers it takes.
WEIGHTS = ("stream", "persistent")
BUFFERS = (2, 1)


@dataclass(frozen=True)
class Tiling:
    """How one layer runs its tiles (docs/cnn.md, "Weights and tile buffers per
    layer"). ``weights``: ``stream`` (the weight ring, a block per step, reloaded every
    tile) or ``persistent`` (the layer's whole weight image kept in the CBUF, each
    block loaded once in the first tile). ``buffers``: 2 (two tile buffers: the next
    tile loads into one while this tile computes from the other) or 1 (one buffer of
    twice the rows: each channel block of the next tile loads once this tile's last
    MATMUL reading that block has issued; fewer tiles, so fewer weight reloads).
    ``columns``: 0 (a tile is whole output rows) or the output columns of a tile,
    for a layer whose input rows do not fit the CBUF even in one-row tiles, or whose
    output rows are wider than an accumulator half: the cost model sets it only for
    such a layer (docs/cnn.md, "Layers wider than the CBUF"). ``channels``: 0 (a
    tile is every channel block) or the channel blocks of a tile, for a channel-wise
    layer (:func:`channel_wise`: pools, depthwise, Add) that fits in no other way, as
    a global pool of many channels: with two tile buffers and whole output rows
    (docs/cnn.md, "Channel-wise layers deeper than the CBUF")."""
    weights: str = "stream"
    buffers: int = 2
    columns: int = 0
    channels: int = 0

    def __post_init__(self):
        if self.weights not in WEIGHTS:
            raise CompileError(f"weights {self.weights!r} is not one of "
                               f"{', '.join(WEIGHTS)}")
        if self.buffers not in BUFFERS or isinstance(self.buffers, bool):
            raise CompileError(f"buffers {self.buffers!r} is not one of "
                               f"{', '.join(map(str, BUFFERS))}")
        if not isinstance(self.columns, int) or isinstance(self.columns, bool) \
                or self.columns < 0:
            raise CompileError(f"columns {self.columns!r} is not 0 (whole output rows) "
                               f"or a positive number of output columns")
        if not isinstance(self.channels, int) or isinstance(self.channels, bool) \
                or self.channels < 0:
            raise CompileError(f"channels {self.channels!r} is not 0 (every channel "
                               f"block) or a positive number of channel blocks")
        if self.channels and (self.columns or self.buffers != 2):
            raise CompileError(f"a tiling cut along its channels ({self.channels} "
                               f"blocks) takes two tile buffers and whole output rows, "
                               f"not {self.buffers} buffer(s) and {self.columns} columns")


def job_layout(cfg: ChipConfig, lay: Layout, job: Job, tiling: Tiling) -> Layout:
    """The layout one layer runs in: `lay` with the weight ring, or with the layer's
    whole weight image where the ring was and the staging and tile buffers above it
    (fewer rows for the tiles); its tile buffers as `tiling` says."""
    if tiling.weights == "stream":
        return replace(lay, buffers=tiling.buffers, columns=tiling.columns,
                       channels=tiling.channels)
    return replace(lay, staging=bank_up(cfg, lay.ring + job.weights.shape[0] * cfg.weight_rows),
                   persistent=True, buffers=tiling.buffers, columns=tiling.columns,
                   channels=tiling.channels)


def per_layer(names: set[str], value, what: str, kinds: tuple) -> dict:
    """A user's choice for every layer (one value) or by layer name, checked."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - names)
        if unknown:
            raise CompileError(f"{what} names layer(s) {', '.join(map(repr, unknown))} "
                               f"the network does not have (or that have no "
                               f"instructions)")
        return dict(value)
    if isinstance(value, type(kinds[0])) and not isinstance(value, bool):
        return dict.fromkeys(names, value)
    raise CompileError(f"{what} must be one of {', '.join(map(repr, kinds))} or a "
                       f"mapping of layer name to one of them, not {value!r}")


def choose_tilings(cfg: ChipConfig, lay: Layout, jobs: list, weights, buffers
             ) -> dict[str, Tiling]:
    """Each layer's tiling: the user's (`weights`, `buffers`: one for all layers, or
    by layer name) where given, the cost model's (:func:`choose_tiling`) for the rest."""
    names = {j.name for j in jobs if j is not None}
    want_w = per_layer(names, weights, "weights", WEIGHTS)
    want_b = per_layer(names, buffers, "buffers", BUFFERS)
    for want, what, kinds in ((want_w, "weights", WEIGHTS), (want_b, "buffers", BUFFERS)):
        for name, value in want.items():
            if value not in kinds or isinstance(value, bool):
                raise CompileError(f"layer {name!r}: {what} {value!r} is not one of "
                                   f"{', '.join(map(repr, kinds))}")
    out = {}
    for job in jobs:
        if job is None:
            continue
        check_window(job)
        out[job.name] = choose_tiling(cfg, lay, job, want_w.get(job.name), want_b.get(job.name))
    return out


SLOWER = 0.01       # how much slower (by estimate) a tiling may run to move fewer bytes,
SAVES = 0.05        # if it moves at least this much fewer


def estimate_tiling(cfg: ChipConfig, lay: Layout, job: Job, tiling: Tiling) -> tuple[int, int]:
    """``(cycles, dram_bytes)`` one layer should take so (a CompileError if its tiles
    do not fit): the rows the array streams against the words the DMA moves (every
    tile's input rows, the weight blocks each tile loads, or each once when kept, the
    epilogue parameters per tile and output block, the output), the run bounded by the
    larger, after the first tile's first channel block. Kept weights also wait, at the
    layer's start, for the load of their first group: their CBUF rows held the buffers
    of the layers before. With one tile buffer, a tile's input loads wait where they
    outrun the steps they share the DMA with."""
    R = cfg.rows
    mine = job_layout(cfg, lay, job, tiling)
    spatial, _ = output_tiles(cfg, mine, job)
    groups = channel_groups(cfg, mine, job)
    N, Ho, Wo, _ = job.out_shape
    nb = len(job.steps)
    # a step streams its rows, or waits for its weight bank: the bank it uses was
    # last used two steps before, then loaded (:func:`bank_turn`)
    turn = bank_turn(cfg)
    tiles = [(t, g) for t in spatial for g in groups]   # a layer cut along its
    order = [group_blocks(job, g) for _, g in tiles]    # channels: a tile per group
    steps = [sum(len(job.steps[b]) for b in blocks) for blocks in order]
    pixels = [(oh1 - oh0) * (ow1 - ow0) for (oh0, oh1, ow0, ow1), _ in tiles]
    streamed = N * sum(s * max(p, (p + turn) // 2) for s, p in zip(steps, pixels))
    words = [tile_input_words(cfg, job, t, g) for t, g in tiles]
    moved = N * sum(words)
    blocks = job.weights.shape[0]
    if mine.persistent:
        moved += blocks * cfg.weight_rows
    else:                # a step whose bank (they alternate) holds its block loads none
        seq = [st.block for mine_nbs in order for b in mine_nbs
               for st in job.steps[b]] * N
        moved += cfg.weight_rows * sum(1 for f, b in enumerate(seq) if f < 2 or seq[f - 2] != b)
    if job.post is not None:
        per = PARAM_ROWS if job.post == "params" else 1
        moved += N * len(spatial) * nb * per * cfg.acc_row_words
    moved += N * Ho * Wo * (layout.blocks(job.out_shape[3], R) if job.out_dtype == "int8"
                            else nb)
    # the first MATMUL waits for the first tile's first channel block
    exposed = words[0] // sum(tile_blocks(cfg, mine, s) for s in job.sources)
    if mine.persistent:
        exposed += min(blocks, WEIGHT_GROUP) * R
    if mine.buffers == 1 and N * len(tiles) > 1:
        # one buffer: a tile's loads share the DMA with the weights in the steps from
        # the first that frees a block (the first reading one, for the first tile) to
        # the tile's end, and wait where those steps stream fewer rows than they move
        flat = [(st.src, st.cb) for steps in job.steps for st in steps]
        last = {key: t for t, key in enumerate(flat)}
        span0 = max(flat.index(key) for key in last) + 1
        span = len(flat) - min(last.values())
        per_step = 0 if mine.persistent else R
        rows = pixels
        exposed += N * max(0, words[0] + span0 * (R - rows[0]))
        exposed += N * sum(max(0, words[k] + span * (per_step - rows[k - 1]))
                           for k in range(1, len(tiles)))
    return max(streamed, moved) + exposed, moved * R


def bank_turn(cfg: ChipConfig) -> int:
    """Cycles from a MATMUL's issue, less its rows, to the earliest issue of the
    MATMUL that uses its weight bank next, with a WLOAD between them
    (``timing.bank_window``): two steps on alternating banks take at least ``rows +
    turn`` cycles."""
    rows = 2 * cfg.rows
    mm = isa.Instr(Opcode.MATMUL, 0, dict(act_addr=0, rows=rows, acc_addr=0, accumulate=0,
                                          max=0, bank=0, conv=0, dh=0, dw=0, taps=0,
                                          in_w=1, in_h=1))
    wl = isa.Instr(Opcode.WLOAD, 0, dict(w_addr=0, bank=0))
    mm_lo, mm_hi = timing.bank_window(cfg, mm)
    wl_lo, wl_hi = timing.bank_window(cfg, wl)
    return mm_hi - rows - wl_lo + wl_hi - mm_lo


def choose_tiling(cfg: ChipConfig, lay: Layout, job: Job, weights: str | None = None,
           buffers: int | None = None) -> Tiling:
    """The cost model's tiling for one layer (`weights`, `buffers`: the user's, where
    not None): of those whose tiles fit, the fastest by :func:`estimate_tiling` (the first of
    ``stream`` before ``persistent``, 2 buffers before 1, on a tie), unless one moves
    at least ``SAVES`` fewer DRAM bytes in at most ``SLOWER`` more cycles: then the one
    of those that moves the fewest."""
    options = [Tiling(w, b) for w in ([weights] if weights is not None else WEIGHTS)
               for b in ([buffers] if buffers is not None else BUFFERS)]
    costs, errors = [], {}
    for t in options:
        try:
            costs.append((*estimate_tiling(cfg, lay, job, t), t))
        except CompileError as e:
            errors[t] = e.with_traceback(None)     # no frames kept alive
    if not costs:
        # whole output rows fit in no way: cut the width too, into the widest tiles
        # that fit (a layer that compiles without the cut never takes it)
        for t in options:
            columns = widest_columns(cfg, job_layout(cfg, lay, job, t), job)
            if columns:
                cut = replace(t, columns=columns)
                costs.append((*estimate_tiling(cfg, lay, job, cut), cut))
    if not costs and channel_wise(cfg, job):
        # nor cut along the width (a global pool: one output pixel): a channel-wise
        # layer is cut along its channels, into the fewest tiles of channel groups that
        # fit two buffers
        for t in options:
            if t.buffers == 2:
                channels = deepest_channels(cfg, lay, job, t)
                if channels:
                    cut = replace(t, channels=channels)
                    costs.append((*estimate_tiling(cfg, lay, job, cut), cut))
    if not costs:
        # the shortfall of the tiling with the most room: streamed weights, fewest buffers
        roomy = min(errors, key=lambda t: (t.weights != "stream", t.buffers))
        if job.out_shape[2] == 1:
            raise errors[roomy]
        mine = job_layout(cfg, lay, job, roomy)
        need = buffer_words(cfg, mine, job, 1, 1)
        have = (mine.top - tiles_lo(cfg, mine, stage_parts(cfg, job))) // mine.buffers
        raise CompileError(
            f"layer {job.name!r}: even a tile of one output pixel (the layer cut along "
            f"its width) needs {need} CBUF rows of input, its window over every channel "
            f"block, and a tile buffer has {have}: short by {(need - have) * cfg.rows} "
            f"bytes; use fewer input channels or a smaller kernel, or a chip with a "
            f"larger CBUF")
    fastest = min(costs, key=lambda c: c[0])
    cheaper = [c for c in costs if c[0] <= fastest[0] * (1 + SLOWER)
               and c[1] <= fastest[1] * (1 - SAVES)]
    return min(cheaper, key=lambda c: c[1])[2] if cheaper else fastest[2]


def output_tiles(cfg: ChipConfig, lay: Layout, job: Job
                 ) -> tuple[list[tuple[int, int, int, int]], int]:
    """Tiles ``(oh0, oh1, ow0, ow1)`` of one image (output rows ``[oh0, oh1)`` and
    columns ``[ow0, ow1)``), and the rows of each of the two output staging halves:
    as many output rows as fit an accumulator half while their input rows fit one of
    the ``lay.buffers`` tile buffers that share the CBUF left after the staging; one
    tile for the whole map if it fits both buffers together. With ``lay.columns`` the
    width is cut too, into tiles of that many output columns (:func:`widest_columns`)."""
    N, Ho, Wo, _ = job.out_shape
    parts = stage_parts(cfg, job)

    def area(pixels: int) -> int:
        """CBUF rows for the tile buffers beside staging halves of `pixels` rows (per
        slice on a wide grid)."""
        return lay.top - tiles_lo(cfg, lay, pixels * parts)

    if lay.columns:
        return _cut_tiles(cfg, lay, job, lay.columns, area)

    def words(rows: int) -> int:
        lo, hi = input_rows(job, 0, rows)
        return sum((hi - lo) * s.shape[2] * tile_blocks(cfg, lay, s) for s in job.sources)

    # one tile for the whole map may take both buffers (not a tile of a channel group)
    if Ho * Wo <= lay.half_rows and words(Ho) <= (
            area(Ho * Wo) if N == 1 and not lay.channels else area(Ho * Wo) // lay.buffers):
        return [(0, Ho, 0, Wo)], Ho * Wo
    per = min(Ho, max(1, lay.half_rows // Wo))
    while per > 1 and tile_words(job, cfg, per, lay) > area(per * Wo) // lay.buffers:
        per -= 1
    if Wo > lay.half_rows:
        raise CompileError(
            f"layer {job.name!r}: one output row ({Wo} pixels) is more than an "
            f"accumulator half ({lay.half_rows} rows), even with one-row tiles; use a "
            f"smaller input width or a chip with a larger ACC")
    need, have = tile_words(job, cfg, per, lay), area(per * Wo) // lay.buffers
    if need > have:
        raise CompileError(
            f"layer {job.name!r}: even with one-row tiles, a tile needs {need} CBUF rows "
            f"of input and a tile buffer has {have}: short by {(need - have) * cfg.rows} "
            f"bytes (with {lay.buffers} tile buffer{'s' if lay.buffers > 1 else ''}); "
            f"use a smaller input width or fewer input channels, or a chip with a "
            f"larger CBUF")
    return [(o, min(o + per, Ho), 0, Wo) for o in range(0, Ho, per)], per * Wo


def tile_words(job: Job, cfg: ChipConfig, rows: int, lay: Layout) -> int:
    """CBUF rows of input the largest tile of `rows` whole output rows needs (of at
    most ``lay.channels`` channel blocks per source, if given)."""
    worst = 0
    for oh0 in range(0, job.out_shape[1], rows):
        lo, hi = input_rows(job, oh0, min(oh0 + rows, job.out_shape[1]))
        worst = max(worst, sum((hi - lo) * s.shape[2] * tile_blocks(cfg, lay, s)
                               for s in job.sources))
    return worst


def tile_blocks(cfg: ChipConfig, lay: Layout, s: Source) -> int:
    """The most channel blocks of source `s` a tile loads: all of them, or with
    ``lay.channels`` (a layer cut along its channels) at most that many."""
    return min(lay.channels, s.blocks(cfg.rows)) if lay.channels else s.blocks(cfg.rows)


def channel_groups(cfg: ChipConfig, lay: Layout, job: Job) -> list[tuple[int, int] | None]:
    """The channel blocks ``(cb0, cb1)`` of each tile of a layer cut along its channels
    (``lay.channels`` blocks a tile, the last maybe fewer), in order; ``[None]`` (every
    block) for a layer that is not cut."""
    if not lay.channels:
        return [None]
    blocks = job.sources[0].blocks(cfg.rows)
    return [(c, min(c + lay.channels, blocks)) for c in range(0, blocks, lay.channels)]


def tile_input_words(cfg: ChipConfig, job: Job, tile: tuple[int, int, int, int],
                     group: tuple[int, int] | None = None) -> int:
    """The words tile ``(oh0, oh1, ow0, ow1)`` loads: its input rows and columns of
    every channel block of every source (of channel blocks `group`, if given)."""
    oh0, oh1, ow0, ow1 = tile
    lo, hi = input_rows(job, oh0, oh1)
    total = 0
    for s in job.sources:
        c0, c1 = input_cols(job, s.shape[2], ow0, ow1)
        blocks = s.blocks(cfg.rows) if group is None else group[1] - group[0]
        total += (hi - lo) * (c1 - c0) * blocks
    return total


def column_spans(Wo: int, columns: int) -> list[tuple[int, int]]:
    """Output columns ``[ow0, ow1)`` of the tiles ``columns`` wide across ``Wo``."""
    return [(c, min(c + columns, Wo)) for c in range(0, Wo, columns)]


def buffer_words(cfg: ChipConfig, lay: Layout, job: Job, rows: int, columns: int) -> int:
    """CBUF rows a tile buffer needs for tiles of `rows` output rows and `columns`
    output columns: the largest tile's input (two buffers: each tile sits on its
    own); with one buffer every channel block sits at the same rows in every tile, so
    the most input rows of any tile times the widest input row, per channel block."""
    N, Ho, Wo, _ = job.out_shape
    bands = [(o, min(o + rows, Ho)) for o in range(0, Ho, rows)]
    spans = column_spans(Wo, columns)
    if lay.buffers == 1:
        most = max(hi - lo for lo, hi in (input_rows(job, *b) for b in bands))
        return sum(most * max(c1 - c0 for c0, c1 in (input_cols(job, s.shape[2], *sp)
                                                      for sp in spans))
                   * s.blocks(cfg.rows) for s in job.sources)
    return max(tile_input_words(cfg, job, (*b, *sp)) for b in bands for sp in spans)


def widest_columns(cfg: ChipConfig, lay: Layout, job: Job) -> int | None:
    """The output columns of the tiles a layer is cut into along its width when whole
    output rows do not fit (its input rows the CBUF's tile buffers, or its output row
    an accumulator half): as few one-row tiles across the width as fit, made equally
    wide; None if not even a one-column tile fits (docs/cnn.md, "Layers wider than
    the CBUF")."""
    Wo = job.out_shape[2]
    parts = stage_parts(cfg, job)

    def fits(columns: int) -> bool:
        have = (lay.top - tiles_lo(cfg, lay, columns * parts)) // lay.buffers
        return columns <= lay.half_rows and buffer_words(cfg, lay, job, 1, columns) <= have

    return _evenly(Wo, _largest(min(Wo - 1, lay.half_rows), fits))


def deepest_channels(cfg: ChipConfig, lay: Layout, job: Job, tiling: Tiling) -> int | None:
    """The channel blocks of the tiles a channel-wise layer is cut into along its
    channels when it fits in no other way: as few groups as fit whole output rows
    (:func:`output_tiles`) in two tile buffers, made equally deep; None if not even
    one channel block fits (docs/cnn.md, "Channel-wise layers deeper than the
    CBUF")."""
    blocks = job.sources[0].blocks(cfg.rows)

    def fits(channels: int) -> bool:
        try:
            output_tiles(cfg, job_layout(cfg, lay, job, replace(tiling, channels=channels)),
                         job)
        except CompileError:
            return False
        return True

    return _evenly(blocks, _largest(blocks - 1, fits))


def _largest(most: int, fits) -> int:
    """The largest n in ``[1, most]`` that `fits` (which holds for every n below one
    that it holds for), or 0 if none."""
    lo, hi = 0, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _evenly(total: int, most: int) -> int | None:
    """Pieces of `total` at most `most` each, as few as that allows, made equal: the
    size of each (None when `most` is 0)."""
    return -(-total // -(-total // most)) if most else None


def _cut_tiles(cfg: ChipConfig, lay: Layout, job: Job, columns: int, area
               ) -> tuple[list[tuple[int, int, int, int]], int]:
    """:func:`output_tiles` of a layer cut along its width: tiles of `columns` output
    columns and as many output rows as fit (row band by row band, left to right)."""
    N, Ho, Wo, _ = job.out_shape
    per = min(Ho, max(1, lay.half_rows // columns))
    while per > 1 and buffer_words(cfg, lay, job, per, columns) \
            > area(per * columns) // lay.buffers:
        per -= 1
    need, have = buffer_words(cfg, lay, job, 1, columns), area(columns) // lay.buffers
    if columns > lay.half_rows or need > have:
        raise CompileError(
            f"layer {job.name!r}: tiles of one output row and {columns} output columns "
            f"need {need} CBUF rows of input and {columns} accumulator rows; a tile "
            f"buffer has {have}, an accumulator half {lay.half_rows}")
    spans = column_spans(Wo, columns)
    return [(o, min(o + per, Ho), c0, c1) for o in range(0, Ho, per)
            for c0, c1 in spans], per * columns
