"""A compiled program on a chip behind the host link: on a board through its serial
port (``systolica run --port``), or on the simulated FPGA top, by the same code."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from systolica import golden
from systolica.arch import fetch
from systolica.compiler import Compiled
from systolica.compiler.graph import reference
from systolica.firmware.driver import ChipTimeout, Driver, describe_status, error_name
from systolica.firmware.link import LinkBus


@dataclass
class BoardRun:
    """What a run left: the chip's counters (:func:`~systolica.firmware.driver.counters_from`)
    and the graph's outputs read back from the DRAM."""

    counters: dict
    outputs: dict

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
    first, words = compiled.dram_map.output, compiled.dram_map.output_words
    dram_after = np.zeros((compiled.dram_map.end, cfg.dram_word_bytes), np.uint8)
    dram_after[first:first + words] = await bus.read_dram(first, words)
    return BoardRun(counters=counters, outputs=compiled.results(dram_after))


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


def run_on_port(port: str, board_name: str, network) -> int:
    """Compile ``network`` for the board's preset, run it on the board behind
    ``port``, print what came out; 0 if it matched numpy, the golden model and the
    predicted cycles, else 1."""
    import asyncio

    from systolica.arch.boards import board
    from systolica.arch.config import preset
    from systolica.compiler import compile_network
    from systolica.firmware.serial_link import SerialTransport

    spec = board(board_name)
    cfg = preset(spec.config)
    compiled = compile_network(cfg, network)
    transport = SerialTransport(port, baud=spec.link.baud)
    bus = LinkBus(transport, timing=spec.link, word_bytes=cfg.dram_word_bytes,
                  dram_words=cfg.dram_words, latency_s=0.2)
    try:
        run = asyncio.run(run_compiled(bus, compiled))
    finally:
        transport.close()
    bad = problems(compiled, run)
    print(f"{network.name} on {spec.name} ({cfg.name} chip at "
          f"{spec.clock_hz / 1e6:g} MHz): {run.cycles} cycles "
          f"(predicted {compiled.predicted_cycles}), "
          f"{run.cycles / spec.clock_hz * 1e6:.1f} us, error {run.error}")
    for line in bad:
        print(f"  {line}")
    print("PASS" if not bad else "FAIL")
    return 0 if not bad else 1
