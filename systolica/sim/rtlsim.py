"""Run programs on the chip's RTL: Verilator through cocotb, driven by the firmware.

:func:`build` turns a configuration into a Verilator simulator of
``systolica/sim/hdl/sim_top.v`` around the generated chip, once: it is the
:class:`systolica.sim.verilated.Design` of the configuration and the waveform switch,
built by :func:`systolica.sim.verilated.build`, which every later call (from any
process) reuses. :func:`run` executes a batch of jobs in one simulator process, one after the
other on the same chip, and returns what each left in the registers and the DRAM. The
chip is driven by cocotb (the default) or by a plain C++ harness (``harness="cxx"``,
:mod:`systolica.sim.cxxsim`), which is faster and writes no waveforms.

A job is an :class:`~systolica.sim.jobs.RtlJob` (a :class:`~systolica.arch.loadable.Loadable`
with the DRAM ranges to read back, whether it must fault, a timeout and a name), a
result an :class:`~systolica.sim.jobs.RtlResult`. A program longer than
``cfg.imem_depth``, or one fetched from its ``fetch_from`` (PROG_FETCH, written before
the run; only the instructions below it are preloaded), needs the Loadable's
``prog_addr``: its image is written there, with the DRAM data, and the chip fetches
from it (:mod:`systolica.arch.fetch`); its ``ubuf``
is written to the UBUF registers before the run (one the chip would refuse is an error
here). A job's ``samples`` are cycles at which the harness reads the performance
counters while the program runs (once the chip's cycle counter reads each; the
result's ``samples``): the C++ harness in its own loop, cocotb with one timer per
sample, so no Python runs per cycle either way.

How far a long run has got: the harness rewrites a file per job in the run directory
a few times a second, and ``run(..., progress=f)`` calls ``f(job index, job name,
cycles simulated, cycles the program should take)`` from a thread that watches them
(:class:`systolica.sim.progress.Display` shows it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from systolica.arch import fetch, image_file, isa, timing
from systolica.arch.config import ChipConfig, require_config
from systolica.arch.regs import STATUS_ERROR
from systolica.firmware import dramfile
from systolica.firmware.driver import describe_status, error_name
from systolica.sim import verilated
from systolica.sim.jobs import RtlJob, RtlResult
from systolica.sim.verilated import build_root, cocotb_environment, log_tail

HDL = verilated.HDL
SIM_TOP = HDL / "sim_top.v"
#: The DRAM model behind sim_top.v's DPI-C imports: a sparse store of pages.
DRAM_MODEL = HDL / "dram.cpp"
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
#: The file in the run directory in which the harness says how far job ``index`` has
#: got: ``<job index> <cycles since its start>``.
PROGRESS_FILE = "job{index}.progress"
#: How often the host looks at it (seconds).
PROGRESS_POLL_S = 0.2

#: ``progress(job index, job name, cycles simulated, cycles the program should take)``
Progress = Callable[[int, str, int, int], None]


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


#: What ``waves`` may be: False or None (none), True (the default format, FST) or a
#: format's name.
Waves = bool | str | None


def wave_format(waves: Waves) -> str | None:
    """The waveform format that ``waves`` asks for (``"fst"``, ``"vcd"``), or None."""
    if waves is None or waves is False:
        return None
    if waves is True:
        return verilated.WAVE_FORMATS[0]
    if waves in verilated.WAVE_FORMATS:
        return waves
    raise RtlSimError(f"waves must be True, False or a waveform format "
                      f"({', '.join(verilated.WAVE_FORMATS)}), not {waves!r}")


def _check_harness(harness: str, waves: Waves) -> None:
    if harness not in HARNESSES:
        raise RtlSimError(f"harness must be one of {', '.join(HARNESSES)}, not {harness!r}")
    if wave_format(waves) and harness != "cocotb":
        raise RtlSimError("waveforms are written by the cocotb harness only; "
                          "drop waves or use harness='cocotb'")


def design(cfg: ChipConfig, waves: Waves = False, harness: str = "cocotb"
           ) -> verilated.Design:
    """The Verilated chip: ``systolica/sim/hdl/sim_top.v`` (DRAM model, top-level
    ports) around the chip generated by :func:`systolica.rtl.verilog.generate`. For
    cocotb only the top's signals are public: the testbench drives the ports and moves
    the DRAM through files, and public internals cost several times the speed.
    ``waves``: none, FST (True or ``"fst"``) or ``"vcd"``; each its own build."""
    _check_harness(harness, waves)
    fmt = wave_format(waves)

    def generate() -> str:
        from systolica.rtl import verilog
        return verilog.generate(cfg)

    cxx = harness == "cxx"
    from systolica.rtl import verilog
    return verilated.Design(
        top=HDL_TOPLEVEL, label=f"chip-{cfg.key}" + ("-cxx" if cxx else ""),
        verilog=generate, generator=("systolica.rtl.verilog",), params=repr(cfg),
        sources=(SIM_TOP, *verilog.sources(cfg)), cxx=(DRAM_MODEL,),
        parameters={"WORDS": cfg.dram_words, "WIDTH": 8 * cfg.dram_word_bytes},
        build_args=tuple(BUILD_ARGS), make_variables=make_variables(),
        waves=fmt is not None, wave_format=fmt or verilated.WAVE_FORMATS[0],
        public="top", main=CXX_MAIN if cxx else None)


def build(cfg: ChipConfig, waves: Waves = False, harness: str = "cocotb") -> Path:
    """Build (or reuse) the simulator for ``cfg``; return its directory, which holds
    the generated chip (``design.v``), ``build.log`` and the Verilator output in
    ``sim_build/``. One build per configuration, waveform format and harness, in the
    cache of builds (:func:`systolica.sim.verilated.cache_root`), shared by every
    process through :func:`systolica.sim.verilated.build`."""
    require_config(cfg, "rtlsim.build(cfg)")
    try:
        return verilated.build(design(cfg, waves, harness))
    except verilated.BuildError as exc:
        raise RtlSimError(f"chip {cfg.key}: {exc}") from None


def expected_end(cfg: ChipConfig, image: bytes) -> int:
    """The cycle by which every instruction should be done (what the cycle counter
    reads at the end of a run without faults)."""
    end = 0
    for word in isa.from_bytes(image):
        ins = isa.decode(word)
        try:
            end = max(end, ins.cycle + timing.done(cfg, ins))
        except (ValueError, AttributeError, KeyError):
            end = max(end, ins.cycle + 1)
    return end


def default_timeout(end: int) -> int:
    """Twice the cycle by which every instruction should be done, plus slack."""
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


#: Used ranges of the DRAM closer than this many words are read back as one.
MERGE_GAP_WORDS = 4096


def used_ranges(cfg: ChipConfig, segments: list[tuple[int, np.ndarray]],
                program: list[isa.Instr]) -> list[tuple[int, int]]:
    """The DRAM word ranges ``(first_word, words)`` a run can leave non-zero: the
    words it is loaded with and those its DMA stores may write (the memory is zeroed
    before a load, and nothing else writes it), merged where they are close. Reading
    back only these gives the whole DRAM after the run, at the cost of what it uses."""
    spans = [(first, first + data.shape[0]) for first, data in segments if data.shape[0]]
    for ins in program:
        if ins.op is isa.Opcode.DMA and ins.fields.get("kind") in (isa.DmaKind.STORE_CBUF,
                                                                   isa.DmaKind.STORE_ACC):
            words = cfg.acc_row_words if ins.fields["kind"] == isa.DmaKind.STORE_ACC else 1
            lo = ins.fields["dram_addr"]
            hi = lo + (max(ins.fields["rows"], 1) - 1) * ins.fields["dram_stride"] + words
            if lo < cfg.dram_words:
                spans.append((lo, min(hi, cfg.dram_words)))
    merged: list[list[int]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1] + MERGE_GAP_WORDS:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi - lo) for lo, hi in merged]


def _write_jobs(cfg: ChipConfig, jobs: list[RtlJob], run_dir: Path) -> list[dict]:
    """Check ``jobs`` and write their programs and DRAM load files into ``run_dir``;
    return their entries of the jobs file (before any simulator is built)."""
    specs = []
    for index, job in enumerate(jobs):
        if not isinstance(job, RtlJob):
            raise RtlSimError(f"job {index} must be an RtlJob, not {type(job).__name__}")
        program = job.program
        program.verify(cfg, f"rtlsim.run job {index} ({job.name or f'job{index}'})")
        image = bytes(program.image)
        prog = f"job{index}.img"
        segments = [] if program.dram is None else _dram_segments(cfg, program.dram)
        prog_addr = program.prog_addr
        count = len(image) // (isa.WORD_BITS // 8)
        if fetch.fetches(cfg, count, program.fetch_from):
            if prog_addr is None:
                raise RtlSimError(
                    f"job {index}: the program has {count} instructions and the chip "
                    f"fetches them from instruction {program.preload(cfg)} on (imem_depth "
                    f"{cfg.imem_depth}, fetch_from {program.fetch_from}) from DRAM: give "
                    f"its Loadable a prog_addr (e.g. the compiled program's .prog_addr)")
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
        ubuf = program.ubuf
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
        # the simulator's side reads the program back from its image file, checked
        # against the chip (docs/image-format.md)
        (run_dir / prog).write_bytes(program.to_file())
        end = expected_end(cfg, image)
        specs.append({
            "name": job.name or f"job{index}",
            "program": prog,
            "prog_addr": int(prog_addr or 0),
            "ubuf": ubuf,
            "dram": dram,
            "readback": _check_ranges(cfg, used_ranges(
                cfg, segments, [isa.decode(w) for w in isa.from_bytes(image)])
                if job.readback is None else job.readback),
            "timeout_cycles": int(job.timeout_cycles or default_timeout(end)),
            "samples": list(job.samples),
            "expected_cycles": end,
        })
    return specs


def run(cfg: ChipConfig, jobs: list[RtlJob], waves: Waves = False, *,
        waves_file: str | os.PathLike | None = None, keep: bool = False,
        harness: str = "cocotb", progress: Progress | None = None) -> list[RtlResult]:
    """Run ``jobs`` one after another in one simulator process (cocotb) or one
    process each (``harness="cxx"``, no waveforms); return one result per job (see
    the module docstring). The jobs are checked before any simulator is built.

    ``waves`` (True or ``"fst"``, or ``"vcd"``) writes a waveform of the whole run:
    to ``waves_file`` if given (its folder is made; the file replaced whole), else to
    ``dump.fst`` / ``dump.vcd`` in the run directory; each result's ``waves`` names
    it. The run directory under ``build/runs/`` is deleted afterwards unless
    ``keep``, a failure, or a waveform left in it. ``progress`` is told how far the
    simulation has got, a few times a second (from another thread)."""
    require_config(cfg, "rtlsim.run(cfg, jobs)")
    if not isinstance(jobs, (list, tuple)):
        raise TypeError(f"rtlsim.run(cfg, jobs): jobs must be a list of RtlJob (one job: "
                        f"[job]), not {type(jobs).__name__}")
    _check_harness(harness, waves)
    fmt = wave_format(waves)
    if waves_file is not None and fmt is None:
        raise RtlSimError("waves_file names where the waveform goes: give waves too "
                          "(True, 'fst' or 'vcd')")
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
    for index, spec in enumerate(specs):
        spec["progress"] = PROGRESS_FILE.format(index=index) if progress else None
    out = build(cfg, fmt, harness)
    with _watching(run_dir, specs, progress):
        if harness == "cxx":
            raw = _run_cxx(cfg, out, run_dir, specs)
        else:
            raw = _run_cocotb(cfg, out, run_dir, specs, fmt is not None)
    wave = _place_waves(run_dir, fmt, waves_file)
    results = []
    problems = []
    for index, (job, spec, raw_res) in enumerate(zip(jobs, specs, raw, strict=True)):
        res = _result(cfg, raw_res, spec["readback"] if job.readback is None else None,
                      waves=wave, fst=wave if fmt == "fst" else None, harness=harness)
        if res.timed_out:
            problems.append(f"job {index} ({spec['name']}): no interrupt within "
                            f"{spec['timeout_cycles']} cycles ({res.status_flags})")
        expect = job.expect_fault
        if expect is not None and not res.timed_out and res.faulted != expect:
            problems.append(
                f"job {index} ({spec['name']}): "
                + (f"faulted with {res.error_name} at pc {res.fault_pc}, "
                   f"cycle {res.fault_cycle}" if res.faulted
                   else "finished without the expected fault"))
        results.append(res)
    if problems:
        raise RtlSimError(f"RTL run in {run_dir}:\n  " + "\n  ".join(problems))
    if not keep and (wave is None or waves_file is not None):
        shutil.rmtree(run_dir, ignore_errors=True)
    return results


def _place_waves(run_dir: Path, fmt: str | None, waves_file) -> str | None:
    """Where the run's waveform is: moved from the run directory (``dump.<fmt>``, as
    cocotb's Verilator main names it) to ``waves_file`` if given."""
    if fmt is None:
        return None
    dump = run_dir / f"dump.{fmt}"
    if not dump.exists():
        raise RtlSimError(f"the simulation in {run_dir} wrote no waveform {dump.name}")
    if waves_file is None:
        return str(dump)
    target = Path(waves_file)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(dump, target.with_name(target.name + ".part"))
        os.replace(target.with_name(target.name + ".part"), target)
    except OSError as exc:
        raise RtlSimError(f"cannot write the waveform to {target} "
                          f"({exc.strerror or exc}); it is still in {dump}") from None
    return str(target)


