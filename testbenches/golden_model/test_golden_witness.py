"""The golden model and the schedule verifier are witnesses: perturb the compiler's
timing (the closed forms in systolica.arch.timing that the scheduler and the update
placement use) and they must notice, without the RTL.

Each mutation is checked twice: the verifier that runs inside the compiler rejects
the program, and, with the verifier taken out, the golden model's run disagrees with
the prediction or with numpy, or refuses the program."""

from __future__ import annotations

import numpy as np
import pytest
import test_vrun_params

from systolica import golden
from systolica.app import demo
from systolica.arch import isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Opcode
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode
from systolica.compiler import CompileError, compile_network, gemm
from systolica.compiler import driver as program_pass
from systolica.compiler.graph import reference
from systolica.compiler.microops.ir import make
from systolica.compiler.scheduling.reconfigure import add_updates
from systolica.compiler.scheduling.schedule import schedule
from systolica.compiler.scheduling.verify import ScheduleError, verify

from tiers import sample

CFG = preset("tiny")


def _shift(name, delta, ops=None):
    """A mutation of ``timing.<name>``: its result moved by ``delta`` cycles (only for
    instructions of ``ops``, if given)."""
    original = getattr(timing, name)

    def mutated(cfg, ins, *args):
        out = original(cfg, ins, *args)
        if out is None or (ops is not None and ins.op not in ops):
            return out
        if isinstance(out, tuple):
            return tuple(x + delta for x in out)
        return out + delta
    return mutated


_ORIGINAL = {name: getattr(timing, name) for name in ("done", "occupancy", "bank_window",
                                                      "mux_use")}
MUTATIONS = {
    "done shorter": ("done", _shift("done", -3)),
    "done longer": ("done", _shift("done", +5)),
    # A MATMUL's done waits for its last row, so a consumer reading rows in order
    # could start up to rows + 1 cycles earlier: shortening it by less is harmless
    # and rightly passes; this mutation drops the rows altogether.
    "MATMUL done without its rows": ("done", lambda cfg, ins: _ORIGINAL["done"](cfg, ins)
                                     - (ins.rows + 2 if ins.op is Opcode.MATMUL else 0)),
    "DMA done shorter": ("done", _shift("done", -1, (Opcode.DMA,))),
    "occupancy shorter": ("occupancy", _shift("occupancy", -1)),
    "bank window later": ("bank_window", _shift("bank_window", +3, (Opcode.MATMUL,))),
    "multiplexer use earlier": ("mux_use", _shift("mux_use", -3)),
    # VRUN with params: its timing without the three extra parameter rows
    "VRUN params done without the parameter rows": (
        "done", lambda cfg, ins: _ORIGINAL["done"](cfg, ins)
        - (3 if ins.op is Opcode.VRUN and ins.fields.get("params") else 0)),
    "VRUN params occupancy without the parameter rows": (
        "occupancy", lambda cfg, ins: _ORIGINAL["occupancy"](cfg, ins)
        - (3 if ins.op is Opcode.VRUN and ins.fields.get("params") else 0)),
}


def _networks():
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, (40, 20), dtype=np.int8)
    b = rng.integers(-128, 128, (20, 24), dtype=np.int8)
    # K = R: one MATMUL per block that does not accumulate, so it holds no ACC read
    # port and only the data hazard orders the epilogue after it
    a1 = rng.integers(-128, 128, (40, CFG.rows), dtype=np.int8)
    b1 = rng.integers(-128, 128, (CFG.rows, 24), dtype=np.int8)
    return [demo.mlp(), gemm(a, b, out_dtype="int32", name="gemm40x20x24"),
            gemm(a1, b1, out_dtype="int32", name="gemm40x8x24")]


