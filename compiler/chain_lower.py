"""Lowering of a chain of convolutions through the CBUF in passes (seed 001,
docs/cnn.md "Chains"). Entry point: :func:`lower_chain`.

A chain's intermediate maps never go to DRAM. Each pass loads the band of the
network input its first layer reads; every layer then computes its rows of the pass
(:func:`.chain.plan`) from the previous layer's rows in the CBUF, and the last
layer's rows are stored. Three strategies (:data:`STRATEGIES`):

* ``baseline``: every pass computes all the rows it reads, halo rows again, and the
  first layer re-reads their input from DRAM;
* ``crop_fetch``: every row is computed once. The rows a later pass reads again
  are cropped into the UBUF (``COPY CROP``) after they are written and fetched
  back (``COPY FETCH``) before the next layer reads them.
* ``fused_crop``: as ``crop_fetch``, but the producing layer's writeback crops the
  rows as it writes them (``VRUN crop = 1``: CBUF row ``a`` also lands in UBUF row
  ``a mod ubuf_rows``), with no pass of its own over the data.

Weights are loaded once into the CBUF for the whole chain (``persistent``) or
streamed through the weight ring one block per step (``stream``). The buffers of
one layer's input hold the rows of one pass, channel block after channel block, at
a fixed stride.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from ..arch.config import ChipConfig
from ..arch.isa import CopyKind, DmaKind, Opcode
from . import chain
from .cnn import (PARAM_ROWS, WEIGHT_SLOTS, CnnLowered, DramLayout, Job, Layout, Source,
                  _bank_up, check_channels,
                  _check_window, _conv_job, _Counters, _Emit, _out_words, acc_param_rows,
                  as_map, pack_map)
from .errors import CompileError
from .graph import Graph
from .ops import Conv2d
from .pipeline import Block, Step, loop_order, pipeline
from .plan import DramMap, MemoryPlan, Region, check_plan

STRATEGIES = ("baseline", "crop_fetch", "fused_crop")
DMA_ROWS = 1 << 12       # rows per load of persistent weights (each a DMA of its own)
WEIGHTS = ("persistent", "stream")


@dataclass(frozen=True)
class ChainChoice:
    """How a chain runs; None leaves a choice to :func:`choose`. ``outputs_per_pass``:
    rows of the last layer's output per pass; ``keep``: per layer, whether its output's
    halo rows are kept in the UBUF (else computed again in the next pass)."""
    strategy: str = "crop_fetch"
    outputs_per_pass: int | None = None
    weights: str | None = None
    keep: tuple[bool, ...] | None = None

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise CompileError(f"chain strategy {self.strategy!r} is not one of "
                               f"{', '.join(STRATEGIES)}")
        if self.weights is not None and self.weights not in WEIGHTS:
            raise CompileError(f"chain weights {self.weights!r} is not one of "
                               f"{', '.join(WEIGHTS)}")
        if self.keep is not None and (not isinstance(self.keep, tuple) or not all(
                isinstance(k, bool) for k in self.keep)):
            raise CompileError(f"chain keep must be a tuple of one bool per layer, not "
                               f"{self.keep!r}")
        if self.keep is not None and self.strategy == "baseline" and any(self.keep):
            raise CompileError("the baseline strategy keeps nothing in the UBUF; choose "
                               "crop_fetch or fused_crop to keep a layer's halo")
        if self.outputs_per_pass is not None and (
                not isinstance(self.outputs_per_pass, int) or self.outputs_per_pass < 1):
            raise CompileError(f"outputs per pass must be a positive integer, not "
                               f"{self.outputs_per_pass!r}")


@dataclass
class _Buffers:
    """Where a chain keeps things in the CBUF: per layer its input buffer (``inputs``,
    channel blocks ``stride`` rows apart), its weights (persistent) and its UBUF area
    (``ubuf``, channel blocks ``ubuf_stride`` rows apart); the weight ring (streamed
    weights) and the last layer's two output staging halves."""
    inputs: list[int]
    stride: list[int]
    weights: list[int | None]
    ubuf: list[int | None]          # UBUF row (relative to ubuf_base)
    ubuf_stride: list[int]
    ring: int | None
    staging: int
    stage_half: int
    regions: list[Region]


