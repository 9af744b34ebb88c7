"""Layers mapped by the matcher (docs/matching.md) on the Verilated tiny chip: eight of
DeepBench's inference-server convolutions scaled to fit (``deepbench.scaled``: their
kernels, strides and pads kept), three of them also with the ``static`` mapping, and
the layer kinds no hand rule served, each in both modes: grouped convolutions
(ShuffleNet's groups of 2 and 3, ResNeXt's 4 channels per group, 32 and 64 groups), a
1-D convolution imported from ONNX, a batched matrix product imported from ONNX (a
matmul per batch entry, each with its own right operand: a grouped 1x1 convolution over
a map of height 1, one group per batch entry) and DeepSpeech's 5x20 kernel over one channel. Outputs
equal the numpy reference and the golden model bit for bit; cycles and counters equal
the prediction; on the chip the matcher's mapping is never slower than the static
one."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from systolica.app import deepbench
from systolica.arch.config import preset

from chip_runs import case_table

pytestmark = pytest.mark.rtl

CFG = preset("tiny")


def _deepbench(index: int):
    """DeepBench's layer `index` (its place in ``DEEPBENCH_BATCH1``) scaled to tiny."""
    return deepbench.scaled(deepbench.layers()[index], CFG)


def _db(index: int):
    return lambda: deepbench.graph(_deepbench(index))


#: The DeepBench layers, by their index in the table, and what each covers.
DEEPBENCH = {
    "cin1_3x3": 2,                # 480x48x1 -> 16, 3x3
    "cin1_5x20_s2": 0,            # DeepSpeech's first: 700x161x1 -> 32, 5x20 stride 2
    "cin3_3x3_s2": 6,             # 108x108x3 -> 64, 3x3 stride 2
    "cin3_7x7_s2": 17,            # ResNet's stem: 224x224x3 -> 64, 7x7 stride 2
    "5x5_many_channels": 35,      # DeepSpeech's 350x80x64 -> 128, 5x5 stride 2
    "1x1_s2": 25,                 # ResNet's 56x56x64 -> 256, 1x1 stride 2
    "10x5_s2": 1,                 # DeepSpeech's second: 341x79x32 -> 32, 5x10 stride 2
    "3x3_channels_of_R": 4,       # 120x12x32 -> 64, 3x3: channels a multiple of R
}
#: The DeepBench layers also run with the static mapping.
DEEPBENCH_STATIC = ("cin1_3x3", "cin1_5x20_s2", "cin3_7x7_s2")


def _conv(name, size, cin, cout, kernel, *, groups=1, stride=1, pads=0, seed=0):
    """A random grouped convolution of a ``size`` (h, w) map, requantised to keep its
    outputs spread, ReLU after it."""
    from systolica.compiler.graph.graph import GraphBuilder
    from systolica.compiler.graph.ops import requant_for
    rng = np.random.default_rng(seed)
    kh, kw = kernel
    x = rng.integers(-128, 128, size=(1, *size, cin), dtype=np.int8)
    w = rng.integers(-64, 65, size=(kh, kw, cin // groups, cout), dtype=np.int8)
    mult, shift = requant_for(40.0 / (74.0 * 37.0 * np.sqrt(kh * kw * cin / groups)),
                              per_channel=False)
    g = GraphBuilder(name)
    t = g.conv2d(g.input(x, zero_point=int(rng.integers(-8, 9))), w,
                 rng.integers(-2000, 2000, size=cout, dtype=np.int32), stride=stride,
                 pads=pads, groups=groups, mult=mult, shift=shift, relu=True, name=name)
    return g.build(t)


@functools.cache
def _bmm_model(batches=4, m=10, k=4, n=4, seed=7):
    """A float ONNX ``MatMul`` of ``[b, m, k]`` by a constant ``[b, k, n]`` (attention's
    per-head product), planned for the chip: the host views the left operand as m
    1 x 1 maps of ``b*k`` channels (channel ``e*k + j`` of map ``i`` is entry ``e``'s
    ``[i, j]``), the chip's one segment a 1x1 convolution of ``b`` groups over them,
    held as one 1 x m map (onnx_simplify._group_batches); that segment's model."""
    from onnx import TensorProto, helper, numpy_helper

    from systolica.compiler.assignment.partition import plan_model
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((batches, k, n)) / np.sqrt(k)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="bmm")], "bmm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batches, m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w.astype(np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    plan = plan_model(CFG, model, {"x": rng.random((batches, m, k), dtype=np.float32)})
    (chip,) = [s for s in plan.segments if s.processor == "chip"]
    return chip.proto