def _rerouted():
    """Two back-to-back GEMM phases, the second with its activation and output
    partitions swapped: SETCFGs land while the first phase is in flight."""
    R, M = CFG.rows, 16
    load = dict(kind=DmaKind.LOAD_CBUF, dram_stride=1)
    ops = [make(CFG, Opcode.DMA, dram_addr=0, buf_addr=0, rows=M, **load),
           make(CFG, Opcode.DMA, dram_addr=64, buf_addr=64, rows=R, **load),
           make(CFG, Opcode.WLOAD, w_addr=64, bank=0),
           make(CFG, Opcode.MATMUL, act_addr=0, rows=M, acc_addr=0, bank=0),
           make(CFG, Opcode.MATMUL, act_addr=0, rows=M, acc_addr=M, bank=0),
           make(CFG, Opcode.DMA, kind=DmaKind.STORE_ACC, dram_addr=200, buf_addr=0,
                rows=2 * M, dram_stride=CFG.acc_row_words)]
    ops[4].needs = {"west_feed[0]": "cbuf.g1", "west_feed[1]": "cbuf.g0",
                    "acc_src[0]": "col.g1", "acc_src[1]": "col.g0"}
    try:
        cycles, updates = add_updates(CFG, ops, schedule(CFG, ops))
    except CompileError:
        return None          # the mutation broke the compiler itself: nothing to witness
    program = sorted([op.instr(c) for op, c in zip(ops, cycles)] + [u for u, _ in updates],
                     key=lambda i: i.cycle)
    rng = np.random.default_rng(3)
    dram = np.zeros((CFG.dram_words, R), np.uint8)
    dram[0:M] = rng.integers(0, 256, (M, R))
    dram[64:64 + R] = rng.integers(0, 256, (R, R))
    a = dram[0:M].view(np.int8).astype(np.int64)
    w = dram[64:64 + R].view(np.int8).astype(np.int64)
    perm = np.r_[R // 2:R, 0:R // 2]
    want = np.concatenate([a @ w, (a[:, perm] @ w)[:, perm]])

    def result(dram_after):
        words = dram_after[200:200 + 2 * M * CFG.acc_row_words]
        return np.ascontiguousarray(words).reshape(2 * M, 4 * R).view("<i4")
    return program, dram, want, result


def _params_vrun():
    """A MATMUL of two rows, then two VRUNs with per-column parameters back to back,
    each stored (test_vrun_params builds it with the compiler's scheduler): two rows,
    so that a store three cycles early reads a row in the cycle it is written."""
    try:
        image, dram, want, predicted = test_vrun_params.case(
            21, 2, [dict(params=1, zp=3), dict(params=1, set=1, zp=0x80)], True)
    except CompileError:
        return None          # the mutation broke the compiler itself: nothing to witness
    program = [isa.decode(w) for w in isa.from_bytes(image)]

    def result(dram_after):
        return np.stack(test_vrun_params.outputs(dram_after, want))
    return program, image, dram, predicted, np.stack(want), result


def _golden_disagrees(cfg, image, dram, predicted, want, result) -> str | None:
    """Why the golden model's run shows the program is wrong, or None if it does not."""
    try:
        run = golden.run(cfg, Loadable.for_chip(cfg, image, dram))
    except golden.GoldenError as e:
        return f"hazard: {e}"
    if run.error != ErrorCode.NONE:
        return f"fault {run.error.name}"
    if run.cycles != predicted:
        return f"cycles {run.cycles} != predicted {predicted}"
    if not np.array_equal(result(run.dram), want):
        return "output differs from numpy"
    return None


def test_unmutated_programs_pass():
    for net in _networks():
        c = compile_network(CFG, net)
        assert _golden_disagrees(CFG, c.image, c.dram, c.predicted_cycles,
                                 reference.run(net), c.result) is None
    program, dram, want, result = _rerouted()
    assert verify(CFG, program) == timing.run_cycles(CFG, program)
    image = isa.to_bytes([isa.encode(i) for i in program])
    assert _golden_disagrees(CFG, image, dram, timing.run_cycles(CFG, program), want,
                             result) is None
    program, image, dram, predicted, want, result = _params_vrun()
    assert verify(CFG, program) == predicted
    assert _golden_disagrees(CFG, image, dram, predicted, want, result) is None


@pytest.mark.parametrize("mutation", sample(list(MUTATIONS), 3))
def test_verifier_rejects_mutated_timing(mutation, monkeypatch):
    name, fn = MUTATIONS[mutation]
    monkeypatch.setattr(timing, name, fn)
    caught = []
    for net in _networks():
        try:
            compile_network(CFG, net)
        except ScheduleError as e:
            caught.append(str(e))
    rerouted = _rerouted()
    try:
        if rerouted and verify(CFG, rerouted[0]) != timing.run_cycles(CFG, rerouted[0]):
            caught.append("cycle count")
    except ScheduleError as e:
        caught.append(str(e))
    params = _params_vrun()
    try:
        if params and verify(CFG, params[0]) != params[3]:
            caught.append("cycle count")
    except ScheduleError as e:
        caught.append(str(e))
    assert caught, f"the verifier accepted every program compiled with '{mutation}'"


@pytest.mark.parametrize("mutation", sample(list(MUTATIONS), 3))
def test_golden_model_alone_catches_mutated_timing(mutation, monkeypatch):
    name, fn = MUTATIONS[mutation]
    monkeypatch.setattr(timing, name, fn)
    # take the verifier out of the compiler: only the golden model is left to notice
    monkeypatch.setattr(program_pass, "begin_verify",
                        lambda cfg, program, what="", **_:
                        lambda: timing.run_cycles(cfg, program))
    found = []
    for net in _networks():
        c = compile_network(CFG, net)
        why = _golden_disagrees(CFG, c.image, c.dram, c.predicted_cycles,
                                reference.run(net), c.result)
        if why:
            found.append(f"{net.name}: {why}")
    rerouted = _rerouted()
    if rerouted:
        program, dram, want, result = rerouted
        image = isa.to_bytes([isa.encode(i) for i in program])
        why = _golden_disagrees(CFG, image, dram, timing.run_cycles(CFG, program), want,
                                result)
        if why:
            found.append(f"rerouted: {why}")
    params = _params_vrun()
    if params:
        why = _golden_disagrees(CFG, *params[1:])
        if why:
            found.append(f"params VRUN: {why}")
    assert found, f"the golden model agreed with every program compiled with '{mutation}'"


# each case forks a process: `make test-fast` keeps the unmutated one and the two that
# leave hazards, `make test` runs all
QUICK_SPLITS = (None, "done shorter", "bank window later")


@pytest.mark.parametrize("mutation", [
    m if m in QUICK_SPLITS else pytest.param(m, marks=pytest.mark.slow)
    for m in [None] + list(MUTATIONS)])
def test_scoreboards_split_between_two_processes_find_what_one_finds(mutation,
                                                                      monkeypatch):
    """A long program's check keeps some scoreboards in a forked process: the same
    instructions issue, the same fault stops them, and the same hazards come back in
    the same order as from one process, on programs broken by each mutation."""
    if mutation is not None:
        monkeypatch.setattr(timing, *MUTATIONS[mutation])
    monkeypatch.setattr(program_pass, "begin_verify",
                        lambda cfg, program, what="", **_:
                        lambda: timing.run_cycles(cfg, program))
    programs = [compile_network(CFG, net).program for net in _networks()]
    hazards = 0
    for program in programs:
        monkeypatch.setattr(golden._BoardHelper, "FROM", 1 << 40)
        alone = golden.check(CFG, program)
        monkeypatch.setattr(golden._BoardHelper, "FROM", 1)
        split = golden.check(CFG, program)
        assert (split.issued, split.fault, split.cycles, split.hazards, split.fault_reason,
                split.fetched_words) == (alone.issued, alone.fault, alone.cycles,
                                         alone.hazards, alone.fault_reason,
                                         alone.fetched_words)
        assert [[(t.resource, t.addrs.tolist(), t.cycles.tolist()) for t in fx.reads + fx.writes]
                for fx in split.effects] == \
            [[(t.resource, t.addrs.tolist(), t.cycles.tolist()) for t in fx.reads + fx.writes]
             for fx in alone.effects]
        hazards += len(alone.hazards)
    if mutation in ("done shorter", "bank window later"):
        assert hazards, "these mutations leave hazards for both to find"
