"""Generalisation (seed 000, paragraphs 113-115, 155): one invocation found by the
search -> a :class:`Mapping` for the whole layer. The row inputs' grid gives the
reduction dims on the rows and their extents; the sampled columns (``0, 1, C-1``)
tell how far the column walk reaches; the stream takes its dims whole. The tiling
factors are ``ceil(size / extent)`` per mapped dim (:func:`tiling`); the other dims are
loops around the invocation."""

from __future__ import annotations

import math

from systolica.compiler.matching.csp import Dummy, Solution
from systolica.compiler.matching.mapping import Axis, Mapping
from systolica.compiler.matching.workloads import Workload


def generalise(sol: Solution, workload: Workload, rows: int, cols: int) -> Mapping:
    asset = sol.asset
    ext = {}
    if sol.grid is not None:
        shape = sol.grid.shape()
        for i, d in enumerate(asset.rows):
            ext[d] = shape.get(i, 1)
    row_axes = tuple(Axis(d, ext.get(d, 1)) for d in asset.rows if ext.get(d, 1) > 1)
    if not row_axes:
        row_axes = (Axis(asset.rows[-1], 1),)
    if asset.col_extents:
        col_axes = tuple(Axis(d, e) for d, e in asset.col_extents if e > 1)
    else:
        last = [v for k, v in sol.assignment.items()
                if k[0] == "+" and k[1] == 0 and k[2] == cols - 1]
        full = bool(last) and not isinstance(last[0], Dummy)
        (d,) = asset.cols
        col_axes = (Axis(d, cols if full else min(cols, workload.size(d))),)
    stream = tuple(Axis(d, workload.size(d)) for d in asset.stream)
    layout = asset.layout
    if layout == "replicated" and all(a.dim == "c" for a in row_axes):
        layout = "blocks"               # one tap: the replicas are not used
    return Mapping(row_axes, col_axes, stream, layout, "matcher")


def tiling(mapping: Mapping, workload: Workload) -> dict:
    """dim -> how many invocations cover it (``ceil(size / extent)``); the dims on no
    axis loop over their whole size."""
    sizes = dict(zip(workload.dims, workload.sizes))
    if "t" in mapping.dims("rows"):
        sizes = dict(zip(workload.fused().dims, workload.fused().sizes))
    return {d: math.ceil(s / mapping.extent(d)) for d, s in sizes.items()}


def utilisation(mapping: Mapping, workload: Workload, rows: int, cols: int) -> float:
    """The share of the array's MACs an invocation does useful work with (ragged
    tiles counted): real rows x real columns / (R x C), averaged over the tiles."""
    sizes = dict(zip(workload.dims, workload.sizes))
    if "t" in mapping.dims("rows"):
        sizes = dict(zip(workload.fused().dims, workload.fused().sizes))

    def useful(axes):
        # mean over tiles of the real points: size / (tiles * extent) per axis
        frac = 1.0
        for a in axes:
            s = sizes.get(a.dim, 1)
            frac *= s / (math.ceil(s / a.extent) * a.extent)
        return frac * math.prod(a.extent for a in axes)
    diag = math.prod(a.extent for a in mapping.rows if a.dim == "g")
    # block-diagonal: only the groups' own blocks do useful work
    return useful(mapping.rows) * useful(mapping.cols) / diag / (rows * cols)
