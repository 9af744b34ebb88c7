"""What a layer is to the tile loop of the map lowering (docs/cnn.md): a
:class:`Job` of weight steps per output block over its sources, with the epilogue
the vector unit applies; and the window geometry the matmul unit walks."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from systolica.arch import isa
from systolica.arch.config import ChipConfig
from systolica.arch.instructions import PARAM_ROWS
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.ops import Conv2d
from systolica.compiler.lowering.maps.layout import as_map
from systolica.compiler.planning import layout


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
    mapping: object = None           # a convolution's matching.Mapping (docs/matching.md)


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


def stage_parts(cfg: ChipConfig, job: Job) -> int:
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


def tap_list(kernel, dilation) -> list[tuple[int, int]]:
    return [(kh * dilation[0], kw * dilation[1]) for kh in range(kernel[0])
            for kw in range(kernel[1])]


def channel_params(cfg, name: str, op: Conv2d, x_zp: int, w_sum: np.ndarray,
                    width: int) -> np.ndarray:
    """A convolution's VRUN parameter rows (``params = 1``), per N-block of `width`
    output channels (N-block ``n`` holds channels ``n*width ..``): bias, multiplier,
    shift and clamp, each row ``cfg.cols`` wide. docs/cnn.md: acc = bias + sum (x -
    x_zp) * w; the array sums x * w over the input padded with x_zp, so the bias
    absorbs ``- x_zp * w_sum`` (`w_sum` per output channel)."""
    channels = len(w_sum)
    bias = np.zeros(channels, dtype=np.int64) if op.bias is None else op.bias.astype(np.int64)
    bias = bias - x_zp * w_sum
    fits_int32(name, bias)
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


def fits_int32(name: str, values: np.ndarray) -> None:
    if values.size and (values.min() < -(1 << 31) or values.max() >= 1 << 31):
        raise CompileError(f"layer {name!r}: the bias with the input zero point folded "
                           f"in does not fit int32; use smaller weights or zero point")


def identity_steps(cfg, C, taps, scale_per_src: list[int]
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


def picks_rows(job: Job) -> bool:
    """A one-row kernel with a row stride reads only every ``sh``-th input row: a tile
    then loads just those rows, one DMA each, and walks them with row stride 1."""
    return job.kernel[0] == 1 and job.stride[0] > 1 and job.pads[0] == job.pads[2] == 0


def input_rows(job: Job, oh0: int, oh1: int) -> tuple[int, int]:
    """Input rows ``[lo, hi)`` output rows ``[oh0, oh1)`` read (inside the map); for a
    row-picking layer (:func:`picks_rows`) ``hi - lo`` is the number it loads."""
    if picks_rows(job):
        return oh0, oh1
    H = job.sources[0].shape[1]
    sh, pt = job.stride[0], job.pads[0]
    ext = (job.kernel[0] - 1) * job.dilation[0] + 1
    lo = oh0 * sh - pt
    hi = (oh1 - 1) * sh - pt + ext
    return max(lo, 0), min(hi, H)


def input_cols(job: Job, W: int, ow0: int, ow1: int) -> tuple[int, int]:
    """Input columns ``[lo, hi)`` of a source `W` pixels wide that a tile of output
    columns ``[ow0, ow1)`` loads: the whole input row for a tile of every output
    column, else the columns those output columns read (inside the map; docs/cnn.md,
    "Layers wider than the CBUF")."""
    if ow0 == 0 and ow1 == job.out_shape[2]:
        return 0, W
    sw, pl = job.stride[1], job.pads[1]
    ext = (job.kernel[1] - 1) * job.dilation[1] + 1
    return max(ow0 * sw - pl, 0), min((ow1 - 1) * sw - pl + ext, W)


def channel_wise(cfg: ChipConfig, job: Job) -> bool:
    """Whether every N-block of `job` reads, of every source, only the channel block it
    writes (pools, depthwise convolutions, Add: :func:`diagonal_span` N-blocks): such
    a layer may be cut along its channels (docs/cnn.md, "Channel-wise layers deeper
    than the CBUF")."""
    R = cfg.rows
    span = job.span or R
    if span > R or R % span or job.out_dtype != "int8":
        return False
    if any(s.copies > 1 or s.gather is not None for s in job.sources):
        return False
    return all(st.cb == nb * span // R for nb, steps in enumerate(job.steps) for st in steps)


def group_blocks(job: Job, group: tuple[int, int] | None) -> list[int]:
    """The N-blocks a tile of channel blocks ``group = (cb0, cb1)`` computes (None: a
    tile of every channel block, all of them)."""
    if group is None:
        return list(range(len(job.steps)))
    return [nb for nb, steps in enumerate(job.steps) if group[0] <= steps[0].cb < group[1]]


def check_window(job: Job) -> None:
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


@dataclass
class MapInputs:
    """What a rule reads to make its layer's job: the chip, the graph, and what the
    views before the layer left (``alias``: a Flatten's output -> the map it views;
    ``gathered``: a flattened map's ``(pixels, channel blocks)``; ``copies``: a map's
    replicas in the replicated layout; ``mapping``: the mapping mode, docs/matching.md)."""
    cfg: ChipConfig
    graph: object
    copies: dict = field(default_factory=dict)
    mapping: str | None = None
    alias: dict = field(default_factory=dict)
    gathered: dict = field(default_factory=dict)

    def sources(self, node, *, through_views: bool = True) -> list[Source]:
        """The layer's inputs as sources: each the map it views (with `through_views`;
        else the tensor itself, as a dense layer reads a flattened map)."""
        return [Source(t, as_map(self.graph.tensor(self.alias.get(t, t) if through_views
                                                   else t).shape),
                       self.copies.get(t, 1), gather=self.gathered.get(t))
                for t in node.inputs]
