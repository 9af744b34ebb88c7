"""Concats (``Concat``): in the dense lowering through the general lanes (``ROUTE``),
in the map lowering laid out in DRAM by the stores of the layers that make its
inputs."""

from __future__ import annotations

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.arch.isa import DmaKind, Opcode
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.graph import Graph, Node
from systolica.compiler.graph.ops import Concat, Flatten, Transpose
from systolica.compiler.lowering.emitter import Emitter
from systolica.compiler.lowering.maps.jobs import MapInputs
from systolica.compiler.lowering.registry import register
from systolica.compiler.lowering.rule import Need, Rule
from systolica.compiler.microops.ir import MicroOp, make
from systolica.compiler.planning import lanes, layout
from systolica.compiler.planning.memory import on_chip_readers, stored_at
from systolica.compiler.scheduling.pipeline import Block


@register
class ConcatRule(Rule):
    """A :class:`~.ops.Concat` through the general lanes (docs/compiler.md, "Concat
    through the lanes"). Column group ``q`` (``n`` columns) of an input at column
    offset ``off`` becomes the output's group ``off/n + q``: partition group ``q % G`` of
    the input's K-block ``q // G`` moves to partition group ``o % G`` of the output's
    K-block ``o // G`` (``G = R/n``). A ``ROUTE`` moves, for all ``M`` rows of one
    input K-block into one output K-block, every group that goes there at once
    (on a tall grid, where two partition groups share a column group, as many as the
    column groups take); the rest of the output row is kept. The route, and the
    ``col0`` that maps its column groups onto the row, are the shortest the lanes
    allow (:func:`.lanes.plan_route`, skip links included). A graph input it is the first
    to read is loaded whole; a graph output is stored from where it is built. Each
    input's moves run right after the layer that makes it (``Block.follows``)."""

    op = Concat
    dense = maps = True
    lays_out_inputs = True

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
    def routes(cfg: ChipConfig, groups: dict[int, int]) -> list[tuple[int, lanes.LaneRoute, int]]:
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
                route = lanes.plan_route(cfg, moves)
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

    def first_layer(self, graph: Graph, node: Node, index: dict[str, int]) -> int:
        """The first layer during which its ops may run: each input's moves follow
        the layer that makes it (``pipeline.hoist``), so its output and staging are
        live from the first such layer."""
        return min([index[node.name]] + [index[p.name] for t in node.inputs
                                         if (p := graph.producer(t)) is not None
                                         and not isinstance(p.op, Concat)])

    # -- the map lowering: a view ------------------------------------------------------
    def map_job(self, inputs: MapInputs, index: int, node: Node) -> None:
        """A Concat of maps is laid out, not computed: its inputs' producers store
        their channel blocks into its output's (:func:`check_map_concat`)."""
        if len(inputs.graph.tensor(node.outputs[0]).shape) != 4:
            raise CompileError(f"layer {node.name!r}: a Concat runs in networks of "
                               f"dense layers (and transposes, A·Bᵀ) when it joins "
                               f"[M, K] tensors, and in a convolutional network when it "
                               f"joins feature maps; here give the dense layer after it "
                               f"the inputs as separate tensors (it reads several, "
                               f"concatenated)")
        check_map_concat(inputs.cfg, inputs.graph, node, inputs.alias)
        return None


def check_map_concat(cfg: ChipConfig, graph: Graph, node: Node, alias) -> None:
    """A Concat of feature maps is laid out, not computed (docs/cnn.md, "Concat of
    feature maps"): each input's producer writes its channel blocks where they lie in
    the output's. So every input is made by a layer that stores it to DRAM, no two
    inputs (and no other Concat) share one, and every input but the last fills whole
    blocks of R channels."""
    R = cfg.rows
    who = f"layer {node.name!r}"
    if len(set(node.inputs)) != len(node.inputs):
        raise CompileError(f"{who}: joins one map twice; its channel blocks can be "
                           f"written in one place only: copy it first (e.g. a 1x1 "
                           f"convolution with identity weights)")
    for k, t in enumerate(node.inputs):
        producer = graph.producer(t)
        if producer is None or isinstance(producer.op, (Flatten, Transpose)) \
                or t in alias:
            raise CompileError(f"{who}: input {t!r} is "
                               f"{'a graph input' if producer is None else 'a view'}; a "
                               f"Concat of maps joins maps that layers of the network "
                               f"make (their blocks are written in place): pass it "
                               f"through a layer first")
        if t in graph.outputs:
            raise CompileError(f"{who}: input {t!r} is also a graph output; a Concat's "
                               f"inputs are written into its output's blocks")
        others = [c.name for c in graph.consumers(t)
                  if isinstance(c.op, Concat) and c is not node]
        if others:
            raise CompileError(f"{who}: input {t!r} is joined by {others[0]!r} too; a map "
                               f"is written into one Concat's blocks only")
        C = graph.tensor(t).shape[3]
        if k < len(node.inputs) - 1 and C % R:
            raise CompileError(f"{who}: input {t!r} has {C} channels, not a multiple of "
                               f"the chip's {R} ({cfg.name!r}): every input but the last "
                               f"must fill whole channel blocks, as the next starts a "
                               f"block; give it a multiple of {R} channels or put it last")
