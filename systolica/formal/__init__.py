"""Bounded formal proofs of the chip's control blocks (docs/formal.md).

:data:`PROPERTIES` names each property set: its harness on the proof chip
(:func:`formal_config`), its bound in ``make test`` and in ``make regress``, and the
mutations that must make it fail. :func:`~.runner.prove` runs one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from systolica.arch.config import ChipConfig, preset
from systolica.formal import crossbar, mux_guard, sequencer
from systolica.formal.runner import Harness, Mutation


def formal_config() -> ChipConfig:
    """The chip the proofs use: ``tiny`` with a program memory of 4 instructions
    (flip-flops in the model rather than SMT arrays of 2,048 words; the sequencer's
    ring logic is the same at any depth)."""
    return dataclasses.replace(preset("tiny"), name="tiny_formal", imem_depth=4)


@dataclass(frozen=True)
class Property:
    """A property set: ``harness(cfg, depth)`` builds its harness; ``solver`` is the
    one that proves it faster (runner.SOLVERS)."""

    name: str
    harness: Callable[[ChipConfig, int], Harness]
    short: int           # cycles in `make test`
    long: int            # cycles in `make regress`
    mutations: dict[str, Mutation]
    solver: str = "yices"


PROPERTIES = {p.name: p for p in (
    Property("sequencer", lambda cfg, depth: sequencer.SequencerHarness(cfg=cfg),
             short=5, long=9, mutations=sequencer.MUTATIONS, solver="boolector"),
    Property("crossbar", lambda cfg, depth: crossbar.CrossbarHarness(cfg=cfg),
             short=1, long=4, mutations=crossbar.MUTATIONS),
    Property("mux_guard", lambda cfg, depth: mux_guard.MuxGuardHarness(cfg=cfg, history=depth),
             short=6, long=16, mutations=mux_guard.MUTATIONS),
)}
