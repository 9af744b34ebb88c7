"""The fabric's configuration registers: one 4-bit control register per multiplexer."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from systolica import fabric
from systolica.config import ChipConfig


class FabricRegs(wiring.Component):
    """``SETCFG index, value`` writes one register; ``value[k]`` drives multiplexer
    ``k`` of :func:`systolica.fabric.muxes`. Reset values route a plain GEMM."""

    def __init__(self, cfg: ChipConfig):
        self.cfg = cfg
        self.muxes = fabric.muxes(cfg)
        super().__init__({
            "we": In(1), "index": In(8), "wvalue": In(4),
            "value": Out(4).array(len(self.muxes)),
        })

    def elaborate(self, platform):
        m = Module()
        for k, mux in enumerate(self.muxes):
            reg = Signal(4, init=mux.default, name=f"mux_{k}")
            m.d.comb += self.value[k].eq(reg)
            with m.If(self.we & (self.index == k)):
                m.d.sync += reg.eq(self.wvalue)
        return m

    def __getitem__(self, name):
        return self.value[fabric.by_name(self.cfg)[name].index]
