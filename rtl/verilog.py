"""Verilog generation: one function, so every build reads the same netlist."""

from pathlib import Path

from amaranth.back import verilog as _verilog

from systolica.arch.config import ChipConfig
from systolica.rtl.chip import Chip
from systolica.rtl.mgmt_core import picorv32_source

TOP = "systolica_chip"


def generate(cfg: ChipConfig) -> str:
    """Verilog for the chip described by ``cfg``, top module ``systolica_chip``."""
    return _verilog.convert(Chip(cfg=cfg), name=TOP, emit_src=False)


def sources(cfg: ChipConfig) -> tuple[Path, ...]:
    """The hand-written Verilog a build of the chip reads beside :func:`generate`'s:
    PicoRV32 when the chip has the management core (docs/management-core.md)."""
    return (picorv32_source(),) if cfg.has_core else ()
