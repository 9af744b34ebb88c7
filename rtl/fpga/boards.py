"""Board tops: the FPGA top (:mod:`.top`) on a board's pins, clocked from its
oscillator (boards as :mod:`systolica.arch.boards` describes them)."""

from amaranth.hdl import ClockDomain, Elaboratable, Module
from amaranth.lib import io

from systolica.arch.boards import Board
from systolica.arch.config import ChipConfig
from systolica.rtl.fpga.clocks import Ecp5Clock
from systolica.rtl.fpga.top import FpgaTop


class BoardTop(Elaboratable):
    """The chip of ``cfg`` on ``board``: the UART to the board's USB serial bridge,
    the status to LEDs 0 (running), 1 (done) and 2 (fault)."""

    def __init__(self, *, board: Board, cfg: ChipConfig):
        self.board, self.cfg = board, cfg

    def elaborate(self, platform):
        m = Module()
        board = self.board
        if board.clock_hz == board.input_hz:
            pass        # the platform's own sync domain, from its default clock
        elif board.family == "ecp5":
            m.domains.sync = ClockDomain("sync")
            m.submodules.clk_in = clk_in = io.Buffer(
                "i", platform.request(platform.default_clk, dir="-"))
            m.submodules.clock = Ecp5Clock(clk_in.i, input_hz=board.input_hz,
                                           output_hz=board.clock_hz)
        else:
            raise ValueError(f"board {board.name}: no clock generator for the "
                             f"{board.family} family; run it at its input clock")
        m.submodules.top = top = FpgaTop(cfg=self.cfg, link=board.link)
        uart = platform.request("uart", 0, dir="-")
        m.submodules.uart_rx = rx = io.Buffer("i", uart.rx)
        m.submodules.uart_tx = tx = io.Buffer("o", uart.tx)
        m.d.comb += [top.rx.eq(rx.i), tx.o.eq(top.tx)]
        for k in range(len(top.leds)):
            m.submodules[f"led_{k}"] = led = io.Buffer("o", platform.request("led", k,
                                                                             dir="-"))
            m.d.comb += led.o.eq(top.leds[k])
        return m
