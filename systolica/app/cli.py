"""``systolica``: compile networks, run them on the RTL, benchmark, disassemble.

Whatever is wrong with what it was given (an argument, a file, a program) ends in one
line ``systolica: error: ...`` on stderr and exit status 2, before any long work starts.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import threading
import zipfile
from pathlib import Path

import numpy as np

from systolica.arch.boards import BOARDS
from systolica.arch.config import PRESETS

#: Exit status for anything wrong with the input (argparse uses it too).
EXIT_USAGE = 2
#: Exit status when the reader of our output went away (as for a process killed by SIGPIPE).
EXIT_BROKEN_PIPE = 128 + 13
#: Exit status after Ctrl-C (as for a process killed by SIGINT).
EXIT_INTERRUPTED = 128 + 2
#: A step that may run this long without a word says what it is doing (seconds).
BUILD_NOTICE_SECONDS = 3.0

IMAGE_HINT = ("a program image (as `systolica compile --out FILE` or `systolica schedule "
              "--image FILE` writes, docs/image-format.md)")
TEXT_HINT = "program text (.stp, see docs/scheduling.md)"


class UsageError(Exception):
    """Something the user gave cannot be used; the message says what and what to do."""


class _Parser(argparse.ArgumentParser):
    """argparse with the one error format of this command."""

    def error(self, message: str):
        if "not allowed with argument" in message:      # a mutually exclusive pair
            message += " (each names what to run); give only one of them"
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"systolica: error: {message}\n")


def _version() -> str:
    from importlib import metadata
    try:
        return metadata.version("systolica")
    except metadata.PackageNotFoundError:
        return "(not installed)"


# -- argument types ------------------------------------------------------------------------
def _shape(text: str) -> tuple[int, int, int]:
    try:
        dims = [int(x) for x in text.lower().split("x")]
    except ValueError:
        dims = []
    if len(dims) != 3:
        raise argparse.ArgumentTypeError(
            f"expected MxKxN, three sizes joined by 'x' (e.g. 64x64x64), not {text!r}")
    bad = [f"{n} = {d}" for n, d in zip("MKN", dims) if d < 1]
    if bad:
        raise argparse.ArgumentTypeError(
            f"{text!r} has {', '.join(bad)}; every size must be a positive integer "
            f"(e.g. 64x64x64)")
    return dims[0], dims[1], dims[2]


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, not {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}")
    return value


def _number(low: float | None = None, *, infinite: bool = False):
    """A float type: finite (or +inf when `infinite`), at least `low` if given."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if value != value or value == float("-inf") or (not infinite and value == float("inf")):
            raise argparse.ArgumentTypeError(f"expected a {'' if infinite else 'finite '}"
                                             f"number, not {text!r}")
        if low is not None and value < low:
            raise argparse.ArgumentTypeError(f"expected a number of at least {low:g}, "
                                             f"not {text!r}")
        return value
    return parse


#: Options whose value may start with '-' (a negative number, refused by its own check).
NUMERIC_OPTIONS = ("--gemm", "--seed", "--outputs-per-pass", "--tolerance",
                   "--benefit-threshold", "--cost-threshold", "--older-than", "--clock-mhz")


