"""Block test: one 4 x 4 tile (systolica.rtl.array.Tile)."""

import pytest

import tb_tile
from blocks import build_block, run_block

NAME = "tile"


@pytest.fixture(scope="module")
def build():
    from systolica.rtl.array import Tile
    return build_block(NAME, lambda: Tile(n=tb_tile.N), f"n{tb_tile.N}")


@pytest.mark.parametrize("case", list(tb_tile.CASES))
def test_tile(build, case):
    run_block(build, NAME, "tb_tile", extra_env={"BLOCK_CASE": case})
