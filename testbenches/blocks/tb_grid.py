"""Grid (``tiny`` preset: 2 x 2 tiles of 4 x 4): full weight loads through the north
chains and the west chains (tiles with ``w_west``; the transposed load) including the
tile conveyor registers, and skewed matrix products, against a
numpy model that follows the port-multiplexer semantics of ``docs/contract.md``.

Timing (from :mod:`systolica.arch.timing`): a load shifts ``weight_shifts`` cycles; the
value driven on ``north_w[c]`` at shift ``k`` ends in the cell row ``r`` with
``skew(r) == weight_shifts - 1 - k``, and the shift that lands in a conveyor register
carries junk the array must not keep. Activation row ``m`` enters array row ``r`` at
``s + m + skew(r)``; column ``c``'s sum leaves ``south_psum[c]`` at
``s + m + skew_max + skew(c) + 2`` (the last cell's register and the psum conveyor);
tile row ``i``'s partial sums (``exit_psum[i*C + c]``, ``i < T - 1``: rows above
``(i+1)*n`` only) ``(T-1-i)*(n+1)`` cycles sooner.
"""

from __future__ import annotations

import random

import cocotb
import numpy as np
from tb_tile import Plan

from systolica.arch import timing
from systolica.arch.config import preset

from tb_base import BlockTB, requested_cases, wrap32

CFG = preset("tiny")
T, n, R, C = CFG.tile_rows, CFG.tile_size, CFG.rows, CFG.cols


def tile_bits(tiles) -> int:
    """Control word of act_sel / w_sel / psum_sel: one bit per tile ``(i, j)`` at
    ``i*T + j``."""
    return sum(1 << (i * T + j) for i, j in tiles)


