"""Golden model: the chip's behaviour as an independent witness.

It runs a program image in two passes, and never uses the compiler's closed-form
timing (:mod:`systolica.arch.timing`), its scheduler or its lowering:

1. :func:`check` -- the timing pass, without data. It is the sequencer (one
   instruction reaches issue per cycle; the fault checks in their order), the
   instruction fetcher of a program not all preloaded (its own
   model of the rule in :mod:`systolica.arch.fetch`: the DRAM port cycles the DMAs'
   effects leave free, taken in order), a clock per
   unit (when it accepts the next instruction, from the instruction's cycle-level
   effects), a scoreboard per address of every memory and weight bank (the cycle
   of its last write and last read), and who uses each CBUF bank's read and write
   port in which cycles (two units on one port in one cycle: ``BANK_CONFLICT`` the
   cycle after). Each instruction's reads and writes happen at
   the cycles its entry in :mod:`systolica.arch.instructions` says; a read of data
   not yet written, a write that lands before an earlier instruction has read the
   old data, or two writes out of order is a *hazard*: the hardware would compute
   something other than the program's sequential meaning. So is a read of a CBUF,
   ACC or weight-bank row that no earlier instruction wrote (an *unwritten read*): a
   reset clears no memory, so the chip would read whatever the program before left
   there, where the data pass below starts from zeros (the DRAM is defined: the
   image, zeros elsewhere, :class:`~systolica.arch.loadable.Loadable`). The cycle
   count is the cycle after the last effect. The schedule verifier
   (:mod:`systolica.compiler.scheduling.verify`) is this pass.
2. :func:`run` -- the data pass: each issued instruction's semantics
   (``execute`` in its entry) on numpy state, in issue order, with the multiplexer
   settings in force when its data passes each multiplexer. Issue order equals
   cycle order for every program without hazards, so :func:`run` raises
   :class:`GoldenError` on a hazard instead of guessing.

The RTL must produce the same DRAM image, counters and fault registers. Given
``sample_at`` cycles, :func:`run` also says what the counter registers read at each
while the program runs (each instruction's ``counts``, and the fetcher's words): the
per-layer figures of one run (:func:`systolica.app.flow.run_network`).
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from systolica.arch import fabric, fetch, instructions, isa, word_rules
from systolica.arch.config import ChipConfig, require_config
from systolica.arch.instructions import Effects, Touch
from systolica.arch.isa import Opcode
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode
from systolica.arch.word_rules import limit_fault as _limit_fault
from systolica.arch.word_rules import range_fault as _range_fault
from systolica.arch.word_rules import table_fault as _table_fault

NEVER = -(1 << 62)
_max = np.maximum.reduce       # ndarray.max without its Python wrapper
_min = np.minimum.reduce
_all = np.logical_and.reduce    # ... ndarray.all
_any = np.logical_or.reduce     # ... ndarray.any


@dataclass
class GoldenResult:
    dram: np.ndarray          # uint8 (dram_words, rows) after the run (lazily zero)
    cbuf: np.ndarray          # int8 (cbuf_physical_rows, rows): the UBUF's own rows too
    acc: np.ndarray           # int32 (acc_depth, cols)
    cycles: int               # what the CYCLES register reads
    error: ErrorCode
    fault_pc: int             # 0 unless a fault stopped the run
    fault_cycle: int
    issued: int               # instructions that took effect
    macs: int                 # MACS counter: rows streamed x R x C
    dram_bytes_read: int
    dram_bytes_written: int
    fetch_bytes_read: int     # FETCH_RD_BYTES of a run that completes (after a fault it
                              # counts the words up to the faulting instruction; the
                              # chip's fetcher may have read further ahead)
    ubuf_bytes_written: int = 0   # UBUF_WR_BYTES: crops
    ubuf_bytes_read: int = 0      # UBUF_RD_BYTES: fetches
    #: per cycle of ``sample_at``: the counters as the chip's registers read them while
    #: its cycle counter reads that cycle (:data:`SAMPLED`; after the run, its end)
    samples: list[dict[str, int]] = field(default_factory=list)
    #: ``(buffer, mode) -> accesses`` the instructions made as they ran: rows of the
    #: CBUF, the UBUF (the CBUF rows from ``ubuf_base``) and the ACC read or written,
    #: weight banks written (``wbuf``); ``mode`` "read" or "write" (docs/records.md)
    accesses: dict[tuple[str, str], int] = field(default_factory=dict)


#: What a sample holds: the cycle counter and the performance counters, by the names
#: of :func:`systolica.firmware.driver.counters_from`.
SAMPLED = ("cycles", *instructions.COUNTERS, "fetch_rd_bytes")


class GoldenError(ValueError):
    """A program whose result the hardware does not define: an instruction's data
    is read before it is written (or never written at all), or overwritten before
    it is read."""


@dataclass(frozen=True)
class Hazard:
    pc: int
    rule: str                 # "read before write", "unwritten read", "write before
                              # read", "write order", "program overwrite"
    message: str


@dataclass
class Timeline:
    """What the timing pass found."""
    issued: list[isa.Instr]
    effects: list[Effects]
    fault: tuple[ErrorCode, int, int] | None      # (code, pc, cycle)
    cycles: int                                   # what the CYCLES register reads
    hazards: list[Hazard] = field(default_factory=list)
    fault_reason: str = ""                        # why the fault was raised
    fetched_words: int = 0                        # words the fetcher read
    fetch_cycles: list[int] = field(default_factory=list)   # ... the cycle of each


# -- the timing pass ------------------------------------------------------------------
def _raise(since: np.ndarray, at, cycles) -> None:
    """``since[at] = max(since[at], cycles)``; a slice of rows in place."""
    if at.__class__ is slice:
        view = since[at]
        np.maximum(view, cycles, out=view)
    else:
        since[at] = np.maximum(since[at], cycles)


class _Scoreboard:
    """Per address of one resource: the cycle of the last write (and whether the
    matmul unit made it, which its accumulate read sees up to ``ahead`` cycles early:
    the writes still in flight when the read's data arrives, ``latency["acc_read"]``
    of them, which it forwards) and of the last read, with the instructions that made
    them. ``undefined``: the memory holds nothing defined at reset, so a read of an
    address no instruction has written is a hazard too (an unwritten read)."""

    def __init__(self, name: str, size: int, ahead: int = 1, undefined: bool = False):
        self.ahead = ahead
        self.undefined = undefined
        # Cycles are kept as ``cycle - NEVER``, so that a zero means "never": the
        # arrays are then plain zeros, which the OS hands out lazily, and a run pays
        # only for the addresses it touches (the DRAM has millions of words).
        self.name = name
        self.w_since = np.zeros(size, dtype=np.int64)
        self.w_pc = np.zeros(size, dtype=np.int64)
        self.w_fwd = np.zeros(size, dtype=bool)
        self.r_since = np.zeros(size, dtype=np.int64)
        self.r_pc = np.zeros(size, dtype=np.int64)

    def w_cycle(self, a):
        return self.w_since[a] + NEVER

    def r_cycle(self, a):
        return self.r_since[a] + NEVER

    # The hazard-free cases without indexing by address, or with one comparison per
    # row over a contiguous block; anything else takes read's and write's full check,
    # which also words the hazard. A touch of one row is taken with plain numbers. A
    # forwarding touch of a block (an accumulate's) goes row by row at once: its rows
    # follow the writes of the instruction before row by row, seldom all of them.
    def _sees_writes(self, touch: Touch, rows: _Rows, off: int) -> bool:
        """Whether every read of the touch (cycles shifted by `off`) comes after the
        write of its row the board holds."""
        w = self.w_since[rows.lo:rows.hi]
        block = rows.at.__class__ is slice
        if not (block and touch.forward) and rows.first + off > _max(w):
            return True         # even the earliest read is after the latest write
        if not block:
            return False
        c = rows.last + off
        seen = c > w
        if touch.forward and not _all(seen):
            seen |= self.w_fwd[rows.at] & (w < c + self.ahead)
        return bool(_all(seen))

    def _lands_in_order(self, pc: int, touch: Touch, rows: _Rows, off: int) -> bool:
        """Whether every write of the touch (cycles shifted by `off`) comes at or
        after the last read and after the last write of its row by another
        instruction."""
        r, w = self.r_since[rows.lo:rows.hi], self.w_since[rows.lo:rows.hi]
        block = rows.at.__class__ is slice
        since = rows.first + off
        if not (block and touch.forward) and since >= _max(r) and since > _max(w):
            return True         # even the earliest write is after all of them
        if not block:
            return False
        c = rows.last + off
        if _any(c < r):
            return False
        later = c <= w          # fine if the instruction's own (a write of several)
        return not _any(later) or not _any(later & (self.w_pc[rows.at] != pc))

    def _written(self, rows: _Rows) -> bool:
        """Whether some instruction has written every row the touch reads."""
        if rows.one:
            return bool(self.w_since[rows.lo])
        w = self.w_since[rows.at]
        return bool(_min(w)) if len(w) else True

    def _unwritten(self, pc: int, touch: Touch, t: int, hazards: list[Hazard]) -> None:
        """The hazard of a touch that reads a row no instruction has written."""
        never = self.w_since[touch.addrs] == 0
        k = int(np.flatnonzero(never)[0])
        rows = np.unique(touch.addrs[never])
        more = f" (and {len(rows) - 1} more of its rows)" if len(rows) > 1 else ""
        hazards.append(Hazard(pc, "unwritten read", (
            f"pc {pc} reads {self.name}[{touch.addrs[k]}] in cycle {touch.cycles[k] + t}, "
            f"but no instruction before it writes that row{more}: a reset does not clear "
            f"the {_MEMORY.get(self.name, self.name)}, so the chip would read what the "
            f"program before left there; write every row a program reads")))

    def read_twice(self, pc: int, twice: _Twice, t: int) -> bool:
        """Both reads of `twice` at once, where the earlier comes after every write
        of its rows (then so does the later): whether they were taken."""
        rows, later = twice.first[1], twice.then[1]
        off = t - NEVER
        w = self.w_since[rows.lo:rows.hi]
        if rows.first + off > _max(w) and not (self.undefined and _min(w) == 0):
            _raise(self.r_since, rows.at, later.top + off)
            self.r_pc[rows.at] = pc
            return True
        return False

    def read(self, pc: int, touch: Touch, t: int, hazards: list[Hazard],
             rows: _Rows | None = None) -> None:
        if self.undefined and rows is not None and not self._written(rows):
            self._unwritten(pc, touch, t, hazards)
        if rows is not None:
            off = t - NEVER
            a = rows.lo
            if rows.one and rows.first + off > self.w_since[a]:
                self.r_since[a] = max(self.r_since[a], rows.top + off)
                self.r_pc[a] = pc
                return
            if self._sees_writes(touch, rows, off):
                _raise(self.r_since, rows.at, rows.last + off)
                self.r_pc[rows.at] = pc
                return
        a, c = touch.addrs, touch.cycles + t
        w_cycle = self.w_cycle(a)
        seen = c > w_cycle
        if touch.forward:
            seen |= self.w_fwd[a] & (w_cycle < c + self.ahead)
        if not seen.all():
            k = int(np.flatnonzero(~seen)[0])
            wc = int(w_cycle[k])
            hazards.append(Hazard(pc, "read before write", (
                f"pc {pc} reads {self.name}[{a[k]}] in cycle {c[k]}, but pc "
                f"{self.w_pc[a[k]]} writes it in cycle {wc}: the data is not there yet; "
                f"issue pc {pc} at least {wc - c[k] + 1} cycle(s) later")))
        np.maximum.at(self.r_since, a, c - NEVER)
        self.r_pc[a] = pc

    def write(self, pc: int, touch: Touch, t: int, hazards: list[Hazard],
              rows: _Rows | None = None) -> None:
        if rows is not None:
            off = t - NEVER
            a, since = rows.lo, rows.first + off
            if rows.one and since >= self.r_since[a] and since > self.w_since[a]:
                self.w_since[a] = rows.top + off    # after the last write: the latest
                self.w_pc[a] = pc
                self.w_fwd[a] = touch.forward
                return
            if self._lands_in_order(pc, touch, rows, off):
                _raise(self.w_since, rows.at, rows.last + off)
                self.w_pc[rows.at] = pc
                self.w_fwd[rows.at] = touch.forward
                return
        a, c = touch.addrs, touch.cycles + t
        r_cycle, w_cycle = self.r_cycle(a), self.w_cycle(a)
        # Any read after this write's cycle sees the new data, the instruction's own
        # reads included (a VRUN into the ACC whose destination starts inside its own
        # source reads rows it has already rewritten).
        early = c < r_cycle
        if early.any():
            k = int(np.flatnonzero(early)[0])
            if self.r_pc[a[k]] == pc:
                why = (f"before its own read of the old data in cycle "
                       f"{r_cycle[k]}; its destination must not start inside "
                       f"a source it has yet to read")
            else:
                why = (f"before pc {self.r_pc[a[k]]} (issued earlier) reads the old data "
                       f"in cycle {r_cycle[k]}; issue pc {pc} at least "
                       f"{int(r_cycle[k]) - int(c[k])} cycle(s) later")
            hazards.append(Hazard(pc, "write before read", (
                f"pc {pc} writes {self.name}[{a[k]}] in cycle {c[k]}, {why}")))
        order = (c <= w_cycle) & (self.w_pc[a] != pc)
        if order.any():
            k = int(np.flatnonzero(order)[0])
            hazards.append(Hazard(pc, "write order", (
                f"pc {pc} writes {self.name}[{a[k]}] in cycle {c[k]}, not after pc "
                f"{self.w_pc[a[k]]} (issued earlier) writes it in cycle "
                f"{w_cycle[k]}")))
        np.maximum.at(self.w_since, a, c - NEVER)
        self.w_pc[a] = pc
        self.w_fwd[a] = touch.forward


#: The memories an unwritten read names, by board.
_MEMORY = {"cbuf": "CBUF", "acc": "ACC", "wbank0": "weight bank 0", "wbank1": "weight bank 1"}


class _Rows:
    """A touch as the scoreboard's fast paths take it: the bounds ``[lo, hi)`` of its
    rows, its earliest and latest cycle, and each distinct row (``at``: a slice when
    they are ``lo .. hi - 1`` in order) with the latest cycle it is touched in
    (``last``); ``one``: it touches one row."""

    __slots__ = ("lo", "hi", "first", "top", "at", "last", "one")

    def __init__(self, touch: Touch):
        a, c = touch.addrs, touch.cycles
        self.first, self.top = int(_min(c)), int(_max(c))
        if len(a) == 1 or _all(a[1:] > a[:-1]):
            self.lo, self.hi = int(a[0]), int(a[-1]) + 1
            # one cycle for every row: a number, which the boards take without an array
            self.at, self.last = a, c if self.first < self.top else self.top
            if len(a) == self.hi - self.lo:     # increasing and as many as the bounds
                self.at = slice(self.lo, self.hi)
        else:
            self.lo, self.hi = int(_min(a)), int(_max(a)) + 1
            if self.hi - self.lo == 1:      # one row in several cycles (a weight bank)
                self.at = np.array([self.lo], dtype=a.dtype)
                self.last = np.array([self.top], dtype=np.int64)
            else:
                self.at, where = np.unique(a, return_inverse=True)
                self.last = np.full(len(self.at), np.iinfo(np.int64).min, dtype=np.int64)
                np.maximum.at(self.last, where, c)
        self.one = self.hi - self.lo == 1


    def moved(self, off: int) -> _Rows:
        """The rows of the same touch with every address moved by `off`."""
        rows = _Rows.__new__(_Rows)
        rows.lo, rows.hi, rows.first, rows.top, rows.last, rows.one = \
            self.lo + off, self.hi + off, self.first, self.top, self.last, self.one
        rows.at = slice(rows.lo, rows.hi) if isinstance(self.at, slice) else self.at + off
        return rows


def _rows(touch: Touch) -> _Rows | None:
    """The touch prepared for the scoreboard's fast paths, None if it is empty."""
    return _Rows(touch) if len(touch.addrs) else None


