"""Compile int8 networks into cycle-scheduled Systolica programs.

Passes, one module each: graph (the verified network: layers over named tensors) ->
plan (memory planner) -> rules (per-op lowering to micro-ops) -> pipeline (software
pipeliner) -> schedule (issue cycles) -> reconfigure (configuration updates) ->
program (encoded image, predictions). ``lower`` runs the middle three.
"""

from .graph import CompileError, Dense, Graph, GraphBuilder, Network, Node, Quant, Tensor, gemm
from .plan import MemoryPlan, plan_memory
from .program import Compiled, LayerRecord, compile_network

__all__ = ["CompileError", "Compiled", "Dense", "Graph", "GraphBuilder", "LayerRecord",
           "MemoryPlan", "Network", "Node", "Quant", "Tensor", "compile_network", "gemm",
           "plan_memory"]
