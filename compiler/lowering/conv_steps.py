"""A convolution's weight steps from a mapping (docs/matching.md): each step one MATMUL
invocation; array row ``p`` reads, at its own tap, byte ``p`` of the source's word (in
the ``blocks`` layout input channel ``cb*R + p``, in the ``replicated`` layout channel
``p % Cin`` of replica ``p // Cin``); column ``j`` of N-block ``n`` is output channel
``n*C + j``. A row or column the mapping leaves without a workload element is a dummy:
its weight is 0, the neutral element of the sum."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from systolica.arch import isa
from systolica.arch.config import ChipConfig
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.graph import Graph, Node
from systolica.compiler.graph.ops import Conv2d
from systolica.compiler.lowering.maps.jobs import Job, Source, WStep, channel_params, fits_int32
from systolica.compiler.matching import realisable
from systolica.compiler.matching.mapping import Mapping
from systolica.compiler.matching.match import workload_of
from systolica.compiler.planning import layout

#: The largest tap offset a MATMUL names (its dh/dw fields).
TAP_MAX = (1 << isa.TAP_BITS) - 1


@dataclass(frozen=True)
class Invocation:
    """One weight step: the source's channel block `cb` (0 in the replicated layout),
    the tap each replica reads (a tap past the kernel's edge: a dummy replica), and the
    groups whose weights it holds (None: every group)."""
    cb: int
    taps: tuple[tuple[int, int], ...]
    groups: frozenset[int] | None = None


def tap_groups(op: Conv2d, mapping: Mapping) -> list[tuple[tuple[int, int], ...]]:
    """The kernel taps each invocation's replicas read, as the mapping's rows say:
    ``t`` (taps linearised, ``a`` consecutive ones per invocation, the last group
    shorter), ``kh x kw`` (an ``a x b`` rectangle per invocation, its replicas past the
    kernel's edge dummies, so that every invocation has one tap pattern), or neither
    (one tap per invocation)."""
    KH, KW = op.kernel
    rows = mapping.dims("rows")
    if "t" in rows:
        a = mapping.extent("t")
        taps = [(kh, kw) for kh in range(KH) for kw in range(KW)]
        return [tuple(taps[j:j + a]) for j in range(0, len(taps), a)]
    a, b = mapping.extent("kh"), mapping.extent("kw")
    return [tuple((h, w) for h in range(h0, h0 + a) for w in range(w0, w0 + b))
            for h0 in range(0, KH, a) for w0 in range(0, KW, b)]


def invocations(cfg: ChipConfig, op: Conv2d, mapping: Mapping, src: Source,
                outs: range) -> list[Invocation]:
    """The invocations of the N-block of output channels `outs`, in the order they
    accumulate."""
    R = cfg.rows
    cin_g = op.weights.shape[2]
    cout_g = op.Cout // op.groups
    mine = sorted({o // cout_g for o in outs})
    # the static strategy takes one group per invocation; the matcher's packings take
    # every group the N-block holds at once (block-diagonal weights)
    if op.groups == 1:
        units = [None]
    elif mapping.origin == "static":
        units = [frozenset({g}) for g in mine]
    else:
        units = [frozenset(mine)]
    groups = tap_groups(op, mapping)
    out = []
    for unit in units:
        if mapping.layout == "replicated":
            out += [Invocation(0, taps, unit) for taps in groups]
            continue
        for cb in range(src.blocks(R)):
            first, last = cb * R, min((cb + 1) * R, op.Cin) - 1
            if unit is not None and not unit & set(range(first // cin_g, last // cin_g + 1)):
                continue
            out += [Invocation(cb, (tap,), unit) for taps in groups for tap in taps]
    return out


def weight_block(cfg: ChipConfig, op: Conv2d, inv: Invocation, src: Source,
                 outs: range) -> np.ndarray:
    """The ``R x max(R, C)`` weights of one invocation: row ``p`` x column ``j``, 0 for a
    dummy and between groups the invocation does not pair."""
    R, (KH, KW) = cfg.rows, op.kernel
    w = op.weights
    cin_g, cout_g = w.shape[2], op.Cout // op.groups
    o = np.arange(outs.start, outs.stop)
    if src.copies > 1:              # replica r: rows r*Cin .., every channel at its tap
        parts = [(r * op.Cin, tap, np.arange(op.Cin)) for r, tap in enumerate(inv.taps)]
    else:                           # channel block cb at the one tap
        first = inv.cb * R
        parts = [(0, inv.taps[0], np.arange(first, min(first + R, op.Cin)))]
    blk = np.zeros((R, cfg.weight_rows), dtype=np.int64)
    for p0, (kh, kw), c in parts:
        if kh >= KH or kw >= KW:
            continue                # a dummy replica
        if op.groups == 1:          # every row pairs with every column: a plain slice
            blk[p0:p0 + len(c), :len(o)] = w[kh, kw, c[0]:c[-1] + 1, outs.start:outs.stop]
            continue
        g = c // cin_g
        mine = g[:, None] == (o // cout_g)[None, :]
        if inv.groups is not None:  # only the groups this invocation holds
            mine &= np.isin(g, sorted(inv.groups))[:, None]
        blk[p0:p0 + len(c), :len(o)] = np.where(mine, w[kh, kw][np.ix_(c % cin_g, o)], 0)
    return blk


def step_taps(op: Conv2d, taps: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """The window offsets (``kernel index x dilation``) a step's replicas read; a
    dummy's offset past what a MATMUL names becomes the first tap's (its weights are
    0: what it reads does not count)."""
    dil = op.dilation
    offsets = [(kh * dil[0], kw * dil[1]) for kh, kw in taps]
    return tuple(t if max(t) <= TAP_MAX else offsets[0] for t in offsets)


def unlowerable(cfg: ChipConfig, graph: Graph, node: Node, mapping: Mapping,
                copies: int) -> str | None:
    """Why the code generator cannot lower `mapping` of `node` reading an input of
    `copies` replicas (None: it can): the realisability table (docs/matching.md,
    :func:`~systolica.compiler.matching.realisable.check`), and the input's layout."""
    if (mapping.layout == "replicated") != (copies > 1):
        return f"it reads the {mapping.layout} layout, the input has {copies} replicas"
    return realisable.check(mapping, workload_of(graph, node), cfg.rows, cfg.cols)


def conv_job(cfg: ChipConfig, graph: Graph, index: int, node: Node, src: Source,
             mapping: Mapping) -> Job:
    """A convolution as a job of the tile loop, its steps the invocations of `mapping`
    (docs/matching.md)."""
    op: Conv2d = node.op
    why = unlowerable(cfg, graph, node, mapping, src.copies)
    if why:
        raise CompileError(f"layer {node.name!r}: mapping {mapping.describe()} cannot be "
                           f"lowered: {why}; see docs/matching.md for what the array takes")
    KH, KW, _, Cout = op.weights.shape
    out = graph.tensor(node.outputs[0])
    C = cfg.cols             # an N-block: one ACC row of C output channels
    nb = layout.blocks(Cout, C)
    blocks, steps = [], []
    for n in range(nb):
        outs = range(n * C, min((n + 1) * C, Cout))
        mine = []
        for inv in invocations(cfg, op, mapping, src, outs):
            mine.append(WStep(0, inv.cb, step_taps(op, inv.taps), len(blocks)))
            blocks.append(weight_block(cfg, op, inv, src, outs))
        steps.append(mine)
    x_zp = graph.tensor(node.inputs[0]).quant.zero_point
    w_sum = grouped_sum(op)
    Ho, Wo = out.shape[1], out.shape[2]
    job = Job(node.name, index, [src], (KH, KW), op.stride, op.pads, op.dilation,
              x_zp & 0xFF, out.shape, op.out_dtype, steps, np.stack(blocks).astype(np.int8),
              macs=out.shape[0] * Ho * Wo * KH * KW * op.weights.shape[2] * Cout, span=C)
    job.mapping = mapping
    if op.out_dtype == "int32":
        # the accumulator is the output: the vector unit adds the bias (the input zero
        # point folded in) in place, and the rows are stored as they are
        bias = np.zeros(Cout, dtype=np.int64) if op.bias is None else op.bias.astype(np.int64)
        bias = bias - x_zp * w_sum
        fits_int32(node.name, bias)
        job.post = "bias"
        job.post_rows = np.zeros((nb, C), dtype=np.int32)
        job.post_rows.reshape(-1)[:Cout] = bias
        job.vrun = dict(use_bias=1)
        return job
    job.post = "params"
    job.post_rows = channel_params(cfg, node.name, op, x_zp, w_sum, C)
    job.vrun = dict(requant=1, params=1, zp=op.zp & 0xFF)
    return job


def grouped_sum(op: Conv2d) -> np.ndarray:
    """Per output channel, the sum of its weights (over its group's input channels)."""
    return op.weights.astype(np.int64).sum(axis=(0, 1, 2))