class _Twice:
    """Two reads of one block of rows by one instruction, each in one cycle, the
    later second (a window walk's tile, read from its first row's cycle to its last
    row's): ``first`` and ``then``, each ``(touch, rows, index)``."""

    __slots__ = ("first", "then")

    def __init__(self, first: tuple, then: tuple):
        self.first, self.then = first, then


def _twice(reads: tuple) -> tuple:
    """`reads` (``(board, touch, rows, index)`` each) with every two successive reads
    of one board's same block of rows, each in one cycle, no forwarding, the later
    second, as one ``(board, _Twice, rows, index)``."""
    out, k = [], 0
    while k < len(reads):
        if k + 1 < len(reads):
            (b1, t1, r1, k1), (b2, t2, r2, k2) = reads[k], reads[k + 1]
            if b1 is b2 and r1 is not None and r2 is not None \
                    and r1.at.__class__ is slice and r1.at == r2.at \
                    and r1.first == r1.top <= r2.first == r2.top \
                    and not t1.forward and not t2.forward:
                out.append((b1, _Twice((t1, r1, k1), (t2, r2, k2)), r1, k1))
                k += 2
                continue
        out.append(reads[k])
        k += 1
    return tuple(out)


def _port_runs(cycles: np.ndarray) -> list[tuple[int, int]]:
    """The runs ``[first, last]`` of consecutive cycles among `cycles`."""
    if not len(cycles):
        return []
    if len(cycles) == 1 or (np.diff(cycles) == 1).all():
        return [(int(cycles[0]), int(cycles[-1]))]
    c = np.unique(cycles)
    cut = np.flatnonzero(np.diff(c) > 1)
    return [(int(c[lo]), int(c[hi])) for lo, hi in
            zip(np.concatenate(([0], cut + 1)), np.concatenate((cut, [len(c) - 1])))]


