"""The management core's firmware on an instruction-set model: ``unicorn`` (PyPI, RV32)
runs the same image the chip's PicoRV32 runs, against a model of the chip's register
interface. With :class:`GoldenChip` that model is the golden model: a ``START`` runs
the configured program with :func:`systolica.golden.run` on the DRAM behind the
core's window. This is how the golden model runs a step table: the firmware's own
decisions, kernels and bookkeeping, bit for bit, and its cycles exactly: the core's
own, counted by :mod:`.core_cycles` (``rdcycle`` reads them), and each program's,
which the chip model's runs take on the same counter (docs/management-core.md, "The
core's cycles").

The model maps the instruction memory, the data memory, the register window and (if
given) the DRAM window at the addresses of docs/management-core.md. PicoRV32's
interrupt instructions (custom-0) are illegal to unicorn; its illegal-instruction hook
carries them out (the q registers, the mask, entering and leaving the interrupt
handler), and turns any other illegal instruction into PicoRV32's trap interrupt.
``waitirq`` sleeps until the chip model's run raises the accelerator's line
(interrupt 0) and returns it, or ends the emulation when the chip is idle with
nothing pending (the firmware has parked).
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from systolica.arch import fetch, isa
from systolica.arch.config import ChipConfig
from systolica.arch.loadable import Loadable
from systolica.arch.regs import (
    CTRL_IRQ_ACK,
    CTRL_START,
    STATUS_DONE,
    STATUS_ERROR,
    STATUS_RUNNING,
    ErrorCode,
    Reg,
)
from systolica.firmware.core_cycles import TIMING, CoreTiming, CycleModel
from systolica.firmware.core_image import (
    DMEM_BASE,
    DRAM_BASE,
    IMEM_BASE,
    MAILBOX_FIELDS,
    REGS_BASE,
    STEP_FIELDS,
    CoreImage,
    step_offset,
)

ACCEL_IRQ = 1 << 0          # interrupt 0 is the accelerator's
IRQ_TRAP = 1 << 1           # PicoRV32's: ebreak, ecall, an illegal instruction
PROGADDR_IRQ = 0x10
CUSTOM0 = 0x0B
GETQ, SETQ, RETIRQ, MASKIRQ, WAITIRQ = range(5)     # funct7 of PicoRV32's instructions
INSTRUCTION_LIMIT = 10_000_000
PAGE = 4096


class ChipModel(Protocol):
    """The chip's register interface as the firmware sees it. ``now`` is the core's
    cycle counter at the access being made (the ISS sets it before each call);
    ``dram`` the DRAM behind the core's window (the ISS sets it, None without)."""

    irq: bool
    now: int
    dram: DramWindow | None

    def read(self, reg: Reg) -> int: ...

    def write(self, reg: Reg, value: int) -> None: ...

    def wake(self) -> int | None:
        """The core sleeps (``waitirq``) from ``now``: the cycle from which the
        interrupt line is high (``now`` if it is), ``now`` moved there; None if it
        never rises (the firmware has parked)."""

    def busy_until(self) -> int | None:
        """The cycle from which the array is stopped (the core's DRAM window is
        granted), if a run is going on at ``now``; else None."""


class CoreHalted(RuntimeError):
    """The core stopped where PicoRV32 would halt: a trap with the trap interrupt
    masked or inside the handler."""


@dataclass
class IssRun:
    """What a run left: the mailbox's words by name, the instructions the core ran
    (counted when asked), the emulator, whose memories can be read, the core's
    cycle counter where it stopped (at the ``waitirq`` it parked in: the cycles of
    :mod:`.core_cycles`' model) and each counter read (``rdcycle``): the value read
    and the instructions run before it."""
    mailbox: dict[str, int]
    uc: object
    instructions: int = 0
    cycles: int = 0
    counter_reads: list[tuple[int, int]] = field(default_factory=list)

    def word(self, address: int) -> int:
        return struct.unpack("<I", self.uc.mem_read(address, 4))[0]


@dataclass
class DramWindow:
    """The DRAM behind the core's window, as the chip model reads and writes it."""
    uc: object
    size: int

    def read(self) -> bytes:
        return bytes(self.uc.mem_read(DRAM_BASE, self.size))

    def write(self, data: bytes) -> None:
        self.uc.mem_write(DRAM_BASE, bytes(data))


