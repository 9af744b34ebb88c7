"""Compiled GEMMs and MLPs on the Verilated tiny chip: outputs equal numpy and the
golden model bit for bit, and the cycle counter equals the compiler's prediction.

All cases run in one simulator process (one module-scoped batch); each case is then
checked by its own test.
"""

from __future__ import annotations

import pytest

from systolica.app.demo import mlp
from systolica.arch.config import preset

from chip_runs import case_table, random_gemm

pytestmark = pytest.mark.rtl

CFG = preset("tiny")


_gemm = random_gemm


CASES = {
    # random shapes, fixed seeds
    "rand_13x20x11": lambda: _gemm(13, 20, 11, 1),
    "rand_32x24x16_relu": lambda: _gemm(32, 24, 16, 2, relu=True),
    "rand_21x17x29_int32": lambda: _gemm(21, 17, 29, 3, int32=True),
    "rand_40x8x8_nobias": lambda: _gemm(40, 8, 8, 4, bias=False),
    # edge shapes
    "one_1x1x1": lambda: _gemm(1, 1, 1, 5),
    "one_1x1x1_int32": lambda: _gemm(1, 1, 1, 6, int32=True),
    "k_much_larger_4x100x8": lambda: _gemm(4, 100, 8, 7),
    "n_not_tile_9x16x13": lambda: _gemm(9, 16, 13, 8),
    "m_one_1x32x20": lambda: _gemm(1, 32, 20, 9),
    "m_one_int32_relu": lambda: _gemm(1, 19, 9, 10, int32=True, relu=True),
    "m_over_acc_half_300x12x10": lambda: _gemm(300, 12, 10, 11),
    # chains
    "mlp_demo": lambda: mlp(),
    "mlp_m1": lambda: mlp(batch=1, widths=(20, 9, 17), seed=12),
}


runs, test_outputs_match_numpy_and_golden, test_cycles_and_counters_match_prediction = \
    case_table(CFG, CASES)
