"""Run jobs on the chip with the plain C++ harness (``hdl/harness.cpp``), no Python in
the simulation loop.

The harness executes a script of port-level commands; this module writes that script
from the firmware driver's own register sequence (:class:`ScriptBus` records what
:class:`systolica.firmware.driver.Driver` does), so the cocotb and C++ harnesses load,
start and read the chip identically. Each job runs in its own process: starting one
costs milliseconds.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import numpy as np

from ..arch.regs import CTRL_START, Reg
from ..firmware import dramfile
from ..firmware.driver import COUNTER_REGS, Driver, counters_from


class ScriptBus:
    """A register bus that writes harness commands instead of driving a chip."""

    def __init__(self):
        self.lines: list[str] = []

    async def write(self, reg: Reg, value: int) -> None:
        if reg == Reg.CTRL and value == CTRL_START:
            self.lines.append("mark")     # the measured window opens at the start write
        self.lines.append(f"write {int(reg)} {value & 0xFFFF_FFFF}")

    async def read(self, reg: Reg) -> int:
        self.lines.append(f"read {reg.name} {int(reg)}")
        return 0

    async def wait_irq(self, timeout_cycles: int) -> bool:
        self.lines.append(f"wait {int(timeout_cycles)}")
        return True


def script(program: bytes, timeout_cycles: int) -> str:
    """The harness commands of one job: reset, load the DRAM image, load the program,
    start, wait for the interrupt, read the counters, dump the DRAM, acknowledge."""
    bus = ScriptBus()
    driver = Driver(bus)
    bus.lines += ["reset 2", "load"]

    async def session():
        await driver.load_program(program)
        await driver.start()
        await bus.wait_irq(timeout_cycles)
        for reg in COUNTER_REGS:
            await bus.read(reg)
        bus.lines.append("dump")
        await driver.ack()
    asyncio.run(session())
    return "\n".join(bus.lines) + "\n"


def run_job(executable: Path, run_dir: Path, index: int, *, program: bytes,
            image: np.ndarray, timeout_cycles: int, period_ns: int = 10) -> dict:
    """Run one job; the raw result (the registers by name, the measured window and
    the whole DRAM after the run as ``dump``). Raises RuntimeError if the harness
    fails."""
    dram_in, dram_out = run_dir / f"job{index}-in.hex", run_dir / f"job{index}-out.hex"
    commands = run_dir / f"job{index}.script"
    dramfile.write_hex(dram_in, image)
    commands.write_text(script(program, timeout_cycles))
    log = run_dir / f"job{index}.log"
    with open(log, "w") as err:
        done = subprocess.run([str(executable), f"+DRAM_IN={dram_in}",
                               f"+DRAM_OUT={dram_out}", str(commands)],
                              stdout=subprocess.PIPE, stderr=err, text=True)
    if done.returncode:
        raise RuntimeError(f"{executable.name} exited with {done.returncode}; see {log}")
    values = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        values[key] = float(value) if key == "wall_s" else int(value)
    result = counters_from({reg: values[reg.name] for reg in COUNTER_REGS})
    result.update(irq=bool(values["irq"]), timed_out=not values["irq"],
                  sim_cycles=values["sim_cycles"],
                  start_time_ns=values["start_cycle"] * period_ns, wall_s=values["wall_s"],
                  dump=dramfile.read_hex(dram_out, image.shape[1]))
    return result