def run(image: CoreImage, chip: ChipModel, mailbox: bytes,
        patches: dict[int, int] | None = None, *, dram: bytearray | None = None,
        count: bool = False, limit: int = INSTRUCTION_LIMIT,
        timing: CoreTiming = TIMING) -> IssRun:
    """Run `image` (with the instruction words `patches` replaced) from reset with
    `mailbox` at the start of the data memory until it parks (or `limit` instructions
    have run). `dram`, if given, is the DRAM behind the core's window (mapped in
    pages of 4 KiB; a page's rest reads as zeros) and holds what the run left there
    afterwards. With `count`, the run's instructions are counted (by translated block:
    a block's instructions when it is entered). The core's cycles are counted with
    `timing` (:mod:`.core_cycles`): ``rdcycle`` reads them, the chip model sees them
    in ``now``, and the run's ``cycles`` is the counter where it parked."""
    from unicorn import (
        UC_ARCH_RISCV,
        UC_HOOK_BLOCK,
        UC_HOOK_INTR,
        UC_HOOK_MEM_READ,
        UC_HOOK_MEM_WRITE,
        UC_MODE_RISCV32,
        UC_PROT_ALL,
        Uc,
    )
    from unicorn.riscv_const import UC_RISCV_REG_PC, UC_RISCV_REG_X0

    uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV32)
    uc.mem_map(IMEM_BASE, image.imem_bytes, UC_PROT_ALL)
    uc.mem_map(DMEM_BASE, image.dmem_bytes, UC_PROT_ALL)
    window = None
    if dram is not None:
        uc.mem_map(DRAM_BASE, max(PAGE, -(-len(dram) // PAGE) * PAGE), UC_PROT_ALL)
        uc.mem_write(DRAM_BASE, bytes(dram))
        window = DramWindow(uc, len(dram))
    chip.dram = window
    counted = [0]
    if count:
        uc.hook_add(UC_HOOK_BLOCK, lambda uc, address, size, data: counted.__setitem__(
            0, counted[0] + size // 4))
    code = bytearray(image.imem)
    for address, word in (patches or {}).items():
        if 0 <= address - IMEM_BASE <= len(code) - 4:
            code[address - IMEM_BASE:address - IMEM_BASE + 4] = struct.pack("<I", word)
    uc.mem_write(IMEM_BASE, bytes(code))
    for address, word in (patches or {}).items():
        uc.mem_write(address, struct.pack("<I", word))
    uc.mem_write(DMEM_BASE, image.dmem)
    uc.mem_write(DMEM_BASE, mailbox)
    cycles = CycleModel(uc, bytes(code), IMEM_BASE, timing)
    pc_now = lambda: uc.reg_read(UC_RISCV_REG_PC)

    def reg_read(uc, offset, size, data):
        chip.now = cycles.access(pc_now())
        return chip.read(Reg(offset // 4))

    def reg_write(uc, offset, size, value, data):
        chip.now = cycles.access(pc_now())
        chip.write(Reg(offset // 4), value)
        watch_dram()

    uc.mmio_map(REGS_BASE, 0x1000, reg_read, None, reg_write, None)

    def dram_access(uc, access, address, size, value, data):
        # the window is granted only while the array is stopped: an access made
        # while a run goes on waits for its end
        pc = pc_now()
        chip.now = cycles.at(pc) + timing.access_offset
        until = chip.busy_until()
        if until is not None:
            cycles.wait(until - chip.now)

    dram_hook = []         # on the window only while a run goes on

    def watch_dram():
        busy = chip.busy_until() is not None
        if window is not None and busy != bool(dram_hook):
            if busy:
                dram_hook.append(uc.hook_add(UC_HOOK_MEM_READ | UC_HOOK_MEM_WRITE,
                                             dram_access, None, DRAM_BASE,
                                             DRAM_BASE + window.size - 1))
            else:
                uc.hook_del(dram_hook.pop())
    core = {"q": [0] * 4, "mask": 0xFFFF_FFFF, "in_irq": False}   # PicoRV32's IRQ state
    reg = lambda n: uc.reg_read(UC_RISCV_REG_X0 + n) if n else 0
    halted = []

    def custom(uc, intno, data):
        # unicorn reports an illegal instruction with the pc already past it
        pc = uc.reg_read(UC_RISCV_REG_PC) - 4
        word, = struct.unpack("<I", uc.mem_read(pc, 4))
        funct7, rs1, rd = word >> 25, (word >> 15) & 31, (word >> 7) & 31
        q, result, next_pc = core["q"], None, pc + 4
        cost = timing.static(word)
        if word & 0x7F != CUSTOM0:        # illegal to PicoRV32 too: its trap interrupt
            if core["in_irq"] or core["mask"] & IRQ_TRAP:
                halted.append(f"the core halts at 0x{pc:x} (0x{word:08x})")
                cycles.leave(pc, 0)
                uc.emu_stop()
                return
            q[0], q[1], core["in_irq"], next_pc = pc + 4, IRQ_TRAP, True, PROGADDR_IRQ
            cost = timing.trap
        elif funct7 == GETQ:
            result = q[rs1 & 3]
        elif funct7 == SETQ:
            q[rd & 3] = reg(rs1)
        elif funct7 == RETIRQ:
            core["in_irq"], next_pc = False, q[0]
        elif funct7 == MASKIRQ:
            result, core["mask"] = core["mask"], reg(rs1)
        elif funct7 == WAITIRQ:
            start = cycles.at(pc)
            chip.now = start
            rose = chip.wake()
            if rose is None:
                cycles.leave(pc, 0)    # parked: nothing will ever wake it
                uc.emu_stop()
                return
            cost = max(timing.custom, rose + timing.waitirq_wake - start)
            result = ACCEL_IRQ if chip.irq else 0
            watch_dram()
        else:
            halted.append(f"unexpected custom instruction 0x{word:08x} at 0x{pc:x}")
            cycles.leave(pc, 0)
            uc.emu_stop()
            return
        cycles.leave(pc, cost)
        if result is not None and rd:
            uc.reg_write(UC_RISCV_REG_X0 + rd, result)
        uc.reg_write(UC_RISCV_REG_PC, next_pc)

    uc.hook_add(UC_HOOK_INTR, custom)
    uc.emu_start(IMEM_BASE, IMEM_BASE + image.imem_bytes, count=limit)
    if halted:
        raise CoreHalted(halted[0])
    words = struct.unpack_from(f"<{len(MAILBOX_FIELDS)}I",
                               uc.mem_read(DMEM_BASE, 4 * len(MAILBOX_FIELDS)))
    if dram is not None:
        dram[:] = uc.mem_read(DRAM_BASE, len(dram))
    return IssRun(dict(zip(MAILBOX_FIELDS, words)), uc, counted[0], cycles.finish(),
                  cycles.reads)


#: The registers START takes from their next copies (docs/management-core.md), in the
#: order ``RegisterModel.starts`` lists them.
DOUBLE_BUFFERED = (Reg.PROG_ADDR, Reg.PROG_LEN, Reg.UBUF_BASE, Reg.UBUF_ROWS,
                   Reg.PROG_FETCH)


class RegisterModel(ABC):
    """The register interface as the register file behaves for the firmware: the
    program's configuration double-buffered (writes set the next values, also while
    running, and reads return them; START makes them the run's, ``active``, and is
    recorded in ``starts``); IRQ_ACK or the next START clears DONE/ERROR and the
    line; a UBUF pair :meth:`ubuf_allowed` refuses is kept out; other writes while
    running are ignored; a CORE_MSG write is the firmware's message (``messages``).
    Every write is logged in ``writes`` by register name.

    A run takes the chip's time on the core's counter (``now``, which the ISS sets
    at each access): its outcome is decided at its START (:meth:`finish`, on the
    DRAM as it is then: the core's window waits while the run goes on), and the
    START written in cycle ``w`` runs from ``w + 1`` and raises the interrupt
    (DONE or ERROR) in cycle ``w + 2 + CYCLES`` (``start_to_irq``, rtl/sequencer.py,
    rtl/csr.py); until then STATUS reads RUNNING and CYCLES counts. A START in the
    two cycles after a run ended is taken in the third (the sequencer's rule)."""

    def __init__(self, reset: dict[Reg, int] | None = None, *,
                 start_to_irq: int = TIMING.start_to_irq):
        self.values = dict.fromkeys(Reg, 0) | dict(reset or {})
        self.active = {r: self.values[r] for r in DOUBLE_BUFFERED}
        self.running = self.done = self.error = False
        self.writes: list[tuple[str, int]] = []
        self.starts: list[tuple[int, ...]] = []
        self.messages: list[int] = []
        self.now = 0
        self.dram: DramWindow | None = None
        self.start_to_irq = start_to_irq
        self.started = 0              # the cycle the run's cycle 0 is
        self.end: int | None = None   # the cycle its interrupt rises
        self._outcome: tuple[bool, bool, dict[Reg, int]] | None = None

    @property
    def irq(self) -> bool:
        self._settle()
        return self.done or self.error

    def _settle(self) -> None:
        """A run whose end has come by ``now`` ends."""
        if self.running and self.now >= self.end:
            self.running = False
            self.done, self.error, values = self._outcome
            self.values |= values

    def read(self, reg: Reg) -> int:
        self._settle()
        if reg == Reg.STATUS:
            return (STATUS_RUNNING * self.running | STATUS_DONE * self.done
                    | STATUS_ERROR * self.error)
        if reg == Reg.CYCLES and self.running:
            return max(0, self.now - self.started)
        return self.values[reg]

    def write(self, reg: Reg, value: int) -> None:
        self._settle()
        v = self.values
        self.writes.append((reg.name, value))
        if reg == Reg.CTRL:
            if value & CTRL_START and not self.running:
                self._start()
            elif value & CTRL_IRQ_ACK:
                self.done = self.error = False
        elif reg == Reg.CORE_MSG:
            self.messages.append(value)
            v[reg] = value
        elif reg in (Reg.UBUF_BASE, Reg.UBUF_ROWS):
            pair = {Reg.UBUF_BASE: v[Reg.UBUF_BASE], Reg.UBUF_ROWS: v[Reg.UBUF_ROWS],
                    reg: value}
            if self.ubuf_allowed(pair[Reg.UBUF_BASE], pair[Reg.UBUF_ROWS]):
                v[reg] = value
        elif reg in DOUBLE_BUFFERED or not self.running:
            v[reg] = value

    def _start(self) -> None:
        v = self.values
        taken = self.now
        if self.end is not None and self.end <= taken < self.end + 2:
            taken = self.end + 2          # the sequencer takes it in the third cycle
        self.running, self.done, self.error = True, False, False
        self.active = {r: v[r] for r in DOUBLE_BUFFERED}
        self.starts.append(tuple(self.active[r] for r in DOUBLE_BUFFERED))
        kept = {r: v[r] for r in (Reg.ERROR, Reg.FAULT_PC, Reg.FAULT_CYCLE, Reg.CYCLES)}
        self.finish(self.dram)
        outcome = {r: v[r] for r in kept}
        self._outcome = (self.done, self.error, outcome)
        self.done = self.error = False
        v |= kept | {Reg.ERROR: 0, Reg.FAULT_PC: 0}
        self.started = taken + 1
        self.end = taken + self.start_to_irq + outcome[Reg.CYCLES]

    def ubuf_allowed(self, base: int, rows: int) -> bool:
        return True

    def wake(self) -> int | None:
        self._settle()
        if self.done or self.error:
            return self.now
        if not self.running:
            return None
        self.now = self.end
        self._settle()
        return self.end

    def busy_until(self) -> int | None:
        self._settle()
        return self.end if self.running else None

    @abstractmethod
    def finish(self, dram: DramWindow | None) -> None:
        """The run of the ``active`` configuration: end it with :meth:`done_in` or
        :meth:`fault` (called at its START; the interrupt comes its cycles later)."""

    def done_in(self, cycles: int) -> None:
        self.done = True
        self.values[Reg.CYCLES] = cycles

    def fault(self, code: int, pc: int, cycle: int) -> None:
        self.error = True
        self.values |= {Reg.ERROR: int(code), Reg.FAULT_PC: pc, Reg.FAULT_CYCLE: cycle,
                        Reg.CYCLES: cycle}


class GoldenChip(RegisterModel):
    """The register interface with the golden model behind ``START``: the run is
    :func:`systolica.golden.run` of the program the registers name, its image read
    from the DRAM at PROG_ADDR (the firmware has it fetched whole), on the DRAM behind
    the core's window, which the run's stores change; the UBUF rule is the chip's
    (:meth:`~systolica.arch.config.ChipConfig.ubuf_problem`). ``runs`` holds each
    run's golden result."""

    def __init__(self, cfg: ChipConfig, *, start_to_irq: int = TIMING.start_to_irq):
        super().__init__({Reg.PROG_FETCH: cfg.imem_depth, Reg.UBUF_BASE: cfg.ubuf_base,
                          Reg.UBUF_ROWS: cfg.ubuf_rows}, start_to_irq=start_to_irq)
        self.cfg = cfg
        self.runs: list = []

    def ubuf_allowed(self, base: int, rows: int) -> bool:
        return self.cfg.ubuf_problem(base, rows) is None

    def finish(self, dram: DramWindow | None) -> None:
        from systolica import golden
        cfg, a = self.cfg, self.active
        if dram is None:
            raise ValueError("GoldenChip runs programs on the DRAM: give the ISS a dram")
        words = np.frombuffer(dram.read(), np.uint8).reshape(-1, cfg.dram_word_bytes)
        count, w = a[Reg.PROG_LEN], fetch.words_per_instruction(cfg)
        region = words[a[Reg.PROG_ADDR]:a[Reg.PROG_ADDR] + count * w]
        n = isa.WORD_BITS // 8
        image = region.reshape(count, -1)[:, :n].tobytes()
        program = Loadable.for_chip(cfg, image, words, a[Reg.PROG_ADDR],
                                    (a[Reg.UBUF_BASE], a[Reg.UBUF_ROWS]),
                                    a[Reg.PROG_FETCH])
        result = golden.run(cfg, program)
        self.runs.append(result)
        dram.write(result.dram[:words.shape[0]].tobytes())
        if result.error != ErrorCode.NONE:
            self.fault(result.error, result.fault_pc, result.fault_cycle)
            self.values[Reg.CYCLES] = result.cycles
        else:
            self.done_in(result.cycles)


@dataclass
class GoldenTable:
    """A step table run by the firmware on the ISS against the golden model: the
    mailbox, the DRAM after it (uint8 words), and the chip model (its runs and the
    firmware's messages)."""
    iss: IssRun
    dram: np.ndarray
    chip: GoldenChip
    n_steps: int = 0

    @property
    def mailbox(self) -> dict[str, int]:
        return self.iss.mailbox

    @property
    def steps(self) -> list[dict[str, int]]:
        """Each step's words by name (:data:`~.core_image.STEP_FIELDS`), as the chip's
        host reads them back (``TableRun.steps``): with ``t_start`` and ``t_cycles``
        on the core's counter, as on the chip."""
        count = len(STEP_FIELDS)
        return [dict(zip(STEP_FIELDS, struct.unpack(
            f"<{count}I", self.iss.uc.mem_read(DMEM_BASE + step_offset(k), 4 * count))))
            for k in range(self.n_steps)]

    def step_instructions(self, index: int) -> int:
        """The instructions kernel step `index` ran, between its two ``rdcycle``."""
        step = self.steps[index]
        reads = dict(self.iss.counter_reads)
        return (reads[(step["t_start"] + step["t_cycles"]) & 0xFFFF_FFFF]
                - reads[step["t_start"]])


class StepRefused(ValueError):
    """:func:`step_cycles`: the firmware did not run the step."""


def step_cycles(cfg: ChipConfig, step, *, data=(), image: CoreImage | None = None) -> int:
    """The core's cycles a kernel step (:class:`~.core_host.KernelStep`) takes on the
    DRAM pieces of `data` (``(first word, uint8 words)``), exactly as the chip's
    firmware records them (its ``t_cycles``): the step alone in a table on
    :func:`golden_table`. A chip step (a Loadable) gives its program's cycles.
    Raises :class:`StepRefused` if the firmware refuses the step."""
    from systolica.firmware.core_image import FwResult
    table = golden_table(cfg, [step], data=data, image=image)
    if table.mailbox["result"] != FwResult.OK:
        raise StepRefused(
            f"the firmware did not run the step: result {table.mailbox['result']} "
            f"(FwResult), code {table.mailbox['fault_code']} (FwStepProblem or "
            f"ErrorCode); check the step's descriptor and the DRAM it names")
    return table.steps[0]["t_cycles"]


def golden_table(cfg: ChipConfig, steps, *, data=(), overlap: bool = True,
                 image: CoreImage | None = None, timing: CoreTiming = TIMING
                 ) -> GoldenTable:
    """Run `steps` (Loadables and :class:`~.core_host.KernelStep`) as the chip's core
    would, on the ISS with :class:`GoldenChip`: the same firmware, table and DRAM the
    host gives the chip (:mod:`.core_host`), the pieces of `data` too. The DRAM
    modelled reaches the last word the table's pieces do (a kernel writing past it
    is refused, as past the chip's DRAM). The core's cycles are `timing`'s
    (:mod:`.core_cycles`): each step's ``t_start`` and ``t_cycles`` are the chip's."""
    from systolica.firmware import core_host, core_image
    image = image or core_image.for_chip(cfg)
    pieces = core_host.table_dram(cfg, steps, data)
    W = cfg.dram_word_bytes
    end = max((first + data.shape[0] for first, data in pieces), default=0)
    words = np.zeros((-(-end * W // PAGE) * PAGE // W, W), np.uint8)
    for first, data in pieces:
        words[first:first + data.shape[0]] = data
    dram = bytearray(words.tobytes())
    table = [s if isinstance(s, core_host.KernelStep) else core_host.ChipStep.of(s, cfg)
             for s in steps]
    mailbox = core_host.table_words(table, overlap=overlap, dram_bytes=len(dram))
    chip = GoldenChip(cfg, start_to_irq=timing.start_to_irq)
    iss = run(image, chip, struct.pack(f"<{len(mailbox)}I", *mailbox), dram=dram,
              timing=timing)
    return GoldenTable(iss, np.frombuffer(bytes(dram), np.uint8).reshape(-1, W), chip,
                       len(table))
