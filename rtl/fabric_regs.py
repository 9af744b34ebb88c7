"""The fabric's configuration registers: one 4-bit control register per multiplexer."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from systolica.arch import fabric, isa
from systolica.arch.config import ChipConfig
from systolica.arch.isa import Opcode

from .ports import Issue, check_config, setcfg_numbers


class FabricRegs(wiring.Component):
    """A ``SETCFG`` issued on ``issue`` writes its ``more + 1`` (multiplexer, value) pairs
    (multiplexer ``page * 128 + index``) at once, in pair order (a later pair naming the
    same multiplexer wins); ``value[k]`` drives multiplexer ``k`` of
    :func:`systolica.arch.fabric.muxes`. Reset values route a plain GEMM. Names beyond
    the table change nothing, and a chip of one page (at most 128 multiplexers) does
    not decode the page bit: the sequencer faults such instructions (``CFG_RANGE``)
    before they issue."""

    def __init__(self, *, cfg: ChipConfig):
        self.cfg = check_config(cfg, "FabricRegs")
        self.muxes = fabric.muxes(cfg)
        super().__init__({
            "issue": In(Issue(isa.PAYLOAD[Opcode.SETCFG], handshake=False)),
            "value": Out(4).array(len(self.muxes)),
        })

    def elaborate(self, platform):
        m = Module()
        args = self.issue.payload
        pairs = setcfg_numbers(len(self.muxes), args)
        # Which pair writes a multiplexer (the last naming it) and whether any does
        # come from the payload alone; ``valid`` (a deep signal: the sequencer's issue)
        # only enables the register.
        for k, mux in enumerate(self.muxes):
            reg = Signal(4, init=mux.default, name=f"mux_{k}")
            m.d.comb += self.value[k].eq(reg)
            hit = Signal(name=f"mux_{k}_hit")
            new = Signal(4, name=f"mux_{k}_new")
            for j, (index, value) in enumerate(pairs):
                with m.If((j <= args.more) & (index == k)):
                    m.d.comb += [hit.eq(1), new.eq(value)]
            with m.If(self.issue.valid & hit):
                m.d.sync += reg.eq(new)
        return m

    def __getitem__(self, name):
        return self.value[fabric.by_name(self.cfg)[name].index]
