"""Zero fill: every CBUF row a west load reads is written before it.

A WLOAD shifts ``weight_rows`` CBUF rows into a weight bank, whatever its block
holds: past a transpose's ragged block, past the last rows of ``b`` in ``A·Bᵀ``, and
on a tall or wide grid past a sub-block, it reads rows the array never computes
with as data (they land in partitions nobody reads, or meet zero weights). But the
chip reads them, and a reset clears no memory: a program whose west load reads a
row nothing wrote depends on what the program before it left there (the golden
model refuses it, docs/contract.md "Memories at reset").

:func:`zero_fill` walks a program's blocks in loop order (what the program computes,
:func:`~systolica.compiler.scheduling.pipeline.loop_order`), keeping the CBUF rows
written so far, and puts before each west load one DMA per run of the rows it would
read unwritten: a word of zeros at stride 0, appended to the DRAM image (after the
data, before the program image) by the first fill. A row once written stays
defined, so each is written at most once. The rows are the layer's to write: its
rule gives them room (a transpose's slots and identity, a tensor's region padded by
:meth:`.Rule.reads_past`); the schedule verifier checks every write lies in a live
region.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.arch.instructions import WRITE
from systolica.arch.isa import DmaKind, Opcode
from systolica.compiler.errors import CompileError
from systolica.compiler.microops.ir import MicroOp
from systolica.compiler.planning.memory import DramMap, MemoryPlan, Region
from systolica.compiler.scheduling.pipeline import Block

#: The zero word's key among the DRAM map's parameters (a program's, not a layer's).
ZEROS = ("", "zeros")


def zero_fill(cfg: ChipConfig, blocks: list[Block], em, plan: MemoryPlan) -> MemoryPlan:
    """Put the zero fills in `blocks` (in place), made by `em` (the lowering's
    :class:`~.emitter.Emitter`); return `plan` with the zero word if they use it."""
    written = np.zeros(cfg.cbuf_physical_rows, dtype=bool)
    wr = cfg.weight_rows
    zeros = plan.dram_map.end           # the word the fills load, if any
    filled = False

    def wrote(mop: MicroOp) -> None:
        for a in mop.accesses:
            if a.resource == "cbuf" and a.mode == WRITE:
                written[a.lo:a.hi] = True

    def fills(wload: MicroOp) -> list[MicroOp]:
        nonlocal filled
        lo = wload.fields["w_addr"]
        missing = ~written[lo:lo + wr]
        if not missing.any():
            return []
        filled = True
        # runs of unwritten rows
        edges = np.flatnonzero(np.diff(np.concatenate(([0], missing.astype(np.int8), [0]))))
        out = [em.op(Opcode.DMA, wload.layer, kind=DmaKind.LOAD_CBUF, dram_addr=zeros,
                     dram_stride=0, buf_addr=lo + int(a), rows=int(b - a))
               for a, b in zip(edges[::2], edges[1::2])]
        written[lo:lo + wr] = True
        return out

    for blk in blocks:
        for mop in blk.bias:
            wrote(mop)
        for st in blk.steps:
            if any(m.op is Opcode.WLOAD for m in st.loads):
                loads = []
                for mop in st.loads:
                    if mop.op is Opcode.WLOAD:
                        loads += fills(mop)
                    loads.append(mop)
                    wrote(mop)
                st.loads[:] = loads
            else:
                for mop in st.loads:
                    wrote(mop)
            wrote(st.matmul)
        for mop in blk.epilogue:
            wrote(mop)
    return with_zero_word(cfg, plan) if filled else plan


def with_zero_word(cfg: ChipConfig, plan: MemoryPlan) -> MemoryPlan:
    """`plan` with a word of zeros after its data (:data:`ZEROS` in its DRAM map)."""
    dm = plan.dram_map
    at = dm.end
    if at + 1 > cfg.dram_words:
        raise CompileError(f"network {plan.graph.name!r}: DRAM too small by 1 word for the "
                           f"word of zeros its transposes' west loads need ({at} words "
                           f"already used by the data); the configured dram_words is "
                           f"{cfg.dram_words}")
    image = np.zeros((at + 1, cfg.rows), dtype=np.uint8)
    image[:plan.dram.shape[0]] = plan.dram
    region = Region("dram", "zeros", at, 1, 0, max(len(plan.graph.nodes) - 1, 0),
                    "a word of zeros (zero fill)")
    return dataclasses.replace(
        plan, regions=(*plan.regions, region), dram=image,
        dram_map=DramMap(dm.inputs, MappingProxyType({**dm.params, ZEROS: (at, 1)}),
                         dm.outputs, at + 1))
