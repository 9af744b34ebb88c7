"""Compile each Verilator runtime object once, not once per simulator.

Every Verilated build compiles the same runtime library (``verilated.cpp``,
``verilated_vpi.cpp``, ... and cocotb's ``verilator.cpp``): about 25 CPU seconds that
do not depend on the design. Verilator's makefile runs every compile through
``$(OBJCACHE)``; :mod:`systolica.sim.verilated` points that at this script, which
answers a compile of a source *outside* the build directory from a cache of objects
and compiles everything else (the design's own C++) as asked.

A cached object is reused only when the command line, the source, the compiler and
every header the compiler read for it (as its ``-MMD`` dependency file lists them)
are unchanged, the same test a compiler cache makes in its direct mode. A lock per
entry lets concurrent builds wait for one compile instead of repeating it.

Run as ``python objcache.py DIR COMPILER ARGS...``; it imports nothing of the
package, so it works from any interpreter."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: The entry's files; the manifest is written last and marks a complete entry.
OBJECT, DEPS, MANIFEST = "object.o", "object.d", "manifest.json"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _compile_parts(argv: list[str]) -> tuple[Path, Path] | None:
    """The source and object of a plain ``-c`` compile, else None."""
    if "-c" not in argv:
        return None
    sources = [a for a in argv[1:] if a.endswith((".cpp", ".cc", ".c"))
               and not a.startswith("-")]
    if len(sources) != 1:
        return None
    source = Path(sources[0])
    if "-o" in argv:
        at = argv.index("-o")
        if at + 1 >= len(argv):
            return None
        target = Path(argv[at + 1])
    else:
        target = Path(source.with_suffix(".o").name)
    return source, target


def _dependencies(text: str) -> list[str]:
    """The prerequisites of the first rule of a make dependency file."""
    rule = text.replace("\\\n", " ").split("\n", 1)[0]
    _, _, prereqs = rule.partition(": ")
    return prereqs.split()


def _hash_files(paths: list[str]) -> dict[str, str] | None:
    out = {}
    for p in paths:
        try:
            out[p] = _digest(Path(p).read_bytes())
        except OSError:
            return None
    return out


def _compiler_identity(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        return name
    st = Path(found).resolve().stat()
    return f"{Path(found).resolve()}:{st.st_size}:{st.st_mtime_ns}"


def _restore(entry: Path, target: Path) -> bool:
    """Copy the entry's object (and dependency file) into place if still valid."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if _hash_files(list(manifest)) != manifest:
        return False
    shutil.copyfile(entry / OBJECT, target)
    if (entry / DEPS).exists():
        shutil.copyfile(entry / DEPS, target.with_suffix(".d"))
    return True


def _store(entry: Path, target: Path) -> None:
    deps_file = target.with_suffix(".d")
    if not deps_file.exists():
        return              # without the headers read, validity cannot be checked
    deps_text = deps_file.read_text()
    manifest = _hash_files(_dependencies(deps_text))
    if manifest is None:
        return
    (entry / MANIFEST).unlink(missing_ok=True)
    for name, data in ((OBJECT, target.read_bytes()), (DEPS, deps_text.encode())):
        tmp = entry / f"{name}.{os.getpid()}"
        tmp.write_bytes(data)
        os.replace(tmp, entry / name)
    tmp = entry / f"{MANIFEST}.{os.getpid()}"
    tmp.write_text(json.dumps(manifest, sort_keys=True))
    os.replace(tmp, entry / MANIFEST)       # whole, and last: marks a complete entry


def main(argv: list[str]) -> int:
    cache, command = Path(argv[0]), argv[1:]
    parts = _compile_parts(command)
    if parts is None or not parts[0].is_absolute() or parts[0].resolve().is_relative_to(
            Path.cwd().resolve()):
        return subprocess.run(command).returncode      # the design's own C++
    source, target = parts
    key = _digest(json.dumps([command, _compiler_identity(command[0])]).encode()
                  + source.read_bytes())
    entry = cache / key[:32]
    entry.mkdir(parents=True, exist_ok=True)
    with open(entry / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _restore(entry, target):
            return 0
        code = subprocess.run(command).returncode
        if code == 0:
            _store(entry, target)
        return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
