"""The main flow (systolica.app.flow) and its reports (systolica.app.report): the
per-layer table people read and the bench record machines read.

The report tests take a real compiled network with the golden model's results in the
RTL's place (no simulator); one run of the flow on the tiny chip's RTL then checks
that the flow measures what the golden model says, layer by layer: the chip's
counters read where each layer ends, in the one run of the whole program.
"""

from __future__ import annotations

import dataclasses
import io
import json

import numpy as np
import pytest
from rich.console import Console

from systolica import golden
from systolica.app import demo, flow, report
from systolica.arch import isa, timing
from systolica.arch.config import preset
from systolica.arch.loadable import Loadable
from systolica.compiler import compile_network
from systolica.compiler.graph import reference

#: The bench record's fields (``build/bench.json``); a change here is a change of format.
RECORD_KEYS = {
    "name", "config", "M", "K", "N", "layers", "cycles", "predicted_cycles",
    "golden_cycles", "macs", "array_macs", "mac_utilization", "dram_bytes",
    "dram_rd_bytes", "dram_wr_bytes", "fetch_rd_bytes", "ubuf_bytes_written", "ubuf_bytes_read",
    "instructions", "splits", "compile_seconds",
    "sim_seconds",
    "sim_cycles_per_second", "harness", "outputs_match", "ok",
}
LAYER_KEYS = {"name", "M", "K", "N", "predicted_cycles", "cycles", "mac_utilization",
              "dram_rd_bytes", "dram_wr_bytes", "unit_busy_cycles"}
#: Host timings and where the waveform went: all that may differ between two runs.
TIMING = {"compile_s", "sim_s", "fst"}
#: The demo MLP on the tiny chip (``make bench``): a figure the README quotes.
DEMO_CYCLES = 2264


def golden_run(cfg, network) -> flow.NetworkRun:
    """What :func:`flow.run_network` reports, with the golden model standing in for the
    RTL: each layer's end from the golden model's run of the program up to that
    layer's last instruction (not from the compiler's timing, as the flow's), and the
    counters there from its samples of the whole program's run."""
    compiled = compile_network(cfg, network)
    words = isa.from_bytes(compiled.image)
    ends = []
    for layer in compiled.layers:
        upto = 1 + max(pc for pc, of in enumerate(compiled.layer_of) if of == layer.index)
        ends.append(golden.run(cfg, Loadable.for_chip(cfg, isa.to_bytes(words[:upto]),
                                                      compiled.dram)).cycles)
    full = golden.run(cfg, Loadable.for_chip(cfg, compiled.image, compiled.dram), sample_at=ends)
    layers, start, before = [], 0, dict.fromkeys(flow.COUNTERS, 0)
    for layer, end, at in zip(compiled.layers, ends, full.samples):
        share = {k: at[k] - before[k] for k in flow.COUNTERS}
        layers.append(flow.LayerRun(layer.name, layer.M, layer.K, layer.N, layer.macs,
                                    end, at["cycles"], share, dict(share), start))
        start, before = end, at
    got, want = compiled.results(full.dram), reference.outputs(network)
    return flow.NetworkRun(
        cfg=cfg, name=network.name, compiled=compiled, compile_s=0.5,
        predicted_cycles=compiled.predicted_cycles, measured_cycles=full.cycles,
        golden_cycles=full.cycles, rtl_matches_golden=True,
        rtl_matches_numpy=set(got) == set(want)
        and all(np.array_equal(got[k], want[k]) for k in want),
        macs_counter=full.macs, dram_rd_bytes=full.dram_bytes_read,
        dram_wr_bytes=full.dram_bytes_written, sim_s=0.25, error=full.error.name,
        layers=layers, fetch_rd_bytes=full.fetch_bytes_read)


# session-wide: the fast tier shuffles modules together, which would rebuild it
@pytest.fixture(scope="session")
def demo_run() -> flow.NetworkRun:
    return golden_run(preset("tiny"), demo.mlp())


def busy_in(cfg, program, lo: int, hi: int) -> dict[str, int]:
    """Each unit's busy cycles in ``[lo, hi)``, straight from the instructions'
    occupancies (the configuration updates' units left out)."""
    out: dict[str, int] = {}
    for ins in program:
        unit = timing.UNIT[ins.op]
        if unit in ("cfg", "convcfg", "taps"):
            continue
        n = min(ins.cycle + timing.occupancy(cfg, ins), hi) - max(ins.cycle, lo)
        if n > 0:
            out[unit] = out.get(unit, 0) + n
    return out


