"""Grouped and 1-D convolutions from ONNX (docs/compiler.md, "ONNX models"): float
models quantised by onnxruntime's own quantiser (the QDQ form, and the QOperator form
it writes), imported; the imported graph's numpy reference equals onnxruntime within
one int8 step (ONNX requantises by a float scale rounding half to even, the chip by a
16-bit multiplier rounding half up). A ``Conv`` with ``group`` g is a grouped Conv2d
(weights ``[KH, KW, Cin/g, Cout]``); one over an ``[N, C, W]`` input, and the pools
after it, are the 2-D ops over the ``(N, 1, W, C)`` map. A 1-D network of one group
also runs on the golden model."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from systolica import golden
from systolica.arch.config import preset
from systolica.compiler import compile_network
from systolica.compiler.errors import InvalidOnnxNode
from systolica.compiler.frontend import onnx_import
from systolica.compiler.graph import reference
from systolica.compiler.graph.ops import AvgPool2d, Conv2d, MaxPool2d
from systolica.models import onnx_zoo as onnx_models

from tiers import sample


def _float_model(name, shape, layers, seed=0):
    """A float model of `shape` (``[N, C, W]`` or ``[N, C, H, W]``) through `layers`:
    ``("conv", cout, k, attrs)`` (+ Relu, seeded weights scaled by 1/sqrt(fan in),
    biases of 0.1) or ``(pool op, attrs)``; its output the last value."""
    rng = np.random.default_rng(seed)
    nodes, inits, x, c = [], [], "x", shape[1]
    rank = len(shape) - 2
    for i, (kind, *rest) in enumerate(layers):
        out = f"{kind.lower()}{i}"
        if kind == "conv":
            cout, k, attrs = rest
            g = attrs.get("group", 1)
            w = rng.standard_normal((cout, c // g, *(k,) * rank)) / np.sqrt(c // g * k ** rank)
            inits += [numpy_helper.from_array(w.astype(np.float32), f"{out}_w"),
                      numpy_helper.from_array(np.full(cout, 0.1, np.float32), f"{out}_b")]
            nodes.append(helper.make_node("Conv", [x, f"{out}_w", f"{out}_b"], [out],
                                          name=out, **attrs))
            nodes.append(helper.make_node("Relu", [out], [f"{out}_relu"], name=f"{out}_relu"))
            x, c = f"{out}_relu", cout
        else:
            (attrs,) = rest
            nodes.append(helper.make_node(kind, [x], [out], name=out, **attrs))
            x = out
    graph = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


CASES = {
    "grouped": ([1, 8, 9, 9], [
    ("conv", 12, 3, dict(pads=[1, 1, 1, 1], group=4)),      # 2 channels in, 3 out per group
    ("conv", 8, 3, dict(strides=[2, 2], group=2)),
    ("conv", 8, 1, dict(group=8)),                          # depthwise
    ("conv", 16, 3, dict(pads=[1, 0, 1, 2], dilations=[1, 2], group=8)),  # 1 in, 2 out
    ]),
    "one_d": ([1, 4, 80], [
    ("conv", 8, 5, dict(pads=[2, 2])),
    ("MaxPool", dict(kernel_shape=[2], strides=[2])),
    ("conv", 8, 3, dict(strides=[2], dilations=[2], pads=[1, 2], group=2)),
    ("MaxPool", dict(kernel_shape=[3], strides=[1], pads=[1, 1])),
    ("conv", 6, 20, dict(pads=[3, 3])),                     # a kernel past 11 taps
    ]),
    "one_d_single": ([1, 3, 48], [
    ("conv", 8, 20, dict(strides=[2])),
    ("MaxPool", dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ("conv", 8, 3, dict(pads=[1, 1])),
    # (onnxruntime writes an AveragePool as com.microsoft's QLinearAveragePool in the
    # QOperator form, which the importer does not take: QDQ only)
    ("AveragePool", dict(kernel_shape=[3], strides=[1], pads=[1, 1], count_include_pad=1)),
    ]),
    "bad_group": ([1, 8, 6, 6], [("conv", 8, 3, dict(group=2))]),
}


@functools.cache
def _quantised(name, per_channel, quant_format):
    shape, layers = CASES[name]
    return onnx_models.ort_quantized(_float_model(name, shape, layers),
                                     per_channel=per_channel, quant_format=quant_format)


def _input_quant(model):
    """The scale and zero point of the QuantizeLinear reading the model's input."""
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear"
             and n.input[0] == "x")
    return float(consts[q.input[1]]), int(consts[q.input[2]])


