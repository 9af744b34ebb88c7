"""The chip reports every fault in its status registers with the interrupt, never
hangs, and agrees with the golden model on code, program index and cycle. Fabric
multiplexers really route data: re-routed programs match the golden model and differ
from the plain routing."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch import fabric, isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Instr, Opcode
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode

from chip_runs import run_many_on_rtl

pytestmark = pytest.mark.rtl

CFG = preset("tiny")
R = CFG.rows


def dma(cycle, kind=DmaKind.LOAD_CBUF, dram_addr=0, buf_addr=0, rows=4, stride=1):
    return Instr(Opcode.DMA, cycle, dict(kind=kind, dram_addr=dram_addr, dram_stride=stride,
                                         buf_addr=buf_addr, rows=rows))


def mm(cycle, rows=4, act_addr=0, acc_addr=0):
    return Instr(Opcode.MATMUL, cycle, dict(act_addr=act_addr, rows=rows, acc_addr=acc_addr,
                                            accumulate=0, bank=0))


def image(program):
    return isa.to_bytes([w if isinstance(w, int) else isa.encode(w) for w in program])


ILLEGAL_WORD = isa.encode(Instr(Opcode.SETCFG, 3, dict(index=0, value=0))) & ~0xF | 0x9

FAULTS = {
    "illegal_zero_word": ([dma(0), 0], ErrorCode.ILLEGAL_OPCODE),
    "illegal_opcode_9": ([ILLEGAL_WORD], ErrorCode.ILLEGAL_OPCODE),
    "late_same_cycle": ([dma(0), mm(0)], ErrorCode.LATE),
    "late_going_back": ([dma(10), mm(5)], ErrorCode.LATE),
    "dma_busy": ([dma(0, rows=4), dma(3, buf_addr=8)], ErrorCode.UNIT_BUSY),
    # its operands written first (a program reads no row it did not write): a MATMUL
    # of 6 rows still busy when the next issues
    "matmul_busy": ([dma(0, rows=8), Instr(Opcode.WLOAD, 20, dict(w_addr=0, bank=0)),
                     mm(40, rows=6), mm(45, acc_addr=8)], ErrorCode.UNIT_BUSY),
    "dram_out_of_range": ([dma(0, dram_addr=CFG.dram_words - 2, rows=3)], ErrorCode.ADDR_RANGE),
    "dram_stride_out_of_range": ([dma(0, rows=3, stride=CFG.dram_words // 2)],
                                 ErrorCode.ADDR_RANGE),
    "dram_strided_one_past_the_end": ([dma(0, dram_addr=CFG.dram_words - 4 * 13, rows=5,
                                           stride=13)], ErrorCode.ADDR_RANGE),
    "acc_out_of_range": ([mm(2, acc_addr=CFG.acc_depth - 2)], ErrorCode.ADDR_RANGE),
    "cbuf_out_of_range": ([dma(0, buf_addr=CFG.cbuf_depth - 1, rows=2)], ErrorCode.ADDR_RANGE),
    "empty_range": ([mm(0, rows=0)], ErrorCode.ADDR_RANGE),
    "wload_out_of_range": ([Instr(Opcode.WLOAD, 0, dict(w_addr=CFG.cbuf_depth - 2, bank=0))],
                           ErrorCode.ADDR_RANGE),
    "vrun_params_with_relu": ([dma(0), Instr(Opcode.VRUN, 9, dict(
        src=0, rows=2, dst=0, bias_addr=0, requant=1, relu=1, params=1))],
        ErrorCode.ILLEGAL_OPCODE),
    "setcfg_no_such_mux": ([Instr(Opcode.SETCFG, 0, dict(index=100, value=0))],
                           ErrorCode.CFG_RANGE),
    # page 1 names multiplexers 128..255: none on tiny, whatever the index
    "setcfg_no_such_page": ([Instr(Opcode.SETCFG, 0, dict(index=1, value=0, page=1))],
                            ErrorCode.CFG_RANGE),
    "setcfg_no_such_source": ([Instr(Opcode.SETCFG, 1, dict(index=0, value=14))],
                              ErrorCode.CFG_RANGE),
    # tiny's fabric takes SETCFG: SETCFGW, the other format, is no instruction there
    "setcfgw_on_a_setcfg_chip": ([Instr(Opcode.SETCFGW, 1, isa.setcfg_fields(
        [(3, 1)], Opcode.SETCFGW))], ErrorCode.ILLEGAL_OPCODE),
    "setcfg_too_many_pairs": ([Instr(Opcode.SETCFG, 0, isa.setcfg_fields(
        [(i, 0) for i in (4, 6, 8, 10, 12)]))], ErrorCode.CFG_LIMIT),
    "setcfg_power_domain_budget": ([Instr(Opcode.SETCFG, 2, isa.setcfg_fields(
        [(0, 0), (1, 1), (16, 0)]))], ErrorCode.CFG_LIMIT),
    # PROG_RANGE and FETCH_LATE need a program region: test_chip_fetch.py
}


@pytest.fixture(scope="module")
def fault_runs():
    jobs = [dict(program=image(p), name=name, readback=[(0, 1)], expect_fault=True)
            for name, (p, _) in FAULTS.items()]
    return dict(zip(FAULTS, run_many_on_rtl(CFG, jobs)))


@pytest.mark.parametrize("case", list(FAULTS))
def test_fault_is_reported_like_the_golden_model(fault_runs, case):
    program, code = FAULTS[case]
    res = fault_runs[case]
    gold = golden.run(CFG, Loadable.for_chip(CFG, image(program),
                                             np.zeros((CFG.dram_words, R), np.uint8)))
    assert gold.error == code
    assert res.error == code, f"chip says {res.error_name}"
    assert res.irq and res.faulted and not res.timed_out
    assert (res.fault_pc, res.fault_cycle) == (gold.fault_pc, gold.fault_cycle)


def touch(cycle, *names):
    """A SETCFG naming the multiplexers ``names`` (each set to its reset value)."""
    muxes = fabric.by_name(CFG)
    return Instr(Opcode.SETCFG, cycle,
                 isa.setcfg_fields([(muxes[n].index, muxes[n].default) for n in names]))


#: Each instruction issued once the previous one is done: load activations and
#: weights, WLOAD at 16, MATMUL (4 rows) at 27, VRUN at 52. On ``tiny`` the MATMUL
#: holds west_feed[0] for SETCFGs at 29..31 and act_in[1][1] at 39..44, the WLOAD
#: w_in[1][0] at 18..25, the VRUN wb_src[1] at 58..60 (docs/contract.md, CFG_IN_USE).
USES = [dma(0, rows=4), dma(6, dram_addr=64, buf_addr=64, rows=R),
        Instr(Opcode.WLOAD, 16, dict(w_addr=64, bank=0)), mm(27, rows=4),
        Instr(Opcode.VRUN, 52, dict(src=0, rows=4, dst=100, bias_addr=0, use_bias=0,
                                     to_acc=0, requant=0, relu=0, mult=0, shift=0, zp=0))]

#: program, then (ERROR, FAULT_PC, FAULT_CYCLE) as the chip must report them.
IN_USE = {
    "west_feed_first_cycle": (USES[:4] + [touch(29, "west_feed[0]")],
                              (ErrorCode.CFG_IN_USE, 4, 29)),
    "act_in_last_cycle": (USES[:4] + [touch(44, "act_in[1][1]")],
                          (ErrorCode.CFG_IN_USE, 4, 44)),
    "w_in_in_a_later_pair": (USES[:3] + [touch(25, "psum_in[0][0]", "w_in[1][0]")],
                             (ErrorCode.CFG_IN_USE, 3, 25)),
    "wb_src_last_cycle": (USES + [touch(60, "wb_src[1]")],
                                 (ErrorCode.CFG_IN_USE, 5, 60)),
    "just_after_the_window": (USES[:4] + [touch(31, "act_in[1][0]"), touch(45, "act_in[1][1]")],
                              (ErrorCode.NONE, 0, 0)),
}


@pytest.fixture(scope="module")
def in_use_runs():
    jobs = [dict(program=image(p), name=name, readback=[(0, 1)],
                 expect_fault=want[0] is not ErrorCode.NONE)
            for name, (p, want) in IN_USE.items()]
    return dict(zip(IN_USE, run_many_on_rtl(CFG, jobs)))


@pytest.mark.parametrize("case", list(IN_USE))
def test_setcfg_on_a_multiplexer_in_use_faults(in_use_runs, case):
    """CFG_IN_USE stops the run at the SETCFG, with its program index and cycle; the
    cycle after the window the same SETCFG is legal. The golden model agrees."""
    program, (code, pc, cycle) = IN_USE[case]
    res = in_use_runs[case]
    gold = golden.run(CFG, Loadable.for_chip(CFG, image(program),
                                             np.zeros((CFG.dram_words, R), np.uint8)))
    assert res.irq and not res.timed_out
    assert res.error_name == code.name
    assert gold.error == code
    if code is ErrorCode.NONE:
        assert res.cycles == gold.cycles == timing.run_cycles(CFG, program)
    else:
        assert (res.fault_pc, res.fault_cycle, res.cycles) == (pc, cycle, cycle)
        assert (gold.fault_pc, gold.fault_cycle) == (pc, cycle)


def _routing_program(settings: dict[str, str]) -> tuple[list[Instr], np.ndarray]:
    """Load A and W, apply multiplexer `settings`, one MATMUL, store int32 results."""
    rng = np.random.default_rng(7)
    M = 6
    dram = np.zeros((CFG.dram_words, R), np.uint8)
    dram[0:M] = rng.integers(0, 256, (M, R), dtype=np.uint8)
    dram[64:64 + R] = rng.integers(0, 256, (R, R), dtype=np.uint8)
    muxes = fabric.by_name(CFG)
    ops = [dma(0, rows=M), dma(0, dram_addr=64, buf_addr=64, rows=R)]
    ops += [Instr(Opcode.SETCFG, 0, dict(index=muxes[name].index,
                                          value=muxes[name].value_of(src)))
            for name, src in settings.items()]
    ops += [Instr(Opcode.WLOAD, 0, dict(w_addr=64, bank=1)),
            Instr(Opcode.MATMUL, 0, dict(act_addr=0, rows=M, acc_addr=0, accumulate=0, bank=1)),
            dma(0, kind=DmaKind.STORE_ACC, dram_addr=200, buf_addr=0, rows=M, stride=4)]
    program, t = [], 0
    for op in ops:          # one after another: this test is about routing, not timing
        program.append(Instr(op.op, t, op.fields))
        t += timing.done(CFG, program[-1])
    return program, dram


ROUTINGS = {
    "plain": {},
    "swap_west_feeds": {"west_feed[0]": "cbuf.g1", "west_feed[1]": "cbuf.g0"},
    "swap_acc_columns": {"acc_src[0]": "col.g1", "acc_src[1]": "col.g0"},
    "split_reduction": {"psum_in[1][0]": "zero"},
    "gate_activations": {"act_in[0][1]": "zero"},
    "gate_weights": {"w_in[1][1]": "zero", "north_feed[0]": "cbuf.g1"},
}


@pytest.fixture(scope="module")
def routing_runs():
    built = {name: _routing_program(s) for name, s in ROUTINGS.items()}
    jobs = [dict(program=image(p), dram=d, name=name, readback=[(200, 4 * 6)])
            for name, (p, d) in built.items()]
    return {name: (built[name], res) for name, res in zip(built, run_many_on_rtl(CFG, jobs))}


@pytest.mark.parametrize("case", list(ROUTINGS))
def test_fabric_routing_matches_golden(routing_runs, case):
    (program, dram), res = routing_runs[case]
    gold = golden.run(CFG, Loadable.for_chip(CFG, image(program), dram))
    assert res.error_name == "NONE"
    np.testing.assert_array_equal(res.readback[0], gold.dram[200:224])
    assert res.cycles == gold.cycles == timing.run_cycles(CFG, program)
    plain = routing_runs["plain"][1].readback[0]
    if case != "plain":
        assert not np.array_equal(res.readback[0], plain), "routing changed nothing"
