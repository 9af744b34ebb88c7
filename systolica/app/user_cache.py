"""Where the sweep's results and the area estimates are kept, and the keys they are
kept by: the user cache directory shared with the Verilated builds."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from systolica.arch.config import ChipConfig


def cache_root() -> Path:
    """The Verilated builds' cache root (:func:`systolica.sim.verilated.cache_root`:
    ``$SYSTOLICA_CACHE``, else the user's cache directory for ``systolica``)."""
    from systolica.sim.verilated import cache_root as root
    return root()


def digest(obj) -> str:
    """The SHA-256 of `obj` as canonical JSON."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def chip_hash(cfg: ChipConfig) -> str:
    """The chip's identity whatever its name: its fields."""
    return digest({k: v for k, v in cfg.to_dict().items() if k != "name"})[:16]
