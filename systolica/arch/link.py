"""The host link: how a host reaches the chip's registers and its external memory over
a byte stream (the FPGA top's UART, :mod:`systolica.rtl.fpga.bridge`). The bridge's
RTL and the host's driver (:mod:`systolica.firmware.link`) both read this module.

A request is::

    REQUEST_SYNC  command  addr (4 bytes)  arg (4 bytes)  crc8(command .. arg)
    [DRAM_WRITE only: arg words of data, each little-endian  crc8(data)]

and every request is answered by one response::

    RESPONSE_SYNC  status  length (2 bytes)  data (length bytes)  crc8(status .. data)

Multi-byte fields are little-endian. ``REG_WRITE`` writes ``arg`` to register
``addr``; ``REG_READ`` answers register ``addr`` (4 bytes); ``DRAM_WRITE`` /
``DRAM_READ`` move ``arg`` words from DRAM word ``addr`` (at most
:func:`max_transfer_words` at once, only while the chip is not running: else
``BUSY``); ``RESET`` resets the chip (not the DRAM); ``INFO`` answers
:data:`INFO_BYTES` bytes: :data:`VERSION`, the DRAM word size in bytes, the DRAM
size in words (4 bytes).

A request that breaks off (no byte for the bridge's idle timeout) is answered with
``TIMEOUT``. After any error answer the bridge ignores the line until it has been
quiet for its idle timeout (the rest of a rejected frame passes unread), so the host
waits that long before its next request. A ``DRAM_WRITE`` whose data CRC fails has
written its words already: the answer says so, and the host writes them again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from amaranth.lib import crc

REQUEST_SYNC = 0xA5
RESPONSE_SYNC = 0x5A
VERSION = 1
#: command, addr and arg: the bytes the header's CRC covers.
HEADER_FIELDS = 9
#: a response's status and length.
RESPONSE_HEADER = 3
INFO_BYTES = 6
#: the response length field's limit bounds one DRAM transfer.
MAX_TRANSFER_BYTES = 1 << 15
#: The link's CRC: CRC-8/SMBUS (x^8 + x^2 + x + 1, initial value 0, no reflection, no
#: final XOR) over bytes, from Amaranth's CRC library: the host computes it with
#: ``CRC.compute`` and the bridge's hardware is ``CRC.create()``, one definition for both.
CRC = crc.Parameters(crc.catalog.CRC8_SMBUS, data_width=8)


class Command(enum.IntEnum):
    REG_WRITE = 1
    REG_READ = 2
    DRAM_WRITE = 3
    DRAM_READ = 4
    RESET = 5
    INFO = 6


class Status(enum.IntEnum):
    OK = 0
    BAD_CRC = 1        # the request's header or data failed its CRC (garbled on the line)
    BAD_COMMAND = 2    # no such command
    BAD_LENGTH = 3     # a DRAM transfer of no words or more than max_transfer_words
    BAD_RANGE = 4      # a register or DRAM address past the end
    BUSY = 5           # DRAM access while the chip runs
    TIMEOUT = 6        # the request broke off: the line went quiet inside a frame


def max_transfer_words(word_bytes: int) -> int:
    """Most DRAM words one DRAM_READ or DRAM_WRITE moves."""
    return MAX_TRANSFER_BYTES // word_bytes


def crc8(data: bytes) -> int:
    """The link's CRC (:data:`CRC`) of `data`."""
    return CRC.compute(data)


def request(command: Command, addr: int = 0, arg: int = 0, data: bytes = b"") -> bytes:
    """The bytes of one request (``data`` only with DRAM_WRITE)."""
    for name, value in (("addr", addr), ("arg", arg)):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 32:
            raise ValueError(f"a {Command(command).name} request's {name} is a 4-byte "
                             f"unsigned field (0 .. 2**32 - 1), not {value!r}")
    header = bytes([int(command)]) + addr.to_bytes(4, "little") + arg.to_bytes(4, "little")
    frame = bytes([REQUEST_SYNC]) + header + bytes([crc8(header)])
    if command == Command.DRAM_WRITE:
        frame += data + bytes([crc8(data)])
    elif data:
        raise ValueError(f"only DRAM_WRITE carries data, not {command.name}")
    return frame


@dataclass(frozen=True, kw_only=True)
class LinkTiming:
    """How fast a link runs: the chip's clock, the UART's clocks per bit, and the
    bridge's idle timeout in clock cycles. The RTL is built from it and the host's
    timeouts are derived from it."""

    clock_hz: int
    divisor: int
    idle_timeout: int

    def __post_init__(self):
        for name, low in (("clock_hz", 1), ("divisor", 4), ("idle_timeout", 16)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"LinkTiming {name} must be an integer of at least "
                                 f"{low}, not {value!r}")

    @property
    def baud(self) -> int:
        return self.clock_hz // self.divisor

    @property
    def byte_seconds(self) -> float:
        """One byte on the line: start, 8 data bits, stop."""
        return 10 * self.divisor / self.clock_hz

    @property
    def idle_timeout_seconds(self) -> float:
        return self.idle_timeout / self.clock_hz