@contextlib.contextmanager
def _watching(run_dir: Path, specs: list[dict], progress: Progress | None):
    """While the simulator runs, tell ``progress`` what the harness writes in each
    job's progress file whenever it changes, and once more at the end."""
    if progress is None:
        yield
        return
    stop = threading.Event()
    seen = [""] * len(specs)

    def look():
        for index, spec in enumerate(specs):
            try:
                text = (run_dir / spec["progress"]).read_text()
            except OSError:
                continue
            _, _, cycles = text.strip().partition(" ")
            if text != seen[index] and cycles.isdigit():
                seen[index] = text
                progress(index, spec["name"], int(cycles), spec["expected_cycles"])

    def watch():
        while not stop.wait(PROGRESS_POLL_S):
            look()
        look()                  # what each job wrote last

    thread = threading.Thread(target=watch, name="rtlsim-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _result(cfg: ChipConfig, raw: dict, used: list | None, *, waves: str | None,
            fst: str | None, harness: str) -> RtlResult:
    """A simulator process's result (a dict of registers and figures) as a result;
    with `used` (the ranges :func:`used_ranges` read back) the whole DRAM, zeros
    outside them (numpy's zeros take memory only where written)."""
    fields = {f.name for f in dataclasses.fields(RtlResult)}
    given = {k: v for k, v in raw.items() if k in fields}
    dram = None
    if used is not None:
        dram = np.zeros((cfg.dram_words, cfg.dram_word_bytes), dtype=np.uint8)
        for (first, count), words in zip(used, raw["readback"], strict=True):
            dram[first:first + count] = words
        given["readback"] = [dram]         # as for the one range of the whole DRAM
    return RtlResult(**given, faulted=bool(raw["status"] & STATUS_ERROR), dram=dram,
                     waves=waves, fst=fst, harness=harness)


