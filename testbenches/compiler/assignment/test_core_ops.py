"""The management core as a processor of the assignment (docs/assignment.md, "The
management core"): which operations its kernels run and with what parameters, the
refusals that say why not, its costs (no transfer from the chip), and the plans of
classifiers whose Softmax or ArgMax it takes."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from systolica.arch.config import preset
from systolica.compiler.assignment import library
from systolica.compiler.assignment.assign import _transfer
from systolica.compiler.assignment.core_ops import CoreOp, lower
from systolica.compiler.assignment.operations import operations
from systolica.compiler.errors import CompileError

I8, U8, F = TensorProto.INT8, TensorProto.UINT8, TensorProto.FLOAT


def _model(nodes, inputs, output, inits, opset=17):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, t, s)
                                       for n, t, s in inputs],
                          [helper.make_tensor_value_info(output, 0, None)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return onnx.shape_inference.infer_shapes(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]))


ZP_INT8 = np.int8(-128)
SCALE = np.float32(0.05)
B_SCALE = np.float32(0.07)


def qdq_softmax(shape=(2, 3, 5), axis=-1, zp=ZP_INT8, scale=SCALE, float_out=False, opset=17):
    """x (int8) -> DequantizeLinear -> Softmax -> QuantizeLinear -> y."""
    attrs = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"], name="dq"),
             helper.make_node("Softmax", ["xf"], ["p"], name="softmax", **attrs),
             helper.make_node("QuantizeLinear", ["p", "ys", "yz"], ["y"], name="q")]
    out = "y"
    if float_out:
        nodes.append(helper.make_node("Relu", ["p"], ["r"], name="relu"))
        nodes.append(helper.make_node("Add", ["r", "y_f"], ["z"], name="join"))
        nodes.append(helper.make_node("DequantizeLinear", ["y", "ys", "yz"], ["y_f"],
                                      name="dq_y"))
        out = "z"
    return _model(nodes, [("x", I8, list(shape))], out,
                  {"xs": scale, "xz": np.int8(0), "ys": np.float32(1 / 256), "yz": zp},
                  opset)


def argmax_model(shape=(4, 6), axis=-1, keepdims=1, dtype=I8, dequantised=True):
    nodes, inits = [], {}
    src = "x"
    if dequantised:
        nodes.append(helper.make_node("DequantizeLinear", ["x", "xs"], ["xf"], name="dq"))
        inits["xs"] = np.float32(0.1)
        src = "xf"
    nodes.append(helper.make_node("ArgMax", [src], ["y"], name="argmax", axis=axis,
                                  keepdims=keepdims))
    return _model(nodes, [("x", dtype, list(shape))], "y", inits)


def qdq_add(shape_b=(2, 8), relu=False, b_scale=B_SCALE):
    nodes = [helper.make_node("DequantizeLinear", ["a", "as", "az"], ["af"], name="dqa"),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"], name="dqb"),
             helper.make_node("Add", ["af", "bf"], ["s"], name="add")]
    last = "s"
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["sr"], name="relu"))
        last = "sr"
    nodes.append(helper.make_node("QuantizeLinear", [last, "ys", "yz"], ["y"], name="q"))
    return _model(nodes, [("a", I8, [2, 8]), ("b", I8, list(shape_b))], "y",
                  {"as": np.float32(0.05), "az": np.int8(3), "bs": b_scale,
                   "bz": np.int8(-5), "ys": np.float32(0.1), "yz": np.int8(1)})


def qlinear(op, inputs, shapes, inits, **attrs):
    """One com.microsoft QLinear operator of int8 graph inputs `shapes`."""
    g = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], name=op.lower(), domain="com.microsoft",
                          **attrs)], "m",
        [helper.make_tensor_value_info(n, I8, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info("y", I8, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("com.microsoft", 1)])


def qlinear_softmax():
    return qlinear("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], {"x": [4, 9]},
                   {"xs": np.float32(0.1), "xz": np.int8(0), "ys": np.float32(1 / 256),
                    "yz": np.int8(-128)}, axis=-1, opset=13)


def qlinear_add():
    return qlinear("QLinearAdd", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                   {"a": [3, 4], "b": [3, 4]},
                   {"as": np.float32(0.05), "az": np.int8(1), "bs": np.float32(0.02),
                    "bz": np.int8(-2), "ys": np.float32(0.1), "yz": np.int8(4)})


def _op(proto, kind):
    return next(op for op in operations(proto) if op.kind == kind)


def _lowered(proto, kind):
    return lower(_op(proto, kind), proto)


ACCEPTED = [
    # (id, model, kind, kernel, rows, cols, output shape, some parameters)
    ("softmax-last-axis", lambda: qdq_softmax(), "Softmax", "softmax", 6, 5, (2, 3, 5),
     dict(x_scale=pytest.approx(0.05), y_scale=1 / 256, y_zp=-128)),
    ("softmax-trailing-ones", lambda: qdq_softmax((1, 10, 1, 1), axis=1), "Softmax",
     "softmax", 1, 10, (1, 10, 1, 1), {}),
    ("softmax-opset-11-flattens", lambda: qdq_softmax((2, 3, 4), axis=None, opset=11),
     "Softmax", "softmax", 2, 12, (2, 3, 4), {}),
    ("softmax-uint8-out", lambda: qdq_softmax(zp=np.uint8(0)), "Softmax", "softmax", 6, 5,
     (2, 3, 5), dict(y_zp=0)),
    ("argmax-keepdims", lambda: argmax_model(), "ArgMax", "argmax", 4, 6, (4, 1),
     dict(select_last_index=0)),
    ("argmax-no-keepdims", lambda: argmax_model(keepdims=0), "ArgMax", "argmax", 4, 6, (4,),
     {}),
    ("argmax-int32-direct", lambda: argmax_model(dtype=TensorProto.INT32, dequantised=False),
     "ArgMax", "argmax", 4, 6, (4, 1), {}),
    ("add-qdq", lambda: qdq_add(), "Add", "add", 2, 8, (2, 8),
     dict(a_zp=3, b_zp=-5, y_zp=1, relu=False)),
    ("add-qdq-relu", lambda: qdq_add(relu=True), "Add", "add", 2, 8, (2, 8), dict(relu=True)),
    ("qlinear-softmax", qlinear_softmax, "QLinearSoftmax", "softmax", 4, 9, (4, 9),
     dict(x_scale=pytest.approx(0.1), y_scale=1 / 256, y_zp=-128)),
    ("qlinear-add", qlinear_add, "QLinearAdd", "add", 3, 4, (3, 4),
     dict(a_zp=1, b_zp=-2, y_zp=4, b_scale=pytest.approx(0.02))),
]


@pytest.mark.parametrize("build, kind, kernel, rows, cols, shape, params",
                         [pytest.param(*r[1:], id=r[0]) for r in ACCEPTED])
def test_the_kernels_take_these_operations(build, kind, kernel, rows, cols, shape, params):
    got = _lowered(build(), kind)
    assert isinstance(got, CoreOp), got
    assert (got.kernel, got.rows, got.cols, got.output_shape) == (kernel, rows, cols, shape)
    for k, v in params.items():
        assert got.params[k] == v, k


REFUSED = [
    # (id, model, kind, key words of the reason)
    ("softmax-not-last-axis", lambda: qdq_softmax(axis=1), "Softmax",
     ["axis 1", "last axis"]),
    ("softmax-float-read", lambda: qdq_softmax(float_out=True), "Softmax",
     ["float result is read", "writes int8"]),
    ("softmax-scale-per-channel", lambda: qdq_softmax(
        scale=np.full(5, 0.05, np.float32)), "Softmax", ["one per channel", "one per tensor"]),
    ("argmax-not-last-axis", lambda: argmax_model(axis=0), "ArgMax", ["axis 0", "last axis"]),
    ("argmax-float-input", lambda: argmax_model(dtype=F, dequantised=False), "ArgMax",
     ["its input is float32", "int8 or uint8 or int32"]),
    ("add-broadcast", lambda: qdq_add((1, 8)), "Add", ["broadcasts [2, 8] with [1, 8]",
                                                       "one shape"]),
    ("add-per-channel", lambda: qdq_add(b_scale=np.full(8, 0.07, np.float32)), "Add",
     ["second input's scale is one per channel"]),
    ("add-scale-past-the-multiplier", lambda: qdq_add(b_scale=np.float32(1e6)), "Add",
     ["add 'add'", "past the kernel's largest multiplier"]),
    ("softmax-output-scale-tiny", lambda: _with(qdq_softmax(), "ys", np.float32(1e-9)),
     "Softmax",
     ["softmax 'softmax'", "below 2**-16"]),
]


def _with(proto, name, value):
    """`proto` with initialiser `name` set to `value`."""
    for k, t in enumerate(proto.graph.initializer):
        if t.name == name:
            proto.graph.initializer[k].CopyFrom(numpy_helper.from_array(np.asarray(value),
                                                                        name))
    return proto


@pytest.mark.parametrize("build, kind, words", [pytest.param(*r[1:], id=r[0])
                                                for r in REFUSED])
def test_the_core_says_why_it_refuses(build, kind, words):
    got = _lowered(build(), kind)
    assert isinstance(got, str), got
    for w in words:
        assert w in got, (w, got)


def test_the_core_has_no_conv_kernel():
    from systolica.models import onnx_zoo
    proto = onnx_zoo.qdq_cnn()
    op = next(op for op in operations(proto) if op.kind == "Conv")
    assert lower(op, proto) == "the core has no Conv kernel"


def test_the_core_library_is_merged_for_chips_with_the_core():
    """One file of core cycles for every chip with the core, at each chip's clock;
    a chip without the core (the Gowin presets) has none, and the assigner says so."""
    tiny = library.load(preset("tiny"))
    assert set(tiny.kinds["core"]) >= {"softmax", "argmax", "add", "requantise"}
    cycles = tiny.core_cycles["softmax"]
    assert tiny.kinds["core"]["softmax"] == [(w, c / tiny.clock_hz) for w, c in cycles]
    assert [w for w, _ in cycles] == sorted(w for w, _ in cycles)
    assert all(c2 > c1 for (_, c1), (_, c2) in zip(cycles, cycles[1:]))
    gowin = library.load(preset("tangnano9k"))
    assert "core" not in gowin.kinds and "no management core" in gowin.no_core
    assert "core" not in library.load(preset("tiny")).to_json()["kinds"]


def test_the_core_library_is_fresh():
    """A change to the firmware's kernels must come with the core's points measured
    again: systolica library --core."""
    import json
    raw = json.loads(library.CORE_DATA.read_text())
    assert raw["fingerprint"] == library.core_fingerprint(), "systolica library --core"


def test_a_missing_or_broken_core_library_says_how_to_make_it(tmp_path, monkeypatch):
    monkeypatch.setattr(library, "CORE_DATA", tmp_path / "none.json")
    lib = library.load(preset("tiny"))
    assert "core" not in lib.kinds and "systolica library --core" in lib.no_core
    (tmp_path / "bad.json").write_text("{")
    monkeypatch.setattr(library, "CORE_DATA", tmp_path / "bad.json")
    with pytest.raises(CompileError, match="core's function library.*cannot be read.*"
                                           "systolica library --core"):
        library.load(preset("tiny"))


def test_an_operand_the_chip_made_reaches_the_core_in_place():
    """The core reads the chip's DRAM where the chip left it: no transfer; from the
    host, the host's copy; from the core, the host copies without a layout change."""
    lib = library.load(preset("tiny"))
    add = qdq_add()
    nodes = [helper.make_node("QuantizeLinear", [f"{v}_f", f"{v}s", f"{v}z"], [v],
                              name=f"q_{v}") for v in "ab"] + list(add.graph.node)
    proto = _model(nodes, [("a_f", F, [2, 8]), ("b_f", F, [2, 8])], "y",
                   {t.name: numpy_helper.to_array(t) for t in add.graph.initializer})
    ops = operations(proto)
    add = next(op for op in ops if op.kind == "Add")
    preds = {k: ops[k].bytes_out for k in add.preds}
    assert len(preds) == 2 and all(preds.values())
    assert _transfer(add, "core", ops, {k: "chip" for k in add.preds}, lib) == 0.0
    host = sum(lib.transfer_seconds("host", n) for n in preds.values())
    assert _transfer(add, "core", ops, {k: "host" for k in add.preds}, lib) == \
        pytest.approx(host)
    assert _transfer(add, "host", ops, {k: "core" for k in add.preds}, lib) == \
        pytest.approx(host)
    assert math.isclose(_transfer(add, "host", ops, {k: "chip" for k in add.preds}, lib),
                        host + sum(lib.transfer_seconds("chip", n) for n in preds.values()))


@pytest.mark.slow
def test_a_chip_files_chip_with_the_core_gets_its_points():
    """A chip without a library file (measured as it is planned) has the core's points
    too, or says why not."""
    from systolica.compiler.assignment import calibrate
    lib = calibrate.library_for(preset("tiny").replace(name="mine_core", dram_words=8192))
    assert lib.core_cycles == library.load(preset("tiny")).core_cycles and lib.kinds["core"]
    none = calibrate.library_for(preset("tangnano9k").replace(name="mine_gowin"))
    assert "core" not in none.kinds and "no management core" in none.no_core
