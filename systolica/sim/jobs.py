"""What a simulation run of the chip is given and gives back (:func:`.rtlsim.run`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from systolica.arch.loadable import Loadable


@dataclass(frozen=True, eq=False)
class RtlJob:
    """One run of a program on the RTL.

    * ``program``: what the chip is given (image, DRAM, PROG_ADDR, UBUF registers; the
      DRAM as an array from word 0 or ``(first_word, array)`` segments, the rest
      zeros: give the part a run uses, not a full-size image);
    * ``readback``: DRAM word ranges ``(first_word, words)`` to return after the run;
      None, the whole DRAM (read back where the run can have left anything: the
      words it was loaded with and those its stores may write; zeros elsewhere);
    * ``expect_fault``: whether the run must end in a fault (None: either);
    * ``timeout_cycles``: cycles to wait for the interrupt (None: from the program's
      issue cycles);
    * ``name``: its label in logs.
    """
    program: Loadable
    readback: tuple[tuple[int, int], ...] | None = None
    expect_fault: bool | None = False
    timeout_cycles: int | None = None
    name: str = ""

    def __post_init__(self):
        if not isinstance(self.program, Loadable):
            raise TypeError(f"an RtlJob runs a Loadable (compiled.loadable, or "
                            f"Loadable(image, dram)), not {type(self.program).__name__}")


@dataclass(frozen=True, eq=False)
class RtlResult:
    """What one run left: the chip's status and performance registers, the readable
    forms of the first two, the interrupt, the DRAM read back, and the simulation's own
    figures (clock cycles from start to interrupt, where the run begins in the
    waveform, host seconds), the waveform (``waves``) and the harness that drove it."""
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
