"""The main job: compile a network, run it on the golden model and on the Verilated
RTL, and check both against numpy, cycle counts included, layer by layer from one run
of the whole program."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from systolica import golden
from systolica.arch import timing
from systolica.arch.config import ChipConfig
from systolica.compiler import Compiled
from systolica.compiler.graph import reference
from systolica.sim import rtlsim
from systolica.sim.jobs import RtlJob
from systolica.sim.progress import Display

#: The performance counters a layer's figures are read from, by the names of
#: :func:`systolica.firmware.driver.counters_from` (the cycle counter apart).
COUNTERS = golden.SAMPLED[1:]


@dataclass
class LayerRun:
    """One layer's share of a run: the cycles from the previous layer's end to its
    own, and what the chip's counters counted in them.

    A layer ends where the program up to its last instruction (in issue order) has
    drained, as the compiler predicts it (``timing.run_cycles`` of that prefix). The
    harness reads the chip's counters when its cycle counter reaches each layer's end,
    in the one run of the whole program (the last layer's end is the run's); the
    golden model says what they should read there (``golden.run(sample_at=...)``)."""
    name: str
    M: int
    K: int
    N: int
    macs: int               # the layer's own MACs (the compiler's count)
    predicted_end: int      # cycle at which the program up to its last instruction
                            # has drained (the compiler's timing)
    measured_end: int       # what the chip's cycle counter read when sampled there
                            # (for the layer that ends the run, the run's end)
    measured: dict[str, int]    # each of COUNTERS' growth over the layer's cycles: chip
    predicted: dict[str, int]   # ... the golden model's
    start: int = 0          # previous layer's end (0 for the first)

    @property
    def predicted_cycles(self) -> int:
        return self.predicted_end - self.start

    @property
    def measured_cycles(self) -> int:
        return self.measured_end - self.start

    @property
    def dram_rd_bytes(self) -> int:
        return self.measured["dram_rd_bytes"]

    @property
    def dram_wr_bytes(self) -> int:
        return self.measured["dram_wr_bytes"]

    @property
    def ok(self) -> bool:
        """The chip reached the layer's end when predicted, its counters counting what
        the golden model counts in the layer's cycles."""
        return self.measured_end == self.predicted_end and self.measured == self.predicted

    def mismatches(self) -> list[str]:
        """Each counter that differs from the prediction, in words."""
        return [f"{name} {self.measured.get(name)} on the chip, {want} predicted"
                for name, want in self.predicted.items() if self.measured.get(name) != want]

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
    waves: str | None = None    # the waveform's path, FST or VCD (``fst``: FST only)

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
                and all(layer.ok for layer in self.layers))


def layer_ends(compiled: Compiled) -> list[int]:
    """Per layer: the cycle at which the program up to that layer's last instruction
    (in issue order) has drained, ``timing.run_cycles`` of that prefix (in one pass
    over the program)."""
    cfg = compiled.cfg
    last: dict[int, int] = {}
    for pc, layer in enumerate(compiled.layer_of):
        last[layer] = pc
    drained, upto = 0, []           # upto[pc]: run_cycles(program[:pc + 1])
    for ins in compiled.program:
        drained = max(drained, ins.cycle + timing.done(cfg, ins))
        upto.append(drained)
    return [upto[last[layer.index]] if layer.index in last else 0
            for layer in compiled.layers]


def run_network(compiled: Compiled, *, waves: rtlsim.Waves = False,
                waves_file: str | None = None, per_layer: bool = True,
                harness: str = "cocotb", progress: bool | rtlsim.Progress = False
                ) -> NetworkRun:
    """Run a compiled network on the RTL of the chip it was compiled for and check it
    against numpy and the golden model, in one run of the whole program. With
    `per_layer` (not for a chain, whose layers interleave pass by pass), the harness
    also reads the chip's counters at each layer's predicted end (:func:`layer_ends`),
    and each layer's figures are what they counted since the previous layer's end,
    checked against the golden model's counters at the same cycles. `progress`: show
    how far the simulation has got on stderr (True: :class:`~systolica.sim.progress.
    Display`), or a function that is told (:data:`systolica.sim.rtlsim.Progress`).
    `waves`, `waves_file`: a waveform of the run, as :func:`systolica.sim.rtlsim.run`
    writes it."""
    if not isinstance(compiled, Compiled):
        raise TypeError(f"run_network takes what compile_network returns (a Compiled), "
                        f"not {type(compiled).__name__}; compile it first: "
                        f"compile_network(cfg, network)")
    cfg, network = compiled.cfg, compiled.network
    compile_s = sum(compiled.phase_seconds.values())
    per_layer = per_layer and (compiled.chain is None or len(compiled.layers) == 1)
    ends = layer_ends(compiled) if per_layer else []
    samples = tuple(sorted(set(ends)))

    want = reference.outputs(network)
    gold = golden.run(cfg, compiled.loadable, sample_at=samples)
    out_words = (compiled.dram_map.output, compiled.dram_map.output_words)
    job = RtlJob(compiled.loadable, readback=(out_words,), name=network.name,
                 samples=samples)
    if progress is True:
        with Display(f"{network.name} on {cfg.name}") as show:
            full, = rtlsim.run(cfg, [job], waves=waves, waves_file=waves_file,
                               harness=harness, progress=show)
    else:
        full, = rtlsim.run(cfg, [job], waves=waves, waves_file=waves_file, harness=harness,
                           progress=progress or None)

    dram_after = np.zeros((compiled.dram_map.end, cfg.dram_word_bytes), np.uint8)
    dram_after[out_words[0]:out_words[0] + out_words[1]] = full.readback[0]
    got = compiled.results(dram_after)
    golden_out = compiled.results(gold.dram)

    layers = []
    measured_at = dict(zip(samples, full.samples))
    predicted_at = dict(zip(samples, gold.samples))
    zero = dict.fromkeys(COUNTERS, 0)
    start, before_chip, before_gold = 0, zero, zero
    for layer, end in zip(compiled.layers, ends):
        chip, gold_at = measured_at[end], predicted_at[end]
        if end < start:             # drained before an earlier layer: no cycles of its own
            chip, gold_at, end = before_chip, before_gold, start
        # the run ends with the last layer: its end is the run's, however long it took
        reached = full.cycles if end == compiled.predicted_cycles else chip["cycles"]
        layers.append(LayerRun(
            layer.name, layer.M, layer.K, layer.N, layer.macs, end, reached,
            {k: chip[k] - before_chip[k] for k in COUNTERS},
            {k: gold_at[k] - before_gold[k] for k in COUNTERS}, start))
        start, before_chip, before_gold = end, chip, gold_at
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
        ubuf_rd_bytes=full.ubuf_rd_bytes, waves=full.waves)
