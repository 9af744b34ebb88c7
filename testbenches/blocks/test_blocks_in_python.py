# amaranth: UnusedElaboratable=no
"""RTL blocks without Verilator: parameters are keyword-only and validated, the
interfaces connect, and the multiplexer guard of the sequencer (``CFG_IN_USE``)
matches the contract, in Amaranth's own simulator."""

from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from systolica.arch import fabric, isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import Instr, Opcode
from systolica.rtl.array import Grid, Tile
from systolica.rtl.cbuf import Cbuf
from systolica.rtl.chip import Chip
from systolica.rtl.csr import RegisterFile
from systolica.rtl.dma import Dma
from systolica.rtl.fabric_regs import FabricRegs
from systolica.rtl.matmul import MatmulUnit, WeightLoader
from systolica.rtl.mux_guard import MuxGuard, Window, windows
from systolica.rtl.ports import DramMaster, Issue
from systolica.rtl.route import LaneRouter
from systolica.rtl.sequencer import Sequencer
from systolica.rtl.ubuf import CopyUnit
from systolica.rtl.vpu import VectorUnit

TINY = preset("tiny")
BLOCKS = [Chip, Sequencer, RegisterFile, FabricRegs, Dma, WeightLoader, MatmulUnit, Grid,
          VectorUnit, MuxGuard]


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.__name__)
def test_config_is_keyword_only_and_checked(block):
    with pytest.raises(TypeError):
        block(TINY)
    with pytest.raises(TypeError, match=rf"{block.__name__} needs cfg=ChipConfig .*not 'tiny'"):
        block(cfg="tiny")
    block(cfg=TINY)


def test_cbuf_parameters_are_keyword_only_and_checked():
    with pytest.raises(TypeError):
        Cbuf(TINY, 2, 1, 2)
    with pytest.raises(TypeError, match=r"Cbuf needs cfg=ChipConfig"):
        Cbuf(cfg="tiny", row_reads=2, part_reads=1, row_writes=2)
    for bad in (-1, 1.0, True, "2"):
        with pytest.raises(TypeError, match=r"Cbuf row_reads must be a non-negative integer"):
            Cbuf(cfg=TINY, row_reads=bad, part_reads=1, row_writes=2)
    cbuf = Cbuf(cfg=TINY, row_reads=2, part_reads=1, row_writes=2)
    assert len(cbuf.row_read) == 2 and len(cbuf.part_read) == 1 and len(cbuf.row_write) == 2
    assert cbuf.part_read[0].banks.shape().width == TINY.cbuf_banks


def test_tile_size_checked():
    with pytest.raises(TypeError):
        Tile(4)
    for bad in (0, 2.0, True, "4"):
        with pytest.raises(TypeError, match=r"Tile size n must be a positive integer, not"):
            Tile(n=bad)


def test_signature_parameters_checked():
    with pytest.raises(TypeError, match=r"Issue payload must be an amaranth data layout"):
        Issue(12)
    with pytest.raises(TypeError, match=r"Issue handshake must be True or False"):
        Issue(isa.PAYLOAD[Opcode.DMA], handshake=1)
    with pytest.raises(TypeError, match=r"Issue ahead must be True or False"):
        Issue(isa.PAYLOAD[Opcode.DMA], ahead=1)
    with pytest.raises(TypeError, match=r"DRAM word width must be a positive integer"):
        DramMaster(word_bits=0)


def test_issue_ports_match_their_units():
    """Each sequencer issue port carries its opcode's payload, with a handshake for
    every unit but the configuration registers, and the head's two candidate words
    for the matmul unit."""
    seq = Sequencer(cfg=TINY)
    # unit port -> (block, its member taking the port)
    units = {"dma": (Dma, "issue"), "wload": (WeightLoader, "issue"),
             "mm": (MatmulUnit, "issue"), "vpu": (VectorUnit, "issue"),
             "fabric": (FabricRegs, "issue"), "convcfg": (MatmulUnit, "convcfg"),
             "taps": (MatmulUnit, "taps"), "ubuf": (CopyUnit, "issue"),
             "lanes": (LaneRouter, "issue")}
    assert set(Sequencer.UNITS) == set(units)
    for name, op in Sequencer.UNITS.items():
        port = getattr(seq, name).signature
        assert port == Issue(isa.PAYLOAD[op], handshake=op not in (
            Opcode.SETCFG, Opcode.CONVCFG, Opcode.TAPS), ahead=op is Opcode.MATMUL)
        block, member = units[name]
        assert getattr(block(cfg=TINY), member).signature.flip() == port


