"""MatmulUnit (``tiny`` preset, tiny with the feed register, tiny with the ACC's read
latency 2, and the partial-sum exits on ``tiny_tall``'s four tile rows): MATMULs
against Python models of the CBUF read port, the accumulator buffer (read latency
``A`` = 1 or 2, not transparent: a read sees the contents before a write in the same
cycle) and the grid.

The grid model holds two fixed random weight banks and computes ``south_psum`` from
what the unit put on ``west_a`` / ``west_sel``, with the cell timing of the Grid block
test: the value on ``west_a[r]`` at cycle ``y`` meets column ``c`` in cell ``(r, c)``
and its product leaves ``south_psum[c]`` at ``y + skew_max - skew(r) + skew(c) + 2``.
Tile row ``i``'s exit (``exit_psum[i*C + c]``, ``i < T - 1``) sums the rows
``r < (i+1)*n`` only, ``(T-1-i)*(n+1)`` cycles sooner.

For a MATMUL issued at ``t``, row ``i`` of CBUF data arrives at ``t + FEED + i``
(``FEED`` = CBUF read latency + 1, the start of :func:`systolica.arch.timing.mux_use`'s
``west_feed`` window). The checker requires:

* ``cbuf_read.addr`` = ``act_addr + i`` (every partition's) in cycle ``t + 1 + i``;
  ``row_fed`` high exactly in
  the cycles ``t + FEED + i``;
* ``west_a[r]`` = ``cbuf[act_addr + i]`` partition ``g*n + r%n`` (``g`` =
  ``west_feed[r//n]`` in that cycle, 0 for the zero source) and ``west_sel[r]`` = the
  bank, at ``t + EDGE + i + timing.skew(r)`` (``EDGE`` = ``FEED``, one more with the
  feed register);
* ``acc_read.en`` (with its address) and ``acc_write.en`` high exactly in the cycles
  the instructions' effects list an ACC read or write (reads only when accumulating);
* exactly one ACC write per row, at ``t + timing.matmul_pipeline - L + A + i`` to
  ``acc_addr + i`` (``L = timing.exit_lead``: ``early*(n+1)``), of
  ``(accumulate ? acc : 0) + sum`` (``sum`` over the array rows above the exit tile
  row ``T - 1 - early``) with ACC group ``g`` taking column group ``acc_src[g]`` (0
  for the zero source) as in force at ``t + matmul_pipeline - L + i``; the ACC model
  after the run equals the contract's
  semantics applied in instruction order (so MATMULs issued back to back into the
  same rows accumulate, through the forwarding path when they are up to ``A``
  cycles apart);
* ``ready`` in every cycle exactly as the collector order says for the ``early`` on
  the payload (docs/contract.md): after MATMUL ``A`` (issued ``t_A``, ``m_A`` rows,
  ``early`` ``u_A``) high iff ``x >= t_A + m_A + (n+1)*max(0, early - u_A)``
  (``x >= t_A + m_A``: the occupancy); ``drained`` low until ``t + timing.done`` and
  high from the last one's ``done`` on.

``west_feed`` and ``acc_src`` take random values outside every instruction's window,
and the arguments are junk without ``issue``: the unit must not use them then. The
payload's ``early`` between issues is, like the sequencer's head, the next MATMUL's
(always in the cycle before it issues), or junk (``ready`` unchecked if illegal).
"""

from __future__ import annotations

import os
import random

import cocotb

from systolica.arch import isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import Instr, Opcode

from tb_base import (
    BlockTB,
    ReadPort,
    acc_latency,
    case_names,
    pack,
    pack_fields,
    touches,
    unpack,
    wrap32,
)

# the second build (test_blocks.py) has the feed register: every row a cycle later
# into the array and the ACC; the third is TALL (MATMUL_PRESET), for the exits
TALL = preset("tiny_tall")
CFG = acc_latency(preset(os.environ.get("MATMUL_PRESET", "tiny")))
if "MATMUL_FEED_REGISTER" in os.environ:
    CFG = CFG.replace(feed_register=os.environ["MATMUL_FEED_REGISTER"] == "1")
