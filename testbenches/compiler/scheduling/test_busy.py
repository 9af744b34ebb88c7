"""Busy intervals, the bookkeeping both schedulers share: queries, merging, the
earliest free start, and agreement with a cycle-by-cycle model; and busy banks, the
bank-port bookkeeping, against one set of busy cycles per bank."""

import random

import pytest

from systolica.compiler.scheduling.busy import BusyBanks, BusyIntervals


def busy(*spans):
    b = BusyIntervals()
    for lo, hi in spans:
        b.add(lo, hi)
    return b


@pytest.mark.parametrize("lo, hi, expected", [
    (0, 2, None),         # before everything
    (2, 4, 6),            # overlaps the first interval's start
    (5, 6, 6),            # inside it
    (6, 10, None),        # exactly the gap
    (6, 11, 14),          # one cycle too long for the gap
    (9, 12, 14),          # reaches into the second
    (14, 20, None),       # right after it
])
def test_clash_end(lo, hi, expected):
    b = busy((3, 6), (10, 14))
    assert b.clash_end(lo, hi) == expected
    assert b.is_free(lo, hi) == (expected is None)


def test_touching_and_overlapping_intervals_merge():
    b = busy((10, 14), (3, 6), (6, 8), (12, 20), (30, 31))
    assert list(b) == [(3, 8), (10, 20), (30, 31)] and len(b) == 3
    b.add(8, 10)                       # fills the gap exactly
    assert list(b) == [(3, 20), (30, 31)]
    b.add(0, 40)                       # swallows everything
    assert list(b) == [(0, 40)]


def test_first_free_skips_gaps_that_are_too_short():
    b = busy((0, 2), (4, 5), (7, 9))
    assert b.first_free(0, 1) == 2
    assert b.first_free(0, 2) == 2
    assert b.first_free(0, 3) == 9      # [2, 4) and [5, 7) hold two cycles only
    assert b.first_free(5, 2) == 5
    assert b.first_free(-10, 3) == -10  # negative cycles are cycles too


@pytest.mark.parametrize("lo, hi", [(3, 3), (4, 2), (0.5, 2), (0, None)])
def test_empty_or_non_integer_intervals_are_rejected(lo, hi):
    with pytest.raises(ValueError, match=r"needs integers lo < hi"):
        BusyIntervals().add(lo, hi)
    with pytest.raises(ValueError, match=r"needs integers lo < hi"):
        BusyIntervals().clash_end(lo, hi)


@pytest.mark.parametrize("seed", range(20))
def test_agrees_with_a_set_of_busy_cycles(seed):
    rng = random.Random(seed)
    b, cycles = BusyIntervals(), set()
    for _ in range(40):
        lo = rng.randrange(-20, 200)
        hi = lo + rng.randrange(1, 12)
        b.add(lo, hi)
        cycles.update(range(lo, hi))
        spans = list(b)
        assert all(h < l2 for (_, h), (l2, _) in zip(spans, spans[1:])), spans  # disjoint,
        assert {c for lo_, hi_ in spans for c in range(lo_, hi_)} == cycles     # not touching
        t, n = rng.randrange(-30, 220), rng.randrange(1, 10)
        assert b.is_free(t, t + n) == cycles.isdisjoint(range(t, t + n))
        want = next(s for s in range(t, 300) if cycles.isdisjoint(range(s, s + n)))
        assert b.first_free(t, n) == want


def test_of_cycles_books_what_adding_each_cycle_books():
    rng = random.Random(5)
    for _ in range(50):
        cycles = [rng.randrange(60) for _ in range(rng.randrange(40))]
        one_by_one = BusyIntervals()
        for c in cycles:
            one_by_one.add(c, c + 1)
        assert list(BusyIntervals.of_cycles(cycles)) == list(one_by_one)


def test_bank_claims_merge_into_pieces():
    b = BusyBanks()
    b.add(0, 10, 0b0011)
    b.add(10, 20, 0b0011)                  # touching, same banks: one piece
    b.add(15, 30, 0b0100)                  # overlapping, other banks: cut
    assert list(b) == [(0, 15, 0b0011), (15, 20, 0b0111), (20, 30, 0b0100)]
    assert b.clash_end(12, 18, 0b0100) == 20    # bank 2 is busy in [15, 30)
    assert b.clash_end(0, 40, 0b1000) is None
    assert b.clash_end(30, 31, 0b0111) is None


@pytest.mark.parametrize("seed", range(20))
def test_busy_banks_agree_with_busy_cycles_per_bank(seed):
    rng = random.Random(seed)
    b, cycles = BusyBanks(), [set() for _ in range(6)]
    for _ in range(60):
        lo = rng.randrange(-20, 200)
        hi = lo + rng.randrange(1, 12)
        first = rng.randrange(6)
        banks = range(first, rng.randrange(first, 6) + 1)
        b.add(lo, hi, sum(1 << k for k in banks))
        for k in banks:
            cycles[k].update(range(lo, hi))
        pieces = list(b)
        assert all(h <= l2 for (_, h, _), (l2, _, _) in zip(pieces, pieces[1:]))  # disjoint
        assert all(not (h == l2 and m == m2)           # merged where they can be
                   for (_, h, m), (l2, _, m2) in zip(pieces, pieces[1:]))
        for k in range(6):
            assert {c for lo_, hi_, m in pieces if m >> k & 1 for c in range(lo_, hi_)} \
                == cycles[k]
        t, n = rng.randrange(-30, 220), rng.randrange(1, 10)
        query = rng.randrange(1, 1 << 6)
        busy = [k for k in range(6)
                if query >> k & 1 and not cycles[k].isdisjoint(range(t, t + n))]
        end = b.clash_end(t, t + n, query)
        assert (end is None) == (not busy)
        if end is not None:      # some queried bank stays busy from before t + n to end
            assert any(set(range(min(t + n - 1, end - 1), end)) <= cycles[k] for k in busy)
