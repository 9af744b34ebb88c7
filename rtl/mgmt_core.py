"""The management core: PicoRV32 with its instruction and data memories
(docs/management-core.md, "The block").

PicoRV32's Verilog comes from the ``pythondata-cpu-picorv32`` package
(:func:`picorv32_source`); a build that contains this block adds that file to its
Verilog sources (Verilator, Yosys).
"""

from __future__ import annotations

from pathlib import Path

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Mux, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from systolica.arch import isa, regs

#: The memory map (byte addresses of the core): each region is selected by the top
#: four address bits.
IMEM_BASE = 0x0000_0000
DMEM_BASE = 0x1000_0000
REGS_BASE = 0x4000_0000
REGION_SHIFT = 28
#: The DRAM window: byte ``DRAM_BASE + b`` is DRAM byte ``b`` (every address with the
#: top bit set, so the window reaches the first 2 GiB of DRAM).
DRAM_BASE = 0x8000_0000
DRAM_WINDOW_BITS = 31
#: PicoRV32's configuration (docs/management-core.md, "The core"). The timer is left
#: out so that interrupt 0 is the accelerator's alone, and interrupt 0 is not latched:
#: it is a level the chip holds until the handler acknowledges it (``CTRL.IRQ_ACK``),
#: so a request that was acknowledged does not enter the handler a second time.
CORE_PARAMETERS = {
    "COMPRESSED_ISA": 0, "ENABLE_MUL": 1, "ENABLE_DIV": 1, "ENABLE_IRQ": 1,
    "ENABLE_IRQ_TIMER": 0, "LATCHED_IRQ": 0xFFFF_FFFE,
    "PROGADDR_RESET": 0x0000_0000, "PROGADDR_IRQ": 0x0000_0010,
}


def picorv32_source() -> Path:
    """``picorv32.v`` of the installed ``pythondata-cpu-picorv32`` package."""
    import pythondata_cpu_picorv32 as package
    path = Path(package.data_location) / "picorv32.v"
    if not path.is_file():
        raise FileNotFoundError(f"pythondata-cpu-picorv32 at {package.data_location} has "
                                f"no picorv32.v: reinstall it (make venv)")
    return path


