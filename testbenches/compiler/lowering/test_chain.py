"""Chains of convolutions lowered in passes (compiler/lowering/chain.py), on the golden
model: seed 001's worked examples with the seed's own figures, random chains equal
to numpy and to the baseline bit for bit, the cost model's choices, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch.config import preset
from systolica.arch.loadable import Loadable
from systolica.compiler import compile_network
from systolica.compiler.errors import CompileError, InternalError
from systolica.compiler.graph import reference
from systolica.compiler.graph.graph import GraphBuilder
from systolica.compiler.lowering.chain import ChainChoice
from systolica.compiler.planning.chain_passes import listing
from systolica.models.chain_cases import (
    bank_split_pair,
    random_chain,
    seed_four_layer,
    seed_two_layer,
)

#: whole compiles of many networks: `make test`, not `make test-fast`
pytestmark = pytest.mark.slow

CFG = preset("tiny")
R = CFG.rows


def run(graph, choice: ChainChoice, cfg=CFG):
    compiled = compile_network(cfg, graph, chain=choice)
    gold = golden.run(cfg, Loadable.for_chip(cfg, compiled.image, compiled.dram,
                                             compiled.prog_addr))
    assert gold.error.name == "NONE" and gold.cycles == compiled.predicted_cycles
    assert (gold.ubuf_bytes_written, gold.ubuf_bytes_read) == \
        (compiled.ubuf_bytes_written, compiled.ubuf_bytes_read)
    return compiled, gold, compiled.results(gold.dram)[graph.outputs[0]]


def test_seed_two_layer_example_shows_the_seed_figures():
    """Seed 001: two passes; without the UBUF each is conv0(dram 13x16 -> 10x16),
    conv1(10x16 -> 8x16); with it pass 1 reads 9 input rows (30 % less) and conv0
    computes 6 rows (40 % fewer MACs), after pass 0 cropped 4 rows."""
    graph = seed_two_layer()
    want = reference.outputs(graph)[graph.outputs[0]]
    base, gb, out_b = run(graph, ChainChoice("baseline", 8))
    kept, gk, out_k = run(graph, ChainChoice("crop_fetch", 8))
    fused, gf, out_f = run(graph, ChainChoice("fused_crop", 8))
    np.testing.assert_array_equal(out_b, want)
    np.testing.assert_array_equal(out_k, want)
    np.testing.assert_array_equal(out_f, want)
    # the fused crop moves the same rows with no COPY CROP of its own
    assert (gf.dram_bytes_read, gf.macs, gf.ubuf_bytes_written, gf.ubuf_bytes_read) == \
        (gk.dram_bytes_read, gk.macs, gk.ubuf_bytes_written, gk.ubuf_bytes_read)
    crops = lambda c: sum(i.op.name == "COPY" and i.kind == 0 for i in c.program)  # noqa: E731
    assert crops(kept) == 1 and crops(fused) == 0
    assert sum(i.op.name == "VRUN" and i.fields.get("crop", 0) for i in fused.program) >= 1
    widths = [16, 16, 16]
    assert listing(base.chain.passes, ["conv0", "conv1"], widths).splitlines() == [
        "pass 0: conv0(dram 13x16 -> cbuf 10x16)", "pass 0: conv1(cbuf 10x16 -> dram 8x16)",
        "pass 1: conv0(dram 13x16 -> cbuf 10x16)", "pass 1: conv1(cbuf 10x16 -> dram 8x16)"]
    assert listing(kept.chain.passes, ["conv0", "conv1"], widths).splitlines() == [
        "pass 0: conv0(dram 13x16 -> cbuf 10x16), crop 4x16 -> ubuf",
        "pass 0: conv1(cbuf 10x16 -> dram 8x16)",
        "pass 1: conv0(dram 9x16 -> cbuf 6x16)",
        "pass 1: fetch+conv1(cbuf 6x16 + ubuf 4x16 -> dram 8x16)"]
    row = 16 * R                            # bytes of one map row (8 channels: one block)
    # the counters: pass 1 reads 13 - 9 = 4 input rows less; conv0 computes 4 rows less
    assert gb.dram_bytes_read - gk.dram_bytes_read == 4 * row
    assert gb.macs - gk.macs == 4 * 16 * 49 * CFG.macs
    assert gk.ubuf_bytes_written == gk.ubuf_bytes_read == 4 * row
    assert gb.ubuf_bytes_written == gb.ubuf_bytes_read == 0
    assert (13 - 9) / 13 == pytest.approx(0.3077, abs=1e-4)     # the seed's "30 %"
    assert gb.dram_bytes_written == gk.dram_bytes_written == 16 * 16 * R


def test_seed_four_layer_chain_in_three_passes():
    """The last layer, writing DRAM, never crops; the first two keep their halo."""
    graph = seed_four_layer()
    want = reference.outputs(graph)[graph.outputs[0]]
    kept, gk, out_k = run(graph, ChainChoice("crop_fetch", 8))
    base, gb, out_b = run(graph, ChainChoice("baseline", 8))
    _, gf, out_f = run(graph, ChainChoice("fused_crop", 8))
    np.testing.assert_array_equal(out_k, want)
    np.testing.assert_array_equal(out_b, want)
    np.testing.assert_array_equal(out_f, want)
    assert (gf.macs, gf.ubuf_bytes_written) == (gk.macs, gk.ubuf_bytes_written)
    passes = kept.chain.passes
    assert len(passes) == 3
    assert [[s.crop is not None for s in p] for p in passes] == [[True, True, False]] * 2 \
        + [[False, False, False]]
    # every row of every layer once: 24 rows x 3 layers
    assert gk.macs == 3 * 24 * 8 * 9 * CFG.macs
    # the baseline recomputes the halo: 2 boundaries x (2 + 4) rows of layers 0 and 1
    assert gb.macs - gk.macs == 2 * (2 + 4) * 8 * 9 * CFG.macs
    # rows kept: 2 per boundary and layer, each written once and read once
    assert gk.ubuf_bytes_written == gk.ubuf_bytes_read == 2 * 2 * 2 * 8 * R


def multi_pass(graph, Ho: int) -> int:
    """The fewest outputs per pass, from a third of the map up, whose halo the UBUF
    strategy can keep (a halo taller than a pass is refused, and said so)."""
    for per in range(max(1, Ho // 3), Ho):
        try:
            compile_network(CFG, graph, chain=ChainChoice("crop_fetch", per))
            return per
        except CompileError as e:
            assert "more outputs per pass" in str(e)
    return Ho


def test_a_layer_may_keep_its_halo_while_another_recomputes():
    """Per layer: the first layer keeps its output's halo, the second computes it
    again; every MAC count lies between the baseline's and the all-kept chain's."""
    graph = seed_four_layer()
    want = reference.outputs(graph)[graph.outputs[0]]
    runs = {keep: run(graph, ChainChoice("crop_fetch", 8, keep=keep))
            for keep in [(True, True, False), (True, False, False), (False, True, False)]}
    _, base, _ = run(graph, ChainChoice("baseline", 8))
    for keep, (compiled, _, out) in runs.items():
        np.testing.assert_array_equal(out, want, err_msg=str(keep))
        assert compiled.chain.choice.keep == keep
    both, first = runs[(True, True, False)][1], runs[(True, False, False)][1]
    assert both.macs < first.macs < base.macs
    # only the first layer's output goes through the UBUF: 4 rows per boundary, as
    # the second layer recomputes its own 2 halo rows from 2 more of them
    assert first.ubuf_bytes_written == 2 * 4 * 8 * R
    with pytest.raises(CompileError, match="keeps nothing in the UBUF"):
        ChainChoice("baseline", keep=(True, False, False))


def _crops_by_layer(compiled) -> dict[str, set[str]]:
    """Per layer, how its program crops into the UBUF: ``copy`` (COPY CROP),
    ``fused`` (VRUN crop = 1)."""
    names = list(compiled.chain.jobs)
    out: dict[str, set[str]] = {n: set() for n in names}
    for ins, layer in zip(compiled.program, compiled.layer_of):
        if ins.op.name == "COPY" and ins.fields["kind"] == 0:
            out[names[layer]].add("copy")
        elif ins.op.name == "VRUN" and ins.fields.get("crop"):
            out[names[layer]].add("fused")
    return out


def test_strategies_mix_per_layer():
    """Each layer's own strategy: its halo computed again, copied, or cropped as it is
    written. Every mix equals numpy; each layer crops the way it was told; a chain
    keeping every halo moves the same UBUF bytes and MACs whichever way each crops."""
    graph = seed_four_layer()
    want = reference.outputs(graph)[graph.outputs[0]]
    _, kept, _ = run(graph, ChainChoice("crop_fetch", 8))
    mixes = [("fused_crop", "crop_fetch", "baseline"), ("crop_fetch", "fused_crop", "fused_crop"),
             ("baseline", "fused_crop", "crop_fetch"), ("fused_crop", "baseline", "baseline")]
    for mix in mixes:
        compiled, gold, out = run(graph, ChainChoice(mix, 8))
        np.testing.assert_array_equal(out, want, err_msg=str(mix))
        assert compiled.chain.choice.keep == tuple(m != "baseline" for m in mix[:-1]) + (False,)
        assert compiled.chain.choice.name == "+".join(mix)
        crops = _crops_by_layer(compiled)
        for name, kind in zip(compiled.chain.jobs, mix[:-1]):
            assert crops[name] == {"baseline": set(), "crop_fetch": {"copy"},
                                   "fused_crop": {"fused"}}[kind], (mix, name)
        if "baseline" not in mix[:-1]:
            assert (gold.macs, gold.ubuf_bytes_written, gold.ubuf_bytes_read) == \
                (kept.macs, kept.ubuf_bytes_written, kept.ubuf_bytes_read)
    with pytest.raises(CompileError, match="2 entries for 3 layers"):
        compile_network(CFG, graph, chain=ChainChoice(("crop_fetch", "fused_crop"), 8))
    with pytest.raises(CompileError, match="disagrees with the per-layer strategy"):
        ChainChoice(("crop_fetch", "baseline", "baseline"), keep=(True, True, False))
    with pytest.raises(CompileError, match="not one of"):
        ChainChoice(("crop_fetch", "fused"))


@pytest.mark.parametrize("seed", range(10))
def test_random_chains_equal_numpy_and_the_baseline(seed):
    """Each strategy for the whole chain, and a random one per layer."""
    graph = random_chain(seed)
    want = reference.outputs(graph)[graph.outputs[0]]
    per = multi_pass(graph, want.shape[1])
    layers = len(graph.nodes)
    rng = np.random.default_rng(seed)
    mix = tuple(str(s) for s in rng.choice(["baseline", "crop_fetch", "fused_crop"], layers))
    outs = {}
    for strategy in ("baseline", "crop_fetch", "fused_crop", mix):
        compiled, _, outs[strategy] = run(graph, ChainChoice(strategy, per))
        assert len(compiled.chain.passes) >= 2
        np.testing.assert_array_equal(outs[strategy], want, err_msg=str(strategy))


def test_cost_model_takes_the_fewest_passes_and_persistent_weights_when_they_fit():
    kept = compile_network(CFG, seed_two_layer(), chain=ChainChoice()).chain.choice
    assert (kept.outputs_per_pass, kept.weights) == (16, "persistent")   # one pass fits
    big = compile_network(CFG, seed_two_layer(channels=12), chain=ChainChoice())
    assert big.chain.choice.weights == "stream"       # 7x7x12x12 weights leave no room
    forced = compile_network(CFG, seed_two_layer(), chain=ChainChoice(weights="stream",
                                                                      outputs_per_pass=4))
    assert (forced.chain.choice.weights, len(forced.chain.passes)) == ("stream", 4)


def test_chain_errors_name_the_layer_and_what_to_do():
    g = GraphBuilder("pooled")
    t = g.input(np.zeros((1, 8, 8, 8), np.int8))
    t = g.conv2d(t, np.ones((3, 3, 8, 8), np.int8), pads=1, name="c0")
    t = g.max_pool2d(t, 2, name="pool")
    with pytest.raises(CompileError, match="layer 'pool': a chain is made of convolutions"):
        compile_network(CFG, g.build(t), chain=ChainChoice())
    with pytest.raises(CompileError, match="has no UBUF"):
        compile_network(CFG.replace(ubuf_base=0, ubuf_rows=0), seed_two_layer(),
                        chain=ChainChoice("crop_fetch", 8))
    with pytest.raises(CompileError, match=r"layer 'conv1': pass \d+ needs halo rows .* "
                                           r"more outputs per pass"):
        compile_network(CFG, seed_two_layer(), chain=ChainChoice("crop_fetch", 1))
    with pytest.raises(CompileError, match="weights of layer 'conv1'.*short by 6400 bytes"):
        compile_network(CFG, seed_two_layer(channels=12),
                        chain=ChainChoice("crop_fetch", 8, "persistent"))
    with pytest.raises(CompileError, match="chain strategy 'fused' is not one of"):
        ChainChoice("fused")
    with pytest.raises(CompileError, match="has no UBUF"):
        compile_network(CFG.replace(ubuf_base=0, ubuf_rows=0), seed_two_layer(),
                        chain=ChainChoice("fused_crop", 8))


# -- the CBUF's banks shared in time, and split per layer --------------------------------

def test_sharing_banks_in_time_takes_fewer_passes():
    """Layer 0's input band lives in layer 0, the output staging in layer 1: they may
    take the same banks, so the whole map fits in one pass; kept apart for the whole
    chain, the bands need four passes (and more DRAM traffic). Both bit for bit."""
    graph = bank_split_pair()
    want = reference.outputs(graph)[graph.outputs[0]]
    shared, gs, out_s = run(graph, ChainChoice("crop_fetch"))
    apart, ga, out_a = run(graph, ChainChoice("crop_fetch", share=False))
    np.testing.assert_array_equal(out_s, want)
    np.testing.assert_array_equal(out_a, want)
    assert (len(shared.chain.passes), len(apart.chain.passes)) == (1, 4)
    assert gs.dram_bytes_read + gs.dram_bytes_written < ga.dram_bytes_read + ga.dram_bytes_written
    # some rows hold two regions of disjoint lifetimes, and the plan checker accepts it
    cbuf = [r for r in shared.plan.regions if r.memory == "cbuf"]
    assert any(a.lo < b.hi and b.lo < a.hi and not a.overlaps(b)
               for i, a in enumerate(cbuf) for b in cbuf[i + 1:])
    assert not any(a.lo < b.hi and b.lo < a.hi
                   for i, a in enumerate(r for r in apart.plan.regions if r.memory == "cbuf")
                   for b in [r for r in apart.plan.regions if r.memory == "cbuf"][i + 1:])


def test_plan_checker_refuses_regions_live_together_on_the_same_rows():
    from dataclasses import replace

    from systolica.compiler.planning.memory import check_plan
    compiled = compile_network(CFG, bank_split_pair(), chain=ChainChoice("crop_fetch"))
    plan = compiled.plan
    check_plan(plan)
    regions = {r.key: r for r in plan.regions}
    # conv1's input band lives in both layers: on conv0's band's rows it overlaps
    moved = replace(regions["conv1.input"], lo=regions["conv0.input"].lo)
    bad = replace(plan, regions=tuple(moved if r.key == "conv1.input" else r
                                      for r in plan.regions))
    with pytest.raises(InternalError, match="'conv0.input' and 'conv1.input' overlap|"
                                           "'conv1.input' and 'conv0.input' overlap"):
        check_plan(bad)


def test_bank_split_per_layer_goes_the_seeds_way():
    """Seed 001's "10 weight banks + 2 feature banks for one layer, 2 + 10 for the
    next", on tiny's 8 banks: layer 0 reads a 32-channel map with small weights,
    layer 1 an 8-channel map with 3x3x8x128 weights. Loading each layer's weights at
    its turn in every pass (``pass``), its banks hold the other layer's rows the rest
    of the time: 2 weight banks + 5 feature banks, then 5 + 2; the least DRAM traffic
    of all, and only with banks shared in time. The cost model, putting cycles first,
    streams layer 1's weights instead; its split goes the same ways."""
    graph = bank_split_pair()
    want = reference.outputs(graph)[graph.outputs[0]]
    mine, gm, out = run(graph, ChainChoice("crop_fetch", weights=("pass", "pass")))
    np.testing.assert_array_equal(out, want)
    split = [(b["weights"], b["features"], b["ubuf"]) for b in mine.chain.banks]
    assert split == [(2, 5, 1), (5, 2, 1)]
    assert mine.chain.bank_listing().splitlines() == [
        "conv0: weights pass; banks: weights 2, features 5, ubuf 1, free 0",
        "conv1: weights pass; banks: weights 5, features 2, ubuf 1, free 0"]
    auto, ga, _ = run(graph, ChainChoice("crop_fetch"))
    assert auto.chain.choice.weights == ("persistent", "stream")
    assert gm.dram_bytes_read < ga.dram_bytes_read
    (w0, f0), (w1, f1) = [(b["weights"], b["features"]) for b in auto.chain.banks]
    assert w0 < f0 and w1 > f1
    with pytest.raises(CompileError, match=r"short by \d+ bytes"):
        compile_network(CFG, graph, chain=ChainChoice("crop_fetch", weights=("pass", "pass"),
                                                      share=False))


