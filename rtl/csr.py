"""The register interface seen by the firmware (map in :mod:`systolica.arch.regs`)."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from systolica.arch import isa, regs
from systolica.arch.config import ChipConfig
from systolica.arch.regs import Reg
from systolica.rtl.ports import RunControl, check_config


class RegisterFile(wiring.Component):
    """32-bit registers on two simple buses (write strobe, combinational read data):
    the host's (``reg_*``) and the management core's window (``core_*``). They share
    one write port: a host write wins its cycle, and ``core_ready`` is high in the
    cycles the core's write is taken (no host write); reads are served on both at once
    (docs/management-core.md, "Who writes the registers").

    Program words are written 32 bits at a time through ``IMEM_DATA``; the fourth write
    stores the instruction and advances ``IMEM_ADDR``. ``IMEM_ADDR`` and ``IMEM_DATA``
    take writes only while the chip is stopped (while it runs the instruction memory's
    write port is the fetcher's). The program's configuration (``PROG_LEN``,
    ``PROG_ADDR``, ``PROG_FETCH``, ``UBUF_BASE``, ``UBUF_ROWS``) is double-buffered: a
    write sets the *next* value, also while a program runs, and a read returns it;
    ``START`` copies every next value into the run's *active* one; the sequencer sees
    the next values while the chip is stopped, so from ``START``'s own cycle on, and
    the units the active ones (docs/management-core.md).
    ``PROG_FETCH`` resets to ``imem_depth``. ``irq`` stays high from the end of
    a run (done or fault) until ``CTRL.IRQ_ACK`` or the next ``START``.

    Members: the bus (``reg_*``) and ``irq``; ``seq`` (:class:`~.ports.RunControl`,
    to the sequencer: the run's ``prog_len``, ``prog_addr``, ``prog_fetch``); the
    performance counters ``macs``, ``dram_rd_bytes``, ``dram_wr_bytes``,
    ``fetch_rd_bytes``, ``ubuf_wr_bytes``, ``ubuf_rd_bytes``; and the run's UBUF
    placement, ``ubuf_base`` / ``ubuf_rows`` (registers ``UBUF_BASE`` / ``UBUF_ROWS``,
    reset to the configuration's; ``check_ubuf_base`` / ``check_ubuf_rows`` are the
    sequencer's view, the next values while stopped). A write to either is taken only if the pair it
    makes with the other register's next value is a UBUF the chip allows
    (:meth:`~systolica.arch.config.ChipConfig.ubuf_problem`: whole banks, a power of
    two rows or none, inside its ``ubuf_span``); otherwise the register keeps its
    value, which the host reads back.
    """

    def __init__(self, *, cfg: ChipConfig):
        self.cfg = check_config(cfg, "RegisterFile")
        width = cfg.ubuf_span[1].bit_length()
        super().__init__({
            "reg_addr": In(regs.ADDR_BITS), "reg_wdata": In(32), "reg_we": In(1),
            "reg_rdata": Out(32), "irq": Out(1), "seq": Out(RunControl()),
            "core_addr": In(regs.ADDR_BITS), "core_wdata": In(32), "core_we": In(1),
            "core_rdata": Out(32), "core_ready": Out(1),
            "macs": In(64), "dram_rd_bytes": In(32), "dram_wr_bytes": In(32),
            "fetch_rd_bytes": In(32), "ubuf_wr_bytes": In(32), "ubuf_rd_bytes": In(32),
            "ubuf_base": Out(width), "ubuf_rows": Out(width),
            "check_ubuf_base": Out(width), "check_ubuf_rows": Out(width)})

    def elaborate(self, platform):
        m = Module()
        cfg, seq = self.cfg, self.seq
        done_flag, error_flag = Signal(), Signal()
        fault_cycle = Signal(isa.CYCLE_BITS)
        part = Signal(2)
        staged = Signal(96)
        # the one write port: the host's write, else the core's
        w_en, w_addr, w_data = Signal(), Signal(regs.ADDR_BITS), Signal(32)
        m.d.comb += [self.core_ready.eq(~self.reg_we), w_en.eq(self.reg_we | self.core_we),
                     w_addr.eq(Mux(self.reg_we, self.reg_addr, self.core_addr)),
                     w_data.eq(Mux(self.reg_we, self.reg_wdata, self.core_wdata))]
        write = lambda reg: w_en & (w_addr == reg)

        m.d.comb += seq.start.eq(write(Reg.CTRL) & w_data[0] & ~seq.running)
        with m.If(seq.start | (write(Reg.CTRL) & w_data[1])):
            m.d.sync += [done_flag.eq(0), error_flag.eq(0)]
        with m.If(seq.done):
            m.d.sync += done_flag.eq(1)
        with m.If(seq.fault):
            m.d.sync += [error_flag.eq(1), fault_cycle.eq(seq.cycle)]
        m.d.comb += self.irq.eq(done_flag | error_flag)

        # The double-buffered registers: ``nxt[r]`` takes the writes and answers reads,
        # ``active[r]`` is the run's, copied from ``nxt[r]`` at START. The sequencer
        # sees ``nxt[r]`` while stopped (so in START's cycle, whose checks are cycle
        # 0's) and ``active[r]`` while running: chosen by a register, so that no path
        # runs from a bus write through START into its checks and its fetcher (the
        # ULX3S's worst path, 42.6 MHz). The units act on issued instructions only,
        # from cycle 0 on, and read ``active[r]``, also while they drain after a fault.
        width = len(self.ubuf_base)
        inits = {Reg.PROG_LEN: (32, 0), Reg.PROG_ADDR: (32, 0),
                 Reg.PROG_FETCH: (32, cfg.imem_depth),
                 Reg.UBUF_BASE: (width, cfg.ubuf_base), Reg.UBUF_ROWS: (width, cfg.ubuf_rows)}
        nxt, active = {}, {}
        for reg, (bits, init) in inits.items():
            name = reg.name.lower()
            nxt[reg] = Signal(bits, init=init, name=f"{name}_next")
            active[reg] = Signal(bits, init=init, name=f"{name}_active")
            with m.If(seq.start):
                m.d.sync += active[reg].eq(nxt[reg])
        run = {reg: Mux(seq.running, active[reg], nxt[reg]) for reg in inits}
        m.d.comb += [seq.prog_len.eq(run[Reg.PROG_LEN]), seq.prog_addr.eq(run[Reg.PROG_ADDR]),
                     seq.prog_fetch.eq(run[Reg.PROG_FETCH]),
                     self.check_ubuf_base.eq(run[Reg.UBUF_BASE]),
                     self.check_ubuf_rows.eq(run[Reg.UBUF_ROWS]),
                     self.ubuf_base.eq(active[Reg.UBUF_BASE]),
                     self.ubuf_rows.eq(active[Reg.UBUF_ROWS])]
        for reg in (Reg.PROG_LEN, Reg.PROG_ADDR, Reg.PROG_FETCH):
            with m.If(write(reg)):
                m.d.sync += nxt[reg].eq(w_data)

        stopped = ~seq.running
        with m.If(write(Reg.IMEM_ADDR) & stopped):
            m.d.sync += [seq.imem.addr.eq(w_data), part.eq(0)]
        with m.If(write(Reg.IMEM_DATA) & stopped):
            m.d.sync += part.eq(part + 1)
            with m.If(part == 3):
                m.d.comb += [seq.imem.en.eq(1),
                             seq.imem.data.eq(Cat(staged, w_data))]
                m.d.sync += seq.imem.addr.eq(seq.imem.addr + 1)
            with m.Else():
                m.d.sync += staged.eq(Cat(staged[32:], w_data))

        # the UBUF registers: a write the rule refuses (with the other's next value) is
        # ignored
        lo, hi = cfg.ubuf_span

        def allowed(base, rows):
            ok = (base[:cfg.cbuf_bank_shift] == 0) & (rows[:cfg.cbuf_bank_shift] == 0)
            ok &= (rows & (rows - 1)) == 0
            ok &= (base >= lo) & (base + rows <= hi)
            if cfg.ubuf_own_sram:
                ok &= base == lo
            return ok

        new = w_data
        base, rows = nxt[Reg.UBUF_BASE], nxt[Reg.UBUF_ROWS]
        with m.If(write(Reg.UBUF_BASE) & allowed(new, rows)):
            m.d.sync += base.eq(new)
        with m.If(write(Reg.UBUF_ROWS) & allowed(base, new)):
            m.d.sync += rows.eq(new)

        table = {
            Reg.STATUS: Cat(seq.running, done_flag, error_flag),
            Reg.ERROR: seq.error,
            Reg.FAULT_PC: seq.fault_pc,
            Reg.PROG_LEN: nxt[Reg.PROG_LEN],
            Reg.IMEM_ADDR: seq.imem.addr,
            Reg.CYCLES: seq.cycle,
            Reg.MACS_LO: self.macs[:32],
            Reg.MACS_HI: self.macs[32:],
            Reg.DRAM_RD_BYTES: self.dram_rd_bytes,
            Reg.DRAM_WR_BYTES: self.dram_wr_bytes,
            Reg.HWCFG: regs.hwcfg_word(cfg.tile_rows, cfg.tile_cols, cfg.tile_size),
            Reg.FAULT_CYCLE: fault_cycle,
            Reg.UBUF_BASE: nxt[Reg.UBUF_BASE],
            Reg.UBUF_ROWS: nxt[Reg.UBUF_ROWS],
            Reg.PROG_ADDR: nxt[Reg.PROG_ADDR],
            Reg.PROG_FETCH: nxt[Reg.PROG_FETCH],
            Reg.FETCH_RD_BYTES: self.fetch_rd_bytes,
            Reg.UBUF_WR_BYTES: self.ubuf_wr_bytes,
            Reg.UBUF_RD_BYTES: self.ubuf_rd_bytes,
        }
        for addr, rdata in ((self.reg_addr, self.reg_rdata),
                            (self.core_addr, self.core_rdata)):
            with m.Switch(addr):
                for reg, value in table.items():
                    with m.Case(reg):
                        m.d.comb += rdata.eq(value)
        return m
