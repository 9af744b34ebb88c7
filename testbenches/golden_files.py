"""Golden files: what a test compares its output with, kept in ``testbenches/golden``
and rewritten only on request (``pytest --update-golden``), so that a change shows as
a diff to review. Workers of a parallel run update one JSON file in turn."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path


def update_entry(path: Path, key: str, value) -> None:
    """Set ``key`` of the JSON object in `path` to `value` (the keys kept sorted)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text()) if path.exists() else {}
        data[key] = value
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)


def update_text(path: Path, text: str) -> None:
    """Write a golden text file whole (atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
