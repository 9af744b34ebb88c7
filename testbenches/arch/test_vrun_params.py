"""VRUN with ``params = 1``: per-column bias, multiplier, shift and clamp bounds read
from four ACC rows. The golden model's semantics equal an element-by-element
formula written here from ``docs/contract.md``; the field combinations the
instruction does not define fault ``ILLEGAL_OPCODE`` (golden model, compiler, RTL);
and on the RTL a MATMUL followed by VRUNs with per-column parameters gives the
formula's bytes in the predicted number of cycles."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch import isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Instr, Opcode
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode
from systolica.compiler import CompileError
from systolica.compiler.microops.ir import make
from systolica.compiler.scheduling.schedule import schedule

from chip_runs import run_many_on_rtl

CFG = preset("tiny")
R, C, W = CFG.rows, CFG.cols, CFG.acc_row_words
PAR, ACT, WGT, OUT = 0, 100, 200, 300       # DRAM words: parameter rows, inputs, output


def _s8(v: int) -> int:
    v &= 0xFF
    return v - 256 if v >= 128 else v


def formula(x, par, zp: int) -> np.ndarray:
    """``docs/contract.md``, element by element in Python integers: ``x`` [M, C]
    int32 sums, ``par`` the four parameter rows [4, C] as int32."""
    out = np.zeros(x.shape, dtype=np.int64)
    for i in range(x.shape[0]):
        for c in range(C):
            b = (int(x[i, c]) + int(par[0, c]) + (1 << 31)) % (1 << 32) - (1 << 31)
            mult, shift = int(par[1, c]) & 0xFFFF, int(par[2, c]) & 63
            lo, hi = _s8(int(par[3, c])), _s8(int(par[3, c]) >> 8)
            y = (b * mult + (1 << shift >> 1)) // (1 << shift) + _s8(zp)
            out[i, c] = min(max(y, lo), hi)
    return out


def param_rows(rng) -> np.ndarray:
    """Four parameter rows: random values, edge columns (shift 0 and 63, multiplier 0
    and 65535, lo > hi, lo == hi, the full int8 range), high bits set now and then."""
    junk = rng.integers(0, 1 << 15, (3, C)) << 16
    junk *= rng.random((3, C)) < 0.3
    bias = rng.integers(-(1 << 31), 1 << 31, C)
    mult = rng.integers(0, 1 << 16, C)
    mult[:2] = 0, 0xFFFF
    shift = rng.integers(6, 20, C)
    shift[2:4] = 0, 63
    lo, hi = np.sort(rng.integers(-128, 128, (2, C)), axis=0)
    lo[4], hi[4] = 50, -50
    lo[5], hi[5] = 7, 7
    lo[6], hi[6] = -128, 127
    clamp = (lo & 0xFF) | (hi & 0xFF) << 8
    rows = np.stack([bias, mult | junk[0], shift | junk[1], clamp | junk[2]])
    return rows.astype(np.int64).astype(np.int32)


def acc_words(rows: np.ndarray) -> np.ndarray:
    """ACC rows [k, C] int32 as DRAM words [k*W, R] (little-endian, element 0 first)."""
    return np.ascontiguousarray(rows.astype("<i4")).view(np.uint8).reshape(-1, R)


def _ops(m: int, vruns: list[dict], matmul: bool):
    """Load the parameter rows (and with ``matmul`` activations and weights: ACC row i
    = act[i] @ w; else ACC rows from DRAM), then ``vruns`` (VRUN fields; ``dst`` the
    CBUF row, ``bias_addr`` 100 + 4k for parameter set k) over ACC rows 0..m, each
    stored to its own output rows."""
    load = dict(dram_stride=1)
    sets = 1 + max(v.get("set", 0) for v in vruns)
    ops = [make(CFG, Opcode.DMA, kind=DmaKind.LOAD_ACC, dram_addr=PAR, buf_addr=100,
                rows=4 * sets, dram_stride=W)]
    if matmul:
        ops += [make(CFG, Opcode.DMA, kind=DmaKind.LOAD_CBUF, dram_addr=ACT, buf_addr=0,
                     rows=m, **load),
                make(CFG, Opcode.DMA, kind=DmaKind.LOAD_CBUF, dram_addr=WGT, buf_addr=64,
                     rows=R, **load),
                make(CFG, Opcode.WLOAD, w_addr=64, bank=0),
                make(CFG, Opcode.MATMUL, act_addr=0, rows=m, acc_addr=0, bank=0)]
    else:
        ops.append(make(CFG, Opcode.DMA, kind=DmaKind.LOAD_ACC, dram_addr=ACT, buf_addr=0,
                        rows=m, dram_stride=W))
    for k, v in enumerate(vruns):
        f = {key: val for key, val in v.items() if key != "set"}
        ops.append(make(CFG, Opcode.VRUN, src=0, rows=m, dst=128 + 32 * k,
                        bias_addr=100 + 4 * v.get("set", 0), requant=1, **f))
        ops.append(make(CFG, Opcode.DMA, kind=DmaKind.STORE_CBUF, dram_addr=OUT + 32 * k,
                        buf_addr=128 + 32 * k, rows=m, **load))
    program = [op.instr(c) for op, c in zip(ops, schedule(CFG, ops))]
    return sorted(program, key=lambda i: i.cycle), sets


def case(seed: int, m: int, vruns: list[dict], matmul: bool):
    """(program image, DRAM image, expected outputs per VRUN, predicted cycles)."""
    rng = np.random.default_rng(seed)
    program, sets = _ops(m, vruns, matmul)
    par = [param_rows(rng) for _ in range(sets)]
    dram = np.zeros((CFG.dram_words, R), np.uint8)
    dram[PAR:PAR + 4 * sets * W] = acc_words(np.concatenate(par))
    if matmul:
        act = rng.integers(-128, 128, (m, R))
        w = rng.integers(-128, 128, (R, C))
        dram[ACT:ACT + m] = act.astype(np.int8).view(np.uint8)
        dram[WGT:WGT + R] = w.astype(np.int8).view(np.uint8)
        x = act @ w
    else:
        x = rng.integers(-(1 << 31), 1 << 31, (m, C))
        x[0, :] = [-(1 << 31), (1 << 31) - 1, -1, 0, 1, 1 << 30, -(1 << 30), 12345][:C]
        dram[ACT:ACT + m * W] = acc_words(x.astype(np.int32))
    want = []
    for v in vruns:
        if v.get("params"):
            want.append(formula(x, par[v.get("set", 0)], v.get("zp", 0)))
        else:        # a plain VRUN between: only its presence matters here
            want.append(None)
    image = isa.to_bytes([isa.encode(i) for i in program])
    return image, dram, want, timing.run_cycles(CFG, program)


def outputs(dram_after: np.ndarray, want) -> list:
    return [None if w is None else
            dram_after[OUT + 32 * k:OUT + 32 * k + len(w)].view(np.int8).astype(np.int64)
            for k, w in enumerate(want)]


GOLDEN_CASES = {
    "one": (1, 5, [dict(params=1, zp=0)], False),
    "zero_point": (2, 12, [dict(params=1, zp=0xF3)], False),
    "one_row": (3, 1, [dict(params=1, zp=0x7F)], False),
    "two_sets_and_plain": (4, 9, [dict(params=1, zp=5), dict(mult=3, shift=2, zp=1),
                                  dict(params=1, set=1, zp=0x80)], False),
    "after_matmul": (5, 10, [dict(params=1, zp=0x02)], True),
}


@pytest.mark.parametrize("name", list(GOLDEN_CASES))
def test_golden_model_equals_the_formula(name):
    image, dram, want, predicted = case(*GOLDEN_CASES[name])
    run = golden.run(CFG, Loadable.for_chip(CFG, image, dram))
    assert run.error == ErrorCode.NONE
    assert run.cycles == predicted
    for got, w in zip(outputs(run.dram, want), want):
        if w is not None:
            np.testing.assert_array_equal(got, w)


def test_params_rows_cost_three_cycles():
    f = dict(src=0, rows=7, dst=0, bias_addr=9, use_bias=1, to_acc=0, requant=1, relu=0,
             mult=1, shift=0, zp=0)
    plain, par = Instr(Opcode.VRUN, 0, f), Instr(Opcode.VRUN, 0, {**f, "params": 1})
    for fn in (timing.occupancy, timing.done):
        assert fn(CFG, par) == fn(CFG, plain) + 3
    lo, hi = timing.mux_use(CFG, plain, "wb_src[0]")
    assert timing.mux_use(CFG, par, "wb_src[0]") == (lo + 3, hi + 3)


UNDEFINED = {"relu": dict(relu=1), "to_acc": dict(to_acc=1, dst=0),
             "no_requant": dict(requant=0)}


def _vrun(**kw) -> Instr:
    f = dict(src=0, rows=2, dst=4, bias_addr=10, use_bias=0, to_acc=0, requant=1,
             relu=0, mult=1, shift=0, zp=0, params=1)
    f.update(kw)
    return Instr(Opcode.VRUN, 3, f)


@pytest.mark.parametrize("which", list(UNDEFINED))
def test_undefined_combination_faults_illegal_opcode(which):
    bad = _vrun(**UNDEFINED[which])
    ok = Instr(Opcode.VRUN, 3, {**bad.fields, "params": 0})
    assert golden.check(CFG, [ok]).fault is None
    timeline = golden.check(CFG, [bad])
    assert timeline.fault == (ErrorCode.ILLEGAL_OPCODE, 0, 0)
    assert "params = 1 needs" in timeline.fault_reason
    with pytest.raises(CompileError, match=r"params = 1 needs requant = 1"):
        make(CFG, Opcode.VRUN, **bad.fields)


def test_parameter_rows_must_fit_the_accumulator():
    timeline = golden.check(CFG, [_vrun(bias_addr=CFG.acc_depth - 3)])
    assert timeline.fault[0] == ErrorCode.ADDR_RANGE
    assert golden.check(CFG, [_vrun(bias_addr=CFG.acc_depth - 4)]).fault is None
    assert golden.check(CFG, [_vrun(bias_addr=CFG.acc_depth - 1, params=0)]).fault is None


# -- on the RTL --------------------------------------------------------------------------
RTL_CASES = {
    "matmul_params": (11, 16, [dict(params=1, zp=0xFE)], True),
    "matmul_mixed": (12, 6, [dict(params=1, zp=3), dict(mult=5, shift=4, relu=1),
                             dict(params=1, set=1, zp=0x90),
                             dict(params=1, set=1, zp=0x10)], True),
    "extremes": (13, 8, [dict(params=1, zp=0x81)], False),
}
RTL_FAULTS = {which: [_vrun(**kw)] for which, kw in UNDEFINED.items()}


@pytest.fixture(scope="module")
def rtl_runs():
    built = {name: case(*args) for name, args in RTL_CASES.items()}
    jobs = [dict(program=image, dram=dram, name=name)
            for name, (image, dram, _, _) in built.items()]
    jobs += [dict(program=p, name=f"fault_{name}", readback=[(0, 1)], expect_fault=True)
             for name, p in RTL_FAULTS.items()]
    results = run_many_on_rtl(CFG, jobs)
    return built, dict(zip([j["name"] for j in jobs], results))


@pytest.mark.rtl
@pytest.mark.parametrize("name", list(RTL_CASES))
def test_rtl_equals_the_formula_in_the_predicted_cycles(rtl_runs, name):
    built, results = rtl_runs
    image, dram, want, predicted = built[name]
    res = results[name]
    assert res.error_name == "NONE", f"chip fault {res.error_name} at pc {res.fault_pc}"
    gold = golden.run(CFG, Loadable.for_chip(CFG, image, dram))
    assert res.cycles == predicted == gold.cycles
    for got, g, w in zip(outputs(res.dram, want), outputs(gold.dram, want), want):
        if w is not None:
            np.testing.assert_array_equal(got, w, err_msg="RTL vs formula")
        else:
            np.testing.assert_array_equal(got, g, err_msg="RTL vs golden (plain VRUN)")


@pytest.mark.rtl
@pytest.mark.parametrize("which", list(RTL_FAULTS))
def test_rtl_faults_an_undefined_combination(rtl_runs, which):
    _, results = rtl_runs
    res = results[f"fault_{which}"]
    assert res.error_name == "ILLEGAL_OPCODE"
    assert (res.fault_pc, res.fault_cycle) == (0, 0)
