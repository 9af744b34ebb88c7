"""A compiled program on a chip behind the host link: on a board through its serial
port (``systolica run --port``), or on the simulated FPGA top, by the same code.

Either the host sequences the run (:func:`run_compiled`: it loads the program and
starts it through the registers), or, on a chip with the management core, the
firmware does (:func:`run_by_firmware`, ``systolica run --firmware``): the host writes
the DRAM (the program's data and its image at ``prog_addr``), loads the firmware and
a one-step table through the ``CORE_*`` registers, waits for the core's message and
reads the outputs (docs/management-core.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from systolica import golden
from systolica.arch import fetch
from systolica.arch.config import ChipConfig
from systolica.compiler import Compiled
from systolica.compiler.graph import reference
from systolica.compiler.options import CompileOptions
from systolica.firmware import core_host, core_image
from systolica.firmware.core_image import FwResult, FwStepProblem
from systolica.firmware.driver import ChipTimeout, Driver, describe_status, error_name
from systolica.firmware.link import LinkBus

#: Cycles the firmware may take beyond its program's own (the table's one step costs
#: it some hundreds; docs/management-core.md).
FIRMWARE_SLACK_CYCLES = 50_000


class FirmwareFault(RuntimeError):
    """The firmware signalled that its table did not run to the end: the chip faulted
    in a step, or the firmware refused the table or a step, or trapped. ``table`` is
    what it left (the mailbox read back)."""

    def __init__(self, message: str, table: core_host.TableRun):
        super().__init__(message)
        self.table = table


@dataclass
class BoardRun:
    """What a run left: the chip's counters (:func:`~systolica.firmware.driver.counters_from`)
    and the graph's outputs read back from the DRAM."""

    counters: dict
    outputs: dict
    table: core_host.TableRun | None = None     # the mailbox, when the firmware ran it

    @property
    def cycles(self) -> int:
        return self.counters["cycles"]

    @property
    def error(self) -> str:
        return error_name(self.counters["error"])


def timeout_cycles(compiled: Compiled) -> int:
    """Cycles to wait for the interrupt: twice the prediction, plus slack."""
    return 2 * compiled.predicted_cycles + 10_000


async def run_compiled(bus: LinkBus, compiled: Compiled) -> BoardRun:
    """Reset the chip, load the program's DRAM image (and, when the chip fetches some
    of it, its copy at ``prog_addr``) and the program, run it, read the
    counters and the outputs. A chip that does not finish in
    :func:`timeout_cycles` is reset (so it is not left running) and
    :class:`~systolica.firmware.driver.ChipTimeout` raised."""
    cfg = compiled.cfg
    await bus.check_info()
    await bus.reset_chip()
    await bus.write_dram(0, compiled.dram)
    count = len(compiled.program)
    if fetch.fetches(cfg, count, compiled.fetch_from):
        await bus.write_dram(compiled.prog_addr, fetch.program_words(cfg, compiled.image))
    driver = Driver(bus)
    await driver.load(compiled.loadable, cfg=cfg)
    await driver.start()
    try:
        await driver.wait_done(timeout_cycles(compiled))
    except ChipTimeout:
        await bus.reset_chip()
        raise
    counters = await driver.counters()
    await driver.ack()
    return BoardRun(counters=counters, outputs=await _read_outputs(bus, compiled))


def firmware_options(cfg: ChipConfig) -> CompileOptions:
    """How to compile a program the firmware runs: the chip fetches it whole from DRAM
    (the firmware writes ``PROG_FETCH = 0``), so it is scheduled for that
    (``CompileOptions.fetch_from = 0``) and its predicted cycles stay exact."""
    if not cfg.has_core:
        raise ValueError(f"chip {cfg.name} has no management core (core_imem_bytes 0): "
                         f"the host sequences its programs (leave out --firmware)")
    return CompileOptions(fetch_from=0)


async def run_by_firmware(bus: LinkBus, compiled: Compiled,
                          image: core_image.CoreImage | None = None) -> BoardRun:
    """Reset the chip, write the program's DRAM image and its instructions at
    ``prog_addr``, load the firmware (``image``, else :func:`~.core_image.for_chip`)
    and a table of this one program, release the core and wait for its message; then
    read the counters and the outputs. A core that sends no message in time (or traps)
    raises :class:`~systolica.firmware.core_host.CoreError` and the chip is reset; a
    table the firmware did not finish raises :class:`FirmwareFault` naming the step,
    the chip's error code, pc and cycle."""
    cfg = compiled.cfg
    step = core_host.ChipStep.of(compiled.loadable, cfg)
    image = image or core_image.for_chip(cfg)
    await bus.check_info()
    await bus.reset_chip()
    await bus.write_dram(0, compiled.dram)
    await bus.write_dram(compiled.prog_addr, fetch.program_words(cfg, compiled.image))
    try:
        table = await core_host.run_table(
            bus, image, [step], timeout_cycles=timeout_cycles(compiled) + FIRMWARE_SLACK_CYCLES,
            dram_bytes=cfg.dram_words * cfg.dram_word_bytes)
    except core_host.CoreError:
        await bus.reset_chip()
        raise
    fault = table_fault(table, [compiled.graph.name])
    if fault:
        await bus.reset_chip()
        raise FirmwareFault(fault, table)
    driver = Driver(bus)
    counters = await driver.counters()
    await driver.ack()
    return BoardRun(counters=counters, outputs=await _read_outputs(bus, compiled),
                    table=table)


