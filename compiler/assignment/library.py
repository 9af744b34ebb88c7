"""The function library (docs/assignment.md, "The function library"): measured
execution and transfer times per operation kind, processor and shape class, which
the assigner looks its costs and benefits up in.

A kind's entry is a list of measured points ``(work, seconds)`` (work: MACs, or
elements; one point per shape class, the classes powers of two apart); a lookup
interpolates between the two points around the work in log-log, and past the
largest scales the largest's time per unit of work."""

from __future__ import annotations

import hashlib
import json
import math
import platform
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from systolica import files
from systolica.arch.config import ChipConfig
from systolica.compiler.errors import CompileError

#: The nominal clock at which chip cycles become seconds (presets without a board).
NOMINAL_CLOCK_HZ = 500e6

#: Where the libraries of the presets are kept.
DATA = Path(__file__).with_name("data")

#: The management core's points, for every chip with the core (its kernels do not
#: depend on the array): core cycles measured on the RTL (``systolica library --core``).
CORE_DATA = DATA / "core.json"

#: The host kind a kernel without its own points is costed as (one pass over its
#: output elements).
DEFAULT_HOST_KIND = "Relu"


@dataclass
class Library:
    chip: str
    clock_hz: float
    fingerprint: dict
    kinds: dict[str, dict[str, list[tuple[float, float]]]]   # processor -> kind -> points
    transfer: dict[str, list[tuple[float, float]]]           # processor -> (bytes, s)
    notes: list[str] = field(default_factory=list)
    #: the core's points as measured, kind -> (elements, core cycles); empty when the
    #: chip has no core (`no_core` says why)
    core_cycles: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    no_core: str = ""

    def seconds(self, processor: str, kind: str, work: float) -> float:
        table = self.kinds[processor]
        points = table.get(kind)
        if points is None:
            if processor == "core":
                raise CompileError(f"the core's function library ({str(CORE_DATA)!r}) has "
                                   f"no kind {kind!r}; measure it: systolica library --core")
            if processor != "host":
                raise CompileError(f"the function library has no chip kind {kind!r}; "
                                   f"regenerate it: systolica library --config {self.chip}")
            points = table[DEFAULT_HOST_KIND]
        return interpolate(points, work)

    def transfer_seconds(self, processor: str, nbytes: float) -> float:
        return interpolate(self.transfer[processor], nbytes) if nbytes else 0.0

    def to_json(self) -> dict:
        return {"chip": self.chip, "clock_hz": self.clock_hz,
                "fingerprint": self.fingerprint,
                "kinds": {p: k for p, k in self.kinds.items() if p != "core"},
                "transfer": self.transfer}


def interpolate(points, work: float) -> float:
    pts = sorted(points)
    if work <= pts[0][0]:
        return pts[0][1]
    if work >= pts[-1][0]:
        return pts[-1][1] * work / pts[-1][0]
    for (w0, t0), (w1, t1) in zip(pts, pts[1:]):
        if w0 <= work <= w1:
            f = (math.log(work) - math.log(w0)) / (math.log(w1) - math.log(w0))
            return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))
    return pts[-1][1]


def fingerprint(cfg: ChipConfig) -> dict:
    """What makes a library stale: the chip (its configuration), the compiler's cycle
    model (the source of the timing tables) and the host that timed the kernels."""
    from systolica.arch import config as config_module
    from systolica.arch import timing
    model = hashlib.sha256()
    for mod in (timing, config_module):
        model.update(Path(mod.__file__).read_bytes())
    return {"chip": hashlib.sha256(repr(cfg).encode()).hexdigest()[:16],
            "cycle_model": model.hexdigest()[:16],
            "host": f"{platform.machine()} {platform.processor() or ''} "
                    f"numpy {np.__version__}".strip()}


def path_for(cfg: ChipConfig) -> Path:
    return DATA / f"{cfg.name}.json"