def printed(run: flow.NetworkRun) -> list[str]:
    out = io.StringIO()
    report.print_run(run, Console(file=out, width=160, color_system=None))
    return [" ".join(line.replace("│", " ").replace("┃", " ").split())
            for line in out.getvalue().splitlines()]


def test_golden_stand_in_is_a_passing_run(demo_run):
    """The fixture the report tests read is itself right: the demo's cycles, layers
    that tile the run, and outputs equal to numpy's."""
    assert demo_run.ok
    assert demo_run.measured_cycles == demo_run.predicted_cycles == DEMO_CYCLES
    assert [l.name for l in demo_run.layers] == ["fc1", "fc2", "fc3"]
    assert demo_run.layers[0].start == 0
    assert demo_run.layers[-1].measured_end == demo_run.measured_cycles
    assert all(a.measured_end == b.start for a, b in zip(demo_run.layers, demo_run.layers[1:]))
    assert sum(l.dram_rd_bytes for l in demo_run.layers) == demo_run.dram_rd_bytes
    assert sum(l.dram_wr_bytes for l in demo_run.layers) == demo_run.dram_wr_bytes
    assert sum(l.measured["macs"] for l in demo_run.layers) == demo_run.macs_counter
    assert all(l.measured["macs"] > 0 for l in demo_run.layers)


@pytest.mark.parametrize("make", [demo.mlp, demo.cnn, demo.concat])
def test_layers_end_where_their_prefix_drains(make):
    """The flow's layer ends (the compiler's timing, in one pass over the program) are
    where the golden model's run of each layer's prefix of the program ends."""
    stand_in = golden_run(preset("tiny"), make())
    assert flow.layer_ends(stand_in.compiled) == [l.predicted_end for l in stand_in.layers]
    assert flow.layer_ends(stand_in.compiled)[-1] == stand_in.predicted_cycles


def test_table_has_a_row_per_layer_and_a_total(demo_run):
    lines = printed(demo_run)
    cfg = demo_run.cfg
    assert lines[0] == (f"demo_mlp on chip tiny: 2x2 tiles of 4x4 cells (8x8 = 64 MACs), "
                        f"{len(demo_run.compiled.program)} instructions")
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:] if line}
    for layer in demo_run.layers:
        busy = busy_in(cfg, demo_run.compiled.program, layer.start, layer.predicted_end)
        unit = max(busy, key=busy.get)
        assert rows[layer.name] == [
            str(layer.M), str(layer.K), str(layer.N), str(layer.predicted_cycles),
            str(layer.measured_cycles), "yes", f"{layer.utilisation(cfg):.3f}",
            str(layer.dram_rd_bytes), str(layer.dram_wr_bytes), unit,
            f"{busy[unit] / layer.predicted_cycles:.2f}"]
    assert rows["total"] == [str(DEMO_CYCLES), str(DEMO_CYCLES), "yes",
                             f"{demo_run.utilisation:.3f}", str(demo_run.dram_rd_bytes),
                             str(demo_run.dram_wr_bytes)]
    assert (f"outputs: RTL == golden model yes, RTL == numpy yes; golden model cycles "
            f"{DEMO_CYCLES} yes; chip error NONE") in lines
    assert lines[-1] == "PASS"


def test_a_layer_off_by_one_cycle_fails_the_run(demo_run):
    late = dataclasses.replace(demo_run.layers[1],
                               measured_end=demo_run.layers[1].measured_end + 1)
    run = dataclasses.replace(demo_run, layers=[demo_run.layers[0], late,
                                                *demo_run.layers[2:]])
    assert not run.ok
    lines = printed(run)
    assert next(l for l in lines if l.startswith("fc2 ")).split()[6] == "NO"
    assert next(l for l in lines if l.startswith("fc1 ")).split()[6] == "yes"
    assert lines[-1] == "FAIL"


@pytest.mark.parametrize("counter", flow.COUNTERS)
def test_a_layer_counter_off_the_prediction_fails_the_run(demo_run, counter):
    """A counter that counted otherwise than the golden model in one layer's cycles
    fails the layer and the run, and says which, by how much."""
    fc2 = demo_run.layers[1]
    off = dataclasses.replace(fc2, measured={**fc2.measured,
                                             counter: fc2.measured[counter] + 8})
    run = dataclasses.replace(demo_run, layers=[demo_run.layers[0], off,
                                                *demo_run.layers[2:]])
    assert not off.ok and not run.ok
    lines = printed(run)
    assert next(l for l in lines if l.startswith("fc2 ")).split()[6] == "NO"
    assert (f"layer 'fc2': {counter} {fc2.measured[counter] + 8} on the chip, "
            f"{fc2.predicted[counter]} predicted") in lines
    assert lines[-1] == "FAIL"


