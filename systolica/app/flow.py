"""The main job: compile a network, run it on the golden model and on the Verilated
RTL, and check both against numpy, cycle counts included."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from systolica import golden
from systolica.arch import isa, timing
from systolica.arch.config import ChipConfig
from systolica.compiler import Compiled
from systolica.compiler.graph import reference
from systolica.sim import rtlsim
from systolica.sim.jobs import RtlJob


@dataclass
class LayerRun:
    name: str
    M: int
    K: int
    N: int
    macs: int
    predicted_end: int      # cycle at which the program up to this layer's last
    measured_end: int       # instruction has drained: compiler vs RTL
    dram_rd_bytes: int      # measured on the RTL, this layer's share
    dram_wr_bytes: int
    start: int = 0          # previous layer's end (0 for the first)

    @property
    def predicted_cycles(self) -> int:
        return self.predicted_end - self.start

    @property
    def measured_cycles(self) -> int:
        return self.measured_end - self.start

    def utilisation(self, cfg: ChipConfig) -> float:
        c = self.measured_cycles
        return self.macs / (c * cfg.macs) if c > 0 else 0.0


@dataclass
class NetworkRun:
    cfg: ChipConfig
    name: str
    compiled: Compiled
    compile_s: float
    predicted_cycles: int
    measured_cycles: int
    golden_cycles: int
    rtl_matches_golden: bool
    rtl_matches_numpy: bool
    macs_counter: int
    dram_rd_bytes: int
    dram_wr_bytes: int
    sim_s: float
    error: str
    layers: list[LayerRun] = field(default_factory=list)
    fst: str | None = None
    harness: str = "cocotb"     # what drove the simulation (systolica.sim.rtlsim.HARNESSES)
    fetch_rd_bytes: int = 0     # the instruction fetcher's DRAM reads (FETCH_RD_BYTES)
    ubuf_wr_bytes: int = 0      # crops into the UBUF (UBUF_WR_BYTES)
    ubuf_rd_bytes: int = 0      # fetches from it (UBUF_RD_BYTES)

    @property
    def macs(self) -> int:
        return self.compiled.macs

    @property
    def utilisation(self) -> float:
        c = self.measured_cycles
        return self.macs / (c * self.cfg.macs) if c else 0.0

    @property
    def sim_cycles_per_second(self) -> float:
        return self.measured_cycles / self.sim_s if self.sim_s else 0.0

    @property
    def ok(self) -> bool:
        return (self.error == "NONE" and self.rtl_matches_golden and self.rtl_matches_numpy
                and self.measured_cycles == self.predicted_cycles == self.golden_cycles
                and self.fetch_rd_bytes == self.compiled.fetch_bytes_read
                and self.ubuf_wr_bytes == self.compiled.ubuf_bytes_written
                and self.ubuf_rd_bytes == self.compiled.ubuf_bytes_read
                and all(l.measured_end == l.predicted_end for l in self.layers))


def _layer_prefixes(compiled: Compiled) -> list[int]:
    """For each layer, how many program instructions (in issue order) it takes to
    include that layer's last one."""
    last = {}
    for pc, layer in enumerate(compiled.layer_of):
        last[layer] = pc
    return [last[layer.index] + 1 for layer in compiled.layers]


def run_network(compiled: Compiled, *, waves: bool = False, per_layer: bool = True,
                harness: str = "cocotb") -> NetworkRun:
    """Run a compiled network on the RTL of the chip it was compiled for and check it
    against numpy and the golden model; with `per_layer`, also run each layer's prefix
    of the program for per-layer cycles (not for a chain, whose layers interleave pass
    by pass)."""
    cfg, network = compiled.cfg, compiled.network
    compile_s = sum(compiled.phase_seconds.values())
    per_layer = per_layer and compiled.chain is None

    want = reference.outputs(network)
    gold = golden.run(cfg, compiled.loadable)
    out_words = (compiled.dram_map.output, compiled.dram_map.output_words)

    jobs = [RtlJob(compiled.loadable, readback=(out_words,), name=network.name)]
    prefixes = _layer_prefixes(compiled) if per_layer and len(compiled.layers) > 1 else []
    words = isa.from_bytes(compiled.image)
    for layer, n in zip(compiled.layers, prefixes):
        prefix = isa.to_bytes(words[:n])
        jobs.append(RtlJob(dataclasses.replace(compiled.loadable, image=prefix),
                           readback=((0, 1),), name=f"{network.name}:{layer.name}"))
    results = rtlsim.run(cfg, jobs, waves=waves, harness=harness)
    full = results[0]

    dram_after = np.zeros((compiled.dram_map.end, cfg.dram_word_bytes), np.uint8)
    dram_after[out_words[0]:out_words[0] + out_words[1]] = full.readback[0]
    got = compiled.results(dram_after)
    golden_out = compiled.results(gold.dram)

    layers = []
    if prefixes:
        start = rd0 = wr0 = 0
        for layer, n, res in zip(compiled.layers, prefixes, results[1:]):
            predicted = timing.run_cycles(cfg, compiled.program[:n])
            layers.append(LayerRun(layer.name, layer.M, layer.K, layer.N, layer.macs,
                                   predicted, res.cycles, res.dram_rd_bytes - rd0,
                                   res.dram_wr_bytes - wr0, start))
            start, rd0, wr0 = res.cycles, res.dram_rd_bytes, res.dram_wr_bytes
    else:
        layer = compiled.layers[0] if len(compiled.layers) == 1 else None
        if layer is not None:
            layers.append(LayerRun(layer.name, layer.M, layer.K, layer.N, layer.macs,
                                   compiled.predicted_cycles, full.cycles,
                                   full.dram_rd_bytes, full.dram_wr_bytes))
    return NetworkRun(
        cfg=cfg, name=network.name, compiled=compiled, compile_s=compile_s,
        predicted_cycles=compiled.predicted_cycles, measured_cycles=full.cycles,
        golden_cycles=gold.cycles,
        rtl_matches_golden=all(np.array_equal(got[k], golden_out[k]) for k in got),
        rtl_matches_numpy=set(got) == set(want)
        and all(np.array_equal(got[k], want[k]) for k in got),
        macs_counter=full.macs, dram_rd_bytes=full.dram_rd_bytes,
        dram_wr_bytes=full.dram_wr_bytes, sim_s=full.wall_s,
        error=full.error_name, layers=layers, fst=full.fst, harness=harness,
        fetch_rd_bytes=full.fetch_rd_bytes, ubuf_wr_bytes=full.ubuf_wr_bytes,
        ubuf_rd_bytes=full.ubuf_rd_bytes)
