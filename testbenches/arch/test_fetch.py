"""Instruction fetch (``systolica/arch/fetch.py``) without the RTL: the rule worked by
hand on small programs, the golden model's fetcher against it, the compiler's delay
pass against the golden model, and the long GEMMs of the issue compiling on base."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import systolica.compiler.driver as program_pass
from systolica import golden
from systolica.arch import fetch, isa, timing
from systolica.arch.config import preset
from systolica.arch.instructions import SPEC
from systolica.arch.isa import DmaKind, Instr, Opcode
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode, Reg
from systolica.compiler import compile_network, gemm
from systolica.compiler.graph import reference
from systolica.compiler.scheduling.fetch_delay import _late, _port_cycles, delay_for_fetch
from systolica.compiler.scheduling.verify import ScheduleError
from systolica.firmware.driver import Driver
from systolica.sim import rtlsim
from systolica.sim.jobs import RtlJob

TINY = preset("tiny")
BASE = preset("base")
SMALL = TINY.replace(imem_depth=8)


def setcfg(t: int) -> Instr:
    return Instr(Opcode.SETCFG, t, dict(index=0, value=0))


def load(t: int, rows: int) -> Instr:
    return Instr(Opcode.DMA, t, dict(kind=DmaKind.LOAD_CBUF, dram_addr=0, dram_stride=1,
                                     buf_addr=0, rows=rows))


def hog(cfg, first: int, second: int) -> list[Instr]:
    """A 20-row load at cycle 0 holds the DRAM port in cycles 1..20; instructions 1 ..
    D-1 follow at cycles 1 ..; instructions D and D+1 (fetched) at ``first``,
    ``second``. By the rule (tiny: two words an instruction): instruction D's words
    are read in 21 and 22, so it can issue from 25; D+1's in 23 and 24, from 27."""
    d = cfg.imem_depth
    return [load(0, 20)] + [setcfg(c) for c in range(1, d)] + [setcfg(first), setcfg(second)]


def check(cfg, program, prog_addr=None, fetch_from=None):
    t = golden.check(cfg, program, prog_addr, fetch_from)
    return t.fault[:3] if t.fault else (ErrorCode.NONE, None, t.cycles)


# -- the rule, by hand ----------------------------------------------------------------
def test_words_per_instruction():
    assert (fetch.words_per_instruction(TINY), fetch.words_per_instruction(BASE)) == (2, 1)
    assert fetch.ready_after(TINY) == 3


def test_program_region_holds_the_image():
    words = [isa.encode(hog(SMALL, 25, 27)[k]) for k in range(3)]
    image = isa.to_bytes(words)
    region = fetch.program_words(TINY, image)
    assert region.shape == (6, TINY.dram_word_bytes)
    assert region.tobytes() == image
    assert fetch.program_words(BASE, image).tobytes() == image


@pytest.mark.parametrize("kind", list(DmaKind))
@pytest.mark.parametrize("cfg", [TINY, BASE], ids=["tiny", "base"])
def test_dma_port_cycles_are_its_dram_touches(cfg, kind):
    """The compiler's closed form of a DMA's port use equals its effects."""
    for rows in (1, 3):
        ins = Instr(Opcode.DMA, 0, dict(kind=kind, dram_addr=0, dram_stride=9, buf_addr=0,
                                        rows=rows))
        fx = SPEC[Opcode.DMA].effects(cfg, ins.fields)
        cycles = np.concatenate([t.cycles for t in fx.reads + fx.writes
                                 if t.resource == "dram"])
        first, last = fetch.dma_port_cycles(cfg, ins)
        assert sorted(cycles.tolist()) == list(range(first, last + 1))


@pytest.mark.parametrize("first, second, expected", [
    (25, 27, (ErrorCode.NONE, None, 28)),
    (24, 27, (ErrorCode.FETCH_LATE, 8, 25)),      # waits for its word until 25
    (25, 26, (ErrorCode.FETCH_LATE, 9, 27)),
    (40, 41, (ErrorCode.NONE, None, 42)),
])
def test_rule_by_hand(first, second, expected):
    assert check(SMALL, hog(SMALL, first, second)) == expected


def test_late_without_waiting_is_late():
    """A fetched instruction whose word is there when it arrives, but whose cycle has
    passed, is LATE as before."""
    program = hog(SMALL, 25, 30) + [setcfg(30)]
    assert check(SMALL, program) == (ErrorCode.LATE, 10, 31)


def test_short_programs_never_fetch():
    """The same instructions with the memory deep enough: nothing is fetched, so the
    port hog does not matter."""
    assert check(TINY, hog(SMALL, 8, 9)) == (ErrorCode.NONE, None, 22)  # load ends


