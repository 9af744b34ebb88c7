"""Small valid ONNX models of every kind the front end takes (QOperator int8,
onnxruntime's own int8 operators, QDQ, float): the seeds the ONNX fuzzer mutates
(``compiler/frontend/test_onnx_fuzz.py``) and the bad-input catalogue breaks
(``app/test_bad_inputs_onnx.py``)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from systolica.models import onnx_zoo


def conv_chain() -> onnx.ModelProto:
    """QOperator int8: conv + Relu, max pool, a conv to a 1 x 1 map, Flatten, matmul."""
    m = onnx_zoo.QModel(0)
    y = m.conv("x", (0.05, 3), 3, 8, 3, (0.1, 0), relu=True)
    p = m.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    f = m.node("Flatten", [m.conv(p, (0.1, 0), 8, 8, 4, (0.1, 0), pads=0)], axis=1)
    return m.build([("x", [1, 3, 8, 8])], [m.matmul(f, (0.1, 0), 8, 4, (0.2, 0))])


def add_pool() -> onnx.ModelProto:
    """onnxruntime's int8 operators: two convs, QLinearAdd, QLinearGlobalAveragePool."""
    m = onnx_zoo.QModel(1)
    a = m.conv("x", (0.05, 0), 3, 8, 3, (0.1, 0))
    b = m.conv("x", (0.05, 0), 3, 8, 1, (0.08, 0), pads=0)
    m.nodes.append(helper.make_node("QLinearAdd", [a, *m.q(0.1, 0), b, *m.q(0.08, 0),
                                                   *m.q(0.2, 0)], ["sum"], name="add",
                                    domain="com.microsoft"))
    m.nodes.append(helper.make_node("QLinearGlobalAveragePool", ["sum", *m.q(0.2, 0),
                                                                 *m.q(0.05, 0)], ["gap"],
                                    name="gap", domain="com.microsoft", channels_last=0))
    model = m.build([("x", [1, 3, 6, 6])], ["gap"])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def gemm_join() -> onnx.ModelProto:
    """onnxruntime's QGemm (``transB``, a bias) on an [M, K] input, and a QLinearConcat
    of two convolutions of a map, one branch at another scale than the join."""
    m = onnx_zoo.QModel(2)
    w = m.rng.integers(-60, 60, (4, 12), dtype=np.int8)
    m.nodes.append(helper.make_node(
        "QGemm", ["a", *m.q(0.05, 3), m.const(w), *m.q(0.02, 0),
                  m.const(m.rng.integers(-900, 900, 4, dtype=np.int32)), *m.q(0.2, -6)],
        ["y"], name="gemm", domain="com.microsoft", transB=1))
    b1 = m.conv("x", (0.05, 0), 3, 8, 3, (0.1, 0))
    b2 = m.conv("x", (0.05, 0), 3, 8, 1, (0.07, 0), pads=0)
    m.nodes.append(helper.make_node(
        "QLinearConcat", [*m.q(0.1, 0), b1, *m.q(0.1, 0), b2, *m.q(0.07, 0)], ["join"],
        name="join", domain="com.microsoft", axis=1))
    model = m.build([("a", [5, 12]), ("x", [1, 3, 6, 6])], ["y", "join"])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def float_small() -> onnx.ModelProto:
    """A float model the front end cleans up and quantises: Conv, BatchNormalization
    (folded), Relu, Identity (removed), MaxPool, Reshape to [N, rest] (a Flatten),
    Gemm."""
    rng = np.random.default_rng(3)

    def init(name, shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale)
                                       .astype(np.float32), name)
    inits = [init("w", (8, 3, 3, 3)), init("b", (8,)), init("gamma", (8,)), init("beta", (8,)),
             init("mean", (8,)), numpy_helper.from_array(np.full(8, 0.5, np.float32), "var"),
             numpy_helper.from_array(np.array([1, 72], np.int64), "shape"),
             init("fc_w", (4, 72)), init("fc_b", (4,))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"],
                              ["bn"], name="bn"),
             helper.make_node("Relu", ["bn"], ["r"], name="relu"),
             helper.make_node("Identity", ["r"], ["i"], name="identity"),
             helper.make_node("MaxPool", ["i"], ["p"], name="pool", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("Reshape", ["p", "shape"], ["flat"], name="reshape"),
             helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
    graph = helper.make_graph(
        nodes, "float_small", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


#: The seed models: name -> builder.
SEEDS = {"conv_chain": conv_chain, "add_pool": add_pool, "gemm_join": gemm_join,
         "float_small": float_small,
         "inception": onnx_zoo.inception, "qdq_cnn": onnx_zoo.qdq_cnn,
         "qdq_resnet": onnx_zoo.qdq_resnet}
