"""The core's kernels, as ``core_kernels`` states their integer algorithms (the firmware
equals that statement: ``test_core_kernels``), against onnxruntime running the ONNX
operator each one stands for, as a single-node QDQ model (``DequantizeLinear``, the
operator in float, ``QuantizeLinear``; graph optimisations off, so nothing is fused).

The bounds (int8 steps): argmax 0 (it compares the integers, as the float values
compare); requantise, add and softmax 1. The kernels approximate the real result to
well under half a step (the requantisation's and the add's multipliers to 2**-16 and
2**-20 relative; the softmax's table to 2**-30, its sum and reciprocal likewise) and
round half up where onnxruntime rounds half to even, in float32: the two roundings of
nearly one real number differ by at most one step, and only near a half
(``test_softmax_rounds_a_half_up`` is one: 512 equal inputs at an output scale of
1/256 make 0.5 exactly). Each case counts how many values differ."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from systolica.firmware import core_kernels
from systolica.firmware.core_kernels import RANGE, ElemType, array_view

ONNX_TYPE = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8,
             "int32": TensorProto.INT32, "int64": TensorProto.INT64}


def f32(x: float) -> float:
    """The scale as ONNX holds it (float32), so both sides use the same number."""
    return float(np.float32(x))


def run_onnx(nodes, inputs: dict[str, np.ndarray], output: str, out_type: str,
             inits: dict[str, np.ndarray], out_shape) -> np.ndarray:
    graph = helper.make_graph(
        nodes, "kernel",
        [helper.make_tensor_value_info(n, ONNX_TYPE[str(v.dtype)], v.shape)
         for n, v in inputs.items()],
        [helper.make_tensor_value_info(output, ONNX_TYPE[out_type], out_shape)],
        [numpy_helper.from_array(v, n) for n, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), opts,
                                   providers=["CPUExecutionProvider"])
    return session.run([output], inputs)[0]


def quant(name: str, scale: float, zp: int, dtype: str) -> dict[str, np.ndarray]:
    return {f"{name}_s": np.array(f32(scale), np.float32),
            f"{name}_zp": np.array(zp, dtype)}


def random(rng, shape, dtype: str, spread: int | None = None) -> np.ndarray:
    lo, hi = RANGE[core_kernels.BY_NAME[dtype]]
    if spread is not None:
        mid = (lo + hi) // 2
        lo, hi = max(lo, mid - spread), min(hi, mid + spread)
    return rng.integers(lo, hi, shape, endpoint=True).astype(dtype)


NEAR_HALF = 0.01


def agreement(ours: np.ndarray, theirs: np.ndarray, exact: np.ndarray | None = None) -> int:
    """How many values differ. With `exact` (the real result in steps, before rounding
    and clamping): none by more than a step, and only where `exact` lies within
    NEAR_HALF of a half, where the two roundings part (the kernel's half up, and its
    approximation of the real number, against onnxruntime's half to even in float32).
    Without it: none."""
    diff = np.abs(ours.astype(np.int64) - theirs.astype(np.int64))
    if exact is None:
        assert not diff.any(), f"{np.count_nonzero(diff)} values differ"
        return 0
    assert diff.max(initial=0) <= 1, f"differs by {diff.max()} steps"
    frac = exact - np.floor(exact)
    apart = (diff > 0) & (np.abs(frac - 0.5) >= NEAR_HALF)
    assert not apart.any(), \
        f"{np.count_nonzero(apart)} values differ away from a half, e.g. exact " \
        f"{exact[apart][:4]}, ours {ours[apart][:4]}, onnxruntime {theirs[apart][:4]}"
    return int(np.count_nonzero(diff))


def scaled(x: np.ndarray, scale: float, zp: int) -> np.ndarray:
    return f32(scale) * (x.astype(np.float64) - zp)


# (x type, y type, x scale, y scale, y zero point, rows, cols)
SOFTMAX = [
    ("int8", "int8", 0.05, 1 / 256, -128, 64, 10),
    ("int8", "uint8", 0.1, 1 / 256, 0, 64, 10),
    ("uint8", "int8", 0.02, 1 / 255, -128, 64, 33),
    ("int8", "int8", 0.25, 1 / 128, -100, 32, 64),
    ("int8", "int8", 0.003, 1 / 256, -128, 32, 16),
    ("int8", "int8", 0.08, 1 / 256, -128, 4, 1000),       # an ImageNet classifier's
    ("int8", "uint8", 0.5, 0.01, 3, 64, 5),
]


@pytest.mark.parametrize("x_type, y_type, x_scale, y_scale, y_zp, rows, cols", SOFTMAX)
def test_softmax_against_onnxruntime(x_type, y_type, x_scale, y_scale, y_zp, rows, cols):
    rng = np.random.default_rng(cols * 1000 + rows)
    x = random(rng, (rows, cols), x_type, spread=80)
    x_zp = 3 if x_type == "int8" else 130
    inits = quant("x", x_scale, x_zp, x_type) | quant("y", y_scale, y_zp, y_type)
    theirs = run_onnx([helper.make_node("DequantizeLinear", ["x", "x_s", "x_zp"], ["xf"]),
                       helper.make_node("Softmax", ["xf"], ["yf"], axis=-1),
                       helper.make_node("QuantizeLinear", ["yf", "y_s", "y_zp"], ["y"])],
                      {"x": x}, "y", y_type, inits, [rows, cols])
    desc = core_kernels.softmax(array_view(0, x.shape, x_type),
                                array_view(0, x.shape, y_type), rows=rows, cols=cols,
                                x_scale=f32(x_scale), y_scale=f32(y_scale), y_zp=y_zp)
    ours = core_kernels.compute(desc, {"x": x})
    z = scaled(x, x_scale, x_zp)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    agreement(ours, theirs, y_zp + e / e.sum(axis=1, keepdims=True) / f32(y_scale))


def test_softmax_rounds_a_half_up():
    """512 equal inputs: each probability is 1/512, 0.5 steps of 1/256 exactly. The
    kernel rounds it up, onnxruntime to even (down): the one place they differ by a
    step on an exact input."""
    x = np.zeros((1, 512), np.int8)
    theirs = run_onnx([helper.make_node("DequantizeLinear", ["x", "x_s", "x_zp"], ["xf"]),
                       helper.make_node("Softmax", ["xf"], ["yf"], axis=-1),
                       helper.make_node("QuantizeLinear", ["yf", "y_s", "y_zp"], ["y"])],
                      {"x": x}, "y", "int8",
                      quant("x", 0.1, 0, "int8") | quant("y", 1 / 256, -128, "int8"), [1, 512])
    desc = core_kernels.softmax(array_view(0, x.shape), array_view(0, x.shape), rows=1,
                                cols=512, x_scale=f32(0.1), y_scale=f32(1 / 256), y_zp=-128)
    ours = core_kernels.compute(desc, {"x": x})
    assert set(ours.ravel()) == {-127} and set(theirs.ravel()) == {-128}


# (x type, y type, x scale, x zp, y scale, y zp, relu)
REQUANTISE = [
    ("int8", "int8", 0.1, 5, 0.07, -3, False),
    ("uint8", "int8", 0.02, 128, 0.05, 0, False),
    ("int8", "uint8", 0.3, -7, 0.2, 100, True),
    ("int32", "int8", 0.0003, 0, 0.05, 2, False),
    ("int32", "uint8", 1e-5, 0, 0.04, 10, True),
    ("int8", "int8", 1.0, 0, 0.013, 0, False),             # a ratio above 1: saturation
]


@pytest.mark.parametrize("x_type, y_type, x_scale, x_zp, y_scale, y_zp, relu", REQUANTISE)
def test_requantise_against_onnxruntime(x_type, y_type, x_scale, x_zp, y_scale, y_zp, relu):
    rng = np.random.default_rng(abs(y_zp) + 17)
    shape = (64, 48)
    x = random(rng, shape, x_type, spread=4000 if x_type == "int32" else None)
    nodes = [helper.make_node("DequantizeLinear", ["x", "x_s", "x_zp"], ["xf"])]
    if relu:
        nodes.append(helper.make_node("Relu", ["xf"], ["xr"]))
    nodes.append(helper.make_node("QuantizeLinear", ["xr" if relu else "xf", "y_s", "y_zp"],
                                  ["y"]))
    theirs = run_onnx(nodes, {"x": x}, "y", y_type,
                      quant("x", x_scale, x_zp, x_type) | quant("y", y_scale, y_zp, y_type),
                      list(shape))
    desc = core_kernels.requantise(array_view(0, shape, x_type), array_view(0, shape, y_type),
                                   rows=shape[0], cols=shape[1], x_scale=f32(x_scale),
                                   x_zp=x_zp, y_scale=f32(y_scale), y_zp=y_zp, relu=relu)
    agreement(core_kernels.compute(desc, {"x": x}), theirs,
              y_zp + scaled(x, x_scale, x_zp) / f32(y_scale))


# (a scale, b scale, y scale, zero points a, b, y, y type, b broadcast, relu)
ADD = [
    (0.1, 0.1, 0.2, (0, 0, 0), "int8", None, False),
    (0.05, 0.2, 0.1, (3, -9, 4), "int8", None, False),
    (0.013, 0.5, 0.07, (-128, 20, -5), "int8", "row", True),
    (0.3, 0.002, 0.01, (0, 0, 0), "uint8", "column", False),   # saturates often
    (0.02, 0.03, 0.9, (1, 2, 3), "int8", None, False),          # small ratios
]


@pytest.mark.parametrize("a_scale, b_scale, y_scale, zps, y_type, broadcast, relu", ADD)
def test_add_against_onnxruntime(a_scale, b_scale, y_scale, zps, y_type, broadcast, relu):
    rng = np.random.default_rng(int(a_scale * 1000))
    rows, cols = 64, 40
    b_shape = {None: (rows, cols), "row": (1, cols), "column": (rows, 1)}[broadcast]
    a, b = random(rng, (rows, cols), "int8"), random(rng, b_shape, "int8")
    y_zp = zps[2] if y_type == "int8" else zps[2] + 128
    inits = (quant("a", a_scale, zps[0], "int8") | quant("b", b_scale, zps[1], "int8")
             | quant("y", y_scale, y_zp, y_type))
    nodes = [helper.make_node("DequantizeLinear", ["a", "a_s", "a_zp"], ["af"]),
             helper.make_node("DequantizeLinear", ["b", "b_s", "b_zp"], ["bf"]),
             helper.make_node("Add", ["af", "bf"], ["yf"])]
    if relu:
        nodes.append(helper.make_node("Relu", ["yf"], ["yr"]))
    nodes.append(helper.make_node("QuantizeLinear", ["yr" if relu else "yf", "y_s", "y_zp"],
                                  ["y"]))
    theirs = run_onnx(nodes, {"a": a, "b": b}, "y", y_type, inits, [rows, cols])
    b_view = {None: array_view(0, b_shape), "row": ElemType.INT8,
              "column": ElemType.INT8}[broadcast]
    if broadcast == "row":
        b_view = core_kernels.View(0, ElemType.INT8, 0, cols, 0, 1)
    elif broadcast == "column":
        b_view = core_kernels.View(0, ElemType.INT8, 1, cols, 0, 0)
    desc = core_kernels.add(array_view(0, (rows, cols)), b_view,
                            array_view(0, (rows, cols), y_type), rows=rows, cols=cols,
                            a_scale=f32(a_scale), a_zp=zps[0], b_scale=f32(b_scale),
                            b_zp=zps[1], y_scale=f32(y_scale), y_zp=y_zp, relu=relu)
    ours = core_kernels.compute(desc, {"a": a, "b": np.broadcast_to(b, (rows, cols))})
    agreement(ours, theirs, y_zp + (scaled(a, a_scale, zps[0]) + scaled(
        np.broadcast_to(b, (rows, cols)), b_scale, zps[1])) / f32(y_scale))
    # the broadcast view reads what numpy's broadcasting reads
    dram = bytearray(4096)
    dram[:b.size] = b.tobytes()
    assert np.array_equal(b_view.read(dram, rows, cols), np.broadcast_to(b, (rows, cols)))


@pytest.mark.parametrize("x_type", ["int8", "uint8", "int32"])
@pytest.mark.parametrize("select_last", [0, 1])
def test_argmax_against_onnxruntime(x_type, select_last):
    rng = np.random.default_rng(5)
    rows, cols = 64, 30
    x = random(rng, (rows, cols), x_type, spread=6)       # many ties
    theirs = run_onnx([helper.make_node("ArgMax", ["x"], ["y"], axis=-1, keepdims=1,
                                        select_last_index=select_last)],
                      {"x": x}, "y", "int64", {}, [rows, 1])
    desc = core_kernels.argmax(array_view(0, x.shape, x_type),
                               array_view(0, (rows, 1), "int64"), rows=rows, cols=cols,
                               select_last_index=bool(select_last))
    agreement(core_kernels.compute(desc, {"x": x}), theirs)
