"""cocotb side of the FPGA top's tests (``test_fpga_top.py``): the host drives the
UART lines bit by bit through :class:`~systolica.firmware.cocotb_uart.CocotbUart`
and speaks to the chip with the same link driver and board flow a real board gets
(:mod:`systolica.firmware.link`, :mod:`systolica.app.board`)."""

from __future__ import annotations

import dataclasses
import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from systolica.app import board
from systolica.app.demo import calibrate
from systolica.arch import isa, link
from systolica.arch.config import preset
from systolica.arch.isa import Instr, Opcode
from systolica.arch.link import Command, LinkTiming, Status
from systolica.arch.regs import (
    CORE_CTRL_RUN,
    CORE_STATUS_MESSAGE,
    CORE_STATUS_RUNNING,
    STATUS_DONE,
    STATUS_RUNNING,
    ErrorCode,
    Reg,
)
from systolica.compiler import compile_network, gemm
from systolica.firmware.cocotb_uart import CocotbUart
from systolica.firmware.core_image import IMEM_BASE, FwResult
from systolica.firmware.driver import ChipTimeout, Driver
from systolica.firmware.link import LinkBus, LinkRejected, LinkTimeout

from tb_base import CLOCK_NS

#: The chip preset, chosen by the pytest side (``test_fpga_top.py``).
CFG = preset(os.environ.get("FPGA_TOP_CONFIG", "tiny"))
#: A few clocks per bit keep the simulation short; the idle timeout is ten bytes.
LINK = LinkTiming(clock_hz=1_000_000_000 // CLOCK_NS, divisor=4, idle_timeout=400)
LED_RUNNING, LED_DONE, LED_FAULT = 1, 2, 4


class FpgaTopTB:
    """Clock, reset, the host's UART and its link bus for one ``fpga_top``."""

    def __init__(self, dut):
        self.dut = dut
        self.uart = CocotbUart(dut, divisor=LINK.divisor, period_ns=CLOCK_NS)
        self.bus = LinkBus(self.uart, timing=LINK, word_bytes=CFG.dram_word_bytes,
                           dram_words=CFG.dram_words)

    async def start(self) -> None:
        dut = self.dut
        dut.rst.value = 1
        Clock(dut.clk, CLOCK_NS, unit="ns").start()
        self.uart.start()
        await ClockCycles(dut.clk, 4)
        dut.rst.value = 0
        await ClockCycles(dut.clk, 4)

    @property
    def leds(self) -> int:
        return int(self.dut.leds.value)

    async def rejected(self, frame: bytes, what: str) -> Status:
        """The status the bridge rejects ``frame`` with (fails if it is accepted)."""
        try:
            await self.bus.exchange(frame, what=what)
        except LinkRejected as exc:
            return exc.status
        raise AssertionError(f"{what}: the bridge accepted the frame")

    async def link_alive(self, value: int) -> None:
        """A register write and read-back through the link work."""
        await self.bus.write(Reg.PROG_ADDR, value)
        got = await self.bus.read(Reg.PROG_ADDR)
        assert got == value, f"PROG_ADDR read back {got}, wrote {value}"


def _gemm(M, K, N, seed, *, int32=False):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, size=(M, K), dtype=np.int8)
    b = rng.integers(-128, 128, size=(K, N), dtype=np.int8)
    c = rng.integers(-4000, 4000, size=N, dtype=np.int32)
    if int32:
        return gemm(a, b, c, relu=True, out_dtype="int32", name=f"g{M}x{K}x{N}")
    mult, shift = calibrate(a, b, c)
    return gemm(a, b, c, mult=mult, shift=shift, zp=-3, relu=True, name=f"g{M}x{K}x{N}")


#: Compiled GEMMs run one after the other through the link.
GEMMS = {"int8_24x20x12": lambda: _gemm(24, 20, 12, 1),
         "int32_9x16x13": lambda: _gemm(9, 16, 13, 2, int32=True)}


@cocotb.test()
async def gemm_runs(dut):
    """Each GEMM loaded, run and read back over the link: outputs equal numpy and the
    golden model bit for bit, CYCLES equals the compiler's prediction, and the
    lights show done until the interrupt is acknowledged."""
    tb = FpgaTopTB(dut)
    await tb.start()
    info = await tb.bus.check_info()
    assert info["word_bytes"] == CFG.dram_word_bytes
    for name, make in GEMMS.items():
        compiled = compile_network(CFG, make())
        run = await board.run_compiled(tb.bus, compiled)
        bad = board.problems(compiled, run)
        assert not bad, f"{name}: " + "; ".join(bad)
        assert run.cycles == compiled.predicted_cycles
        assert run.counters["macs"] == compiled.array_macs
        assert run.counters["dram_rd_bytes"] == compiled.dram_bytes_read
        assert run.counters["dram_wr_bytes"] == compiled.dram_bytes_written
        assert tb.leds == 0, f"{name}: lights {tb.leds:03b} after the acknowledge"
        dut._log.info("%s: %d cycles as predicted, outputs exact", name, run.cycles)


