"""The instruction set: opcodes, formats, encoding. The RTL decoder, the compiler's
encoder, the disassembler, the golden model and the tests all import this module.

Every instruction is one 128-bit word: ``opcode`` (4 bits), ``cycle`` (32 bits, the
absolute cycle at which the sequencer issues it) and an opcode-specific payload.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from amaranth.lib import data, enum

WORD_BITS = 128
CYCLE_BITS = 32
CBUF_ADDR_BITS = 16
ACC_ADDR_BITS = 12
DRAM_ADDR_BITS = 24
TAP_BITS = 6          # a tap's offset within the window (kernel index * dilation)
TAP_DELTA_BITS = 7    # a tap table entry: signed offset from the instruction's tap
TAP_TABLES = 8
TAP_TABLE_BITS = 3
TAPS_PER_WORD = 5     # tap table entries one TAPS writes
GEOM_BITS = 12        # window geometry: pixels per row, rows
MUX_INDEX_BITS = 7    # a SETCFG pair's multiplexer number within its page
MUX_PAGE_BITS = 1     # a SETCFG's page: its pairs name multiplexers page*128 + index
MUX_VALUE_BITS = 4    # ... and the source it selects
# SETCFGW, for fabrics past SETCFG's reach: pages of 32 multiplexers, 32 sources
WIDE_INDEX_BITS, WIDE_VALUE_BITS, WIDE_PAGE_BITS = 5, 5, 9
ROUTE_GROUPS = 8      # tile rows and columns a ROUTE names, at most
ROUTE_SPAN_BITS = 4   # a ROUTE's span; its per-group delays have one bit less
EXIT_BITS = 5         # a MATMUL's partial-sum exit: grids of up to 32 tile rows
SETCFG_PAIRS = 8      # pairs one SETCFG carries: 8 x (7 + 4) bits, a 3-bit count, a page


class Opcode(enum.IntEnum, shape=4):
    ILLEGAL = 0  # a zeroed program word faults instead of running
    DMA = 1      # move rows between external memory and CBUF / accumulator buffer
    WLOAD = 2    # shift a weight block from the CBUF into the array's idle weight bank
    MATMUL = 3   # stream activation rows through the array, accumulate into ACC
    VRUN = 4     # vector unit: ACC rows -> bias, requantise, ReLU -> CBUF or ACC
    SETCFG = 5   # write one fabric multiplexer's configuration register
    CONVCFG = 6  # set the window geometry later MATMULs walk (conv = 1)
    TAPS = 7     # write per-partition tap offsets of one tap table
    COPY = 8     # crop (CBUF -> UBUF) or fetch (UBUF -> CBUF) rows: the overlap path
    ROUTE = 9    # CBUF rows through the general lanes and back (general_lanes chips)
    SETCFGW = 10  # SETCFG's wide format, for fabrics past SETCFG (fabric.setcfg_format)


class CopyKind(enum.IntEnum, shape=1):
    CROP = 0    # CBUF rows -> UBUF rows
    FETCH = 1   # UBUF rows -> CBUF rows


class DmaKind(enum.IntEnum, shape=2):
    LOAD_CBUF = 0   # DRAM -> CBUF, one word per row
    STORE_CBUF = 1  # CBUF -> DRAM
    LOAD_ACC = 2    # DRAM -> ACC, cfg.acc_row_words words per row (int32 little-endian)
    STORE_ACC = 3   # ACC -> DRAM


def _setcfg_layout(index_bits: int, value_bits: int, page_bits: int) -> data.StructLayout:
    """A SETCFG format: SETCFG_PAIRS (index, value) pairs, a count and a page."""
    return data.StructLayout({
        "index": index_bits,           # multiplexer number within the page, see
        "value": value_bits,           # systolica.arch.fabric; the source it selects
        "more": 3,                     # further (index<k>, value<k>) pairs, k = 1..more
        **{f"{name}{k}": bits for k in range(1, SETCFG_PAIRS)
           for name, bits in (("index", index_bits), ("value", value_bits))},
        "page": page_bits,             # pair k: multiplexer page * 2**index_bits + index<k>
    })


PAYLOAD = {
    Opcode.ILLEGAL: data.StructLayout({}),
    Opcode.DMA: data.StructLayout({
        "kind": DmaKind,
        "dram_addr": DRAM_ADDR_BITS,   # words
        "dram_stride": 16,             # words between consecutive rows
        "buf_addr": CBUF_ADDR_BITS,    # CBUF or ACC row
        "rows": 16,
    }),
    Opcode.WLOAD: data.StructLayout({
        "w_addr": CBUF_ADDR_BITS,      # CBUF row of weight row 0; rows follow
        "bank": 1,
    }),
    Opcode.MATMUL: data.StructLayout({
        "act_addr": CBUF_ADDR_BITS,    # first activation row (conv: the tile's pixel 0)
        "rows": 16,                    # rows streamed (conv: output pixels)
        "acc_addr": ACC_ADDR_BITS,
        "accumulate": 1,               # 0: overwrite ACC, 1: add to (or max with) ACC
        "bank": 1,                     # weight bank to use
        "conv": 1,                     # 1: walk a window (geometry from CONVCFG)
        "max": 1,                      # with accumulate: ACC = max(ACC, sum)
        "dh": TAP_BITS,                # conv: the tap's row offset (kernel row * dilation)
        "dw": TAP_BITS,                # ... and column offset
        "taps": TAP_TABLE_BITS,        # conv: per-partition tap table
        "in_w": GEOM_BITS,             # conv: the tile's input pixels per row
        "in_h": GEOM_BITS,             # conv: the tile's input rows
        "early": EXIT_BITS,            # sums leave tile row tile_rows - 1 - early
    }),
    Opcode.VRUN: data.StructLayout({
        "src": ACC_ADDR_BITS,
        "rows": ACC_ADDR_BITS,
        "dst": CBUF_ADDR_BITS,
        "bias_addr": ACC_ADDR_BITS,
        "use_bias": 1,
        "to_acc": 1,                   # 1: int32 result back into ACC at dst
        "requant": 1,                  # 1: int8 = clamp(round(x*mult >> shift) + zp)
        "relu": 1,
        "mult": 16,
        "shift": 6,
        "zp": 8,
        "params": 1,                   # 1: per-column bias, mult, shift, clamp rows
                                       #    from bias_addr (see instructions.Vrun)
        "crop": 1,                     # 1: each CBUF row written also lands in the
    }),                                #    UBUF (the fused crop, instructions.Vrun)
    Opcode.SETCFG: _setcfg_layout(MUX_INDEX_BITS, MUX_VALUE_BITS, MUX_PAGE_BITS),
    Opcode.SETCFGW: _setcfg_layout(WIDE_INDEX_BITS, WIDE_VALUE_BITS, WIDE_PAGE_BITS),
    Opcode.CONVCFG: data.StructLayout({
        "out_w": GEOM_BITS,            # output pixels per row: ow wraps here
        "sh": 3, "sw": 3,              # stride (rows, columns)
        "top": TAP_BITS,               # input rows above the tile's first (padding)
        "left": TAP_BITS,              # input columns left of the tile's first
        "pad": 8,                      # the byte a pixel outside the tile reads
    }),
    Opcode.TAPS: data.StructLayout({
        "table": TAP_TABLE_BITS,
        "first": 5,                    # partition of entry 1; entries follow
        "count": 3,                    # entries written, 1..TAPS_PER_WORD
        **{f"{name}{k}": TAP_DELTA_BITS for k in range(1, TAPS_PER_WORD + 1)
           for name in ("th", "tw")},
    }),
    Opcode.COPY: data.StructLayout({
        "kind": CopyKind,
        "cbuf_addr": CBUF_ADDR_BITS,   # CBUF row (any, the UBUF's included)
        "ubuf_addr": CBUF_ADDR_BITS,   # UBUF row (CBUF row ubuf_base + ubuf_addr)
        "rows": 16,
    }),
    Opcode.ROUTE: data.StructLayout({
        "src": CBUF_ADDR_BITS,         # first row driven onto the west edge
        "dst": CBUF_ADDR_BITS,         # first row written from the south edge
        "rows": 16,
        "span": ROUTE_SPAN_BITS,       # cycles from a row's drive to its write
        "col0": 3,                     # column group partition group 0 takes
        "keep": ROUTE_GROUPS,          # partition groups not written
        **{f"delay{j}": ROUTE_SPAN_BITS - 1 for j in range(ROUTE_GROUPS)},
    }),
}
assert SETCFG_PAIRS == 1 << PAYLOAD[Opcode.SETCFG]["more"].width   # more = 0..7


@dataclass(frozen=True)
class SetcfgFormat:
    """One of the two SETCFG formats: its pairs name multiplexers ``page * page_size +
    index<k>``. A chip takes one of them (:func:`systolica.arch.fabric.setcfg_format`)."""
    op: Opcode
    index_bits: int
    value_bits: int
    page_bits: int

    @property
    def page_size(self) -> int:
        return 1 << self.index_bits

    @property
    def number_bits(self) -> int:
        return self.index_bits + self.page_bits

    def page(self, number: int) -> int:
        """The page of multiplexer `number`: one SETCFG names one page's."""
        return number >> self.index_bits

    def pairs(self, fields: dict) -> list[tuple[int, int]]:
        """The (multiplexer, value) pairs of a SETCFG, in the order they are applied."""
        base = fields.get("page", 0) << self.index_bits
        return [(base + fields.get(f"index{k or ''}", 0), fields.get(f"value{k or ''}", 0))
                for k in range(fields.get("more", 0) + 1)]

    def payload_pairs(self, sc) -> list[tuple]:
        """All SETCFG_PAIRS (multiplexer number, value) slots of a payload view, the page
        prepended to each index (hardware: the slots past ``more`` included)."""
        from amaranth.hdl import Cat
        return [(Cat(sc[f"index{k or ''}"], sc.page), sc[f"value{k or ''}"])
                for k in range(SETCFG_PAIRS)]

    def fields(self, pairs: list[tuple[int, int]]) -> dict:
        """Payload fields for 1..SETCFG_PAIRS (multiplexer, value) pairs, all in one
        page."""
        if not 1 <= len(pairs) <= SETCFG_PAIRS:
            raise EncodingError(f"{self.op.name} carries 1 to {SETCFG_PAIRS} pairs, not "
                                f"{len(pairs)}")
        pages = sorted({self.page(index) for index, _ in pairs})
        if len(pages) > 1 or pages[0] >> self.page_bits:
            raise EncodingError(
                f"a {self.op.name} names multiplexers of one page of {self.page_size} "
                f"(numbers below {1 << self.number_bits}); multiplexers "
                f"{', '.join(str(i) for i, _ in pairs)} lie in pages "
                f"{', '.join(map(str, pages))}: write one {self.op.name} per page")
        base = pages[0] << self.index_bits
        out = {name: 0 for name, _ in PAYLOAD[self.op]}
        out.update(more=len(pairs) - 1, page=pages[0])
        for k, (index, value) in enumerate(pairs):
            out[f"index{k or ''}"], out[f"value{k or ''}"] = index - base, value
        return out


