"""cocotb test module run by :func:`systolica.sim.rtlsim.run`: executes a batch of jobs on
one simulated chip.

The environment variable ``SYSTOLICA_JOBS`` names a JSON file written by the host::

    {"word_bytes": R, "dram_words": N, "imem_depth": D, "dram_in": path,
     "dram_out": path, "results": path, "chip": {ChipConfig.to_dict() of the chip},
     "jobs": [{"name": str, "program": path, "prog_addr": int, "ubuf": [base, rows] | null,
               "dram": path | null,
               "readback": [[first_word, words], ...], "timeout_cycles": int,
               "samples": [cycle, ...], "progress": path | null}]}

(relative paths are relative to the jobs file). For each job the chip is reset, the
DRAM is zeroed and loaded from the job's load file (:func:`dramfile.write_segments`
format; nothing more when ``dram`` is null), the program is read from its image file
(docs/image-format.md: refused unless intact and built for ``chip``, with its PROG_ADDR,
UBUF and PROG_FETCH registers from the header), loaded and started, the
counters are read once the cycle counter reaches each of ``samples``, and after the
interrupt (done or fault) or the timeout the counters are read and each requested
word range is dumped and saved as a ``.npy`` file. The results file is rewritten
after every job, so a crash leaves what was finished; a job's progress file, if it
names one, a few times a second while it runs, and at its end, with ``<job index>
<cycles since its start>``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import cocotb
import numpy as np

from systolica.arch import image_file
from systolica.arch.config import ChipConfig
from systolica.arch.regs import Reg
from systolica.firmware.cocotb_bus import CocotbBus
from systolica.firmware.driver import (
    COUNTER_REGS,
    ChipTimeout,
    Driver,
    counters_from,
    describe_status,
    error_name,
)


def _progress_writer(path: Path, index: int, start_cycle: int):
    """What the bus calls with the simulation's cycle: rewrites `path` with the job
    and its cycles since `start_cycle`, in one step (the host reads it meanwhile)."""
    part = path.with_name(path.name + ".part")

    def write(cycle: int) -> None:
        part.write_text(f"{index} {cycle - start_cycle}\n")
        os.replace(part, path)
    return write


@cocotb.test()
async def run_jobs(dut):
    jobs_file = Path(os.environ["SYSTOLICA_JOBS"])
    base = jobs_file.parent
    spec = json.loads(jobs_file.read_text())
    word_bytes = spec["word_bytes"]
    results_file = base / spec["results"]
    chip = ChipConfig(**spec["chip"])        # the chip the host built the simulator of

    bus = CocotbBus(dut, dram_in=base / spec["dram_in"], dram_out=base / spec["dram_out"],
                    word_bytes=word_bytes)
    driver = Driver(bus)
    await bus.start()

    results = []
    for index, job in enumerate(spec["jobs"]):
        await bus.reset()
        if job["dram"] is None:
            await bus.load_dram([])
        else:
            await bus.load_dram_file(base / job["dram"])
        path = base / job["program"]
        image = image_file.unpack(path.read_bytes(), source=str(path), cfg=chip)
        await driver.load_program(image.words, prog_addr=image.prog_addr or 0,
                                  imem_depth=spec["imem_depth"], ubuf=image.ubuf,
                                  fetch_from=image.fetch_from)

        wall = time.perf_counter()
        start_cycle = bus.sim_cycle()
        if job.get("progress"):
            bus.progress = _progress_writer(base / job["progress"], index, start_cycle)
        await driver.start()
        samples = []
        for cycle in job.get("samples", []):
            got = await bus.sample(Reg.CYCLES, cycle, COUNTER_REGS, job["timeout_cycles"])
            samples.append(counters_from(got))
        timed_out = False
        try:
            await driver.wait_done(job["timeout_cycles"])
        except ChipTimeout as exc:
            timed_out = True
            dut._log.error("job %d (%s): %s", index, job["name"], exc)
        end_cycle = bus.sim_cycle()
        wall = time.perf_counter() - wall
        if bus.progress is not None:
            bus.progress(end_cycle)
            bus.progress = None

        result = await driver.counters()
        result.update(
            name=job["name"],
            status_flags=describe_status(result["status"]),
            error_name=error_name(result["error"]),
            irq=bool(int(dut.irq.value)),
            timed_out=timed_out,
            sim_cycles=end_cycle - start_cycle,
            start_time_ns=start_cycle * bus.period_ns,
            wall_s=wall,
            readback=[],
            samples=samples,
        )
        for k, (first, count) in enumerate(job["readback"]):
            name = f"job{index}-readback{k}.npy"
            np.save(base / name, await bus.dump_dram(first, count))
            result["readback"].append(name)
        await driver.ack()

        results.append(result)
        results_file.write_text(json.dumps(results, indent=1))
        dut._log.info("job %d (%s): %s error=%s cycles=%d, %.3f s", index, job["name"],
                      result["status_flags"], result["error_name"], result["cycles"], wall)
