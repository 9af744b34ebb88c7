"""The release package (docs/packaging.md): ``python -m build`` makes a source
distribution and a wheel; the wheel holds the package data the commands need (the
function libraries, the firmware's C sources and linker script, the simulator's
Verilog and C++ harness, the app's data) and the licence, installs into a fresh
virtual environment, and runs ``systolica sim`` there, outside the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import venv
import zipfile

import pytest

from paths import REPO

#: What the wheel must hold besides Python modules (pyproject's package-data).
DATA = ["systolica/compiler/assignment/data/tiny.json",
        "systolica/compiler/assignment/data/tangnano9k.json",
        "systolica/firmware/core/main.c", "systolica/firmware/core/link.ld",
        "systolica/firmware/core/start.S", "systolica/firmware/core/kernels.h",
        "systolica/sim/hdl/sim_top.v", "systolica/sim/hdl/harness.cpp",
        "systolica/sim/hdl/lz4/lz4.h", "systolica/app/data/deepbench_hand_rules.json"]


def _run(argv, cwd, env=None, timeout=1800) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{argv}: {done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done


@pytest.mark.regress
def test_the_wheel_installs_and_runs_outside_the_checkout(tmp_path):
    start = time.monotonic()
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)], cwd=tmp_path)
    wheel, = dist.glob("systolica-*.whl")
    sdist, = dist.glob("systolica-*.tar.gz")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert not [n for n in DATA if n not in names]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not [n for n in names if n.startswith(("testbenches/", "docs/", "build/"))]
    assert "License-Expression: Apache-2.0" in meta
    assert "Author: The Systolica developers" in meta or "The Systolica developers" in meta
    built = time.monotonic() - start

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    _run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
         cwd=tmp_path)
    installed = time.monotonic() - start
    began_runs = time.monotonic()
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "SYSTOLICA_BUILD")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    # the installed package, not the checkout's
    where = _run([str(bin_dir / "python"), "-c",
                  "import systolica, sys; print(systolica.__file__)"], cwd=work, env=env)
    assert str(REPO) not in where.stdout and str(env_dir) in where.stdout
    (work / "mine.toml").write_text('base = "tiny"\ndram_words = 8192\n')
    shown = _run([str(bin_dir / "systolica"), "config", "show", "mine.toml"], cwd=work,
                 env=env)
    assert 'name = "mine"' in shown.stdout
    _run([str(bin_dir / "systolica"), "compile", "--gemm", "16x16x16", "--config",
          "mine.toml"], cwd=work, env=env)
    sim = _run([str(bin_dir / "systolica"), "sim"], cwd=work, env=env)
    assert "PASS" in sim.stdout, sim.stdout[-2000:]
    assert (work / "build").is_dir()
    print(f"wheel {wheel.name}: {wheel.stat().st_size:,} bytes, sdist "
          f"{sdist.stat().st_size:,} bytes; built in {built:.0f} s, installed in "
          f"{installed - built:.0f} s, `systolica sim` in "
          f"{time.monotonic() - began_runs:.0f} s")
