"""The multiplexer settings the lowering's micro-ops rely on (``MicroOp.needs``): the
dense routing of WLOAD, MATMUL and VRUN on every grid shape, a VRUN's pieces, a split
chain's packed writeback, and what an op's data passes (what its needs must name)."""

from __future__ import annotations

from systolica.arch import fabric, timing
from systolica.arch.config import ChipConfig
from systolica.arch.isa import Opcode
from systolica.compiler.microops.ir import MicroOp
from systolica.compiler.planning import layout


def gemm_routing(cfg: ChipConfig, op: Opcode, *, to_acc: bool = False,
                 tile_rows: int | None = None, tile_cols: int | None = None,
                 sub: int = 0) -> dict[str, str]:
    """The multiplexer settings a dense block's WLOAD, MATMUL or VRUN relies on:
    CBUF partition group ``g`` feeds tile row ``g`` (activations) and tile column
    ``g`` (weights), every tile passes its lanes on, partial sums run down each tile
    column into ACC partition group ``j``, and writeback group ``g`` takes ACC group
    ``g``. Exactly the multiplexers the op's data passes (``timing.mux_use``).

    Tile rows from `tile_rows` on and tile columns from `tile_cols` on, which only
    ever carry zero padding, are fed zeros at the array's edge instead: the sums are
    the same, and those lanes stay quiet whatever the padding partitions hold.

    On a tall array (``R = k*C``) a VRUN writes sub-block `sub` (``0 .. k-1``) of an
    ``R``-column block: ACC group ``j`` to CBUF group ``sub*tile_cols + j``; the other
    groups are zeroed by sub-block 0 and kept by the later ones (``wb_src = keep``)."""
    t, cols = cfg.tile_rows, cfg.tile_cols
    tr = t if tile_rows is None else tile_rows
    tc = cols if tile_cols is None else tile_cols
    if isinstance(sub, layout.Piece) and op is Opcode.VRUN and not to_acc:
        return piece_routing(cfg, sub)
    if cfg.wide and op is not Opcode.MATMUL:
        return _wide_routing(cfg, op, to_acc, sub)
    if op is Opcode.WLOAD:
        return {**{f"north_feed[{j}]": f"cbuf.g{j}" if j < tc else fabric.ZERO
                   for j in range(cols)},
                **{f"west_wfeed[{i}]": f"cbuf.g{i}" for i in range(t)},
                **{f"w_in[{i}][{j}]": "lane" for i in range(t) for j in range(cols)}}
    if op is Opcode.MATMUL:
        return {**{f"west_feed[{i}]": f"cbuf.g{i}" if i < tr else fabric.ZERO
                   for i in range(t)},
                **{f"act_in[{i}][{j}]": "lane" for i in range(t) for j in range(cols)},
                **{f"psum_in[{i}][{j}]": "north" for i in range(1, t) for j in range(cols)},
                **{f"acc_src[{g}]": f"col.g{g}" for g in range(cols)}}
    if op is Opcode.VRUN and not to_acc:
        rest = fabric.ZERO if sub == 0 else fabric.KEEP
        return {f"wb_src[{g}]": f"col.g{g - sub * cols}" if 0 <= g - sub * cols < cols
                else rest for g in range(t)}
    return {}


def piece_routing(cfg: ChipConfig, piece: layout.Piece) -> dict[str, str]:
    """A VRUN writing `piece` of an N-block (:func:`layout.pieces`): CBUF group ``g``
    takes ACC group ``g + shift`` where the N-block has it, else zero (the block's
    first piece) or keeps what it holds. A tall grid's sub-block ``s`` is the piece of
    shift ``-s*Tc``, a wide grid's slice ``s`` that of shift ``s*T``."""
    rest = fabric.ZERO if piece.first else fabric.KEEP
    return {f"wb_src[{g}]": f"col.g{g + piece.shift}"
            if 0 <= g + piece.shift < cfg.tile_cols else rest for g in range(cfg.tile_rows)}


def _wide_routing(cfg: ChipConfig, op: Opcode, to_acc: bool, sub: int) -> dict[str, str]:
    """A wide grid's WLOAD and VRUN (docs/contract.md, "Wide grids"; its MATMUL's
    routing is any grid's): weights from the west, the north chain fed zeros (the reset
    routing); a VRUN writes slice `sub` of its N-block, ACC group ``sub*T + g`` into
    CBUF group ``g``."""
    t, cols = cfg.tile_rows, cfg.tile_cols
    if op is Opcode.WLOAD:
        return {**{f"north_feed[{j}]": fabric.ZERO for j in range(cols)},
                **{f"west_wfeed[{i}]": f"cbuf.g{i}" for i in range(t)},
                **{f"w_in[{i}][{j}]": "west" for i in range(t) for j in range(cols)}}
    if op is Opcode.VRUN and not to_acc:
        return {f"wb_src[{g}]": f"col.g{sub * t + g}" for g in range(t)}
    return {}


def packed_routing(cfg: ChipConfig, s: int) -> dict[str, str]:
    """A VRUN of a split chain's inner layer on a wide grid (docs/contract.md, "Split
    dense layers"): each group's first ``T/s`` ACC column groups (its ``N <= R/s``
    outputs) into CBUF groups ``g*T/s ..``, so one ``R``-byte row carries every
    group's outputs where the next layer's group takes its inputs (the packed
    input's layout)."""
    per, cols_per = cfg.tile_rows // s, cfg.tile_cols // s
    return {f"wb_src[{g * per + j}]": f"col.g{g * cols_per + j}"
            for g in range(s) for j in range(per)}


def multiplexers_passed(cfg: ChipConfig, mop: MicroOp) -> set[str]:
    """The multiplexers `mop`'s data passes (what its ``needs`` must name)."""
    ins = mop.instr(0)
    return {m.name for m in fabric.muxes(cfg) if timing.mux_use(cfg, ins, m.name) is not None}
