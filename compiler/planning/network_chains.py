"""Chains inside whole networks (docs/cnn.md, "Chains in networks").

A *run* is a stretch of consecutive convolutions in graph order where each one but
the first reads only the one before, whose output no other layer reads and is no
graph output (a ResNet bottleneck's 1x1, 3x3, 1x1: the shortcut reads the block's
input, the add the last output). A run may be cut into *segments*: each either one
layer lowered on its own (layer by layer, its :class:`~.map_tiling.Tiling`) or two or more
layers lowered as a chain in passes (:mod:`systolica.compiler.lowering.chain`),
reading its input from
DRAM and writing only its last output there.

The cost rule (:func:`choose_segments`), per run: of the ways to cut it into
segments, each chain with a strategy allowed by the network's option, take the one
whose estimate moves the fewest DRAM bytes among those estimated to run in no more
cycles than the whole run layer by layer (each layer with its own tiling); on equal
bytes the fewer cycles, then the fewer chains. Each chain's pass size, weight
placement and kept halos are chosen the same way (:func:`chain_cost`, the fewest
bytes in no more cycles than its layers on their own, else the fewest bytes). A
user's cut (`segments`, by the name of a segment's first layer) stands for its run;
``segments="all"`` drops the cycle bound.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace

from systolica.arch import isa, timing
from systolica.arch.config import ChipConfig
from systolica.arch.instructions import PARAM_ROWS
from systolica.arch.isa import Opcode
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.graph import Graph
from systolica.compiler.lowering.chain import (
    STRATEGIES,
    ChainChoice,
    Segment,
    estimate_chain,
    plan_segment,
)
from systolica.compiler.lowering.registry import rule_for
from systolica.compiler.planning.chain_passes import row_chunks
from systolica.compiler.planning.map_tiling import bank_turn, estimate_tiling

#: The network-level option: every layer on its own, or chains with one strategy.
NETWORK_STRATEGIES = ("layer_by_layer",) + STRATEGIES


@dataclass(frozen=True)
class Chained:
    """A chained segment in a compiled network: its layers' names and what runs."""
    layers: tuple[str, ...]
    choice: ChainChoice
    passes: list
    estimate: tuple[int, int]          # (cycles, DRAM bytes) by the cost model
    layer_by_layer: tuple[int, int]    # the same layers on their own, by estimate


def chain_runs(graph: Graph, jobs: list) -> list[list[int]]:
    """The runs of chainable convolutions (graph node indices, two or more each)."""
    nodes = graph.nodes
    runs: list[list[int]] = []
    current: list[int] = []

    def chainable(i: int) -> bool:
        job = jobs[i]
        return (rule_for(nodes[i]).chain_refusal(nodes[i]) is None
                and job is not None
                and len(job.sources) == 1 and job.sources[0].copies == 1
                and job.sources[0].gather is None and job.out_shape[0] == 1)

    for i, node in enumerate(nodes):
        if current:
            prev = nodes[current[-1]]
            t = prev.outputs[0]
            linked = (chainable(i) and list(node.inputs) == [t]
                      and [c.name for c in graph.consumers(t)] == [node.name]
                      and t not in graph.outputs)
            if linked:
                current.append(i)
                continue
            if len(current) > 1:
                runs.append(current)
            current = []
        if chainable(i):
            current = [i]
    if len(current) > 1:
        runs.append(current)
    return runs


def _cuts(n: int) -> list[list[tuple[int, int]]]:
    """Every way to cut ``n`` layers into consecutive pieces ``[a, b)``."""
    out = []
    for mask in itertools.product((False, True), repeat=n - 1):
        pieces, a = [], 0
        for k, cut in enumerate(mask, start=1):
            if cut:
                pieces.append((a, k))
                a = k
        pieces.append((a, n))
        out.append(pieces)
    return out


def segment_estimate(cfg: ChipConfig, seg: Segment) -> tuple[int, int]:
    """``(cycles, dram_bytes)`` of a planned chain (:func:`chain_cost`)."""
    return chain_cost(cfg, seg.jobs, seg.passes, seg.choice.weights, seg.bufs,
                      seg.half_rows)


