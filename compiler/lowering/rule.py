"""The lowering protocol: what a rule for one op type answers, in both lowerings.

A graph takes one of two lowerings (``lower.lower`` picks):

* the **dense lowering** (graphs of ``[M, K]`` tensors: dense layers, ``A·Bᵀ``,
  transposes, Concats through the lanes): the memory planner
  (``planning.memory``) asks each layer's rule what it needs (``max_rows``,
  ``params``, ``needs``, ``input_rows``, ``first_layer``) and places it; ``emit``
  then makes the layer's loop nest of micro-ops (``pipeline.Block``);
* the **map lowering** (graphs holding a feature-map op, ``lowering.maps``): each
  layer is a :class:`~.maps.jobs.Job` (``map_job``) that the tile loop runs
  through the CBUF, layer by layer or in chains (seed 001).

A rule declares which it takes part in (``dense``, ``maps``) and its optional
capabilities as class attributes; nothing is probed. Every micro-op states in
``MicroOp.needs`` the multiplexer settings it relies on, so a program's
configuration updates follow from the rules.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.compiler.errors import InternalError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from systolica.compiler.graph.graph import Graph, Node
    from systolica.compiler.lowering.emitter import Emitter
    from systolica.compiler.lowering.maps.jobs import Job, MapInputs
    from systolica.compiler.lowering.maps.tile_loop import TileLoop
    from systolica.compiler.planning.memory import Region
    from systolica.compiler.scheduling.pipeline import Block


@dataclass(frozen=True)
class Need:
    """A scratch region a layer works in. Layers asking for the same ``shared`` key
    share one region, live from the first of them to the last."""
    memory: str       # "cbuf" or "acc"
    key: str
    size: int         # rows
    what: str         # how messages call it
    shared: bool = False


class Rule(ABC):
    """How layers of one op type become micro-ops (:mod:`.registry` finds it)."""

    #: The op type it lowers.
    op: ClassVar[type]
    #: It takes part in the dense lowering (the methods of that section).
    dense: ClassVar[bool] = False
    #: It takes part in the map lowering (:meth:`map_job`).
    maps: ClassVar[bool] = False
    #: It works on feature maps: a graph holding one takes the map lowering.
    feature_map: ClassVar[bool] = False
    #: A graph input it reads stays in DRAM: it streams it (dense lowering).
    streams_input: ClassVar[bool] = False
    #: In the map lowering, its inputs' producers store them into its output's
    #: channel blocks (a Concat of maps): it computes nothing itself.
    lays_out_inputs: ClassVar[bool] = False
    #: In the map lowering, its output is a map of its own in channel blocks (not a
    #: Flatten's view, nor moved DRAM to DRAM by a transpose).
    stores_blocks: ClassVar[bool] = True

    @abstractmethod
    def macs(self, graph: Graph, node: Node) -> int:
        """Useful multiply-accumulates of the layer."""

    # -- the dense lowering ------------------------------------------------------------
    def max_rows(self, cfg: ChipConfig) -> int:
        """The most rows of M one pass of the layer takes."""
        raise self._not_in("the dense lowering")

    def tiles_used(self, cfg: ChipConfig, graph: Graph, node: Node) -> tuple[int, int]:
        """Tile rows and columns its micro-ops reach (the rest are fed zeros)."""
        raise self._not_in("the dense lowering")

    def params(self, cfg: ChipConfig, graph: Graph, node: Node
               ) -> list[tuple[str, np.ndarray]]:
        """Its parameters in DRAM, by key, as words."""
        raise self._not_in("the dense lowering")

    def needs(self, cfg: ChipConfig, graph: Graph, node: Node, rows: int,
              split: int = 1) -> list[Need]:
        """The scratch regions it works in, for `rows` rows a pass in `split` tile
        groups."""
        raise self._not_in("the dense lowering")

    def input_rows(self, cfg: ChipConfig, graph: Graph, node: Node, tensor: str,
                   rows: int, M: int) -> int:
        """CBUF rows per K-block of a graph input `tensor` it is the first to read, for
        `rows` rows a pass of `M`: by default one pass's."""
        return rows

    def reads_past(self, cfg: ChipConfig, graph: Graph, node: Node, tensor: str) -> int:
        """CBUF rows past the K-blocks of `tensor`, an input it reads where it lies,
        that it reads too (a transpose's west loads of a ragged last block): the
        tensor's region holds them, and the layer writes them before reading."""
        return 0

    def first_layer(self, graph: Graph, node: Node, index: dict[str, int]) -> int:
        """The first layer during which its ops may run (by default its own); its
        output and needs are live from there."""
        return index[node.name]

    def emit(self, em: Emitter, index: int, node: Node) -> list[Block]:
        """The layer's loop nest of micro-ops."""
        raise self._not_in("the dense lowering")

    # -- the map lowering --------------------------------------------------------------
    def map_job(self, inputs: MapInputs, index: int, node: Node) -> Job | None:
        """The layer as a job of the tile loop, or None for a view (a Flatten, a
        Concat laid out in its inputs' stores, a transpose DRAM to DRAM)."""
        raise self._not_in("the map lowering")

    def map_params(self, cfg: ChipConfig, graph: Graph, node: Node
                   ) -> list[tuple[str, np.ndarray]]:
        """The DRAM parameters of a view that emits micro-ops of its own (a job's are
        its weights and epilogue rows)."""
        return []

    def map_emit(self, loop: TileLoop, inputs: MapInputs, index: int, node: Node,
                 dram: Mapping[str, int], params: Mapping[str, int]
                 ) -> tuple[list[Block], list[Region]]:
        """The micro-ops of a view that moves data (a transpose), with the CBUF and ACC
        regions they use; `dram`: each tensor's DRAM address, `params`: its own
        parameters' (:meth:`map_params`). Other views emit nothing."""
        return [], []

    def writes_replicated(self, cfg: ChipConfig, graph: Graph, node: Node) -> bool:
        """Whether it can write its output map in the replicated layout (for
        convolutions with few input channels that read it)."""
        return False

    def prefers_maps(self, cfg: ChipConfig, graph: Graph, node: Node) -> bool:
        """Whether a graph of dense-lowering layers with this one runs better layer
        by layer through DRAM (as the map lowering runs it)."""
        return False

    def chain_refusal(self, node: Node) -> str | None:
        """Why the layer cannot be one of a chain of convolutions (seed 001); None if
        it can."""
        return (f"layer {node.name!r}: a chain is made of convolutions, not "
                f"{type(node.op).__name__}")

    def _not_in(self, lowering: str) -> InternalError:
        return InternalError(f"{type(self).__name__} does not take part in {lowering}")
