"""A board link without a board: a transport whose answers are scripted up front, for
the host driver's tests (``firmware/test_link.py``) and the bad-input catalogue."""

from __future__ import annotations

from systolica.arch import link
from systolica.arch.link import LinkTiming, Status
from systolica.firmware.link import LinkBus, LinkTimeout

TIMING = LinkTiming(clock_hz=1_000_000, divisor=4, idle_timeout=100)
WORD_BYTES, DRAM_WORDS = 8, 16384


def answer(status: Status | int, data: bytes = b"", *, length: int | None = None) -> bytes:
    """The bytes of one bridge answer, its CRC right (``length`` may lie)."""
    body = bytes([status]) + (len(data) if length is None else length).to_bytes(2, "little")
    body += data
    return bytes([link.RESPONSE_SYNC]) + body + bytes([link.crc8(body)])


class ScriptedBridge:
    """A transport whose answers are given up front; it records what was sent."""

    def __init__(self, *answers: bytes):
        self.answers = list(answers)
        self.sent: list[bytes] = []
        self.pending = b""

    async def send(self, data: bytes) -> None:
        self.sent.append(data)
        self.pending += self.answers.pop(0) if self.answers else b""

    async def receive(self, count: int, timeout_s: float) -> bytes:
        if len(self.pending) < count:
            raise LinkTimeout(f"got {len(self.pending)} of {count} bytes")
        out, self.pending = self.pending[:count], self.pending[count:]
        return out

    async def sleep(self, seconds: float) -> None:
        pass

    def discard_input(self) -> None:
        self.pending = b""


def bus(*answers: bytes) -> tuple[LinkBus, ScriptedBridge]:
    bridge = ScriptedBridge(*answers)
    return LinkBus(bridge, timing=TIMING, word_bytes=WORD_BYTES,
                   dram_words=DRAM_WORDS), bridge
