"""Lowering of convolutional networks (docs/cnn.md). Entry point: :func:`lower_cnn`.

Every feature map lives in DRAM in the channel-block layout; each layer streams its
input(s) through the CBUF in tiles of output rows and writes its output back:

* a tile loads the input rows its output rows need (``tiling.input_rows``), every
  channel block, into one of two tile buffers (the next tile's load overlaps this
  tile's compute), or into one;
* per output block (``R`` output channels) and per weight block (a kernel tap, or
  ``R // C`` taps packed into one block for a replicated input, times a channel
  block) one window-walking MATMUL accumulates into an accumulator half;
* the vector unit requantises the half into the output staging, and a DMA stores it.

Pooling and the residual add are the same loop with fixed weights: an identity block
(max pool with max-accumulation, average pool) or a diagonal of the add's
multiplier. A dense layer in such a network is a 1x1 convolution over its ``M`` rows.

Each layer has a :class:`Tiling`, the cost model's (:func:`choose`) unless the user
gives one: its weights streamed through the ring (reloaded every tile) or kept in the
CBUF (loaded once), and two tile buffers or one of twice the rows (each channel block
of the next tile loaded behind this tile's last read of it: fewer tiles).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np

from ..arch.config import ChipConfig
from ..arch import isa, timing
from ..arch.isa import DmaKind, Opcode
from . import layout
from .errors import CompileError
from .graph import Graph
from .ir import MicroOp
from .ops import (Add, AvgPool2d, Concat, Conv2d, Dense, Flatten, GlobalAvgPool, MaxPool2d,
                  Transpose, average_params)
from .pipeline import Block, Step, loop_order, pipeline
from .plan import DramMap, MemoryPlan, Region, check_plan
from .rules import TransposeRule, Where, Where32, gemm_routing, int32_words, transpose_op
from .ir import make, moved
from .lowered import Lowered

CNN_OPS = (Conv2d, MaxPool2d, AvgPool2d, GlobalAvgPool, Add, Flatten)
PARAM_ROWS = 4            # VRUN params: bias, multiplier, shift, clamp
WEIGHT_GROUP = 8          # weight blocks one DMA loads (consecutive in DRAM)
WEIGHT_SLOTS = 2 * WEIGHT_GROUP   # the CBUF weight ring: a group loads while one is used


def is_cnn(graph: Graph) -> bool:
    """Whether `graph` takes the streaming lowering (it holds a feature-map op)."""
    return any(isinstance(n.op, CNN_OPS) for n in graph.nodes)


# -- layouts ------------------------------------------------------------------------
def replicas(cfg: ChipConfig, channels: int) -> int:
    """Copies of a ``channels``-channel pixel one word holds in the replicated layout
    (1: not worth it)."""
    return cfg.rows // channels if 2 * channels <= cfg.rows else 1


def pack_map(cfg: ChipConfig, x: np.ndarray, copies: int = 1) -> np.ndarray:
    """``(N, H, W, C)`` int8 -> words: channel block ``cb`` holds ``N*H*W`` words;
    with ``copies > 1`` (``C*copies <= R``) one block whose word holds the pixel's
    channels ``copies`` times (docs/cnn.md, replicated channels)."""
    R = cfg.rows
    flat = np.asarray(x, dtype=np.int8).reshape(-1, x.shape[-1])
    if copies > 1:
        words = np.zeros((flat.shape[0], R), dtype=np.int8)
        words[:, :copies * flat.shape[1]] = np.tile(flat, (1, copies))
        return words.view(np.uint8)
    return layout.pack_activations(cfg, flat)


def map_words(cfg: ChipConfig, shape: tuple[int, ...], copies: int = 1) -> int:
    pixels = int(np.prod(shape[:-1]))
    return pixels if copies > 1 else layout.blocks(shape[-1], cfg.rows) * pixels


def as_map(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """A tensor shape as ``(N, H, W, C)``: a dense ``[M, K]`` is ``(1, M, 1, K)``, a
    tensor of another rank its 2-D view ``(1, prod(shape[:-1]), 1, shape[-1])``."""
    if len(shape) == 4:
        return tuple(shape)
    return (1, int(np.prod(shape[:-1])), 1, shape[-1])


def acc_param_rows(cfg: ChipConfig, rows: np.ndarray) -> np.ndarray:
    """int32 ``[n, C]`` (n accumulator rows) -> DRAM words."""
    return layout.pack_acc_rows(cfg, rows)


# -- what a layer is, for the tile loop ----------------------------------------------
@dataclass
class Source:
    tensor: str
    shape: tuple[int, int, int, int]
    copies: int                      # > 1: replicated layout, one channel block
    dram: int = 0
    gather: tuple[int, int] | None = None   # a Flatten of a map of (pixels, channel
                                            # blocks): K-block kb is channel block
                                            # kb % CB of pixel kb // CB

    def blocks(self, R: int) -> int:
        return 1 if self.copies > 1 else layout.blocks(self.shape[3], R)


@dataclass
class WStep:
    """One weight block of an output block: source, channel block, taps (one per
    replica), and the block's position in the layer's weight image."""
    src: int
    cb: int
    taps: tuple[tuple[int, int], ...]
    block: int                       # index of the R x R block in the weight image


@dataclass
class Job:
    name: str
    index: int
    sources: list[Source]
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    dilation: tuple[int, int]
    pad_byte: int
    out_shape: tuple[int, int, int, int]
    out_dtype: str
    steps: list[list[WStep]]         # per N-block (an accumulator row of `span` channels)
    weights: np.ndarray              # [blocks, R, max(R, C)] int8 (columns past `span` 0)
    use_max: bool = False
    # epilogue: "params" (4 rows per output block), "bias" (1 row) or None
    post: str | None = None
    post_rows: np.ndarray | None = None   # int32 [nb * rows, C]
    vrun: dict = field(default_factory=dict)
    macs: int = 0
    span: int = 0                    # output channels per N-block (0: R)


def placements(cfg: ChipConfig, job: Job, nb: int) -> list[tuple[int, int]]:
    """Where N-block `nb` of `job` (``job.span`` channels) goes: ``(block, sub)`` per
    VRUN, `block` the output's channel block of ``R`` and `sub` the VRUN's routing
    (docs/contract.md): on a tall grid (``span = C < R``) sub-block ``nb % k`` of block
    ``nb // k``; on a wide one (``span = C > R``) slice ``s`` into block ``nb*k + s``,
    one VRUN per slice holding channels; else block `nb` (slice 0)."""
    R = cfg.rows
    span = job.span or R
    if span < R:
        return [divmod(nb, R // span)]
    if span > R:
        k = span // R
        out = layout.blocks(job.out_shape[3], R)
        return [(nb * k + s, s) for s in range(min(k, out - nb * k))]
    return [(nb, 0)]


def _stage_parts(cfg: ChipConfig, job: Job) -> int:
    """Staging areas an N-block's VRUNs write per accumulator half (its slices; on a
    grid whose sides do not divide, the most blocks it overlaps)."""
    if job.out_dtype != "int8":
        return 1
    span = job.span or cfg.rows
    if not cfg.sides_divide:
        return min(layout.max_pieces(cfg, span), layout.blocks(job.out_shape[3], cfg.rows))
    return max(1, span // cfg.rows)


def diagonal_span(cfg: ChipConfig) -> int:
    """Channels per N-block of a diagonal job (pools, Add, depthwise): ``min(R, C)``,
    or on a grid whose sides do not divide the most tiles' worth of columns that
    divide ``R`` (a 12x8 array: 4), so N-blocks stay sub-blocks of a channel block."""
    R, n = cfg.rows, cfg.tile_size
    span = min(R, cfg.cols)
    while R % span:
        span -= n
    return span


def _tap_list(kernel, dilation) -> list[tuple[int, int]]:
    return [(kh * dilation[0], kw * dilation[1]) for kh in range(kernel[0])
            for kw in range(kernel[1])]


def _conv_job(cfg, graph, index, node, src: Source) -> Job:
    op: Conv2d = node.op
    R = cfg.rows
    KH, KW, Cin, Cout = op.weights.shape
    out = graph.tensor(node.outputs[0])
    C = cfg.cols             # an N-block: one ACC row of C output channels
    WC = max(R, C)           # a weight block's columns (past C, or on a tall grid past
                             # the N-block's C, zero)
    nb = layout.blocks(Cout, C)
    w = op.weights.astype(np.int64)
    taps = [(kh, kw) for kh in range(KH) for kw in range(KW)]
    dil = op.dilation
    blocks, steps = [], []
    for n in range(nb):
        cols = slice(n * C, min((n + 1) * C, Cout))
        mine = []
        if src.copies > 1:
            g = src.copies
            for j in range(0, len(taps), g):
                group = taps[j:j + g]
                blk = np.zeros((R, WC), dtype=np.int64)
                for r, (kh, kw) in enumerate(group):
                    blk[r * Cin:(r + 1) * Cin, :cols.stop - cols.start] = w[kh, kw, :, cols]
                mine.append(WStep(0, 0, tuple((kh * dil[0], kw * dil[1]) for kh, kw in group),
                                  len(blocks)))
                blocks.append(blk)
        else:
            for cb in range(layout.blocks(Cin, R)):
                rows = slice(cb * R, min((cb + 1) * R, Cin))
                for kh, kw in taps:
                    blk = np.zeros((R, WC), dtype=np.int64)
                    blk[:rows.stop - rows.start, :cols.stop - cols.start] = w[kh, kw, rows, cols]
                    mine.append(WStep(0, cb, ((kh * dil[0], kw * dil[1]),), len(blocks)))
                    blocks.append(blk)
        steps.append(mine)
    x_zp = graph.tensor(node.inputs[0]).quant.zero_point
    Ho, Wo = out.shape[1], out.shape[2]
    return Job(node.name, index, [src], (KH, KW), op.stride, op.pads, dil,
               x_zp & 0xFF, out.shape, "int8", steps, np.stack(blocks).astype(np.int8),
               post="params",
               post_rows=_channel_params(cfg, node.name, op, x_zp, w.sum(axis=(0, 1, 2)), C),
               vrun=dict(requant=1, params=1, zp=op.zp & 0xFF),
               macs=out.shape[0] * Ho * Wo * KH * KW * Cin * Cout, span=C)


def _channel_params(cfg, name: str, op: Conv2d, x_zp: int, w_sum: np.ndarray,
                    width: int) -> np.ndarray:
    """A convolution's VRUN parameter rows (``params = 1``), per N-block of `width`
    output channels (N-block ``n`` holds channels ``n*width ..``): bias, multiplier,
    shift and clamp, each row ``cfg.cols`` wide. docs/cnn.md: acc = bias + sum (x -
    x_zp) * w; the array sums x * w over the input padded with x_zp, so the bias
    absorbs ``- x_zp * w_sum`` (`w_sum` per output channel)."""
    channels = len(w_sum)
    bias = np.zeros(channels, dtype=np.int64) if op.bias is None else op.bias.astype(np.int64)
    bias = bias - x_zp * w_sum
    _fits_int32(name, bias)
    mult = np.broadcast_to(np.asarray(op.mult, dtype=np.int64), (channels,))
    shift = np.broadcast_to(np.asarray(op.shift, dtype=np.int64), (channels,))
    lo = op.zp if op.relu or op.relu6 is not None else -128
    hi = op.relu6 if op.relu6 is not None else 127
    nb = layout.blocks(channels, width)
    params = np.zeros((nb, PARAM_ROWS, cfg.cols), dtype=np.int64)
    for n in range(nb):
        first, k = n * width, min(width, channels - n * width)
        params[n, 0, :k] = bias[first:first + k]
        params[n, 1, :k] = mult[first:first + k]
        params[n, 2, :k] = shift[first:first + k]
        params[n, 3, :] = (lo & 0xFF) | ((hi & 0xFF) << 8)
    return params.reshape(-1, cfg.cols).astype(np.int32)


def _depthwise_job(cfg, graph, index, node, src: Source) -> Job:
    """A depthwise convolution (docs/cnn.md, "Depthwise convolution"): laid out as a
    pool is (:func:`_identity_steps`: an N-block per channel block, or per sub-block on
    a tall array), one step per tap whose weight block is the diagonal of that tap's
    weights over the block's channels; requantised per channel as a convolution."""
    op: Conv2d = node.op
    R, WC = cfg.rows, cfg.weight_rows
    KH, KW, _, C = op.weights.shape
    out = graph.tensor(node.outputs[0])
    span = diagonal_span(cfg)
    k = min(R // span, layout.blocks(C, span))     # the sub-blocks any N-block takes
    nbk = layout.blocks(C, span)
    w = op.weights.astype(np.int64)[:, :, 0, :]    # [KH, KW, C]
    dil = op.dilation
    blocks, steps = [], []
    for nb in range(nbk):
        cb, sub = divmod(nb, k)
        mine = []
        for kh in range(KH):
            for kw in range(KW):
                diag = np.zeros(R, dtype=np.int64)
                part = w[kh, kw, cb * R:(cb + 1) * R]
                diag[:len(part)] = part
                blk = np.zeros((R, WC), dtype=np.int64)
                blk[:, :span] = np.diag(diag)[:, sub * span:(sub + 1) * span]
                mine.append(WStep(0, cb, ((kh * dil[0], kw * dil[1]),), len(blocks)))
                blocks.append(blk)
        steps.append(mine)
    x_zp = graph.tensor(node.inputs[0]).quant.zero_point
    Ho, Wo = out.shape[1], out.shape[2]
    return Job(node.name, index, [src], (KH, KW), op.stride, op.pads, dil, x_zp & 0xFF,
               out.shape, "int8", steps, np.stack(blocks).astype(np.int8),
               post="params",
               post_rows=_channel_params(cfg, node.name, op, x_zp, w.sum(axis=(0, 1)), span),
               vrun=dict(requant=1, params=1, zp=op.zp & 0xFF),
               macs=out.shape[0] * Ho * Wo * KH * KW * C, span=span)


def stored_weights(cfg: ChipConfig, blocks: np.ndarray) -> np.ndarray:
    """A job's weight blocks (``[n, R, R]``, array row by column) as the DRAM words a
    WLOAD reads: each block's ``R`` rows, or on a wide grid (loaded from the west) its
    ``C`` columns, column ``c`` in word ``c`` (zero past the block's ``R``;
    docs/contract.md, "Wide grids")."""
    R = cfg.rows
    if cfg.wide:
        words = np.zeros((blocks.shape[0], cfg.weight_rows, R), dtype=np.int8)
        words[:, :blocks.shape[2]] = blocks.transpose(0, 2, 1)
        blocks = words
    return np.ascontiguousarray(blocks[:, :, :R]).reshape(-1, R).view(np.uint8)


def _fits_int32(name: str, values: np.ndarray) -> None:
    if values.size and (values.min() < -(1 << 31) or values.max() >= 1 << 31):
        raise CompileError(f"layer {name!r}: the bias with the input zero point folded "
                           f"in does not fit int32; use smaller weights or zero point")


def _identity_steps(cfg, C, taps, scale_per_src: list[int]
                    ) -> tuple[list, np.ndarray, int]:
    """Per N-block: one step per source and tap with a diagonal block of that source's
    scale, and the N-block's channels. An N-block is a channel block (of ``R``; on a
    wide grid slice 0), or on a tall grid (``R = k*C``) sub-block ``nb % k`` of channel
    block ``nb // k``: its block the diagonal's columns ``(nb % k)*C ..``."""
    R, WC = cfg.rows, cfg.weight_rows
    span = diagonal_span(cfg)
    k = min(R // span, layout.blocks(C, span))     # the sub-blocks any N-block takes
    blocks = []
    for s in scale_per_src:
        diag = np.diag(np.full(R, s, dtype=np.int64))
        for sub in range(k):
            blk = np.zeros((R, WC), dtype=np.int64)
            blk[:, :span] = diag[:, sub * span:(sub + 1) * span]
            blocks.append(blk)
    n = len(scale_per_src)
    steps = [[WStep(s, nb // k, (tap,), s * k + nb % k) for s in range(n) for tap in taps]
             for nb in range(layout.blocks(C, span))]
    return steps, np.stack(blocks).astype(np.int8), span


def _pool_job(cfg, graph, index, node, src: Source) -> Job:
    op = node.op
    out = graph.tensor(node.outputs[0])
    N, H, W, C = src.shape
    if isinstance(op, GlobalAvgPool):
        kernel, stride, pads = (H, W), (1, 1), (0, 0, 0, 0)
        mult, shift = (op.mult, op.shift) if getattr(op, "mult", None) is not None \
            else average_params(H * W)
    else:
        kernel, stride, pads = op.kernel, op.stride, op.pads
        mult, shift = (getattr(op, "mult", 1), getattr(op, "shift", 0))
    taps = _tap_list(kernel, (1, 1))
    steps, weights, span = _identity_steps(cfg, C, taps, [1])
    x_zp = graph.tensor(node.inputs[0]).quant.zero_point
    Ho, Wo = out.shape[1], out.shape[2]
    job = Job(node.name, index, [src], kernel, stride, pads, (1, 1), 0, out.shape, "int8",
              steps, weights, macs=N * Ho * Wo * kernel[0] * kernel[1] * C, span=span)
    if isinstance(op, MaxPool2d):
        job.use_max, job.pad_byte = True, 0x80          # padding never wins
        job.vrun = dict(requant=1, mult=1, shift=0, zp=0)
    else:
        job.pad_byte = x_zp & 0xFF
        nbk = len(steps)
        job.post = "bias"
        job.post_rows = np.full((nbk, cfg.cols), -x_zp * kernel[0] * kernel[1], dtype=np.int32)
        y_zp = out.quant.zero_point           # the input's, unless a global pool says
        job.vrun = dict(requant=1, mult=mult, shift=shift, zp=y_zp & 0xFF, use_bias=1)
    return job


def _add_job(cfg, graph, index, node, srcs: list[Source]) -> Job:
    op: Add = node.op
    out = graph.tensor(node.outputs[0])
    N, H, W, C = srcs[0].shape
    steps, weights, span = _identity_steps(cfg, C, [(0, 0)], [op.mult_a, op.mult_b])
    za, zb = (graph.tensor(t).quant.zero_point for t in node.inputs)
    nbk = len(steps)
    job = Job(node.name, index, srcs, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 0, out.shape,
              "int8", steps, weights, macs=2 * N * H * W * C, span=span)
    job.post = "bias"
    job.post_rows = np.full((nbk, cfg.cols), -(op.mult_a * za + op.mult_b * zb),
                            dtype=np.int32)
    job.vrun = dict(requant=1, mult=1, shift=op.shift, zp=op.zp & 0xFF, use_bias=1,
                    relu=int(op.relu))
    return job


def _dense_job(cfg, graph, index, node, src: Source) -> Job:
    op: Dense = node.op
    R = cfg.rows
    out = graph.tensor(node.outputs[0])
    K, Nn = op.weights.shape
    C = cfg.cols             # an N-block: one ACC row of C outputs
    w = op.weights.astype(np.int64)
    nb, kb = layout.blocks(Nn, C), layout.blocks(K, R)
    blocks, steps = [], []
    for n in range(nb):
        mine = []
        for k in range(kb):
            blk = np.zeros((R, max(R, C)), dtype=np.int64)
            part = w[k * R:(k + 1) * R, n * C:(n + 1) * C]
            blk[:part.shape[0], :part.shape[1]] = part
            mine.append(WStep(0, k, ((0, 0),), len(blocks)))
            blocks.append(blk)
        steps.append(mine)
    M = out.shape[0]
    job = Job(node.name, index, [src], (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 0,
              (1, M, 1, Nn), out.dtype, steps, np.stack(blocks).astype(np.int8),
              macs=M * K * Nn, span=C)
    if op.bias is not None:
        job.post = "bias"
        job.post_rows = np.zeros((nb, cfg.cols), dtype=np.int32)
        job.post_rows.reshape(-1)[:Nn] = op.bias
    post = dict(use_bias=int(op.bias is not None), relu=int(op.relu))
    if out.dtype == "int8":
        post.update(requant=1, mult=op.mult, shift=op.shift, zp=op.zp & 0xFF)
    job.vrun = post
    return job


# -- the plan -------------------------------------------------------------------------
@dataclass
class Layout:
    """Where the streaming program keeps things (CBUF rows, ACC rows). From
    ``staging`` to ``top`` each layer puts its two output staging halves, then its
    two tile buffers (sized per layer: :func:`_tiles`)."""
    ring: int
    staging: int
    top: int
    halves: int
    half_rows: int
    slots: int                       # ACC rows of the epilogue parameters, 2 x 4
    persistent: bool = False         # the layer's whole weight image from `ring` (block
                                     # b at ring + b*R), loaded once: no ring
    buffers: int = 2                 # tile buffers: 2 (the next tile loads into the
                                     # other) or 1 (it loads behind this tile's reads)


def _layout(cfg: ChipConfig) -> Layout:
    R = cfg.rows
    half = (cfg.acc_depth - 2 * PARAM_ROWS) // 2
    # Layer by layer a tile re-reads its halo (the baseline strategy): nothing is kept
    # for a later pass, so the UBUF's banks serve as tile buffers too.
    top = cfg.cbuf_depth
    # The weight ring (read by the weight loader), the staging (read by the DMA's
    # stores) and the tile buffers (read by the feeder) start at bank boundaries: a
    # CBUF bank has one read port (docs/contract.md, "CBUF banks").
    ring, staging = 0, _bank_up(cfg, WEIGHT_SLOTS * cfg.weight_rows)
    if top - staging < 8 * R:
        raise CompileError(f"chip {cfg.name!r}: CBUF too small for convolution tiles")
    return Layout(ring, staging, top, 0, half, 2 * half)


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
    MATMUL reading that block has issued; fewer tiles, so fewer weight reloads)."""
    weights: str = "stream"
    buffers: int = 2

    def __post_init__(self):
        if self.weights not in WEIGHTS:
            raise CompileError(f"weights {self.weights!r} is not one of "
                               f"{', '.join(WEIGHTS)}")
        if self.buffers not in BUFFERS or isinstance(self.buffers, bool):
            raise CompileError(f"buffers {self.buffers!r} is not one of "
                               f"{', '.join(map(str, BUFFERS))}")


def job_layout(cfg: ChipConfig, lay: Layout, job: Job, tiling: Tiling) -> Layout:
    """The layout one layer runs in: `lay` with the weight ring, or with the layer's
    whole weight image where the ring was and the staging and tile buffers above it
    (fewer rows for the tiles); its tile buffers as `tiling` says."""
    if tiling.weights == "stream":
        return replace(lay, buffers=tiling.buffers)
    return replace(lay, staging=_bank_up(cfg, lay.ring + job.weights.shape[0] * cfg.weight_rows),
                   persistent=True, buffers=tiling.buffers)


def _per_layer(names: set[str], value, what: str, kinds: tuple) -> dict:
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


def _tilings(cfg: ChipConfig, lay: Layout, jobs: list, weights, buffers
             ) -> dict[str, Tiling]:
    """Each layer's tiling: the user's (`weights`, `buffers`: one for all layers, or
    by layer name) where given, the cost model's (:func:`choose`) for the rest."""
    names = {j.name for j in jobs if j is not None}
    want_w = _per_layer(names, weights, "weights", WEIGHTS)
    want_b = _per_layer(names, buffers, "buffers", BUFFERS)
    for want, what, kinds in ((want_w, "weights", WEIGHTS), (want_b, "buffers", BUFFERS)):
        for name, value in want.items():
            if value not in kinds or isinstance(value, bool):
                raise CompileError(f"layer {name!r}: {what} {value!r} is not one of "
                                   f"{', '.join(map(repr, kinds))}")
    out = {}
    for job in jobs:
        if job is None:
            continue
        _check_window(job)
        out[job.name] = choose(cfg, lay, job, want_w.get(job.name), want_b.get(job.name))
    return out


SLOWER = 0.01       # how much slower (by estimate) a tiling may run to move fewer bytes,
SAVES = 0.05        # if it moves at least this much fewer


def estimate(cfg: ChipConfig, lay: Layout, job: Job, tiling: Tiling) -> tuple[int, int]:
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
    tiles, _ = _tiles(cfg, mine, job)
    N, Ho, Wo, _ = job.out_shape
    nb = len(job.steps)
    # a step streams its rows, or waits for its weight bank: the bank it uses was
    # last used two steps before, then loaded (:func:`_bank_turn`)
    turn = _bank_turn(cfg)
    steps = sum(len(s) for s in job.steps)
    streamed = N * sum(steps * max((oh1 - oh0) * Wo, ((oh1 - oh0) * Wo + turn) // 2)
                       for oh0, oh1 in tiles)
    words = []
    for oh0, oh1 in tiles:
        lo, hi = _input_rows(job, oh0, oh1)
        words.append(sum((hi - lo) * s.shape[2] * s.blocks(R) for s in job.sources))
    moved = N * sum(words)
    blocks = job.weights.shape[0]
    if mine.persistent:
        moved += blocks * cfg.weight_rows
    else:                # a step whose bank (they alternate) holds its block loads none
        seq = [st.block for steps in job.steps for st in steps] * (N * len(tiles))
        moved += cfg.weight_rows * sum(1 for f, b in enumerate(seq) if f < 2 or seq[f - 2] != b)
    if job.post is not None:
        per = PARAM_ROWS if job.post == "params" else 1
        moved += N * len(tiles) * nb * per * cfg.acc_row_words
    moved += N * Ho * Wo * (layout.blocks(job.out_shape[3], R) if job.out_dtype == "int8"
                            else nb)
    # the first MATMUL waits for the first tile's first channel block
    exposed = words[0] // sum(s.blocks(R) for s in job.sources)
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
        rows = [(oh1 - oh0) * Wo for oh0, oh1 in tiles]
        exposed += N * max(0, words[0] + span0 * (R - rows[0]))
        exposed += N * sum(max(0, words[k] + span * (per_step - rows[k - 1]))
                           for k in range(1, len(tiles)))
    return max(streamed, moved) + exposed, moved * R


def _bank_turn(cfg: ChipConfig) -> int:
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


def choose(cfg: ChipConfig, lay: Layout, job: Job, weights: str | None = None,
           buffers: int | None = None) -> Tiling:
    """The cost model's tiling for one layer (`weights`, `buffers`: the user's, where
    not None): of those whose tiles fit, the fastest by :func:`estimate` (the first of
    ``stream`` before ``persistent``, 2 buffers before 1, on a tie), unless one moves
    at least ``SAVES`` fewer DRAM bytes in at most ``SLOWER`` more cycles: then the one
    of those that moves the fewest."""
    options = [Tiling(w, b) for w in ([weights] if weights is not None else WEIGHTS)
               for b in ([buffers] if buffers is not None else BUFFERS)]
    costs, errors = [], {}
    for t in options:
        try:
            costs.append((*estimate(cfg, lay, job, t), t))
        except CompileError as e:
            errors[t] = e.with_traceback(None)
    if not costs:
        # the shortfall of the tiling with the most room: streamed weights, fewest buffers
        raise errors[min(errors, key=lambda t: (t.weights != "stream", t.buffers))]
    fastest = min(costs, key=lambda c: c[0])
    cheaper = [c for c in costs if c[0] <= fastest[0] * (1 + SLOWER)
               and c[1] <= fastest[1] * (1 - SAVES)]
    return min(cheaper, key=lambda c: c[1])[2] if cheaper else fastest[2]


def _bank_up(cfg: ChipConfig, row: int) -> int:
    """The first CBUF bank boundary at or above `row`."""
    return -(-row // cfg.cbuf_bank_rows) * cfg.cbuf_bank_rows


def _tiles_lo(cfg: ChipConfig, lay: Layout, stage_half: int) -> int:
    """Where the tile buffers start, beside staging halves of `stage_half` rows."""
    return _bank_up(cfg, lay.staging + 2 * stage_half)


def _tiles(cfg: ChipConfig, lay: Layout, job: Job) -> tuple[list[tuple[int, int]], int]:
    """Output-row tiles ``[oh0, oh1)`` of one image, and the rows of each of the two
    output staging halves: as many output rows as fit an accumulator half while
    their input rows fit one of the ``lay.buffers`` tile buffers that share the CBUF
    left after the staging; one tile for the whole map if it fits both buffers
    together."""
    N, Ho, Wo, _ = job.out_shape
    parts = _stage_parts(cfg, job)

    def area(pixels: int) -> int:
        """CBUF rows for the tile buffers beside staging halves of `pixels` rows (per
        slice on a wide grid)."""
        return lay.top - _tiles_lo(cfg, lay, pixels * parts)

    def words(rows: int) -> int:
        lo, hi = _input_rows(job, 0, rows)
        return sum((hi - lo) * s.shape[2] * s.blocks(cfg.rows) for s in job.sources)

    if Ho * Wo <= lay.half_rows and \
            words(Ho) <= (area(Ho * Wo) if N == 1 else area(Ho * Wo) // lay.buffers):
        return [(0, Ho)], Ho * Wo
    per = min(Ho, max(1, lay.half_rows // Wo))
    while per > 1 and _tile_words(job, cfg, per) > area(per * Wo) // lay.buffers:
        per -= 1
    if Wo > lay.half_rows:
        raise CompileError(
            f"layer {job.name!r}: one output row ({Wo} pixels) is more than an "
            f"accumulator half ({lay.half_rows} rows), even with one-row tiles; use a "
            f"smaller input width or a chip with a larger ACC")
    need, have = _tile_words(job, cfg, per), area(per * Wo) // lay.buffers
    if need > have:
        raise CompileError(
            f"layer {job.name!r}: even with one-row tiles, a tile needs {need} CBUF rows "
            f"of input and a tile buffer has {have}: short by {(need - have) * cfg.rows} "
            f"bytes (with {lay.buffers} tile buffer{'s' if lay.buffers > 1 else ''}); "
            f"use a smaller input width or fewer input channels, or a chip with a "
            f"larger CBUF")
    return [(o, min(o + per, Ho)) for o in range(0, Ho, per)], per * Wo


def _tile_words(job: Job, cfg: ChipConfig, rows: int) -> int:
    worst = 0
    for oh0 in range(0, job.out_shape[1], rows):
        lo, hi = _input_rows(job, oh0, min(oh0 + rows, job.out_shape[1]))
        worst = max(worst, sum((hi - lo) * s.shape[2] * s.blocks(cfg.rows)
                               for s in job.sources))
    return worst


def _picks_rows(job: Job) -> bool:
    """A one-row kernel with a row stride reads only every ``sh``-th input row: a tile
    then loads just those rows, one DMA each, and walks them with row stride 1."""
    return job.kernel[0] == 1 and job.stride[0] > 1 and job.pads[0] == job.pads[2] == 0


def _input_rows(job: Job, oh0: int, oh1: int) -> tuple[int, int]:
    """Input rows ``[lo, hi)`` output rows ``[oh0, oh1)`` read (inside the map); for a
    row-picking layer (:func:`_picks_rows`) ``hi - lo`` is the number it loads."""
    if _picks_rows(job):
        return oh0, oh1
    H = job.sources[0].shape[1]
    sh, pt = job.stride[0], job.pads[0]
    ext = (job.kernel[0] - 1) * job.dilation[0] + 1
    lo = oh0 * sh - pt
    hi = (oh1 - 1) * sh - pt + ext
    return max(lo, 0), min(hi, H)


def _check_window(job: Job) -> None:
    """The window walk's field widths, as limits on the layer (docs/cnn.md)."""
    tap_max = (1 << isa.TAP_BITS) - 1
    geom_max = (1 << isa.GEOM_BITS) - 1
    ext = [(k - 1) * d for k, d in zip(job.kernel, job.dilation)]
    for what, value, limit, fix in (
            ("(kernel height - 1) x dilation", ext[0], tap_max, "a smaller kernel or dilation"),
            ("(kernel width - 1) x dilation", ext[1], tap_max, "a smaller kernel or dilation"),
            ("top padding", job.pads[0], tap_max, "less padding"),
            ("left padding", job.pads[1], tap_max, "less padding"),
            ("input width", job.sources[0].shape[2], geom_max, "a narrower input"),
            ("output width", job.out_shape[2], geom_max, "a narrower output")):
        if value > limit:
            raise CompileError(f"layer {job.name!r}: {what} is {value}, but the matmul "
                               f"unit's window walk takes at most {limit}; use {fix}")


# -- emission -------------------------------------------------------------------------
@dataclass
class _Counters:
    """Weight blocks and output blocks so far (ring slot and bank, accumulator half)
    and the tile rows and columns fed (all: every layer may use the whole array)."""
    tile_rows: int
    tile_cols: int
    steps: int = 0
    blocks: int = 0


class _Emit:
    def __init__(self, cfg: ChipConfig, em: _Counters, lay: Layout):
        self.cfg, self.em, self.lay = cfg, em, lay
        self.base = lay                 # the network's layout; job() sets each layer's
        self.tile_no = 0
        self.tables: dict[tuple, int] = {}     # tap deltas -> table, per layer
        self.made: dict[tuple, MicroOp] = {}
        self.bank_holds: list[int | None] = [None, None]   # DRAM block in each bank
        self.stage_slot = None          # tall grid: the staging half of the block begun
        self.staged = 0                 # blocks staged by earlier tiles (pieces)

    def op(self, opcode: Opcode, layer: int, sub: int = 0, **fields) -> MicroOp:
        """A checked micro-op; one with the fields of an earlier one shares its checked
        parts (a network repeats most of its instructions, tile after tile). `sub`: a
        VRUN's sub-block (tall grid) or slice (wide grid), as :func:`gemm_routing`."""
        # A DMA is kept with its DRAM address at 0 (``timing.moving_field``) and moved
        # to each address it is made with: most differ in nothing else.
        moving = timing.moving_field(opcode)
        value = fields.get(moving, 0) if moving else 0
        if value:
            fields[moving] = 0
        # layers share them too: nothing checked depends on the layer
        key = (opcode, sub, tuple(fields.items()))   # one call site, one field order
        known = self.made.get(key)
        if known is None:
            known = make(self.cfg, opcode, layer, **fields)
            known.needs = gemm_routing(self.cfg, opcode, to_acc=bool(fields.get("to_acc")),
                                       tile_rows=self.em.tile_rows,
                                       tile_cols=self.em.tile_cols, sub=sub)
            self.made[key] = known
        if value:
            mop = moved(self.cfg, known, value)
            mop.layer = layer
            return mop
        return MicroOp(known.op, known.fields, known.accesses, layer, known.needs)

    def job(self, job: Job, w_dram: int, post_dram: int | None, out_dram: int,
            tiling: Tiling = Tiling()) -> list[Block]:
        cfg, em = self.cfg, self.em
        lay = self.lay = job_layout(cfg, self.base, job, tiling)
        R, arw = cfg.rows, cfg.acc_row_words
        i = job.index
        N, Ho, Wo, Cout = job.out_shape
        _check_window(job)
        tiles, stage_half = _tiles(cfg, lay, job)
        nb_count = len(job.steps)
        self.tables = {}
        table_ops = self._tables(job)
        step_table = [[self.tables.get(self._deltas(st), 0) for st in steps]
                      for steps in job.steps]
        tiles_lo = _tiles_lo(cfg, lay, stage_half * _stage_parts(cfg, job))
        area = lay.top - tiles_lo
        blocks: list[Block] = []
        work = [(n, t) for n in range(N) for t in tiles]
        whole = len(work) == 1      # one tile: it may take both buffers
        single = lay.buffers == 1 and not whole
        # one buffer: a channel block sits at the same rows in every tile, so the next
        # tile's block loads once this tile's last read of that block has issued
        most = max(_input_rows(job, *t)[1] - _input_rows(job, *t)[0] for t in tiles) \
            if single else 0

        def tile_loads(wi: int) -> tuple[list[MicroOp], list[int], int, list, int]:
            """Tile `wi`'s input loads, where each source starts, its input rows, the
            (source, channel block) each load fills, the rows between blocks."""
            n, (oh0, oh1) = work[wi]
            buf = tiles_lo + (0 if whole or single
                              else ((self.tile_no + wi) % 2) * (area // 2))
            lo, hi = _input_rows(job, oh0, oh1)
            each = most or hi - lo
            picks = _picks_rows(job)
            loads, bases, keys, at = [], [], [], buf
            for si, s in enumerate(job.sources):
                H, W = s.shape[1], s.shape[2]
                bases.append(at)
                for cb in range(s.blocks(R)):
                    at = bases[si] + cb * each * W
                    keys += [(si, cb)] * ((hi - lo) if picks and s.gather is None else 1)
                    if s.gather is not None:
                        # row m of K-block cb is word m of pixel p in channel block c
                        hw, cbs = s.gather
                        c, p = cb % cbs, cb // cbs
                        loads.append(self.op(
                            Opcode.DMA, i, kind=DmaKind.LOAD_CBUF,
                            dram_addr=s.dram + c * H * hw + lo * hw + p, dram_stride=hw,
                            buf_addr=at, rows=hi - lo))
                        at += hi - lo
                        continue
                    plane = s.dram + (cb * N + n) * H * W
                    if picks:
                        for oh in range(oh0, oh1):
                            loads.append(self.op(
                                Opcode.DMA, i, kind=DmaKind.LOAD_CBUF,
                                dram_addr=plane + oh * job.stride[0] * W, dram_stride=1,
                                buf_addr=at, rows=W))
                            at += W
                        continue
                    loads.append(self.op(
                        Opcode.DMA, i, kind=DmaKind.LOAD_CBUF,
                        dram_addr=plane + lo * W, dram_stride=1,
                        buf_addr=at, rows=(hi - lo) * W))
                at = bases[si] + s.blocks(R) * each * W
            return loads, bases, hi - lo, keys, each

        # Tile wi + 1's input loads fill the other buffer while tile wi computes, in
        # pieces, one per step, that fit beside the step's weight load in the DMA's time
        # (the DMA is in order: one long load would hold up the weights). With one
        # buffer, each comes right after the last MATMUL of tile wi reading the block it
        # overwrites, and the first tile's each half a weight group before the first
        # step reading its block, taking turns with the weights.
        steps_per_tile = sum(len(st) for st in job.steps)
        flat = [st for steps in job.steps for st in steps]
        last_read = {(st.src, st.cb): t for t, st in enumerate(flat)}
        first_read = {(st.src, st.cb): t for t, st in reversed(list(enumerate(flat)))}
        weights_at = self._weight_groups(job, len(work), w_dram)
        f = 0                                   # the job's step number
        prepared = tile_loads(0)
        behind: list[MicroOp] = []              # one buffer: the next tile's first loads
        for wi, (n, (oh0, oh1)) in enumerate(work):
            loads, src_base, in_h, _, each = prepared
            ahead: list[MicroOp] = []
            after: dict[int, list[MicroOp]] = {}    # one buffer: step -> loads before it
            if wi == 0 and single:
                for mop, key in zip(loads, prepared[3]):
                    after.setdefault(max(0, first_read[key] - WEIGHT_GROUP // 2), []
                                     ).append(mop)
                loads = after.pop(0, [])
            rows = (oh1 - oh0) * Wo
            if wi + 1 < len(work):
                prepared = tile_loads(wi + 1)
                if single:
                    for mop, key in zip(prepared[0], prepared[3]):
                        after.setdefault(last_read[key] + 1, []).append(mop)
                else:
                    total = sum(m.fields["rows"] for m in prepared[0])
                    # spread evenly over the tile's steps, within each step's spare time
                    size = min(max(R // 2, -(-total // max(steps_per_tile - 1, 1))),
                               max(R, rows - R - 4))
                    ahead = self._pieces(prepared[0], size)
            if wi > 0:
                loads = behind              # loaded ahead, with the previous tile
            behind = after.pop(steps_per_tile, [])
            lo, _ = _input_rows(job, oh0, oh1)
            ts = 0
            if _picks_rows(job):
                sh, top = 1, 0
            else:
                sh, top = job.stride[0], lo + job.pads[0] - oh0 * job.stride[0]
            geom = self.op(Opcode.CONVCFG, i, out_w=Wo, sh=sh, sw=job.stride[1], top=top,
                           left=job.pads[1], pad=job.pad_byte)
            for nb in range(nb_count):
                blk = Block(i)
                half = em.blocks % 2
                em.blocks += 1
                acc_at = lay.halves + half * lay.half_rows
                slot = lay.slots + half * PARAM_ROWS
                if job.post is not None:
                    per = PARAM_ROWS if job.post == "params" else 1
                    blk.bias.append(self.op(
                        Opcode.DMA, i, kind=DmaKind.LOAD_ACC,
                        dram_addr=post_dram + nb * per * arw, dram_stride=arw,
                        buf_addr=slot, rows=per))
                for k, st in enumerate(job.steps[nb]):
                    ring = lay.ring + (st.block if lay.persistent
                                       else em.steps % WEIGHT_SLOTS) * cfg.weight_rows
                    bank = em.steps % 2
                    em.steps += 1
                    pre = weights_at.get(f, [])
                    f += 1
                    if nb == 0 and k == 0:
                        pre += loads + [geom] + (table_ops if wi == 0 else [])
                    pre += after.pop(ts, [])
                    ts += 1
                    if ts == steps_per_tile:
                        pre += ahead
                    elif ahead:
                        pre.append(ahead.pop(0))
                    block = w_dram + st.block * R
                    if self.bank_holds[bank] != block:   # else the bank has it already
                        pre.append(self.op(Opcode.WLOAD, i, w_addr=ring, bank=bank))
                        self.bank_holds[bank] = block
                    s = job.sources[st.src]
                    base = src_base[st.src] + st.cb * each * s.shape[2]
                    dh, dw = st.taps[0]
                    mm = self.op(Opcode.MATMUL, i, act_addr=base, rows=rows, acc_addr=acc_at,
                                 accumulate=int(k > 0), max=int(job.use_max and k > 0),
                                 bank=bank, conv=1, dh=dh, dw=dw,
                                 taps=step_table[nb][k],
                                 in_w=s.shape[2], in_h=in_h)
                    blk.steps.append(Step(pre, mm))
                blk.epilogue = self._epilogue(job, i, nb, acc_at, slot, rows, half,
                                              stage_half, out_dram,
                                              n * Ho * Wo + oh0 * Wo, N * Ho * Wo)
                blocks.append(blk)
        self.tile_no += len(work)
        return blocks

    def _weight_groups(self, job: Job, tiles: int, w_dram: int) -> dict[int, list[MicroOp]]:
        """The weight loads of a job's steps (all its tiles, in order), one DMA per group
        of up to WEIGHT_GROUP blocks consecutive in DRAM and in the ring, each attached
        to the step half a group before the first that uses it (its slots were last
        read a group earlier still)."""
        R, i = self.cfg.rows, job.index
        persistent = self.lay.persistent
        blocks = [st.block for _ in range(1 if persistent else tiles)
                  for steps in job.steps for st in steps]
        e0 = self.em.steps
        # a step whose bank already holds its block loads nothing (as job() decides);
        # kept weights load each block once, in the first tile
        holds, need, seen = list(self.bank_holds), [], set()
        for f, b in enumerate(blocks):
            bank = (e0 + f) % 2
            need.append(b not in seen if persistent else holds[bank] != w_dram + b * R)
            holds[bank] = w_dram + b * R
            seen.add(b)
        out: dict[int, list[MicroOp]] = {}
        f = 0
        while f < len(blocks):
            if not need[f]:
                f += 1
                continue
            n = 1
            while f + n < len(blocks) and (n < WEIGHT_GROUP if persistent
                                           else (e0 + f + n) % WEIGHT_GROUP) \
                    and need[f + n] and blocks[f + n] == blocks[f] + n:
                n += 1
            WR = self.cfg.weight_rows
            slot = self.lay.ring + (blocks[f] if persistent
                                    else (e0 + f) % WEIGHT_SLOTS) * WR
            out.setdefault(max(0, f - WEIGHT_GROUP // 2), []).append(self.op(
                Opcode.DMA, i, kind=DmaKind.LOAD_CBUF, dram_addr=w_dram + blocks[f] * WR,
                dram_stride=1, buf_addr=slot, rows=n * WR))
            f += n
        return out

    def _pieces(self, loads: list[MicroOp], size: int) -> list[MicroOp]:
        """`loads` (contiguous CBUF loads) cut into loads of at most `size` rows."""
        out = []
        for mop in loads:
            f = mop.fields
            for k in range(0, f["rows"], size):
                out.append(self.op(mop.op, mop.layer, kind=f["kind"],
                                   dram_addr=f["dram_addr"] + k * f["dram_stride"],
                                   dram_stride=f["dram_stride"],
                                   buf_addr=f["buf_addr"] + k, rows=min(size, f["rows"] - k)))
        return out

    @staticmethod
    def _deltas(st: WStep) -> tuple:
        dh, dw = st.taps[0]
        return tuple((h - dh, w - dw) for h, w in st.taps)

    def _tables(self, job: Job) -> list[MicroOp]:
        """TAPS for every distinct packing pattern of the layer (table 0: no packing)."""
        cfg, ops = self.cfg, []
        patterns = []
        for steps in job.steps:
            for st in steps:
                d = self._deltas(st)
                if len(d) > 1 and d not in patterns:
                    patterns.append(d)
        if len(patterns) > isa.TAP_TABLES - 1:
            raise CompileError(f"layer {job.name!r}: needs {len(patterns)} tap tables, "
                               f"the chip has {isa.TAP_TABLES - 1}")
        C = job.sources[0].shape[3]
        for t, d in enumerate(patterns, start=1):
            self.tables[d] = t
            entries = [(0, 0)] * cfg.rows
            for p in range(cfg.rows):
                r = p // C
                entries[p] = d[r] if r < len(d) else (0, 0)
            for first in range(0, cfg.rows, isa.TAPS_PER_WORD):
                chunk = entries[first:first + isa.TAPS_PER_WORD]
                ops.append(self.op(Opcode.TAPS, job.index, table=t, first=first,
                                   count=len(chunk),
                                   **{f"t{a}{k}": isa.signed_field(v[j], isa.TAP_DELTA_BITS)
                                      for k, v in enumerate(chunk, start=1)
                                      for j, a in enumerate("hw")}))
        return ops

    def _epilogue(self, job, i, nb, acc_at, slot, rows, half, stage_half, out_dram, row,
                  plane) -> list[MicroOp]:
        """N-block `nb`'s vector-unit pass and store: int32 as accumulator rows (block
        `nb`, `plane` rows per block, from `row`), int8 into the output's channel blocks
        (:func:`placements`): on a tall grid each sub-block into its block's staging
        half (``wb_src`` keeping the others), stored once the block's last is in; on a
        wide grid one VRUN and store per slice, each with its own staging."""
        cfg, lay = self.cfg, self.lay
        arw = cfg.acc_row_words
        v = dict(job.vrun)
        if job.out_dtype == "int32":
            out_at = out_dram + (nb * plane + row) * arw
            ops = []
            if v.get("use_bias") or v.get("relu"):
                ops.append(self.op(Opcode.VRUN, i, src=acc_at, rows=rows, to_acc=1,
                                   dst=acc_at, bias_addr=slot, **v))
            ops.append(self.op(Opcode.DMA, i, kind=DmaKind.STORE_ACC,
                               dram_addr=out_at, dram_stride=arw, buf_addr=acc_at,
                               rows=rows))
            return ops
        span, R = job.span or cfg.rows, cfg.rows
        if not cfg.sides_divide:
            # pieces: a block's later pieces keep its earlier ones, stored once whole
            # blocks counted across tiles, so a tile's first block is not in the slot
            # the tile before's is stored from
            ops = []
            slots = 2 * _stage_parts(cfg, job)
            for pc in layout.pieces(cfg, nb, job.out_shape[3], span):
                staging = lay.staging + ((self.staged + pc.block) % slots) * stage_half
                ops.append(self.op(Opcode.VRUN, i, sub=pc, src=acc_at, rows=rows,
                                   to_acc=0, dst=staging, bias_addr=slot, **v))
                if pc.last:
                    ops.append(self.op(Opcode.DMA, i, kind=DmaKind.STORE_CBUF,
                                       dram_addr=out_dram + pc.block * plane + row,
                                       dram_stride=1, buf_addr=staging, rows=rows))
            if nb == len(job.steps) - 1:
                self.staged += layout.blocks(job.out_shape[3], R)
            return ops
        if span < R:                    # tall: sub-blocks of a block share its staging
            (b, sub), = placements(cfg, job, nb)
            if sub == 0:            # the accumulator half's, unless the last block's
                self.stage_slot = half if half != self.stage_slot else 1 - half
            staging = lay.staging + self.stage_slot * stage_half
            ops = [self.op(Opcode.VRUN, i, sub=sub, src=acc_at, rows=rows, to_acc=0,
                           dst=staging, bias_addr=slot, **v)]
            if sub == R // span - 1 or nb == len(job.steps) - 1:
                ops.append(self.op(Opcode.DMA, i, kind=DmaKind.STORE_CBUF,
                                   dram_addr=out_dram + b * plane + row, dram_stride=1,
                                   buf_addr=staging, rows=rows))
            return ops
        ops = []
        parts = _stage_parts(cfg, job)
        for b, s in placements(cfg, job, nb):
            staging = lay.staging + (half * parts + s) * stage_half
            ops += [self.op(Opcode.VRUN, i, sub=s, src=acc_at, rows=rows, to_acc=0,
                            dst=staging, bias_addr=slot, **v),
                    self.op(Opcode.DMA, i, kind=DmaKind.STORE_CBUF,
                            dram_addr=out_dram + b * plane + row, dram_stride=1,
                            buf_addr=staging, rows=rows)]
        return ops


# -- entry point ------------------------------------------------------------------------
@dataclass
class CnnLowered(Lowered):
    copies: dict = field(default_factory=dict)   # graph input -> replicas in its layout
    jobs: dict = field(default_factory=dict)     # layer -> its Job (shapes, MACs)
    tiling: dict = field(default_factory=dict)   # layer -> its Tiling (layer by layer)
    segments: dict = field(default_factory=dict)  # first layer -> net_chains.Chained


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
        if isinstance(node.op, (Flatten, Transpose)):
            continue
        for t in node.outputs:
            check_chain_channels(cfg, node.name, graph.tensor(t).shape[-1])


def _check_map_concat(cfg: ChipConfig, graph: Graph, node, alias) -> None:
    """A Concat of feature maps is laid out, not computed (docs/cnn.md, "Concat of
    feature maps"): each input's producer writes its channel blocks where they lie in
    the output's. So every input is made by a layer that stores it to DRAM, no two
    inputs (and no other Concat) share one, and every input but the last fills whole
    blocks of R channels."""
    R = cfg.rows
    who = f"layer {node.name!r}"
    if len(set(node.inputs)) != len(node.inputs):
        raise CompileError(f"{who}: joins one map twice; its channel blocks can be "
                           f"written in one place only: copy it first (e.g. a 1x1 "
                           f"convolution with identity weights)")
    for k, t in enumerate(node.inputs):
        producer = graph.producer(t)
        if producer is None or isinstance(producer.op, (Flatten, Transpose)) \
                or t in alias:
            raise CompileError(f"{who}: input {t!r} is "
                               f"{'a graph input' if producer is None else 'a view'}; a "
                               f"Concat of maps joins maps that layers of the network "
                               f"make (their blocks are written in place): pass it "
                               f"through a layer first")
        if t in graph.outputs:
            raise CompileError(f"{who}: input {t!r} is also a graph output; a Concat's "
                               f"inputs are written into its output's blocks")
        others = [c.name for c in graph.consumers(t)
                  if isinstance(c.op, Concat) and c is not node]
        if others:
            raise CompileError(f"{who}: input {t!r} is joined by {others[0]!r} too; a map "
                               f"is written into one Concat's blocks only")
        C = graph.tensor(t).shape[3]
        if k < len(node.inputs) - 1 and C % R:
            raise CompileError(f"{who}: input {t!r} has {C} channels, not a multiple of "
                               f"the chip's {R} ({cfg.name!r}): every input but the last "
                               f"must fill whole channel blocks, as the next starts a "
                               f"block; give it a multiple of {R} channels or put it last")


def lower_cnn(cfg: ChipConfig, graph: Graph,
              weights: str | Mapping[str, str] | None = None,
              buffers: int | Mapping[str, int] | None = None,
              chain: str | None = None, segments=None, choose_ubuf: bool = True
              ) -> CnnLowered:
    """Lower a graph with feature-map ops: plan DRAM, emit every layer's tile loops,
    software-pipeline them. `weights` (``stream`` or ``persistent``) and `buffers` (2
    or 1): each layer's :class:`Tiling`, for all layers or per layer name; what is not
    given is the cost model's choice (:func:`choose`). `chain` (one of
    :data:`.net_chains.NETWORK_STRATEGIES`, None: the cost model's pick per segment)
    and `segments` (the user's cut, by first layer name): which runs of convolutions
    run as chains in passes (:mod:`.net_chains`); with `choose_ubuf`, the UBUF the
    program assumes is the cost model's (:func:`.net_chains.choose_ubuf`: the
    plan's ``cfg`` says where), else the chip's."""
    from . import chain_lower, net_chains
    from .concat_pad import pad_map_concats
    graph = pad_map_concats(cfg, graph)     # ragged join inputs: whole channel blocks
    lay = _layout(cfg)
    R = cfg.rows
    # replicated layout for a graph input read only by convolutions with few channels
    copies = {}
    for t in graph.inputs:
        shape = graph.tensor(t).shape
        readers = graph.consumers(t)
        if len(shape) == 4 and all(isinstance(r.op, Conv2d) and not r.op.depthwise
                                   for r in readers) \
                and replicas(cfg, shape[3]) > 1:
            copies[t] = replicas(cfg, shape[3])
    # and for a map a transpose makes (an NCHW input's NHWC map) that only such
    # convolutions read: the transpose writes it replicated (emit_transpose)
    for node in graph.nodes:
        t = node.outputs[0]
        shape = graph.tensor(t).shape
        readers = graph.consumers(t)
        if isinstance(node.op, Transpose) and len(shape) == 4 and readers \
                and t not in graph.outputs \
                and all(isinstance(r.op, Conv2d) and not r.op.depthwise
                        for r in readers) \
                and replicas(cfg, shape[3]) > 1 \
                and TransposeRule.pieces(cfg, graph.tensor(node.inputs[0]).shape,
                                         node.op).mode == "transpose":
            copies[t] = replicas(cfg, shape[3])
    # jobs
    jobs: list[Job | None] = []
    alias: dict[str, str] = {}
    gathered: dict[str, tuple[int, int]] = {}   # Flatten of a map: (pixels, blocks)
    for i, node in enumerate(graph.nodes):
        op = node.op
        if isinstance(op, Transpose):           # DRAM to DRAM (emit_transpose)
            if node.inputs[0] in alias:
                raise CompileError(f"layer {node.name!r} transposes the output of a "
                                   f"Flatten, a view the chip never stores; transpose "
                                   f"the map before flattening it")
            jobs.append(None)
            continue
        srcs = [Source(t, as_map(graph.tensor(t if isinstance(op, Dense)
                                              else alias.get(t, t)).shape),
                       copies.get(t, 1), gather=gathered.get(t)) for t in node.inputs]
        if isinstance(op, Flatten):
            shp = graph.tensor(node.inputs[0]).shape
            if shp[1] * shp[2] != 1:
                if shp[3] % R:
                    raise CompileError(
                        f"layer {node.name!r}: Flatten of a {shp[1]}x{shp[2]} map needs "
                        f"a channel count that is a multiple of {R} on chip "
                        f"{cfg.name!r} (it has {shp[3]}), so that each K-block of the "
                        f"dense layer is one pixel's channels; use such channels or put "
                        f"a GlobalAvgPool before it")
                gathered[node.outputs[0]] = (shp[1] * shp[2], shp[3] // R)
            alias[node.outputs[0]] = alias.get(node.inputs[0], node.inputs[0])
            jobs.append(None)
            continue
        if isinstance(op, Conv2d) and op.depthwise:
            jobs.append(_depthwise_job(cfg, graph, i, node, srcs[0]))
        elif isinstance(op, Conv2d):
            jobs.append(_conv_job(cfg, graph, i, node, srcs[0]))
        elif isinstance(op, (MaxPool2d, AvgPool2d, GlobalAvgPool)):
            jobs.append(_pool_job(cfg, graph, i, node, srcs[0]))
        elif isinstance(op, Add):
            jobs.append(_add_job(cfg, graph, i, node, srcs))
        elif isinstance(op, Dense):
            if len(node.inputs) != 1:
                raise CompileError(f"layer {node.name!r}: a dense layer in a convolutional "
                                   f"network reads one tensor")
            jobs.append(_dense_job(cfg, graph, i, node, srcs[0]))
        elif isinstance(op, Concat):
            if len(graph.tensor(node.outputs[0]).shape) != 4:
                raise CompileError(f"layer {node.name!r}: a Concat runs in networks of "
                                   f"dense layers (and transposes, A·Bᵀ) when it joins "
                                   f"[M, K] tensors, and in a convolutional network when it "
                                   f"joins feature maps; here give the dense layer after it "
                                   f"the inputs as separate tensors (it reads several, "
                                   f"concatenated)")
            _check_map_concat(cfg, graph, node, alias)
            jobs.append(None)           # a view: its inputs are written in its blocks
            continue
        else:
            raise CompileError(f"layer {node.name!r}: no lowering rule for "
                               f"{type(op).__name__}")
    choices = _tilings(cfg, lay, jobs, weights, buffers)
    given = set(_per_layer({j.name for j in jobs if j is not None}, weights, "weights",
                           WEIGHTS)) | set(_per_layer({j.name for j in jobs if j is not None},
                                                      buffers, "buffers", BUFFERS))
    if choose_ubuf:
        cfg, chained = net_chains.choose_ubuf(cfg, lay, graph, jobs, choices, chain,
                                              segments, frozenset(given))
    else:
        chained = net_chains.choose_segments(cfg, lay, graph, jobs, choices, chain,
                                             segments, frozenset(given))
    inside: set[str] = set()        # maps a chain keeps in the CBUF: never in DRAM
    member: dict[int, int] = {}     # node index -> its chain's first node index
    for first, (seg, _) in chained.items():
        for j in seg.jobs[:-1]:
            inside.add(graph.nodes[j.index].outputs[0])
        for j in seg.jobs:
            member[j.index] = first
    # DRAM: inputs, parameters, intermediate maps, outputs
    steps = len(graph.nodes)
    dram = DramLayout(cfg, steps)
    place = dram.place
    inputs, params, outputs = {}, {}, {}
    where: dict[str, int] = {}

    for t in graph.inputs:
        x = np.asarray(graph.data[t])
        words = pack_map(cfg, x.reshape(as_map(x.shape)), copies.get(t, 1))
        where[t] = place(f"tensor {t}", words, f"input {t!r}")
        inputs[t] = (where[t], words.shape[0])
    job_dram = {}
    for job in jobs:
        if job is None:
            continue
        w = place(f"{job.name}.weights", stored_weights(cfg, job.weights),
                  f"weights of layer {job.name!r}")
        params[(job.name, "weights")] = (w, job.weights.shape[0] * cfg.weight_rows)
        p = None
        if job.post is not None:
            rows = acc_param_rows(cfg, job.post_rows)
            p = place(f"{job.name}.post", rows, f"epilogue parameters of layer {job.name!r}")
            params[(job.name, "post")] = (p, rows.shape[0])
        job_dram[job.name] = (w, p)
    for node in graph.nodes:
        if isinstance(node.op, Transpose):
            pieces = ([("identity", np.eye(R, dtype=np.uint8))]
                      if graph.tensor(node.inputs[0]).dtype == "int8"
                      else TransposeRule.int32_params(cfg))
            at = {}
            for what, words in pieces:
                at[what] = place(f"{node.name}.{what}", words,
                                 f"{what} of layer {node.name!r}")
                params[(node.name, what)] = (at[what], words.shape[0])
            job_dram[node.name] = (at, None)
    # a Concat of maps is a view: its inputs are written in its output's channel blocks
    joined = {t for n in graph.nodes if isinstance(n.op, Concat) for t in n.inputs}
    for t in joined:
        if t in inside:
            raise CompileError(f"tensor {t!r}: a Concat's input is kept in the CBUF by a "
                               f"chain of convolutions; compile with chain="
                               f"'layer_by_layer' or segments that end at {t!r}")
    for node in graph.nodes:
        for t in node.outputs:
            if t in alias or t in graph.outputs or t in inside or t in joined:
                continue
            tt = graph.tensor(t)
            where[t] = place(f"tensor {t}", _out_words(cfg, tt), f"tensor {t!r}")
    for t in graph.outputs:
        tt = graph.tensor(t)
        if t in alias:
            raise CompileError(f"tensor {t!r}: a graph output cannot be a Flatten's")
        where[t] = place(f"tensor {t}", _out_words(cfg, tt), f"output {t!r}")
        outputs[t] = (where[t], _out_words(cfg, tt))
    for node in reversed(graph.nodes):      # an outer Concat's blocks before an inner's
        if isinstance(node.op, Concat):
            shape = as_map(graph.tensor(node.outputs[0]).shape)
            at = where[node.outputs[0]]
            for t in node.inputs:
                where[t] = at
                at += layout.blocks(graph.tensor(t).shape[3], R) * shape[0] * shape[1] \
                    * shape[2]
    image = dram.image()

    emit = _Emit(cfg, _Counters(tile_rows=cfg.tile_rows, tile_cols=cfg.tile_cols), lay)
    blocks: list[Block] = []
    chip_regions = []
    for index, job in enumerate(jobs):
        if job is None:
            node = graph.nodes[index]
            if isinstance(node.op, Transpose):
                blocks += emit_transpose(cfg, emit, graph, index, where,
                                         job_dram[node.name][0],
                                         copies.get(node.outputs[0], 1))
                chip_regions += transpose_regions(cfg, lay, index, node.name)
            continue
        if job.index in member:
            if member[job.index] != job.index:
                continue                    # emitted with its chain
            seg = chained[job.index][0]
            for s in job.sources:
                s.dram = where[alias.get(s.tensor, s.tensor)]
            last = seg.jobs[-1]
            blocks += chain_lower.emit_segment(
                cfg, emit, seg, job.sources[0].dram,
                [job_dram[j.name][0] for j in seg.jobs],
                [job_dram[j.name][1] for j in seg.jobs],
                where[graph.nodes[last.index].outputs[0]])
            chip_regions += chain_lower.segment_regions(cfg, seg, job.index, last.index)
            continue
        for s in job.sources:
            s.dram = where[alias.get(s.tensor, s.tensor)]
        out_t = graph.nodes[job.index].outputs[0]
        w, p = job_dram[job.name]
        blocks += emit.job(job, w, p, where[out_t], choices[job.name])
        mine = emit.lay
        i = job.index
        chip_regions += [
            Region("cbuf", f"{job.name}.weights" if mine.persistent else "weight ring",
                   mine.ring, mine.staging - mine.ring, i, i,
                   f"weights of layer {job.name!r}" if mine.persistent else "weight ring"),
            Region("cbuf", f"{job.name}.staging and tiles", mine.staging,
                   mine.top - mine.staging, i, i,
                   f"output staging and input tile buffers of layer {job.name!r}")]
    # the ACC halves and slots, live but where a chain's own ACC split is
    spans, at = [], 0
    for first in sorted(chained):
        spans.append((at, first - 1))
        at = chained[first][0].jobs[-1].index + 1
    spans.append((at, steps - 1))
    for lo, hi in spans:
        if lo > hi:
            continue
        chip_regions += [
            Region("acc", "accumulator halves", lay.halves, 2 * lay.half_rows, lo, hi,
                   "accumulator halves"),
            Region("acc", "epilogue slots", lay.slots, 2 * PARAM_ROWS, lo, hi,
                   "epilogue parameter slots")]
    dmap = DramMap(MappingProxyType(inputs), MappingProxyType(params),
                   MappingProxyType(outputs), dram.cursor)
    plan = MemoryPlan(cfg, graph, MappingProxyType({}), tuple(chip_regions + dram.regions),
                      image, dmap)
    check_plan(plan)
    return CnnLowered(pipeline(cfg, blocks), loop_order(blocks), plan, copies,
                      {j.name: j for j in jobs if j is not None},
                      {name: t for name, t in choices.items()
                       if name not in {graph.nodes[i].name for i in member}},
                      {graph.nodes[first].name: c for first, (_, c) in chained.items()})


def _transpose_areas(cfg: ChipConfig, lay: Layout, p=None
                     ) -> tuple[int, int, int, tuple[int, int]]:
    """A transpose layer's CBUF rows in the network's layout: the identity where the
    weight ring is, the input slots where the staging starts, the output staging in
    the next bank (each read by a different unit); and its tile
    (``TransposeRule.tile``, of the pieces `p`: the largest whose two buffers fit)."""
    rule, slots = TransposeRule(), lay.staging
    tile = (1, 1)
    if p is not None:
        budget = rule.tile_budget(cfg)
        while True:
            tile = rule.tile(cfg, p, True, budget)
            staging = _bank_up(cfg, slots + rule.ring_rows(cfg, tile))
            if tile == (1, 1) or staging + rule.staging_rows(cfg, tile) <= lay.top:
                break
            budget //= 2
    staging = _bank_up(cfg, slots + rule.ring_rows(cfg, tile))
    return lay.ring, slots, staging, tile


def transpose_regions(cfg: ChipConfig, lay: Layout, index: int, name: str) -> list[Region]:
    ident, slots, staging, _ = _transpose_areas(cfg, lay)
    return [Region("cbuf", "weight ring", lay.ring, lay.staging - lay.ring, index, index,
                   f"identity of layer {name!r}"),
            Region("cbuf", f"{name}.staging and tiles", lay.staging,
                   lay.top - lay.staging, index, index,
                   f"input slots and output staging of layer {name!r}")]


def emit_transpose(cfg: ChipConfig, emit: "_Emit", graph: Graph, index: int,
                   where: Mapping[str, int], ident_dram: Mapping[str, int], copies: int = 1
                   ) -> list[Block]:
    """A Transpose in a convolutional network: from its input in DRAM to its output in
    DRAM (docs/contract.md, "Transposes"), as the GEMM lowering's rule does it, in the
    areas of :func:`_transpose_areas`; with `copies` > 1 its output in the replicated
    layout (each block's rows loaded `copies` times)."""
    node = graph.nodes[index]
    lay = emit.base
    src = graph.tensor(node.inputs[0])
    em = emit.em

    def op(opcode, layer, sub=0, **fields):
        return transpose_op(cfg, em.tile_rows, em.tile_cols, opcode, layer, sub, **fields)

    rule = TransposeRule()
    if src.dtype == "int32":
        R = cfg.rows
        first = _bank_up(cfg, lay.staging)
        planes = _bank_up(cfg, first + 5 * R + cfg.weight_rows)
        # the blocks sharing an interleaving load (TransposeRule.int32_group): fewer
        # if their two sets of planes and staging do not fit the CBUF
        for group in range(TransposeRule.int32_group(cfg, lay.half_rows), 0, -1):
            staging = _bank_up(cfg, planes + 8 * group * R)
            if staging + 2 * group * R <= lay.top:
                break
        else:
            group = 0
        if not group:
            raise CompileError(f"layer {node.name!r}: CBUF too small for an int32 "
                               f"transpose's planes")
        ring_rows = lay.staging - lay.ring
        blocks = 4 * int32_words(cfg)[3]
        if blocks * cfg.weight_rows > ring_rows:
            raise CompileError(f"layer {node.name!r}: the weight ring's {ring_rows} rows "
                               f"cannot hold an int32 transpose's {blocks} interleaving "
                               f"blocks of {cfg.weight_rows} rows; use a chip with a "
                               f"larger CBUF, or transpose the tensor outside a "
                               f"convolutional network")
        at = Where32(ident=first, ident_dram=ident_dram["identity"], select=first + R,
                     select_dram=ident_dram["select"], inter=lay.ring,
                     inter_dram=ident_dram["interleave"], slots=first + 2 * R,
                     planes=planes, staging=staging, halves=lay.halves,
                     half_rows=lay.half_rows, a_dram=where[src.name],
                     stored=where[node.outputs[0]], group=group)
        blocks = rule.blocks_int32(cfg, em, index, node.name,
                                   rule.pieces(cfg, src.shape, node.op), at, op)
        emit.bank_holds = [None, None]
        return blocks
    pieces = rule.pieces(cfg, src.shape, node.op)
    ident, slots, staging, tile = _transpose_areas(cfg, lay, pieces)
    if staging + rule.staging_rows(cfg, tile) > lay.top:
        raise CompileError(f"layer {node.name!r}: CBUF too small for a transpose's slots")
    at = Where(ident=ident, ident_dram=ident_dram["identity"], halves=lay.halves,
               half_rows=lay.half_rows, a_dram=where[src.name], ring=slots,
               staging=staging, stored=where[node.outputs[0]], copies=copies, tile=tile)
    blocks = rule.blocks(cfg, em, index, node.name, src.name, pieces, at, op)
    emit.bank_holds = [None, None]      # its WLOADs leave the banks holding no weights
    return blocks


class DramLayout:
    """The DRAM image of a lowered network, placed from word 0 in order: every piece
    a region live for the whole program (``steps`` layers), with its initial words."""

    def __init__(self, cfg: ChipConfig, steps: int):
        self.cfg, self.steps = cfg, steps
        self.cursor = 0
        self.regions: list[Region] = []
        self.pieces: list[tuple[int, np.ndarray]] = []

    def place(self, key: str, words, what: str) -> int:
        """The address of `words` (an image, or a count of words left zero), placed
        next; a CompileError naming `what` if the DRAM is too small."""
        cfg, at = self.cfg, self.cursor
        n = words if isinstance(words, int) else words.shape[0]
        if at + n > cfg.dram_words:
            raise CompileError(f"{what}: DRAM too small by {at + n - cfg.dram_words} "
                               f"words ({n} words; {at} already used); the configured "
                               f"dram_words is {cfg.dram_words}")
        self.regions.append(Region("dram", key, at, n, 0, self.steps - 1, what))
        if not isinstance(words, int):
            self.pieces.append((at, words))
        self.cursor = at + n
        return at

    def image(self) -> np.ndarray:
        """The initial DRAM words ``[0, cursor)``."""
        image = np.zeros((self.cursor, self.cfg.rows), dtype=np.uint8)
        for at, words in self.pieces:
            image[at:at + words.shape[0]] = words
        return image


def _out_words(cfg: ChipConfig, t) -> int:
    shape = as_map(t.shape)
    pixels = shape[0] * shape[1] * shape[2]
    if t.dtype == "int32":
        return layout.blocks(shape[3], cfg.cols) * pixels * cfg.acc_row_words
    return layout.blocks(shape[3], cfg.rows) * pixels
