"""Block test: the tile grid of the ``tiny`` preset (systolica.rtl.array.Grid)."""

import pytest

import tb_grid
from blocks import build_block, run_block

NAME = "grid"


@pytest.fixture(scope="module")
def build():
    from systolica.rtl.array import Grid
    return build_block(NAME, lambda: Grid(cfg=tb_grid.CFG), tb_grid.CFG.key)


@pytest.mark.parametrize("case", list(tb_grid.CASES))
def test_grid(build, case):
    run_block(build, NAME, "tb_grid", extra_env={"BLOCK_CASE": case})
