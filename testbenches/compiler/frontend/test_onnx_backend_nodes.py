"""The onnx package's own backend node tests of the integer operators (QLinearConv,
QLinearMatMul 2-D and 3-D of uint8 and int8 with float32 and float16 scales,
ConvInteger, MatMulInteger) planned for the tiny chip and run there: each node on the
chip, its output equal to the case's expected output, bit for bit where the
arithmetic is integer (ConvInteger, MatMulInteger) and within the chip's one-step
bound where it requantises (docs/assignment.md, "Agreement with onnxruntime"; the
differing values are counted). Every operand of these one-node models is a graph
input: all but the first (the activation) are taken as constants
(``PlanOptions.constants``). The fast tier runs the chip programs on the golden model,
the ``rtl`` test on the Verilated chip, every case in one simulator process."""

from __future__ import annotations

import functools
import importlib
import re
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper, version_converter

from systolica.app import onnx_run
from systolica.arch.config import preset
from systolica.compiler.assignment.partition import PlanOptions, plan_model
from systolica.compiler.errors import CompileError
from systolica.compiler.frontend import onnx_import, onnx_model
from systolica.compiler.graph.ops import Conv2d, Dense

TINY = preset("tiny")

#: The cases by name, as ``collect_testcases(None)`` names them.
PATTERN = re.compile(r"test_(qlinearconv|qlinearmatmul_(2D|3D)_(uint8|int8)_(float32|float16)"
                     r"|convinteger_(with|without)_padding|matmulinteger)$")
NAMES = ["test_qlinearconv",
         *(f"test_qlinearmatmul_{d}_{t}_{s}" for d in ("2D", "3D") for t in ("uint8", "int8")
           for s in ("float32", "float16")),
         "test_convinteger_without_padding", "test_convinteger_with_padding",
         "test_matmulinteger"]

#: The operator modules of the onnx package whose generators make these cases.
#: ``collect_testcases(None)`` imports every generator module (about 9 s, every
#: operator's data computed); these four make the same cases in half a second
#: (:func:`test_the_cases_are_those_collect_testcases_gives` checks it).
MODULES = ("qlinearconv", "qlinearmatmul", "convinteger", "matmulinteger")

#: Operators whose arithmetic is integer end to end: their output is exact.
INTEGER = ("ConvInteger", "MatMulInteger")

#: Values the chip gives unlike the case's expected output, by case (of the one-step
#: bound the requantising ones may take): none today.
DIFFERING = dict.fromkeys(NAMES, 0)


@functools.cache
def _cases() -> dict:
    from onnx.backend.test.case import node
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # other generators' overflow warnings
        for name in MODULES:
            importlib.import_module(f"onnx.backend.test.case.node.{name}")
    return {c.name: c for c in node._NodeTestCases if PATTERN.match(c.name)}


def _model(case):
    """The case's model at an opset the front end reads (10 -> 13)."""
    m = onnx.ModelProto()
    m.CopyFrom(case.model)
    if m.opset_import[0].version < onnx_model.OPSETS.start:
        m.ir_version = max(m.ir_version, 8)
        m = version_converter.convert_version(m, onnx_model.OPSETS.start)
    return m


def _plan(case):
    model = _model(case)
    names = [vi.name for vi in model.graph.input]
    inputs = dict(zip(names, (np.asarray(x) for x in case.data_sets[0][0])))
    return model, plan_model(TINY, model, inputs, PlanOptions(constants=tuple(names[1:])))


def _on_the_chip(model, plan) -> None:
    """The node's operations (the 3-D matmul's: one per batch) all on the chip."""
    op_type = model.graph.node[0].op_type
    mine = [p for p in plan.placements if p.op.kind == op_type]
    batches = model.graph.input[0].type.tensor_type.shape.dim
    want = batches[0].dim_value if op_type == "QLinearMatMul" and len(batches) == 3 else 1
    assert len(mine) == want, [p.op.name for p in plan.placements]
    assert all(p.processor == "chip" for p in mine), [(p.op.name, p.processor, p.refusals)
                                                      for p in mine]


def _check(case, model, run) -> None:
    """The run passed (golden = numpy = prediction, onnxruntime within bounds) and
    its output is the case's: exact for the integer operators, else within a step in
    the counted values."""
    assert run.ok, run.problems()
    (want,) = case.data_sets[0][1]
    got = run.outputs[model.graph.output[0].name]
    assert got.dtype == want.dtype and got.shape == want.shape
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    bound = 0 if model.graph.node[0].op_type in INTEGER else 1
    assert all(a.tolerance == bound for a in run.isolated)   # docs/assignment.md's bound
    assert diff.max() <= bound, (case.name, got, want)
    assert int((diff > 0).sum()) == DIFFERING[case.name]


@pytest.mark.parametrize("name", NAMES)
def test_each_case_runs_on_the_chip(name):
    case = _cases()[name]
    model, plan = _plan(case)
    _on_the_chip(model, plan)
    _check(case, model, onnx_run.run_plan(plan))


