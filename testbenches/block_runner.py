"""Build and run block-level cocotb testbenches (pytest side).

A :class:`Block` is one row of the block-test table (``test_blocks.py``): the
component to build, the cocotb module that tests it (``testbenches/blocks/tb_<block>.py``)
and the cases to run. :func:`build` makes its Verilator model through
:func:`systolica.sim.verilated.build`, the builder (and cache) the chip uses too: one
build per block and configuration, shared by every test and pytest-xdist worker.
:func:`run_block` runs the cocotb module on it in a fresh directory under
``build/runs/blocks/`` and raises ``AssertionError`` naming the failed cocotb tests
(and the end of the simulator log) if any failed.

The cocotb side of every block test (clock, reset, ports, checker) is :mod:`tb_base`;
each block's ``tb_<block>.py`` holds its testbench class, reference model and table of
cases, one of which (or a comma-separated group) is selected through ``BLOCK_CASE`` in
the environment.
"""

from __future__ import annotations

import functools
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from systolica.sim import verilated
from systolica.sim.verilated import build_root, cocotb_environment, log_tail, setup_verilator

HERE = Path(__file__).resolve().parent
#: Where the cocotb modules live (``tb_base`` beside this file, the blocks'
#: ``tb_<block>.py``, the FPGA top's and the chip's own in their folders).
TB_DIRS = (HERE, HERE / "blocks", HERE / "fpga", HERE / "chip")

#: Block models are small and run briefly: compile their C++ without optimisation,
#: which roughly halves the build.
OPT_VARIABLES = {"OPT_FAST": "-O0", "OPT_SLOW": "-O0", "OPT_GLOBAL": "-O0"}


@dataclass(frozen=True, kw_only=True)
class Block:
    """One block under test.

    ``name`` is the block's Verilog top module; ``factory`` makes the component, as
    ``functools.partial(<component class>, <keyword arguments>)``, so that the class
    and its arguments name the build; ``tb`` is the cocotb module; ``cases`` maps a
    test id to the cocotb cases run together in one simulator start; ``env`` is more
    environment for the cocotb module; ``variant`` tells two configurations of one
    block apart.
    """

    name: str
    factory: functools.partial
    tb: str
    cases: Mapping[str, tuple[str, ...]]
    env: Mapping[str, str] = field(default_factory=dict)
    variant: str = ""

    def __post_init__(self):
        if not self.cases or not all(self.cases.values()):
            raise ValueError(f"block {self.label}: every test needs at least one case, "
                             f"not {dict(self.cases)!r}")

    @property
    def label(self) -> str:
        return f"{self.name}-{self.variant}" if self.variant else self.name

    @property
    def design(self) -> verilated.Design:
        return verilated.component(self.name, self.factory, label=f"block-{self.label}",
                                   make_variables=OPT_VARIABLES)


def build(block: Block) -> Path:
    """The build directory of ``block``'s Verilator model (built on first use)."""
    return verilated.build(block.design)


def run_case(block: Block, case: str) -> Path:
    """Run the cocotb cases ``block.cases[case]`` on the block's model."""
    env = {**block.env, "BLOCK_CASE": ",".join(block.cases[case])}
    return run_block(build(block), block.name, block.tb, extra_env=env)


def _failed_tests(results_xml: Path) -> list[str]:
    """Names and messages of the failed test cases in a cocotb results file."""
    failed = []
    for case in ET.parse(results_xml).getroot().iter("testcase"):
        for bad in list(case.iter("failure")) + list(case.iter("error")):
            failed.append(f"{case.get('name')}: {bad.get('message', '').strip()}")
    return failed


def run_block(build_dir: Path, name: str, test_module: str, testcase: str | None = None,
              extra_env: dict | None = None, plusargs: tuple[str, ...] = ()) -> Path:
    """Run cocotb module ``test_module`` (a module in ``testbenches/`` or its
    ``blocks/``, ``fpga/`` and ``chip/``) on the block
    built in ``build_dir`` (top ``name``), with the simulator's ``plusargs`` (paths in
    them are relative to the run directory, the simulator's working directory);
    ``testcase`` selects one cocotb test by name.
    Raises ``AssertionError`` if a cocotb test failed or none ran. Returns the run
    directory (kept only when a test failed)."""
    from cocotb_tools.runner import get_results, get_runner

    build_dir = Path(build_dir)
    runs = build_root() / "runs" / "blocks"
    runs.mkdir(parents=True, exist_ok=True)
    label = f"{name}-{testcase}" if testcase else name
    run_dir = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=runs))
    results_xml = run_dir / "results.xml"
    log = run_dir / "sim.log"

    setup_verilator()
    # The simulator's Python finds the test module through the PYTHONPATH the runner
    # copies from sys.path.
    added = [str(d) for d in TB_DIRS if str(d) not in sys.path]
    sys.path[:0] = added
    problem = None
    try:
        with cocotb_environment():
            get_runner("verilator").test(
                test_module=test_module, hdl_toplevel=name, hdl_toplevel_lang="verilog",
                build_dir=build_dir / "sim_build", test_dir=run_dir,
                results_xml=str(results_xml), testcase=testcase,
                extra_env=dict(extra_env or {}), timescale=verilated.TIMESCALE,
                plusargs=list(plusargs), log_file=log)
    except (RuntimeError, SystemExit) as exc:
        problem = f"simulator ended with {exc!r}"
    finally:
        for d in added:
            sys.path.remove(d)

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
