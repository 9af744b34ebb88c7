"""The register interface seen by the firmware (map in :mod:`systolica.arch.regs`)."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from systolica.arch import isa, regs
from systolica.arch.config import ChipConfig
from systolica.arch.regs import Reg

from .sequencer import PC_BITS, ErrorCode_shape


class RegisterFile(wiring.Component):
    """32-bit registers on a simple bus (write strobe, combinational read data).

    Program words are written 32 bits at a time through ``IMEM_DATA``; the fourth write
    stores the instruction and advances ``IMEM_ADDR``. ``irq`` stays high from the end of
    a run (done or fault) until ``CTRL.IRQ_ACK`` or the next ``START``.
    """

    def __init__(self, cfg: ChipConfig):
        self.cfg = cfg
        super().__init__({
            "reg_addr": In(regs.ADDR_BITS), "reg_wdata": In(32), "reg_we": In(1),
            "reg_rdata": Out(32), "irq": Out(1),
            "start": Out(1), "prog_len": Out(32),
            "imem_we": Out(1), "imem_waddr": Out(32), "imem_wdata": Out(isa.WORD_BITS),
            "running": In(1), "done": In(1), "fault": In(1),
            "error": In(ErrorCode_shape()), "fault_pc": In(PC_BITS),
            "cycle": In(isa.CYCLE_BITS), "macs": In(64),
            "dram_rd_bytes": In(32), "dram_wr_bytes": In(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        done_flag, error_flag = Signal(), Signal()
        fault_cycle = Signal(isa.CYCLE_BITS)
        part = Signal(2)
        staged = Signal(96)
        write = lambda reg: self.reg_we & (self.reg_addr == reg)

        m.d.comb += self.start.eq(write(Reg.CTRL) & self.reg_wdata[0] & ~self.running)
        with m.If(self.start | (write(Reg.CTRL) & self.reg_wdata[1])):
            m.d.sync += [done_flag.eq(0), error_flag.eq(0)]
        with m.If(self.done):
            m.d.sync += done_flag.eq(1)
        with m.If(self.fault):
            m.d.sync += [error_flag.eq(1), fault_cycle.eq(self.cycle)]
        m.d.comb += self.irq.eq(done_flag | error_flag)

        with m.If(write(Reg.PROG_LEN)):
            m.d.sync += self.prog_len.eq(self.reg_wdata)
        with m.If(write(Reg.IMEM_ADDR)):
            m.d.sync += [self.imem_waddr.eq(self.reg_wdata), part.eq(0)]
        with m.If(write(Reg.IMEM_DATA)):
            m.d.sync += part.eq(part + 1)
            with m.If(part == 3):
                m.d.comb += [self.imem_we.eq(1),
                             self.imem_wdata.eq(Cat(staged, self.reg_wdata))]
                m.d.sync += self.imem_waddr.eq(self.imem_waddr + 1)
            with m.Else():
                m.d.sync += staged.eq(Cat(staged[32:], self.reg_wdata))

        table = {
            Reg.STATUS: Cat(self.running, done_flag, error_flag),
            Reg.ERROR: self.error,
            Reg.FAULT_PC: self.fault_pc,
            Reg.PROG_LEN: self.prog_len,
            Reg.IMEM_ADDR: self.imem_waddr,
            Reg.CYCLES: self.cycle,
            Reg.MACS_LO: self.macs[:32],
            Reg.MACS_HI: self.macs[32:],
            Reg.DRAM_RD_BYTES: self.dram_rd_bytes,
            Reg.DRAM_WR_BYTES: self.dram_wr_bytes,
            Reg.HWCFG: regs.hwcfg_word(cfg.tile_rows, cfg.tile_cols, cfg.tile_size),
            Reg.FAULT_CYCLE: fault_cycle,
            Reg.UBUF_BASE: cfg.ubuf_base,
            Reg.UBUF_ROWS: cfg.ubuf_rows,
        }
        with m.Switch(self.reg_addr):
            for reg, value in table.items():
                with m.Case(reg):
                    m.d.comb += self.reg_rdata.eq(value)
        return m
