"""Which cases of a large pure-Python family `make test-fast` and `make test` run.

`make test-fast` is the check before every commit and has to stay a matter of
seconds; `make test` runs every case, but for the largest families (whole compiles on
many grids), of which it runs an even spread and `make regress` the rest. A family of
many similar cases (random seeds, shapes, chips) keeps an evenly spread sample in the
fast tier and marks the rest ``slow`` (:func:`sample`); a property-based test draws
fewer examples there (:func:`examples`); and what is left of every family of three
cases or more is sampled once more, one case in three (:func:`thin_families`, from
``conftest.py``), which keeps the tier well under 45 s on two cores."""

from __future__ import annotations

import os
from collections import defaultdict

import pytest
from _pytest.mark.structures import ParameterSet

#: ``make test-fast`` sets SYSTOLICA_TIER=fast.
FAST = os.environ.get("SYSTOLICA_TIER") == "fast"


def examples(count: int) -> int:
    """How many examples a property-based test draws: ``count``, a quarter of it in
    the fast tier (at least 20)."""
    return max(20, count // 4) if FAST else count


def sample(cases, every: int, regress_every: int = 1):
    """``cases`` for ``pytest.mark.parametrize`` with all but every ``every``-th one
    (the first included) marked ``slow`` (``make test`` runs them, ``make test-fast``
    does not); with `regress_every`, all but every ``regress_every``-th of those marked
    ``regress`` too (``make regress`` runs the whole family, ``make test`` an even
    spread of it). A case is a ``pytest.param``, a tuple of the arguments of several
    names, or the value of one name (not a tuple); its id and marks are kept."""
    out = []
    for index, case in enumerate(cases):
        if index % every == 0:
            out.append(case)
            continue
        marks = (pytest.mark.slow,) if index % regress_every == 0 else \
            (pytest.mark.slow, pytest.mark.regress)
        if isinstance(case, ParameterSet):
            out.append(pytest.param(*case.values, id=case.id, marks=(*case.marks, *marks)))
        else:
            values = case if isinstance(case, tuple) else (case,)
            out.append(pytest.param(*values, marks=marks))
    return out


#: The fast tier keeps one case in this many of a family (:func:`thin_families`).
THIN = 3

#: Markers that already keep a test out of the fast tier.
OUT_OF_FAST = ("slow", "rtl", "fpga", "regress")


def thin_families(items) -> None:
    """In the fast tier, keep one case in :data:`THIN` (the first included, in
    collection order) of each test function that still has three cases or more
    there, and mark the rest ``slow``: families of random seeds, shapes and chips
    keep an even spread, and ``make test`` runs them all."""
    if not FAST:
        return
    families = defaultdict(list)
    for item in items:
        if not any(item.get_closest_marker(m) for m in OUT_OF_FAST):
            families[(item.path, getattr(item, "originalname", item.name))].append(item)
    for family in families.values():
        if len(family) >= 3:
            for k, item in enumerate(family):
                if k % THIN:
                    item.add_marker(pytest.mark.slow)
