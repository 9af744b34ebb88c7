"""VectorUnit (``tiny`` preset, and tiny with the ACC's read latency 2): VRUN rows
from a model of the accumulator memory (read latency 1 or 2) through bias, requantisation,
ReLU and clamping (or, with
``params``, per-column bias, multiplier, shift and clamp bounds) to the CBUF (routed
by ``wb_src``) or back to the ACC.

The checker compares every write with the formula of ``docs/contract.md``
(:func:`vrun_row`), requires the writes in instruction and row order inside
``[t, t + timing.done)``, ``acc_read.en`` (with its address) and ``acc_write.en``
high exactly in the cycles the instructions' effects list an ACC read or write (the
bias row only with ``use_bias`` or ``params``: the bank port is busy then), ``ready``
low from ``t + 1`` until ``t + timing.occupancy``
and high then, and ``drained`` low until ``t + timing.done`` and high from the last
instruction's ``done`` on.
"""

from __future__ import annotations

import random

import cocotb

from systolica.arch import isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import Instr, Opcode

from tb_base import (
    BlockTB,
    ReadPort,
    acc_latency,
    pack,
    pack_fields,
    requested_cases,
    to_signed,
    touches,
    unpack,
    wrap32,
)

CFG = acc_latency(preset("tiny"))
R, C, n, T = CFG.rows, CFG.cols, CFG.tile_size, CFG.tile_rows
VRUN = isa.PAYLOAD[Opcode.VRUN]


def vrun_row(x_row, par_rows, a: dict) -> list[int]:
    """One row of VRUN, per column, exactly as ``docs/contract.md`` states it;
    ``par_rows`` are the four ACC rows from ``bias_addr`` (only the first is used
    without ``params``)."""
    out = []
    zp = to_signed(a["zp"], 8)
    for c in range(C):
        if a.get("params"):
            x = wrap32(x_row[c] + par_rows[0][c])
            mult, shift = par_rows[1][c] & 0xFFFF, par_rows[2][c] & 63
            lo = to_signed(par_rows[3][c] & 0xFF, 8)
            hi = to_signed((par_rows[3][c] >> 8) & 0xFF, 8)
            y = (x * mult + ((1 << (shift - 1)) if shift else 0)) >> shift
            out.append(min(max(y + zp, lo), hi))
            continue
        bias_row = par_rows[0]
        x = wrap32(x_row[c] + bias_row[c]) if a["use_bias"] else x_row[c]
        if a["requant"]:
            shift = a["shift"]
            y = (x * a["mult"] + ((1 << (shift - 1)) if shift else 0)) >> shift
            y = max(-128, min(127, y + zp))
            if a["relu"]:
                y = max(y, zp)
        else:
            y = x
            if a["relu"]:
                y = max(y, 0)
            if not a["to_acc"]:
                y = max(-128, min(127, y))
        out.append(y)
    return out


def route_writeback(y: list[int], wb_src: list[int]) -> list[int]:
    """CBUF partition group ``g`` gets column group ``wb_src[g]`` (0 for ``zero``)."""
    out = []
    for g in range(T):
        src = wb_src[g]
        out += y[src * n:(src + 1) * n] if src < CFG.tile_cols else [0] * n
    return out


def _args(**kw) -> dict:
    base = dict(src=0, rows=1, dst=0, bias_addr=0, use_bias=0, to_acc=0, requant=0,
                relu=0, mult=1, shift=0, zp=0, params=0, crop=0)
    base.update(kw)
    return base


def _acc_rows(rng, kind="mixed"):
    """Initial ACC contents: address -> C int32 values."""
    def value():
        pick = rng.random()
        if kind == "extreme" or pick < 0.15:
            return rng.choice([-(1 << 31), (1 << 31) - 1, -1, 0, 1, 127, -128, 128, -129])
        if pick < 0.6:
            return rng.randrange(-4096, 4096)
        return rng.randrange(-(1 << 31), 1 << 31)
    return {a: [value() for _ in range(C)] for a in range(CFG.acc_depth)}


