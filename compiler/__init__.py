"""Compile int8 networks into cycle-scheduled Systolica programs.

Passes, one module each: graph (the verified network: layers over named tensors) ->
plan (memory planner) -> rules (per-op lowering to micro-ops) -> pipeline (software
pipeliner) -> schedule (issue cycles) -> reconfigure (configuration updates) ->
program (encoded image, predictions). ``lower`` runs the middle three.
"""

from systolica.compiler.graph.graph import CompileError, Dense, Graph, GraphBuilder, Network, Node, Quant, Tensor, gemm
from systolica.compiler.graph.ops import Add, AvgPool2d, Concat, Conv2d, Flatten, GlobalAvgPool, MaxPool2d
from systolica.compiler.planning.memory import MemoryPlan, plan_memory
from systolica.compiler.driver import Compiled, LayerRecord, compile_network

__all__ = ["Add", "AvgPool2d", "CompileError", "Compiled", "Concat", "Conv2d", "Dense", "Flatten",
           "GlobalAvgPool", "Graph", "GraphBuilder", "LayerRecord", "MaxPool2d", "MemoryPlan",
           "Network", "Node", "Quant", "Tensor", "compile_network", "gemm", "plan_memory"]
