"""Dma (``tiny`` preset, a 3x1 grid, and tiny with the ACC's read latency 2): all four
transfer kinds with strides, against Python models of the DRAM (``mem``: read data
the cycle after ``re``) and of the CBUF and ACC ports (``cbuf_read`` ...: read
latency 1, the ACC's 1 or 2; writes at the clock edge).

The checker compares the final DRAM, CBUF and ACC with the functional semantics of
``docs/contract.md`` applied in instruction order; counts the words moved through
``mem.re`` / ``mem.we`` (the chip's byte counters count exactly those); requires every
memory access of an instruction inside ``[t, t + timing.done)``, the CBUF and ACC
read enables and the ACC write enable (with the addresses) exactly in the cycles the
effects list a touch of that buffer, ``issue.ready`` low
from ``t + 1`` until ``t + timing.occupancy`` and high then, and ``issue.drained`` low
until ``t + timing.done`` and high after the last one.
"""

from __future__ import annotations

import os
import random

import cocotb

from systolica.arch import isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Instr, Opcode

from tb_base import BlockTB, ReadPort, acc_latency, pack_fields, requested_cases, touches

# the second build (test_blocks.py) is a 3x1 grid: an ACC row of 4 int32 (16 bytes) in
# two 12-byte words, the second padded (ChipConfig.acc_row_words)
PADDED = preset("tiny").replace(name="tiny_3x1", tile_rows=3, tile_cols=1)
# the third, tiny with the ACC's read latency 2 (ACC_READ_LATENCY): an ACC store's
# words a cycle later
CFG = acc_latency(PADDED if os.environ.get("DMA_PADDED_ROWS") == "1" else preset("tiny"))
WORD_BITS = 8 * CFG.dram_word_bytes
WORDS = CFG.acc_row_words
DMA = isa.PAYLOAD[Opcode.DMA]
WMASK = (1 << WORD_BITS) - 1


def dma(kind, dram_addr, dram_stride, buf_addr, rows) -> dict:
    return dict(kind=int(kind), dram_addr=dram_addr, dram_stride=dram_stride,
                buf_addr=buf_addr, rows=rows)


def reference(mems: dict, a: dict) -> None:
    """One DMA instruction on ``mems`` (``dram``, ``cbuf``, ``acc``: address -> int)."""
    dram, cbuf, acc = mems["dram"], mems["cbuf"], mems["acc"]
    for i in range(a["rows"]):
        base = a["dram_addr"] + i * a["dram_stride"]
        buf = a["buf_addr"] + i
        kind = DmaKind(a["kind"])
        if kind is DmaKind.LOAD_CBUF:
            cbuf[buf] = dram[base]
        elif kind is DmaKind.STORE_CBUF:
            dram[base] = cbuf[buf]
        elif kind is DmaKind.LOAD_ACC:
            acc[buf] = sum(dram[base + k] << (WORD_BITS * k)
                           for k in range(WORDS)) & ((1 << 32 * CFG.cols) - 1)
        else:
            for k in range(WORDS):
                dram[base + k] = (acc[buf] >> (WORD_BITS * k)) & WMASK


def sequential(*instrs):
    """Instructions issued one after another, each when the previous occupancy ends."""
    out, t = [], 0
    for a in instrs:
        out.append((t, a))
        t += timing.occupancy(CFG, Instr(Opcode.DMA, t, a))
    return out


