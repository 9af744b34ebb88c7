"""RegisterFile (``tiny`` preset): the register map of :mod:`systolica.arch.regs`.

:class:`RegsModel` is the register file as the map describes it; every cycle the
testbench drives one bus access and the sequencer-side inputs, and compares ``start``,
``imem_we`` (with ``imem_waddr`` / ``imem_wdata`` when it is high), ``irq`` and the
combinational ``reg_rdata`` of the addressed register with the model, and the
run's configuration: what the sequencer sees (``prog_len``, ``prog_addr``,
``prog_fetch``, ``check_ubuf_base``, ``check_ubuf_rows``: the next values of the
double-buffered registers while stopped, so in a START's cycle, and their active
copies while running) and what the units see (``ubuf_base``, ``ubuf_rows``: the
active copies). The cases are schedules of bus accesses and sequencer events.
"""

from __future__ import annotations

import random

import cocotb

from systolica.arch import regs
from systolica.arch.config import preset
from systolica.arch.regs import Reg

from tb_base import BlockTB, case_names

CFG = preset("tiny")
SEQ_INPUTS = ("running", "done", "fault", "error", "fault_pc", "cycle", "macs",
              "dram_rd_bytes", "dram_wr_bytes", "fetch_rd_bytes")
#: Ports of the ``seq`` interface (:class:`systolica.rtl.ports.RunControl`) by the
#: names the model uses; the others are named as in the model.
PORT = {**{name: f"seq__{name}" for name in ("start", "prog_len", "prog_addr", "prog_fetch",
                                              "running", "done", "fault", "error",
                                              "fault_pc", "cycle")},
        "imem_we": "seq__imem__en", "imem_waddr": "seq__imem__addr",
        "imem_wdata": "seq__imem__data"}
M32 = 0xFFFF_FFFF


def ubuf_ok(base: int, rows: int) -> bool:
    """The UBUF placements tiny allows (docs/contract.md, "The UBUF"): whole banks of
    the CBUF (256 rows each), a power of two rows or none."""
    bank = 256
    return (base % bank == 0 and rows % bank == 0 and rows & (rows - 1) == 0
            and base + rows <= 2048)


#: The double-buffered registers (docs/management-core.md) and their reset values.
BUFFERED = {Reg.PROG_LEN: 0, Reg.PROG_ADDR: 0, Reg.PROG_FETCH: CFG.imem_depth,
            Reg.UBUF_BASE: CFG.ubuf_base, Reg.UBUF_ROWS: CFG.ubuf_rows}
#: ... and the register file's port that carries each one's value for the sequencer.
RUN_PORT = {Reg.PROG_LEN: "prog_len", Reg.PROG_ADDR: "prog_addr",
            Reg.PROG_FETCH: "prog_fetch", Reg.UBUF_BASE: "check_ubuf_base",
            Reg.UBUF_ROWS: "check_ubuf_rows"}
#: ... and for the units (the active copies only).
UNIT_PORT = {Reg.UBUF_BASE: "ubuf_base", Reg.UBUF_ROWS: "ubuf_rows"}


