"""Chains inside whole networks (compiler/planning/network_chains.py, docs/cnn.md "Chains in
networks"), on the golden model: residual networks whose runs of convolutions are
chained with each strategy equal numpy and the same network lowered layer by layer,
bit for bit, with the predicted cycles and UBUF counters; the cost rule; the user's
cut; the errors."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch.config import preset
from systolica.compiler import compile_network
from systolica.compiler.errors import CompileError
from systolica.compiler.graph import reference
from systolica.compiler.lowering.chain import ChainChoice
from systolica.compiler.lowering.maps.network import lower_maps as lower_cnn
from systolica.compiler.options import CompileOptions
from systolica.compiler.planning.network_chains import chain_runs
from systolica.models import cnn_cases
from systolica.models import zoo as models

from tiers import sample

CFG = preset("tiny")
STRATEGIES = ("baseline", "crop_fetch", "fused_crop")


def run(graph, **options):
    compiled = compile_network(CFG, graph, **options)
    gold = golden.run(CFG, compiled.loadable)
    assert gold.error.name == "NONE", gold.error.name
    assert gold.cycles == compiled.predicted_cycles
    assert (gold.ubuf_bytes_written, gold.ubuf_bytes_read) == \
        (compiled.ubuf_bytes_written, compiled.ubuf_bytes_read)
    assert (gold.dram_bytes_read, gold.dram_bytes_written) == \
        (compiled.dram_bytes_read, compiled.dram_bytes_written)
    return compiled, gold, compiled.results(gold.dram)


def bottleneck(stride=1):
    return models.bottleneck_block(size=16, cin=16 * stride, width=8 * stride,
                                   stride=stride)


def test_a_bottleneck_has_one_run_the_shortcut_aside():
    graph = bottleneck()
    compiled = compile_network(CFG, graph, chain="layer_by_layer")
    lowered = lower_cnn(CFG, graph, CompileOptions(chain="layer_by_layer"))
    jobs = [lowered.jobs.get(n.name) for n in graph.nodes]
    assert [[graph.nodes[i].name for i in run] for run in chain_runs(graph, jobs)] == \
        [["block_conv1", "block_conv2", "block_conv3"]]
    assert compiled.segments == {}
    # the small CNN's two 3x3 layers form a run too; the stem reads a replicated input
    small = models.small_cnn()
    lowered = lower_cnn(CFG, small, CompileOptions(chain="layer_by_layer"))
    jobs = [lowered.jobs.get(n.name) for n in small.nodes]
    assert [[small.nodes[i].name for i in r] for r in chain_runs(small, jobs)] == \
        [["block_conv1", "block_conv2"]]


# the stride-2 bottleneck of one strategy before every commit (make test-fast), all in
# make test
@pytest.mark.parametrize("stride", [pytest.param(1, marks=pytest.mark.slow), 2])
@pytest.mark.parametrize("strategy", sample(STRATEGIES, 3))
def test_a_chained_bottleneck_equals_numpy_and_layer_by_layer(strategy, stride):
    """The whole run chained, as the user asks: every output equals numpy and the
    layer-by-layer program's, the chain's maps never reach DRAM, and it moves fewer
    DRAM bytes."""
    graph = bottleneck(stride)
    want = reference.outputs(graph)
    lbl, gl, out_l = run(graph, chain="layer_by_layer")
    got, gg, out_g = run(graph, chain=strategy, segments={"block_conv1": 3})
    for name in want:
        np.testing.assert_array_equal(out_g[name], want[name])
        np.testing.assert_array_equal(out_g[name], out_l[name])
    assert list(got.segments) == ["block_conv1"]
    seg = got.segments["block_conv1"]
    assert seg.layers == ("block_conv1", "block_conv2", "block_conv3")
    assert seg.choice.strategy == strategy and len(seg.passes) >= 1
    keys = {r.key for r in got.plan.regions if r.memory == "dram"}
    assert "tensor block_conv1" not in keys and "tensor block_conv2" not in keys
    assert "tensor block_conv3" in keys
    assert set(got.tiling) == {"block_downsample", "block_add"}
    assert gg.dram_bytes_read + gg.dram_bytes_written < \
        gl.dram_bytes_read + gl.dram_bytes_written
    assert (gg.ubuf_bytes_written > 0) == (strategy != "baseline" and len(seg.passes) > 1)


@pytest.mark.slow
def test_the_baseline_recomputes_what_the_ubuf_keeps():
    """Forced into the same passes, the UBUF strategies compute every row once and
    the baseline its halo rows again (more MACs, more DRAM reads of the run's input);
    the fused crop moves the same UBUF rows as the COPY crop."""
    graph = bottleneck()
    out = {}
    for s in STRATEGIES:
        passes = dict(chain=s, segments={"block_conv1": (3, ChainChoice(s, 4))})
        out[s] = run(graph, **passes)
    (_, b, _), (_, k, _), (_, f, _) = out["baseline"], out["crop_fetch"], out["fused_crop"]
    assert b.macs > k.macs == f.macs
    assert b.dram_bytes_read > k.dram_bytes_read == f.dram_bytes_read
    assert k.ubuf_bytes_written == f.ubuf_bytes_written == k.ubuf_bytes_read > 0
    assert b.ubuf_bytes_written == 0
    assert len(out["crop_fetch"][0].segments["block_conv1"].passes) == 4


# one quick seed before every commit (make test-fast), all eight in make test
@pytest.mark.parametrize("seed", [pytest.param(s, marks=() if s == 3 else pytest.mark.slow)
                                  for s in range(8)])
def test_random_residual_networks_chained_equal_layer_by_layer(seed):
    """Random residual networks (kernels, dilation, a stride-2 layer in the run,
    channels over one and two array rows), each strategy with the whole run chained
    and with the cost model's choice: bit for bit the layer-by-layer program's
    outputs and numpy's."""
    graph = cnn_cases.residual_chain_case(seed)
    want = reference.outputs(graph)
    _, _, base = run(graph, chain="layer_by_layer")
    run_layers = [n.name for n in graph.nodes if n.name.startswith("run")]
    chained = 0
    for strategy in STRATEGIES + (None,):
        seg = None if strategy is None else {"run0": len(run_layers)}
        try:
            compiled, _, out = run(graph, chain=strategy, segments=seg)
        except CompileError as e:            # the tiny chip's CBUF or UBUF too small
            assert "short by" in str(e) or "more outputs per pass" in str(e), str(e)
            continue
        chained += bool(compiled.segments)
        for name in want:
            np.testing.assert_array_equal(out[name], want[name], err_msg=str(strategy))
            np.testing.assert_array_equal(out[name], base[name], err_msg=str(strategy))
    assert chained >= 1


@pytest.mark.slow
def test_cost_rule_chains_only_where_it_saves_bytes_in_no_more_cycles():
    for graph in (bottleneck(), bottleneck(2), models.small_cnn(size=32)):
        for strategy in STRATEGIES + (None,):
            compiled = compile_network(CFG, graph, chain=strategy)
            for seg in compiled.segments.values():
                cycles, moved = seg.estimate
                assert moved < seg.layer_by_layer[1]
                assert cycles <= seg.layer_by_layer[0]
                if strategy is not None:
                    assert seg.choice.strategy == strategy
    # a bottleneck on tiny: chaining it moves fewer bytes, by estimate no slower
    assert compile_network(CFG, bottleneck()).segments


@pytest.mark.slow
def test_networks_that_do_not_chain_compile_as_before():
    """Layer by layer (by option, or where the cost model chains nothing) the
    program is the one the network had: the same image and DRAM."""
    for graph in (models.small_cnn(), bottleneck()):
        lbl = compile_network(CFG, graph, chain="layer_by_layer")
        given = compile_network(CFG, graph, chain="layer_by_layer",
                                segments={"block_conv1": 1})
        assert lbl.image == given.image and np.array_equal(lbl.dram, given.dram)
    small = models.small_cnn()
    auto = compile_network(CFG, small)
    assert auto.segments == {}
    assert auto.image == compile_network(CFG, small, chain="layer_by_layer").image
    # a tiling the user gives keeps its layer out of the cost model's chains
    kept = compile_network(CFG, bottleneck(), weights={"block_conv2": "persistent"})
    assert kept.segments == {} and kept.weights["block_conv2"] == "persistent"


def test_the_users_cut_stands():
    graph = bottleneck()
    two = compile_network(CFG, graph, chain="crop_fetch", segments={"block_conv2": 2})
    assert [s.layers for s in two.segments.values()] == [("block_conv2", "block_conv3")]
    assert "block_conv1" in two.tiling
    first = compile_network(CFG, graph, segments={"block_conv1": 2})
    assert [s.layers for s in first.segments.values()] == [("block_conv1", "block_conv2")]
    alone = compile_network(CFG, graph, segments={"block_conv1": 1})
    assert alone.segments == {}
    given = compile_network(CFG, graph, segments={
        "block_conv1": ChainChoice("fused_crop", 8, "stream")})
    seg = given.segments["block_conv1"]
    assert (seg.choice.strategy, seg.choice.outputs_per_pass, seg.choice.weights) == \
        ("fused_crop", 8, "stream") and len(seg.layers) == 3


@pytest.mark.slow
def test_a_network_chain_takes_a_strategy_per_layer():
    """Inside a network too, each layer of a chain its own strategy (segments)."""
    graph = bottleneck()
    mix = ("fused_crop", "crop_fetch", "baseline")
    compiled, _, out = run(graph, segments={"block_conv1": ChainChoice(mix, 4)})
    seg = compiled.segments["block_conv1"]
    assert seg.choice.strategy == mix and seg.choice.keep == (True, True, False)
    assert compiled.ubuf_bytes_written > 0
    np.testing.assert_array_equal(out[graph.outputs[0]],
                                  reference.outputs(graph)[graph.outputs[0]])


def test_network_chain_errors_name_the_layer_and_what_to_do():
    graph = bottleneck()
    with pytest.raises(CompileError, match="chain strategy 'fused' for a network"):
        compile_network(CFG, graph, chain="fused")
    with pytest.raises(CompileError, match="segments names layer 'nope'"):
        compile_network(CFG, graph, segments={"nope": 2})
    with pytest.raises(CompileError, match=r"segments\['block_conv2'\]: cannot chain 3 "
                                           r"layers from 'block_conv2': 2 chainable"):
        compile_network(CFG, graph, segments={"block_conv2": 3})
    with pytest.raises(CompileError, match=r"segments\['block_add'\]: cannot chain 2"):
        compile_network(CFG, graph, segments={"block_add": 2})
    with pytest.raises(CompileError, match="is layer_by_layer"):
        compile_network(CFG, graph, chain="layer_by_layer", segments={"block_conv1": 2})
    with pytest.raises(CompileError, match=r"segments\['block_conv1'\] must be"):
        compile_network(CFG, graph, segments={"block_conv1": "yes"})
    with pytest.raises(CompileError, match="has no UBUF"):
        compile_network(CFG.replace(ubuf_base=0, ubuf_rows=0), graph,
                        segments={"block_conv1": ChainChoice("crop_fetch")})


@pytest.mark.regress
def test_resnet50_chains_its_bottlenecks_within_the_target():
    """ResNet-50 on base with the cost model's chains: DRAM traffic within 1.25x of
    the minimum, no more cycles than layer by layer (a minute and a half of compiling:
    `make regress`; `make bench` records the figures)."""
    from systolica.app.cnn_bench import network_record
    graph = models.resnet50()
    base = preset("base")
    chained = network_record(base, graph, "resnet50_224", "auto")
    assert chained["segments_chained"] >= 1
    assert chained["dram_ratio_to_min"] <= 1.25
    lbl = network_record(base, graph, "resnet50_224_lbl", "per_layer_tiling",
                         chain="layer_by_layer")
    assert chained["dram_bytes"] < lbl["dram_bytes"]
    assert chained["predicted_cycles"] <= lbl["predicted_cycles"]
    assert chained["mac_utilization"] >= lbl["mac_utilization"]
    # a chain's layers share its utilisation: the MAC-weighted figure is a run's
    assert 0 < chained["conv_mac_weighted_utilization"] <= 1


@pytest.mark.slow
def test_the_ubuf_a_network_takes_is_the_cost_models():
    """The UBUF size is the cost rule's for the whole program (net_chains.choose_ubuf):
    residual case 4 on tiny chains best with no UBUF at all (its bank goes to the
    chain's bands: a longer chain, baseline), so the program assumes UBUF_ROWS = 0.
    The choice is the program compiled for that size as given, and moves the fewest
    bytes by estimate of all the sizes weighed; what the user gives stands."""
    graph = cnn_cases.residual_chain_case(4)
    chosen, _, out = run(graph)
    np.testing.assert_array_equal(out[graph.outputs[0]],
                                  reference.outputs(graph)[graph.outputs[0]])
    # the program assumes no UBUF; the chip it was compiled for is the one given
    assert chosen.ubuf == (0, 0) and chosen.plan.cfg.ubuf_rows == 0 and chosen.cfg == CFG
    sizes = {0: (0, 0), 256: (CFG.ubuf_base, 256), 512: (CFG.cbuf_depth - 512, 512)}
    fixed = {rows: compile_network(CFG, graph, ubuf=at) for rows, at in sizes.items()}
    assert fixed[0].image == chosen.image and fixed[256].ubuf == (CFG.ubuf_base, 256)
    saved = {rows: sum(c.estimate[1] - c.layer_by_layer[1] for c in f.segments.values())
             for rows, f in fixed.items()}
    assert saved[0] == min(saved.values()) < saved[256]
    moved = {rows: f.dram_bytes_read + f.dram_bytes_written for rows, f in fixed.items()}
    assert moved[0] < moved[256]
    # a network with nothing to chain keeps the chip's UBUF
    assert compile_network(CFG, models.small_cnn()).ubuf == (CFG.ubuf_base, CFG.ubuf_rows)
    with pytest.raises(CompileError, match=r"ubuf \(0, 300\).*multiples of 256"):
        compile_network(CFG, graph, ubuf=(0, 300))

