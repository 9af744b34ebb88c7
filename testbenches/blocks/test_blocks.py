"""Block tests: every RTL block on its own, driven by its cocotb testbench
(``tb_<block>.py``) and checked against that testbench's reference model.

One row of :data:`BLOCKS` per block (and configuration): the component, the cocotb
module, and the cases, grouped so that each group is one simulator start (a block's
short directed cases all in one). Each row
is built once (:func:`block_runner.build`) and every test of it reuses the build.
"""

from __future__ import annotations

from functools import partial

import pytest
import tb_acc
import tb_cbuf
import tb_cell
import tb_csr
import tb_dma
import tb_fabric_regs
import tb_grid
import tb_grid_lanes
import tb_matmul_unit
import tb_sequencer
import tb_tile
import tb_vpu
import tb_weight_loader

from systolica.rtl.array import Cell, Grid, Tile
from systolica.rtl.cbuf import Acc, Cbuf
from systolica.rtl.csr import RegisterFile
from systolica.rtl.dma import Dma
from systolica.rtl.fabric_regs import FabricRegs
from systolica.rtl.matmul import MatmulUnit, WeightLoader
from systolica.rtl.sequencer import Sequencer
from systolica.rtl.vpu import VectorUnit

from block_runner import Block, run_case
from tb_base import with_acc_read


def together(cases) -> dict[str, tuple[str, ...]]:
    """Every case in one simulator start (a start costs about as much as a case; a
    failure names its cocotb case)."""
    return {"all": tuple(cases)}


def groups(table) -> dict[str, tuple[str, ...]]:
    return {group: tuple(cases) for group, cases in table.items()}


def acc2(cfg):
    """``cfg`` with the ACC's read latency 2; its testbench reads ``ACC_READ_LATENCY``."""
    return with_acc_read(cfg, 2)


ACC2 = {"ACC_READ_LATENCY": "2"}

#: SETCFG only on multiples of this in the sequencer's second build.
INTERVAL = 3
_SEQ = {g: c for g, c in groups(tb_sequencer.GROUPS).items() if g != "interval"}