def _words(name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 16 \
            or value & (value - 1):
        raise TypeError(f"{name} must be a power of two of at least 16 (32-bit words), "
                        f"not {value!r}")
    return value


def _dram_word_bytes(value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 4 \
            or value & (value - 1) or value > 1 << DRAM_WINDOW_BITS:
        raise TypeError(f"dram_word_bytes must be a power of two of at least 4 (the DRAM "
                        f"word holds whole 32-bit words), not {value!r}")
    return value


def _dram_words(value) -> int:
    limit = 1 << isa.DRAM_ADDR_BITS
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= limit:
        raise TypeError(f"dram_words must be a positive integer of at most {limit} (the "
                        f"{isa.DRAM_ADDR_BITS}-bit DRAM word address), not {value!r}")
    return value


class MgmtCore(wiring.Component):
    """PicoRV32 (RV32IM, interrupts) with an instruction memory at ``0x0000_0000`` of
    ``imem_words`` 32-bit words and a data memory at ``0x1000_0000`` of ``dmem_words``;
    the stack starts at the top of the data memory. ``imem_init`` / ``dmem_init``
    (lists of words) are the memories' contents after configuration.

    Members:

    * ``run``: the core runs while it is high and is held in reset while it is low;
    * ``load_en``, ``load_addr`` (a byte address in the core's map, word aligned),
      ``load_data``: write one word of either memory, taken only while ``run`` is low
      (the firmware is loaded with the core held); ``load_rdata``: while ``run`` is
      low, the word at the ``load_addr`` of the cycle before (the host reads the
      mailbox back);
    * the register window, ``0x4000_0000 + 4 * r`` for register ``r`` of
      :mod:`systolica.arch.regs`: a request ``reg_valid`` with ``reg_addr`` (``r``),
      ``reg_we`` and ``reg_wdata`` is held until the cycle ``reg_ready`` is high, in
      which a write is done and ``reg_rdata`` is the value read. A store of any width
      writes the whole word (the firmware uses word accesses);
    * ``irq``: interrupt 0, a level held until the handler acknowledges it (not
      latched: a pulse that ends while interrupts are masked is lost);
    * ``trap``: the core stopped on a fault (``ebreak``, an illegal or misaligned
      access with interrupts masked);
    * the DRAM window, ``0x8000_0000 + b`` for DRAM byte ``b`` (word ``b //
      dram_word_bytes`` of ``dram_words``), a master of the chip's DRAM:
      ``dram_re`` / ``dram_we`` with ``dram_addr`` (a word address,
      :data:`systolica.arch.isa.DRAM_ADDR_BITS` wide) and ``dram_wdata`` (a whole word,
      ``8 * dram_word_bytes`` bits); ``dram_rdata`` is the word read, the cycle after
      ``dram_re``. ``dram_re`` and ``dram_we`` are high only in cycles where
      ``dram_grant`` is: an access waits for the grant, however long. A load reads the
      word; a store of a byte, half or word reads the word, merges the bytes and
      writes the word back (the port has no byte enables);
    * ``bad_access``: high from the first access outside the map (or a store to the
      instruction memory, or an access past ``dram_words``) until ``run`` falls; such
      an access completes at once, a read as 0, a store with no effect.
    """

    def __init__(self, *, imem_words: int = 2048, dmem_words: int = 2048,
                 dram_word_bytes: int = 16, dram_words: int = 1 << isa.DRAM_ADDR_BITS,
                 imem_init=(), dmem_init=()):
        self.imem_words = _words("imem_words", imem_words)
        self.dmem_words = _words("dmem_words", dmem_words)
        self.dram_word_bytes = _dram_word_bytes(dram_word_bytes)
        self.dram_words = _dram_words(dram_words)
        for name, init, words in (("imem_init", imem_init, imem_words),
                                  ("dmem_init", dmem_init, dmem_words)):
            if len(init) > words:
                raise ValueError(f"{name} has {len(init)} words, more than the memory's "
                                 f"{words}")
        self.imem_init, self.dmem_init = list(imem_init), list(dmem_init)
        super().__init__({
            "run": In(1), "load_en": In(1), "load_addr": In(32), "load_data": In(32),
            "load_rdata": Out(32),
            "reg_valid": Out(1), "reg_we": Out(1), "reg_addr": Out(regs.ADDR_BITS),
            "reg_wdata": Out(32), "reg_ready": In(1), "reg_rdata": In(32),
            "irq": In(1), "trap": Out(1), "bad_access": Out(1),
            "dram_re": Out(1), "dram_we": Out(1), "dram_addr": Out(isa.DRAM_ADDR_BITS),
            "dram_wdata": Out(8 * dram_word_bytes), "dram_rdata": In(8 * dram_word_bytes),
            "dram_grant": In(1)})

    @property
    def stack_top(self) -> int:
        return DMEM_BASE + 4 * self.dmem_words

    def elaborate(self, platform):
        """PicoRV32's memory interface holds a request (``mem_valid``, address, write
        strobes) until ``mem_ready``. The top four address bits choose the target.
        Each memory is a block RAM of two ports: a registered read port, the core's
        while it runs and the host's while it is held, and a write port that is the
        core's store port while it runs (data memory) or the loader's while it is held.
        A memory access therefore takes two cycles: the request, then ``mem_ready``
        with the registered read data; the register window answers in the cycle
        ``reg_ready`` comes.

        The DRAM window reads the word in the first granted cycle of a request
        (``dram_re``) and has it in the next (``dram_reading``): a load completes
        there with the request's 32-bit lane of it; a store merges its bytes into the
        word and, if that cycle is granted too, writes the word and completes, else
        it reads the word again once the grant is back (the word may have changed
        meanwhile). Nothing of the word is kept in registers."""
        m = Module()
        m.submodules.imem = imem = Memory(shape=32, depth=self.imem_words,
                                          init=self.imem_init)
        m.submodules.dmem = dmem = Memory(shape=32, depth=self.dmem_words,
                                          init=self.dmem_init)
        i_rd, i_wr = imem.read_port(), imem.write_port(granularity=8)
        d_rd, d_wr = dmem.read_port(), dmem.write_port(granularity=8)

        valid, ready, addr = Signal(), Signal(), Signal(32)
        wdata, wstrb, rdata = Signal(32), Signal(4), Signal(32)
        trap = Signal()
        m.submodules.core = Instance(
            "picorv32",
            **{f"p_{k}": v for k, v in CORE_PARAMETERS.items()},
            p_STACKADDR=self.stack_top,
            i_clk=ClockSignal(), i_resetn=~ResetSignal() & self.run,
            o_trap=trap, o_mem_valid=valid, i_mem_ready=ready, o_mem_addr=addr,
            o_mem_wdata=wdata, o_mem_wstrb=wstrb, i_mem_rdata=rdata,
            i_pcpi_wr=Const(0), i_pcpi_rd=Const(0, 32), i_pcpi_wait=Const(0),
            i_pcpi_ready=Const(0), i_irq=Cat(self.irq, Const(0, 31)))
        m.d.comb += self.trap.eq(trap & self.run)

        region = addr[REGION_SHIFT:]
        word = addr[2:REGION_SHIFT]
        in_imem = (region == IMEM_BASE >> REGION_SHIFT) & (word < self.imem_words)
        in_dmem = (region == DMEM_BASE >> REGION_SHIFT) & (word < self.dmem_words)
        in_regs = (region == REGS_BASE >> REGION_SHIFT) & (word < 1 << regs.ADDR_BITS)
        in_dram = addr[DRAM_WINDOW_BITS]
        word_shift = exact_log2(self.dram_word_bytes)
        dram_word = addr[word_shift:DRAM_WINDOW_BITS]
        to_dram = in_dram & (dram_word < self.dram_words)
        store = wstrb.any()
        to_mem = in_dmem | (in_imem & ~store)
        bad = valid & ~to_mem & ~in_regs & ~to_dram

        # memories: read data one cycle after the request, then mem_ready
        mem_ready = Signal()
        m.d.sync += mem_ready.eq(valid & to_mem & ~mem_ready & self.run)
        load_region = self.load_addr[REGION_SHIFT:]
        load_word = self.load_addr[2:REGION_SHIFT]
        from_dmem = Signal()
        with m.If(self.run):
            m.d.sync += from_dmem.eq(in_dmem)
            m.d.comb += [i_rd.addr.eq(word), d_rd.addr.eq(word)]
        with m.Else():      # the read ports are the host's while the core is held
            m.d.sync += from_dmem.eq(load_region == DMEM_BASE >> REGION_SHIFT)
            m.d.comb += [i_rd.addr.eq(load_word), d_rd.addr.eq(load_word)]
        m.d.comb += self.load_rdata.eq(Mux(from_dmem, d_rd.data, i_rd.data))

        # the register window
        m.d.comb += [self.reg_valid.eq(valid & in_regs & self.run),
                     self.reg_we.eq(store), self.reg_addr.eq(word),
                     self.reg_wdata.eq(wdata)]

        # the DRAM window: read the word, then take the lane (load) or merge into it
        # and write it back (store), each in a granted cycle
        dram_reading = Signal()         # dram_rdata is the request's word
        m.d.sync += dram_reading.eq(self.dram_re)
        lanes = self.dram_word_bytes // 4
        lane = addr[2:word_shift]
        read_lane = (self.dram_rdata.word_select(lane, 32) if lanes > 1
                     else self.dram_rdata)
        merged = Cat(Mux(wstrb[i], wdata.word_select(i, 8), read_lane.word_select(i, 8))
                     for i in range(4))
        # (PicoRV32 still issues a misaligned access it traps on, aligned down; by the
        # cycle a store would write, ``trap`` is high and keeps it from the DRAM)
        dram_access = valid & to_dram & self.run & self.dram_grant & ~trap
        m.d.comb += [
            self.dram_addr.eq(dram_word),
            self.dram_re.eq(dram_access & ~dram_reading),
            self.dram_we.eq(dram_access & dram_reading & store),
            self.dram_wdata.eq(Cat(Mux(lane == i, merged, self.dram_rdata.word_select(i, 32))
                                   for i in range(lanes)))]

        with m.If(in_regs):
            m.d.comb += [ready.eq(self.reg_ready), rdata.eq(self.reg_rdata)]
        with m.Elif(to_mem):
            m.d.comb += [ready.eq(mem_ready),
                         rdata.eq(Mux(from_dmem, d_rd.data, i_rd.data))]
        with m.Elif(to_dram):
            m.d.comb += [ready.eq(dram_reading & (~store | self.dram_grant)),
                         rdata.eq(read_lane)]
        with m.Else():
            m.d.comb += ready.eq(valid)

        with m.If(~self.run):
            m.d.sync += self.bad_access.eq(0)
        with m.Elif(bad):
            m.d.sync += self.bad_access.eq(1)

        # write ports: the loader's while the core is held, else the core's stores
        with m.If(self.run):
            m.d.comb += [d_wr.addr.eq(word), d_wr.data.eq(wdata),
                         d_wr.en.eq(Mux(valid & in_dmem & ~mem_ready, wstrb, 0))]
        with m.Else():
            m.d.comb += [
                d_wr.addr.eq(load_word), d_wr.data.eq(self.load_data),
                d_wr.en.eq(Mux(self.load_en & (load_region == DMEM_BASE >> REGION_SHIFT)
                               & (load_word < self.dmem_words), 0b1111, 0)),
                i_wr.addr.eq(load_word), i_wr.data.eq(self.load_data),
                i_wr.en.eq(Mux(self.load_en & (load_region == IMEM_BASE >> REGION_SHIFT)
                               & (load_word < self.imem_words), 0b1111, 0))]
        return m


def main(argv: list[str] | None = None) -> int:
    """``python -m systolica.rtl.mgmt_core [--imem-words N] [--dmem-words N]
    [--dram-word-bytes W] [--dram-words N]``: the block's Verilog on standard output
    (top ``mgmt_core``); ``--picorv32``: the path of ``picorv32.v``, which a synthesis
    of it reads too (docs/management-core.md)."""
    import argparse

    from amaranth.back import verilog
    parser = argparse.ArgumentParser(prog="python -m systolica.rtl.mgmt_core",
                                     description=main.__doc__)
    parser.add_argument("--imem-words", type=int, default=2048)
    parser.add_argument("--dmem-words", type=int, default=2048)
    parser.add_argument("--dram-word-bytes", type=int, default=16)
    parser.add_argument("--dram-words", type=int, default=1 << isa.DRAM_ADDR_BITS)
    parser.add_argument("--picorv32", action="store_true",
                        help="print the path of picorv32.v instead")
    args = parser.parse_args(argv)
    if args.picorv32:
        print(picorv32_source())
        return 0
    try:
        core = MgmtCore(imem_words=args.imem_words, dmem_words=args.dmem_words,
                        dram_word_bytes=args.dram_word_bytes, dram_words=args.dram_words)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    print(verilog.convert(core, name="mgmt_core", emit_src=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
