"""The program image file: a header (magic, format version, the chip the program was
compiled for, instruction count, PROG_ADDR, UBUF and PROG_FETCH registers, a CRC-32 of
the whole file), then the words (docs/image-format.md). Every reader and writer of an image file
goes through :func:`pack` and :func:`unpack`; both raise :class:`ImageError` only."""

from __future__ import annotations

import numbers
import struct
import zlib
from dataclasses import dataclass

from systolica.arch import isa
from systolica.arch.errors import ImageError

MAGIC = b"\x89SYS\r\n\x1a\n"
VERSION = 1
WORD_BYTES = isa.WORD_BITS // 8
#: magic, version, header size, checksum, flags, count, PROG_ADDR, UBUF_BASE,
#: UBUF_ROWS, word bytes, name length, fingerprint length
_FIXED = struct.Struct("<8sHHIIIIIIHBB")
FIXED_BYTES = _FIXED.size                   # 40: the name and the fingerprint follow
_CHECKSUM_AT = 12                           # its 4 bytes count as zeros in the CRC
HAS_PROG_ADDR, HAS_UBUF, HAS_PROG_FETCH = 1, 2, 4
_FLAGS = HAS_PROG_ADDR | HAS_UBUF | HAS_PROG_FETCH
_PROG_FETCH = struct.Struct("<I")           # after the fingerprint, with HAS_PROG_FETCH
_U32 = 1 << 32
_REWRITE = "write it again with `systolica compile --out` or `systolica schedule --image`"


@dataclass(frozen=True)
class ProgramImage:
    """What an image file holds: the chip it was compiled for (its name and
    fingerprint, ``ChipConfig.program_key``), the PROG_ADDR, UBUF and PROG_FETCH
    registers the host writes (None: not given) and the words (``isa.to_bytes``)."""
    chip: str
    fingerprint: str
    prog_addr: int | None
    ubuf: tuple[int, int] | None
    words: bytes
    fetch_from: int | None = None

    @property
    def count(self) -> int:
        return len(self.words) // WORD_BYTES


def checksum(data: bytes) -> int:
    """The CRC-32 the header and a Loadable carry (docs/image-format.md, why CRC-32)."""
    return zlib.crc32(data)


def chip_mismatch(what: str, chip: str, fingerprint: str, cfg) -> str | None:
    """Why a program compiled for `chip` (`fingerprint`) must not run on `cfg`, or None
    if it is that chip; `what` names the program (a file, a Loadable's consumer)."""
    if fingerprint == cfg.program_key:
        return None
    same = " (the same name, another configuration)" if chip == cfg.name else ""
    return (f"{what} was built for chip {chip} ({fingerprint}) but this is chip {cfg.name} "
            f"({cfg.program_key}){same}: compile it again for {cfg.name}, or run it on {chip}")


