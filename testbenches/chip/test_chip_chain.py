"""Chains of convolutions in passes on the Verilated tiny chip, with and without the
UBUF: seed 001's two worked examples and random chains. Outputs equal numpy and the
golden model bit for bit, cycles and counters (the UBUF's too) equal the prediction,
and the seed's figures come from the RTL's own counters."""

from __future__ import annotations

import pytest

from systolica.arch.config import preset
from systolica.compiler.lowering.chain import ChainChoice
from systolica.models.chain_cases import (
    bank_split_pair,
    random_chain,
    seed_four_layer,
    seed_two_layer,
)

from chip_runs import (
    assert_matches_prediction,
    assert_outputs_match,
    case_table,
    compile_and_run_on_rtl,
)

pytestmark = pytest.mark.rtl

CFG = preset("tiny")
R = CFG.rows

CASES = {
    "seed_two_baseline": (seed_two_layer, ChainChoice("baseline", 8)),
    "seed_two_ubuf": (seed_two_layer, ChainChoice("crop_fetch", 8)),
    "seed_four_baseline": (seed_four_layer, ChainChoice("baseline", 8)),
    "seed_four_ubuf": (seed_four_layer, ChainChoice("crop_fetch", 8)),
    "seed_two_fused": (seed_two_layer, ChainChoice("fused_crop", 8)),
    "seed_four_keep_first": (seed_four_layer,
                             ChainChoice("fused_crop", 8, keep=(True, False, False))),
    "seed_four_fused": (seed_four_layer, ChainChoice("fused_crop", 8)),
    "random3_fused": (lambda: random_chain(3), ChainChoice("fused_crop", 8)),
    # a strategy per layer: copied and fused crops in one UBUF, one layer recomputing
    "seed_four_mixed": (seed_four_layer,
                        ChainChoice(("fused_crop", "crop_fetch", "baseline"), 8)),
    "seed_four_mixed_recompute_first": (
        seed_four_layer, ChainChoice(("baseline", "fused_crop", "baseline"), 8)),
    "seed_two_ubuf_streamed_weights": (lambda: seed_two_layer(channels=12, seed=1),
                                       ChainChoice("crop_fetch", 8)),
    "random3_ubuf": (lambda: random_chain(3), ChainChoice("crop_fetch", 8)),
    "random7_ubuf": (lambda: random_chain(7), ChainChoice("crop_fetch", 8)),
    # each layer's weights loaded at its turn in every pass, on banks the other
    # layer's rows take the rest of the time (2 + 4 banks, then 5 + 2)
    "bank_split_pass_weights": (bank_split_pair,
                                ChainChoice("crop_fetch", 8, weights=("pass", "pass"))),
}


def _chained(case, compiled):
    assert len(compiled.chain.passes) >= 2
    if case == "bank_split_pass_weights":         # banks shared in time: no fit without
        cbuf = [r for r in compiled.plan.regions if r.memory == "cbuf"]
        assert any(a.lo < b.hi and b.lo < a.hi for i, a in enumerate(cbuf)
                   for b in cbuf[i + 1:])


runs, test_outputs_match_numpy_and_golden, test_cycles_and_counters_match_prediction = \
    case_table(CFG, CASES, also=_chained)


def test_seed_two_layer_figures_from_the_rtl_counters(runs):
    """Pass 1 reads 9 input rows instead of 13 (30 % less) and conv0 computes 6 rows
    instead of 10 (40 % fewer MACs); 4 rows of 16 pixels go through the UBUF."""
    (_, base), (_, kept) = runs["seed_two_baseline"], runs["seed_two_ubuf"]
    fused = runs["seed_two_fused"][1]
    row = 16 * R                        # one map row: 16 pixels of 8 channels
    for name in ("dram_rd_bytes", "macs", "ubuf_wr_bytes", "ubuf_rd_bytes"):
        assert getattr(fused, name) == getattr(kept, name), name   # the same rows, no COPY CROP
    assert base.dram_rd_bytes - kept.dram_rd_bytes == (13 - 9) * row
    assert base.macs - kept.macs == (10 - 6) * 16 * 7 * 7 * CFG.macs
    assert (kept.ubuf_wr_bytes, kept.ubuf_rd_bytes) == (4 * row, 4 * row)
    assert (base.ubuf_wr_bytes, base.ubuf_rd_bytes) == (0, 0)
    assert base.dram_wr_bytes == kept.dram_wr_bytes == 16 * row


def test_seed_four_layer_figures_from_the_rtl_counters(runs):
    """Three passes: every row of the three layers computed once with the UBUF; the
    baseline recomputes each boundary's halo (2 rows of layer 1, 4 of layer 0)."""
    (_, base), (_, kept) = runs["seed_four_baseline"], runs["seed_four_ubuf"]
    assert kept.macs == 3 * 24 * 8 * 9 * CFG.macs
    assert base.macs - kept.macs == 2 * (2 + 4) * 8 * 9 * CFG.macs
    assert kept.ubuf_wr_bytes == kept.ubuf_rd_bytes == 2 * 2 * 2 * 8 * R
    # the first layer re-reads 2 input rows per boundary instead of 6
    assert base.dram_rd_bytes - kept.dram_rd_bytes == 2 * (6 - 2) * 8 * R


#: The variant of seed 001 with the UBUF in its own SRAM: banks after the CBUF's
#: rows, reached by crops and fetches only.
OWN = CFG.replace(name="tiny-ubuf-sram", ubuf_base=CFG.cbuf_depth, ubuf_rows=256,
                  ubuf_own_sram=True)
OWN_CASES = {"seed_two_ubuf": (seed_two_layer, ChainChoice("crop_fetch", 8)),
             "seed_four_fused": (seed_four_layer, ChainChoice("fused_crop", 8))}


@pytest.fixture(scope="module")
def own_runs():
    return compile_and_run_on_rtl(OWN, OWN_CASES)


@pytest.mark.parametrize("case", list(OWN_CASES))
def test_ubuf_in_its_own_sram(own_runs, runs, case):
    """The same outputs, cycles and counters with the UBUF in SRAM of its own, and
    the same as with it inside the CBUF."""
    compiled, res = own_runs[case]
    assert_outputs_match(OWN, compiled, res)
    assert_matches_prediction(OWN, compiled, res)
    inside = runs[case][1]
    for name in ("dram_rd_bytes", "macs", "ubuf_wr_bytes", "ubuf_rd_bytes"):
        assert getattr(res, name) == getattr(inside, name), name
