"""The overlap-buffer figures of ``make bench``: chains of convolutions run on the
RTL with each strategy (docs/cnn.md, "Chains"), against the same layers lowered one
by one through DRAM. Each record: DRAM bytes and their ratio to the minimum (input,
weights and output moved once), MACs the array computed, UBUF bytes written and read
(the chip's counters), cycles, MAC utilisation, and what the cost model chose."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from systolica.compiler.graph.graph import Graph, GraphBuilder
from systolica.compiler.graph.ops import requant_for
from systolica.compiler.lowering.chain import STRATEGIES, ChainChoice
from systolica.compiler.planning.chain_passes import listing
from systolica.models.chain_cases import seed_two_layer


@dataclass(frozen=True)
class Chain:
    name: str
    config: str
    make: Callable[[], Graph]
    outputs_per_pass: int | None      # None: the cost model's


def three_3x3_56x56x64() -> Graph:
    """Three of ResNet-50's 3x3 layers at 56x56x64 in a row (random int8 data, each
    requantisation keeping the outputs spread)."""
    rng = np.random.default_rng(1)
    g = GraphBuilder("three_3x3_56x56x64")
    t = g.input(rng.integers(-128, 128, size=(1, 56, 56, 64), dtype=np.int8),
                zero_point=int(rng.integers(-8, 9)))
    mult, shift = requant_for(40.0 / (74.0 * 37.0 * np.sqrt(9 * 64)), per_channel=False)
    for k in range(3):
        w = rng.integers(-64, 65, size=(3, 3, 64, 64), dtype=np.int8)
        t = g.conv2d(t, w, rng.integers(-2000, 2000, size=64, dtype=np.int32), pads=1,
                     mult=mult, shift=shift, relu=True, name=f"conv{k}")
    return g.build(t)


#: Seed 001's example (its channel counts are not given: 8, one array row each, on
#: tiny) in its two passes, and three 3x3 layers at 56x56x64 on base.
CHAINS = (Chain("seed001_two_layer", "tiny", seed_two_layer, 8),
          Chain("three_3x3_56x56x64", "base", three_3x3_56x56x64, None))


def minimum_bytes(graph: Graph) -> int:
    x = graph.tensor(graph.inputs[0])
    out = graph.tensor(graph.outputs[0])
    return (int(np.prod(x.shape)) + sum(n.op.weights.size for n in graph.nodes)
            + int(np.prod(out.shape)))


def record(chain: Chain, strategy: str, run) -> dict:
    """One bench record of a chain's RTL run (`strategy` "layer_by_layer": the
    streaming lowering, every map through DRAM, each layer with its tiling)."""
    from systolica.app import report
    rec = report.record(run, chain.name)
    minimum = minimum_bytes(run.compiled.graph)
    rec.update(kind="chain", strategy=strategy, min_bytes=minimum,
               dram_ratio_to_min=rec["dram_bytes"] / minimum)
    lowered = run.compiled.chain
    if lowered is None:             # each layer's tiling (docs/cnn.md)
        rec.update(tiling={name: f"{t.weights}/{t.buffers}"
                           for name, t in run.compiled.tiling.items()})
    else:
        names = [n.name for n in run.compiled.graph.nodes]
        widths = [run.compiled.graph.tensor(t).shape[2]
                  for t in [run.compiled.graph.inputs[0]]
                  + [n.outputs[0] for n in run.compiled.graph.nodes]]
        rec.update(passes=len(lowered.passes),
                   outputs_per_pass=lowered.choice.outputs_per_pass,
                   weights=lowered.choice.weights,
                   first_layer_rows_read=[p[0].read for p in lowered.passes],
                   listing=listing(lowered.passes, names, widths).splitlines(),
                   banks=lowered.bank_listing().splitlines())
    return rec


def refused(chain: Chain, strategy: str, error: Exception) -> dict:
    """The record of a strategy the compiler refused for this chain, with its reason."""
    return {"name": chain.name, "config": chain.config, "kind": "chain",
            "strategy": strategy, "error": str(error)}


def runs() -> list[tuple[Chain, str, str, ChainChoice | None]]:
    """(chain, configuration, strategy, choice) for every run of the chain bench."""
    out = []
    for c in CHAINS:
        out.append((c, c.config, "layer_by_layer", None))
        out += [(c, c.config, s, ChainChoice(s, c.outputs_per_pass)) for s in STRATEGIES]
    return out