def _join_negative_values(argv: list[str]) -> list[str]:
    """``--gemm -1x2x3`` as ``--gemm=-1x2x3``: argparse would take the value for an
    option and say only 'expected one argument'; this way its check names the size."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in NUMERIC_OPTIONS and arg[:1] == "-" and arg[1:2].isdigit():
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


# -- files (systolica.files: regular files only, bounded; outputs checked up front and
# written atomically) -----------------------------------------------------------------------
def _read_bytes(path: str, what: str, option: str | None = None, kind: str = "image") -> bytes:
    from systolica import files
    return files.read_input(path, what, option=option, kind=kind)


def _check_output(path: str | None, option: str) -> None:
    """Refuse an output path that cannot be written before any work is done (None: the
    option was not given)."""
    if path is None:
        return
    from systolica import files
    files.check_output(path, option)


def _check_outputs(*outputs: tuple[str, str | None], inputs: tuple[str, ...] = ()) -> None:
    """Check every output (option, path; None: not given) up front, and that no two
    name the same file and none names an input: one would silently replace the other."""
    seen: dict[str, str] = {os.path.realpath(p): f"the input {p}" for p in inputs if p}
    for option, path in outputs:
        _check_output(path, option)
        if path is None:
            continue
        where = os.path.realpath(path)
        if where in seen:
            raise UsageError(f"{option} {path} is also {seen[where]}: writing one would "
                             f"replace the other; give {option} a file of its own")
        seen[where] = f"{option}"


def _write_bytes(path: str, data: bytes) -> None:
    from systolica import files
    files.write_atomic(path, data)



# -- long steps --------------------------------------------------------------------------
@contextlib.contextmanager
def _notice(text: str):
    """Say `text` on stderr with the seconds it has taken so far: a spinner and a
    clock on a terminal, else one plain line once the step has taken more than
    BUILD_NOTICE_SECONDS and another with its time when it ends (a log should show
    why it waited, and how long)."""
    import time

    from rich.console import Console
    console = Console(stderr=True)
    if console.is_terminal:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
        with Progress(SpinnerColumn(), TextColumn("{task.description}"),
                      TimeElapsedColumn(), console=console, transient=True) as bar:
            bar.add_task(text, total=None)
            yield
        return
    said = threading.Event()

    def say():
        print(f"systolica: {text}", file=sys.stderr, flush=True)
        said.set()

    began = time.monotonic()
    timer = threading.Timer(BUILD_NOTICE_SECONDS, say)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        if said.is_set():
            print(f"systolica: ... done in {time.monotonic() - began:.0f} s", file=sys.stderr,
                  flush=True)


def _ensure_built(cfg, waves=False, harness: str = "cocotb") -> None:
    """Build (or find) the Verilated chip, saying so with the time it takes: the first
    build of a configuration takes minutes. A build already in the cache is found in
    a moment, silently."""
    from systolica.sim import rtlsim, verilated
    design = rtlsim.design(cfg, waves, harness)
    if verilated.cached(design) is not None:
        rtlsim.build(cfg, waves=waves, harness=harness)
        return
    with _notice(f"building the Verilated {cfg.name} chip into "
                 f"{verilated.directory(design)} (minutes the first time for a "
                 f"configuration; later runs reuse it)..."):
        rtlsim.build(cfg, waves=waves, harness=harness)


# -- commands ----------------------------------------------------------------------------
def _check_gemm_fits(cfg, shape: tuple[int, int, int]) -> None:
    """Refuse a GEMM whose operands alone overflow the chip's DRAM before making them
    (a huge --gemm would otherwise allocate gigabytes first)."""
    M, K, N = shape
    need = M * K + K * N + M * N
    if need > cfg.dram_bytes:
        bigger = [n for n, c in sorted(PRESETS.items()) if c.dram_bytes >= need]
        hint = f" or --config {bigger[0]}" if bigger else ""
        raise UsageError(f"--gemm {M}x{K}x{N}: its operands and result need at least "
                         f"{need} bytes of DRAM but the {cfg.name} chip has "
                         f"{cfg.dram_bytes}; choose a smaller GEMM{hint}")


def _network(args, cfg):
    from systolica.app import demo
    if getattr(args, "onnx", None):
        from systolica.compiler.frontend import onnx_import
        return onnx_import.load(_onnx_file(args.onnx), seed=args.seed)
    if args.gemm is None:
        return {"mlp": demo.mlp, "concat": demo.concat}.get(getattr(args, "demo", None),
                                                           demo.cnn)()
    _check_gemm_fits(cfg, args.gemm)
    from systolica.app.bench_cases import gemm_network
    return gemm_network(*args.gemm, seed=args.seed, int32=getattr(args, "int32", False))


#: ``sim``'s options that only an ONNX run uses (dest -> option).
ONNX_ONLY = {"golden_only": "--golden-only", "assign": "--assign", "constant": "--constant",
             "benefit_threshold": "--benefit-threshold", "cost_threshold": "--cost-threshold",
             "tolerance": "--tolerance", "calibration": "--calibration",
             "report_json": "--report-json", "library": "--library"}
#: ``sim``'s options that an ONNX run does not use, and why.
NOT_ONNX = {"waves": ("--waves", "its chip programs run without a waveform"),
            "waves_file": ("--waves-file", "its chip programs run without a waveform"),
            "waves_format": ("--waves-format", "its chip programs run without a waveform"),
            "trace": ("--trace", "it writes no schedule timeline"),
            "plot": ("--plot", "it writes no unit occupancy plot")}
#: ``sim``'s outputs when not given (the demo and --gemm runs).
SIM_TRACE, SIM_PLOT = "build/schedule.json", "build/units.svg"
#: ``sim --waves``'s waveform when no --waves-file is given (by format).
SIM_WAVES = "build/waves.{format}"


def _given(args, dest: str) -> bool:
    value = getattr(args, dest, None)
    return value is not None and value is not False


def _check_sim_options(args) -> None:
    """Refuse an option that this run would ignore, naming it and what it goes with."""
    if args.onnx:
        for dest, (option, why) in NOT_ONNX.items():
            if _given(args, dest):
                raise UsageError(f"{option} does nothing with --onnx ({why}); drop {option}")
    else:
        for dest, option in ONNX_ONLY.items():
            if _given(args, dest):
                raise UsageError(f"{option} is for --onnx (an ONNX model's run); give "
                                 f"--onnx FILE or drop {option}")
    _check_seed(args)


def _check_seed(args) -> None:
    if _given(args, "seed") and args.gemm is None and not getattr(args, "onnx", None):
        raise UsageError(f"--seed does nothing for the demo network (its data are "
                         f"fixed); drop --seed or give --gemm "
                         f"{'or --onnx ' if hasattr(args, 'onnx') else ''}to run on random "
                         f"data")


# -- records (docs/records.md) ----------------------------------------------------------
def _record_outputs(args) -> tuple[tuple[str, str | None], ...]:
    return (("--json", args.json), ("--csv", args.csv))


def _record_settings(args) -> dict:
    """``--clock-mhz`` and ``--energy`` as :func:`systolica.app.records.network_records`
    takes them (the clock in Hz, None: the chip's default; the energy table)."""
    import tomllib

    from systolica.arch import energy
    table = None
    chip_file = getattr(args, "config_file", None)
    if chip_file and chip_file.endswith(".toml"):
        # a chip file's own [energy] table (docs/records.md, "Energy"), if it has one
        raw = _read_bytes(chip_file, "a chip file (TOML)", "--config", kind="chip")
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise UsageError(f"--config {chip_file}: not valid TOML ({e})") from None
        table = energy.from_toml(data, name=f"--config {chip_file}")
    if args.energy is not None:
        raw = _read_bytes(args.energy, "a TOML file with an [energy] table (a chip file "
                          "may hold one)", "--energy", kind="chip")
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise UsageError(f"--energy {args.energy}: not valid TOML ({e})") from None
        if "energy" not in data:
            raise UsageError(f"--energy {args.energy}: it has no [energy] table; write "
                             f"one, e.g. [energy] then dram_pj_per_byte = 100.0 "
                             f"(docs/records.md, \"Energy\")")
        table = energy.from_toml(data, table or energy.DEFAULT,
                                 name=f"--energy {args.energy}")
    if args.clock_mhz == 0:
        raise UsageError("--clock-mhz 0: the clock must be above 0 MHz (e.g. --clock-mhz "
                         "500); leave it out for the chip's default")
    return {"clock_hz": None if args.clock_mhz is None else args.clock_mhz * 1e6,
            "energy": table}


def _write_records(args, recs) -> None:
    """Write ``--json`` and ``--csv`` (those given) of `recs`, saying where."""
    from systolica.app import records
    if args.json:
        records.write_json(args.json, recs)
        print(f"records: {args.json}")
    if args.csv:
        records.write_csv(args.csv, recs)
        print(f"layer records: {args.csv}")


def _sim_records(run, settings: dict):
    """A sim run's records: the compiled network's, with the RTL's cycles."""
    from systolica.app import records
    recs = records.network_records(run.cfg, run.compiled, **settings)
    measured = {layer.name: layer.measured_cycles for layer in run.layers}
    for layer in recs.layers:
        if measured.get(layer["layer"]) is not None:
            layer["rtl_cycles"] = int(measured[layer["layer"]])
    recs.run["rtl_cycles"] = int(run.measured_cycles)
    recs.run["rtl_ok"] = bool(run.ok)
    return recs


def _onnx_records(run, cfg, settings: dict):
    """An ONNX model's run as records: its chip segments' layers, and the run's
    operations on the processors the assignment chose."""
    from systolica.app import records
    chip = [s for s in run.segments if s.compiled is not None]
    operations = [{"name": p.op.name, "kind": p.op.kind, "processor": p.processor}
                  for p in run.plan.placements]
    if not chip:
        raise UsageError("--json/--csv: the assignment put no operation on the chip, so "
                         "there is no chip program to record; see the plan above")
    parts = [records.network_records(cfg, s.compiled, **settings) for s in chip]
    return records.merge(parts, run.plan.model.name, operations=operations,
                         segments=[s.segment.index for s in chip])


def cmd_sim(args) -> int:
    from systolica.app import flow, report
    from systolica.arch.config import preset
    from systolica.compiler import compile_network
    _check_sim_options(args)
    args.seed = args.seed or 0
    cfg = preset(args.config)
    settings = _record_settings(args)
    if args.onnx:
        return _sim_onnx(args, cfg, settings)
    args.trace = SIM_TRACE if args.trace is None else args.trace
    args.plot = SIM_PLOT if args.plot is None else args.plot
    waves, waves_file = _waves(args)
    _check_outputs(("--trace", args.trace), ("--plot", args.plot),
                   ("--waves-file", waves_file), *_record_outputs(args))
    net = _network(args, cfg)
    compiled = compile_network(cfg, net)   # a network that cannot compile fails now,
    _ensure_built(cfg, waves)              # not after minutes of building
    run = flow.run_network(compiled, waves=waves, waves_file=waves_file, progress=True)
    report.print_run(run)
    _write_trace(args.trace, run.compiled)
    _write_plot(args.plot, run.compiled, f"{run.name} on chip {cfg.name}")
    _write_records(args, _sim_records(run, settings))
    return 0 if run.ok else 1


def _waves(args) -> tuple[str | None, str | None]:
    """The waveform ``sim`` is asked for: its format and file, or (None, None).
    ``--waves-file`` and ``--waves-format`` each ask for one as ``--waves`` does; the
    format is ``--waves-format``'s, else the file's suffix (.fst, .vcd), else FST."""
    from systolica.sim.verilated import WAVE_FORMATS
    path, fmt = args.waves_file, args.waves_format
    if not (args.waves or path or fmt):
        return None, None
    suffix = Path(path).suffix.lower().lstrip(".") if path else ""
    if path and suffix not in WAVE_FORMATS and fmt is None:
        raise UsageError(f"--waves-file {path}: the format is named by the suffix, "
                         f"{' or '.join('.' + f for f in WAVE_FORMATS)}; give a file "
                         f"ending in one of them or --waves-format "
                         f"{'|'.join(WAVE_FORMATS)}")
    if path and fmt and suffix in WAVE_FORMATS and suffix != fmt:
        raise UsageError(f"--waves-file {path} ends in .{suffix} but --waves-format is "
                         f"{fmt}: a viewer goes by the suffix; give a file ending in "
                         f".{fmt} or drop --waves-format")
    fmt = fmt or (suffix if suffix in WAVE_FORMATS else WAVE_FORMATS[0])
    return fmt, path or SIM_WAVES.format(format=fmt)


def cmd_cache(args) -> int:
    """List the cache of Verilated builds, or clean it."""
    import time

    from rich.console import Console
    from rich.table import Table

    from systolica.sim import cache, verilated
    root = verilated.builds_root()
    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal:     # a file or a pipe: whole lines, however long
        console = Console(highlight=False, soft_wrap=True, width=1000)
    if args.cache_command == "clean":
        try:
            done = cache.clean(root, older_than_days=args.older_than, everything=args.all)
        except OSError as exc:
            raise UsageError(f"cannot clean the cache {root} ({exc.strerror or exc}); "
                             f"check its permissions") from None
        what = ("every build" if args.all else
                f"the builds unused for {args.older_than:g} days"
                if args.older_than is not None else "the unfinished builds")
        console.print(f"cache {root}: removed {len(done.removed)} build"
                      f"{'' if len(done.removed) == 1 else 's'} ({what}), "
                      f"{cache.human_size(done.freed)} freed")
        for build in done.busy:
            console.print(f"  kept {build.path}: a process is using it")
        if not (args.all or args.older_than is not None):
            console.print("  (`systolica cache clean --older-than DAYS` or `--all` removes "
                          "finished builds)")
        return 0
    found = cache.builds(root)
    total = sum(b.size for b in found)
    shared = cache.size_of(root / cache.OBJCACHE)
    console.print(f"cache {root} (set {verilated.CACHE_ENV} to move it): {len(found)} "
                  f"build{'' if len(found) == 1 else 's'}, {cache.human_size(total)}"
                  + (f", and {cache.human_size(shared)} of runtime objects they share"
                     if shared else ""))
    if not found:
        return 0
    table = Table(box=None, pad_edge=False)
    for column, justify in (("design", "left"), ("harness", "left"), ("waves", "left"),
                            ("size", "right"), ("last used", "right"), ("build", "left")):
        table.add_column(column, justify=justify)
    now = time.time()
    for b in found:
        table.add_row(b.design, b.harness, b.waves or "-", cache.human_size(b.size),
                      cache.human_age(now - b.last_used),
                      f"{b.path.parent.name}/{b.key}" + ("" if b.finished else
                                                         " (unfinished)"))
    console.print(table)
    return 0


def _onnx_file(text: str) -> str:
    """``--onnx FILE``, once it is known to be a regular file of a sane size (a FIFO or
    a device given as a model must not hang the reader)."""
    from systolica import files
    files.check_input(text, "an ONNX model", option="--onnx", kind="onnx")
    return text


def _onnx_source(text: str):
    """An ONNX file, or the name of a light model the onnx package ships (given
    weights: systolica.models.light)."""
    from systolica.models import light
    if text in light.NAMES:
        return light.model(text)
    return _onnx_file(text)


def _key_value(option: str, item: str, form: str, example: str) -> tuple[str, str]:
    """``KEY=VALUE`` of a repeatable option, or a UsageError showing its form."""
    key, sep, value = item.partition("=")
    if not sep or not key or not value:
        raise UsageError(f"{option} {item!r}: write {form}, e.g. {option} {example}")
    return key, value


def _assignments(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        node, proc = _key_value("--assign", item, "NODE=PROCESSOR", "conv1=host")
        if out.get(node, proc) != proc:
            raise UsageError(f"--assign {item!r}: node {node!r} is assigned to "
                             f"{out[node]} too; give each node one processor")
        out[node] = proc
    return out


def _constants(items: list[str] | None) -> dict[str, np.ndarray]:
    """``--constant NAME=FILE.npy``: each input's value, read from its file."""
    from systolica.files import FileError
    out = {}
    for item in items or []:
        name, path = _key_value("--constant", item, "NAME=FILE.npy", "w=weights.npy")
        try:
            data = _read_bytes(path, "a .npy array (numpy.save writes one)", kind="array")
        except FileError as e:
            raise UsageError(f"--constant {item!r}: {path!r} is not a readable .npy file "
                             f"({e})") from None
        try:
            out[name] = np.load(io.BytesIO(data), allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise UsageError(f"--constant {item!r}: {path!r} is not a readable .npy "
                             f"file ({e})") from None
        if not isinstance(out[name], np.ndarray):       # an .npz archive
            out[name].close()
            raise UsageError(f"--constant {item!r}: {path!r} is an archive of arrays, not "
                             f"one array; write it with numpy.save")
    return out


def _calibration(path: str | None) -> list[dict] | None:
    """``--calibration FILE.npz``: an array per float input of the model, by its name,
    the samples along a first axis of their own."""
    if path is None:
        return None
    raw = _read_bytes(path, "a .npz archive (numpy.savez writes one)", "--calibration",
                      kind="array")
    try:
        data = np.load(io.BytesIO(raw), allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError("it holds one array, not an archive of arrays by input name")
        with data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise UsageError(f"--calibration {path}: not a readable .npz ({e}); write one with "
                         f"numpy.savez(path, input_name=samples)") from None
    flat = sorted(k for k, a in arrays.items() if a.ndim == 0)
    if flat:
        raise UsageError(f"--calibration {path}: {flat[0]!r} is a single number; give each "
                         f"input its samples along a first axis of their own")
    counts = {len(a) for a in arrays.values()}
    if not arrays or len(counts) != 1 or 0 in counts:
        raise UsageError(f"--calibration {path}: give every input the same number of "
                         f"samples along the first axis (it has "
                         f"{ {k: len(a) for k, a in arrays.items()} })")
    return [{k: a[i] for k, a in arrays.items()} for i in range(counts.pop())]


def _sim_onnx(args, cfg, settings: dict) -> int:
    """Plan the model (assignment, segments), run it on the golden model and the host,
    then its chip programs on the RTL (unless --golden-only), and compare the outputs
    with onnxruntime (docs/assignment.md)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from systolica.app import onnx_report, onnx_run
    from systolica.app.onnx_run import run_plan
    from systolica.compiler.assignment.assign import Thresholds
    from systolica.compiler.assignment.partition import PlanOptions, plan_model
    from systolica.sim.progress import Display
    _check_outputs(("--report-json", args.report_json), *_record_outputs(args),
                   inputs=(args.onnx, *(c.partition("=")[2] for c in args.constant or ()),
                           args.calibration))
    constants = _constants(args.constant)
    options = PlanOptions(Thresholds(0.0 if args.benefit_threshold is None
                                     else args.benefit_threshold,
                                     float("inf") if args.cost_threshold is None
                                     else args.cost_threshold),
                          _assignments(args.assign), seed=args.seed,
                          constants=tuple(constants),
                          calibration=_calibration(args.calibration),
                          library=args.library)
    plan = plan_model(cfg, _onnx_source(args.onnx), constants, options=options)
    print("\n".join(onnx_report.plan_lines(plan)))
    if not args.golden_only:
        _ensure_built(cfg)
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
               "{task.total}"), TimeRemainingColumn())
    with Progress(*columns, transient=True, console=Console(stderr=True)) as bar:
        task = bar.add_task("segments", total=len(plan.segments))

        def progress(what, done, total):
            bar.update(task, description=what, completed=done, total=total)

        run = run_plan(plan, compare=False, progress=progress)
    if not args.golden_only:
        with Display(f"{plan.model.name}'s chip programs on chip {cfg.name}") as show:
            onnx_run.run_on_rtl(run, progress=show)
    onnx_run.compare_with_onnxruntime(run, args.tolerance)
    print("\n".join(onnx_report.run_lines(run)))
    if args.report_json:
        onnx_report.write_json(run, args.report_json)
    if args.json or args.csv:
        _write_records(args, _onnx_records(run, cfg, settings))
    return 0 if run.ok else 1


def cmd_library(args) -> int:
    """Measure the function library of a chip (docs/assignment.md)."""
    from systolica.arch.config import preset
    from systolica.compiler.assignment import calibrate, library
    cfg = preset(args.config)
    if args.core:
        return _core_library(cfg, args.out)
    if args.out is None and PRESETS.get(cfg.name) != cfg:
        raise UsageError(f"--out: chip {cfg.name} is not a preset, so its function library "
                         f"has no place among the presets'; give it one, e.g. --out "
                         f"{cfg.name}.library.json, and pass that to sim --onnx --library "
                         f"(without one, sim --onnx measures the chip's kinds as it "
                         f"plans: docs/assignment.md)")
    out = library.path_for(cfg) if args.out is None else args.out
    _check_output(str(out), "--out")
    with _notice(f"measuring the function library of {cfg.name} (chip kernels compiled, "
                 f"host kernels timed)..."):
        lib = calibrate.measure(cfg)
    library.save(lib, out)
    print(f"wrote {out}: chip kinds {', '.join(sorted(lib.kinds['chip']))}; host kinds "
          f"{', '.join(sorted(lib.kinds['host']))}")
    return 0


def _core_library(cfg, out) -> int:
    """The management core's points, measured on the Verilated chip `cfg`'s core."""
    from systolica.compiler.assignment import calibrate, library
    from systolica.compiler.errors import CompileError
    if not cfg.has_core:
        raise CompileError(f"--core: chip {cfg.name} has no management core; measure the "
                           f"core's kernels on a chip with one (--config tiny)")
    out = library.CORE_DATA if out is None else out
    _check_output(str(out), "--out")
    with _notice(f"running the core's kernels on the Verilated {cfg.name} chip..."):
        points = calibrate.core_points(cfg)
    library.save_core(points, cfg.name, out)
    print(f"wrote {out}: " + "; ".join(
        f"{k} " + ", ".join(f"{int(w)} -> {c}" for w, c in v) for k, v in points.items())
        + " (elements -> core cycles)")
    return 0


def _onnxruntime_agreement(graph) -> dict:
    """The bench's ONNX model: how many of its output values onnxruntime gives
    otherwise than the chip (which equals numpy, checked by the run)."""
    from systolica.compiler.graph import reference
    from systolica.models import onnx_zoo as onnx_models
    sess = onnx_models.runtime_session(onnx_models.inception())
    feeds = {i.name: graph.data[_onnx_name(i.name)] for i in sess.get_inputs()}
    ours = reference.outputs(graph)
    diff = np.concatenate([np.abs(ours[t].astype(int) - theirs.astype(int)).ravel()
                           for t, theirs in zip(graph.outputs, sess.run(None, feeds))])
    return {"values": int(diff.size), "differing": int((diff > 0).sum()),
            "max_difference": int(diff.max())}


def _onnx_name(name: str) -> str:
    from systolica.compiler.frontend.onnx_import import _safe
    return _safe(name)


def _write_plot(path: str | None, compiled, title: str) -> None:
    """The compiled program's unit occupancy plot (SVG)."""
    if not path:
        return
    from systolica.app import plot
    plot.write_occupancy(path, compiled, title)
    print(f"unit occupancy plot: {path} (open in a web browser)")


def _write_trace(path: str | None, compiled) -> None:
    """The compiled program's timeline as Chrome trace / Perfetto JSON."""
    if not path:
        return
    from systolica.compiler.backend import trace
    trace.write_trace(path, trace.chip_events(compiled.cfg, compiled.program))
    print(f"schedule timeline: {path} (open in https://ui.perfetto.dev or chrome://tracing)")


def cmd_bench(args) -> int:
    from rich.progress import Progress

    from systolica.app import (
        bench_cases,
        chain_bench,
        cnn_bench,
        core_bench,
        deepbench,
        flow,
        onnx_bench,
        plot,
        report,
        route_bench,
    )
    from systolica.app import records as records_module
    from systolica.arch.config import preset
    from systolica.compiler import CompileError, compile_network
    from systolica.sim import rtlsim
    _check_outputs(("--out", args.out), *_record_outputs(args))
    settings = _record_settings(args)
    plots = Path(args.out).parent / "plots"     # where each run's cycles go
    if plots.exists() and not plots.is_dir():
        raise UsageError(f"--out {args.out}: the bench writes its plots into {plots}, "
                         f"which is a file; move it away or give --out in another "
                         f"directory")
    cases = bench_cases.cases()
    records = []
    runs = []           # each network run's records (--json, --csv)
    with Progress() as progress:
        task = progress.add_task("bench", total=len(cases) + len(chain_bench.runs()))
        for case in cases:
            where = f"{case.name} on {case.config} ({case.harness})"
            progress.update(task, description=f"{where}: building the chip")
            if progress.console.is_terminal:
                rtlsim.build(preset(case.config), harness=case.harness)
            else:
                _ensure_built(preset(case.config), harness=case.harness)
            progress.update(task, description=f"{where}: running")
            compiled = compile_network(preset(case.config), case.make(), **case.options)
            run = flow.run_network(compiled, harness=case.harness)
            records.append(report.record(run, case.name))
            runs.append(_sim_records(run, settings))
            if case.make is bench_cases.onnx_inception:
                records[-1]["onnxruntime"] = _onnxruntime_agreement(run.compiled.graph)
            plot.write_occupancy(plots / f"{case.name}_{case.config}.svg", run.compiled,
                                 f"{case.name} on chip {case.config}")
            progress.advance(task)
        chains = []
        for chain, cfg_name, strategy, choice in chain_bench.runs():
            progress.update(task, description=f"{chain.name} on {cfg_name} ({strategy})")
            _ensure_built(preset(cfg_name))
            try:
                compiled = compile_network(preset(cfg_name), chain.make(), chain=choice)
            except CompileError as e:     # a strategy this chain cannot use, and why
                chains.append(chain_bench.refused(chain, strategy, e))
            else:
                run = flow.run_network(compiled)
                chains.append(chain_bench.record(chain, strategy, run))
                runs.append(_sim_records(run, settings))
            progress.advance(task)
        task = progress.add_task("transposes on tiny: on chip and through DRAM", total=1)
        from systolica.app import transpose_bench
        _ensure_built(preset(transpose_bench.CONFIG))
        transposes = (transpose_bench.records() + transpose_bench.nd_records()
                      + transpose_bench.int32_records())
        progress.advance(task)
        task = progress.add_task("lane routes on tiny_tall and tiny_wide", total=1)
        routes = route_bench.skip_records()
        progress.advance(task)
        task = progress.add_task("ResNet-50 on base: compiling the whole network, per "
                                 "strategy", total=1)
        resnets = cnn_bench.resnet50_records(preset("base"))
        progress.advance(task)
        task = progress.add_task("DeepBench convolutions on base: static and matcher",
                                 total=len(deepbench.layers()) + 1)
        default = [r for r in resnets if r["name"] == "resnet50_224_cost_model"]
        deeps = deepbench.records(
            preset(deepbench.CONFIG),
            progress=lambda done, text: progress.update(task, description=text,
                                                        completed=done),
            resnet50=deepbench.resnet50_figures_of(default[0]) if default else None)
        progress.update(task, completed=len(deepbench.layers()) + 1)
        task = progress.add_task("real ONNX models on base", total=len(onnx_bench.CASES))
        _ensure_built(preset(onnx_bench.CONFIG))
        models = []
        for case in onnx_bench.CASES:
            progress.update(task, description=f"{case.name} on {onnx_bench.CONFIG}")
            models.append(onnx_bench.record(case))
            progress.advance(task)
        task = progress.add_task("named models' Softmax and ArgMax: chip, core or host",
                                 total=1)
        core_plans = onnx_bench.core_plan_records()
        progress.advance(task)
        task = progress.add_task(f"the management core's table on {core_bench.CONFIG}: "
                                 f"with and without the overlapped configuration", total=1)
        cores = core_bench.records() + core_bench.kernel_records()
        progress.advance(task)
    out = Path(args.out)
    _write_bytes(args.out, (json.dumps(records_module.with_chips(
        records + resnets + deeps + chains + transposes + routes + models + core_plans
        + cores), indent=2) + "\n").encode())
    _write_records(args, runs)
    for r in records:
        print(f"{r['name']:>18} on {r['config']:<5} cycles {r['cycles']:>7} "
              f"(predicted {r['predicted_cycles']}) util {r['mac_utilization']:.3f} "
              f"DRAM {r['dram_bytes']} B  sim {r['sim_cycles_per_second']:,.0f} cycles/s "
              f"({r['harness']})  "
              f"{'ok' if r['ok'] else 'MISMATCH'}")
    print(f"unit occupancy plots of these runs: {plots}/*.svg")
    for resnet in resnets:
        report.print_network_record(resnet)
    print("DeepBench convolutions on base (cycles; the targets are the matcher's):")
    deepbench.print_records(deeps)
    print("chains on the RTL:")
    for r in chains:
        if "error" in r:
            print(f"{r['name']:>20} {r['strategy']:<15} not compiled: {r['error']}")
            continue
        print(f"{r['name']:>20} {r['strategy']:<15} cycles {r['cycles']:>8} util "
              f"{r['mac_utilization']:.3f} DRAM {r['dram_bytes']:>8} B "
              f"({r['dram_ratio_to_min']:.2f}x min) MACs {r['array_macs']:>10} UBUF "
              f"{r['ubuf_bytes_written']:>6} B  {'ok' if r['ok'] else 'MISMATCH'}")
    transpose_bench.print_records(transposes)
    route_bench.print_records(routes)
    onnx_bench.print_records(models)
    onnx_bench.print_core_plan_records(core_plans)
    core_bench.print_records([r for r in cores if r["kind"] == "core_table"])
    core_bench.print_kernel_records([r for r in cores if r["kind"] == "core_kernel"])
    print(f"wrote {out}")
    return 0 if all(r["ok"] for r in records + chains + transposes + routes + models
                    + core_plans + cores if "error" not in r) else 1


#: ``systolica chain --example``: (graph builder, outputs per pass).
CHAIN_EXAMPLES = {"seed001": ("seed_two_layer", 8), "seed001-four": ("seed_four_layer", 8),
                  "bank-split": ("bank_split_pair", None)}


def _per_layer(text: str, names: tuple[str, ...]):
    """One of `names`, or a comma-separated tuple of one per layer."""
    kinds = tuple(text.split(","))
    bad = [k for k in kinds if k not in names]
    if bad:
        raise argparse.ArgumentTypeError(f"{', '.join(bad)}: not one of "
                                         f"{', '.join(names)}")
    return kinds[0] if len(kinds) == 1 else kinds


def _chain_weights(text: str):
    from systolica.compiler.lowering.chain import WEIGHTS
    return _per_layer(text, WEIGHTS)


def _chain_strategy(text: str):
    from systolica.compiler.lowering.chain import STRATEGIES
    return "all" if text == "all" else _per_layer(text, STRATEGIES)


def _check_chain_options(args, graph) -> None:
    """Refuse what the example's chain would not use: more outputs per pass than its
    last layer has rows, a per-layer list of another length than its layers."""
    layers = len(graph.nodes)
    rows = graph.tensor(graph.nodes[-1].outputs[0]).shape[1]
    if args.outputs_per_pass is not None and args.outputs_per_pass > rows:
        raise UsageError(f"--outputs-per-pass {args.outputs_per_pass}: the last layer of "
                         f"--example {args.example} has {rows} output rows; give at most "
                         f"{rows} (that many is one pass)")
    for option, value in (("--strategy", args.strategy), ("--weights", args.weights)):
        if isinstance(value, tuple) and len(value) != layers:
            raise UsageError(f"{option} {','.join(value)}: {len(value)} kinds for the "
                             f"{layers} layers of --example {args.example}; give one for "
                             f"every layer or one per layer")


def cmd_chain(args) -> int:
    from systolica.app import flow, report
    from systolica.arch.config import preset
    from systolica.compiler import compile_network
    from systolica.compiler.lowering.chain import STRATEGIES, ChainChoice
    from systolica.compiler.planning.chain_passes import listing
    from systolica.models import chain_cases
    cfg = preset(args.config)
    builder, per = CHAIN_EXAMPLES[args.example]
    make = getattr(chain_cases, builder)
    _check_chain_options(args, make())
    per = per if args.outputs_per_pass is None else args.outputs_per_pass
    strategies = STRATEGIES if args.strategy == "all" else (args.strategy,)
    choices = [ChainChoice(s, per, args.weights, share=not args.no_share)
               for s in strategies]
    # a chain that cannot compile fails now, not after the build
    compiled = [compile_network(cfg, make(), chain=choice) for choice in choices]
    _ensure_built(cfg)
    runs = []
    for choice, program in zip(choices, compiled):
        run = flow.run_network(program)
        graph = run.compiled.graph
        widths = [graph.tensor(t).shape[2]
                  for t in [graph.inputs[0]] + [n.outputs[0] for n in graph.nodes]]
        print(f"\n== {choice.name}: {len(run.compiled.chain.passes)} passes, weights "
              f"{run.compiled.chain.choice.weights}")
        print(listing(run.compiled.chain.passes, [n.name for n in graph.nodes], widths))
        print(run.compiled.chain.bank_listing())
        report.print_run(run)
        runs.append(run)
    if len(runs) > 1:
        base = runs[0]
        print("\nagainst the baseline (the chip's counters):")
        for run in runs[1:]:
            print(f"  {run.compiled.chain.choice.name}: DRAM read "
                  f"{base.dram_rd_bytes - run.dram_rd_bytes} B less "
                  f"({1 - run.dram_rd_bytes / base.dram_rd_bytes:.1%}), array MACs "
                  f"{base.macs_counter - run.macs_counter} fewer "
                  f"({1 - run.macs_counter / base.macs_counter:.1%}), cycles "
                  f"{run.measured_cycles} vs {base.measured_cycles}, UBUF "
                  f"{run.ubuf_wr_bytes} B written, {run.ubuf_rd_bytes} B read")
    return 0 if all(r.ok for r in runs) else 1


def cmd_compile(args) -> int:
    from systolica.app import report
    from systolica.arch import fetch
    from systolica.arch.config import preset
    from systolica.compiler import CompileError, compile_network
    cfg = preset(args.config)
    if args.onnx and args.int32:
        raise UsageError("--int32 is for --gemm: an ONNX model's outputs have the types "
                         "the model gives them; drop --int32")
    if args.demo and args.int32:
        raise UsageError("--int32 is for --gemm: the demo network's outputs have the "
                         "types it gives them; drop --int32")
    _check_outputs(("--out", args.out), ("--trace", args.trace), ("--plot", args.plot),
                   *_record_outputs(args), inputs=(args.onnx,) if args.onnx else ())
    settings = _record_settings(args)
    network = _network(args, cfg)
    try:
        compiled = compile_network(cfg, network, mapping=args.mapping)
    except CompileError as e:
        if not args.onnx:
            raise
        from systolica.compiler.frontend.onnx_model import located, where_of
        raise located(e, where_of(args.onnx)) from None
    if args.out:
        _write_bytes(args.out, compiled.loadable.to_file())
    _write_trace(args.trace, compiled)
    print(compiled.disassemble() if args.listing else
          f"{len(compiled.program)} instructions, {compiled.predicted_cycles} cycles predicted, "
          f"MAC utilisation {compiled.utilisation:.3f}")
    for line in report.split_lines(compiled) + report.mapping_lines(compiled):
        print(f"# {line}" if args.listing else line)   # a comment after the disassembly
    if compiled.fetch_from is not None and fetch.fetches(cfg, len(compiled.program),
                                                         compiled.fetch_from):
        # The chip fetches the program from its PROG_FETCH on while it runs.
        first = compiled.loadable.preload(cfg)
        print(f"the chip fetches the program from instruction {first} on: load the image "
              f"at DRAM word {compiled.prog_addr}, set PROG_ADDR to {compiled.prog_addr} "
              f"and PROG_FETCH to {first}, and preload instructions [0, {first})")
    elif fetch.fetches(cfg, len(compiled.program)):
        # The chip reads the rest of a long program from DRAM while it runs.
        print(f"the program is longer than the instruction memory ({cfg.imem_depth}): "
              f"load the image at DRAM word {compiled.prog_addr} and set PROG_ADDR to "
              f"{compiled.prog_addr}")
    _write_plot(args.plot, compiled, f"{compiled.network.name} on chip {cfg.name} "
                                     f"(predicted)")
    if args.json or args.csv:
        from systolica.app import records
        _write_records(args, records.network_records(cfg, compiled, **settings))
    return 0


def cmd_config_show(args) -> int:
    """A chip as a chip file (docs/chip.md, "Chip files"): `systolica config show tiny >
    my_chip.toml` starts one."""
    from systolica.arch import chipfile
    sys.stdout.write(chipfile.dump(args.chip))
    return 0


def cmd_disasm(args) -> int:
    """The image's header, then its listing with each instruction checked as the
    sequencer checks the word (docs/image-format.md, "disasm"): exit 0 if nothing is
    wrong, 1 if an instruction would fault or has reserved bits set (each flagged with
    ``#!`` after its line, counted on stderr), 2 if it is not an image of this chip."""
    from systolica.arch import disasm, image_file, isa
    from systolica.arch.config import ConfigError, preset
    path = args.image
    image = image_file.unpack(_read_bytes(path, IMAGE_HINT, kind="image"), source=path)
    if args.config:
        cfg = preset(args.config)
        why = image_file.chip_mismatch(path, image.chip, image.fingerprint, cfg)
        if why:
            raise UsageError(f"{why} (--config {cfg.name})")
    else:
        cfg = PRESETS.get(image.chip)
        if cfg is None or cfg.program_key != image.fingerprint:
            known = "not a preset" if cfg is None else \
                f"not the preset of that name ({cfg.program_key})"
            raise UsageError(f"{path} was built for chip {image.chip} ({image.fingerprint}), "
                             f"{known}: its instructions can be checked only against that "
                             f"chip; give a preset with --config, or recompile the program "
                             f"for one")
    at = cfg
    if image.ubuf is not None:
        try:
            at = cfg.at_ubuf(*image.ubuf)
        except ConfigError as exc:
            raise UsageError(f"{path}: its header's UBUF registers are not a UBUF of chip "
                             f"{cfg.name} ({exc}); recompile it") from None
    extras = "".join([f", PROG_ADDR {image.prog_addr}" if image.prog_addr is not None else "",
                      f", UBUF base {image.ubuf[0]} rows {image.ubuf[1]}"
                      if image.ubuf is not None else "",
                      f", PROG_FETCH {image.fetch_from}"
                      if image.fetch_from is not None else ""])
    print(f"# {path}: chip {image.chip} ({image.fingerprint}), {image.count} "
          f"instructions{extras}")
    found, flagged, first = 0, set(), None
    for line, problem in disasm.listing(at, isa.from_bytes(image.words), image.prog_addr,
                                        image.fetch_from):
        print(line)
        if problem is not None:
            found += 1
            if problem.pc is not None:
                flagged.add(problem.pc)
            first = first or problem
    if found:
        print(f"systolica: disasm: {path}: {found} problem(s) in {len(flagged)} of "
              f"{image.count} instructions (lines starting '#!'); the first: {first}",
              file=sys.stderr)
        return 1
    return 0


def cmd_schedule(args) -> int:
    from systolica.arch import image_file
    from systolica.arch.config import preset
    from systolica.compiler.backend import trace
    from systolica.compiler.frontend import stp, text
    cfg = preset(args.config)
    _check_outputs(("--image", args.image), ("--trace", args.trace), inputs=(args.file,))
    filename = str(Path(args.file))
    _read_bytes(args.file, TEXT_HINT, kind="text")   # a missing, special or huge file
    prog = text.parse_file(args.file)
    result = stp.compile_program(cfg, prog, insert_delays=args.insert_delays)
    if args.image:
        if result.chip is None:
            raise UsageError(f"{filename} has no chip statements (dma, wload, mm, vpu, cfg) "
                             f"to put in an image; drop --image")
        _write_bytes(args.image, image_file.pack(cfg, result.chip.image))
    if args.trace:
        trace.write_trace(args.trace, result.events(cfg))
    print(trace.listing(result.rows(cfg)))
    return 0


def cmd_run(args) -> int:
    from systolica.app.board import run_on_port
    from systolica.arch.boards import board
    from systolica.arch.config import preset
    from systolica.firmware.link import LinkError
    _check_seed(args)
    args.seed = args.seed or 0
    cfg = preset(board(args.board).config)
    if args.firmware and not cfg.has_core:
        raise UsageError(f"--firmware: the {args.board} board's chip ({cfg.name}) has no "
                         f"management core; leave out --firmware (the host sequences "
                         f"its programs) or use a board whose chip has one (ulx3s)")
    net = _network(args, cfg)
    try:
        return run_on_port(args.port, args.board, net, firmware=args.firmware)
    except (LinkError, RuntimeError) as exc:
        raise UsageError(f"{args.port}: {exc}") from None


def cmd_sweep(args) -> int:
    from systolica.app import sweep
    if bool(args.spec) == bool(args.grid):
        raise UsageError("sweep: give a spec file (SPEC.toml) or --grid FIELD=V1,V2,..., "
                         "one of them")
    if args.spec and (args.model or args.clock_mhz is not None):
        raise UsageError("sweep: --model and --clock-mhz go with --grid; a spec file names "
                         "its models and clock")
    for option, value in (("--workers", args.workers), ("--jobs", args.jobs)):
        if value < 1:
            raise UsageError(f"sweep: {option} must be at least 1, not {value}")
    if args.rtl_sample < 0:
        raise UsageError(f"sweep: --rtl-sample must be at least 0, not {args.rtl_sample}")
    if args.slurm_option and not args.slurm:
        raise UsageError("sweep: --slurm-option goes with --slurm")
    if args.slurm and args.scheduler:
        raise UsageError("sweep: --slurm starts a cluster, --scheduler uses a running "
                         "one; give one of them")
    slurm = None
    if args.slurm:
        slurm = {}
        for item in args.slurm_option or ():
            key, eq, value = item.partition("=")
            if not eq or not key:
                raise UsageError(f"sweep: --slurm-option {item!r}: give KEY=VALUE")
            slurm[key.strip()] = sweep.literal(value)
    spec = sweep.load_spec(args.spec) if args.spec else sweep.grid_spec(
        args.base, args.grid, args.model or ["demo_cnn"], args.clock_mhz)
    out = Path(args.out) if args.out else Path("build") / "sweep" / spec.name
    engine = sweep.Engine(workers=args.workers, address=args.scheduler, slurm=slurm,
                          jobs=args.jobs, threads=args.threads)
    result = sweep.run_sweep(spec, engine, area=args.area, rtl_sample=args.rtl_sample,
                             progress=not args.no_progress)
    written = sweep.write_outputs(result, out, png=args.png)
    print(sweep.table_head(result.points))
    print(f"{len(result.points)} points ({result.computed} computed, "
          f"{len(result.points) - result.computed} from the cache or refused) in "
          f"{result.seconds:.1f} s; wrote {', '.join(str(p) for p in written)}")
    return 0


def parser() -> argparse.ArgumentParser:
    configs = sorted(PRESETS)
    top = _Parser(prog="systolica", description=__doc__.split("\n\n")[0],
                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def chip(text: str):
        """A preset's name, or a chip file (.toml or .json, docs/chip.md "Chip files")."""
        from systolica.arch import chipfile
        from systolica.arch.config import ConfigError
        if text in PRESETS:
            return PRESETS[text]
        if not chipfile.is_chip_file(text):
            raise argparse.ArgumentTypeError(
                f"invalid choice: {text!r} (choose from {', '.join(map(repr, configs))}, "
                f"or give a chip file ending in .toml or .json)")
        try:
            return chipfile.load(text)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    def record_options(p):
        """--json, --csv and what their figures depend on (docs/records.md)."""
        p.add_argument("--json", metavar="FILE",
                       help="write the run's and each layer's records here (JSON, "
                            "docs/records.md)")
        p.add_argument("--csv", metavar="FILE",
                       help="write one row per layer here (CSV, docs/records.md)")
        p.add_argument("--clock-mhz", type=_number(0), metavar="MHZ",
                       help="the clock the records' times are at (default: the board's "
                            "built for the chip, else the nominal 500 MHz)")
        p.add_argument("--energy", metavar="FILE.toml",
                       help="per-access energies: the [energy] table of this TOML file "
                            "(a chip file may hold one) over the published defaults")

    def config(p, default="tiny"):
        p.add_argument("--config", default=default, type=chip,
                       metavar="{" + ",".join(configs) + "}|CHIP.toml",
                       help=f"chip preset, or a chip file (default {default}; "
                            f"`systolica config show {default}` prints one to start from)")

    p = sub.add_parser("sim", help="compile the demo network, run it on the RTL, report")
    config(p)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--gemm", type=_shape, metavar="MxKxN",
                      help="run one MxKxN int8 GEMM instead of the demo")
    what.add_argument("--demo", choices=("cnn", "concat", "mlp"),
                      help="the demo network: the small CNN (default), the MLP, or dense "
                           "branches joined by a Concat through the general lanes (a chip "
                           "with them: --config tiny, tiny_2x3, tiny_tall or tiny_wide)")
    what.add_argument("--onnx", metavar="FILE",
                   help="run this ONNX model (float, QDQ or QOperator; or the name of a "
                        "model the onnx package ships, e.g. light_squeezenet) instead of "
                        "the demo: each operation on the chip, its core or the host, random inputs "
                        "from --seed, outputs compared with onnxruntime "
                        "(docs/assignment.md)")
    p.add_argument("--golden-only", action="store_true",
                   help="with --onnx: run the chip programs on the golden model only")
    p.add_argument("--assign", action="append", metavar="NODE=PROCESSOR",
                   help="with --onnx: run this operation on this processor (chip, core: "
                        "the chip's management core, host); "
                        "repeat for more")
    p.add_argument("--constant", action="append", metavar="NAME=FILE.npy",
                   help="with --onnx: the model's input NAME is a constant, the array in "
                        "FILE.npy (weights, scales or zero points a model takes as "
                        "inputs: the chip needs them constant); repeat for more")
    p.add_argument("--benefit-threshold", type=_number(), metavar="TH1",
                   help="with --onnx: a processor takes an operation when its benefit is "
                        "at least this (default 0)")
    p.add_argument("--cost-threshold", type=_number(0, infinite=True), metavar="TH2",
                   help="with --onnx: ... and its cost at most this many seconds "
                        "(default: no limit)")
    p.add_argument("--tolerance", type=_number(0), metavar="STEPS",
                   help="with --onnx: the largest difference from onnxruntime an output "
                        "may show (default: docs/assignment.md's)")
    p.add_argument("--calibration", metavar="FILE.npz",
                   help="with --onnx, a float model: quantise it from these inputs (an "
                        "array per input name, samples along the first axis; default: "
                        "random ones, for performance studies only)")
    p.add_argument("--report-json", metavar="FILE",
                   help="with --onnx: write the assignment and the run as JSON here")
    p.add_argument("--library", metavar="FILE",
                   help="with --onnx: the function library to assign operations by, as "
                        "`systolica library --out` writes it (default: the preset's; a "
                        "chip file's chip without one is measured as it is planned)")
    p.add_argument("--seed", type=_seed,
                   help="random data for --gemm, --onnx (default 0)")
    p.add_argument("--waves", action="store_true",
                   help=f"write a waveform of the run (default {SIM_WAVES.format(format='fst')}"
                        f"; the path is printed; not with --onnx)")
    p.add_argument("--waves-file", metavar="FILE",
                   help="write the waveform here (implies --waves); FST or VCD by the "
                        "suffix, .fst or .vcd")
    p.add_argument("--waves-format", choices=("fst", "vcd"),
                   help="the waveform's format (implies --waves): fst (compact, the "
                        "default) or vcd (plain text, read by every viewer)")
    p.add_argument("--trace", metavar="FILE",
                   help=f"write the schedule timeline (Chrome trace / Perfetto JSON) here "
                        f"(default {SIM_TRACE}; not with --onnx)")
    p.add_argument("--plot", metavar="FILE",
                   help=f"write the unit occupancy plot (SVG) here (default {SIM_PLOT}; "
                        f"not with --onnx)")
    record_options(p)
    p.set_defaults(func=cmd_sim)
    p = sub.add_parser("chain", help="run a chain of convolutions in passes on the RTL, "
                                     "with and without the UBUF (seed 001's examples)")
    config(p)
    p.add_argument("--example", choices=sorted(CHAIN_EXAMPLES), default="seed001",
                   help="seed001: two 16x16 layers (7x7, 5x5) in two passes; "
                        "seed001-four: three 3x3 layers over 24 rows in three passes; "
                        "bank-split: a wide map with small weights, then a narrow one "
                        "with large weights (the cost model's passes)")
    p.add_argument("--strategy", type=_chain_strategy, default="all",
                   metavar="KIND[,KIND...]",
                   help="how halo rows are had: baseline, crop_fetch or fused_crop, for "
                        "every layer or one per layer, comma-separated (default: all, "
                        "each in turn)")
    p.add_argument("--outputs-per-pass", type=_positive_int, metavar="N",
                   help="rows of the last layer's output per pass (default: the example's)")
    p.add_argument("--weights", type=_chain_weights, metavar="KIND[,KIND...]",
                   help="weights loaded once (persistent), at each layer's turn in every "
                        "pass (pass) or streamed (stream), for every layer or one per "
                        "layer, comma-separated (default: the cost model's)")
    p.add_argument("--no-share", action="store_true",
                   help="give every CBUF region its banks for the whole chain (default: "
                        "regions live at different times may share banks)")
    p.set_defaults(func=cmd_chain)
    p = sub.add_parser("run", help="run a GEMM or the demo on a board through its serial "
                                   "port (after `make bitstream` and programming it)")
    p.add_argument("--port", required=True, help="the board's serial port, e.g. /dev/ttyUSB0")
    p.add_argument("--board", default="ulx3s", choices=sorted(BOARDS),
                   help="the board (default ulx3s)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--gemm", type=_shape, metavar="MxKxN",
                      help="run one MxKxN int8 GEMM instead of the demo")
    what.add_argument("--demo", choices=("cnn", "mlp"),
                      help="the demo network: the small CNN (default) or the MLP")
    p.add_argument("--seed", type=_seed, help="random data for --gemm (default 0)")
    p.add_argument("--firmware", action="store_true",
                   help="the chip's management core runs the program (its firmware "
                        "configures, starts and checks it); default: the host does")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("bench", help="benchmark GEMMs and the demo; write JSON records")
    p.add_argument("--out", default="build/bench.json", metavar="FILE")
    record_options(p)
    p.set_defaults(func=cmd_bench)
    p = sub.add_parser("compile", help="compile a random MxKxN GEMM, an ONNX model or a "
                                       "demo network; print or save it")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--gemm", type=_shape, metavar="MxKxN",
                      help="compile one random MxKxN int8 GEMM")
    what.add_argument("--onnx", metavar="FILE",
                      help="compile this ONNX model (QOperator form, int8 inputs and "
                           "outputs; random inputs from --seed), as `sim --onnx` does")
    what.add_argument("--demo", choices=("cnn", "concat", "mlp"),
                      help="compile the demo network, as `sim --demo` runs it")
    config(p)
    p.add_argument("--seed", type=_seed, default=0, help="random data")
    p.add_argument("--int32", action="store_true",
                   help="int32 output, no requantisation (--gemm only)")
    p.add_argument("--out", metavar="FILE", help="write the program image here")
    p.add_argument("--listing", action="store_true", help="print the disassembly")
    p.add_argument("--trace", metavar="FILE",
                   help="write the schedule timeline (Chrome trace JSON) here")
    p.add_argument("--plot", metavar="FILE", help="write the unit occupancy plot (SVG) here")
    p.add_argument("--mapping", choices=("matcher", "static"), default="matcher",
                   help="how convolutions are put on the array: the constraint solver's "
                        "ranked mapping (matcher, the default) or the fixed strategy "
                        "it is measured against (static); docs/matching.md")
    record_options(p)
    p.set_defaults(func=cmd_compile)
    p = sub.add_parser("library", help="measure the function library the assigner "
                                       "looks costs up in")
    config(p)
    p.add_argument("--out", metavar="FILE", help="write it here (default: the preset's)")
    p.add_argument("--core", action="store_true",
                   help="measure the management core's kernels on the Verilated chip "
                        "instead (one file for every chip with the core: "
                        "compiler/assignment/data/core.json)")
    p.set_defaults(func=cmd_library)
    p = sub.add_parser("disasm", help="disassemble a program image, checking every "
                                      "instruction as the chip decodes it")
    p.add_argument("image", help="program image, e.g. from `systolica compile --out`")
    p.add_argument("--config", type=chip, default=None,
                   metavar="{" + ",".join(configs) + "}|CHIP.toml",
                   help="the chip to check it against (default: the preset its header "
                        "names; its fingerprint must match either way)")
    p.set_defaults(func=cmd_disasm)
    p = sub.add_parser("schedule", help="schedule a .stp program; print the listing")
    p.add_argument("file", help="program text (.stp), see docs/scheduling.md")
    config(p)
    p.add_argument("--insert-delays", action="store_true",
                   help="add delay registers where two paths differ in latency")
    p.add_argument("--trace", metavar="FILE", help="write Chrome trace / Perfetto JSON here")
    p.add_argument("--image", metavar="FILE",
                   help="write the chip statements' program image here")
    p.set_defaults(func=cmd_schedule)
    p = sub.add_parser("config", help="print a chip as a chip file (TOML) to start one "
                                      "from")
    what = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = what.add_parser("show", help="print a preset, or a chip file's chip as it "
                                        "resolves (base and defaults filled in), as a chip "
                                        "file: every field, what it is, its values")
    show.add_argument("chip", type=chip, metavar="PRESET|CHIP.toml",
                      help=f"a preset ({', '.join(configs)}) or a chip file")
    show.set_defaults(func=cmd_config_show)
    p = sub.add_parser("cache", help="show the cache of Verilated builds (where, each "
                                     "build, its size and last use); `cache clean` "
                                     "removes builds")
    p.set_defaults(func=cmd_cache, cache_command=None)
    clean = p.add_subparsers(dest="cache_command", metavar="[clean]").add_parser(
        "clean", help="remove builds: unfinished ones (interrupted or failed), "
                      "those unused for --older-than DAYS, or --all")
    when = clean.add_mutually_exclusive_group()
    when.add_argument("--older-than", type=_number(0), metavar="DAYS",
                      help="remove the builds not used for this many days")
    when.add_argument("--all", action="store_true",
                      help="remove every build and the shared runtime objects")
    clean.set_defaults(func=cmd_cache)
    p = sub.add_parser("sweep", help="sweep chip parameters x models on a Dask cluster; "
                                     "write tables and a report (docs/sweeps.md)")
    p.add_argument("spec", nargs="?", metavar="SPEC.toml",
                   help="the sweep spec (docs/sweeps.md); or give --grid")
    p.add_argument("--grid", action="append", metavar="FIELD=V1,V2,...",
                   help="without a spec: sweep this ChipConfig field over these values; "
                        "repeat for more (their product)")
    p.add_argument("--model", action="append", metavar="NAME|FILE.onnx",
                   help="with --grid: a model to compile (default demo_cnn); repeat for more")
    p.add_argument("--base", default="base", metavar="PRESET|CHIP.json",
                   help="with --grid: the chip the fields change (default base)")
    p.add_argument("--clock-mhz", type=float, metavar="MHZ",
                   help="with --grid: the clock time is reckoned at")
    p.add_argument("--out", metavar="DIR",
                   help="where the tables and report go (default build/sweep/<name>)")
    p.add_argument("--workers", type=int, default=2, metavar="N",
                   help="local cluster: N worker processes (default 2)")
    p.add_argument("--threads", action="store_true",
                   help="local cluster: one process of N threads instead")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="use the running Dask cluster whose scheduler is here "
                        "(e.g. tcp://10.0.0.5:8786) instead of a local one")
    p.add_argument("--slurm", action="store_true",
                   help="start the workers as SLURM jobs (dask-jobqueue's SLURMCluster)")
    p.add_argument("--slurm-option", action="append", metavar="KEY=VALUE",
                   help="with --slurm: a SLURMCluster argument (queue=..., account=..., "
                        "walltime=01:00:00, cores=..., memory=4GB); repeat for more")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="with --slurm: SLURM jobs to start (default 1)")
    p.add_argument("--area", action="store_true",
                   help="synthesise each distinct chip with yosys for its FPGA resources "
                        "(cached per chip)")
    p.add_argument("--rtl-sample", type=int, default=0, metavar="K",
                   help="run K points of the small models on the Verilated RTL to confirm "
                        "their cycles")
    p.add_argument("--png", action="store_true", help="also render the Pareto plot to PNG")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sweep)
    return top


