"""Shared fixtures for the testbenches.

Tests that need the chip's RTL call :func:`run_on_rtl` (or :func:`run_many_on_rtl` to
share one simulator start-up between several programs); the Verilator build behind
them happens once per configuration and is reused by every test and every xdist
worker (see :func:`systolica.sim.rtlsim.build`).
"""

from __future__ import annotations

import numpy as np
import pytest

from systolica.arch import isa
from systolica.sim import rtlsim
from systolica.arch.config import ChipConfig, preset


def program_image(program) -> bytes:
    """A program image from what a test has at hand: image bytes, a compiler result
    (anything with ``.image``), a list of :class:`systolica.arch.isa.Instr`, or a list of
    encoded 128-bit words."""
    if isinstance(program, (bytes, bytearray)):
        return bytes(program)
    image = getattr(program, "image", None)
    if image is not None:
        return bytes(image)
    words = [w if isinstance(w, int) else isa.encode(w) for w in program]
    return isa.to_bytes(words)


def rtl_job(program, dram=None, **options) -> dict:
    """A job for :func:`systolica.sim.rtlsim.run`. ``dram`` defaults to the compiler
    result's ``.dram`` when ``program`` has one; ``options`` are the other job keys
    (``readback``, ``expect_fault``, ``timeout_cycles``, ``name``)."""
    if dram is None:
        dram = getattr(program, "dram", None)
    job = {"program": program_image(program), **options}
    if dram is not None:
        job["dram"] = np.asarray(dram)
    return job


def run_on_rtl(cfg: ChipConfig, program, dram=None, **options) -> dict:
    """Run one program on the RTL; the result dict of :func:`systolica.sim.rtlsim.run`."""
    return rtlsim.run(cfg, [rtl_job(program, dram, **options)])[0]


def run_many_on_rtl(cfg: ChipConfig, jobs: list[dict]) -> list[dict]:
    """Several runs in one simulator process; ``jobs`` are keyword dicts for
    :func:`rtl_job` (``program`` plus optional ``dram`` and options)."""
    return rtlsim.run(cfg, [rtl_job(**job) for job in jobs])


@pytest.fixture(scope="session")
def tiny_cfg() -> ChipConfig:
    return preset("tiny")


@pytest.fixture(scope="session")
def tiny_build(tiny_cfg):
    """The Verilator build directory of the ``tiny`` preset (built on first use)."""
    return rtlsim.build(tiny_cfg)