TOP = CFG.dram_words
CASES = {
    "load_cbuf": [(0, dma(DmaKind.LOAD_CBUF, 100, 1, 5, 12))],
    "load_cbuf_strided": [(0, dma(DmaKind.LOAD_CBUF, 7, 3, 1000, 9))],
    "load_cbuf_stride0": [(0, dma(DmaKind.LOAD_CBUF, 42, 0, 64, 4))],
    "store_cbuf": [(0, dma(DmaKind.STORE_CBUF, 200, 2, 30, 10))],
    "load_acc": [(0, dma(DmaKind.LOAD_ACC, 300, WORDS, 10, 6))],
    "load_acc_strided": [(0, dma(DmaKind.LOAD_ACC, 301, 7, 100, 5))],
    "store_acc": [(0, dma(DmaKind.STORE_ACC, 400, WORDS, 20, 6))],
    "store_acc_strided": [(0, dma(DmaKind.STORE_ACC, 500, 11, 200, 4))],
    "single_rows": sequential(dma(DmaKind.LOAD_CBUF, 1, 0, 0, 1),
                              dma(DmaKind.STORE_CBUF, 2, 0, 9, 1),
                              dma(DmaKind.LOAD_ACC, 3, 0, 250, 1),
                              dma(DmaKind.STORE_ACC, 10, 0, 251, 1)),
    "memory_tops": sequential(
        dma(DmaKind.LOAD_CBUF, TOP - 5, 1, CFG.cbuf_depth - 5, 5),
        dma(DmaKind.STORE_ACC, TOP - 2 * WORDS - 8, WORDS + 4, CFG.acc_depth - 2, 2)),
    # the top of the 24-bit word address (base's 256 MiB): the DMA's addresses do not
    # wrap below it
    "address_field_top": sequential(
        dma(DmaKind.LOAD_CBUF, (1 << isa.DRAM_ADDR_BITS) - 5, 1, 40, 5),
        dma(DmaKind.STORE_ACC, (1 << isa.DRAM_ADDR_BITS) - 2 * WORDS - 3, WORDS + 3, 7, 2)),
    "back_to_back": sequential(
        dma(DmaKind.LOAD_CBUF, 1000, 1, 0, 5),
        dma(DmaKind.LOAD_ACC, 2000, 5, 0, 3),
        dma(DmaKind.STORE_CBUF, 3000, 3, 500, 4),
        dma(DmaKind.STORE_ACC, 4000, WORDS, 100, 3),
        dma(DmaKind.LOAD_CBUF, 5000, 2, 600, 2),
        dma(DmaKind.STORE_ACC, 6000, 9, 110, 2),
        dma(DmaKind.LOAD_ACC, 7000, WORDS, 120, 2),
        dma(DmaKind.STORE_CBUF, 8000, 1, 700, 3)),
    "with_gaps": [(0, dma(DmaKind.STORE_CBUF, 50, 1, 1, 3)),
                  (9, dma(DmaKind.LOAD_ACC, 60, 4, 3, 2)),
                  (25, dma(DmaKind.STORE_ACC, 80, 4, 3, 1))],
}


class Memories:
    """DRAM, CBUF and ACC as sparse dicts with random initial contents."""

    def __init__(self, rng):
        self.rng = rng
        self.mems = {"dram": {}, "cbuf": {}, "acc": {}}
        self.initial = {"dram": {}, "cbuf": {}, "acc": {}}   # contents before the run
        self.bits = {"dram": WORD_BITS, "cbuf": 8 * CFG.rows, "acc": 32 * CFG.cols}

    def _touch(self, mem: str, addr: int) -> None:
        if addr not in self.initial[mem]:
            self.initial[mem][addr] = self.mems[mem][addr] = self.rng.getrandbits(self.bits[mem])

    def read(self, mem: str, addr: int) -> int:
        self._touch(mem, addr)
        return self.mems[mem][addr]

    def write(self, mem: str, addr: int, value: int) -> None:
        self._touch(mem, addr)
        self.mems[mem][addr] = value