def _bmm():
    from systolica.compiler.frontend import onnx_import
    return onnx_import.load(_bmm_model(), name="bmm", seed=6)


@functools.cache
def _one_d_model():
    """A float 1-D convolution (4 channels of 40 samples to 8, 7 taps, stride 2,
    pads 3), quantised by onnxruntime (QDQ)."""
    from onnx import TensorProto, helper, numpy_helper

    from systolica.models import onnx_zoo
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 4, 7)) / np.sqrt(4 * 7)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv1d",
                              strides=[2], pads=[3, 3]),
             helper.make_node("Relu", ["y"], ["z"], name="relu")]
    graph = helper.make_graph(
        nodes, "one_d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 40])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w.astype(np.float32), "w"),
         numpy_helper.from_array(np.full(8, 0.1, np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx_zoo.ort_quantized(model)


def _one_d():
    from systolica.compiler.frontend import onnx_import
    xq = np.random.default_rng(5).integers(-100, 128, (1, 4, 40), dtype=np.int8)
    return onnx_import.load(_one_d_model(), {"x": xq})


#: Layer kinds no hand rule served, each run with the matcher and the static mapping.
KINDS = {
    "grouped2_3x3": lambda: _conv("grouped2", (8, 8), 8, 8, (3, 3), groups=2, pads=1),
    "grouped3_1x1": lambda: _conv("grouped3", (8, 8), 12, 12, (1, 1), groups=3, seed=1),
    "resnext_16_in_4": lambda: _conv("resnext", (8, 8), 16, 16, (3, 3), groups=4, pads=1,
                                     seed=2),
    # ResNeXt's 32 groups of 4 (its 32x4d), and 64 groups of 2, the widest
    "resnext_32x4": lambda: _conv("resnext32", (4, 4), 128, 128, (3, 3), groups=32, pads=1,
                                  seed=8),
    "grouped64_3x3": lambda: _conv("grouped64", (4, 4), 128, 128, (3, 3), groups=64, pads=1,
                                   seed=9),
    "conv1d_onnx": _one_d,
    "bmm_onnx_4x10x4x4": _bmm,
    "narrow_5x20_cin1": lambda: _conv("narrow", (9, 24), 1, 8, (5, 20), stride=(1, 2),
                                      seed=4),
}

CASES = {
    **{name: _db(i) for name, i in DEEPBENCH.items()},
    **{f"{name}_static": (_db(DEEPBENCH[name]), dict(mapping="static"))
       for name in DEEPBENCH_STATIC},
    **KINDS,
    **{f"{name}_static": (make, dict(mapping="static")) for name, make in KINDS.items()},
}


#: The cases whose matcher mapping takes fewer cycles than the static one: few input
#: channels replicated by taps, whole groups side by side (block-diagonal weights).
FASTER_THAN_STATIC = ("cin1_3x3", "cin1_5x20_s2", "cin3_7x7_s2", "grouped2_3x3",
                      "grouped3_1x1", "resnext_16_in_4", "resnext_32x4", "grouped64_3x3",
                      "conv1d_onnx", "bmm_onnx_4x10x4x4", "narrow_5x20_cin1")


def _mode(case: str) -> str:
    return "static" if case.endswith("_static") else "matcher"


def _mapped_by_the_mode(case, compiled):
    """Every convolution of the case ran a mapping, chosen by the case's mode."""
    from systolica.compiler.graph.ops import Conv2d
    convs = {n.name for n in compiled.graph.nodes if isinstance(n.op, Conv2d)}
    assert convs and convs <= set(compiled.mappings), (convs, compiled.mappings)
    assert {compiled.mappings[c].origin for c in convs} == {_mode(case)}


runs, test_outputs_match_numpy_and_golden, test_cycles_and_counters_match_prediction = \
    case_table(CFG, CASES, also=_mapped_by_the_mode)


@pytest.mark.parametrize("case", [c for c in CASES if f"{c}_static" in CASES])
def test_the_matcher_is_never_slower_than_static_on_the_chip(runs, case):
    """The chip's own cycle counts: the matcher's mapping of each layer run both ways
    takes no more cycles than the static one, and fewer where it packs few channels
    or whole groups onto the rows."""
    (_, matcher), (_, static) = runs[case], runs[f"{case}_static"]
    assert matcher.cycles <= static.cycles
    if case in FASTER_THAN_STATIC:
        assert matcher.cycles < static.cycles