class RegsModel:
    def __init__(self):
        self.done_flag = self.error_flag = 0
        self.fault_cycle = 0
        self.imem_addr = 0
        self.parts: list[int] = []
        self.next = dict(BUFFERED)      # what writes set and reads return
        self.active = dict(BUFFERED)    # the run's, copied from next at START

    @property
    def prog_len(self) -> int:
        return self.next[Reg.PROG_LEN]

    def outputs(self, i: dict) -> dict:
        """Combinational outputs for inputs ``i`` (bus: addr, wdata, we)."""
        write = lambda reg: i["we"] and i["addr"] == reg
        out = {
            "start": int(write(Reg.CTRL) and i["wdata"] & regs.CTRL_START
                         and not i["running"]),
            "irq": int(self.done_flag or self.error_flag),
            "imem_we": int(write(Reg.IMEM_DATA) and len(self.parts) == 3
                           and not i["running"]),
        }
        if out["imem_we"]:
            out["imem_waddr"] = self.imem_addr
            out["imem_wdata"] = sum(p << (32 * k) for k, p in enumerate(self.parts + [i["wdata"]]))
        table = {
            Reg.STATUS: (i["running"] * regs.STATUS_RUNNING | self.done_flag * regs.STATUS_DONE
                         | self.error_flag * regs.STATUS_ERROR),
            Reg.ERROR: i["error"],
            Reg.FAULT_PC: i["fault_pc"],
            **self.next,
            Reg.IMEM_ADDR: self.imem_addr,
            Reg.CYCLES: i["cycle"],
            Reg.MACS_LO: i["macs"] & M32,
            Reg.MACS_HI: i["macs"] >> 32,
            Reg.DRAM_RD_BYTES: i["dram_rd_bytes"],
            Reg.DRAM_WR_BYTES: i["dram_wr_bytes"],
            Reg.FETCH_RD_BYTES: i["fetch_rd_bytes"],
            Reg.HWCFG: regs.hwcfg_word(CFG.tile_rows, CFG.tile_cols, CFG.tile_size),
            Reg.FAULT_CYCLE: self.fault_cycle,
        }
        if i["addr"] in table:        # CTRL and IMEM_DATA are write-only
            out["reg_rdata"] = table[i["addr"]]
        # the sequencer sees the next values while stopped (from START's cycle on),
        # the units the active ones
        run = self.active if i["running"] else self.next
        out.update({RUN_PORT[reg]: value for reg, value in run.items()})
        out.update({port: self.active[reg] for reg, port in UNIT_PORT.items()})
        return out

    def clock(self, i: dict, out: dict) -> None:
        write = lambda reg: i["we"] and i["addr"] == reg
        if out["start"] or (write(Reg.CTRL) and i["wdata"] & regs.CTRL_IRQ_ACK):
            self.done_flag = self.error_flag = 0
        if i["done"]:
            self.done_flag = 1
        if i["fault"]:
            self.error_flag = 1
            self.fault_cycle = i["cycle"]
        if out["start"]:
            self.active = dict(self.next)
        # the double-buffered registers take writes also while running
        for reg in (Reg.PROG_LEN, Reg.PROG_ADDR, Reg.PROG_FETCH):
            if write(reg):
                self.next[reg] = i["wdata"]
        # a UBUF register takes a write only if its pair with the other's next is legal
        base, rows = self.next[Reg.UBUF_BASE], self.next[Reg.UBUF_ROWS]
        if write(Reg.UBUF_BASE) and ubuf_ok(i["wdata"], rows):
            self.next[Reg.UBUF_BASE] = i["wdata"]
        if write(Reg.UBUF_ROWS) and ubuf_ok(base, i["wdata"]):
            self.next[Reg.UBUF_ROWS] = i["wdata"]
        if i["running"] and any(write(r) for r in (Reg.IMEM_ADDR, Reg.IMEM_DATA)):
            return                 # the instruction memory's: only while stopped
        if write(Reg.IMEM_ADDR):
            self.imem_addr = i["wdata"]
            self.parts = []
        if write(Reg.IMEM_DATA):
            if len(self.parts) == 3:
                self.parts = []
                self.imem_addr += 1
            else:
                self.parts.append(i["wdata"])


def idle(**over) -> dict:
    d = {"addr": Reg.STATUS, "wdata": 0, "we": 0, "running": 0, "done": 0, "fault": 0,
         "error": 0, "fault_pc": 0, "cycle": 0, "macs": 0, "dram_rd_bytes": 0,
         "dram_wr_bytes": 0, "fetch_rd_bytes": 0}
    d.update(over)
    return d


def wr(reg, value, **over):
    return idle(addr=reg, wdata=value, we=1, **over)


def rd(reg, **over):
    return idle(addr=reg, **over)


def case_imem_data(rng):
    """Four IMEM_DATA writes store one instruction and advance IMEM_ADDR; gaps and
    other registers' writes between the parts do not disturb the assembly; a write
    to IMEM_ADDR restarts it."""
    s = [wr(Reg.IMEM_ADDR, 17), rd(Reg.IMEM_ADDR)]
    for k in range(3):
        for part in range(4):
            s.append(wr(Reg.IMEM_DATA, rng.getrandbits(32)))
            if part == 1 and k == 1:
                s += [idle(), wr(Reg.PROG_LEN, 9), rd(Reg.IMEM_ADDR), idle()]
        s.append(rd(Reg.IMEM_ADDR))
    s += [wr(Reg.IMEM_DATA, 0xAAAA_0001), wr(Reg.IMEM_DATA, 0xAAAA_0002),
          wr(Reg.IMEM_ADDR, 2000), rd(Reg.IMEM_ADDR)]
    s += [wr(Reg.IMEM_DATA, 0xB000_0000 + p) for p in range(8)] + [rd(Reg.IMEM_ADDR)]
    s += [wr(Reg.IMEM_ADDR, 0), rd(Reg.IMEM_ADDR)]
    return s


