"""The bad-input catalogue for program images (docs/image-format.md), in the style of
``test_bad_inputs.py``: image files that ``systolica disasm`` refuses (exit 2, one
``systolica: error:`` line naming the file and what to do), programs it lists with
each problem flagged (exit 1: the instruction, the rule, the fault the sequencer
raises), and Loadables the golden model, the RTL harness and the board driver refuse
before anything runs (ImageError naming the consumer)."""

from __future__ import annotations

import asyncio
import dataclasses
import struct
import zlib

import numpy as np
import pytest

from systolica import golden
from systolica.arch import image_file, isa
from systolica.arch.config import preset
from systolica.arch.errors import ImageError
from systolica.arch.isa import CopyKind, DmaKind, Instr, Opcode
from systolica.arch.loadable import Loadable
from systolica.firmware.driver import Driver
from systolica.sim import rtlsim
from systolica.sim.jobs import RtlJob

from test_bad_inputs import assert_clear, assert_refused, run_cli

TINY = preset("tiny")
BASE = preset("base")
LOAD = Instr(Opcode.DMA, 0, dict(kind=DmaKind.LOAD_CBUF, dram_addr=0, dram_stride=1,
                                 buf_addr=0, rows=4))
STORE = Instr(Opcode.DMA, 10, dict(kind=DmaKind.STORE_CBUF, dram_addr=8, dram_stride=1,
                                   buf_addr=0, rows=4))
WORDS = isa.to_bytes([isa.encode(LOAD), isa.encode(STORE)])
DRAM = np.zeros((16, TINY.rows), np.uint8)
GOOD = image_file.pack(TINY, WORDS)


def resealed(data: bytes, at: int, fmt: str, value) -> bytes:
    """`data` with the header field at `at` rewritten and the checksum made right again:
    what only a writer that is not ours produces."""
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    out[12:16] = bytes(4)
    struct.pack_into("<I", out, 12, zlib.crc32(bytes(out)))
    return bytes(out)