def _run_cxx(cfg: ChipConfig, out: Path, run_dir: Path, specs: list[dict]) -> list[dict]:
    """Each job in its own harness process, from its DRAM load file (an empty one
    when it has none: the load zeroes the memory), dumping only its readback ranges
    and saying how far it has got in its progress file, if it has one."""
    from systolica.sim import cxxsim
    raw = []
    for index, spec in enumerate(specs):
        dram_in = run_dir / (spec["dram"] or f"job{index}-dram.hex")
        if spec["dram"] is None:
            dramfile.write_segments(dram_in, [])
        path = run_dir / spec["program"]
        image = image_file.unpack(path.read_bytes(), source=str(path), cfg=cfg)
        try:
            res = cxxsim.run_job(out / "sim_build" / HDL_TOPLEVEL, run_dir, index,
                                 program=image.words,
                                 prog_addr=image.prog_addr or 0, imem_depth=cfg.imem_depth,
                                 fetch_from=image.fetch_from,
                                 ubuf=list(image.ubuf) if image.ubuf else None,
                                 dram_in=dram_in, readback=spec["readback"],
                                 word_bytes=cfg.dram_word_bytes,
                                 timeout_cycles=spec["timeout_cycles"],
                                 samples=spec["samples"],
                                 progress=spec["progress"] and run_dir / spec["progress"])
        except (RuntimeError, OSError) as exc:
            raise RtlSimError(f"simulation in {run_dir} failed: {exc}") from None
        res.update(name=spec["name"], status_flags=describe_status(res["status"]),
                   error_name=error_name(res["error"]))
        raw.append(res)
    return raw


