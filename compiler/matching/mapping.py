"""What the matcher hands the code generator: which workload dimensions one MATMUL
invocation puts on the array's rows, its columns and the stream (docs/matching.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The input layouts the feeder walks (docs/cnn.md).
LAYOUTS = ("blocks", "replicated")
#: Conv dimensions summed over: they go to array rows only.
REDUCTION = frozenset({"c", "kh", "kw", "t"})


@dataclass(frozen=True)
class Axis:
    """A workload dimension on an instruction axis, ``extent`` of it per invocation."""
    dim: str
    extent: int


@dataclass(frozen=True)
class Mapping:
    """One invocation, generalised: ``rows``/``cols``/``stream`` outermost first (array
    row ``p`` is the mixed-radix number of the ``rows`` extents); ``layout`` the input's
    layout in the CBUF; ``origin`` who chose it (``matcher``, ``static``)."""
    rows: tuple[Axis, ...]
    cols: tuple[Axis, ...]
    stream: tuple[Axis, ...]
    layout: str = "blocks"
    origin: str = "matcher"

    def extent(self, dim: str) -> int:
        """How much of `dim` one invocation covers (1: on no axis)."""
        return math.prod(a.extent for a in (*self.rows, *self.cols, *self.stream)
                         if a.dim == dim)

    def dims(self, where: str) -> tuple[str, ...]:
        return tuple(a.dim for a in getattr(self, where))

    def describe(self) -> str:
        """``rows (t5 x c3) cols (k16) stream (oh x ow) replicated``."""
        def side(axes):
            return " x ".join(f"{a.dim}{a.extent}" for a in axes) or "-"
        return (f"rows ({side(self.rows)}) cols ({side(self.cols)}) "
                f"stream ({side(self.stream)}) {self.layout}")
