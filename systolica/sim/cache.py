"""The cache of Verilated builds, as ``systolica cache`` shows and cleans it.

Builds live in ``verilated/<family>/<key>/`` under :func:`systolica.sim.verilated.
cache_root` (``$SYSTOLICA_CACHE``, else the user's cache directory), one folder per
build, named by the first 16 hex digits of its key; the family is the design's label
with ``-waves`` (FST) or ``-vcd`` for one that writes a waveform. A finished build
has a ``build.stamp`` (touched at every use: its time is the build's last use) and a
``build.json`` that says what it is (:func:`systolica.sim.verilated.info`; builds made
before it existed have none, and show what their folder names say). ``.objcache``
beside the families holds the Verilator runtime's objects that every build shares.

Cleaning removes a build only while holding its lock without waiting: one that a
process is building or checking at that moment is left alone (and said so).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from systolica.sim import verilated

#: The shared objects of the Verilator runtime, beside the families.
OBJCACHE = ".objcache"
SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class Build:
    """One build in the cache: where it is, what it is (``design``: the label, e.g.
    ``chip-tiny``; ``harness``: ``cocotb`` or ``cxx``, a C++ main of its own;
    ``waves``: ``fst``, ``vcd`` or None), its size in bytes, its last use (seconds
    since the epoch) and whether it was finished (an interrupted or failed build was
    not)."""
    path: Path
    design: str
    harness: str
    waves: str | None
    size: int
    last_used: float
    finished: bool

    @property
    def key(self) -> str:
        return self.path.name


def size_of(path: Path) -> int:
    """Bytes in the files under `path` (links not followed)."""
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def _read(path: Path) -> Build | None:
    stamp, about = path / "build.stamp", path / verilated.BUILD_INFO
    try:
        info = json.loads(about.read_text())
        if not isinstance(info, dict):
            info = {}
    except (OSError, ValueError):
        info = {}
    family = path.parent.name
    waves = info.get("waves") if info else (
        "vcd" if family.endswith("-vcd") else "fst" if family.endswith("-waves") else None)
    design = info.get("label") or family.removesuffix("-waves").removesuffix("-vcd")
    harness = info.get("harness") or ("cxx" if design.endswith("-cxx") else "?")
    try:
        last = max(p.stat().st_mtime for p in (stamp, path) if p.exists())
    except (OSError, ValueError):
        return None
    return Build(path=path, design=str(design), harness=str(harness),
                 waves=waves, size=size_of(path), last_used=last,
                 finished=stamp.exists())


def builds(root: Path | None = None) -> list[Build]:
    """Every build under `root` (default: the cache's ``verilated/``), most recently
    used first."""
    root = verilated.builds_root() if root is None else Path(root)
    found = []
    if root.is_dir():
        for family in sorted(root.iterdir()):
            if not family.is_dir() or family.name.startswith("."):
                continue
            for path in sorted(family.iterdir()):
                if path.is_dir():
                    build = _read(path)
                    if build is not None:
                        found.append(build)
    return sorted(found, key=lambda b: -b.last_used)


@dataclass(frozen=True)
class Cleaned:
    """What :func:`clean` did: the builds removed, those left because a process held
    them, and the bytes freed (with the runtime objects when they went too)."""
    removed: list[Build]
    busy: list[Build]
    freed: int


def clean(root: Path | None = None, *, older_than_days: float | None = None,
          everything: bool = False, now: float | None = None) -> Cleaned:
    """Remove builds from the cache under `root` (default: the cache's
    ``verilated/``): all of them and the shared runtime objects (`everything`), those
    not used for `older_than_days` days, or, given neither, the unfinished ones
    (interrupted or failed). A build that another process holds is left."""
    if older_than_days is not None and not older_than_days >= 0:
        raise ValueError(f"older_than_days must be a non-negative number of days, "
                         f"not {older_than_days!r}")
    root = verilated.builds_root() if root is None else Path(root)
    now = time.time() if now is None else now

    def wanted(build: Build) -> bool:
        if everything:
            return True
        if older_than_days is not None:
            return now - build.last_used > older_than_days * SECONDS_PER_DAY
        return not build.finished

    removed, busy, freed = [], [], 0
    for build in builds(root):
        if not wanted(build):
            continue
        with verilated.locked(build.path / ".lock", wait=False) as mine:
            if not mine:
                busy.append(build)
                continue
            shutil.rmtree(build.path, ignore_errors=True)
        removed.append(build)
        freed += build.size
    if everything and (root / OBJCACHE).is_dir():
        freed += size_of(root / OBJCACHE)
        shutil.rmtree(root / OBJCACHE, ignore_errors=True)
    if root.is_dir():
        _drop_empty(p for p in root.iterdir() if p.is_dir())
    return Cleaned(removed, busy, freed)


def _drop_empty(folders: Iterable[Path]) -> None:
    for folder in folders:
        try:
            folder.rmdir()          # only if empty
        except OSError:
            pass


def human_size(size: int) -> str:
    """``size`` bytes as ``1.2 GB``, ``340 MB``, ``12 kB`` (powers of 1000)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}" if size < 10 * scale \
                else f"{size / scale:.0f} {unit}"
    return f"{size} B"


def human_age(seconds: float) -> str:
    """How long ago, roughly: ``just now``, ``5 min ago``, ``3 h ago``, ``2 days ago``."""
    if seconds < 60:
        return "just now"
    for unit, scale in (("days", SECONDS_PER_DAY), ("h", 3600.0), ("min", 60.0)):
        if seconds >= scale:
            count = int(seconds // scale)
            return f"{count} {'day' if unit == 'days' and count == 1 else unit} ago"
    return "just now"
