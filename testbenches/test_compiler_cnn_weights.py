"""Weight placement per layer in the layer-by-layer CNN lowering (docs/cnn.md,
"Weight placement per layer"): kept weights agree with numpy and the golden model bit
for bit, read each weight block once, the cost model's byte estimate equals the
program's traffic, and a user's choice overrides the cost model or is refused with a
message naming the layer."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch.config import preset
from systolica.app.cnn_bench import conv_layer
from systolica.arch.isa import DmaKind, Opcode
from systolica.compiler import CompileError, cnn_cases, compile_network, models, reference
from systolica.compiler.chain_cases import seed_two_layer
from systolica.compiler.chain_lower import ChainChoice
from systolica.compiler.cnn import _layout, choose_weights, estimate
from systolica.compiler.lower import lower

TINY = preset("tiny")

GRAPHS = {
    "conv_tiled": lambda: cnn_cases.large_conv_case(1),
    "small_cnn32": lambda: models.small_cnn(size=32),
    "bottleneck16": lambda: models.bottleneck_block(size=16, cin=16, width=8),
    **{f"conv{s}": (lambda s=s: cnn_cases.conv_case(s)) for s in (100, 101, 102, 103)},
    **{f"pool{s}": (lambda s=s: cnn_cases.pool_case(s)) for s in (100, 101)},
    **{f"add{s}": (lambda s=s: cnn_cases.add_case(s)) for s in (100, 101)},
}


def _big_weights():
    """A 3x3 convolution of 64 to 64 channels: 36 KiB of weights, more than tiny's
    CBUF."""
    return conv_layer("big", 12, 64, 64, 3, 1, 1)


def _weight_bytes_read(compiled) -> dict[str, int]:
    """Bytes each layer's DMAs read from its own weight image."""
    cfg = compiled.cfg
    spans = {name: (at, at + words) for (name, what), (at, words)
             in compiled.dram_map.params.items() if what == "weights"}
    names = [n.name for n in compiled.graph.nodes]
    out = dict.fromkeys(spans, 0)
    for ins, layer in zip(compiled.program, compiled.layer_of):
        if ins.op is Opcode.DMA and ins.fields["kind"] == DmaKind.LOAD_CBUF:
            lo, hi = spans.get(names[layer], (0, 0))
            if lo <= ins.fields["dram_addr"] < hi:
                out[names[layer]] += ins.fields["rows"] * cfg.rows
    return out


@pytest.mark.parametrize("case", list(GRAPHS))
@pytest.mark.parametrize("weights", ["persistent", None])
def test_placements_match_numpy_and_golden(case, weights):
    graph = GRAPHS[case]()
    compiled = compile_network(TINY, graph, weights=weights)
    result = golden.run(TINY, compiled.image, compiled.dram, compiled.prog_addr)
    assert result.cycles == compiled.predicted_cycles
    got = compiled.results(result.dram)
    for name, want in reference.outputs(graph).items():
        np.testing.assert_array_equal(got[name], want)


@pytest.mark.parametrize("case", ["conv_tiled", "small_cnn32", "bottleneck16"])
def test_kept_weights_are_read_once(case):
    graph = GRAPHS[case]()
    kept = compile_network(TINY, graph, weights="persistent")
    streamed = compile_network(TINY, graph, weights="stream")
    images = {name: words * TINY.rows for (name, what), (_, words)
              in kept.dram_map.params.items() if what == "weights"}
    assert _weight_bytes_read(kept) == images
    assert sum(_weight_bytes_read(streamed).values()) > sum(images.values())
    assert kept.dram_bytes_read < streamed.dram_bytes_read
    assert kept.dram_bytes_written == streamed.dram_bytes_written


@pytest.mark.parametrize("case", ["conv_tiled", "small_cnn32", "bottleneck16", "pool100",
                                  "add100"])
def test_estimate_counts_the_program_s_dram_bytes(case):
    """The cost model's byte count is the program's, layer by layer."""
    graph = GRAPHS[case]()
    for weights in ("stream", "persistent"):
        compiled = compile_network(TINY, graph, weights=weights)
        lowered = lower(TINY, graph, weights=weights)
        names = [n.name for n in graph.nodes]
        moved = {}
        for ins, layer in zip(compiled.program, compiled.layer_of):
            if ins.op is Opcode.DMA:
                kind = ins.fields["kind"]
                words = ins.fields["rows"] * (TINY.acc_row_words if kind in (
                    DmaKind.LOAD_ACC, DmaKind.STORE_ACC) else 1)
                moved[names[layer]] = moved.get(names[layer], 0) + words * TINY.rows
        for name, job in lowered.jobs.items():
            if job.out_dtype != "int8":
                continue                     # an int32 output's words are ACC rows
            assert estimate(TINY, _layout(TINY), job, weights)[1] == moved[name], \
                (name, weights)


def test_cost_model_keeps_weights_of_a_tiled_layer_and_streams_what_does_not_fit():
    lowered = lower(TINY, cnn_cases.large_conv_case(1), weights="stream")
    (job,) = lowered.jobs.values()
    assert choose_weights(TINY, _layout(TINY), job) == "persistent"
    # weights larger than the CBUF cannot stay
    lowered = lower(TINY, _big_weights(), weights="stream")
    (job,) = lowered.jobs.values()
    assert job.weights.size > TINY.cbuf_depth * TINY.rows
    assert choose_weights(TINY, _layout(TINY), job) == "stream"


def test_compiled_reports_each_layer_s_choice_and_a_user_overrides_it():
    graph = models.small_cnn(size=32)
    chosen = compile_network(TINY, graph).weights
    assert set(chosen) == {n.name for n in graph.nodes if n.name != "flat"}
    assert set(chosen.values()) <= {"stream", "persistent"}
    flipped = {name: "stream" if w == "persistent" else "persistent"
               for name, w in chosen.items()}
    assert compile_network(TINY, graph, weights=flipped).weights == flipped
    # a layer not named stays the cost model's
    one = next(iter(chosen))
    partial = compile_network(TINY, graph, weights={one: flipped[one]}).weights
    assert partial == {**chosen, one: flipped[one]}


@pytest.mark.parametrize("weights, words", [
    ({"nope": "stream"}, ["'nope'", "does not have"]),
    ({"conv1": "kept"}, ["conv1", "'kept'", "stream", "persistent"]),
    (3, ["weights", "mapping"]),
])
def test_bad_choices_are_refused(weights, words):
    with pytest.raises(CompileError) as info:
        compile_network(TINY, models.small_cnn(), weights=weights)
    for word in words:
        assert word in str(info.value)


def test_weights_that_leave_no_room_for_a_tile_name_the_layer():
    with pytest.raises(CompileError, match="'big'"):
        compile_network(TINY, _big_weights(), weights={"big": "persistent"})


def test_weights_do_not_apply_to_chains():
    with pytest.raises(CompileError, match="ChainChoice.weights"):
        compile_network(TINY, seed_two_layer(), chain=ChainChoice("crop_fetch", 8),
                        weights="stream")