BLOCKS = [
    Block(name="cell", factory=partial(Cell), tb="tb_cell", cases=together(tb_cell.CASES)),
    Block(name="tile", factory=partial(Tile, n=tb_tile.N), tb="tb_tile",
          cases=together(tb_tile.CASES)),
    Block(name="grid", factory=partial(Grid, cfg=tb_grid.CFG), tb="tb_grid",
          cases=together(tb_grid.CASES)),
    Block(name="grid", variant="lanes", factory=partial(Grid, cfg=tb_grid_lanes.CFG),
          tb="tb_grid_lanes", cases=together(tb_grid_lanes.CASES)),
    Block(name="matmul_unit", factory=partial(MatmulUnit, cfg=tb_matmul_unit.CFG),
          tb="tb_matmul_unit", cases=groups(tb_matmul_unit.GROUPS)),
    # the feed register (ChipConfig.feed_register): every case again, a cycle later
    Block(name="matmul_unit", variant="feed_register", tb="tb_matmul_unit",
          cases=groups(tb_matmul_unit.GROUPS), env={"MATMUL_FEED_REGISTER": "1"},
          factory=partial(MatmulUnit,
                          cfg=tb_matmul_unit.CFG.replace(feed_register=True))),
    # four tile rows (tiny_tall, with its feed register): every partial-sum exit
    Block(name="matmul_unit", variant="tall", tb="tb_matmul_unit",
          cases={"exits": tuple(tb_matmul_unit.GROUPS["exits"])},
          env={"MATMUL_PRESET": tb_matmul_unit.TALL.name},
          factory=partial(MatmulUnit, cfg=tb_matmul_unit.TALL)),
    # the ACC's read latency 2: every case again, each ACC write a cycle later
    Block(name="matmul_unit", variant="acc_read2", tb="tb_matmul_unit",
          cases=groups(tb_matmul_unit.GROUPS), env=ACC2,
          factory=partial(MatmulUnit, cfg=acc2(tb_matmul_unit.CFG))),
    Block(name="weight_loader", factory=partial(WeightLoader, cfg=tb_weight_loader.CFG),
          tb="tb_weight_loader", cases=groups(tb_weight_loader.GROUPS)),
    Block(name="vpu", factory=partial(VectorUnit, cfg=tb_vpu.CFG), tb="tb_vpu",
          cases=together(tb_vpu.CASES)),
    Block(name="vpu", variant="acc_read2", factory=partial(VectorUnit, cfg=acc2(tb_vpu.CFG)),
          tb="tb_vpu", cases=together(tb_vpu.CASES), env=ACC2),
    Block(name="dma", factory=partial(Dma, cfg=tb_dma.CFG), tb="tb_dma",
          cases=together(tb_dma.CASES)),
    Block(name="dma", variant="acc_read2", factory=partial(Dma, cfg=acc2(tb_dma.CFG)),
          tb="tb_dma", cases=together(tb_dma.CASES), env=ACC2),
    # ACC rows padded to whole DRAM words (a 3x1 grid): every case again
    Block(name="dma", variant="padded_rows", tb="tb_dma", cases=together(tb_dma.CASES),
          env={"DMA_PADDED_ROWS": "1"},
          factory=partial(Dma, cfg=tb_dma.PADDED)),
    Block(name="cbuf", factory=partial(Cbuf, cfg=tb_cbuf.CFG, row_reads=tb_cbuf.ROW_READS,
                                       part_reads=tb_cbuf.PART_READS,
                                       row_writes=tb_cbuf.ROW_WRITES),
          tb="tb_cbuf", cases=together(tb_cbuf.CASES)),
    Block(name="acc", factory=partial(Acc, cfg=tb_acc.CFG, row_reads=tb_acc.ROW_READS,
                                      row_writes=tb_acc.ROW_WRITES),
          tb="tb_acc", cases=together(tb_acc.CASES)),
    Block(name="acc", variant="acc_read2", tb="tb_acc", cases=together(tb_acc.CASES), env=ACC2,
          factory=partial(Acc, cfg=acc2(tb_acc.CFG), row_reads=tb_acc.ROW_READS,
                          row_writes=tb_acc.ROW_WRITES)),
    Block(name="csr", factory=partial(RegisterFile, cfg=tb_csr.CFG), tb="tb_csr",
          cases=groups(tb_csr.GROUPS)),
    Block(name="fabric_regs", factory=partial(FabricRegs, cfg=tb_fabric_regs.CFG),
          tb="tb_fabric_regs", cases={"all": tuple(tb_fabric_regs.CASES)}),
    # 132 multiplexers: SETCFG pages 0 and 1
    Block(name="fabric_regs", variant="paged", tb="tb_fabric_regs",
          cases={"all": tuple(tb_fabric_regs.CASES)}, env={"FABRIC_VARIANT": "paged"},
          factory=partial(FabricRegs, cfg=tb_fabric_regs.PAGED)),
    # 134 multiplexers of up to 18 sources: SETCFGW, five pages of 32, 5-bit registers
    Block(name="fabric_regs", variant="wide", tb="tb_fabric_regs",
          cases={"all": tuple(tb_fabric_regs.CASES)}, env={"FABRIC_VARIANT": "wide"},
          factory=partial(FabricRegs, cfg=tb_fabric_regs.WIDE)),
    Block(name="sequencer", tb="tb_sequencer", cases=_SEQ, env={"SEQ_UPDATE_INTERVAL": "1"},
          factory=partial(Sequencer, cfg=tb_sequencer.CFG.replace(config_update_interval=1))),
    # With an update interval of 3, SETCFG issues on cycles 0, 3, 6 and faults
    # CFG_LIMIT on cycle 4.
    Block(name="sequencer", variant=f"interval{INTERVAL}", tb="tb_sequencer",
          cases={"interval": tuple(tb_sequencer.GROUPS["interval"])},
          env={"SEQ_UPDATE_INTERVAL": str(INTERVAL)},
          factory=partial(Sequencer,
                          cfg=tb_sequencer.CFG.replace(config_update_interval=INTERVAL))),
]


@pytest.mark.rtl
@pytest.mark.parametrize("block, case", [
    pytest.param(block, case, id=f"{block.label}-{case}")
    for block in BLOCKS for case in block.cases])
def test_block(block, case):
    run_case(block, case)


# -- the table itself (no simulator) ----------------------------------------------------

def test_every_case_of_every_testbench_runs_once():
    """No case of a ``tb_<block>.py`` is left out of the table, run twice in one row
    (one configuration), or unknown."""
    modules = {block.tb: __import__(block.tb) for block in BLOCKS}
    for tb, module in modules.items():
        known = [*module.CASES, *getattr(module, "SPECIAL", {})]
        listed = set()
        for block in BLOCKS:
            if block.tb == tb:
                row = [c for cases in block.cases.values() for c in cases]
                assert len(set(row)) == len(row) and set(row) <= set(known), block.label
                listed |= set(row)
        assert sorted(listed) == sorted(known), tb


def test_rows_have_distinct_builds_and_ids():
    labels = [block.label for block in BLOCKS]
    assert len(set(labels)) == len(labels)
    keys = {block.design.params for block in BLOCKS}
    assert len(keys) == len(BLOCKS)
