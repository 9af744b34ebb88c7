"""The quick area estimate (systolica/app/area.py): yosys's cell counts read back, the
cache by chip, and one synthesis (a regression: minutes)."""

from __future__ import annotations

import json

import pytest

from systolica.app import area
from systolica.arch.config import preset

STAT = {"modules": {"\\systolica_chip": {"num_cells_by_type": {"TRELLIS_COMB": 7}}},
        "design": {"num_cells_by_type": {"TRELLIS_COMB": 120, "TRELLIS_FF": 80,
                                         "MULT18X18D": 4, "DP16KD": 9, "TRELLIS_RAMW": 2,
                                         "CCU2C": 5}}}


def test_cell_counts_are_the_whole_design():
    assert area.cell_counts(STAT)["TRELLIS_COMB"] == 120
    one = {"modules": {"top": {"num_cells_by_type": {"TRELLIS_FF": 3}}}}
    assert area.cell_counts(one) == {"TRELLIS_FF": 3}


def test_luts_count_as_nextpnr_packs_them():
    # a carry cell and a 16x4 LUT RAM are two TRELLIS_COMB each; the wide-function
    # multiplexers are none
    got = area.count({"LUT4": 100, "CCU2C": 5, "PFUMX": 30, "L6MUX21": 7,
                      "TRELLIS_FF": 80, "MULT18X18D": 4, "DP16KD": 9, "TRELLIS_DPR16X4": 2})
    assert got == {"luts": 114, "ffs": 80, "dsps": 4, "brams": 9, "lutram": 2}


def test_scripts_read_the_rtlil_and_differ_in_the_lut_mapping():
    cfg = preset("tiny")
    full, quick = area.yosys_script(cfg), area.yosys_script(cfg, "quick")
    assert quick[0] == full[0] == "read_rtlil chip.il"
    assert any("picorv32" in c for c in quick)          # tiny has the management core
    assert "synth_ecp5 -top systolica_chip" in full and not any("abc9" in c for c in full)
    assert any(c.startswith("abc9 -W 300 -script") for c in quick)
    assert quick[-1] == full[-1] == "tee -q -o stat.json stat -json"
    with pytest.raises(area.AreaError, match="no synthesis script 'fast'"):
        area.yosys_script(cfg, "fast")


def test_estimate_comes_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    cfg = preset("tiny")
    path = area.cache_path(cfg)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"luts": 1, "ffs": 2, "dsps": 3, "brams": 4, "lutram": 5,
                                "seconds": 60.0}))
    got = area.estimate(cfg)
    assert (got.luts, got.ffs, got.dsps, got.brams, got.cached) == (1, 2, 3, 4, True)
    # the same chip under another name is the same entry; another chip is not
    assert area.cache_path(cfg.replace(name="mine")) == path
    assert area.cache_path(cfg.replace(acc_depth=512)) != path
    assert area.cache_path(cfg, "quick") != path


@pytest.mark.fpga
@pytest.mark.regress
def test_synthesis_counts_the_smallest_chip(tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    cfg = preset("tangnano9k")              # a 2x2 array: four multipliers
    got = area.estimate(cfg)
    assert not got.cached and got.luts > 1000 and got.ffs > 500
    assert got.dsps >= 1 and got.brams >= 1
    assert area.estimate(cfg).cached