def case_requant(rng, relu):
    return [(0, _args(src=10, rows=12, dst=100, bias_addr=3, use_bias=1, requant=1,
                      relu=relu, mult=rng.randrange(1, 1 << 16), shift=rng.randrange(8, 30),
                      zp=rng.randrange(256)))], [0, 1]


def case_int8(rng):
    return [(0, _args(src=20, rows=9, dst=7, bias_addr=200, use_bias=1, relu=0)),
            (30, _args(src=40, rows=9, dst=30, relu=1))], [0, 1]


def case_int32_to_acc(rng):
    return [(0, _args(src=0, rows=10, dst=128, bias_addr=255, use_bias=1, to_acc=1)),
            (25, _args(src=50, rows=10, dst=160, to_acc=1, relu=1)),
            (50, _args(src=60, rows=5, dst=180, to_acc=1, requant=1, relu=1, mult=300,
                       shift=9, zp=0xF0))], [0, 1]


def case_shift_edges(rng):
    return [(0, _args(src=0, rows=6, dst=0, requant=1, mult=0xFFFF, shift=0, zp=0)),
            (20, _args(src=0, rows=6, dst=10, requant=1, mult=0xFFFF, shift=63, zp=5)),
            (40, _args(src=0, rows=6, dst=20, requant=1, mult=0xFFFF, shift=47, zp=0x80,
                       relu=1)),
            (60, _args(src=6, rows=6, dst=30, requant=1, mult=1, shift=1, zp=0x7F)),
            (80, _args(src=12, rows=6, dst=40, requant=1, mult=3, shift=2, zp=0x81,
                       use_bias=1, bias_addr=40))], [1, 0]


def case_routing(wb_src):
    def make(rng):
        return [(0, _args(src=30, rows=8, dst=300, use_bias=1, bias_addr=31, requant=1,
                          mult=77, shift=7, zp=3))], wb_src
    return make


def case_back_to_back(rng):
    """Each VRUN issues the cycle its predecessor's occupancy ends, with other
    arguments, so rows of two instructions share the pipeline."""
    instrs, t = [], 0
    for args in (
            _args(src=0, rows=5, dst=50, use_bias=1, bias_addr=9, requant=1, mult=900,
                  shift=12, zp=250, relu=1),
            _args(src=5, rows=1, dst=60, to_acc=1, use_bias=1, bias_addr=8),
            _args(src=6, rows=4, dst=61, relu=1),
            _args(src=10, rows=7, dst=200, to_acc=1, requant=1, mult=12345, shift=20,
                  zp=0x10),
            _args(src=17, rows=3, dst=70, use_bias=1, bias_addr=100, requant=1, mult=2,
                  shift=0, zp=0)):
        instrs.append((t, args))
        t += timing.occupancy(CFG, Instr(Opcode.VRUN, t, args))
    return instrs, [0, 1]


def _param_rows(rng, at: int) -> dict:
    """Random per-column parameters for the four ACC rows from ``at``: bias, multiplier
    (sometimes with high bits set, which the unit ignores), shift, clamp bounds (some
    columns with ``lo > hi`` or ``lo == hi``), edge values included."""
    junk = lambda: rng.choice([0, 0, 0, rng.randrange(1, 1 << 15) << 16])  # noqa: E731
    acc = {}
    acc[at] = [rng.randrange(-(1 << 31), 1 << 31) if rng.random() < 0.3
               else rng.randrange(-5000, 5000) for _ in range(C)]
    acc[at + 1] = [to_signed(junk() | rng.choice([0, 1, 0xFFFF, rng.randrange(1 << 16)]), 32)
                   for _ in range(C)]
    acc[at + 2] = [rng.choice([0, 1, 63, rng.randrange(64)]) | junk() for _ in range(C)]
    clamp = []
    for _ in range(C):
        lo, hi = sorted(rng.randrange(-128, 128) for _ in range(2))
        lo, hi = rng.choice([(lo, hi), (lo, hi), (-128, 127), (0, 127), (hi, lo), (lo, lo)])
        clamp.append(to_signed(junk() | (lo & 0xFF) | (hi & 0xFF) << 8, 32))
    acc[at + 3] = clamp
    return acc


