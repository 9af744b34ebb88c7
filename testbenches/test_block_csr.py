"""Block test: the register file of the ``tiny`` preset (systolica.rtl.csr.RegisterFile)."""

import pytest

import tb_csr
from blocks import build_block, run_block

NAME = "csr"


@pytest.fixture(scope="module")
def build():
    from systolica.rtl.csr import RegisterFile
    return build_block(NAME, lambda: RegisterFile(cfg=tb_csr.CFG), tb_csr.CFG.key)


@pytest.mark.parametrize("group", list(tb_csr.GROUPS))
def test_csr(build, group):
    run_block(build, NAME, "tb_csr", extra_env={"BLOCK_CASE": ",".join(tb_csr.GROUPS[group])})
