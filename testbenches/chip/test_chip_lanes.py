"""The general lanes on the chip (tiny): outside a ROUTE's window SETCFGs may set their
multiplexers at any cycle, within the update limits like every other multiplexer;
setting them changes neither a program without ROUTEs' results nor its cycles
(docs/contract.md, "General lanes, crossings and skip links"; ROUTE itself:
test_chip_route.py)."""

from __future__ import annotations

import numpy as np
import pytest
from test_chip_setcfg8 import OUT, M, _program

from systolica import golden
from systolica.arch import fabric, geometry, isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import Instr, Opcode
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode

from chip_runs import run_many_on_rtl

CFG = preset("tiny")

# turns, out and back, zero: two per power domain (tiny's budget), four per SETCFG
LANE_SETTINGS = [("gen_s[0][0]", "west"), ("gen_w[0][1]", "west"),
                 ("gen_e[1][0]", "south"), ("gen_n[1][1]", "zero")]


def _with_lane_updates(program):
    """``program`` with a SETCFG of the general lanes in every second free cycle of
    its first 40 (each within the limits), the settings cycling."""
    busy = {i.cycle for i in program}
    table = fabric.by_name(CFG)
    extra = []
    for k, c in enumerate(c for c in range(1, 40, 2) if c not in busy and c - 1 not in busy
                          and c + 1 not in busy):
        pairs = [(table[name].index, table[name].value_of(source) if (k % 2 == 0)
                  else table[name].default) for name, source in LANE_SETTINGS]
        extra.append(Instr(Opcode.SETCFG, c, isa.setcfg_fields(pairs)))
    assert len(extra) >= 3
    return sorted(program + extra, key=lambda i: i.cycle)


def _dram():
    rng = np.random.default_rng(10)
    dram = np.zeros((1024, CFG.dram_word_bytes), np.uint8)
    dram[0:M, :CFG.rows] = rng.integers(0, 256, (M, CFG.rows), dtype=np.uint8)
    dram[64:64 + CFG.rows, :CFG.cols] = rng.integers(0, 256, (CFG.rows, CFG.cols),
                                                      dtype=np.uint8)
    return dram


def test_lane_updates_are_legal_and_change_nothing_in_the_golden_model():
    plain = _program(CFG)
    lanes = _with_lane_updates(plain)
    dram = _dram()
    a = golden.run(CFG, Loadable.for_chip(CFG, isa.to_bytes([isa.encode(i) for i in plain]), dram))
    b = golden.run(CFG, Loadable.for_chip(CFG, isa.to_bytes([isa.encode(i) for i in lanes]), dram))
    assert a.error == b.error == ErrorCode.NONE and b.issued == len(lanes)
    np.testing.assert_array_equal(a.dram[OUT:OUT + M], b.dram[OUT:OUT + M])
    assert a.cycles == b.cycles == timing.run_cycles(CFG, lanes)


@pytest.mark.rtl
def test_lane_updates_on_rtl():
    plain, lanes = _program(CFG), _with_lane_updates(_program(CFG))
    dram = _dram()
    runs = run_many_on_rtl(CFG, [
        dict(program=isa.to_bytes([isa.encode(i) for i in p]), dram=dram,
             readback=[(OUT, M)]) for p in (plain, lanes)])
    for res in runs:
        assert res.error_name == "NONE"
    np.testing.assert_array_equal(runs[0].readback[0], runs[1].readback[0])
    gold = golden.run(CFG, Loadable.for_chip(CFG, isa.to_bytes([isa.encode(i) for i in lanes]),
                                             dram))
    np.testing.assert_array_equal(runs[1].readback[0].reshape(M, -1),
                                  gold.dram[OUT:OUT + M])
    assert runs[0].cycles == runs[1].cycles == gold.cycles \
        == timing.run_cycles(CFG, lanes)


@pytest.mark.parametrize("name", ["tiny", "tiny_tall"])
def test_lane_multiplexers_follow_the_existing_table(name):
    """The lanes' multiplexers come after every other (whose numbers, sources and reset
    values stay as without the lanes), four per tile, reset straight on, in the tile
    row's power domain, a skip source exactly where a tile two back exists, and only
    a ROUTE's data passes them (its update window, the same for every lane)."""
    cfg = preset(name)
    plain = fabric.muxes(cfg.replace(general_lanes=False))
    table = fabric.muxes(cfg)
    assert table[:len(plain)] == plain
    lanes = table[len(plain):]
    t, tc = cfg.tile_rows, cfg.tile_cols
    assert len(lanes) == 4 * t * tc
    straight = {"gen_e": "west", "gen_w": "east", "gen_s": "north", "gen_n": "south"}
    from systolica.rtl.mux_guard import windows  # every opcode's update windows
    used = {w.mux: w for w in windows(cfg) if w.mux >= len(plain)}
    assert set(used) == {m.index for m in lanes}
    assert {(w.op, w.lo, w.base, w.per_row) for w in used.values()} == {
        (Opcode.ROUTE, 1, cfg.latency["cbuf_read"] + geometry.route_span_max(cfg) - 2, 1)}
    for m in lanes:
        kind, _, rest = m.name.partition("[")
        i, j = (int(x) for x in rest.rstrip("]").split("]["))
        assert m.sources[m.default] == straight[kind] and m.domain == f"row{i}"
        assert ("skip" in m.sources) == {"gen_e": j >= 2, "gen_w": j + 2 < tc,
                                         "gen_s": i >= 2, "gen_n": False}[kind]
