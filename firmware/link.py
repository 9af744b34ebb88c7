"""The host side of the link (:mod:`systolica.arch.link`): the chip's registers and
its DRAM over a byte transport. :class:`LinkBus` is a
:class:`~systolica.firmware.driver.RegisterBus`, so :class:`~.driver.Driver` runs the
chip through it exactly as in simulation; it also moves DRAM words and resets the
chip.

A transport moves bytes and keeps time: :class:`~.serial_link.SerialTransport` is a
serial port, :class:`~.cocotb_uart.CocotbUart` the UART lines of the simulated FPGA
top. Every failure of the link is a :class:`LinkError` that says what went wrong; the
bus waits out the bridge's idle timeout after one, so the next request starts clean.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from systolica.arch import link
from systolica.arch.link import Command, LinkTiming, Status
from systolica.arch.regs import (
    CORE_CTRL_RUN,
    CORE_STATUS_BAD_ACCESS,
    CORE_STATUS_MESSAGE,
    CORE_STATUS_TRAP,
    STATUS_DONE,
    STATUS_ERROR,
    Reg,
)

#: What the chip's interrupt line to the host means (docs/management-core.md,
#: "Interrupts"): the array's run ended, or, while the management core runs, the core's
#: message, trap or access outside its map.
_ARRAY_IRQ = STATUS_DONE | STATUS_ERROR
_CORE_IRQ = CORE_STATUS_MESSAGE | CORE_STATUS_TRAP | CORE_STATUS_BAD_ACCESS


class LinkError(RuntimeError):
    """The link failed: no answer, a corrupted answer, or the bridge refused."""


class LinkTimeout(LinkError):
    """No (complete) answer in time."""


class LinkCorrupt(LinkError):
    """An answer arrived damaged: bad sync byte, CRC, UART framing or length."""


class LinkRejected(LinkError):
    """The bridge answered with an error :class:`~systolica.arch.link.Status`."""

    def __init__(self, message: str, status: Status):
        super().__init__(message)
        self.status = status


#: What each error status means, for the message.
_MEANING = {
    Status.BAD_CRC: "the request arrived garbled (CRC mismatch); a DRAM write may have "
                    "written some of its words, so write them again",
    Status.BAD_COMMAND: "the bridge does not know this command (a link version mismatch?)",
    Status.BAD_LENGTH: "a DRAM transfer must move between 1 and max_transfer_words words",
    Status.BAD_RANGE: "the register or DRAM address is past the end",
    Status.BUSY: "the DRAM cannot be reached while the chip runs or while its management "
                 "core runs (hold it: CORE_CTRL 0)",
    Status.TIMEOUT: "the request broke off: the bridge got fewer bytes than the frame "
                    "announced and gave up waiting (wrong length?)",
}


class Transport(Protocol):
    async def send(self, data: bytes) -> None: ...

    async def receive(self, count: int, timeout_s: float) -> bytes:
        """``count`` bytes; raises :class:`LinkTimeout` if they do not all arrive
        within ``timeout_s`` and :class:`LinkCorrupt` on a framing error."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    def discard_input(self) -> None:
        """Drop every byte received and not yet read."""
        ...


