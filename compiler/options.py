"""The knobs a compile takes beyond the chip and the network, in one typed carrier."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from systolica.compiler.errors import CompileError
from systolica.compiler.matching.mapping import Mapping as LayerMapping

if TYPE_CHECKING:
    from systolica.compiler.lowering.chain import ChainChoice


#: The mapping modes (None: ``matcher``).
MAPPINGS = (None, "matcher", "static")


@dataclass(frozen=True)
class CompileOptions:
    """How to compile (every knob None: the cost models' choices; see
    :func:`systolica.compiler.compile_network` for each in full).

    * ``chain``: a ``ChainChoice`` (the graph is one chain of convolutions, run in
      passes as it says), or the strategy of a convolutional network's chains
      (``layer_by_layer``, ``baseline``, ``crop_fetch``, ``fused_crop``);
    * ``segments``: the user's cut of a network's runs of convolutions into chains, by
      a segment's first layer (or ``"all"``);
    * ``weights``, ``buffers``: each layer's tiling in a convolutional network
      (``stream`` / ``persistent``; 2 / 1 tile buffers), for all layers or by name;
    * ``ubuf``: ``(base, rows)``, the UBUF registers the program assumes;
    * ``split``: the tile groups of dense layers with small K and N (1: none; or by
      layer name);
    * ``mapping``: how layers are put on the array (docs/matching.md): ``matcher``
      (None: the default), the constraint solver's ranked choice, or ``static``, the
      fixed deployment strategy it is measured against; or by layer name, a
      ``matching.Mapping`` each (the rest: the matcher's);
    * ``fetch_from``: the PROG_FETCH register the program is scheduled for, the first
      instruction the chip's fetcher reads from DRAM (those below are preloaded by the
      host): None, the host's preload of what fits (``min(len, imem_depth)``, the
      register's reset value); ``0``: the whole program is fetched (a program the
      management core starts, docs/management-core.md); ``k``: the first ``k``;
    * ``dram_base``: the first DRAM word the program's data (inputs, parameters,
      outputs) and its program region may use (None: 0), so that several programs
      share one DRAM, as the management core's step table runs them
      (docs/management-core.md).
    """
    chain: ChainChoice | str | None = None
    segments: Mapping | str | None = None
    weights: str | Mapping[str, str] | None = None
    buffers: int | Mapping[str, int] | None = None
    ubuf: tuple[int, int] | None = None
    split: int | Mapping[str, int] | None = None
    mapping: str | Mapping[str, object] | None = None
    fetch_from: int | None = None
    dram_base: int | None = None

    def __post_init__(self):
        f = self.fetch_from
        if f is not None and (isinstance(f, bool) or not isinstance(f, int)
                              or not 0 <= f < 1 << 32):
            raise CompileError(f"fetch_from must be None (the host preloads what fits the "
                               f"instruction memory) or the first instruction the chip "
                               f"fetches, an integer in [0, 2**32) (the PROG_FETCH "
                               f"register; 0: fetch the whole program), not {f!r}")
        if self.dram_base is not None and (not isinstance(self.dram_base, int)
                                           or isinstance(self.dram_base, bool)
                                           or self.dram_base < 0):
            raise CompileError(f"dram_base must be a DRAM word address (an integer of at "
                               f"least 0), not {self.dram_base!r}")
        if isinstance(self.mapping, Mapping):
            for name, m in self.mapping.items():
                if not isinstance(m, LayerMapping):
                    raise CompileError(f"mapping of layer {name!r} must be a "
                                       f"matching.Mapping, not {type(m).__name__}")
        elif self.mapping not in MAPPINGS:
            raise CompileError(f"mapping must be one of {', '.join(map(repr, MAPPINGS[1:]))}"
                               f", or a dict of layer name to matching.Mapping, not "
                               f"{self.mapping!r}")

    @property
    def tiled(self) -> bool:
        """Whether a layer-by-layer tiling is given."""
        return self.weights is not None or self.buffers is not None
