"""The UBUF where its registers put it (docs/contract.md, "The UBUF"): UBUF_BASE and
UBUF_ROWS are read-write, reset to the configuration's, and refuse a placement the
chip does not allow. The golden model, the compiler and the chip all use the values
the host wrote: a chain compiled for a moved UBUF runs bit for bit on tiny once the
driver has written them, and a COPY or fused crop outside the UBUF of the moment
faults ADDR_RANGE. (The register file's own rule, cycle by cycle: tb_csr.py.)"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from systolica import golden
from systolica.arch import isa
from systolica.arch.config import ConfigError, preset
from systolica.arch.isa import CopyKind, DmaKind, Instr, Opcode
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode, Reg
from systolica.compiler import compile_network
from systolica.compiler.lowering.chain import ChainChoice
from systolica.firmware.driver import Driver, UbufRefused
from systolica.models.chain_cases import seed_four_layer, seed_two_layer

from chip_runs import assert_matches_prediction, assert_outputs_match, run_many_on_rtl

CFG = preset("tiny")                  # UBUF: rows [1792, 2048), banks of 256 rows
MOVED = (1536, 512)                   # two banks, the last two
R = CFG.rows


def _image(program):
    return isa.to_bytes([isa.encode(i) for i in program])


def _copy_program(ubuf_addr: int, base: int = 0):
    """Load 8 rows, crop them into UBUF row `ubuf_addr` and fetch them back to 100;
    store both those and the UBUF's rows, read as CBUF rows `base + ubuf_addr ..`."""
    return [Instr(Opcode.DMA, 0, dict(kind=DmaKind.LOAD_CBUF, dram_addr=0, dram_stride=1,
                                      buf_addr=0, rows=8)),
            Instr(Opcode.COPY, 20, dict(kind=CopyKind.CROP, cbuf_addr=0,
                                        ubuf_addr=ubuf_addr, rows=8)),
            Instr(Opcode.COPY, 40, dict(kind=CopyKind.FETCH, cbuf_addr=100,
                                        ubuf_addr=ubuf_addr, rows=8)),
            Instr(Opcode.DMA, 60, dict(kind=DmaKind.STORE_CBUF, dram_addr=64,
                                       dram_stride=1, buf_addr=100, rows=8)),
            Instr(Opcode.DMA, 80, dict(kind=DmaKind.STORE_CBUF, dram_addr=80,
                                       dram_stride=1, buf_addr=base + ubuf_addr, rows=8))]


DRAM = np.random.default_rng(3).integers(0, 256, (8, R), dtype=np.uint8)

#: name -> (program, UBUF registers, fault expected)
COPIES = {
    "inside_moved": (_copy_program(300, MOVED[0]), MOVED, ErrorCode.NONE),
    "past_reset_ubuf": (_copy_program(300), None, ErrorCode.ADDR_RANGE),
    "no_ubuf": (_copy_program(0), (1024, 0), ErrorCode.ADDR_RANGE),
    "fused_crop_into_moved_ubuf": ([
        Instr(Opcode.VRUN, 0, dict(src=0, rows=4, dst=1600, crop=1))], MOVED,
        ErrorCode.ILLEGAL_OPCODE),
    "fused_crop_on_moved_ubuf": ([        # crops wrap round to UBUF rows 254, 255, 0, 1
        # (the ACC rows it reads written first: a program reads no row it did not write)
        Instr(Opcode.DMA, 0, dict(kind=DmaKind.LOAD_ACC, dram_addr=0, dram_stride=1,
                                  buf_addr=0, rows=4)),
        Instr(Opcode.VRUN, 30, dict(src=0, rows=4, dst=1790, crop=1))], (0, 256),
        ErrorCode.NONE),
    "fused_crop_without_ubuf": ([
        Instr(Opcode.VRUN, 0, dict(src=0, rows=4, dst=0, crop=1))], (1024, 0),
        ErrorCode.ADDR_RANGE),
    "fused_crop_past_ubuf_rows": ([
        Instr(Opcode.VRUN, 0, dict(src=0, rows=300, dst=0, crop=1))], None,
        ErrorCode.ADDR_RANGE),
}


# -- without a simulator ----------------------------------------------------------------

def test_configuration_placements():
    assert CFG.ubuf_span == (0, CFG.cbuf_depth)
    assert CFG.at_ubuf(*MOVED).ubuf_base == 1536 and CFG.at_ubuf(1792, 256) is CFG
    for base, rows, what in ((1536, 768, "power of two"), (1000, 256, "whole CBUF banks"),
                             (1792, 512, "outside"), (2048, 256, "outside")):
        with pytest.raises(ConfigError, match=what):
            CFG.at_ubuf(base, rows)
    own = CFG.replace(name="own", ubuf_base=CFG.cbuf_depth, ubuf_own_sram=True)
    assert own.ubuf_span == (2048, 2304)
    assert own.ubuf_problem(1792, 256) and not own.ubuf_problem(2048, 256)


@pytest.mark.parametrize("case", list(COPIES))
def test_golden_model_checks_ranges_against_the_registers(case):
    program, ubuf, code = COPIES[case]
    res = golden.run(CFG, Loadable.for_chip(CFG, _image(program), DRAM, ubuf=ubuf))
    assert res.error == code
    if case == "fused_crop_on_moved_ubuf":     # dst 1790: inside the reset UBUF only
        assert golden.run(CFG, Loadable.for_chip(CFG, _image(program), DRAM)).error \
            == ErrorCode.ILLEGAL_OPCODE
        assert res.ubuf_bytes_written == 4 * R
    if case == "inside_moved":
        # fetched back, and cropped to UBUF_BASE + 300, a row the reset UBUF lacks
        np.testing.assert_array_equal(res.dram[64:72], DRAM)
        np.testing.assert_array_equal(res.dram[80:88], DRAM)


