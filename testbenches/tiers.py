"""Which cases of a large pure-Python family `make test-fast` runs.

`make test-fast` is the check before every commit and has to stay a matter of
seconds; `make test` runs every case. A family of many similar cases (random seeds,
shapes, chips) keeps an evenly spread sample in the fast tier and marks the rest
``slow``; a property-based test draws fewer examples there (:func:`examples`)."""

from __future__ import annotations

import os

import pytest
from _pytest.mark.structures import ParameterSet

#: ``make test-fast`` sets SYSTOLICA_TIER=fast.
FAST = os.environ.get("SYSTOLICA_TIER") == "fast"


def examples(count: int) -> int:
    """How many examples a property-based test draws: ``count``, a quarter of it in
    the fast tier (at least 20)."""
    return max(20, count // 4) if FAST else count


def sample(cases, every: int):
    """``cases`` for ``pytest.mark.parametrize`` with all but every ``every``-th one
    (the first included) marked ``slow``. A case is a ``pytest.param``, a tuple of the
    arguments of several names, or the value of one name (not a tuple); its id and
    marks are kept."""
    out = []
    for index, case in enumerate(cases):
        if index % every == 0:
            out.append(case)
            continue
        if isinstance(case, ParameterSet):
            out.append(pytest.param(*case.values, id=case.id,
                                    marks=(*case.marks, pytest.mark.slow)))
        else:
            values = case if isinstance(case, tuple) else (case,)
            out.append(pytest.param(*values, marks=pytest.mark.slow))
    return out
