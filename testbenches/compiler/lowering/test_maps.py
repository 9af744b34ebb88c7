"""The streaming CNN lowering against the numpy reference through the golden model
(pure Python, many more shapes than the RTL run): random convolutions, pools and
adds on tiny and base, and the DRAM traffic of a tiled layer (input read once, plus
only halo rows; no im2col copy)."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch.config import preset
from systolica.arch.loadable import Loadable
from systolica.compiler import compile_network
from systolica.compiler.graph import reference
from systolica.models import cnn_cases

from tiers import sample

CASES = [(kind, seed) for kind in ("conv", "pool", "add") for seed in range(100, 124)] \
    + [("flatten", seed) for seed in range(4)]


def _golden_outputs(cfg, graph):
    compiled = compile_network(cfg, graph)
    result = golden.run(cfg, Loadable.for_chip(cfg, compiled.image, compiled.dram))
    assert result.cycles == compiled.predicted_cycles
    return compiled, compiled.results(result.dram)


@pytest.mark.parametrize("kind, seed", sample(CASES, 6), ids=[f"{k}{s}" for k, s in CASES])
@pytest.mark.parametrize("chip", ["tiny", "base"])
def test_random_layers_match_numpy(chip, kind, seed):
    graph = getattr(cnn_cases, f"{kind}_case")(seed)
    _, got = _golden_outputs(preset(chip), graph)
    want = reference.outputs(graph)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_tiled_layer_reads_its_input_once_plus_halos():
    cfg = preset("tiny")
    graph = cnn_cases.large_conv_case(1)
    compiled = compile_network(cfg, graph)
    x = graph.tensor(graph.inputs[0])
    N, H, W, C = x.shape
    layer = graph.nodes[0].op
    KH, KW, Cin, Cout = layer.weights.shape
    R = cfg.rows
    input_words = H * W * -(-C // R)
    weight_words = KH * KW * -(-Cin // R) * -(-Cout // R) * R
    out = graph.tensor(graph.outputs[0]).shape
    output_words = out[1] * out[2] * -(-Cout // R)
    tiles = -(-out[1] // (cfg.acc_depth // 2 // out[2]))
    halo_rows = (tiles - 1) * (KH - 1) * layer.dilation[0]
    # input once plus the halos, the weights once per tile, the epilogue rows
    read_words = compiled.dram_bytes_read // cfg.rows
    assert read_words <= input_words + halo_rows * W * -(-C // R) + tiles * weight_words \
        + tiles * -(-Cout // R) * 4 * cfg.acc_row_words
    assert compiled.dram_bytes_written // cfg.rows == output_words


@pytest.mark.parametrize("chip", ["tiny", "base", "tiny_tall", "tiny_wide"])
@pytest.mark.parametrize("cin, cout, size, pads", [(1, 2, 3, 1), (3, 5, 6, 1), (9, 10, 5, 0)])
def test_an_int32_convolution_leaves_its_accumulator(chip, cin, cout, size, pads):
    """A convolution with an int32 output (ONNX's ConvInteger): the bias with the input
    zero point folded in, added in place, its accumulator rows stored, NHWC or read by
    a transpose to NCHW."""
    from systolica.compiler.graph.graph import GraphBuilder
    rng = np.random.default_rng(cin * cout)
    g = GraphBuilder("conv32")
    x = g.input(rng.integers(-128, 128, (1, cin, size, size), dtype=np.int8), name="x",
                zero_point=-7, layout="NCHW")
    y = g.conv2d(x, rng.integers(-128, 128, (2, 2, cin, cout), dtype=np.int8),
                 rng.integers(-1000, 1000, cout).astype(np.int32), pads=pads,
                 out_dtype="int32", name="c32")
    graph = g.build(y, g.nchw(y))
    _, got = _golden_outputs(preset(chip), graph)
    want = reference.outputs(graph)
    assert set(got) == {"c32", "c32_nchw"}
    for name in want:
        assert got[name].dtype == np.int32
        np.testing.assert_array_equal(got[name], want[name])