def case_start(rng):
    """START pulses only while not running; IRQ_ACK alone, other registers and a
    START while running do not."""
    return [wr(Reg.CTRL, regs.CTRL_START), idle(running=1),
            wr(Reg.CTRL, regs.CTRL_START, running=1), wr(Reg.CTRL, M32, running=1),
            idle(running=1), idle(), wr(Reg.CTRL, regs.CTRL_IRQ_ACK),
            wr(Reg.CTRL, regs.CTRL_START | regs.CTRL_IRQ_ACK), wr(Reg.PROG_LEN, 1),
            wr(Reg.IMEM_ADDR, 1), wr(Reg.CTRL, 0xFFFF_FFFE), wr(Reg.CTRL, 0x5)]


def case_irq(rng):
    """irq and STATUS.DONE / STATUS.ERROR from done or fault until IRQ_ACK or START;
    FAULT_CYCLE holds the cycle of the fault."""
    s = [wr(Reg.CTRL, regs.CTRL_START), idle(running=1, cycle=1), idle(running=1, cycle=2),
         rd(Reg.STATUS, running=1, cycle=3, done=1), rd(Reg.STATUS, cycle=3),
         rd(Reg.STATUS, cycle=3), wr(Reg.CTRL, regs.CTRL_IRQ_ACK, cycle=3),
         rd(Reg.STATUS, cycle=3)]
    s += [wr(Reg.CTRL, regs.CTRL_START)] + [rd(Reg.CYCLES, running=1, cycle=c) for c in range(5)]
    s += [rd(Reg.FAULT_CYCLE, running=1, cycle=5, fault=1, error=3, fault_pc=2),
          rd(Reg.FAULT_CYCLE, cycle=5, error=3, fault_pc=2),
          rd(Reg.STATUS, cycle=5, error=3), rd(Reg.ERROR, cycle=5, error=3),
          rd(Reg.FAULT_PC, cycle=5, fault_pc=2), idle(), idle()]
    # START clears the flags (and is the only thing that does apart from IRQ_ACK).
    s += [wr(Reg.CTRL, regs.CTRL_START), rd(Reg.STATUS, running=1)]
    s += [rd(Reg.STATUS, running=1, cycle=77, fault=1), rd(Reg.FAULT_CYCLE),
          wr(Reg.PROG_LEN, 3), rd(Reg.STATUS), wr(Reg.CTRL, regs.CTRL_IRQ_ACK),
          rd(Reg.STATUS), rd(Reg.FAULT_CYCLE)]
    return s


def case_readback(rng):
    """Every readable register shows its source, for random values."""
    s = [wr(Reg.PROG_LEN, 1234), wr(Reg.IMEM_ADDR, 77)]
    for _ in range(6):
        inputs = dict(running=rng.randrange(2), error=rng.randrange(7),
                      fault_pc=rng.getrandbits(16), cycle=rng.getrandbits(32),
                      macs=rng.getrandbits(64), dram_rd_bytes=rng.getrandbits(32),
                      dram_wr_bytes=rng.getrandbits(32),
                      fetch_rd_bytes=rng.getrandbits(32))
        s += [rd(reg, **inputs) for reg in Reg]
    s += [wr(Reg.PROG_LEN, CFG.imem_depth), rd(Reg.PROG_LEN), wr(Reg.PROG_LEN, 0xFFFF),
          rd(Reg.PROG_LEN)]
    return s


def case_prog_len_wide(rng):
    """PROG_LEN is a 32-bit RW register: it reads back what was written, and a length
    beyond the program memory must reach the sequencer as one (PROG_RANGE)."""
    start = wr(Reg.CTRL, regs.CTRL_START)     # the run's PROG_LEN: the next one
    return [wr(Reg.PROG_LEN, 0x1_0005), rd(Reg.PROG_LEN), start, idle(),
            wr(Reg.PROG_LEN, 0x8000_0000), rd(Reg.PROG_LEN), start, idle()]


def case_imem_addr_wide(rng):
    """IMEM_ADDR is a 32-bit RW register: an index beyond the program memory must not
    turn into a write to a low program index."""
    return [wr(Reg.IMEM_ADDR, 0x1_0003), rd(Reg.IMEM_ADDR)] + [
        wr(Reg.IMEM_DATA, 0xC000_0000 + p) for p in range(4)] + [rd(Reg.IMEM_ADDR)]


