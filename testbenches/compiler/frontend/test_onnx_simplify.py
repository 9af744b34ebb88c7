"""The scalar clean-up (docs/assignment.md, step 2): every rewrite computes what the
model computed (checked by the host's kernels, the ONNX reference evaluator, on the
model before and after), and says what it did."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from systolica.compiler.frontend import onnx_model, onnx_simplify
from systolica.host.kernels import HostModel

RNG = np.random.default_rng(0)


def _model(nodes, inits, outputs=("y",), shape=(1, 4, 6, 6)):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    graph = helper.make_graph(nodes, "g", [x], outs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _same_after(proto, shape=(1, 4, 6, 6)):
    x = RNG.standard_normal(shape).astype(np.float32)
    before = HostModel(proto).run({"x": x})
    m = onnx_simplify.simplify(onnx_model.load(proto, {"x": x}))
    after = HostModel(m.proto).run({"x": x})
    for b, a in zip(before.values(), after.values()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    return m


def _kinds(m):
    return [n.op_type for n in m.proto.graph.node]


def test_identities_go_and_a_note_says_so():
    m = _same_after(_model([helper.make_node("Identity", ["x"], ["a"]),
                            helper.make_node("Dropout", ["a"], ["b"]),
                            helper.make_node("Relu", ["b"], ["y"])], {}))
    assert _kinds(m) == ["Relu"]
    assert any("identity" in n for n in m.notes)


def test_shape_arithmetic_is_folded_to_constants():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape: only the Reshape is left."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    m = _same_after(_model(nodes, {"zero": np.array(0, np.int64),
                                   "axes": np.array([0], np.int64),
                                   "minus1": np.array([-1], np.int64)}))
    assert _kinds(m) == ["Flatten"]          # a Reshape to [N, rest] is a Flatten


def test_batch_normalisation_folds_into_the_conv_before_it():
    c = 4
    inits = {"w": RNG.standard_normal((c, c, 3, 3)).astype(np.float32),
             "b": RNG.standard_normal(c).astype(np.float32),
             "g": RNG.uniform(0.5, 2, c).astype(np.float32),
             "beta": RNG.standard_normal(c).astype(np.float32),
             "mean": RNG.standard_normal(c).astype(np.float32),
             "var": RNG.uniform(0.5, 2, c).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "beta", "mean", "var"],
                              ["y"], epsilon=1e-3)]
    m = _same_after(_model(nodes, inits))
    assert _kinds(m) == ["Conv"]
    assert any("BatchNormalization" in n for n in m.notes)


def test_a_normalisation_whose_conv_has_another_reader_stays():
    c = 4
    inits = {"w": RNG.standard_normal((c, c, 1, 1)).astype(np.float32),
             **{k: RNG.uniform(0.5, 2, c).astype(np.float32)
                for k in ("g", "beta", "mean", "var")}}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "g", "beta", "mean", "var"],
                              ["y"]),
             helper.make_node("Relu", ["c"], ["z"])]
    m = _same_after(_model(nodes, inits, outputs=("y", "z")))
    assert "BatchNormalization" in _kinds(m)


def test_dead_nodes_are_dropped_with_a_note_naming_them():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="used"),
             helper.make_node("Sigmoid", ["x"], ["unused"], name="nobody_reads_me")]
    m = _same_after(_model(nodes, {}))
    assert _kinds(m) == ["Relu"]
    assert any("nobody_reads_me" in n for n in m.notes)


@pytest.mark.parametrize("kind", ["Sum", "AveragePool"])
def test_forms_the_chip_knows(kind):
    if kind == "Sum":
        nodes = [helper.make_node("Relu", ["x"], ["a"]),
                 helper.make_node("Sum", ["a", "x"], ["y"])]
        want = "Add"
    else:
        nodes = [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[6, 6])]
        want = "GlobalAveragePool"
    m = _same_after(_model(nodes, {}))
    assert want in _kinds(m) and kind not in _kinds(m)


def _integer_model(op, a_shape, b, b_zp, x_type=TensorProto.UINT8):
    """One QLinearMatMul or MatMulInteger of an input `a` by the constant `b`."""
    u8 = x_type == TensorProto.UINT8
    dtype = np.uint8 if u8 else np.int8
    inits = {"b": b, "bz": b_zp, "az": dtype(120 if u8 else -8)}
    if op == "QLinearMatMul":
        inits.update(s=np.float32(0.01), ys=np.float32(0.05), yz=dtype(130 if u8 else 2))
        node = helper.make_node(op, ["a", "s", "az", "b", "s", "bz", "ys", "yz"], ["y"],
                                name="mm")
        out = x_type
    else:
        node = helper.make_node(op, ["a", "b", "az", "bz"], ["y"], name="mm")
        out = TensorProto.INT32
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("a", x_type, list(a_shape))],
        [helper.make_tensor_value_info("y", out, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _integer_same_after(proto, a_shape, dtype):
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max + 1, a_shape).astype(dtype)
    before = HostModel(proto).run({"a": a})["y"]
    m = onnx_simplify.simplify(onnx_model.load(proto, {"a": a}))
    after = HostModel(m.proto).run({"a": a})["y"]
    assert after.dtype == before.dtype
    np.testing.assert_array_equal(after, before)
    return m


@pytest.mark.parametrize("op", ["QLinearMatMul", "MatMulInteger"])
def test_uint8_operands_are_made_int8_and_the_host_converts_the_edges(op):
    b = RNG.integers(0, 256, (4, 3)).astype(np.uint8)
    m = _integer_same_after(_integer_model(op, (2, 4), b, np.uint8(7)), (2, 4), np.uint8)
    consts = {t.name: numpy_helper.to_array(t) for t in m.proto.graph.initializer}
    (node,) = [n for n in m.proto.graph.node if n.op_type == op]
    assert consts[node.input[2]].dtype == np.int8 and consts[node.input[2]] == 120 - 128
    w = consts[node.input[3 if op == "QLinearMatMul" else 1]]
    assert w.dtype == np.int8 and np.array_equal(w.astype(int), b.astype(int) - 128)
    # the input converted before (and a uint8 output after) by DequantizeLinear and
    # QuantizeLinear at scale 1
    kinds = ["DequantizeLinear", "QuantizeLinear", op]
    if op == "QLinearMatMul":
        kinds += ["DequantizeLinear", "QuantizeLinear"]
    assert _kinds(m) == kinds
    assert any("uint8 operands of mm int8" in n for n in m.notes)


def test_an_absent_zero_point_of_a_uint8_operand_becomes_minus_128():
    b = RNG.integers(0, 256, (4, 3)).astype(np.uint8)
    proto = _integer_model("MatMulInteger", (2, 4), b, np.uint8(0))
    del proto.graph.node[0].input[3]                    # b's zero point: 0 by default
    m = _integer_same_after(proto, (2, 4), np.uint8)
    (node,) = [n for n in m.proto.graph.node if n.op_type == "MatMulInteger"]
    consts = {t.name: numpy_helper.to_array(t) for t in m.proto.graph.initializer}
    assert consts[node.input[3]] == -128


@pytest.mark.parametrize("op", ["QLinearMatMul", "MatMulInteger"])
def test_a_batched_matmul_is_split_per_batch(op):
    """Where one grouped convolution cannot take it: an int32 output (MatMulInteger),
    or weights less their zero point leaving int8 (read in parts along K)."""
    b = RNG.integers(-128, 128, (3, 4, 2)).astype(np.int8)
    b[1, 2, 0] = 127                                    # 127 - -3 leaves int8
    m = _integer_same_after(_integer_model(op, (3, 5, 4), b, np.int8(-3), TensorProto.INT8),
                            (3, 5, 4), np.int8)
    assert _kinds(m) == ["Gather", op] * 3 + ["Concat", "Reshape"]
    assert [n.name for n in m.proto.graph.node if n.op_type == op] == \
        ["mm__batch0", "mm__batch1", "mm__batch2"]
    assert any("split the batched matmul(s) mm (3)" in n for n in m.notes)


def _grouped_node(m):
    (conv,) = [n for n in m.proto.graph.node if n.op_type in ("Conv", "QLinearConv")]
    return conv, {a.name: helper.get_attribute_value(a) for a in conv.attribute}


def test_a_batched_matmul_becomes_one_grouped_convolution():
    """``[3, 5, 4] x [3, 4, 2]`` whose weights less their zero points (one per column)
    are int8: a QLinearConv of 3 groups over the 1 x 5 map of 12 channels, its
    weights ``[6, 4, 1, 1]`` (output channel ``b*2 + n`` is batch b's column n), its
    right scale and zero point one per output channel; the host moves the views."""
    b = RNG.integers(-100, 100, (3, 4, 2)).astype(np.int8)
    proto = _integer_model("QLinearMatMul", (3, 5, 4), b, np.array([-3, 5], np.int8),
                           TensorProto.INT8)
    proto.graph.initializer.append(numpy_helper.from_array(
        np.array([0.01, 0.02], np.float32), "bs"))
    proto.graph.node[0].input[4] = "bs"
    m = _integer_same_after(proto, (3, 5, 4), np.int8)
    assert _kinds(m) == ["Transpose", "Reshape", "QLinearConv", "Reshape", "Transpose"]
    conv, attrs = _grouped_node(m)
    assert conv.name == "mm__grouped" and attrs["group"] == 3
    consts = {t.name: numpy_helper.to_array(t) for t in m.proto.graph.initializer}
    w = consts[conv.input[3]]
    assert w.shape == (6, 4, 1, 1) and np.array_equal(w[2 * 1 + 1, :, 0, 0], b[1, :, 1])
    assert np.array_equal(consts[conv.input[4]], np.tile([0.01, 0.02], 3).astype(np.float32))
    assert np.array_equal(consts[conv.input[5]], np.tile([-3, 5], 3))
    assert any("batched matmul(s) mm (3) one grouped 1x1 convolution" in n for n in m.notes)


def test_a_float_batched_matmul_becomes_one_grouped_conv():
    """Before quantisation: a float ``Conv`` of 4 groups, the model's values alike."""
    w = RNG.standard_normal((4, 3, 5)).astype(np.float32)
    m = _same_after(_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="heads")],
                           {"w": w}, shape=(4, 6, 3)), shape=(4, 6, 3))
    assert _kinds(m) == ["Transpose", "Reshape", "Conv", "Reshape", "Transpose"]
    assert _grouped_node(m)[1]["group"] == 4
