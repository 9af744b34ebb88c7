# amaranth: UnusedElaboratable=no
"""The link bridge alone in Amaranth's simulator (no UART, no chip): the DRAM is
refused (``BUSY``) while the chip runs and, on a chip with the management core,
while the core runs (``CORE_STATUS.RUNNING``), since the core reaches the DRAM
itself. The whole FPGA top with the core is ``test_fpga_top.py``'s."""

from __future__ import annotations

import pytest
from amaranth.sim import Simulator

from systolica.arch import link
from systolica.arch.config import preset
from systolica.arch.link import Command, Status
from systolica.arch.regs import CORE_STATUS_RUNNING, STATUS_RUNNING, Reg
from systolica.rtl.fpga.bridge import LinkBridge


def answers(cfg, frames, registers):
    """The status of the bridge's answer to each of ``frames``, fed a byte every
    fourth cycle (a UART's bytes come far apart; the bridge takes none in the cycle it
    executes a header), with a register file that reads ``registers[reg]`` (0 for any other); also
    every register address the bridge showed between requests."""
    dut = LinkBridge(cfg=cfg, idle_timeout=16)
    got, idle_addrs = [], set()

    async def regfile(ctx):
        async for addr, in ctx.changed(dut.reg_addr):
            ctx.set(dut.reg_rdata, registers.get(addr, 0))

    sent = []

    async def uart_tx(ctx):
        ctx.set(dut.tx.ready, 1)
        async for _, _, valid, payload in ctx.tick().sample(dut.tx.valid, dut.tx.payload):
            if valid:
                sent.append(payload)

    def answered() -> bool:     # sync, status, length (2), the data, CRC
        return len(sent) >= 4 and len(sent) >= 5 + sent[2] + 256 * sent[3]

    async def bench(ctx):
        await ctx.tick().repeat(4)          # the status registers settle
        for frame in frames:
            sent.clear()
            for byte in frame:
                ctx.set(dut.rx.valid, 1)
                ctx.set(dut.rx.payload, byte)
                await ctx.tick()
                ctx.set(dut.rx.valid, 0)
                await ctx.tick().repeat(3)
            while not answered():
                await ctx.tick()
            assert sent[0] == link.RESPONSE_SYNC
            got.append(Status(sent[1]))
            for _ in range(40):     # quiet: a drained line, the status registers polled
                idle_addrs.add(ctx.get(dut.reg_addr))
                await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_process(regfile)
    sim.add_process(uart_tx)
    sim.add_testbench(bench)
    sim.run()
    return got, idle_addrs


FRAMES = [link.request(Command.DRAM_READ, 0, 1),
          link.request(Command.DRAM_WRITE, 4, 1, bytes(range(4))),
          link.request(Command.REG_READ, Reg.STATUS)]


@pytest.mark.parametrize("who", ["nobody", "chip", "core"])
def test_dram_refused_while_the_chip_or_its_core_runs(who):
    cfg = preset("ulx3s")
    assert cfg.has_core and cfg.dram_word_bytes == 4
    registers = {Reg.STATUS: STATUS_RUNNING if who == "chip" else 0,
                 Reg.CORE_STATUS: CORE_STATUS_RUNNING if who == "core" else 0}
    got, idle = answers(cfg, FRAMES, registers)
    dram = Status.OK if who == "nobody" else Status.BUSY
    assert got == [dram, dram, Status.OK], who
    assert idle == {Reg.STATUS, Reg.CORE_STATUS}


def test_a_chip_without_the_core_polls_status_alone():
    """The Gowin presets have no core: the bridge shows STATUS alone between
    requests, and a CORE_STATUS that read RUNNING would not matter."""
    cfg = preset("tangnano9k")
    assert not cfg.has_core
    frames = [link.request(Command.DRAM_READ, 0, 1)]
    got, idle = answers(cfg, frames, {Reg.CORE_STATUS: CORE_STATUS_RUNNING})
    assert got == [Status.OK] and idle == {Reg.STATUS}