def load(cfg: ChipConfig, path: Path | None = None) -> Library:
    """The library for `cfg` (default: the preset's file). A library for another
    chip or cycle model is refused; one timed on another host is used, with a note."""
    path = Path(path) if path else path_for(cfg)
    if not path.is_file():
        raise CompileError(f"no function library for chip {cfg.name!r} at {str(path)!r}; "
                           f"make it: systolica library --config {cfg.name}")
    try:
        raw = json.loads(files.read_input(path, "a function library", kind="json"))
        lib = Library(raw["chip"], raw["clock_hz"], raw["fingerprint"],
                      {p: {k: [tuple(x) for x in v] for k, v in kinds.items()}
                       for p, kinds in raw["kinds"].items()},
                      {p: [tuple(x) for x in v] for p, v in raw["transfer"].items()})
        if not isinstance(lib.fingerprint, dict):
            raise ValueError(f"its fingerprint is {lib.fingerprint!r}, not an object")
    except (files.FileError, ValueError, KeyError, TypeError, AttributeError) as e:
        what = f"no field {e}" if isinstance(e, KeyError) else str(e)
        raise CompileError(f"function library {str(path)!r} cannot be read ({what}); make "
                           f"it again: systolica library --config {cfg.name}") from None
    add_core(lib, cfg)
    now = fingerprint(cfg)
    if lib.fingerprint.get("chip") != now["chip"]:
        raise CompileError(f"function library {str(path)!r} is stale: the chip's "
                           f"configuration changed since it was measured; make it "
                           f"again: systolica library --config {cfg.name}")
    if lib.fingerprint.get("cycle_model") != now["cycle_model"]:
        lib.notes.append(f"function library {str(path)!r} is stale: the compiler's "
                         f"cycle model changed since it was measured; make it again: "
                         f"systolica library --config {cfg.name}")
    if lib.fingerprint.get("host") != now["host"]:
        lib.notes.append(f"the host's times in the function library were measured on "
                         f"another machine ({lib.fingerprint.get('host')}); "
                         f"systolica library --config {cfg.name} measures this one")
    return lib


def save(lib: Library, path) -> None:
    files.write_atomic(path, json.dumps(lib.to_json(), indent=1) + "\n")


def core_fingerprint() -> str:
    """What makes the core's points stale: the firmware's C sources and the kernels'
    descriptors (``firmware/core_kernels.py``)."""
    from systolica.firmware import core_kernels
    h = hashlib.sha256()
    src = Path(core_kernels.__file__).parent / "core"
    for path in sorted(src.glob("*.[ch]")) + [Path(core_kernels.__file__)]:
        h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()[:16]


def add_core(lib: Library, cfg: ChipConfig, path: Path | None = None) -> None:
    """The core's points (cycles at `lib`'s clock) when `cfg` has the core; else
    ``lib.no_core`` says why the assigner refuses it."""
    path = Path(path or CORE_DATA)
    if not cfg.has_core:
        lib.no_core = f"chip {cfg.name} has no management core (core_imem_bytes 0)"
        return
    if not path.is_file():
        lib.no_core = (f"the function library has no points of the core "
                       f"({str(path)!r}); measure them: systolica library --core")
        return
    try:
        raw = json.loads(files.read_input(path, "the core's function library", kind="json"))
        cycles = {k: [(float(w), float(c)) for w, c in v] for k, v in raw["kinds"].items()}
        measured = str(raw["fingerprint"])
    except (files.FileError, ValueError, KeyError, TypeError) as e:
        what = f"no field {e}" if isinstance(e, KeyError) else str(e)
        raise CompileError(f"the core's function library {str(path)!r} cannot be read "
                           f"({what}); measure it again: systolica library --core") from None
    if measured != core_fingerprint():
        lib.notes.append(f"the core's function library {str(path)!r} is stale: the "
                         f"firmware's kernels changed since it was measured; measure it "
                         f"again: systolica library --core")
    lib.core_cycles = cycles
    lib.kinds["core"] = {k: [(w, c / lib.clock_hz) for w, c in v] for k, v in cycles.items()}


def save_core(points: dict, measured_on: str, path: Path | None = None) -> None:
    """Write the core's points ``kind -> [(elements, core cycles)]`` measured on chip
    `measured_on`."""
    files.write_atomic(path or CORE_DATA, json.dumps(
        {"measured_on": measured_on, "fingerprint": core_fingerprint(),
         "unit": "core cycles", "kinds": points}, indent=1) + "\n")
