"""The software pipeliner: the program order it makes from a loop nest (compared op by
op against the expected order), the moves a dependency forbids, and its own check."""

import numpy as np
import pytest

from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Opcode
from systolica.compiler import Dense, Network, gemm, plan_memory
from systolica.compiler.errors import InternalError
from systolica.compiler.graph.graph import as_graph
from systolica.compiler.lowering.emitter import Emitter
from systolica.compiler.lowering.registry import rule_for
from systolica.compiler.microops.ir import make
from systolica.compiler.scheduling import pipeline as pipeliner
from systolica.compiler.scheduling.pipeline import Block, Step, loop_order, pipeline

CFG = preset("tiny")
R = CFG.rows


def emitted(net):
    graph = as_graph(net)
    em = Emitter.for_plan(CFG, graph, plan_memory(CFG, graph))
    return [blk for i, n in enumerate(graph.nodes) for blk in rule_for(n).emit(em, i, n)]


def labels(blocks):
    """``id(op) -> "b<block>.<part>"``: bias, s<step>.w / .a / .wload / .mm, vrun, store."""
    out = {}
    for b, blk in enumerate(blocks):
        for m in blk.bias:
            out[id(m)] = f"b{b}.bias"
        for s, st in enumerate(blk.steps):
            dmas = iter(("w", "a"))
            for m in st.loads:
                out[id(m)] = f"b{b}.s{s}." + (next(dmas) if m.op is Opcode.DMA else "wload")
            out[id(st.matmul)] = f"b{b}.s{s}.mm"
        for m in blk.epilogue:
            out[id(m)] = f"b{b}." + ("vrun" if m.op is Opcode.VRUN else "store")
    return out


def order(blocks, ops):
    names = labels(blocks)
    return [names[id(m)] for m in ops]


def test_loads_run_a_step_ahead_and_epilogues_a_block_behind():
    blocks = emitted(gemm(np.ones((5, 2 * R)), np.ones((2 * R, 2 * R)), np.ones(2 * R)))
    assert order(blocks, loop_order(blocks)) == [
        "b0.bias", "b0.s0.w", "b0.s0.a", "b0.s0.wload", "b0.s0.mm",
        "b0.s1.w", "b0.s1.a", "b0.s1.wload", "b0.s1.mm", "b0.vrun", "b0.store",
        "b1.bias", "b1.s0.w", "b1.s0.wload", "b1.s0.mm", "b1.s1.w", "b1.s1.wload",
        "b1.s1.mm", "b1.vrun", "b1.store"]
    assert order(blocks, pipeline(CFG, blocks)) == [
        "b0.s0.w", "b0.s0.a", "b0.bias", "b1.bias", "b0.s0.wload",
        "b0.s1.w", "b0.s1.a", "b0.s1.wload", "b0.s0.mm",
        "b1.s0.w", "b1.s0.wload", "b0.s1.mm",
        "b1.s1.w", "b1.s1.wload", "b1.s0.mm", "b0.vrun", "b0.store",
        "b1.s1.mm", "b1.vrun", "b1.store"]


def test_a_layer_boundary_drains_the_epilogue_before_the_next_layer_computes():
    blocks = emitted(Network(np.ones((4, R)), [Dense(np.ones((R, R))),
                                               Dense(np.ones((R, R)))]))
    assert order(blocks, pipeline(CFG, blocks)) == [
        "b0.s0.w", "b0.s0.a", "b0.s0.wload", "b1.s0.w", "b1.s0.wload", "b0.s0.mm",
        "b0.vrun", "b1.s0.mm", "b1.vrun", "b1.store"]


def _dma(buf):
    return make(CFG, Opcode.DMA, kind=DmaKind.LOAD_CBUF, dram_addr=0, dram_stride=1,
                buf_addr=buf, rows=5)


def _step(buf, w_addr, bank, accumulate):
    return Step([_dma(buf), make(CFG, Opcode.WLOAD, w_addr=w_addr, bank=bank)],
                make(CFG, Opcode.MATMUL, act_addr=buf, rows=5, acc_addr=0,
                     accumulate=accumulate, bank=bank))


