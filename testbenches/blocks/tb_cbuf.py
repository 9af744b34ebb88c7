"""Cbuf (``tiny`` preset: 8 partitions, 8 banks of 256 rows): the banked CBUF and its
crossbar against a Python model of the memory and of the bank-port rule
(docs/contract.md, "CBUF banks").

Clients, as in the chip: two row readers (the weight loader's and the DMA's port),
one partitioned reader (the matmul feeder: an address per partition and a mask of
claimed banks) and two row writers (DMA, vector unit). Every cycle each client gets
a random enable and address; the partitioned reader a mask of one to three banks and
per partition an address in one of them (now and then outside every claimed bank:
a pad pixel, whose byte is not checked).

The checker requires, every cycle:

* ``conflict`` = some bank has two claims on its read port (a row reader with ``en``
  claims the bank of its address, the partitioned reader with ``en`` every bank of
  its mask) or two on its write port;
* each read (data the next cycle) returns, per partition, the model's byte at that
  address before this cycle's writes (memories are not transparent), unless its
  bank's read port was contested (then any data will do);
* a write lands at the clock edge; two writers on one bank make both rows unknown
  (the crossbar may pick either) until written again.

Cases: ``directed`` (hand-made cycles, each also stating the conflict it must
raise), ``random_free`` (distinct banks per port: no conflict, every read checked),
``random_mixed`` (independent choices: conflicts and clean cycles mixed).
"""

from __future__ import annotations

import random

import cocotb

from systolica.arch.config import preset

from tb_base import BlockTB, case_names, pack, unpack

CFG = preset("tiny")
R, BANKS, BANK_ROWS, SHIFT = CFG.rows, CFG.cbuf_banks, CFG.cbuf_bank_rows, CFG.cbuf_bank_shift
ROW_READS, PART_READS, ROW_WRITES = 2, 1, 2
CYCLES = 600                      # per random case


def at(bank: int, row: int) -> int:
    """The CBUF address of ``row`` of ``bank``."""
    return (bank << SHIFT) | row


def idle() -> dict:
    return {"rr": [(0, 0)] * ROW_READS, "pr": (0, 0, [0] * R),
            "wr": [(0, 0, [0] * R)] * ROW_WRITES}


def cycle(rr=(), pr=None, wr=(), want=None) -> dict:
    """One directed cycle: ``rr`` / ``wr`` by client index, ``pr`` = (mask, addrs);
    ``want`` the conflict the contract says it must raise."""
    c = idle()
    for k, addr in rr:
        c["rr"][k] = (1, addr)
    if pr is not None:
        c["pr"] = (1, *pr)
    for k, addr, row in wr:
        c["wr"][k] = (1, addr, row)
    c["want"] = want
    return c


def mask(*banks: int) -> int:
    return sum(1 << b for b in banks)


