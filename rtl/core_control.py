"""The management core in the chip: the core (:class:`~.mgmt_core.MgmtCore`) and the
host's hold on it, the ``CORE_*`` registers (docs/management-core.md, "The core in the
chip")."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from systolica.arch import isa, regs
from systolica.arch.config import ChipConfig
from systolica.arch.regs import Reg
from systolica.rtl.mgmt_core import MgmtCore
from systolica.rtl.ports import check_config

#: The registers this block answers; the register file answers the others.
CORE_REGS = (Reg.CORE_CTRL, Reg.CORE_STATUS, Reg.CORE_ADDR, Reg.CORE_DATA, Reg.CORE_MSG)


class CoreControl(wiring.Component):
    """The management core of chip ``cfg`` (``cfg.has_core``) and its registers.

    Members:

    * the host's register bus (``reg_addr``, ``reg_wdata``, ``reg_we``) as the chip
      gets it; ``reg_rdata`` is the value of a ``CORE_*`` register at ``reg_addr``
      and 0 at any other (the chip ORs it with the register file's);
    * the core's window into the register file (``csr_addr``, ``csr_we``,
      ``csr_wdata``, ``csr_rdata``, ``csr_ready``: the register file's ``core_*``
      port), which carries the core's accesses to every register but the ``CORE_*``
      ones, answered here;
    * ``array_irq``: the register file's interrupt, the core's interrupt 0;
      ``irq``: the host's interrupt (the array's while the core is held, the core's
      ``MESSAGE``, ``TRAP`` or ``BAD_ACCESS`` while it runs);
    * the core's DRAM window, a master of the chip's DRAM port (``mem_re``,
      ``mem_we``, ``mem_addr``, ``mem_wdata``, ``mem_rdata``) that accesses only in
      cycles of ``mem_grant`` (the chip grants it while the array is stopped).
    """

    def __init__(self, *, cfg: ChipConfig):
        self.cfg = check_config(cfg, "CoreControl")
        if not cfg.has_core:
            raise ValueError(f"{cfg.name} has no management core (core_imem_bytes 0)")
        super().__init__({
            "reg_addr": In(regs.ADDR_BITS), "reg_wdata": In(32), "reg_we": In(1),
            "reg_rdata": Out(32),
            "csr_addr": Out(regs.ADDR_BITS), "csr_we": Out(1), "csr_wdata": Out(32),
            "csr_rdata": In(32), "csr_ready": In(1),
            "array_irq": In(1), "irq": Out(1),
            "mem_re": Out(1), "mem_we": Out(1), "mem_addr": Out(isa.DRAM_ADDR_BITS),
            "mem_wdata": Out(8 * cfg.dram_word_bytes),
            "mem_rdata": In(8 * cfg.dram_word_bytes), "mem_grant": In(1)})

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.submodules.core = core = MgmtCore(imem_words=cfg.core_imem_bytes // 4,
                                            dmem_words=cfg.core_dmem_bytes // 4,
                                            dram_word_bytes=cfg.dram_word_bytes,
                                            dram_words=cfg.dram_words)
        m.d.comb += [self.mem_re.eq(core.dram_re), self.mem_we.eq(core.dram_we),
                     self.mem_addr.eq(core.dram_addr), self.mem_wdata.eq(core.dram_wdata),
                     core.dram_rdata.eq(self.mem_rdata), core.dram_grant.eq(self.mem_grant)]
        run, message = Signal(), Signal()
        load_addr, msg = Signal(32), Signal(32)
        host = lambda reg: self.reg_we & (self.reg_addr == reg)

        # the host's registers
        with m.If(host(Reg.CORE_CTRL)):
            m.d.sync += [run.eq(self.reg_wdata[0]), message.eq(0)]
        with m.If(host(Reg.CTRL) & self.reg_wdata[1]):      # IRQ_ACK
            m.d.sync += message.eq(0)
        with m.If(host(Reg.CORE_ADDR)):
            m.d.sync += load_addr.eq(self.reg_wdata)
        with m.If(host(Reg.CORE_DATA) & ~run):
            m.d.sync += load_addr.eq(load_addr + 4)
        m.d.comb += [core.run.eq(run), core.load_addr.eq(load_addr),
                     core.load_data.eq(self.reg_wdata),
                     core.load_en.eq(host(Reg.CORE_DATA) & ~run),
                     core.irq.eq(self.array_irq)]

        # the core's window: CORE_MSG here (its other CORE_* writes are ignored), every
        # other register in the register file, whose write port a host write takes first
        own = Signal()
        m.d.comb += own.eq(Cat(*(core.reg_addr == r for r in CORE_REGS)).any())
        with m.If(core.reg_valid & core.reg_we & own & (core.reg_addr == Reg.CORE_MSG)):
            m.d.sync += [msg.eq(core.reg_wdata), message.eq(1)]
        m.d.comb += [self.csr_addr.eq(core.reg_addr), self.csr_wdata.eq(core.reg_wdata),
                     self.csr_we.eq(core.reg_valid & core.reg_we & ~own),
                     core.reg_ready.eq(own | ~core.reg_we | self.csr_ready)]

        # (the block clears bad_access a cycle after run falls: the register's reads
        # and the host's interrupt drop it with run)
        bad = core.bad_access & run
        status = Cat(run, message, core.trap, bad)
        table = {Reg.CORE_CTRL: run, Reg.CORE_STATUS: status, Reg.CORE_ADDR: load_addr,
                 Reg.CORE_DATA: Mux(run, 0, core.load_rdata), Reg.CORE_MSG: msg}
        own_rdata = Signal(32)
        for addr, rdata in ((self.reg_addr, self.reg_rdata), (core.reg_addr, own_rdata)):
            with m.Switch(addr):
                for reg, value in table.items():
                    with m.Case(reg):
                        m.d.comb += rdata.eq(value)
        m.d.comb += core.reg_rdata.eq(Mux(own, own_rdata, self.csr_rdata))
        m.d.comb += self.irq.eq(Mux(run, message | core.trap | bad, self.array_irq))
        return m