@pytest.mark.rtl
def test_every_case_on_the_rtl(tiny_build):
    """All the cases' chip programs in one simulator process: equal to the golden
    model and the prediction, so the outputs are the cases' as above."""
    cases = [_cases()[n] for n in NAMES]
    planned = [_plan(c) for c in cases]
    runs = [onnx_run.run_plan(plan) for _, plan in planned]
    onnx_run.run_on_rtl(*runs)
    for case, (model, plan), run in zip(cases, planned, runs):
        _on_the_chip(model, plan)
        chips = [s for s in run.segments if s.segment.processor == "chip"]
        assert chips and all(s.rtl_matches_golden and s.rtl_cycles == s.cycles
                             for s in chips), case.name
        _check(case, model, run)


@pytest.mark.slow
def test_the_cases_are_those_collect_testcases_gives():
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        everything = collect_testcases(None)
    theirs = {c.name: c for c in everything if PATTERN.match(c.name)}
    assert sorted(theirs) == sorted(NAMES) == sorted(_cases())
    for name in NAMES:
        assert theirs[name].model == _cases()[name].model


# -- what the front end does to them ------------------------------------------------------

def _qlinearmatmul(b, b_zp):
    """``a [2, 4] @ b`` (int8) as a QLinearMatMul whose right operand and parameters
    are initialisers."""
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in (
        ("as", np.float32(0.02)), ("az", np.int8(3)), ("b", b), ("bs", np.float32(0.01)),
        ("bz", b_zp), ("ys", np.float32(0.05)), ("yz", np.int8(5)))]
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                            ["y"], name="mm")
    graph = helper.make_graph([node], "m", [helper.make_tensor_value_info(
        "a", TensorProto.INT8, [2, 4])], [helper.make_tensor_value_info(
            "y", TensorProto.INT8, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _dense(model):
    (node,) = [n for n in onnx_import.load(model).nodes if isinstance(n.op, Dense)]
    return node


@pytest.mark.parametrize("b_zp, inputs", [
    (0, 1),             # within int8
    (-13, 2),           # b + 13 up to 140: K read twice
    (-128, 3),          # 127 + 128 = 255 = 127 + 127 + 1: three times
])
def test_a_right_operand_leaving_int8_is_read_in_parts_along_k(b_zp, inputs):
    b = np.random.default_rng(0).integers(-128, 128, (4, 3)).astype(np.int8)
    b[0, 0] = 127
    node = _dense(_qlinearmatmul(b, np.int8(b_zp)))
    assert len(node.inputs) == inputs and node.op.weights.shape == (4 * inputs, 3)
    w = node.op.weights.astype(np.int64).reshape(inputs, 4, 3).sum(axis=0)
    assert np.array_equal(w, b.astype(np.int64) - b_zp)
    # the left zero point folded with the whole of b - b_zp
    assert np.array_equal(node.op.bias, -3 * w.sum(axis=0))


def test_a_common_factor_is_taken_by_the_multiplier():
    b = np.full((4, 2), -128, np.int8)                  # b - 127 = -255 = 255 * -1
    plain = _dense(_qlinearmatmul(np.zeros((4, 2), np.int8), np.int8(0)))
    node = _dense(_qlinearmatmul(b, np.int8(127)))
    assert node.inputs == ("a",) and np.array_equal(node.op.weights, np.full((4, 2), -1))
    ratio = (node.op.mult / 2 ** node.op.shift) / (plain.op.mult / 2 ** plain.op.shift)
    assert ratio == pytest.approx(255, rel=1e-4)
    # -255 and -253 have no common factor: the dense layer's one multiplier takes none
    b[:, 1] = -126
    assert len(_dense(_qlinearmatmul(b, np.int8(127))).inputs) == 2


@pytest.mark.parametrize("w, axis, factor, parts, g", [
    (np.array([[3, -128], [127, 0]]), 1, None, 1, [1, 1]),
    (np.array([[255, 0], [-255, 7]]), 1, "channel", 1, [255, 7]),
    (np.array([[255, 0], [-255, 7]]), 1, "tensor", 3, [1, 1]),
    (np.array([[140, -140]]), 1, "tensor", 1, [140, 140]),
    (np.array([[140, -141]]), 1, "tensor", 2, [1, 1]),
])
def test_int8_parts(w, axis, factor, parts, g):
    got, gain = onnx_import.int8_parts(w, axis, factor=factor)
    assert len(got) == parts and list(gain) == g
    assert all(p.dtype == np.int8 for p in got)
    shape = [1] * w.ndim
    shape[axis] = -1
    assert np.array_equal(sum(p.astype(np.int64) for p in got) * gain.reshape(shape), w)


def test_a_factor_that_does_not_divide_the_bias_is_not_taken():
    w = np.array([[200], [-100]])
    assert len(onnx_import.int8_parts(w, 1, factor="channel", bias=np.array([100]))[0]) == 1
    assert len(onnx_import.int8_parts(w, 1, factor="channel", bias=np.array([101]))[0]) == 2


def _conv(w, w_zp, *, integer, group=1, bias=None):
    """A QLinearConv or ConvInteger of an int8 ``(1, C, 5, 5)`` input, pads 1."""
    cin = w.shape[1] * group
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w_zp, "wz"),
             numpy_helper.from_array(np.array(3, np.int8), "xz")]
    if integer:
        node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], name="conv",
                                pads=[1, 1, 1, 1], group=group)
        out = TensorProto.INT32
    else:
        inits += [numpy_helper.from_array(np.asarray(v), n) for n, v in (
            ("xs", np.float32(0.02)), ("ws", np.full(w.shape[0], 0.01, np.float32)),
            ("ys", np.float32(2.0)), ("yz", np.int8(-5)))]
        ins = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
        if bias is not None:
            inits.append(numpy_helper.from_array(bias, "b"))
            ins.append("b")
        node = helper.make_node("QLinearConv", ins, ["y"], name="conv", pads=[1, 1, 1, 1],
                                group=group)
        out = TensorProto.INT8
    graph = helper.make_graph([node], "m", [helper.make_tensor_value_info(
        "x", TensorProto.INT8, [1, cin, 5, 5])], [helper.make_tensor_value_info("y", out, None)],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


RNG = np.random.default_rng(4)
CONVS = {
    # w - w_zp leaves int8 with no common factor: the input read twice, a 1x1
    # convolution of identities repeating its channels
    "split": _conv(RNG.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8),
                   np.full(4, -100, np.int8), integer=False,
                   bias=RNG.integers(-3000, 3000, 4).astype(np.int32)),
    "split int32": _conv(RNG.integers(-128, 128, (6, 5, 3, 3)).astype(np.int8),
                         RNG.integers(-128, 128, 6).astype(np.int8), integer=True),
    # each channel's own factor (its multiplier takes it): -255 = 255 * -1, and even
    # values less -128 (up to 254) twice their halves
    "factor per channel": _conv(np.stack([np.full((2, 3, 3), -128),
                                          2 * RNG.integers(0, 128, (2, 3, 3)) - 128]
                                         ).astype(np.int8),
                                np.array([127, -128], np.int8), integer=False),
}


