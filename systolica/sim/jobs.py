"""What a simulation run of the chip is given and gives back (:func:`.rtlsim.run`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from systolica.arch.loadable import Loadable


@dataclass(frozen=True, eq=False)
class RtlJob:
    """One run of a program on the RTL.

    * ``program``: what the chip is given (image, DRAM, PROG_ADDR, UBUF, PROG_FETCH; the
      DRAM as an array from word 0 or ``(first_word, array)`` segments, the rest
      zeros: give the part a run uses, not a full-size image);
    * ``readback``: DRAM word ranges ``(first_word, words)`` to return after the run;
      None, the whole DRAM (read back where the run can have left anything: the
      words it was loaded with and those its stores may write; zeros elsewhere);
    * ``expect_fault``: whether the run must end in a fault (None: either);
    * ``timeout_cycles``: cycles to wait for the interrupt (None: from the program's
      issue cycles);
    * ``name``: its label in logs;
    * ``samples``: cycles, increasing, at which to read the performance counters
      while the program runs: each once the chip's cycle counter reads it (or the
      run has ended), all registers in one cycle (e.g. where each layer ends).
    """
    program: Loadable
    readback: tuple[tuple[int, int], ...] | None = None
    expect_fault: bool | None = False
    timeout_cycles: int | None = None
    name: str = ""
    samples: tuple[int, ...] = ()

    def __post_init__(self):
        if not isinstance(self.program, Loadable):
            raise TypeError(f"an RtlJob runs a Loadable (compiled.loadable, or "
                            f"Loadable.for_chip(cfg, image, dram)), not "
                            f"{type(self.program).__name__}")
        cycles = list(self.samples)
        if not all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c >= 0
                   for c in cycles) or cycles != sorted(cycles):
            raise TypeError(f"RtlJob samples must be cycles (non-negative integers) in "
                            f"increasing order, not {self.samples!r}")
        object.__setattr__(self, "samples", tuple(int(c) for c in cycles))


@dataclass(frozen=True, eq=False)
class RtlResult:
    """What one run left: the chip's status and performance registers, the readable
    forms of the first two, the interrupt, the DRAM read back, and the simulation's own
    figures (clock cycles from start to interrupt, where the run begins in the
    waveform, host seconds), the waveform's path (``waves``, either format; ``fst``
    too when it is an FST file) and the harness that drove it.
    ``samples``: per cycle of the job's ``samples``, the registers read then (as
    :func:`systolica.firmware.driver.counters_from` names them)."""
    name: str
    harness: str
    status: int
    status_flags: str
    error: int
    error_name: str
    fault_pc: int
    fault_cycle: int
    cycles: int
    macs: int
    dram_rd_bytes: int
    dram_wr_bytes: int
    fetch_rd_bytes: int
    ubuf_wr_bytes: int
    ubuf_rd_bytes: int
    hwcfg: int
    irq: bool
    timed_out: bool
    faulted: bool
    readback: list[np.ndarray]          # one array per requested range
    dram: np.ndarray | None             # the whole DRAM when no ranges were given
                                        # (zeros where the run left nothing)
    sim_cycles: int
    start_time_ns: int
    wall_s: float
    fst: str | None = None
    samples: list[dict] = field(default_factory=list)
    waves: str | None = None
