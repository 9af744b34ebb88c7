"""The register bus and DRAM access of ``systolica/sim/hdl/sim_top.v`` in cocotb.

Register writes are set up on a falling clock edge and taken by the chip on the next
rising edge; reads set ``reg_addr`` and sample the combinational ``reg_rdata`` shortly
after. Waiting for the interrupt is an edge trigger raced against a timer, so a long
run costs no Python work per cycle: the timer runs in steps of a fraction of a second
of host time, after each of which ``progress`` (if set) is told the cycle reached.
Sampling the counters while the chip runs (:meth:`CocotbBus.sample`) waits with a
timer too, then reads every register within one clock cycle. The DRAM model is
loaded and dumped through files (``+DRAM_IN=`` / ``+DRAM_OUT=`` plusargs of the
simulator), only the regions asked for: a large memory costs nothing that a run
does not use.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
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
    ``+DRAM_IN=`` and ``+DRAM_OUT=``. ``progress``, if set, is called with the
    simulation's cycle (:meth:`sim_cycle`) a few times a second while a wait runs.
    """

    #: Host seconds between two looks at a long wait (the timer's steps adapt to it).
    STEP_SECONDS = 0.25
    #: Picoseconds between two reads of one snapshot: all of it well inside the low
    #: half of a clock cycle.
    READ_PS = 100

    def __init__(self, dut, *, dram_in: Path, dram_out: Path, word_bytes: int,
                 period_ns: int = 10):
        self.dut = dut
        self.dram_in = Path(dram_in)
        self.dram_out = Path(dram_out)
        self.word_bytes = word_bytes
        self.period_ns = period_ns
        self.progress: Callable[[int], None] | None = None
        self._step = 4096                   # cycles per timer step, adapted

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
        left = timeout_cycles
        while not int(dut.irq.value):
            if left <= 0:
                return False
            step = await self._wait(left)
            left -= step
        return True

    async def _wait(self, cycles: int) -> int:
        """Wait up to `cycles` clock periods (one step of at most :attr:`_step`) or
        until the interrupt rises; tell ``progress``; return the periods waited for."""
        edge = RisingEdge(self.dut.irq)
        step = max(1, min(cycles, self._step))
        began, wall = self.sim_cycle(), time.perf_counter()
        await First(edge, Timer(step * self.period_ns, unit="ns"))
        if self.progress is not None:
            self.progress(self.sim_cycle())
        spent = time.perf_counter() - wall
        if spent > 0 and self.sim_cycle() - began == step:    # a whole step: adapt it
            self._step = int(min(max(step * self.STEP_SECONDS / spent, 1024), 1 << 26))
        return step

    async def sample(self, cycles_reg: Reg, cycle: int, regs, timeout_cycles: int
                     ) -> dict[Reg, int]:
        """Once register `cycles_reg` (the chip's cycle counter) reads `cycle` or
        more, the interrupt is high or `timeout_cycles` have passed: the values of
        `regs`, all read in one clock cycle (after its falling edge, where
        :meth:`read` reads too)."""
        dut = self.dut
        await FallingEdge(dut.clk)
        waited = 0
        while True:
            now = await self._peek(cycles_reg)
            if now >= cycle or int(dut.irq.value) or waited >= timeout_cycles:
                break
            # the timer ends a little after the falling edge before the one wanted
            step = min(cycle - now, timeout_cycles - waited)
            if step > 1:
                step = 1 + await self._wait(step - 1)
            await FallingEdge(dut.clk)
            waited += step
        return {reg: await self._peek(reg) for reg in regs}

    async def _peek(self, reg: Reg) -> int:
        """Register `reg` now, without waiting for a clock edge."""
        self.dut.reg_addr.value = int(reg)
        await Timer(self.READ_PS, unit="ps")
        return int(self.dut.reg_rdata.value)

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