class LinkBus:
    """The chip's registers and DRAM over ``transport``.

    ``timing`` is the link's (:class:`~systolica.arch.link.LinkTiming`), which turns
    cycle counts into seconds; ``word_bytes`` and ``dram_words`` describe the DRAM
    (:meth:`check_info` compares them with the bridge's); ``latency_s`` is what the
    transport adds to an answer's time on the line (USB frames, a simulator's start).

    The link carries no interrupt line: :meth:`wait_irq` polls the registers the
    chip's interrupt follows, ``CORE_STATUS`` while this bus has released the
    management core (``CORE_CTRL.RUN``, which only the host writes) and ``STATUS``
    else.
    """

    def __init__(self, transport: Transport, *, timing: LinkTiming, word_bytes: int,
                 dram_words: int, latency_s: float = 0.0):
        self.transport, self.timing = transport, timing
        self.word_bytes, self.dram_words = word_bytes, dram_words
        self.latency_s = latency_s
        self.core_released = False          # CORE_CTRL.RUN as this bus last wrote it

    # -- one request, one answer --------------------------------------------------------
    async def exchange(self, frame: bytes, *, what: str, answer_bytes: int = 0) -> bytes:
        """Send ``frame`` (a request's bytes) and return the data of its answer,
        which must be ``answer_bytes`` long."""
        await self.transport.send(frame)
        t = self.timing
        timeout = (2 * (len(frame) + answer_bytes + 8) * t.byte_seconds
                   + 2 * t.idle_timeout_seconds + self.latency_s)
        try:
            head = await self.transport.receive(1 + link.RESPONSE_HEADER, timeout)
            if head[0] != link.RESPONSE_SYNC:
                raise LinkCorrupt(f"{what}: answer starts with 0x{head[0]:02x}, not the "
                                  f"sync byte 0x{link.RESPONSE_SYNC:02x}")
            length = int.from_bytes(head[2:4], "little")
            rest = await self.transport.receive(length + 1, timeout)
        except LinkTimeout as exc:
            await self._recover()
            raise LinkTimeout(f"{what}: {exc} (is the board programmed, the port and "
                              f"baud rate {t.baud} right?)") from None
        except LinkError:
            await self._recover()
            raise
        body, crc = head[1:] + rest[:-1], rest[-1]
        if link.crc8(body) != crc:
            await self._recover()
            raise LinkCorrupt(f"{what}: the answer failed its CRC "
                              f"(got 0x{crc:02x}, computed 0x{link.crc8(body):02x})")
        try:
            status = Status(head[1])
        except ValueError:
            await self._recover()
            raise LinkCorrupt(f"{what}: unknown status {head[1]} in the answer") from None
        if status != Status.OK:
            await self._recover()
            raise LinkRejected(f"{what}: the bridge answered {status.name}: "
                               f"{_MEANING[status]}", status)
        if length != answer_bytes:
            await self._recover()
            raise LinkCorrupt(f"{what}: the answer has {length} data bytes, "
                              f"expected {answer_bytes} (wrong length)")
        return rest[:-1]

    async def _recover(self) -> None:
        """Wait until the bridge has drained the line, then forget what came."""
        await self.transport.sleep(2 * self.timing.idle_timeout_seconds)
        self.transport.discard_input()

    async def request(self, command: Command, addr: int = 0, arg: int = 0,
                      data: bytes = b"", answer_bytes: int = 0) -> bytes:
        return await self.exchange(link.request(command, addr, arg, data),
                                   what=f"{command.name}(addr={addr}, arg={arg})",
                                   answer_bytes=answer_bytes)

    # -- the register bus (systolica.firmware.driver.RegisterBus) -------------------------
    async def write(self, reg: Reg, value: int) -> None:
        # a value the register cannot hold is refused, never cut to its low bits
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 32:
            raise ValueError(f"register {Reg(reg).name} holds 32 unsigned bits; "
                             f"{value!r} does not fit")
        await self.request(Command.REG_WRITE, int(reg), value)
        if reg == Reg.CORE_CTRL:
            self.core_released = bool(value & CORE_CTRL_RUN)

    async def read(self, reg: Reg) -> int:
        return int.from_bytes(await self.request(Command.REG_READ, int(reg),
                                                 answer_bytes=4), "little")

    async def wait_irq(self, timeout_cycles: int) -> bool:
        """Poll until the chip's interrupt condition holds or ``timeout_cycles`` of
        the chip's clock have passed: the run has ended (STATUS done or error), or,
        while the management core runs, its message, trap or bad access (CORE_STATUS;
        the array's interrupts are the core's then)."""
        waited, poll = 0.0, 0.0
        limit = timeout_cycles / self.timing.clock_hz
        reg, irq = ((Reg.CORE_STATUS, _CORE_IRQ) if self.core_released
                    else (Reg.STATUS, _ARRAY_IRQ))
        while True:
            if await self.read(reg) & irq:
                return True
            if waited >= limit:
                return False
            poll = min(max(2 * poll, 100 / self.timing.clock_hz), 0.05, limit - waited)
            await self.transport.sleep(poll)
            waited += poll + 30 * self.timing.byte_seconds     # the poll's own time

    # -- DRAM and chip ------------------------------------------------------------------
    def _check_range(self, first: int, count: int) -> None:
        if first < 0 or count < 0 or first + count > self.dram_words:
            raise ValueError(f"DRAM words [{first}, {first + count}) lie outside the "
                             f"{self.dram_words}-word DRAM")

    async def write_dram(self, first: int, image: np.ndarray) -> None:
        """Write ``image`` (uint8, words x word_bytes) from DRAM word ``first``."""
        image = np.ascontiguousarray(image, dtype=np.uint8)
        if image.ndim != 2 or image.shape[1] != self.word_bytes:
            raise ValueError(f"DRAM image must be (words, {self.word_bytes}) uint8, "
                             f"not {image.shape}")
        self._check_range(first, len(image))
        step = link.max_transfer_words(self.word_bytes)
        for at in range(0, len(image), step):
            chunk = image[at:at + step]
            await self.request(Command.DRAM_WRITE, first + at, len(chunk), chunk.tobytes())

    async def read_dram(self, first: int, count: int) -> np.ndarray:
        """DRAM words ``[first, first + count)`` (uint8, count x word_bytes)."""
        self._check_range(first, count)
        step = link.max_transfer_words(self.word_bytes)
        parts = []
        for at in range(0, count, step):
            n = min(step, count - at)
            parts.append(await self.request(Command.DRAM_READ, first + at, n,
                                             answer_bytes=n * self.word_bytes))
        raw = np.frombuffer(b"".join(parts), dtype=np.uint8)
        return raw.reshape(count, self.word_bytes).copy()

    async def reset_chip(self) -> None:
        """Reset the chip (its registers and state, not the DRAM; the management
        core is held again)."""
        await self.request(Command.RESET)
        self.core_released = False

    async def info(self) -> dict:
        raw = await self.request(Command.INFO, answer_bytes=link.INFO_BYTES)
        return {"version": raw[0], "word_bytes": raw[1],
                "dram_words": int.from_bytes(raw[2:6], "little")}

    async def check_info(self) -> dict:
        """The bridge's INFO, checked against this bus's link version and DRAM."""
        info = await self.info()
        want = {"version": link.VERSION, "word_bytes": self.word_bytes,
                "dram_words": self.dram_words}
        if info != want:
            raise LinkError(f"the board reports {info}, but this host expects {want}: "
                            f"program the board with the bitstream of this configuration")
        return info
