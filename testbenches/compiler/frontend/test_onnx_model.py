"""Loading an ONNX model for assignment (docs/assignment.md, step 1): the opset
checked before any work, inputs bound (symbolic sizes from the data given) and
checked against the model, shapes inferred."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from systolica.compiler.errors import CompileError
from systolica.compiler.frontend import onnx_model


def _relu_model(opset=13, batch="N"):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                              [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("opset", [9, 12, 22])
def test_an_opset_outside_13_to_21_is_refused_by_number(opset):
    with pytest.raises(CompileError, match=f"opset {opset}.*13 to 21.*version_converter"):
        onnx_model.load(_relu_model(opset), {"x": np.zeros((1, 4), np.float32)})


def test_a_symbolic_batch_is_bound_from_the_input_given():
    m = onnx_model.load(_relu_model(), {"x": np.zeros((3, 4), np.float32)})
    assert m.value_shapes()["y"] == (3, 4)


def test_a_symbolic_size_without_data_is_an_error_naming_the_input():
    with pytest.raises(CompileError, match="input 'x' has shape \\['N', 4\\]"):
        onnx_model.load(_relu_model())


@pytest.mark.parametrize("data, match", [
    (np.zeros((3, 5), np.float32), "takes shape \\['N', 4\\].*has \\[3, 5\\]"),
    (np.zeros((3, 4), np.int8), "takes float32.*int8"),
    (np.zeros((4,), np.float32), "takes shape"),
])
def test_an_input_that_disagrees_with_the_model_is_named(data, match):
    with pytest.raises(CompileError, match=f"input 'x'.*{match}"):
        onnx_model.load(_relu_model(), {"x": data})


def test_an_unknown_input_name_lists_the_model_inputs():
    with pytest.raises(CompileError, match="no input\\(s\\) \\['z'\\].*\\['x'\\]"):
        onnx_model.load(_relu_model(), {"x": np.zeros((1, 4), np.float32),
                                        "z": np.zeros(1, np.float32)})


def test_not_a_model_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf at all")
    with pytest.raises(CompileError, match="bad.onnx.*cannot be read"):
        onnx_model.load(bad)
    with pytest.raises(CompileError, match="no such file"):
        onnx_model.load(tmp_path / "none.onnx")


def test_nodes_out_of_order_are_sorted_and_a_dangling_value_is_named():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Relu", ["a"], ["y"], name="second"),
             helper.make_node("Sigmoid", ["x"], ["a"], name="first")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 13)])
    m = onnx_model.load(model)
    assert [n.name for n in m.graph.node] == ["first", "second"]
    nodes = [helper.make_node("Relu", ["nowhere"], ["y"], name="lost")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(CompileError, match="'lost' reads 'nowhere'"):
        onnx_model.load(model)
