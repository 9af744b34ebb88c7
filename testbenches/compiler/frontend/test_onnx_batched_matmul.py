"""A batched matmul from ONNX (``[B, M, K]`` by a constant ``[B, K, N]``, attention's
per-head products) as one grouped 1x1 convolution on the chip
(``onnx_simplify._group_batches``, docs/assignment.md): a float model quantised by
onnxruntime on the way in, or quantised by it before (its QDQ and QOperator forms), planned for
``tiny``. The chip runs one Conv2d of B groups, which the matcher packs
block-diagonally (two 4-channel groups on the 8 rows and columns); the host moves the
views. The chip's output equals the numpy reference on the golden model in the
predicted cycles, and onnxruntime's within one int8 step (docs/assignment.md's bound)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from systolica.app import onnx_run
from systolica.arch.config import preset
from systolica.compiler.assignment.partition import plan_model
from systolica.compiler.errors import OnnxNodeError
from systolica.compiler.frontend import onnx_import
from systolica.compiler.graph.ops import Conv2d
from systolica.models import onnx_zoo

TINY = preset("tiny")
HEADS, M, K, N = 4, 10, 4, 4


@functools.cache
def _float_model():
    """``x [4, 10, 4]`` times a seeded ``[4, 4, 4]``: four heads, each its own
    weights."""
    w = np.random.default_rng(2).standard_normal((HEADS, K, N)) / np.sqrt(K)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="heads")], "heads",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [HEADS, M, K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w.astype(np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


FORMS = {
    "float": _float_model,
    "qdq": lambda: onnx_zoo.ort_quantized(_float_model()),
    "qoperator": lambda: onnx_zoo.ort_quantized(_float_model(), quant_format="QOperator"),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_a_batched_matmul_runs_as_one_packed_grouped_convolution(form):
    x = np.random.default_rng(5).random((HEADS, M, K), dtype=np.float32)
    plan = plan_model(TINY, FORMS[form](), {"x": x})
    (grouped,) = [p for p in plan.placements if p.op.kind in ("Conv", "QLinearConv")]
    assert grouped.processor == "chip", grouped.refusals
    assert not [p for p in plan.placements if "MatMul" in p.op.kind]
    run = onnx_run.run_plan(plan)
    assert run.ok, run.problems()
    (chip,) = [s for s in run.segments if s.segment.processor == "chip"]
    compiled = chip.compiled
    # the M 1 x 1 maps the host makes are one 1 x M map on the chip: no transposes
    (conv,) = compiled.graph.nodes
    assert isinstance(conv.op, Conv2d) and conv.op.groups == HEADS
    assert compiled.graph.tensor(conv.inputs[0]).shape == (1, 1, M, HEADS * K)
    assert compiled.mappings[conv.name].describe() == \
        "rows (g2 x c4) cols (g2 x k4) stream (oh1 x ow10) blocks"
    assert chip.matches_reference and chip.golden_cycles == chip.cycles
    assert run.outputs["y"].shape == (HEADS, M, N)


def test_the_importer_alone_refuses_a_batched_matmul_naming_the_way_to_run_it():
    """``onnx_import.load`` takes a model as it is (no clean-up): a QLinearMatMul of
    ``[B, M, K]`` is refused by node, saying that planning the model runs it."""
    model = onnx_zoo.ort_quantized(_float_model(), quant_format="QOperator")
    with pytest.raises(OnnxNodeError, match=r"'heads_quant' \(QLinearMatMul\): takes an "
                                            r"\[M, K\] left operand.*plan_model") as e:
        onnx_import.load(model)
    assert e.value.node == "heads_quant"