def case_ubuf(rng):
    """UBUF_BASE / UBUF_ROWS: reset to the configuration's; a write is taken only if
    the pair it makes with the other register's next value is whole banks, a power of
    two rows, inside the CBUF (also while running: it sets the next value); a refused
    write leaves the register as it was (reads show it)."""
    s = [rd(Reg.UBUF_BASE), rd(Reg.UBUF_ROWS)]
    for reg, value in ((Reg.UBUF_ROWS, 512),      # 1792 + 512 runs past the CBUF
                       (Reg.UBUF_BASE, 1024), (Reg.UBUF_ROWS, 512),
                       (Reg.UBUF_ROWS, 768),      # not a power of two
                       (Reg.UBUF_ROWS, 128),      # not whole banks
                       (Reg.UBUF_BASE, 1000),     # not on a bank boundary
                       (Reg.UBUF_BASE, 1792),     # 1792 + 512 past the end
                       (Reg.UBUF_BASE, 1536), (Reg.UBUF_BASE, 0xFFFF_FF00),
                       (Reg.UBUF_BASE, 1 << 12), (Reg.UBUF_ROWS, 1 << 31),
                       (Reg.UBUF_ROWS, 0), (Reg.UBUF_BASE, 2048), (Reg.UBUF_BASE, 256),
                       (Reg.UBUF_ROWS, 1024), (Reg.UBUF_ROWS, 2048), (Reg.UBUF_BASE, 0),
                       (Reg.UBUF_ROWS, 2048)):
        s += [wr(reg, value), rd(Reg.UBUF_BASE), rd(Reg.UBUF_ROWS)]
    # while running, a legal write sets the next value (the run keeps its own)
    s += [wr(Reg.UBUF_ROWS, 256, running=1), rd(Reg.UBUF_ROWS, running=1),
          wr(Reg.UBUF_BASE, 512, running=1), rd(Reg.UBUF_BASE), wr(Reg.UBUF_ROWS, 256),
          wr(Reg.UBUF_BASE, 512), rd(Reg.UBUF_BASE), rd(Reg.UBUF_ROWS)]
    for _ in range(40):
        value = rng.choice([0, 128, 256, 512, 768, 1024, 1280, 1536, 1792, 2048, 4096,
                            rng.getrandbits(32), 256 * rng.randrange(9)])
        s += [wr(rng.choice([Reg.UBUF_BASE, Reg.UBUF_ROWS]), value,
                 running=int(rng.random() < 0.2)), rd(Reg.UBUF_BASE)]
    return s


def case_program_while_running(rng):
    """IMEM_ADDR and IMEM_DATA ignore writes while the chip runs (the instruction
    memory's write port is the fetcher's then): no word is stored, no address moves;
    PROG_LEN takes them as its next value (read back), the run keeps its own."""
    s = [wr(Reg.PROG_LEN, 7), wr(Reg.IMEM_ADDR, 5)]
    s += [wr(Reg.IMEM_DATA, 0xA000_0000 + p) for p in range(2)]
    s += [wr(Reg.PROG_LEN, 99, running=1), wr(Reg.IMEM_ADDR, 40, running=1),
          rd(Reg.PROG_LEN, running=1), rd(Reg.IMEM_ADDR, running=1)]
    s += [wr(Reg.IMEM_DATA, 0xB000_0000 + p, running=1) for p in range(4)]
    s += [rd(Reg.IMEM_ADDR)]
    s += [wr(Reg.IMEM_DATA, 0xC000_0000 + p) for p in range(2)] + [rd(Reg.IMEM_ADDR)]
    s += [wr(Reg.CTRL, regs.CTRL_START), rd(Reg.PROG_LEN, running=1)]
    for _ in range(30):
        reg = rng.choice([Reg.PROG_LEN, Reg.IMEM_ADDR, Reg.IMEM_DATA])
        s += [wr(reg, rng.getrandbits(16), running=int(rng.random() < 0.5)),
              rd(rng.choice([Reg.PROG_LEN, Reg.IMEM_ADDR]))]
    return s


