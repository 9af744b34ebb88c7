"""The software pipeliner: a layer's loop nest, as the lowering rules emit it, into
the program order that lets loads, compute and stores overlap. Entry point:
:func:`pipeline`; the result is checked against the plain loop order by
``ir.verify_reorder`` (it must keep every conflicting pair in order).

The loop nest is a list of :class:`Block`: one output block (an N-block of one
M-chunk of one layer), its bias load, its steps (one weight block each: the loads and
the MATMUL they feed) and its epilogue (vector unit and stores).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from systolica.arch.config import ChipConfig
from systolica.arch.isa import Opcode
from systolica.compiler.errors import InternalError
from systolica.compiler.microops.ir import MicroOp, conflict, verify_reorder


@dataclass
class Step:
    loads: list[MicroOp]      # DMAs (weight block, activations) and the WLOAD
    matmul: MicroOp


@dataclass
class Block:
    layer: int                # index of the layer in graph order
    bias: list[MicroOp] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    epilogue: list[MicroOp] = field(default_factory=list)
    follows: int | None = None   # a block without steps whose ops may run as soon as
                                 # layer `follows` (its pass from row m0) is done
    m0: int | None = None        # the first row of the pass it belongs to, if in passes


def hoist(blocks: list[Block]) -> list[Block]:
    """`blocks` with each step-less block that ``follows`` an earlier layer's blocks
    moved into the epilogue of that layer's last block (of its pass ``m0``, if the
    block names one): a Concat's moves of an input's rows right after the layer's
    pass that makes them, so they overlap the next pass's or layer's compute."""
    last = {}
    for k, blk in enumerate(blocks):
        if blk.steps:
            last[blk.layer] = last[(blk.layer, blk.m0)] = k
    out: list[Block] = []
    for blk in blocks:
        key = blk.follows if blk.m0 is None else (blk.follows, blk.m0)
        at = last.get(key) if blk.follows is not None and not blk.steps else None
        if at is None:
            out.append(blk)
            continue
        blocks[at].epilogue = blocks[at].epilogue + blk.bias + blk.epilogue
    return out


def loop_order(blocks: list[Block]) -> list[MicroOp]:
    """The ops in plain loop-nest order: what the program computes."""
    out: list[MicroOp] = []
    for blk in blocks:
        out += blk.bias
        for st in blk.steps:
            out += st.loads
            out.append(st.matmul)
        out += blk.epilogue
    return out


def _any_conflict(xs: list[MicroOp], ys: list[MicroOp]) -> bool:
    return any(conflict(x, y) for x in xs for y in ys)


def _reorder(blocks: list[Block]) -> list[MicroOp]:
    """The loads of step s+1 before the MATMUL of step s (and, at a block boundary,
    before the block's epilogue), an N-block's epilogue after the first MATMUL of the
    next N-block of the same layer, the bias of N-block b+1 right after the epilogue
    that frees its slot. A move is made only when the ops moved past each other are
    independent."""
    steps = [(b, st) for b, blk in enumerate(blocks) for st in blk.steps]
    first = steps[0][1]
    out = [m for m in first.loads if m.op is Opcode.DMA]
    for blk in blocks[:2]:
        out += blk.bias
    out += [m for m in first.loads if m.op is not Opcode.DMA]
    held: list[MicroOp] = []        # loads that must wait for the previous epilogue
    for i, (b, st) in enumerate(steps):
        pending: list[MicroOp] = []
        if b > 0 and st is blocks[b].steps[0]:
            pending = blocks[b - 1].epilogue + (blocks[b + 1].bias if b + 1 < len(blocks)
                                                else [])
        nxt = steps[i + 1][1].loads if i + 1 < len(steps) else []
        if pending and (held or blocks[b - 1].layer != blocks[b].layer
                        or _any_conflict(pending, [st.matmul] + nxt)):
            out += pending
            pending = []
        out += held
        held = []
        if i + 1 < len(steps) and steps[i + 1][0] != b \
                and _any_conflict(nxt, blocks[b].epilogue):
            out.append(st.matmul)
            held = nxt
        elif _any_conflict(nxt, [st.matmul]):
            out += [st.matmul] + nxt
        else:
            out += nxt + [st.matmul]
        out += pending
    out += blocks[-1].epilogue
    return out


def pipeline(cfg: ChipConfig, blocks: list[Block]) -> list[MicroOp]:
    """The software-pipelined program order of `blocks`, verified to compute what
    the loop nest does."""
    if not blocks:
        raise InternalError("nothing to pipeline")
    # A block without MATMUL steps (a Concat's ROUTEs) keeps its place: the runs of
    # blocks with steps between such blocks are pipelined each on their own.
    ops: list[MicroOp] = []
    run: list[Block] = []
    for blk in blocks + [None]:
        if blk is not None and blk.steps:
            run.append(blk)
            continue
        if run:
            ops += _reorder(run)
            run = []
        if blk is not None:
            ops += blk.bias + blk.epilogue
    verify_reorder(cfg, loop_order(blocks), ops)
    return ops