def run_cocotb(out: Path, run_dir: Path, module: str, env: dict, waves: bool = False
               ) -> None:
    """Run cocotb `module` on the simulator built in `out` (``sim_top``, its DRAM
    files ``dram_in.hex`` / ``dram_out.hex`` in `run_dir`, the simulator's working
    directory), with `env` added to its environment; :class:`RtlSimError` with the
    end of its log if it fails or no test ran."""
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner
    log = run_dir / "sim.log"
    results_xml = run_dir / "results.xml"
    try:
        with cocotb_environment():
            get_runner("verilator").test(
                test_module=module, hdl_toplevel=HDL_TOPLEVEL, hdl_toplevel_lang="verilog",
                build_dir=out / "sim_build", test_dir=run_dir,
                results_xml=str(results_xml), extra_env=env,
                plusargs=["+DRAM_IN=dram_in.hex", "+DRAM_OUT=dram_out.hex"],
                waves=waves, log_file=log)
        tests, failed = get_results(results_xml)
    except (RuntimeError, SystemExit, OSError) as exc:
        raise RtlSimError(f"simulation in {run_dir} failed ({exc}); {log} ends:\n"
                          f"{log_tail(log)}") from None
    if failed or not tests:
        raise RtlSimError(f"simulation in {run_dir}: the cocotb test failed; {log} ends:\n"
                          f"{log_tail(log)}")


def _run_cocotb(cfg: ChipConfig, out: Path, run_dir: Path, specs: list[dict],
                waves: bool) -> list[dict]:
    # The DRAM file names are relative to the run directory, the simulator's working
    # directory: sim_top.v holds a name in 128 characters, less than a deep path.
    jobs_file = run_dir / "jobs.json"
    jobs_file.write_text(json.dumps({
        "word_bytes": cfg.dram_word_bytes, "dram_words": cfg.dram_words,
        "imem_depth": cfg.imem_depth, "chip": cfg.to_dict(),
        "dram_in": "dram_in.hex", "dram_out": "dram_out.hex",
        "results": "results.json", "jobs": specs,
    }, indent=1))

    run_cocotb(out, run_dir, TEST_MODULE, {"SYSTOLICA_JOBS": str(jobs_file)}, waves)

    raw = json.loads((run_dir / "results.json").read_text())
    for res in raw:
        res["readback"] = [np.load(run_dir / name) for name in res["readback"]]
    return raw
