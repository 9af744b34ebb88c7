"""WeightLoader (``tiny`` preset): WLOADs against a Python model of the CBUF read port
(read latency 1) and of the grid's column weight chains.

A WLOAD issued at cycle ``t`` reads in cycles ``t + 1 .. t + weight_shifts`` and shifts
in cycles ``t + FIRST .. t + FIRST + weight_shifts - 1`` (``FIRST`` = CBUF read latency
+ 1, where :func:`systolica.arch.timing.mux_use` puts the ``north_feed`` window). The value
shifted at shift ``k`` ends in chain stage ``weight_shifts - 1 - k`` (stage
``timing.skew(r)`` is cell row ``r``; the other stages are the tile conveyor
registers), so the weight rows are read bottom row first and each conveyor slot is a
read whose data is not kept.

The checker requires, every cycle:

* ``cbuf_read.addr`` = ``w_addr + row`` of the row the slot schedule (:func:`read_slots`)
  puts in that read cycle (conveyor slots: any address);
* ``w_shift`` high exactly in the shift windows, with ``w_bank`` = that load's bank,
  also when the next WLOAD issues at the occupancy boundary;
* ``north_w`` = the CBUF data of this cycle routed by this cycle's ``north_feed``
  (group ``g`` of tile column ``j`` = partitions ``g*n ..``; the value ``T`` is zero).

A model of the chains (one stage per cell, one per tile boundary) shifts ``north_w``
into bank ``w_bank`` whenever ``w_shift`` is high; after each load's last shift cell
``(r, c)`` of its bank must hold ``cbuf[w_addr + r]`` partition ``g*n + c%n``
(``docs/contract.md``, WLOAD, before the grid's ``w_in`` multiplexers). ``ready`` is
low from ``t + 1`` until ``t + timing.occupancy`` and high then; ``drained`` low until
``t + timing.done`` and high from the last load's ``done`` on. ``north_feed`` takes
random values outside every load's window: the loader must not use it there.
"""

from __future__ import annotations

import random

import cocotb

from systolica.arch import isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import Instr, Opcode

from tb_base import BlockTB, case_names, pack, pack_fields, unpack

CFG = preset("tiny")
R, C, n, T = CFG.rows, CFG.cols, CFG.tile_size, CFG.tile_rows
SHIFTS = timing.weight_shifts(CFG)
WLOAD = isa.PAYLOAD[Opcode.WLOAD]
FIRST = CFG.latency["cbuf_read"] + 1      # cycles from issue to the first shift
STAGES = timing.skew_max(CFG) + 1         # chain stages per column
ZERO = T                                  # north_feed value of the zero source


def read_slots() -> list[int | None]:
    """Weight row read in cycle ``t + 1 + k`` of a load issued at ``t`` (shifted at
    shift ``k``); None for a conveyor slot."""
    row_at = {timing.skew(CFG, r): r for r in range(R)}
    return [row_at.get(SHIFTS - 1 - k) for k in range(SHIFTS)]


# Every row once, bottom first, and one conveyor slot per tile boundary.
assert [r for r in read_slots() if r is not None] == list(range(R - 1, -1, -1))
assert read_slots().count(None) == T - 1


