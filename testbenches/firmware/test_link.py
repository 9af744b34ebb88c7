"""The host's link driver against a scripted bridge: every way an answer can go
wrong ends in its own error, and DRAM transfers are cut to the bridge's limit."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from systolica.arch import link
from systolica.arch.link import Command, Status
from systolica.arch.regs import (
    CORE_CTRL_RUN,
    CORE_STATUS_MESSAGE,
    CORE_STATUS_RUNNING,
    STATUS_DONE,
    Reg,
)
from systolica.firmware.link import LinkCorrupt, LinkError, LinkRejected, LinkTimeout

from scripted_bridge import DRAM_WORDS, WORD_BYTES, answer, bus


def test_crc8_is_the_smbus_crc():
    assert link.crc8(b"123456789") == 0xF4


def test_register_read_sends_its_frame_and_returns_the_value():
    b, bridge = bus(answer(Status.OK, (0xDEADBEEF).to_bytes(4, "little")))
    assert asyncio.run(b.read(Reg.CYCLES)) == 0xDEADBEEF
    assert bridge.sent == [link.request(Command.REG_READ, int(Reg.CYCLES))]


@pytest.mark.parametrize("reply, error, words", [
    (b"", LinkTimeout, "baud rate 250000"),
    (answer(Status.OK, b"\0\0\0\0")[:-2], LinkTimeout, "baud rate"),
    (b"\x00" + answer(Status.OK, b"\0\0\0\0")[1:], LinkCorrupt, "sync byte"),
    (answer(Status.OK, b"\1\0\0\0")[:-1] + b"\x00", LinkCorrupt, "CRC"),
    (answer(Status.OK, b"\1\0"), LinkCorrupt, "wrong length"),
    (answer(Status.BAD_CRC), LinkRejected, "garbled"),
    (answer(Status.TIMEOUT), LinkRejected, "broke off"),
    (answer(Status.BUSY), LinkRejected, "while the chip runs"),
])
def test_each_failure_has_its_own_error(reply, error, words):
    b, _ = bus(reply)
    with pytest.raises(error, match=words):
        asyncio.run(b.read(Reg.STATUS))


def test_rejection_carries_the_status():
    b, _ = bus(answer(Status.BAD_RANGE))
    with pytest.raises(LinkRejected) as info:
        asyncio.run(b.write(Reg.CTRL, 1))
    assert info.value.status == Status.BAD_RANGE


def test_dram_transfers_are_cut_to_the_bridges_limit():
    step = link.max_transfer_words(WORD_BYTES)
    words = 2 * step + 5
    image = np.random.default_rng(0).integers(0, 256, (words, WORD_BYTES), np.uint8)
    b, bridge = bus(*(answer(Status.OK) for _ in range(3)))
    asyncio.run(b.write_dram(100, image))
    assert [s[:10] for s in bridge.sent] == [
        link.request(Command.DRAM_WRITE, 100 + at, n, b"")[:10]
        for at, n in ((0, step), (step, step), (2 * step, 5))]
    assert b"".join(s[11:-1] for s in bridge.sent) == image.tobytes()

    parts = [image[:step], image[step:2 * step], image[2 * step:]]
    b, bridge = bus(*(answer(Status.OK, p.tobytes()) for p in parts))
    assert np.array_equal(asyncio.run(b.read_dram(100, words)), image)


def test_a_transfer_outside_the_dram_is_refused_before_sending():
    b, bridge = bus()
    with pytest.raises(ValueError, match="outside"):
        asyncio.run(b.read_dram(DRAM_WORDS - 1, 2))
    assert bridge.sent == []


def test_info_must_match_the_hosts_configuration():
    info = bytes([link.VERSION, 4]) + DRAM_WORDS.to_bytes(4, "little")
    b, _ = bus(answer(Status.OK, info))
    with pytest.raises(LinkError, match="word_bytes"):
        asyncio.run(b.check_info())


def _polled(sent: list[bytes]) -> list[Reg]:
    """The registers the frames `sent` read."""
    return [Reg(frame[2]) for frame in sent if frame[1] == Command.REG_READ]


def test_wait_irq_polls_core_status_while_the_core_runs():
    """The link has no interrupt line: while the host has released the management core
    the chip's interrupt is the core's message, trap or bad access (CORE_STATUS), and
    the array's DONE is not it (the core acknowledges its own runs); held again, or
    after a RESET, it is STATUS."""
    ok = answer(Status.OK)
    reads = lambda *values: [answer(Status.OK, v.to_bytes(4, "little")) for v in values]
    running = CORE_STATUS_RUNNING
    b, bridge = bus(ok, *reads(running, running, running | CORE_STATUS_MESSAGE),
                    ok, *reads(0, STATUS_DONE), ok, ok, *reads(STATUS_DONE))
    assert asyncio.run(b.write(Reg.CORE_CTRL, CORE_CTRL_RUN)) is None
    assert asyncio.run(b.wait_irq(10_000)) is True
    assert _polled(bridge.sent) == [Reg.CORE_STATUS] * 3
    bridge.sent.clear()
    asyncio.run(b.write(Reg.CORE_CTRL, 0))
    assert asyncio.run(b.wait_irq(10_000)) is True
    assert _polled(bridge.sent) == [Reg.STATUS] * 2
    bridge.sent.clear()
    asyncio.run(b.write(Reg.CORE_CTRL, CORE_CTRL_RUN))
    asyncio.run(b.reset_chip())
    assert asyncio.run(b.wait_irq(10_000)) is True
    assert _polled(bridge.sent) == [Reg.STATUS]