@pytest.mark.parametrize("prog_addr, expected", [
    (SMALL.dram_words - 20, (ErrorCode.NONE, None, 28)),
    (SMALL.dram_words - 19, (ErrorCode.PROG_RANGE, 0, 0)),
])
def test_prog_range(prog_addr, expected):
    assert check(SMALL, hog(SMALL, 25, 27), prog_addr) == expected


def test_program_overwrite_is_a_hazard():
    store = Instr(Opcode.DMA, 30, dict(kind=DmaKind.STORE_CBUF, dram_addr=100 + 17,
                                       dram_stride=1, buf_addr=0, rows=1))
    t = golden.check(SMALL, hog(SMALL, 25, 27) + [store], prog_addr=100)
    assert [h.rule for h in t.hazards] == ["program overwrite"]


# -- the compiler's pass --------------------------------------------------------------
def test_delay_pass_by_hand():
    out = delay_for_fetch(SMALL, hog(SMALL, 8, 9))
    assert [i.cycle for i in out] == list(range(8)) + [25, 27]
    assert check(SMALL, out) == (ErrorCode.NONE, None, 28)


def test_delay_pass_keeps_update_interval():
    cfg = SMALL.replace(config_update_interval=4)
    program = [load(0, 20)] + [setcfg(4 * c) for c in range(1, 10)]
    out = delay_for_fetch(cfg, program)
    assert all(i.cycle % 4 == 0 for i in out if i.op is Opcode.SETCFG)
    assert check(cfg, out)[0] is ErrorCode.NONE


def _random_program(cfg, seed: int) -> list[Instr]:
    """DMAs (loads and stores) and SETCFGs, each issued when its unit is free."""
    rng = np.random.default_rng(seed)
    program, t, dma_free = [], 0, 0
    for _ in range(60):
        t += int(rng.integers(1, 4))
        if rng.random() < 0.4:
            t = max(t, dma_free)
            kind = DmaKind(int(rng.integers(0, 4)))
            rows = int(rng.integers(1, 7))
            ins = Instr(Opcode.DMA, t, dict(kind=kind, dram_addr=0, dram_stride=8,
                                            buf_addr=0, rows=rows))
            dma_free = t + timing.occupancy(cfg, ins)
        else:
            ins = setcfg(t)
        program.append(ins)
    return program


def _pass_against_golden(cfg, seed, fetch_from):
    program = _random_program(cfg, seed)
    start = fetch.fetch_start(cfg, len(program), fetch_from)
    late = _late(np.array([i.cycle for i in program]), _port_cycles(cfg, program),
                 cfg.imem_depth, start, fetch.words_per_instruction(cfg),
                 fetch.ready_after(cfg))
    code, pc, _ = check(cfg, program, fetch_from=fetch_from)
    if late.any():
        assert (code, pc) == (ErrorCode.FETCH_LATE, start + int(np.argmax(late)))
    else:
        assert code is ErrorCode.NONE
    out = delay_for_fetch(cfg, program, fetch_from)
    assert check(cfg, out, fetch_from=fetch_from)[0] is ErrorCode.NONE
    assert all(b.cycle - a.cycle >= 0 for a, b in zip(program, out))
    return program, out


@pytest.mark.parametrize("fetch_from, late, delayed", [
    # fetched whole: instruction 0's words go in cycles 0 and 1, so it reaches issue
    # in cycle 4; instruction 1's in 2 and 3 (from 6); the load at 4 then holds the
    # port in 5 .. 24, and instruction 2's words go in 25 and 26 (from 28)
    (0, (ErrorCode.FETCH_LATE, 0, 4), [4, 6, 28, 30, 32, 34, 36, 38, 55, 58]),
    # 0 .. 2 preloaded: instruction 3's slot is free, its first word goes in cycle 0,
    # the load holds 1 .. 20, the second word goes in 21: from 24
    (3, (ErrorCode.FETCH_LATE, 3, 24), [0, 1, 2, 24, 26, 28, 30, 32, 49, 52]),
    # past the memory: the host's preload (the reset value's rule)
    (50, (ErrorCode.FETCH_LATE, 8, 25), [0, 1, 2, 3, 4, 5, 6, 7, 25, 28]),
])
def test_the_fetch_start_by_hand(fetch_from, late, delayed):
    """PROG_FETCH below the program's length: the fetcher starts at ``min(PROG_FETCH,
    D, L)``, the slots below D free from cycle 0 (the hog program, D = 8)."""
    program = hog(SMALL, 24, 27)
    assert check(SMALL, program, fetch_from=fetch_from) == late
    out = delay_for_fetch(SMALL, program, fetch_from)
    assert [i.cycle for i in out] == delayed
    assert check(SMALL, out, fetch_from=fetch_from) == (ErrorCode.NONE, None, delayed[-1] + 1)


