"""The management core's block test top: two :class:`~systolica.rtl.mgmt_core.MgmtCore`
instances that differ in their DRAM word (16 bytes, the ``base`` chip's, and 4, the
narrowest), in one Verilated model, so that one build and one simulator start check
both widths.

``sel`` chooses the instance that has the ports; the other is held in reset (its
``run`` and ``load_en`` are low), its outputs are not seen, and its clock is stopped
(each instance has a clock domain of its own, ``clk`` gated by ``sel``, so that the idle
one costs the simulation nothing; change ``sel`` while ``clk`` is low). The ports are the first
instance's: the second's narrower DRAM word is the low bits of ``dram_wdata`` and
``dram_rdata``. Only the DRAM window case uses the second instance.

This module is the generator of the test's model (its source names the build): it
holds the instances' parameters and nothing of the testbench, so that changing the
testbench does not rebuild the model.
"""

from __future__ import annotations

from amaranth.hdl import ClockDomain, ClockSignal, DomainRenamer, Module, ResetSignal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from systolica.rtl.mgmt_core import MgmtCore

TOP = "mgmt_core_pair"
#: The instances' parameters, by ``sel``. Both DRAMs are 16 KiB, so that one program
#: reaches the top of either; the second instance's instruction memory holds only that
#: program (the first's holds the whole ISA suite).
INSTANCES = (
    {"imem_words": 16384, "dmem_words": 2048, "dram_word_bytes": 16, "dram_words": 1024},
    {"imem_words": 1024, "dmem_words": 2048, "dram_word_bytes": 4, "dram_words": 4096},
)
#: The DRAM of either instance, in bytes.
DRAM_BYTES = 16384
assert all(p["dram_word_bytes"] * p["dram_words"] == DRAM_BYTES for p in INSTANCES)
#: Inputs that only the chosen instance sees (the other is held).
CHOSEN_ONLY = ("run", "load_en")


class MgmtCorePair(wiring.Component):
    """:data:`INSTANCES` as :class:`MgmtCore` instances behind one set of ports (the
    first's) and ``sel``."""

    def __init__(self, *, instances: tuple[dict, ...] = INSTANCES):
        self.cores = [MgmtCore(**params) for params in instances]
        width = self.cores[0].dram_word_bytes
        if any(core.dram_word_bytes > width for core in self.cores):
            raise ValueError(f"the first instance must have the widest DRAM word, not "
                             f"{[core.dram_word_bytes for core in self.cores]}")
        super().__init__({**self.cores[0].signature.members, "sel": In(range(len(instances)))})

    def elaborate(self, platform):
        m = Module()
        for i, core in enumerate(self.cores):
            chosen = self.sel == i
            domain = f"core{i}"
            m.domains += ClockDomain(domain)
            m.d.comb += [ClockSignal(domain).eq(ClockSignal() & chosen),
                         ResetSignal(domain).eq(ResetSignal())]
            m.submodules[domain] = DomainRenamer(domain)(core)
            for name, member in core.signature.members.items():
                inner, outer = getattr(core, name), getattr(self, name)
                if member.flow == wiring.In:
                    m.d.comb += inner.eq(outer & chosen if name in CHOSEN_ONLY else outer)
                else:
                    with m.If(chosen):
                        m.d.comb += outer.eq(inner)
        return m
