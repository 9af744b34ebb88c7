"""RunningMax and RunningMaxes (the reorder check's and the scheduler's per-address
bounds) against a plain per-address array, over random queries and raises:
whole-resource, one-address and range accesses, on a resource kept as a list and on
one kept in numpy."""

import numpy as np
import pytest

from systolica.compiler.microops.running_max import SMALL, RunningMax, RunningMaxes


@pytest.mark.parametrize("size", [1, 8, SMALL, SMALL + 1, 1000])
@pytest.mark.parametrize("initial", [0, -1])
def test_matches_per_address_array(size, initial):
    rng = np.random.default_rng(size * 7 + initial)
    fast = RunningMax(size, initial)
    plain = np.full(size, initial, dtype=np.int64)
    for _ in range(3000):
        shape = rng.integers(3)
        if shape == 0:
            lo, hi = 0, size
        elif shape == 1:
            lo = int(rng.integers(size))
            hi = lo + 1
        else:
            lo = int(rng.integers(size))
            hi = int(rng.integers(lo + 1, size + 1))
        if rng.integers(2):
            value = int(rng.integers(-5, 10_000))
            fast.raise_to(lo, hi, value)
            np.maximum(plain[lo:hi], value, out=plain[lo:hi])
        else:
            assert fast.max(lo, hi) == int(plain[lo:hi].max()), (lo, hi)


def test_whole_raise_then_partial_query():
    """A floor raised by a whole-resource access holds for every single address."""
    r = RunningMax(200)
    r.raise_to(0, 200, 50)
    r.raise_to(10, 20, 70)
    assert r.max(0, 5) == 50
    assert r.max(15, 16) == 70
    assert r.max(0, 200) == 70


@pytest.mark.parametrize("size", [1, 8, SMALL, SMALL + 1, 1000])
@pytest.mark.parametrize("initial", [0, -1])
def test_columns_match_per_address_arrays(size, initial):
    rng = np.random.default_rng(size * 11 + initial)
    fast = RunningMaxes(size, 3, initial)
    plain = np.full((3, size), initial, dtype=np.int64)
    for _ in range(3000):
        shape = rng.integers(3)
        if shape == 0:
            lo, hi = 0, size
        elif shape == 1:
            lo = int(rng.integers(size))
            hi = lo + 1
        else:
            lo = int(rng.integers(size))
            hi = int(rng.integers(lo + 1, size + 1))
        if rng.integers(2):
            first = int(rng.integers(3))
            columns = slice(first, int(rng.integers(first + 1, 4)))
            value = int(rng.integers(-5, 10_000))
            fast.raise_to(lo, hi, columns, value)
            np.maximum(plain[columns, lo:hi], value, out=plain[columns, lo:hi])
        else:
            column = int(rng.integers(3))
            assert fast.max(lo, hi, column) == int(plain[column, lo:hi].max()), \
                (lo, hi, column)
