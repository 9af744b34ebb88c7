"""The chip's clock from a board's oscillator: an ECP5 PLL (EHXPLLL)."""

from amaranth.hdl import ClockSignal, Elaboratable, Instance, Module, Signal
from amaranth.lib.cdc import ResetSynchronizer

#: The ECP5 PLL's limits (Lattice TN1263): phase detector input, VCO.
_PFD_HZ = (3_125_000, 400_000_000)
_VCO_HZ = (400_000_000, 800_000_000)


def ecp5_pll_dividers(input_hz: int, output_hz: int) -> dict:
    """Dividers that make ``output_hz`` from ``input_hz`` exactly: CLKI_DIV,
    CLKFB_DIV (feedback from CLKOP) and CLKOP_DIV, with the VCO in its range and as
    near its middle as they allow."""
    found = []
    for clki in range(1, 129):
        if not _PFD_HZ[0] <= input_hz / clki <= _PFD_HZ[1]:
            continue
        fb, rem = divmod(output_hz * clki, input_hz)
        if rem or not 1 <= fb <= 80:
            continue
        for op in range(1, 129):
            vco = output_hz * op
            if _VCO_HZ[0] <= vco <= _VCO_HZ[1]:
                found.append((abs(vco - sum(_VCO_HZ) // 2), clki, fb, op))
    if not found:
        raise ValueError(f"no ECP5 PLL setting makes {output_hz} Hz from {input_hz} Hz "
                         f"exactly")
    _, clki, fb, op = min(found)
    return {"CLKI_DIV": clki, "CLKFB_DIV": fb, "CLKOP_DIV": op}


class Ecp5Clock(Elaboratable):
    """Drives the ``sync`` domain (its parent defines it) at ``output_hz`` from the
    input clock ``clk_in`` (``input_hz``), held in reset until the PLL locks."""

    def __init__(self, clk_in, *, input_hz: int, output_hz: int):
        self.clk_in = clk_in
        self.input_hz, self.output_hz = input_hz, output_hz
        self.dividers = ecp5_pll_dividers(input_hz, output_hz)

    def elaborate(self, platform):
        m = Module()
        d = self.dividers
        clk, locked = Signal(), Signal()
        m.submodules.pll = Instance(
            "EHXPLLL",
            a_FREQUENCY_PIN_CLKI=str(self.input_hz / 1e6),
            a_FREQUENCY_PIN_CLKOP=str(self.output_hz / 1e6),
            a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1",
            a_MFG_GMCREF_SEL="2",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB",
            p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD",
            p_CLKI_DIV=d["CLKI_DIV"], p_CLKFB_DIV=d["CLKFB_DIV"], p_CLKOP_DIV=d["CLKOP_DIV"],
            p_CLKOP_ENABLE="ENABLED", p_CLKOP_CPHASE=d["CLKOP_DIV"] - 1, p_CLKOP_FPHASE=0,
            p_FEEDBK_PATH="CLKOP",
            i_CLKI=self.clk_in, i_CLKFB=clk, o_CLKOP=clk, o_LOCK=locked,
            i_RST=0, i_STDBY=0, i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1,
            i_PHASESTEP=1, i_PHASELOADREG=1, i_PLLWAKESYNC=0, i_ENCLKOP=0)
        m.d.comb += ClockSignal("sync").eq(clk)
        m.submodules.reset = ResetSynchronizer(~locked, domain="sync")
        return m