@pytest.mark.parametrize("change", [
    dict(measured_cycles=DEMO_CYCLES + 1), dict(golden_cycles=DEMO_CYCLES - 1),
    dict(rtl_matches_numpy=False), dict(rtl_matches_golden=False), dict(error="RANGE"),
    dict(fetch_rd_bytes=8),
], ids=lambda change: next(iter(change)))
def test_any_mismatch_fails_the_run(demo_run, change):
    run = dataclasses.replace(demo_run, **change)
    assert not run.ok
    assert printed(run)[-1] == "FAIL"


def test_bench_record(demo_run):
    rec = report.record(demo_run, "demo_mlp")
    assert set(rec) == RECORD_KEYS
    assert json.loads(json.dumps(rec)) == rec     # plain JSON types only
    assert (rec["name"], rec["config"], rec["M"], rec["K"], rec["N"]) \
        == ("demo_mlp", "tiny", 16, 64, 10)
    assert rec["cycles"] == rec["predicted_cycles"] == rec["golden_cycles"] == DEMO_CYCLES
    assert rec["macs"] == sum(16 * l.K * l.N for l in demo_run.layers)
    assert rec["mac_utilization"] == pytest.approx(rec["macs"] / (DEMO_CYCLES * 64))
    assert rec["dram_bytes"] == rec["dram_rd_bytes"] + rec["dram_wr_bytes"] > 0
    assert rec["instructions"] == len(demo_run.compiled.program)
    assert rec["sim_cycles_per_second"] == DEMO_CYCLES / 0.25
    assert rec["harness"] == "cocotb"
    assert rec["outputs_match"] is True and rec["ok"] is True
    assert [set(layer) for layer in rec["layers"]] == [LAYER_KEYS] * 3
    assert [layer["cycles"] for layer in rec["layers"]] \
        == [l.measured_cycles for l in demo_run.layers]
    assert sum(layer["cycles"] for layer in rec["layers"]) == DEMO_CYCLES
    assert [layer["unit_busy_cycles"] for layer in rec["layers"]] \
        == [busy_in(demo_run.cfg, demo_run.compiled.program, l.start, l.predicted_end)
            for l in demo_run.layers]


def test_bench_record_of_a_failed_run(demo_run):
    rec = report.record(dataclasses.replace(demo_run, rtl_matches_numpy=False), "x")
    assert rec["outputs_match"] is False and rec["ok"] is False


def test_a_fetch_count_off_the_prediction_is_shown_and_fails(demo_run):
    """The demo fits the instruction memory: no fetch line; a fetch counter other than
    the prediction (0 bytes) is printed with NO."""
    assert not any(l.startswith("instruction fetch") for l in printed(demo_run))
    lines = printed(dataclasses.replace(demo_run, fetch_rd_bytes=8))
    assert "instruction fetch from DRAM: 8 B read, 0 B predicted NO" in lines


@pytest.mark.rtl
def test_flow_on_rtl_measures_what_the_golden_model_says(demo_run):
    """One run of the demo on the tiny chip's RTL: every figure of the run and of each
    layer (cycles, the counters at each layer's end) equals the golden model's; the
    harness said how far it had got."""
    told = []
    run = flow.run_network(compile_network(preset("tiny"), demo.mlp()),
                           progress=lambda *args: told.append(args))
    assert run.ok, printed(run)
    assert told[-1][:2] == (0, "demo_mlp") and told[-1][3] == DEMO_CYCLES
    assert run.sim_s > 0 and run.compile_s > 0 and run.fst is None
    for field in dataclasses.fields(flow.NetworkRun):
        if field.name not in TIMING | {"compiled"}:
            assert getattr(run, field.name) == getattr(demo_run, field.name), field.name
    assert run.compiled.image == demo_run.compiled.image
    ours = report.record(run, "demo_mlp")
    theirs = report.record(demo_run, "demo_mlp")
    host = {"compile_seconds", "sim_seconds", "sim_cycles_per_second"}
    assert {k: v for k, v in ours.items() if k not in host} \
        == {k: v for k, v in theirs.items() if k not in host}