def table_fault(table: core_host.TableRun, names: list[str]) -> str | None:
    """What stopped the firmware's table (None when it finished): the step (``names``:
    each step's name) and the chip's error, pc and cycle, or the firmware's reason."""
    head = table.mailbox
    k = head["fault_step"]
    step = f"step {k} ({names[k]})" if 0 <= k < len(names) else f"step {k}"
    code, pc, cycle = head["fault_code"], head["fault_pc"], head["fault_cycle"]
    result = table.result
    if result == FwResult.OK:
        return None
    if result == FwResult.CHIP_FAULT:
        return (f"the firmware ran {step}: the chip faulted {error_name(code)} (code "
                f"{code}) at pc {pc}, cycle {cycle}")
    if result == FwResult.BAD_STEP:
        try:
            why = FwStepProblem(code).name
        except ValueError:
            why = f"problem {code}"
        return f"the firmware cannot run {step}: {why}"
    if result == FwResult.BAD_TABLE:
        return "the firmware refused the step table (its magic word or step count)"
    if result == FwResult.TRAP:
        return (f"the management core trapped in {step} (pending interrupts 0x{code:x}, "
                f"return address 0x{pc:x})")
    return (f"the firmware signalled without finishing (result {head['result']}, "
            f"{head['steps_done']} steps done)")


async def _read_outputs(bus: LinkBus, compiled: Compiled) -> dict:
    cfg = compiled.cfg
    first, words = compiled.dram_map.output, compiled.dram_map.output_words
    dram_after = np.zeros((compiled.dram_map.end, cfg.dram_word_bytes), np.uint8)
    dram_after[first:first + words] = await bus.read_dram(first, words)
    return compiled.results(dram_after)


def problems(compiled: Compiled, run: BoardRun) -> list[str]:
    """What differs from numpy, the golden model and the compiler's prediction (none
    for a good run)."""
    out = []
    if run.counters["error"]:
        out.append(f"the chip faulted {run.error} at pc {run.counters['fault_pc']} "
                   f"({describe_status(run.counters['status'])})")
    want = reference.outputs(compiled.graph)
    gold = compiled.results(golden.run(compiled.cfg, compiled.loadable).dram)
    for name in want:
        got = run.outputs.get(name)
        if got is None or not np.array_equal(got, want[name]):
            out.append(f"output {name} differs from numpy")
        if got is None or not np.array_equal(got, gold[name]):
            out.append(f"output {name} differs from the golden model")
    if run.cycles != compiled.predicted_cycles:
        out.append(f"CYCLES {run.cycles} differs from the compiler's prediction "
                   f"{compiled.predicted_cycles}")
    return out


def run_on_port(port: str, board_name: str, network, *, firmware: bool = False) -> int:
    """Compile ``network`` for the board's preset, run it on the board behind
    ``port`` (sequenced by the host, or with ``firmware`` by the management core's
    firmware), print what came out; 0 if it matched numpy, the golden model and the
    predicted cycles, else 1."""
    import asyncio

    from systolica.arch.boards import board
    from systolica.arch.config import preset
    from systolica.compiler import compile_network
    from systolica.firmware.serial_link import SerialTransport

    spec = board(board_name)
    cfg = preset(spec.config)
    options = firmware_options(cfg) if firmware else None
    compiled = compile_network(cfg, network, options)
    transport = SerialTransport(port, baud=spec.link.baud)
    bus = LinkBus(transport, timing=spec.link, word_bytes=cfg.dram_word_bytes,
                  dram_words=cfg.dram_words, latency_s=0.2)
    try:
        run = asyncio.run(run_by_firmware(bus, compiled) if firmware
                          else run_compiled(bus, compiled))
    finally:
        transport.close()
    bad = problems(compiled, run)
    by = ", sequenced by the firmware" if firmware else ""
    print(f"{network.name} on {spec.name} ({cfg.name} chip at "
          f"{spec.clock_hz / 1e6:g} MHz{by}): {run.cycles} cycles "
          f"(predicted {compiled.predicted_cycles}), "
          f"{run.cycles / spec.clock_hz * 1e6:.1f} us, error {run.error}")
    for line in bad:
        print(f"  {line}")
    print("PASS" if not bad else "FAIL")
    return 0 if not bad else 1
