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

from systolica.arch.regs import CTRL_START, Reg
from systolica.firmware import dramfile
from systolica.firmware.driver import COUNTER_REGS, Driver, counters_from


class ScriptBus:
    """A register bus that writes harness commands instead of driving a chip. A read
    answers, for the driver, what was last written to that register (0 if nothing):
    the script cannot look at the chip (the UBUF registers' read-back is checked
    where the chip answers, on the cocotb harness)."""

    def __init__(self):
        self.lines: list[str] = []
        self.written: dict[int, int] = {}

    async def write(self, reg: Reg, value: int) -> None:
        if reg == Reg.CTRL and value == CTRL_START:
            self.lines.append("mark")     # the measured window opens at the start write
        self.written[int(reg)] = value & 0xFFFF_FFFF
        self.lines.append(f"write {int(reg)} {value & 0xFFFF_FFFF}")

    async def read(self, reg: Reg) -> int:
        self.lines.append(f"read {reg.name} {int(reg)}")
        return self.written.get(int(reg), 0)

    async def wait_irq(self, timeout_cycles: int) -> bool:
        self.lines.append(f"wait {int(timeout_cycles)}")
        return True


def script(program: bytes, timeout_cycles: int, dumps=(), *, prog_addr: int = 0,
           imem_depth: int | None = None, ubuf: tuple[int, int] | None = None,
           samples=(), progress: tuple[str, str] | None = None,
           fetch_from: int | None = None) -> str:
    """The harness commands of one job: reset, zero the DRAM and load its file, load
    the program, start, read the counters once the cycle counter reaches each cycle
    of ``samples`` (as ``s<k>.<register>``), wait for the interrupt, read the
    counters, dump each ``(first_word, words, path)`` of ``dumps`` (empty ranges are
    skipped), acknowledge. ``progress``: ``(path, label)``, the file the harness
    keeps telling how far the run has got."""
    bus = ScriptBus()
    driver = Driver(bus)
    bus.lines += ["reset 2", "load"]
    if progress is not None:
        bus.lines.append(f"progress {progress[0]} {progress[1]}")

    async def session():
        await driver.load_program(program, prog_addr=prog_addr, imem_depth=imem_depth,
                                  ubuf=ubuf, fetch_from=fetch_from)
        await driver.start()
        for k, cycle in enumerate(samples):
            bus.lines.append(f"until {int(Reg.CYCLES)} {int(cycle)} {int(timeout_cycles)}")
            bus.lines += [f"read s{k}.{reg.name} {int(reg)}" for reg in COUNTER_REGS]
        await bus.wait_irq(timeout_cycles)
        for reg in COUNTER_REGS:
            await bus.read(reg)
        for first, count, path in dumps:
            if count:
                bus.lines.append(f"dump {int(first)} {int(count)} {path}")
        await driver.ack()
    asyncio.run(session())
    return "\n".join(bus.lines) + "\n"


def run_job(executable: Path, run_dir: Path, index: int, *, program: bytes,
            dram_in: Path, readback: list, word_bytes: int, timeout_cycles: int,
            prog_addr: int = 0, imem_depth: int | None = None, period_ns: int = 10,
            ubuf: tuple[int, int] | None = None, samples=(),
            progress: Path | None = None, fetch_from: int | None = None) -> dict:
    """Run one job from the DRAM load file ``dram_in``
    (:func:`systolica.firmware.dramfile.write_segments` format); the raw result (the
    registers by name, the counters at each cycle of ``samples``, the measured window
    and one array per ``readback`` range, only those words dumped). ``progress``: a
    file the harness rewrites with ``<index> <cycles>`` while it runs. Raises
    RuntimeError if the harness fails."""
    dram_out = f"job{index}-out.hex"   # in run_dir, the working directory: sim_top.v
                                       # holds a file name in 128 characters
    dumps = [(first, count, run_dir / f"job{index}-readback{k}.hex")
             for k, (first, count) in enumerate(readback)]
    commands = run_dir / f"job{index}.script"
    commands.write_text(script(program, timeout_cycles, dumps, prog_addr=prog_addr,
                               imem_depth=imem_depth, ubuf=ubuf, samples=samples,
                               fetch_from=fetch_from,
                               progress=None if progress is None
                               else (str(Path(progress).relative_to(run_dir)), str(index))))
    log = run_dir / f"job{index}.log"
    with open(log, "w") as err:
        done = subprocess.run([str(executable),
                               f"+DRAM_IN={Path(dram_in).relative_to(run_dir)}",
                               f"+DRAM_OUT={dram_out}", str(commands)],
                              cwd=run_dir, stdout=subprocess.PIPE, stderr=err, text=True)
    if done.returncode:
        raise RuntimeError(f"{executable.name} exited with {done.returncode}; see {log}")
    values = {}
    sampled = [{} for _ in samples]
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        at, dot, name = key.partition(".")
        if dot:                                         # s<k>.<register>
            sampled[int(at[1:])][name] = int(value)
        else:
            values[key] = float(value) if key == "wall_s" else int(value)
    result = counters_from({reg: values[reg.name] for reg in COUNTER_REGS})
    result.update(irq=bool(values["irq"]), timed_out=not values["irq"],
                  sim_cycles=values["sim_cycles"],
                  start_time_ns=values["start_cycle"] * period_ns, wall_s=values["wall_s"],
                  samples=[counters_from({reg: got[reg.name] for reg in COUNTER_REGS})
                           for got in sampled],
                  readback=[dramfile.read_hex(path, word_bytes) if count
                            else np.zeros((0, word_bytes), np.uint8)
                            for _, count, path in dumps])
    return result
