"""Reading and writing the files a user names: the one place that does it.

* An input is read only if it is a regular file no larger than a stated bound: a named
  pipe, a device (``/dev/zero``), a socket or a directory is refused before a byte is
  read, and a FIFO is opened without blocking, so nothing given as an input can hang
  the program or exhaust its memory (:func:`check_input`, :func:`read_input`).
* An output path is checked before any work by creating a file where it will go
  (:func:`check_output`): an empty name, a name ending in a separator, a directory, a
  path under a file and a place that cannot be written are refused then, not after a
  run of minutes.
* An output is written whole or not at all (:func:`write_atomic`, :func:`atomic_open`):
  a temporary file in the same directory, flushed to disk, then renamed over the
  target. An interrupted run (Ctrl-C, a kill) leaves the old file or none, never half
  of a new one.

Every refusal is a :class:`FileError` whose message names the path, the option it came
from and what to do.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

MiB = 1 << 20
#: Size bounds of the inputs, by kind (bytes).
LIMITS = {
    "image": 256 * MiB,         # a program image (the largest DRAM is far smaller)
    "text": 64 * MiB,           # program text (.stp)
    "onnx": 2048 * MiB,         # an ONNX model (protobuf's own limit is 2 GiB)
    "array": 1024 * MiB,        # --constant .npy, --calibration .npz
    "json": 256 * MiB,          # records and reports read back
    "chip": 1 * MiB,            # a chip file (--config FILE.json): a few hundred bytes
}


#: The longest file name (one path component, bytes) the usual file systems take.
NAME_MAX = 255


class FileError(Exception):
    """A path given as an input or an output cannot be used; the message says why."""


def _size(n: int) -> str:
    return f"{n / MiB:.0f} MiB" if n >= MiB else f"{n} bytes"


def _named(path, option: str | None) -> str:
    return f"{option} {path}" if option else f"{path}"


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


@contextlib.contextmanager
def _opened(path, what: str, option: str | None, limit: int) -> Iterator[tuple[int, int]]:
    """A descriptor of `path` open for reading and its size, once it is known to be a
    regular file within `limit` bytes. Opened without blocking (a FIFO with no writer
    would block an ordinary open) and checked on the open descriptor."""
    name = _named(path, option)
    if str(path) == "":
        raise FileError(f"{option + ': ' if option else ''}the file name is empty; give the "
                        f"path of {what}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except ValueError:                  # a NUL in the name
        raise FileError(f"{name!r}: not a file name; give the path of {what}") from None
    except FileNotFoundError:
        raise FileError(f"{name}: no such file; give the path of {what}") from None
    except PermissionError:
        raise FileError(f"{name}: permission denied; make it readable or give the path "
                        f"of another file") from None
    except OSError as e:
        raise FileError(f"{name}: cannot open it ({e.strerror or e}); give the path of "
                        f"{what}") from None
    try:
        st = os.fstat(fd)
        kind = _kind(st.st_mode)
        if kind == "a directory":
            raise FileError(f"{name} is a directory; give the path of {what}")
        if kind:
            raise FileError(f"{name} is {kind}, not a regular file; only files are read: "
                            f"save {what} to a file and give its path")
        if st.st_size > limit:
            raise FileError(f"{name} is {st.st_size:,} bytes, more than the {_size(limit)} "
                            f"read as {what}; give the right file, or a smaller one")
        yield fd, st.st_size
    finally:
        os.close(fd)


def check_input(path, what: str, *, option: str | None = None, kind: str = "json") -> Path:
    """`path`, if it is a regular file within the bound of inputs of `kind`
    (:data:`LIMITS`) that can be opened; a :class:`FileError` naming it otherwise. For
    a reader that must have the path itself (one that follows references beside it)."""
    with _opened(path, what, option, LIMITS[kind]):
        return Path(path)


def read_input(path, what: str, *, option: str | None = None, kind: str = "json") -> bytes:
    """The bytes of `path`, a regular file within the bound of inputs of `kind`
    (:data:`LIMITS`); a :class:`FileError` that names the path, the option and what
    to give instead otherwise. `what` says what the file should hold ("a program
    image")."""
    limit = LIMITS[kind]
    with _opened(path, what, option, limit) as (fd, _):
        chunks, total = [], 0
        try:
            while chunk := os.read(fd, 1 << 20):
                total += len(chunk)
                if total > limit:       # it grew while being read
                    raise FileError(f"{_named(path, option)} is more than the "
                                    f"{_size(limit)} read as {what}; give a smaller one")
                chunks.append(chunk)
        except OSError as e:
            raise FileError(f"{_named(path, option)}: cannot read it "
                            f"({e.strerror or e}); give the path of {what}") from None
        return b"".join(chunks)


# -- outputs -------------------------------------------------------------------------------
def check_output(path, option: str) -> Path:
    """`path` as a Path, once a file has been created (and removed) where it will be
    written; a :class:`FileError` naming `option` and the path otherwise. Nothing is
    left behind: missing directories are not made yet (:func:`write_atomic` makes
    them), the nearest one that exists is where the trial file goes."""
    text = os.fspath(path)
    if not text:
        raise FileError(f"{option} '': the file name is empty; give a file name, e.g. "
                        f"{option} out.json")
    if text.endswith((os.sep, "/")) or os.path.basename(text) in (".", ".."):
        raise FileError(f"{option} {text} names a directory; give a file name in it, e.g. "
                        f"{option} {os.path.join(text, 'out')}")
    p = Path(text)
    if len(os.fsencode(p.name)) > NAME_MAX:     # (the trial file's name is shorter)
        raise FileError(f"{option} {text}: the file name is {len(os.fsencode(p.name))} "
                        f"bytes long, more than the {NAME_MAX} a file system takes; give "
                        f"a shorter one")
    try:
        if p.is_dir():
            raise FileError(f"{option} {text} is a directory; give a file name")
        if p.exists():
            kind = _kind(p.stat().st_mode)
            if kind:
                raise FileError(f"{option} {text} is {kind}, not a regular file; give a "
                                f"file name")
        parent = p.parent
        while not parent.exists():
            if parent.is_symlink() or parent == parent.parent:
                break
            parent = parent.parent
    except OSError as e:            # a directory on the way too long, looping links...
        raise FileError(f"{option} {text}: {e.strerror or e}; give another path") from None
    if parent.exists() and not parent.is_dir():
        raise FileError(f"{option} {text}: {parent} is a file, not a directory; give "
                        f"another path")
    try:    # the name the write will use (a name too long for the file system fails here)
        fd, trial = tempfile.mkstemp(dir=parent, prefix=_temp_prefix(p), suffix=".tmp")
    except OSError as e:
        raise FileError(f"{option} {text}: cannot write in {parent} "
                        f"({e.strerror or e}); give another path") from None
    os.close(fd)
    os.unlink(trial)
    return p


def _temp_prefix(path: Path) -> str:
    """The start of the name of `path`'s temporary file: hidden, and short enough that
    any name the file system takes has a temporary one it takes too."""
    return f".{path.name[:64]}."


def _target(path: Path) -> Path:
    """Where a write to `path` lands: through a symbolic link, at what it names (so the
    link stays one)."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


@contextlib.contextmanager
def atomic_open(path, mode: str = "w") -> Iterator[IO]:
    """A file to write `path`'s new content to ("w" text, UTF-8, or "wb"): a temporary
    file beside it, flushed to disk and renamed over `path` when the block ends without
    an exception, removed when it ends with one (KeyboardInterrupt included). Missing
    directories are made. An existing file that is not regular (a device, a pipe) is
    refused rather than replaced."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open mode must be 'w' or 'wb', not {mode!r}")
    path = _target(Path(path))
    if path.exists() and _kind(path.stat().st_mode):
        raise FileError(f"{path} is {_kind(path.stat().st_mode)}, not a regular file; "
                        f"give a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_temp_prefix(path), suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)       # the mode an ordinary open would give
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):      # the rename itself, durable
        dirfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)


def write_atomic(path, data: bytes | str) -> None:
    """Write `data` (bytes, or text as UTF-8) to `path` whole or not at all
    (:func:`atomic_open`)."""
    with atomic_open(path, "wb" if isinstance(data, (bytes, bytearray)) else "w") as f:
        f.write(data)


__all__ = ["LIMITS", "FileError", "atomic_open", "check_input", "check_output",
           "read_input", "write_atomic"]
