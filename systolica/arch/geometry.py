"""The array's geometry in cycles: register stages along rows and columns. The RTL
builds its skew registers from these, and both views of the instruction timing
(:mod:`.instructions`) count with them."""

from __future__ import annotations

from systolica.arch.config import ChipConfig


def skew(cfg: ChipConfig, i: int) -> int:
    """Register stages from the array edge to cell ``i`` along a row or column: one per
    cell, plus one conveyor register per tile boundary crossed."""
    return i + i // cfg.tile_size


def skew_max(cfg: ChipConfig) -> int:
    """Stages to the farthest cell along the array's longer side (columns on a wide
    grid): the collector de-skews every column to it."""
    return skew(cfg, max(cfg.rows, cfg.cols) - 1)


def array_span(cfg: ChipConfig) -> int:
    """Stages from a row's entry at the west edge to its de-skewed sums: down the
    ``R`` rows, then across to the longer side (``2 * skew_max`` on a square or tall
    array)."""
    return skew(cfg, cfg.rows - 1) + skew_max(cfg)


def weight_shifts(cfg: ChipConfig) -> int:
    """Shifts to fill one weight bank: one per weight row (``cfg.weight_rows``: the
    north chain's cells down a column, or on a wide grid the west chain's along a row)
    plus one per tile conveyor."""
    return skew(cfg, cfg.weight_rows - 1) + 1


def feed_stages(cfg: ChipConfig) -> int:
    """Registers between a MATMUL row's CBUF data and the array's west edge: the
    feed register when the chip has one (``ChipConfig.feed_register``)."""
    return int(cfg.feed_register)


def matmul_pipeline(cfg: ChipConfig) -> int:
    """Cycles from a MATMUL's issue to the accumulator read of its first row:
    CBUF read (1), the feed register (0 or 1), row skew, cell stages across the
    array, the psum conveyor out of the last tile row (1), column de-skew, and the
    edge registers (2)."""
    return cfg.latency["cbuf_read"] + feed_stages(cfg) + array_span(cfg) + 3


def route_span_max(cfg: ChipConfig) -> int:
    """The longest span a ``ROUTE`` may have, and the depth of the lane router's delay
    lines: the general lanes' longest route without a detour (``Tc - 1`` eastbound
    registers and ``T`` southbound) fits, within the span field's delays (7)."""
    return min(cfg.tile_rows + cfg.tile_cols, (1 << 3) - 1)
