"""Compile chains of dense int8 layers into cycle-scheduled Systolica programs.

Passes, one module each: graph (validated input) -> lower (micro-ops, memory map,
DRAM image) -> schedule (issue cycles) -> program (encoded image, predictions).
"""

from .graph import CompileError, Dense, Network, gemm
from .program import Compiled, LayerRecord, compile_network

__all__ = ["CompileError", "Compiled", "Dense", "LayerRecord", "Network", "compile_network",
           "gemm"]
