"""Every ONNX operator the front end is asked to take (docs/assignment.md, "ONNX
operators"), each in a small float model after a convolution, quantised on the way
in, planned, run (chip programs on the golden model, the rest on the host) and
checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from systolica.app import onnx_run
from systolica.arch.config import preset
from systolica.compiler.assignment.partition import plan_model

pytestmark = pytest.mark.slow

RNG = np.random.default_rng(7)
C = 8


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _model(op_nodes, inits=(), opset=13, out_shape=None):
    """x (1, 4, 8, 8) -> Conv 3x3 to C channels -> `op_nodes` (reading "c", writing
    "y")."""
    w = (RNG.standard_normal((C, 4, 3, 3)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv")]
    nodes += op_nodes
    graph = helper.make_graph(
        nodes, "op", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [_const("w", w), *inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _n(op, inputs, **attrs):
    return helper.make_node(op, inputs, ["y"], name=op.lower(), **attrs)


f32 = np.float32
CASES = {
    "Relu": _model([_n("Relu", ["c"])]),
    "Clip": _model([_n("Clip", ["c", "lo", "hi"])], [_const("lo", f32(0)),
                                                     _const("hi", f32(2))]),
    "LeakyRelu": _model([_n("LeakyRelu", ["c"], alpha=0.1)]),
    "Sigmoid": _model([_n("Sigmoid", ["c"])]),
    "Tanh": _model([_n("Tanh", ["c"])]),
    "HardSigmoid": _model([_n("HardSigmoid", ["c"])]),
    "HardSwish": _model([_n("HardSwish", ["c"])], opset=14),
    "Softmax": _model([_n("Softmax", ["c"], axis=1)]),
    "LRN": _model([_n("LRN", ["c"], size=3)]),
    "BatchNormalization": _model(
        [helper.make_node("Relu", ["c"], ["r"]),
         _n("BatchNormalization", ["r", "g", "b", "m", "v"])],
        [_const(k, RNG.uniform(0.5, 1.5, C).astype(f32)) for k in "gbmv"]),
    "MaxPool": _model([_n("MaxPool", ["c"], kernel_shape=[2, 2], strides=[2, 2])]),
    "AveragePool": _model([_n("AveragePool", ["c"], kernel_shape=[2, 2], strides=[2, 2])]),
    "GlobalAveragePool": _model([_n("GlobalAveragePool", ["c"])]),
    "GlobalMaxPool": _model([_n("GlobalMaxPool", ["c"])]),
    "Add": _model([_n("Add", ["c", "c2"]), helper.make_node("Relu", ["c"], ["c2"])]),
    "Sub": _model([_n("Sub", ["c", "k"])], [_const("k", f32(0.5))]),
    "Mul": _model([_n("Mul", ["c", "k"])], [_const("k", RNG.uniform(0.5, 2, (1, C, 1, 1))
                                                   .astype(f32))]),
    "Div": _model([_n("Div", ["c", "k"])], [_const("k", f32(2.0))]),
    "Concat": _model([helper.make_node("Relu", ["c"], ["c2"]),
                      _n("Concat", ["c", "c2"], axis=1)]),
    "Split": _model([helper.make_node("Split", ["c"], ["s1", "s2"], axis=1),
                     _n("Add", ["s1", "s2"])]),
    "Slice": _model([_n("Slice", ["c", "st", "en", "ax"])],
                    [_const("st", np.array([1], np.int64)), _const("en", np.array([5], np.int64)),
                     _const("ax", np.array([2], np.int64))]),
    "Pad": _model([_n("Pad", ["c", "p"])], [_const("p", np.array([0, 0, 1, 1, 0, 0, 1, 1],
                                                                 np.int64))]),
    "Reshape": _model([_n("Reshape", ["c", "s"])], [_const("s", np.array([1, C, 64],
                                                                         np.int64))]),
    "Flatten": _model([_n("Flatten", ["c"], axis=1)]),
    "Squeeze": _model([helper.make_node("GlobalAveragePool", ["c"], ["g"]),
                       _n("Squeeze", ["g", "ax"])], [_const("ax", np.array([2, 3], np.int64))]),
    "Unsqueeze": _model([_n("Unsqueeze", ["c", "ax"])], [_const("ax", np.array([0],
                                                                               np.int64))]),
    "Transpose": _model([_n("Transpose", ["c"], perm=[0, 2, 3, 1])]),
    "Resize": _model([_n("Resize", ["c", "", "sc"], mode="nearest")],
                     [_const("sc", np.array([1, 1, 2, 2], f32))]),
    "ReduceMean": _model([_n("ReduceMean", ["c"], axes=[2, 3], keepdims=1)]),
    "Dropout": _model([helper.make_node("Dropout", ["c"], ["d"]), _n("Relu", ["d"])]),
    "Identity": _model([helper.make_node("Identity", ["c"], ["d"]), _n("Relu", ["d"])]),
    "ConvTranspose": _model([_n("ConvTranspose", ["c", "wt"], strides=[2, 2])],
                            [_const("wt", (RNG.standard_normal((C, 4, 2, 2)) * 0.3)
                                    .astype(f32))]),
    "Gemm": _model([helper.make_node("GlobalAveragePool", ["c"], ["g"]),
                    helper.make_node("Flatten", ["g"], ["f"], axis=1),
                    _n("Gemm", ["f", "wg"], transB=1)],
                   [_const("wg", (RNG.standard_normal((5, C)) * 0.3).astype(f32))]),
    "MatMul": _model([helper.make_node("GlobalAveragePool", ["c"], ["g"]),
                      helper.make_node("Flatten", ["g"], ["f"], axis=1),
                      _n("MatMul", ["f", "wm"])],
                     [_const("wm", (RNG.standard_normal((C, 5)) * 0.3).astype(f32))]),
    "Shape arithmetic": _model(
        [helper.make_node("Shape", ["c"], ["sh"]),
         helper.make_node("Gather", ["sh", "zero"], ["n"], axis=0),
         helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
         helper.make_node("Concat", ["n1", "m1"], ["shape"], axis=0),
         helper.make_node("Cast", ["shape"], ["shape64"], to=TensorProto.INT64),
         _n("Reshape", ["c", "shape64"])],
        [_const("zero", np.array(0, np.int64)), _const("ax0", np.array([0], np.int64)),
         _const("m1", np.array([-1], np.int64))]),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_the_operator_runs_and_agrees_with_onnxruntime(kind):
    plan = plan_model(preset("tiny"), CASES[kind])
    run = onnx_run.run_plan(plan)
    assert run.ok, run.problems()
    conv = next(p for p in plan.placements if p.op.name == "conv")
    assert conv.processor == "chip"


def test_an_average_pool_runs_on_the_chip_unless_its_padding_is_not_counted():
    plan = plan_model(preset("tiny"), CASES["AveragePool"])
    assert next(p for p in plan.placements if p.op.kind == "AveragePool").processor == "chip"
    padded = _model([_n("AveragePool", ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    plan = plan_model(preset("tiny"), padded)
    pool = next(p for p in plan.placements if p.op.kind == "AveragePool")
    assert pool.processor == "host" and "count_include_pad" in pool.refusals["chip"]
    assert onnx_run.run_plan(plan).ok


def test_a_pooled_vector_leaves_the_chip_flattened():
    """GlobalAveragePool then Flatten as the program's output (SqueezeNet's end): the
    chip gives the 1 x 1 map, whose bytes are the [N, C] value's."""
    model = _model([helper.make_node("GlobalAveragePool", ["c"], ["g"], name="gap"),
                    _n("Flatten", ["g"], axis=1)])
    plan = plan_model(preset("tiny"), model)
    assert {p.op.kind: p.processor for p in plan.placements}["Flatten"] == "chip"
    run = onnx_run.run_plan(plan)
    assert run.ok, run.problems()
    assert run.outputs["y"].shape == (1, C)
