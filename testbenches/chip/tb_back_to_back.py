"""cocotb side of ``test_chip_prog_fetch.py``'s back-to-back run on the chip
(``sim_top``): two programs, the second configured while the first runs.

``SYSTOLICA_BACK_TO_BACK`` names a JSON file (paths relative to it): ``chip`` (its
``ChipConfig.to_dict()``), ``dram`` (a load file with both programs' data and B's
program region), ``a`` and ``b`` (image files), ``readback`` (``[first_word, words]``
ranges dumped after B), ``timeout_cycles``, ``results`` (written here).

A is loaded as any host loads it (``Driver.load``) and started. While it runs, B's
PROG_LEN, PROG_ADDR, PROG_FETCH and UBUF registers are written (each read back: the
next values) and four IMEM_DATA writes are made, which the chip must ignore. When A's
interrupt rises, A's CYCLES, ERROR and FETCH_RD_BYTES are read in that same cycle and
START goes in on the next clock edge (before IRQ_ACK: START lowers the interrupt).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge

from systolica.arch import image_file
from systolica.arch.config import ChipConfig
from systolica.arch.regs import Reg
from systolica.firmware.cocotb_bus import CocotbBus
from systolica.firmware.driver import Driver, error_name


@cocotb.test()
async def back_to_back(dut):
    spec_file = Path(os.environ["SYSTOLICA_BACK_TO_BACK"])
    base = spec_file.parent
    spec = json.loads(spec_file.read_text())
    cfg = ChipConfig(**spec["chip"])
    here = Path.cwd()           # the run directory: the simulator's DRAM files
    bus = CocotbBus(dut, dram_in=here / "dram_in.hex", dram_out=here / "dram_out.hex",
                    word_bytes=spec["word_bytes"])
    driver = Driver(bus)
    await bus.start()
    await bus.load_dram_file(base / spec["dram"])
    a, b = (image_file.unpack((base / spec[k]).read_bytes(), source=spec[k], cfg=cfg)
            for k in ("a", "b"))
    assert b.fetch_from == 0, "B is fetched whole: IMEM_DATA is closed while A runs"

    await driver.load_program(a.words, prog_addr=a.prog_addr or 0,
                              imem_depth=cfg.imem_depth, ubuf=a.ubuf,
                              fetch_from=a.fetch_from)
    await driver.start()
    assert await bus.read(Reg.STATUS) & 1, "A is not running"
    # B's configuration, while A runs
    count = len(b.words) // image_file.WORD_BYTES
    writes = [(Reg.PROG_LEN, count), (Reg.PROG_ADDR, b.prog_addr), (Reg.PROG_FETCH, 0)]
    if b.ubuf is not None:
        writes += [(Reg.UBUF_ROWS, 0), (Reg.UBUF_BASE, b.ubuf[0]), (Reg.UBUF_ROWS, b.ubuf[1])]
    for reg, value in writes:
        await bus.write(reg, value)
    imem_before = await bus.read(Reg.IMEM_ADDR)
    for k in range(4):
        await bus.write(Reg.IMEM_DATA, 0xDEAD_0000 + k)
    readback = {reg.name: await bus.read(reg) for reg, _ in writes}
    assert await bus.read(Reg.STATUS) & 1, "A ended before B's configuration was written"
    assert readback == {reg.name: value for reg, value in writes[:3]} | (
        {"UBUF_BASE": b.ubuf[0], "UBUF_ROWS": b.ubuf[1]} if b.ubuf else {}), readback
    assert await bus.read(Reg.IMEM_ADDR) == imem_before, "IMEM_DATA moved while running"

    assert await bus.wait_irq(spec["timeout_cycles"]), "A did not end"
    irq_cycle = bus.sim_cycle()
    got_a = {"cycles": await bus._peek(Reg.CYCLES),
             "error": error_name(await bus._peek(Reg.ERROR)),
             "fetch_rd_bytes": await bus._peek(Reg.FETCH_RD_BYTES)}
    await driver.start()
    start_cycle = bus.sim_cycle()
    # START lowers A's interrupt at its clock edge (read after it, from the next
    # falling edge on); B runs from a cycle or two later
    await FallingEdge(dut.clk)
    assert not int(dut.irq.value), "START did not lower A's interrupt"
    assert await bus.wait_irq(spec["timeout_cycles"]), "B did not end"
    got_b = {"cycles": await bus.read(Reg.CYCLES),
             "error": error_name(await bus.read(Reg.ERROR)),
             "fetch_rd_bytes": await bus.read(Reg.FETCH_RD_BYTES)}
    await driver.ack()
    names = []
    for k, (first, words) in enumerate(spec["readback"]):
        name = f"readback{k}.npy"
        np.save(base / name, await bus.dump_dram(first, words))
        names.append(name)
    (base / spec["results"]).write_text(json.dumps({
        "a": got_a, "b": got_b, "readback": names,
        "b_start_after_irq": start_cycle - irq_cycle}))
