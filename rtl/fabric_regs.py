"""The fabric's configuration registers: one control register per multiplexer."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from systolica.arch import fabric, isa
from systolica.arch.config import ChipConfig
from systolica.rtl.ports import Issue, check_config, setcfg_numbers


class FabricRegs(wiring.Component):
    """A ``SETCFG`` (or ``SETCFGW``, the chip's format: :func:`fabric.setcfg_format`)
    issued on ``issue`` writes its ``more + 1`` (multiplexer, value) pairs (multiplexer
    ``page * page_size + index``) at once, in pair order (a later pair naming the same
    multiplexer wins); ``value[k]`` drives multiplexer ``k`` of
    :func:`systolica.arch.fabric.muxes`. Reset values route a plain GEMM. Names beyond
    the table change nothing, and page bits past the chip's multiplexers are not
    decoded: the sequencer faults such instructions (``CFG_RANGE``) before they
    issue."""

    def __init__(self, *, cfg: ChipConfig):
        self.cfg = check_config(cfg, "FabricRegs")
        self.muxes = fabric.muxes(cfg)
        super().__init__({
            "issue": In(Issue(isa.PAYLOAD[fabric.setcfg_format(cfg).op], handshake=False)),
            "value": Out(fabric.value_bits(cfg)).array(len(self.muxes)),
        })

    def elaborate(self, platform):
        m = Module()
        args = self.issue.payload
        pairs = setcfg_numbers(self.cfg, args)
        bits = fabric.value_bits(self.cfg)
        # Which pair writes a multiplexer (the last naming it) and whether any does
        # come from the payload alone; ``valid`` (a deep signal: the sequencer's issue)
        # only enables the register.
        for k, mux in enumerate(self.muxes):
            reg = Signal(bits, init=mux.default, name=f"mux_{k}")
            m.d.comb += self.value[k].eq(reg)
            hit = Signal(name=f"mux_{k}_hit")
            new = Signal(bits, name=f"mux_{k}_new")
            for j, (index, value) in enumerate(pairs):
                with m.If((j <= args.more) & (index == k)):
                    m.d.comb += [hit.eq(1), new.eq(value)]
            with m.If(self.issue.valid & hit):
                m.d.sync += reg.eq(new)
        return m

    def __getitem__(self, name):
        return self.value[fabric.by_name(self.cfg)[name].index]
