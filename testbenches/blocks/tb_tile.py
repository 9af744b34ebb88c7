"""Tile (n = 4): weights shifted in from the north, skewed activations from the west,
partial sums out of the south edge and activations out of the east edge, and the
three port multiplexers' zero sources.

A case builds a :class:`Plan`: the inputs of every cycle and the outputs expected at
given cycles, from a numpy model of what the tile computes:

* a load of bank ``b`` shifts ``n`` cycles with ``north_w[c]`` = row ``n-1-k`` at
  shift ``k``; the old contents of the bank leave through ``south_w`` bottom row
  first, one cycle after they leave the bottom cell;
* activation row ``m`` enters lane ``r`` at cycle ``s + m + r`` and its partial sum
  at column ``c`` at cycle ``s + m + c``; ``south_psum[c]`` shows
  ``north_psum + sum_r a[r] * w[bank][r][c]`` (int32) at ``s + m + n + c + 1``, and
  ``east_a[r]`` shows the activation at ``s + m + r + n + 1``.
"""

from __future__ import annotations

import random

import cocotb
import numpy as np

from tb_base import BlockTB, requested_cases, wrap32

N = 4


class Plan:
    """Inputs per cycle (absent keys idle at 0) and expected outputs."""

    def __init__(self):
        self.inputs: list[dict] = []
        self.expected: list[tuple[int, tuple, int]] = []

    def drive(self, cycle: int, key, value: int) -> None:
        while len(self.inputs) <= cycle:
            self.inputs.append({})
        self.inputs[cycle][key] = int(value)

    def expect(self, cycle: int, key, value: int) -> None:
        self.expected.append((cycle, key, int(value)))

    def hold(self, first: int, last: int, key, value: int) -> None:
        for t in range(first, last + 1):
            self.drive(t, key, value)


class TileModel:
    """What the tile computes, with its multiplexer settings."""

    def __init__(self, act_zero: bool, w_zero: bool, psum_zero: bool):
        self.act_zero, self.w_zero, self.psum_zero = act_zero, w_zero, psum_zero
        self.banks = [np.zeros((N, N), dtype=np.int64) for _ in range(2)]

    def load(self, plan: Plan, start: int, bank: int, w: np.ndarray) -> None:
        """Shift ``w`` into ``bank`` from cycle ``start``; expect the bank's old
        contents on the south lane."""
        old = self.banks[bank]
        for k in range(N):
            plan.drive(start + k, "w_shift", 1)
            plan.drive(start + k, "w_bank", bank)
            for c in range(N):
                plan.drive(start + k, ("north_w", c), w[N - 1 - k][c])
                plan.expect(start + k + 1, ("south_w", c), old[N - 1 - k][c])
        self.banks[bank] = np.zeros_like(w) if self.w_zero else w.astype(np.int64)

    def stream(self, plan: Plan, start: int, a: np.ndarray, sel: list[int],
               psum: np.ndarray) -> int:
        """Skewed rows from ``start``; returns the first cycle after the last output."""
        for m in range(a.shape[0]):
            for r in range(N):
                plan.drive(start + m + r, ("west_a", r), a[m][r])
                plan.drive(start + m + r, ("west_sel", r), sel[m])
                seen_a = 0 if self.act_zero else a[m][r]
                seen_sel = 0 if self.act_zero else sel[m]
                plan.expect(start + m + r + N + 1, ("east_a", r), seen_a)
                plan.expect(start + m + r + N + 1, ("east_sel", r), seen_sel)
            a_seen = np.zeros(N, dtype=np.int64) if self.act_zero else a[m].astype(np.int64)
            w = self.banks[0 if self.act_zero else sel[m]]
            for c in range(N):
                plan.drive(start + m + c, ("north_psum", c), psum[m][c])
                total = int(a_seen @ w[:, c]) + (0 if self.psum_zero else int(psum[m][c]))
                plan.expect(start + m + N + c + 1, ("south_psum", c), wrap32(total))
        return start + a.shape[0] + 2 * N + 2


def _weights(rng):
    return np.array([[rng.randrange(-128, 128) for _ in range(N)] for _ in range(N)])


def _acts(rng, rows):
    return np.array([[rng.randrange(-128, 128) for _ in range(N)] for _ in range(rows)])


def _psums(rng, rows, big=False):
    lim = 1 << 31 if big else 1 << 20
    return np.array([[rng.randrange(-lim, lim) for _ in range(N)] for _ in range(rows)])


def plan_matmul(rng, act_zero=False, w_zero=False, psum_zero=False, rows=10):
    """Load both banks, stream rows that pick a bank each, reload bank 0 (its old
    contents leave south) and stream again."""
    plan, model = Plan(), TileModel(act_zero, w_zero, psum_zero)
    model.load(plan, 0, 0, _weights(rng))
    model.load(plan, N, 1, _weights(rng))
    t = model.stream(plan, 2 * N + 1, _acts(rng, rows),
                     [rng.randrange(2) for _ in range(rows)], _psums(rng, rows))
    model.load(plan, t, 0, _weights(rng))
    t = model.stream(plan, t + N, _acts(rng, rows), [0] * rows, _psums(rng, rows, big=True))
    # Settings are static: extend them over the whole plan.
    for key, v in (("act_sel", act_zero), ("w_sel", w_zero), ("psum_sel", psum_zero)):
        plan.hold(0, t + 2, key, int(v))
    return plan


def plan_load_while_computing(rng):
    """Rows use bank 1 while bank 0 is being loaded; then rows use the new bank 0."""
    plan, model = Plan(), TileModel(False, False, False)
    model.load(plan, 0, 1, _weights(rng))
    start = N + 1
    rows = 8
    a, ps = _acts(rng, rows), _psums(rng, rows)
    model.load(plan, start + 1, 0, _weights(rng))   # overlaps the stream below
    # The stream is computed with bank 1, whose contents do not change meanwhile.
    t = model.stream(plan, start, a, [1] * rows, ps)
    model.stream(plan, t, _acts(rng, rows), [0] * rows, _psums(rng, rows))
    plan.hold(0, len(plan.inputs) + 2, "psum_sel", 0)
    return plan


CASES = {
    "lanes": lambda rng: plan_matmul(rng),
    "act_zero": lambda rng: plan_matmul(rng, act_zero=True),
    "w_zero": lambda rng: plan_matmul(rng, w_zero=True),
    "psum_zero": lambda rng: plan_matmul(rng, psum_zero=True),
    "load_while_computing": plan_load_while_computing,
}

OUTPUTS = ([("east_a", r) for r in range(N)] + [("east_sel", r) for r in range(N)]
           + [("south_w", c) for c in range(N)] + [("south_psum", c) for c in range(N)])
SIGNED = {"east_a", "south_w", "south_psum"}
INPUT_KEYS = ([(p, k) for p in ("west_a", "west_sel", "north_w", "north_psum")
               for k in range(N)] + ["w_shift", "w_bank", "act_sel", "w_sel", "psum_sel"])


class TileTB(BlockTB):
    async def run(self, plan: Plan) -> None:
        await self.run_plan(plan.inputs, plan.expected, INPUT_KEYS, OUTPUTS, SIGNED)


@cocotb.test()
@cocotb.parametrize(case=requested_cases())
async def run_case(dut, case):
    tb = TileTB(dut)
    plan = CASES[case](random.Random(case))
    assert len(plan.expected) > 50
    await tb.run(plan)
    tb.finish()