@pytest.mark.parametrize("name", CONVS)
def test_convolutions_whose_weights_leave_int8_run_exactly(name):
    model = CONVS[name]
    plan = plan_model(TINY, model, {"x": RNG.integers(-128, 128, (1, model.graph.input[0].type
                                                                  .tensor_type.shape.dim[1]
                                                                  .dim_value, 5, 5),
                                                      dtype=np.int8)})
    assert [p.processor for p in plan.placements] == ["chip"]
    convs = [n for n in onnx_import.load(plan.segments[0].proto).nodes
             if isinstance(n.op, Conv2d)]
    assert len(convs) == (1 if name.startswith("factor") else 2)    # 2: and the repeat
    run = onnx_run.run_plan(plan)
    assert run.ok, run.problems()
    (iso,) = run.isolated
    assert iso.differing == 0 if "int32" in name else iso.max_difference <= 1


def test_a_convinteger_is_an_int32_convolution():
    w = np.ones((2, 1, 2, 2), np.int8)
    graph = onnx_import.load(_conv(w, np.array([0, 1], np.int8), integer=True))
    (conv,) = [n.op for n in graph.nodes if isinstance(n.op, Conv2d)]
    assert conv.out_dtype == "int32" and graph.tensor(graph.outputs[0]).dtype == "int32"
    assert np.array_equal(conv.weights[..., 1], np.zeros((2, 2, 1)))


def test_depthwise_weights_leaving_int8_are_refused_by_name():
    w = RNG.integers(-128, 128, (4, 1, 3, 3)).astype(np.int8)
    with pytest.raises(CompileError, match="'conv'.*depthwise weights less their zero point"):
        onnx_import.load(_conv(w, np.full(4, 100, np.int8), integer=False, group=4))


# -- inputs as constants -------------------------------------------------------------------

def test_given_inputs_become_constants():
    case = _cases()["test_matmulinteger"]
    model = _model(case)
    inputs = dict(zip((vi.name for vi in model.graph.input), case.data_sets[0][0]))
    m = onnx_model.load(model, inputs, constants=("B", "b_zero_point"))
    assert [vi.name for vi in m.graph.input] == ["A", "a_zero_point"]
    assert {t.name for t in m.graph.initializer} == {"B", "b_zero_point"}
    assert sorted(m.inputs) == ["A", "a_zero_point"]


@pytest.mark.parametrize("constants, given, words", [
    (("W",), ("A", "B"), "has no input 'W' to make a constant; its inputs are"),
    (("B",), ("A",), "input 'B' is to be a constant but no data is given"),
])
def test_constants_misused_are_errors_naming_the_input(constants, given, words):
    case = _cases()["test_matmulinteger"]
    model = _model(case)
    data = dict(zip((vi.name for vi in model.graph.input), case.data_sets[0][0]))
    with pytest.raises(CompileError, match=re.escape(words)):
        onnx_model.load(model, {k: data[k] for k in given}, constants=constants)


def test_an_initialiser_named_as_a_constant_is_an_error():
    model = _qlinearmatmul(np.ones((4, 3), np.int8), np.int8(0))
    with pytest.raises(CompileError, match="constant 'b' is an initialiser already"):
        onnx_model.load(model, constants=("b",))
