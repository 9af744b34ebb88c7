"""Run chip programs on the Verilated chip sequenced by the management core's firmware
(docs/management-core.md): the host loads the DRAM (every program's data and image),
the firmware and the step table, releases the core and waits for its one message;
the core configures, starts and checks each program itself.

:func:`run` builds (or reuses) the same simulator :func:`systolica.sim.rtlsim.run`
does and drives it from the cocotb module :mod:`systolica.sim.cocotb_core`, through
the host-side code a board uses too (:mod:`systolica.firmware.core_host`). The
programs must share one DRAM without overlapping (compile each with its own
``CompileOptions.dram_base``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from systolica.arch.config import ChipConfig, require_config
from systolica.arch.loadable import Loadable
from systolica.firmware import core_host, core_image, dramfile
from systolica.firmware.core_host import ChipStep, KernelStep, TableRun
from systolica.sim import rtlsim
from systolica.sim.rtlsim import RtlSimError
from systolica.sim.verilated import build_root

TEST_MODULE = "systolica.sim.cocotb_core"
#: Cycles the firmware may take beyond the programs' own (a table's steps cost it some
#: hundreds each).
CORE_SLACK_CYCLES = 50_000
#: A generous bound on a kernel's core cycles per element (softmax, the slowest, runs
#: some 44 instructions of several cycles each).
KERNEL_CYCLES_PER_ELEMENT = 1_000


@dataclass
class CoreRunResult:
    table: TableRun                     # the mailbox, each step's START and CYCLES
    readback: list[np.ndarray]          # the DRAM ranges asked for, after the table
    sim_cycles: int                     # from the core's release to its message


def run(cfg: ChipConfig, steps: list[Loadable | KernelStep], *, data=(), readback=(),
        overlap: bool = True, timeout_cycles: int | None = None, keep: bool = False
        ) -> CoreRunResult:
    """Run `steps` in order, chip programs (Loadables) and kernels of the core,
    sequenced by the firmware (:mod:`.core_host`'s table, with or without the
    configuration `overlap`), with the DRAM pieces ``(first_word, uint8 words)`` of
    `data` loaded too; return the mailbox and the DRAM ranges ``(first_word,
    words)`` of `readback`. Raises :class:`RtlSimError` if the simulation fails,
    and :class:`~systolica.firmware.core_host.CoreError` (from the simulator's side,
    in the message) if the core does not finish."""
    require_config(cfg, "core_run.run(cfg, steps)")
    if not cfg.has_core:
        raise RtlSimError(f"chip {cfg.name} has no management core (core_imem_bytes 0): "
                          f"run its programs with rtlsim.run")
    try:
        segments = core_host.table_dram(cfg, steps, data)
    except ValueError as exc:
        raise RtlSimError(str(exc)) from None
    programs = [s for s in steps if isinstance(s, Loadable)]
    table = [s if isinstance(s, KernelStep) else ChipStep.of(s, cfg) for s in steps]
    image = core_image.for_chip(cfg)
    if timeout_cycles is None:     # each program's own, each kernel's, the core's loading
        timeout_cycles = CORE_SLACK_CYCLES + sum(
            rtlsim.default_timeout(rtlsim.expected_end(cfg, bytes(p.image)))
            for p in programs) + sum(
            KERNEL_CYCLES_PER_ELEMENT * s.descriptor.rows * s.descriptor.cols
            for s in steps if isinstance(s, KernelStep))

    runs = build_root() / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=f"core-{cfg.key}-", dir=runs))
    dramfile.write_segments(run_dir / "dram_load.hex", segments)
    (run_dir / "imem.bin").write_bytes(image.imem)
    (run_dir / "dmem.bin").write_bytes(image.dmem)
    spec = {"word_bytes": cfg.dram_word_bytes, "dram_bytes": cfg.dram_bytes,
            "dram": "dram_load.hex",
            "imem": "imem.bin", "dmem": "dmem.bin", "overlap": overlap,
            "timeout_cycles": timeout_cycles,
            "steps": [{k: int(v) for k, v in s.words().items()} for s in table],
            "readback": [[int(a), int(n)] for a, n in readback], "results": "results.json"}
    (run_dir / "core_job.json").write_text(json.dumps(spec, indent=1))

    rtlsim.run_cocotb(rtlsim.build(cfg), run_dir, TEST_MODULE,
                      {"SYSTOLICA_CORE_JOB": str(run_dir / "core_job.json")})
    raw = json.loads((run_dir / "results.json").read_text())
    table = TableRun(raw["mailbox"], raw["steps"], raw["core_status"], raw["message"],
                     problems=raw["problems"])
    result = CoreRunResult(table, [np.load(run_dir / name) for name in raw["readback"]],
                           raw["sim_cycles"])
    if not keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return result
