"""The FPGA boards the chip is built for: which preset, which clock, how fast the
host link runs. The bitstream build (:mod:`systolica.app.bitstream`) and the host
(``systolica run --port``) read the same entry, so both sides agree on the link."""

from __future__ import annotations

from dataclasses import dataclass

from systolica.arch.link import LinkTiming


@dataclass(frozen=True, kw_only=True)
class Board:
    """One board: ``platform`` (``module:class`` of its amaranth-boards platform, or
    of :mod:`systolica.rtl.fpga.platforms`' subclass of it), ``family`` (``ecp5`` or
    ``gowin``), ``config`` (the chip preset built for it), ``input_hz`` (the board's
    oscillator) and ``link`` (the chip's clock, made from it by a PLL where the two
    differ, and the UART)."""

    name: str
    platform: str
    family: str
    config: str
    input_hz: int
    link: LinkTiming

    @property
    def clock_hz(self) -> int:
        return self.link.clock_hz


BOARDS = {
    # 25 MHz oscillator, PLL to 50 MHz; the FT231X bridge does 2 Mbaud exactly
    # (3 MHz / 1.5), 25 clocks per bit. A request that stops for 20 ms is dropped.
    "ulx3s": Board(name="ulx3s", platform="amaranth_boards.ulx3s:ULX3S_85F_Platform",
                   family="ecp5", config="ulx3s", input_hz=25_000_000,
                   link=LinkTiming(clock_hz=50_000_000, divisor=25, idle_timeout=1_000_000)),
    # 27 MHz oscillator, the chip at that clock without a PLL; 27 clocks a bit make
    # 1 Mbaud exactly. The chip of even the smallest preset does not fit its GW1NR-9
    # (docs/fpga.md): the build stops after packing with what is over.
    "tangnano9k": Board(name="tangnano9k",
                        platform="systolica.rtl.fpga.platforms:TangNano9kPlatform",
                        family="gowin", config="tangnano9k", input_hz=27_000_000,
                        link=LinkTiming(clock_hz=27_000_000, divisor=27, idle_timeout=540_000)),
    # the same 27 MHz and link on the Tang Primer 20K's dock (GW2A-18)
    "tangprimer20k": Board(name="tangprimer20k",
                           platform="systolica.rtl.fpga.platforms:TangPrimer20kPlatform",
                           family="gowin", config="tangprimer20k", input_hz=27_000_000,
                           link=LinkTiming(clock_hz=27_000_000, divisor=27,
                                           idle_timeout=540_000)),
}


def board(name: str) -> Board:
    if name in BOARDS:
        return BOARDS[name]
    raise ValueError(f"unknown board {name!r}; choose one of {', '.join(sorted(BOARDS))}")
