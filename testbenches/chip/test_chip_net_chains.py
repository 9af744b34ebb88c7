"""Chains inside whole networks on the Verilated tiny chip (docs/cnn.md, "Chains in
networks"): residual networks whose runs of convolutions run as chains in passes,
with each strategy, a stride-2 3x3 inside the chain, and the cost model's choice.
Outputs equal numpy and the golden model bit for bit; cycles and counters (the
UBUF's too) equal the prediction."""

from __future__ import annotations

import pytest

from systolica.arch.config import preset
from systolica.compiler.lowering.chain import ChainChoice
from systolica.models import cnn_cases
from systolica.models import zoo as models

from chip_runs import case_table

pytestmark = pytest.mark.rtl

CFG = preset("tiny")


def bottleneck(stride=1):
    return models.bottleneck_block(size=16, cin=16 * stride, width=8 * stride,
                                   stride=stride)


CASES = {
    **{f"bottleneck_{s}": (bottleneck, dict(chain=s, segments={"block_conv1": 3}))
       for s in ("baseline", "crop_fetch", "fused_crop")},
    "bottleneck_fused_4_passes": (bottleneck, dict(segments={
        "block_conv1": ChainChoice("fused_crop", 4)})),
    # the chain's 3x3 has stride 2 (the shortcut a strided 1x1 projection)
    "bottleneck_stride2_crop_fetch": (lambda: bottleneck(2),
                                      dict(chain="crop_fetch", segments="all")),
    "bottleneck_stride2_fused": (lambda: bottleneck(2),
                                 dict(chain="fused_crop", segments="all")),
    "bottleneck_cost_model": (bottleneck, {}),
    "small_cnn_fused": (models.small_cnn, dict(chain="fused_crop", segments="all")),
    "residual1_fused": (lambda: cnn_cases.residual_chain_case(1, stride2=True),
                        dict(chain="fused_crop", segments="all")),
    "residual4_crop_fetch": (lambda: cnn_cases.residual_chain_case(4),
                             dict(chain="crop_fetch", segments="all")),
    # the cost model gives this program no UBUF (its bank to the chain's bands): the
    # driver writes UBUF_ROWS = 0 before the run
    "residual4_cost_model": (lambda: cnn_cases.residual_chain_case(4), {}),
}


def _segmented(case, compiled):
    assert compiled.segments, "nothing chained"


runs, test_outputs_match_numpy_and_golden, test_cycles_and_counters_match_prediction = \
    case_table(CFG, CASES, also=_segmented)


def test_the_ubuf_counters_show_the_kept_halos(runs):
    """The UBUF strategies write and read the same halo rows, the fused crop with no
    COPY of its own; the baseline none, and it computes more."""
    base = runs["bottleneck_baseline"][1]
    kept = runs["bottleneck_crop_fetch"][1]
    fused = runs["bottleneck_fused_crop"][1]
    passes = len(runs["bottleneck_crop_fetch"][0].segments["block_conv1"].passes)
    if passes > 1:
        assert kept.ubuf_wr_bytes == kept.ubuf_rd_bytes > 0
        assert fused.ubuf_wr_bytes == kept.ubuf_wr_bytes
    assert base.ubuf_wr_bytes == base.ubuf_rd_bytes == 0
    four = runs["bottleneck_fused_4_passes"]
    assert len(four[0].segments["block_conv1"].passes) == 4
    assert four[1].ubuf_wr_bytes == four[1].ubuf_rd_bytes > 0


def test_the_program_runs_with_the_ubuf_it_was_compiled_for(runs):
    compiled, res = runs["residual4_cost_model"]
    assert compiled.ubuf == (0, 0) and res.error_name == "NONE"

