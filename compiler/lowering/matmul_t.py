"""``a @ bᵀ`` (``MatMulT``) in the dense lowering: a dense layer whose weight blocks
are read from ``b`` on chip, loaded along the array's rows."""

from __future__ import annotations

from functools import partial

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.arch.isa import DmaKind, Opcode
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.graph import Graph, Node
from systolica.compiler.graph.ops import MatMulT
from systolica.compiler.lowering.dense import BlockAt, DenseRule, Destination
from systolica.compiler.lowering.emitter import Emitter
from systolica.compiler.lowering.registry import register
from systolica.compiler.lowering.rule import Need
from systolica.compiler.planning import layout
from systolica.compiler.planning.memory import acc_half_rows, on_chip_readers, stored_at
from systolica.compiler.scheduling.pipeline import Block, Step


@register
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
    maps = False

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

    def reads_past(self, cfg: ChipConfig, graph: Graph, node: Node, tensor: str) -> int:
        """``b``'s rows past its last K-block that the west loads of its last rows read
        (``weight_rows`` from each block's ``nb*C``)."""
        if tensor != node.inputs[1]:
            return super().reads_past(cfg, graph, node, tensor)
        N = graph.tensor(tensor).shape[0]
        last = (layout.blocks(N, cfg.cols) - 1) * cfg.cols
        return max(0, last + cfg.weight_rows - N)

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

    def emit(self, em: Emitter, index: int, node: Node) -> list[Block]:
        cfg, graph, plan = em.cfg, em.graph, em.plan
        op = partial(em.op, west=True)
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
        dest = Destination(out.dtype, M, Mc, layout.blocks(N, C), N, resident, stored,
                           staging)

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
                            f"layer {node.name!r}: {b_t.name!r} ends "
                            f"{w_addr + WR - cfg.cbuf_depth} "
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
                blk.epilogue = self._epilogue(em, index, layer, dest,
                                              BlockAt(nb, m0, rows, half, acc_at, 0))
                blocks.append(blk)
        return blocks
