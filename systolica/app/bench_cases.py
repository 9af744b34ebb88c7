"""What ``make bench`` runs on the RTL: one table of cases, each a name, a chip, a
network factory, a harness and the compile options. The bench reads it, and so does
the test that holds every bench program byte for byte (``program_census``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class BenchCase:
    name: str
    config: str
    make: Callable[[], object]        # -> Graph or Network
    harness: str = "cocotb"
    options: dict = field(default_factory=dict)   # compile_network's keywords


def gemm_network(M: int, K: int, N: int, seed: int, int32: bool = False):
    """A random int8 GEMM ``M x K x N`` with a calibrated requantisation (int32 out
    with `int32`)."""
    from systolica.app.demo import calibrate
    from systolica.compiler import gemm
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, size=(M, K), dtype=np.int8)
    b = rng.integers(-128, 128, size=(K, N), dtype=np.int8)
    bias = rng.integers(-5000, 5000, size=N, dtype=np.int32)
    name = f"gemm_{M}x{K}x{N}"
    if int32:
        return gemm(a, b, bias, out_dtype="int32", name=name)
    mult, shift = calibrate(a, b, bias)
    return gemm(a, b, bias, mult=mult, shift=shift, name=name)


def onnx_inception():
    from systolica.compiler.frontend import onnx_import
    from systolica.models import onnx_zoo as onnx_models
    return onnx_import.load(onnx_models.inception(), name="onnx_inception")


def onnx_qdq_resnet():
    from systolica.compiler.frontend import onnx_import
    from systolica.models import onnx_zoo as onnx_models
    return onnx_import.load(onnx_models.qdq_resnet(), name="onnx_qdq_resnet")


def onnx_ort_quantized():
    from systolica.compiler.frontend import onnx_import
    from systolica.models import onnx_zoo as onnx_models
    model = onnx_models.ort_quantized(onnx_models.float_cnn(), per_channel=True)
    return onnx_import.load(model, name="onnx_ort_quantized")


def onnx_ort_resnet():
    from systolica.compiler.frontend import onnx_import
    from systolica.models import onnx_zoo as onnx_models
    model = onnx_models.ort_quantized(onnx_models.float_resnet(), per_channel=True)
    return onnx_import.load(model, name="onnx_ort_resnet")


def onnx_ort_mobilenet():
    from systolica.compiler.frontend import onnx_import
    from systolica.models import onnx_zoo as onnx_models
    model = onnx_models.ort_quantized(onnx_models.float_mobilenet(), per_channel=True)
    return onnx_import.load(model, name="onnx_ort_mobilenet")


def _split(split) -> dict:
    return {"split": split}


def cases() -> list[BenchCase]:
    """Every RTL case of the bench, in the order it runs them."""
    from systolica.app import cnn_bench, demo
    from systolica.models import zoo as models

    def gemm256(harness):
        return BenchCase("gemm_256x256x256", "base", lambda: gemm_network(256, 256, 256, 1),
                         harness)

    def whole(name, split):
        return f"{name}{'' if split is None else '_whole'}"

    return [
        # Each case as cocotb drives it (as the tests do), then the long GEMM again with
        # the plain C++ harness: the simulation speed of both, on the same Verilog.
        gemm256("cocotb"),
        BenchCase("gemm_64x64x64", "base", lambda: gemm_network(64, 64, 64, 2)),
        BenchCase("demo_mlp", "tiny", demo.mlp),
        BenchCase("demo_cnn", "tiny", demo.cnn),
        # the same CNN on the tall and wide grids of tiny's tiles (its 10-class head
        # is wider than min(R, C): sub-blocks on the tall grid, slices on the wide)
        *[BenchCase("demo_cnn", cfg_name, demo.cnn) for cfg_name in ("tiny_tall", "tiny_wide")],
        # and on a 2x3 grid, whose sides do not divide (N-blocks in pieces)
        BenchCase("demo_cnn", "tiny_2x3", demo.cnn),
        *[BenchCase(layer[0], "base", lambda layer=layer: cnn_bench.conv_layer(*layer))
          for layer in cnn_bench.RTL_LAYERS],
        gemm256("cxx"),
        # small K and N: the whole array, then the cost model's split (K = 4 and 8 fit
        # one of base's two diagonal tile groups, 12 does not)
        *[BenchCase(whole(f"gemm_2048x{k}x8", split), "base",
                    lambda k=k: gemm_network(2048, k, 8, 3), options=_split(split))
          for k in (4, 8, 12) for split in (1, None)],
        # groups smaller than a tile: K = N = 4 in four groups of 4x4 cells on base,
        # K = 4 and N = 2 in four of a tile row and two columns on tiny_tall
        *[BenchCase(whole(f"gemm_2048x4x{n}", split), cfg_name,
                    lambda n=n: gemm_network(2048, 4, n, 3), options=_split(split))
          for cfg_name, n in (("base", 4), ("tiny_tall", 2)) for split in (1, None)],
        # the split on eight tile rows (tiny_8x8: 8x8 one-cell tiles, its SETCFGs in
        # two pages): K = N = 1 in eight tile groups, K = N = 2 in four
        *[BenchCase(whole(f"gemm_2048x{k}x{k}", split), "tiny_8x8",
                    lambda k=k: gemm_network(2048, k, k, 3), options=_split(split))
          for k in (1, 2) for split in (1, None)],
        # the split where the grid's sides do not divide (tiny_2x3: two groups of one
        # tile, the third tile column in none)
        *[BenchCase(whole("gemm_2048x4x4", split), "tiny_2x3",
                    lambda: gemm_network(2048, 4, 4, 3), options=_split(split))
          for split in (1, None)],
        # the seed's 16x16 tile grid (one-cell tiles, 848 multiplexers set by SETCFGW):
        # K = N = 1 in sixteen groups, K = N = 5 in three of five tiles
        *[BenchCase(whole(f"gemm_2048x{k}x{k}", split), "tiny_16x16",
                    lambda k=k: gemm_network(2048, k, k, 3), options=_split(split))
          for k in (1, 5) for split in (1, None)],
        # a chain of narrow dense layers inside a network, split as one
        *[BenchCase(whole("mlp_500x4x8x8x4", split), "base",
                    lambda: demo.mlp(batch=500, widths=(4, 8, 8, 4), name="mlp_500x4x8x8x4"),
                    options=_split(split)) for split in (1, None)],
        # the same on a wide grid, each inner layer's outputs packed into one row
        *[BenchCase(whole("mlp_300x4x4x3x7", split), "tiny_wide",
                    lambda: demo.mlp(batch=300, widths=(4, 4, 3, 7), seed=4,
                                     name="mlp_300x4x4x3x7"), options=_split(split))
          for split in (1, None)],
        # one GEMM on the square, tall and wide grids of tiny's tiles
        *[BenchCase("gemm_256x128x32", cfg_name, lambda: gemm_network(256, 128, 32, 4))
          for cfg_name in ("tiny", "tiny_tall", "tiny_wide", "tiny_2x3")],
        # three dense branches joined by a Concat through the general lanes, and their
        # twin whose last layer reads the branches as separate tensors
        *[BenchCase(f"concat_120x4x4x4{'' if joined else '_separate'}", cfg_name,
                    lambda joined=joined: models.branches(120, (4, 4, 4), 6, joined=joined,
                                                          name="concat_120x4x4x4"))
          for cfg_name in ("tiny", "tiny_tall", "tiny_wide") for joined in (True, False)],
        # an inception block: four branches joined by a Concat of maps (a layout: the
        # producers store into the join's blocks), read by a 1x1 convolution
        BenchCase("inception_block", "tiny",
                  lambda: models.inception_block(size=8, cin=16, widths=(8, 16, 8, 5))),
        # its branches of 5, 6, 3 and 7 channels: each but the last padded to a block
        # of 8 (zero channels from its convolution, zero weight rows after)
        BenchCase("inception_ragged", "tiny",
                  lambda: models.inception_block(size=8, cin=16, widths=(5, 6, 3, 7))),
        # MobileNetV2's block: a depthwise 3x3 convolution between two 1x1s
        BenchCase("inverted_residual", "tiny", lambda: models.inverted_residual_block(size=8)),
        # an ONNX model in the QOperator form, imported (compared with onnxruntime)
        BenchCase("onnx_inception", "tiny", onnx_inception),
        # a residual network in the QDQ form (Adds, a global pool, a Gemm)
        BenchCase("onnx_qdq_resnet", "tiny", onnx_qdq_resnet),
        # a float network quantised by onnxruntime's quantize_static (QDQ, weights per
        # channel): its Concat requantises a branch, its Gemm a 1x1 convolution
        BenchCase("onnx_ort_quantized", "tiny", onnx_ort_quantized),
        # a residual network of three basic blocks, quantised so, on base
        BenchCase("onnx_ort_resnet", "base", onnx_ort_resnet),
        # MobileNetV2's blocks quantised so: depthwise convolutions from ONNX
        BenchCase("onnx_ort_mobilenet", "tiny", onnx_ort_mobilenet),
    ]
