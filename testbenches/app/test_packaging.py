"""The installed package is complete: its wheel holds every module, the harness's
Verilog and cocotb entry, the package data and the licence, and (in the regression
tier) a non-editable install in a fresh virtual environment, and the wheel that
``python -m build`` makes for a release (docs/packaging.md), run ``systolica sim`` from
a directory outside the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import venv as venv_module
import zipfile
from pathlib import Path

import pytest

from paths import REPO

#: Import package -> source directory, as pyproject.toml maps them.
SOURCE_DIRS = {"systolica": "systolica", "systolica/rtl": "rtl",
               "systolica/compiler": "compiler", "systolica/firmware": "firmware"}
HARNESS_FILES = {"systolica/sim/hdl/sim_top.v", "systolica/sim/hdl/lz4/lz4.h",
                 "systolica/sim/hdl/harness.cpp", "systolica/sim/cocotb_entry.py"}
#: What the wheel must hold besides modules (pyproject.toml's package-data).
PACKAGE_DATA = {"systolica/compiler/assignment/data/tiny.json",
                "systolica/compiler/assignment/data/tangnano9k.json",
                "systolica/firmware/core/main.c", "systolica/firmware/core/link.ld",
                "systolica/firmware/core/start.S", "systolica/firmware/core/kernels.h",
                "systolica/app/data/deepbench_hand_rules.json"}
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


def test_wheel_holds_the_package_data_and_the_licence(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert PACKAGE_DATA <= names, sorted(PACKAGE_DATA - names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: Apache-2.0" in meta.splitlines()
    assert "Author: The Systolica developers" in meta.splitlines()


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


def _run(argv, cwd, env=None, timeout=1800) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{argv}: {done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done


@pytest.mark.regress
@pytest.mark.rtl
def test_release_build_installs_and_runs_outside_the_repository(tmp_path):
    """``python -m build`` as a release makes them: the source distribution, then the
    wheel from it in an isolated environment; the wheel installs into a fresh virtual
    environment and runs ``config show`` and ``compile`` with a chip file and ``sim``
    in an empty directory (docs/packaging.md records the figures this prints)."""
    start = time.monotonic()
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(_source_copy(tmp_path))],
         cwd=tmp_path)
    (wheel,) = dist.glob("systolica-*.whl")
    (sdist,) = dist.glob("systolica-*.tar.gz")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert PACKAGE_DATA | HARNESS_FILES <= names
    built = time.monotonic()

    env_dir = tmp_path / "venv"
    venv_module.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    _run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
         cwd=tmp_path)
    shutil.rmtree(tmp_path / "src")     # nothing may be read from the source tree
    installed = time.monotonic()
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("SYSTOLICA_BUILD", "SYSTOLICA_CACHE", "PYTHONPATH", "VIRTUAL_ENV")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")     # a fresh build cache
    (work / "mine.toml").write_text('base = "tiny"\ndram_words = 8192\n')
    shown = _run([str(bin_dir / "systolica"), "config", "show", "mine.toml"], cwd=work,
                 env=env)
    assert 'name = "mine"' in shown.stdout
    _run([str(bin_dir / "systolica"), "compile", "--gemm", "16x16x16", "--config",
          "mine.toml"], cwd=work, env=env)
    sim = _run([str(bin_dir / "systolica"), "sim"], cwd=work, env=env)
    assert "PASS" in sim.stdout.splitlines(), sim.stdout[-2000:]
    print(f"wheel {wheel.name}: {wheel.stat().st_size:,} bytes, sdist "
          f"{sdist.stat().st_size:,} bytes; built in {built - start:.0f} s, installed in "
          f"{installed - built:.0f} s, config show, compile and sim in "
          f"{time.monotonic() - installed:.0f} s")
