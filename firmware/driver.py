"""Register-level driver: load a program, start it, wait for the interrupt, read the
counters. It knows the register map (:mod:`systolica.arch.regs`) and nothing about how the
registers are reached; a bus object supplies that."""

from __future__ import annotations

from typing import Protocol

from systolica.arch.config import ChipConfig
from systolica.arch.isa import WORD_BITS
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

_WORD_BYTES = WORD_BITS // 8
_WRITES_PER_WORD = WORD_BITS // 32


#: The registers read after a run, in the order read.
COUNTER_REGS = (Reg.STATUS, Reg.ERROR, Reg.FAULT_PC, Reg.FAULT_CYCLE, Reg.CYCLES,
                Reg.MACS_LO, Reg.MACS_HI, Reg.DRAM_RD_BYTES, Reg.DRAM_WR_BYTES,
                Reg.FETCH_RD_BYTES, Reg.UBUF_WR_BYTES, Reg.UBUF_RD_BYTES, Reg.HWCFG)


def counters_from(values: dict) -> dict:
    """The counters of a run from the values of :data:`COUNTER_REGS` (by register)."""
    return {
        "status": values[Reg.STATUS],
        "error": values[Reg.ERROR],
        "fault_pc": values[Reg.FAULT_PC],
        "fault_cycle": values[Reg.FAULT_CYCLE],
        "cycles": values[Reg.CYCLES],
        "macs": values[Reg.MACS_LO] | values[Reg.MACS_HI] << 32,
        "dram_rd_bytes": values[Reg.DRAM_RD_BYTES],
        "dram_wr_bytes": values[Reg.DRAM_WR_BYTES],
        "fetch_rd_bytes": values[Reg.FETCH_RD_BYTES],
        "ubuf_wr_bytes": values[Reg.UBUF_WR_BYTES],
        "ubuf_rd_bytes": values[Reg.UBUF_RD_BYTES],
        "hwcfg": values[Reg.HWCFG],
    }


class RegisterBus(Protocol):
    """How the driver reaches the chip's 32-bit registers."""

    async def write(self, reg: Reg, value: int) -> None: ...

    async def read(self, reg: Reg) -> int: ...

    async def wait_irq(self, timeout_cycles: int) -> bool:
        """Return once the interrupt line is high (True) or after ``timeout_cycles``
        clock cycles without it (False)."""
        ...


class ChipTimeout(RuntimeError):
    """The chip did not raise its interrupt within the allowed cycles."""


class UbufRefused(ValueError):
    """The chip kept its UBUF registers: the placement asked for is not one it allows
    (docs/contract.md, "The UBUF")."""


