"""Block test: the matmul unit of the ``tiny`` preset (systolica.rtl.matmul.MatmulUnit)."""

import pytest

import tb_matmul_unit
from blocks import build_block, run_block

NAME = "matmul_unit"


@pytest.fixture(scope="module")
def build():
    from systolica.rtl.matmul import MatmulUnit
    return build_block(NAME, lambda: MatmulUnit(cfg=tb_matmul_unit.CFG), tb_matmul_unit.CFG.key)


@pytest.mark.parametrize("group", list(tb_matmul_unit.GROUPS))
def test_matmul_unit(build, group):
    cases = ",".join(tb_matmul_unit.GROUPS[group])
    run_block(build, NAME, "tb_matmul_unit", extra_env={"BLOCK_CASE": cases})
