"""Running compiled programs on the Verilated chip from a test, and the checks every
chip run shares.

Tests that need the chip's RTL call :func:`run_on_rtl` (or :func:`run_many_on_rtl` to
share one simulator start-up between several programs); the Verilator build behind
them happens once per configuration and is reused by every test and every xdist
worker (see :func:`systolica.sim.verilated.build`). A module whose tests are a table
of networks takes the standard fixture and checks from :func:`case_table`."""

from __future__ import annotations

import numpy as np
import pytest

from systolica.arch import isa
from systolica.arch.config import ChipConfig, preset
from systolica.arch.loadable import Loadable
from systolica.sim import rtlsim
from systolica.sim.jobs import RtlJob, RtlResult


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


def rtl_job(cfg: ChipConfig, program, dram=None, *, prog_addr=None, ubuf=None, readback=None,
            expect_fault=False, timeout_cycles=None, name="", fetch_from=None) -> RtlJob:
    """An :class:`~systolica.sim.jobs.RtlJob` for chip `cfg` from what a test has at
    hand (a compiler result, image bytes, instructions or words:
    :func:`program_image`). ``dram`` (an
    image from word 0 or ``(first_word, image)`` segments), ``prog_addr``, ``ubuf`` and
    ``fetch_from`` default to the compiler result's."""
    if dram is None:
        dram = getattr(program, "dram", None)
    if prog_addr is None:
        prog_addr = getattr(program, "prog_addr", None)
    if ubuf is None:
        ubuf = getattr(program, "ubuf", None)
    if fetch_from is None:
        fetch_from = getattr(program, "fetch_from", None)
    if dram is not None and not isinstance(dram, (list, tuple)):
        dram = np.asarray(dram)
    return RtlJob(Loadable.for_chip(cfg, program_image(program), dram, prog_addr, ubuf,
                                    fetch_from),
                  readback=None if readback is None else tuple(map(tuple, readback)),
                  expect_fault=expect_fault, timeout_cycles=timeout_cycles, name=name)


def run_on_rtl(cfg: ChipConfig, program, dram=None, **options) -> RtlResult:
    """Run one program on the RTL (:func:`rtl_job`'s arguments)."""
    return rtlsim.run(cfg, [rtl_job(cfg, program, dram, **options)])[0]


def run_many_on_rtl(cfg: ChipConfig, jobs: list) -> list[RtlResult]:
    """Several runs in one simulator process; ``jobs`` are RtlJobs or keyword dicts for
    :func:`rtl_job` (``program`` plus optional ``dram`` and options)."""
    return rtlsim.run(cfg, [job if isinstance(job, RtlJob) else rtl_job(cfg, **job)
                            for job in jobs])


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


def assert_outputs_match(cfg: ChipConfig, compiled, res: RtlResult) -> None:
    """Every graph output read back from the RTL run equals numpy and the golden model."""
    import numpy as np

    from systolica import golden
    from systolica.compiler.graph import reference
    assert res.error_name == "NONE", f"chip fault {res.error_name} at pc {res.fault_pc}"
    got = compiled.results(res.dram)
    want = reference.outputs(compiled.graph)
    gold = compiled.results(golden.run(cfg, compiled.loadable).dram)
    assert list(got) == list(want) == list(compiled.graph.outputs)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape
        np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name}: RTL vs numpy")
        np.testing.assert_array_equal(got[name], gold[name], err_msg=f"{name}: RTL vs golden")


def assert_matches_prediction(cfg: ChipConfig, compiled, res: RtlResult) -> None:
    """The RTL run's cycle and performance counters equal the compiler's prediction and
    the golden model's, and the run ended with the interrupt."""
    from systolica import golden
    gold = golden.run(cfg, compiled.loadable)
    assert res.cycles == compiled.predicted_cycles == gold.cycles
    assert res.macs == compiled.array_macs == gold.macs
    assert res.dram_rd_bytes == compiled.dram_bytes_read == gold.dram_bytes_read
    assert res.dram_wr_bytes == compiled.dram_bytes_written == gold.dram_bytes_written
    assert res.fetch_rd_bytes == compiled.fetch_bytes_read == gold.fetch_bytes_read
    assert res.ubuf_wr_bytes == compiled.ubuf_bytes_written == gold.ubuf_bytes_written
    assert res.ubuf_rd_bytes == compiled.ubuf_bytes_read == gold.ubuf_bytes_read
    assert res.irq and not res.timed_out


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


def case_table(cfg: ChipConfig, cases: dict, also=None):
    """A module's chip runs of a table of networks (:func:`compile_and_run_on_rtl`'s
    cases): the module-scoped ``runs`` fixture (every case in one simulator start) and
    the two checks each case gets (outputs equal numpy and the golden model, and
    ``also(case, compiled)`` if given; counters equal the prediction). Bind them at
    module level::

        runs, test_outputs_match_numpy_and_golden, \\
            test_cycles_and_counters_match_prediction = case_table(CFG, CASES)
    """
    @pytest.fixture(scope="module", name="runs")
    def runs():
        return compile_and_run_on_rtl(cfg, cases)

    @pytest.mark.parametrize("case", list(cases))
    def test_outputs_match_numpy_and_golden(runs, case):
        compiled, res = runs[case]
        if also is not None:
            also(case, compiled)
        assert_outputs_match(cfg, compiled, res)

    @pytest.mark.parametrize("case", list(cases))
    def test_cycles_and_counters_match_prediction(runs, case):
        compiled, res = runs[case]
        assert_matches_prediction(cfg, compiled, res)

    return runs, test_outputs_match_numpy_and_golden, test_cycles_and_counters_match_prediction


def _counting_chain(strategy: str):
    from systolica.compiler import compile_network
    from systolica.compiler.lowering.chain import ChainChoice
    from systolica.models import chain_cases
    return compile_network(preset("tiny"), chain_cases.seed_two_layer(),
                           chain=ChainChoice(strategy, 8))


def _counting_cnn():
    from systolica.app import demo
    from systolica.compiler import compile_network
    return compile_network(preset("tiny"), demo.cnn())


def _counting_fetched():
    from systolica.app.bench_cases import gemm_network
    from systolica.compiler import compile_network
    return compile_network(preset("tiny"), gemm_network(48, 256, 96, seed=3))


#: Programs for the tiny chip that move every performance counter, by name: the demo
#: CNN (MACs, DRAM both ways), a chain through the UBUF (its crops and fetches, and a
#: fused crop), a GEMM longer than the instruction memory (its fetch).
COUNTING = {"cnn": _counting_cnn, "crop_fetch": lambda: _counting_chain("crop_fetch"),
            "fused_crop": lambda: _counting_chain("fused_crop"),
            "fetched": _counting_fetched}


def sample_cycles(end: int, count: int = 97) -> list[int]:
    """About `count` cycles spread over a run of `end` cycles, with its first, its
    last, its end and one past it."""
    return sorted({*range(0, end, max(1, end // count)), end - 1, end, end + 50})
