"""A hand-written latency-insensitive chip program (``examples/gemm_tiny.stp``),
compiled from its text, runs on the RTL: the product equals numpy and the golden
model, and the chip's cycle counter equals the compiler's prediction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import run_on_rtl
from systolica import golden
from systolica.arch import timing
from systolica.compiler.stp import compile_file
from systolica.arch.config import preset

pytestmark = pytest.mark.rtl

CFG = preset("tiny")
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gemm_tiny.stp"


def test_gemm_program_text_on_rtl():
    chip = compile_file(CFG, EXAMPLE).chip
    rng = np.random.default_rng(11)
    a = rng.integers(-128, 128, (8, 8), dtype=np.int8)
    w = rng.integers(-128, 128, (8, 8), dtype=np.int8)
    dram = np.zeros((CFG.dram_words, CFG.rows), np.uint8)
    dram[0:8], dram[64:72] = a.view(np.uint8), w.view(np.uint8)
    res = run_on_rtl(CFG, chip.image, dram, readback=[(128, 32)])
    got = res["readback"][0].reshape(8, 32).view("<i4")
    np.testing.assert_array_equal(got, a.astype(np.int64) @ w.astype(np.int64))
    gold = golden.run(CFG, chip.image, dram)
    np.testing.assert_array_equal(res["readback"][0], gold.dram[128:160])
    assert res["cycles"] == gold.cycles == timing.run_cycles(CFG, chip.program)
