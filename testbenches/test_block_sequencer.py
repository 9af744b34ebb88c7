"""Block test: the sequencer of the ``tiny`` preset (systolica.rtl.sequencer.Sequencer)."""

import pytest

import tb_sequencer
from blocks import build_block, run_block

NAME = "sequencer"


INTERVAL = 3   # the second build: SETCFG only on multiples of 3


def _build(interval: int):
    from systolica.rtl.sequencer import Sequencer
    cfg = tb_sequencer.CFG.replace(config_update_interval=interval)
    return build_block(NAME, lambda: Sequencer(cfg=cfg), cfg.key)


@pytest.fixture(scope="module")
def build():
    return _build(1)


@pytest.mark.parametrize("group", [g for g in tb_sequencer.GROUPS if g != "interval"])
def test_sequencer(build, group):
    cases = ",".join(tb_sequencer.GROUPS[group])
    run_block(build, NAME, "tb_sequencer", extra_env={"BLOCK_CASE": cases})


def test_sequencer_update_interval():
    """With an update interval of 3, SETCFG issues on cycles 0, 3, 6 and faults
    CFG_LIMIT on cycle 4."""
    cases = ",".join(tb_sequencer.GROUPS["interval"])
    run_block(_build(INTERVAL), NAME, "tb_sequencer",
              extra_env={"BLOCK_CASE": cases, "SEQ_UPDATE_INTERVAL": str(INTERVAL)})