def test_weights_per_layer_and_sharing_are_the_users_to_choose():
    with pytest.raises(CompileError, match="2 entries for 3 layers"):
        compile_network(CFG, seed_four_layer(), chain=ChainChoice(weights=("pass", "stream")))
    with pytest.raises(CompileError, match="is not one of persistent, pass, stream"):
        ChainChoice(weights=("pass", "kept"))
    with pytest.raises(CompileError, match="share must be True or False"):
        ChainChoice(share=1)
    forced = compile_network(CFG, seed_four_layer(), chain=ChainChoice(
        "crop_fetch", 8, weights=("stream", "pass", "persistent")))
    assert forced.chain.choice.weights == ("stream", "pass", "persistent")


def test_a_chain_that_cannot_fit_with_one_row_per_pass_names_the_layer_and_bytes():
    g = GraphBuilder("wide")
    t = g.input(np.zeros((1, 6, 120, 64), np.int8))
    t = g.conv2d(t, np.ones((3, 3, 64, 8), np.int8), pads=1, name="c0")
    t = g.conv2d(t, np.ones((3, 3, 8, 8), np.int8), pads=1, name="c1")
    with pytest.raises(CompileError, match=r"input rows of layer 'c0': .* short by 30208 "
                                           r"bytes.*even with one output row per pass"):
        compile_network(CFG, g.build(t), chain=ChainChoice("baseline"))
    # keeping the halo takes two rows a pass at least (a 3x3 window's halo is two)
    with pytest.raises(CompileError, match=r"input rows of layer 'c0': .* short by 22528 "
                                           r"bytes.*even with 2 output rows per pass"):
        compile_network(CFG, g.build(t), chain=ChainChoice("crop_fetch"))