class Driver:
    """Drives one chip through ``bus``.

    Each run follows: :meth:`load_program`, :meth:`start`, :meth:`wait_done`,
    :meth:`counters`, :meth:`ack`.
    """

    def __init__(self, bus: RegisterBus):
        self.bus = bus

    async def set_ubuf(self, base: int, rows: int) -> None:
        """Place the UBUF at CBUF rows ``[base, base + rows)`` (the chip stopped). The
        chip takes a write only if the pair it makes with the other register is legal,
        so UBUF_ROWS goes to 0 first (always legal), then UBUF_BASE, then UBUF_ROWS;
        both are read back, and :class:`UbufRefused` is raised if the chip kept
        another value."""
        await self.bus.write(Reg.UBUF_ROWS, 0)
        await self.bus.write(Reg.UBUF_BASE, base)
        await self.bus.write(Reg.UBUF_ROWS, rows)
        got = (await self.bus.read(Reg.UBUF_BASE), await self.bus.read(Reg.UBUF_ROWS))
        if got != (base, rows):
            raise UbufRefused(f"the chip refused UBUF base {base}, rows {rows} (it reads "
                              f"base {got[0]}, rows {got[1]}): the UBUF must be whole "
                              f"CBUF banks, a power of two rows, inside the rows the "
                              f"configuration allows")

    async def load_program(self, image: bytes, *, prog_addr: int = 0,
                           imem_depth: int | None = None,
                           ubuf: tuple[int, int] | None = None,
                           fetch_from: int | None = None) -> int:
        """Set PROG_LEN, PROG_ADDR and PROG_FETCH and write a program image
        (little-endian 128-bit words) into the instruction memory from index 0: its
        first ``P = min(fetch_from, imem_depth, count)`` instructions (None: no limit),
        the chip fetching the rest from the copy at DRAM word ``prog_addr``, which the
        caller has written; PROG_FETCH is set to ``P``. ``fetch_from``: the PROG_FETCH
        the program was scheduled for (``Loadable.fetch_from``). ``ubuf``: the UBUF
        placement the program assumes (``compiled.ubuf``), set first
        (:meth:`set_ubuf`); None leaves the registers as they are. Returns the
        instruction count."""
        if len(image) % _WORD_BYTES:
            raise ValueError(f"program image length must be a multiple of {_WORD_BYTES} "
                             f"bytes, not {len(image)}")
        if imem_depth is not None and (not isinstance(imem_depth, int) or imem_depth < 1):
            raise ValueError(f"imem_depth must be a positive integer, not {imem_depth!r}")
        if fetch_from is not None and (isinstance(fetch_from, bool)
                                       or not isinstance(fetch_from, int) or fetch_from < 0):
            raise ValueError(f"fetch_from must be a non-negative integer or None, not "
                             f"{fetch_from!r}")
        count = len(image) // _WORD_BYTES
        if ubuf is not None:
            await self.set_ubuf(*ubuf)
        await self.bus.write(Reg.PROG_LEN, count)
        await self.bus.write(Reg.PROG_ADDR, prog_addr)
        preload = min(count, count if imem_depth is None else imem_depth,
                      count if fetch_from is None else fetch_from)
        await self.bus.write(Reg.PROG_FETCH, preload)
        await self.bus.write(Reg.IMEM_ADDR, 0)
        for offset in range(0, preload * _WORD_BYTES, 4):
            await self.bus.write(Reg.IMEM_DATA,
                                 int.from_bytes(image[offset:offset + 4], "little"))
        return count

    async def load(self, program: Loadable, *, cfg: ChipConfig) -> int:
        """:meth:`load_program` for a :class:`~systolica.arch.loadable.Loadable` (its
        image, PROG_ADDR, UBUF and PROG_FETCH registers; its DRAM images are the bus's
        to write) on
        chip `cfg`: refused (:class:`~systolica.arch.errors.ImageError`) before any
        register is written if its image is corrupted or it was compiled for another
        chip (docs/image-format.md)."""
        program.verify(cfg, "the board driver")
        return await self.load_program(program.image, prog_addr=program.prog_addr or 0,
                                       imem_depth=cfg.imem_depth, ubuf=program.ubuf,
                                       fetch_from=program.fetch_from)

    async def start(self) -> None:
        await self.bus.write(Reg.CTRL, CTRL_START)

    async def wait_done(self, timeout_cycles: int) -> int:
        """Wait for the end-of-run interrupt (done or fault); return STATUS.

        Raises :class:`ChipTimeout` if the interrupt has not come after
        ``timeout_cycles`` cycles.
        """
        if not await self.bus.wait_irq(timeout_cycles):
            status = await self.bus.read(Reg.STATUS)
            raise ChipTimeout(f"no interrupt within {timeout_cycles} cycles "
                              f"(STATUS={describe_status(status)}, "
                              f"CYCLES={await self.bus.read(Reg.CYCLES)})")
        return await self.bus.read(Reg.STATUS)

    async def counters(self) -> dict:
        """Status and performance registers of the last run."""
        return counters_from({reg: await self.bus.read(reg) for reg in COUNTER_REGS})

    async def ack(self) -> None:
        """Lower the interrupt."""
        await self.bus.write(Reg.CTRL, CTRL_IRQ_ACK)

    async def run(self, image: bytes, timeout_cycles: int, *, prog_addr: int = 0,
                  imem_depth: int | None = None, ubuf: tuple[int, int] | None = None,
                  fetch_from: int | None = None) -> dict:
        """Load, start, wait, read the counters and acknowledge: one whole run."""
        await self.load_program(image, prog_addr=prog_addr, imem_depth=imem_depth,
                                ubuf=ubuf, fetch_from=fetch_from)
        await self.start()
        await self.wait_done(timeout_cycles)
        result = await self.counters()
        await self.ack()
        return result


def describe_status(status: int) -> str:
    flags = [name for bit, name in ((STATUS_RUNNING, "RUNNING"), (STATUS_DONE, "DONE"),
                                    (STATUS_ERROR, "ERROR")) if status & bit]
    return "|".join(flags) or "IDLE"


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"UNKNOWN({code})"
