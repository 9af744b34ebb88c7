"""Hand-written latency-insensitive chip programs, compiled from their text, run on the
RTL: the products equal numpy and the golden model, and the chip's cycle counter equals
the compiler's prediction. ``examples/gemm_tiny.stp`` is one GEMM;
``examples/reroute_tiny.stp`` sets one multiplexer twice for two MATMULs (the second
setting used to land before the first MATMUL and give wrong sums)."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch import timing
from systolica.arch.config import preset
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode
from systolica.compiler.frontend.stp import compile_file

from chip_runs import run_many_on_rtl
from paths import EXAMPLES

pytestmark = pytest.mark.rtl

CFG = preset("tiny")

PERM = np.r_[4:8, 0:4]          # west_feed swapped: tile row 0 gets partitions 4..7


def _blocks(seed: int, count: int):
    rng = np.random.default_rng(seed)
    return [rng.integers(-128, 128, (8, 8), dtype=np.int8) for _ in range(count)]


def _dram(blocks_at: dict[int, np.ndarray]) -> np.ndarray:
    dram = np.zeros((CFG.dram_words, CFG.rows), np.uint8)
    for at, block in blocks_at.items():
        dram[at:at + len(block)] = block.view(np.uint8)
    return dram


def _cases():
    a, w = _blocks(11, 2)
    ra, rw1, rw2 = _blocks(12, 3)
    wide = lambda x: x.astype(np.int64)
    return {
        "gemm_tiny": (_dram({0: a, 64: w}), wide(a) @ wide(w)),
        "reroute_tiny": (_dram({0: ra, 64: rw1, 72: rw2}),
                         np.vstack([wide(ra[:, PERM]) @ wide(rw1), wide(ra) @ wide(rw2)])),
    }


@pytest.fixture(scope="module")
def runs():
    cases = _cases()
    chips = {name: compile_file(CFG, EXAMPLES / f"{name}.stp").chip for name in cases}
    jobs = [dict(program=chips[name].image, dram=dram, name=name,
                 readback=[(128, len(want) * CFG.acc_row_words)])
            for name, (dram, want) in cases.items()]
    results = run_many_on_rtl(CFG, jobs)
    return {name: (chips[name], cases[name], res) for name, res in zip(cases, results)}


@pytest.mark.parametrize("name", ["gemm_tiny", "reroute_tiny"])
def test_program_text_on_rtl(runs, name):
    chip, (dram, want), res = runs[name]
    assert res.error_name == "NONE"
    got = res.readback[0].reshape(len(want), 4 * CFG.cols).view("<i4")
    np.testing.assert_array_equal(got, want)
    gold = golden.run(CFG, Loadable.for_chip(CFG, chip.image, dram))
    assert gold.error is ErrorCode.NONE
    np.testing.assert_array_equal(res.readback[0],
                                  gold.dram[128:128 + len(want) * CFG.acc_row_words])
    assert res.cycles == gold.cycles == timing.run_cycles(CFG, chip.program)
