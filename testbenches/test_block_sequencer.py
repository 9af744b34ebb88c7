"""Block test: the sequencer of the ``tiny`` preset (systolica.rtl.sequencer.Sequencer)."""

import pytest

import tb_sequencer
from blocks import build_block, run_block

NAME = "sequencer"


@pytest.fixture(scope="module")
def build():
    from systolica.rtl.sequencer import Sequencer
    return build_block(NAME, lambda: Sequencer(tb_sequencer.CFG), tb_sequencer.CFG.key)


@pytest.mark.parametrize("group", list(tb_sequencer.GROUPS))
def test_sequencer(build, group):
    cases = ",".join(tb_sequencer.GROUPS[group])
    run_block(build, NAME, "tb_sequencer", extra_env={"BLOCK_CASE": cases})
