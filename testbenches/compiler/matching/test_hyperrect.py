"""The hyper-rectangle propagator (compiler/matching/hyperrect.py): the seed's Fig. 5
and the grid walk's rules."""

from __future__ import annotations

import pytest

from systolica.compiler.matching import hyperrect

#: Fig. 5: a domain of points ``(y, x)`` (the tuples lexicographic, x fastest) whose x
#: extent is 8, and 16 variables that must form an axis-aligned grid.
DOMAIN = [(y, x) for y in range(5) for x in range(8)]
PICKS = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
#: The point Fig. 5c removes: the first beyond y's bound 16 / 4.
POINT_533 = (4, 0)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_fig5_no_pruning_over_the_first_four_picks(k):
    # along x the open dim could still reach 16 > 8: nothing is outside the box yet
    assert hyperrect.prune(PICKS[:k], 16, DOMAIN) == DOMAIN


def test_fig5_the_fifth_pick_bounds_y_and_removes_533():
    left = hyperrect.prune(PICKS, 16, DOMAIN)
    assert hyperrect.bounds(PICKS, 16) == {1: (0, 3), 0: (0, 3)}   # x closed at 4, y < 16/4
    assert POINT_533 in DOMAIN and POINT_533 not in left
    assert left == [(y, x) for y in range(4) for x in range(4)]
    # Fig. 5d: the rest map onto that 4 x 4 grid
    g = hyperrect.complete(left, 16)
    assert g is not None and g.shape() == {1: 4, 0: 4}


@pytest.mark.parametrize("points, ok", [
    ([(0, 0), (0, 2), (0, 4)], True),                  # stride 2 along x
    ([(0, 0), (1, 1)], False),                         # a diagonal first step
    ([(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)], False),  # the second row runs longer
    ([(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0)], False),  # jumps before filling
    ([(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)], True),
])
def test_walk(points, ok):
    assert (hyperrect.walk(points) is not None) == ok


def test_density_forbids_strides():
    assert hyperrect.walk([(0, 0), (0, 2)], dense=True) is None


def test_complete_with_dummies():
    rows = [(g, c) for g in range(5) for c in range(3)]      # 15 of 16 rows real
    assert hyperrect.complete(rows, 16) is None
    assert hyperrect.complete(rows, 16, dummies=True).shape() == {1: 3, 0: 5}
    assert hyperrect.complete(rows[:-1], 16, dummies=True) is None   # a ragged grid
