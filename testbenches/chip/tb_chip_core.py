"""cocotb side of ``test_chip_core.py``'s register cases: the CORE_* registers of the
chip (docs/management-core.md, "The core's registers") on ``sim_top``, with small
programs for the core encoded here (a few RV32I instructions each).

Cases (``BLOCK_CASE``, comma-separated, each on a freshly reset chip):

* ``memories``: the host writes both memories through CORE_ADDR / CORE_DATA while the
  core is held and reads them back; CORE_ADDR advances by 4 per write; while the core
  runs CORE_DATA reads 0 and ignores writes.
* ``window``: the core writes PROG_ADDR and then CORE_MSG while the host writes
  IMEM_ADDR in every cycle: the core's write waits for the first cycle without a host
  write, both writes land, and the message interrupts the host; IRQ_ACK clears it.
* ``dram``: the core stores into DRAM through its window and loads it back.
* ``trap``: ``ebreak`` with interrupts masked: CORE_STATUS.TRAP and the host's
  interrupt, both gone when the host holds the core.
* ``bad_access``: a load outside the core's map: CORE_STATUS.BAD_ACCESS and the
  interrupt.
* ``array_irq``: the array's interrupt reaches the host while the core is held and
  not while it runs.
* ``random_programs``: random RV32IM programs (:mod:`rv32_random`), their registers
  and scratch memory read back for the differential check against the ISS.
"""

from __future__ import annotations

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge, Timer

from systolica.arch.regs import (
    CORE_CTRL_RUN,
    CORE_STATUS_BAD_ACCESS,
    CORE_STATUS_MESSAGE,
    CORE_STATUS_RUNNING,
    CORE_STATUS_TRAP,
    CTRL_IRQ_ACK,
    CTRL_START,
    STATUS_DONE,
    Reg,
)
from systolica.firmware.core_image import DMEM_BASE, IMEM_BASE, REGS_BASE

from tb_base import case_names

A0, A1, A2, T0, T1 = 10, 11, 12, 5, 6


def lui(rd: int, value: int) -> int:
    return (value & 0xFFFFF000) | rd << 7 | 0x37


def addi(rd: int, rs1: int, imm: int) -> int:
    return (imm & 0xFFF) << 20 | rs1 << 15 | rd << 7 | 0x13


def sw(rs2: int, offset: int, rs1: int) -> int:
    return ((offset >> 5) & 0x7F) << 25 | rs2 << 20 | rs1 << 15 | 2 << 12 \
        | (offset & 0x1F) << 7 | 0x23


def lw(rd: int, offset: int, rs1: int) -> int:
    return (offset & 0xFFF) << 20 | rs1 << 15 | 2 << 12 | rd << 7 | 0x03


def lbu(rd: int, offset: int, rs1: int) -> int:
    return (offset & 0xFFF) << 20 | rs1 << 15 | 4 << 12 | rd << 7 | 0x03


EBREAK = 0x0010_0073
SPIN = 0x0000_006F          # jal x0, 0


def window_program(prog_addr: int, message: int) -> list[int]:
    return [lui(A0, REGS_BASE), lui(T0, prog_addr), addi(T0, T0, prog_addr & 0xFFF),
            sw(T0, 4 * Reg.PROG_ADDR, A0), addi(T1, 0, message),
            sw(T1, 4 * Reg.CORE_MSG, A0), SPIN]


