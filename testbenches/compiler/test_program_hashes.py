"""Every program in ``program_census`` is byte for byte what ``golden/program_hashes.json``
records (``--update-golden`` rewrites the entries of the cases run)."""

from __future__ import annotations

import json

import pytest

import program_census
from paths import EXPECTED

GOLDEN = EXPECTED / "program_hashes.json"
CASES = program_census.cases()


def _recorded() -> dict:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


@pytest.mark.slow
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=[pytest.mark.regress]
                                               if c.heavy else []) for c in CASES])
def test_program_is_byte_identical_to_the_recorded_one(case, update_golden):
    got = json.loads(json.dumps(case.make()))
    if update_golden:
        from golden_files import update_entry
        update_entry(GOLDEN, case.id, got)
        return
    want = _recorded().get(case.id)
    assert want is not None, f"{case.id}: no recorded hashes; run with --update-golden"
    assert got == want, f"{case.id}: the program changed"