def chain_layers(graph: Graph) -> list:
    """The graph's nodes if they form a chain of convolutions (each reading the one
    before, batch 1, no replicated input); else a CompileError saying what breaks it."""
    nodes = graph.nodes
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        raise CompileError(f"graph {graph.name!r}: a chain has one input and one output")
    prev = graph.inputs[0]
    for node in nodes:
        if not isinstance(node.op, Conv2d):
            raise CompileError(f"layer {node.name!r}: a chain is made of convolutions, "
                               f"not {type(node.op).__name__}")
        if list(node.inputs) != [prev]:
            raise CompileError(f"layer {node.name!r}: a chain layer reads the layer "
                               f"before it only")
        prev = node.outputs[0]
    shape = graph.tensor(graph.inputs[0]).shape
    if len(shape) != 4 or shape[0] != 1:
        raise CompileError(f"graph {graph.name!r}: a chain runs on one image (batch 1), "
                           f"not input shape {shape}")
    return list(nodes)


def _axes(jobs: list[Job]) -> list[chain.Axis]:
    return [chain.Axis(j.kernel[0], j.stride[0], j.dilation[0], j.pads[0], j.pads[2])
            for j in jobs]


def _band_row(passes: list[list[chain.Step]], k: int, p: int, r: int) -> int:
    """Where row `r` of layer `k`'s input lies in its buffer (in map rows, within a
    channel block) in pass `p`. Every pass's band ends at the buffer's end, so the
    rows a layer keeps, the last of the band, sit at the same place in every pass."""
    tallest = max(s[k].read for s in passes)
    return r - passes[p][k].reads[1] + tallest


def _chunks(rows: tuple[int, int], per: int) -> list[tuple[int, int]]:
    return [(a, min(a + per, rows[1])) for a in range(rows[0], rows[1], per)]


def _chunk_input(job: Job, a: int, b: int) -> tuple[int, int]:
    """Input rows ``[lo, hi)`` output rows ``[a, b)`` read (inside the map)."""
    H = job.sources[0].shape[1]
    sh, pt = job.stride[0], job.pads[0]
    ext = (job.kernel[0] - 1) * job.dilation[0] + 1
    return max(a * sh - pt, 0), min((b - 1) * sh - pt + ext, H)


