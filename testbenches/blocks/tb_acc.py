"""Acc (``tiny`` preset: 16 banks of 16 rows of C int32; and with the read latency
2, each bank's output registered): the banked ACC and its crossbar against a Python
model of the memory and of the bank-port rule
(docs/contract.md, "ACC banks").

Clients, as in the chip: three row readers (the matmul unit's accumulate read, the
vector unit's, the DMA's) and three row writers (matmul unit, vector unit, DMA).
Every cycle each client gets a random enable and address.

The checker requires, every cycle:

* ``conflict`` = some bank has two readers with ``en`` on addresses in it, or two
  writers;
* each read (data the read latency later) returns the model's row at that address
  before this cycle's writes (memories are not transparent), unless its bank's read port
  was contested (then any data will do);
* a write lands at the clock edge; two writers on one bank make both rows unknown
  (the crossbar may pick either) until written again.

Cases: ``directed`` (hand-made cycles, each also stating the conflict it must
raise), ``random_free`` (distinct banks per port: no conflict, every read checked),
``random_mixed`` (independent choices: conflicts and clean cycles mixed),
``random_dense`` (two banks only: mostly conflicts, the rows of a contested write
unknown until rewritten).
"""

from __future__ import annotations

import random

import cocotb

from systolica.arch.config import preset

from tb_base import BlockTB, acc_latency, case_names, pack, unpack

CFG = acc_latency(preset("tiny"))
LATENCY = CFG.latency["acc_read"]
C, BANKS, BANK_ROWS, SHIFT = CFG.cols, CFG.acc_banks, CFG.acc_bank_rows, CFG.acc_bank_shift
ROW_READS, ROW_WRITES = 3, 3
CYCLES = 600                      # per random case


def at(bank: int, row: int) -> int:
    """The ACC address of ``row`` of ``bank``."""
    return (bank << SHIFT) | row


def idle() -> dict:
    return {"rr": [(0, 0)] * ROW_READS, "wr": [(0, 0, [0] * C)] * ROW_WRITES}


def cycle(rr=(), wr=(), want=None) -> dict:
    """One directed cycle: ``rr`` = (reader, address), ``wr`` = (writer, address,
    row); ``want`` the conflict the contract says it must raise."""
    c = idle()
    for k, addr in rr:
        c["rr"][k] = (1, addr)
    for k, addr, row in wr:
        c["wr"][k] = (1, addr, row)
    c["want"] = want
    return c


def directed() -> list[dict]:
    def row(a):
        return [(a * 7919 + c * 104729) % (1 << 32) - (1 << 31) for c in range(C)]

    last = BANKS - 1
    return [
        # fill, three banks at once
        cycle(wr=[(0, at(1, 5), row(1)), (1, at(2, 9), row(2)), (2, at(3, 15), row(3))],
              want=False),
        cycle(wr=[(0, at(last, 0), row(4)), (2, at(0, 0), row(5))], want=False),
        # three readers on three banks
        cycle(rr=[(0, at(1, 5)), (1, at(2, 9)), (2, at(3, 15))], want=False),
        # two readers on one bank (different rows, then the same row)
        cycle(rr=[(0, at(1, 5)), (2, at(1, 6))], want=True),
        cycle(rr=[(1, at(2, 9)), (2, at(2, 9))], want=True),
        # a read and a write of one bank use its two ports: no conflict; the read sees
        # the row before the write
        cycle(rr=[(0, at(3, 15))], wr=[(1, at(3, 15), row(6))], want=False),
        cycle(rr=[(1, at(3, 15))], want=False),
        # two writers on one bank; then all three on distinct ones
        cycle(wr=[(0, at(4, 1), row(7)), (2, at(4, 2), row(8))], want=True),
        cycle(wr=[(0, at(4, 1), row(9)), (1, at(5, 1), row(10)), (2, at(4 + 2, 3), row(11))],
              want=False),
        cycle(rr=[(0, at(4, 1)), (1, at(5, 1)), (2, at(last, 0))], want=False),
        # the first and last bank, the last row of a bank and the first of the next
        cycle(rr=[(0, at(0, 0)), (1, at(last, BANK_ROWS - 1)), (2, at(2, 0))], want=False),
        cycle(wr=[(1, at(1, BANK_ROWS - 1), row(12)), (2, at(2, 0), row(13))], want=False),
        cycle(rr=[(0, at(1, BANK_ROWS - 1)), (2, at(2, 0))], want=False),
        cycle(want=False),
    ]


