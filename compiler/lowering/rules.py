"""Per-op lowering rules, one per op type, looked up in ``RULES`` by the op's type.

A rule says what a layer asks of the memory planner (``max_rows``, ``params``,
``needs``) and, in ``emit`` (its entry point), what micro-ops it becomes, as the
loop nest the pipeliner takes (``pipeline.Block``). Every micro-op states in
``MicroOp.needs`` the multiplexer settings it relies on, so a program's
configuration updates (``reconfigure``) follow from the rules.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from systolica.arch import fabric, timing
from systolica.arch.config import ChipConfig
from systolica.arch.isa import DmaKind, Opcode
from systolica.compiler.planning import lanes
from systolica.compiler.planning import layout
from systolica.compiler.planning import permute
from systolica.compiler.planning import split
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.graph import Graph, Node
from systolica.compiler.microops.ir import MicroOp, make
from systolica.compiler.graph.ops import Concat, Dense, MatMulT, Transpose
from systolica.compiler.scheduling.pipeline import Block, Step
from systolica.compiler.planning.split import packed_cols

if TYPE_CHECKING:
    from systolica.compiler.planning.memory import MemoryPlan

WEIGHT_SLOTS = 4  # CBUF weight blocks in flight: DMA, WLOAD and two of slack


@dataclass(frozen=True)
class Need:
    """A scratch region a layer works in. Layers asking for the same ``shared`` key
    share one region, live from the first of them to the last."""
    memory: str       # "cbuf" or "acc"
    key: str
    size: int         # rows
    what: str         # how messages call it
    shared: bool = False


def acc_half_rows(cfg: ChipConfig) -> int:
    """Mt: rows of one accumulator half (two halves plus two bias rows fill ACC)."""
    return (cfg.acc_depth - 2) // 2


#: int32 transposes: blocks whose output words share each interleaving weight load
INT32_GROUP = 4


def through_dram(graph: Graph) -> frozenset[str]:
    """Tensors made on chip that a transpose reads from DRAM in the GEMM lowering: of
    rank other than 2 (their rows are strided in DRAM) or int32 (moved DRAM to DRAM).
    Their producer stores them; only transposes read them."""
    return frozenset(
        n.inputs[0] for n in graph.nodes
        if isinstance(n.op, Transpose) and graph.producer(n.inputs[0]) is not None
        and (len(graph.tensor(n.inputs[0]).shape) != 2
             or graph.tensor(n.inputs[0]).dtype == "int32"))


def stored_at(plan, t: str) -> int | None:
    """The DRAM address a layer stores its output `t` at: a graph output or a tensor
    read through DRAM (:func:`through_dram`); None: kept on chip only."""
    graph = plan.graph
    if t in graph.outputs or t in through_dram(graph):
        return plan.tensor("dram", t).lo
    return None


def on_chip_readers(graph: Graph, t: str) -> list[Node]:
    """The layers that read `t` on chip (not through DRAM)."""
    return [] if t in through_dram(graph) else graph.consumers(t)


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


@dataclass
class Emitter:
    """What the rules share while a graph is lowered: the plan, the counters that
    keep the weight ring, weight banks and accumulator halves alternating across
    layers (so one layer's first loads overlap the previous layer's last compute),
    and the tile rows and columns any layer uses: the others are fed zeros for the
    whole program, so the routing never changes between layers."""
    cfg: ChipConfig
    graph: Graph
    plan: "MemoryPlan"
    steps: int = 0          # weight blocks so far: ring slot and bank
    blocks: int = 0         # output blocks so far: accumulator half
    tile_rows: int = 0
    tile_cols: int = 0
    passes: dict = field(default_factory=dict)   # layer -> [(first row, rows)] of its
                                                 # passes, for a layer read in passes

    def __post_init__(self):
        # a layer split into tile groups reaches every tile (its blocks are R x C)
        used = [(self.cfg.tile_rows, self.cfg.tile_cols) if self.plan.split(n.name) > 1
                else rule_for(n).tiles_used(self.cfg, self.graph, n) for n in self.graph.nodes]
        self.tile_rows = max(r for r, _ in used)
        self.tile_cols = max(c for _, c in used)


class DenseRule:
    """A dense layer as output blocks (per M-chunk, per N-block of ``C`` columns),
    each a sum over K-blocks of ``R`` rows, the K-blocks of all its inputs in order.
    Per K-block a weight block is DMA'd into the weight ring, WLOADed into bank
    ``step % 2`` and streamed against the activations' K-block by one MATMUL into an
    accumulator half (halves alternate per block). The vector unit then adds the bias,
    requantises and writes the block to its tensor in CBUF (read by later layers),
    to the output staging, or (int32) back to ACC, and a DMA stores graph outputs."""

    op = Dense

    def max_rows(self, cfg: ChipConfig) -> int:
        return acc_half_rows(cfg)

    @staticmethod
    def _op(em: Emitter, op: Opcode, layer: int, sub: int = 0, **fields) -> MicroOp:
        """A checked micro-op with the routing it relies on (``gemm_routing``; a VRUN
        writes sub-block `sub` of its block)."""
        mop = make(em.cfg, op, layer, **fields)
        mop.needs = gemm_routing(em.cfg, op, to_acc=bool(fields.get("to_acc")),
                                 tile_rows=em.tile_rows, tile_cols=em.tile_cols, sub=sub)
        return mop

    def macs(self, graph: Graph, node: Node) -> int:
        return graph.tensor(node.outputs[0]).shape[0] * node.op.K * node.op.N

    def tiles_used(self, cfg: ChipConfig, graph: Graph, node: Node) -> tuple[int, int]:
        """Tile rows and columns its blocks reach: the widest K-block of any input,
        the widest N-block."""
        n = cfg.tile_size
        k = max(min(cfg.rows, w) for w in self._widths(graph, node))
        return layout.blocks(k, n), layout.blocks(min(cfg.cols, node.op.N), n)

    def _widths(self, graph: Graph, node: Node) -> list[int]:
        return [graph.tensor(t).shape[1] for t in node.inputs]

    def _weight_keys(self, node: Node) -> list[str]:
        return ["weights"] if len(node.inputs) == 1 else \
            [f"weights[{i}]" for i in range(len(node.inputs))]

    def params(self, cfg: ChipConfig, graph: Graph, node: Node
               ) -> list[tuple[str, np.ndarray]]:
        """Weights in the DRAM weight layout (one image per input: its rows of the
        weights), then the bias."""
        layer: Dense = node.op
        out, k0 = [], 0
        for key, k in zip(self._weight_keys(node), self._widths(graph, node)):
            out.append((key, layout.pack_weights(cfg, layer.weights[k0:k0 + k])))
            k0 += k
        if layer.bias is not None:
            out.append(("bias", layout.pack_bias(cfg, layer.bias)))
        return out

    def input_rows(self, cfg: ChipConfig, graph: Graph, node: Node, tensor: str, rows: int,
                   M: int) -> int:
        """CBUF rows per K-block of a graph input this layer loads, for `rows` rows per
        pass of `M`: two buffers when it takes several passes of one K-block, so one
        pass's rows load while the previous pass's stream through the array. (With
        several K-blocks, K-block ``kb`` of the next pass loads once the MATMUL of
        ``kb`` has read its rows, while the others run.)"""
        return 2 * rows if M > rows and self.one_block(cfg, graph, node) else rows

    def one_block(self, cfg: ChipConfig, graph: Graph, node: Node) -> bool:
        """Whether the layer's inputs are one K-block in all."""
        return sum(layout.blocks(w, cfg.rows) for w in self._widths(graph, node)) == 1

    def needs(self, cfg: ChipConfig, graph: Graph, node: Node, rows: int,
              split: int = 1) -> list[Need]:
        Mt = acc_half_rows(cfg)
        needs = [Need("cbuf", "weight ring", WEIGHT_SLOTS * cfg.weight_rows, "weight ring",
                      shared=True),
                 Need("acc", "accumulator halves", 2 * Mt, "accumulator halves",
                      shared=True),
                 Need("acc", "bias slots", 2, "bias slots", shared=True)]
        out = graph.tensor(node.outputs[0])
        if out.dtype == "int8" and not graph.consumers(out.name):
            # a split layer's output is packed its groups' columns wide (split.py)
            N = packed_cols(cfg, split) if split > 1 else out.shape[1]
            needs.append(Need("cbuf", f"{node.name}.staging",
                              2 * layout.staged_slices(cfg, N) * rows,
                              f"output staging of {node.name!r}"))
        return needs

    def emit(self, em: Emitter, index: int, node: Node) -> list[Block]:
        cfg, graph, plan = em.cfg, em.graph, em.plan
        op = partial(self._op, em)
        layer: Dense = node.op
        R, C, arw, Mt = cfg.rows, cfg.cols, cfg.acc_row_words, acc_half_rows(cfg)
        WR = cfg.weight_rows
        out = graph.tensor(node.outputs[0])
        # split into s tile groups: ceil(M/s) rows of the packed layer (split.py)
        M, Mc = split.rows(out.shape[0], plan.split(node.name)), plan.rows[node.name]
        ring = plan.scratch("cbuf", "weight ring").lo
        halves = plan.scratch("acc", "accumulator halves").lo
        bias_slots = plan.scratch("acc", "bias slots").lo
        bias_dram = plan.param(node.name, "bias").lo if layer.bias is not None else None
        # per input: K-blocks, CBUF base, weights in DRAM, DRAM base if it loads it
        inputs, loaded = [], set()
        for t, key in zip(node.inputs, self._weight_keys(node)):
            tensor = graph.tensor(t)
            loads = (graph.producer(t) is None and graph.consumers(t)[0] is node
                     and t not in loaded)
            loaded.add(t)
            inputs.append((layout.blocks(tensor.shape[1], R), plan.tensor("cbuf", t).lo,
                           plan.param(node.name, key).lo,
                           plan.tensor("dram", t).lo if loads else None))
        resident = (plan.tensor("cbuf", out.name).lo if on_chip_readers(graph, out.name)
                    else None)
        stored = stored_at(plan, out.name)
        staging = (plan.scratch("cbuf", f"{node.name}.staging").lo
                   if out.dtype == "int8" and resident is None else None)

        # a graph input loaded pass by pass alternates between two buffers (input_rows);
        # the passes are of equal size (none a few rows long, paying a pass's overhead).
        # In a network of dense layers every tensor is on chip whole (blocks of
        # `stride` = M rows) and the layer goes in passes of plan.passes' rows at their
        # own rows (docs/compiler.md, "Passes in a network of dense layers").
        whole = node.name in plan.passes
        stride, Mc = Mc, plan.passes.get(node.name, Mc)
        buffers = 2 if M > Mc and self.one_block(cfg, graph, node) and not whole else 1
        Mc = -(-M // -(-M // Mc))
        n_blocks = layout.blocks(layer.N, C)
        # a wide grid's split chain hands its inner outputs on packed into R columns
        packed = plan.split(node.name) if split.packs_inner(cfg) and resident is not None \
            else 1
        # one weight block for the whole layer stays in its bank for every pass
        stationary = n_blocks == 1 and sum(i[0] for i in inputs) == 1
        bias_in: dict[int, int] = {}    # bias slot -> the N-block whose bias it holds
        blocks: list[Block] = []
        em.passes[index] = [(m0, min(Mc, M - m0)) for m0 in range(0, M, Mc)]
        for m0 in range(0, M, Mc):
            rows = min(Mc, M - m0)
            held = (m0 // Mc) % buffers
            for nb in range(n_blocks):
                blk = Block(index, m0=m0)
                half = em.blocks % 2
                em.blocks += 1
                acc_at, bias_at = halves + half * Mt, bias_slots + half
                if bias_dram is not None and bias_in.get(half) != nb:
                    bias_in[half] = nb
                    blk.bias.append(op(Opcode.DMA, index, kind=DmaKind.LOAD_ACC,
                                       dram_addr=bias_dram + nb * arw, dram_stride=arw,
                                       buf_addr=bias_at, rows=1))
                first = True
                for KB, src, w_dram, a_dram in inputs:
                    for kb in range(KB):
                        at = (src + kb * stride + m0 if whole else
                              src + ((held * KB if a_dram is not None else 0) + kb) * Mc)
                        if stationary and m0 > 0:
                            # the weights are in the bank since the first pass
                            loads = []
                            if a_dram is not None:
                                loads.append(op(Opcode.DMA, index, kind=DmaKind.LOAD_CBUF,
                                                dram_addr=a_dram + m0, dram_stride=1,
                                                buf_addr=at, rows=rows))
                            mm = op(Opcode.MATMUL, index, act_addr=at, rows=rows,
                                    acc_addr=acc_at, accumulate=0, bank=(em.steps - 1) % 2)
                            blk.steps.append(Step(loads, mm))
                            first = False
                            continue
                        # the (short) weight block first, so its WLOAD overlaps the
                        # activation load
                        slot = ring + (em.steps % WEIGHT_SLOTS) * WR
                        bank = em.steps % 2
                        loads = [op(Opcode.DMA, index, kind=DmaKind.LOAD_CBUF,
                                    dram_addr=w_dram + (nb * KB + kb) * WR, dram_stride=1,
                                    buf_addr=slot, rows=WR)]
                        if a_dram is not None and nb == 0:
                            loads.append(op(Opcode.DMA, index, kind=DmaKind.LOAD_CBUF,
                                            dram_addr=a_dram + kb * M + m0, dram_stride=1,
                                            buf_addr=at, rows=rows))
                        loads.append(op(Opcode.WLOAD, index, w_addr=slot, bank=bank))
                        mm = op(Opcode.MATMUL, index, act_addr=at,
                                rows=rows, acc_addr=acc_at, accumulate=int(not first),
                                bank=bank)
                        blk.steps.append(Step(loads, mm))
                        em.steps += 1
                        first = False
                blk.epilogue = self._epilogue(em, index, layer, out.dtype, nb, m0, rows, M,
                                              Mc, half, acc_at, bias_at, resident, stored,
                                              staging, n_blocks,
                                              split.packed_cols(cfg, plan.split(node.name))
                                              if plan.split(node.name) > 1 else layer.N,
                                              stride if whole else None, packed)
                blocks.append(blk)
        return blocks

    def _epilogue(self, em, index, layer, dtype, nb, m0, rows, M, Mc, half, acc_at,
                  bias_at, resident, stored, staging, n_blocks, N, stride=None,
                  packed=1) -> list[MicroOp]:
        """N-block `nb` (of `n_blocks`) of ``C`` columns: int8 into sub-block ``nb % k``
        of block ``nb // k`` of ``R`` columns (``k = R / C``; the activation layout a
        later layer reads), stored once the block's last sub-block is in; on a wide grid
        as slices of the output's `N` columns (the layer's, or a split layer's packed
        ``C``); int32 as accumulator rows."""
        arw, k = em.cfg.acc_row_words, em.cfg.sub_blocks
        op = partial(self._op, em)
        post = dict(src=acc_at, rows=rows, bias_addr=bias_at if layer.bias is not None
                    else 0, use_bias=int(layer.bias is not None), relu=int(layer.relu))
        if dtype == "int8":
            post.update(requant=1, mult=layer.mult, shift=layer.shift, zp=layer.zp & 0xFF)
            if not em.cfg.sides_divide:
                return self._pieces(em, index, post, nb, m0, rows, M, Mc, resident, stored,
                                    staging, N, stride)
            if em.cfg.wide and packed > 1:
                mop = make(em.cfg, Opcode.VRUN, index, to_acc=0, **post,
                           dst=resident + m0 if stride is not None else resident)
                mop.needs = packed_routing(em.cfg, packed)
                return [mop]
            if em.cfg.wide:
                return self._slices(em, index, post, nb, m0, rows, M, Mc, half, resident,
                                    stored, staging, N, stride)
            b, sub = divmod(nb, k)
            # the sub-blocks of one block share a staging half; successive blocks
            # alternate, across passes too (else a pass's VRUN waits for the store
            # of the pass before)
            slot = half if k == 1 else ((m0 // Mc) * -(-n_blocks // k) + b) % 2
            buf = (staging + slot * Mc if resident is None else
                   _resident_row(resident, b, m0, Mc, stride))
            ops = [op(Opcode.VRUN, index, sub=sub, to_acc=0, dst=buf, **post)]
            if stored is not None and (sub == k - 1 or nb == n_blocks - 1):
                ops.append(op(Opcode.DMA, index, kind=DmaKind.STORE_CBUF,
                              dram_addr=stored + b * M + m0, dram_stride=1,
                              buf_addr=buf, rows=rows))
            return ops
        ops = []
        if layer.bias is not None or layer.relu:
            # in place: each row is read before it is rewritten
            ops.append(op(Opcode.VRUN, index, to_acc=1, dst=acc_at, **post))
        ops.append(op(Opcode.DMA, index, kind=DmaKind.STORE_ACC,
                      dram_addr=stored + (nb * M + m0) * arw, dram_stride=arw,
                      buf_addr=acc_at, rows=rows))
        return ops

    def _pieces(self, em, index, post, nb, m0, rows, M, Mc, resident, stored, staging,
                N, stride) -> list[MicroOp]:
        """On a grid whose sides do not divide: N-block `nb` goes to the blocks of
        ``R`` columns it overlaps, one VRUN per piece (:func:`layout.pieces`), a
        block's later pieces keeping its earlier ones; a block is stored once whole.
        Staged blocks take slot ``(p * B + b) % (2 * staged_slices)`` in pass ``p`` of
        an output of ``B`` blocks: the blocks two N-blocks in flight overlap never share
        one."""
        op = partial(self._op, em)
        slots = 2 * layout.staged_slices(em.cfg, N)
        # blocks counted across passes, so a pass's first block is not in the slot its
        # pass before's is stored from
        passed = (m0 // Mc) * layout.blocks(N, em.cfg.rows)
        ops = []
        for pc in layout.pieces(em.cfg, nb, N):
            b = pc.block
            buf = (staging + ((passed + b) % slots) * Mc if resident is None else
                   _resident_row(resident, b, m0, Mc, stride))
            ops.append(op(Opcode.VRUN, index, sub=pc, to_acc=0, dst=buf, **post))
            if stored is not None and pc.last:
                ops.append(op(Opcode.DMA, index, kind=DmaKind.STORE_CBUF,
                              dram_addr=stored + b * M + m0, dram_stride=1,
                              buf_addr=buf, rows=rows))
        return ops

    def _slices(self, em, index, post, nb, m0, rows, M, Mc, half, resident, stored,
                staging, N, stride) -> list[MicroOp]:
        """On a wide grid: N-block `nb` is blocks ``nb*k ..`` of ``R`` columns
        (``k = C / R``, those of the layer's `N` columns), one VRUN each, slice ``s``
        taking ACC groups ``s*T ..``; the staging holds the N-block's ``k`` blocks per
        accumulator half (only as many as the layer's `N` fills: ``staged_slices``)."""
        k, R = em.cfg.slices, em.cfg.rows
        ks = layout.staged_slices(em.cfg, N)
        op = partial(self._op, em)
        ops = []
        for sub in range(min(k, layout.blocks(N, R) - nb * k)):
            b = nb * k + sub
            buf = (staging + (half * ks + sub) * Mc if resident is None else
                   _resident_row(resident, b, m0, Mc, stride))
            ops.append(op(Opcode.VRUN, index, sub=sub, to_acc=0, dst=buf, **post))
            if stored is not None:
                ops.append(op(Opcode.DMA, index, kind=DmaKind.STORE_CBUF,
                              dram_addr=stored + b * M + m0, dram_stride=1,
                              buf_addr=buf, rows=rows))
        return ops


def _resident_row(resident: int, b: int, m0: int, Mc: int, stride: int | None) -> int:
    """The CBUF row where block `b` of an output held on chip takes its pass at `m0`:
    blocks `stride` rows apart in a network of dense layers (the tensor whole), else
    one pass of `Mc` rows each."""
    return resident + b * stride + m0 if stride is not None else resident + b * Mc


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


class TransposeRule:
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
    layers). Partitions of a ragged block beyond its rows hold whatever the weight
    block's rows beyond the input held: never read as data (a dense layer multiplies
    them by zero weight rows, a store's reader drops them)."""

    op = Transpose
    streams_input = True        # a graph input it reads stays in DRAM (plan.py)
    SLOTS = 4
    MIN_TILES = 8               # a streamed transpose's tiles, where it has the blocks

    def max_rows(self, cfg: ChipConfig) -> int:
        return cfg.cbuf_depth       # no accumulator pass: any M that fits the CBUF

    def macs(self, graph: Graph, node: Node) -> int:
        return 0

    @staticmethod
    def pieces(cfg: ChipConfig, shape: tuple[int, ...], op: Transpose) -> permute.PermPlan:
        """What the array moves for `op` on an input of `shape`."""
        return permute.plan(tuple(shape), op.axes(len(shape)), cfg.rows, STRIDE_MAX)

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
            return self.int32_params(cfg)
        return [("identity", np.eye(cfg.rows, dtype=np.uint8))]

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

    @staticmethod
    def int32_group(cfg: ChipConfig, half_rows: int) -> int:
        """Blocks of an int32 transpose sharing each interleaving load: at most
        :data:`INT32_GROUP`, and per block five ``R``-row accumulator slots (its four
        plane words, an output word) in the two halves."""
        return max(1, min(INT32_GROUP, 2 * half_rows // (5 * cfg.rows)))

    def needs(self, cfg: ChipConfig, graph: Graph, node: Node, rows: int,
              split: int = 1) -> list[Need]:
        R = cfg.rows
        halves = Need("acc", "accumulator halves", 2 * acc_half_rows(cfg),
                      "accumulator halves", shared=True)
        if graph.tensor(node.inputs[0]).dtype == "int32":
            self._streamed(graph, node)
            G = self.int32_group(cfg, acc_half_rows(cfg))
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
        needs = [Need("cbuf", "transpose identity", R, "transpose identity", shared=True),
                 halves]
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
        return max(self.SLOTS, 2 * tile[0] * tile[1]) * cfg.rows

    @staticmethod
    def staging_rows(cfg: ChipConfig, tile: tuple[int, int]) -> int:
        return 2 * tile[0] * tile[1] * cfg.rows

    def _op(self, em: Emitter, op: Opcode, layer: int, sub: int = 0, **fields) -> MicroOp:
        return transpose_op(em.cfg, em.tile_rows, em.tile_cols, op, layer, sub, **fields)

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
                group=self.int32_group(cfg, acc_half_rows(cfg)))
            return self.blocks_int32(cfg, em, index, node.name,
                                     self.pieces(cfg, src_t.shape, node.op), where32,
                                     partial(self._op, em))
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
                           partial(self._op, em))

    def blocks(self, cfg: ChipConfig, em, index: int, name: str, src: str,
               p: permute.PermPlan, where: "Where", op) -> list[Block]:
        """The layer's blocks: `em` counts weight steps and output blocks across layers
        (``steps``, ``blocks``), `where` says where things are, `op` makes a micro-op
        (``op(opcode, layer, sub=0, **fields)``) with its routing."""
        R, C, k = cfg.rows, cfg.cols, cfg.sub_blocks
        for what, stride in (("input", p.sq), ("output", p.sl)):
            if stride > STRIDE_MAX:
                raise CompileError(
                    f"layer {name!r}: the permutation's {what} rows are {stride} words "
                    f"apart in DRAM, more than a DMA's stride field takes ({STRIDE_MAX}); "
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
    @staticmethod
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

    def blocks_int32(self, cfg: ChipConfig, em, index: int, name: str,
                     p: permute.PermPlan, where: "Where32", op) -> list[Block]:
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
            if stride > STRIDE_MAX:
                raise CompileError(
                    f"layer {name!r}: the permutation's {what} rows are {stride} words "
                    f"apart in DRAM, more than a DMA's stride field takes ({STRIDE_MAX}); "
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
                    for z, at_out, cols, dst, acc_at, last in members:
                        blk.epilogue.append(op(Opcode.VRUN, index, sub=sub, src=acc_at,
                                               rows=cols, dst=dst, to_acc=0))
                        if last:
                            blk.epilogue.append(op(
                                Opcode.DMA, index, kind=DmaKind.STORE_CBUF,
                                dram_addr=w.stored + at_out,
                                dram_stride=p.sl * arw, buf_addr=dst, rows=cols))
                    blocks.append(blk)
        return blocks

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

    def acc_slot(self, cfg: ChipConfig, n: int) -> int:
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
    acc_slot = Where.acc_slot


STRIDE_MAX = (1 << 16) - 1      # a DMA's dram_stride field


def transpose_op(cfg: ChipConfig, tile_rows: int, tile_cols: int, op: Opcode, layer: int,
                 sub: int = 0, west: bool = True, **fields) -> MicroOp:
    """A transpose's micro-op: the dense routing (``gemm_routing``; a VRUN writes
    sub-block `sub`), its WLOAD with every tile's weight input on the west lane
    (unless not `west`: an int32 transpose's interleaving weights)."""
    mop = make(cfg, op, layer, **fields)
    routing = gemm_routing(cfg, op, tile_rows=tile_rows, tile_cols=tile_cols, sub=sub)
    if op is Opcode.WLOAD and west:
        routing.update({name: "west" for name in routing if name.startswith("w_in[")})
    mop.needs = routing
    return mop


class MatMulTRule(DenseRule):
    """``a @ bᵀ`` of two tensors as a dense layer whose weight block ``(nb, kb)`` is
    read straight from ``b`` on chip: rows ``nb*C ..`` of ``b``'s K-block ``kb``, loaded
    along the array's rows (every ``w_in`` on ``west``), so row ``n`` of ``b`` lands in
    array column ``n`` and ``bᵀ`` is never formed. ``b`` is held whole (all its rows,
    every K-block; a graph input is loaded before the first block); ``a`` streams as a
    dense layer's input does, and the epilogue is a dense layer's without a bias.

    The partitions past ``K`` meet in the array (weight rows and activations of the
    last K-block): one operand must hold zeros there, so unless ``K`` is a multiple
    of ``R`` one of them must be a graph input (the DRAM layout zero-pads); the
    padding of tensors made on chip is not specified."""

    op = MatMulT

    def macs(self, graph: Graph, node: Node) -> int:
        (m, k), (n, _) = (graph.tensor(t).shape for t in node.inputs)
        return m * k * n

    def tiles_used(self, cfg: ChipConfig, graph: Graph, node: Node) -> tuple[int, int]:
        k = graph.tensor(node.inputs[0]).shape[1]
        n = graph.tensor(node.inputs[1]).shape[0]
        return (layout.blocks(min(cfg.rows, k), cfg.tile_size),
                layout.blocks(min(cfg.cols, n), cfg.tile_size))

    def params(self, cfg: ChipConfig, graph: Graph, node: Node
               ) -> list[tuple[str, np.ndarray]]:
        return []

    def input_rows(self, cfg: ChipConfig, graph: Graph, node: Node, tensor: str, rows: int,
                   M: int) -> int:
        """CBUF rows per K-block of `tensor` when this layer holds it: ``b`` whole,
        ``a`` as a dense layer's input."""
        if tensor == node.inputs[1]:
            return graph.tensor(tensor).shape[0]
        return super().input_rows(cfg, graph, node, tensor, rows, M)

    def one_block(self, cfg: ChipConfig, graph: Graph, node: Node) -> bool:
        """Whether ``a`` is one K-block (``b`` is held whole, not streamed)."""
        return graph.tensor(node.inputs[0]).shape[1] <= cfg.rows

    def needs(self, cfg: ChipConfig, graph: Graph, node: Node, rows: int,
              split: int = 1) -> list[Need]:
        a, b = node.inputs
        K = graph.tensor(a).shape[1]
        if K % cfg.rows and graph.producer(a) is not None and graph.producer(b) is not None:
            raise CompileError(
                f"layer {node.name!r}: K = {K} is not a multiple of the array's {cfg.rows} "
                f"rows and both {a!r} and {b!r} are made on chip, whose padding "
                f"partitions are not zero; make K a multiple of {cfg.rows} or read one "
                f"operand from the graph's inputs")
        return [n for n in super().needs(cfg, graph, node, rows, split)
                if n.key != "weight ring"]

    def _op(self, em: Emitter, op: Opcode, layer: int, **fields) -> MicroOp:
        mop = DenseRule._op(em, op, layer, **fields)
        if op is Opcode.WLOAD:
            mop.needs.update({name: "west" for name in mop.needs if name.startswith("w_in[")})
        return mop

    def emit(self, em: Emitter, index: int, node: Node) -> list[Block]:
        cfg, graph, plan = em.cfg, em.graph, em.plan
        op = partial(self._op, em)
        layer: MatMulT = node.op
        R, C, Mt = cfg.rows, cfg.cols, acc_half_rows(cfg)
        a_t, b_t = (graph.tensor(t) for t in node.inputs)
        out = graph.tensor(node.outputs[0])
        (M, K), N = a_t.shape, b_t.shape[0]
        Mc, KB = plan.rows[node.name], layout.blocks(K, R)

        def first_reader(t) -> bool:
            return graph.producer(t) is None and graph.consumers(t)[0] is node

        src = plan.tensor("cbuf", a_t.name).lo
        a_dram = plan.tensor("dram", a_t.name).lo if first_reader(a_t.name) else None
        b_at = plan.tensor("cbuf", b_t.name).lo
        b_loads = []
        if first_reader(b_t.name):
            b_dram = plan.tensor("dram", b_t.name).lo
            b_loads = [op(Opcode.DMA, index, kind=DmaKind.LOAD_CBUF,
                          dram_addr=b_dram + kb * N, dram_stride=1, buf_addr=b_at + kb * N,
                          rows=N) for kb in range(KB)]
        resident = (plan.tensor("cbuf", out.name).lo if on_chip_readers(graph, out.name)
                    else None)
        stored = stored_at(plan, out.name)
        staging = (plan.scratch("cbuf", f"{node.name}.staging").lo
                   if out.dtype == "int8" and resident is None else None)
        halves = plan.scratch("acc", "accumulator halves").lo

        # a graph input loaded pass by pass alternates between two buffers (input_rows)
        buffers = 2 if M > Mc and KB == 1 else 1
        blocks: list[Block] = []
        em.passes[index] = [(m0, min(Mc, M - m0)) for m0 in range(0, M, Mc)]
        for m0 in range(0, M, Mc):
            rows = min(Mc, M - m0)
            held = (m0 // Mc) % buffers
            for nb in range(layout.blocks(N, C)):
                blk = Block(index, m0=m0)
                if not blocks:
                    blk.bias += b_loads
                half = em.blocks % 2
                em.blocks += 1
                acc_at = halves + half * Mt
                for kb in range(KB):
                    bank = em.steps % 2
                    w_addr = b_at + kb * N + nb * C
                    WR = cfg.weight_rows
                    if w_addr + WR > cfg.cbuf_depth:
                        raise CompileError(
                            f"layer {node.name!r}: {b_t.name!r} ends {w_addr + WR - cfg.cbuf_depth} "
                            f"rows short of what a weight load reads ({WR} rows) at the CBUF's "
                            f"end; use a chip with a larger CBUF")
                    loads = []
                    at = src + ((held * KB if a_dram is not None else 0) + kb) * Mc
                    if a_dram is not None and nb == 0:
                        loads.append(op(Opcode.DMA, index, kind=DmaKind.LOAD_CBUF,
                                        dram_addr=a_dram + kb * M + m0, dram_stride=1,
                                        buf_addr=at, rows=rows))
                    loads.append(op(Opcode.WLOAD, index, w_addr=w_addr, bank=bank))
                    mm = op(Opcode.MATMUL, index, act_addr=at, rows=rows,
                            acc_addr=acc_at, accumulate=int(kb > 0), bank=bank)
                    blk.steps.append(Step(loads, mm))
                    em.steps += 1
                blk.epilogue = self._epilogue(em, index, layer, out.dtype, nb, m0, rows, M,
                                              Mc, half, acc_at, 0, resident, stored, staging,
                                              layout.blocks(N, C), N)
                blocks.append(blk)
        return blocks


class ConcatRule:
    """A :class:`~.ops.Concat` through the general lanes (docs/compiler.md, "Concat
    through the lanes"). Column group ``q`` (``n`` columns) of an input at column
    offset ``off`` becomes the output's group ``off/n + q``: partition group ``q % G`` of
    the input's K-block ``q // G`` moves to partition group ``o % G`` of the output's
    K-block ``o // G`` (``G = R/n``). A ``ROUTE`` moves, for all ``M`` rows of one
    input K-block into one output K-block, every group that goes there at once
    (on a tall grid, where two partition groups share a column group, as many as the
    column groups take); the rest of the output row is kept. The route, and the
    ``col0`` that maps its column groups onto the row, are the shortest the lanes
    allow (:func:`.lanes.plan`, skip links included). A graph input it is the first
    to read is loaded whole; a graph output is stored from where it is built. Each
    input's moves run right after the layer that makes it (``Block.follows``)."""

    op = Concat

    def max_rows(self, cfg: ChipConfig) -> int:
        return cfg.cbuf_depth

    def macs(self, graph: Graph, node: Node) -> int:
        return 0

    def tiles_used(self, cfg: ChipConfig, graph: Graph, node: Node) -> tuple[int, int]:
        return 1, 1             # no MATMUL: what the other layers use decides

    def params(self, cfg: ChipConfig, graph: Graph, node: Node
               ) -> list[tuple[str, np.ndarray]]:
        return []

    @staticmethod
    def offsets(cfg: ChipConfig, graph: Graph, node: Node) -> list[int]:
        """Each input's first output column; a CompileError if the chip cannot place
        one there."""
        n = cfg.tile_size
        if not cfg.general_lanes:
            raise CompileError(
                f"layer {node.name!r}: a Concat moves its inputs through the general "
                f"lanes, which chip {cfg.name!r} does not have (general_lanes); use a "
                f"chip that has them (tiny, tiny_tall, tiny_wide) or give a dense layer "
                f"the inputs as separate tensors (it reads several, concatenated)")
        out, at = [], 0
        for k, t in enumerate(node.inputs):
            if at % n:
                raise CompileError(
                    f"layer {node.name!r}: input {t!r} would start at column {at}, which "
                    f"is not a multiple of the lane width {n} on chip {cfg.name!r}: the "
                    f"lanes move {n}-column groups; give every input but the last a "
                    f"multiple of {n} columns (pad {node.inputs[k - 1]!r})")
            out.append(at)
            at += graph.tensor(t).shape[1]
        return out

    def needs(self, cfg: ChipConfig, graph: Graph, node: Node, rows: int,
              split: int = 1) -> list[Need]:
        self.offsets(cfg, graph, node)
        out = graph.tensor(node.outputs[0])
        if on_chip_readers(graph, out.name):
            return []
        return [Need("cbuf", f"{node.name}.staging",
                     layout.resident_rows(cfg, out.shape[1], min(rows, out.shape[0])),
                     f"output staging of {node.name!r}")]

    @staticmethod
    def routes(cfg: ChipConfig, groups: dict[int, int]) -> list[tuple[int, "lanes.LaneRoute", int]]:
        """``(col0, route, keep)`` per ROUTE that moves `groups` (output partition group
        -> input partition group): one where every partition group has a column group of
        its own, else (a tall grid) one per ``Tc`` partition groups; each with the
        ``col0`` of the shortest route."""
        tc, G = cfg.tile_cols, cfg.rows // cfg.tile_size
        dests = sorted(groups)
        parts = [dests] if G <= tc else \
            [[g for g in dests if g // tc == b] for b in range(-(-G // tc))]
        out = []
        for part in (p for p in parts if p):
            best = None
            for col0 in range(tc):
                moves = {(g + col0) % tc: groups[g] for g in part}
                route = lanes.plan(cfg, moves)
                if best is None or route.span < best[1].span:
                    best = col0, route
            col0, route = best
            out.append((col0, route, sum(1 << g for g in range(G) if g not in part)))
        return out

    def _moves(self, cfg: ChipConfig, index: int, tensor, off: int, src: int,
               src_stride: int, dst: int, dst_stride: int, rows: int) -> list[MicroOp]:
        """The ROUTEs moving `rows` rows of `tensor` (K-blocks `src_stride` rows apart
        from `src`) to column offset `off` of the output (blocks `dst_stride` apart)."""
        n = cfg.tile_size
        G = cfg.rows // n
        moves: dict[tuple[int, int], dict[int, int]] = {}
        for q in range(layout.blocks(tensor.shape[1], n)):
            o = off // n + q
            moves.setdefault((q // G, o // G), {})[o % G] = q % G
        ops = []
        for (ib, ob), groups in moves.items():
            for col0, route, keep in self.routes(cfg, groups):
                mop = make(cfg, Opcode.ROUTE, index, src=src + ib * src_stride,
                           dst=dst + ob * dst_stride, rows=rows, span=route.span,
                           col0=col0, keep=keep, **route.delays())
                mop.needs = dict(route.routing)
                ops.append(mop)
        return ops

    def emit(self, em: Emitter, index: int, node: Node) -> list[Block]:
        cfg, graph, plan = em.cfg, em.graph, em.plan
        R = cfg.rows
        out = graph.tensor(node.outputs[0])
        M, OB = out.shape[0], layout.blocks(out.shape[1], R)
        # A Concat alone whose rows do not fit goes in passes of Mc rows, its inputs
        # and its output staging held a pass at a time (blocks Mc rows apart); in a
        # network every tensor is on chip whole (blocks M rows apart).
        Mc = plan.rows[node.name]
        step = M if Mc >= M else Mc
        if on_chip_readers(graph, out.name):
            dst = plan.tensor("cbuf", out.name).lo
        else:
            dst = plan.scratch("cbuf", f"{node.name}.staging").lo
        stored = stored_at(plan, out.name)
        index_of = {x.name: k for k, x in enumerate(graph.nodes)}
        offsets = self.offsets(cfg, graph, node)
        blocks: list[Block] = []
        for m0 in range(0, M, Mc):
            rows = min(Mc, M - m0)
            loaded = set()
            for t, off in zip(node.inputs, offsets):
                tensor, producer = graph.tensor(t), graph.producer(t)
                src = plan.tensor("cbuf", t).lo
                KB = layout.blocks(tensor.shape[1], R)
                if producer is not None:
                    # a layer's output is whole on chip (a network: Mc = M); its rows
                    # move pass by pass, each right after the pass that makes them (a
                    # Concat's output: where this Concat is, after it)
                    follows = None if isinstance(producer.op, Concat) \
                        else index_of[producer.name]
                    for p0, count in em.passes.get(follows, [(0, M)]):
                        blocks.append(Block(index, follows=follows, m0=(
                            p0 if follows in em.passes else None), epilogue=self._moves(
                                cfg, index, tensor, off, src + p0, M, dst + p0, M, count)))
                    continue
                # a graph input: held whole, or a pass at a time (blocks Mc rows apart)
                at, stride = (src + m0, M) if step == M else (src, step)
                ops: list[MicroOp] = []
                if graph.consumers(t)[0] is node and t not in loaded:
                    loaded.add(t)
                    base = plan.tensor("dram", t).lo
                    loads = [(0, KB * M)] if step == M else [(kb, rows) for kb in range(KB)]
                    ops += [make(cfg, Opcode.DMA, index, kind=DmaKind.LOAD_CBUF,
                                 dram_addr=base + kb * M + m0, dram_stride=1,
                                 buf_addr=at + kb * stride, rows=count)
                            for kb, count in loads]
                ops += self._moves(cfg, index, tensor, off, at, stride,
                                   dst + (m0 if step == M else 0), step, rows)
                blocks.append(Block(index, epilogue=ops))
            if stored is not None:
                stores = [(0, OB * M)] if step == M else [(ob, rows) for ob in range(OB)]
                blocks.append(Block(index, epilogue=[
                    make(cfg, Opcode.DMA, index, kind=DmaKind.STORE_CBUF,
                         dram_addr=stored + ob * M + m0, dram_stride=1,
                         buf_addr=dst + ob * step, rows=count) for ob, count in stores]))
        return blocks

    @staticmethod
    def starts(graph: Graph, node: Node, index: dict[str, int]) -> int:
        """The first layer during which its ops may run: each input's moves follow
        the layer that makes it (``pipeline.hoist``), so its output and staging are
        live from the first such layer."""
        return min([index[node.name]] + [index[p.name] for t in node.inputs
                                         if (p := graph.producer(t)) is not None
                                         and not isinstance(p.op, Concat)])


RULES: dict[type, object] = {Dense: DenseRule(), Transpose: TransposeRule(),
                             MatMulT: MatMulTRule(), Concat: ConcatRule()}


def rule_for(node: Node):
    try:
        return RULES[type(node.op)]
    except KeyError:
        raise CompileError(f"internal: no lowering rule for layer {node.name!r} "
                           f"({type(node.op).__name__})") from None


def multiplexers_passed(cfg: ChipConfig, mop: MicroOp) -> set[str]:
    """The multiplexers `mop`'s data passes (what its ``needs`` must name)."""
    ins = mop.instr(0)
    return {m.name for m in fabric.muxes(cfg) if timing.mux_use(cfg, ins, m.name) is not None}
