"""The FPGA top on Verilator: the chip, its block-RAM DRAM and the UART host link,
driven bit by bit from the host's side (cocotb module ``tb_fpga_top.py``)."""

from __future__ import annotations

from functools import partial

import pytest
import tb_fpga_top

from systolica.arch.boards import BOARDS
from systolica.arch.config import preset
from systolica.rtl import verilog
from systolica.rtl.fpga.top import FpgaTop
from systolica.sim import rtlsim, verilated

from block_runner import run_block

pytestmark = pytest.mark.rtl

TOP = "fpga_top"


def build(config: str):
    cfg = preset(config)
    return verilated.build(verilated.component(
        TOP, partial(FpgaTop, cfg=cfg, link=tb_fpga_top.LINK), label=f"fpga-top-{cfg.key}",
        public="top", build_args=tuple(rtlsim.BUILD_ARGS), sources=verilog.sources(cfg),
        make_variables=rtlsim.make_variables()))


def run(config: str, case: str):
    run_block(build(config), TOP, "tb_fpga_top", testcase=case,
              extra_env={"FPGA_TOP_CONFIG": config})


#: The top's own logic (link, bridge, DRAM, lights) does not depend on the array: it
#: is tested on the smallest board's chip, whose build takes a fraction of the others'.
SMALL = "tangnano9k"


@pytest.mark.parametrize("case", ["gemm_runs", "link_errors", "chip_reset"])
def test_fpga_top(case):
    run(SMALL, case)


@pytest.mark.regress
@pytest.mark.parametrize("config", sorted({spec.config for spec in BOARDS.values()}
                                          | {tb_fpga_top.CFG.name} - {SMALL}))
def test_fpga_top_of_each_boards_preset(config):
    run(config, "gemm_runs")


#: The management core's cases need a chip with the core (the Gowin presets have none):
#: the ULX3S's, whose top the regression builds anyway.
CORE = "ulx3s"


@pytest.mark.regress
@pytest.mark.parametrize("case", ["core_busy", "firmware_reports_a_fault", "firmware_runs"])
def test_fpga_top_with_the_management_core(case):
    run(CORE, case)
