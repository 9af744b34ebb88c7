"""Block test: the MAC cell (systolica.rtl.array.Cell)."""

import pytest

import tb_cell
from blocks import build_block, run_block

NAME = "cell"


@pytest.fixture(scope="module")
def build():
    from systolica.rtl.array import Cell
    return build_block(NAME, Cell, "default")


@pytest.mark.parametrize("case", list(tb_cell.CASES))
def test_cell(build, case):
    run_block(build, NAME, "tb_cell", extra_env={"BLOCK_CASE": case})
