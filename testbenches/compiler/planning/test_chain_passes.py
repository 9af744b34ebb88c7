"""Chained layers in passes with and without the overlap buffer (compiler/planning/chain_passes.py):
seed 001's two worked examples, and random chains executed pass by pass from the
plan alone -- each step may use only the rows the plan says are in DRAM, in the CBUF
from this pass or in the UBUF -- against a direct numpy computation of the chain."""

from __future__ import annotations

import numpy as np
import pytest

from systolica.compiler import CompileError
from systolica.compiler.planning.chain_passes import Axis, listing, sizes, ubuf_peak_rows
from systolica.compiler.planning.chain_passes import plan_passes as plan
from systolica.compiler.planning.tiling import halo

SEED_CHAIN = [Axis(7, pad_before=3, pad_after=3), Axis(5, pad_before=2, pad_after=2)]


def test_seed_two_layer_example():
    """16 rows, 7x7 pad 3 then 5x5 pad 2, two passes of 8 output rows."""
    base = plan(16, SEED_CHAIN, 8, ubuf=False)
    assert [[(s.read, s.computed) for s in p] for p in base] == [[(13, 10), (10, 8)]] * 2
    kept = plan(16, SEED_CHAIN, 8, ubuf=True)
    (a0, b0), (a1, b1) = kept
    assert (a0.read, a0.computed, a0.cropped) == (13, 10, 4)      # conv0 + crop 4 rows
    assert (b0.read, b0.fetched, b0.computed) == (10, 0, 8)
    assert (a1.read, a1.computed, a1.fetched) == (9, 6, 0)        # conv0(dram 9 -> 6)
    assert (b1.read - b1.fetched, b1.fetched, b1.computed) == (6, 4, 8)   # cbuf 6 + ubuf 4
    assert a0.crop == b1.fetch == (6, 10)
    # pass 1 reads 30 % less from DRAM and its first layer computes 40 % fewer rows
    assert (base[1][0].read - a1.read) / base[1][0].read == pytest.approx(4 / 13)
    assert (base[1][0].computed - a1.computed) / base[1][0].computed == pytest.approx(0.4)
    assert listing(kept, ["conv0", "conv1"]).splitlines() == [
        "pass 0: conv0(dram 13 -> 10), crop 4 -> ubuf",
        "pass 0: conv1(cbuf 10 -> 8)",
        "pass 1: conv0(dram 9 -> 6)",
        "pass 1: fetch+conv1(cbuf 6 + ubuf 4 -> 8)"]
    assert ubuf_peak_rows(kept) == [4, 0]


def test_seed_four_layer_chain_in_three_passes():
    """An input layer and three chained layers in three passes: the first two keep
    their halo in the UBUF pass to pass; the last, whose output goes to DRAM, never
    uses it. With the UBUF every row of every layer is computed once, and only the
    first layer's own input halo (2 rows per boundary) is read twice."""
    chain = [Axis(3, pad_before=1, pad_after=1)] * 3
    passes = plan(24, chain, 8, ubuf=True)
    assert len(passes) == 3
    for p, steps in enumerate(passes):
        first, second, third = steps
        assert (first.crop is not None, second.crop is not None) == (p < 2, p < 2)
        assert (second.fetch is not None, third.fetch is not None) == (p > 0, p > 0)
        assert third.crop is None
    for k, n in enumerate(sizes(24, chain)[1:]):
        assert sum(s[k].computed for s in passes) == n
    assert sum(s[0].read for s in passes) == 24 + 2 * halo(3)
    base = plan(24, chain, 8, ubuf=False)
    assert sum(s[0].read for s in base) == 24 + 2 * 3 * halo(3)    # the chain's halo


# -- executing a plan ---------------------------------------------------------------
def _reference(x: np.ndarray, chain: list[Axis], weights: list[np.ndarray]) -> np.ndarray:
    """The chain as 1-D convolutions along the cut axis, zero padding, numpy only."""
    for ax, w in zip(chain, weights):
        xp = np.concatenate([np.zeros(ax.pad_before, np.int64), x,
                             np.zeros(ax.pad_after, np.int64)])
        n = (len(xp) - (ax.kernel - 1) * ax.dilation - 1) // ax.stride + 1
        x = np.array([sum(int(w[j]) * int(xp[o * ax.stride + j * ax.dilation])
                          for j in range(ax.kernel)) for o in range(n)], dtype=np.int64)
    return x