def case_double_buffered(rng):
    """PROG_LEN, PROG_ADDR, PROG_FETCH, UBUF_BASE and UBUF_ROWS: a write while running
    sets the next value, which reads return, and the run keeps its own; START makes
    the next values the run's, in its own cycle; a UBUF pair the rule refuses is
    ignored while running too; PROG_FETCH resets to imem_depth; IMEM_DATA while
    running stores nothing."""
    s = [rd(Reg.PROG_FETCH), wr(Reg.PROG_LEN, 100), wr(Reg.PROG_ADDR, 4000),
         wr(Reg.PROG_FETCH, 0), wr(Reg.UBUF_ROWS, 0), wr(Reg.UBUF_BASE, 1024),
         wr(Reg.UBUF_ROWS, 512), wr(Reg.CTRL, regs.CTRL_START)]
    # program A runs: B's configuration goes in meanwhile
    run = dict(running=1)
    s += [wr(Reg.PROG_LEN, 7, **run), rd(Reg.PROG_LEN, **run),
          wr(Reg.PROG_ADDR, 123, **run), rd(Reg.PROG_ADDR, **run),
          wr(Reg.PROG_FETCH, 3, **run), rd(Reg.PROG_FETCH, **run),
          wr(Reg.UBUF_ROWS, 0, **run), wr(Reg.UBUF_BASE, 1792, **run),
          wr(Reg.UBUF_ROWS, 512, **run),      # 1792 + 512 past the CBUF: refused
          rd(Reg.UBUF_ROWS, **run), wr(Reg.UBUF_ROWS, 256, **run), rd(Reg.UBUF_BASE, **run),
          wr(Reg.IMEM_ADDR, 9, **run), wr(Reg.IMEM_DATA, 1, **run),
          wr(Reg.IMEM_DATA, 2, **run), wr(Reg.IMEM_DATA, 3, **run),
          wr(Reg.IMEM_DATA, 4, **run), rd(Reg.IMEM_ADDR, **run),
          wr(Reg.CTRL, regs.CTRL_START, **run),   # ignored: A still runs
          idle(running=1, done=1)]
    # START right after A's interrupt: B's configuration is the run's in that cycle
    s += [wr(Reg.CTRL, regs.CTRL_START), rd(Reg.PROG_LEN, running=1),
          wr(Reg.PROG_FETCH, 0xFFFF_FFFF, running=1), idle(running=1, done=1), idle(),
          rd(Reg.PROG_FETCH), wr(Reg.CTRL, regs.CTRL_START | regs.CTRL_IRQ_ACK)]
    for _ in range(40):
        reg = rng.choice(list(BUFFERED) + [Reg.CTRL])
        value = regs.CTRL_START if reg is Reg.CTRL else rng.choice(
            [0, 256, 512, 1024, 1536, rng.getrandbits(32), rng.getrandbits(12)])
        running = int(rng.random() < 0.5)
        s += [wr(reg, value, running=running), rd(rng.choice(list(BUFFERED)),
                                                  running=running)]
    return s


CASES = {
    "double_buffered": case_double_buffered,
    "program_while_running": case_program_while_running,
    "ubuf": case_ubuf,
    "imem_data": case_imem_data,
    "start": case_start,
    "irq": case_irq,
    "readback": case_readback,
    "prog_len_wide": case_prog_len_wide,
    "imem_addr_wide": case_imem_addr_wide,
}
#: Cases run in one simulation per group (reset between cases).
GROUPS = {"registers": ["imem_data", "start", "irq", "readback", "ubuf",
                        "program_while_running", "double_buffered"],
          "prog_len_wide": ["prog_len_wide"], "imem_addr_wide": ["imem_addr_wide"]}


class CsrTB(BlockTB):
    async def run(self, schedule: list[dict]) -> None:
        model = RegsModel()
        for i in schedule + [idle(), idle()]:
            await self.next_cycle()
            self.set("reg_addr", i["addr"])
            self.set("reg_wdata", i["wdata"])
            self.set("reg_we", i["we"])
            for name in SEQ_INPUTS:
                self.set(PORT.get(name, name), i[name])
            await self.settle()
            want = model.outputs(i)
            op = f"{'write' if i['we'] else 'read'} {Reg(i['addr']).name}"
            for name, value in want.items():
                self.expect(f"{name} ({op})", self.get(PORT.get(name, name)), value)
            prog_len, imem_addr = self.get(PORT["prog_len"]), self.get(PORT["imem_waddr"])
            if model.imem_addr < 1 << 16:
                self.expect("imem_waddr", imem_addr, model.imem_addr)
            elif imem_addr < CFG.imem_depth:
                self.fail(f"IMEM_ADDR {model.imem_addr:#x} reaches the program memory as "
                          f"index {imem_addr}, which it writes")
            # A length beyond the program memory must stay one on the way out.
            if want["prog_len"] > CFG.imem_depth and prog_len <= CFG.imem_depth:
                self.fail(f"PROG_LEN {want['prog_len']:#x} reaches the sequencer as "
                          f"{prog_len}, which does not fault PROG_RANGE")
            model.clock(i, want)


@cocotb.test()
async def run_case(dut):
    tb = CsrTB(dut)
    await tb.start(dict.fromkeys(["reg_addr", "reg_wdata", "reg_we",
                                  *(PORT.get(name, name) for name in SEQ_INPUTS)], 0))
    for name in case_names():
        tb.label = f"[{name}] "
        await tb.run(CASES[name](random.Random(name)))
        # Each case starts from reset, as its model does.
        await tb.reset()
    tb.finish()
