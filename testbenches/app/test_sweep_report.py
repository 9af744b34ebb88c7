"""The sweep report (systolica/app/sweep_report.py): the Pareto front of a hand-made
table, and the report's plots."""

from __future__ import annotations

import pytest

from systolica.app import sweep_report

# (point, cost, cycles): on the front are 0 (cheapest), 2, 4 (fastest) and 5 (ties 2);
# 1 is beaten by 2 (cheaper and faster), 3 by 2 (same cost, slower), 6 has no cycles
TABLE = [(0, 10, 900), (1, 25, 700), (2, 20, 500), (3, 20, 650), (4, 40, 200),
         (5, 20, 500), (6, 5, None), (7, 45, 200)]


def rows():
    return [{"point": p, "chip_macs": c, "cycles": y, "model": "m", "status": "ok"}
            for p, c, y in TABLE]


def test_pareto_front_of_a_hand_made_table():
    front = sweep_report.pareto_front(rows(), "chip_macs", "cycles")
    assert [rows()[i]["point"] for i in front] == [0, 2, 5, 4]


@pytest.mark.parametrize("table, expected", [
    ([], []),
    ([(0, 1, 1)], [0]),
    ([(0, 1, 1), (1, 1, 1)], [0, 1]),           # equal points both stay
    ([(0, 1, 2), (1, 2, 1), (2, 2, 2)], [0, 1]),
])
def test_pareto_front_edges(table, expected):
    r = [{"point": p, "x": x, "y": y} for p, x, y in table]
    assert [r[i]["point"] for i in sweep_report.pareto_front(r, "x", "y")] == expected


@pytest.mark.slow      # matplotlib, of the sweep extra that `make test` installs
def test_report_draws_the_front_and_a_heatmap():
    layers = [{"point": p, "model": "m", "layer": f"l{i}", "mac_utilization": 0.1 * i}
              for p, _, _ in TABLE[:3] for i in range(3)]
    text = sweep_report.html("t", rows(), layers)
    assert text.count("<svg") == 2
    assert "front of cycles against array MACs" in text
