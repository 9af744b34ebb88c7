"""The CNN figures of ``make bench``: ResNet-50 compiled for ``base`` (per-layer
predicted cycles, MAC utilisation, DRAM traffic against the minimum, compile time,
each layer's tiling), with the cost model's tiling per layer and with every layer
streaming its weights through two tile buffers (the tiling before the cost model),
and representative ResNet-50 layers run on the RTL."""

from __future__ import annotations

import time

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.arch.isa import DmaKind, Opcode
from systolica.compiler import compile_network
from systolica.compiler.graph.graph import Graph, GraphBuilder
from systolica.compiler.graph.ops import Conv2d, requant_for
from systolica.models.zoo import resnet50

#: The layers run on the RTL: (name, input size, Cin, Cout, kernel, stride, pads).
RTL_LAYERS = (("resnet50_stem_7x7s2", 224, 3, 64, 7, 2, 3),
              ("resnet50_3x3_56x56x64", 56, 64, 64, 3, 1, 1),
              ("resnet50_1x1_7x7x2048", 7, 2048, 512, 1, 1, 0),
              ("resnet50_3x3_7x7x512", 7, 512, 512, 3, 1, 1))


def conv_layer(name: str, size: int, cin: int, cout: int, kernel: int, stride: int,
               pads: int, seed: int = 0) -> Graph:
    """One ResNet-50-shaped convolution with random int8 data and a requantisation
    that keeps the outputs spread."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder(name)
    x = g.input(rng.integers(-128, 128, size=(1, size, size, cin), dtype=np.int8),
                zero_point=int(rng.integers(-8, 9)))
    w = rng.integers(-64, 65, size=(kernel, kernel, cin, cout), dtype=np.int8)
    mult, shift = requant_for(40.0 / (74.0 * 37.0 * np.sqrt(kernel * kernel * cin)),
                              per_channel=False)
    t = g.conv2d(x, w, rng.integers(-2000, 2000, size=cout, dtype=np.int32),
                 stride=stride, pads=pads, mult=mult, shift=shift, relu=True, name=name)
    return g.build(t)


def _min_bytes(graph: Graph, node) -> int:
    """Input(s) + weights + output, once each, in bytes."""
    total = sum(int(np.prod(graph.tensor(t).shape)) for t in node.inputs)
    if isinstance(node.op, Conv2d):
        total += node.op.weights.size
    elif hasattr(node.op, "weights"):
        total += node.op.weights.size
    out = graph.tensor(node.outputs[0])
    return total + int(np.prod(out.shape)) * (4 if out.dtype == "int32" else 1)


#: ResNet-50's strategies: name suffix, strategy, compile_network options. Layer by
#: layer (the cost model's Tiling per layer, or every layer streaming its weights
#: through two tile buffers); with the runs of convolutions the cost rule chains
#: (docs/cnn.md, "Chains in networks") with each chain strategy; and with every run
#: chained where it fits, fewest bytes first (the rule without its cycle bound).
RESNET50_STRATEGIES = (
    ("", "per_layer_tiling", dict(chain="layer_by_layer")),
    ("_streamed_weights", "layer_by_layer",
     dict(chain="layer_by_layer", weights="stream", buffers=2)),
    *[(f"_{s}", s, dict(chain=s)) for s in ("baseline", "crop_fetch", "fused_crop")],
    *[(f"_{s}_all_runs", s, dict(chain=s, segments="all"))
      for s in ("baseline", "crop_fetch", "fused_crop")],
)


def network_record(cfg: ChipConfig, graph: Graph, name: str,
                   strategy: str = "per_layer_tiling", **options) -> dict:
    """Compile `graph` (no RTL run; `options` for compile_network): per layer the
    predicted cycles, utilisation, DRAM traffic and tiling from the program itself."""
    began = time.perf_counter()
    compiled = compile_network(cfg, graph, **options)
    compile_s = time.perf_counter() - began
    rd = {}
    wr = {}
    for ins, layer in zip(compiled.program, compiled.layer_of):
        if ins.op is Opcode.DMA:
            words = ins.fields["rows"] * (cfg.acc_row_words if ins.fields["kind"] in (
                DmaKind.LOAD_ACC, DmaKind.STORE_ACC) else 1)
            into = rd if ins.fields["kind"] in (DmaKind.LOAD_CBUF, DmaKind.LOAD_ACC) else wr
            into[layer] = into.get(layer, 0) + words * cfg.rows
    chain_of = {name: first for first, seg in compiled.segments.items()
                for name in seg.layers}
    layers = []
    for rec in compiled.layers:
        node = graph.nodes[rec.index]
        minimum = _min_bytes(graph, node)
        moved = rd.get(rec.index, 0) + wr.get(rec.index, 0)
        layers.append({
            "name": rec.name, "op": type(node.op).__name__, "M": rec.M, "K": rec.K,
            "N": rec.N, "macs": rec.macs, "predicted_cycles": rec.cycles,
            "mac_utilization": rec.macs / (rec.cycles * cfg.macs) if rec.cycles else 0.0,
            "dram_rd_bytes": rd.get(rec.index, 0), "dram_wr_bytes": wr.get(rec.index, 0),
            "min_bytes": minimum, "traffic_ratio": moved / minimum if minimum else 0.0,
            "tiling": _tiling_name(compiled.tiling.get(rec.name)),
            "chain": chain_of.get(rec.name)})
    # a chain's layers run interleaved, pass by pass: their shares of the run are the
    # chain's together, so each gets the chain's utilisation (one layer's own is not
    # defined), and the MAC-weighted figures stay the run's
    for seg in compiled.segments.values():
        members = [l for l in layers if l["name"] in seg.layers]
        cycles = sum(l["predicted_cycles"] for l in members)
        util = sum(l["macs"] for l in members) / (cycles * cfg.macs) if cycles else 0.0
        for l in members:
            l.update(mac_utilization=util, chain_cycles=cycles)
    convs = [l for l in layers if l["op"] == "Conv2d"]
    conv_macs = sum(l["macs"] for l in convs)
    weighted = sum(l["mac_utilization"] * l["macs"] for l in convs) / conv_macs
    return {
        "name": name, "config": cfg.name, "kind": "compile",
        "instructions": len(compiled.program),
        "predicted_cycles": compiled.predicted_cycles,
        "macs": compiled.macs, "array_macs_per_cycle": cfg.macs,
        "mac_utilization": compiled.utilisation,
        "conv_layers": len(convs), "conv_macs": conv_macs,
        "conv_mac_weighted_utilization": weighted,
        "min_conv_utilization_except_stem": min(l["mac_utilization"] for l in convs[1:]),
        "stem_utilization": convs[0]["mac_utilization"],
        "dram_rd_bytes": compiled.dram_bytes_read, "dram_wr_bytes": compiled.dram_bytes_written,
        "dram_bytes": compiled.dram_bytes_read + compiled.dram_bytes_written,
        "fetch_rd_bytes": compiled.fetch_bytes_read,     # the program, read as it runs
        "min_bytes": sum(l["min_bytes"] for l in layers),
        "dram_ratio_to_min": (compiled.dram_bytes_read + compiled.dram_bytes_written)
        / sum(l["min_bytes"] for l in layers),
        # layer by layer, every tile re-reads its halo: nothing goes through the UBUF;
        # each layer's weights streamed or kept, its tiles in two buffers or one. A
        # chained segment keeps its maps in the CBUF (and halos in the UBUF)
        "strategy": strategy, "ubuf_bytes": compiled.ubuf_bytes_written,
        "ubuf_rd_bytes": compiled.ubuf_bytes_read,
        "segments_chained": len(compiled.segments),
        # the UBUF registers the program assumes (the cost model's, docs/cnn.md "The
        # UBUF a network takes", unless given)
        "ubuf": {"base": compiled.ubuf[0], "rows": compiled.ubuf[1]},
        "chains": [{"layers": list(seg.layers), "strategy": seg.choice.name,
                    "outputs_per_pass": seg.choice.outputs_per_pass,
                    "weights": seg.choice.weights, "keep": list(seg.choice.keep),
                    "passes": len(seg.passes), "estimate_cycles": seg.estimate[0],
                    "estimate_bytes": seg.estimate[1],
                    "layer_by_layer_estimate_cycles": seg.layer_by_layer[0],
                    "layer_by_layer_estimate_bytes": seg.layer_by_layer[1]}
                   for seg in compiled.segments.values()],
        "tilings": _count(_tiling_name(t) for t in compiled.tiling.values()),
        "compile_seconds": compile_s,
        "compile_phase_seconds": compiled.phase_seconds,   # where the compile time goes
        "targets": {"conv_mac_weighted_utilization": 0.95,
                    "min_conv_utilization_except_stem": 0.80, "stem_utilization": 0.6,
                    "compile_seconds": 30.0, "dram_ratio_to_min": 1.25},
        "layers": layers,
    }


def _tiling_name(tiling) -> str | None:
    """``stream/2``, ``persistent/1``, ...: weights / tile buffers, and ``/<n> columns``
    for a layer cut along its width, ``/<n> channel blocks`` along its channels (None:
    no tiling)."""
    if tiling is None:
        return None
    cut = f"/{tiling.columns} columns" if tiling.columns else ""
    cut += f"/{tiling.channels} channel blocks" if tiling.channels else ""
    return f"{tiling.weights}/{tiling.buffers}{cut}"


def _count(names) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in names:
        out[n] = out.get(n, 0) + 1
    return dict(sorted(out.items()))


def resnet50_records(cfg: ChipConfig) -> list[dict]:
    """ResNet-50 at 224 x 224, once per strategy of :data:`RESNET50_STRATEGIES`."""
    graph = resnet50()
    return [network_record(cfg, graph, f"resnet50_224{suffix}", strategy, **options)
            for suffix, strategy, options in RESNET50_STRATEGIES] + [
        # the cost model's chains, with its UBUF and with the chip's as configured
        network_record(cfg, graph, "resnet50_224_cost_model", "cost_model"),
        network_record(cfg, graph, "resnet50_224_cost_model_chip_ubuf", "cost_model",
                       ubuf=(cfg.ubuf_base, cfg.ubuf_rows))]


def resnet50_record(cfg: ChipConfig) -> dict:
    """ResNet-50 at 224 x 224 layer by layer with the cost model's tiling per layer."""
    return network_record(cfg, resnet50(), "resnet50_224", chain="layer_by_layer")