@cocotb.test()
async def link_errors(dut):
    """Garbled, broken-off and wrong-length requests and bad addresses each get
    their own error on the host, and the link works after every one."""
    tb = FpgaTopTB(dut)
    await tb.start()
    words = CFG.dram_word_bytes
    data = bytes(np.random.default_rng(3).integers(0, 256, 3 * words, dtype=np.uint8))

    frame = bytearray(link.request(Command.REG_WRITE, Reg.PROG_ADDR, 77))
    frame[6] ^= 0x10
    assert await tb.rejected(bytes(frame), "garbled header") == Status.BAD_CRC
    assert await tb.bus.read(Reg.PROG_ADDR) == 0, "a garbled write reached the register"
    await tb.link_alive(77)

    frame = bytearray(link.request(Command.DRAM_WRITE, 40, 3, data))
    frame[15] ^= 0x01
    assert await tb.rejected(bytes(frame), "garbled data") == Status.BAD_CRC
    await tb.link_alive(78)

    whole = link.request(Command.REG_READ, Reg.PROG_ADDR)
    assert await tb.rejected(whole[:6], "broken off") == Status.TIMEOUT
    await tb.link_alive(79)

    short = link.request(Command.DRAM_WRITE, 40, 3, data[:2 * words])
    assert await tb.rejected(short, "fewer words than announced") == Status.TIMEOUT
    await tb.link_alive(80)

    for what, frame, status in (
            ("no words", link.request(Command.DRAM_READ, 0, 0), Status.BAD_LENGTH),
            ("too many words", link.request(Command.DRAM_READ, 0,
                                            link.max_transfer_words(words) + 1),
             Status.BAD_LENGTH),
            ("past the DRAM", link.request(Command.DRAM_READ, CFG.dram_words - 1, 2),
             Status.BAD_RANGE),
            ("no such register", link.request(Command.REG_READ, 40), Status.BAD_RANGE),
            ("no such command", link.request(9), Status.BAD_COMMAND)):
        assert await tb.rejected(frame, what) == status, what
        await tb.link_alive(81)

    lost = bytearray(link.request(Command.REG_READ, Reg.PROG_ADDR))
    lost[0] = 0
    assert link.REQUEST_SYNC not in lost
    try:
        await tb.bus.exchange(bytes(lost), what="no sync byte", answer_bytes=4)
    except LinkTimeout:
        pass
    else:
        raise AssertionError("a frame without its sync byte was answered")
    await tb.link_alive(82)

    await tb.bus.write_dram(40, np.frombuffer(data, np.uint8).reshape(3, words))
    back = await tb.bus.read_dram(40, 3)
    assert back.tobytes() == data, "DRAM words read back differ from those written"


@cocotb.test()
async def chip_reset(dut):
    """A long run: the lights show it running, the DRAM is refused while it runs,
    the driver times out, the link's RESET stops the chip, and the chip runs again."""
    tb = FpgaTopTB(dut)
    await tb.start()
    bus, driver = tb.bus, Driver(tb.bus)
    late = 30_000
    image = isa.to_bytes([isa.encode(Instr(Opcode.SETCFG, late, dict(index=0, value=0)))])
    await driver.load_program(image, imem_depth=CFG.imem_depth)
    await driver.start()
    await bus.read(Reg.STATUS)
    assert tb.leds == LED_RUNNING, f"lights {tb.leds:03b} while running"
    try:
        await bus.read_dram(0, 1)
    except LinkRejected as exc:
        assert exc.status == Status.BUSY
    else:
        raise AssertionError("DRAM read while the chip runs was not refused")
    try:
        await driver.wait_done(timeout_cycles=2_000)
    except ChipTimeout:
        pass
    else:
        raise AssertionError("the run ended before its late instruction")
    await bus.reset_chip()
    assert await bus.read(Reg.STATUS) == 0
    assert tb.leds == 0
    await bus.read_dram(0, 1)

    await driver.load_program(image, imem_depth=CFG.imem_depth)
    await driver.start()
    status = await driver.wait_done(timeout_cycles=4 * late)
    assert status & STATUS_DONE and not status & STATUS_RUNNING, status
    assert tb.leds == LED_DONE, f"lights {tb.leds:03b} after the run"
    counters = await driver.counters()
    assert counters["error"] == 0 and counters["cycles"] > late, counters


# -- the management core (a chip with one: test_fpga_top.py runs these on ulx3s) ----------

#: RV32I ``jal x0, 0`` (``j .``): a firmware that only spins.
SPIN = 0x0000006F


async def refused_busy(what: str, access) -> None:
    try:
        await access()
    except LinkRejected as exc:
        assert exc.status == Status.BUSY, f"{what}: {exc.status.name}"
    else:
        raise AssertionError(f"{what} while the management core runs was not refused")