class ChipTB:
    def __init__(self, dut):
        self.dut = dut

    async def start(self):
        dut = self.dut
        for sig in (dut.reg_addr, dut.reg_wdata, dut.reg_we, dut.dram_load, dut.dram_dump,
                    dut.dram_first, dut.dram_count):
            sig.value = 0
        dut.rst.value = 1
        Clock(dut.clk, 10, unit="ns").start()
        await ClockCycles(dut.clk, 2)
        await FallingEdge(dut.clk)
        dut.rst.value = 0

    async def write(self, reg: Reg, value: int):
        await FallingEdge(self.dut.clk)
        self.dut.reg_addr.value = int(reg)
        self.dut.reg_wdata.value = value & 0xFFFF_FFFF
        self.dut.reg_we.value = 1
        await RisingEdge(self.dut.clk)
        self.dut.reg_we.value = 0

    async def read(self, reg: Reg) -> int:
        await FallingEdge(self.dut.clk)
        self.dut.reg_addr.value = int(reg)
        await Timer(1, unit="ns")
        return int(self.dut.reg_rdata.value)

    @property
    def irq(self) -> int:
        return int(self.dut.irq.value)

    async def load(self, address: int, words: list[int]):
        await self.write(Reg.CORE_ADDR, address)
        for w in words:
            await self.write(Reg.CORE_DATA, w)

    async def peek(self, address: int) -> int:
        await self.write(Reg.CORE_ADDR, address)
        await self.read(Reg.CORE_DATA)          # the memory's read is registered
        return await self.read(Reg.CORE_DATA)

    async def run_program(self, words: list[int], cycles: int = 50):
        await self.write(Reg.CORE_CTRL, 0)
        await self.load(IMEM_BASE, words)
        await self.write(Reg.CORE_CTRL, CORE_CTRL_RUN)
        await ClockCycles(self.dut.clk, cycles)


async def memories(tb: ChipTB):
    data = [0x1111_0000 + k for k in range(4)]
    code = [0xDEAD_0000 + k for k in range(3)]
    await tb.load(DMEM_BASE, data)
    assert await tb.read(Reg.CORE_ADDR) == DMEM_BASE + 16
    await tb.load(IMEM_BASE + 8, code)
    assert [await tb.peek(DMEM_BASE + 4 * k) for k in range(4)] == data
    assert [await tb.peek(IMEM_BASE + 8 + 4 * k) for k in range(3)] == code
    await tb.run_program([SPIN], cycles=5)
    await tb.write(Reg.CORE_ADDR, DMEM_BASE)
    await tb.write(Reg.CORE_DATA, 0x5555_5555)          # ignored while it runs
    assert await tb.read(Reg.CORE_DATA) == 0
    assert await tb.read(Reg.CORE_STATUS) == CORE_STATUS_RUNNING
    await tb.write(Reg.CORE_CTRL, 0)
    assert await tb.peek(DMEM_BASE) == data[0]


async def window(tb: ChipTB):
    await tb.write(Reg.CORE_CTRL, 0)
    await tb.load(IMEM_BASE, window_program(0x1234, 7))
    await tb.write(Reg.CORE_CTRL, CORE_CTRL_RUN)
    for k in range(200):            # a host write in every cycle: the core's waits
        await tb.write(Reg.IMEM_ADDR, k)
    assert await tb.read(Reg.PROG_ADDR) == 0, "the core wrote in a cycle of the host's"
    assert not tb.irq
    await ClockCycles(tb.dut.clk, 40)
    assert await tb.read(Reg.PROG_ADDR) == 0x1234
    assert await tb.read(Reg.IMEM_ADDR) == 199
    assert await tb.read(Reg.CORE_MSG) == 7
    assert await tb.read(Reg.CORE_STATUS) == CORE_STATUS_RUNNING | CORE_STATUS_MESSAGE
    assert tb.irq
    await tb.write(Reg.CTRL, CTRL_IRQ_ACK)
    assert await tb.read(Reg.CORE_STATUS) == CORE_STATUS_RUNNING and not tb.irq


