"""Partial-sum exits (docs/contract.md, "Partial-sum exits"): a MATMUL whose last
tile rows are fed zeros at the array's west edge takes its sums out above them.

Those rows add nothing to any column (every product there has a zero activation), so
when no reduction starts below the exit (every ``psum_in`` there takes the lane from
the north) the sums leaving tile row ``e`` equal those leaving the last one, and reach
the accumulator ``early * (n + 1)`` cycles sooner. The rule reads only the routing a
MATMUL needs, so it holds for every rule that lowers one."""

from __future__ import annotations

from systolica.arch import fabric, isa
from systolica.arch.config import ChipConfig
from systolica.arch.isa import Opcode
from systolica.compiler.microops.ir import MicroOp, make


def early(cfg: ChipConfig, needs: dict) -> int:
    """How many tile rows above the last a MATMUL with routing `needs` may take its
    sums out (0: at the last)."""
    table = {m.name: m for m in fabric.muxes(cfg)}

    def source(name: str) -> str:
        mux = table[name]
        return needs.get(name, mux.sources[mux.default])

    u = 0
    for i in range(cfg.tile_rows - 1, 0, -1):
        if source(f"west_feed[{i}]") != fabric.ZERO or any(
                source(f"psum_in[{i}][{j}]") != "north" for j in range(cfg.tile_cols)):
            break
        u += 1
    return min(u, (1 << isa.EXIT_BITS) - 1)


def take_exits(cfg: ChipConfig, ops: list[MicroOp]) -> list[MicroOp]:
    """`ops` with every MATMUL's ``early`` as high as its routing allows. Copies of a
    repeated instruction share their fields, needs and accesses, and still do."""
    done: dict[tuple[int, int], MicroOp] = {}
    out = []
    for op in ops:
        if op.op is not Opcode.MATMUL or op.fields.get("early"):
            out.append(op)
            continue
        key = (id(op.fields), id(op.needs))
        new = done.get(key)
        if new is None:
            u = early(cfg, op.needs)
            new = op
            if u:
                new = make(cfg, op.op, op.layer, **{**op.fields, "early": u})
                new.needs = op.needs
            done[key] = new
        out.append(new if new is op else MicroOp(new.op, new.fields, new.accesses,
                                                  op.layer, new.needs))
    return out