@cocotb.test()
async def core_busy(dut):
    """While the management core runs (CORE_STATUS.RUNNING) the bridge refuses the
    DRAM (BUSY) though the array is idle, since the core reaches the DRAM itself; the
    registers stay reachable; once the host holds the core again, or resets the chip,
    the DRAM is the bridge's."""
    assert CFG.has_core, f"{CFG.name} has no management core"
    tb = FpgaTopTB(dut)
    await tb.start()
    bus = tb.bus
    word = np.arange(CFG.dram_word_bytes, dtype=np.uint8).reshape(1, -1)
    for release_by in ("CORE_CTRL", "RESET"):
        await bus.write(Reg.CORE_CTRL, 0)
        await bus.write(Reg.CORE_ADDR, IMEM_BASE)
        await bus.write(Reg.CORE_DATA, SPIN)
        await bus.write(Reg.CORE_CTRL, CORE_CTRL_RUN)
        assert await bus.read(Reg.CORE_STATUS) == CORE_STATUS_RUNNING
        assert await bus.read(Reg.STATUS) == 0, "the array is not idle"
        assert tb.leds == 0, f"lights {tb.leds:03b}: the array is idle"
        await refused_busy("a DRAM read", lambda: bus.read_dram(0, 1))
        await refused_busy("a DRAM write", lambda: bus.write_dram(0, word))
        await tb.link_alive(90)
        if release_by == "CORE_CTRL":
            await bus.write(Reg.CORE_CTRL, 0)
        else:
            await bus.reset_chip()
        assert await bus.read(Reg.CORE_STATUS) == 0
        await bus.write_dram(0, word)
        assert np.array_equal(await bus.read_dram(0, 1), word), release_by
        word = word[:, ::-1].copy()


def illegal_first(compiled):
    """``compiled`` with its first instruction zeroed: the chip faults ILLEGAL_OPCODE at
    pc 0 whether it fetched the program from DRAM or found an empty instruction
    memory."""
    width = isa.WORD_BITS // 8
    return dataclasses.replace(compiled, image=bytes(width) + compiled.image[width:])


@cocotb.test()
async def firmware_reports_a_fault(dut):
    """``systolica run --firmware``'s flow on a program that faults: the host writes the
    DRAM, loads the firmware and its one-step table over the link, gets the core's
    message, reads the mailbox back, and raises an error naming the step, the chip's
    error code, pc and cycle; the chip is reset and the link works after it."""
    tb = FpgaTopTB(dut)
    await tb.start()
    name = "int8_24x20x12"
    graph = GEMMS[name]()
    compiled = illegal_first(compile_network(CFG, graph, board.firmware_options(CFG)))
    try:
        await board.run_by_firmware(tb.bus, compiled)
    except board.FirmwareFault as exc:
        table, text = exc.table, str(exc)
    else:
        raise AssertionError("a program with an illegal first instruction ran")
    head = table.mailbox
    assert table.result == FwResult.CHIP_FAULT and table.message == FwResult.CHIP_FAULT
    assert table.core_status & CORE_STATUS_MESSAGE and not table.problems, table
    assert head["n_steps"] == 1 and head["fault_step"] == 0, head
    assert head["fault_code"] == ErrorCode.ILLEGAL_OPCODE and head["fault_pc"] == 0, head
    for words in (f"step 0 ({graph.name})", "ILLEGAL_OPCODE", "at pc 0",
                  f"cycle {head['fault_cycle']}"):
        assert words in text, f"{words!r} missing from: {text}"
    assert await tb.bus.read(Reg.STATUS) == 0 and await tb.bus.read(Reg.CORE_STATUS) == 0
    assert tb.leds == 0
    await tb.bus.read_dram(0, 1)
    dut._log.info("the firmware's fault: %s", text)


@cocotb.test()
async def firmware_runs(dut):
    """Each GEMM sequenced by the firmware (``systolica run --firmware``): outputs equal
    numpy and the golden model bit for bit, CYCLES the compiler's prediction for a
    program fetched whole (PROG_FETCH 0), and the firmware's own record of the step
    agrees."""
    tb = FpgaTopTB(dut)
    await tb.start()
    for name, make in GEMMS.items():
        compiled = compile_network(CFG, make(), board.firmware_options(CFG))
        run = await board.run_by_firmware(tb.bus, compiled)
        bad = board.problems(compiled, run)
        assert not bad, f"{name}: " + "; ".join(bad)
        assert run.table.result == FwResult.OK and not run.table.problems
        assert run.table.steps[0]["t_cycles"] == run.cycles == compiled.predicted_cycles
        assert run.table.mailbox["cycles"] == run.cycles
        assert tb.leds == 0, f"{name}: lights {tb.leds:03b} after the run"
        dut._log.info("%s by the firmware: %d cycles as predicted, outputs exact", name,
                      run.cycles)
