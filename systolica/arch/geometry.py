"""The array's geometry in cycles: register stages along rows and columns. The RTL
builds its skew registers from these, and both views of the instruction timing
(:mod:`.instructions`) count with them."""

from __future__ import annotations

from .config import ChipConfig


def skew(cfg: ChipConfig, i: int) -> int:
    """Register stages from the array edge to cell ``i`` along a row or column: one per
    cell, plus one conveyor register per tile boundary crossed."""
    return i + i // cfg.tile_size


def skew_max(cfg: ChipConfig) -> int:
    return skew(cfg, cfg.rows - 1)


def weight_shifts(cfg: ChipConfig) -> int:
    """Shifts to fill one weight bank: one per cell row plus one per tile conveyor."""
    return skew(cfg, cfg.rows - 1) + 1


def feed_stages(cfg: ChipConfig) -> int:
    """Registers between a MATMUL row's CBUF data and the array's west edge: the
    feed register when the chip has one (``ChipConfig.feed_register``)."""
    return int(cfg.feed_register)


def matmul_pipeline(cfg: ChipConfig) -> int:
    """Cycles from a MATMUL's issue to the accumulator read of its first row:
    CBUF read (1), the feed register (0 or 1), row skew, cell stages across the
    array, the psum conveyor out of the last tile row (1), column de-skew, and the
    edge registers (2)."""
    return cfg.latency["cbuf_read"] + feed_stages(cfg) + 2 * skew_max(cfg) + 3