SETCFG_FORMATS = {op: SetcfgFormat(op, *bits) for op, bits in (
    (Opcode.SETCFG, (MUX_INDEX_BITS, MUX_VALUE_BITS, MUX_PAGE_BITS)),
    (Opcode.SETCFGW, (WIDE_INDEX_BITS, WIDE_VALUE_BITS, WIDE_PAGE_BITS)))}
SETCFGS = frozenset(SETCFG_FORMATS)     # the opcodes that write multiplexer registers


def mux_page(number: int, op: Opcode = Opcode.SETCFG) -> int:
    """The page of multiplexer `number` in `op`'s format: one SETCFG names one page's."""
    return SETCFG_FORMATS[op].page(number)


def setcfg_pairs(fields: dict, op: Opcode = Opcode.SETCFG) -> list[tuple[int, int]]:
    """The (multiplexer, value) pairs of a SETCFG (or SETCFGW), in the order applied."""
    return SETCFG_FORMATS[op].pairs(fields)


def setcfg_fields(pairs: list[tuple[int, int]], op: Opcode = Opcode.SETCFG) -> dict:
    """SETCFG (or SETCFGW) payload fields for 1..SETCFG_PAIRS (multiplexer, value)
    pairs, all in one page (:func:`mux_page`)."""
    return SETCFG_FORMATS[op].fields(pairs)