def test_golden_model_refuses_a_placement_the_registers_refuse():
    with pytest.raises(ConfigError, match="power of two"):
        golden.run(CFG, Loadable.for_chip(CFG, _image(_copy_program(0)), DRAM, ubuf=(1024, 768)))


class _FakeChip:
    """A register bus whose UBUF registers follow the rule of the configuration."""

    def __init__(self, cfg):
        self.cfg, self.regs, self.writes = cfg, {Reg.UBUF_BASE: cfg.ubuf_base,
                                                 Reg.UBUF_ROWS: cfg.ubuf_rows}, []

    async def write(self, reg, value):
        self.writes.append((reg, value))
        pair = {**self.regs, reg: value}
        if reg in self.regs and not self.cfg.ubuf_problem(pair[Reg.UBUF_BASE],
                                                         pair[Reg.UBUF_ROWS]):
            self.regs[reg] = value

    async def read(self, reg):
        return self.regs.get(reg, 0)


def test_driver_sets_the_ubuf_and_reports_a_refusal():
    chip = _FakeChip(CFG)
    driver = Driver(chip)
    # straight to base 0 with 1024 rows: base first would break the pair (0 + 256
    # fine) ... rows first would too (1792 + 1024): the driver goes through 0 rows
    asyncio.run(driver.set_ubuf(0, 1024))
    assert chip.regs == {Reg.UBUF_BASE: 0, Reg.UBUF_ROWS: 1024}
    asyncio.run(driver.load_program(_image(_copy_program(0)), ubuf=(1536, 512)))
    assert chip.regs == {Reg.UBUF_BASE: 1536, Reg.UBUF_ROWS: 512}
    with pytest.raises(UbufRefused, match="base 1000, rows 256"):
        asyncio.run(driver.set_ubuf(1000, 256))


def test_a_chain_compiled_for_a_moved_ubuf_records_it():
    compiled = compile_network(CFG.at_ubuf(*MOVED), seed_two_layer(),
                               chain=ChainChoice("fused_crop", 8))
    assert compiled.ubuf == MOVED
    copies = [i for i in compiled.program if i.op == Opcode.COPY]
    assert copies and all(i.fields["ubuf_addr"] + i.fields["rows"] <= 512 for i in copies)
    moved = golden.run(CFG, Loadable.for_chip(CFG, compiled.image, compiled.dram,
                                              compiled.prog_addr, ubuf=MOVED))
    assert moved.error == ErrorCode.NONE and moved.ubuf_bytes_written


# -- on the chip ------------------------------------------------------------------------

#: name -> (chain, choice, UBUF registers): two banks at the top, and one bank low in
#: the CBUF with the chain's buffers on both sides of it
CHAINS = {"seed_two_fused": (seed_two_layer, ChainChoice("fused_crop", 8), MOVED),
          "seed_four_ubuf": (seed_four_layer, ChainChoice("crop_fetch", 8), MOVED),
          "seed_two_ubuf_low": (seed_two_layer, ChainChoice("crop_fetch", 8), (512, 256))}


@pytest.fixture(scope="module")
def chip_runs():
    compiled = {name: compile_network(CFG.at_ubuf(*ubuf), make(), chain=choice)
                for name, (make, choice, ubuf) in CHAINS.items()}
    jobs = [dict(program=c, name=n) for n, c in compiled.items()]
    jobs += [dict(program=_image(p), dram=DRAM, name=n, ubuf=u, readback=[(64, 24)],
                  expect_fault=code != ErrorCode.NONE)
             for n, (p, u, code) in COPIES.items()]
    results = run_many_on_rtl(CFG, jobs)
    return compiled, dict(zip([j["name"] for j in jobs], results))


@pytest.mark.rtl
@pytest.mark.parametrize("case", list(CHAINS))
def test_chain_on_a_ubuf_moved_by_register(chip_runs, case):
    """Built with the UBUF at [1792, 2048), run with it at [1536, 2048) or [512, 768):
    outputs equal numpy and the golden model, cycles and counters the prediction."""
    compiled, res = chip_runs[0][case], chip_runs[1][case]
    assert compiled.ubuf == CHAINS[case][2] and compiled.ubuf_bytes_written
    base, rows = compiled.ubuf
    for r in compiled.plan.regions:            # the chain's buffers keep off the UBUF
        if r.memory == "cbuf" and r.size and "ubuf" not in r.key:
            assert r.hi <= base or r.lo >= base + rows, r
    assert_outputs_match(CFG, compiled, res)
    assert_matches_prediction(CFG, compiled, res)


@pytest.mark.rtl
@pytest.mark.parametrize("case", list(COPIES))
def test_chip_checks_copies_against_the_registers(chip_runs, case):
    program, ubuf, code = COPIES[case]
    res = chip_runs[1][case]
    gold = golden.run(CFG, Loadable.for_chip(CFG, _image(program), DRAM, ubuf=ubuf))
    assert (res.error, res.fault_pc, res.fault_cycle) == \
        (code, gold.fault_pc, gold.fault_cycle)
    if code == ErrorCode.NONE:
        if case == "inside_moved":          # fetched back, and read in the UBUF
            np.testing.assert_array_equal(res.readback[0][:8], DRAM)
            np.testing.assert_array_equal(res.readback[0][16:], DRAM)
        assert res.cycles == gold.cycles and res.ubuf_wr_bytes == gold.ubuf_bytes_written
