"""Splitting the array into tile groups for dense layers with small K and N
(docs/compiler.md, "Splitting the array"; layouts: docs/contract.md, "Split dense
layers").

A layer split into ``s`` groups computes ``M_s = ceil(M/s)`` rows of
``[A_0 | A_1 | ..] @ blockdiag(W, W, ..)``: group ``g`` (the ``g``-th diagonal block of
``floor(T/s)`` tile rows and ``floor(Tc/s)`` tile columns, or past the shorter side's
tiles of ``floor(R/s) x floor(C/s)`` cells; :func:`group_rows` and :func:`group_cols`
array rows and columns) takes rows ``g*M_s ..`` of the input. This
module decides ``s`` per chain of dense layers (the cost model; a chain of one layer
is the common case) and packs and unpacks the data; the dense rule lowers the packed
layers as any other. Inside a chain each layer's packed output is the next one's
packed input as it lies on chip (docs/contract.md, "Split dense layers").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.graph import Graph, Node
from systolica.compiler.graph.ops import Dense
from systolica.compiler.planning import dense_passes as passes
from systolica.compiler.planning import layout


@dataclass(frozen=True)
class Split:
    """A layer's split: ``s`` tile groups (1: the whole array), the estimated cycles
    per candidate (a lone layer of one weight block: its passes modelled; a chain: its
    busiest unit's rows), and why it is not split further."""
    s: int
    estimates: Mapping[int, int]    # the chain's, for a layer of a chain
    why: str
    chain: tuple[str, ...] = ()     # the layers of its chain (it too), if more than one


def group_counts(cfg: ChipConfig) -> list[int]:
    """The splits the grid allows: ``s`` up to the shorter side's cells. Up to its
    tiles, group ``g`` is the ``floor(T/s) x floor(Tc/s)`` tiles from
    ``(g*floor(T/s), g*floor(Tc/s))`` on the diagonal (where ``s`` does not divide a
    side, its last tiles take no group); past them, the ``floor(R/s) x floor(C/s)``
    cells from ``(g*floor(R/s), g*floor(C/s))`` (:func:`cell_groups`)."""
    return list(range(1, min(cfg.rows, cfg.cols) + 1))


def cell_groups(cfg: ChipConfig, s: int) -> bool:
    """`s` groups are smaller than a tile along the grid's shorter side. The split
    needs no tile boundary: the routing is the plain one (array row ``p`` takes CBUF
    partition ``p``, ACC column ``c`` array column ``c``), and the zeros off the
    diagonal blocks keep the groups apart inside a tile as between tiles."""
    return s > min(cfg.tile_rows, cfg.tile_cols)


def groups(cfg: ChipConfig, s: int) -> str:
    """`s` groups, as messages name them: tile groups, or groups of cells."""
    return f"{s} groups of cells" if cell_groups(cfg, s) else f"{s} tile groups"


def group_rows(cfg: ChipConfig, s: int) -> int:
    """The array rows of one of `s` groups (``R/s`` where `s` divides ``T``)."""
    if cell_groups(cfg, s):
        return cfg.rows // s
    return cfg.tile_rows // s * cfg.tile_size


def group_cols(cfg: ChipConfig, s: int) -> int:
    """The array columns of one of `s` groups (``C/s`` where `s` divides ``Tc``)."""
    if cell_groups(cfg, s):
        return cfg.cols // s
    return cfg.tile_cols // s * cfg.tile_size


def packed_cols(cfg: ChipConfig, s: int) -> int:
    """The columns of a layer's packed output in `s` groups: every group's
    (``C`` where `s` divides ``Tc``; the columns of tiles in no group are not stored)."""
    return s * group_cols(cfg, s)


def packs_inner(cfg: ChipConfig) -> bool:
    """A chain's inner layer packs its outputs into one ``R``-byte row by whole tile
    columns (``rules.packed_routing``): on a wide grid whose sides divide, where its
    ``C`` columns would be several K-blocks for the next layer. Elsewhere its packed
    output is the next layer's input as it lies, one K-block while it is at most ``R``
    columns wide."""
    return cfg.wide and cfg.sides_divide


def rows(M: int, s: int) -> int:
    """``M_s``: rows the array streams for ``M`` output rows in ``s`` groups."""
    return -(-M // s)


def chains(graph: Graph) -> list[list[Node]]:
    """The graph's dense layers in chains: each layer after the first the only reader
    of the one before's output, which is no graph output. Every dense layer is in
    one chain (most in a chain of one)."""
    def next_of(node: Node) -> Node | None:
        (t,) = node.outputs
        readers = graph.consumers(t)
        if len(readers) == 1 and t not in graph.outputs and type(readers[0].op) is Dense \
                and tuple(readers[0].inputs) == (t,):
            return readers[0]
        return None

    linked = {nxt.name for n in graph.nodes if type(n.op) is Dense
              for nxt in [next_of(n)] if nxt is not None}
    out = []
    for node in graph.nodes:
        if type(node.op) is not Dense or node.name in linked:
            continue
        chain = [node]
        while (nxt := next_of(chain[-1])) is not None:
            chain.append(nxt)
        out.append(chain)
    return out


def _refusal(cfg: ChipConfig, graph: Graph, chain: list[Node], s: int) -> str | None:
    """Why `chain` cannot run in `s` tile groups (None: it can)."""
    first, last = chain[0], chain[-1]
    named = (lambda n: f"layer {n.name!r}: ") if len(chain) > 1 else (lambda n: "")
    if len(first.inputs) != 1:
        return f"{named(first)}it reads several tensors"
    (t,) = first.inputs
    out = last.outputs[0]
    if graph.producer(t) is not None or [c.name for c in graph.consumers(t)] != [first.name] \
            or t in graph.outputs:
        return f"{named(first)}its input {t!r} is made or read by other layers (only a " \
               f"graph input read by one chain of dense layers alone is laid out split)"
    if graph.consumers(out) or out not in graph.outputs:
        return f"{named(last)}its output {out!r} is read by other layers (only a graph " \
               f"output is laid out split)"
    if s not in group_counts(cfg):
        return f"the {cfg.rows}x{cfg.cols} array has no {s} diagonal groups (splits: " \
               f"1 to {group_counts(cfg)[-1]}, its shorter side)"
    if len(chain) > 1 and packs_inner(cfg) and (
            cell_groups(cfg, s) or cfg.tile_rows % s or cfg.tile_cols % s):
        return f"{s} groups on the wide {cfg.tile_rows}x{cfg.tile_cols} tile grid: a " \
               f"chain's inner layers there pack their outputs by whole tile columns " \
               f"into one R-byte row, so a chain takes tile groups that divide both " \
               f"sides; split it into such groups, or split=1"
    if len(chain) > 1 and not packs_inner(cfg) and packed_cols(cfg, s) > cfg.rows:
        return f"{s} groups' packed outputs are {packed_cols(cfg, s)} columns wide, " \
               f"more than the {cfg.rows}-byte row the next layer of the chain reads " \
               f"as one K-block; split the chain into fewer groups, or split=1"
    # inside a chain a layer reads the one before's outputs where they lie: its
    # group's C/s columns, or on a wide grid whose sides divide the R/s partitions
    # its VRUN packs them into (rules.packed_routing)
    rows_s, cols_s = group_rows(cfg, s), group_cols(cfg, s)
    inner = rows_s if packs_inner(cfg) else cols_s
    for i, node in enumerate(chain):
        K, N = node.op.K, node.op.N
        width = rows_s if i == 0 else inner
        if K > width:
            where = "the rows of one of" if i == 0 else \
                "the columns of the layer before's outputs in one of"
            return f"{named(node)}K = {K} > {width}, {where} {groups(cfg, s)}"
        if N > cols_s:
            return f"{named(node)}N = {N} > {cols_s}, the columns of one of " \
                   f"{groups(cfg, s)}"
        if node is not last and N > inner:
            return f"{named(node)}N = {N} > {inner}: on the wide grid " \
                   f"{cfg.name!r} a chain hands each group's outputs on in {inner} " \
                   f"partitions of one {cfg.rows}-byte row"
    return None


def estimate_split(cfg: ChipConfig, M: int, out_dtype: str, s: int, loads: bool = True,
             stores: bool = True, N: int | None = None) -> int:
    """The busiest unit's cycles for a one-block layer of ``M`` rows and `N` columns
    (None: at most ``R``) in ``s`` groups: the DMA (input words if it `loads` its
    input, output words if it `stores` its output, the weight block, a bias row), the
    matmul unit (its rows and a weight load), the vector unit (its rows; on a wide
    grid once per slice of ``R`` columns of the output, all ``C`` of them when split)."""
    m = rows(M, s)
    # a split layer's output is its groups' columns wide, but inside a chain one
    # R-byte row (on a wide grid packed by its VRUN; elsewhere C <= R)
    width = (packed_cols(cfg, s) if stores else cfg.rows) if s > 1 \
        else min(cfg.cols, N or cfg.rows)
    slices = 1 if out_dtype == "int32" else layout.blocks(width, cfg.rows)
    out_words = m * (cfg.acc_row_words if out_dtype == "int32" else slices) if stores else 0
    dma = (m if loads else 0) + out_words + cfg.weight_rows + cfg.acc_row_words
    matmul = m + cfg.weight_rows + cfg.tile_rows - 1
    return max(dma, matmul, m * slices)


def lone_estimate(cfg: ChipConfig, graph: Graph, node: Node, s: int) -> int:
    """The cycles of a dense layer alone of one weight block in ``s`` groups, in the
    passes the memory planner gives it (:func:`.plan.lone_passes`: as :mod:`.passes`
    models fastest; here with no bound on a pass's rows): the first pass's load and
    the last pass's VRUNs and stores are in the sum, not only the busiest unit."""
    m = rows(graph.tensor(node.outputs[0]).shape[0], s)
    shape = lone_shape(cfg, graph, node, s)
    return passes.cycles(cfg, m, passes.best(cfg, m, m, *shape), *shape)


def lone_shape(cfg: ChipConfig, graph: Graph, node: Node, s: int = 1
               ) -> tuple[bool, int, bool, bool, int]:
    """What :func:`.passes.cycles` needs of dense layer `node` in `s` groups: whether
    its output is int32, its slices (split, its output is its groups' columns wide),
    whether it has a bias, whether an int32 output passes the vector unit, and the
    tile rows its MATMULs' sums skip (``early``: unsplit, the tile rows below its
    K-block are fed zeros, so its sums leave above them; :mod:`.exits`)."""
    op = node.op
    width = packed_cols(cfg, s) if s > 1 else op.N
    early = 0 if s > 1 else cfg.tile_rows - layout.blocks(min(cfg.rows, op.K), cfg.tile_size)
    return (graph.tensor(node.outputs[0]).dtype == "int32",
            layout.staged_slices(cfg, width), op.bias is not None,
            op.bias is not None or bool(op.relu), early)


def choose_split(cfg: ChipConfig, graph: Graph, forced: int | Mapping[str, int] | None = None
           ) -> dict[str, Split]:
    """Each dense layer's split (layers absent: not dense). `forced`: ``1`` (never
    split) or ``{layer: s}`` overrides the cost model; a forced split the layer cannot
    take is an error naming the constraint."""
    if isinstance(forced, bool) or not (forced is None or isinstance(forced, (int, Mapping))):
        raise CompileError(f"split must be None (the cost model), 1 (never) or a mapping "
                           f"of layer name to tile groups, not {forced!r}")
    if isinstance(forced, int) and forced != 1:
        raise CompileError(f"split={forced}: a number splits no layer in particular; give "
                           f"1 (never split) or {{layer name: {forced}}}")
    if isinstance(forced, Mapping):
        names = {n.name for n in graph.nodes}
        unknown = sorted(set(forced) - names)
        if unknown:
            raise CompileError(f"split: graph {graph.name!r} has no layer(s) "
                               f"{', '.join(map(repr, unknown))}; its layers are "
                               f"{', '.join(map(repr, sorted(names)))}")
        for who, s in forced.items():
            if not isinstance(s, int) or isinstance(s, bool) or s < 1:
                raise CompileError(f"split: layer {who!r}: tile groups must be a "
                                   f"positive integer, not {s!r}")
            op = graph.node(who).op
            if type(op) is not Dense and s != 1:
                raise CompileError(f"split: layer {who!r} is a {type(op).__name__}; only "
                                   f"dense layers run in tile groups")
    out: dict[str, Split] = {}
    for chain in chains(graph):
        names = [n.name for n in chain]
        last = chain[-1]
        M = graph.tensor(last.outputs[0]).shape[0]
        refusals = {s: _refusal(cfg, graph, chain, s) for s in group_counts(cfg)[1:]}

        # a layer alone of one weight block: its passes modelled, not only its
        # busiest unit (the passes' fill decides between close numbers of groups)
        lone = len(graph.nodes) == 1 and last.op.N <= cfg.cols and sum(
            layout.blocks(graph.tensor(t).shape[1], cfg.rows) for t in last.inputs) == 1

        def cost(s: int) -> int:
            if lone:
                return lone_estimate(cfg, graph, last, s)
            return sum(estimate_split(cfg, M, graph.tensor(n.outputs[0]).dtype, s,
                                loads=i == 0, stores=n is last, N=n.op.N)
                       for i, n in enumerate(chain))
        estimates = {1: cost(1)}
        estimates.update({s: cost(s) for s, why in refusals.items() if why is None})
        asked: dict[int, str] = {}      # tile groups -> the first layer asking them
        if isinstance(forced, Mapping):
            for n in names:
                if n in forced:
                    asked.setdefault(forced[n], n)
        if len(asked) > 1:
            (s1, n1), (s2, n2) = list(asked.items())[:2]
            raise CompileError(f"split: layers {n1!r} and {n2!r} are one chain of dense "
                               f"layers ({', '.join(map(repr, names))}), split as one; "
                               f"they cannot take {s1} and {s2} tile groups: give both "
                               f"the same")
        members = tuple(names) if len(chain) > 1 else ()
        chained = f"; one chain with {', '.join(map(repr, names))}" if members else ""
        if asked:
            ((s, who),) = asked.items()
            why = None if s == 1 else _refusal(cfg, graph, chain, s)
            if why is not None:
                raise CompileError(f"split: layer {who!r} cannot run in "
                                   f"{groups(cfg, s)}: {why}")
            choice = Split(s, estimates, "as asked" + chained, members)
        elif forced == 1:
            choice = Split(1, estimates, "split=1 was asked", members)
        else:
            best = min(estimates, key=lambda s: (estimates[s], s))
            larger = [s for s in refusals if s > best]
            if larger and refusals[larger[0]] is not None:
                why = f"not {larger[0]} groups: {refusals[larger[0]]}"
            elif larger:
                why = f"{best} groups estimate {estimates[best]} cycles, {larger[0]} " \
                      f"groups {estimates[larger[0]]}"
            else:
                why = "the array has no more diagonal groups" if best > 1 else \
                    "the array has one group"
            choice = Split(best, estimates, why + (chained if best > 1 else ""), members)
        out.update({n: choice for n in names})
    return out


def pack_input(cfg: ChipConfig, a: np.ndarray, s: int) -> np.ndarray:
    """``A[M, K]`` -> ``A'[M_s, R]``: row ``m`` holds ``A[g*M_s + m]`` at columns
    ``g*group_rows``."""
    M, K = a.shape
    m, width = rows(M, s), group_rows(cfg, s)
    out = np.zeros((m, cfg.rows), dtype=a.dtype)
    for g in range(s):
        part = a[g * m:(g + 1) * m]
        out[:part.shape[0], g * width:g * width + K] = part
    return out


def pack_weights(cfg: ChipConfig, w: np.ndarray, s: int, kw: int | None = None
                 ) -> np.ndarray:
    """``W[K, N]`` -> the block-diagonal ``W'[R, C]``, group ``g``'s block at rows
    ``g*kw`` (the columns its inputs are in: ``group_rows`` for a packed graph input,
    ``group_cols`` for the layer before's output in a chain) and columns
    ``g*group_cols``."""
    K, N = w.shape
    kw, nw = group_rows(cfg, s) if kw is None else kw, group_cols(cfg, s)
    out = np.zeros((cfg.rows, cfg.cols), dtype=w.dtype)
    for g in range(s):
        out[g * kw:g * kw + K, g * nw:g * nw + N] = w
    return out


def pack_bias(cfg: ChipConfig, bias: np.ndarray, s: int) -> np.ndarray:
    """``bias[N]`` -> ``bias'[C]``, one copy per group."""
    nw = group_cols(cfg, s)
    out = np.zeros(cfg.cols, dtype=bias.dtype)
    for g in range(s):
        out[g * nw:g * nw + bias.shape[0]] = bias
    return out


def unpack_output(cfg: ChipConfig, y: np.ndarray, M: int, N: int, s: int) -> np.ndarray:
    """``out'[M_s, C]`` -> ``out[M, N]``."""
    nw = group_cols(cfg, s)
    parts = [y[:, g * nw:g * nw + N] for g in range(s)]
    return np.concatenate(parts, axis=0)[:M].copy()


def params(cfg: ChipConfig, graph: Graph, node: Node, s: int
           ) -> list[tuple[str, np.ndarray]]:
    """A split layer's parameters in the DRAM layouts: the block-diagonal weights,
    then the bias, one copy per group (the keys of ``DenseRule.params``). A layer that
    reads the one before's packed output (in a chain) has its blocks at that layer's
    group columns."""
    layer = node.op
    # the layer before's outputs lie at its group columns, unless its VRUN packed
    # them into the input's R/s columns (a wide grid whose sides divide)
    kw = group_cols(cfg, s) if graph.producer(node.inputs[0]) is not None \
        and not packs_inner(cfg) else None
    out = [("weights", layout.pack_weights(cfg, pack_weights(cfg, layer.weights, s, kw)))]
    if layer.bias is not None:
        out.append(("bias", layout.pack_bias(cfg, pack_bias(cfg, layer.bias, s))))
    return out
