"""Run programs on the chip's RTL: Verilator through cocotb, driven by the firmware.

:func:`build` turns a configuration into a Verilator simulator of
``systolica/sim/hdl/sim_top.v`` around the generated chip, once: it is the
:class:`systolica.sim.verilated.Design` of the configuration and the waveform switch,
built by :func:`systolica.sim.verilated.build`, which every later call (from any
process) reuses. :func:`run` executes a batch of jobs in one simulator process, one after the
other on the same chip, and returns what each left in the registers and the DRAM. The
chip is driven by cocotb (the default) or by a plain C++ harness (``harness="cxx"``,
:mod:`systolica.sim.cxxsim`), which is faster and writes no waveforms.

A job is a dict:

``program`` (bytes)
    program image, :func:`systolica.arch.isa.to_bytes` format.
``dram`` (``numpy.uint8`` array ``(words, cfg.dram_word_bytes)``, or a list of
``(first_word, array)`` segments; optional)
    initial DRAM contents: an array from word 0, or each segment's array from its
    first word; every other word is zero, and missing means all zeros. Only the
    non-zero words given travel to the simulator, so give the part a run uses (e.g.
    ``compiled.dram``), not a full-size image.
``prog_addr`` (int, optional)
    DRAM word address of the program region (the PROG_ADDR register; default 0). A
    program longer than ``cfg.imem_depth`` needs it: its image is written there, with
    the DRAM data, and the chip fetches from it (:mod:`systolica.arch.fetch`).
``ubuf`` (``(base, rows)``, optional)
    the UBUF placement the program assumes (``compiled.ubuf``): the driver writes the
    UBUF registers before the run (missing: they keep their reset values, the
    configuration's). One the chip would refuse is an error here.
``readback`` (list of ``(first_word, words)``, optional)
    DRAM word ranges to return after the run; only these are dumped. Missing means
    the whole DRAM, which on a large memory (``base`` has 64 MiB) costs seconds:
    name the ranges instead.
``expect_fault`` (bool or None, default False)
    whether the run must end in a fault; None accepts either.
``timeout_cycles`` (int, optional)
    cycles to wait for the interrupt; the default is derived from the program's
    issue cycles.
``name`` (str, optional)
    label for logs.

A result is a dict with the register values ``status``, ``error``, ``fault_pc``,
``fault_cycle``, ``cycles``, ``macs``, ``dram_rd_bytes``, ``dram_wr_bytes``, ``hwcfg``;
``status_flags`` and ``error_name`` (readable forms), ``faulted`` (bool), ``irq``,
``timed_out``; ``readback`` (list of arrays, one per requested range) and ``dram``
(the whole image when no ranges were given, else None); ``sim_cycles`` (clock cycles
from start to interrupt as seen by the testbench), ``start_time_ns`` (where the run
begins in the waveform), ``wall_s`` (host seconds of that part of the simulation);
``fst`` (waveform path when ``waves``, else None), ``name`` and ``harness``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from systolica.arch import fetch, isa, timing
from systolica.arch.config import ChipConfig
from systolica.arch.regs import STATUS_ERROR
from systolica.firmware import dramfile
from systolica.firmware.driver import describe_status, error_name
from systolica.sim import verilated
from systolica.sim.verilated import build_root, cocotb_environment, log_tail

HDL = verilated.HDL
SIM_TOP = HDL / "sim_top.v"
HDL_TOPLEVEL = "sim_top"
TEST_MODULE = "systolica.sim.cocotb_entry"

#: Verilator options. Amaranth's Verilog trips lint warnings that are fatal by
#: default; the X options make uninitialised state cheap (Amaranth initialises every
#: register anyway). Waveforms (FST) add :data:`verilated.WAVE_ARGS`.
BUILD_ARGS = [*verilated.LINT_ARGS, "-O3", "--x-assign", "fast", "--x-initial", "fast"]
#: The C++ of the model at -O3 (Verilator's makefile defaults to -Os), for both
#: harnesses alike. No -march=native: a build must run on any x86-64.
MAKE_VARIABLES = {"OPT_FAST": "-O3"}
#: Set, it replaces that -O3. ``make test`` sets -O1: its chip builds each run
#: short programs, and -O1 compiles in about half the C++ time for two thirds of the
#: speed. The level is part of a build's key: builds at each level live side by side.
OPT_FAST_ENV = "SYSTOLICA_OPT_FAST"
OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "-Os", "-Og")
TIMESCALE = verilated.TIMESCALE
#: Who drives the chip: cocotb (Python, VPI; waveforms) or a plain C++ main
#: (:mod:`systolica.sim.cxxsim`), the same Verilog either way.
HARNESSES = ("cocotb", "cxx")
CXX_MAIN = HDL / "harness.cpp"


class RtlSimError(RuntimeError):
    """Building or running the simulator failed, or a job did not end as expected."""


def make_variables() -> dict:
    """The make variables of a chip's C++ build: :data:`MAKE_VARIABLES`, with
    ``$SYSTOLICA_OPT_FAST`` in place of -O3 when it is set."""
    opt = os.environ.get(OPT_FAST_ENV, "").strip()
    if opt and opt not in OPT_LEVELS:
        raise RtlSimError(f"{OPT_FAST_ENV}={opt!r} is not a C++ optimisation level: "
                          f"set one of {', '.join(OPT_LEVELS)}, or unset it")
    return {**MAKE_VARIABLES, "OPT_FAST": opt} if opt else dict(MAKE_VARIABLES)


def _check_harness(harness: str, waves: bool) -> None:
    if harness not in HARNESSES:
        raise RtlSimError(f"harness must be one of {', '.join(HARNESSES)}, not {harness!r}")
    if waves and harness != "cocotb":
        raise RtlSimError("waveforms are written by the cocotb harness only; "
                          "drop waves or use harness='cocotb'")


def design(cfg: ChipConfig, waves: bool = False, harness: str = "cocotb") -> verilated.Design:
    """The Verilated chip: ``systolica/sim/hdl/sim_top.v`` (DRAM model, top-level
    ports) around the chip generated by :func:`systolica.rtl.verilog.generate`. For
    cocotb only the top's signals are public: the testbench drives the ports and moves
    the DRAM through files, and public internals cost several times the speed."""
    _check_harness(harness, waves)

    def generate() -> str:
        from systolica.rtl import verilog
        return verilog.generate(cfg)

    cxx = harness == "cxx"
    return verilated.Design(
        top=HDL_TOPLEVEL, label=f"chip-{cfg.key}" + ("-cxx" if cxx else ""),
        verilog=generate, generator=("systolica.rtl.verilog",), params=repr(cfg),
        sources=(SIM_TOP,),
        parameters={"WORDS": cfg.dram_words, "WIDTH": 8 * cfg.dram_word_bytes},
        build_args=tuple(BUILD_ARGS), make_variables=make_variables(), waves=waves,
        public="top", main=CXX_MAIN if cxx else None)


def build(cfg: ChipConfig, waves: bool = False, harness: str = "cocotb") -> Path:
    """Build (or reuse) the simulator for ``cfg``; return its directory, which holds
    the generated chip (``design.v``), ``build.log`` and the Verilator output in
    ``sim_build/``. One build per configuration, waveform switch and harness, shared
    by every process through :func:`systolica.sim.verilated.build`."""
    try:
        return verilated.build(design(cfg, waves, harness))
    except verilated.BuildError as exc:
        raise RtlSimError(f"chip {cfg.key}: {exc}") from None


def _default_timeout(cfg: ChipConfig, image: bytes) -> int:
    """Twice the cycle by which every instruction should be done, plus slack."""
    end = 0
    for word in isa.from_bytes(image):
        ins = isa.decode(word)
        try:
            end = max(end, ins.cycle + timing.done(cfg, ins))
        except (ValueError, AttributeError, KeyError):
            end = max(end, ins.cycle + 1)
    return 2 * end + 10_000


def _dram_segments(cfg: ChipConfig, dram) -> list[tuple[int, np.ndarray]]:
    """A job's ``dram``, an array from word 0 or ``(first_word, array)`` segments, as
    checked segments."""
    if isinstance(dram, (list, tuple)):
        pairs = []
        for k, seg in enumerate(dram):
            if not (isinstance(seg, (list, tuple)) and len(seg) == 2):
                raise RtlSimError(f"DRAM segment {k} must be a (first_word, array) pair, "
                                  f"not {type(seg).__name__}")
            pairs.append((seg[0], seg[1]))
    else:
        pairs = [(0, dram)]
    out = []
    for first, data in pairs:
        data = np.asarray(data)
        if data.dtype == np.int8:
            data = data.view(np.uint8)
        elif data.dtype != np.uint8:
            raise RtlSimError(f"DRAM image must be uint8 (or int8), not {data.dtype}")
        if isinstance(first, bool) or not isinstance(first, (int, np.integer)) \
                or first < 0 or data.ndim != 2 or data.shape[1] != cfg.dram_word_bytes \
                or first + data.shape[0] > cfg.dram_words:
            raise RtlSimError(f"DRAM segment at word {first!r} of shape {data.shape} must "
                              f"be (words, {cfg.dram_word_bytes}) and lie inside the "
                              f"{cfg.dram_words}-word DRAM")
        out.append((int(first), data))
    return out


def _check_ranges(cfg: ChipConfig, ranges) -> list[list[int]]:
    out = []
    for first, count in ranges:
        first, count = int(first), int(count)
        if first < 0 or count < 0 or first + count > cfg.dram_words:
            raise RtlSimError(f"readback range ({first}, {count}) is outside the "
                              f"{cfg.dram_words}-word DRAM")
        out.append([first, count])
    return out


def _write_jobs(cfg: ChipConfig, jobs: list[dict], run_dir: Path) -> list[dict]:
    """Check ``jobs`` and write their programs and DRAM load files into ``run_dir``;
    return their entries of the jobs file (before any simulator is built)."""
    specs = []
    for index, job in enumerate(jobs):
        unknown = set(job) - {"program", "dram", "readback", "expect_fault",
                              "timeout_cycles", "name", "prog_addr", "ubuf"}
        if unknown:
            raise RtlSimError(f"job {index}: unknown key(s) {sorted(unknown)}")
        image = bytes(job["program"])
        prog = f"job{index}.bin"
        (run_dir / prog).write_bytes(image)
        segments = [] if job.get("dram") is None else _dram_segments(cfg, job["dram"])
        prog_addr = job.get("prog_addr")
        count = len(image) // (isa.WORD_BITS // 8)
        if fetch.fetches(cfg, count):
            if prog_addr is None:
                raise RtlSimError(
                    f"job {index}: the program has {count} instructions, more than "
                    f"imem_depth {cfg.imem_depth}, so the chip fetches it from DRAM: give "
                    f"the job a 'prog_addr' (e.g. the compiled program's .prog_addr)")
            region = fetch.program_words(cfg, image)
            if isinstance(prog_addr, bool) or not isinstance(prog_addr, (int, np.integer)) \
                    or not 0 <= prog_addr < 1 << 32:
                raise RtlSimError(f"job {index}: prog_addr must be a 32-bit word address, "
                                  f"not {prog_addr!r}")
            if prog_addr + len(region) <= cfg.dram_words:   # else the chip faults
                segments.append((int(prog_addr), region))   # PROG_RANGE at start
        dram = None
        if segments:
            dram = f"job{index}-dram.hex"
            dramfile.write_segments(run_dir / dram, segments)
        readback = job.get("readback")
        ubuf = job.get("ubuf")
        if ubuf is not None:
            try:
                base, rows = (int(v) for v in ubuf)
            except (TypeError, ValueError):
                raise RtlSimError(f"job {index}: ubuf must be (base, rows), not "
                                  f"{ubuf!r}") from None
            why = cfg.ubuf_problem(base, rows)
            if why:
                raise RtlSimError(f"job {index}: UBUF base {base}, rows {rows}: {why}")
            ubuf = [base, rows]
        specs.append({
            "name": job.get("name", f"job{index}"),
            "program": prog,
            "prog_addr": int(prog_addr or 0),
            "ubuf": ubuf,
            "dram": dram,
            "readback": _check_ranges(cfg, [(0, cfg.dram_words)] if readback is None
                                      else readback),
            "timeout_cycles": int(job.get("timeout_cycles")
                                  or _default_timeout(cfg, image)),
        })
    return specs


def run(cfg: ChipConfig, jobs: list[dict], waves: bool = False, *,
        keep: bool = False, harness: str = "cocotb") -> list[dict]:
    """Run ``jobs`` one after another in one simulator process (cocotb) or one
    process each (``harness="cxx"``, no waveforms); return one result per job (see
    the module docstring). The jobs are checked before any simulator is built. The run
    directory under ``build/runs/`` is deleted afterwards unless ``keep``, ``waves``
    or a failure."""
    _check_harness(harness, waves)
    if not jobs:
        return []
    runs = build_root() / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{cfg.key}-", dir=runs))

    try:
        specs = _write_jobs(cfg, jobs, run_dir)
    except RtlSimError:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    out = build(cfg, waves, harness)
    if harness == "cxx":
        raw = _run_cxx(cfg, out, run_dir, specs)
    else:
        raw = _run_cocotb(cfg, out, run_dir, specs, waves)
    fst = str(run_dir / "dump.fst") if waves else None
    results = []
    problems = []
    for index, (job, spec, res) in enumerate(zip(jobs, specs, raw, strict=True)):
        res["dram"] = res["readback"][0] if job.get("readback") is None else None
        res["faulted"] = bool(res["status"] & STATUS_ERROR)
        res["fst"] = fst
        res["harness"] = harness
        if res["timed_out"]:
            problems.append(f"job {index} ({spec['name']}): no interrupt within "
                            f"{spec['timeout_cycles']} cycles ({res['status_flags']})")
        expect = job.get("expect_fault", False)
        if expect is not None and not res["timed_out"] and res["faulted"] != expect:
            problems.append(
                f"job {index} ({spec['name']}): "
                + (f"faulted with {res['error_name']} at pc {res['fault_pc']}, "
                   f"cycle {res['fault_cycle']}" if res["faulted"]
                   else "finished without the expected fault"))
        results.append(res)
    if problems:
        raise RtlSimError(f"RTL run in {run_dir}:\n  " + "\n  ".join(problems))
    if not (keep or waves):
        shutil.rmtree(run_dir, ignore_errors=True)
    return results


def _run_cxx(cfg: ChipConfig, out: Path, run_dir: Path, specs: list[dict]) -> list[dict]:
    """Each job in its own harness process, from its DRAM load file (an empty one
    when it has none: the load zeroes the memory), dumping only its readback ranges."""
    from systolica.sim import cxxsim
    raw = []
    for index, spec in enumerate(specs):
        dram_in = run_dir / (spec["dram"] or f"job{index}-dram.hex")
        if spec["dram"] is None:
            dramfile.write_segments(dram_in, [])
        try:
            res = cxxsim.run_job(out / "sim_build" / HDL_TOPLEVEL, run_dir, index,
                                 program=(run_dir / spec["program"]).read_bytes(),
                                 prog_addr=spec["prog_addr"], imem_depth=cfg.imem_depth,
                                 ubuf=spec["ubuf"],
                                 dram_in=dram_in, readback=spec["readback"],
                                 word_bytes=cfg.dram_word_bytes,
                                 timeout_cycles=spec["timeout_cycles"])
        except (RuntimeError, OSError) as exc:
            raise RtlSimError(f"simulation in {run_dir} failed: {exc}") from None
        res.update(name=spec["name"], status_flags=describe_status(res["status"]),
                   error_name=error_name(res["error"]))
        raw.append(res)
    return raw


def _run_cocotb(cfg: ChipConfig, out: Path, run_dir: Path, specs: list[dict],
                waves: bool) -> list[dict]:
    # The DRAM file names are relative to the run directory, the simulator's working
    # directory: sim_top.v holds a name in 128 characters, less than a deep path.
    jobs_file = run_dir / "jobs.json"
    jobs_file.write_text(json.dumps({
        "word_bytes": cfg.dram_word_bytes, "dram_words": cfg.dram_words,
        "imem_depth": cfg.imem_depth,
        "dram_in": "dram_in.hex", "dram_out": "dram_out.hex",
        "results": "results.json", "jobs": specs,
    }, indent=1))

    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner
    runner = get_runner("verilator")
    log = run_dir / "sim.log"
    results_xml = run_dir / "results.xml"
    try:
        with cocotb_environment():
            runner.test(
                test_module=TEST_MODULE,
                hdl_toplevel=HDL_TOPLEVEL,
                hdl_toplevel_lang="verilog",
                build_dir=out / "sim_build",
                test_dir=run_dir,
                results_xml=str(results_xml),
                extra_env={"SYSTOLICA_JOBS": str(jobs_file)},
                plusargs=["+DRAM_IN=dram_in.hex", "+DRAM_OUT=dram_out.hex"],
                waves=waves,
                log_file=log,
            )
        tests, failed = get_results(results_xml)
    except (RuntimeError, SystemExit, OSError) as exc:
        raise RtlSimError(f"simulation in {run_dir} failed ({exc}); {log} ends:\n"
                          f"{log_tail(log)}") from None
    if failed or not tests:
        raise RtlSimError(f"simulation in {run_dir}: the cocotb test failed; {log} ends:\n"
                          f"{log_tail(log)}")

    raw = json.loads((run_dir / "results.json").read_text())
    for res in raw:
        res["readback"] = [np.load(run_dir / name) for name in res["readback"]]
    return raw
