"""Every instruction, defined once.

One entry per opcode states everything about it that is neither RTL nor lowering:

* its encoding (``payload``, from :data:`systolica.arch.isa.PAYLOAD`), the unit that
  executes it, its program-text names and its disassembly;
* the **memory ranges** it touches with their legal bounds (``ranges``): the
  sequencer's ``ADDR_RANGE`` check, the golden model's and the compiler's address
  checks and the scheduler's hazards all read them;
* the **schedule view** (``occupancy``, ``done``, ``bank_window``, ``mux_use``): the
  closed forms the compiler schedules with (through :mod:`systolica.arch.timing`);
* the **cycle-level effects** (``effects``): which address is read or written in
  which cycle, when the unit accepts the next instruction, which multiplexers the
  data passes and when. The golden model executes these, cycle by cycle, and never
  the closed forms, so a wrong closed form shows up as a broken schedule there;
  ``testbenches/arch/test_instructions.py`` checks the two views agree;
* its **semantics** (``execute``) on the golden model's state;
* the **performance counters** it moves and in which cycles (``counts``): what the
  chip's counter registers read at any cycle of a run (the golden model's
  :func:`systolica.golden.run` ``sample_at``).

Field expressions in ``ranges`` use only ``+ - * == != < <= & |`` and the ``select``
argument, so the same code yields Python integers for the compiler and the golden
model and Amaranth values for the sequencer's range check.

Cycle numbers in effects are relative to the issue cycle ``t``. A buffer written in
cycle ``c`` shows the new data to reads addressed in cycle ``c + 1`` or later (the
memories are not transparent); the matmul unit's accumulate read also sees its own
writes of the ``latency["acc_read"]`` cycles from its own on (forwarding: the writes
still in flight when its data arrives). The RTL (``rtl/``) is the pipeline these
numbers describe.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from systolica.arch import fabric, isa
from systolica.arch import geometry as geo
from systolica.arch.config import ChipConfig
from systolica.arch.isa import CopyKind, DmaKind, Opcode

READ, WRITE, ACCUMULATE = "read", "write", "accumulate"
_max = np.maximum.reduce       # ndarray.max without its Python wrapper


def py_select(cond, if_true, if_false):
    """``select`` for Python values (the RTL passes ``amaranth.hdl.Mux``)."""
    return if_true if cond else if_false


def at_most(x, bound, bits: int):
    """``x <= bound`` for ``x >= 0`` and ``0 <= bound < 2**bits``, as a comparison
    only `bits` wide: the bits of ``x`` from `bits` up must be 0 (an OR beside it).
    The range checks use it after a multiply, whose product is wider than its bound.
    The comparison is the sign of ``bound - x``: a subtraction, which the ECP5's
    synthesis maps to a carry chain, where it made ``<=`` a ripple of LUTs."""
    return ((x >> bits) == 0) & ((bound - (x & ((1 << bits) - 1))) >= 0)


def _label(select, cond, if_true: str, if_false: str) -> str:
    """A name chosen by a field: both names where the field is a hardware value."""
    return py_select(cond, if_true, if_false) if select is py_select else \
        f"{if_true}|{if_false}"


class Fields:
    """Attribute access to an instruction's fields held in a dict, so the entries'
    expressions read the same on dicts and on Amaranth views."""

    __slots__ = ("_f",)

    def __init__(self, fields: dict):
        self._f = fields

    def __getattr__(self, name):
        return self._f.get(name, 0)      # an omitted field encodes as 0


@dataclass(frozen=True)
class Range:
    """Rows ``[lo, hi)`` of ``memory`` ("cbuf", "acc", "dram"); legal iff ``nonempty``
    and ``hi <= bound``. ``touched`` is False for a range that is checked but not
    accessed (a bias row the instruction does not add). ``needs`` says in words what
    ``nonempty`` requires of the fields (fault messages, disasm)."""
    memory: Any
    lo: Any
    hi: Any
    bound: Any
    mode: str
    nonempty: Any = True
    touched: Any = True
    window: tuple[int, int] | None = None   # cycles after issue it is accessed in, when
                                            # shorter than the instruction's ``done``
    needs: str = "rows must be at least 1"


@dataclass
class Touch:
    """Addresses of ``resource`` and the cycle (after issue) each is read or written.
    ``forward``: a read that also sees its unit's own writes of the read latency's
    cycles from its own on (one: the same cycle), or a write that such a read sees."""
    resource: str
    addrs: np.ndarray
    cycles: np.ndarray
    forward: bool = False


@dataclass
class Effects:
    """The cycle-level behaviour of one instruction (cycles after issue)."""
    accept: int                                   # its unit takes the next one from here
    reads: list[Touch] = field(default_factory=list)
    writes: list[Touch] = field(default_factory=list)
    muxes: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> [first, last]
    #: ``[first, end)``: the cycles its rows pass its unit's collector (a MATMUL's
    #: accumulate stage), which takes them in issue order: a later instruction of the
    #: unit may reach it from ``end`` on
    collect: tuple[int, int] | None = None

    @property
    def last(self) -> int:
        """The last cycle in which anything happens (0: only the issue itself)."""
        return max([0] + [int(_max(t.cycles)) for t in self.reads + self.writes
                          if len(t.cycles)])


#: The performance counters instructions move (:class:`Count`), named as the firmware
#: driver names the registers (:func:`systolica.firmware.driver.counters_from`).
COUNTERS = ("macs", "dram_rd_bytes", "dram_wr_bytes", "ubuf_wr_bytes", "ubuf_rd_bytes")


@dataclass(frozen=True)
class Count:
    """A performance counter adding ``amount`` in each of ``cycles`` (after issue).
    The register shows an addition made in cycle ``c`` from cycle ``c + 1`` on: read
    while the cycle counter reads ``c``, a counter holds what was added in the cycles
    before ``c``."""
    counter: str
    amount: int
    cycles: np.ndarray


#: The banked buffers (docs/contract.md, "CBUF banks", "ACC banks").
BANKED = ("cbuf", "acc")


def bank_shift(cfg: ChipConfig, memory: str) -> int:
    """Row ``a`` of `memory` is in bank ``a >> bank_shift``."""
    return cfg.cbuf_bank_shift if memory == "cbuf" else cfg.acc_bank_shift


@dataclass(frozen=True)
class BankUse:
    """One bank port (``mode`` READ or WRITE of bank ``bank`` of ``memory``, "cbuf"
    or "acc") used by an instruction in every cycle ``first .. last`` after issue."""
    memory: str
    mode: str
    bank: int
    first: int
    last: int


def bank_runs(memory: str, mode: str, banks: np.ndarray, cycles: np.ndarray
              ) -> list[BankUse]:
    """The runs of consecutive cycles in which each bank of ``banks[i]`` (used in
    ``cycles[i]``) is used, by bank and then by cycle."""
    if not len(banks):
        return []
    # One sort by (bank, cycle) for all banks at once; a run ends where the bank
    # changes or a cycle is skipped (a repeated cycle continues it).
    order = np.lexsort((cycles, banks))
    b, c = banks[order], cycles[order]
    cut = np.flatnonzero((b[1:] != b[:-1]) | (c[1:] - c[:-1] > 1))
    firsts = np.concatenate(([0], cut + 1))
    lasts = np.concatenate((cut, [len(c) - 1]))
    return [BankUse(memory, mode, bank, first, last) for bank, first, last in
            zip(b[firsts].tolist(), c[firsts].tolist(), c[lasts].tolist())]


def _touch_ports(cfg: ChipConfig, fx: Effects, memories: tuple[str, ...]) -> list[BankUse]:
    """The bank ports the touches of `memories` use: each touch of row ``a`` in cycle
    ``c`` uses bank ``a >> bank_shift``'s read or write port in cycle ``c``."""
    out = []
    for mode, touches in ((READ, fx.reads), (WRITE, fx.writes)):
        for tc in touches:
            if tc.resource in memories:
                out += bank_runs(tc.resource, mode,
                                 tc.addrs >> bank_shift(cfg, tc.resource), tc.cycles)
    return out


def wrap32(x: np.ndarray) -> np.ndarray:
    """int32 arithmetic: integer casts wrap modulo 2**32."""
    return x.astype(np.int64).astype(np.int32)


def _rows(lo: int, count: int) -> np.ndarray:
    return lo + np.arange(count, dtype=np.int64)


