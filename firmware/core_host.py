"""The host's side of the management core (docs/management-core.md, "The core in the
chip"): load the firmware and a step table through the ``CORE_*`` registers, release
the core, wait for its one message, and read the mailbox back.

It knows the registers and the mailbox (:mod:`.core_image`) and nothing about how the
registers are reached: a :class:`~.driver.RegisterBus` supplies that, so the same code
runs the Verilated chip (cocotb) and a board (the UART link).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from systolica.arch import fetch
from systolica.arch.config import ChipConfig
from systolica.arch.isa import WORD_BITS
from systolica.arch.loadable import Loadable
from systolica.arch.regs import (
    CORE_CTRL_RUN,
    CORE_STATUS_BAD_ACCESS,
    CORE_STATUS_MESSAGE,
    CORE_STATUS_TRAP,
    Reg,
)
from systolica.firmware import core_image, core_kernels
from systolica.firmware.core_image import (
    DMEM_BASE,
    FW_MAGIC,
    IMEM_BASE,
    MAILBOX_FIELDS,
    STEP_FIELDS,
    CoreImage,
    FwFlag,
    FwResult,
    FwStepKind,
)
from systolica.firmware.driver import RegisterBus

_INSTRUCTION_BYTES = WORD_BITS // 8


class CoreError(RuntimeError):
    """The core did not finish its table: no message in time, a trap or an access
    outside its map."""


@dataclass(frozen=True)
class ChipStep:
    """A chip program as a step of the table: its PROG_ADDR, length and UBUF
    registers (the firmware has the chip fetch it whole: ``PROG_FETCH = 0``)."""
    prog_addr: int
    prog_len: int
    ubuf: tuple[int, int]

    @classmethod
    def of(cls, program: Loadable, cfg: ChipConfig) -> ChipStep:
        """The step that runs `program` (compiled for `cfg`, with its image in DRAM at
        its ``prog_addr``)."""
        program.verify(cfg, "the management core's step table")
        if program.prog_addr is None:
            raise ValueError("a program the management core runs is fetched from DRAM: "
                             "compile it with a program region (its prog_addr is None)")
        if program.fetch_from != 0:
            raise ValueError(f"a program the management core runs is fetched whole "
                             f"(PROG_FETCH 0), but this one was scheduled for fetch_from "
                             f"{program.fetch_from} (the chip would fault FETCH_LATE): "
                             f"compile it with CompileOptions(fetch_from=0)")
        return cls(program.prog_addr, len(program.image) // _INSTRUCTION_BYTES,
                   program.ubuf or (cfg.ubuf_base, cfg.ubuf_rows))

    def words(self) -> dict[str, int]:
        return dict(kind=FwStepKind.CHIP, prog_addr=self.prog_addr, prog_len=self.prog_len,
                    ubuf_base=self.ubuf[0], ubuf_rows=self.ubuf[1])


@dataclass(frozen=True)
class KernelStep:
    """A kernel the core runs (:mod:`.core_kernels`), its descriptor at DRAM word
    ``at_word`` of ``word_bytes`` bytes (the host writes it there with the rest of the
    DRAM: :meth:`dram_piece`)."""
    descriptor: core_kernels.Descriptor
    at_word: int
    word_bytes: int

    def words(self) -> dict[str, int]:
        return dict(kind=FwStepKind.KERNEL, kernel=int(self.descriptor.kernel),
                    arg0=self.at_word * self.word_bytes)

    def dram_piece(self) -> tuple[int, bytes]:
        """``(first word, bytes)`` of the descriptor in DRAM, padded to whole words."""
        data = self.descriptor.pack()
        return self.at_word, data + bytes(-len(data) % self.word_bytes)


@dataclass(frozen=True)
class StepWords:
    """A step as its table words by name (what a simulator's side gets in a file)."""
    given: dict

    def words(self) -> dict[str, int]:
        return dict(self.given)


Step = ChipStep | KernelStep | StepWords


def table_words(steps: Sequence[Step], *, overlap: bool = True, dram_bytes: int = 0
                ) -> list[int]:
    """The mailbox the host writes: its header and every step (the words the firmware
    fills in are 0). `dram_bytes`: the DRAM's size, which bounds the kernels' accesses
    (cut to the window's reach)."""
    if len(steps) > core_image.MAX_STEPS:
        raise ValueError(f"a step table holds at most {core_image.MAX_STEPS} steps, not "
                         f"{len(steps)}")
    head = dict.fromkeys(MAILBOX_FIELDS, 0) | dict(
        magic=FW_MAGIC, n_steps=len(steps), flags=FwFlag.OVERLAP if overlap else 0,
        dram_bytes=min(dram_bytes, core_kernels.DRAM_WINDOW_BYTES))
    words = [int(head[f]) for f in MAILBOX_FIELDS]
    for step in steps:
        given = step.words()
        words += [int(given.get(f, 0)) for f in STEP_FIELDS]
    return words


@dataclass
class TableRun:
    """What the firmware left: the mailbox's header by name, each step's fields by
    name, ``CORE_STATUS`` and ``CORE_MSG`` when the host was signalled, and the core
    cycles the wait took."""
    mailbox: dict[str, int]
    steps: list[dict[str, int]]
    core_status: int
    message: int
    wait_cycles: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def result(self) -> FwResult:
        try:
            return FwResult(self.mailbox["result"])
        except ValueError:
            return FwResult.RUNNING

    def gaps(self) -> list[int]:
        """Core cycles between the end of each chip step's run and the START of the
        chip step right after it (the array's idle time between programs), from the
        recorded START times and CYCLES."""
        done = self.steps[:self.mailbox["steps_done"]]
        return [b["t_start"] - (a["t_start"] + a["t_cycles"]) for a, b in zip(done, done[1:])
                if a["kind"] == b["kind"] == FwStepKind.CHIP]


def table_dram(cfg: ChipConfig, steps: Sequence, data: Sequence = ()
               ) -> list[tuple[int, np.ndarray]]:
    """The DRAM the host writes for a table of `steps` (Loadables and KernelSteps)
    and `data` (more ``(first word, uint8 words)`` pieces, e.g. a kernel's input):
    every program's pieces and its image at its PROG_ADDR, every kernel's
    descriptor, the data, as ``(first word, uint8 words)``; pieces of two items that
    overlap, or one past the DRAM, are a ValueError naming them."""
    items = []
    for k, step in enumerate(steps):
        if isinstance(step, KernelStep):
            at, raw = step.dram_piece()
            mine = [(at, np.frombuffer(raw, np.uint8).reshape(-1, cfg.dram_word_bytes))]
        else:
            mine = [(first, np.asarray(words)) for first, words in step.segments()
                    if np.asarray(words).shape[0]]
            mine.append((step.prog_addr, fetch.program_words(cfg, bytes(step.image))))
        items.append((f"step {k}", mine))
    items += [(f"data piece {k}", [(int(first), np.asarray(words, np.uint8))])
              for k, (first, words) in enumerate(data)]
    pieces, spans = [], []
    for who, mine in items:
        for first, words in mine:
            lo, hi = first, first + words.shape[0]
            if hi > cfg.dram_words:
                raise ValueError(f"{who}: its DRAM words [{lo}, {hi}) run past the "
                                 f"{cfg.dram_words}-word DRAM")
            for other, (olo, ohi) in spans:
                if other != who and lo < ohi and olo < hi:
                    raise ValueError(
                        f"{other} and {who} overlap in DRAM (words [{max(lo, olo)}, "
                        f"{min(hi, ohi)})): compile each program with its own "
                        f"CompileOptions(dram_base=...) past the one before, and put "
                        f"descriptors and data past them")
            spans.append((who, (lo, hi)))
        pieces += mine
    return pieces


def _words(data: bytes) -> list[int]:
    data = data + bytes(-len(data) % 4)
    return [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]


async def load(bus: RegisterBus, image: CoreImage, table: Sequence[int]) -> None:
    """Hold the core and write its memories: the firmware's two images (a
    :class:`~.core_image.CoreImage`, or anything with its ``imem`` and ``dmem``
    bytes), then the table over the start of the data memory (the mailbox)."""
    await bus.write(Reg.CORE_CTRL, 0)
    dmem = _words(image.dmem)
    dmem[:len(table)] = table
    dmem += list(table[len(dmem):])
    for base, words in ((IMEM_BASE, _words(image.imem)), (DMEM_BASE, dmem)):
        await bus.write(Reg.CORE_ADDR, base)
        for word in words:
            await bus.write(Reg.CORE_DATA, word)


async def read_words(bus: RegisterBus, address: int, count: int) -> list[int]:
    """`count` words of the held core's memories from byte `address`. ``CORE_DATA``
    reads the word a cycle after ``CORE_ADDR`` changed: the first read after the
    address is written may be the old word, so each word is read twice."""
    out = []
    for k in range(count):
        await bus.write(Reg.CORE_ADDR, address + 4 * k)
        await bus.read(Reg.CORE_DATA)
        out.append(await bus.read(Reg.CORE_DATA))
    return out


async def run_table(bus: RegisterBus, image: CoreImage, steps: Sequence[Step], *,
                    overlap: bool = True, timeout_cycles: int, dram_bytes: int = 0
                    ) -> TableRun:
    """Load the firmware and the table, release the core, wait for its message (or a
    fault of the core), hold it again and read the mailbox back. Raises
    :class:`CoreError` when no message comes within `timeout_cycles`."""
    await load(bus, image, table_words(steps, overlap=overlap, dram_bytes=dram_bytes))
    await bus.write(Reg.CORE_CTRL, CORE_CTRL_RUN)
    signalled = await bus.wait_irq(timeout_cycles)
    status = await bus.read(Reg.CORE_STATUS)
    message = await bus.read(Reg.CORE_MSG)
    await bus.write(Reg.CORE_CTRL, 0)
    head = dict(zip(MAILBOX_FIELDS, await read_words(bus, DMEM_BASE, len(MAILBOX_FIELDS))))
    step_words = await read_words(bus, DMEM_BASE + core_image.step_offset(0),
                                  len(steps) * len(STEP_FIELDS))
    n = len(STEP_FIELDS)
    run = TableRun(head, [dict(zip(STEP_FIELDS, step_words[i * n:(i + 1) * n]))
                          for i in range(len(steps))], status, message)
    if not signalled:
        raise CoreError(f"the management core sent no message within {timeout_cycles} "
                        f"cycles (CORE_STATUS 0x{status:x}, {head['steps_done']} of "
                        f"{len(steps)} steps done)")
    if status & (CORE_STATUS_TRAP | CORE_STATUS_BAD_ACCESS):
        what = "trapped" if status & CORE_STATUS_TRAP else "accessed outside its map"
        raise CoreError(f"the management core {what} (CORE_STATUS 0x{status:x}) after "
                        f"{head['steps_done']} of {len(steps)} steps")
    if not status & CORE_STATUS_MESSAGE or message != head["result"]:
        run.problems.append(f"CORE_MSG {message} and the mailbox's result "
                            f"{head['result']} disagree (CORE_STATUS 0x{status:x})")
    return run
