"""Compiled graphs on the Verilated tiny chip: a fan-out with a join and several
outputs (int8 and int32) comes back from DRAM equal to numpy and the golden model,
in the predicted number of cycles; a second graph whose layers reach only tile row
and column 0 runs with the other feeds set to zero."""

from __future__ import annotations

import numpy as np
import pytest

from systolica.arch.config import preset
from systolica.compiler import GraphBuilder

from chip_runs import case_table

pytestmark = pytest.mark.rtl

CFG = preset("tiny")


def fan_out_join(M: int, width: int, seed: int, name: str):
    rng = np.random.default_rng(seed)

    def w(k, n):
        return rng.integers(-128, 128, (k, n))

    g = GraphBuilder(name)
    x = g.input(rng.integers(-128, 128, (M, width)), name="x")
    h = g.dense(x, w(width, width + 4), rng.integers(-4000, 4000, width + 4), mult=150,
                shift=15, zp=-2, relu=True, name="trunk")
    a = g.dense(h, w(width + 4, 11), rng.integers(-4000, 4000, 11), mult=300, shift=15,
                zp=3, name="head")
    g.dense(h, w(width + 4, 6), out_dtype="int32", relu=True, name="wide")
    j = g.dense([h, x, a], w(2 * width + 15, 9), mult=90, shift=16, name="join")
    return g.build(a, "wide", j)


def quarter_tiles():
    """Every K-block and N-block within tile row 0 and tile column 0."""
    rng = np.random.default_rng(3)
    g = GraphBuilder("quarter_tiles")
    x = g.input(rng.integers(-128, 128, (7, 3)), name="x")
    h = g.dense(x, rng.integers(-128, 128, (3, 4)), mult=60, shift=9, zp=2, relu=True,
                name="h")
    a = g.dense(h, rng.integers(-128, 128, (4, 2)), rng.integers(-99, 99, 2), mult=50,
                shift=9, name="a")
    g.dense([h, x], rng.integers(-128, 128, (7, 4)), out_dtype="int32", name="j")
    return g.build(a, "j")


CASES = {
    "fan_out_join": lambda: fan_out_join(12, 20, 1, "fan_out_join"),
    "quarter_tiles": quarter_tiles,
}


runs, test_outputs_match_numpy_and_golden, test_cycles_and_counters_match_prediction = \
    case_table(CFG, CASES)
