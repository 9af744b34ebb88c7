"""Verilog generation: one function, so every build reads the same netlist."""

from amaranth.back import verilog as _verilog

from systolica.arch.config import ChipConfig
from systolica.rtl.chip import Chip

TOP = "systolica_chip"


def generate(cfg: ChipConfig) -> str:
    """Verilog for the chip described by ``cfg``, top module ``systolica_chip``."""
    return _verilog.convert(Chip(cfg=cfg), name=TOP, emit_src=False)
