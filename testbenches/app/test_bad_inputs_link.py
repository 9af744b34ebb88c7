"""The bad-input catalogue, board link: what the host's driver gets from a board that
answers wrongly or not at all, and what it refuses to send. Every row ends in one
exception of the documented type (a :class:`LinkError` for the line, a ValueError for
a request that cannot be made, :class:`ChipTimeout` for a chip that never ends) whose
message names the request and what to do; random answers end the same way, never in
another exception or a hang.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from systolica.arch import link
from systolica.arch.link import Command, LinkTiming, Status
from systolica.arch.regs import Reg
from systolica.firmware.driver import ChipTimeout, Driver
from systolica.firmware.link import LinkCorrupt, LinkError, LinkRejected, LinkTimeout

from scripted_bridge import DRAM_WORDS, WORD_BYTES, answer, bus
from tiers import examples

WORD = (0x1234).to_bytes(4, "little")
RUNNING = (1).to_bytes(4, "little")
INFO = bytes([link.VERSION, WORD_BYTES]) + DRAM_WORDS.to_bytes(4, "little")


def read_status(b):
    return b.read(Reg.STATUS)


def read_two_words(b):
    return b.read_dram(0, 2)


ANSWERS = [
    # (id, the bridge's answer, what the host asks, exception, key words)
    ("silent-board", b"", read_status, LinkTimeout,
     ["REG_READ(addr=1", "got 0 of 4 bytes", "is the board programmed", "baud rate 250000"]),
    ("answer-cut-short", answer(Status.OK, WORD)[:-2], read_status, LinkTimeout,
     ["REG_READ", "got 3 of 5 bytes", "port and baud rate"]),
    ("header-only", answer(Status.OK, WORD)[:4], read_status, LinkTimeout,
     ["got 0 of 5 bytes"]),
    ("wrong-sync-byte", b"\x00" + answer(Status.OK, WORD)[1:], read_status, LinkCorrupt,
     ["REG_READ", "starts with 0x00", "sync byte 0x5a"]),
    ("echoed-request", link.request(Command.REG_READ, 1), read_status, LinkCorrupt,
     ["starts with 0xa5", "not the sync byte"]),
    ("crc-flipped", answer(Status.OK, WORD)[:-1] + bytes([answer(Status.OK, WORD)[-1] ^ 1]),
     read_status, LinkCorrupt, ["REG_READ", "failed its CRC", "got 0x", "computed 0x"]),
    ("data-bit-flipped", answer(Status.OK, WORD)[:4] + b"\x35" + answer(Status.OK, WORD)[5:],
     read_status, LinkCorrupt, ["failed its CRC"]),
    ("too-few-data-bytes", answer(Status.OK, WORD[:2]), read_status, LinkCorrupt,
     ["has 2 data bytes, expected 4", "wrong length"]),
    ("too-many-data-bytes", answer(Status.OK, WORD + WORD), read_status, LinkCorrupt,
     ["has 8 data bytes, expected 4"]),
    ("length-field-lies", answer(Status.OK, WORD, length=9), read_status, LinkTimeout,
     ["got 5 of 10 bytes"]),
    ("unknown-status", answer(99, WORD), read_status, LinkCorrupt,
     ["unknown status 99 in the answer"]),
    ("bridge-bad-crc", answer(Status.BAD_CRC), read_status, LinkRejected,
     ["answered BAD_CRC", "garbled", "write them again"]),
    ("bridge-bad-command", answer(Status.BAD_COMMAND), read_status, LinkRejected,
     ["answered BAD_COMMAND", "version mismatch"]),
    ("bridge-bad-length", answer(Status.BAD_LENGTH), read_two_words, LinkRejected,
     ["DRAM_READ(addr=0, arg=2)", "BAD_LENGTH", "between 1 and max_transfer_words"]),
    ("bridge-bad-range", answer(Status.BAD_RANGE), read_status, LinkRejected,
     ["BAD_RANGE", "past the end"]),
    ("bridge-busy", answer(Status.BUSY), read_two_words, LinkRejected,
     ["DRAM_READ", "BUSY", "while the chip runs"]),
    ("bridge-timeout", answer(Status.TIMEOUT), read_status, LinkRejected,
     ["TIMEOUT", "broke off", "wrong length?"]),
    ("dram-read-short", answer(Status.OK, bytes(WORD_BYTES)), read_two_words, LinkCorrupt,
     ["DRAM_READ(addr=0, arg=2)", "has 8 data bytes, expected 16"]),
    ("info-other-version", answer(Status.OK, bytes([link.VERSION + 1]) + INFO[1:]),
     lambda b: b.check_info(), LinkError,
     [f"'version': {link.VERSION + 1}", "this host expects", "program the board"]),
    ("info-other-word-size", answer(Status.OK, bytes([link.VERSION, 4]) + INFO[2:]),
     lambda b: b.check_info(), LinkError, ["'word_bytes': 4", "bitstream of this configuration"]),
    ("info-other-dram-size",
     answer(Status.OK, INFO[:2] + (DRAM_WORDS // 2).to_bytes(4, "little")),
     lambda b: b.check_info(), LinkError, [f"'dram_words': {DRAM_WORDS // 2}"]),
    ("info-short", answer(Status.OK, INFO[:4]), lambda b: b.info(), LinkCorrupt,
     ["INFO", "has 4 data bytes, expected 6"]),
]


@pytest.mark.parametrize("reply, ask, error, words",
                         [pytest.param(*row[1:], id=row[0]) for row in ANSWERS])
def test_a_bad_answer_ends_in_its_error(reply, ask, error, words):
    b, bridge = bus(reply)
    with pytest.raises(error) as info:
        asyncio.run(ask(b))
    message = str(info.value)
    for word in words:
        assert word.lower() in message.lower(), f"{word!r} missing from: {message}"
    assert bridge.pending == b"", "the bus must drop what is left of a bad answer"


def write_dram(first, image):
    return lambda b: b.write_dram(first, image)


REQUESTS = [
    # (id, what the host asks, exception, key words): refused before a byte is sent
    ("dram-read-past-end", lambda b: b.read_dram(DRAM_WORDS - 1, 2), ValueError,
     [f"[{DRAM_WORDS - 1}, {DRAM_WORDS + 1})", f"outside the {DRAM_WORDS}-word DRAM"]),
    ("dram-read-negative", lambda b: b.read_dram(-1, 1), ValueError, ["[-1, 0)", "outside"]),
    ("dram-write-past-end", write_dram(DRAM_WORDS, np.zeros((1, WORD_BYTES), np.uint8)),
     ValueError, ["outside"]),
    ("dram-write-wrong-width", write_dram(0, np.zeros((2, 4), np.uint8)), ValueError,
     [f"must be (words, {WORD_BYTES}) uint8", "not (2, 4)"]),
    ("dram-write-flat", write_dram(0, np.zeros(16, np.uint8)), ValueError,
     [f"(words, {WORD_BYTES})", "not (16,)"]),
    ("register-value-too-wide", lambda b: b.write(Reg.PROG_ADDR, 1 << 32), ValueError,
     ["register PROG_ADDR", "32 unsigned bits", "4294967296 does not fit"]),
    ("register-value-negative", lambda b: b.write(Reg.UBUF_BASE, -1), ValueError,
     ["register UBUF_BASE", "-1 does not fit"]),
    ("register-value-float", lambda b: b.write(Reg.CTRL, 1.5), ValueError,
     ["register CTRL", "1.5 does not fit"]),
    ("request-addr-too-wide", lambda b: b.request(Command.DRAM_READ, 1 << 32, 1), ValueError,
     ["DRAM_READ request's addr", "4-byte unsigned field", "4294967296"]),
    ("request-arg-negative", lambda b: b.request(Command.REG_WRITE, 0, -5), ValueError,
     ["REG_WRITE request's arg", "not -5"]),
    ("data-on-a-read", lambda b: b.request(Command.REG_READ, 0, 0, b"\x01"), ValueError,
     ["only DRAM_WRITE carries data", "not REG_READ"]),
    ("image-not-whole-words", lambda b: Driver(b).load_program(b"\0" * 20), ValueError,
     ["multiple of 16", "not 20"]),
    ("imem-depth-zero", lambda b: Driver(b).load_program(b"\0" * 16, imem_depth=0),
     ValueError, ["imem_depth must be a positive integer", "not 0"]),
]


@pytest.mark.parametrize("ask, error, words",
                         [pytest.param(*row[1:], id=row[0]) for row in REQUESTS])
def test_a_bad_request_is_refused_before_sending(ask, error, words):
    b, bridge = bus()
    with pytest.raises(error) as info:
        asyncio.run(ask(b))
    for word in words:
        assert word.lower() in str(info.value).lower(), f"{word!r} missing from: {info.value}"
    assert bridge.sent == []


def test_a_chip_that_never_ends_is_a_timeout_not_a_hang():
    """STATUS says running on every poll: the driver gives up after the cycles it was
    allowed and says what the chip last reported."""
    b, _ = bus(*[answer(Status.OK, RUNNING)] * 200)
    with pytest.raises(ChipTimeout, match=r"no interrupt within 1000 cycles "
                                          r"\(STATUS=RUNNING, CYCLES=1\)"):
        asyncio.run(Driver(b).wait_done(1000))


TIMINGS = [
    ("divisor-too-small", dict(clock_hz=1_000_000, divisor=3, idle_timeout=100),
     ["divisor must be an integer of at least 4", "not 3"]),
    ("clock-zero", dict(clock_hz=0, divisor=4, idle_timeout=100), ["clock_hz", "not 0"]),
    ("idle-timeout-bool", dict(clock_hz=1_000_000, divisor=4, idle_timeout=True),
     ["idle_timeout", "not True"]),
]


@pytest.mark.parametrize("fields, words", [pytest.param(*row[1:], id=row[0]) for row in TIMINGS])
def test_link_timing_ranges(fields, words):
    with pytest.raises(ValueError) as info:
        LinkTiming(**fields)
    for word in words:
        assert word in str(info.value)


HAS_PYSERIAL = importlib.util.find_spec("serial") is not None


def test_a_port_that_is_not_there_is_named():
    proc = subprocess.run([sys.executable, "-m", "systolica.app.cli", "run", "--port",
                           "/nonexistent/tty", "--gemm", "4x4x4"],
                          capture_output=True, text=True, timeout=120)
    want = ("cannot open serial port /nonexistent/tty" if HAS_PYSERIAL
            else "the serial link needs pyserial: install the fpga extra")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("systolica: error: /nonexistent/tty: ") and want in proc.stderr


def catalogue() -> dict[str, int]:
    """This module's rows by area (``test_catalogue.py`` adds up every module's): the
    tables and the two single cases (a chip that never ends, a missing port)."""
    return {"board link": len(ANSWERS) + len(REQUESTS) + len(TIMINGS) + 2}


# -- random answers ------------------------------------------------------------------------
@settings(max_examples=examples(400), derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(reply=st.one_of(
    st.binary(max_size=24),
    # a well-formed answer with one byte changed, cut or extended
    st.tuples(st.sampled_from([answer(Status.OK, WORD), answer(Status.OK, INFO)]),
              st.integers(0, 10), st.integers(0, 255), st.sampled_from(["set", "cut", "add"]))
    .map(lambda t: (t[0][:t[1]] + bytes([t[2]]) + t[0][t[1] + 1:]) if t[3] == "set"
         else t[0][:t[1]] if t[3] == "cut" else t[0] + bytes([t[2]]) * t[1])),
    ask=st.sampled_from([read_status, read_two_words, lambda b: b.check_info()]))
def test_random_answers_end_in_a_link_error(reply, ask):
    b, bridge = bus(reply)
    try:
        asyncio.run(ask(b))
    except LinkError:
        assert bridge.pending == b""