def tally(chip, memory: str, mode: str, rows) -> None:
    """Count an access of the golden model's state ``chip`` as :meth:`Instruction.execute`
    makes it: rows ``rows`` (an array of row numbers, or a count for ``wbuf``, whose
    access is a whole weight bank) of ``memory`` ("cbuf", "acc", "wbuf") read or
    written (``mode``). The golden model keeps these counts (the UBUF's rows apart
    from the CBUF's) as a witness for the counts records derive from a program's
    fields (docs/records.md); a state without the counters (a test's) counts none."""
    count = getattr(chip, "tally", None)
    if count is not None:
        count(memory, mode, rows)


class Instruction(ABC):
    """One opcode. Subclasses fill in the class attributes and the methods."""

    opcode: Opcode
    unit: str                          # the unit that executes it (sequencer port name)
    text: dict[str, dict] = {}         # program-text operation -> fixed fields
    uses_fabric = False                # its data passes configured multiplexers
    handshake = True                   # its unit says when it takes the next one
    bank_mode: str | None = None       # READ/WRITE of the weight bank named by ``bank``
    #: ``(field, memory)``: an address field that only moves the instruction within
    #: `memory` (an unbanked one). Its `memory` touches and ranges are those of the
    #: same fields with `field` at 0, every address shifted by the field's value;
    #: nothing else it decides (legality, cycles, other touches, bank ports,
    #: multiplexers) depends on the field. None: no such field.
    moves: tuple[str, str] | None = None

    @property
    def name(self) -> str:
        return self.opcode.name

    @property
    def payload(self):
        return isa.PAYLOAD[self.opcode]

    # -- disassembly ------------------------------------------------------------------
    def format(self, f: dict) -> str:
        return ", ".join(f"{k}={v}" for k, v in f.items())

    # -- ranges -----------------------------------------------------------------------
    def ranges(self, cfg: ChipConfig, f, select: Callable = py_select) -> list[Range]:
        return []

    #: the field combinations the opcode defines, in words (for fault messages)
    legal_rule = ""

    def legal(self, cfg: ChipConfig, f, select: Callable = py_select):
        """Whether the opcode defines this combination of fields; the sequencer
        faults ``ILLEGAL_OPCODE`` on one it does not (rule: :attr:`legal_rule`)."""
        return True

    def in_range(self, cfg: ChipConfig, f, select: Callable = py_select):
        """The ADDR_RANGE rule: every range non-empty and inside its memory."""
        ok = True
        for r in self.ranges(cfg, f, select):
            ok = ok & r.nonempty & (r.hi <= r.bound)
        return ok

    # -- schedule view (closed forms) -------------------------------------------------
    @abstractmethod
    def occupancy(self, cfg: ChipConfig, f: dict) -> int:
        """Cycles after issue from which its unit takes the next instruction."""

    @abstractmethod
    def done(self, cfg: ChipConfig, f: dict) -> int:
        """Cycles after issue from which all its effects are visible."""

    def collect_first(self, cfg: ChipConfig, f: dict) -> int | None:
        """The cycle after issue its first row would reach its unit's collector
        (:attr:`Effects.collect`), for the order check made before its range is (None:
        it has no collector)."""
        return None

    def bank_window(self, cfg: ChipConfig, f: dict) -> tuple[int, int] | None:
        return None

    def port_windows(self, cfg: ChipConfig, f: dict) -> list[tuple[str, str, int, int]]:
        """``(memory, mode, lo, hi)``: it uses a port (READ or WRITE) of the banks its
        `memory` ranges of that mode meet within cycles ``[lo, hi)`` after issue."""
        return []

    def mux_use(self, cfg: ChipConfig, f: dict, kind: str, idx: list[int]
                ) -> tuple[int, int] | None:
        return None

    # -- golden view ------------------------------------------------------------------
    @abstractmethod
    def effects(self, cfg: ChipConfig, f: dict) -> Effects:
        """Its cycle-level behaviour (see :class:`Effects`)."""

    def bank_ports(self, cfg: ChipConfig, f: dict, fx: Effects) -> list[BankUse]:
        """Which bank ports of the CBUF and the ACC it uses in which cycles
        (docs/contract.md, "CBUF banks"): every touch of row ``a`` in cycle ``c`` uses
        bank ``a >> bank_shift``'s read or write port in cycle ``c``."""
        return _touch_ports(cfg, fx, BANKED)

    def counts(self, cfg: ChipConfig, f: dict, fx: Effects) -> list[Count]:
        """The performance counters it moves, and in which cycles after issue (its
        effects ``fx`` given): the same totals as :meth:`execute` adds to the golden
        model's counters, spread over the cycles the chip counts them in."""
        return []

    @abstractmethod
    def execute(self, chip, f: dict) -> None:
        """The instruction's meaning on the golden model's state ``chip``: its
        memories (``dram``, ``cbuf``, ``acc``, ``banks``), counters (``macs``,
        ``rd_bytes``, ``wr_bytes``, ``ubuf_wr_bytes``, ``ubuf_rd_bytes``) and the fabric as this
        instruction sees it
        (``group``, ``lanes``, ``feed``, ``regroup``)."""


