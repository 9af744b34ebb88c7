"""Instruction fetch: how a program runs that is not all in the instruction memory.

The program image lives in DRAM from word ``PROG_ADDR`` (a register): instruction
``i`` fills the :func:`words_per_instruction` words ``PROG_ADDR + i*w ..`` (its 128
bits little-endian from byte 0 of the first word, zero-padded). The instruction memory
is a ring of ``D = cfg.imem_depth`` slots. The fetcher starts at instruction
``P = min(PROG_FETCH, D, L)`` (``L = PROG_LEN``; :func:`fetch_start`): before the run
the host writes instructions ``[0, P)`` into slots ``0 ..``, and the fetcher reads
``[P, L)`` from DRAM. ``PROG_FETCH`` resets to ``D``, so a host that never writes it
preloads ``min(L, D)`` and a program with ``L <= D`` never fetches and runs exactly as
if there were no fetcher; the management core's firmware writes ``PROG_FETCH = 0``
and preloads nothing (docs/management-core.md).

The rule, in cycles of the run (cycle 0 is the first running cycle), for ``P < L``:

* **PROG_RANGE** at cycle 0 if ``PROG_ADDR + L*w > cfg.dram_words``.
* **Fetch order.** The fetcher reads the words of instructions ``P, P+1, .., L-1`` in
  order, word 0 first, one word per cycle at most.
* **When it may address DRAM.** A word of instruction ``i`` may be addressed in cycle
  ``c`` iff its slot is free (``i < D``, or instruction ``i - D`` issued in a cycle
  before ``c``), the previous word was addressed before ``c``, and the DMA unit does
  not use the DRAM port in ``c``. The DMA has priority and never waits: its port
  cycles are exactly the ``dram`` touches of its effects (:mod:`.instructions`; a load
  of ``n`` words reads in ``t+1 .. t+n``, a store writes in ``t+2 .. t+n+1``). The
  fetcher takes every other cycle it may (greedy).
* **When it lands.** Read data returns ``cfg.latency["dram_read"]`` cycles after the
  address; the instruction is written into slot ``i % D`` in the cycle its last word
  returns, ``c_last + 1``, and (the memory is not transparent) a read addressed in
  ``c_last + 2`` or later sees it.
* **When it may issue.** The sequencer reads its memory one cycle ahead, so
  instruction ``i`` can reach the head of issue in cycle ``ready(i) = c_last + 3``
  (:func:`ready_after`) at the earliest: it *reaches issue* in ``max(arrival,
  ready(i))``, ``arrival`` being cycle 0 for instruction 0 and one cycle after the
  previous instruction issued otherwise (``ready(i) = 0`` for ``i < P``). There the
  sequencer's checks run as for any instruction (``docs/contract.md``); if its cycle
  is already past, the fault is ``FETCH_LATE`` when it waited for its word
  (``ready(i) > arrival``) and ``LATE`` otherwise. An instruction is therefore on time
  iff its last word is addressed by cycle ``t - 3`` (``t`` its issue cycle). (With
  ``P = 0`` instruction 0 is fetched too: its first word is addressed in cycle 0, so
  it issues at cycle ``w + 2`` at the earliest on a chip whose DRAM read takes a cycle.)

The compiler delays instructions so that every one is on time
(``compiler/scheduling/fetch_delay.py``); the golden model runs its own fetcher
(:func:`systolica.golden.check`); the RTL is ``rtl/sequencer.py``. Fetch reads are not
counted in ``DRAM_RD_BYTES``.
"""

from __future__ import annotations

import numpy as np

from systolica.arch import isa
from systolica.arch.config import ChipConfig
from systolica.arch.isa import DmaKind, Opcode

#: Cycles from the address of an instruction's last word to the first cycle it can
#: issue, beyond the DRAM read latency: the ring write lands, then the sequencer's
#: one-cycle-ahead read.
RING_AND_READ = 2


def words_per_instruction(cfg: ChipConfig) -> int:
    """DRAM words one instruction occupies in the program region (``base``: 1,
    ``tiny``: 2)."""
    word_bits = 8 * cfg.dram_word_bytes
    return -(-isa.WORD_BITS // word_bits)


def ready_after(cfg: ChipConfig) -> int:
    """Cycles from the address of an instruction's last word to the first cycle it can
    reach issue."""
    return cfg.latency["dram_read"] + RING_AND_READ


def region_words(cfg: ChipConfig, instructions: int) -> int:
    """DRAM words of the program region of a program of ``instructions``."""
    return instructions * words_per_instruction(cfg)


def fetch_start(cfg: ChipConfig, instructions: int, fetch_from: int | None = None) -> int:
    """``P``, the first instruction the fetcher reads (those below are preloaded) of a
    program of ``instructions`` with the PROG_FETCH register at ``fetch_from`` (None:
    never written, its reset value ``imem_depth``)."""
    depth = cfg.imem_depth
    return min(depth if fetch_from is None else fetch_from, depth, instructions)


def fetches(cfg: ChipConfig, instructions: int, fetch_from: int | None = None) -> bool:
    """Whether a program of ``instructions`` needs the fetcher (some of its
    instructions are read from DRAM: longer than the instruction memory, or fetched
    from ``fetch_from``)."""
    return fetch_start(cfg, instructions, fetch_from) < instructions


def program_words(cfg: ChipConfig, image: bytes) -> np.ndarray:
    """The program region's contents for a program image (:func:`isa.to_bytes`
    format): ``uint8 (L*w, cfg.dram_word_bytes)``."""
    n = isa.WORD_BITS // 8
    if len(image) % n:
        raise isa.EncodingError(f"program image length {len(image)} is not a multiple "
                                f"of {n}")
    count = len(image) // n
    w, wb = words_per_instruction(cfg), cfg.dram_word_bytes
    out = np.zeros((count, w * wb), dtype=np.uint8)
    out[:, :n] = np.frombuffer(image, dtype=np.uint8).reshape(count, n)
    return out.reshape(count * w, wb)


def dma_port_cycles(cfg: ChipConfig, ins: isa.Instr) -> tuple[int, int] | None:
    """Cycles ``[first, last]`` after issue in which a DMA uses the DRAM port (the
    closed form of its ``dram`` touches; the compiler's view), None for other
    instructions."""
    if ins.op is not Opcode.DMA:
        return None
    words = ins.rows * (cfg.acc_row_words if ins.kind in (DmaKind.LOAD_ACC,
                                                          DmaKind.STORE_ACC) else 1)
    if ins.kind in (DmaKind.LOAD_CBUF, DmaKind.LOAD_ACC):
        return 1, words
    return 2, words + 1