def _moved(prepared: tuple, memory: str, off: int, boards_only: bool = False) -> tuple:
    """What ``check`` prepares for an instruction (see its ``decided``), for the
    instruction whose addresses of `memory` are all `off` further on; `boards_only`:
    only its touches of the scoreboards (the forked process's), the rest as prepared."""
    legal, fault, fx, last, reads, writes, port_runs, dram_writes, bank_uses, muxes, \
        collect_first = prepared
    new: dict[int, Touch] = {}

    def move(tc: Touch) -> Touch:
        got = new.get(id(tc))
        if got is None:
            got = new[id(tc)] = Touch(memory, tc.addrs + off, tc.cycles, tc.forward)
        return got

    reads = tuple((board, move(tc), rows and rows.moved(off), k) if tc.resource == memory
                  else (board, tc, rows, k) for board, tc, rows, k in reads)
    writes = tuple((board, move(tc), rows and rows.moved(off), k) if tc.resource == memory
                   else (board, tc, rows, k) for board, tc, rows, k in writes)
    if not boards_only:
        fx = Effects(fx.accept, [move(tc) if tc.resource == memory else tc for tc in fx.reads],
                     [move(tc) if tc.resource == memory else tc for tc in fx.writes],
                     fx.muxes, fx.collect)
        dram_writes = tuple((move(tc), rows.moved(off)) if tc.resource == memory
                            else (tc, rows) for tc, rows in dram_writes)
    return (legal, fault, fx, last, reads, writes, port_runs, dram_writes, bank_uses,
            muxes, collect_first)


