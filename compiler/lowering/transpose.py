"""Transposes (``Transpose``, seed 004): a block at a time through the array, as the
stationary weights against the identity; N-D permutations as batches of them or as
copies; int32 tensors by their byte planes (:mod:`.transpose_int32`). In the dense
lowering a transpose reads its input where it lies or streams it from DRAM; in the
map lowering it goes DRAM to DRAM."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.arch.isa import DmaKind, Opcode
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.graph import Graph, Node
from systolica.compiler.graph.ops import Transpose
from systolica.compiler.lowering.emitter import Emitter
from systolica.compiler.lowering.maps.jobs import MapInputs
from systolica.compiler.lowering.maps.layout import Layout, bank_up
from systolica.compiler.lowering.maps.tile_loop import TileLoop
from systolica.compiler.lowering.registry import register
from systolica.compiler.lowering.rule import Need, Rule
from systolica.compiler.lowering.transpose_int32 import (
    DMA_STRIDE_MAX,
    Where32,
    acc_ring_slot,
    int32_blocks,
    int32_group,
    int32_params,
    int32_words,
)
from systolica.compiler.microops.ir import MicroOp
from systolica.compiler.planning import layout, permute
from systolica.compiler.planning.memory import (
    Region,
    acc_half_rows,
    on_chip_readers,
    stored_at,
    through_dram,
)
from systolica.compiler.scheduling.pipeline import Block, Step


@register
class TransposeRule(Rule):
    """An int8 transpose on the array (seed 004, docs/contract.md "Transposes"). A 2-D
    ``[M, N] -> [N, M]`` goes block by block: ``k = ceil(M/R) * ceil(N/R)`` blocks of at
    most ``R x R`` (the CBUF's ``R`` partitions by ``R`` rows). Block ``(mb, kb)`` is rows
    ``mb*R ..`` of the input's K-block ``kb``: a WLOAD with every tile's weight input on
    the west lane makes it the stationary weights with its CBUF rows in array columns
    (on a tall array in sub-blocks of ``C`` rows), a MATMUL streams the identity (held in
    the CBUF, loaded once per layer) through it, and a VRUN without requantisation
    writes the accumulator rows, the transposed block, to rows ``kb*R ..`` of the
    output's K-block ``mb``.

    An N-D permutation (``Transpose.perm``; :mod:`.permute` cuts it into pieces) that
    moves the last axis is a batch of such 2-D transposes whose blocks are read and
    written by strided DMAs; one that keeps it copies runs of rows through the array,
    the identity as the west-loaded weights and the rows streaming through it.

    An input in DRAM (a graph input, or an N-D or int32 tensor its producer stored
    there: :func:`through_dram`) is streamed in tiles of blocks (:meth:`tile`: one DMA
    per tile column in, one per tile row out), a copy's rows through a ring of CBUF
    slots; a 2-D int8 input made on chip is read where it lies. Each block takes the
    next ``R``-row accumulator slot (:meth:`Where.acc_slot`). The output goes to a
    staging slot and DRAM (a graph output) or to its tensor on chip (read by later
    layers). A west load reads ``weight_rows`` rows from a block's first (a
    sub-block's, from ``sub*C``): past a ragged block's rows, and on a tall or wide
    grid past any block's. The slots and the identity have room for those rows, an
    input read where it lies has them in its region (:meth:`reads_past`), and
    :mod:`.zero_fill` writes zeros to those nothing else has written: partitions
    of a ragged block beyond its rows come out 0 (a reset clears no memory, so the
    chip would otherwise read what the program before left there)."""

    op = Transpose
    dense = maps = True
    streams_input = True
    stores_blocks = False
    SLOTS = 4
    MIN_TILES = 8               # a streamed transpose's tiles, where it has the blocks

    def max_rows(self, cfg: ChipConfig) -> int:
        return cfg.cbuf_depth       # no accumulator pass: any M that fits the CBUF

    def macs(self, graph: Graph, node: Node) -> int:
        return 0

    @staticmethod
    def pieces(cfg: ChipConfig, shape: tuple[int, ...], op: Transpose) -> permute.PermPlan:
        """What the array moves for `op` on an input of `shape`."""
        return permute.plan_pieces(tuple(shape), op.axes(len(shape)), cfg.rows, DMA_STRIDE_MAX)

    def tiles_used(self, cfg: ChipConfig, graph: Graph, node: Node) -> tuple[int, int]:
        """A transpose's identity rows reach the tile rows of the input's widest
        K-block, the transposed block's columns the tile columns of its rows; a copy's
        rows the tile rows of their K-block, the identity's columns as many. An int32
        tensor's are counted in bytes (four per element)."""
        p = self.pieces(cfg, graph.tensor(node.inputs[0]).shape, node.op)
        n = cfg.tile_size
        if graph.tensor(node.inputs[0]).dtype == "int32":
            # the selection block (a copy's words) reaches the partitions of a word's
            # bytes, an output word (a copied word) the columns of its bytes, the
            # planes the tile rows of a block's input rows
            if p.mode == "transpose":
                return (max(layout.blocks(min(cfg.rows, 4 * p.L), n),
                            layout.blocks(min(cfg.rows, cfg.cols, p.Q), n)),
                        layout.blocks(min(cfg.cols, 4 * p.Q), n))
            return (layout.blocks(min(cfg.rows, 4 * p.L), n),
                    layout.blocks(min(cfg.cols, 4 * p.L), n))
        cols = p.Q if p.mode == "transpose" else p.L
        return (layout.blocks(min(cfg.rows, p.L), cfg.tile_size),
                layout.blocks(min(cfg.cols, cols), cfg.tile_size))

    def params(self, cfg: ChipConfig, graph: Graph, node: Node
               ) -> list[tuple[str, np.ndarray]]:
        if graph.tensor(node.inputs[0]).dtype == "int32":
            return int32_params(cfg)
        return [("identity", np.eye(cfg.rows, dtype=np.uint8))]

    def reads_past(self, cfg: ChipConfig, graph: Graph, node: Node, tensor: str) -> int:
        """A 2-D int8 input read where it lies: the rows past its K-blocks that the
        west loads of its last K-block's last blocks read."""
        src = graph.tensor(tensor)
        if src.dtype == "int32" or self._streamed(graph, node):
            return 0
        p = self.pieces(cfg, src.shape, node.op)
        if p.mode != "transpose":
            return 0
        R = cfg.rows
        return max(0, max(mb * R + reach(cfg, min(R, p.Q - mb * R))
                          for mb in range(layout.blocks(p.Q, R))) - p.in_rows)

    @staticmethod
    def _streamed(graph: Graph, node: Node) -> bool:
        t = node.inputs[0]
        if t in through_dram(graph):
            return True         # N-D or int32, made on chip: its producer stores it
        if graph.producer(t) is not None:
            return False        # 2-D int8 made on chip: read where it lies
        others = [n.name for n in graph.consumers(t) if not isinstance(n.op, Transpose)]
        if others:
            raise CompileError(f"layer {node.name!r}: graph input {t!r} is transposed from "
                               f"DRAM, so it cannot also be read on chip by "
                               f"{', '.join(map(repr, others))}; give those layers their "
                               f"own copy of the input")
        return True

    def needs(self, cfg: ChipConfig, graph: Graph, node: Node, rows: int,
              split: int = 1) -> list[Need]:
        R = cfg.rows
        halves = Need("acc", "accumulator halves", 2 * acc_half_rows(cfg),
                      "accumulator halves", shared=True)
        if graph.tensor(node.inputs[0]).dtype == "int32":
            self._streamed(graph, node)
            G = int32_group(cfg, acc_half_rows(cfg))
            # the identity, the selection block and 4 input slots (the last one's
            # west load reading weight_rows); the interleaving blocks (read by the
            # weight loader); the planes (by the feeder); the output staging (by the
            # DMA's stores): banks of their own
            return [halves,
                    Need("cbuf", "int32 transpose tables", 5 * R + cfg.weight_rows,
                         "int32 transpose identity, selection and input slots", shared=True),
                    Need("cbuf", "int32 transpose interleave",
                         4 * int32_words(cfg)[3] * cfg.weight_rows,
                         "int32 transpose interleaving blocks", shared=True),
                    Need("cbuf", f"{node.name}.planes", 8 * G * R,
                         f"byte planes of {node.name!r}"),
                    Need("cbuf", f"{node.name}.staging", 2 * G * R,
                         f"output staging of {node.name!r}")]
        needs = [Need("cbuf", "transpose identity", R + past_block(cfg, R),
                      "transpose identity", shared=True), halves]
        streamed = self._streamed(graph, node)
        tile = self.tile(cfg, self.pieces(cfg, graph.tensor(node.inputs[0]).shape, node.op),
                         streamed)
        if streamed:
            needs.append(Need("cbuf", "transpose ring", self.ring_rows(cfg, tile),
                              "transpose ring", shared=True))
        if not on_chip_readers(graph, node.outputs[0]):
            needs.append(Need("cbuf", f"{node.name}.staging",
                              self.staging_rows(cfg, tile),
                              f"output staging of {node.name!r}"))
        return needs

    #: CBUF rows a transpose's input tiles (and as many its output tiles) may take, at
    #: most: a bank, or a sixteenth of the CBUF if that is more
    @staticmethod
    def tile_budget(cfg: ChipConfig) -> int:
        return max(cfg.cbuf_bank_rows, cfg.cbuf_depth // 16)

    @classmethod
    def tile(cls, cfg: ChipConfig, p: permute.PermPlan, streamed: bool,
             budget: int | None = None) -> tuple[int, int]:
        """``(GQ, GL)``: a streamed transpose moves its ``[Q, L]`` matrices in tiles of
        ``GQ x GL`` blocks, each loaded by ``GL`` DMAs (one per K-block: the ``GQ``
        blocks' rows are evenly spaced in DRAM) into one of two input tile buffers and
        stored by ``GQ`` DMAs (one per output K-block) from one of two output tile
        buffers; two tiles of ``R`` rows per block each way fit in `budget` rows
        (default :meth:`tile_budget`), and there are at least :attr:`MIN_TILES` tiles
        where the blocks allow (one tile would leave nothing to overlap its loads
        with). ``(1, 1)``: block by block (a copy, an input read on chip, or no
        room)."""
        if p.mode != "transpose" or not streamed:
            return 1, 1
        R = cfg.rows
        cap = max(1, (cls.tile_budget(cfg) if budget is None else budget) // (2 * R))
        nq, nl = layout.blocks(p.Q, R), layout.blocks(p.L, R)
        # at least MIN_TILES tiles: the DMA loads one while the array transposes another
        cap = max(1, min(cap, nq * nl * len(p.bases) // cls.MIN_TILES))
        gq = min(nq, math.isqrt(cap))
        return gq, min(nl, cap // gq)

    def ring_rows(self, cfg: ChipConfig, tile: tuple[int, int]) -> int:
        """The input slots, and the rows the last one's west loads read past it."""
        return max(self.SLOTS, 2 * tile[0] * tile[1]) * cfg.rows + past_block(cfg, cfg.rows)

    @staticmethod
    def staging_rows(cfg: ChipConfig, tile: tuple[int, int]) -> int:
        return 2 * tile[0] * tile[1] * cfg.rows

    def emit(self, em: Emitter, index: int, node: Node) -> list[Block]:
        cfg, graph, plan = em.cfg, em.graph, em.plan
        src_t, out_t = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
        if src_t.dtype == "int32":
            tables = plan.scratch("cbuf", "int32 transpose tables").lo
            where32 = Where32(
                ident=tables, ident_dram=plan.param(node.name, "identity").lo,
                select=tables + cfg.rows, select_dram=plan.param(node.name, "select").lo,
                inter=plan.scratch("cbuf", "int32 transpose interleave").lo,
                inter_dram=plan.param(node.name, "interleave").lo,
                slots=tables + 2 * cfg.rows,
                planes=plan.scratch("cbuf", f"{node.name}.planes").lo,
                staging=plan.scratch("cbuf", f"{node.name}.staging").lo,
                halves=plan.scratch("acc", "accumulator halves").lo,
                half_rows=acc_half_rows(cfg), a_dram=plan.tensor("dram", src_t.name).lo,
                stored=stored_at(plan, out_t.name),
                group=int32_group(cfg, acc_half_rows(cfg)))
            return int32_blocks(cfg, em, index, node.name,
                                     self.pieces(cfg, src_t.shape, node.op), where32,
                                     transpose_ops(em))
        where = Where(ident=plan.scratch("cbuf", "transpose identity").lo,
                      ident_dram=plan.param(node.name, "identity").lo,
                      halves=plan.scratch("acc", "accumulator halves").lo,
                      half_rows=acc_half_rows(cfg))
        if self._streamed(graph, node):
            where.a_dram = plan.tensor("dram", src_t.name).lo
            where.ring = plan.scratch("cbuf", "transpose ring").lo
        else:
            where.resident_in = plan.tensor("cbuf", src_t.name).lo
        if on_chip_readers(graph, out_t.name):
            where.resident = plan.tensor("cbuf", out_t.name).lo
        else:
            where.staging = plan.scratch("cbuf", f"{node.name}.staging").lo
        where.stored = stored_at(plan, out_t.name)
        p = self.pieces(cfg, src_t.shape, node.op)
        where.tile = self.tile(cfg, p, where.ring is not None)
        return self.blocks(cfg, em, index, node.name, src_t.name, p, where,
                           transpose_ops(em))

    def blocks(self, cfg: ChipConfig, em, index: int, name: str, src: str,
               p: permute.PermPlan, where: Where, op) -> list[Block]:
        """The layer's blocks: `em` counts weight steps and output blocks across layers
        (``steps``, ``blocks``), `where` says where things are, `op` makes a micro-op
        (``op(opcode, layer, sub=0, **fields)``) with its routing."""
        R, C = cfg.rows, cfg.cols
        for what, stride in (("input", p.sq), ("output", p.sl)):
            if stride > DMA_STRIDE_MAX:
                raise CompileError(
                    f"layer {name!r}: the permutation's {what} rows are {stride} words "
                    f"apart in DRAM, more than a DMA's stride field takes ({DMA_STRIDE_MAX}); "
                    f"split the tensor along its outer axes")
        w = where
        blocks: list[Block] = []

        def first_loads() -> list[MicroOp]:
            # a step's load, not the block's bias: the pipeliner hoists a bias into the
            # layer before unchecked, where the identity's rows may still be another
            # region's (its lifetime is this layer's)
            if blocks:
                return []
            return [op(Opcode.DMA, index, kind=DmaKind.LOAD_CBUF, dram_addr=w.ident_dram,
                       dram_stride=1, buf_addr=w.ident, rows=R)]

        def check_end(w_addr: int, what: str) -> None:
            WR = cfg.weight_rows        # (C on a wide grid: past the block's R rows)
            if w_addr + WR > cfg.cbuf_depth:
                raise CompileError(
                    f"layer {name!r}: the last block of {what} ends "
                    f"{w_addr + WR - cfg.cbuf_depth} rows from the CBUF's end, but a "
                    f"weight load reads {WR} rows; use a chip with a larger CBUF")

        if p.mode == "transpose":
            nq, nl = layout.blocks(p.Q, R), layout.blocks(p.L, R)
            gq, gl = w.tile
            tiled = (gq, gl) != (1, 1)
            n_tiles = 0
            for in0, out0 in p.bases:
                for mb0 in range(0, nq, gq):
                    for kb0 in range(0, nl, gl):
                        # a tile of blocks (mb0.., kb0..): its input buffer holds block
                        # (mb, kb) at slot (kb-kb0)*gq + mb-mb0, its output buffer at
                        # (mb-mb0)*gl + kb-kb0; one DMA per K-block loads a column of
                        # it, one per output K-block stores a row
                        t_in = w.ring + (n_tiles % 2) * gq * gl * R if tiled else None
                        t_out = (w.staging + (n_tiles % 2) * gq * gl * R
                                 if tiled and w.staging is not None else None)
                        n_tiles += 1
                        mbs = range(mb0, min(nq, mb0 + gq))
                        kbs = range(kb0, min(nl, kb0 + gl))
                        tile_loads = []
                        if tiled:
                            q_rows = min(gq * R, p.Q - mb0 * R)
                            for kb in kbs:
                                tile_loads += [op(
                                    Opcode.DMA, index, kind=DmaKind.LOAD_CBUF,
                                    dram_addr=w.a_dram + kb * p.in_rows + in0
                                    + mb0 * R * p.sq, dram_stride=p.sq,
                                    buf_addr=t_in + (kb - kb0) * gq * R + c * q_rows,
                                    rows=q_rows) for c in range(w.copies)]
                        for mb in mbs:
                            self._block_row(cfg, em, index, src, p, w, op, blocks,
                                            first_loads, check_end, in0, out0, mb,
                                            kbs, tile_loads, t_in, t_out, (gq, gl))
                            tile_loads = []
            return blocks

        # a copy: the identity (sub-block s: from its row s*C) is the weights, the rows
        # stream through it; a bank keeps the sub-block it holds
        holds: dict[int, int] = {}
        out_blocks = 0
        for o0, i0, stride, count in p.runs:
            for kb in range(layout.blocks(p.L, R)):
                subs = layout.blocks(min(R, p.L - kb * R), C)
                slot = out_blocks % 2
                out_blocks += 1
                if w.ring is not None:
                    a_base = w.ring + (em.steps % self.SLOTS) * R
                else:
                    a_base = w.resident_in + kb * p.in_rows + i0
                dst = (w.resident + kb * p.out_rows + o0 if w.resident is not None
                       else w.staging + slot * R)
                for sub in range(subs):
                    blk = Block(index)
                    acc_at = w.acc_slot(cfg, em.blocks)
                    em.blocks += 1
                    bank = sub % 2 if subs == 2 else (em.steps + sub) % 2
                    loads = first_loads()
                    if w.ring is not None and sub == 0:
                        loads.append(op(Opcode.DMA, index, kind=DmaKind.LOAD_CBUF,
                                        dram_addr=w.a_dram + kb * p.in_rows + i0,
                                        dram_stride=stride, buf_addr=a_base, rows=count))
                    if holds.get(bank) != sub:
                        check_end(w.ident + sub * C, "the identity")
                        loads.append(op(Opcode.WLOAD, index, w_addr=w.ident + sub * C,
                                        bank=bank))
                        holds[bank] = sub
                    em.steps += 1 if sub == subs - 1 else 0
                    mm = op(Opcode.MATMUL, index, act_addr=a_base, rows=count,
                            acc_addr=acc_at, accumulate=0, bank=bank)
                    blk.steps.append(Step(loads, mm))
                    blk.epilogue.append(op(Opcode.VRUN, index, sub=sub, src=acc_at,
                                           rows=count, dst=dst, to_acc=0))
                    if w.stored is not None and sub == subs - 1:
                        blk.epilogue.append(op(Opcode.DMA, index, kind=DmaKind.STORE_CBUF,
                                               dram_addr=w.stored + kb * p.out_rows + o0,
                                               dram_stride=1, buf_addr=dst, rows=count))
                    blocks.append(blk)
        return blocks

    def _block_row(self, cfg, em, index, src, p, w, op, blocks, first_loads, check_end,
                   in0: int, out0: int, mb: int, kbs: range, tile_loads: list[MicroOp],
                   t_in: int | None, t_out: int | None, tile: tuple[int, int]) -> None:
        """Blocks ``(mb, kb)`` for `kbs` of one batch of a transpose: block by block
        (`t_in` None: its own ring slot and DMAs) or in a tile (`tile_loads`, the
        tile's input DMAs, go with its first step; the row's blocks are stored by one
        DMA when the output is staged in `t_out`)."""
        R, C, k = cfg.rows, cfg.cols, cfg.sub_blocks
        gq, gl = tile
        mb0, kb0 = mb - mb % gq, kbs[0]
        got = min(R, p.Q - mb * R)           # block rows: output columns
        rows = got * w.copies
        for kb in kbs:
            cols = min(R, p.L - kb * R)      # block columns: output rows
            # the block's rows in sub-blocks of C: a west load fills the array's C
            # columns (one sub-block on a square array)
            subs = layout.blocks(rows, C)
            slot = (em.blocks // subs) % 2 if k > 1 else em.blocks % 2
            if t_in is not None:
                w_base = t_in + ((kb - kb0) * gq + mb - mb0) * R
            elif w.ring is not None:
                w_base = w.ring + (em.steps % self.SLOTS) * R
            else:
                w_base = w.resident_in + kb * p.in_rows + in0 + mb * R
            if w.resident is not None:
                dst = w.resident + mb * p.out_rows + out0 + kb * R
            elif t_out is not None:
                dst = t_out + ((mb - mb0) * gl + kb - kb0) * R
            else:
                dst = w.staging + slot * R
            for sub in range(subs):
                blk = Block(index)
                acc_at = w.acc_slot(cfg, em.blocks)
                em.blocks += 1
                bank = (em.steps + sub) % 2
                loads = first_loads()
                if t_in is not None:
                    loads += tile_loads
                    tile_loads = []
                elif w.ring is not None and sub == 0:
                    loads += [op(Opcode.DMA, index, kind=DmaKind.LOAD_CBUF,
                                 dram_addr=w.a_dram + kb * p.in_rows + in0
                                 + mb * R * p.sq, dram_stride=p.sq,
                                 buf_addr=w_base + c * got, rows=got)
                              for c in range(w.copies)]
                w_addr = w_base + sub * C
                check_end(w_addr, repr(src))
                em.steps += 1 if sub == subs - 1 else 0
                loads.append(op(Opcode.WLOAD, index, w_addr=w_addr, bank=bank))
                mm = op(Opcode.MATMUL, index, act_addr=w.ident, rows=cols,
                        acc_addr=acc_at, accumulate=0, bank=bank)
                blk.steps.append(Step(loads, mm))
                blk.epilogue.append(op(Opcode.VRUN, index, sub=sub, src=acc_at,
                                       rows=cols, dst=dst, to_acc=0))
                if w.stored is not None and sub == subs - 1:
                    if t_out is None:
                        blk.epilogue.append(op(
                            Opcode.DMA, index, kind=DmaKind.STORE_CBUF,
                            dram_addr=w.stored + mb * p.out_rows + out0 + kb * R * p.sl,
                            dram_stride=p.sl, buf_addr=dst, rows=cols))
                    elif kb == kbs[-1]:
                        blk.epilogue.append(op(
                            Opcode.DMA, index, kind=DmaKind.STORE_CBUF,
                            dram_addr=w.stored + mb * p.out_rows + out0 + kb0 * R * p.sl,
                            dram_stride=p.sl, buf_addr=t_out + (mb - mb0) * gl * R,
                            rows=min(len(kbs) * R, p.L - kb0 * R)))
                blocks.append(blk)

    # -- int32 (docs/contract.md, "Transposes"): bytes through the array -----------------

    # -- the map lowering: DRAM to DRAM -------------------------------------------------
    def map_job(self, inputs: MapInputs, index: int, node: Node) -> None:
        if node.inputs[0] in inputs.alias:
            raise CompileError(f"layer {node.name!r} transposes the output of a "
                               f"Flatten, a view the chip never stores; transpose "
                               f"the map before flattening it")
        return None

    def prefers_maps(self, cfg: ChipConfig, graph: Graph, node: Node) -> bool:
        """A transpose of a tensor a layer makes of rank other than 2, or int32: the
        dense lowering keeps such tensors nowhere."""
        t = node.inputs[0]
        return graph.producer(t) is not None and (
            len(graph.tensor(t).shape) != 2 or graph.tensor(t).dtype == "int32")

    def writes_replicated(self, cfg: ChipConfig, graph: Graph, node: Node) -> bool:
        return self.pieces(cfg, graph.tensor(node.inputs[0]).shape, node.op).mode == \
            "transpose"

    def map_params(self, cfg: ChipConfig, graph: Graph, node: Node
                   ) -> list[tuple[str, np.ndarray]]:
        return self.params(cfg, graph, node)

    def map_emit(self, loop: TileLoop, inputs: MapInputs, index: int, node: Node,
                 dram: Mapping[str, int], params: Mapping[str, int]
                 ) -> tuple[list[Block], list[Region]]:
        """From its input in DRAM to its output in DRAM (docs/contract.md,
        "Transposes"), as in the dense lowering, in the areas of
        :func:`transpose_areas`; an output read only by convolutions with few channels
        in the replicated layout (each block's rows loaded that many times)."""
        cfg, graph = inputs.cfg, inputs.graph
        lay = loop.base
        where, ident_dram = dram, params
        copies = inputs.copies.get(node.outputs[0], 1)
        src = graph.tensor(node.inputs[0])
        em = loop.em
        op = transpose_ops(em)
        rule = TransposeRule()
        if src.dtype == "int32":
            R = cfg.rows
            first = bank_up(cfg, lay.staging)
            planes = bank_up(cfg, first + 5 * R + cfg.weight_rows)
            # the blocks sharing an interleaving load (TransposeRule.int32_group): fewer
            # if their two sets of planes and staging do not fit the CBUF
            for group in range(int32_group(cfg, lay.half_rows), 0, -1):
                staging = bank_up(cfg, planes + 8 * group * R)
                if staging + 2 * group * R <= lay.top:
                    break
            else:
                group = 0
            if not group:
                raise CompileError(f"layer {node.name!r}: CBUF too small for an int32 "
                                   f"transpose's planes")
            ring_rows = lay.staging - lay.ring
            blocks = 4 * int32_words(cfg)[3]
            if blocks * cfg.weight_rows > ring_rows:
                raise CompileError(f"layer {node.name!r}: the weight ring's {ring_rows} rows "
                                   f"cannot hold an int32 transpose's {blocks} interleaving "
                                   f"blocks of {cfg.weight_rows} rows; use a chip with a "
                                   f"larger CBUF, or transpose the tensor outside a "
                                   f"convolutional network")
            at = Where32(ident=first, ident_dram=ident_dram["identity"], select=first + R,
                         select_dram=ident_dram["select"], inter=lay.ring,
                         inter_dram=ident_dram["interleave"], slots=first + 2 * R,
                         planes=planes, staging=staging, halves=lay.halves,
                         half_rows=lay.half_rows, a_dram=where[src.name],
                         stored=where[node.outputs[0]], group=group)
            blocks = int32_blocks(cfg, em, index, node.name,
                                       rule.pieces(cfg, src.shape, node.op), at, op)
            loop.bank_holds = [None, None]
            return blocks, transpose_regions(cfg, lay, index, node.name)
        pieces = rule.pieces(cfg, src.shape, node.op)
        ident, slots, staging, tile = transpose_areas(cfg, lay, pieces)
        if staging + rule.staging_rows(cfg, tile) > lay.top:
            raise CompileError(f"layer {node.name!r}: CBUF too small for a transpose's slots")
        at = Where(ident=ident, ident_dram=ident_dram["identity"], halves=lay.halves,
                   half_rows=lay.half_rows, a_dram=where[src.name], ring=slots,
                   staging=staging, stored=where[node.outputs[0]], copies=copies, tile=tile)
        blocks = rule.blocks(cfg, em, index, node.name, src.name, pieces, at, op)
        loop.bank_holds = [None, None]      # its WLOADs leave the banks holding no weights
        return blocks, transpose_regions(cfg, lay, index, node.name)


@dataclass
class Where:
    """Where a transpose finds and puts things: the identity (CBUF, DRAM), the
    accumulator halves; its input streamed from DRAM (``a_dram``) through ``ring`` or
    on chip at ``resident_in``; its output on chip at ``resident`` or in ``staging``
    slots, and stored at ``stored`` (a graph output)."""
    ident: int
    ident_dram: int
    halves: int
    half_rows: int
    a_dram: int | None = None
    ring: int | None = None
    resident_in: int | None = None
    resident: int | None = None
    staging: int | None = None
    stored: int | None = None
    tile: tuple[int, int] = (1, 1)  # (GQ, GL): blocks per tile (TransposeRule.tile)
    copies: int = 1         # > 1: each block's rows loaded that many times, one after
                            # the other (the output's words hold them replicated:
                            # docs/cnn.md, replicated channels); Q * copies <= R

    acc_slot = acc_ring_slot


def reach(cfg: ChipConfig, rows: int) -> int:
    """CBUF rows from a block's first that its west loads read, for a block of `rows`
    rows: one load per sub-block of ``C`` rows (one on a square or wide grid), each
    of ``weight_rows`` rows (``C`` on a wide grid)."""
    return (layout.blocks(rows, cfg.cols) - 1) * cfg.cols + cfg.weight_rows


def past_block(cfg: ChipConfig, rows: int) -> int:
    """Rows past a block of `rows` rows that its west loads read."""
    return max(0, reach(cfg, rows) - rows)


def transpose_ops(em: Emitter):
    """A transpose's micro-op maker: the emitter's, its WLOADs taking every tile's
    weights from the west lane unless told not to (an int32 transpose's interleaving
    weights)."""
    def op(opcode: Opcode, layer: int, sub=0, west: bool = True, **fields) -> MicroOp:
        return em.op(opcode, layer, sub, west=west, **fields)
    return op


def transpose_areas(cfg: ChipConfig, lay: Layout, p=None
                     ) -> tuple[int, int, int, tuple[int, int]]:
    """A transpose layer's CBUF rows in the network's layout: the identity where the
    weight ring is, the input slots where the staging starts, the output staging in
    the next bank (each read by a different unit); and its tile
    (``TransposeRule.tile``, of the pieces `p`: the largest whose two buffers fit)."""
    rule, slots = TransposeRule(), lay.staging
    tile = (1, 1)
    if p is not None:
        budget = rule.tile_budget(cfg)
        while True:
            tile = rule.tile(cfg, p, True, budget)
            staging = bank_up(cfg, slots + rule.ring_rows(cfg, tile))
            if tile == (1, 1) or staging + rule.staging_rows(cfg, tile) <= lay.top:
                break
            budget //= 2
    staging = bank_up(cfg, slots + rule.ring_rows(cfg, tile))
    return lay.ring, slots, staging, tile


def transpose_regions(cfg: ChipConfig, lay: Layout, index: int, name: str) -> list[Region]:
    ident, slots, staging, _ = transpose_areas(cfg, lay)
    return [Region("cbuf", "weight ring", lay.ring, lay.staging - lay.ring, index, index,
                   f"identity of layer {name!r}"),
            Region("cbuf", f"{name}.staging and tiles", lay.staging,
                   lay.top - lay.staging, index, index,
                   f"input slots and output staging of layer {name!r}")]
