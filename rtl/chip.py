"""The chip: sequencer, fabric registers, DMA, weight loader, matmul unit, grid,
vector unit, and the two buffers, behind a register interface and one
external-memory port."""

from amaranth.hdl import Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from systolica.arch import isa, regs
from systolica.arch.config import ChipConfig

from .array import Grid
from .csr import RegisterFile
from .dma import Dma
from .fabric_regs import FabricRegs
from .matmul import MatmulUnit, WeightLoader
from .sequencer import Sequencer
from .vpu import VectorUnit


class Chip(wiring.Component):
    """One Systolica chip built from a :class:`~systolica.arch.config.ChipConfig`.

    Ports: the register bus (``reg_*``) and ``irq`` towards the host, and the
    external-memory master (``mem_*``, one word of ``cfg.rows`` bytes per cycle,
    read data the cycle after ``mem_re``).
    """

    def __init__(self, cfg: ChipConfig):
        self.cfg = cfg
        wbits = cfg.dram_word_bytes * 8
        super().__init__({
            "reg_addr": In(regs.ADDR_BITS), "reg_wdata": In(32), "reg_we": In(1),
            "reg_rdata": Out(32), "irq": Out(1),
            "mem_addr": Out(isa.DRAM_ADDR_BITS), "mem_re": Out(1), "mem_rdata": In(wbits),
            "mem_we": Out(1), "mem_wdata": Out(wbits),
        })

    def elaborate(self, platform):
        # Every unit owns its memory ports (the CBUF has three read and two write
        # ports, the ACC three of each); the scheduler keeps their address ranges
        # apart in time, so no arbitration is needed.
        m = Module()
        cfg = self.cfg
        m.submodules.csr = csr = RegisterFile(cfg)
        m.submodules.seq = seq = Sequencer(cfg)
        m.submodules.fabric = fab = FabricRegs(cfg)
        m.submodules.dma = dma = Dma(cfg)
        m.submodules.wload = wl = WeightLoader(cfg)
        m.submodules.mm = mm = MatmulUnit(cfg)
        m.submodules.grid = grid = Grid(cfg)
        m.submodules.vpu = vpu = VectorUnit(cfg)
        m.submodules.cbuf = cbuf = memory.Memory(shape=cfg.rows * 8, depth=cfg.cbuf_depth,
                                                 init=[])
        m.submodules.acc = acc = memory.Memory(shape=cfg.cols * 32, depth=cfg.acc_depth,
                                               init=[])

        # Host side.
        m.d.comb += [
            csr.reg_addr.eq(self.reg_addr), csr.reg_wdata.eq(self.reg_wdata),
            csr.reg_we.eq(self.reg_we), self.reg_rdata.eq(csr.reg_rdata),
            self.irq.eq(csr.irq),
            seq.start.eq(csr.start), seq.prog_len.eq(csr.prog_len),
            seq.imem_we.eq(csr.imem_we), seq.imem_waddr.eq(csr.imem_waddr),
            seq.imem_wdata.eq(csr.imem_wdata),
            csr.running.eq(seq.running), csr.done.eq(seq.done), csr.fault.eq(seq.fault),
            csr.error.eq(seq.error), csr.fault_pc.eq(seq.fault_pc), csr.cycle.eq(seq.cycle),
        ]

        # Issue.
        payload = seq.payload
        def view(op):
            layout = isa.PAYLOAD[op]
            return layout(payload[:layout.size])

        wl_args, mm_args = view(isa.Opcode.WLOAD), view(isa.Opcode.MATMUL)
        cfg_args = view(isa.Opcode.SETCFG)
        m.d.comb += [
            dma.issue.eq(seq.dma_issue), dma.args.eq(payload[:dma.args.shape().size]), seq.dma_ready.eq(dma.ready),
            wl.issue.eq(seq.wload_issue), wl.w_addr.eq(wl_args.w_addr), wl.bank.eq(wl_args.bank),
            seq.wload_ready.eq(wl.ready),
            mm.issue.eq(seq.mm_issue), mm.act_addr.eq(mm_args.act_addr), mm.rows.eq(mm_args.rows),
            mm.acc_addr.eq(mm_args.acc_addr), mm.accumulate.eq(mm_args.accumulate),
            mm.bank.eq(mm_args.bank), seq.mm_ready.eq(mm.ready),
            vpu.issue.eq(seq.vpu_issue), vpu.args.eq(payload[:vpu.args.shape().size]), seq.vpu_ready.eq(vpu.ready),
            fab.we.eq(seq.cfg_issue), fab.count.eq(cfg_args.more + 1),
            seq.all_drained.eq(dma.drained & wl.drained & mm.drained & vpu.drained),
        ]

        for j in range(isa.SETCFG_PAIRS):
            suffix = str(j) if j else ""
            m.d.comb += [fab.index[j].eq(cfg_args[f"index{suffix}"]),
                         fab.wvalue[j].eq(cfg_args[f"value{suffix}"])]

        # Fabric configuration.
        t = cfg.tile_rows
        for i in range(t):
            m.d.comb += [mm.west_feed[i].eq(fab[f"west_feed[{i}]"]),
                         vpu.wb_src[i].eq(fab[f"wb_src[{i}]"])]
        for j in range(cfg.tile_cols):
            m.d.comb += [wl.north_feed[j].eq(fab[f"north_feed[{j}]"]),
                         mm.acc_src[j].eq(fab[f"acc_src[{j}]"])]
        for i in range(t):
            for j in range(cfg.tile_cols):
                k = i * t + j
                m.d.comb += [grid.act_sel[k].eq(fab[f"act_in[{i}][{j}]"] != 0),
                             grid.w_sel[k].eq(fab[f"w_in[{i}][{j}]"] != 0),
                             grid.psum_sel[k].eq(fab[f"psum_in[{i}][{j}]"] != 0)]

        # Grid between the weight loader, the feeder and the collector.
        m.d.comb += [grid.w_shift.eq(wl.w_shift), grid.w_bank.eq(wl.w_bank)]
        for r in range(cfg.rows):
            m.d.comb += [grid.west_a[r].eq(mm.west_a[r]), grid.west_sel[r].eq(mm.west_sel[r])]
        for c in range(cfg.cols):
            m.d.comb += [grid.north_w[c].eq(wl.north_w[c]), mm.south_psum[c].eq(grid.south_psum[c])]

        # Memory ports: each reader and writer has its own.
        def read(mem, addr, rdata):
            port = mem.read_port()
            m.d.comb += [port.addr.eq(addr), rdata.eq(port.data)]

        def write(mem, en, addr, wdata):
            port = mem.write_port()
            m.d.comb += [port.en.eq(en), port.addr.eq(addr), port.data.eq(wdata)]

        read(cbuf, mm.cbuf_raddr, mm.cbuf_rdata)
        read(cbuf, wl.cbuf_raddr, wl.cbuf_rdata)
        read(cbuf, dma.cbuf_raddr, dma.cbuf_rdata)
        write(cbuf, dma.cbuf_we, dma.cbuf_waddr, dma.cbuf_wdata)
        write(cbuf, vpu.cbuf_we, vpu.cbuf_waddr, vpu.cbuf_wdata)
        read(acc, mm.acc_raddr, mm.acc_rdata)
        read(acc, vpu.acc_raddr, vpu.acc_rdata)
        read(acc, dma.acc_raddr, dma.acc_rdata)
        write(acc, mm.acc_we, mm.acc_waddr, mm.acc_wdata)
        write(acc, vpu.acc_we, vpu.acc_waddr, vpu.acc_wdata)
        write(acc, dma.acc_we, dma.acc_waddr, dma.acc_wdata)

        m.d.comb += [
            self.mem_addr.eq(dma.mem_addr), self.mem_re.eq(dma.mem_re),
            dma.mem_rdata.eq(self.mem_rdata), self.mem_we.eq(dma.mem_we),
            self.mem_wdata.eq(dma.mem_wdata),
        ]

        # Performance counters, cleared by START.
        macs = Signal(64)
        rd_bytes, wr_bytes = Signal(32), Signal(32)
        with m.If(csr.start):
            m.d.sync += [macs.eq(0), rd_bytes.eq(0), wr_bytes.eq(0)]
        with m.Else():
            with m.If(mm.row_fed):
                m.d.sync += macs.eq(macs + cfg.macs)
            with m.If(dma.mem_re):
                m.d.sync += rd_bytes.eq(rd_bytes + cfg.dram_word_bytes)
            with m.If(dma.mem_we):
                m.d.sync += wr_bytes.eq(wr_bytes + cfg.dram_word_bytes)
        m.d.comb += [csr.macs.eq(macs), csr.dram_rd_bytes.eq(rd_bytes),
                     csr.dram_wr_bytes.eq(wr_bytes)]
        return m