def _in_use_fault(cfg: ChipConfig, passing: list[tuple[int, int, int, tuple]],
                  ins: isa.Instr) -> str | None:
    """The CFG_IN_USE rule: a SETCFG at cycle ``u`` names a multiplexer whose value an
    earlier-issued instruction reads in cycles ``first .. last`` with
    ``first <= u < last`` (the new value would hold from ``u + 1``). `passing` holds,
    in issue order, ``(end, t, pc, windows)`` per instruction whose data passes
    multiplexers: issued at ``t``, its ``windows`` (``(index, first, last)`` after
    issue) all over by cycle ``end``; those over by ``u`` are dropped, as they are
    for every later SETCFG too."""
    u = ins.cycle
    passing[:] = [p for p in passing if p[0] > u]
    for index, _ in isa.setcfg_pairs(ins.fields, ins.op):
        for _, t, pc, windows in passing:
            for i, first, last in windows:
                if i == index and t + last > u and t + first <= u:
                    return (f"multiplexer {fabric.muxes(cfg)[index].name} carries the "
                            f"data of pc {pc} in cycles {t + first}..{t + last}")
    return None


def _mux_windows(fx: Effects, mux_index: dict[str, int]) -> tuple[int, tuple] | None:
    """``(end, windows)``: the multiplexers the instruction's data passes as
    ``(index, first, last)`` after issue, all over by ``end``; None if it passes none
    (see :func:`_in_use_fault`)."""
    if not fx.muxes:
        return None
    return (max(last for first, last in fx.muxes.values()),
            tuple((mux_index[name], first, last) for name, (first, last) in fx.muxes.items()))


class _BankPorts:
    """Who uses each CBUF and ACC bank port when (docs/contract.md, "CBUF banks"),
    and the first cycle two units use the same one: the chip faults BANK_CONFLICT
    the cycle after."""

    def __init__(self, cfg: ChipConfig):
        self.cfg = cfg
        # per port, per instruction using it: (first cycle, last cycle, unit, pc, banks,
        # issue cycle, its uses of the port: (first, last, banks) after issue)
        self.live: dict[tuple[str, str], list[tuple]] = {}
        self.conflict: int | None = None            # the first conflicting cycle
        self.reason = ""

    def use(self, unit: str, pc: int, uses, t: int) -> None:
        """Instruction `pc` on `unit`, issued at `t`, uses ports ``uses`` (see
        :func:`_port_uses`); instructions arrive in issue order."""
        each, spans = uses
        # Each port's span and banks first: only where another unit's instruction
        # meets them are the uses looked at one by one.
        meets = False
        for port, first, last, banks, _ in spans:
            users = self.live.get(port)
            if users is None:
                self.live[port] = []
                continue
            if len(users) > 2:      # an instruction over by now meets no later one
                users[:] = [u for u in users if u[1] >= t]
            lo, hi = t + first, t + last
            for u_lo, u_hi, u_unit, _, u_banks, _, _ in users:
                if u_unit != unit and u_lo <= hi and lo <= u_hi and u_banks & banks:
                    meets = True
        if meets:
            for port, first, last, banks in each:
                lo, hi = t + first, t + last
                for _, _, r_unit, r_pc, _, r_t, r_uses in self.live[port]:
                    for r_first, r_last, r_banks in r_uses:
                        r_lo, r_hi = r_t + r_first, r_t + r_last
                        if r_unit != unit and r_lo <= hi and lo <= r_hi and r_banks & banks:
                            self._clash(port, max(lo, r_lo), unit, pc, r_unit, r_pc,
                                        r_banks & banks)
        # its own, added once all are checked: a unit meets no other of its own
        for port, first, last, banks, mine in spans:
            self.live[port].append((t + first, t + last, unit, pc, banks, t, mine))

    def _clash(self, port, c: int, unit: str, pc: int, r_unit: str, r_pc: int,
               common: int) -> None:
        """Two units on one port of the banks `common` in cycle `c`: the first such
        cycle is the conflict."""
        if self.conflict is None or c < self.conflict:
            self.conflict = c
            memory, mode = port
            bank = (common & -common).bit_length() - 1
            size = self.cfg.cbuf_bank_rows if memory == "cbuf" else self.cfg.acc_bank_rows
            self.reason = (
                f"in cycle {c} the {unit} unit (pc {pc}) and the {r_unit} unit (pc "
                f"{r_pc}) both use the {mode} port of {memory.upper()} bank {bank} (rows "
                f"{bank * size}..{(bank + 1) * size - 1}); a bank has one read and one "
                f"write port: place their rows in different banks or their accesses in "
                f"different cycles")


def _port_uses(uses: list[instructions.BankUse]) -> tuple[tuple, tuple]:
    """An instruction's bank ports as ``((memory, mode), first, last, banks)``: the
    banks whose port it uses over the same cycles, as one bit mask; and per port the
    same over all its uses (from the first cycle to the last, every bank), with
    them: ``(port, first, last, banks, ((first, last, banks), ...))``."""
    masks: dict[tuple[tuple[str, str], int, int], int] = {}
    for u in uses:
        key = ((u.memory, u.mode), u.first, u.last)
        masks[key] = masks.get(key, 0) | 1 << u.bank
    each = tuple((port, first, last, banks) for (port, first, last), banks in masks.items())
    spans: dict[tuple[str, str], list] = {}
    for port, first, last, banks in each:
        span = spans.get(port)
        if span is None:
            spans[port] = [first, last, banks, [(first, last, banks)]]
        else:
            span[0], span[1] = min(span[0], first), max(span[1], last)
            span[2] |= banks
            span[3].append((first, last, banks))
    return each, tuple((port, lo, hi, banks, tuple(mine))
                       for port, (lo, hi, banks, mine) in spans.items())


class _Fetcher:
    """The instruction fetcher: which cycle each fetched instruction can reach issue
    from. It reads the words of instructions ``start ..`` in order, one per DRAM port
    cycle that no DMA uses, each instruction once its ring slot is free (below ``D``,
    or the one ``D`` before it has issued); the DMAs' port cycles are their ``dram``
    touches, told as they issue."""

    def __init__(self, cfg: ChipConfig, start: int):
        self.depth = cfg.imem_depth
        self.start = start                          # the first instruction fetched
        self.words = fetch.words_per_instruction(cfg)
        self.lands = cfg.latency["dram_read"] + 2   # ring write, one-ahead read
        self.busy: list[tuple[int, int]] = []       # DMA port runs [first, last], in time
        self.next = 0                               # index of the first run still ahead
        self.free_from = 0                          # the next word's earliest cycle
        self.words_read = 0
        self.word_cycles: list[int] = []            # the cycle each word is addressed

    def dma(self, runs: list[tuple[int, int]], t: int) -> None:
        """A DMA issued at `t` uses the port in `runs` (:func:`_port_runs`, relative
        to its issue)."""
        self.busy.extend((t + first, t + last) for first, last in runs)

    def ready(self, pc: int, issued: list[isa.Instr]) -> int:
        """The first cycle instruction ``pc`` can reach issue (0 if preloaded)."""
        if pc < self.start:
            return 0
        c = self.free_from if pc < self.depth else \
            max(self.free_from, issued[pc - self.depth].cycle + 1)
        self.words_read += self.words
        for _ in range(self.words):
            while self.next < len(self.busy):
                first, last = self.busy[self.next]
                if last < c:
                    self.next += 1
                elif first <= c:
                    c = last + 1
                    self.next += 1
                else:
                    break
            word_at = c
            self.word_cycles.append(c)
            c += 1
        self.free_from = c
        return word_at + self.lands


