"""``make bench``'s table of the management core (systolica.app.core_bench): both ways
pass their checks, the overlapped configuration shortens the table, and the core's
cycle model gives every START and kernel's cycles the RTL records."""

import pytest

from systolica.app import core_bench


@pytest.mark.regress
def test_the_overlap_saves_cycles_between_programs(capsys):
    overlap, one_at_a_time = core_bench.records(images=3)
    assert overlap["ok"] and one_at_a_time["ok"]
    assert overlap["program_cycles"] == one_at_a_time["program_cycles"]
    assert max(overlap["gaps"]) < min(one_at_a_time["gaps"])
    assert overlap["cycles_saved_by_overlap"] > 0
    assert overlap["model_exact"] and one_at_a_time["model_exact"]
    core_bench.print_records([overlap, one_at_a_time])
    assert "saves" in capsys.readouterr().out


@pytest.mark.regress
def test_the_kernels_on_the_core_match_their_statement():
    records = core_bench.kernel_records(sizes=(("softmax", 12), ("argmax", 40),
                                               ("requantise", 9), ("add", 7)))
    assert all(r["ok"] for r in records)
    assert all(r["core_cycles"] > r["elements"] for r in records)
    assert all(r["model_exact"] and r["model_cycles"] == r["core_cycles"] for r in records)
    assert all(3 < r["cpi"] < 10 for r in records)
