"""The FPGA top on Verilator: the chip, its block-RAM DRAM and the UART host link,
driven bit by bit from the host's side (cocotb module ``tb_fpga_top.py``)."""

from __future__ import annotations

from functools import partial

import pytest

import tb_fpga_top
from blocks import run_block
from systolica.rtl.fpga.top import FpgaTop
from systolica.sim import rtlsim, verilated

pytestmark = pytest.mark.rtl

TOP = "fpga_top"


@pytest.fixture(scope="module")
def fpga_top_build():
    cfg = tb_fpga_top.CFG
    return verilated.build(verilated.component(
        TOP, partial(FpgaTop, cfg=cfg, link=tb_fpga_top.LINK), label=f"fpga-top-{cfg.key}",
        public="top", build_args=tuple(rtlsim.BUILD_ARGS),
        make_variables=rtlsim.MAKE_VARIABLES))


@pytest.mark.parametrize("case", ["gemm_runs", "link_errors", "chip_reset"])
def test_fpga_top(fpga_top_build, case):
    run_block(fpga_top_build, TOP, "tb_fpga_top", testcase=case)
