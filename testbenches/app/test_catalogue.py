"""The bad-input catalogue's census: every ``test_bad_inputs*.py`` module says how many
rows it holds by area; together they hold at least 150 and cover every door a user can
give the project something through."""

from __future__ import annotations

import importlib
from collections import Counter
from pathlib import Path

#: The doors issue 41 names: the command line, the Python API, ONNX files, program text,
#: program images, chip files (with the configurations they hold) and the board link.
AREAS = ("command line", "Python API", "ONNX files", "program text", "program images",
         "chip configuration", "chip files", "board link")
MODULES = sorted(p.stem for p in Path(__file__).parent.glob("test_bad_inputs*.py"))


def census() -> Counter:
    total = Counter()
    for name in MODULES:
        total.update(importlib.import_module(name).catalogue())
    return total


def test_the_catalogue_covers_every_door_with_at_least_150_bad_inputs():
    rows = census()
    table = ", ".join(f"{area} {rows[area]}" for area in AREAS)
    assert set(rows) <= set(AREAS), f"an area no door is: {sorted(set(rows) - set(AREAS))}"
    assert all(rows[area] >= 5 for area in AREAS), f"an area with few rows: {table}"
    assert sum(rows.values()) >= 150, f"{sum(rows.values())} rows: {table}"