def _u32(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
            or not 0 <= value < _U32:
        raise ImageError(f"an image's {what} must be an integer in [0, 2**32), not {value!r}")
    return int(value)


def pack(cfg, words: bytes, *, prog_addr: int | None = None,
         ubuf: tuple[int, int] | None = None, fetch_from: int | None = None) -> bytes:
    """The image file of `words` (``isa.to_bytes`` of the program) compiled for chip
    `cfg`, with the PROG_ADDR, UBUF and PROG_FETCH registers the host writes (None: not
    given)."""
    return pack_stamped(cfg.name, cfg.program_key, words, prog_addr=prog_addr, ubuf=ubuf,
                        fetch_from=fetch_from)


def pack_stamped(chip: str, fingerprint: str, words: bytes, *, prog_addr: int | None = None,
                 ubuf: tuple[int, int] | None = None, fetch_from: int | None = None
                 ) -> bytes:
    """:func:`pack` for a chip given by its name and fingerprint (a Loadable's stamp)."""
    if not isinstance(words, (bytes, bytearray)) or len(words) % WORD_BYTES:
        got = f"{len(words)} bytes" if isinstance(words, (bytes, bytearray)) else \
            type(words).__name__
        raise ImageError(f"an image's words must be bytes, a whole number of "
                         f"{WORD_BYTES}-byte instructions (isa.to_bytes), not {got}")
    texts = []
    for what, text in (("chip name", chip), ("chip fingerprint", fingerprint)):
        if not isinstance(text, str) or not text.isascii() or not 0 < len(text) < 256:
            raise ImageError(f"an image's {what} must be 1 to 255 ASCII characters, not "
                             f"{text!r}")
        texts.append(text.encode())
    flags = 0
    if prog_addr is not None:
        flags |= HAS_PROG_ADDR
        prog_addr = _u32(prog_addr, "PROG_ADDR")
    if ubuf is not None:
        flags |= HAS_UBUF
        if not isinstance(ubuf, tuple) or len(ubuf) != 2:
            raise ImageError(f"an image's UBUF registers must be (base, rows), not {ubuf!r}")
        ubuf = (_u32(ubuf[0], "UBUF_BASE"), _u32(ubuf[1], "UBUF_ROWS"))
    extra = b""
    if fetch_from is not None:
        flags |= HAS_PROG_FETCH
        extra = _PROG_FETCH.pack(_u32(fetch_from, "PROG_FETCH"))
    count = len(words) // WORD_BYTES
    _u32(count, "instruction count")
    name, key = texts
    size = FIXED_BYTES + len(name) + len(key) + len(extra)
    base, rows = ubuf if ubuf is not None else (0, 0)
    head = _FIXED.pack(MAGIC, VERSION, size, 0, flags, count, prog_addr or 0, base, rows,
                       WORD_BYTES, len(name), len(key)) + name + key + extra
    crc = zlib.crc32(bytes(words), zlib.crc32(head))
    return head[:_CHECKSUM_AT] + struct.pack("<I", crc) + head[_CHECKSUM_AT + 4:] + bytes(words)


def unpack(data: bytes, *, source: str, cfg=None) -> ProgramImage:
    """The program in image file `data` (read from `source`, which messages name), or
    :class:`ImageError` saying what is wrong with it (docs/image-format.md, in this
    order): not an image, a format version this program does not read, truncated or
    extended, corrupted (the checksum), a malformed header, and with `cfg` a program
    built for another chip."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ImageError(f"{source}: a program image is bytes, not {type(data).__name__}")
    data = bytes(data)
    if not data:
        raise ImageError(f"{source} is empty (0 bytes), not a program image; {_REWRITE}")
    if data[:len(MAGIC)] != MAGIC[:len(data)] or len(data) < len(MAGIC):
        what = ("it is shorter than the image header's magic" if data == MAGIC[:len(data)]
                else "it does not start with the image magic \\x89SYS\\r\\n\\x1a\\n")
        raise ImageError(f"{source} is not a Systolica program image ({what}; a raw word "
                         f"stream of an older systolica has no header either); {_REWRITE}")
    if len(data) < FIXED_BYTES:
        raise ImageError(f"{source} is truncated: {len(data)} bytes end inside the "
                         f"{FIXED_BYTES}-byte image header; copy it again or {_REWRITE}")
    (_, version, size, stored, flags, count, prog_addr, base, rows, word_bytes,
     name_len, key_len) = _FIXED.unpack_from(data)
    crc = zlib.crc32(data[_CHECKSUM_AT + 4:], zlib.crc32(data[:_CHECKSUM_AT] + bytes(4)))
    if version != VERSION:
        raise ImageError(f"{source}: image format version {version} is not supported (this "
                         f"systolica reads version {VERSION}): if a newer systolica wrote "
                         f"it, read it with that one; else it is corrupted: {_REWRITE}")
    expected = size + count * WORD_BYTES
    if crc != stored:
        if len(data) != expected:
            how = "truncated" if len(data) < expected else "longer than its header says"
            raise ImageError(f"{source} is {how}: {len(data)} bytes, where its header "
                             f"says {expected} ({size}-byte header, {count} instructions "
                             f"of {WORD_BYTES} bytes); copy it again or {_REWRITE}")
        raise ImageError(f"{source} is corrupted: its checksum says {stored:#010x}, its "
                         f"bytes give {crc:#010x}; do not run it: {_REWRITE}")
    # The checksum holds: what follows is what a writer wrote, so a fault is the writer's.
    problems = []
    if flags & ~_FLAGS:
        problems.append(f"reserved flag bits {flags & ~_FLAGS:#x} are set")
    if word_bytes != WORD_BYTES:
        problems.append(f"its words are {word_bytes} bytes, not {WORD_BYTES}")
    extra = _PROG_FETCH.size if flags & HAS_PROG_FETCH else 0
    if size != FIXED_BYTES + name_len + key_len + extra:
        problems.append(f"its header size {size} is not {FIXED_BYTES} + the name's "
                        f"{name_len} + the fingerprint's {key_len} bytes"
                        + (f" + PROG_FETCH's {extra}" if extra else ""))
    elif len(data) != expected:
        problems.append(f"it is {len(data)} bytes, not the {expected} its header says")
    name = data[FIXED_BYTES:FIXED_BYTES + name_len]
    key = data[FIXED_BYTES + name_len:FIXED_BYTES + name_len + key_len]
    if not (name and key and name.isascii() and key.isascii()):
        problems.append("its chip name or fingerprint is empty or not ASCII")
    if problems:
        raise ImageError(f"{source} has a malformed image header ({'; '.join(problems)}): "
                         f"it was not written by this systolica; {_REWRITE}")
    fetch_from = _PROG_FETCH.unpack_from(data, size - extra)[0] if extra else None
    image = ProgramImage(name.decode(), key.decode(),
                         prog_addr if flags & HAS_PROG_ADDR else None,
                         (base, rows) if flags & HAS_UBUF else None, data[size:], fetch_from)
    if cfg is not None:
        why = chip_mismatch(source, image.chip, image.fingerprint, cfg)
        if why:
            raise ImageError(why)
    return image
