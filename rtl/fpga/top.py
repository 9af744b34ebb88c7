"""The chip as an FPGA sees it: the chip, its external memory in block RAM, and the
UART host link, with three status lights."""

from amaranth.hdl import Module, Mux, ResetInserter
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out, connect

from systolica.arch.config import ChipConfig
from systolica.arch.link import LinkTiming
from systolica.rtl.chip import Chip
from systolica.rtl.fpga.bridge import LinkBridge
from systolica.rtl.fpga.uart import UartRx, UartTx
from systolica.rtl.ports import check_config


class FpgaTop(wiring.Component):
    """The chip of ``cfg`` behind a UART host link (:mod:`systolica.arch.link`).

    Ports: ``rx`` and ``tx`` (the UART lines at ``link.divisor`` clocks per bit), ``leds``
    (bit 0 running, bit 1 done, bit 2 fault: the chip's ``STATUS``, so done and fault
    stay lit until the host acknowledges the interrupt). The DRAM is one memory of
    ``cfg.dram_words`` words; the bridge reaches it only while the chip is stopped
    and its management core (if it has one) is held, and the chip has priority.
    ``link`` also gives the bridge's idle timeout.
    """

    rx: In(1, init=1)
    tx: Out(1, init=1)
    leds: Out(3)

    def __init__(self, *, cfg: ChipConfig, link: LinkTiming):
        self.cfg = check_config(cfg, "FpgaTop")
        if not isinstance(link, LinkTiming):
            raise TypeError(f"FpgaTop link must be a LinkTiming, not {link!r}")
        self.link = link
        super().__init__()

    def elaborate(self, platform):
        # The bridge's RESET resets the chip alone: the link and the DRAM keep going.
        # One port pair on the DRAM (one read, one write, one address) keeps it a
        # simple dual-port block RAM on every FPGA family; the chip reads and writes
        # at one address anyway.
        m = Module()
        cfg = self.cfg
        m.submodules.uart_rx = rx = UartRx(divisor=self.link.divisor)
        m.submodules.uart_tx = tx = UartTx(divisor=self.link.divisor)
        m.submodules.bridge = bridge = LinkBridge(cfg=cfg, idle_timeout=self.link.idle_timeout)
        chip = Chip(cfg=cfg)
        m.submodules.chip = ResetInserter(bridge.chip_reset)(chip)
        m.submodules.dram = dram = BoardDram(width=8 * cfg.dram_word_bytes,
                                             depth=cfg.dram_words)

        m.d.comb += [rx.rx.eq(self.rx), self.tx.eq(tx.tx)]
        connect(m, rx.data, bridge.rx)
        connect(m, bridge.tx, tx.data)

        m.d.comb += [chip.reg_addr.eq(bridge.reg_addr), chip.reg_wdata.eq(bridge.reg_wdata),
                     chip.reg_we.eq(bridge.reg_we), bridge.reg_rdata.eq(chip.reg_rdata),
                     self.leds.eq(bridge.status)]

        chip_access = chip.mem_re | chip.mem_we
        addr = Mux(chip_access, chip.mem_addr, bridge.dram.addr)
        in_range = addr < cfg.dram_words     # the chip faults on an address past the end
        m.d.comb += [dram.addr.eq(addr), dram.re.eq(chip.mem_re | bridge.dram.re),
                     dram.we.eq((chip.mem_we | bridge.dram.we) & in_range),
                     dram.wdata.eq(Mux(chip_access, chip.mem_wdata, bridge.dram.wdata)),
                     chip.mem_rdata.eq(dram.rdata), bridge.dram.rdata.eq(dram.rdata)]
        return m


class BoardDram(wiring.Component):
    """The board's DRAM: one block RAM of ``depth`` words, one address a cycle. A read
    (``re``) returns the word in the next cycle; a write (``we``) is posted: registered,
    it reaches the block RAM a cycle later, and a read in that cycle sees it (the read
    port is transparent to the write). So every read returns what it would with the
    write done at once, and the path from a CBUF bank's block RAM through the DMA ends
    at a register rather than at the DRAM's block RAMs, for the clock rate."""

    def __init__(self, *, width: int, depth: int):
        self.width, self.depth = width, depth
        super().__init__({"addr": In(range(depth)), "re": In(1), "we": In(1),
                          "wdata": In(width), "rdata": Out(width)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=self.width, depth=self.depth, init=[])
        wr = mem.write_port()
        rd = mem.read_port(transparent_for=(wr,))
        m.d.comb += [rd.addr.eq(self.addr), rd.en.eq(self.re), self.rdata.eq(rd.data)]
        m.d.sync += [wr.addr.eq(self.addr), wr.en.eq(self.we), wr.data.eq(self.wdata)]
        return m
