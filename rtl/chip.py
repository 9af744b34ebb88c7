"""The chip: sequencer, fabric registers, DMA, weight loader, matmul unit, grid,
vector unit, the crop/fetch path, the lane router (chips with general lanes), the
two buffers and the management core (chips with one), behind a register interface
and one external-memory port."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect

from systolica.arch import fabric, regs
from systolica.arch.config import ChipConfig
from systolica.rtl.array import Grid
from systolica.rtl.cbuf import Acc, Cbuf
from systolica.rtl.core_control import CoreControl
from systolica.rtl.csr import RegisterFile
from systolica.rtl.dma import Dma
from systolica.rtl.fabric_regs import FabricRegs
from systolica.rtl.matmul import MatmulUnit, WeightLoader
from systolica.rtl.ports import DramMaster, check_config
from systolica.rtl.route import LaneRouter
from systolica.rtl.sequencer import Sequencer
from systolica.rtl.ubuf import CopyUnit
from systolica.rtl.vpu import VectorUnit


class Chip(wiring.Component):
    """One Systolica chip built from a :class:`~systolica.arch.config.ChipConfig`.

    Ports: the register bus (``reg_*``) and ``irq`` towards the host, and the
    external-memory master (``mem_*``: the members of :class:`~.ports.DramMaster`,
    kept flat so the Verilog ports keep their names; one word of ``cfg.rows`` bytes
    per cycle, read data the cycle after ``mem_re``).
    """

    def __init__(self, *, cfg: ChipConfig):
        self.cfg = check_config(cfg, "Chip")
        super().__init__({
            "reg_addr": In(regs.ADDR_BITS), "reg_wdata": In(32), "reg_we": In(1),
            "reg_rdata": Out(32), "irq": Out(1),
            **{f"mem_{name}": member
               for name, member in DramMaster.of(cfg).members.items()},
        })

    def elaborate(self, platform):
        # Every unit owns its memory ports. The CBUF and the ACC are banked (one read
        # and one write port per bank) behind a crossbar each; two units on one port
        # of one bank in one cycle are a conflict, on which the sequencer faults (a
        # CBUF and an ACC conflict in one cycle are one fault; the compiler books every
        # bank port, so a correct program has none).
        m = Module()
        cfg = self.cfg
        m.submodules.csr = csr = RegisterFile(cfg=cfg)
        m.submodules.seq = seq = Sequencer(cfg=cfg)
        m.submodules.fabric = fab = FabricRegs(cfg=cfg)
        m.submodules.dma = dma = Dma(cfg=cfg)
        m.submodules.wload = wl = WeightLoader(cfg=cfg)
        m.submodules.mm = mm = MatmulUnit(cfg=cfg)
        m.submodules.grid = grid = Grid(cfg=cfg)
        m.submodules.vpu = vpu = VectorUnit(cfg=cfg)
        m.submodules.copy = copy = CopyUnit(cfg=cfg)
        m.submodules.acc = acc = Acc(cfg=cfg, row_reads=3, row_writes=3)
        lanes = cfg.general_lanes
        m.submodules.cbuf = cbuf = Cbuf(cfg=cfg, row_reads=3 + lanes, part_reads=1,
                                        row_writes=4 + lanes)

        # Host side, and the management core (docs/management-core.md): its window
        # shares the register file's write port, the host's write first.
        m.d.comb += [csr.reg_addr.eq(self.reg_addr), csr.reg_wdata.eq(self.reg_wdata),
                     csr.reg_we.eq(self.reg_we)]
        if cfg.has_core:
            m.submodules.core = core = CoreControl(cfg=cfg)
            m.d.comb += [core.reg_addr.eq(self.reg_addr), core.reg_wdata.eq(self.reg_wdata),
                         core.reg_we.eq(self.reg_we),
                         self.reg_rdata.eq(csr.reg_rdata | core.reg_rdata),
                         csr.core_addr.eq(core.csr_addr), csr.core_we.eq(core.csr_we),
                         csr.core_wdata.eq(core.csr_wdata),
                         core.csr_rdata.eq(csr.core_rdata), core.csr_ready.eq(csr.core_ready),
                         core.array_irq.eq(csr.irq), self.irq.eq(core.irq)]
        else:
            m.d.comb += [self.reg_rdata.eq(csr.reg_rdata), self.irq.eq(csr.irq)]
        connect(m, csr.seq, seq.ctrl)
        # the UBUF where its registers put it: the run's, and for the sequencer's
        # checks the next values until START (rtl/csr.py)
        for unit in (copy, vpu):
            m.d.comb += [unit.ubuf_base.eq(csr.ubuf_base), unit.ubuf_rows.eq(csr.ubuf_rows)]
        m.d.comb += [seq.ubuf_base.eq(csr.check_ubuf_base),
                     seq.ubuf_rows.eq(csr.check_ubuf_rows)]

        # Issue.
        connect(m, seq.dma, dma.issue)
        connect(m, seq.wload, wl.issue)
        connect(m, seq.mm, mm.issue)
        connect(m, seq.convcfg, mm.convcfg)
        connect(m, seq.taps, mm.taps)
        connect(m, seq.vpu, vpu.issue)
        connect(m, seq.fabric, fab.issue)
        connect(m, seq.ubuf, copy.issue)
        if lanes:
            m.submodules.router = router = LaneRouter(cfg=cfg)
            connect(m, seq.lanes, router.issue)
        else:   # ROUTE is illegal here: the port never issues
            m.d.comb += [seq.lanes.ready.eq(1), seq.lanes.drained.eq(1)]

        # Fabric configuration.
        t = cfg.tile_rows
        for i in range(t):
            m.d.comb += [mm.west_feed[i].eq(fab[f"west_feed[{i}]"]),
                         wl.west_wfeed[i].eq(fab[f"west_wfeed[{i}]"]),
                         vpu.wb_src[i].eq(fab[f"wb_src[{i}]"])]
        for j in range(cfg.tile_cols):
            m.d.comb += [wl.north_feed[j].eq(fab[f"north_feed[{j}]"]),
                         mm.acc_src[j].eq(fab[f"acc_src[{j}]"])]
        w_mux = fabric.by_name(cfg)["w_in[0][0]"]
        lane, west = w_mux.value_of("lane"), w_mux.value_of("west")
        for i in range(t):
            for j in range(cfg.tile_cols):
                k = i * cfg.tile_cols + j
                w_in = fab[f"w_in[{i}][{j}]"]
                m.d.comb += [grid.act_sel[k].eq(fab[f"act_in[{i}][{j}]"] != 0),
                             grid.w_sel[k].eq((w_in != lane) & (w_in != west)),
                             grid.w_west[k].eq(w_in == west),
                             grid.psum_sel[k].eq(fab[f"psum_in[{i}][{j}]"] != 0)]
        if cfg.general_lanes:
            # The general lanes' control registers; the lane router drives the west
            # edge and reads the south edge (the other edges stay zero and unread:
            # docs/contract.md, "General lanes" and "ROUTE").
            general = [mx for mx in fabric.muxes(cfg)
                       if mx.name.split("[")[0] in fabric.GENERAL]
            m.d.comb += [grid.gen_sel[k].eq(fab[mx.name]) for k, mx in enumerate(general)]
            m.d.comb += [grid.gen_in_w[r].eq(router.gen_in_w[r]) for r in range(cfg.rows)]
            m.d.comb += [router.gen_out_s[c].eq(grid.gen_out_s[c]) for c in range(cfg.cols)]

        # Grid between the weight loader, the feeder and the collector.
        m.d.comb += [grid.w_shift.eq(wl.w_shift), grid.w_bank.eq(wl.w_bank)]
        for r in range(cfg.rows):
            m.d.comb += [grid.west_a[r].eq(mm.west_a[r]), grid.west_sel[r].eq(mm.west_sel[r]),
                         grid.west_w[r].eq(wl.west_w[r])]
        for c in range(cfg.cols):
            m.d.comb += [grid.north_w[c].eq(wl.north_w[c]), mm.south_psum[c].eq(grid.south_psum[c])]
        for k in range(len(grid.exit_psum)):     # the partial-sum exits
            m.d.comb += mm.exit_psum[k].eq(grid.exit_psum[k])

        # Memory ports: each reader and writer has its own port on a crossbar.
        connect(m, wl.cbuf_read, cbuf.row_read[0])
        connect(m, dma.cbuf_read, cbuf.row_read[1])
        connect(m, mm.cbuf_read, cbuf.part_read[0])
        connect(m, dma.cbuf_write, cbuf.row_write[0])
        connect(m, vpu.cbuf_write, cbuf.row_write[1])
        connect(m, copy.cbuf_read, cbuf.row_read[2])
        connect(m, copy.cbuf_write, cbuf.row_write[2])
        connect(m, vpu.crop_write, cbuf.row_write[3])
        if lanes:
            connect(m, router.cbuf_read, cbuf.row_read[3])
            connect(m, router.cbuf_write, cbuf.row_write[4])
            m.d.comb += cbuf.row_keep[4].eq(router.cbuf_keep)
        for port in (1, 3):     # the vector unit's writes leave its kept groups alone
            m.d.comb += cbuf.row_keep[port].eq(vpu.cbuf_keep)
        for k, port in enumerate((mm.acc_read, vpu.acc_read, dma.acc_read)):
            connect(m, port, acc.row_read[k])
        for k, port in enumerate((mm.acc_write, vpu.acc_write, dma.acc_write)):
            connect(m, port, acc.row_write[k])
        m.d.comb += seq.bank_conflict.eq(cbuf.conflict | acc.conflict)

        # External memory: the DMA's master port, the instruction fetcher's and the
        # management core's share the flat top-level ``mem_*``. The DMA has priority
        # (the fetcher reads only in cycles the DMA leaves idle, which it learns from
        # ``mem_busy``); both use it only while a program runs, and the core only
        # while none does (docs/management-core.md, "The core's DRAM window").
        dma_busy = dma.mem.re | dma.mem.we
        addr = Mux(dma_busy, dma.mem.addr, seq.mem.addr)
        re, we, wdata = dma.mem.re | seq.mem.re, dma.mem.we, dma.mem.wdata
        if cfg.has_core:
            m.d.comb += [core.mem_grant.eq(~seq.ctrl.running), core.mem_rdata.eq(self.mem_rdata)]
            addr = Mux(seq.ctrl.running, addr, core.mem_addr)
            re, we = re | core.mem_re, we | core.mem_we
            wdata = Mux(seq.ctrl.running, wdata, core.mem_wdata)
        m.d.comb += [seq.mem_busy.eq(dma_busy), dma.mem.rdata.eq(self.mem_rdata),
                     seq.mem.rdata.eq(self.mem_rdata), self.mem_addr.eq(addr),
                     self.mem_re.eq(re), self.mem_we.eq(we), self.mem_wdata.eq(wdata)]

        # Performance counters, cleared by START.
        macs = Signal(64)
        rd_bytes, wr_bytes, fetch_bytes = Signal(32), Signal(32), Signal(32)
        ubuf_wr, ubuf_rd = Signal(32), Signal(32)
        with m.If(csr.seq.start):
            m.d.sync += [macs.eq(0), rd_bytes.eq(0), wr_bytes.eq(0), fetch_bytes.eq(0),
                         ubuf_wr.eq(0), ubuf_rd.eq(0)]
        with m.Else():
            with m.If(mm.row_fed):
                m.d.sync += macs.eq(macs + cfg.macs)
            with m.If(dma.mem.re):
                m.d.sync += rd_bytes.eq(rd_bytes + cfg.dram_word_bytes)
            with m.If(dma.mem.we):
                m.d.sync += wr_bytes.eq(wr_bytes + cfg.dram_word_bytes)
            with m.If(seq.mem.re & ~dma_busy):      # a word the fetcher gets
                m.d.sync += fetch_bytes.eq(fetch_bytes + cfg.dram_word_bytes)
            # a COPY's crop and a fused crop may write two UBUF banks in one cycle
            m.d.sync += ubuf_wr.eq(ubuf_wr + cfg.rows * (copy.cropped.as_unsigned()
                                                         + vpu.crop_write.en))
            with m.If(copy.fetched):
                m.d.sync += ubuf_rd.eq(ubuf_rd + cfg.rows)
        m.d.comb += [csr.macs.eq(macs), csr.dram_rd_bytes.eq(rd_bytes),
                     csr.dram_wr_bytes.eq(wr_bytes), csr.fetch_rd_bytes.eq(fetch_bytes),
                     csr.ubuf_wr_bytes.eq(ubuf_wr), csr.ubuf_rd_bytes.eq(ubuf_rd)]
        return m