R, C, n, T = CFG.rows, CFG.cols, CFG.tile_size, CFG.tile_rows
TC = CFG.tile_cols
MATMUL = isa.PAYLOAD[Opcode.MATMUL]
FEED = CFG.latency["cbuf_read"] + 1       # cycles from issue to row 0's CBUF data
EDGE = FEED + timing.feed_stages(CFG)     # ... and to its arrival at the west edge
PIPE = timing.matmul_pipeline(CFG)        # issue to the ACC read of row 0
ACC_LAT = CFG.latency["acc_read"]         # the ACC read to the write of the row
SMAX = timing.skew_max(CFG)
GRID_DELAY = [[SMAX - timing.skew(CFG, r) + timing.skew(CFG, c) + 2 for c in range(C)]
              for r in range(R)]          # west_a[r] -> south_psum[c] (square or tall)
EXIT_LEAD = [(T - 1 - i) * (n + 1) for i in range(T)]   # tile row i's exit: sooner


def matmul(act_addr, rows, acc_addr, accumulate=0, bank=0, west_feed=tuple(range(T)),
           acc_src=tuple(range(TC)), **window) -> dict:
    """A MATMUL; ``window`` (conv=1, dh, dw, taps, in_w, in_h, max) makes it walk a
    window with the geometry and tap tables in force when it issues."""
    return dict(act_addr=act_addr, rows=rows, acc_addr=acc_addr, accumulate=accumulate,
                bank=bank, west_feed=list(west_feed), acc_src=list(acc_src), **window)


def convcfg(**geometry) -> dict:
    return dict(kind="convcfg", **geometry)


def taps(table, first, entries) -> dict:
    """Tap table ``table`` entries ``(th, tw)`` for partitions from ``first``."""
    fields = dict(table=table, first=first, count=len(entries))
    for k, (th, tw) in enumerate(entries, start=1):
        fields[f"th{k}"] = isa.signed_field(th, isa.TAP_DELTA_BITS)
        fields[f"tw{k}"] = isa.signed_field(tw, isa.TAP_DELTA_BITS)
    return dict(kind="taps", **fields)


def window_reads(a: dict, geom: dict, table: list) -> list[list[int | None]]:
    """Per row and partition, the CBUF address a window walk reads, or None where the
    pixel lies outside the tile (the pad byte is fed): the contract's formula, walked
    pixel by pixel."""
    out = []
    for i in range(a["rows"]):
        oh, ow = divmod(i, geom["out_w"])
        row = []
        for p in range(R):
            th, tw = table[p]
            ih = oh * geom["sh"] - geom["top"] + a["dh"] + th
            iw = ow * geom["sw"] - geom["left"] + a["dw"] + tw
            inside = 0 <= ih < a["in_h"] and 0 <= iw < a["in_w"]
            row.append(a["act_addr"] + ih * a["in_w"] + iw if inside else None)
        out.append(row)
    return out


def _instr(t: int, a: dict) -> Instr:
    return Instr(Opcode.MATMUL, t, {k: a.get(k, 0) for k in
                                    ("act_addr", "rows", "acc_addr", "accumulate", "bank",
                                     "conv", "max", "in_w", "in_h", "early")})


