"""The installed package is complete: its wheel holds every module and the harness's
Verilog and cocotb entry, and (in the regression tier) a non-editable install in a
fresh virtual environment runs ``systolica sim`` from a directory outside the
repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from paths import REPO

#: Import package -> source directory, as pyproject.toml maps them.
SOURCE_DIRS = {"systolica": "systolica", "systolica/rtl": "rtl",
               "systolica/compiler": "compiler", "systolica/firmware": "firmware"}
HARNESS_FILES = {"systolica/sim/hdl/sim_top.v", "systolica/sim/hdl/lz4/lz4.h",
                 "systolica/sim/hdl/harness.cpp", "systolica/sim/cocotb_entry.py"}
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__",
                                    ".pytest_cache", "sim_build")

#: builds a wheel (seconds): `make test`, not `make test-fast`
pytestmark = pytest.mark.slow


def _source_copy(into: Path) -> Path:
    """The repository's files without generated ones (so that the build does not
    write into the working tree, and sees only what a fresh checkout has)."""
    src = into / "src"
    shutil.copytree(REPO, src, ignore=NOT_SOURCE)
    return src


def _expected_modules() -> set[str]:
    found = set()
    for package, directory in SOURCE_DIRS.items():
        for path in (REPO / directory).rglob("*.py"):
            if "__pycache__" not in path.parts:
                found.add(f"{package}/{path.relative_to(REPO / directory).as_posix()}")
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    src = _source_copy(work)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-cache-dir", "--quiet", "--wheel-dir", str(work / "dist"), str(src)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = (work / "dist").glob("systolica-*.whl")
    return built


def test_wheel_holds_every_module_and_the_harness_files(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert HARNESS_FILES <= names
    missing = _expected_modules() - names
    assert not missing, f"not in the wheel (a package missing from pyproject.toml?): " \
                        f"{sorted(missing)}"
    assert not any(n.startswith(("testbenches/", "examples/", "docs/")) for n in names)


def test_installed_copy_finds_the_same_builds(wheel, tmp_path):
    """The build cache is keyed by the source's content, not where it lives: the wheel's
    copy of the generator modules digests like the working tree's."""
    from systolica.sim import verilated

    zipfile.ZipFile(wheel).extractall(tmp_path)
    script = ("import sys; sys.path.insert(0, sys.argv[1]); "
              "from systolica.sim import verilated; "
              "print(verilated.__file__); "
              "print(verilated._source_digest(('systolica.rtl.verilog',)))")
    # -S: no site-packages, so not the editable install of the working tree either.
    done = subprocess.run([sys.executable, "-S", "-c", script, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    where, digest = done.stdout.split()
    assert Path(where).is_relative_to(tmp_path)
    assert digest == verilated._source_digest(("systolica.rtl.verilog",))


@pytest.mark.regress
@pytest.mark.rtl
def test_non_editable_install_runs_sim_outside_the_repository(tmp_path):
    """``pip install .`` into a new virtual environment (dependencies from the package
    index), then ``systolica sim`` in an empty directory: the Verilog, the lz4 stand-in
    and the cocotb entry come from the installed package."""
    src = _source_copy(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "--quiet",
                              str(src)], capture_output=True, text=True, timeout=1200)
    assert install.returncode == 0, install.stdout + install.stderr
    shutil.rmtree(src)          # nothing may be read from the source tree afterwards
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # the builds go to the user's cache directory (here a fresh one, by XDG's rule)
    env = {k: v for k, v in os.environ.items()
           if k not in ("SYSTOLICA_BUILD", "SYSTOLICA_CACHE", "PYTHONPATH", "VIRTUAL_ENV")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    done = subprocess.run([venv / "bin" / "systolica", "sim", "--waves"], cwd=elsewhere,
                          env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout.splitlines(), done.stdout
    assert (elsewhere / "build" / "waves.fst").stat().st_size > 0
    assert "waveform: build/waves.fst" in done.stdout, done.stdout
    assert list((tmp_path / "xdg" / "systolica" / "verilated").glob("chip-tiny-waves/*/"
                                                                     "build.stamp"))
