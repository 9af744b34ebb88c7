"""What lowering produces, whichever path a graph takes (``lower.lower``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from systolica.compiler.microops.ir import MicroOp
from systolica.compiler.planning.memory import DramMap, MemoryPlan


@dataclass
class Lowered:
    ops: list[MicroOp]          # software-pipelined program order
    sequential: list[MicroOp]   # the same ops in plain loop order (for verification)
    plan: MemoryPlan

    @property
    def dram(self) -> np.ndarray:
        return self.plan.dram

    @property
    def dram_map(self) -> DramMap:
        return self.plan.dram_map
