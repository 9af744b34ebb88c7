"""The host's kernels against onnxruntime, the external oracle: the operators this
project adds to the ONNX reference evaluator (its opset 13 quantisers, an inference
BatchNormalization, onnxruntime's int8 operators) compute what onnxruntime does."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from systolica.host.kernels import HostModel, missing
from systolica.models.onnx_zoo import runtime_session

RNG = np.random.default_rng(3)
I8, F32 = TensorProto.INT8, TensorProto.FLOAT


def _model(node, inputs: dict, inits: dict, out_type, domain=False):
    types = {np.dtype(np.float32): F32, np.dtype(np.int8): I8}
    graph = helper.make_graph(
        [node], "k", [helper.make_tensor_value_info(k, types[v.dtype], v.shape)
                      for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    opsets = [helper.make_opsetid("", 13)]
    if domain:
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    return helper.make_model(graph, opset_imports=opsets)


def _agree(model, feeds, steps=0):
    ours = HostModel(model).run(feeds)["y"]
    theirs = runtime_session(model).run(None, feeds)[0]
    np.testing.assert_allclose(ours.astype(np.float64), theirs.astype(np.float64),
                               rtol=1e-5, atol=steps or 1e-5)


def _i8(*shape):
    return RNG.integers(-128, 128, shape, dtype=np.int8)


def test_batch_normalisation_is_inference():
    c = 5
    params = {k: RNG.uniform(0.5, 2, c).astype(np.float32) for k in ("g", "b", "m", "v")}
    node = helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"])
    x = RNG.standard_normal((2, c, 4, 4)).astype(np.float32)
    model = _model(node, {"x": x}, params, F32)
    _agree(model, {"x": x})
    # the plain evaluator updates the statistics from the batch at opset 13
    plain = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert not np.allclose(plain, HostModel(model).run({"x": x})["y"], atol=1e-3)


@pytest.mark.parametrize("per_axis", [False, True])
def test_opset_13_quantisers(per_axis):
    x = (RNG.standard_normal((1, 4, 3, 3)) * 5).astype(np.float32)
    s = np.float32(0.07) if not per_axis else RNG.uniform(0.02, 0.1, 4).astype(np.float32)
    zp = np.int8(3) if not per_axis else RNG.integers(-5, 5, 4).astype(np.int8)
    q = _model(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"]), {"x": x},
               {"s": s, "z": zp}, I8)
    _agree(q, {"x": x})
    d = _model(helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"]),
               {"x": _i8(1, 4, 3, 3)}, {"s": s, "z": zp}, F32)
    _agree(d, {"x": _i8(1, 4, 3, 3)})


def test_onnxruntime_int8_operators():
    a, b = _i8(1, 6, 4, 4), _i8(1, 6, 4, 4)
    sc = {"sa": np.float32(0.05), "za": np.int8(2), "sb": np.float32(0.03),
          "zb": np.int8(-1), "sy": np.float32(0.06), "zy": np.int8(4)}
    add = _model(helper.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sy",
                                                 "zy"], ["y"], domain="com.microsoft"),
                 {"a": a, "b": b}, sc, I8, domain=True)
    # onnxruntime's QLinearAdd computes in its own fixed point, not by the float
    # definition the host follows: a step apart at most
    _agree(add, {"a": a, "b": b}, steps=1)
    cat = _model(helper.make_node("QLinearConcat", ["sy", "zy", "a", "sa", "za", "b", "sb",
                                                    "zb"], ["y"], domain="com.microsoft",
                                  axis=1), {"a": a, "b": b}, sc, I8, domain=True)
    _agree(cat, {"a": a, "b": b})
    gap = _model(helper.make_node("QLinearGlobalAveragePool", ["a", "sa", "za", "sy", "zy"],
                                  ["y"], domain="com.microsoft", channels_last=0),
                 {"a": a}, sc, I8, domain=True)
    _agree(gap, {"a": a})


def test_an_operator_without_a_kernel_is_named():
    assert missing([helper.make_node("NoSuchOp", ["x"], ["y"])]) == ["NoSuchOp"]
    assert missing([helper.make_node("QGemmX", ["x"], ["y"], domain="com.microsoft")]) \
        == ["com.microsoft.QGemmX"]
    assert missing([helper.make_node("Softmax", ["x"], ["y"])]) == []
