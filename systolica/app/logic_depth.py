"""The deepest register-to-register logic paths of a synthesised FPGA netlist (the
yosys JSON a ``make bitstream`` leaves, ``build/fpga/<board>/top.json`` or
``top.syn.json``), counted in logic levels rather than nanoseconds: what limits Fmax
before placement and routing add their share, and which blocks the paths cross.

A level is one LUT (a LUT4, or a LUT4 with the wide-function multiplexers that make a
LUT5..LUT8 of it) or a carry cell entered from its operands; the hops along a carry
chain are counted apart. A path starts at a register, block RAM, multiplier or port
and ends at one's input.

    python -m systolica.app.logic_depth build/fpga/ulx3s/top.json [--paths 3]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from systolica import files

#: Per cell type: output port -> the input ports it depends on combinationally, and
#: the inputs that add no level (a wide multiplexer's data inputs, a carry input).
ARCS = {
    # ECP5 (the LUT4's ports A..D, Z) and Gowin (I0..I3, F)
    "LUT4": ({"Z": ("A", "B", "C", "D"), "F": ("I0", "I1", "I2", "I3")}, ()),
    "PFUMX": ({"Z": ("ALUT", "BLUT", "C0")}, ("ALUT", "BLUT")),
    "L6MUX21": ({"Z": ("D0", "D1", "SD")}, ("D0", "D1")),
    "CCU2C": ({"S0": ("A0", "B0", "C0", "D0", "CIN"),
               "S1": ("A0", "B0", "C0", "D0", "A1", "B1", "C1", "D1", "CIN"),
               "COUT": ("A0", "B0", "C0", "D0", "A1", "B1", "C1", "D1", "CIN")}, ("CIN",)),
    # Gowin
    **{f"LUT{k}": ({"F": tuple(f"I{i}" for i in range(k))}, ()) for k in (1, 2, 3)},
    "ALU": ({"SUM": ("I0", "I1", "I3", "CIN"), "COUT": ("I0", "I1", "I3", "CIN")},
            ("CIN",)),
    **{f"MUX2_LUT{k}": ({"O": ("I0", "I1", "S0")}, ("I0", "I1")) for k in (5, 6, 7, 8)},
}
#: The carry cells: every arc through one is a hop along a carry chain.
CARRY_CELLS = {"CCU2C", "ALU"}


@dataclass(frozen=True)
class Path_:
    levels: int
    carries: int
    end: str            # the cell and port the path ends at
    nets: tuple         # the nets along it, first to last


def deepest(netlist: dict, top: str = "top", count: int = 3) -> tuple[list, dict]:
    """The ``count`` deepest paths (each into a different endpoint) and how many
    endpoints have each depth in levels."""
    mod = netlist["modules"][top]
    names = {}
    for name, info in mod["netnames"].items():
        for bit in info["bits"]:
            if isinstance(bit, int) and (bit not in names or _better(name, names[bit])):
                names[bit] = name
    driver, inputs = {}, collections.defaultdict(list)
    for cell, c in mod["cells"].items():
        if c["type"] not in ARCS:
            continue
        arcs, free = ARCS[c["type"]]
        conn = c["connections"]
        for out, ins in arcs.items():
            for bit in conn.get(out, ()):
                if isinstance(bit, int):
                    driver[bit] = (cell, out)
            for port in ins:
                step = (0 if port in free else 1, int(c["type"] in CARRY_CELLS))
                inputs[(cell, out)] += [(bit, step) for bit in conn.get(port, ())
                                        if isinstance(bit, int)]

    depth: dict = {}
    visiting = object()

    def resolve(bit):
        """(levels, carries) of the deepest path into ``bit``, and the bit before it
        on that path (depth first, without recursion: paths are long)."""
        stack = [bit]
        while stack:
            b = stack[-1]
            state = depth.get(b)
            if state is not None and state is not visiting:
                stack.pop()
                continue
            node = driver.get(b)
            if node is None:                 # a register, memory, multiplier or port
                depth[b] = ((0, 0), None)
                stack.pop()
                continue
            if state is None:
                depth[b] = visiting
                if any(depth.get(i) is visiting for i, _ in inputs[node]):
                    raise ValueError(f"a combinational loop through {names.get(b, b)}")
                pending = [i for i, _ in inputs[node] if i not in depth]
                if pending:
                    stack.extend(pending)
                    continue
            best, via = (0, 0), None
            for i, (levels, carries) in inputs[node]:
                (l0, c0), _ = depth[i]
                if via is None or (l0 + levels, c0 + carries) > best:
                    best, via = (l0 + levels, c0 + carries), i
            depth[b] = (best, via)
            stack.pop()
        return depth[bit]

    ends = []
    for cell, c in mod["cells"].items():
        if c["type"] in ARCS:
            continue
        directions = c.get("port_directions", {})
        for port, bits in c["connections"].items():
            if directions.get(port) == "output":
                continue
            for bit in bits:
                if isinstance(bit, int) and bit in driver:
                    ends.append(((resolve(bit))[0], f"{cell}.{port}", bit))
    ends.sort(key=lambda e: e[0], reverse=True)
    histogram = collections.Counter(levels for (levels, _), _, _ in ends)
    paths = []
    for (levels, carries), end, bit in ends[:count]:
        nets, b = [], bit
        while b is not None:
            nets.append(names.get(b, f"bit {b}"))
            b = depth[b][1]
        paths.append(Path_(levels, carries, end, tuple(reversed(nets))))
    return paths, dict(sorted(histogram.items(), reverse=True))


def _better(name: str, old: str) -> bool:
    """A net name to show: a public one, then the shortest."""
    return (old.startswith("$") and not name.startswith("$")) or (
        name.startswith("$") == old.startswith("$") and len(name) < len(old))


def blocks(path: Path_, depth: int = 3) -> list[str]:
    """The blocks a path crosses, in order (``top.chip.vpu`` for ``depth`` 3)."""
    out = []
    for net in path.nets:
        block = ".".join(net.split(".")[:depth])
        if not out or out[-1] != block:
            out.append(block)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m systolica.app.logic_depth",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("netlist", type=Path, help="yosys JSON netlist (top.json, top.syn.json)")
    p.add_argument("--top", default="top")
    p.add_argument("--paths", type=int, default=3, help="deepest paths to show")
    args = p.parse_args(argv)
    try:
        netlist = json.loads(files.read_input(args.netlist, "a yosys JSON netlist"))
    except (files.FileError, ValueError) as e:
        p.error(f"{args.netlist}: {e}" if isinstance(e, ValueError) else str(e))
    paths, histogram = deepest(netlist, args.top, args.paths)
    shown = list(histogram.items())[:10]
    print("endpoints by logic levels: " + ", ".join(f"{lv}: {n}" for lv, n in shown))
    for path in paths:
        print(f"{path.levels} levels, {path.carries} carry hops, into {path.end}")
        print("  blocks: " + " > ".join(blocks(path)))
        for net in path.nets:
            print(f"    {net}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