def flipped(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << bit % 8
    return bytes(out)


def named(name: str, cfg_changes: dict) -> bytes:
    return image_file.pack(TINY.replace(name=name, **cfg_changes), WORDS)


# -- image files `systolica disasm` refuses (exit 2) --------------------------------------
FILES = [
    # (id, file bytes, extra arguments, key words)
    ("bad-magic", b"\x7fELF" + GOOD[4:], [],
     ["case.img is not a Systolica program image", "image magic", "systolica compile --out"]),
    ("raw-word-stream", WORDS, [],
     ["case.img is not a Systolica program image", "raw word stream", "write it again"]),
    ("magic-only", image_file.MAGIC, [],
     ["case.img is truncated", "8 bytes end inside the 40-byte image header"]),
    ("future-version", resealed(GOOD, 8, "<H", 2), [],
     ["case.img", "image format version 2 is not supported", "reads version 1",
      "newer systolica"]),
    ("version-zero", resealed(GOOD, 8, "<H", 0), [],
     ["case.img", "image format version 0 is not supported"]),
    ("flipped-bit-in-a-word", flipped(GOOD, 8 * (len(GOOD) - 3) + 5), [],
     ["case.img is corrupted", "checksum says", "do not run it", "systolica compile --out"]),
    ("flipped-bit-in-the-name", flipped(GOOD, 8 * 41), [],
     ["case.img is corrupted", "checksum"]),
    ("checksum-zeroed", GOOD[:12] + bytes(4) + GOOD[16:], [], ["case.img is corrupted"]),
    ("truncated-word", GOOD[:-16], [],
     ["case.img is truncated", f"{len(GOOD) - 16} bytes", f"header says {len(GOOD)}"]),
    ("extended", GOOD + b"\0" * 16, [],
     ["case.img is longer than its header says", "copy it again"]),
    ("count-resealed", resealed(GOOD, 20, "<I", 3), [],
     ["case.img has a malformed image header", "not the", "not written by this systolica"]),
    ("reserved-flags", resealed(GOOD, 16, "<I", 0x80), [],
     ["malformed image header", "reserved flag bits 0x80"]),
    ("word-size", resealed(GOOD, 36, "<H", 8), [],
     ["malformed image header", "its words are 8 bytes, not 16"]),
    ("header-size", resealed(GOOD, 10, "<H", 41), [],
     ["malformed image header", "header size 41"]),
    ("wrong-chip", GOOD, ["--config", "base"],
     ["case.img was built for chip tiny", "but this is chip base", "compile it again for base",
      "--config base"]),
    ("not-a-preset", named("tiny-custom", {}), [],
     ["built for chip tiny-custom", "not a preset", "--config"]),
    ("preset-changed", image_file.pack(TINY.replace(latency={**TINY.latency, "acc_read": 2}),
                                       WORDS), [],
     ["built for chip tiny", "not the preset of that name", "--config"]),
    ("ubuf-registers-impossible", image_file.pack(TINY, WORDS, ubuf=(3, 5)), [],
     ["case.img", "UBUF registers are not a UBUF of chip tiny", "recompile"]),
]


@pytest.mark.parametrize("data, extra, words",
                         [pytest.param(*row[1:], id=row[0]) for row in FILES])
def test_disasm_refuses_the_file(data, extra, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "case.img").write_bytes(data)
    assert_refused(*run_cli(["disasm", "case.img", *extra], capsys), words)


# -- programs disasm lists with their problems flagged (exit 1) --------------------------
def _setcfg(cycle: int, pairs) -> Instr:
    return Instr(Opcode.SETCFG, cycle, isa.setcfg_fields(pairs))


def _matmul(**fields) -> Instr:
    return Instr(Opcode.MATMUL, 20, dict(dict(act_addr=0, rows=4, acc_addr=0), **fields))


FLAGGED = [
    # (id, instruction or raw word, key words of its flagged line)
    ("zero-rows", Instr(Opcode.DMA, 20, dict(LOAD.fields, rows=0)),
     ["pc 2: DMA", "dram range is empty", "rows must be at least 1", "faults ADDR_RANGE"]),
    ("zero-stride-window", Instr(Opcode.CONVCFG, 20, dict(out_w=4, sh=0, sw=1)),
     ["pc 2: CONVCFG", "sh and sw must be at least 1", "faults ADDR_RANGE"]),
    ("zero-width-window", _matmul(conv=1, in_w=0, in_h=3),
     ["pc 2: MATMUL", "in_w and in_h", "faults ADDR_RANGE"]),
    ("past-the-cbuf", Instr(Opcode.DMA, 20, dict(LOAD.fields, buf_addr=2046)),
     ["pc 2: DMA", "cbuf range [2046, 2050) runs past the end", "2048 rows", "ADDR_RANGE"]),
    ("past-the-ubuf", Instr(Opcode.COPY, 20, dict(kind=CopyKind.CROP, cbuf_addr=0,
                                                  ubuf_addr=250, rows=10)),
     ["pc 2: COPY", "runs past the end", "ADDR_RANGE"]),
    ("zero-taps", Instr(Opcode.TAPS, 20, dict(table=0, first=0, count=0)),
     ["pc 2: TAPS", "count must be 1 to 5", "ADDR_RANGE"]),
    ("early-exit-below-the-grid", _matmul(early=5),
     ["pc 2: MATMUL", "early < tile_rows", "faults ILLEGAL_OPCODE"]),
    ("params-with-relu", Instr(Opcode.VRUN, 20, dict(src=0, rows=4, dst=0, params=1,
                                                     requant=1, relu=1)),
     ["pc 2: VRUN", "params = 1 needs requant = 1", "ILLEGAL_OPCODE"]),
    ("route-span-zero", Instr(Opcode.ROUTE, 20, dict(src=0, dst=8, rows=4, span=0)),
     ["pc 2: ROUTE", "1 <= span", "ILLEGAL_OPCODE"]),
    ("undefined-opcode", 15 | 20 << 4,
     ["pc 2: ILLEGAL", "opcode 15 is not an instruction of the ISA", "ILLEGAL_OPCODE"]),
    ("zero-word", 20 << 4, ["pc 2: ILLEGAL", "opcode 0", "ILLEGAL_OPCODE"]),
    ("reserved-bits", isa.encode(Instr(Opcode.WLOAD, 20, dict(w_addr=0))) | 1 << 127,
     ["pc 2: WLOAD", "reserved bit 127 set", "ignores them", "no compiler sets them"]),
    ("no-such-multiplexer", _setcfg(20, [(200, 0)]),
     ["pc 2: SETCFG", "there is no multiplexer 200", "faults CFG_RANGE"]),
    ("too-many-updates", _setcfg(20, [(k, 0) for k in range(5)]),
     ["pc 2: SETCFG", "carries 5 updates", "at most 4", "faults CFG_LIMIT"]),
    ("out-of-order", Instr(Opcode.DMA, 10, LOAD.fields),
     ["pc 2: DMA", "cycle 10 is not after pc 1's cycle 10", "faults LATE"]),
]


@pytest.mark.parametrize("extra, words",
                         [pytest.param(*row[1:], id=row[0]) for row in FLAGGED])
def test_disasm_flags_the_instruction(extra, words, tmp_path, capsys, monkeypatch):
    """The whole listing is printed, the problem on a ``#!`` line after its instruction,
    and one line on stderr counts the problems: exit 1."""
    monkeypatch.chdir(tmp_path)
    word = extra if isinstance(extra, int) else isa.encode(extra)
    (tmp_path / "case.img").write_bytes(image_file.pack(TINY, WORDS + isa.to_bytes([word])))
    status, out, err = run_cli(["disasm", "case.img"], capsys)
    assert status == 1, (out, err)
    lines = out.splitlines()
    assert lines[0].startswith(f"# case.img: chip tiny ({TINY.program_key}), 3 instructions")
    assert [line[:5] for line in lines[1:] if not line.startswith("#!")] == \
        ["    0", "    1", "    2"]
    flagged = [line for line in lines if line.startswith("#! ")]
    assert len(flagged) == 1 and lines[-1] == flagged[0], out
    assert_clear(flagged[0], words)
    assert err.count("\n") == 1 and err.startswith("systolica: disasm: case.img: 1 problem(s) "
                                                   "in 1 of 3 instructions")


def _long(cfg, count: int) -> bytes:
    """`count` one-row loads on `cfg`, one a cycle."""
    return isa.to_bytes([isa.encode(Instr(Opcode.DMA, c, dict(LOAD.fields, rows=1)))
                         for c in range(count)])


NANO = preset("tangnano9k")      # 512 instructions in its memory, 8 DRAM words each
PROGRAMS = [
    # (id, image, key words of the flagged line that comes before the listing)
    ("region-past-the-dram", image_file.pack(NANO, _long(NANO, 513), prog_addr=0),
     ["the program: the program region [0, 4104) runs past the end of the DRAM",
      "4096 words", "faults PROG_RANGE"]),
]


@pytest.mark.parametrize("data, words", [pytest.param(*row[1:], id=row[0])
                                         for row in PROGRAMS])
def test_disasm_flags_the_program(data, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "case.img").write_bytes(data)
    status, out, err = run_cli(["disasm", "case.img"], capsys)
    flagged = [line for line in out.splitlines() if line.startswith("#! ")]
    assert status == 1 and len(flagged) == 1 and out.splitlines()[1] == flagged[0], out
    assert_clear(flagged[0], words)
    assert err.startswith("systolica: disasm: case.img: 1 problem(s) in 0 of")


def test_disasm_of_a_good_image_exits_0(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.img").write_bytes(GOOD)
    status, out, err = run_cli(["disasm", "good.img"], capsys)
    assert (status, err) == (0, "") and "#!" not in out and len(out.splitlines()) == 3


# -- Loadables the consumers refuse ------------------------------------------------------
def _changed(loadable: Loadable) -> Loadable:
    """The same Loadable with one bit of its words flipped after it was stamped."""
    return dataclasses.replace(loadable, image=flipped(loadable.image, 77))


def _golden(loadable, cfg=TINY):
    return golden.run(cfg, loadable)


def _rtl(loadable, cfg=TINY):
    return rtlsim.run(cfg, [RtlJob(loadable, name="gemm")])


class _Bus:
    """A register bus that must not be written."""

    async def write(self, reg, value):
        raise AssertionError("a refused program reached the chip's registers")


def _board(loadable, cfg=TINY):
    return asyncio.run(Driver(_Bus()).load(loadable, cfg=cfg))


STAMPED = Loadable.for_chip(TINY, WORDS, DRAM)
LOADABLES = [
    # (id, call, exception, key words)
    ("golden-corrupted", lambda: _golden(_changed(STAMPED)), ImageError,
     ["golden.run: the program image is corrupted", "stamped", "chip tiny", "compile it again"]),
    ("golden-wrong-chip", lambda: _golden(STAMPED, BASE), ImageError,
     ["golden.run: the program was built for chip tiny", "this is chip base"]),
    ("rtl-corrupted", lambda: _rtl(_changed(STAMPED)), ImageError,
     ["rtlsim.run job 0 (gemm): the program image is corrupted"]),
    ("rtl-wrong-chip", lambda: _rtl(STAMPED, preset("tiny_tall")), ImageError,
     ["rtlsim.run job 0 (gemm): the program was built for chip tiny", "chip tiny_tall"]),
    ("board-corrupted", lambda: _board(_changed(STAMPED)), ImageError,
     ["the board driver: the program image is corrupted"]),
    ("board-wrong-chip", lambda: _board(STAMPED, preset("ulx3s")), ImageError,
     ["the board driver: the program was built for chip tiny", "this is chip ulx3s",
      "run it on tiny"]),
    ("unstamped", lambda: Loadable(WORDS, DRAM, chip=None, fingerprint=None, checksum=None),
     TypeError, ["stamp", "Loadable.for_chip(cfg, image, dram)"]),
    ("pack-bad-prog-addr", lambda: image_file.pack(TINY, WORDS, prog_addr=-1), ImageError,
     ["PROG_ADDR must be an integer in [0, 2**32)", "-1"]),
    ("pack-ragged-words", lambda: image_file.pack(TINY, WORDS[:-1]), ImageError,
     ["whole number of 16-byte instructions", "31 bytes"]),
    ("unpack-text", lambda: image_file.unpack("x", source="s"), ImageError,
     ["s: a program image is bytes, not str"]),
]


@pytest.mark.parametrize("call, exception, words",
                         [pytest.param(*row[1:], id=row[0]) for row in LOADABLES])
def test_loadable_refused(call, exception, words, monkeypatch):
    def refuse(*_, **__):
        raise AssertionError("a refused program reached the Verilator build")
    monkeypatch.setattr(rtlsim, "build", refuse)
    with pytest.raises(exception) as refused:
        call()
    assert_clear(str(refused.value), words)


def catalogue() -> dict[str, int]:
    """This module's rows by area (``test_catalogue.py`` adds up every module's)."""
    return {"program images": len(FILES) + len(FLAGGED) + len(PROGRAMS) + len(LOADABLES)}
