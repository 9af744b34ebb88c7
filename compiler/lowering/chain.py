"""Lowering of a chain of convolutions through the CBUF in passes (seed 001,
docs/cnn.md "Chains"). Entry point: :func:`lower_chain`.

A chain's intermediate maps never go to DRAM. Each pass loads the band of the
network input its first layer reads; every layer then computes its rows of the pass
(:func:`.chain.plan_passes`) from the previous layer's rows in the CBUF, and the last
layer's rows are stored. Three strategies (:data:`STRATEGIES`):

* ``baseline``: every pass computes all the rows it reads, halo rows again, and the
  first layer re-reads their input from DRAM;
* ``crop_fetch``: every row is computed once. The rows a later pass reads again
  are cropped into the UBUF (``COPY CROP``) after they are written and fetched
  back (``COPY FETCH``) before the next layer reads them.
* ``fused_crop``: as ``crop_fetch``, but the producing layer's writeback crops the
  rows as it writes them (``VRUN crop = 1``: CBUF row ``a`` also lands in UBUF row
  ``a mod ubuf_rows``), with no pass of its own over the data.

A chain may mix them, one per layer (``ChainChoice.strategy`` a tuple): the
strategy of layer ``k`` is how the rows of its output that the next pass reads again
are had (computed again, copied, or cropped as written). The copied layers' UBUF
areas come first; the fused crops land on the UBUF rows above them.

Each layer's weights are loaded once into the CBUF for the whole chain
(``persistent``), loaded whole at the layer's turn in every pass (``pass``: its
banks hold other layers' rows the rest of the pass), or streamed through the weight
ring one block per step (``stream``). The buffers of one layer's input hold the rows
of one pass, channel block after channel block, at a fixed stride.

The CBUF's banks are shared in time (:func:`_layout`): within a pass, layer ``k``'s
input band lives from layer ``k - 1`` (which writes it, and before which its halo
rows are fetched; with fused crops from the pass's start, where every fetch is) to
layer ``k``, ``pass`` weights during their layer, the output
staging during the last layer; regions whose lifetimes are disjoint may take the
same banks, so each layer gets its own split of the banks between weights, feature
rows and the UBUF (:attr:`ChainLowered.banks`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.arch.instructions import PARAM_ROWS
from systolica.arch.isa import CopyKind, DmaKind, Opcode
from systolica.compiler.errors import CompileError, InternalError
from systolica.compiler.graph.graph import Graph
from systolica.compiler.lowering.conv_mapping import choose_mapping
from systolica.compiler.lowering.conv_steps import conv_job
from systolica.compiler.lowering.emitter import Emitter
from systolica.compiler.lowering.lowered import Lowered
from systolica.compiler.lowering.maps.jobs import Job, Source, check_window, stored_weights
from systolica.compiler.lowering.maps.layout import (
    MAP_RING_BLOCKS,
    DramLayout,
    Layout,
    acc_param_rows,
    as_map,
    bank_up,
    out_words,
    pack_map,
)
from systolica.compiler.lowering.maps.tile_loop import TileLoop
from systolica.compiler.lowering.registry import rule_for
from systolica.compiler.lowering.zero_fill import zero_fill
from systolica.compiler.planning import chain_passes as chain
from systolica.compiler.planning.memory import DramMap, MemoryPlan, Region, check_plan
from systolica.compiler.scheduling.pipeline import Block, Step, loop_order, pipeline

STRATEGIES = ("baseline", "crop_fetch", "fused_crop")
DMA_ROWS = 1 << 12       # rows per load of persistent weights (each a DMA of its own)
WEIGHTS = ("persistent", "pass", "stream")   # least DRAM traffic first, most CBUF first


@dataclass(frozen=True)
class ChainChoice:
    """How a chain runs; None leaves a choice to :func:`choose_chain`. ``strategy``: one of
    :data:`STRATEGIES` for the chain, or a tuple of one per layer (how the halo rows
    of the layer's output are had; the last layer's output has none, so its entry
    says nothing); ``outputs_per_pass``: rows of the last layer's output per pass;
    ``weights``: one of :data:`WEIGHTS` for
    every layer, or a tuple of one per layer; ``keep``: per layer, whether its
    output's halo rows are kept in the UBUF (else computed again in the next pass);
    ``share``: whether regions whose lifetimes within a pass do not overlap may take
    the same CBUF banks (False: every region keeps its banks for the whole chain)."""
    strategy: str | tuple[str, ...] = "crop_fetch"
    outputs_per_pass: int | None = None
    weights: str | tuple[str, ...] | None = None
    keep: tuple[bool, ...] | None = None
    share: bool = True

    def __post_init__(self):
        kinds = self.strategy if isinstance(self.strategy, tuple) else (self.strategy,)
        if not kinds or any(k not in STRATEGIES for k in kinds):
            raise CompileError(f"chain strategy {self.strategy!r} is not one of "
                               f"{', '.join(STRATEGIES)}, or a tuple of one per layer")
        kinds = self.weights if isinstance(self.weights, tuple) else (self.weights,)
        if self.weights is not None and (not kinds or any(k not in WEIGHTS for k in kinds)):
            raise CompileError(f"chain weights {self.weights!r} is not one of "
                               f"{', '.join(WEIGHTS)}, or a tuple of one per layer")
        if self.keep is not None and (not isinstance(self.keep, tuple) or not all(
                isinstance(k, bool) for k in self.keep)):
            raise CompileError(f"chain keep must be a tuple of one bool per layer, not "
                               f"{self.keep!r}")
        if self.keep is not None and isinstance(self.strategy, tuple) and \
                self.keep != self._kept(len(self.keep)):
            raise CompileError(f"chain keep {self.keep!r} disagrees with the per-layer "
                               f"strategy {self.strategy!r} (a layer keeps its halo "
                               f"unless its strategy is baseline); give one or the other")
        if self.keep is not None and self.strategy == "baseline" and any(self.keep):
            raise CompileError("the baseline strategy keeps nothing in the UBUF; choose "
                               "crop_fetch or fused_crop to keep a layer's halo")
        if self.outputs_per_pass is not None and (
                not isinstance(self.outputs_per_pass, int) or self.outputs_per_pass < 1):
            raise CompileError(f"outputs per pass must be a positive integer, not "
                               f"{self.outputs_per_pass!r}")
        if not isinstance(self.share, bool):
            raise CompileError(f"chain share must be True or False, not {self.share!r}")

    def strategies(self, layers: int) -> tuple[str, ...]:
        """The strategy per layer; CompileError on a tuple of the wrong length."""
        if isinstance(self.strategy, str):
            return (self.strategy,) * layers
        if len(self.strategy) != layers:
            raise CompileError(f"chain strategy has {len(self.strategy)} entries for "
                               f"{layers} layers")
        return self.strategy

    def _kept(self, layers: int) -> tuple[bool, ...]:
        """Per layer, whether a per-layer strategy keeps its halo (never the last)."""
        return tuple(s != "baseline" for s in self.strategies(layers)[:-1]) + (False,)

    @property
    def uses_ubuf(self) -> bool:
        kinds = self.strategy if isinstance(self.strategy, tuple) else (self.strategy,)
        return any(k != "baseline" for k in kinds[:-1] or kinds)

    def fused(self, keep: tuple[bool, ...]) -> tuple[bool, ...]:
        """Per layer, whether the halo it keeps (`keep`) is cropped as it is written."""
        kinds = self.strategies(len(keep))
        return tuple(k and s == "fused_crop" for k, s in zip(keep, kinds))

    @property
    def name(self) -> str:
        """The strategy as one word: its name, or the per-layer names joined by +."""
        return self.strategy if isinstance(self.strategy, str) else "+".join(self.strategy)

    def modes(self, layers: int) -> tuple[str, ...] | None:
        """The weight placement per layer, if given; CompileError on a tuple of the
        wrong length."""
        if self.weights is None or isinstance(self.weights, str):
            return None if self.weights is None else (self.weights,) * layers
        if len(self.weights) != layers:
            raise CompileError(f"chain weights has {len(self.weights)} entries for "
                               f"{layers} layers")
        return self.weights


@dataclass
class _Buffers:
    """Where a chain keeps things in the CBUF: per layer its input buffer (``inputs``,
    channel blocks ``stride`` rows apart), its weights (``persistent`` or ``pass``:
    ``modes``) and its UBUF area (``ubuf``, channel blocks ``ubuf_stride`` rows apart);
    the weight ring (streamed weights) and the last layer's two output staging
    halves. ``regions``: every one with its lifetime in layers of a pass."""
    inputs: list[int]
    stride: list[int]
    weights: list[int | None]
    ubuf: list[int | None]          # UBUF row (relative to ubuf_base)
    ubuf_stride: list[int]
    ring: int | None
    staging: int
    stage_half: int
    regions: list[Region]
    modes: tuple[str, ...] = ()

    def banks(self, cfg: ChipConfig, layers: int) -> list[dict[str, int]]:
        """Per layer, the CBUF banks its regions live in take: ``weights`` (weights
        and the weight ring), ``features`` (input bands and output staging), ``ubuf``
        (the UBUF's), ``free``."""
        size = cfg.cbuf_bank_rows
        out = []
        for k in range(layers):
            kind = {}
            for r in self.regions:
                if r.first <= k <= r.last and r.size:
                    what = ("ubuf" if r.key == "ubuf" or r.key.endswith(".ubuf") else
                            "weights" if r.key.endswith(".weights") or r.key == "weight ring"
                            else "features")
                    for b in range(r.lo // size, (r.hi - 1) // size + 1):
                        kind.setdefault(b, what)
            if cfg.ubuf_rows and not cfg.ubuf_own_sram:
                for b in range(cfg.ubuf_base // size, (cfg.ubuf_base + cfg.ubuf_rows) // size):
                    kind[b] = "ubuf"
            split = {w: sum(v == w for v in kind.values())
                     for w in ("weights", "features", "ubuf")}
            split["free"] = cfg.cbuf_banks - sum(b < cfg.cbuf_banks for b in kind)
            out.append(split)
        return out


def check_chain_channels(cfg: ChipConfig, name: str, channels: int) -> None:
    """A chain of convolutions (:mod:`.chain_lower`) keeps a layer's output in the CBUF
    as one block that is both a channel block of ``R`` and an N-block of ``C`` columns:
    on a non-square array it takes at most ``min(R, C)`` output channels a layer (the
    layer-by-layer lowering takes any number)."""
    most = min(cfg.rows, cfg.cols)
    if cfg.rows != cfg.cols and channels > most:
        raise CompileError(
            f"layer {name!r}: {channels} output channels on chip {cfg.name!r}, whose "
            f"{cfg.rows}x{cfg.cols} array is not square: a chain of convolutions takes "
            f"at most {most} output channels a layer (one block); run the layer on its "
            f"own (segments={{{name!r}: 1}} or chain='layer_by_layer'), or use a square "
            f"preset or fewer channels")


def check_channels(cfg: ChipConfig, graph: Graph) -> None:
    """:func:`check_chain_channels` for every layer of `graph` but views (a graph
    lowered as one chain)."""
    for node in graph.nodes:
        if not rule_for(node).stores_blocks:
            continue
        for t in node.outputs:
            check_chain_channels(cfg, node.name, graph.tensor(t).shape[-1])


def chain_layers(graph: Graph) -> list:
    """The graph's nodes if they form a chain of convolutions (each reading the one
    before, batch 1, no replicated input); else a CompileError saying what breaks it."""
    nodes = graph.nodes
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        raise CompileError(f"graph {graph.name!r}: a chain has one input and one output")
    prev = graph.inputs[0]
    for node in nodes:
        refusal = rule_for(node).chain_refusal(node)
        if refusal is not None:
            raise CompileError(refusal)
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


def _chunk_input(job: Job, a: int, b: int) -> tuple[int, int]:
    """Input rows ``[lo, hi)`` output rows ``[a, b)`` read (inside the map)."""
    H = job.sources[0].shape[1]
    sh, pt = job.stride[0], job.pads[0]
    ext = (job.kernel[0] - 1) * job.dilation[0] + 1
    return max(a * sh - pt, 0), min((b - 1) * sh - pt + ext, H)


def _blocks(cfg: ChipConfig, channels: int) -> int:
    return -(-channels // cfg.rows)


@dataclass
class _Ask:
    """A region the chain asks for: `rows` rows live in layers ``first .. last`` of a
    pass; `fused`: layer `layer`'s input band, which its fused crops place."""
    key: str
    rows: int
    first: int
    last: int
    what: str
    layer: int = 0
    fused: bool = False


def _layout(cfg: ChipConfig, jobs: list[Job], passes: list[list[chain.Step]],
            modes: tuple[str, ...], half_rows: int, fused: tuple[bool, ...],
            share: bool = True) -> _Buffers:
    """Bank-aligned CBUF regions for the chain around the UBUF, and the UBUF areas.

    Lifetimes count the layers of a pass (every pass runs them in order): the weight
    ring and ``persistent`` weights live throughout, ``pass`` weights in their layer,
    layer ``k``'s input band from layer ``k - 1`` to ``k`` (the first layer's in its
    own; with fused crops from the first layer if it fetches halo rows), the output
    staging in the last layer. Without `share` every region lives throughout. Two
    ways of placing them, the first that fits: (1) in order (weights, the bands layer
    by layer, the staging), each at the lowest bank boundary with banks no other
    region takes, else at the lowest where it meets no region live at the same time
    (a later user of a shared bank waits for the earlier one, so banks are shared
    only where needed); (2) the regions live throughout first, then the others by
    decreasing size, each at the lowest bank boundary where it meets no region live
    at the same time (packed). A CompileError names the region, its layers and the
    shortfall in bytes when neither fits. `fused`: per layer, whether its halo is
    cropped as it is written (the UBUF areas of the others come first)."""
    R, L = cfg.rows, len(jobs)
    whole = (0, L - 1)

    def life(first: int, last: int) -> tuple[int, int]:
        return (first, last) if share else whole

    asks: list[_Ask] = []
    streamed = [k for k, m in enumerate(modes) if m == "stream"]
    if streamed:
        asks.append(_Ask("weight ring", MAP_RING_BLOCKS * cfg.weight_rows,
                         *life(streamed[0], streamed[-1]), "weight ring"))
    for want in ("persistent", "pass"):
        for k, j in enumerate(jobs):
            if modes[k] == want:
                asks.append(_Ask(f"{j.name}.weights", j.weights.shape[0] * cfg.weight_rows,
                                 *life(*(whole if want == "persistent" else (k, k))),
                                 f"weights of layer {j.name!r}", k))
    band = []
    for k, j in enumerate(jobs):
        band.append(max(s[k].read for s in passes) * j.sources[0].shape[2])
        into = k > 0 and fused[k - 1]      # layer k - 1 crops into it as it writes
        # fused crops: the halo rows are fetched as the pass starts (_emit_passes)
        early = into and any(p[k].fetch is not None for p in passes)
        asks.append(_Ask(f"{j.name}.input", band[k] * j.sources[0].blocks(R),
                         *life(0 if early else max(k - 1, 0), k),
                         f"input rows of layer {j.name!r}", k, into))
    last = jobs[-1]
    Wo = last.out_shape[2]
    stage_half = min(max(1, half_rows // Wo), max(s[-1].computed for s in passes)) * Wo
    asks.append(_Ask(f"{last.name}.staging", 2 * stage_half, *life(L - 1, L - 1),
                     f"output staging of layer {last.name!r}", L - 1))
    ubuf_region = ([Region("cbuf", "ubuf", cfg.ubuf_base, cfg.ubuf_rows, 0, L - 1, "UBUF")]
                   if cfg.ubuf_rows and not cfg.ubuf_own_sram else [])
    # UBUF areas of the copied crops: layer k's input rows cropped by layer k - 1. A
    # pass fetches the crop of the pass before by the time its layer k - 1 starts and
    # crops again after it computes: every area lives across the passes, so the areas
    # share no rows; the fused crops land on rows above them.
    ubuf, ubuf_stride, u, areas = [], [], 0, []
    peaks = [max(s[k].cropped for s in passes) for k in range(len(jobs))]
    for k, j in enumerate(jobs):
        rows = peaks[k - 1] * j.sources[0].shape[2] if k and not fused[k - 1] else 0
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
        areas.append(Region("cbuf", f"{j.name}.ubuf", cfg.ubuf_base + u, size, 0, L - 1,
                            f"UBUF rows of layer {j.name!r}"))
        ubuf.append(u)
        u += size
    packed = sorted(asks, key=lambda a: ((a.first, a.last) != whole, -a.rows))
    error = None
    for order, apart in ((asks, True), (packed, False)) if share else ((asks, True),):
        try:
            regions, fused_at = _place_asks(cfg, jobs, passes, order, apart, ubuf_region,
                                            reserved=u)
            break
        except CompileError as e:
            error = e.with_traceback(None)
    else:
        raise error
    at = {r.key: r.lo for r in regions}
    inputs, stride = [], []
    for k, j in enumerate(jobs):
        shift, apart = fused_at.get(k, (0, band[k]))
        inputs.append(at[f"{j.name}.input"] + shift)
        stride.append(apart)
    ring = at.get("weight ring")
    wat = [at.get(f"{j.name}.weights") for j in jobs]
    staging = at[f"{last.name}.staging"]
    regions += areas
    if any(fused):      # a fused crop lands where its CBUF address says, above the areas
        regions.append(Region("cbuf", "ubuf", cfg.ubuf_base + u, cfg.ubuf_rows - u, 0,
                              L - 1, "UBUF (fused crops)"))
    return _Buffers(inputs, stride, wat, ubuf, ubuf_stride, ring, staging, stage_half,
                    regions, modes)


def _place_asks(cfg: ChipConfig, jobs: list[Job], passes, asks: list[_Ask], apart: bool,
                fixed: list[Region], reserved: int = 0
                ) -> tuple[list[Region], dict[int, tuple[int, int]]]:
    """Place `asks` in this order around `fixed` (:func:`_layout`; `apart`: banks no
    other region takes first). The regions, and per fused band its ``(shift,
    stride)`` (:func:`_fused_place`), its crops on UBUF rows from `reserved` up."""
    R, L = cfg.rows, len(jobs)
    placed = list(fixed)
    regions: list[Region] = []
    fused_at: dict[int, tuple[int, int]] = {}
    taken = [np.zeros(cfg.ubuf_rows, dtype=bool) for _ in passes]   # fused crops' rows
    for t in taken:
        t[:reserved] = True                                          # copied crops'

    def gap(first: int, last: int, rows: int, after: int = 0) -> tuple[int, int]:
        """The lowest bank-aligned start at or above `after` free over the lifetime
        with room for `rows`, and the room there; else (-1, the largest room)."""
        busy = sorted((r for r in placed if r.first <= last and first <= r.last),
                      key=lambda r: r.lo)
        at, largest = bank_up(cfg, after), 0
        for r in busy + [Region("cbuf", "end", cfg.cbuf_depth, 0, first, last)]:
            if r.hi <= at:
                continue
            room = r.lo - at
            if room >= rows:
                return at, room
            largest = max(largest, room)
            at = max(at, bank_up(cfg, r.hi))
        return -1, largest

    def spot(ask: _Ask, rows: int, after: int = 0) -> tuple[int, int]:
        if apart:
            lo, room = gap(0, L - 1, rows, after)
            if lo >= 0:
                return lo, room
        lo, room = gap(ask.first, ask.last, rows, after)
        if lo < 0:
            during = (f"layer {jobs[ask.first].name!r} runs" if ask.first == ask.last
                      else f"layers {jobs[ask.first].name!r} to {jobs[ask.last].name!r} "
                           f"run")
            raise CompileError(
                f"{ask.what}: the chain needs {rows} CBUF rows for it while {during}, "
                f"the largest free range then has {room}: short by {(rows - room) * R} "
                f"bytes; use fewer outputs per pass, weights loaded per pass or "
                f"streamed, or a shorter chain")
        return lo, room

    for ask in asks:
        lo, room = spot(ask, ask.rows)
        size = ask.rows
        if ask.fused:
            # a fused crop lands where its CBUF row says: place, then check the range
            k = ask.layer
            rows = ask.rows // jobs[k].sources[0].blocks(R)
            while True:
                trial = [t.copy() for t in taken]
                shift, stride = _fused_place(cfg, jobs, passes, k, lo, rows, trial)
                size = shift + stride * (jobs[k].sources[0].blocks(R) - 1) + rows
                if size <= room:
                    taken[:] = trial
                    fused_at[k] = shift, stride
                    break
                lo, room = spot(ask, size, lo + cfg.cbuf_bank_rows)   # a larger range
        regions.append(Region("cbuf", ask.key, lo, size, ask.first, ask.last, ask.what))
        placed.append(regions[-1])
    return regions, fused_at


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
    # per pass, taken rows counted along the UBUF twice round: the taken rows of the
    # cyclic run of n from x are busy[x + n] - busy[x], for every shift at once
    busy = {p: np.concatenate([[0], np.cumsum(np.tile(taken[p], 2), dtype=np.int64)])
            for p, _, _ in crops}
    for extra in range(0, U, max(1, W)):          # block stride rows + extra
        stride = rows + extra
        starts = stride * np.arange(blocks)
        if any(np.bincount((np.arange(n)[None, :] + at + starts[:, None]).ravel() % U,
                           minlength=U).max() > 1 for _, at, n in crops):
            continue                                  # a crop's own blocks collide
        free = np.ones(U, dtype=bool)
        for p, at, n in crops:
            for start in starts:
                x = (base + shifts + at + start) % U
                free &= busy[p][x + n] == busy[p][x]
        if free.any():
            shift = int(np.argmax(free))
            for p, at, n in crops:
                offsets = (np.arange(n)[None, :] + at + starts[:, None]).ravel()
                taken[p][(base + shift + offsets) % U] = True
            return shift, stride
    raise CompileError(f"layer {jobs[k - 1].name!r}: its fused crops find no UBUF rows "
                       f"apart from the other layers'; use the crop_fetch strategy for "
                       f"it or another layer")


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


def estimate_chain(cfg: ChipConfig, jobs: list[Job], passes: list[list[chain.Step]],
             modes: tuple[str, ...], bufs: _Buffers, half_rows: int) -> tuple[int, int]:
    """``(cycles, dram_bytes)`` a way of running the chain should take: the rows the
    array streams (every MATMUL, halo recomputation included) against the words the
    DMA moves (the input bands; each layer's weights once (``persistent``), once per
    pass it computes in (``pass``) or once per chunk and output block (``stream``);
    the parameters, the output), the run bounded by the larger, plus the loads of
    ``pass`` weights whose banks the layer before still uses (they cannot overlap
    it)."""
    R = cfg.rows
    streamed = moved = stalls = 0
    for k, j in enumerate(jobs):
        Wo = j.out_shape[2]
        per = max(1, half_rows // Wo) if k < len(jobs) - 1 else bufs.stage_half // Wo
        steps = sum(len(s) for s in j.steps)
        computing = [p for p in passes if p[k].compute is not None]
        chunks = sum(len(chain.row_chunks(p[k].compute, per)) for p in computing)
        streamed += sum(p[k].computed * Wo for p in passes) * steps
        loads = {"persistent": 1, "pass": len(computing), "stream": chunks}[modes[k]]
        moved += j.weights.shape[0] * cfg.weight_rows * loads
        if modes[k] == "pass" and _waits(bufs, f"{j.name}.weights", (k - 1) % len(jobs)):
            stalls += j.weights.shape[0] * cfg.weight_rows * loads
        moved += len(j.steps) * PARAM_ROWS * cfg.acc_row_words
    src = jobs[0].sources[0]
    moved += sum(p[0].read for p in passes) * src.shape[2] * src.blocks(R)
    out = jobs[-1].out_shape
    moved += out[1] * out[2] * len(jobs[-1].steps)
    return max(streamed, moved) + stalls, moved * R


def _waits(bufs: _Buffers, key: str, step: int) -> bool:
    """Whether region `key` shares rows with another live in layer `step` (the layer
    before its own): its loads then wait for that layer instead of overlapping it."""
    me = next(r for r in bufs.regions if r.key == key)
    return any(r is not me and r.first <= step <= r.last and r.lo < me.hi and me.lo < r.hi
               for r in bufs.regions)


def _weight_modes(cfg: ChipConfig, jobs: list[Job], passes, fixed, half_rows: int,
                  fused: tuple[bool, ...], share: bool):
    """The weight placement per layer for these passes: the user's (`fixed`), else
    all ``persistent`` if that fits, else the cheapest (:func:`estimate_chain`) of the same
    placement for every layer (``pass``, ``stream``) and of :func:`_downgrade`'s mix
    (a layer at a time down :data:`WEIGHTS`: less CBUF, more DRAM traffic).
    ``(modes, buffers)``; CompileError (the last shortfall) when nothing fits."""
    L = len(jobs)

    def fit(modes):
        return _layout(cfg, jobs, passes, modes, half_rows, fused, share)

    if fixed is not None:
        return fixed, fit(fixed)
    modes = ("persistent",) * L
    error = None
    try:
        return modes, fit(modes)
    except CompileError as e:
        error = e.with_traceback(None)
    found = []                  # the same placement for every layer, where it fits
    for kind in WEIGHTS[1:]:
        try:
            bufs = fit((kind,) * L)
        except CompileError:
            continue
        found.append((estimate_chain(cfg, jobs, passes, (kind,) * L, bufs, half_rows),
                      (kind,) * L, bufs))
    try:
        found.append(_downgrade(cfg, jobs, passes, modes, fit, half_rows, error))
    except CompileError:
        if not found:
            raise
    _, modes, bufs = min(found, key=lambda f: f[0])
    return modes, bufs


def _downgrade(cfg: ChipConfig, jobs: list[Job], passes, modes, fit, half_rows: int,
               error: CompileError):
    """From `modes`, a layer at a time down :data:`WEIGHTS`: the first change that
    fits and costs least, or if none fits the one freeing the most rows, until one
    fits. ``(cost, modes, buffers)``; `error` (or a later shortfall) if none does."""
    L = len(jobs)
    while True:
        trials = []
        for k in range(L):
            step = WEIGHTS.index(modes[k]) + 1
            if step < len(WEIGHTS):
                trials.append(modes[:k] + (WEIGHTS[step],) + modes[k + 1:])
        if not trials:
            raise error
        fitting = []
        for t in trials:
            try:
                bufs = fit(t)
            except CompileError as e:
                error = e.with_traceback(None)
                continue
            fitting.append((estimate_chain(cfg, jobs, passes, t, bufs, half_rows), t, bufs))
        if fitting:
            return min(fitting, key=lambda f: f[0])

        def freed(t):           # rows the change takes off the layer's busiest moment
            k = next(i for i in range(L) if t[i] != modes[i])
            return jobs[k].weights.shape[0] if t[k] == "pass" else \
                jobs[k].weights.shape[0] - MAP_RING_BLOCKS
        modes = max(trials, key=freed)


def choose_chain(cfg: ChipConfig, jobs: list[Job], want: ChainChoice, half_rows: int,
           cost=None, pass_sizes: list[int] | None = None
           ) -> tuple[ChainChoice, list[list[chain.Step]], _Buffers]:
    """The cost model: of the pass sizes, halo keeps and weight placements per layer
    (:func:`_weight_modes`) that fit the CBUF, the UBUF and the halo rule, the one
    :func:`estimate_chain` says runs in the fewest cycles, then moves the fewest DRAM
    bytes, then takes the fewest passes. A user's choice in `want` stands. `cost`
    (``(jobs, passes, modes, bufs) -> key``, the least taken; `modes` one weight
    placement per layer) and `pass_sizes` (the outputs per pass to try) replace the
    estimate and every pass size (a network's rule, :mod:`.net_chains`)."""
    H = jobs[0].sources[0].shape[1]
    Ho = jobs[-1].out_shape[1]
    ubuf = want.uses_ubuf
    if ubuf and not cfg.ubuf_rows:
        raise CompileError(f"chip {cfg.name!r} has no UBUF (ubuf_rows = 0): use the "
                           f"baseline strategy")
    counts = [want.outputs_per_pass] if want.outputs_per_pass else \
        (pass_sizes or list(range(Ho, 0, -1)))
    L = len(jobs)
    fixed = want.modes(L)
    if isinstance(want.strategy, tuple):
        keeps = [want._kept(L)]
    elif want.keep is not None:
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
            passes = chain.plan_passes(H, _axes(jobs), per, ubuf=keep)
            try:
                _check_fetches(jobs, passes)
            except CompileError as e:
                halo_error = halo_error or e.with_traceback(None)
                continue
            tries = [fixed] if cost is None or fixed is not None else \
                [(kind,) * L for kind in WEIGHTS]   # a network's rule weighs each
            for modes in tries:
                try:
                    modes, bufs = _weight_modes(cfg, jobs, passes, modes, half_rows,
                                                want.fused(keep), want.share)
                except CompileError as e:
                    fit_error = (per, e.with_traceback(None))
                    continue
                key = (*estimate_chain(cfg, jobs, passes, modes, bufs, half_rows),
                       len(passes)) if cost is None else cost(jobs, passes, modes, bufs)
                if best is None or key < best[0]:
                    weights = modes[0] if len(set(modes)) == 1 else modes
                    best = (key, ChainChoice(want.strategy, per, weights, keep,
                                             want.share), passes, bufs)
    if best is None:
        if fit_error is None:
            raise halo_error
        per, error = fit_error
        if want.outputs_per_pass:
            raise error
        note = ("one output row per pass" if per == 1 else
                f"{per} output rows per pass, the fewest whose halo this strategy keeps")
        raise CompileError(f"{error} (even with {note})")
    return best[1:]


@dataclass
class Segment:
    """A chain planned to run in passes: its layers' jobs, what the cost model chose
    (or the user), the passes, the CBUF and UBUF layout, and the ACC split (two
    halves of ``half_rows``, then every layer's epilogue parameters)."""
    jobs: list[Job]
    choice: ChainChoice
    passes: list
    bufs: _Buffers
    half_rows: int
    param_rows: int


def plan_segment(cfg: ChipConfig, jobs: list[Job], want: ChainChoice = ChainChoice(),
                 reserve: int = 0, cost=None, pass_sizes: list[int] | None = None
                 ) -> Segment:
    """Plan convolutions `jobs` (each reading the one before) as a chain: the checks
    and the cost model (:func:`choose_chain`); a CompileError naming the layer otherwise.
    The top `reserve` ACC rows are left alone (in a network: the epilogue slots of
    the layers run on their own, which the next one's may load early); `cost` and
    `pass_sizes` as :func:`choose_chain` takes them."""
    for j in jobs:
        check_window(j)
        check_chain_channels(cfg, j.name, j.out_shape[3])
    # ACC: two halves, then every layer's epilogue parameters, loaded once
    param_rows = PARAM_ROWS * sum(len(j.steps) for j in jobs)
    half_rows = (cfg.acc_depth - reserve - param_rows) // 2
    for j in jobs:
        if j.out_shape[2] > half_rows:
            raise CompileError(f"layer {j.name!r}: one output row ({j.out_shape[2]} "
                               f"pixels) is more than an accumulator half "
                               f"({half_rows} rows)")
    choice, passes, bufs = choose_chain(cfg, jobs, want, half_rows, cost, pass_sizes)
    return Segment(jobs, choice, passes, bufs, half_rows, param_rows)


def emit_segment(cfg: ChipConfig, emit: TileLoop, seg: Segment, x_at: int, w_at: list[int],
                 p_at: list[int], out_at: int) -> list[Block]:
    """The blocks of a planned chain, emitted with `emit` (its counters go on; its
    layout is the chain's while it runs): the input from `x_at` in DRAM, each layer's
    weights and epilogue parameters from `w_at`, `p_at`, the last output to `out_at`."""
    bufs, half_rows = seg.bufs, seg.half_rows
    saved = emit.lay
    emit.lay = Layout(ring=bufs.ring or 0, staging=bufs.staging, top=cfg.cbuf_depth,
                      halves=0, half_rows=half_rows, slots=2 * half_rows)
    slots, at = [], emit.lay.slots             # per layer: its first parameter row
    for j in seg.jobs:
        slots.append(at)
        at += PARAM_ROWS * len(j.steps)
    try:
        return _emit_passes(cfg, emit, seg.jobs, seg.passes, bufs, x_at, w_at, p_at,
                            slots, out_at, seg.choice.fused(seg.choice.keep))
    finally:
        emit.lay = saved
        emit.bank_holds = [None, None]         # the chain's WLOADs filled the banks


def segment_regions(cfg: ChipConfig, seg: Segment, first: int, last: int
                    ) -> list[Region]:
    """The chain's CBUF, UBUF and ACC regions in the steps of its layers (the chain's
    layers are steps `first` .. `last`): a CBUF region lives in the steps of the
    layers of a pass it lives in (:func:`_layout`), the ACC's throughout."""
    at = [j.index - seg.jobs[0].index + first for j in seg.jobs]
    out = [Region("cbuf", r.key, r.lo, r.size, at[r.first], at[r.last], r.what)
           for r in seg.bufs.regions]
    return out + [
        Region("acc", "accumulator halves", 0, 2 * seg.half_rows, first, last,
               "accumulator halves"),
        Region("acc", "epilogue parameters", 2 * seg.half_rows, seg.param_rows, first,
               last, "epilogue parameters")]


def lower_chain(cfg: ChipConfig, graph: Graph, want: ChainChoice = ChainChoice(),
                mapping: str | None = None, dram_base: int = 0) -> Lowered:
    """Lower a chain of convolutions (:func:`chain_layers`) to run in passes, each
    layer as its `mapping` mode chooses (docs/matching.md); its DRAM from word
    `dram_base`."""
    nodes = chain_layers(graph)
    check_channels(cfg, graph)
    jobs = []
    for i, node in enumerate(nodes):
        shape = as_map(graph.tensor(node.inputs[0]).shape)
        src = Source(node.inputs[0], shape, 1)
        job = conv_job(cfg, graph, i, node, src,
                       choose_mapping(cfg, graph, node, src, mapping))
        check_window(job)
        jobs.append(job)
    seg = plan_segment(cfg, jobs, want)

    # DRAM: the input, every layer's weights and epilogue parameters, the output.
    steps = len(nodes)
    dram = DramLayout(cfg, steps, dram_base)
    place = dram.place

    x_name = graph.inputs[0]
    x = np.asarray(graph.data[x_name])
    x_words = pack_map(cfg, x.reshape(as_map(x.shape)))
    x_at = place(f"tensor {x_name}", x_words, f"input {x_name!r}")
    params, w_at, p_at = {}, [], []
    for j in jobs:
        w = place(f"{j.name}.weights", stored_weights(cfg, j.weights),
                  f"weights of layer {j.name!r}")
        rows = acc_param_rows(cfg, j.post_rows)
        p = place(f"{j.name}.post", rows, f"epilogue parameters of layer {j.name!r}")
        params[(j.name, "weights")] = (w, j.weights.shape[0] * cfg.weight_rows)
        params[(j.name, "post")] = (p, rows.shape[0])
        w_at.append(w)
        p_at.append(p)
    out_name = graph.outputs[0]
    out_n = out_words(cfg, graph.tensor(out_name))
    out_at = place(f"tensor {out_name}", out_n, f"output {out_name!r}")
    image = dram.image()

    emit = TileLoop(Emitter(cfg, cfg.tile_rows, cfg.tile_cols), None)
    blocks = emit_segment(cfg, emit, seg, x_at, w_at, p_at, out_at)
    chip_regions = segment_regions(cfg, seg, 0, steps - 1)
    dmap = DramMap(MappingProxyType({x_name: (x_at, x_words.shape[0])}),
                   MappingProxyType(params), MappingProxyType({out_name: (out_at, out_n)}),
                   dram.cursor)
    plan = MemoryPlan(cfg, graph, MappingProxyType({}), tuple(chip_regions + dram.regions),
                      image, dmap)
    check_plan(plan)
    plan = zero_fill(cfg, blocks, emit.em, plan)
    return ChainLowered(pipeline(cfg, blocks), loop_order(blocks), plan, copies={},
                        jobs={j.name: j for j in jobs}, choice=seg.choice,
                        passes=seg.passes, banks=seg.bufs.banks(cfg, len(jobs)))


@dataclass
class ChainLowered(Lowered):
    """A lowered chain, with what the cost model chose, the passes it runs and, per
    layer, how many CBUF banks its live regions take (``weights``, ``features``,
    ``ubuf``, ``free``: :meth:`_Buffers.banks`)."""
    choice: ChainChoice | None = None
    passes: list = field(default_factory=list)
    banks: list = field(default_factory=list)

    def bank_listing(self) -> str:
        """One line per layer: its weight placement and bank split."""
        modes = self.choice.modes(len(self.banks)) or ()
        names = list(self.jobs)
        return "\n".join(
            f"{names[k]}: weights {modes[k]}; banks: weights {b['weights']}, features "
            f"{b['features']}, ubuf {b['ubuf']}, free {b['free']}"
            for k, b in enumerate(self.banks))


def _split(a: int, b: int, crop: tuple[int, int] | None) -> list[tuple[int, int, int]]:
    """Rows ``[a, b)`` as ``(first, end, crop)`` runs: those inside `crop` are
    written with the fused crop."""
    if crop is None:
        return [(a, b, 0)]
    cuts = sorted({a, b, min(max(crop[0], a), b), min(max(crop[1], a), b)})
    return [(r0, r1, int(crop[0] <= r0 and r1 <= crop[1]))
            for r0, r1 in zip(cuts, cuts[1:]) if r0 < r1]


def _emit_passes(cfg, emit: TileLoop, jobs: list[Job], passes, bufs: _Buffers, x_at: int,
                 w_at: list[int], p_at: list[int], slots: list[int], out_at: int,
                 fused: tuple[bool, ...]) -> list[Block]:
    R, WR, arw = cfg.rows, cfg.weight_rows, cfg.acc_row_words
    em, lay = emit.em, emit.lay
    blocks: list[Block] = []
    last = len(jobs) - 1

    def fetches(p: int, steps: list, layers) -> list:
        out = []
        for k, s in enumerate(steps):
            if s.fetch is None or k not in layers:
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
            if bufs.weights[k] is not None and (p == 0 or bufs.modes[k] == "pass"):
                # persistent: loaded once; pass: at the layer's turn in every pass
                total = job.weights.shape[0] * cfg.weight_rows
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
            # the halo rows of layer k + 1's input (and, in the pass's first layer,
            # of the layers before it) as this layer starts: it crops into the same
            # UBUF area, after it computes, what they fetch now, and the band they
            # land in lives from this layer on (_layout)
            if k < last and steps[k + 1].fetch is not None and \
                    steps[k + 1].compute is None:
                raise InternalError(f"layer {jobs[k + 1].name!r} fetches halo "
                                   f"rows in pass {p} but computes nothing")
            # a fused crop's fetch at the pass's start: the fused crops of this pass
            # may land on rows the pass before's crops of later layers took
            head += fetches(p, steps, [n for n in range(len(jobs))
                                       if n and fused[n - 1]]) if k == first else []
            head += fetches(p, steps, [n for n in range(k + 1 if k > first else 0, k + 2)
                                       if not (n and fused[n - 1])])
            if k < last:
                nxt = steps[k + 1]
                if nxt.reads is None or not (nxt.reads[0] <= s.compute[0]
                                              and s.compute[1] <= nxt.reads[1]):
                    raise CompileError(f"layer {job.name!r}: pass {p} computes rows "
                                       f"{s.compute} the next layer does not read")
            per = max(1, lay.half_rows // Wo)
            if k == last:
                per = bufs.stage_half // Wo
            chunks = chain.row_chunks(s.compute, per)
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
                            ring = bufs.ring + (em.steps % MAP_RING_BLOCKS) * WR
                            pre.append(emit.op(Opcode.DMA, i, kind=DmaKind.LOAD_CBUF,
                                               dram_addr=w_at[k] + st.block * WR,
                                               dram_stride=1, buf_addr=ring, rows=WR))
                            w_addr = ring
                        else:
                            w_addr = bufs.weights[k] + st.block * WR
                        em.steps += 1
                        pre.append(emit.op(Opcode.WLOAD, i, w_addr=w_addr, bank=bank))
                        dh, dw = st.taps[0]
                        act = (bufs.inputs[k] + st.cb * bufs.stride[k]
                               + _band_row(passes, k, p, clo) * W)
                        mm = emit.op(Opcode.MATMUL, i, act_addr=act, rows=rows,
                                     acc_addr=acc_at, accumulate=int(j > 0), max=0,
                                     bank=bank, conv=1, dh=dh, dw=dw, taps=0, in_w=W,
                                     in_h=chi - clo)
                        blk.steps.append(Step(pre, mm))
                    v = dict(job.vrun)
                    if k < last:
                        dst = (bufs.inputs[k + 1] + nb * bufs.stride[k + 1]
                               + _band_row(passes, k + 1, p, a) * Wo)
                        crops = s.crop if fused[k] else None
                        blk.epilogue = [
                            emit.op(Opcode.VRUN, i, src=acc_at + (r0 - a) * Wo,
                                    rows=(r1 - r0) * Wo, to_acc=0, dst=dst + (r0 - a) * Wo,
                                    bias_addr=slot, crop=crop, **v)
                            for r0, r1, crop in _split(a, b, crops)]
                        if ci == len(chunks) - 1 and s.crop is not None and not fused[k]:
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
