"""The program image file (docs/image-format.md): what pack writes unpack reads back,
and whatever happens to the bytes in between is refused with ImageError, never
anything else: every single-bit flip (the CRC-32's guarantee, checked bit by bit), and
byte-level mutations drawn by hypothesis (flips, truncations, extensions, header
fields rewritten, words spliced), through unpack, disasm and the golden model."""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from systolica import golden
from systolica.arch import disasm, image_file, isa
from systolica.arch.config import preset
from systolica.arch.errors import ImageError
from systolica.arch.isa import DmaKind, Instr, Opcode
from systolica.arch.loadable import Loadable

from tiers import examples

TINY = preset("tiny")
BASE = preset("base")
PROGRAM = [Instr(Opcode.DMA, 0, dict(kind=DmaKind.LOAD_CBUF, dram_addr=0, dram_stride=1,
                                     buf_addr=0, rows=4)),
           Instr(Opcode.DMA, 10, dict(kind=DmaKind.STORE_CBUF, dram_addr=8, dram_stride=1,
                                      buf_addr=0, rows=4))]
WORDS = isa.to_bytes([isa.encode(i) for i in PROGRAM])
DRAM = np.arange(8 * TINY.rows, dtype=np.uint8).reshape(8, TINY.rows)
GOOD = image_file.pack(TINY, WORDS, prog_addr=64, ubuf=(TINY.ubuf_base, TINY.ubuf_rows))
#: The same mutations in every run, and no example database left in the tree.
FUZZ = settings(database=None, derandomize=True, deadline=None,
                max_examples=examples(400), suppress_health_check=[HealthCheck.too_slow])


def test_pack_then_unpack_gives_back_what_was_packed():
    got = image_file.unpack(GOOD, source="g.img", cfg=TINY)
    assert (got.chip, got.fingerprint, got.prog_addr, got.ubuf, got.words, got.count) == \
        ("tiny", TINY.program_key, 64, (TINY.ubuf_base, TINY.ubuf_rows), WORDS, 2)
    plain = image_file.unpack(image_file.pack(TINY, b""), source="e.img")
    assert (plain.prog_addr, plain.ubuf, plain.count) == (None, None, 0)
    assert len(GOOD) == image_file.FIXED_BYTES + len("tiny") + len(TINY.program_key) + len(WORDS)


def test_a_loadable_written_to_a_file_reads_back_as_the_same_loadable():
    loadable = Loadable.for_chip(TINY, WORDS, DRAM, 64, (TINY.ubuf_base, TINY.ubuf_rows))
    again = Loadable.from_file(image_file.unpack(loadable.to_file(), source="l.img"), DRAM)
    assert (again.image, again.prog_addr, again.ubuf, again.chip, again.fingerprint,
            again.checksum) == (loadable.image, 64, loadable.ubuf, "tiny", TINY.program_key,
                                loadable.checksum)
    again.verify(TINY, "test")


def test_prog_fetch_in_the_header_and_files_without_it():
    """A Loadable's fetch_from (PROG_FETCH) is written after the fingerprint under flag
    bit 2 and read back; a file without it (every file written before) is the same
    bytes as before and reads back as None; a flagged header missing its 4 bytes, or
    an unflagged one with them, is refused as malformed."""
    loadable = Loadable.for_chip(TINY, WORDS, DRAM, 64, None, 0)
    data = loadable.to_file()
    assert len(data) == len(GOOD) + 4
    again = Loadable.from_file(image_file.unpack(data, source="f.img", cfg=TINY), DRAM)
    assert (again.fetch_from, again.prog_addr, again.image) == (0, 64, WORDS)
    assert image_file.unpack(GOOD, source="g.img").fetch_from is None
    assert Loadable.for_chip(TINY, WORDS, DRAM, 64,
                             (TINY.ubuf_base, TINY.ubuf_rows)).to_file() == GOOD
    flags = struct.unpack_from("<I", data, 16)[0]
    for bad in (_restamped(data, 16, flags & ~image_file.HAS_PROG_FETCH),
                _restamped(GOOD, 16, image_file.HAS_PROG_ADDR | image_file.HAS_UBUF
                           | image_file.HAS_PROG_FETCH)):
        with pytest.raises(ImageError, match="malformed image header"):
            image_file.unpack(bad, source="b.img")
    with pytest.raises(TypeError, match="fetch_from"):
        Loadable.for_chip(TINY, WORDS, DRAM, 64, None, -1)


def _restamped(data: bytes, at: int, value: int) -> bytes:
    """`data` with the 32-bit field at `at` set to `value` and its checksum made good."""
    out = bytearray(data)
    struct.pack_into("<I", out, at, value)
    struct.pack_into("<I", out, 12, 0)
    struct.pack_into("<I", out, 12, image_file.checksum(bytes(out)))
    return bytes(out)