class GridModel:
    """``west``: tiles whose cells take the west weight lane (``w_west``); a lane
    passes data between two tiles only if both take it."""

    def __init__(self, act_zero=(), w_zero=(), psum_zero=(), west=()):
        self.act_zero, self.w_zero, self.psum_zero = set(act_zero), set(w_zero), set(psum_zero)
        self.west = set(west)
        self.banks = [np.zeros((R, C), dtype=np.int64) for _ in range(2)]

    def effective_weights(self, w: np.ndarray, w_west: np.ndarray | None = None) -> np.ndarray:
        eff = w.astype(np.int64).copy()
        for r in range(R):
            for c in range(C):
                i, j = r // n, c // n
                if (i, j) in self.west:
                    live = all((i, jj) in self.west for jj in range(j + 1))
                    eff[r][c] = w_west[r][c] if live and w_west is not None else 0
                elif any((ii, j) in self.w_zero or (ii, j) in self.west
                         for ii in range(i + 1)):
                    eff[r][c] = 0
        return eff

    def load(self, plan: Plan, start: int, bank: int, w: np.ndarray, rng,
             w_west: np.ndarray | None = None) -> int:
        """Shift `w` in from the north and, if given, `w_west` from the west (its
        column ``c`` ends in array column ``c``)."""
        shifts = timing.weight_shifts(CFG)
        row_at = {timing.skew(CFG, r): r for r in range(R)}
        for k in range(shifts):
            t = start + k
            plan.drive(t, "w_shift", 1)
            plan.drive(t, "w_bank", bank)
            stage = shifts - 1 - k
            for c in range(C):
                value = w[row_at[stage]][c] if stage in row_at else rng.randrange(-128, 128)
                plan.drive(t, ("north_w", c), value)
            if w_west is not None:
                for r in range(R):
                    value = (w_west[r][row_at[stage]] if stage in row_at
                             else rng.randrange(-128, 128))
                    plan.drive(t, ("west_w", r), value)
        self.banks[bank] = self.effective_weights(w, w_west)
        return start + shifts

    def product(self, a_row: np.ndarray, bank: int, exit_row: int = T - 1) -> list[int]:
        """The column sums leaving tile row ``exit_row``."""
        out = []
        for c in range(C):
            j = c // n
            i0 = max([i for i in range(exit_row + 1) if (i, j) in self.psum_zero],
                     default=0)
            total = 0
            for r in range(n * i0, n * (exit_row + 1)):
                seen = all((r // n, jj) not in self.act_zero for jj in range(j + 1))
                if seen:
                    total += int(a_row[r]) * int(self.banks[bank][r][c])
            out.append(wrap32(total))
        return out

    def stream(self, plan: Plan, start: int, a: np.ndarray, sel: list[int]) -> int:
        smax = timing.skew_max(CFG)
        for m in range(a.shape[0]):
            for r in range(R):
                t = start + m + timing.skew(CFG, r)
                plan.drive(t, ("west_a", r), a[m][r])
                plan.drive(t, ("west_sel", r), sel[m])
            for c, want in enumerate(self.product(a[m], sel[m])):
                plan.expect(start + m + smax + timing.skew(CFG, c) + 2, ("south_psum", c), want)
            for i in range(T - 1):
                for c, want in enumerate(self.product(a[m], sel[m], i)):
                    plan.expect(start + m + smax + timing.skew(CFG, c) + 2
                                - (T - 1 - i) * (n + 1), ("exit_psum", i * C + c), want)
        return start + a.shape[0] + 2 * smax + 3


def plan_gemm(rng, act_zero=(), w_zero=(), psum_zero=(), rows=12):
    plan, model = Plan(), GridModel(act_zero, w_zero, psum_zero)
    rand = lambda *shape: np.array(
        rng.choices(range(-128, 128), k=int(np.prod(shape)))).reshape(shape)
    t = model.load(plan, 0, 0, rand(R, C), rng)
    t = model.load(plan, t, 1, rand(R, C), rng)
    t = model.stream(plan, t + 1, rand(rows, R), [rng.randrange(2) for _ in range(rows)])
    # Reload bank 1 and use it: the second load replaces every cell of the bank.
    t = model.load(plan, t, 1, rand(R, C), rng)
    t = model.stream(plan, t, rand(rows, R), [1] * rows)
    for key, tiles in (("act_sel", act_zero), ("w_sel", w_zero), ("psum_sel", psum_zero)):
        plan.hold(0, t, key, tile_bits(tiles))
    return plan


def plan_west(rng, west, w_zero=(), rows=10):
    """Weights from both edges at once, the tiles in `west` taking the west lane."""
    plan, model = Plan(), GridModel(w_zero=w_zero, west=west)
    rand = lambda *shape: np.array(
        rng.choices(range(-128, 128), k=int(np.prod(shape)))).reshape(shape)
    t = model.load(plan, 0, 0, rand(R, C), rng, rand(R, C))
    t = model.load(plan, t, 1, rand(R, C), rng, rand(R, C))
    t = model.stream(plan, t + 1, rand(rows, R), [rng.randrange(2) for _ in range(rows)])
    plan.hold(0, t, "w_sel", tile_bits(w_zero))
    plan.hold(0, t, "w_west", tile_bits(west))
    return plan


ALL_TILES = [(i, j) for i in range(T) for j in range(T)]


def plan_extremes(rng):
    """All -128 activations and weights: 8 * 16384 per column, no overflow, exact."""
    plan, model = Plan(), GridModel()
    w = np.full((R, C), -128)
    t = model.load(plan, 0, 0, w, rng)
    a = np.array([[-128] * R, [127] * R, [-128, 127] * (R // 2)])
    model.stream(plan, t, a, [0, 0, 0])
    return plan


CASES = {
    "gemm": lambda rng: plan_gemm(rng),
    "extremes": plan_extremes,
    "act_zero_tile00": lambda rng: plan_gemm(rng, act_zero=[(0, 0)]),
    "act_zero_tile01": lambda rng: plan_gemm(rng, act_zero=[(0, 1)]),
    "act_zero_tile10": lambda rng: plan_gemm(rng, act_zero=[(1, 0)]),
    "w_zero_tile00": lambda rng: plan_gemm(rng, w_zero=[(0, 0)]),
    "w_zero_tile11": lambda rng: plan_gemm(rng, w_zero=[(1, 1)]),
    "psum_zero_tile10": lambda rng: plan_gemm(rng, psum_zero=[(1, 0)]),
    "psum_zero_tile01": lambda rng: plan_gemm(rng, psum_zero=[(0, 1)]),
    "mixed": lambda rng: plan_gemm(rng, act_zero=[(1, 1)], w_zero=[(1, 0)],
                                   psum_zero=[(1, 1)]),
    "west_all": lambda rng: plan_west(rng, ALL_TILES),
    "west_row1": lambda rng: plan_west(rng, [(1, 0), (1, 1)]),
    "west_behind_north": lambda rng: plan_west(rng, [(0, 1), (1, 0), (1, 1)]),
    "west_beside_zero": lambda rng: plan_west(rng, [(0, 0), (1, 1)], w_zero=[(0, 1)]),
}

INPUT_KEYS = ([(p, k) for p in ("west_a", "west_sel") for k in range(R)]
              + [("north_w", c) for c in range(C)] + [("west_w", r) for r in range(R)]
              + ["w_shift", "w_bank", "act_sel", "w_sel", "psum_sel", "w_west"])
OUTPUTS = [("south_psum", c) for c in range(C)] + [("exit_psum", k)
                                                   for k in range((T - 1) * C)]


class GridTB(BlockTB):
    async def run(self, plan: Plan) -> None:
        await self.run_plan(plan.inputs, plan.expected, INPUT_KEYS, OUTPUTS,
                            {"south_psum", "exit_psum"})


@cocotb.test()
@cocotb.parametrize(case=requested_cases())
async def run_case(dut, case):
    tb = GridTB(dut)
    plan = CASES[case](random.Random(case))
    assert len(plan.expected) >= 3 * C
    await tb.run(plan)
    tb.finish()
