"""cocotb test module run by :func:`systolica.sim.core_run.run`: the host's side of a
table of chip programs that the management core's firmware sequences.

The environment variable ``SYSTOLICA_CORE_JOB`` names a JSON file written by the
host::

    {"word_bytes": R, "dram_bytes": B, "dram": path, "imem": path, "dmem": path, "overlap": bool,
     "timeout_cycles": int, "steps": [{step table word: value}, ...],
     "readback": [[first_word, words], ...], "results": path}

(paths relative to the file). The chip is reset, the DRAM loaded, the firmware and
the table written through the ``CORE_*`` registers (:func:`systolica.firmware.
core_host.run_table`), and after the core's message each readback range is saved as
a ``.npy`` file; the results file holds the mailbox, the steps and the core's
registers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import cocotb
import numpy as np

from systolica.firmware import core_host
from systolica.firmware.cocotb_bus import CocotbBus


@cocotb.test()
async def run_table(dut):
    job_file = Path(os.environ["SYSTOLICA_CORE_JOB"])
    base = job_file.parent
    spec = json.loads(job_file.read_text())
    bus = CocotbBus(dut, dram_in=base / "dram_in.hex", dram_out=base / "dram_out.hex",
                    word_bytes=spec["word_bytes"])
    await bus.start()
    await bus.load_dram_file(base / spec["dram"])
    image = SimpleNamespace(imem=(base / spec["imem"]).read_bytes(),
                            dmem=(base / spec["dmem"]).read_bytes())
    steps = [core_host.StepWords(words) for words in spec["steps"]]
    start = bus.sim_cycle()
    run = await core_host.run_table(bus, image, steps, overlap=spec["overlap"],
                                    timeout_cycles=spec["timeout_cycles"],
                                    dram_bytes=spec["dram_bytes"])
    sim_cycles = bus.sim_cycle() - start
    names = []
    for k, (first, count) in enumerate(spec["readback"]):
        names.append(f"readback{k}.npy")
        np.save(base / names[-1], await bus.dump_dram(first, count))
    (base / spec["results"]).write_text(json.dumps({
        "mailbox": run.mailbox, "steps": run.steps, "core_status": run.core_status,
        "message": run.message, "problems": run.problems, "sim_cycles": sim_cycles,
        "readback": names}, indent=1))