def test_a_program_without_dmas_fetched_whole():
    """Regression: the delay pass's closed form indexed the (empty) DMA runs of a
    program that has none (three SETCFGs fetched whole: the words of each take two
    cycles; the program fits the memory, so it moves as a whole, by 6: the last one's
    words go in cycles 4 and 5 and it can issue from 5 + 3)."""
    program = [setcfg(c) for c in (0, 1, 2)]
    out = delay_for_fetch(TINY, program, 0)
    assert [i.cycle for i in out] == [6, 7, 8]
    assert check(TINY, out, fetch_from=0)[0] is ErrorCode.NONE
    assert check(TINY, program, fetch_from=0) == (ErrorCode.FETCH_LATE, 0, 4)


def test_a_program_fetched_whole_moves_as_a_whole():
    """Regression: a delayed suffix put an int32 GEMM's DMA on the ACC bank port its
    MATMUL still wrote (ulx3s: one ACC bank; the verifier refused it,
    BANK_CONFLICT). A program that fits the memory is delayed as a whole, every
    relation within it kept, and runs as predicted."""
    cfg = preset("ulx3s")
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (9, 16), dtype=np.int8)
    b = rng.integers(-128, 128, (16, 13), dtype=np.int8)
    net = gemm(a, b, np.zeros(13, np.int32), out_dtype="int32")
    plain = compile_network(cfg, net)
    whole = compile_network(cfg, net, fetch_from=0)
    shift = whole.program[0].cycle - plain.program[0].cycle
    assert shift > 0 and all(w.cycle - p.cycle == shift
                             for w, p in zip(whole.program, plain.program))
    assert golden.run(cfg, whole.loadable).cycles == whole.predicted_cycles
    np.testing.assert_array_equal(whole.result(golden.run(cfg, whole.loadable).dram),
                                  reference.run(net))


def test_a_golden_fetcher_that_ignores_the_fetch_start_is_caught(monkeypatch):
    """Mutation: a golden fetcher that takes every instruction below the memory's depth
    as preloaded (the rule before PROG_FETCH) disagrees with the delay pass's closed
    form on a program fetched whole: the two stay independent witnesses."""
    cfg = TINY.replace(imem_depth=5)
    _pass_against_golden(cfg, 0, 0)
    init = golden._Fetcher.__init__

    def preloading(self, cfg, start):
        init(self, cfg, cfg.imem_depth)
    monkeypatch.setattr(golden._Fetcher, "__init__", preloading)
    with pytest.raises(AssertionError):
        _pass_against_golden(cfg, 0, 0)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("cfg", [TINY.replace(imem_depth=5), BASE.replace(imem_depth=3)],
                         ids=["tiny", "base"])
def test_delay_pass_against_the_golden_fetcher(cfg, seed):
    """The pass's closed form finds the golden model's first fetch-late instruction,
    and its output is on time by the golden model's fetcher."""
    _pass_against_golden(cfg, seed, None)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("fetch_from", [0, 2])
@pytest.mark.parametrize("cfg", [TINY.replace(imem_depth=5), BASE.replace(imem_depth=3)],
                         ids=["tiny", "base"])
def test_delay_pass_against_the_golden_fetcher_from(cfg, fetch_from, seed):
    """The same with the fetcher starting at ``fetch_from`` (PROG_FETCH): the
    instructions below the memory's depth are fetched too, their slots free from
    cycle 0; fetched from 0, instruction 0 itself waits for its words."""
    program, out = _pass_against_golden(cfg, seed, fetch_from)
    if fetch_from == 0:
        assert out[0].cycle >= fetch.words_per_instruction(cfg) - 1 + fetch.ready_after(cfg)


def test_golden_check_catches_a_schedule_without_the_pass(monkeypatch):
    """Mutation: with the delay pass disabled, the schedule verifier (the golden
    model's fetcher) refuses the program, naming the instruction and the fault."""
    a = np.random.default_rng(1).integers(-128, 128, (64, 64), dtype=np.int8)
    monkeypatch.setattr(program_pass, "delay_for_fetch",
                        lambda cfg, program, fetch_from=None: program)
    with pytest.raises(ScheduleError, match="FETCH_LATE.*its word is fetched"):
        compile_network(SMALL, gemm(a, a, out_dtype="int32"))


