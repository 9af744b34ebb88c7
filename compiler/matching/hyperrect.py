"""The hyper-rectangle propagator (seed 000, paragraphs 139-150, Fig. 5): the values of
an ordered group of ``n`` variables must form an axis-aligned grid, walked in mixed-radix
order (innermost dimension fastest), each dimension with its own stride.

Walking the assigned prefix tells the grid: the first step fixes the innermost
dimension and its stride; the same *basic step* repeats until a *dimension jump* (back
to the start of the inner dimensions, one stride along a new or an outer dimension),
which closes the inner dimension's extent: from then on every outer step must come
after exactly that many inner ones. The bounding box follows: a closed dimension spans
its extent, the open outermost one at most ``n / (product of the closed extents)``
strides; values outside it are pruned. Until the first jump nothing can be pruned
along the open dimension when ``n`` exceeds the domain (Fig. 5a-b); the fifth pick of
Fig. 5c closes x at 4 and bounds y by 16 / 4.

With dummies allowed (the group's tail may be padding) the real prefix must still be
a complete grid and at most ``n`` points."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Grid:
    """``dims`` innermost first, with ``strides`` and ``extents`` (None: still open,
    only the outermost can be), ``counts`` the walk's current mixed-radix position."""
    origin: tuple
    dims: list
    strides: list
    extents: list
    counts: list

    def shape(self) -> dict:
        """dim -> extent of the (complete) grid, the open dim at its current count."""
        return {d: (e if e is not None else c + 1)
                for d, e, c in zip(self.dims, self.extents, self.counts)}


def _axis_step(delta: tuple) -> tuple[int, int] | None:
    nz = [(i, v) for i, v in enumerate(delta) if v]
    if len(nz) != 1 or nz[0][1] <= 0:
        return None
    return nz[0]


def walk(points: list[tuple], *, dense: bool = False) -> Grid | None:
    """The grid the ordered `points` are a prefix of, None if they are not one
    (`dense`: every stride 1, the seed's density constraint)."""
    if not points:
        return None
    p0 = points[0]
    g = Grid(p0, [], [], [], [])
    for p in points[1:]:
        if not _advance(g, p) or (dense and any(s != 1 for s in g.strides)):
            return None
    return g


def _position(g: Grid, counts: list) -> tuple:
    pos = list(g.origin)
    for d, s, c in zip(g.dims, g.strides, counts):
        pos[d] += s * c
    return tuple(pos)


def _advance(g: Grid, p: tuple) -> bool:
    # try the mixed-radix successors: increment dim j, reset the inner ones
    for j in range(len(g.dims)):
        counts = [0] * j + [g.counts[j] + 1] + g.counts[j + 1:]
        if g.extents[j] is not None and counts[j] >= g.extents[j]:
            continue                           # dim j is full: carry outwards
        if any(g.extents[i] is not None and g.counts[i] + 1 != g.extents[i]
               for i in range(j)):
            return False                        # an inner dim jumped before it filled
        if _position(g, counts) == p:
            for i in range(j):
                if g.extents[i] is None:
                    g.extents[i] = g.counts[i] + 1   # the jump closes the inner dim
            g.counts = counts
            return True
        if g.extents[j] is None:
            break                               # an open dim: a new outer dim next
    # a new outermost dimension: all current ones must be at their last position
    for i in range(len(g.dims)):
        if g.extents[i] is None:
            g.extents[i] = g.counts[i] + 1
        elif g.counts[i] + 1 != g.extents[i]:
            return False
    base = _position(g, [0] * len(g.dims))
    step = _axis_step(tuple(a - b for a, b in zip(p, base)))
    if step is None or step[0] in g.dims:
        return False
    g.dims.append(step[0])
    g.strides.append(step[1])
    g.extents.append(None)
    g.counts = [0] * (len(g.dims) - 1) + [1]
    return True


def bounds(points: list[tuple], n: int, *, dense: bool = False) -> dict | None:
    """Inclusive ``{axis index: (lo, hi)}`` the remaining values of a group of `n`
    variables must lie in, given its assigned prefix `points` (None: not a grid)."""
    g = walk(points, dense=dense)
    if g is None:
        return None
    box = {}
    closed = math.prod(e for e in g.extents if e is not None)
    for d, s, e in zip(g.dims, g.strides, g.extents):
        count = e if e is not None else max(1, n // closed)
        box[d] = (g.origin[d], g.origin[d] + s * (count - 1))
    return box


def prune(points: list[tuple], n: int, values: list[tuple]) -> list[tuple]:
    """`values` inside the bounding box of the prefix `points` (seed Fig. 5)."""
    box = bounds(points, n)
    if box is None:
        return []
    return [v for v in values if all(lo <= v[d] <= hi for d, (lo, hi) in box.items())]


def complete(points: list[tuple], n: int, *, dummies: bool = False,
             dense: bool = False) -> Grid | None:
    """The grid when `points` (the real values of all `n` variables, dummies left out)
    form a complete one: every dimension full; without `dummies` exactly `n` points."""
    g = walk(points, dense=dense)
    if g is None:
        if len(points) == 1:
            return Grid(points[0], [], [], [], [])
        return None
    if math.prod(g.shape().values()) != len(points) or len(points) > n:
        return None
    for i, e in enumerate(g.extents):
        if e is not None and i < len(g.dims) - 1 and g.counts[i] + 1 != e:
            return None
    if not dummies and len(points) != n:
        return None
    return g