def _blocks(cfg: ChipConfig, channels: int) -> int:
    return -(-channels // cfg.rows)


def _layout(cfg: ChipConfig, jobs: list[Job], passes: list[list[chain.Step]],
            weights: str, half_rows: int, strategy: str) -> _Buffers:
    """Bank-aligned regions for the chain below the UBUF, and the UBUF areas; a
    CompileError naming the layer and the shortfall if they do not fit."""
    R = cfg.rows
    top = cfg.ubuf_base if cfg.ubuf_rows and not cfg.ubuf_own_sram else cfg.cbuf_depth
    if cfg.ubuf_rows and cfg.ubuf_base + cfg.ubuf_rows != cfg.cbuf_physical_rows:
        raise CompileError(f"chip {cfg.name!r}: a chain keeps the UBUF at the top of the "
                           f"CBUF (ubuf_base + ubuf_rows == cbuf_depth)")
    regions: list[Region] = []
    at = 0

    def take(key: str, rows: int, what: str) -> int:
        nonlocal at
        lo = _bank_up(cfg, at)
        if lo + rows > top:
            raise CompileError(
                f"{what}: the chain needs {lo + rows} CBUF rows below the UBUF, the chip "
                f"has {top}: short by {(lo + rows - top) * R} bytes; use fewer outputs per "
                f"pass, streamed weights, or a shorter chain")
        regions.append(Region("cbuf", key, lo, rows, 0, 0, what))
        at = lo + rows
        return lo

    ring = take("weight ring", WEIGHT_SLOTS * R, "weight ring") if weights == "stream" \
        else None
    wat: list[int | None] = []
    for j in jobs:
        wat.append(take(f"{j.name}.weights", j.weights.shape[0] * R,
                        f"weights of layer {j.name!r}") if weights == "persistent" else None)
    inputs, stride = [], []
    taken = [np.zeros(cfg.ubuf_rows, dtype=bool) for _ in passes]   # fused crops' rows
    for k, j in enumerate(jobs):
        rows = max(s[k].read for s in passes) * j.sources[0].shape[2]
        shift, apart = (_fused_place(cfg, jobs, passes, k, _bank_up(cfg, at), rows, taken)
                        if strategy == "fused_crop" and k else (0, rows))
        stride.append(apart)
        blocks = j.sources[0].blocks(R)
        inputs.append(shift + take(f"{j.name}.input", shift + apart * (blocks - 1) + rows,
                                   f"input rows of layer {j.name!r}"))
    last = jobs[-1]
    Wo = last.out_shape[2]
    stage_half = min(max(1, half_rows // Wo), max(s[-1].computed for s in passes)) * Wo
    staging = take(f"{last.name}.staging", 2 * stage_half,
                   f"output staging of layer {last.name!r}")
    # UBUF areas: layer k's input rows cropped by layer k - 1 (a fused crop lands
    # where its CBUF address says: the whole UBUF is the chain's)
    ubuf, ubuf_stride, u = [], [], 0
    # a pass fetches the crop of the pass before before it crops again: one crop a layer
    peaks = [max(s[k].cropped for s in passes) for k in range(len(jobs))]
    if strategy == "fused_crop":
        regions.append(Region("cbuf", "ubuf", cfg.ubuf_base, cfg.ubuf_rows, 0, 0,
                              "UBUF (fused crops)"))
        return _Buffers(inputs, stride, wat, [None] * len(jobs), [0] * len(jobs), ring,
                        staging, stage_half, regions)
    for k, j in enumerate(jobs):
        rows = peaks[k - 1] * j.sources[0].shape[2] if k else 0
        ubuf_stride.append(rows)
        if not rows:
            ubuf.append(None)
            continue
        size = rows * j.sources[0].blocks(R)
        if u + size > cfg.ubuf_rows:
            raise CompileError(
                f"layer {j.name!r}: its halo rows need {u + size} UBUF rows, the chip has "
                f"{cfg.ubuf_rows}: short by {(u + size - cfg.ubuf_rows) * R} bytes; use "
                f"the baseline strategy or more outputs per pass")
        regions.append(Region("cbuf", f"{j.name}.ubuf", cfg.ubuf_base + u, size, 0, 0,
                              f"UBUF rows of layer {j.name!r}"))
        ubuf.append(u)
        u += size
    return _Buffers(inputs, stride, wat, ubuf, ubuf_stride, ring, staging, stage_half,
                    regions)


def _fused_place(cfg: ChipConfig, jobs: list[Job], passes, k: int, base: int, rows: int,
                 taken: list[np.ndarray]) -> tuple[int, int]:
    """``(shift, stride)``: where layer `k`'s input buffer starts above `base` and how
    far apart its channel blocks are (at least `rows`), so that the fused crops layer
    ``k - 1`` writes into it land, in every pass, on UBUF rows no other crop of that
    pass uses (a pass fetches every crop of the pass before before it crops again);
    the fewest rows added first. The rows are then marked in `taken` (per pass, a
    mask of the UBUF)."""
    U, W = cfg.ubuf_rows, jobs[k].sources[0].shape[2]
    blocks = jobs[k].sources[0].blocks(cfg.rows)
    crops = []                      # per pass: (its index, first row, rows) of the crop
    for p, steps in enumerate(passes):
        crop = steps[k - 1].crop
        if crop is None:
            continue
        n = (crop[1] - crop[0]) * W
        if n * blocks > U:
            raise CompileError(
                f"layer {jobs[k - 1].name!r}: pass {p} keeps {n * blocks} rows, more than "
                f"the UBUF's {U}; use more passes or the baseline strategy")
        crops.append((p, _band_row(passes, k, p, crop[0]) * W, n))
    if not crops:
        return 0, rows
    shifts = np.arange(U)
    for extra in range(0, U, max(1, W)):          # block stride rows + extra
        stride = rows + extra
        hits = {}
        for p, at, n in crops:
            offsets = (np.arange(n)[None, :] + at + stride * np.arange(blocks)[:, None]).ravel()
            if len(np.unique(offsets % U)) < len(offsets):
                break                                 # its own blocks collide
            hits[p] = (base + shifts[:, None] + offsets[None, :]) % U     # [shift, row]
        else:
            free = np.ones(U, dtype=bool)
            for p, rows_at in hits.items():
                free &= ~taken[p][rows_at].any(axis=1)
            if free.any():
                shift = int(np.argmax(free))
                for p, rows_at in hits.items():
                    taken[p][rows_at[shift]] = True
                return shift, stride
    raise CompileError(f"layer {jobs[k - 1].name!r}: its fused crops find no UBUF rows "
                       f"apart from the other layers'; use the crop_fetch strategy")


def _check_fetches(jobs: list[Job], passes: list[list[chain.Step]]) -> None:
    """Each pass fetches only rows the pass before cropped (the UBUF area of a layer
    holds one pass's crop)."""
    for p, steps in enumerate(passes):
        for k, s in enumerate(steps):
            if s.fetch is None:
                continue
            crop = passes[p - 1][k - 1].crop if p else None
            if crop is None or not crop[0] <= s.fetch[0] < s.fetch[1] <= crop[1]:
                raise CompileError(
                    f"layer {jobs[k].name!r}: pass {p} needs halo rows {s.fetch} of its "
                    f"input that the pass before did not compute; use more outputs per "
                    f"pass (the halo is taller than a pass)")


def estimate(cfg: ChipConfig, jobs: list[Job], passes: list[list[chain.Step]],
             weights: str, bufs: _Buffers, half_rows: int) -> tuple[int, int]:
    """``(cycles, dram_bytes)`` a way of running the chain should take: the rows the
    array streams (every MATMUL, halo recomputation included) against the words the
    DMA moves (the input bands, the weights once or once per chunk and output block
    when streamed, the parameters, the output), the run bounded by the larger."""
    R = cfg.rows
    streamed = moved = 0
    for k, j in enumerate(jobs):
        Wo = j.out_shape[2]
        per = max(1, half_rows // Wo) if k < len(jobs) - 1 else bufs.stage_half // Wo
        steps = sum(len(s) for s in j.steps)
        chunks = sum(len(_chunks(p[k].compute, per)) for p in passes
                     if p[k].compute is not None)
        streamed += sum(p[k].computed * Wo for p in passes) * steps
        moved += j.weights.shape[0] * R * (chunks if weights == "stream" else 1)
        moved += len(j.steps) * PARAM_ROWS * cfg.acc_row_words
    src = jobs[0].sources[0]
    moved += sum(p[0].read for p in passes) * src.shape[2] * src.blocks(R)
    out = jobs[-1].out_shape
    moved += out[1] * out[2] * len(jobs[-1].steps)
    return max(streamed, moved), moved * R


def choose(cfg: ChipConfig, jobs: list[Job], want: ChainChoice, half_rows: int
           ) -> tuple[ChainChoice, list[list[chain.Step]], _Buffers]:
    """The cost model: of the pass sizes and weight placements that fit the CBUF, the
    UBUF and the halo rule, the one :func:`estimate` says runs in the fewest cycles,
    then moves the fewest DRAM bytes, then takes the fewest passes. A user's choice in
    `want` stands."""
    H = jobs[0].sources[0].shape[1]
    Ho = jobs[-1].out_shape[1]
    ubuf = want.strategy != "baseline"
    if ubuf and not cfg.ubuf_rows:
        raise CompileError(f"chip {cfg.name!r} has no UBUF (ubuf_rows = 0): use the "
                           f"baseline strategy")
    counts = [want.outputs_per_pass] if want.outputs_per_pass else \
        list(range(Ho, 0, -1))
    kinds = [want.weights] if want.weights else list(WEIGHTS)
    L = len(jobs)
    if want.keep is not None:
        if len(want.keep) != L:
            raise CompileError(f"chain keep has {len(want.keep)} flags for {L} layers")
        keeps = [want.keep]
    elif ubuf:                        # every way of keeping some layer's halo
        keeps = [combo + (False,) for combo in itertools.product((True, False),
                                                                 repeat=L - 1)
                 if any(combo)] or [(False,) * L]
    else:
        keeps = [(False,) * L]
    fit_error = halo_error = None     # the smallest pass that does not fit, or why
    best = None                       # no pass keeps its halo
    for per in counts:
        for keep in keeps:
            passes = chain.plan(H, _axes(jobs), per, ubuf=keep)
            try:
                _check_fetches(jobs, passes)
            except CompileError as e:
                halo_error = halo_error or e
                continue
            for weights in kinds:
                try:
                    bufs = _layout(cfg, jobs, passes, weights, half_rows, want.strategy)
                except CompileError as e:
                    fit_error = e
                    continue
                cost = (*estimate(cfg, jobs, passes, weights, bufs, half_rows),
                        len(passes))
                if best is None or cost < best[0]:
                    best = (cost, ChainChoice(want.strategy, per, weights, keep), passes,
                            bufs)
    if best is None:
        raise fit_error or halo_error
    return best[1:]


def lower_chain(cfg: ChipConfig, graph: Graph, want: ChainChoice = ChainChoice()
                ) -> CnnLowered:
    """Lower a chain of convolutions (:func:`chain_layers`) to run in passes."""
    R = cfg.rows
    nodes = chain_layers(graph)
    check_channels(cfg, graph)
    jobs = []
    for i, node in enumerate(nodes):
        shape = as_map(graph.tensor(node.inputs[0]).shape)
        job = _conv_job(cfg, graph, i, node, Source(node.inputs[0], shape, 1))
        _check_window(job)
        jobs.append(job)
    # ACC: two halves, then every layer's epilogue parameters, loaded once
    param_rows = PARAM_ROWS * sum(len(j.steps) for j in jobs)
    half_rows = (cfg.acc_depth - param_rows) // 2
    for j in jobs:
        if j.out_shape[2] > half_rows:
            raise CompileError(f"layer {j.name!r}: one output row ({j.out_shape[2]} "
                               f"pixels) is more than an accumulator half "
                               f"({half_rows} rows)")
    choice, passes, bufs = choose(cfg, jobs, want, half_rows)

    # DRAM: the input, every layer's weights and epilogue parameters, the output.
    steps = len(nodes)
    dram = DramLayout(cfg, steps)
    place = dram.place

    x_name = graph.inputs[0]
    x = np.asarray(graph.data[x_name])
    x_words = pack_map(cfg, x.reshape(as_map(x.shape)))
    x_at = place(f"tensor {x_name}", x_words, f"input {x_name!r}")
    params, w_at, p_at = {}, [], []
    for j in jobs:
        w = place(f"{j.name}.weights", j.weights.reshape(-1, R).view(np.uint8),
                  f"weights of layer {j.name!r}")
        rows = acc_param_rows(cfg, j.post_rows)
        p = place(f"{j.name}.post", rows, f"epilogue parameters of layer {j.name!r}")
        params[(j.name, "weights")] = (w, j.weights.shape[0] * R)
        params[(j.name, "post")] = (p, rows.shape[0])
        w_at.append(w)
        p_at.append(p)
    out_name = graph.outputs[0]
    out_words = _out_words(cfg, graph.tensor(out_name))
    out_at = place(f"tensor {out_name}", out_words, f"output {out_name!r}")
    image = dram.image()

    lay = Layout(ring=bufs.ring or 0, staging=bufs.staging, top=cfg.cbuf_depth, halves=0,
                 half_rows=half_rows, slots=2 * half_rows)
    slots, at = [], lay.slots                  # per layer: its first parameter row
    for j in jobs:
        slots.append(at)
        at += PARAM_ROWS * len(j.steps)
    emit = _Emit(cfg, _Counters(tile_rows=cfg.tile_rows, tile_cols=cfg.tile_cols), lay)
    blocks = _emit_passes(cfg, emit, jobs, passes, bufs, x_at, w_at, p_at, slots, out_at,
                          choice.strategy)

    chip_regions = [Region("cbuf", r.key, r.lo, r.size, 0, steps - 1, r.what)
                    for r in bufs.regions]
    chip_regions += [
        Region("acc", "accumulator halves", 0, 2 * half_rows, 0, steps - 1,
               "accumulator halves"),
        Region("acc", "epilogue parameters", 2 * half_rows, param_rows, 0, steps - 1,
               "epilogue parameters")]
    dmap = DramMap(MappingProxyType({x_name: (x_at, x_words.shape[0])}),
                   MappingProxyType(params), MappingProxyType({out_name: (out_at, out_words)}),
                   dram.cursor)
    plan = MemoryPlan(cfg, graph, MappingProxyType({}), tuple(chip_regions + dram.regions),
                      image, dmap)
    check_plan(plan)
    return ChainLowered(pipeline(cfg, blocks), loop_order(blocks), plan, copies={},
                        jobs={j.name: j for j in jobs}, choice=choice, passes=passes)


@dataclass
class ChainLowered(CnnLowered):
    """A lowered chain, with what the cost model chose and the passes it runs."""
    choice: ChainChoice | None = None
    passes: list = field(default_factory=list)


def _split(a: int, b: int, crop: tuple[int, int] | None) -> list[tuple[int, int, int]]:
    """Rows ``[a, b)`` as ``(first, end, crop)`` runs: those inside `crop` are
    written with the fused crop."""
    if crop is None:
        return [(a, b, 0)]
    cuts = sorted({a, b, min(max(crop[0], a), b), min(max(crop[1], a), b)})
    return [(r0, r1, int(crop[0] <= r0 and r1 <= crop[1]))
            for r0, r1 in zip(cuts, cuts[1:]) if r0 < r1]


def _emit_passes(cfg, emit: _Emit, jobs: list[Job], passes, bufs: _Buffers, x_at: int,
                 w_at: list[int], p_at: list[int], slots: list[int], out_at: int,
                 strategy: str) -> list[Block]:
    R, arw = cfg.rows, cfg.acc_row_words
    em, lay = emit.em, emit.lay
    blocks: list[Block] = []
    last = len(jobs) - 1

    def fetches(p: int, steps: list) -> list:
        out = []
        for k, s in enumerate(steps):
            if s.fetch is None:
                continue
            W = jobs[k].sources[0].shape[2]
            c0 = passes[p - 1][k - 1].crop[0]
            for cb in range(jobs[k].sources[0].blocks(R)):
                at = bufs.inputs[k] + cb * bufs.stride[k] + _band_row(passes, k, p, s.fetch[0]) * W
                if bufs.ubuf[k] is not None:            # crop_fetch: the layer's area
                    out.append(emit.op(
                        Opcode.COPY, jobs[k].index, kind=CopyKind.FETCH, cbuf_addr=at,
                        ubuf_addr=bufs.ubuf[k] + cb * bufs.ubuf_stride[k]
                        + (s.fetch[0] - c0) * W, rows=s.fetched * W))
                    continue
                # fused: where the row was written in the pass before, mod the UBUF
                was = (bufs.inputs[k] + cb * bufs.stride[k]
                       + _band_row(passes, k, p - 1, s.fetch[0]) * W)
                out += wrapped_fetch(jobs[k].index, at, was, s.fetched * W)
        return out

    def wrapped_fetch(layer: int, at: int, was: int, rows: int) -> list:
        """FETCHes of `rows` UBUF rows from the image of CBUF row `was` to `at`, in
        two where the image wraps round the UBUF's end."""
        U = cfg.ubuf_rows
        start = was % U
        first = min(rows, U - start)
        ops = [emit.op(Opcode.COPY, layer, kind=CopyKind.FETCH, cbuf_addr=at,
                       ubuf_addr=start, rows=first)]
        if rows > first:
            ops.append(emit.op(Opcode.COPY, layer, kind=CopyKind.FETCH,
                               cbuf_addr=at + first, ubuf_addr=0, rows=rows - first))
        return ops

    for p, steps in enumerate(passes):
        first = next(k for k, s in enumerate(steps) if s.compute is not None)
        for k, s in enumerate(steps):
            job = jobs[k]
            i = job.index
            if s.compute is None:
                continue
            src = job.sources[0]
            H, W = src.shape[1], src.shape[2]
            Ho, Wo = job.out_shape[1], job.out_shape[2]
            cbs = src.blocks(R)
            lo = s.reads[0]
            head: list = []                  # before the layer's first MATMUL in the pass
            if p == 0:                      # the epilogue parameters: loaded once
                head.append(emit.op(Opcode.DMA, i, kind=DmaKind.LOAD_ACC, dram_addr=p_at[k],
                                    dram_stride=arw, buf_addr=slots[k],
                                    rows=PARAM_ROWS * len(job.steps)))
            if p == 0 and bufs.weights[k] is not None:     # persistent: loaded once
                total = job.weights.shape[0] * R
                for at in range(0, total, DMA_ROWS):
                    head.append(emit.op(Opcode.DMA, i, kind=DmaKind.LOAD_CBUF,
                                        dram_addr=w_at[k] + at, dram_stride=1,
                                        buf_addr=bufs.weights[k] + at,
                                        rows=min(DMA_ROWS, total - at)))
            if k == 0:
                for cb in range(cbs):
                    head.append(emit.op(Opcode.DMA, i, kind=DmaKind.LOAD_CBUF,
                                        dram_addr=x_at + cb * H * W + lo * W, dram_stride=1,
                                        buf_addr=bufs.inputs[0] + cb * bufs.stride[0]
                                        + _band_row(passes, 0, p, lo) * W,
                                        rows=s.read * W))
            if k == first:
                # every fetch of the pass first: a layer crops into the same UBUF area
                # in this pass, after it computes, what the next layer fetches now
                head += fetches(p, steps)
            if k < last:
                nxt = steps[k + 1]
                if nxt.reads is None or not (nxt.reads[0] <= s.compute[0]
                                              and s.compute[1] <= nxt.reads[1]):
                    raise CompileError(f"layer {job.name!r}: pass {p} computes rows "
                                       f"{s.compute} the next layer does not read")
            per = max(1, lay.half_rows // Wo)
            if k == last:
                per = bufs.stage_half // Wo
            chunks = _chunks(s.compute, per)
            for ci, (a, b) in enumerate(chunks):
                clo, chi = _chunk_input(job, a, b)
                geom = emit.op(Opcode.CONVCFG, i, out_w=Wo, sh=job.stride[0],
                               sw=job.stride[1], top=clo + job.pads[0] - a * job.stride[0],
                               left=job.pads[1], pad=job.pad_byte)
                rows = (b - a) * Wo
                for nb, wsteps in enumerate(job.steps):
                    blk = Block(i)
                    half = em.blocks % 2
                    em.blocks += 1
                    acc_at = half * lay.half_rows
                    slot = slots[k] + nb * PARAM_ROWS
                    for j, st in enumerate(wsteps):
                        pre = []
                        if nb == 0 and j == 0:
                            pre += (head if ci == 0 else []) + [geom]
                        bank = em.steps % 2
                        if bufs.weights[k] is None:
                            ring = bufs.ring + (em.steps % WEIGHT_SLOTS) * R
                            pre.append(emit.op(Opcode.DMA, i, kind=DmaKind.LOAD_CBUF,
                                               dram_addr=w_at[k] + st.block * R,
                                               dram_stride=1, buf_addr=ring, rows=R))
                            w_addr = ring
                        else:
                            w_addr = bufs.weights[k] + st.block * R
                        em.steps += 1
                        pre.append(emit.op(Opcode.WLOAD, i, w_addr=w_addr, bank=bank))
                        dh, dw = st.taps[0]
                        act = bufs.inputs[k] + st.cb * bufs.stride[k] + _band_row(passes, k, p, clo) * W
                        mm = emit.op(Opcode.MATMUL, i, act_addr=act, rows=rows,
                                     acc_addr=acc_at, accumulate=int(j > 0), max=0,
                                     bank=bank, conv=1, dh=dh, dw=dw, taps=0, in_w=W,
                                     in_h=chi - clo)
                        blk.steps.append(Step(pre, mm))
                    v = dict(job.vrun)
                    if k < last:
                        dst = bufs.inputs[k + 1] + nb * bufs.stride[k + 1] + _band_row(passes, k + 1, p, a) * Wo
                        fused = s.crop if strategy == "fused_crop" else None
                        blk.epilogue = [
                            emit.op(Opcode.VRUN, i, src=acc_at + (r0 - a) * Wo,
                                    rows=(r1 - r0) * Wo, to_acc=0, dst=dst + (r0 - a) * Wo,
                                    bias_addr=slot, crop=crop, **v)
                            for r0, r1, crop in _split(a, b, fused)]
                        if ci == len(chunks) - 1 and s.crop is not None and not fused:
                            blk.epilogue.append(emit.op(
                                Opcode.COPY, i, kind=CopyKind.CROP,
                                cbuf_addr=bufs.inputs[k + 1] + nb * bufs.stride[k + 1]
                                + _band_row(passes, k + 1, p, s.crop[0]) * Wo,
                                ubuf_addr=bufs.ubuf[k + 1] + nb * bufs.ubuf_stride[k + 1],
                                rows=s.cropped * Wo))
                    else:
                        staging = bufs.staging + half * bufs.stage_half
                        blk.epilogue = [
                            emit.op(Opcode.VRUN, i, src=acc_at, rows=rows, to_acc=0,
                                    dst=staging, bias_addr=slot, **v),
                            emit.op(Opcode.DMA, i, kind=DmaKind.STORE_CBUF,
                                    dram_addr=out_at + (nb * Ho + a) * Wo, dram_stride=1,
                                    buf_addr=staging, rows=rows)]
                    blocks.append(blk)
    return blocks
