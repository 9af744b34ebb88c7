"""The bitstream build's pieces that need no FPGA tools: the PLL settings and the
reading of nextpnr's log into the report."""

from __future__ import annotations

import pytest

from systolica.app import bitstream
from systolica.arch.boards import BOARDS
from systolica.arch.config import preset
from systolica.rtl.fpga.clocks import ecp5_pll_dividers

NEXTPNR_LOG = """\
Info: Device utilisation:
Info: 	          TRELLIS_IO:     7/  365     1%
Info: 	        TRELLIS_COMB:  9000/83640    10%
Info: Device utilisation:
Info: 	          TRELLIS_IO:     7/  365     1%
Info: 	        TRELLIS_COMB: 12345/83640    14%
Info: 	          TRELLIS_FF:  6789/83640     8%
Info: 	              DP16KD:   143/  208    68%
Info: Max frequency for clock '$glbnet$clk': 48.00 MHz (FAIL at 50.00 MHz)
Info: Max frequency for clock '$glbnet$clk': 55.25 MHz (PASS at 50.00 MHz)
"""


@pytest.mark.parametrize("input_hz, output_hz", [(25e6, 50e6), (25e6, 62.5e6),
                                                 (27e6, 54e6), (12e6, 48e6)])
def test_pll_makes_the_frequency_exactly_with_the_vco_in_range(input_hz, output_hz):
    d = ecp5_pll_dividers(int(input_hz), int(output_hz))
    assert input_hz / d["CLKI_DIV"] * d["CLKFB_DIV"] == output_hz
    assert 400e6 <= output_hz * d["CLKOP_DIV"] <= 800e6


def test_pll_refuses_what_it_cannot_make():
    with pytest.raises(ValueError, match="no ECP5 PLL setting"):
        ecp5_pll_dividers(25_000_000, 1_000_000_000)


def test_report_reads_the_last_utilisation_and_timing():
    assert bitstream.utilisation(NEXTPNR_LOG) == {
        "TRELLIS_IO": (7, 365), "TRELLIS_COMB": (12345, 83640),
        "TRELLIS_FF": (6789, 83640), "DP16KD": (143, 208)}
    assert bitstream.fmax(NEXTPNR_LOG) == {"$glbnet$clk": (55.25, 50.0)}


def test_a_log_without_figures_is_an_error():
    with pytest.raises(bitstream.BitstreamError, match="utilisation"):
        bitstream.utilisation("Info: nothing\n")
    with pytest.raises(bitstream.BitstreamError, match="frequency"):
        bitstream.fmax("Info: nothing\n")


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_each_board_names_a_preset_and_a_link_its_clock_can_run(name):
    spec = BOARDS[name]
    assert preset(spec.config).name == spec.config
    assert spec.family in bitstream.FAMILIES
    assert spec.link.clock_hz % spec.link.divisor == 0       # an exact baud rate


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_each_boards_preset_compiles_a_gemm_the_golden_model_runs_as_predicted(name):
    import numpy as np
    from systolica import golden
    from systolica.compiler import compile_network, gemm, reference
    cfg = preset(BOARDS[name].config)
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (20, 24), dtype=np.int8)
    b = rng.integers(-128, 128, (24, 12), dtype=np.int8)
    compiled = compile_network(cfg, gemm(a, b, out_dtype="int32", name="g"))
    run = golden.run(cfg, compiled.image, compiled.dram, compiled.prog_addr)
    assert run.cycles == compiled.predicted_cycles
    np.testing.assert_array_equal(compiled.result(run.dram),
                                  reference.outputs(compiled.graph)["g"])
