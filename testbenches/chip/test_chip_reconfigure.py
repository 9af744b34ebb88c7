"""Mid-program reconfiguration on the RTL: two GEMM phases issue back to back, the
second with its activation partitions, weight partitions and partial-sum outputs
re-routed. The compiler derives the update windows from the schedule and places the
SETCFGs inside them; results and cycle count match the golden model, numpy and the
prediction, and the phases leave no idle cycle between them."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch import isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Opcode
from systolica.arch.loadable import Loadable
from systolica.compiler.microops.ir import make
from systolica.compiler.scheduling.reconfigure import add_updates, windows
from systolica.compiler.scheduling.schedule import schedule

from chip_runs import run_on_rtl

pytestmark = pytest.mark.rtl

CFG = preset("tiny")
R, M = CFG.rows, 16
SWAP_ROWS = {"west_feed[0]": "cbuf.g1", "west_feed[1]": "cbuf.g0"}
SWAP_WEIGHTS = {"north_feed[0]": "cbuf.g1", "north_feed[1]": "cbuf.g0"}
SWAP_OUTPUTS = {"acc_src[0]": "col.g1", "acc_src[1]": "col.g0"}
# The weights sit in the bank after the activations': the weight loader and the feeder
# each need a bank's one read port (docs/contract.md, "CBUF banks").
W1 = CFG.cbuf_bank_rows
W2 = W1 + R


def _program():
    def dma(kind, dram, buf, rows):
        return make(CFG, Opcode.DMA, kind=kind, dram_addr=dram, dram_stride=1 if
                    kind == DmaKind.LOAD_CBUF else CFG.acc_row_words, buf_addr=buf, rows=rows)
    wload2 = make(CFG, Opcode.WLOAD, w_addr=W2, bank=1)
    wload2.needs = dict(SWAP_WEIGHTS)
    mm2 = make(CFG, Opcode.MATMUL, act_addr=0, rows=M, acc_addr=M, accumulate=0, bank=1)
    mm2.needs = {**SWAP_ROWS, **SWAP_OUTPUTS}
    ops = [dma(DmaKind.LOAD_CBUF, 0, 0, M), dma(DmaKind.LOAD_CBUF, 64, W1, R),
           dma(DmaKind.LOAD_CBUF, 80, W2, R),
           make(CFG, Opcode.WLOAD, w_addr=W1, bank=0),
           make(CFG, Opcode.MATMUL, act_addr=0, rows=M, acc_addr=0, accumulate=0, bank=0),
           wload2, mm2,
           make(CFG, Opcode.VRUN, src=0, rows=2 * M, dst=0, to_acc=1),
           dma(DmaKind.STORE_ACC, 200, 0, 2 * M)]
    cycles, updates = add_updates(CFG, ops, schedule(CFG, ops))
    program = sorted([op.instr(c) for op, c in zip(ops, cycles)] + [u for u, _ in updates],
                     key=lambda i: i.cycle)
    return ops, cycles, program


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (M, R), dtype=np.int8)
    w1 = rng.integers(-128, 128, (R, R), dtype=np.int8)
    w2 = rng.integers(-128, 128, (R, R), dtype=np.int8)
    dram = np.zeros((CFG.dram_words, R), np.uint8)
    dram[0:M], dram[64:64 + R], dram[80:80 + R] = (x.view(np.uint8) for x in (a, w1, w2))
    ops, cycles, program = _program()
    image = isa.to_bytes([isa.encode(i) for i in program])
    res = run_on_rtl(CFG, image, dram, readback=[(200, 2 * M * CFG.acc_row_words)])
    return a, w1, w2, dram, ops, cycles, program, image, res


def test_phases_run_back_to_back(case):
    *_, ops, cycles, program, image, res = case
    mm = [c for op, c in zip(ops, cycles) if op.op is Opcode.MATMUL]
    assert mm[1] == mm[0] + M, "no idle cycle between the two GEMM phases"
    sets = [i for i in program if i.op is Opcode.SETCFG]
    assert any(mm[0] < i.cycle < mm[1] + timing.matmul_pipeline(CFG) for i in sets), \
        "some SETCFG lands while the first phase is still in flight"


def test_updates_sit_inside_their_windows(case):
    *_, ops, cycles, program, image, res = case
    placed = {}
    for ins in program:
        if ins.op is Opcode.SETCFG:
            for index, value in isa.setcfg_pairs(ins.fields):
                placed.setdefault((index, value), []).append(ins.cycle)
    from systolica.arch import fabric
    table = fabric.by_name(CFG)
    for w, name, value, _ in windows(CFG, ops, cycles):
        assert any(w.lo <= c <= w.hi for c in placed[(table[name].index, value)]), str(w)


def test_results_match_golden_numpy_and_prediction(case):
    a, w1, w2, dram, ops, cycles, program, image, res = case
    assert res.error_name == "NONE"
    gold = golden.run(CFG, Loadable.for_chip(CFG, image, dram))
    got = res.readback[0].reshape(2 * M, 4 * R).view("<i4")
    want_gold = gold.dram[200:200 + 2 * M * CFG.acc_row_words].reshape(2 * M, 4 * R).view("<i4")
    np.testing.assert_array_equal(got, want_gold)
    perm = np.r_[R // 2:R, 0:R // 2]                      # swap the two partition groups
    phase1 = a.astype(np.int64) @ w1.astype(np.int64)
    phase2 = (a[:, perm].astype(np.int64) @ w2[:, perm].astype(np.int64))[:, perm]
    np.testing.assert_array_equal(got[:M], phase1)
    np.testing.assert_array_equal(got[M:], phase2)
    assert res.cycles == gold.cycles == timing.run_cycles(CFG, program)