def _execute(x: np.ndarray, chain: list[Axis], weights: list[np.ndarray], passes):
    """Run the plan. Each layer's CBUF rows last one pass; UBUF rows last until
    fetched. A row a step needs but the plan did not provide raises KeyError."""
    size = sizes(len(x), chain)
    ubuf: dict[tuple[int, int], int] = {}
    out: dict[int, int] = {}
    dram_reads = 0
    computed: list[list[int]] = [[] for _ in chain]     # rows, each time computed
    for steps in passes:
        cbuf: dict[int, dict[int, int]] = {}
        for s in steps:
            k, ax = s.layer, chain[s.layer]
            if s.compute is None:
                continue
            rows: dict[int, int] = {}
            for r in range(*(s.reads or (0, 0))):
                if k == 0:
                    rows[r] = int(x[r])
                    dram_reads += 1
                elif s.fetch is not None and s.fetch[0] <= r < s.fetch[1]:
                    rows[r] = ubuf[(k - 1, r)]
                else:
                    rows[r] = cbuf[k - 1][r]
            mine = {}
            for o in range(*s.compute):
                total = 0
                for j in range(ax.kernel):
                    i = o * ax.stride - ax.pad_before + j * ax.dilation
                    if 0 <= i < size[k]:
                        total += int(weights[k][j]) * rows[i]
                mine[o] = total
                computed[k].append(o)
            if s.crop is not None:
                for r in range(*s.crop):
                    ubuf[(k, r)] = mine[r]
            cbuf[k] = mine
            if k == len(chain) - 1:
                assert not set(mine) & set(out), "an output row computed twice"
                out.update(mine)
    assert sorted(out) == list(range(size[-1]))
    return np.array([out[o] for o in range(size[-1])], dtype=np.int64), dram_reads, computed


def _random_chain(rng) -> tuple[int, list[Axis]]:
    while True:
        chain = []
        for _ in range(int(rng.integers(1, 5))):
            kernel = int(rng.integers(1, 8))
            chain.append(Axis(kernel, stride=int(rng.integers(1, 3)),
                              dilation=int(rng.integers(1, 3)),
                              pad_before=int(rng.integers(0, kernel)),
                              pad_after=int(rng.integers(0, kernel))))
        in_size = int(rng.integers(8, 60))
        try:
            n = sizes(in_size, chain)
        except CompileError:
            continue
        if n[-1] >= 2:
            return in_size, chain


@pytest.mark.parametrize("seed", range(60))
def test_random_chains_agree_with_numpy_and_the_baseline(seed):
    rng = np.random.default_rng(seed)
    in_size, chain = _random_chain(rng)
    x = rng.integers(-9, 10, in_size)
    weights = [rng.integers(-3, 4, ax.kernel) for ax in chain]
    want = _reference(x, chain, weights)
    per = int(rng.integers(1, len(want) + 1))
    base = plan(in_size, chain, per, ubuf=False)
    kept = plan(in_size, chain, per, ubuf=True)
    got_base, reads_base, macs_base = _execute(x, chain, weights, base)
    got_kept, reads_kept, macs_kept = _execute(x, chain, weights, kept)
    assert np.array_equal(got_base, want) and np.array_equal(got_kept, want)
    assert reads_kept <= reads_base
    # with the UBUF no layer computes a row twice
    assert all(len(rows) == len(set(rows)) for rows in macs_kept)
    assert all(len(a) <= len(b) for a, b in zip(macs_kept, macs_base))


def test_a_plan_that_drops_its_crops_cannot_run():
    """The executor is a real check: the same plan without its crops fails."""
    from dataclasses import replace
    kept = plan(16, SEED_CHAIN, 8, ubuf=True)
    broken = [[replace(s, crop=None) for s in p] for p in kept]
    x = np.arange(16)
    with pytest.raises(KeyError):
        _execute(x, SEED_CHAIN, [np.ones(7, np.int64), np.ones(5, np.int64)], broken)


@pytest.mark.parametrize("call, words", [
    (lambda: plan(16, [], 8, ubuf=True), ["at least one layer"]),
    (lambda: plan(16, SEED_CHAIN, 0, ubuf=True), ["outputs per pass", "positive integer"]),
    (lambda: plan(4, [Axis(3), Axis(7)], 1, ubuf=False), ["chain layer 1", "kernel of 7"]),
])
def test_bad_chains_say_what_is_wrong(call, words):
    with pytest.raises(CompileError) as err:
        call()
    for w in words:
        assert w in str(err.value)
