"""Block test: the weight loader of the ``tiny`` preset
(systolica.rtl.matmul.WeightLoader)."""

import pytest

import tb_weight_loader
from blocks import build_block, run_block

NAME = "weight_loader"


@pytest.fixture(scope="module")
def build():
    from systolica.rtl.matmul import WeightLoader
    return build_block(NAME, lambda: WeightLoader(cfg=tb_weight_loader.CFG),
                       tb_weight_loader.CFG.key)


@pytest.mark.parametrize("group", list(tb_weight_loader.GROUPS))
def test_weight_loader(build, group):
    cases = ",".join(tb_weight_loader.GROUPS[group])
    run_block(build, NAME, "tb_weight_loader", extra_env={"BLOCK_CASE": cases})
