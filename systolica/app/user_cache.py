"""Where the sweep's results and the area estimates are kept, and the keys they are
kept by: the user cache directory shared with the Verilated builds."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from systolica.arch.config import ChipConfig

#: The environment variable that moves the cache (as for the Verilated builds).
CACHE_ENV = "SYSTOLICA_CACHE"


def cache_root() -> Path:
    """``$SYSTOLICA_CACHE``, else the user's cache directory for ``systolica``
    (``$XDG_CACHE_HOME/systolica``, by default ``~/.cache/systolica``: platformdirs'
    rules), the same root as the Verilated builds'."""
    given = os.environ.get(CACHE_ENV, "").strip()
    if given:
        return Path(given).expanduser()
    import platformdirs
    return Path(platformdirs.user_cache_dir("systolica", appauthor=False))


def digest(obj) -> str:
    """The SHA-256 of `obj` as canonical JSON."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def chip_hash(cfg: ChipConfig) -> str:
    """The chip's identity whatever its name: its fields."""
    return digest({k: v for k, v in cfg.to_dict().items() if k != "name"})[:16]