# -- DMA ------------------------------------------------------------------------------
class Dma(Instruction):
    """Rows between external memory and the CBUF or ACC. Row ``i`` lives at
    ``dram_addr + i*dram_stride`` (an ACC row is ``acc_row_words`` consecutive words);
    one word moves per cycle."""

    opcode = Opcode.DMA
    unit = "dma"
    moves = ("dram_addr", "dram")       # its DRAM words: dram_addr + i*dram_stride + k
    text = {"load_cbuf": {"kind": DmaKind.LOAD_CBUF},
            "store_cbuf": {"kind": DmaKind.STORE_CBUF},
            "load_acc": {"kind": DmaKind.LOAD_ACC},
            "store_acc": {"kind": DmaKind.STORE_ACC}}

    @staticmethod
    def to_acc(f):
        return (f.kind == DmaKind.LOAD_ACC) | (f.kind == DmaKind.STORE_ACC)

    @staticmethod
    def is_load(f):
        return (f.kind == DmaKind.LOAD_CBUF) | (f.kind == DmaKind.LOAD_ACC)

    def format(self, f):
        rest = ", ".join(f"{k}={v}" for k, v in f.items() if k != "kind")
        return f"{DmaKind(f['kind']).name}, {rest}"

    def ranges(self, cfg, f, select=py_select):
        to_acc, load = self.to_acc(f), self.is_load(f)
        words = select(to_acc, cfg.acc_row_words, 1)
        dram_hi = f.dram_addr + (f.rows - 1) * f.dram_stride + words
        buf = _label(select, to_acc, "acc", "cbuf")
        nonempty = f.rows != 0
        return [Range("dram", f.dram_addr, dram_hi, cfg.dram_words,
                      _label(select, load, READ, WRITE), nonempty),
                Range(buf, f.buf_addr, f.buf_addr + f.rows,
                      select(to_acc, cfg.acc_depth, cfg.cbuf_depth),
                      _label(select, load, WRITE, READ), nonempty)]

    def in_range(self, cfg, f, select=py_select):
        """The ADDR_RANGE rule of :meth:`ranges`, with the DRAM range's
        ``dram_addr + (rows - 1) * dram_stride + words <= dram_words`` in a form that is
        equal for every field value and short in hardware (the sequencer checks the
        program memory's word in the cycle it is read): with ``rows >= 1`` it holds iff
        ``room = dram_words - words - dram_addr >= 0`` and ``rows * dram_stride <= room
        + dram_stride``. So the multiply takes the fields as they are (no ``rows - 1``
        in front of it), ``room + dram_stride`` is worked out beside it, and only one
        comparison follows it, as narrow as ``room + dram_stride`` (below ``2**n``): the
        product's bits from ``n`` up must be 0, its low ``n`` bits at most the sum.
        ``room`` is below ``dram_words``, so its low bits are all of it."""
        to_acc = self.to_acc(f)
        dram, buf = self.ranges(cfg, f, select)
        assert dram.memory == "dram"
        room_bits = (cfg.dram_words - 1).bit_length()
        n = max(room_bits, isa.PAYLOAD[Opcode.DMA].members["dram_stride"]) + 1
        last = select(to_acc, cfg.dram_words - cfg.acc_row_words, cfg.dram_words - 1)
        room = last - f.dram_addr
        dram_ok = (f.dram_addr <= last) & at_most(
            f.rows * f.dram_stride, (room & ((1 << room_bits) - 1)) + f.dram_stride, n)
        return dram.nonempty & dram_ok & buf.nonempty & (buf.hi <= buf.bound)

    def words(self, cfg, f):
        return f["rows"] * (cfg.acc_row_words if self.to_acc(Fields(f)) else 1)

    @classmethod
    def store_wait(cls, cfg, f):
        """The cycles a store's words leave after their row's buffer read: the
        buffer's read latency (``dram_read`` being 1, the store's last word leaves as
        a load's last read would)."""
        F = Fields(f)
        if cls.is_load(F):
            return cfg.latency["dram_read"]
        return cfg.latency["acc_read" if cls.to_acc(F) else "cbuf_read"]

    def occupancy(self, cfg, f):
        return self.words(cfg, f) + self.store_wait(cfg, f)

    def done(self, cfg, f):
        return self.words(cfg, f) + self.store_wait(cfg, f) + 1

    def port_windows(self, cfg, f):
        # A row every w words: loads write it with its last word, stores read it
        # with its first.
        F = Fields(f)
        buf, w = ("acc", cfg.acc_row_words) if self.to_acc(F) else ("cbuf", 1)
        if self.is_load(F):
            return [(buf, WRITE, w + cfg.latency["dram_read"],
                     f["rows"] * w + cfg.latency["dram_read"] + 1)]
        return [(buf, READ, 1, (f["rows"] - 1) * w + 2)]

    def effects(self, cfg, f):
        # The address generator steps one word per cycle from t+1. Loads: the data of
        # word k returns a cycle later and a buffer row is written with its last word.
        # Stores: a row's buffer read is addressed with its first word and its words
        # leave one cycle behind the address generator.
        F = Fields(f)
        w = cfg.acc_row_words if self.to_acc(F) else 1
        rows, n = f["rows"], f["rows"] * w
        dram = (f["dram_addr"] + np.arange(rows, dtype=np.int64)[:, None] * f["dram_stride"]
                + np.arange(w)[None, :]).reshape(-1)
        step = 1 + np.arange(n, dtype=np.int64)                  # address cycles
        buf = "acc" if self.to_acc(F) else "cbuf"
        rows_at = _rows(f["buf_addr"], rows)
        if self.is_load(F):
            return Effects(accept=1 + n,
                           reads=[Touch("dram", dram, step)],
                           writes=[Touch(buf, rows_at, step[w - 1::w] + 1)])
        wait = self.store_wait(cfg, f)
        return Effects(accept=wait + n,
                       reads=[Touch(buf, rows_at, step[::w])],
                       writes=[Touch("dram", dram, step + wait)])

    def counts(self, cfg, f, fx):
        # a word read or written in each of its DRAM port cycles
        counter = "dram_rd_bytes" if self.is_load(Fields(f)) else "dram_wr_bytes"
        return [Count(counter, cfg.dram_word_bytes, tc.cycles)
                for tc in fx.reads + fx.writes if tc.resource == "dram"]

    def execute(self, chip, f):
        cfg = chip.cfg
        to_acc = f["kind"] in (DmaKind.LOAD_ACC, DmaKind.STORE_ACC)
        w = cfg.acc_row_words if to_acc else 1
        rows = f["rows"]
        words = (f["dram_addr"] + np.arange(rows)[:, None] * f["dram_stride"]
                 + np.arange(w)[None, :])                                  # [rows, w]
        buf = slice(f["buf_addr"], f["buf_addr"] + rows)
        moved = rows * w * cfg.rows
        tally(chip, "acc" if to_acc else "cbuf",
              WRITE if f["kind"] in (DmaKind.LOAD_CBUF, DmaKind.LOAD_ACC) else READ,
              _rows(f["buf_addr"], rows))
        if f["kind"] == DmaKind.LOAD_CBUF:
            chip.cbuf[buf] = chip.dram[words[:, 0]].view(np.int8)
        elif f["kind"] == DmaKind.LOAD_ACC:
            raw = np.ascontiguousarray(
                chip.dram[words].reshape(rows, w * cfg.rows)[:, :4 * cfg.cols])
            chip.acc[buf] = raw.view("<i4").reshape(rows, cfg.cols)
        elif f["kind"] == DmaKind.STORE_CBUF:
            chip.dram[words[:, 0]] = chip.cbuf[buf].view(np.uint8)
        else:
            raw = np.zeros((rows, w * cfg.rows), np.uint8)       # a padded word's rest: 0
            raw[:, :4 * cfg.cols] = np.ascontiguousarray(
                chip.acc[buf].astype("<i4")).view(np.uint8).reshape(rows, 4 * cfg.cols)
            chip.dram[words] = raw.reshape(rows, w, cfg.rows)
        if f["kind"] in (DmaKind.LOAD_CBUF, DmaKind.LOAD_ACC):
            chip.rd_bytes += moved
        else:
            chip.wr_bytes += moved


# -- WLOAD ----------------------------------------------------------------------------
class Wload(Instruction):
    """Shift a weight block (``cfg.weight_rows`` CBUF rows from ``w_addr``: ``R``, or
    ``C`` on a wide grid) into weight bank ``bank``
    through the north edge; the bottom row first, one shift per cycle, one extra
    shift per tile boundary (the conveyor). The same rows enter the west edge too:
    a tile whose ``w_in`` takes the ``west`` lane ends with CBUF row ``c`` in array
    column ``c`` (the transposed load, same cycles)."""

    opcode = Opcode.WLOAD
    unit = "wload"
    text = {"load": {}}
    uses_fabric = True
    bank_mode = WRITE

    def ranges(self, cfg, f, select=py_select):
        return [Range("cbuf", f.w_addr, f.w_addr + cfg.weight_rows, cfg.cbuf_depth, READ)]

    def occupancy(self, cfg, f):
        return geo.weight_shifts(cfg)

    def done(self, cfg, f):
        return geo.weight_shifts(cfg) + cfg.latency["cbuf_read"] + 1

    def bank_window(self, cfg, f):
        first = cfg.latency["cbuf_read"] + 1
        return first, first + geo.weight_shifts(cfg)

    def port_windows(self, cfg, f):
        return [("cbuf", READ, 1, 1 + geo.weight_shifts(cfg))]

    def mux_use(self, cfg, f, kind, idx):
        if kind in ("north_feed", "w_in", "west_wfeed"):
            return self.bank_window(cfg, f)
        return None

    @staticmethod
    def read_order(cfg: ChipConfig) -> list[int]:
        """The CBUF row (relative to ``w_addr``) each shift reads: rows from the
        bottom up, a conveyor slot (re-reading the row above it) after each tile."""
        n, out = cfg.tile_size, []
        for r in reversed(range(cfg.weight_rows)):
            out.append(r)
            if r % n == 0 and r:
                out.append(r - 1)
        return out

    def effects(self, cfg, f):
        # Shift s reads its row in cycle 1+s; the data arrives and shifts in the next
        # cycle, into every cell of the bank at once. A conveyor slot reads the row
        # above the tile boundary early and that copy is dropped, so each row's read
        # is its last one in the order.
        order = self.read_order(cfg)
        shifts = len(order)
        read_at = 1 + np.arange(shifts, dtype=np.int64)
        kept = {r: int(c) for r, c in zip(order, read_at)}
        rows = np.array(sorted(kept), dtype=np.int64)
        shift_at = read_at + cfg.latency["cbuf_read"]
        span = (int(shift_at[0]), int(shift_at[-1]))
        muxes = {f"north_feed[{j}]": span for j in range(cfg.tile_cols)}
        muxes.update({f"west_wfeed[{i}]": span for i in range(cfg.tile_rows)})
        muxes.update({f"w_in[{i}][{j}]": span for i in range(cfg.tile_rows)
                      for j in range(cfg.tile_cols)})
        return Effects(
            accept=shifts,
            reads=[Touch("cbuf", f["w_addr"] + rows,
                         np.array([kept[r] for r in rows], dtype=np.int64))],
            writes=[Touch(f"wbank{f['bank']}", np.zeros(shifts, dtype=np.int64), shift_at)],
            muxes=muxes)

    def bank_ports(self, cfg, f, fx):
        # Every shift reads a row, the conveyor slots' dropped copies too: the port is
        # busy in each of them.
        order = f["w_addr"] + np.array(self.read_order(cfg), dtype=np.int64)
        return bank_runs("cbuf", READ, order >> cfg.cbuf_bank_shift,
                         1 + np.arange(len(order), dtype=np.int64))

    def execute(self, chip, f):
        # A tile holds the north chain's data if it and every tile above it take the
        # north lane, the west chain's if it and every tile west of it take the west
        # lane, else zeros (a lane carries data on only between tiles that take it).
        cfg, n = chip.cfg, chip.n
        grow = lambda x: np.repeat(np.repeat(x, n, axis=0), n, axis=1)  # noqa: E731
        rows = chip.cbuf[f["w_addr"]:f["w_addr"] + cfg.weight_rows]   # [k, partition]
        tally(chip, "cbuf", READ, _rows(f["w_addr"], cfg.weight_rows))
        tally(chip, "wbuf", WRITE, 1)
        idx, live = chip.feed("north_feed", cfg.tile_cols)           # per column c
        # the north chain keeps the last R rows shifted in: rows 0 .. R-1
        north = rows[:cfg.rows, idx] * live[None, :]                  # [r, c] = row r
        idx, live = chip.feed("west_wfeed", cfg.tile_rows)           # per array row r
        # the west chain keeps the last C rows shifted in: rows 0 .. C-1
        west = (rows[:cfg.cols, idx] * live[None, :]).T               # [r, c] = row c
        from_north = np.logical_and.accumulate(chip.lanes("w_in", "lane"), axis=0)
        from_west = np.logical_and.accumulate(chip.lanes("w_in", "west"), axis=1)
        w = north * grow(from_north) + west * grow(from_west)
        chip.banks[f["bank"]] = w.astype(np.int8)


