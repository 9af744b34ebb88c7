"""The energy table (systolica/arch/energy.py): its published defaults, the chip file's
``[energy]`` overrides and their refusals, and the estimate's arithmetic."""

from __future__ import annotations

import math

import pytest

from systolica.arch import energy
from systolica.arch.config import ConfigError, preset

from test_bad_inputs import assert_clear


def test_defaults_are_the_cited_figures_scaled():
    """Horowitz's 45 nm figures as the module says they are scaled: an 8-bit multiply
    and a 32-bit add per MAC, 64-bit SRAM accesses over 8 bytes, DRAM's middle."""
    t = energy.DEFAULT
    assert t.mac_pj == pytest.approx(0.2 + 0.1)
    assert (t.sram_8kib_pj_per_byte, t.sram_32kib_pj_per_byte,
            t.sram_1mib_pj_per_byte) == (10 / 8, 20 / 8, 100 / 8)
    assert t.dram_pj_per_byte == pytest.approx((1300 + 2600) / 2 / 8)
    assert "Horowitz" in energy.SOURCE and "ISSCC 2014" in energy.SOURCE
    # the three sizes, the power law between them (16 KiB: half way from 8 to 32 KiB
    # in log size, so the geometric mean), the ends beyond them
    got = [t.sram_pj_per_byte(n) for n in (1024, 8192, 16384, 32768, 65536, 1 << 20,
                                           1 << 30)]
    assert got == pytest.approx([1.25, 1.25, (1.25 * 2.5) ** 0.5, 2.5,
                                 2.5 * 5 ** 0.2, 12.5, 12.5])


def test_overrides_from_a_chip_file(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\ntile_rows = 2\n\n[energy]\ndram_pj_per_byte = 100\n'
                    'mac_pj = 0.25\n')
    t = energy.from_toml(path)
    assert (t.dram_pj_per_byte, t.mac_pj) == (100.0, 0.25)
    assert t.vector_pj == energy.DEFAULT.vector_pj
    assert energy.from_toml({"energy": {"mac_pj": 1}}).mac_pj == 1.0
    assert energy.from_toml({"name": "no energy table"}) == energy.DEFAULT
    assert energy.DEFAULT.with_overrides({"config_pj": 0}).config_pj == 0.0


@pytest.mark.parametrize("table, words", [
    ({"mac": 0.3}, ["mine.toml: [energy]", "unknown energy key 'mac'", "mac_pj"]),
    ({"sram_small_pj_per_byte": 1}, ["unknown energy key", "sram_8kib_pj_per_byte"]),
    ({"mac_pj": -0.1}, ["mine.toml: [energy]", "mac_pj", "non-negative", "-0.1"]),
    ({"mac_pj": "0.3"}, ["mac_pj", "non-negative number", "'0.3'"]),
    ({"mac_pj": True}, ["mac_pj", "non-negative number", "True"]),
    ({"mac_pj": math.inf}, ["mac_pj", "inf"]),
])
def test_bad_energy_keys_and_values(table, words):
    with pytest.raises(ConfigError) as info:
        energy.from_toml({"energy": table}, name="mine.toml")
    assert_clear(str(info.value), words)


def test_bad_energy_files(tmp_path):
    (tmp_path / "broken.toml").write_text("[energy\n")
    with pytest.raises(ConfigError) as info:
        energy.from_toml(tmp_path / "broken.toml")
    assert_clear(str(info.value), ["broken.toml", "not valid TOML"])
    with pytest.raises(ConfigError) as info:
        energy.from_toml(tmp_path / "none.toml")
    assert_clear(str(info.value), ["none.toml", "cannot read"])
    with pytest.raises(ConfigError) as info:
        energy.DEFAULT.with_overrides([("mac_pj", 1)])
    assert_clear(str(info.value), ["[energy]", "table of key = number", "list"])


def test_estimate_is_counts_times_the_table():
    cfg = preset("tiny")                  # CBUF 2048 x 8 B (16 KiB), ACC 256 x 32 B
    sizes = energy.sram_sizes(cfg)
    assert sizes == {"cbuf": 16384, "ubuf": 16384, "acc": 8192}
    buffers = {b: {"read_bytes": 10, "write_bytes": 6} for b in ("cbuf", "ubuf", "acc", "wbuf")}
    counts = {"array_macs": 1000, "accumulates": 100, "buffers": buffers,
              "dram_rd_bytes": 64, "dram_wr_bytes": 16, "fetch_rd_bytes": 32,
              "instructions": 7, "config_writes": 2, "vector_lanes": 40}
    t = energy.DEFAULT.with_overrides({"dram_pj_per_byte": 200})
    got = energy.estimate(counts, t, cfg)
    cbuf = (1.25 * 2.5) ** 0.5              # 16 KiB: between the 8 and 32 KiB figures
    pj = {"mac": 300, "accumulate": 10, "cbuf": 16 * cbuf, "ubuf": 16 * cbuf,
          "acc": 16 * 1.25, "wbuf": 16 * 0.75, "dram": 80 * 200, "fetch": 32 * 200,
          "instruction": 7 * 25, "config": 2 * 6, "vector": 40 * 3.2}
    assert list(got) == [*energy.COMPONENTS, "total"]
    for k, v in pj.items():
        assert got[k] == pytest.approx(v * 1e-12), k
    assert got["total"] == pytest.approx(sum(pj.values()) * 1e-12)
