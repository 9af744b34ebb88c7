"""Compile int8 networks into cycle-scheduled Systolica programs.

The stages, a folder each: ``frontend`` (ONNX, program text) -> ``graph`` (the
verified network of layers over named tensors, its numpy reference) -> ``planning``
(memory, tiling, splits, chains, the UBUF, cost models) -> ``lowering`` (one rule
per op type: micro-ops, ``microops``) -> ``scheduling`` (software pipeline, issue
cycles, configuration updates, the schedule verifier) -> ``backend`` (traces, unit
use). :func:`compile_network` (``driver``) runs them all.
"""

from systolica.compiler.driver import Compiled, LayerRecord, compile_network
from systolica.compiler.errors import CompileError, InternalError, OnnxNodeError
from systolica.compiler.graph.graph import (
           Dense,
           Graph,
           GraphBuilder,
           Network,
           Node,
           Quant,
           Tensor,
           gemm,
)
from systolica.compiler.graph.ops import (
           Add,
           AvgPool2d,
           Concat,
           Conv2d,
           Flatten,
           GlobalAvgPool,
           MaxPool2d,
)
from systolica.compiler.options import CompileOptions
from systolica.compiler.planning.memory import MemoryPlan, plan_memory

__all__ = ["Add", "AvgPool2d", "CompileError", "CompileOptions", "Compiled", "Concat",
           "Conv2d", "Dense", "Flatten", "GlobalAvgPool", "Graph", "GraphBuilder",
           "InternalError", "LayerRecord", "MaxPool2d", "MemoryPlan", "Network", "Node",
           "OnnxNodeError", "Quant", "Tensor", "compile_network", "gemm", "plan_memory"]