def signed_field(value: int, bits: int) -> int:
    """A signed value as the unsigned field that holds it (two's complement)."""
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise EncodingError(f"{value} does not fit {bits} signed bits")
    return value & ((1 << bits) - 1)


def field_signed(raw: int, bits: int) -> int:
    return raw - (1 << bits) if raw >> (bits - 1) else raw


def taps_entries(fields: dict) -> list[tuple[int, int, int]]:
    """The (partition, row offset, column offset) entries a TAPS writes."""
    return [(fields.get("first", 0) + k - 1,
             field_signed(fields.get(f"th{k}", 0), TAP_DELTA_BITS),
             field_signed(fields.get(f"tw{k}", 0), TAP_DELTA_BITS))
            for k in range(1, fields.get("count", 0) + 1)]


HEADER = data.StructLayout({"opcode": Opcode, "cycle": CYCLE_BITS})
PAYLOAD_BITS = WORD_BITS - HEADER.size
for _op, _layout in PAYLOAD.items():
    assert _layout.size <= PAYLOAD_BITS, (_op, _layout.size)
Word = data.StructLayout({"opcode": Opcode, "cycle": CYCLE_BITS,
                          "payload": PAYLOAD_BITS})


class EncodingError(ValueError):
    """An instruction field does not fit its format."""


