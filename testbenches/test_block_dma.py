"""Block test: the DMA engine of the ``tiny`` preset (systolica.rtl.dma.Dma)."""

import pytest

import tb_dma
from blocks import build_block, run_block

NAME = "dma"


@pytest.fixture(scope="module")
def build():
    from systolica.rtl.dma import Dma
    return build_block(NAME, lambda: Dma(cfg=tb_dma.CFG), tb_dma.CFG.key)


@pytest.mark.parametrize("case", list(tb_dma.CASES))
def test_dma(build, case):
    run_block(build, NAME, "tb_dma", extra_env={"BLOCK_CASE": case})