def test_long_gemm_compiles_and_runs_on_the_golden_model():
    a = np.random.default_rng(2).integers(-128, 128, (64, 64), dtype=np.int8)
    net = gemm(a, a.T.copy(), out_dtype="int32")
    compiled = compile_network(SMALL, net)
    assert len(compiled.program) > SMALL.imem_depth and compiled.fetch_delay > 0
    plain = compile_network(TINY, net)
    assert plain.fetch_delay == 0
    assert compiled.predicted_cycles == plain.predicted_cycles + compiled.fetch_delay
    gold = golden.run(SMALL, Loadable.for_chip(SMALL, compiled.image, compiled.dram,
                                               compiled.prog_addr))
    assert gold.cycles == compiled.predicted_cycles
    np.testing.assert_array_equal(compiled.result(gold.dram), reference.run(net))


@pytest.mark.parametrize("depth", [8, 32, 128])
def test_deep_k_gemm_delays_past_overlapping_windows(depth):
    """A deep-K GEMM issues its matmuls so densely that their multiplexer windows
    overlap one another back to the first instruction; the pass once cut back that far
    and gave up ("stays late for the fetcher"). Only a SETCFG bounds the cut now."""
    rng = np.random.default_rng(depth)
    net = gemm(rng.integers(-128, 128, (8, 512), dtype=np.int8),
               rng.integers(-128, 128, (512, 8), dtype=np.int8), out_dtype="int32")
    cfg = TINY.replace(imem_depth=depth)
    compiled = compile_network(cfg, net)
    assert compiled.fetch_delay > 0
    gold = golden.run(cfg, Loadable.for_chip(cfg, compiled.image, compiled.dram,
                                             compiled.prog_addr))
    assert gold.error is ErrorCode.NONE and gold.cycles == compiled.predicted_cycles
    np.testing.assert_array_equal(compiled.result(gold.dram), reference.run(net))


@pytest.mark.slow
@pytest.mark.parametrize("M, K, N", [(128, 768, 768), (16, 2048, 1000)])
def test_issue_gemms_compile_on_base(M, K, N):
    """Refused before (program length, DRAM size); they run on the RTL in
    test_chip_regress_base.py."""
    rng = np.random.default_rng(M)
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    compiled = compile_network(BASE, gemm(a, b, out_dtype="int32"))
    assert len(compiled.program) > BASE.imem_depth
    assert compiled.prog_addr >= compiled.dram_map.end
    assert compiled.prog_addr + fetch.region_words(BASE, len(compiled.program)) \
        <= BASE.dram_words


# -- firmware and harness -------------------------------------------------------------
class _Bus:
    def __init__(self):
        self.writes = []

    async def write(self, reg, value):
        self.writes.append((Reg(reg), value))


def test_driver_preloads_only_the_instruction_memory():
    image = isa.to_bytes([isa.encode(i) for i in hog(SMALL, 25, 27)])
    bus = _Bus()
    asyncio.run(Driver(bus).load_program(image, prog_addr=1234, imem_depth=8))
    assert bus.writes[:4] == [(Reg.PROG_LEN, 10), (Reg.PROG_ADDR, 1234),
                              (Reg.PROG_FETCH, 8), (Reg.IMEM_ADDR, 0)]
    assert len(bus.writes) == 4 + 8 * 4


@pytest.mark.parametrize("fetch_from, preload", [(None, 8), (0, 0), (3, 3), (50, 8)])
def test_driver_preloads_below_the_fetch_start(fetch_from, preload):
    """PROG_FETCH is written with P = min(fetch_from, imem_depth, count) and only the
    instructions below it are written (a Loadable's, through Driver.load)."""
    image = isa.to_bytes([isa.encode(i) for i in hog(SMALL, 25, 27)])
    bus = _Bus()
    program = Loadable.for_chip(SMALL, image, None, 1234, fetch_from=fetch_from)
    assert program.preload(SMALL) == preload
    asyncio.run(Driver(bus).load(program, cfg=SMALL))
    assert bus.writes[:4] == [(Reg.PROG_LEN, 10), (Reg.PROG_ADDR, 1234),
                              (Reg.PROG_FETCH, preload), (Reg.IMEM_ADDR, 0)]
    assert len(bus.writes) == 4 + preload * 4


def test_harness_needs_the_program_region_of_a_long_program():
    image = isa.to_bytes([isa.encode(i) for i in hog(SMALL, 25, 27)])
    with pytest.raises(rtlsim.RtlSimError, match="give its Loadable a prog_addr"):
        rtlsim.run(SMALL, [RtlJob(Loadable.for_chip(SMALL, image, None))])