def route(row: list[int], feed: list[int]) -> list[int]:
    """``north_w`` for one CBUF row: column ``c`` = partition ``g*n + c%n`` with ``g`` =
    ``feed[c//n]``, 0 if that is the zero source."""
    out = []
    for c in range(C):
        g = feed[c // n]
        out.append(row[g * n + c % n] if g < T else 0)
    return out


def wload(w_addr: int, bank: int, feed=(0, 1)) -> dict:
    return dict(w_addr=w_addr, bank=bank, feed=list(feed))


def sequential(*loads, gap: int = 0):
    """Loads each issued when the previous one's occupancy ends (plus ``gap``)."""
    out, t = [], 0
    for a in loads:
        out.append((t, a))
        t += timing.occupancy(CFG, _instr(t, a)) + gap
    return out


def _instr(t: int, a: dict) -> Instr:
    return Instr(Opcode.WLOAD, t, {"w_addr": a["w_addr"], "bank": a["bank"]})


TOP = CFG.cbuf_depth - R
CASES = {
    "plain": [(0, wload(100, 0))],
    "bank1": [(0, wload(37, 1))],
    "feed_swap": [(0, wload(7, 1, (1, 0)))],
    "feed_broadcast": [(0, wload(300, 0, (1, 1))), (15, wload(301, 1, (0, 0)))],
    "feed_zero": [(0, wload(500, 0, (ZERO, 0))), (12, wload(600, 1, (1, ZERO)))],
    "cbuf_edges": sequential(wload(0, 0), wload(TOP, 1, (1, 0))),
    # Alternating banks, each load issued the cycle the previous one's occupancy ends:
    # the first shift of one load follows the last shift of the other directly.
    "back_to_back": sequential(wload(10, 0), wload(20, 1, (1, 0)), wload(30, 0, (0, 0)),
                               wload(40, 1, (ZERO, 1)), wload(50, 0, (1, ZERO)),
                               wload(60, 1)),
    "same_bank_twice": sequential(wload(200, 1), wload(210, 1, (1, 0)), wload(220, 0),
                                  gap=2),
    "gaps": [(0, wload(1000, 0)), (SHIFTS + 1, wload(1100, 1, (1, 1))),
             (2 * SHIFTS + 7, wload(1200, 0, (0, ZERO)))],
}

GROUPS = {
    "routing": ["plain", "bank1", "feed_swap", "feed_broadcast", "feed_zero", "cbuf_edges"],
    "sequences": ["back_to_back", "same_bank_twice", "gaps"],
}
assert sorted(sum(GROUPS.values(), [])) == sorted(CASES)

IDLE = {"issue__valid": 0, "issue__payload": 0, "cbuf_read__data": 0,
        **{("north_feed", j): j for j in range(CFG.tile_cols)}}


class WeightLoaderTB(BlockTB):
    def __init__(self, dut):
        super().__init__(dut)
        # chain[bank][c][stage]: what the grid's column c holds, stage 0 at the top.
        self.chain = [[[0] * STAGES for _ in range(C)] for _ in range(2)]
        self.rdata = 0          # CBUF read data for the next cycle

    async def run(self, instrs, rng) -> None:
        cbuf = [[rng.randrange(-128, 128) for _ in range(R)] for _ in range(CFG.cbuf_depth)]
        base = self.cycle + 1
        at = {base + t: a for t, a in instrs}
        assert len(at) == len(instrs)
        slots = read_slots()
        reads, shifts, feeds, ends = {}, {}, {}, {}
        enabled = set()     # every shift cycle reads, conveyor slots too
        for t, a in at.items():
            for k, row in enumerate(slots):
                enabled.add(t + 1 + k)
                if row is not None:
                    reads[t + 1 + k] = a["w_addr"] + row
                shifts[t + FIRST + k] = a["bank"]
                feeds[t + FIRST + k] = a["feed"]
            ends[t + FIRST + SHIFTS - 1] = a
        end = max(t + timing.done(CFG, _instr(t, a)) for t, a in at.items())
        ready, drained = {}, {}
        while self.cycle < end + 3:
            await self.next_cycle()
            x = self.cycle
            a = at.get(x)
            self.set("issue__valid", int(a is not None))
            # Arguments are don't-care without issue: drive junk.
            self.set("issue__payload", pack_fields(WLOAD, {
                name: a[name] if a else rng.randrange(1 << fld.width) for name, fld in WLOAD}))
            feed = feeds.get(x) or [rng.randrange(T + 1) for _ in range(CFG.tile_cols)]
            for j, g in enumerate(feed):
                self.set("north_feed", g, j)
            rdata = self.rdata
            self.set("cbuf_read__data", rdata)
            await self.settle()
            ready[x], drained[x] = self.get("issue__ready"), self.get("issue__drained")
            raddr = self.get("cbuf_read__addr")
            if x in reads:
                self.expect("cbuf_read__addr", raddr, reads[x])
            en = self.get("cbuf_read__en")
            self.expect("cbuf_read__en", en, int(x in enabled))
            if en:              # without en a memory port keeps its data
                self.rdata = pack(cbuf[raddr % CFG.cbuf_depth], 8)
            north = [self.get_s("north_w", c) for c in range(C)]
            self.expect("north_w", north, route(unpack(rdata, 8, R), feed))
            w_shift = self.get("w_shift")
            self.expect("w_shift", w_shift, int(x in shifts))
            if w_shift:
                w_bank = self.get("w_bank")
                if x in shifts:
                    self.expect("w_bank", w_bank, shifts[x])
                for c in range(C):
                    self.chain[w_bank][c] = [north[c]] + self.chain[w_bank][c][:-1]
            if x in ends:
                self.check_bank(ends[x], cbuf)
        self.check_handshake(CFG, [_instr(t, a) for t, a in at.items()], ready, drained,
                             end)

    def check_bank(self, a: dict, cbuf) -> None:
        """After a load's last shift: every cell of its bank holds its weight."""
        bank = self.chain[a["bank"]]
        got = [[bank[c][timing.skew(CFG, r)] for c in range(C)] for r in range(R)]
        want = [route(cbuf[a["w_addr"] + r], a["feed"]) for r in range(R)]
        for r in range(R):
            self.expect(f"bank {a['bank']} row {r} after WLOAD w_addr={a['w_addr']}",
                        got[r], want[r])


@cocotb.test()
async def run_case(dut):
    tb = WeightLoaderTB(dut)
    await tb.start(IDLE)
    for name in case_names():
        tb.label = f"[{name}] "
        await tb.run(CASES[name], random.Random(name))
    tb.finish()