def directed() -> list[dict]:
    rows = {a: [(a * 7 + p * 13) % 256 - 128 for p in range(R)]
            for a in (at(1, 5), at(1, 6), at(2, 9), at(3, 200), at(3, 201), at(4, 0))}
    fill = [cycle(wr=[(0, a, rows[a]), (1, b, rows[b])], want=False)
            for a, b in ((at(1, 5), at(2, 9)), (at(1, 6), at(3, 200)), (at(3, 201), at(4, 0)))]
    mixed = [at(1, 5) if p % 2 else at(3, 200 + p % 4 // 2) for p in range(R)]
    return fill + [
        # the feeder on banks 1 and 3, each partition its own row; a row reader on 2
        cycle(rr=[(0, at(2, 9))], pr=(mask(1, 3), mixed), want=False),
        # a row reader on a bank the feeder claims: conflict
        cycle(rr=[(1, at(3, 201))], pr=(mask(1, 3), mixed), want=True),
        # ... even where no partition's address lies in that bank
        cycle(rr=[(0, at(4, 0))], pr=(mask(1, 4), [at(1, 6)] * R), want=True),
        # two row readers on one bank; then on two banks
        cycle(rr=[(0, at(1, 5)), (1, at(1, 6))], want=True),
        cycle(rr=[(0, at(1, 5)), (1, at(2, 9))], want=False),
        # a read and a write of one bank use its two ports: no conflict
        cycle(rr=[(0, at(3, 200))], wr=[(1, at(3, 201), rows[at(1, 5)])], want=False),
        cycle(rr=[(0, at(3, 201))], want=False),
        # two writers on one bank
        cycle(wr=[(0, at(4, 1), rows[at(1, 5)]), (1, at(4, 2), rows[at(1, 6)])], want=True),
        # the feeder alone on every bank
        cycle(pr=(mask(*range(BANKS)), [at(p % BANKS, p) for p in range(R)]), want=False),
        cycle(want=False),
    ]


def random_cycle(rng: random.Random, free: bool) -> dict:
    """Random enables and addresses; with ``free`` the enabled readers claim
    distinct banks (so do the writers)."""
    def row():
        return [rng.randrange(-128, 128) for _ in range(R)]

    order = rng.sample(range(BANKS), BANKS)
    take = iter(order) if free else None

    def bank():
        return next(take) if free else rng.randrange(BANKS)

    rr = [(int(rng.random() < 0.7), at(bank(), rng.randrange(BANK_ROWS)))
          for _ in range(ROW_READS)]
    claimed = sorted({bank() for _ in range(rng.randint(1, 3))})
    addrs = []
    for _ in range(R):
        b = rng.choice(claimed) if rng.random() < 0.9 else rng.randrange(BANKS)
        addrs.append(at(b, rng.randrange(BANK_ROWS)))
    pr = (int(rng.random() < 0.7), mask(*claimed), addrs)
    wbanks = rng.sample(range(BANKS), ROW_WRITES) if free else \
        [rng.randrange(BANKS) for _ in range(ROW_WRITES)]
    wr = [(int(rng.random() < 0.6), at(b, rng.randrange(BANK_ROWS)), row()) for b in wbanks]
    return {"rr": rr, "pr": pr, "wr": wr, "want": None}


CASES = {
    "directed": lambda rng: directed(),
    "random_free": lambda rng: [random_cycle(rng, True) for _ in range(CYCLES)],
    "random_mixed": lambda rng: [random_cycle(rng, False) for _ in range(CYCLES)],
}

IDLE = {**{f"row_read__{k}__en": 0 for k in range(ROW_READS)},
        **{f"row_write__{k}__en": 0 for k in range(ROW_WRITES)},
        "part_read__0__en": 0}


class CbufTB(BlockTB):
    def __init__(self, dut):
        super().__init__(dut)
        self.mem = [[0] * R for _ in range(CFG.cbuf_depth)]   # None: not known
        self.checked = {"reads": 0, "conflicts": 0, "clean": 0}

    def drive(self, c: dict) -> None:
        for k, (en, addr) in enumerate(c["rr"]):
            self.set(f"row_read__{k}__en", en)
            self.set(f"row_read__{k}__addr", addr)
        en, banks, addrs = c["pr"]
        self.set("part_read__0__en", en)
        self.set("part_read__0__banks", banks)
        for p, a in enumerate(addrs):
            self.set("part_read__0__addr", a, p)
        for k, (en, addr, row) in enumerate(c["wr"]):
            self.set(f"row_write__{k}__en", en)
            self.set(f"row_write__{k}__addr", addr)
            self.set(f"row_write__{k}__data", pack(row, 8))

    def model(self, c: dict):
        """The conflict flag, the checks of this cycle's reads (port, per partition
        the byte or None), and the writes (address -> row or None)."""
        reads = [0] * BANKS
        for en, addr in c["rr"]:
            if en:
                reads[addr >> SHIFT] += 1
        en, banks, addrs = c["pr"]
        if en:
            for b in range(BANKS):
                reads[b] += banks >> b & 1
        writes = [0] * BANKS
        for en, addr, _ in c["wr"]:
            if en:
                writes[addr >> SHIFT] += 1
        conflict = any(n > 1 for n in reads + writes)

        want = []
        for k, (en, addr) in enumerate(c["rr"]):
            if en and reads[addr >> SHIFT] == 1:
                want.append((f"row_read__{k}__data", addr, list(self.mem[addr])))
        en, banks, addrs = c["pr"]
        if en:
            row = [self.mem[a][p] if banks >> (a >> SHIFT) & 1 and reads[a >> SHIFT] == 1
                   else None for p, a in enumerate(addrs)]
            want.append(("part_read__0__data", addrs, row))

        landed = {}
        for en, addr, row in c["wr"]:
            if en:
                landed[addr] = list(row) if writes[addr >> SHIFT] == 1 else None
        return conflict, want, landed

    async def run(self, cycles: list[dict]) -> None:
        pending = []
        for c in cycles + [idle()]:
            await self.next_cycle()
            self.drive(c)
            await self.settle()
            for port, addr, want in pending:           # last cycle's reads
                got = unpack(self.get(port), 8, R)
                for p, w in enumerate(want):
                    if w is not None:
                        self.expect(f"{port} byte {p} (address {addr})", got[p], w)
                        self.checked["reads"] += 1
            conflict, pending, landed = self.model(c)
            if c.get("want") is not None:
                assert conflict == c["want"], f"directed cycle {self.cycle}: model says {conflict}"
            self.expect("conflict", self.get("conflict"), int(conflict))
            self.checked["conflicts" if conflict else "clean"] += 1
            for addr, row in landed.items():
                self.mem[addr] = row if row is not None else [None] * R


@cocotb.test()
async def run_case(dut):
    tb = CbufTB(dut)
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
