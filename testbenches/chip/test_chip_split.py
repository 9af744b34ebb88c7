"""Dense layers split into tile groups (docs/compiler.md, "Splitting the array") on the
Verilated chips: outputs equal numpy and the golden model bit for bit, the counters
equal the compiler's prediction, and the split runs take fewer cycles than the same
layer on the whole array.

The tiny chip's 2x2 grid splits into 2 diagonal groups of 4x4 cells (K, N <= 4);
tiny_tall's 4x2 grid into 2 groups of 8 rows x 4 columns (K <= 8, N <= 4). A chain
of dense layers splits as one (K <= 4 after the first layer on tiny_tall). Smaller K
and N split further, into groups smaller than a tile (``split.cell_groups``): 8 groups
of one cell and 4 of 2x2 on tiny, 4 of 4 rows x 2 columns on tiny_tall.
"""

from __future__ import annotations

import pytest

from systolica.app import demo
from systolica.arch.config import preset

from chip_runs import (
    assert_matches_prediction,
    assert_outputs_match,
    compile_and_run_on_rtl,
    random_gemm,
)

pytestmark = pytest.mark.rtl


_gemm = random_gemm


TINY_CASES = {
    # M odd: the second group's last row is padding, dropped on the way out
    "split_37x3x4": lambda: _gemm(37, 3, 4, 1),
    "whole_37x3x4": (lambda: _gemm(37, 3, 4, 1), dict(split=1)),
    # 300 rows a group over 127-row passes: the input's two buffers, the weights loaded
    # once for every pass, the bias slots reused
    "split_600x4x4_int32_relu": lambda: _gemm(600, 4, 4, 2, int32=True, relu=True),
    "whole_600x4x4_int32_relu": (lambda: _gemm(600, 4, 4, 2, int32=True, relu=True),
                                 dict(split=1)),
    "split_301x2x3_nobias": lambda: _gemm(301, 2, 3, 3, bias=False),
    "split_2x1x1": (lambda: _gemm(2, 1, 1, 4), dict(split={"g2x1x1": 2})),
    # a chain of three dense layers split as one, each reading the one before's packed
    # output on chip (docs/contract.md, "Split dense layers")
    "split_chain_101x3x4x4x2": lambda: _chain(101, (3, 4, 4, 2)),
    "whole_chain_101x3x4x4x2": (lambda: _chain(101, (3, 4, 4, 2)), dict(split=1)),
    # 125 rows a group, in two passes of 63 (plan.dense_passes); unsplit, 250 rows on
    # chip (more than the accumulator's half) in four passes of 63
    "split_chain_250x4x3x2": lambda: _chain(250, (4, 3, 2)),
    "whole_chain_250x4x3x2": (lambda: _chain(250, (4, 3, 2)), dict(split=1)),
    # groups smaller than a tile: one cell each, 2x2 cells, and a chain in 2x2 cells
    "cells_37x1x1_int32": lambda: _gemm(37, 1, 1, 6, int32=True),
    "tiles_37x1x1_int32": (lambda: _gemm(37, 1, 1, 6, int32=True),
                           dict(split={"g37x1x1": 2})),
    "cells_101x2x2": lambda: _gemm(101, 2, 2, 7),
    "cells_chain_60x2x2x1x2": lambda: _chain(60, (2, 2, 1, 2)),
    "tiles_chain_60x2x2x1x2": (lambda: _chain(60, (2, 2, 1, 2)), dict(split={"fc1": 2})),
    # 3 groups of 2x2 cells, which divide neither side: the packed outputs in 6 columns
    "cells_chain_90x2x2x2_in_3": (lambda: _chain(90, (2, 2, 2)), dict(split={"fc1": 3})),
}
TALL_CASES = {
    "split_tall_50x8x4": lambda: _gemm(50, 8, 4, 5),
    "whole_tall_50x8x4": (lambda: _gemm(50, 8, 4, 5), dict(split=1)),
    # the second layer's groups at C/s = 4 columns, the first's at R/s = 8
    "split_chain_tall_60x8x4x3": lambda: _chain(60, (8, 4, 3)),
    "whole_chain_tall_60x8x4x3": (lambda: _chain(60, (8, 4, 3)), dict(split=1)),
    "cells_tall_200x4x2": lambda: _gemm(200, 4, 2, 8),
    "tiles_tall_200x4x2": (lambda: _gemm(200, 4, 2, 8), dict(split={"g200x4x2": 2})),
}
#: the groups each case runs in: 2 unless named here or whole (1)
GROUPS = {"cells_37x1x1_int32": 8, "cells_101x2x2": 4, "cells_chain_60x2x2x1x2": 4,
          "cells_tall_200x4x2": 4, "cells_chain_90x2x2x2_in_3": 3}


def _chain(M, widths):
    return demo.mlp(batch=M, widths=widths, seed=M, name=f"chain{M}")


@pytest.fixture(scope="module")
def tiny_runs():
    return compile_and_run_on_rtl(preset("tiny"), TINY_CASES)


@pytest.fixture(scope="module")
def tall_runs():
    return compile_and_run_on_rtl(preset("tiny_tall"), TALL_CASES)


@pytest.mark.parametrize("chip, runs, name",
                         [("tiny", "tiny_runs", n) for n in TINY_CASES]
                         + [("tiny_tall", "tall_runs", n) for n in TALL_CASES])
def test_split_gemm_on_the_rtl(request, chip, runs, name):
    compiled, res = request.getfixturevalue(runs)[name]
    assert {l.split for l in compiled.layers} == \
        {GROUPS.get(name, 1 if name.startswith("whole") else 2)}
    assert_outputs_match(preset(chip), compiled, res)
    assert_matches_prediction(preset(chip), compiled, res)


@pytest.mark.parametrize("runs, split, whole", [
    ("tiny_runs", "split_37x3x4", "whole_37x3x4"),
    ("tiny_runs", "split_600x4x4_int32_relu", "whole_600x4x4_int32_relu"),
    ("tall_runs", "split_tall_50x8x4", "whole_tall_50x8x4"),
    ("tiny_runs", "split_chain_101x3x4x4x2", "whole_chain_101x3x4x4x2"),
    ("tiny_runs", "split_chain_250x4x3x2", "whole_chain_250x4x3x2"),
    ("tall_runs", "split_chain_tall_60x8x4x3", "whole_chain_tall_60x8x4x3"),
    # more groups than tiles: fewer cycles and words than the tiles' groups
    ("tiny_runs", "cells_37x1x1_int32", "tiles_37x1x1_int32"),
    ("tiny_runs", "cells_chain_60x2x2x1x2", "tiles_chain_60x2x2x1x2"),
    ("tall_runs", "cells_tall_200x4x2", "tiles_tall_200x4x2"),
])
def test_the_split_takes_fewer_cycles_on_the_rtl(request, runs, split, whole):
    runs = request.getfixturevalue(runs)
    assert runs[split][1].cycles < runs[whole][1].cycles
    # ... and reads and writes fewer DRAM words: s rows share a word
    assert runs[split][1].dram_rd_bytes < runs[whole][1].dram_rd_bytes
    assert runs[split][1].dram_wr_bytes < runs[whole][1].dram_wr_bytes