class _BoardHelper:
    """A forked process that keeps every scoreboard of a long program while this one
    checks the issue rules (and the compiler checks the program's regions and
    encodes it): two near halves of the work at once, on a machine with two cores or
    more. It reports the hazards it found, each with its pc and touch, through a
    temporary file."""

    BOARDS = ("dram", "cbuf", "acc", "wbank0", "wbank1")
    #: Programs shorter than this are checked in one process (a fork costs more).
    FROM = 50_000
    _unreaped: list[int] = []       # children of checks that ended early

    def __init__(self, pid: int, out):
        self.pid, self.out = pid, out
        self.is_child = pid == 0

    @classmethod
    def start(cls, length: int) -> _BoardHelper | None:
        for pid in list(cls._unreaped):
            if os.waitpid(pid, os.WNOHANG)[0]:
                cls._unreaped.remove(pid)
        if length < cls.FROM or not hasattr(os, "fork") \
                or len(os.sched_getaffinity(0)) < 2:
            return None
        out = tempfile.TemporaryFile()
        pid = os.fork()
        helper = cls(pid, out)
        if not helper.is_child:
            cls._unreaped.append(pid)   # until result() reaps it
        return helper

    @contextmanager
    def reporting(self):
        """The child's whole life: whatever happens, it reports and exits."""
        try:
            yield
        except BaseException as e:      # noqa: BLE001 -- the parent raises it
            self._send(("error", f"{type(e).__name__}: {e}"))
        finally:
            os._exit(0)

    def report(self, found: list) -> None:
        self._send(("ok", found))

    def _send(self, message) -> None:
        pickle.dump(message, self.out)
        self.out.flush()

    def result(self) -> list:
        """The child's hazards ``((pc, touch index), Hazard)``, once it has ended."""
        os.waitpid(self.pid, 0)
        self._unreaped.remove(self.pid)
        self.out.seek(0)
        try:
            status, found = pickle.load(self.out)
        except EOFError:
            status, found = "error", "it ended without a report"
        finally:
            self.out.close()
        if status != "ok":
            raise RuntimeError(f"golden check: the process keeping the "
                               f"{' and '.join(self.BOARDS)} scoreboards failed: {found}")
        return found


def check(cfg: ChipConfig, program: list[isa.Instr], prog_addr: int | None = None,
          fetch_from: int | None = None) -> Timeline:
    """The timing pass: which instructions issue, the fault that stops the run, the
    cycle count, and every hazard among the issued instructions. ``prog_addr`` is
    the PROG_ADDR register (None: the program region is taken to fit); a DMA that
    writes into the fetched part of the program region is a hazard. ``fetch_from``
    is the PROG_FETCH register (None: never written, its reset value)."""
    return begin_check(cfg, program, prog_addr, fetch_from)()


