"""The overlap-buffer figures of ``make bench``, from the chain planner
(:mod:`systolica.compiler.chain`) alone: the RTL has no crop or fetch path yet, so
these are what a chain's plan moves and computes, not measured cycles. They give the
RTL implementation its targets: its counters must show these numbers."""

from __future__ import annotations

from dataclasses import dataclass

from ..compiler.chain import Axis, plan, sizes


@dataclass(frozen=True)
class Chain:
    """Same-padded square convolutions along the cut (row) axis; every layer keeps
    the width. ``channels`` has one entry per layer boundary (input first)."""
    name: str
    height: int
    width: int
    kernels: tuple[int, ...]
    channels: tuple[int, ...]
    outputs_per_pass: int


#: Seed 001's example (its channel counts are not given: 16, one array row each) and
#: three of ResNet-50's 3x3 layers at 56x56x64 in four passes.
CHAINS = (Chain("seed001_two_layer", 16, 16, (7, 5), (16, 16, 16), 8),
          Chain("three_3x3_56x56x64", 56, 56, (3, 3, 3), (64, 64, 64, 64), 14))


def chain_records(chain: Chain) -> list[dict]:
    """One record per strategy: DRAM bytes (in a chain: the first layer's input bands,
    weights once, the last layer's output once), MACs computed, UBUF bytes written
    and read."""
    axes = [Axis(k, pad_before=k // 2, pad_after=k // 2) for k in chain.kernels]
    weights = sum(k * k * a * b for k, a, b in
                  zip(chain.kernels, chain.channels, chain.channels[1:]))
    out_rows = sizes(chain.height, axes)[-1]
    row = [chain.width * c for c in chain.channels]         # bytes of one row, per boundary
    minimum = chain.height * row[0] + weights + out_rows * row[-1]
    # Today's lowering, for comparison: every map through DRAM, each layer whole
    # (the least it can move; its halo re-reads come on top).
    through_dram = weights + sum(n * (a + b) for n, a, b in
                                 zip(sizes(chain.height, axes), row, row[1:]))
    records = [{"name": chain.name, "kind": "chain_plan", "strategy": "layer_by_layer",
                "dram_bytes": through_dram, "dram_ratio_to_min": through_dram / minimum}]
    for strategy, ubuf in (("baseline", False), ("ubuf_crop_fetch", True)):
        passes = plan(chain.height, axes, chain.outputs_per_pass, ubuf=ubuf)
        dram = (sum(p[0].read for p in passes) * row[0] + weights + out_rows * row[-1])
        macs = sum(s.computed * chain.width * k * k * chain.channels[s.layer]
                   * chain.channels[s.layer + 1]
                   for p in passes for s, k in zip(p, chain.kernels))
        cropped = sum(s.cropped * row[s.layer + 1] for p in passes for s in p)
        fetched = sum(s.fetched * row[s.layer] for p in passes for s in p)
        records.append({
            "name": chain.name, "kind": "chain_plan", "strategy": strategy,
            "passes": len(passes), "outputs_per_pass": chain.outputs_per_pass,
            "dram_bytes": dram, "dram_ratio_to_min": dram / minimum,
            "first_layer_rows_read": [p[0].read for p in passes],
            "macs": macs, "ubuf_bytes_written": cropped, "ubuf_bytes_read": fetched})
    return records