def chain_cost(cfg: ChipConfig, jobs: list, passes: list, weights, bufs,
               half_rows: int) -> tuple[int, int]:
    """``(cycles, dram_bytes)`` of a chain, on the scale of :func:`~.map_tiling.estimate_tiling`:
    :func:`~systolica.compiler.lowering.chain.estimate_chain`'s bytes; for cycles the
    rows the array streams, a
    step taking at least half of ``rows + turn`` as layer by layer, against the words
    the DMA moves, plus what no overlap hides: the first pass's first input block and
    each layer's epilogue parameters and, kept in the CBUF, weights (each loaded
    whole before the layer's first step, behind the layer before in the in-order
    DMA). `weights`: one placement for every layer, or a tuple of one per layer."""
    R = cfg.rows
    modes = weights if isinstance(weights, tuple) else (weights,) * len(jobs)
    turn = bank_turn(cfg)
    drain = _drain(cfg)
    _, moved_bytes = estimate_chain(cfg, jobs, passes, modes, bufs, half_rows)
    streamed = 0
    last = len(jobs) - 1
    for k, j in enumerate(jobs):
        Wo = j.out_shape[2]
        per = max(1, half_rows // Wo) if k < last else bufs.stage_half // Wo
        steps = sum(len(s) for s in j.steps)
        for p in passes:
            if p[k].compute is None:
                continue
            chunks = row_chunks(p[k].compute, per)
            for a, b in chunks:
                rows = (b - a) * Wo
                streamed += steps * max(rows, (rows + turn) // 2)
            # a layer's first step in a pass waits for the rows the layer before
            # wrote: the array drains at every layer of every pass
            streamed += drain
    src = jobs[0].sources[0]
    exposed = passes[0][0].read * src.shape[2]
    for k, j in enumerate(jobs):    # loaded whole before its first step in pass 0
        exposed += len(j.steps) * PARAM_ROWS * cfg.acc_row_words
        if modes[k] != "stream":
            exposed += j.weights.shape[0] * cfg.weight_rows
    return max(streamed, moved_bytes // R) + exposed, moved_bytes


def _drain(cfg: ChipConfig) -> int:
    """Cycles from a MATMUL's last row issued to its results in the ACC (the array's
    depth): about what a layer waits, at the start of its rows of a pass, for the
    layer before's last rows."""
    mm = isa.Instr(Opcode.MATMUL, 0, dict(act_addr=0, rows=1, acc_addr=0, accumulate=0,
                                          max=0, bank=0, conv=0, dh=0, dw=0, taps=0,
                                          in_w=1, in_h=1))
    return timing.done(cfg, mm) - timing.occupancy(cfg, mm)


def pass_sizes(rows: int) -> list[int]:
    """Outputs per pass worth trying for `rows` output rows: each count of passes
    once (its smallest band), the fewest passes first."""
    return sorted({-(-rows // n) for n in range(1, rows + 1)}, reverse=True)


def _signature(jobs: list, want: ChainChoice) -> tuple:
    """What a chain's planning depends on, weights' values aside."""
    return (want, tuple((j.kernel, j.stride, j.pads, j.dilation, j.sources[0].shape,
                         j.out_shape, j.weights.shape[0], tuple(len(s) for s in j.steps))
                        for j in jobs))


def _parse(graph: Graph, runs: list[list[int]], segments) -> dict[int, object]:
    """The user's cut: node index -> 1 (on its own), or (layers, ChainChoice | None)."""
    if segments is None:
        return {}
    if not isinstance(segments, Mapping):
        raise CompileError(f"segments must be 'all' or map a layer name to a number of "
                           f"layers, a ChainChoice or (layers, ChainChoice), not "
                           f"{segments!r}")
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    in_run = {i: run for run in runs for i in run}
    out = {}
    for name, value in segments.items():
        if name not in index:
            raise CompileError(f"segments names layer {name!r}, which the network does "
                               f"not have")
        i = index[name]
        if isinstance(value, ChainChoice):
            value = (None, value)
        elif isinstance(value, int) and not isinstance(value, bool):
            value = (value, None)
        if not (isinstance(value, tuple) and len(value) == 2
                and (value[0] is None or isinstance(value[0], int))
                and (value[1] is None or isinstance(value[1], ChainChoice))):
            raise CompileError(f"segments[{name!r}] must be a number of layers, a "
                               f"ChainChoice or (layers, ChainChoice), not {value!r}")
        run = in_run.get(i)
        n = value[0] if value[0] is not None else (len(run) - run.index(i) if run else 2)
        if n == 1:
            out[i] = 1
            continue
        if n < 1:
            raise CompileError(f"segments[{name!r}]: a segment has at least one layer, "
                               f"not {n}")
        if run is None or run.index(i) + n > len(run):
            have = 0 if run is None else len(run) - run.index(i)
            raise CompileError(
                f"segments[{name!r}]: cannot chain {n} layers from {name!r}: "
                f"{max(have, 1)} chainable in a row from there (a chain's layers are "
                f"convolutions over all input channels, not depthwise ones, each reading "
                f"only the one before, whose output nothing else reads)")
        out[i] = (n, value[1])
    return out


def choose_segments(cfg: ChipConfig, lay, graph: Graph, jobs: list, tilings: dict,
                    strategy: str | None, segments=None,
                    fixed: frozenset[str] = frozenset()
                    ) -> dict[int, tuple[Segment, Chained]]:
    """The chained segments, by the first layer's node index (:mod:`.net_chains`'s
    cost rule). `strategy`: one of :data:`NETWORK_STRATEGIES`, or None (the cost
    model picks among the three chain strategies per segment); `segments`: the
    user's cut by first layer name, or ``"all"`` (the cost rule without its cycle
    bound: the fewest bytes wherever a chain fits); `fixed`: layers whose tiling the
    user gave (never chained by the cost model)."""
    if strategy is not None and strategy not in NETWORK_STRATEGIES:
        raise CompileError(f"chain strategy {strategy!r} for a network is not one of "
                           f"{', '.join(NETWORK_STRATEGIES)}")
    runs = chain_runs(graph, jobs)
    every = segments == "all"
    user = {} if every else _parse(graph, runs, segments)
    if strategy == "layer_by_layer" and any(v != 1 for v in user.values()):
        raise CompileError("segments asks for a chain but the network's chain strategy "
                           "is layer_by_layer")
    if strategy == "layer_by_layer" or not runs:
        return {}
    # on a tie the fused crop first: it crops without a COPY of its own
    kinds = [strategy] if strategy is not None else ["fused_crop", "crop_fetch", "baseline"]
    if not cfg.ubuf_rows:
        kinds = [k for k in kinds if k == "baseline"]
    alone = {}
    for run in runs:
        for i in run:
            alone[i] = estimate_tiling(cfg, lay, jobs[i], tilings[jobs[i].name])
    plans: dict[tuple[int, int, str | ChainChoice], tuple | None] = {}

    def chain_plan(run, a, b, want: ChainChoice):
        """The piece's chain: the user's choice, or the one moving the fewest bytes
        in no more cycles than its layers on their own, by estimate (None if none)."""
        key = (run[a], b - a, want)
        if key in plans:
            return plans[key]
        piece = [jobs[i] for i in run[a:b]]
        budget = float("inf") if every else sum(alone[i][0] for i in run[a:b])
        sig = _signature(piece, want)
        known = same.get(sig, False)
        if known is None:
            plans[key] = None
            return None

        def cost(js, passes, weights, bufs):
            cycles, moved = chain_cost(cfg, js, passes, weights, bufs,
                                       (cfg.acc_depth - reserve - PARAM_ROWS * sum(
                                           len(j.steps) for j in js)) // 2)
            return (cycles > budget, moved, cycles, len(passes))

        try:
            if known:
                seg = plan_segment(cfg, piece, known, reserve=reserve)
            else:
                def plan(w):
                    return plan_segment(cfg, piece, w, reserve=reserve, cost=cost,
                                        pass_sizes=pass_sizes(piece[-1].out_shape[1]))
                try:
                    seg = plan(want)
                except CompileError:
                    if want.share:
                        raise
                    # banks shared in time (a later user waits for the earlier one,
                    # which chain_cost does not count): only where apart nothing fits
                    seg = plan(replace(want, share=True))
            plans[key] = (seg, segment_estimate(cfg, seg))
            same[sig] = seg.choice
        except CompileError:
            if want in user_wants:
                raise
            plans[key] = same[sig] = None
        return plans[key]

    user_wants: set = set()
    same: dict[tuple, ChainChoice | None] = {}     # a piece's shape -> its choice
    reserve = 2 * PARAM_ROWS
    out: dict[int, tuple[Segment, Chained]] = {}
    for run in runs:
        named = [i for i in run if i in user]
        if named:
            # the user's cut: named starts; what no named chain covers runs on its own
            pieces, k = [], 0
            while k < len(run):
                v = user.get(run[k], 1)
                n = 1 if v == 1 else v[0]
                want = None if v == 1 else (v[1] or ChainChoice(
                    strategy or "crop_fetch"))
                pieces.append((k, k + n, want))
                k += n
            for a, b, want in pieces:
                if want is None:
                    continue
                user_wants.add(want)
                seg, est = chain_plan(run, a, b, want)
                out[run[a]] = _chained(seg, est, [alone[i] for i in run[a:b]])
            continue
        if any(jobs[i].name in fixed for i in run):
            continue
        whole = (sum(alone[i][0] for i in run), sum(alone[i][1] for i in run))
        bound = None if every else whole[0]
        best = (whole[1], whole[0], 0, {})
        for cut in _cuts(len(run)):
            chains = [(a, b) for a, b in cut if b - a > 1]
            if not chains:
                continue
            options = [[(a, b, kind) for kind in kinds] for a, b in chains]
            for picks in itertools.product(*options):
                cycles = sum(alone[run[a]][0] for a, b in cut if b - a == 1)
                moved = sum(alone[run[a]][1] for a, b in cut if b - a == 1)
                got = {}
                for a, b, kind in picks:
                    # see chain_plan
                    planned = chain_plan(run, a, b, ChainChoice(kind, share=False))
                    if planned is None:
                        break
                    got[a] = (b, planned)
                    cycles += planned[1][0]
                    moved += planned[1][1]
                else:
                    if bound is None or cycles <= bound:
                        cost = (moved, cycles, len(got), got)
                        if cost[:3] < best[:3]:
                            best = cost
        for a, (b, (seg, est)) in best[3].items():
            out[run[a]] = _chained(seg, est, [alone[i] for i in run[a:b]])
    return out


def _chained(seg: Segment, est: tuple[int, int], alone: list[tuple[int, int]]
             ) -> tuple[Segment, Chained]:
    return seg, Chained(tuple(j.name for j in seg.jobs), seg.choice, seg.passes, est,
                        (sum(a[0] for a in alone), sum(a[1] for a in alone)))


def ubuf_sizes(cfg: ChipConfig) -> list[int]:
    """The UBUF sizes (rows) the cost rule weighs for a program: none, and whole
    banks by powers of two up to a quarter of the CBUF (the chip's own when its UBUF
    has an SRAM of its own: it takes no CBUF rows)."""
    if cfg.ubuf_own_sram:
        return [cfg.ubuf_rows]
    sizes, rows = [0], cfg.cbuf_bank_rows
    while rows <= cfg.cbuf_depth // 4:
        if rows & (rows - 1) == 0:
            sizes.append(rows)
        rows *= 2
    return sizes if cfg.ubuf_rows in sizes else sorted(sizes + [cfg.ubuf_rows])


def choose_ubuf(cfg: ChipConfig, lay, graph: Graph, jobs: list, tilings: dict,
                strategy: str | None, segments=None,
                fixed: frozenset[str] = frozenset()
                ) -> tuple[ChipConfig, dict[int, tuple[Segment, Chained]]]:
    """The UBUF for a network's program and its chained segments: for each size of
    :func:`ubuf_sizes` (at the top of the CBUF; the chip's own place for its own
    size), the segments :func:`choose_segments` takes; of those, the ones whose
    estimate moves the fewest DRAM bytes, then takes the fewest cycles, then keeps the
    chip's UBUF, then the smaller. The layers run on their own never use the UBUF (a
    tile re-reads its halo), so only the chains weigh. The chip with its UBUF
    registers so set (``cfg.at_ubuf``), and the segments."""
    best = None
    for rows in ubuf_sizes(cfg):
        base = cfg.ubuf_base if rows == cfg.ubuf_rows else (
            cfg.cbuf_depth - rows if rows else 0)
        here = cfg.at_ubuf(base, rows)
        try:
            chained = choose_segments(here, lay, graph, jobs, tilings, strategy,
                                      segments, fixed)
        except CompileError:
            if rows == cfg.ubuf_rows:       # the user's cut on the chip's own UBUF
                raise
            continue
        moved = sum(c.estimate[1] - c.layer_by_layer[1] for _, c in chained.values())
        cycles = sum(c.estimate[0] - c.layer_by_layer[0] for _, c in chained.values())
        key = (moved, cycles, rows != cfg.ubuf_rows, rows)
        if best is None or key < best[0]:
            best = (key, here, chained)
    return best[1], best[2]
