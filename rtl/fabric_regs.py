"""The fabric's configuration registers: one 4-bit control register per multiplexer."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from systolica.arch import fabric, isa
from systolica.arch.config import ChipConfig


class FabricRegs(wiring.Component):
    """A ``SETCFG`` writes ``count`` (multiplexer, value) pairs at once, in pair order (a
    later pair naming the same multiplexer wins); ``value[k]`` drives multiplexer ``k``
    of :func:`systolica.arch.fabric.muxes`. Reset values route a plain GEMM. Names beyond the
    table change nothing (the sequencer faults such instructions before they issue)."""

    def __init__(self, cfg: ChipConfig):
        self.cfg = cfg
        self.muxes = fabric.muxes(cfg)
        p = isa.SETCFG_PAIRS
        super().__init__({
            "we": In(1), "count": In(range(p + 1)),
            "index": In(8).array(p), "wvalue": In(4).array(p),
            "value": Out(4).array(len(self.muxes)),
        })

    def elaborate(self, platform):
        m = Module()
        for k, mux in enumerate(self.muxes):
            reg = Signal(4, init=mux.default, name=f"mux_{k}")
            m.d.comb += self.value[k].eq(reg)
            for j in range(isa.SETCFG_PAIRS):
                with m.If(self.we & (j < self.count) & (self.index[j] == k)):
                    m.d.sync += reg.eq(self.wvalue[j])
        return m

    def __getitem__(self, name):
        return self.value[fabric.by_name(self.cfg)[name].index]