def test_loads_that_overwrite_what_a_matmul_reads_stay_behind_it():
    apart = [Block(0, steps=[_step(100, 0, 0, 0), _step(200, 8, 1, 1)])]
    same = [Block(0, steps=[_step(100, 0, 0, 0), _step(100, 8, 1, 1)])]
    assert order(apart, pipeline(CFG, apart)) == [
        "b0.s0.w", "b0.s0.wload", "b0.s1.w", "b0.s1.wload", "b0.s0.mm", "b0.s1.mm"]
    assert order(same, pipeline(CFG, same)) == [
        "b0.s0.w", "b0.s0.wload", "b0.s0.mm", "b0.s1.w", "b0.s1.wload", "b0.s1.mm"]


def _block(layer, buf, bank, acc, epilogue_dst):
    """One step reading `buf` into ACC rows `acc`, and a VRUN from there to `epilogue_dst`."""
    load = Step([_dma(buf), make(CFG, Opcode.WLOAD, w_addr=8 * bank, bank=bank)],
                make(CFG, Opcode.MATMUL, act_addr=buf, rows=5, acc_addr=acc, accumulate=0,
                     bank=bank))
    return Block(layer, steps=[load], epilogue=[
        make(CFG, Opcode.VRUN, src=acc, rows=5, dst=epilogue_dst, to_acc=0)])


def test_next_block_loads_wait_for_an_epilogue_that_uses_their_rows():
    apart = [_block(0, 100, 0, 0, 300), _block(1, 400, 1, 50, 600)]
    same = [_block(0, 100, 0, 0, 300), _block(1, 300, 1, 50, 600)]   # loads over its output
    assert order(apart, pipeline(CFG, apart)) == [
        "b0.s0.w", "b0.s0.wload", "b1.s0.w", "b1.s0.wload", "b0.s0.mm", "b0.vrun",
        "b1.s0.mm", "b1.vrun"]
    assert order(same, pipeline(CFG, same)) == [
        "b0.s0.w", "b0.s0.wload", "b0.s0.mm", "b0.vrun", "b1.s0.w", "b1.s0.wload",
        "b1.s0.mm", "b1.vrun"]


def test_the_pipelined_order_is_checked_against_the_loop_order(monkeypatch):
    blocks = [Block(0, steps=[_step(100, 0, 0, 0), _step(200, 8, 1, 1)])]
    monkeypatch.setattr(pipeliner, "_reorder", lambda blks: loop_order(blks)[::-1])
    with pytest.raises(InternalError, match="reordering moved"):
        pipeline(CFG, blocks)


def test_a_block_without_a_matmul_keeps_its_place():
    """A Concat's block (no steps) between two layers: the layers before and after are
    pipelined each on their own, the block's ops stay between them."""
    move = make(CFG, Opcode.DMA, kind=DmaKind.STORE_CBUF, dram_addr=0, dram_stride=1,
                buf_addr=300, rows=5)
    blocks = [_block(0, 100, 0, 0, 300), Block(1, epilogue=[move]),
              _block(2, 400, 1, 50, 600)]
    ops = pipeline(CFG, blocks)
    assert ops.index(move) == len(loop_order(blocks[:1]))
    assert ops[ops.index(move) + 1:] == pipeline(CFG, blocks[2:])


def test_hoist_moves_a_following_block_behind_its_layer():
    """A step-less block that follows layer 0 joins the epilogue of layer 0's last
    block; one that follows nothing, or a layer without steps, stays where it is."""
    move = make(CFG, Opcode.DMA, kind=DmaKind.STORE_CBUF, dram_addr=0, dram_stride=1,
                buf_addr=300, rows=5)
    stay = make(CFG, Opcode.DMA, kind=DmaKind.STORE_CBUF, dram_addr=9, dram_stride=1,
                buf_addr=600, rows=5)
    first, second = _block(0, 100, 0, 0, 300), _block(1, 400, 1, 50, 600)
    vrun = first.epilogue[0]
    blocks = pipeliner.hoist([first, second, Block(2, epilogue=[move], follows=0),
                              Block(2, epilogue=[stay])])
    assert blocks == [first, second, blocks[2]] and blocks[2].epilogue == [stay]
    assert first.epilogue == [vrun, move]
    lone = Block(3, epilogue=[stay], follows=7)
    assert pipeliner.hoist([second, lone]) == [second, lone]