def _sample(rng, op: Opcode, cfg) -> Instr:
    fields = {name: rng.randrange(1 << fld.width) for name, fld in isa.PAYLOAD[op]}
    if "rows" in fields:
        fields["rows"] = rng.choice([1, 2, 3, rng.randrange(1, 1 << 12)])
    if "early" in fields:       # a MATMUL's exit is one of the tile rows, else illegal
        fields["early"] %= cfg.tile_rows
    return Instr(op, rng.randrange(1000), fields)


@pytest.mark.parametrize("name", ["tiny", "base"])
def test_windows_restate_mux_use(name):
    """For random instructions of every opcode, the guard's windows are exactly
    ``timing.mux_use``'s (as SETCFG cycles ``[t + lo, t + hi - 1)``)."""
    cfg = preset(name)
    table: dict[tuple, list[Window]] = {}
    for w in windows(cfg):
        table.setdefault((w.mux, w.op), []).append(w)
    rng = random.Random(name)
    for op in Opcode:
        if op is Opcode.ILLEGAL:
            continue
        for _ in range(40):
            ins = _sample(rng, op, cfg)
            for mux in fabric.muxes(cfg):
                use = timing.mux_use(cfg, ins, mux.name)
                want = (set() if use is None
                        else set(range(ins.cycle + use[0], ins.cycle + use[1] - 1)))
                got = set()
                for w in table.get((mux.index, op), []):
                    got |= set(range(ins.cycle + w.lo, ins.cycle + w.lo + w.length(ins.fields)))
                assert got == want, (mux.name, ins)


def _in_use(cfg, issued: list[Instr], u: int, indices) -> bool:
    """The contract's CFG_IN_USE rule (docs/contract.md)."""
    muxes = fabric.muxes(cfg)
    for prev in issued:
        for index in indices:
            use = timing.mux_use(cfg, prev, muxes[index].name)
            if use and prev.cycle + use[0] <= u < prev.cycle + use[1] - 1:
                return True
    return False


@pytest.mark.slow
def test_guard_matches_the_contract():
    """A random legal issue stream (each unit fed no faster than its occupancy, rows
    1..12, VRUNs to the CBUF and to the ACC) with random SETCFGs between, and a
    run restart now and then: ``in_use`` equals the contract's rule every cycle."""
    cfg, rng = TINY, random.Random(7)
    dut = MuxGuard(cfg=cfg)
    n_mux = len(fabric.muxes(cfg))
    units = {Opcode.DMA: "dma", Opcode.WLOAD: "wload", Opcode.MATMUL: "mm",
             Opcode.VRUN: "vpu"}
    checked = {True: 0, False: 0}

    async def bench(ctx):
        issued, free, t0 = [], dict.fromkeys(units.values(), 0), 0
        for c in range(4000):
            u = c - t0
            ctx.set(dut.clear, 0)
            ctx.set(dut.issue, 0)
            if rng.random() < 0.01:                       # a new run starts
                ctx.set(dut.clear, 1)
                issued, free, t0 = [], dict.fromkeys(units.values(), 0), c + 1
            elif rng.random() < 0.35:
                op = rng.choice(list(units))
                if free[units[op]] <= u:
                    ins = _sample(rng, op, cfg)
                    if "rows" in ins.fields:
                        ins.fields["rows"] = rng.randrange(1, 13)
                    ins = Instr(op, u, ins.fields)
                    word = isa.encode(ins)
                    ctx.set(dut.issue, 1)
                    ctx.set(dut.opcode, op)
                    ctx.set(dut.payload, word >> (isa.WORD_BITS - isa.PAYLOAD_BITS))
                    issued.append(ins)
                    free[units[op]] = u + timing.occupancy(cfg, ins)
            if not ctx.get(dut.issue) and not ctx.get(dut.clear):
                pairs = [(rng.randrange(n_mux), 0) for _ in range(rng.randrange(1, 8))]
                extra = [(rng.randrange(n_mux), 0) for _ in range(isa.SETCFG_PAIRS)]
                fields = isa.setcfg_fields(pairs + extra[len(pairs):])
                fields["more"] = len(pairs) - 1           # the rest must be ignored
                layout = isa.PAYLOAD[Opcode.SETCFG]
                ctx.set(dut.setcfg, layout.const(fields))
                want = _in_use(cfg, issued, u, [i for i, _ in pairs])
                assert ctx.get(dut.in_use) == want, (u, pairs, issued[-3:])
                checked[want] += 1
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert min(checked.values()) > 100, checked


