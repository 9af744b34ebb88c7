"""The register bus and DRAM access of ``systolica/sim/hdl/sim_top.v`` in cocotb.

Register writes are set up on a falling clock edge and taken by the chip on the next
rising edge; reads set ``reg_addr`` and sample the combinational ``reg_rdata`` shortly
after. Waiting for the interrupt is a single edge trigger raced against a timer, so
a long run costs no Python work per cycle. The DRAM model is loaded and dumped
through files (``+DRAM_IN=`` / ``+DRAM_OUT=`` plusargs of the simulator), only the
regions asked for: a large memory costs nothing that a run does not use.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import FallingEdge, First, RisingEdge, Timer

from systolica.arch.regs import Reg
from systolica.firmware import dramfile


class CocotbBus:
    """Clock, reset, register bus and bulk DRAM access for one ``sim_top`` instance.

    ``dram_in`` and ``dram_out`` are the files the simulator was started with as
    ``+DRAM_IN=`` and ``+DRAM_OUT=``.
    """

    def __init__(self, dut, *, dram_in: Path, dram_out: Path, word_bytes: int,
                 period_ns: int = 10):
        self.dut = dut
        self.dram_in = Path(dram_in)
        self.dram_out = Path(dram_out)
        self.word_bytes = word_bytes
        self.period_ns = period_ns

    async def start(self) -> None:
        """Start the clock, drive every input idle and reset the chip."""
        dut = self.dut
        for sig in (dut.reg_addr, dut.reg_wdata, dut.reg_we, dut.dram_load, dut.dram_dump,
                    dut.dram_first, dut.dram_count):
            sig.value = 0
        dut.rst.value = 1
        Clock(dut.clk, self.period_ns, unit="ns").start()
        await self.reset()

    async def reset(self, cycles: int = 2) -> None:
        dut = self.dut
        await FallingEdge(dut.clk)
        dut.rst.value = 1
        for _ in range(cycles):
            await RisingEdge(dut.clk)
        await FallingEdge(dut.clk)
        dut.rst.value = 0

    def sim_cycle(self) -> int:
        """The current simulation time in clock periods."""
        return int(get_sim_time("ns") // self.period_ns)

    # -- register bus (systolica.firmware.driver.RegisterBus) ----------------------------
    async def write(self, reg: Reg, value: int) -> None:
        dut = self.dut
        await FallingEdge(dut.clk)
        dut.reg_addr.value = int(reg)
        dut.reg_wdata.value = value & 0xFFFF_FFFF
        dut.reg_we.value = 1
        await RisingEdge(dut.clk)
        dut.reg_we.value = 0

    async def read(self, reg: Reg) -> int:
        dut = self.dut
        await FallingEdge(dut.clk)
        dut.reg_addr.value = int(reg)
        await Timer(1, unit="ns")
        return int(dut.reg_rdata.value)

    async def wait_irq(self, timeout_cycles: int) -> bool:
        dut = self.dut
        if int(dut.irq.value):
            return True
        edge = RisingEdge(dut.irq)
        fired = await First(edge, Timer(timeout_cycles * self.period_ns, unit="ns"))
        return fired is edge or bool(int(dut.irq.value))

    # -- DRAM model ---------------------------------------------------------------------
    async def load_dram(self, segments) -> None:
        """Zero the DRAM and load ``segments``, ``(first_word, image)`` pairs (uint8
        images, words x word_bytes)."""
        dramfile.write_segments(self.dram_in, segments)
        await self._pulse(self.dut.dram_load)

    async def load_dram_file(self, path: Path) -> None:
        """Zero the DRAM and load a file made by :func:`dramfile.write_segments`."""
        shutil.copyfile(path, self.dram_in)
        await self._pulse(self.dut.dram_load)

    async def dump_dram(self, first: int, count: int) -> np.ndarray:
        """DRAM words ``[first, first + count)`` (uint8, count x word_bytes)."""
        if count == 0:
            return np.zeros((0, self.word_bytes), dtype=np.uint8)
        self.dram_out.unlink(missing_ok=True)
        self.dut.dram_first.value = first
        self.dut.dram_count.value = count
        await self._pulse(self.dut.dram_dump)
        return dramfile.read_hex(self.dram_out, self.word_bytes)

    async def _pulse(self, sig) -> None:
        await FallingEdge(self.dut.clk)
        sig.value = 1
        await RisingEdge(self.dut.clk)
        sig.value = 0
        await FallingEdge(self.dut.clk)