def random_cycle(rng: random.Random, free: bool, banks: int = BANKS) -> dict:
    """Random enables and addresses over the first ``banks`` banks; with ``free`` the
    readers claim distinct banks (so do the writers)."""
    def row():
        return [rng.randrange(-(1 << 31), 1 << 31) for _ in range(C)]

    def pick(count):
        return rng.sample(range(banks), count) if free else \
            [rng.randrange(banks) for _ in range(count)]

    rr = [(int(rng.random() < 0.7), at(b, rng.randrange(BANK_ROWS)))
          for b in pick(ROW_READS)]
    wr = [(int(rng.random() < 0.6), at(b, rng.randrange(BANK_ROWS)), row())
          for b in pick(ROW_WRITES)]
    return {"rr": rr, "wr": wr, "want": None}


CASES = {
    "directed": lambda rng: directed(),
    "random_free": lambda rng: [random_cycle(rng, True) for _ in range(CYCLES)],
    "random_mixed": lambda rng: [random_cycle(rng, False) for _ in range(CYCLES)],
    "random_dense": lambda rng: [random_cycle(rng, False, 2) for _ in range(CYCLES)],
}

IDLE = {**{f"row_read__{k}__en": 0 for k in range(ROW_READS)},
        **{f"row_write__{k}__en": 0 for k in range(ROW_WRITES)}}


class AccTB(BlockTB):
    def __init__(self, dut):
        super().__init__(dut)
        self.mem = [[0] * C for _ in range(CFG.acc_depth)]   # None: not known
        self.checked = {"reads": 0, "conflicts": 0, "clean": 0}

    def drive(self, c: dict) -> None:
        for k, (en, addr) in enumerate(c["rr"]):
            self.set(f"row_read__{k}__en", en)
            self.set(f"row_read__{k}__addr", addr)
        for k, (en, addr, row) in enumerate(c["wr"]):
            self.set(f"row_write__{k}__en", en)
            self.set(f"row_write__{k}__addr", addr)
            self.set(f"row_write__{k}__data", pack(row, 32))

    def model(self, c: dict):
        """The conflict flag, this cycle's reads to check (port, address, row), and
        the writes (address -> row, or None: either writer's)."""
        reads, writes = [0] * BANKS, [0] * BANKS
        for en, addr in c["rr"]:
            reads[addr >> SHIFT] += en
        for en, addr, _ in c["wr"]:
            writes[addr >> SHIFT] += en
        conflict = any(n > 1 for n in reads + writes)
        want = [(f"row_read__{k}__data", addr, self.mem[addr])
                for k, (en, addr) in enumerate(c["rr"])
                if en and reads[addr >> SHIFT] == 1 and self.mem[addr] is not None]
        landed = {addr: list(row) if writes[addr >> SHIFT] == 1 else None
                  for en, addr, row in c["wr"] if en}
        return conflict, want, landed

    async def run(self, cycles: list[dict]) -> None:
        pending = [[] for _ in range(LATENCY)]          # the reads of the last cycles
        for c in cycles + [idle()] * LATENCY:
            await self.next_cycle()
            self.drive(c)
            await self.settle()
            for port, addr, want in pending.pop(0):     # the reads LATENCY cycles ago
                self.expect(f"{port} (address {addr})", unpack(self.get(port), 32, C), want)
                self.checked["reads"] += 1
            conflict, reads, landed = self.model(c)
            pending.append(reads)
            if c.get("want") is not None:
                assert conflict == c["want"], f"directed cycle {self.cycle}: model says {conflict}"
            self.expect("conflict", self.get("conflict"), int(conflict))
            self.checked["conflicts" if conflict else "clean"] += 1
            self.mem_update(landed)

    def mem_update(self, landed: dict) -> None:
        for addr, row in landed.items():
            self.mem[addr] = row


@cocotb.test()
async def run_case(dut):
    tb = AccTB(dut)
    await tb.start(IDLE)
    for name in case_names():
        tb.label = f"[{name}] "
        tb.checked = dict.fromkeys(tb.checked, 0)
        await tb.run(CASES[name](random.Random(name)))
        dut._log.info(f"{name}: {tb.checked}")
        if name != "random_free" and not tb.checked["conflicts"]:
            tb.fail("no cycle with a conflict")
        if not tb.checked["clean"] or not tb.checked["reads"]:
            tb.fail(f"too little checked: {tb.checked}")
    tb.finish()
