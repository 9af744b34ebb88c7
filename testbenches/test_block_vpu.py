"""Block test: the vector unit of the ``tiny`` preset (systolica.rtl.vpu.VectorUnit)."""

import pytest

import tb_vpu
from blocks import build_block, run_block

NAME = "vpu"


@pytest.fixture(scope="module")
def build():
    from systolica.rtl.vpu import VectorUnit
    return build_block(NAME, lambda: VectorUnit(cfg=tb_vpu.CFG), tb_vpu.CFG.key)


@pytest.mark.parametrize("case", list(tb_vpu.CASES))
def test_vpu(build, case):
    run_block(build, NAME, "tb_vpu", extra_env={"BLOCK_CASE": case})
