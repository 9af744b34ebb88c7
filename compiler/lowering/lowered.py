"""What lowering produces, whichever lowering a graph takes (``lower.lower``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from systolica.compiler.microops.ir import MicroOp
from systolica.compiler.planning.memory import DramMap, MemoryPlan


@dataclass
class Lowered:
    ops: list[MicroOp]          # software-pipelined program order
    sequential: list[MicroOp]   # the same ops in plain loop order (for verification)
    plan: MemoryPlan
    # the map lowering's: per layer its job and tiling, its chains, replicated inputs
    copies: dict = field(default_factory=dict)   # graph input -> replicas in its layout
    jobs: dict = field(default_factory=dict)     # layer -> its Job (shapes, MACs)
    tiling: dict = field(default_factory=dict)   # layer -> its Tiling (layer by layer)
    segments: dict = field(default_factory=dict)  # first layer -> network_chains.Chained

    @property
    def dram(self) -> np.ndarray:
        return self.plan.dram

    @property
    def dram_map(self) -> DramMap:
        return self.plan.dram_map