class DmaTB(BlockTB):
    def __init__(self, dut, rng):
        super().__init__(dut)
        self.rng = rng
        self.mem = Memories(rng)
        self.accesses: list[tuple[int, str]] = []     # cycle, what
        self.reads = self.writes = 0

    async def run(self, instrs) -> None:
        # Touch every address the reference reads so both sides start equal.
        for _, a in instrs:
            for i in range(a["rows"]):
                base = a["dram_addr"] + i * a["dram_stride"]
                for k in range(WORDS):
                    if base + k < CFG.dram_words:
                        self.mem.read("dram", base + k)
                self.mem.read("cbuf", a["buf_addr"] + i)
                self.mem.read("acc", (a["buf_addr"] + i) % CFG.acc_depth)

        await self.start({"issue__valid": 0, "issue__payload": 0, "mem__rdata": 0,
                          "cbuf_read__data": 0, "acc_read__data": 0})
        at = {t: a for t, a in instrs}
        end = max(t + timing.done(CFG, Instr(Opcode.DMA, t, a)) for t, a in instrs)
        ready, drained = {}, {}
        mem_next = cbuf_next = 0
        acc_port = ReadPort(CFG.latency["acc_read"])
        # the CBUF read port is enabled exactly in a STORE_CBUF's read cycles
        cbuf_reads = {t + 1 + i for t, a in instrs if a["kind"] == DmaKind.STORE_CBUF
                      for i in range(a["rows"])}
        # the ACC's ports exactly in the effects' touches (one row every acc_row_words
        # cycles: a store's read with the row's first word, a load's write with its last)
        acc_reads, acc_writes = touches(CFG, Opcode.DMA, instrs, "acc")
        for _ in range(end + 4):
            await self.next_cycle()
            t = self.cycle
            self.set("issue__valid", int(t in at))
            self.set("issue__payload", pack_fields(DMA, at[t]) if t in at else 0)
            self.set("mem__rdata", mem_next)
            self.set("cbuf_read__data", cbuf_next)
            self.set("acc_read__data", acc_port.data)
            await self.settle()
            ready[t], drained[t] = self.get("issue__ready"), self.get("issue__drained")
            # Read ports answer next cycle; a DRAM without a read returns junk.
            if self.get("mem__re"):
                mem_next = self.mem.read("dram", self.get("mem__addr"))
                self.reads += 1
                self.accesses.append((t, f"mem_re @{self.get('mem__addr')}"))
            else:
                mem_next = self.rng.getrandbits(WORD_BITS)
            cbuf_en = self.get("cbuf_read__en")
            self.expect("cbuf_read__en", cbuf_en, int(t in cbuf_reads))
            if cbuf_en:         # without en a memory port keeps its data
                cbuf_next = self.mem.read("cbuf", self.get("cbuf_read__addr") % CFG.cbuf_depth)
            acc_en = self.get("acc_read__en")
            self.expect("acc_read__en", acc_en, int(t in acc_reads))
            if t in acc_reads:
                self.expect("acc_read__addr", self.get("acc_read__addr"), acc_reads[t])
            acc_port.clock(self.mem.read("acc", self.get("acc_read__addr") % CFG.acc_depth)
                           if acc_en else None)
            self.expect("acc_write__en", self.get("acc_write__en"), int(t in acc_writes))
            for we, addr, data, mem in (("mem__we", "mem__addr", "mem__wdata", "dram"),
                                        *((f"{b}_write__en", f"{b}_write__addr",
                                           f"{b}_write__data", b) for b in ("cbuf", "acc"))):
                if self.get(we):
                    self.mem.write(mem, self.get(addr), self.get(data))
                    self.accesses.append((t, f"{we} @{self.get(addr)}"))
                    self.writes += mem == "dram"
        # The reference runs on everything the run touched, so an unexpected write
        # anywhere shows as a difference.
        expected = {k: dict(v) for k, v in self.mem.initial.items()}
        for _, a in instrs:
            reference(expected, a)
        self.check(instrs, expected, ready, drained, end)

    def check(self, instrs, expected, ready, drained, end) -> None:
        got = self.mem.mems
        for name in ("dram", "cbuf", "acc"):
            for addr in sorted(set(expected[name]) | set(got[name])):
                want = expected[name].get(addr)
                have = got[name].get(addr)
                if have != want:
                    self.fail(f"{name}[{addr}]: got {have:#x}, expected {want:#x}"
                              if have is not None and want is not None
                              else f"{name}[{addr}]: got {have}, expected {want}")
        loads = [a for _, a in instrs if a["kind"] in (DmaKind.LOAD_CBUF, DmaKind.LOAD_ACC)]
        stores = [a for _, a in instrs
                  if a["kind"] in (DmaKind.STORE_CBUF, DmaKind.STORE_ACC)]
        words = lambda group: sum(timing.dma_words(CFG, a["kind"], a["rows"]) for a in group)
        self.expect("DRAM words read (mem_re cycles)", self.reads, words(loads))
        self.expect("DRAM words written (mem_we cycles)", self.writes, words(stores))

        issued = [Instr(Opcode.DMA, t, a) for t, a in instrs]
        self.check_handshake(CFG, issued, ready, drained, end)
        windows = [(i.cycle, i.cycle + timing.done(CFG, i)) for i in issued]
        for cycle, what in self.accesses:
            if not any(lo <= cycle < hi for lo, hi in windows):
                self.cycle = cycle
                self.fail(f"{what} outside every instruction's [t, t + done)")


@cocotb.test()
@cocotb.parametrize(case=requested_cases())
async def run_case(dut, case):
    tb = DmaTB(dut, random.Random(case))
    await tb.run(CASES[case])
    tb.finish()