async def dram(tb: ChipTB):
    """The core stores a word into DRAM through its window, loads a byte and the word
    back, and reports them in CORE_MSG and PROG_ADDR."""
    await tb.run_program([
        lui(A0, 0x8000_0000), addi(A0, A0, 0x100), lui(T0, 0x1234_5000),
        addi(T0, T0, 0x678), sw(T0, 0, A0), lbu(T1, 1, A0), lw(A1, 0, A0),
        lui(A2, REGS_BASE), sw(A1, 4 * Reg.PROG_ADDR, A2), sw(T1, 4 * Reg.CORE_MSG, A2),
        SPIN], cycles=80)
    assert await tb.read(Reg.CORE_MSG) == 0x56
    assert await tb.read(Reg.PROG_ADDR) == 0x1234_5678
    assert await tb.read(Reg.CORE_STATUS) == CORE_STATUS_RUNNING | CORE_STATUS_MESSAGE


async def trap(tb: ChipTB):
    await tb.run_program([EBREAK])
    assert await tb.read(Reg.CORE_STATUS) == CORE_STATUS_RUNNING | CORE_STATUS_TRAP
    assert tb.irq
    await tb.write(Reg.CORE_CTRL, 0)
    assert await tb.read(Reg.CORE_STATUS) == 0 and not tb.irq


async def bad_access(tb: ChipTB):
    await tb.run_program([lui(A0, 0x2000_0000), lw(A1, 0, A0), SPIN])
    assert await tb.read(Reg.CORE_STATUS) == CORE_STATUS_RUNNING | CORE_STATUS_BAD_ACCESS
    assert tb.irq
    await tb.write(Reg.CORE_CTRL, 0)
    assert await tb.read(Reg.CORE_STATUS) == 0 and not tb.irq


async def array_irq(tb: ChipTB):
    for core_runs in (True, False):
        if core_runs:
            await tb.run_program([SPIN], cycles=5)
        await tb.write(Reg.PROG_LEN, 0)             # an empty program: done at once
        await tb.write(Reg.CTRL, CTRL_START)
        await ClockCycles(tb.dut.clk, 10)
        assert await tb.read(Reg.STATUS) & STATUS_DONE
        assert tb.irq == (not core_runs)
        await tb.write(Reg.CORE_CTRL, 0)
        await tb.read(Reg.STATUS)
        assert tb.irq                               # the core held: the array's again
        await tb.write(Reg.CTRL, CTRL_IRQ_ACK)
        await tb.read(Reg.STATUS)
        assert not tb.irq


async def random_programs(tb: ChipTB):
    """The programs of ``CORE_RANDOM`` (a JSON file: a list of word lists), each run
    until its CORE_MSG on a zeroed data memory; the compared words of each are written
    to ``CORE_RANDOM_OUT`` for the pytest side to check against the ISS."""
    import json
    import os

    import rv32_random
    programs = json.loads(open(os.environ["CORE_RANDOM"]).read())
    out = []
    for words in programs:
        await tb.write(Reg.CORE_CTRL, 0)
        await tb.load(IMEM_BASE, words)
        for address in rv32_random.compared_words():
            await tb.load(address, [0])
        await tb.write(Reg.CORE_CTRL, CORE_CTRL_RUN)
        for _ in range(200):
            await ClockCycles(tb.dut.clk, 50)
            if tb.irq:
                break
        assert await tb.read(Reg.CORE_MSG) == rv32_random.DONE, "no message"
        assert await tb.read(Reg.CORE_STATUS) == CORE_STATUS_RUNNING | CORE_STATUS_MESSAGE
        await tb.write(Reg.CORE_CTRL, 0)
        out.append([await tb.peek(a) for a in rv32_random.compared_words()])
    open(os.environ["CORE_RANDOM_OUT"], "w").write(json.dumps(out))


CASES = {"memories": memories, "window": window, "dram": dram, "trap": trap,
         "bad_access": bad_access, "array_irq": array_irq,
         "random_programs": random_programs}


@cocotb.test()
async def core_registers(dut):
    tb = ChipTB(dut)
    await tb.start()
    for name in case_names():
        dut._log.info("case %s", name)
        await CASES[name](tb)
        await tb.write(Reg.CORE_CTRL, 0)
        await tb.write(Reg.CTRL, CTRL_IRQ_ACK)
