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
