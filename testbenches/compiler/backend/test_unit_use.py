"""Where a program's cycles go (systolica.compiler.backend.unit_use) and the unit occupancy
plot drawn from it (systolica.app.plot): busy cycles in a window, the busiest unit,
and a plot whose bars add up to each unit's busy cycles."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from systolica.app import demo, plot
from systolica.arch import timing
from systolica.arch.config import preset
from systolica.compiler import compile_network, gemm
from systolica.compiler.backend import unit_use
from systolica.compiler.backend.unit_use import Busy

SVG = "{http://www.w3.org/2000/svg}"


# session-wide: the fast tier shuffles modules together, which would rebuild it
@pytest.fixture(scope="session")
def compiled():
    return compile_network(preset("tiny"), demo.cnn())


def test_busy_in_a_window_is_clipped_to_it():
    busy = [Busy("dma", 0, 10, 0), Busy("dma", 12, 20, 1), Busy("mm", 5, 30, 1)]
    assert unit_use.in_window(busy, 0, 100) == {"dma": 18, "mm": 25}
    assert unit_use.in_window(busy, 8, 14) == {"dma": 4, "mm": 6}
    assert unit_use.in_window(busy, 10, 12) == {"mm": 2}
    assert unit_use.in_window(busy, 30, 40) == {}
    assert unit_use.busiest({"dma": 4, "mm": 6}, 6) == ("mm", 1.0)
    assert unit_use.busiest({}, 6) == ("", 0.0)


def test_layers_share_out_every_busy_cycle(compiled):
    """The layers' shares tile the run: each unit's busy cycles over them add up to
    its occupancy over the program, and no unit is busier than a share is long."""
    cfg = compiled.cfg
    busy = unit_use.intervals(cfg, compiled.program, compiled.layer_of)
    total: dict[str, int] = {}
    for ins in compiled.program:
        if timing.UNIT[ins.op] not in unit_use.QUIET:
            total[timing.UNIT[ins.op]] = total.get(timing.UNIT[ins.op], 0) \
                + timing.occupancy(cfg, ins)
    shared: dict[str, int] = {}
    for rec in compiled.layers:
        per = unit_use.in_window(busy, rec.start_cycle, rec.end_cycle)
        assert max(per.values()) <= rec.cycles, rec.name
        for unit, n in per.items():
            shared[unit] = shared.get(unit, 0) + n
    assert shared == total
    assert set(total) == {"dma", "wload", "mm", "vpu"}


def test_plot_bars_add_up_to_each_units_busy_cycles(compiled):
    svg = ET.fromstring(plot.occupancy_svg(compiled, "demo"))
    assert svg.tag == f"{SVG}svg"
    busy = unit_use.intervals(compiled.cfg, compiled.program, compiled.layer_of)
    want = unit_use.in_window(busy, 0, compiled.predicted_cycles)
    got: dict[str, int] = {}
    for title in svg.iter(f"{SVG}title"):
        m = re.fullmatch(r"(\w+) cycles \d+\.\.\d+: busy (\d+) for \w+", title.text)
        if m:
            got[m[1]] = got.get(m[1], 0) + int(m[2])
    assert got == want
    labels = {t.text for t in svg.iter(f"{SVG}text")}
    assert set(want) <= labels and {rec.name for rec in compiled.layers} <= labels


def test_plot_of_a_long_run_keeps_to_its_bins():
    """A run of thousands of cycles is drawn in at most ``bins`` bars a unit (and
    layer): the plot's size does not grow with the run."""
    rng = np.random.default_rng(0)
    c = compile_network(preset("tiny"), gemm(rng.integers(-128, 128, (512, 64)),
                                             rng.integers(-128, 128, (64, 64))))
    assert c.predicted_cycles > 4000 and len(c.layers) == 1
    bars = plot.occupancy_svg(c, bins=100).count("</title></rect>") - len(c.layers)
    assert 100 < bars <= 100 * 4
