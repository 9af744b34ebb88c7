"""Dense layers (``Dense``): in the dense lowering as output blocks streamed through
the weight ring, in the map lowering as a 1x1 convolution."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.arch.isa import DmaKind, Opcode
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.graph import Graph, Node
from systolica.compiler.graph.ops import Dense
from systolica.compiler.lowering.emitter import Emitter
from systolica.compiler.lowering.maps.jobs import Job, MapInputs, WStep
from systolica.compiler.lowering.registry import register
from systolica.compiler.lowering.routing import packed_routing
from systolica.compiler.lowering.rule import Need, Rule
from systolica.compiler.microops.ir import MicroOp, make
from systolica.compiler.planning import layout, split
from systolica.compiler.planning.memory import acc_half_rows, on_chip_readers, stored_at
from systolica.compiler.planning.split import packed_cols
from systolica.compiler.scheduling.pipeline import Block, Step

#: The dense lowering's weight ring, in blocks: in flight are a DMA, a WLOAD and two
#: of slack.
DENSE_RING_BLOCKS = 4


@dataclass(frozen=True)
class Destination:
    """Where a dense layer's output blocks go, the same for all of them: ``M`` rows in
    passes of ``Mc`` (a split layer's: each group's), ``n_blocks`` N-blocks of ``C``
    columns of ``N`` in all (a split layer's packed ``C``); to its tensor on chip
    (``resident``; blocks ``stride`` rows apart when the tensor is there whole, else a
    pass each), to the output staging (``staging``), and stored to DRAM at ``stored``;
    ``packed``: a wide grid's split chain hands it on packed into ``R`` columns."""
    dtype: str
    M: int
    Mc: int
    n_blocks: int
    N: int
    resident: int | None
    stored: int | None
    staging: int | None
    stride: int | None = None
    packed: int = 1

    def resident_row(self, b: int, m0: int) -> int:
        """The CBUF row where block `b` of the output held on chip takes its pass at
        `m0`."""
        return _resident_row(self.resident, b, m0, self.Mc, self.stride)


@dataclass(frozen=True)
class BlockAt:
    """One output block: N-block `nb` of the pass at row `m0` (`rows` rows), in
    accumulator half `half` at ACC row `acc_at`, its bias at `bias_at`."""
    nb: int
    m0: int
    rows: int
    half: int
    acc_at: int
    bias_at: int


@register
class DenseRule(Rule):
    """A dense layer as output blocks (per M-chunk, per N-block of ``C`` columns),
    each a sum over K-blocks of ``R`` rows, the K-blocks of all its inputs in order.
    Per K-block a weight block is DMA'd into the weight ring, WLOADed into bank
    ``step % 2`` and streamed against the activations' K-block by one MATMUL into an
    accumulator half (halves alternate per block). The vector unit then adds the bias,
    requantises and writes the block to its tensor in CBUF (read by later layers),
    to the output staging, or (int32) back to ACC, and a DMA stores graph outputs."""

    op = Dense
    dense = maps = True

    def max_rows(self, cfg: ChipConfig) -> int:
        return acc_half_rows(cfg)

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
        needs = [Need("cbuf", "weight ring", DENSE_RING_BLOCKS * cfg.weight_rows, "weight ring",
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
        op = em.op
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
        dest = Destination(out.dtype, M, Mc, n_blocks,
                           split.packed_cols(cfg, plan.split(node.name))
                           if plan.split(node.name) > 1 else layer.N,
                           resident, stored, staging, stride if whole else None, packed)
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
                        slot = ring + (em.steps % DENSE_RING_BLOCKS) * WR
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
                blk.epilogue = self._epilogue(em, index, layer, dest,
                                              BlockAt(nb, m0, rows, half, acc_at, bias_at))
                blocks.append(blk)
        return blocks

    def map_job(self, inputs: MapInputs, index: int, node: Node) -> Job:
        """A dense layer in a map network: a 1x1 convolution over its ``M`` rows (a
        flattened map read through its view: ``Source.gather``)."""
        if len(node.inputs) != 1:
            raise CompileError(f"layer {node.name!r}: a dense layer in a convolutional "
                               f"network reads one tensor")
        cfg, graph = inputs.cfg, inputs.graph
        src, = inputs.sources(node, through_views=False)
        op: Dense = node.op
        R = cfg.rows
        out = graph.tensor(node.outputs[0])
        K, Nn = op.weights.shape
        C = cfg.cols             # an N-block: one ACC row of C outputs
        w = op.weights.astype(np.int64)
        nb, kb = layout.blocks(Nn, C), layout.blocks(K, R)
        blocks, steps = [], []
        for n in range(nb):
            mine = []
            for k in range(kb):
                blk = np.zeros((R, max(R, C)), dtype=np.int64)
                part = w[k * R:(k + 1) * R, n * C:(n + 1) * C]
                blk[:part.shape[0], :part.shape[1]] = part
                mine.append(WStep(0, k, ((0, 0),), len(blocks)))
                blocks.append(blk)
            steps.append(mine)
        M = out.shape[0]
        job = Job(node.name, index, [src], (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 0,
                  (1, M, 1, Nn), out.dtype, steps, np.stack(blocks).astype(np.int8),
                  macs=M * K * Nn, span=C)
        if op.bias is not None:
            job.post = "bias"
            job.post_rows = np.zeros((nb, cfg.cols), dtype=np.int32)
            job.post_rows.reshape(-1)[:Nn] = op.bias
        post = dict(use_bias=int(op.bias is not None), relu=int(op.relu))
        if out.dtype == "int8":
            post.update(requant=1, mult=op.mult, shift=op.shift, zp=op.zp & 0xFF)
        job.vrun = post
        return job

    def _epilogue(self, em: Emitter, index: int, layer: Dense, dest: Destination,
                  at: BlockAt) -> list[MicroOp]:
        """Block `at`: int8 into sub-block ``nb % k`` of block ``nb // k`` of ``R``
        columns (``k = R / C``; the activation layout a later layer reads), stored once
        the block's last sub-block is in; on a wide grid as slices of the output's
        columns; int32 as accumulator rows."""
        arw, k = em.cfg.acc_row_words, em.cfg.sub_blocks
        op = em.op
        nb, m0, rows, M, Mc = at.nb, at.m0, at.rows, dest.M, dest.Mc
        post = dict(src=at.acc_at, rows=rows,
                    bias_addr=at.bias_at if layer.bias is not None else 0,
                    use_bias=int(layer.bias is not None), relu=int(layer.relu))
        if dest.dtype == "int8":
            post.update(requant=1, mult=layer.mult, shift=layer.shift, zp=layer.zp & 0xFF)
            if not em.cfg.sides_divide:
                return self._pieces(em, index, post, dest, at)
            if em.cfg.wide and dest.packed > 1:
                mop = make(em.cfg, Opcode.VRUN, index, to_acc=0, **post,
                           dst=dest.resident + m0 if dest.stride is not None
                           else dest.resident)
                mop.needs = packed_routing(em.cfg, dest.packed)
                return [mop]
            if em.cfg.wide:
                return self._slices(em, index, post, dest, at)
            b, sub = divmod(nb, k)
            # the sub-blocks of one block share a staging half; successive blocks
            # alternate, across passes too (else a pass's VRUN waits for the store
            # of the pass before)
            slot = at.half if k == 1 else ((m0 // Mc) * -(-dest.n_blocks // k) + b) % 2
            buf = (dest.staging + slot * Mc if dest.resident is None else
                   dest.resident_row(b, m0))
            ops = [op(Opcode.VRUN, index, sub=sub, to_acc=0, dst=buf, **post)]
            if dest.stored is not None and (sub == k - 1 or nb == dest.n_blocks - 1):
                ops.append(op(Opcode.DMA, index, kind=DmaKind.STORE_CBUF,
                              dram_addr=dest.stored + b * M + m0, dram_stride=1,
                              buf_addr=buf, rows=rows))
            return ops
        ops = []
        if layer.bias is not None or layer.relu:
            # in place: each row is read before it is rewritten
            ops.append(op(Opcode.VRUN, index, to_acc=1, dst=at.acc_at, **post))
        ops.append(op(Opcode.DMA, index, kind=DmaKind.STORE_ACC,
                      dram_addr=dest.stored + (nb * M + m0) * arw, dram_stride=arw,
                      buf_addr=at.acc_at, rows=rows))
        return ops

    @staticmethod
    def _pieces(em: Emitter, index: int, post: dict, dest: Destination,
                at: BlockAt) -> list[MicroOp]:
        """On a grid whose sides do not divide: N-block `nb` goes to the blocks of
        ``R`` columns it overlaps, one VRUN per piece (:func:`layout.pieces`), a
        block's later pieces keeping its earlier ones; a block is stored once whole.
        Staged blocks take slot ``(p * B + b) % (2 * staged_slices)`` in pass ``p`` of
        an output of ``B`` blocks: the blocks two N-blocks in flight overlap never share
        one."""
        op, N, Mc = em.op, dest.N, dest.Mc
        slots = 2 * layout.staged_slices(em.cfg, N)
        # blocks counted across passes, so a pass's first block is not in the slot its
        # pass before's is stored from
        passed = (at.m0 // Mc) * layout.blocks(N, em.cfg.rows)
        ops = []
        for pc in layout.pieces(em.cfg, at.nb, N):
            b = pc.block
            buf = (dest.staging + ((passed + b) % slots) * Mc if dest.resident is None else
                   dest.resident_row(b, at.m0))
            ops.append(op(Opcode.VRUN, index, sub=pc, to_acc=0, dst=buf, **post))
            if dest.stored is not None and pc.last:
                ops.append(op(Opcode.DMA, index, kind=DmaKind.STORE_CBUF,
                              dram_addr=dest.stored + b * dest.M + at.m0, dram_stride=1,
                              buf_addr=buf, rows=at.rows))
        return ops

    @staticmethod
    def _slices(em: Emitter, index: int, post: dict, dest: Destination,
                at: BlockAt) -> list[MicroOp]:
        """On a wide grid: N-block `nb` is blocks ``nb*k ..`` of ``R`` columns
        (``k = C / R``, those of the layer's `N` columns), one VRUN each, slice ``s``
        taking ACC groups ``s*T ..``; the staging holds the N-block's ``k`` blocks per
        accumulator half (only as many as the layer's `N` fills: ``staged_slices``)."""
        k, R = em.cfg.slices, em.cfg.rows
        ks = layout.staged_slices(em.cfg, dest.N)
        op = em.op
        ops = []
        for sub in range(min(k, layout.blocks(dest.N, R) - at.nb * k)):
            b = at.nb * k + sub
            buf = (dest.staging + (at.half * ks + sub) * dest.Mc if dest.resident is None
                   else dest.resident_row(b, at.m0))
            ops.append(op(Opcode.VRUN, index, sub=sub, to_acc=0, dst=buf, **post))
            if dest.stored is not None:
                ops.append(op(Opcode.DMA, index, kind=DmaKind.STORE_CBUF,
                              dram_addr=dest.stored + b * dest.M + at.m0, dram_stride=1,
                              buf_addr=buf, rows=at.rows))
        return ops


def _resident_row(resident: int, b: int, m0: int, Mc: int, stride: int | None) -> int:
    """The CBUF row where block `b` of an output held on chip takes its pass at `m0`:
    blocks `stride` rows apart in a network of dense layers (the tensor whole), else
    one pass of `Mc` rows each."""
    return resident + b * stride + m0 if stride is not None else resident + b * Mc