def case_params(rng):
    """Per-column parameters; then back to back: a plain VRUN, a second params VRUN
    with other rows, a plain one into the ACC, each issued at its predecessor's
    occupancy, so both kinds share the pipeline and the parameter registers are
    rewritten while rows of the one before are in flight."""
    instrs, t = [], 0
    for args in [
            _args(src=0, rows=9, dst=50, bias_addr=40, requant=1, params=1, zp=rng.randrange(256)),
            _args(src=9, rows=3, dst=60, bias_addr=41, use_bias=1, requant=1, mult=900,
                  shift=12, zp=250, relu=1),
            _args(src=12, rows=1, dst=70, bias_addr=200, requant=1, params=1, zp=0x80),
            _args(src=13, rows=5, dst=71, bias_addr=200, requant=1, params=1, use_bias=1,
                  mult=7, shift=3, zp=3),     # use_bias, mult, shift unused with params
            _args(src=18, rows=4, dst=220, to_acc=1, use_bias=1, bias_addr=201),
            _args(src=22, rows=2, dst=80, bias_addr=40, requant=1, params=1)]:
        instrs.append((t, args))
        t += timing.occupancy(CFG, Instr(Opcode.VRUN, t, args))
    return instrs, [0, 1], {**_param_rows(rng, 40), **_param_rows(rng, 200)}


def case_params_routed(rng):
    return ([(0, _args(src=100, rows=12, dst=10, bias_addr=7, requant=1, params=1,
                       zp=0x7F))], [1, 1], _param_rows(rng, 7))


def case_fused_crop(rng):
    """Crops: every row written also lands in the UBUF at its address mod
    ubuf_rows, in the same cycle; the second one's image wraps round the UBUF's end;
    a plain VRUN between them writes no UBUF row."""
    U = CFG.ubuf_rows
    instrs, t = [], 0
    for args in [_args(src=0, rows=6, dst=300, requant=1, mult=5, shift=3, crop=1),
                 _args(src=6, rows=3, dst=40, relu=1),
                 _args(src=9, rows=9, dst=3 * U - 4, bias_addr=12, use_bias=1, crop=1)]:
        instrs.append((t, args))
        t += timing.occupancy(CFG, Instr(Opcode.VRUN, t, args))
    return instrs, [1, 0]


CASES = {
    "requant_relu": lambda rng: case_requant(rng, 1),
    "requant": lambda rng: case_requant(rng, 0),
    "int8_clamp": case_int8,
    "int32_to_acc": case_int32_to_acc,
    "shift_edges": case_shift_edges,
    "wb_swap": case_routing([1, 0]),
    "wb_broadcast": case_routing([1, 1]),
    "wb_zero": case_routing([2, 0]),
    "back_to_back": case_back_to_back,
    "params": case_params,
    "params_routed": case_params_routed,
    "fused_crop": case_fused_crop,
}