def test_every_single_bit_flip_is_refused():
    """CRC-32 detects every single-bit error at any length: checked on every bit of a
    whole image, header included (each flip: ImageError, never a program)."""
    for bit in range(8 * len(GOOD)):
        bad = bytearray(GOOD)
        bad[bit // 8] ^= 1 << bit % 8
        with pytest.raises(ImageError):
            image_file.unpack(bytes(bad), source="flip.img")


def test_a_program_for_another_chip_is_refused_by_name():
    with pytest.raises(ImageError, match=r"g.img was built for chip tiny \(tiny-[0-9a-f]+\) "
                                         r"but this is chip base \(base-[0-9a-f]+\)"):
        image_file.unpack(GOOD, source="g.img", cfg=BASE)
    other = TINY.replace(latency={**TINY.latency, "acc_read": 2})
    with pytest.raises(ImageError, match="the same name, another configuration"):
        image_file.unpack(GOOD, source="g.img", cfg=other)


def test_a_program_for_a_moved_ubuf_runs_on_the_chip_it_was_moved_on():
    """The UBUF registers are the host's to write (the Loadable carries them), so a
    compile for ``cfg.at_ubuf(...)`` is a program for ``cfg``; any other change is not."""
    moved = TINY.at_ubuf(1536, 512)
    assert moved.key != TINY.key and moved.program_key == TINY.program_key
    Loadable.for_chip(moved, WORDS, DRAM, ubuf=(1536, 512)).verify(TINY, "golden.run")
    image_file.unpack(image_file.pack(moved, WORDS, ubuf=(1536, 512)), source="m.img",
                      cfg=TINY)
    with pytest.raises(ImageError, match="another configuration"):
        Loadable.for_chip(TINY.replace(imem_depth=TINY.imem_depth * 2), WORDS,
                          DRAM).verify(TINY, "golden.run")


# -- mutations ---------------------------------------------------------------------------
def _header_field(offset: int, fmt: str):
    return st.integers(0, (1 << (8 * struct.calcsize(fmt))) - 1).map(
        lambda v: ("field", offset, struct.pack(fmt, v)))


MUTATIONS = st.one_of(
    st.lists(st.integers(0, 8 * len(GOOD) - 1), min_size=1, max_size=8, unique=True)
    .map(lambda bits: ("flip", bits)),
    st.integers(0, len(GOOD) - 1).map(lambda n: ("truncate", n)),
    st.binary(min_size=1, max_size=64).map(lambda b: ("extend", b)),
    st.sampled_from([(8, "<H"), (10, "<H"), (16, "<I"), (20, "<I"), (24, "<I"),
                     (28, "<I"), (32, "<I"), (36, "<H"), (38, "<B"), (39, "<B")])
    .flatmap(lambda at: _header_field(*at)),
    st.tuples(st.integers(0, len(GOOD) - 1), st.binary(min_size=1, max_size=32))
    .map(lambda t: ("overwrite", *t)),
)


def mutate(data: bytes, mutation) -> bytes:
    kind, *args = mutation
    out = bytearray(data)
    if kind == "flip":
        for bit in args[0]:
            out[bit // 8] ^= 1 << bit % 8
    elif kind == "truncate":
        del out[args[0]:]
    elif kind == "extend":
        out += args[0]
    else:                       # a header field or any bytes rewritten (past the end:
        at, new = args          # the file grows)
        out[at:at + len(new)] = new
    return bytes(out)


@FUZZ
@given(MUTATIONS)
def test_a_mutated_image_is_refused_or_unchanged(mutation):
    bad = mutate(GOOD, mutation)
    if bad == GOOD:
        assert image_file.unpack(bad, source="m.img", cfg=TINY).words == WORDS
        return
    with pytest.raises(ImageError) as refused:
        image_file.unpack(bad, source="m.img", cfg=TINY)
    assert str(refused.value).startswith("m.img")


@FUZZ
@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_refused(data):
    with pytest.raises(ImageError):
        image_file.unpack(data, source="x.img")


@settings(database=None, derandomize=True, deadline=None, max_examples=examples(200),
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, (1 << isa.WORD_BITS) - 1), min_size=1, max_size=6))
def test_any_intact_image_of_any_words_disassembles_and_runs_or_is_refused(words):
    """Words of any bits in an intact image (the checksum cannot help): disasm lists
    and checks them all, and the golden model runs them or says why not (GoldenError,
    a ValueError), never a traceback of another kind."""
    raw = isa.to_bytes(words)
    image = image_file.unpack(image_file.pack(TINY, raw), source="w.img", cfg=TINY)
    lines = list(disasm.listing(TINY, isa.from_bytes(image.words)))
    assert sum(p is None for _, p in lines) == len(words)
    loadable = Loadable.from_file(image, DRAM)
    try:
        golden.run(TINY, loadable)
    except golden.GoldenError:
        pass
    changed = dataclasses.replace(loadable, image=bytes([raw[0] ^ 1]) + raw[1:])
    with pytest.raises(ImageError, match="golden.run: the program image is corrupted"):
        golden.run(TINY, changed)


def test_the_harness_reads_back_only_an_intact_image_of_its_chip(tmp_path):
    """The RTL harness hands each job's program to the simulator's side as an image
    file, and that side reads it with the chip's fingerprint: a file changed between
    the two is refused there (here the C++ harness's reader, before any process)."""
    from systolica.sim import rtlsim
    from systolica.sim.jobs import RtlJob
    specs = rtlsim._write_jobs(TINY, [RtlJob(Loadable.for_chip(TINY, WORDS, DRAM))], tmp_path)
    path = tmp_path / specs[0]["program"]
    assert image_file.unpack(path.read_bytes(), source=str(path), cfg=TINY).words == WORDS
    path.write_bytes(mutate(path.read_bytes(), ("flip", [8 * 50])))
    with pytest.raises(ImageError, match=r"job0\.img is corrupted"):
        rtlsim._run_cxx(TINY, tmp_path / "no-build", tmp_path, specs)