@dataclass(frozen=True)
class Instr:
    """One instruction: opcode, issue cycle, payload fields by name."""
    op: Opcode
    cycle: int
    fields: dict

    def __getattr__(self, name):
        # Only reached for names that are not attributes. Before ``fields`` is set (an
        # instance being unpickled or copied) there is nothing to look in.
        try:
            return self.__dict__["fields"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __str__(self):
        fmt = FIELD_FORMATS.get(self.op)
        args = fmt(self.fields) if fmt else ", ".join(f"{k}={v}" for k, v in self.fields.items())
        return f"{self.cycle:>8}: {self.op.name:<7} {args}"


#: Per opcode, how its fields read as text: filled by :mod:`systolica.arch.instructions`,
#: whose entries know each instruction's fields (this module imports nothing of ours).
FIELD_FORMATS: dict = {}


_FIELDS: dict[int, tuple[tuple[str, int, int], ...]] = {}


def _fields(layout: data.StructLayout) -> tuple[tuple[str, int, int], ...]:
    """``(name, offset, width)`` of every field (cached: a compile encodes millions)."""
    got = _FIELDS.get(id(layout))
    if got is None:
        got = _FIELDS[id(layout)] = tuple((name, fld.offset, fld.width)
                                          for name, fld in layout)
    return got


def _names(layout: data.StructLayout) -> frozenset[str]:
    got = _NAMES.get(id(layout))
    if got is None:
        got = _NAMES[id(layout)] = frozenset(name for name, _, _ in _fields(layout))
    return got


_NAMES: dict[int, frozenset[str]] = {}


def payload_fields(op: Opcode) -> tuple[str, ...]:
    """The names of `op`'s payload fields, in layout order."""
    return tuple(name for name, _, _ in _fields(PAYLOAD[op]))


@cache
def field_bits(op: Opcode, name: str) -> int:
    """The width in bits of `op`'s payload field `name`."""
    return next(width for field, _, width in _fields(PAYLOAD[op]) if field == name)


def _pack(layout: data.StructLayout, values: dict, instr: Instr) -> int:
    word = 0
    fields = _fields(layout)
    for name, offset, width in fields:
        v = int(values.get(name, 0))
        if not 0 <= v < (1 << width):
            raise EncodingError(f"{_what(instr)}: field {name}={v} does not fit {width} "
                                f"unsigned bits")
        word |= v << offset
    extra = values.keys() - _names(layout)
    if extra:
        raise EncodingError(f"{_what(instr)}: unknown field(s) {sorted(extra)}")
    return word


def _what(instr: Instr) -> str:
    """An instruction as encoding errors name it (built only for the message)."""
    return f"{instr.op.name} @ cycle {instr.cycle}"


def _unpack(layout: data.StructLayout, word: int) -> dict:
    return {name: (word >> offset) & ((1 << width) - 1)
            for name, offset, width in _fields(layout)}


def encode(instr: Instr) -> int:
    payload = _pack(PAYLOAD[instr.op], instr.fields, instr)
    if not 0 <= instr.cycle < (1 << CYCLE_BITS):
        raise EncodingError(f"{_what(instr)}: cycle does not fit {CYCLE_BITS} bits")
    return _pack(Word, {"opcode": int(instr.op), "cycle": instr.cycle,
                        "payload": payload}, instr)


def encode_all(program: list[Instr]) -> list[int]:
    """``[encode(i) for i in program]``, each distinct instruction but for its cycle
    encoded once (a network's program repeats most)."""
    cycle_at = next(offset for name, offset, _ in _fields(Word) if name == "cycle")
    known: dict[tuple, int] = {}
    out = []
    for ins in program:
        key = (ins.op, tuple(ins.fields), tuple(ins.fields.values()))
        word = known.get(key)
        if word is None:
            word = known[key] = encode(Instr(ins.op, 0, ins.fields))
        if not 0 <= ins.cycle < (1 << CYCLE_BITS):
            encode(ins)         # raises, naming the instruction
        out.append(word | ins.cycle << cycle_at)
    return out


def decode(word: int) -> Instr:
    hdr = _unpack(Word, word)
    try:
        op = Opcode(hdr["opcode"])
    except ValueError:
        return Instr(Opcode.ILLEGAL, hdr["cycle"], {"raw_opcode": hdr["opcode"]})
    return Instr(op, hdr["cycle"], _unpack(PAYLOAD[op], hdr["payload"]))


def to_bytes(words: list[int]) -> bytes:
    """A program image: little-endian 16-byte words."""
    return b"".join(w.to_bytes(WORD_BITS // 8, "little") for w in words)


def from_bytes(image: bytes) -> list[int]:
    n = WORD_BITS // 8
    if len(image) % n:
        raise EncodingError(f"program image length {len(image)} is not a multiple of {n}")
    return [int.from_bytes(image[i:i + n], "little") for i in range(0, len(image), n)]