class VpuTB(BlockTB):
    def __init__(self, dut, acc: dict, wb_src: list[int]):
        super().__init__(dut)
        self.acc = acc
        self.wb_src = wb_src
        self.writes: list[tuple[int, str, int, list[int]]] = []   # cycle, mem, addr, data

    async def run(self, instrs) -> None:
        idle = {"issue__valid": 0, "issue__payload": 0, "acc_read__data": 0,
                "ubuf_base": CFG.ubuf_base, "ubuf_rows": CFG.ubuf_rows}
        idle.update({("wb_src", g): v for g, v in enumerate(self.wb_src)})
        await self.start(idle)
        expected = self.expected_writes(instrs)
        end = max(t + timing.done(CFG, Instr(Opcode.VRUN, t, a)) for t, a in instrs)
        at = {t: a for t, a in instrs}
        # the ACC read and write ports: enabled exactly in the effects' touches
        acc_reads, acc_writes = touches(CFG, Opcode.VRUN, instrs, "acc")
        ready, drained = {}, {}
        port = ReadPort(CFG.latency["acc_read"])
        for _ in range(end + 4):
            await self.next_cycle()
            t = self.cycle
            self.set("issue__valid", int(t in at))
            self.set("issue__payload", pack_fields(VRUN, at[t]) if t in at else 0)
            self.set("acc_read__data", port.data)
            await self.settle()
            ready[t], drained[t] = self.get("issue__ready"), self.get("issue__drained")
            en = self.get("acc_read__en")
            self.expect("acc_read__en", en, int(t in acc_reads))
            if t in acc_reads:
                self.expect("acc_read__addr", self.get("acc_read__addr"), acc_reads[t])
            # the row before this cycle's write; without en the data stays
            port.clock(pack(self.acc[self.get("acc_read__addr")], 32) if en else None)
            self.expect("acc_write__en", self.get("acc_write__en"), int(t in acc_writes))
            if self.get("cbuf_write__en"):
                self.writes.append((t, "cbuf", self.get("cbuf_write__addr"),
                                    unpack(self.get("cbuf_write__data"), 8, R)))
            if self.get("crop_write__en"):
                self.writes.append((t, "ubuf", self.get("crop_write__addr"),
                                    unpack(self.get("crop_write__data"), 8, R)))
            if self.get("acc_write__en"):
                data = unpack(self.get("acc_write__data"), 32, C)
                self.writes.append((t, "acc", self.get("acc_write__addr"), data))
                self.acc[self.get("acc_write__addr")] = data
        self.check_writes(instrs, expected)
        self.check_handshake(CFG, [Instr(Opcode.VRUN, t, a) for t, a in instrs], ready,
                             drained, end)

    def expected_writes(self, instrs) -> list[tuple[int, str, int, list[int]]]:
        """(instruction index, memory, address, data), from the initial ACC."""
        out = []
        for k, (_, a) in enumerate(instrs):
            for i in range(a["rows"]):
                y = vrun_row(self.acc[a["src"] + i],
                             [self.acc[(a["bias_addr"] + k) % CFG.acc_depth]
                              for k in range(4)], a)
                if a["to_acc"]:
                    out.append((k, "acc", a["dst"] + i, y))
                else:
                    row = route_writeback(y, self.wb_src)
                    out.append((k, "cbuf", a["dst"] + i, row))
                    if a["crop"]:
                        out.append((k, "ubuf", CFG.ubuf_base + (a["dst"] + i) %
                                    CFG.ubuf_rows, row))
        return out

    def check_writes(self, instrs, expected) -> None:
        self.expect("number of writes", len(self.writes), len(expected))
        row_cycle = None    # the cycle of the CBUF write a fused crop goes with
        for (cycle, mem, addr, data), (k, want_mem, want_addr, want) in zip(self.writes, expected):
            self.cycle = cycle
            t, a = instrs[k]
            done = timing.done(CFG, Instr(Opcode.VRUN, t, a))
            if not t <= cycle < t + done:
                self.fail(f"write of instruction {k} (issued {t}) outside [{t}, {t + done})")
            self.expect(f"write target of instruction {k}", (mem, addr), (want_mem, want_addr))
            if mem == "ubuf":       # the fused crop: in the cycle of its CBUF write
                self.expect(f"crop cycle of instruction {k}", cycle, row_cycle)
            row_cycle = cycle
            self.expect(f"{mem}[{addr}]", data, want)


@cocotb.test()
@cocotb.parametrize(case=requested_cases())
async def run_case(dut, case):
    rng = random.Random(case)
    acc = _acc_rows(rng)
    instrs, wb_src, *rows = CASES[case](rng)     # rows: ACC rows a case sets itself
    for r in rows:
        acc.update(r)
    tb = VpuTB(dut, acc, wb_src)
    await tb.run(instrs)
    assert tb.writes
    tb.finish()