def _fail(message: str) -> int:
    print(f"systolica: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _quiet_stdout() -> None:
    """The reader went away (``| head``): send the rest, and the final flush, nowhere."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status (0, 1 for a run whose results disagree, 2 for
    a bad input, 130 when interrupted)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # Every file is written atomically and every build stamped last, so nothing
        # half-written stays behind.
        print("systolica: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _config_file(argv: list[str]) -> str | None:
    """The path ``--config`` names, as given (None: a preset, or none given): a chip
    file's ``[energy]`` table is read from it (docs/records.md, "Energy")."""
    value = None
    for k, arg in enumerate(argv):
        if arg == "--config" and k + 1 < len(argv):
            value = argv[k + 1]
        elif arg.startswith("--config="):
            value = arg.partition("=")[2]
    return None if value is None or value in PRESETS else value


def _main(argv: list[str] | None) -> int:
    argv = _join_negative_values(sys.argv[1:] if argv is None else list(argv))
    args = parser().parse_args(argv)
    args.config_file = _config_file(argv)

    from systolica.arch.config import ConfigError
    from systolica.arch.errors import ImageError
    from systolica.arch.isa import EncodingError
    from systolica.compiler import CompileError
    from systolica.compiler.errors import InternalError
    from systolica.files import FileError
    from systolica.sim.rtlsim import RtlSimError
    try:
        status = args.func(args)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except (UsageError, FileError, CompileError, ConfigError, EncodingError, ImageError,
            RtlSimError) as exc:
        return _fail(str(exc))
    except InternalError as exc:
        return _fail(f"{exc} (a bug in the compiler, not in what it was given: please "
                     f"report it with the command that ran into it)")
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        return _fail(f"{where}{exc.strerror or exc}; check the path and its permissions")


if __name__ == "__main__":
    sys.exit(main())
