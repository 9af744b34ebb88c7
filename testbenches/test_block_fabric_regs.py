"""Block test: the fabric configuration registers of the ``tiny`` preset
(systolica.rtl.fabric_regs.FabricRegs)."""

import pytest

import tb_fabric_regs
from blocks import build_block, run_block

NAME = "fabric_regs"


@pytest.fixture(scope="module")
def build():
    from systolica.rtl.fabric_regs import FabricRegs
    return build_block(NAME, lambda: FabricRegs(cfg=tb_fabric_regs.CFG), tb_fabric_regs.CFG.key)


def test_fabric_regs(build):
    run_block(build, NAME, "tb_fabric_regs",
              extra_env={"BLOCK_CASE": ",".join(tb_fabric_regs.CASES)})
