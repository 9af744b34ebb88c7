"""Convolutional layers on the Verilated tiny chip: random convolutions (kernels,
strides, asymmetric pads, dilations, 1- and few-channel inputs packed by taps, zero
points, per-channel requantisation, ReLU/ReLU6), pools, residual adds, an input
larger than the CBUF, an inception block (a Concat of maps), MobileNetV2's inverted
residual block (a depthwise convolution) and the small demo CNN;
residual networks tiled every way (docs/cnn.md, "Weights and tile buffers per layer":
weights kept in the CBUF across a
layer's tiles or streamed, two tile buffers or one). Outputs equal the numpy reference
and the golden model bit for bit; cycles and counters equal the prediction."""

from __future__ import annotations

import pytest

from systolica.arch.config import preset
from systolica.models import cnn_cases
from systolica.models import zoo as models

from chip_runs import case_table

pytestmark = pytest.mark.rtl

CFG = preset("tiny")

CASES = {
    **{f"conv{s}": (lambda s=s: cnn_cases.conv_case(s)) for s in (0, 1, 2, 3, 4, 5, 6, 7)},
    "conv_1ch": lambda: cnn_cases.conv_case(50, channels=1),
    "conv_3ch_7x7": lambda: cnn_cases.conv_case(51, channels=3, kernel=(7, 7)),
    **{f"pool{s}": (lambda s=s: cnn_cases.pool_case(s)) for s in (0, 1, 2, 3, 4)},
    **{f"add{s}": (lambda s=s: cnn_cases.add_case(s)) for s in (0, 1, 2)},
    "larger_than_cbuf": lambda: cnn_cases.large_conv_case(1),
    "flatten_of_a_map": lambda: cnn_cases.flatten_case(0),
    "small_cnn": lambda: models.small_cnn(),
    # a residual block whose layers run in several tiles: weights kept vs streamed,
    # one tile buffer vs two
    "small_cnn32_kept_weights": (lambda: models.small_cnn(size=32),
                                 dict(weights="persistent", buffers=2)),
    "small_cnn32_streamed_weights": (lambda: models.small_cnn(size=32),
                                     dict(weights="stream", buffers=2)),
    "small_cnn32_one_buffer": (lambda: models.small_cnn(size=32),
                               dict(weights="persistent", buffers=1)),
    "bottleneck_kept_weights": (lambda: models.bottleneck_block(size=16, cin=16, width=8),
                                dict(weights="persistent")),
    "bottleneck_stride2_one_buffer": (lambda: models.bottleneck_block(
        size=16, cin=32, width=16, stride=2), dict(weights="stream", buffers=1)),
    # four branches joined along their channels (a layout: no instruction), read by a
    # 1x1 convolution; the last branch's block ragged
    "inception_block": lambda: models.inception_block(size=8, cin=16, widths=(8, 16, 8, 5)),
    # branches of 5, 6 and 3 channels: each padded to a block of 8 (docs/cnn.md)
    "inception_ragged": lambda: models.inception_block(size=6, cin=8, widths=(5, 6, 3, 7)),
    # MobileNetV2's block: a depthwise 3x3 convolution (a diagonal weight block per tap
    # and channel block) between two 1x1s, with the residual Add, and strided
    "inverted_residual": lambda: models.inverted_residual_block(size=6),
    "inverted_residual_stride2": lambda: models.inverted_residual_block(
        size=8, cin=6, expand=3, cout=12, stride=2),
    "conv_two_buffers": (lambda: cnn_cases.large_conv_case(1),
                         dict(weights="stream", buffers=2)),
    "conv_one_buffer": (lambda: cnn_cases.large_conv_case(1),
                        dict(weights="stream", buffers=1)),
}


runs, test_outputs_match_numpy_and_golden, test_cycles_and_counters_match_prediction = \
    case_table(CFG, CASES)


def test_kept_weights_read_fewer_bytes_on_the_chip(runs):
    """The RTL's DRAM counters: keeping every layer's weights reads fewer bytes than
    reloading them in every tile, and writes the same."""
    kept, kept_res = runs["small_cnn32_kept_weights"]
    streamed, streamed_res = runs["small_cnn32_streamed_weights"]
    assert set(kept.weights.values()) == {"persistent"}
    assert set(streamed.weights.values()) == {"stream"}
    assert kept_res.dram_rd_bytes < streamed_res.dram_rd_bytes
    assert kept_res.dram_wr_bytes == streamed_res.dram_wr_bytes


def test_one_buffer_reloads_fewer_weights_on_the_chip(runs):
    """One tile buffer cuts the large convolution into fewer tiles: the chip reads
    fewer bytes (fewer weight reloads) and writes the same."""
    two, two_res = runs["conv_two_buffers"]
    one, one_res = runs["conv_one_buffer"]
    assert set(two.buffers.values()) == {2} and set(one.buffers.values()) == {1}
    assert one_res.dram_rd_bytes < two_res.dram_rd_bytes
    assert one_res.dram_wr_bytes == two_res.dram_wr_bytes