def activations(row: list[int], west_feed: list[int]) -> list[int]:
    """Array row ``r`` gets partition ``g*n + r%n``, ``g`` = ``west_feed[r//n]``."""
    out = []
    for r in range(R):
        g = west_feed[r // n]
        out.append(row[g * n + r % n] if g < T else 0)
    return out


def acc_route(cols: list[int], acc_src: list[int]) -> list[int]:
    """ACC group ``g`` gets column group ``acc_src[g]`` (0 for the zero source)."""
    out = []
    for g in range(TC):
        src = acc_src[g]
        out += cols[src * n:(src + 1) * n] if src < TC else [0] * n
    return out


def sequential(*instrs, gap: int = 0):
    """MATMULs each issued when the previous one's occupancy ends (plus ``gap``)."""
    out, t = [], 0
    for a in instrs:
        out.append((t, a))
        t += timing.occupancy(CFG, _instr(t, a)) + gap
    return out


def earliest(plan, gap=0, rng=None):
    """MATMULs each issued at the first cycle the collector order allows after the
    one before: ``t_A + m_A + (n+1)*max(0, u_B - u_A)`` (plus up to ``gap``)."""
    out, t, prev = [], 0, None
    for a in plan:
        if prev is not None:
            t += prev["rows"] + (n + 1) * max(0, a.get("early", 0) - prev.get("early", 0))
            t += rng.randrange(gap + 1) if gap else 0
        out.append((t, a))
        prev = a
    return out


def exits_ladder():
    """Each exit going up one tile row at a time, then every step down and up from
    the bottom exit; each MATMUL accumulates onto the previous one's last row (its
    first row is collected the cycle after that row: the forwarding path)."""
    us = [*range(T), *range(T - 1, -1, -1), T - 1, 0, T - 1, T - 1, 0, 0]
    plan, acc = [], 40
    for k, u in enumerate(us):
        rows = 1 + (3 * k) % 5
        plan.append(matmul(100 + 7 * k, rows, acc, accumulate=int(k > 0), bank=k % 2,
                           early=u))
        acc += rows - 1
    return earliest(plan)


def exits_random(seed, count, gap=0):
    """Random MATMULs (exit, rows, routing, bank, overlapping ACC rows)."""
    rng = random.Random(seed)
    plan = []
    for _ in range(count):
        rows = rng.choice([1, 1, 2, 3, 5, 8])
        plan.append(matmul(rng.randrange(CFG.cbuf_depth - rows), rows,
                           rng.randrange(20, 32), accumulate=rng.randrange(2),
                           bank=rng.randrange(2), early=rng.randrange(T),
                           west_feed=[rng.randrange(T + 1) for _ in range(T)],
                           acc_src=[rng.randrange(TC + 1) for _ in range(TC)]))
    return earliest(plan, gap, rng)


Z = TC   # the zero source of west_feed / acc_src (T == TC in the tiny preset)
CASES = {
    "plain": [(0, matmul(100, 10, 20))],
    "accumulate_bank1": [(0, matmul(40, 7, 3, accumulate=1, bank=1))],
    "west_feed_swap": [(0, matmul(9, 6, 50, west_feed=(1, 0)))],
    "west_feed_broadcast_zero": [(0, matmul(70, 5, 60, west_feed=(1, 1))),
                                 (8, matmul(80, 5, 70, accumulate=1, west_feed=(Z, 0)))],
    "acc_src_swap_zero": [(0, matmul(500, 6, 100, acc_src=(1, 0))),
                          (9, matmul(510, 4, 110, accumulate=1, acc_src=(0, Z))),
                          (14, matmul(520, 3, 120, bank=1, acc_src=(1, 1)))],
    "memory_tops": [(0, matmul(CFG.cbuf_depth - 5, 5, CFG.acc_depth - 5, accumulate=1))],
    # Back to back into the same ACC rows: overwrite, then accumulate twice with the
    # other bank and other routings; windows of the routings are contiguous.
    "same_rows": sequential(matmul(200, 6, 30),
                            matmul(210, 6, 30, accumulate=1, bank=1, west_feed=(1, 0)),
                            matmul(220, 6, 30, accumulate=1, acc_src=(1, 0))),
    # rows=1 every cycle into one ACC row: each read misses the previous cycle's write
    # (forwarding), then an overwrite in the middle of the chain.
    "rows1_forward": sequential(matmul(300, 1, 7, accumulate=1),
                                *[matmul(301 + k, 1, 7, accumulate=1, bank=k % 2)
                                  for k in range(5)],
                                matmul(310, 1, 7, accumulate=0),
                                matmul(311, 1, 7, accumulate=1, west_feed=(1, 0)),
                                matmul(312, 1, 8, accumulate=1),
                                matmul(313, 1, 7, accumulate=1)),
    # The next MATMUL's first row is the previous one's last row.
    "tail_overlap": sequential(matmul(400, 3, 10), matmul(403, 4, 12, accumulate=1, bank=1),
                               matmul(407, 2, 15, accumulate=1), matmul(409, 1, 16),
                               matmul(410, 5, 16, accumulate=1)),
    # the first one's rows cross from CBUF bank 1 into bank 2
    "gaps": sequential(matmul(510, 4, 200, accumulate=1), matmul(610, 2, 201, accumulate=1),
                       matmul(620, 3, 199, bank=1), gap=3),
    # Window walks: pads on every side, strides, a tap table with negative offsets, a
    # geometry and a table rewritten while a walk streams (it latched the old ones),
    # max-accumulation, a tile across two CBUF banks.
    "window": [(0, convcfg(out_w=4, sh=2, sw=1, top=1, left=2, pad=0x85)),
               (1, taps(3, 2, [(0, 1), (1, -1), (-1, 2), (2, 0), (0, -2)])),
               (2, matmul(100, 12, 20, conv=1, dh=1, dw=2, taps=3, in_w=5, in_h=6)),
               (5, convcfg(out_w=3, sh=1, sw=3, top=0, left=0, pad=0x10)),
               (6, taps(3, 0, [(1, 1)])),
               (14, matmul(100, 6, 20, accumulate=1, max=1, conv=1, dh=0, dw=1, taps=3,
                           in_w=5, in_h=6, bank=1)),
               (20, matmul(250, 5, 40, accumulate=1, conv=1, dh=2, dw=0, taps=0,
                           in_w=7, in_h=3, west_feed=(1, 0)))],
    # Partial-sum exits (any T >= 2): back to back at the earliest cycle the collector
    # order allows, and with random slack.
    "exits_ladder": exits_ladder(),
    "exits_random": exits_random("exits_random", 24),
    "exits_slack": exits_random("exits_slack", 16, gap=n + 2),
}

GROUPS = {
    "routing": ["plain", "accumulate_bank1", "west_feed_swap", "west_feed_broadcast_zero",
                "acc_src_swap_zero", "memory_tops"],
    "sequences": ["same_rows", "rows1_forward", "tail_overlap", "gaps"],
    "windows": ["window"],
    "exits": ["exits_ladder", "exits_random", "exits_slack"],
}
assert sorted(sum(GROUPS.values(), [])) == sorted(CASES)

IDLE = {"issue__valid": 0, "issue__payload": 0, "issue__took": 0, "issue__now": 0,
        "issue__after": 0, "cbuf_read__data": 0, "acc_read__data": 0,
        "convcfg__valid": 0, "convcfg__payload": 0, "taps__valid": 0, "taps__payload": 0,
        **{("west_feed", i): i for i in range(T)},
        **{("acc_src", g): g for g in range(TC)},
        **{("south_psum", c): 0 for c in range(C)},
        **{("exit_psum", k): 0 for k in range((T - 1) * C)}}


class MatmulTB(BlockTB):
    def __init__(self, dut):
        super().__init__(dut)
        self.west = {}          # cycle -> (west_a list, west_sel list) as seen
        self.cbuf_next = 0      # read data for the next cycle
        self.acc_port = ReadPort(ACC_LAT)

    def grid_psum(self, z: int, weights) -> list[list[int]]:
        """Per tile row ``i``, the sums leaving its conveyor registers at cycle ``z``
        (the last one's: ``south_psum``) from what entered the west edge earlier."""
        out = []
        idle = ([0] * R, [0] * R)
        for i in range(T):
            sums = []
            for c in range(C):
                total = 0
                for r in range((i + 1) * n):
                    a, sel = self.west.get(z - GRID_DELAY[r][c] + EXIT_LEAD[i], idle)
                    total += a[r] * weights[sel[r]][r][c]
                sums.append(wrap32(total))
            out.append(sums)
        return out

    async def run(self, instrs, rng) -> None:
        cbuf = [[rng.randrange(-128, 128) for _ in range(R)] for _ in range(CFG.cbuf_depth)]
        acc = [[rng.randrange(-(1 << 31), 1 << 31) for _ in range(C)]
               for _ in range(CFG.acc_depth)]
        weights = [[[rng.randrange(-128, 128) for _ in range(C)] for _ in range(R)]
                   for _ in range(2)]
        base = self.cycle + 1
        side = {base + t: a for t, a in instrs if "kind" in a}     # CONVCFG, TAPS
        at = {base + t: a for t, a in instrs if "kind" not in a}
        assert len(at) + len(side) == len(instrs)

        # Schedules and the reference, in instruction order.
        want_acc = [list(row) for row in acc]
        reads, fed, lanes, feeds, srcs, writes = {}, set(), {}, {}, {}, []
        claims = {}     # read cycle -> the CBUF banks claimed (docs/contract.md)
        geom = dict(out_w=1, sh=1, sw=1, top=0, left=0, pad=0)
        tables = [[(0, 0)] * R for _ in range(isa.TAP_TABLES)]
        for t, a in sorted({**at, **side}.items()):
            if a.get("kind") == "convcfg":
                geom = {k: v for k, v in a.items() if k != "kind"}
                continue
            if a.get("kind") == "taps":
                for k in range(1, a["count"] + 1):
                    tables[a["table"]][a["first"] + k - 1] = (
                        isa.field_signed(a[f"th{k}"], isa.TAP_DELTA_BITS),
                        isa.field_signed(a[f"tw{k}"], isa.TAP_DELTA_BITS))
                continue
            walk = window_reads(a, geom, tables[a["taps"]]) if a.get("conv") else None
            early = a.get("early", 0)
            lead = timing.exit_lead(CFG, _instr(t, a))
            assert lead == early * (n + 1)
            pad = geom["pad"] - 256 if geom["pad"] >= 128 else geom["pad"]
            shift = CFG.cbuf_bank_shift
            tile_banks = sum(1 << b for b in range(
                a["act_addr"] >> shift,
                ((a["act_addr"] + a.get("in_h", 0) * a.get("in_w", 0) - 1) >> shift) + 1))
            for i in range(a["rows"]):
                claims[t + 1 + i] = (tile_banks if walk is not None
                                     else 1 << ((a["act_addr"] + i) >> shift))
                if walk is None:
                    reads[t + 1 + i] = [a["act_addr"] + i] * R
                    row = cbuf[a["act_addr"] + i]
                else:
                    reads[t + 1 + i] = walk[i]
                    row = [cbuf[addr][p] if addr is not None else pad
                           for p, addr in enumerate(walk[i])]
                fed.add(t + FEED + i)
                feeds[t + FEED + i] = a["west_feed"]
                assert t + PIPE - lead + i not in srcs, "collector order broken"
                srcs[t + PIPE - lead + i] = a["acc_src"]
                act = activations(row, a["west_feed"])
                for r in range(R):
                    key = (t + EDGE + i + timing.skew(CFG, r), r)
                    assert key not in lanes
                    lanes[key] = (act[r], a["bank"])
                cols = [wrap32(sum(act[r] * weights[a["bank"]][r][c]
                                   for r in range(n * (T - early)))) for c in range(C)]
                addr = a["acc_addr"] + i
                new = acc_route(cols, a["acc_src"])
                if a["accumulate"] and a.get("max"):
                    want_acc[addr] = [max(x, y) for x, y in zip(want_acc[addr], new)]
                else:
                    old = want_acc[addr] if a["accumulate"] else [0] * C
                    want_acc[addr] = [wrap32(x + y) for x, y in zip(old, new)]
                writes.append((t + PIPE - lead + ACC_LAT + i, addr, want_acc[addr]))
        end = max(t + timing.done(CFG, _instr(t, a)) for t, a in at.items())
        acc_reads, acc_writes = touches(CFG, Opcode.MATMUL, sorted(at.items()), "acc")

        # The collector order: after A (issued t_A), B may issue from
        # t_A + m_A + (n+1)*max(0, u_B - u_A); the schedule keeps it.
        issued = sorted(at.items())
        for (ta, pa), (tb, pb) in zip(issued, issued[1:]):
            lag = (n + 1) * max(0, pb.get("early", 0) - pa.get("early", 0))
            assert tb >= ta + pa["rows"] + lag, f"MATMUL at {tb} breaks the order"

        got_writes, ready, drained = [], {}, {}
        heads = {}      # cycle -> early on the payload
        while self.cycle < end + 3:
            await self.next_cycle()
            x = self.cycle
            a = at.get(x)
            self.set("issue__valid", int(a is not None))
            junk = {name: rng.randrange(1 << fld.width) for name, fld in MATMUL}
            head = next((b for tb, b in issued if tb > x), None)
            if a is None and head is not None and (at.get(x + 1) or rng.randrange(2)):
                junk["early"] = head.get("early", 0)   # the sequencer's head
            elif rng.randrange(4):
                junk["early"] = rng.randrange(T)
            payload = {name: a.get(name, 0) for name, _ in MATMUL} if a else junk
            heads[x] = payload["early"]
            self.set("issue__payload", pack_fields(MATMUL, payload))
            # the sequencer's two candidate words: the payload is the one ``took``
            # names, the other is any word
            took = rng.randrange(2)
            other = pack_fields(MATMUL, {name: rng.randrange(1 << fld.width)
                                         for name, fld in MATMUL})
            self.set("issue__took", took)
            self.set("issue__after" if took else "issue__now", pack_fields(MATMUL, payload))
            self.set("issue__now" if took else "issue__after", other)
            for port in ("convcfg", "taps"):
                b = side.get(x)
                mine = b is not None and b["kind"] == port
                layout = isa.PAYLOAD[Opcode.CONVCFG if port == "convcfg" else Opcode.TAPS]
                self.set(f"{port}__valid", int(mine))
                self.set(f"{port}__payload", pack_fields(layout, {
                    name: b.get(name, 0) if mine else rng.randrange(1 << fld.width)
                    for name, fld in layout}))
            feed = feeds.get(x) or [rng.randrange(T + 1) for _ in range(T)]
            for i, g in enumerate(feed):
                self.set("west_feed", g, i)
            src = srcs.get(x) or [rng.randrange(TC + 1) for _ in range(TC)]
            for g, s in enumerate(src):
                self.set("acc_src", s, g)
            sums = self.grid_psum(x, weights)
            for c, p in enumerate(sums[T - 1]):
                self.set("south_psum", p, c)
            for i in range(T - 1):
                for c, p in enumerate(sums[i]):
                    self.set("exit_psum", p, i * C + c)
            self.set("cbuf_read__data", self.cbuf_next)
            self.set("acc_read__data", self.acc_port.data)
            await self.settle()

            ready[x], drained[x] = self.get("issue__ready"), self.get("issue__drained")
            # one read address per partition: all equal in a plain (conv = 0) walk
            raddr = [self.get("cbuf_read__addr", p) for p in range(R)]
            if x in reads:
                want = reads[x]      # None: outside the tile, any address (pad is fed)
                self.expect("cbuf_read__addr", [a if w is not None else None
                                                for a, w in zip(raddr, want)], want)
            # the enable exactly in the read cycles, with the claimed banks; a
            # memory port without ``en`` keeps its data
            en = self.get("cbuf_read__en")
            self.expect("cbuf_read__en", en, int(x in reads))
            if x in claims:
                self.expect("cbuf_read__banks", self.get("cbuf_read__banks"), claims[x])
            if en:
                self.cbuf_next = pack([cbuf[a % CFG.cbuf_depth][p]
                                       for p, a in enumerate(raddr)], 8)
            self.expect("row_fed", self.get("row_fed"), int(x in fed))
            west_a = [self.get_s("west_a", r) for r in range(R)]
            west_sel = [self.get("west_sel", r) for r in range(R)]
            self.west[x] = (west_a, west_sel)
            for r in range(R):
                if (x, r) in lanes:
                    self.expect(f"west_a[{r}], west_sel[{r}]", (west_a[r], west_sel[r]),
                                lanes[(x, r)])
            # ACC ports: enabled exactly in the effects' touches (the read only when
            # accumulating); a read sees the contents before this cycle's write, and
            # without en the port keeps its data.
            en = self.get("acc_read__en")
            self.expect("acc_read__en", en, int(x in acc_reads))
            if x in acc_reads:
                self.expect("acc_read__addr", self.get("acc_read__addr"), acc_reads[x])
            self.acc_port.clock(pack(acc[self.get("acc_read__addr") % CFG.acc_depth], 32)
                                if en else None)
            self.expect("acc_write__en", self.get("acc_write__en"), int(x in acc_writes))
            if self.get("acc_write__en"):
                waddr = self.get("acc_write__addr")
                data = unpack(self.get("acc_write__data"), 32, C)
                got_writes.append((x, waddr, data))
                if waddr < CFG.acc_depth:
                    acc[waddr] = data
                else:
                    self.fail(f"ACC write to {waddr} beyond the depth {CFG.acc_depth}")

        self.check_writes(got_writes, writes)
        for addr in range(CFG.acc_depth):
            if acc[addr] != want_acc[addr]:
                self.fail(f"acc[{addr}] after the run: got {acc[addr]}, "
                          f"expected {want_acc[addr]}")
        self.check_ready(issued, ready, heads)
        # drained as check_handshake has it (its ready check assumes the head may
        # issue once the unit's occupancy ends: not so for a later exit)
        self.check_drained(CFG, [_instr(t, a) for t, a in issued], drained, end)

    def check_ready(self, issued, ready, heads) -> None:
        """``ready`` in every cycle whose payload has a legal ``early``: after MATMUL A,
        from ``t_A + m_A + (n+1)*max(0, early - u_A)`` on. And explicitly: low in
        the cycle before a MATMUL B whose exit is above A's issues at its earliest."""
        last = self.cycle
        for x in sorted(ready):
            if heads[x] >= T:
                continue        # ILLEGAL_OPCODE: the sequencer faults before ready
            prev = [(t, a) for t, a in issued if t < x]
            want = 1
            if prev:
                t, a = prev[-1]
                want = int(x >= t + a["rows"]
                           + (n + 1) * max(0, heads[x] - a.get("early", 0)))
            self.cycle = x
            self.expect(f"ready (early {heads[x]} on the payload)", ready[x], want)
        for (ta, pa), (tb, pb) in zip(issued, issued[1:]):
            ua, ub = pa.get("early", 0), pb.get("early", 0)
            if ub > ua and tb == ta + pa["rows"] + (n + 1) * (ub - ua):
                self.cycle = tb - 1
                self.expect(f"ready a cycle before MATMUL {tb} (early {ua} -> {ub})",
                            (heads[tb - 1], ready[tb - 1]), (ub, 0))
        self.cycle = last

    def check_writes(self, got, want) -> None:
        last = self.cycle
        self.expect("number of ACC writes", len(got), len(want))
        for (cycle, addr, data), (w_cycle, w_addr, w_data) in zip(got, want):
            self.cycle = cycle
            self.expect("ACC write (cycle, address)", (cycle, addr), (w_cycle, w_addr))
            self.expect(f"acc[{addr}] written", data, w_data)
        self.cycle = last


@cocotb.test()
async def run_case(dut):
    tb = MatmulTB(dut)
    await tb.start(IDLE)
    for name in case_names():
        tb.label = f"[{name}] "
        await tb.run(CASES[name], random.Random(name))
    tb.finish()