# -- MATMUL ---------------------------------------------------------------------------
class Matmul(Instruction):
    """Stream ``rows`` activation rows from the CBUF through the array (weights from
    ``bank``) and write, accumulate or max the column sums into ACC rows from
    ``acc_addr``.

    With ``conv = 1`` the rows are the output pixels of a tile, ``oh, ow`` in order
    (``ow`` wrapping at the geometry's ``out_w``), and array row ``p`` reads input
    pixel ``(oh*sh + dh + th[p] - top, ow*sw + dw + tw[p] - left)`` of the tile of
    ``in_h`` rows of ``in_w`` pixels held from ``act_addr``, or the geometry's ``pad``
    byte where that pixel lies outside the tile (docs/cnn.md). The geometry and the
    tap table are latched when it issues.

    With ``early = u`` the sums leave the array at tile row ``tile_rows - 1 - u``
    (partial-sum exits, docs/contract.md): everything from the accumulate stage on
    comes :func:`lead` cycles sooner, and the rows still reach that stage in issue
    order (:attr:`Effects.collect`)."""

    opcode = Opcode.MATMUL
    unit = "mm"
    text = {"matmul": {}}
    uses_fabric = True
    bank_mode = READ
    legal_rule = "early < tile_rows: the sums leave the array at one of its tile rows"

    def legal(self, cfg, f, select=py_select):
        return _field(f, "early") < cfg.tile_rows

    @staticmethod
    def lead(cfg: ChipConfig, f) -> int:
        """Cycles the accumulate stage and what follows it come sooner: ``n + 1``
        registers (a cell per array row, a conveyor per tile row) per tile row the
        sums skip."""
        return _field(f, "early") * (cfg.tile_size + 1)

    def ranges(self, cfg, f, select=py_select):
        nonempty = (f.rows != 0) & ((f.conv == 0) | ((f.in_w != 0) & (f.in_h != 0)))
        span = select(f.conv, f.in_h * f.in_w, f.rows)
        needs = "rows must be at least 1, and for a conv (conv = 1) in_w and in_h too"
        return [Range("cbuf", f.act_addr, f.act_addr + span, cfg.cbuf_depth, READ,
                      nonempty, needs=needs),
                Range("acc", f.acc_addr, f.acc_addr + f.rows, cfg.acc_depth, ACCUMULATE,
                      nonempty, needs=needs),
                # the latched state: read at issue only
                Range("geom", 0, 1, 1, READ, touched=f.conv, window=(0, 1)),
                Range("taps", f.taps, f.taps + 1, isa.TAP_TABLES, READ, touched=f.conv,
                      window=(0, 1))]

    def in_range(self, cfg, f, select=py_select):
        """The ADDR_RANGE rule of :meth:`ranges`, with the CBUF range's ``act_addr +
        span <= cbuf_depth`` (``span`` a conv's ``in_h * in_w`` pixels, else ``rows``)
        as ``span <= cbuf_depth - act_addr``: the room is worked out beside the
        multiply, one comparison as narrow as the room follows it, and ``conv`` chooses
        between the two spans' comparisons rather than between the spans. Equal for
        every field value."""
        cbuf, *rest = self.ranges(cfg, f, select)
        assert cbuf.memory == "cbuf"
        bits = cfg.cbuf_depth.bit_length()
        room = (cfg.cbuf_depth - f.act_addr) & ((1 << bits) - 1)   # all of it, if >= 0
        ok = cbuf.nonempty & (f.act_addr <= cfg.cbuf_depth) & select(
            f.conv, at_most(f.in_h * f.in_w, room, bits), f.rows <= room)
        for r in rest:
            ok = ok & r.nonempty & (r.hi <= r.bound)
        return ok

    @staticmethod
    def window_pixels(cfg: ChipConfig, f: dict, geom: dict, table: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
        """Per row ``i`` and array row ``p`` of a conv MATMUL: the CBUF row read
        (``[rows, R]``) and whether it lies inside the tile (else ``pad`` is read)."""
        i = np.arange(f["rows"], dtype=np.int64)
        oh, ow = i // geom["out_w"], i % geom["out_w"]
        ih = (oh * geom["sh"] - geom["top"] + f["dh"])[:, None] + table[None, :, 0]
        iw = (ow * geom["sw"] - geom["left"] + f["dw"])[:, None] + table[None, :, 1]
        inside = (ih >= 0) & (ih < f["in_h"]) & (iw >= 0) & (iw < f["in_w"])
        return f["act_addr"] + np.where(inside, ih * f["in_w"] + iw, 0), inside

    def occupancy(self, cfg, f):
        return f["rows"]

    def done(self, cfg, f):
        return f["rows"] + geo.matmul_pipeline(cfg) - self.lead(cfg, f) + cfg.latency["acc_read"]

    def collect_first(self, cfg, f):
        return geo.matmul_pipeline(cfg) - self.lead(cfg, f)

    def bank_window(self, cfg, f):
        # an early exit's rows are done with the bank past its exit tile row: the
        # rows below compute with it still, and their sums are not collected
        first = cfg.latency["cbuf_read"] + geo.feed_stages(cfg) + 1
        return first, first + f["rows"] + geo.array_span(cfg) - self.lead(cfg, f)

    def port_windows(self, cfg, f):
        # the accumulate stage reads row i P cycles after issue and writes it once
        # the read data is back
        p, m = geo.matmul_pipeline(cfg) - self.lead(cfg, f), f["rows"]
        w = p + cfg.latency["acc_read"]
        return ([("cbuf", READ, 1, 1 + m)]
                + ([("acc", READ, p, p + m)] if f["accumulate"] else [])
                + [("acc", WRITE, w, w + m)])

    def mux_use(self, cfg, f, kind, idx):
        n, m = cfg.tile_size, f["rows"]
        skew = lambda i: geo.skew(cfg, i)  # noqa: E731
        feed = cfg.latency["cbuf_read"] + 1       # cycle the first row leaves the CBUF
        if kind == "west_feed":
            return feed, feed + m
        feed += geo.feed_stages(cfg)              # ... and reaches the array's edge
        if kind == "act_in":
            i, j = idx
            return (feed + skew(i * n) + skew(j * n),
                    feed + m + skew(i * n + n - 1) + skew(j * n))
        if kind == "psum_in":
            i, j = idx
            if i == 0:
                return None                       # the north edge carries zeros
            return (feed + skew(i * n) + skew(j * n),
                    feed + m + skew(i * n) + skew(j * n + n - 1))
        if kind == "acc_src":
            p = geo.matmul_pipeline(cfg) - self.lead(cfg, f)
            return p, p + m
        return None

    def effects(self, cfg, f):
        # Row i is read from the CBUF in cycle 1+i and leaves it cbuf_read later (and
        # the feed register, if the chip has one, a cycle after that). Cell
        # (r, c) sees it skew(r) + skew(c) after that (one register per cell and per
        # tile boundary, along the row and then down the column). De-skewed, every
        # column's sum for row i reaches the accumulate stage together: it reads the
        # ACC row (A), then adds and writes it a cycle later (W), forwarding its own
        # write of the cycle before.
        n, m, t = cfg.tile_size, f["rows"], np.arange(f["rows"], dtype=np.int64)
        sk = lambda i: geo.skew(cfg, i)  # noqa: E731
        read = 1 + t
        leave = read + cfg.latency["cbuf_read"]
        edge = leave + geo.feed_stages(cfg)     # past the feed register, if any
        # the far corner cell, its output register, the conveyor out of the last tile
        # row; the column de-skew (skew_max - skew(c), skew_max along the longer side)
        # brings every column to the cycle the last row's would reach in the farthest;
        # an early exit skips the tile rows below it
        acc_read = edge + geo.array_span(cfg) + 2 - self.lead(cfg, f)
        acc_write = acc_read + cfg.latency["acc_read"]
        muxes = {f"west_feed[{i}]": (int(leave[0]), int(leave[-1]))
                 for i in range(cfg.tile_rows)}
        for i in range(cfg.tile_rows):
            for j in range(cfg.tile_cols):
                muxes[f"act_in[{i}][{j}]"] = (int(edge[0]) + sk(i * n) + sk(j * n),
                                             int(edge[-1]) + sk(i * n + n - 1) + sk(j * n))
                if i:
                    muxes[f"psum_in[{i}][{j}]"] = (
                        int(edge[0]) + sk(i * n) + sk(j * n),
                        int(edge[-1]) + sk(i * n) + sk(j * n + n - 1))
        for g in range(cfg.tile_cols):
            muxes[f"acc_src[{g}]"] = (int(acc_read[0]), int(acc_read[-1]))
        # The weight bank is read from the first row's arrival at cell (0, 0) to the
        # last row's at the far corner.
        # (counted as the array's span, as the closed form does: on a tall array a few
        # cycles more than the corner needs)
        bank_last = int(edge[-1]) + geo.array_span(cfg) - self.lead(cfg, f)
        acc_rows = _rows(f["acc_addr"], m)
        if f.get("conv"):
            # which tile pixel a row reads depends on the latched geometry: the whole
            # tile counts as read from the first row's cycle to the last one's
            tile = _rows(f["act_addr"], f["in_h"] * f["in_w"])
            act = [Touch("cbuf", tile, np.full(len(tile), read[0])),
                   Touch("cbuf", tile, np.full(len(tile), read[-1]))]
        else:
            act = [Touch("cbuf", _rows(f["act_addr"], m), read)]
        return Effects(
            accept=m,
            reads=[*act,
                   Touch(f"wbank{f['bank']}", np.zeros(2, dtype=np.int64),
                         np.array([int(edge[0]), bank_last], dtype=np.int64)),
                   *([Touch("acc", acc_rows, acc_read, forward=True)]
                     if f["accumulate"] else [])],
            writes=[Touch("acc", acc_rows, acc_write, forward=True)],
            muxes=muxes, collect=(int(acc_read[0]), int(acc_read[-1]) + 1) if m else None)

    def bank_ports(self, cfg, f, fx):
        if not f.get("conv"):
            return super().bank_ports(cfg, f, fx)
        # A window walk reads another tile pixel in every partition: each read cycle
        # uses every bank its tile meets (whatever its CBUF touches say).
        shift = cfg.cbuf_bank_shift
        lo, hi = f["act_addr"] >> shift, (f["act_addr"] + f["in_h"] * f["in_w"] - 1) >> shift
        return (_touch_ports(cfg, fx, ("acc",))
                + [BankUse("cbuf", READ, b, 1, f["rows"]) for b in range(lo, hi + 1)])

    def counts(self, cfg, f, fx):
        # a row counts as fed to the array the cycle after its CBUF read (1 + i), a
        # conv's as a dense one's: every cell of the array, used or not
        return [Count("macs", cfg.macs, 2 + np.arange(f["rows"], dtype=np.int64))]

    def execute(self, chip, f):
        cfg, n = chip.cfg, chip.n
        rows = f["rows"]
        idx, live = chip.feed("west_feed", cfg.tile_rows)            # per array row r
        if f.get("conv"):
            addr, inside = self.window_pixels(cfg, f, chip.geom, chip.tap_tables[f["taps"]])
            part = np.arange(cfg.rows)
            pad = np.int8(np.uint8(chip.geom["pad"]).view(np.int8))
            data = np.where(inside, chip.cbuf[addr, part[None, :]], pad)   # [rows, R]
            act = data[:, idx].astype(np.int64)
            # each cycle reads one pixel in every partition: a row's worth of the CBUF
            tally(chip, "cbuf", READ, addr[:, 0])
        else:
            act = chip.cbuf[f["act_addr"]:f["act_addr"] + rows][:, idx].astype(np.int64)
            tally(chip, "cbuf", READ, _rows(f["act_addr"], rows))
        act *= live[None, :]
        seen = np.logical_and.accumulate(chip.lanes("act_in", "lane"), axis=1)  # [i, j]
        mask = np.repeat(np.repeat(seen, n, axis=0), n, axis=1)       # [r, c]
        chain = np.zeros((cfg.tile_rows, cfg.tile_cols), dtype=bool)
        chain[1:] = chip.lanes("psum_in", fabric.ZERO, first_row=1)   # reduction starts
        exit_row = cfg.tile_rows - 1 - f.get("early", 0)
        chain = chain[:exit_row + 1]
        mask[n * (exit_row + 1):] = False                             # below the exit
        for j in range(cfg.tile_cols):
            starts = np.flatnonzero(chain[:, j])
            i0 = int(starts[-1]) if len(starts) else 0
            mask[:n * i0, j * n:(j + 1) * n] = False
        weights = chip.banks[f["bank"]].astype(np.int64) * mask
        sums = act @ weights                                           # [rows, C]
        sums = chip.regroup(sums, [chip.group(f"acc_src[{g}]") for g in range(cfg.tile_cols)])
        dst = slice(f["acc_addr"], f["acc_addr"] + rows)
        if f["accumulate"]:
            tally(chip, "acc", READ, _rows(f["acc_addr"], rows))
        tally(chip, "acc", WRITE, _rows(f["acc_addr"], rows))
        if f["accumulate"] and f.get("max"):
            chip.acc[dst] = np.maximum(chip.acc[dst], wrap32(sums))
        else:
            base = chip.acc[dst].astype(np.int64) if f["accumulate"] else 0
            chip.acc[dst] = wrap32(base + sums)
        chip.macs += rows * cfg.macs


# -- VRUN -----------------------------------------------------------------------------
#: ACC rows a VRUN with ``params = 1`` reads from ``bias_addr``: bias, multiplier,
#: shift, clamp bounds.
PARAM_ROWS = 4


def _field(f, name: str, default=0):
    """A field a hand-written field dict may leave out (``isa.encode`` packs it as 0)."""
    return f.get(name, default) if isinstance(f, dict) else getattr(f, name, default)


def vrun_params(rows: np.ndarray):
    """The per-column parameters of a ``params = 1`` VRUN from its :data:`PARAM_ROWS`
    ACC rows ``[4, C]``: bias (int32), multiplier (the low 16 bits, unsigned), shift
    (the low 6 bits) and the int8 clamp bounds ``lo`` (bits 0-7) and ``hi`` (bits
    8-15); the other bits are ignored."""
    p = rows.astype(np.int64)
    to_s8 = lambda v: ((v & 0xFF) ^ 0x80) - 0x80  # noqa: E731
    return p[0], p[1] & 0xFFFF, p[2] & 63, to_s8(p[3]), to_s8(p[3] >> 8)


class Vrun(Instruction):
    """Vector unit: ACC rows from ``src`` -> (+ bias row) -> requantise -> ReLU -> CBUF
    rows from ``dst`` (int8, through the writeback routing) or ACC rows (int32).

    With ``params = 1`` it first reads :data:`PARAM_ROWS` ACC rows from ``bias_addr``
    (:func:`vrun_params`), one per cycle, and requantises column ``c`` with its own
    parameters: with ``b = x + bias[c]`` (wrapping int32) and ``rnd = 1 << (shift[c] -
    1)`` (0 for shift 0), ``y = min(max(((b*mult[c] + rnd) >> shift[c]) + zp, lo[c]),
    hi[c])`` (exact, arithmetic shift; ``hi`` wins if ``lo > hi``). The bias is always
    added; ``use_bias``, ``mult`` and ``shift`` are unused. It needs ``requant = 1``,
    ``to_acc = 0`` and ``relu = 0`` (a ReLU is a
    clamp bound), else the sequencer faults ``ILLEGAL_OPCODE``.

    With ``crop = 1`` (the fused crop) every row written to CBUF row ``a`` is written,
    in the same cycle, to UBUF row ``a mod ubuf_rows`` too (CBUF row ``ubuf_base +
    (a & (ubuf_rows - 1))``), through the crop path's own write port. It needs
    ``to_acc = 0`` and a destination outside the UBUF (else ``ILLEGAL_OPCODE``), and
    ``rows <= ubuf_rows`` (else ``ADDR_RANGE``, as on a chip without a UBUF)."""

    opcode = Opcode.VRUN
    unit = "vpu"
    text = {"vrun": {}}
    uses_fabric = True
    legal_rule = ("params = 1 needs requant = 1, to_acc = 0 and relu = 0; crop = 1 needs "
                  "to_acc = 0 and a destination outside the UBUF")

    def legal(self, cfg, f, select=py_select):
        params_ok = (_field(f, "params") == 0) | (
            (_field(f, "requant") == 1) & (f.to_acc == 0) & (_field(f, "relu") == 0))
        end = cfg.ubuf_base + cfg.ubuf_rows
        outside = (f.dst + f.rows <= cfg.ubuf_base) | (f.dst >= end)
        return params_ok & ((_field(f, "crop") == 0) | ((f.to_acc == 0) & outside))

    @staticmethod
    def crop_ranges(cfg: ChipConfig, f, select) -> list[Range]:
        """The UBUF rows a fused crop writes: the image of ``[dst, dst + rows)`` mod
        ``ubuf_rows``, in two pieces where it wraps (the second untouched if not)."""
        crop = _field(f, "crop")
        end = cfg.ubuf_base + cfg.ubuf_rows
        # the UBUF may be a register value: no Python test of its size (no UBUF: a crop
        # has no rows to land on, nonempty fails)
        off = select(cfg.ubuf_rows == 0, 0, f.dst & (cfg.ubuf_rows - 1))
        room = cfg.ubuf_rows - off
        wraps = (crop != 0) & (room < f.rows)
        lo = cfg.ubuf_base + off
        first = select(wraps, room, select(crop != 0, f.rows, 0))   # empty: no crop
        return [Range("cbuf", lo, lo + first, end, WRITE,
                      nonempty=(crop == 0) | (f.rows <= cfg.ubuf_rows), touched=crop,
                      needs="a fused crop (crop = 1) writes at most ubuf_rows rows (none "
                            "on a chip without a UBUF)"),
                Range("cbuf", cfg.ubuf_base,
                      cfg.ubuf_base + select(wraps, f.rows - room, 0), end, WRITE,
                      touched=wraps)]

    @staticmethod
    def extra(f) -> int:
        """Cycles the parameter rows after the bias row add: 0 or PARAM_ROWS - 1."""
        return (PARAM_ROWS - 1) * _field(f, "params")

    def ranges(self, cfg, f, select=py_select):
        nonempty = f.rows != 0
        params = _field(f, "params")
        return [Range("acc", f.src, f.src + f.rows, cfg.acc_depth, READ, nonempty),
                Range("acc", f.bias_addr, f.bias_addr + select(params, PARAM_ROWS, 1),
                      cfg.acc_depth, READ, touched=f.use_bias | params),
                Range(_label(select, f.to_acc, "acc", "cbuf"), f.dst, f.dst + f.rows,
                      select(f.to_acc, cfg.acc_depth, cfg.cbuf_depth), WRITE, nonempty),
                *self.crop_ranges(cfg, f, select)]

    def in_range(self, cfg, f, select=py_select):
        """The ADDR_RANGE rule of :meth:`ranges`, with the fused crop's two pieces as
        the one condition they come to, ``crop == 0 or rows <= ubuf_rows`` (the
        pieces' own non-empty rule): the first piece ends at ``ubuf_base + off +
        first``, and ``first`` is the room ``ubuf_rows - off`` where it wraps and
        ``rows <= room`` where not, so it never passes the UBUF's end; the second
        holds ``rows - room < rows`` rows from ``ubuf_base`` (``off <= ubuf_rows - 1``,
        so the room is at least 1). Equal for every field and register value, without
        the room's, the wrap's and the pieces' carry chains after the program
        memory."""
        *plain, first, second = self.ranges(cfg, f, select)
        assert first.memory == second.memory == "cbuf"       # the crop's two pieces
        ok = (_field(f, "crop") == 0) | (f.rows <= cfg.ubuf_rows)
        for r in plain:
            ok = ok & r.nonempty & (r.hi <= r.bound)
        return ok

    def occupancy(self, cfg, f):
        return f["rows"] + 1 + self.extra(f)       # the parameter cycles, then the rows

    def first_write(self, cfg, f):
        """Row 0's write: read in cycle ``2 + extra``, then the read latency and the
        stages (as :meth:`effects`)."""
        return 2 + self.extra(f) + cfg.latency["acc_read"] + cfg.latency["vpu"]

    def done(self, cfg, f):
        return self.first_write(cfg, f) + f["rows"]

    def mux_use(self, cfg, f, kind, idx):
        if kind == "wb_src" and not f["to_acc"]:
            first = self.first_write(cfg, f)
            return first, first + f["rows"]
        return None

    def port_windows(self, cfg, f):
        first = self.first_write(cfg, f)
        head = 1 + self.extra(f)
        return [("acc", READ, 1, 1 + head + f["rows"]),
                ("acc" if f["to_acc"] else "cbuf", WRITE, first, first + f["rows"])]

    def effects(self, cfg, f):
        # The bias row is read in cycle 1 (with params, the parameter rows in cycles
        # 1..PARAM_ROWS), row i in the cycle after; its data arrives a cycle later and
        # passes the vector unit's stages, then is written.
        m, head = f["rows"], 1 + self.extra(f)
        read = 1 + head + np.arange(m, dtype=np.int64)
        write = read + cfg.latency["acc_read"] + cfg.latency["vpu"]
        reads = [Touch("acc", _rows(f["src"], m), read)]
        if f["use_bias"] or _field(f, "params"):
            reads.append(Touch("acc", _rows(f["bias_addr"], head),
                               1 + np.arange(head, dtype=np.int64)))
        muxes = {} if f["to_acc"] else {
            f"wb_src[{g}]": (int(write[0]), int(write[-1])) for g in range(cfg.tile_rows)}
        writes = [Touch("acc" if f["to_acc"] else "cbuf", _rows(f["dst"], m), write)]
        if _field(f, "crop"):
            writes.append(Touch("cbuf", self.crop_rows(cfg, f["dst"], m), write))
        return Effects(accept=head + m, reads=reads, writes=writes, muxes=muxes)

    @staticmethod
    def crop_rows(cfg: ChipConfig, dst: int, rows: int) -> np.ndarray:
        """The CBUF rows a fused crop writes, for rows ``dst ..`` written."""
        return cfg.ubuf_base + (_rows(dst, rows) & (cfg.ubuf_rows - 1))

    def counts(self, cfg, f, fx):
        # a fused crop's rows, as they are written into the UBUF
        if not _field(f, "crop"):
            return []
        return [Count("ubuf_wr_bytes", cfg.rows, fx.writes[-1].cycles)]

    def execute(self, chip, f):
        cfg = chip.cfg
        rows = f["rows"]
        x = chip.acc[f["src"]:f["src"] + rows].astype(np.int64)
        tally(chip, "acc", READ, _rows(f["src"], rows))
        zp = f["zp"] - 256 if f["zp"] >= 128 else f["zp"]
        if _field(f, "params") or f["use_bias"]:
            tally(chip, "acc", READ, _rows(f["bias_addr"],
                                           PARAM_ROWS if _field(f, "params") else 1))
        if _field(f, "params"):
            bias, mult, shift, lo, hi = vrun_params(
                chip.acc[f["bias_addr"]:f["bias_addr"] + PARAM_ROWS])
            x = wrap32(x + bias).astype(np.int64)
            rnd = np.where(shift > 0, np.left_shift(1, np.maximum(shift - 1, 0)), 0)
            y = np.minimum(np.maximum(((x * mult + rnd) >> shift) + zp, lo), hi)
        else:
            if f["use_bias"]:
                x = wrap32(x + chip.acc[f["bias_addr"]].astype(np.int64)).astype(np.int64)
            if f["requant"]:
                shift = f["shift"]
                y = (x * f["mult"] + ((1 << (shift - 1)) if shift else 0)) >> shift
                y = np.clip(y + zp, -128, 127)
                if f["relu"]:
                    y = np.maximum(y, zp)
            else:
                y = np.maximum(x, 0) if f["relu"] else x
                if not f["to_acc"]:
                    y = np.clip(y, -128, 127)
        if f["to_acc"]:
            chip.acc[f["dst"]:f["dst"] + rows] = wrap32(y)
            tally(chip, "acc", WRITE, _rows(f["dst"], rows))
        else:
            names = [f"wb_src[{g}]" for g in range(cfg.tile_rows)]
            kept = [chip.source(name) == fabric.KEEP for name in names]
            picks = [None if k else chip.group(name) for k, name in zip(kept, names)]
            out = chip.regroup(y, picks).astype(np.int8)
            lanes = np.repeat(np.array(kept, dtype=bool), cfg.tile_size)
            targets = [_rows(f["dst"], rows)]
            if _field(f, "crop"):
                targets.append(self.crop_rows(cfg, f["dst"], rows))
                chip.ubuf_wr_bytes += rows * cfg.rows
            for at in targets:     # a kept group is not written: its bytes stay
                chip.cbuf[at] = np.where(lanes, chip.cbuf[at], out)
                tally(chip, "cbuf", WRITE, at)


# -- COPY -----------------------------------------------------------------------------
class Copy(Instruction):
    """The crop/fetch path between the CBUF and the UBUF, the reserved overlap region
    (CBUF rows ``ubuf_base .. ubuf_base + ubuf_rows``, whole banks). ``CROP``: CBUF
    row ``cbuf_addr + i`` -> UBUF row ``ubuf_addr + i``; ``FETCH``: the other way;
    for ``i < rows``, one row per cycle (row ``i`` read in cycle ``1 + i``, written
    when its data is back). Every row crosses the UBUF, so a chip without one faults
    ``ADDR_RANGE`` on any COPY."""

    opcode = Opcode.COPY
    unit = "ubuf"
    text = {"crop": {"kind": CopyKind.CROP}, "fetch": {"kind": CopyKind.FETCH}}

    def format(self, f):
        rest = ", ".join(f"{k}={v}" for k, v in f.items() if k != "kind")
        return f"{CopyKind(f['kind']).name}, {rest}"

    @staticmethod
    def ubuf_rows(cfg: ChipConfig, f) -> tuple[Any, Any]:
        """The UBUF rows it touches, as CBUF rows ``[lo, hi)``."""
        lo = cfg.ubuf_base + f.ubuf_addr
        return lo, lo + f.rows

    def ranges(self, cfg, f, select=py_select):
        fetch = f.kind == CopyKind.FETCH
        nonempty = f.rows != 0
        lo, hi = self.ubuf_rows(cfg, f)
        # the UBUF range's bound is the UBUF's end; its start is ubuf_base or above
        return [Range("cbuf", f.cbuf_addr, f.cbuf_addr + f.rows, cfg.cbuf_depth,
                      _label(select, fetch, WRITE, READ), nonempty),
                Range("cbuf", lo, hi, cfg.ubuf_base + cfg.ubuf_rows,
                      _label(select, fetch, READ, WRITE), nonempty)]

    def occupancy(self, cfg, f):
        return f["rows"]

    def done(self, cfg, f):
        return f["rows"] + cfg.latency["cbuf_read"] + 1

    def port_windows(self, cfg, f):
        lat = cfg.latency["cbuf_read"]
        return [("cbuf", READ, 1, 1 + f["rows"]),
                ("cbuf", WRITE, 1 + lat, 1 + lat + f["rows"])]

    def endpoints(self, cfg: ChipConfig, f: dict) -> tuple[int, int]:
        """(first row read, first row written), CBUF rows."""
        ubuf = cfg.ubuf_base + f["ubuf_addr"]
        return (ubuf, f["cbuf_addr"]) if f["kind"] == CopyKind.FETCH else \
            (f["cbuf_addr"], ubuf)

    def effects(self, cfg, f):
        src, dst = self.endpoints(cfg, f)
        read = 1 + np.arange(f["rows"], dtype=np.int64)
        return Effects(accept=f["rows"],
                       reads=[Touch("cbuf", _rows(src, f["rows"]), read)],
                       writes=[Touch("cbuf", _rows(dst, f["rows"]),
                                     read + cfg.latency["cbuf_read"])])

    def counts(self, cfg, f, fx):
        # a crop's rows as they are written into the UBUF, a fetch's as they are read
        if f["kind"] == CopyKind.FETCH:
            return [Count("ubuf_rd_bytes", cfg.rows, fx.reads[0].cycles)]
        return [Count("ubuf_wr_bytes", cfg.rows, fx.writes[0].cycles)]

    def execute(self, chip, f):
        src, dst = self.endpoints(chip.cfg, f)
        rows = f["rows"]
        chip.cbuf[dst:dst + rows] = chip.cbuf[src:src + rows]
        tally(chip, "cbuf", READ, _rows(src, rows))
        tally(chip, "cbuf", WRITE, _rows(dst, rows))
        if f["kind"] == CopyKind.FETCH:
            chip.ubuf_rd_bytes += rows * chip.cfg.rows
        else:
            chip.ubuf_wr_bytes += rows * chip.cfg.rows


# -- ROUTE ----------------------------------------------------------------------------
class Route(Instruction):
    """CBUF rows through the general lanes (docs/contract.md, "ROUTE"): row
    ``src + r`` drives the west edge in cycle ``1 + L + r``; partition group ``g`` of
    row ``dst + r``, written in cycle ``1 + L + r + span`` (``L``: the CBUF read
    latency), takes the south edge's column group ``j = (g + col0) % Tc`` from
    ``delay_j`` cycles before, unless bit ``g`` of ``keep`` is set."""

    opcode = Opcode.ROUTE
    unit = "lanes"
    text = {"route": {}}
    uses_fabric = True
    legal_rule = ("a chip with general lanes, 1 <= span <= route_span_max, every "
                  "delay <= span, col0 < Tc")

    def legal(self, cfg, f, select=py_select):
        ok = (f.span >= 1) & (f.span <= geo.route_span_max(cfg)) & \
            (f.col0 < cfg.tile_cols)
        if not cfg.general_lanes:        # none (its grid may be wider than the fields)
            return ok & (f.span == 0)
        for j in range(cfg.tile_cols):
            ok = ok & (getattr(f, f"delay{j}") <= f.span)
        return ok

    def ranges(self, cfg, f, select=py_select):
        nonempty = f.rows != 0
        return [Range("cbuf", f.src, f.src + f.rows, cfg.cbuf_depth, READ, nonempty),
                Range("cbuf", f.dst, f.dst + f.rows, cfg.cbuf_depth, WRITE, nonempty)]

    @staticmethod
    def first_write(cfg: ChipConfig, f: dict) -> int:
        return 1 + cfg.latency["cbuf_read"] + f["span"]

    def occupancy(self, cfg, f):
        return self.first_write(cfg, f) + f["rows"] - 1

    def done(self, cfg, f):
        return self.first_write(cfg, f) + f["rows"]

    def port_windows(self, cfg, f):
        w = self.first_write(cfg, f)
        return [("cbuf", READ, 1, 1 + f["rows"]), ("cbuf", WRITE, w, w + f["rows"])]

    @staticmethod
    def lane_window(cfg: ChipConfig, f: dict) -> tuple[int, int]:
        """``[first, last]`` after issue in which the lanes must keep the route: loads
        from cycle 1 up to the latest last write any span allows."""
        return 1, cfg.latency["cbuf_read"] + geo.route_span_max(cfg) + f["rows"] - 1

    def mux_use(self, cfg, f, kind, idx):
        if kind in fabric.GENERAL:
            first, last = self.lane_window(cfg, f)
            return first, last + 1
        return None

    def effects(self, cfg, f):
        rows = f["rows"]
        read = 1 + np.arange(rows, dtype=np.int64)
        window = self.lane_window(cfg, f)
        return Effects(accept=self.occupancy(cfg, f),
                       reads=[Touch("cbuf", _rows(f["src"], rows), read)],
                       writes=[Touch("cbuf", _rows(f["dst"], rows),
                                     read + cfg.latency["cbuf_read"] + f["span"])],
                       muxes={m.name: window for m in fabric.muxes(cfg)
                              if m.name.split("[")[0] in fabric.GENERAL})

    @staticmethod
    def path(chip, j: int) -> tuple[int | None, int]:
        """Followed back from column group ``j`` of the south edge through the lane
        multiplexers as this instruction sees them: ``(i, registers)`` for a path from
        the west edge's tile row ``i``, ``(None, registers)`` from a zero source; a
        loop raises (what it carries entered before the route)."""
        cfg = chip.cfg
        t, tc = cfg.tile_rows, cfg.tile_cols
        step = {"west": (0, -1, "gen_e"), "east": (0, 1, "gen_w"),
                "north": (-1, 0, "gen_s"), "south": (1, 0, "gen_n")}
        skip = {"gen_e": (0, -2), "gen_w": (0, 2), "gen_s": (-2, 0)}
        reg, seen = ("gen_s", t - 1, j), set()
        while True:
            if reg in seen:
                raise chip.undefined(f"ROUTE: the lane path to column group {j} is a "
                                     f"loop through {reg[0]}[{reg[1]}][{reg[2]}]")
            seen.add(reg)
            kind, i, jj = reg
            src = chip.source(f"{kind}[{i}][{jj}]")
            if src == fabric.ZERO:
                return None, len(seen)
            if src == "skip":
                di, dj = skip[kind]
                reg = (kind, i + di, jj + dj)
                continue
            di, dj, nxt = step[src]
            if not (0 <= i + di < t and 0 <= jj + dj < tc):     # the grid's edge
                return (i if src == "west" else None), len(seen)
            reg = (nxt, i + di, jj + dj)

    def execute(self, chip, f):
        cfg, n = chip.cfg, chip.n
        rows, span, L = f["rows"], f["span"], cfg.latency["cbuf_read"]
        data = chip.cbuf[f["src"]:f["src"] + rows].copy()
        out = chip.cbuf[f["dst"]:f["dst"] + rows]
        tally(chip, "cbuf", READ, _rows(f["src"], rows))
        tally(chip, "cbuf", WRITE, _rows(f["dst"], rows))
        for g in range(cfg.rows // n):
            if f["keep"] >> g & 1:
                continue
            j = (g + f["col0"]) % cfg.tile_cols
            i, lat = self.path(chip, j)
            lag = span - f[f"delay{j}"] - lat
            if L + lag < 0:
                raise chip.undefined(f"ROUTE: column group {j} is sampled {-(L + lag)} "
                                     f"cycle(s) before the route's data can reach it "
                                     f"(span {span}, delay {f[f'delay{j}']}, "
                                     f"{lat} lane registers)")
            group = np.zeros((rows, n), dtype=np.int8)
            if i is not None:
                r = np.arange(rows) + lag
                ok = (r >= 0) & (r < rows)
                group[ok] = data[r[ok], i * n:(i + 1) * n]
            out[:, g * n:(g + 1) * n] = group


# -- register writes: SETCFG, CONVCFG, TAPS -------------------------------------------
class RegisterWrite(Instruction):
    """An instruction that writes registers: taken every cycle (no handshake), done
    the cycle after it issues, touching no memory."""

    handshake = False

    def occupancy(self, cfg, f):
        return 1

    def done(self, cfg, f):
        return 1

    def effects(self, cfg, f):
        return Effects(accept=1)


class Setcfg(RegisterWrite):
    """Write up to ``isa.SETCFG_PAIRS`` multiplexer control registers; each new value
    holds from the next cycle. A chip takes one of the two formats, SETCFG or SETCFGW
    (:func:`systolica.arch.fabric.setcfg_format`)."""

    opcode = Opcode.SETCFG
    unit = "cfg"
    text = {"set": {}}

    @property
    def legal_rule(self):
        return (f"{self.opcode.name} on a chip whose multiplexers it can name "
                f"(fabric.setcfg_format)")

    def legal(self, cfg, f, select=py_select):
        return fabric.setcfg_format(cfg).op is self.opcode

    def format(self, f):
        return ", ".join(f"mux{i}={v}" for i, v in isa.setcfg_pairs(f, self.opcode))

    def execute(self, chip, f):
        """Its values act through the multiplexer settings the other instructions see."""


class Setcfgw(Setcfg):
    """SETCFG's wide format: pages of 32 multiplexers, 5-bit values, 9-bit pages."""

    opcode = Opcode.SETCFGW
    text = {"setw": {}}


class Convcfg(RegisterWrite):
    """Set the window geometry the MATMULs issued after it walk (docs/cnn.md)."""

    opcode = Opcode.CONVCFG
    unit = "convcfg"
    text = {"convcfg": {}}

    def ranges(self, cfg, f, select=py_select):
        return [Range("geom", 0, 1, 1, WRITE, nonempty=(f.out_w != 0) & (f.sh != 0)
                      & (f.sw != 0), window=(0, 1),
                      needs="out_w and the strides sh and sw must be at least 1")]

    def execute(self, chip, f):
        chip.geom = {k: f[k] for k in ("out_w", "sh", "sw", "top", "left", "pad")}


class Taps(RegisterWrite):
    """Write ``count`` entries of tap table ``table``: partition ``first + k - 1``
    reads tap ``(dh + th<k>, dw + tw<k>)`` in a conv MATMUL naming the table."""

    opcode = Opcode.TAPS
    unit = "taps"
    text = {"taps": {}}

    def ranges(self, cfg, f, select=py_select):
        return [Range("taps", f.table, f.table + 1, isa.TAP_TABLES, WRITE,
                      nonempty=(f.count != 0) & (f.count <= isa.TAPS_PER_WORD)
                      & (f.first + f.count <= cfg.rows), window=(0, 1),
                      needs=f"count must be 1 to {isa.TAPS_PER_WORD} and first + count at "
                            f"most the array's rows (partitions)")]

    def execute(self, chip, f):
        for p, th, tw in isa.taps_entries(f):
            chip.tap_tables[f["table"], p] = (th, tw)


SPEC: dict[Opcode, Instruction] = {s.opcode: s for s in (Dma(), Wload(), Matmul(), Vrun(),
                                                          Setcfg(), Convcfg(), Taps(),
                                                          Copy(), Route(), Setcfgw())}
UNITS: tuple[str, ...] = tuple(dict.fromkeys(s.unit for s in SPEC.values()))
isa.FIELD_FORMATS.update({op: entry.format for op, entry in SPEC.items()})
#: program text (unit, operation) -> (opcode, fixed fields)
TEXT_OPS: dict[tuple[str, str], tuple[Opcode, dict]] = {
    (s.unit, op): (s.opcode, fixed) for s in SPEC.values() for op, fixed in s.text.items()}


def spec(op: Opcode) -> Instruction:
    try:
        return SPEC[op]
    except KeyError:
        raise ValueError(f"no instruction is defined for opcode {op!r}") from None


def ranges(cfg: ChipConfig, op: Opcode, fields: dict) -> list[Range]:
    """The memory ranges of an instruction given as a field dict (Python values)."""
    return spec(op).ranges(cfg, Fields(fields))


def in_range(cfg: ChipConfig, op: Opcode, fields: dict) -> bool:
    return bool(spec(op).in_range(cfg, Fields(fields)))


def legal(cfg: ChipConfig, op: Opcode, fields: dict) -> bool:
    """Whether the opcode defines this combination of fields (else ILLEGAL_OPCODE)."""
    return bool(spec(op).legal(cfg, Fields(fields)))


def setcfg_in_table(cfg: ChipConfig, fields: dict, op: Opcode = Opcode.SETCFG) -> bool:
    """The CFG_RANGE rule: every pair names an existing multiplexer and source."""
    table = fabric.muxes(cfg)
    return all(index < len(table) and value < len(table[index].sources)
               for index, value in isa.setcfg_pairs(fields, op))
