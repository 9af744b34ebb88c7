"""The rules ``conftest.py`` sets for every test hold: a test that leaves shared state
changed fails, and so does one that builds a Verilated design without the ``rtl``
marker. Checked on a throwaway test session that uses the same conftest."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

LEAKY = '''
import os
import sys

import pytest

from systolica.arch.config import preset
from systolica.sim import rtlsim


def test_sets_the_environment():
    os.environ["SYSTOLICA_PROBE"] = "1"


def test_edits_a_preset():
    object.__setattr__(preset("tiny"), "imem_depth", 1024)    # past the read-only fields


def test_grows_sys_path():
    sys.path.append("/nowhere")


def test_restores_what_it_changes(monkeypatch):
    monkeypatch.setenv("SYSTOLICA_PROBE", "2")
    monkeypatch.syspath_prepend("/nowhere")


def test_builds_unmarked():
    rtlsim.build(preset("tiny"))
'''


@pytest.mark.slow
def test_leaks_and_unmarked_builds_fail(tmp_path):
    for name in ("conftest.py", "tiers.py", "paths.py"):     # the conftest imports both
        shutil.copy(HERE / name, tmp_path / name)
    (tmp_path / "test_probe.py").write_text(LEAKY)
    (tmp_path / "pytest.ini").write_text(textwrap.dedent("""
        [pytest]
        addopts = --strict-markers -p no:cacheprovider
        markers =
            rtl: builds or runs a Verilated design
    """))
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-rA", str(tmp_path)],
                          cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    out = done.stdout
    assert out.splitlines()[-1].strip("= ").startswith("1 failed, 4 passed, 3 errors"), out
    assert "test_sets_the_environment changed the environment and did not restore" in out
    assert "test_edits_a_preset changed the chip presets" in out
    assert "test_grows_sys_path changed sys.path" in out
    assert "test_builds_unmarked builds the Verilated design chip-tiny" in out \
        and "is not marked rtl" in out
    assert "ERROR test_probe.py::test_restores_what_it_changes" not in out