def begin_check(cfg: ChipConfig, program: list[isa.Instr], prog_addr: int | None = None,
                fetch_from: int | None = None) -> Callable[[], Timeline]:
    """:func:`check` in two steps: this process's share of the work now, and a
    function that waits for the forked process's share (if any) and returns the
    timeline. The caller may work in between; it must call the function."""
    require_config(cfg, "golden.check(cfg, program)")
    if not isinstance(program, (list, tuple)) or \
            not all(isinstance(ins, isa.Instr) for ins in program):
        what = type(program).__name__ if not isinstance(program, (list, tuple)) else \
            f"a {type(program).__name__} of " \
            f"{next(type(i).__name__ for i in program if not isinstance(i, isa.Instr))}"
        raise TypeError(f"golden.check(cfg, program): program must be a list of "
                        f"isa.Instr (compiled.program, or isa.decode of each word of an "
                        f"image), not {what}")
    words = fetch.words_per_instruction(cfg)
    if fetch_from is not None and (isinstance(fetch_from, bool)
                                   or not isinstance(fetch_from, int) or fetch_from < 0):
        raise TypeError(f"golden.check: fetch_from (the PROG_FETCH register) must be a "
                        f"non-negative integer or None, not {fetch_from!r}")
    # the fetcher's first instruction, P = min(PROG_FETCH, imem_depth, PROG_LEN)
    start = min(cfg.imem_depth if fetch_from is None else fetch_from, cfg.imem_depth,
                len(program))
    why = word_rules.program_fault(cfg, len(program), prog_addr, fetch_from)
    if why:
        return lambda: Timeline([], [], (ErrorCode.PROG_RANGE, 0, 0), 0, [], why)
    fetched = (prog_addr + start * words, prog_addr + len(program) * words) \
        if start < len(program) and prog_addr is not None else None
    fetcher = _Fetcher(cfg, start)
    mux_index = {m.name: m.index for m in fabric.muxes(cfg)}
    sizes = {"dram": cfg.dram_words, "cbuf": cfg.cbuf_physical_rows, "acc": cfg.acc_depth,
             "wbank0": 1, "wbank1": 1}
    # A long program's scoreboards are split between this process and a forked one
    # (each a share of the work); they are independent of each other and of the
    # issue checks, given the instructions' cycles.
    helper = _BoardHelper.start(len(program))
    mine = sizes if helper is None else {n: s for n, s in sizes.items()
                                         if n not in _BoardHelper.BOARDS}
    if helper is not None and helper.is_child:
        mine = {n: sizes[n] for n in _BoardHelper.BOARDS}
    boards = {name: _Scoreboard(name, size, cfg.latency["acc_read"] if name == "acc" else 1,
                                undefined=name != "dram")
              for name, size in mine.items()}
    unit_free: dict[str, tuple[int, int]] = {}      # unit -> (accepts from, busy pc)
    collected: dict[str, tuple[int, int]] = {}      # unit -> (its collector free from, pc)
    ports = _BankPorts(cfg)
    passing: list[tuple[int, int, int, tuple]] = []   # see _in_use_fault
    issued: list[isa.Instr] = []
    effects: list[Effects] = []
    hazards: list[Hazard] = []
    places: list[tuple[int, int]] = []  # per hazard: its pc and its touch's index
    fault, reason = None, ""
    end = 0
    # What an instruction's fields alone decide (its legality, range fault, effects
    # relative to issue), once per distinct instruction: a network repeats most.
    # With the effects: each touch with its board and its rows prepared, the runs of
    # DRAM port cycles, the bank ports and the multiplexer windows, relative to issue.
    known: dict[tuple, tuple] = {}
    # An instruction with an address field that only moves it (``moves`` in its
    # entry; a DMA's ``dram_addr``) is prepared once with that field at 0, with the
    # room its ranges of that memory leave (None: it faults there or is illegal), and
    # each instance is that, moved.
    at_zero: dict[tuple, tuple[tuple, int | None]] = {}
    child = helper is not None and helper.is_child

    def prepare(op: Opcode, fields: dict) -> tuple:
        entry = instructions.SPEC.get(op)
        legal = entry is not None and instructions.legal(cfg, op, fields)
        fault_ = _range_fault(cfg, op, fields) if legal else None
        fx_ = entry.effects(cfg, fields) if legal and not fault_ else None
        # the collector's order is checked before the range (a MATMUL of no rows too)
        first = entry.collect_first(cfg, fields) if legal else None
        if fx_ is None:
            return (legal, fault_, None, 0, (), (), [], (), ((), ()), None, first)
        # each touch of this process's boards, with its index among the instruction's
        touched = [(boards.get(tc.resource), tc, k) for k, tc in enumerate(fx_.reads
                                                                            + fx_.writes)]
        reads = tuple((b, tc, _rows(tc), k) for b, tc, k in touched[:len(fx_.reads)] if b)
        if entry.moves is None:     # (a moved instruction's touches are moved one by one)
            reads = _twice(reads)
        writes = tuple((b, tc, _rows(tc), k) for b, tc, k in touched[len(fx_.reads):] if b)
        if child:           # it keeps scoreboards only: the rest is the parent's
            return (legal, fault_, fx_, 0, reads, writes, [], (), ((), ()), None, first)
        dram = [tc for tc in fx_.reads + fx_.writes if tc.resource == "dram"]
        return (
            legal, fault_, fx_, fx_.last, reads, writes,
            [run for tc in dram for run in _port_runs(tc.cycles)],
            tuple((tc, _rows(tc)) for tc in fx_.writes
                  if tc.resource == "dram" and len(tc.addrs)),
            _port_uses(entry.bank_ports(cfg, fields, fx_)),
            _mux_windows(fx_, mux_index), first)

    def decided(ins: isa.Instr):
        entry = instructions.SPEC.get(ins.op)
        if entry is not None and entry.moves is not None:
            name, memory = entry.moves
            off = ins.fields.get(name, 0)
            fields = ins.fields
            if off:
                fields = dict(fields)
                fields[name] = 0
            key = (ins.op, tuple(fields), tuple(fields.values()))
            got = at_zero.get(key)
            if got is None:
                fields = dict(fields)
                got = prepare(ins.op, fields)
                room = None
                if got[0] and not got[1]:
                    room = min(r.bound - r.hi for r in
                               instructions.ranges(cfg, ins.op, fields) if r.memory == memory)
                got = at_zero[key] = (got, room)
            base, room = got
            if room is not None and off <= room:
                return _moved(base, memory, off, child)
        key = (ins.op, tuple(ins.fields), tuple(ins.fields.values()))
        got = known.get(key)
        if got is None:
            got = known[key] = prepare(ins.op, ins.fields)
        return got

    def touch(pc: int, t: int, reads, writes) -> None:
        """The instruction's touches of this process's boards, issued at `t`."""
        for board, tc, rows, k in reads:
            if tc.__class__ is _Twice:
                if board.read_twice(pc, tc, t):
                    continue
                for one, one_rows, one_k in (tc.first, tc.then):
                    board.read(pc, one, t, hazards, one_rows)
                    while len(places) < len(hazards):
                        places.append((pc, one_k))
                continue
            board.read(pc, tc, t, hazards, rows)
            while len(places) < len(hazards):
                places.append((pc, k))
        for board, tc, rows, k in writes:
            board.write(pc, tc, t, hazards, rows)
            while len(places) < len(hazards):
                places.append((pc, k))

    if helper is not None and helper.is_child:
        with helper.reporting():
            for pc, ins in enumerate(program):
                got = decided(ins)
                if got[2] is not None:     # legal and in range (else the run stops)
                    touch(pc, ins.cycle, got[4], got[5])
            helper.report(list(zip(places, hazards)))

    for pc, ins in enumerate(program):
        arrival = 0 if not issued else word_rules.earliest_issue(issued[-1].cycle)
        ready = fetcher.ready(pc, issued)
        reach = max(arrival, ready)
        if ports.conflict is not None and max(ins.cycle, reach) > ports.conflict:
            # the chip faults the cycle after the conflict, before this one issues or
            # faults (the head's issue or fault in the conflict's own cycle comes first)
            break
        entry = instructions.SPEC.get(ins.op)
        legal, range_fault, fx, fx_last, reads, writes, port_runs, dram_writes, \
            bank_uses, mux_windows, collect_first = decided(ins)
        if not legal:
            fault = (ErrorCode.ILLEGAL_OPCODE, pc, reach)
            reason = word_rules.legal_fault(cfg, ins)
            break
        if ins.cycle < reach:
            if ready > arrival:
                fault = (ErrorCode.FETCH_LATE, pc, reach)
                reason = (f"its word is fetched into the instruction memory in time to "
                          f"issue from cycle {ready}, after its cycle {ins.cycle}")
            else:
                fault = (ErrorCode.LATE, pc, reach)
                reason = f"it reaches issue in cycle {reach}, after its cycle {ins.cycle}"
            break
        free, busy_pc = unit_free.get(entry.unit, (0, 0))
        after, before_pc = collected.get(entry.unit, (0, 0))
        # In the sequencer's order; each check assumes the ones before it passed.
        if ins.cycle < free:
            fault, reason = (ErrorCode.UNIT_BUSY, pc, ins.cycle), (
                f"the {entry.unit} unit takes its next instruction from cycle {free} "
                f"(it runs pc {busy_pc})")
        elif collect_first is not None and ins.cycle + collect_first < after:
            fault, reason = (ErrorCode.UNIT_BUSY, pc, ins.cycle), (
                f"its rows would reach the {entry.unit} unit's collector from cycle "
                f"{ins.cycle + collect_first}, before pc {before_pc}'s last one has passed it "
                f"(cycle {after - 1}): rows reach it in issue order, so it may issue from "
                f"cycle {after - collect_first}")
        elif range_fault:
            fault, reason = (ErrorCode.ADDR_RANGE, pc, ins.cycle), range_fault
        elif ins.op in isa.SETCFGS:
            for code, why in ((ErrorCode.CFG_RANGE, lambda: _table_fault(cfg, ins)),
                              (ErrorCode.CFG_LIMIT, lambda: _limit_fault(cfg, ins)),
                              (ErrorCode.CFG_IN_USE,
                               lambda: _in_use_fault(cfg, passing, ins))):
                reason = why()
                if reason:
                    fault = (code, pc, ins.cycle)
                    break
        if fault:
            break
        t = ins.cycle
        unit_free[entry.unit] = (t + fx.accept, pc)
        if fx.collect:
            collected[entry.unit] = (t + fx.collect[1], pc)
        ports.use(entry.unit, pc, bank_uses, t)
        if mux_windows:
            passing.append((t + mux_windows[0], t, pc, mux_windows[1]))
        touch(pc, t, reads, writes)
        if port_runs:
            fetcher.dma(port_runs, t)
        if fetched is not None:
            for tc, rows in dram_writes:
                if rows.hi <= fetched[0] or rows.lo >= fetched[1]:
                    continue
                hit = (tc.addrs >= fetched[0]) & (tc.addrs < fetched[1])
                if np.any(hit):
                    a = int(tc.addrs[np.flatnonzero(hit)[0]])
                    places.append((pc, 1 << 30))         # after its touches' hazards
                    hazards.append(Hazard(pc, "program overwrite", (
                        f"pc {pc} writes DRAM word {a}, inside the program region "
                        f"[{fetched[0]}, {fetched[1]}) the fetcher reads")))
        issued.append(ins)
        effects.append(fx)
        end = max(end, t + fx_last + 1)
    if fault is None and ports.conflict is not None:
        fault = (ErrorCode.BANK_CONFLICT, len(issued), ports.conflict + 1)
        reason = ports.reason

    def timeline() -> Timeline:
        found = hazards
        if helper is not None:
            # the other boards' hazards among the issued instructions, in the order one
            # process would have found them: by pc, then by touch
            theirs = [(place, h) for place, h in helper.result() if place[0] < len(issued)]
            if theirs:
                theirs += list(zip(places, hazards))
                theirs.sort(key=lambda x: x[0])
                found = [h for _, h in theirs]
        cycles = fault[2] if fault else end
        return Timeline(issued, effects, fault, cycles, found, reason or "",
                        fetcher.words_read, fetcher.word_cycles)
    return timeline


