"""The logic-depth count of a netlist (``systolica.app.logic_depth``) on small
hand-made yosys netlists: levels through LUTs, wide multiplexers and carry chains,
paths between registers, and a combinational loop refused."""

from __future__ import annotations

import pytest

from systolica.app import logic_depth


def netlist(cells: dict, nets: dict) -> dict:
    return {"modules": {"top": {
        "cells": {name: {"type": t, "connections": conn,
                         "port_directions": {"Q": "output"} if t == "FF" else {}}
                  for name, (t, conn) in cells.items()},
        "netnames": {name: {"bits": [bit]} for name, bit in nets.items()}}}}


# a -> LUT -> LUT -> PFUMX (data input: no level) -> FF; a carry chain of three
# cells entered from b's register beside it; q feeds nothing deeper.
CELLS = {
    "ra": ("FF", {"Q": [1], "DI": [2]}),
    "l1": ("LUT4", {"A": [1], "B": [1], "C": ["0"], "D": ["0"], "Z": [3]}),
    "l2": ("LUT4", {"A": [3], "B": [1], "C": ["0"], "D": ["0"], "Z": [4]}),
    "mx": ("PFUMX", {"ALUT": [4], "BLUT": [1], "C0": [1], "Z": [5]}),
    "rq": ("FF", {"Q": [6], "DI": [5]}),
    "rb": ("FF", {"Q": [7], "DI": [2]}),
    "c1": ("CCU2C", {"A0": [7], "CIN": ["0"], "COUT": [8], "S0": [11]}),
    "c2": ("CCU2C", {"CIN": [8], "COUT": [9]}),
    "c3": ("CCU2C", {"CIN": [9], "S0": [10]}),
    "l3": ("LUT4", {"A": [10], "Z": [2]}),
}
NETS = {"top.a": 1, "top.d": 2, "top.x": 3, "top.y": 4, "top.z": 5, "top.q": 6, "top.b": 7,
        "top.c1": 8, "top.c2": 9, "top.s": 10}


def test_the_deepest_path_counts_luts_and_carry_hops_apart():
    paths, histogram = logic_depth.deepest(netlist(CELLS, NETS), count=2)
    first = paths[0]
    # b -> c1 (operand: a level and a hop) -> c2, c3 (hops) -> l3 (a level) -> d
    assert (first.levels, first.carries) == (2, 3)
    assert first.nets == ("top.b", "top.c1", "top.c2", "top.s", "top.d")
    assert first.end in ("ra.DI", "rb.DI")
    # a -> l1 -> l2 -> the multiplexer's data input: two levels
    assert histogram == {2: 3}


def test_blocks_name_the_hierarchy_a_path_crosses():
    path = logic_depth.Path_(3, 0, "r.D", ("top.chip.vpu.a", "top.chip.vpu.b",
                                           "top.chip.seq.c", "top.chip.mm.d"))
    assert logic_depth.blocks(path) == ["top.chip.vpu", "top.chip.seq", "top.chip.mm"]


def test_a_combinational_loop_is_refused():
    cells = {"l1": ("LUT4", {"A": [2], "Z": [1]}), "l2": ("LUT4", {"A": [1], "Z": [2]}),
             "r": ("FF", {"DI": [1], "Q": [3]})}
    with pytest.raises(ValueError, match="combinational loop"):
        logic_depth.deepest(netlist(cells, {"top.u": 1, "top.v": 2}))