@pytest.mark.parametrize("op", [Opcode.DMA, Opcode.MATMUL], ids=lambda op: op.name)
@pytest.mark.parametrize("name", ["tiny", pytest.param("base", marks=pytest.mark.slow)])
def test_range_check_in_hardware(name, op):
    """The sequencer's DMA and MATMUL ADDR_RANGE checks, as Amaranth logic
    (``select=Mux``), fault exactly the instructions one of whose ranges lies outside
    its memory (each range's end, one past it, the field extremes, random fields)."""
    from amaranth.hdl import Module, Mux, Signal
    from amaranth.lib import data
    from test_instructions import RANGE_CASES, ranges_rule

    from systolica.arch import instructions

    cfg = preset(name)
    layout = isa.PAYLOAD[op]
    payload, ok = Signal(layout), Signal()
    m = Module()
    m.d.comb += ok.eq(instructions.SPEC[op].in_range(cfg, data.View(layout, payload),
                                                    select=Mux))
    cases = RANGE_CASES[op](cfg, np.random.default_rng(11), n_random=200)
    seen = []

    async def bench(ctx):
        for f in cases:
            ctx.set(payload, layout.const(f))
            seen.append(bool(ctx.get(ok)))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [ranges_rule(cfg, op, f) for f in cases]


@pytest.mark.parametrize("name", ["tiny", "ulx3s"])
def test_vrun_range_check_in_hardware(name):
    """The sequencer's VRUN ADDR_RANGE check, as Amaranth logic with the UBUF registers
    as signals, faults exactly the instructions one of whose ranges lies outside its
    memory, for several register values."""
    from amaranth.hdl import Module, Mux, Signal
    from amaranth.lib import data
    from test_instructions import _At, ranges_rule, vrun_range_cases

    from systolica.arch import instructions
    from systolica.rtl.ports import UbufAt

    cfg = preset(name)
    layout = isa.PAYLOAD[Opcode.VRUN]
    width = cfg.ubuf_span[1].bit_length()
    payload, ok = Signal(layout), Signal()
    base, rows = Signal(width), Signal(width)
    m = Module()
    m.d.comb += ok.eq(instructions.SPEC[Opcode.VRUN].in_range(
        UbufAt(cfg, base, rows), data.View(layout, payload), select=Mux))
    cases = [c for c in vrun_range_cases(cfg, np.random.default_rng(3), n_random=200)
             if max(c[0]) < 1 << width]
    seen = []

    async def bench(ctx):
        for (ub, ur), f in cases:
            ctx.set(base, ub)
            ctx.set(rows, ur)
            ctx.set(payload, layout.const(f))
            seen.append(bool(ctx.get(ok)))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert len(cases) > 200
    assert seen == [ranges_rule(_At(cfg, ub, ur), Opcode.VRUN, f) for (ub, ur), f in cases]


def test_board_dram_posted_write_reads_as_if_written_at_once():
    """The FPGA top's DRAM posts its writes a cycle late; reads still see a write from
    the next cycle on (and not in its own cycle), as the chip's memory contract says,
    over random reads and writes that hit a few words back to back."""
    from systolica.rtl.fpga.top import BoardDram

    depth, rng = 4, random.Random(5)
    dut = BoardDram(width=16, depth=depth)
    ops = [(rng.random() < 0.6, rng.random() < 0.5, rng.randrange(depth),
            rng.randrange(1 << 16)) for _ in range(400)]
    model, want, got = [0] * depth, [], []

    async def bench(ctx):
        for re, we, addr, wdata in ops:
            ctx.set(dut.re, re)
            ctx.set(dut.we, we)
            ctx.set(dut.addr, addr)
            ctx.set(dut.wdata, wdata)
            if re:
                want.append(model[addr])      # the words before this cycle's write
            if we:
                model[addr] = wdata
            await ctx.tick()
            if re:
                got.append(ctx.get(dut.rdata))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got == want and len(got) > 200