# -- the data pass --------------------------------------------------------------------
class _Chip:
    """The state the instructions' semantics act on, and the fabric as they see it."""

    def __init__(self, cfg: ChipConfig, dram: np.ndarray, timeline: Timeline):
        self.cfg = cfg
        self.n = cfg.tile_size
        self.table = fabric.muxes(cfg)
        self.index = {m.name: m.index for m in self.table}
        self.dram = dram
        self.cbuf = np.zeros((cfg.cbuf_physical_rows, cfg.rows), dtype=np.int8)
        self.acc = np.zeros((cfg.acc_depth, cfg.cols), dtype=np.int32)
        self.banks = np.zeros((2, cfg.rows, cfg.cols), dtype=np.int8)
        self.macs = self.rd_bytes = self.wr_bytes = 0
        self.ubuf_wr_bytes = self.ubuf_rd_bytes = 0
        self.accesses: dict[tuple[str, str], int] = {}
        # the matmul unit's window geometry (CONVCFG) and tap tables (TAPS), at reset
        self.geom = {"out_w": 1, "sh": 1, "sw": 1, "top": 0, "left": 0, "pad": 0}
        self.tap_tables = np.zeros((isa.TAP_TABLES, cfg.rows, 2), dtype=np.int64)
        # Per multiplexer: (cycle from which it holds, value), oldest first. A SETCFG's
        # value holds from the cycle after it issues.
        self.settings = [[(NEVER, m.default)] for m in self.table]
        for ins in timeline.issued:
            if ins.op in isa.SETCFGS:
                for index, value in isa.setcfg_pairs(ins.fields, ins.op):
                    self.settings[index].append((ins.cycle + 1, value))
        self.now: tuple[isa.Instr, Effects] | None = None

    def tally(self, memory: str, mode: str, rows) -> None:
        """Count an access (:func:`systolica.arch.instructions.tally`): CBUF rows in
        the UBUF's range count as the UBUF's."""
        if memory == "cbuf":
            rows = np.asarray(rows)
            lo, hi = self.cfg.ubuf_base, self.cfg.ubuf_base + self.cfg.ubuf_rows
            ubuf = int(np.count_nonzero((rows >= lo) & (rows < hi)))
            if ubuf:
                self._add("ubuf", mode, ubuf)
            self._add("cbuf", mode, len(rows) - ubuf)
        else:
            self._add(memory, mode, rows if isinstance(rows, int) else len(rows))

    def _add(self, memory: str, mode: str, n: int) -> None:
        self.accesses[memory, mode] = self.accesses.get((memory, mode), 0) + n

    # -- the fabric as the current instruction sees it --------------------------------
    def source(self, name: str) -> str:
        """The source of multiplexer ``name`` while the current instruction's data
        passes it (the timing pass made sure it does not change meanwhile)."""
        ins, fx = self.now
        first = ins.cycle + fx.muxes[name][0]
        value = None
        for since, v in self.settings[self.index[name]]:
            if since > first:
                break
            value = v
        return self.table[self.index[name]].sources[value]

    def undefined(self, why: str) -> GoldenError:
        """The error for data the hardware does not define (raised by the caller)."""
        ins, _ = self.now
        return GoldenError(f"{why} (the instruction issued at cycle "
                           f"{ins.cycle})")

    def group(self, name: str) -> int | None:
        """The group number a feed/select multiplexer picks, or None for zero."""
        src = self.source(name)
        return None if src == fabric.ZERO else int(src.rsplit(".g", 1)[1])

    def lanes(self, kind: str, open_: str, first_row: int = 0) -> np.ndarray:
        """Per tile ``[i, j]`` (tile rows from ``first_row``): whether its ``kind``
        port takes source ``open_``."""
        t, tc = self.cfg.tile_rows, self.cfg.tile_cols
        return np.array([[self.source(f"{kind}[{i}][{j}]") == open_ for j in range(tc)]
                         for i in range(first_row, t)], dtype=bool).reshape(-1, tc)

    def feed(self, kind: str, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Per array lane ``p`` (count tiles of n): the CBUF partition feeding it and
        whether it is fed at all."""
        n = self.n
        idx, live = np.zeros(count * n, dtype=np.int64), np.zeros(count * n, dtype=bool)
        for k in range(count):
            g = self.group(f"{kind}[{k}]")
            if g is not None:
                idx[k * n:(k + 1) * n] = g * n + np.arange(n)
                live[k * n:(k + 1) * n] = True
        return idx, live

    def regroup(self, y: np.ndarray, picks: list[int | None]) -> np.ndarray:
        n = self.n
        out = np.zeros((y.shape[0], len(picks) * n), dtype=y.dtype)
        for g, src in enumerate(picks):
            if src is not None:
                out[:, g * n:(g + 1) * n] = y[:, src * n:(src + 1) * n]
        return out


def sample(cfg: ChipConfig, timeline: Timeline, at) -> list[dict[str, int]]:
    """What the chip's counter registers read while its cycle counter reads each
    cycle of `at` (:data:`SAMPLED`, one dict per cycle): each counter holds what the
    issued instructions' ``counts`` and the fetcher's words added in the cycles before
    (after the run's end, what they added in all). Every count is a run of
    consecutive cycles or a few, so a sample costs a pass over the runs, not the
    cycles."""
    at = [int(c) for c in at]
    runs: dict[str, list[tuple[int, int, int]]] = {name: [] for name in SAMPLED[1:]}
    known: dict[tuple, list] = {}
    for ins, fx in zip(timeline.issued, timeline.effects):
        entry = instructions.SPEC[ins.op]
        # a count does not depend on a field that only moves the instruction
        moving = entry.moves[0] if entry.moves else None
        key = (ins.op, tuple((k, v) for k, v in ins.fields.items() if k != moving))
        counted = known.get(key)
        if counted is None:
            counted = known[key] = [(c.counter, c.amount, first, last)
                                    for c in entry.counts(cfg, ins.fields, fx)
                                    for first, last in _port_runs(c.cycles)]
        for counter, amount, first, last in counted:
            runs[counter].append((ins.cycle + first, ins.cycle + last, amount))
    runs["fetch_rd_bytes"] = [(c, c, cfg.dram_word_bytes) for c in timeline.fetch_cycles]
    out = [{"cycles": min(c, timeline.cycles)} for c in at]
    for name, rs in runs.items():
        first, last, amount = (np.array(v, dtype=np.int64).reshape(-1)
                               for v in zip(*rs)) if rs else (np.zeros(0, np.int64),) * 3
        for c, into in zip(at, out):
            into[name] = int((amount * np.clip(c - first, 0, last - first + 1)).sum())
    return out


def run(cfg: ChipConfig, program: Loadable, sample_at=(), *,
        memories: dict[str, np.ndarray] | None = None) -> GoldenResult:
    """Run `program` (its image on a copy of its DRAM image, the initial DRAM from word
    0, uint8 ``(words, cfg.rows)`` with ``words <= cfg.dram_words``, or its segments;
    the rest is zeros). A program the chip fetches (longer than the instruction memory,
    or fetched from its ``fetch_from``, the PROG_FETCH register) is also written at its
    ``prog_addr`` (the PROG_ADDR register), as the host does before the run; its
    ``ubuf`` is what the host wrote to the UBUF registers (a placement the registers
    would refuse is a ConfigError).

    `memories`: what the CBUF, ACC and weight banks hold when the run starts, by name
    (``"cbuf"``, ``"acc"``, ``"banks"``, shaped as :class:`GoldenResult` and
    ``(2, rows, cols)``); the others start at zero. A reset clears no memory, so on
    the chip they hold what the program before left; a program the timing pass
    accepts reads none of it (no unwritten read), and its result is the same.

    The result's ``dram`` has all ``cfg.dram_words`` words, but only those the image
    or the program touch take memory or time: give the used part (e.g.
    ``compiled.dram``), not a full-size copy, and a large DRAM costs nothing.

    ``sample_at``: cycles at which to say what the counter registers read
    (:func:`sample`), in the result's ``samples``."""
    require_config(cfg, "golden.run(cfg, program)")
    if not isinstance(program, Loadable):
        raise TypeError(f"golden.run takes a Loadable (compiled.loadable, or "
                        f"Loadable.for_chip(cfg, image, dram)), not {type(program).__name__}")
    program.verify(cfg, "golden.run")
    image, prog_addr, fetch_from = program.image, program.prog_addr, program.fetch_from
    if program.ubuf is not None:
        cfg = cfg.at_ubuf(*program.ubuf)
    dram = np.zeros((cfg.dram_words, cfg.rows), dtype=np.uint8)   # untouched pages are free
    for first, data in program.segments():      # (written piece by piece: segments far
        given = np.asarray(data, dtype=np.uint8)    # apart touch only their own pages)
        if given.ndim != 2 or given.shape[1] != cfg.rows or first < 0 \
                or first + given.shape[0] > cfg.dram_words:
            raise ValueError(f"DRAM image must have shape (<= {cfg.dram_words}, "
                             f"{cfg.rows}), not {given.shape}" if first == 0 else
                             f"DRAM segment at word {first} of shape {given.shape} must "
                             f"be (words, {cfg.rows}) inside the {cfg.dram_words}-word "
                             f"DRAM")
        dram[first:first + given.shape[0]] = given
    program = [isa.decode(w) for w in isa.from_bytes(image)]
    if prog_addr is not None and fetch.fetches(cfg, len(program), fetch_from):
        region = fetch.program_words(cfg, image)
        if prog_addr + len(region) <= cfg.dram_words:
            dram[prog_addr:prog_addr + len(region)] = region
    timeline = check(cfg, program, prog_addr, fetch_from)
    if timeline.hazards:
        h = timeline.hazards[0]
        more = f" (and {len(timeline.hazards) - 1} more)" if len(timeline.hazards) > 1 else ""
        raise GoldenError(f"{h.rule}: {h.message}{more}")
    chip = _Chip(cfg, dram, timeline)
    for name, data in (memories or {}).items():
        held = getattr(chip, name) if name in ("cbuf", "acc", "banks") else None
        if held is None or np.shape(data) != held.shape:
            raise ValueError(f"memories: {name!r} must be one of 'cbuf', 'acc', 'banks', "
                             f"shaped {held.shape if held is not None else '...'}, not "
                             f"{np.shape(data)}")
        held[:] = data
    for ins, fx in zip(timeline.issued, timeline.effects):
        chip.now = (ins, fx)
        instructions.SPEC[ins.op].execute(chip, ins.fields)
    error, pc, cycle = timeline.fault or (ErrorCode.NONE, 0, 0)
    return GoldenResult(chip.dram, chip.cbuf, chip.acc, timeline.cycles, error, pc, cycle,
                        len(timeline.issued), chip.macs, chip.rd_bytes, chip.wr_bytes,
                        timeline.fetched_words * cfg.dram_word_bytes,
                        chip.ubuf_wr_bytes, chip.ubuf_rd_bytes,
                        sample(cfg, timeline, sample_at) if len(sample_at) else [],
                        chip.accesses)
