"""int32 transposes on the array (docs/contract.md, "Transposes"): each element's
four bytes go through the array as byte planes and are interleaved back into words
by weight loads (the selection and interleaving blocks). The rule is
:class:`~systolica.compiler.lowering.transpose.TransposeRule`; this is its int32
part."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from systolica.arch import isa
from systolica.arch.config import ChipConfig
from systolica.arch.isa import DmaKind, Opcode
from systolica.compiler.errors import CompileError
from systolica.compiler.planning import layout, permute
from systolica.compiler.scheduling.pipeline import Block, Step

#: The largest value of a DMA's ``dram_stride`` field.
DMA_STRIDE_MAX = (1 << isa.field_bits(Opcode.DMA, "dram_stride")) - 1

#: int32 transposes: blocks whose output words share each interleaving weight load
INT32_GROUP = 4


def int32_words(cfg: ChipConfig) -> tuple[int, int, int, int]:
    """An int32 transpose's word geometry: ``E = R/4`` elements a word, ``Ec =
    min(R, C)/4`` a sub-block of ``C`` bytes, ``k`` sub-blocks a word (``ceil(R/C)``
    where ``R > C``, else 1; the last partial on a grid whose sides do not divide) and
    ``T`` interleaving blocks per byte, one per (output word, sub-block) of a block of
    ``min(R, C)`` rows, ``t = w*k + s`` up to the one holding its last row (4 on
    every grid whose sides divide)."""
    R, C = cfg.rows, cfg.cols
    E, Ec = R // 4, min(R, C) // 4
    k = -(-R // C) if R > C else 1
    if not Ec:                  # an array under 4 wide: refused by the rule itself
        return E, Ec, k, 0
    w, rest = divmod(min(R, C) - 1, E)
    return E, Ec, k, w * k + rest // Ec + 1


def int32_block_rows(Q: int, QB: int, C: int) -> list[tuple[int, int]]:
    """An int32 transpose's blocks of `Q` rows (or columns): ``QB`` at a time, but
    never across a multiple of `C` (an N-block's end; ``C = Q``: simply ``QB`` at a
    time)."""
    return [(q0, min(QB, n0 + C - q0, Q - q0)) for n0 in range(0, Q, C)
            for q0 in range(n0, min(n0 + C, Q), QB)]

def int32_group(cfg: ChipConfig, half_rows: int) -> int:
    """Blocks of an int32 transpose sharing each interleaving load: at most
    :data:`INT32_GROUP`, and per block five ``R``-row accumulator slots (its four
    plane words, an output word) in the two halves."""
    return max(1, min(INT32_GROUP, 2 * half_rows // (5 * cfg.rows)))

def int32_params(cfg: ChipConfig) -> list[tuple[str, np.ndarray]]:
    """The identity (a copy's weights), the selection block (row ``b*E + j`` is
    ``e_{4j+b}``: byte ``b`` of a word's element ``j``, ``E = R // 4``) and the 16
    interleaving weight blocks ``V[b, t]`` (row ``t*Ec + j`` has a 1 in column
    ``4j + b``, ``Ec = min(R, C) // 4``), ``b`` and ``t`` in ``0..3``: on a square
    or wide array ``t`` is the output word; on a tall one (``R = k*C``)
    ``t = w*k + s`` is sub-block ``s`` (its bytes ``s*C ..``) of output word ``w``.
    A wide grid loads its weights from the west: there each block is stored
    transposed, in ``C`` rows (zero past ``R``)."""
    R, WR = cfg.rows, cfg.weight_rows
    E, Ec, k, T = int32_words(cfg)
    select = np.zeros((R, R), np.uint8)
    for b in range(4):
        for j in range(E):
            select[b * E + j, 4 * j + b] = 1
    inter = np.zeros((4, T, WR, R), np.uint8)
    for b in range(4):
        for t in range(T):
            w, s = divmod(t, k)
            for j in range(min(Ec, E - s * Ec)):
                r = w * E + s * Ec + j          # the block row: an output column
                if r >= WR:
                    continue
                if cfg.wide:
                    inter[b, t, 4 * j + b, r] = 1
                else:
                    inter[b, t, r, 4 * j + b] = 1
    return [("identity", np.eye(R, dtype=np.uint8)), ("select", select),
            ("interleave", inter.reshape(4 * T * WR, R))]

def acc_ring_slot(self, cfg: ChipConfig, n: int) -> int:
    """The accumulator rows of the `n`-th block: the two halves as one ring of
    ``R``-row slots (a block's MATMUL then need not wait for the VRUN of the block
    before last: the MATMUL's latency would pace the array)."""
    return self.halves + (n % max(1, 2 * self.half_rows // cfg.rows)) * cfg.rows


@dataclass
class Where32:
    """Where an int32 transpose finds and puts things (all in CBUF rows but the DRAM
    addresses): the identity, the selection block and the 16 interleaving blocks, the
    slots its input words load into, two sets of byte planes (4 R rows each), two
    output staging slots, the accumulator halves; its input and output in DRAM."""
    ident: int
    ident_dram: int
    select: int
    select_dram: int
    inter: int
    inter_dram: int
    slots: int
    planes: int
    staging: int
    halves: int
    half_rows: int
    a_dram: int
    stored: int
    group: int = 1          # blocks whose output words share each interleaving load;
                            # `planes` holds 2 x group x 4R rows, `staging` 2 x group x R
    acc_slot = acc_ring_slot

def int32_blocks(cfg: ChipConfig, em, index: int, name: str,
                 p: permute.PermPlan, where: Where32, op) -> list[Block]:
    """An int32 permutation DRAM to DRAM, in blocks of ``QB x R`` elements
    (``QB = min(R, C)`` input rows: on a tall array (``R = k*C``) what a west load
    puts in the array's columns, on a wide one what a VRUN's slice writes; ``R``
    input columns, ``k`` N-blocks on a tall array). Moving the last axis, per
    block: for each of its words ``w`` (``E = R/4`` elements of the block's columns,
    4 bytes each) the block's rows of that word are the west-loaded weights and the
    selection block streams through them, so accumulator row ``b*E + j`` holds byte
    ``b`` of element ``w*E + j`` of every block row, written to row
    ``b*R + w*E + j`` of the byte planes ``Z`` (partitions ``0 .. QB-1``, the others
    zeroed); then each output word ``w'`` is, per sub-block ``s`` of ``C`` of its
    ``R`` bytes, ``sum_b Z[b] @ V[b, w'*k + s]`` (four MATMULs accumulating),
    written into partitions ``s*C ..`` (the other groups kept after sub-block 0)
    and stored with the output's row stride (a wide array: one sub-block, its
    interleaving blocks west-loaded as its weights are, slice 0 written). Keeping
    the last axis: every word of a row is copied as int8 bytes are (sub-block
    ``s``: the identity from its row ``s*C``)."""
    R, C, arw = cfg.rows, cfg.cols, cfg.acc_row_words
    QB, WR = min(R, C), cfg.weight_rows
    E, Ec, k, T = int32_words(cfg)
    w = where
    for what, stride in (("input", p.sq * arw), ("output", p.sl * arw)):
        if stride > DMA_STRIDE_MAX:
            raise CompileError(
                f"layer {name!r}: the permutation's {what} rows are {stride} words "
                f"apart in DRAM, more than a DMA's stride field takes ({DMA_STRIDE_MAX}); "
                f"split the tensor along its outer axes")
    if QB % 4:
        raise CompileError(
            f"layer {name!r}: an int32 transpose needs an array whose shorter side "
            f"is a multiple of 4 (its blocks of min(R, C) rows are written in whole "
            f"4-byte elements); chip {cfg.name!r} has a {cfg.rows}x{cfg.cols} array: "
            f"use a chip with at least 4 array rows and columns (e.g. 'tiny') or "
            f"transpose int8 data")
    blocks: list[Block] = []
    first = ([op(Opcode.DMA, index, kind=DmaKind.LOAD_CBUF, dram_addr=w.ident_dram,
                 dram_stride=1, buf_addr=w.ident, rows=R)] if p.mode == "copy" else
             [op(Opcode.DMA, index, kind=DmaKind.LOAD_CBUF, dram_addr=w.select_dram,
                 dram_stride=1, buf_addr=w.select, rows=R),
              op(Opcode.DMA, index, kind=DmaKind.LOAD_CBUF, dram_addr=w.inter_dram,
                 dram_stride=1, buf_addr=w.inter, rows=4 * T * WR)])

    def step(loads, mm) -> Step:
        nonlocal first
        out, first = Step(first + loads, mm), []
        return out

    def block() -> tuple[Block, int]:
        blk = Block(index)
        acc_at = w.acc_slot(cfg, em.blocks)
        em.blocks += 1
        return blk, acc_at

    def bank() -> int:
        b = em.steps % 2
        em.steps += 1
        return b

    n_out = 0
    if p.mode == "copy":
        # each word of a row as R int8 bytes: the identity copy (a west-loaded
        # identity, the words streaming through it; on a tall array sub-block s
        # of C bytes from identity row s*C)
        holds: dict[int, int] = {}
        for o0, i0, stride, count in p.runs:
            for kb in range(layout.blocks(p.L, C) * arw):
                nb, word = divmod(kb, arw)
                slot = w.slots + (n_out % 4) * R
                dst = w.staging + (n_out % 2) * R
                n_out += 1
                for sub in range(k):
                    blk, acc_at = block()
                    b = bank()
                    loads = [] if sub else [op(
                        Opcode.DMA, index, kind=DmaKind.LOAD_CBUF,
                        dram_addr=w.a_dram + (nb * p.in_rows + i0) * arw + word,
                        dram_stride=stride * arw, buf_addr=slot, rows=count)]
                    if holds.get(b) != sub:
                        if w.ident + sub * C + WR > cfg.cbuf_depth:
                            raise CompileError(
                                f"layer {name!r}: the identity ends too close to the "
                                f"CBUF's end for a weight load of {WR} "
                                f"rows; use a chip with a larger CBUF")
                        loads.append(op(Opcode.WLOAD, index, w_addr=w.ident + sub * C,
                                        bank=b))
                        holds[b] = sub
                    blk.steps.append(step(loads, op(Opcode.MATMUL, index,
                                                    act_addr=slot, rows=count,
                                                    acc_addr=acc_at, accumulate=0,
                                                    bank=b)))
                    blk.epilogue.append(op(Opcode.VRUN, index, sub=sub, src=acc_at,
                                           rows=count, dst=dst, to_acc=0))
                    if sub == k - 1:
                        blk.epilogue.append(op(
                            Opcode.DMA, index, kind=DmaKind.STORE_CBUF,
                            dram_addr=w.stored + (nb * p.out_rows + o0) * arw + word,
                            dram_stride=arw, buf_addr=dst, rows=count))
                    blocks.append(blk)
        return blocks
    # every QB x R element block: (its first input row's first word, of N-block
    # 0; its first output row's, of N-block 0; rows; cols; its first input column;
    # its first output column)
    # Where a word's E elements do not tile an N-block, a block's rows stop at
    # output N-block ends and (where R is not a multiple of C) its columns at input
    # ones, so every word it writes or reads starts at its edge.
    ragged = C % E != 0
    row_blocks = int32_block_rows(p.Q, QB, C if ragged else p.Q)
    col_blocks = int32_block_rows(p.L, R, C if ragged and R % C else p.L)
    todo = [((in0 + q0 * p.sq) * arw, (out0 + l0 * p.sl) * arw, rows, cols, l0, q0)
            for in0, out0 in p.bases for q0, rows in row_blocks
            for l0, cols in col_blocks]

    def word_at(view_rows: int, e: int) -> int:
        """The word holding element column `e` of a view's row, from N-block 0's."""
        return (e // C) * view_rows * arw + (e % C) // E

    def word_columns(cols: int) -> list[tuple[int, int]]:
        """A block's first `cols` element columns as (first, count) runs, each in
        one DRAM word: `E` a word, but never across an N-block's end (where `E`
        does not divide `C` an ACC row's last word is padded)."""
        return [(n0 + w0, min(E, C - w0, cols - n0 - w0))
                for n0 in range(0, cols, C) for w0 in range(0, min(C, cols - n0), E)]

    def out_subs(rows: int, word: int) -> int:
        """Sub-blocks of output word `word` holding some of a block's `rows`."""
        return min(k, layout.blocks(min(E, rows - word * E), Ec))

    G = w.group
    for g0 in range(0, len(todo), G):
        group = todo[g0:g0 + G]
        # the byte planes of each block of the group, transposed (one of two sets)
        zs = []
        for n, (at_in, _, rows, cols, e_in, _) in enumerate(group):
            z = w.planes + (((g0 // G) % 2) * G + n) * 4 * R
            zs.append(z)
            for e, m in word_columns(cols):
                blk, acc_at = block()
                b = bank()
                slot = w.slots + (em.steps % 4) * R
                loads = [op(Opcode.DMA, index, kind=DmaKind.LOAD_CBUF,
                            dram_addr=w.a_dram + at_in + word_at(p.in_rows, e_in + e),
                            dram_stride=p.sq * arw, buf_addr=slot, rows=rows),
                         op(Opcode.WLOAD, index, w_addr=slot, bank=b)]
                blk.steps.append(step(loads, op(Opcode.MATMUL, index,
                                                act_addr=w.select, rows=R,
                                                acc_addr=acc_at, accumulate=0,
                                                bank=b)))
                blk.epilogue += [op(Opcode.VRUN, index, src=acc_at + byte * E,
                                    rows=m, dst=z + byte * R + e, to_acc=0)
                                 for byte in range(4)]
                blocks.append(blk)
        # each output word w' of every block of the group, sub-block by sub-block:
        # an interleaving block V[b, w'*k + s] is loaded once for all of them (the
        # group's planes Z[b] stream through it one after the other, each into its
        # own accumulator rows)
        for word in range(max(layout.blocks(g[2], E) for g in group)):
            outs = [n for n, (_, _, rows, _, _, _) in enumerate(group)
                    if word < layout.blocks(rows, E)]
            dsts = {}
            for n in outs:
                dsts[n] = w.staging + (n_out % (2 * G)) * R
                n_out += 1
            for sub in range(k):
                blk = Block(index)
                # (planes, output word, rows, staging slot, accumulator rows, last)
                members = []
                for n in outs:
                    _, at_out, rows, cols, _, e_out = group[n]
                    subs = out_subs(rows, word)
                    if sub < subs:
                        members.append((
                            zs[n], at_out + word_at(p.out_rows, e_out + word * E),
                            cols, dsts[n], w.acc_slot(cfg, em.blocks + len(members)),
                            sub == subs - 1))
                if not members:
                    break
                em.blocks += len(members)
                for byte in range(4):
                    b = bank()
                    loads = [op(Opcode.WLOAD, index,
                                w_addr=w.inter + (byte * T + word * k + sub) * WR,
                                bank=b, west=False)]
                    for z, _, cols, _, acc_at, _ in members:
                        blk.steps.append(step(loads, op(
                            Opcode.MATMUL, index, act_addr=z + byte * R, rows=cols,
                            acc_addr=acc_at, accumulate=int(byte > 0), bank=b)))
                        loads = []
                for _, at_out, cols, dst, acc_at, last in members:
                    blk.epilogue.append(op(Opcode.VRUN, index, sub=sub, src=acc_at,
                                           rows=cols, dst=dst, to_acc=0))
                    if last:
                        blk.epilogue.append(op(
                            Opcode.DMA, index, kind=DmaKind.STORE_CBUF,
                            dram_addr=w.stored + at_out,
                            dram_stride=p.sl * arw, buf_addr=dst, rows=cols))
                blocks.append(blk)
    return blocks