def _runtime(model, xq):
    """onnxruntime's run on the float input that quantises to `xq`, its float output
    quantised back by its DequantizeLinear's parameters."""
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    made = {o: n for n in model.graph.node for o in n.output}
    scale, zp = _input_quant(model)
    xf = ((xq.astype(np.float32) - zp) * np.float32(scale)).astype(np.float32)
    (of,) = onnx_models.runtime_session(model).run(None, {"x": xf})
    dq = made[model.graph.output[0].name]
    s, z = consts[dq.input[1]], consts[dq.input[2]]
    return np.clip(np.round(of / s) + z, -128, 127).astype(np.int8)


def _agrees(name, per_channel, quant_format, seed=0):
    """Import the quantised case `name` on a seeded input: its numpy reference within
    a step of onnxruntime, rarely apart. Returns the graph and that output."""
    model = _quantised(name, per_channel, quant_format)
    _, zp = _input_quant(model)
    xq = np.random.default_rng(seed).integers(zp, 128, CASES[name][0], dtype=np.int8)
    graph = onnx_import.load(model, {"x": xq})
    (t,) = graph.outputs
    ours = reference.outputs(graph)[t]
    theirs = _runtime(model, xq)
    assert ours.size == theirs.size, (ours.shape, theirs.shape)
    diff = np.abs(ours.reshape(theirs.shape).astype(int) - theirs.astype(int))
    assert diff.max() <= 1 and diff.mean() <= 0.05, (diff.max(), diff.mean())
    assert len(np.unique(ours)) > 8                  # not saturated
    return graph, ours


FORMS = [(pc, form) for form in ("QDQ", "QOperator") for pc in (False, True)]


@pytest.mark.parametrize("per_channel, quant_format", sample(FORMS, 4), ids=str)
def test_grouped_convolutions_equal_onnxruntime(per_channel, quant_format):
    graph, _ = _agrees("grouped", per_channel, quant_format)
    convs = [n.op for n in graph.nodes if isinstance(n.op, Conv2d)]
    assert [(c.groups, c.depthwise, c.weights.shape[2:]) for c in convs] == [
        (4, False, (2, 12)), (2, False, (6, 8)), (8, True, (1, 8)), (8, False, (1, 16))]


@pytest.mark.parametrize("per_channel, quant_format", sample(FORMS, 4), ids=str)
def test_one_d_convolutions_and_pools_equal_onnxruntime(per_channel, quant_format):
    graph, ours = _agrees("one_d", per_channel, quant_format)
    ops = [n.op for n in graph.nodes if not type(n.op).__name__ == "Transpose"]
    assert [op.kernel for op in ops] == [(1, 5), (1, 2), (1, 3), (1, 3), (1, 20)]
    assert ops[2].groups == 2 and ops[2].dilation == (1, 2) and ops[2].pads == (0, 1, 0, 2)
    assert graph.tensor(graph.inputs[0]).shape == (1, 4, 1, 80)     # NCW as N, C, 1, W
    assert ours.shape == (1, 6, 1, 7)


def test_a_one_d_network_runs_on_the_golden_model():
    """A 1-D network of one group (a 20-tap kernel, padded max and average pools) imported,
    compiled for tiny, run on the golden model: the predicted cycles, numpy's
    output."""
    cfg = preset("tiny")
    graph, ours = _agrees("one_d_single", False, "QDQ", seed=1)
    ops = [n.op for n in graph.nodes][1:-1]                      # between the transposes
    assert [type(op) for op in ops] == [Conv2d, MaxPool2d, Conv2d, AvgPool2d]
    assert [op.kernel for op in ops] == [(1, 20), (1, 3), (1, 3), (1, 3)]
    comp = compile_network(cfg, graph)
    res = golden.run(cfg, comp.loadable)
    assert res.error.name == "NONE" and res.cycles == comp.predicted_cycles
    (t,) = graph.outputs
    np.testing.assert_array_equal(comp.results(res.dram)[t], ours)


@pytest.mark.parametrize("group, words", [
    (3, ["group 3", "weights of shape [8, 4, 3, 3]", "over 8 input channels",
         "divide Cout = 8"]),
    (4, ["group 4", "over 8 input channels", "Cin/group = 8/4"]),
])
def test_a_group_that_does_not_fit_is_invalid(group, words):
    """A group that does not divide Cout, or weights that do not hold Cin/group
    channels, break ONNX's specification of Conv: refused naming the node."""
    model = _quantised("bad_group", False, "QOperator")
    bad = type(model)()
    bad.CopyFrom(model)
    conv = next(n for n in bad.graph.node if n.op_type == "QLinearConv")
    next(a for a in conv.attribute if a.name == "group").i = group
    with pytest.raises(InvalidOnnxNode) as info:
        onnx_import.load(bad)
    assert info.value.node == conv.name
    for word in words:
        assert word in str(info.value), str(info.value)
