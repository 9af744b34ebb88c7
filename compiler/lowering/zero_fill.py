"""Zero fill: every CBUF row a west load reads is written before it.

A WLOAD shifts ``weight_rows`` CBUF rows into a weight bank, whatever its block
holds: past a transpose's ragged block, past the last rows of ``b`` in ``A·Bᵀ``, and
on a tall or wide grid past a sub-block, it reads rows the array never computes
with as data (they land in partitions nobody reads, or meet zero weights). But the
chip reads them, and a reset clears no memory: a program whose west load reads a
row nothing wrote depends on what the program before it left there (the golden
model refuses it, docs/contract.md "CBUF, ACC and weight banks at reset").

:func:`zero_fill` walks a program's blocks in loop order (what the program computes,
:func:`~systolica.compiler.scheduling.pipeline.loop_order`), keeping the CBUF rows
written so far, and puts before each west load one DMA per run of the rows it would
read unwritten: a layer's DRAM word of zeros (:func:`zeros_param`) at stride 0. A
row once written stays defined, so each is written at most once. The rows are the
layer's to write: its rules give them room (a transpose's slots and identity, a
tensor's region padded by :meth:`.Rule.reads_past`); the schedule verifier checks
every write lies in a live region.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.arch.instructions import WRITE
from systolica.arch.isa import DmaKind, Opcode
from systolica.compiler.errors import InternalError
from systolica.compiler.microops.ir import MicroOp
from systolica.compiler.scheduling.pipeline import Block

#: The key of a layer's DRAM word of zeros among its parameters.
ZEROS = "zeros"


def zeros_param(cfg: ChipConfig) -> tuple[str, np.ndarray]:
    """The parameter a layer whose west loads may read rows past its blocks adds: one
    DRAM word of zeros."""
    return ZEROS, np.zeros((1, cfg.rows), dtype=np.uint8)


def zero_word(params: Mapping[tuple[str, str], tuple[int, int]]) -> int | None:
    """The DRAM address of a zero word among a program's parameters (``(address,
    words)`` keyed ``(layer, what)``, as :class:`~.planning.memory.DramMap` holds
    them), None if it has none."""
    return next((at for (_, what), (at, _) in params.items() if what == ZEROS), None)


def zero_fill(cfg: ChipConfig, blocks: list[Block], em, zeros: int | None) -> None:
    """Put the zero fills in `blocks` (in place), made by `em` (the lowering's
    :class:`~.emitter.Emitter`) from the DRAM word `zeros`."""
    written = np.zeros(cfg.cbuf_physical_rows, dtype=bool)
    wr = cfg.weight_rows

    def wrote(mop: MicroOp) -> None:
        for a in mop.accesses:
            if a.resource == "cbuf" and a.mode == WRITE:
                written[a.lo:a.hi] = True

    def fills(wload: MicroOp) -> list[MicroOp]:
        lo = wload.fields["w_addr"]
        missing = ~written[lo:lo + wr]
        if not missing.any():
            return []
        if zeros is None:
            raise InternalError(
                f"{wload} (layer {wload.layer}) reads CBUF rows nothing has written, "
                f"and the program has no zero word to write them with: its rule must "
                f"add zeros_param to its parameters")
        # runs of unwritten rows: (first, rows)
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
