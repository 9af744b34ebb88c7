"""Where the map lowering keeps things: feature maps in DRAM (the channel-block and
the replicated layouts, docs/cnn.md), the network's CBUF and ACC layout, and the DRAM
image placed piece by piece."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.arch.instructions import PARAM_ROWS
from systolica.compiler.errors import CompileError
from systolica.compiler.planning import layout
from systolica.compiler.planning.memory import Region

__all__ = ["PARAM_ROWS", "MAP_RING_BLOCKS", "WEIGHT_GROUP", "DramLayout", "Layout",
           "acc_param_rows",
           "as_map", "bank_up", "map_words", "network_layout", "out_words", "pack_map",
           "replicas", "tiles_lo"]

#: Weight blocks one DMA loads (consecutive in DRAM).
WEIGHT_GROUP = 8
#: The weight ring of the map lowering, in blocks: a group loads while one is used.
MAP_RING_BLOCKS = 2 * WEIGHT_GROUP


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


@dataclass
class Layout:
    """Where the streaming program keeps things (CBUF rows, ACC rows). From
    ``staging`` to ``top`` each layer puts its two output staging halves, then its
    two tile buffers (sized per layer:
    :func:`~systolica.compiler.planning.map_tiling.output_tiles`)."""
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
    columns: int = 0                 # output columns per tile: 0, whole output rows;
                                     # else the width is cut too (a layer whose input
                                     # rows do not fit otherwise)
    channels: int = 0                # channel blocks per tile: 0, every one; else a
                                     # channel-wise layer is cut along its channels


def network_layout(cfg: ChipConfig) -> Layout:
    """The network's layout: the weight ring, then the staging and tile buffers to the
    CBUF's top; the accumulator halves, then the epilogue parameter slots."""
    R = cfg.rows
    half = (cfg.acc_depth - 2 * PARAM_ROWS) // 2
    # Layer by layer a tile re-reads its halo (the baseline strategy): nothing is kept
    # for a later pass, so the UBUF's banks serve as tile buffers too.
    top = cfg.cbuf_depth
    # The weight ring (read by the weight loader), the staging (read by the DMA's
    # stores) and the tile buffers (read by the feeder) start at bank boundaries: a
    # CBUF bank has one read port (docs/contract.md, "CBUF banks").
    ring, staging = 0, bank_up(cfg, MAP_RING_BLOCKS * cfg.weight_rows)
    if top - staging < 8 * R:
        raise CompileError(f"chip {cfg.name!r}: CBUF too small for convolution tiles")
    return Layout(ring, staging, top, 0, half, 2 * half)


def bank_up(cfg: ChipConfig, row: int) -> int:
    """The first CBUF bank boundary at or above `row`."""
    return -(-row // cfg.cbuf_bank_rows) * cfg.cbuf_bank_rows


def tiles_lo(cfg: ChipConfig, lay: Layout, stage_half: int) -> int:
    """Where the tile buffers start, beside staging halves of `stage_half` rows."""
    return bank_up(cfg, lay.staging + 2 * stage_half)


class DramLayout:
    """The DRAM image of a lowered network, placed from word ``base`` in order: every
    piece a region live for the whole program (``steps`` layers), with its initial
    words (the image below ``base`` is zeros)."""

    def __init__(self, cfg: ChipConfig, steps: int, base: int = 0):
        self.cfg, self.steps = cfg, steps
        self.cursor = base
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


def out_words(cfg: ChipConfig, t) -> int:
    shape = as_map(t.shape)
    pixels = shape[0] * shape[1] * shape[2]
    if t.dtype == "int32":
        return layout.blocks(shape[3], cfg.cols) * pixels * cfg.acc_row_words
    return layout.blocks(shape[3], cfg.rows) * pixels
