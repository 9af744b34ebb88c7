"""Where the chip's int8 results part from onnxruntime's, layer by layer, on a
SqueezeNet-like model (docs/notes/onnx-agreement.md records a run and what it shows).

The model is ONNX's ``light_squeezenet`` test model (SqueezeNet 1.1's graph, shipped
with the onnx package) with seeded He-initialised weights in place of its constants,
its Dropout dropped and cut before its Softmax (the output is the global pool's),
quantised by onnxruntime's ``quantize_static`` (int8, calibrated on seeded uniform
inputs) in the QDQ form (per tensor, per channel) and in the QOperator form. The chip
side is the importer's graph run by the numpy reference (which the golden model and
the RTL equal bit for bit); the ONNX side is onnxruntime with its graph optimisations
off (``onnx_zoo.runtime_session``), every int8 tensor exposed as an output.

For every layer it compares, on the same input images:

* isolated: the chip's layer fed onnxruntime's int8 inputs against onnxruntime's
  output (the layer's own rounding, nothing propagated);
* end to end: the chip's whole graph against onnxruntime's (rounding plus what the
  layers before amplified);
* the variants of the requantisation (``VARIANTS``), each switching one cause off,
  isolated and end to end: a shift per channel, an Add's ratio as int8 weights times
  a 16-bit VRUN multiplier, 24-bit multipliers, the exact scale rounded half up, the
  exact scale rounded half to even (ONNX's definition), onnxruntime's float32
  arithmetic;
* per layer, how far apart the two requantisations can be for any input: the bound
  ``k = 1 + floor(e)`` from the multiplier's error ``e`` in steps, and an exhaustive
  check (every operand pair of an Add, every sum of a global pool, every in-range
  accumulator of a convolution's worst channels);
* the gain of each layer: the worst case ``max_c S_c * sum|W_c|``, its mean over
  channels, and the measured one (the mean difference the layer made of the mean
  difference it was fed, with no rounding difference of its own);
* both sides against the float model the quantiser started from (QDQ forms), in
  steps of each value;
* with both ``qdq`` and ``qop``: onnxruntime's QDQ model against its QOperator one.

Run from the repository root (a minute or two for SqueezeNet at 224 x 224, three
forms, four images)::

    .venv/bin/python docs/notes/onnx_agreement_experiment.py [--model squeezenet]
        [--size 224] [--images 4] [--forms qdq,qdq-pc,qop] [--json FILE]

``--model resnet`` (``--size 32``) and ``--model mobilenet`` take
``onnx_zoo.float_resnet`` and ``float_mobilenet`` instead, for their Adds (QDQ forms
only: the QOperator form of a Gemm is onnxruntime's QGemm, which the importer does
not take).

It reads the importer's private ``_Importer`` for the map from ONNX values to graph
tensors: an experiment, not an interface.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, version_converter

from systolica.compiler.frontend import onnx_import
from systolica.compiler.graph import reference
from systolica.compiler.graph.graph import (
    Add,
    Concat,
    Conv2d,
    Dense,
    Flatten,
    GlobalAvgPool,
    MaxPool2d,
    Transpose,
)
from systolica.models import onnx_zoo

# -- the model --------------------------------------------------------------------------


def squeezenet_float(seed: int = 0, size: int = 224) -> onnx.ModelProto:
    """ONNX's light SqueezeNet as a float opset-13 model with seeded weights: each
    ConstantOfShape weight a He-initialised normal array (std ``sqrt(2 / fan_in)``),
    each such bias normal with std 0.05; no Dropout; the output the global pool's
    ``(1, 1000, 1, 1)``; the input ``(1, 3, size, size)``."""
    import onnx.backend.test as backend_test
    src = Path(backend_test.__file__).parent / "data/light/light_squeezenet.onnx"
    m = onnx.load(str(src))
    rng = np.random.default_rng(seed)
    g = m.graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    inits = [t for t in g.initializer if not t.name.endswith("__SHAPE")]
    nodes, rewire, cut = [], {}, None
    for n in g.node:
        if n.op_type == "ConstantOfShape":
            shape = tuple(int(d) for d in consts[n.input[0]])
            std = np.sqrt(2 / np.prod(shape[1:])) if len(shape) == 4 else 0.05
            inits.append(numpy_helper.from_array(
                (rng.standard_normal(shape) * std).astype(np.float32), n.output[0]))
        elif n.op_type == "Dropout":            # inference: the identity
            rewire[n.output[0]] = n.input[0]
        elif n.op_type == "Softmax":
            cut = n.input[0]
        else:
            nodes.append(n)
    for n in nodes:
        n.input[:] = [rewire.get(v, v) for v in n.input]
    x = helper.make_tensor_value_info("data_0", TensorProto.FLOAT, [1, 3, size, size])
    y = helper.make_tensor_value_info(cut, TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph(nodes, "squeezenet", [x], [y], inits),
                              opset_imports=list(m.opset_import))
    model.ir_version = 8
    return version_converter.convert_version(model, 13)


def quantised(model: onnx.ModelProto, form: str, *, seed: int = 1,
              samples: int = 4) -> onnx.ModelProto:
    """`model` through ``quant_pre_process`` and ``quantize_static`` (int8 activations
    and weights, seeded uniform calibration inputs in [0, 1)): `form` ``qdq`` (a scale
    per tensor), ``qdq-pc`` (weights per channel) or ``qop`` (the QOperator form)."""
    path = list(sys.path)
    try:                        # its first import puts a directory on sys.path
        from onnxruntime.quantization import (
            CalibrationDataReader,
            QuantFormat,
            QuantType,
            quantize_static,
        )
        from onnxruntime.quantization.shape_inference import quant_pre_process
    finally:
        sys.path[:] = path
    vi = model.graph.input[0]
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)

    class Samples(CalibrationDataReader):
        def __init__(self):
            self.left = iter([{vi.name: rng.random(shape, dtype=np.float32)}
                              for _ in range(samples)])

        def get_next(self):
            return next(self.left, None)

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            src, pre, dst = (Path(tmp) / f for f in ("f.onnx", "pre.onnx", "q.onnx"))
            onnx.save(model, src)
            quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
            quantize_static(str(pre), str(dst), Samples(),
                            quant_format=QuantFormat.QOperator if form == "qop"
                            else QuantFormat.QDQ,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                            per_channel=form == "qdq-pc")
            return onnx.load(str(dst))
    finally:
        root.setLevel(level)


# -- the two sides' models --------------------------------------------------------------


def _consts(model) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def qop_int8(model: onnx.ModelProto) -> onnx.ModelProto:
    """A QOperator model from its first QuantizeLinear's output to its last
    DequantizeLinear's input: int8 in and out, as the importer takes it."""
    g = model.graph
    q = next(n for n in g.node if n.op_type == "QuantizeLinear")
    dq = next(n for n in g.node if n.op_type == "DequantizeLinear")
    shape = [d.dim_value for d in g.input[0].type.tensor_type.shape.dim]
    nodes = [n for n in g.node if n is not q and n is not dq]
    graph = helper.make_graph(
        nodes, g.name, [helper.make_tensor_value_info(q.output[0], TensorProto.INT8, shape)],
        [helper.make_tensor_value_info(dq.input[0], TensorProto.INT8, None)],
        list(g.initializer))
    out = helper.make_model(graph, opset_imports=list(model.opset_import))
    out.ir_version = model.ir_version
    return out


def qlinearconcat_as_convs(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxruntime's ``QLinearConcat`` (which the importer does not take) as the QDQ
    fold writes a join of branches quantised otherwise: each such branch requantised
    by an identity 1x1 ``QLinearConv`` (``onnx_import.fold_qdq``), then a Concat."""
    g = model.graph
    consts = _consts(model)
    made = {o: n for n in g.node for o in n.output}
    nodes, inits = [], list(g.initializer)
    for n in g.node:
        if n.op_type != "QLinearConcat":
            nodes.append(n)
            continue
        y_s, y_zp, ins = n.input[0], n.input[1], []
        for k in range(2, len(n.input), 3):
            v, s, zp = n.input[k:k + 3]
            if consts[s] == consts[y_s] and consts[zp] == consts[y_zp]:
                ins.append(v)
                continue
            c = consts[made[v].input[3]].shape[0]      # a QLinearConv's output channels
            w, one, zero = (f"{n.output[0]}__r{k}_{t}" for t in ("w", "one", "zero"))
            inits += [numpy_helper.from_array(np.eye(c, dtype=np.int8)[:, :, None, None], w),
                      numpy_helper.from_array(np.float32(1), one),
                      numpy_helper.from_array(np.int8(0), zero)]
            r = f"{n.output[0]}__requant{k}"
            nodes.append(helper.make_node("QLinearConv", [v, s, zp, w, one, zero, y_s, y_zp],
                                          [r], name=r))
            ins.append(r)
        nodes.append(helper.make_node("Concat", ins, list(n.output), name=n.name, axis=1))
    graph = helper.make_graph(nodes, g.name, list(g.input), list(g.output), inits)
    out = helper.make_model(graph, opset_imports=list(model.opset_import))
    out.ir_version = model.ir_version
    return out


def every_int8_value(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """`model` with every int8 value a node makes among its outputs (onnxruntime
    computes each on its own with the graph optimisations off), and their names. A
    value whose type shape inference does not know (after an operator of onnxruntime's
    own domain) is taken as int8: in the QOperator form every value is."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {vi.name: vi.type.tensor_type.elem_type
             for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    have = {o.name for o in model.graph.output}
    names = [o for n in model.graph.node for o in n.output
             if types.get(o, TensorProto.INT8) == TensorProto.INT8 and o not in have]
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.output.extend(helper.make_tensor_value_info(v, TensorProto.INT8, None)
                            for v in names)
    return out, names


# -- what ONNX means by each requantising layer ---------------------------------------


class Spec:
    """One requantising ONNX node as exact numbers: ``kind`` (conv, gap or add), the
    float32 scales it reads (``x_s``, ``w_s`` per output channel, ``y_s``; an Add's
    ``a_s``, ``b_s``), ``S`` the float64 value of ``x_s * w_s / y_s`` (of ``x_s / (y_s
    * H * W)`` for a global pool) and the output's zero point."""

    def __init__(self, kind, **kw):
        self.kind = kind
        self.__dict__.update(kw)


def onnx_specs(model: onnx.ModelProto) -> dict[str, Spec]:
    """A Spec per output value of every QLinearConv, QLinearMatMul, QLinearAdd and
    QLinearGlobalAveragePool of the QOperator model `model` (the QDQ form folded)."""
    c = _consts(model)
    specs = {}
    for n in model.graph.node:
        if n.op_type == "QLinearConv":
            x_s, w_s, y_s = (np.float32(c[n.input[k]]) for k in (1, 4, 6))
            w_s = np.atleast_1d(w_s).astype(np.float32)
            specs[n.output[0]] = Spec("conv", x_s=x_s, w_s=w_s, y_s=y_s,
                                      S=w_s.astype(np.float64) * float(x_s) / float(y_s),
                                      zp=int(c[n.input[7]]))
        elif n.op_type == "QLinearMatMul":
            x_s, w_s, y_s = (np.float32(c[n.input[k]]) for k in (1, 4, 6))
            w_s = np.atleast_1d(w_s).astype(np.float32)
            specs[n.output[0]] = Spec("matmul", x_s=x_s, w_s=w_s, y_s=y_s,
                                      S=w_s.astype(np.float64) * float(x_s) / float(y_s),
                                      zp=int(c[n.input[7]]))
        elif n.op_type == "QLinearAdd":
            a_s, b_s, y_s = (np.float32(c[n.input[k]]) for k in (1, 4, 6))
            specs[n.output[0]] = Spec("add", a_s=a_s, b_s=b_s, y_s=y_s,
                                      Sa=float(a_s) / float(y_s), Sb=float(b_s) / float(y_s),
                                      zp=int(c[n.input[7]]))
        elif n.op_type == "QLinearGlobalAveragePool":
            x_s, y_s = np.float32(c[n.input[1]]), np.float32(c[n.input[3]])
            specs[n.output[0]] = Spec("gap", x_s=x_s, y_s=y_s, S=float(x_s) / float(y_s),
                                      zp=int(c[n.input[4]]))
    return specs


# -- the chip's requantisation and its variants -------------------------------------------

#: Each variant changes only how a Conv2d, a GlobalAvgPool or an Add requantises; the
#: others move int8 values as the chip does.
VARIANTS = {
    "chip": "what the chip does: a 16-bit mult per channel over one shift per layer, "
            "half up; an Add's 8-bit multipliers over a common shift",
    "shift_pc": "a convolution's shift per channel (the VPU's parameter rows hold one "
                "already), so every channel's mult is 16 bits",
    "add_vrun": "an Add's ratio as int8 weights (the best fraction) times a 16-bit VRUN "
                "mult",
    "mult24": "24-bit multipliers, a shift per channel (an RTL change)",
    "exact_up": "the exact scale, rounded half up",
    "exact_even": "the exact scale, rounded half to even (ONNX's definition)",
    "ort_f32": "float32 scale product and multiply, half to even (onnxruntime's "
               "QLinearConv)",
}


def fixed(scale, bits: int, own_shift: bool):
    """``(mult, shift)`` arrays with ``mult / 2**shift`` nearest `scale` (one or per
    channel) and ``mult < 2**bits``: each at its own largest shift with `own_shift`,
    else at the largest shift all fit (``ops.requant_for``'s rule for 16 bits)."""
    scale = np.atleast_1d(np.asarray(scale, np.float64))
    shift = np.floor(np.log2((2 ** bits - 1) / scale)).astype(np.int64)
    shift = np.where(np.round(scale * 2.0 ** shift) > 2 ** bits - 1, shift - 1, shift)
    if not own_shift:
        shift = np.full_like(shift, shift.min())
    shift = np.clip(shift, 0, 63)
    return np.clip(np.round(scale * 2.0 ** shift), 1, 2 ** bits - 1).astype(np.int64), shift


def add_weights(sa: float, sb: float) -> tuple[int, int, int, int]:
    """``(ma, mb, mult, shift)``: int8 weights whose ratio is the fraction of
    denominators up to 127 nearest ``sa / sb``, and a 16-bit mult with
    ``ma * mult / 2**shift ~ sa`` and ``mb * mult / 2**shift ~ sb``."""
    best = None
    for mb in range(1, 128):
        ma = round(mb * sa / sb)
        if 1 <= ma <= 127:
            err = abs(ma / mb - sa / sb)
            if best is None or err < best[0] - 1e-15:
                best = (err, ma, mb)
    _, ma, mb = best
    (mult,), (shift,) = fixed((sa + sb) / (ma + mb), 16, True)
    return ma, mb, int(mult), int(shift)


def _round(v: np.ndarray, how: str) -> np.ndarray:
    return np.floor(v + 0.5) if how == "up" else np.rint(v)


def _out(y: np.ndarray, zp: int, relu: bool, relu6=None) -> np.ndarray:
    y = np.clip(y.astype(np.int64) + zp, -128, 127)
    if relu:
        y = np.maximum(y, zp)
    if relu6 is not None:
        y = np.minimum(y, relu6)
    return y.astype(np.int8)


def conv_variant(acc: np.ndarray, op, spec: Spec, variant: str) -> np.ndarray:
    """The int8 output of `op` (a Conv2d or a Dense) from its int32 accumulator
    (bias included) under `variant`; ``chip`` is the reference's."""
    if variant in ("chip", "add_vrun"):
        if isinstance(op, Dense):
            return reference.requantise(acc, op.mult, op.shift, op.zp, op.relu)
        return reference.conv2d_output(acc, op)
    S = np.broadcast_to(spec.S, (acc.shape[-1],))
    if variant in ("shift_pc", "mult24"):
        mult, shift = fixed(S, 16 if variant == "shift_pc" else 24, True)
        y = reference.scale_down(acc, mult, shift)
    elif variant == "ort_f32":
        s32 = (spec.x_s * np.broadcast_to(spec.w_s, S.shape)).astype(np.float32) / spec.y_s
        y = np.rint(acc.astype(np.float32) * s32.astype(np.float32))
    else:
        y = _round(acc * S, variant.split("_")[1])
    return _out(y, op.zp, op.relu, getattr(op, "relu6", None))


def gap_variant(x, x_zp, op: GlobalAvgPool, spec: Spec, variant: str) -> np.ndarray:
    if variant in ("chip", "add_vrun", "shift_pc"):
        return reference.global_avg_pool(x, x_zp, op)
    total = (x.astype(np.int64) - x_zp).sum(axis=(1, 2), keepdims=True)
    S = spec.S / (x.shape[1] * x.shape[2])
    if variant == "mult24":
        mult, shift = fixed(S, 24, True)
        y = reference.scale_down(total, mult[0], shift[0])
    elif variant == "ort_f32":
        s32 = np.float32(spec.x_s / np.float32(spec.y_s * np.float32(x.shape[1] * x.shape[2])))
        y = np.rint(total.astype(np.float32) * s32)
    else:
        y = _round(total * S, variant.split("_")[1])
    return _out(y, op.zp if op.zp is not None else x_zp, False)


def add_variant(a, a_zp, b, b_zp, op: Add, spec: Spec, variant: str) -> np.ndarray:
    if variant in ("chip", "shift_pc"):
        return reference.add(a, a_zp, b, b_zp, op)
    da, db = a.astype(np.int64) - a_zp, b.astype(np.int64) - b_zp
    if variant == "add_vrun":
        ma, mb, mult, shift = add_weights(spec.Sa, spec.Sb)
        y = reference.scale_down(ma * da + mb * db, mult, shift)
    elif variant == "mult24":
        m, shift = fixed([spec.Sa, spec.Sb], 24, False)
        y = reference.scale_down(m[0] * da + m[1] * db, 1, shift[0])
    elif variant == "ort_f32":
        y = np.rint(np.float32(spec.a_s / spec.y_s) * da.astype(np.float32)
                    + np.float32(spec.b_s / spec.y_s) * db.astype(np.float32))
    else:
        y = _round(da * spec.Sa + db * spec.Sb, variant.split("_")[1])
    return _out(y, op.zp, op.relu)


def run_node(graph, node, xs, specs, variant):
    """`node`'s output from its inputs `xs` under `variant` (reference.evaluate's
    dispatch, the requantising ops through the variants; a Concat's requantising
    branch, which ONNX does not have as a node, stays the chip's)."""
    op = node.op
    zps = [graph.tensor(t).quant.zero_point for t in node.inputs]
    spec = specs.get(node.outputs[0])
    v = variant if spec is not None else "chip"
    if isinstance(op, Conv2d):
        return conv_variant(reference.conv2d_acc(xs[0], zps[0], op), op, spec, v)
    if isinstance(op, Dense):
        x = np.concatenate(xs, axis=1).astype(np.int64)
        acc = reference.wrap32(x @ op.weights.astype(np.int64)
                               + (0 if op.bias is None else op.bias.astype(np.int64)))
        return conv_variant(acc, op, spec, v)
    if isinstance(op, GlobalAvgPool):
        return gap_variant(xs[0], zps[0], op, spec, v)
    if isinstance(op, Add):
        return add_variant(xs[0], zps[0], xs[1], zps[1], op, spec, v)
    if isinstance(op, MaxPool2d):
        return reference.max_pool2d(xs[0], op)
    if isinstance(op, Concat):
        return np.concatenate(xs, axis=-1)
    if isinstance(op, Transpose):
        return reference.transpose(xs[0], op.perm)
    if isinstance(op, Flatten):
        return reference.flatten(xs[0])
    raise TypeError(f"no semantics here for {node.name!r} ({type(op).__name__})")


# -- bounds ----------------------------------------------------------------------------------


def step_bound(graph, node, specs) -> tuple[float, int]:
    """``(e, k)``: how far the chip's value before rounding may be from the exact one
    for any input, in steps (``e``), and so the most steps the two rounded values may
    differ by, ``k = 1 + floor(e)``. A convolution's or a pool's in-range values are
    ``|acc * S| <= 256`` (beyond, both saturate), so ``e = 256 * max_c |m_c / 2**s -
    S_c| / S_c``; an Add's operands are at most 255 from their zero points, so ``e =
    255 * (|ma / 2**s - Sa| + |mb / 2**s - Sb|)``. Nodes that only move values: (0, 0)."""
    op = node.op
    spec = specs.get(node.outputs[0])
    if isinstance(op, (Conv2d, Dense, GlobalAvgPool)):
        S = np.atleast_1d(spec.S)
        if isinstance(op, GlobalAvgPool):
            S = S / np.prod(graph.tensor(node.inputs[0]).shape[1:3])
        chip = np.asarray(op.mult, np.float64) / 2.0 ** np.asarray(op.shift, np.float64)
        e = 256 * float(np.max(np.abs(chip - S) / S))
    elif isinstance(op, Add):
        e = 255 * (abs(op.mult_a / 2 ** op.shift - spec.Sa)
                   + abs(op.mult_b / 2 ** op.shift - spec.Sb))
    elif isinstance(op, Concat):    # its requantised branches'
        return max([(0.0, 0)] + [step_bound(graph, graph.producer(t), specs)
                                 for t in node.inputs if graph.producer(t) is not None
                                 and "__requant" in graph.producer(t).name])
    else:
        return 0.0, 0
    return e, 1 + int(np.floor(e))


def exhaustive(graph, node, specs, worst_channels: int = 4) -> tuple[int, float]:
    """``(max, fraction)``: the chip's requantisation against ONNX's exact one over
    every input it can be given, the most steps they differ by and the fraction of
    inputs on which they differ. An Add: every pair of int8 operands; a global pool:
    every sum of its window; a convolution or matmul: every accumulator whose exact
    value is within the int8 range or a step past it (beyond, both saturate), for the
    `worst_channels` channels whose multiplier is furthest from their scale."""
    op = node.op
    spec = specs.get(node.outputs[0])
    if isinstance(op, Add):
        za, zb = (graph.tensor(t).quant.zero_point for t in node.inputs)
        a, b = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128))
        chip = reference.add(a.astype(np.int8), za, b.astype(np.int8), zb, op)
        exact = add_variant(a, za, b, zb, op, spec, "exact_even")
    elif isinstance(op, GlobalAvgPool):
        x_zp = graph.tensor(node.inputs[0]).quant.zero_point
        hw = int(np.prod(graph.tensor(node.inputs[0]).shape[1:3]))
        total = np.arange(hw * (-128 - x_zp), hw * (127 - x_zp) + 1)[:, None, None, None]
        zp = op.zp if op.zp is not None else x_zp
        chip = reference.average(total, zp, op.mult, op.shift)
        exact = _out(np.rint(total * (spec.S / hw)), zp, False)
    elif isinstance(op, (Conv2d, Dense)):
        S = np.broadcast_to(np.atleast_1d(spec.S), (op.weights.shape[-1],))
        mult = np.broadcast_to(np.asarray(op.mult, np.int64), S.shape)
        shift = np.broadcast_to(np.asarray(op.shift, np.int64), S.shape)
        err = np.abs(mult / 2.0 ** shift - S) / S
        worst, frac = 0, []
        for c in np.argsort(-err)[:worst_channels]:
            lim = int(np.ceil(258 / S[c]))
            acc = np.arange(-lim, lim + 1)
            chip = np.clip(reference.scale_down(acc, mult[c], shift[c]), -300, 300)
            exact = np.clip(np.rint(acc * S[c]), -300, 300)
            d = np.abs(chip - exact)
            worst = max(worst, int(d.max()))
            frac.append(float((d > 0).mean()))
        return worst, max(frac)
    elif isinstance(op, Concat):
        rows = [exhaustive(graph, graph.producer(t), specs) for t in node.inputs
                if graph.producer(t) is not None and "__requant" in graph.producer(t).name]
        return (max(r[0] for r in rows), max(r[1] for r in rows)) if rows else (0, 0.0)
    else:
        return 0, 0.0
    d = np.abs(chip.astype(np.int64) - exact.astype(np.int64))
    return int(d.max()), float((d > 0).mean())


def gains(graph, node, specs) -> tuple[float, float]:
    """``(worst, typical)`` gain of `node`: how many steps its output may move when
    each input moves by at most one, ``max_c S_c * sum|W_c|`` for a convolution
    (``S`` for a global pool, ``Sa + Sb`` for an Add, the requantised branch's for
    a Concat), and the mean over channels, what a sparse difference is amplified by
    on average."""
    op = node.op
    spec = specs.get(node.outputs[0])
    if isinstance(op, (Conv2d, Dense)):
        w = np.abs(op.weights.astype(np.int64))
        w = w.reshape(-1, w.shape[-1]).sum(axis=0)
        g = w * np.broadcast_to(spec.S, w.shape)
        return float(g.max()), float(g.mean())
    if isinstance(op, GlobalAvgPool):
        return float(spec.S), float(spec.S)
    if isinstance(op, Add):
        return float(spec.Sa + spec.Sb), float(spec.Sa + spec.Sb) / 2
    if isinstance(op, Concat):
        branch = [gains(graph, graph.producer(t), specs) for t in node.inputs
                  if graph.producer(t) is not None and "__requant" in graph.producer(t).name]
        return max([1.0] + [b[0] for b in branch]), 1.0
    return 1.0, 1.0


# -- one comparison ------------------------------------------------------------------------


class Case:
    """A quantised model, imported, and onnxruntime's session over it (and over the
    float model it was quantised from, for the QDQ forms)."""

    def __init__(self, qmodel: onnx.ModelProto, form: str, fmodel=None):
        self.form = form
        if form == "qop":
            ort_model = qop_int8(qmodel)
            chip_model = qlinearconcat_as_convs(ort_model)
        else:
            ort_model = qmodel
            chip_model = onnx_import.fold_qdq(qmodel)
        self.chip_model = chip_model
        self.input = chip_model.graph.input[0].name
        self.shape = [d.dim_value for d in chip_model.graph.input[0].type.tensor_type.shape.dim]
        self.ort_model, self.exposed = every_int8_value(ort_model)
        self.session = onnx_zoo.runtime_session(self.ort_model)
        self.specs = onnx_specs(chip_model)
        c = _consts(ort_model)
        if form == "qop":
            q = next(n for n in ort_model.graph.node if n.op_type == "QLinearConv")
            self.in_scale, self.in_zp = np.float32(c[q.input[1]]), int(c[q.input[2]])
        else:
            q = next(n for n in qmodel.graph.node if n.op_type == "QuantizeLinear"
                     and n.input[0] == qmodel.graph.input[0].name)
            self.in_scale, self.in_zp = np.float32(c[q.input[1]]), int(c[q.input[2]])
        self.first = True                       # the exhaustive checks: once
        self.float_session, self.real = None, {}
        if fmodel is not None and form != "qop":
            # each quantised value's float original, scale and zero point
            known = {o for n in fmodel.graph.node for o in n.output}
            for n in qmodel.graph.node:
                # the quantiser renames a graph output it quantises
                v = n.input[0].removesuffix("_QuantizeLinear_Input")
                if n.op_type == "QuantizeLinear" and v in known:
                    self.real[n.output[0]] = (v, float(c[n.input[1]]), int(c[n.input[2]]))
            f = onnx.ModelProto()
            f.CopyFrom(fmodel)
            del f.graph.output[:]
            f.graph.output.extend(helper.make_tensor_value_info(v, TensorProto.FLOAT, None)
                                  for v, _, _ in self.real.values())
            self.float_session = onnx_zoo.runtime_session(f)

    def image(self, rng) -> np.ndarray:
        """An int8 input image: a uniform [0, 1) one as the model's input quantises it
        (the calibration's distribution)."""
        f = rng.random(self.shape, dtype=np.float32)
        return np.clip(np.rint(f / self.in_scale) + self.in_zp, -128, 127).astype(np.int8)

    def _float_input(self, x):
        return ((x.astype(np.float32) - self.in_zp) * self.in_scale).astype(np.float32)

    def onnxruntime(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """onnxruntime's int8 values by ONNX name (maps NHWC, as the chip's)."""
        feed = x if self.form == "qop" else self._float_input(x)
        names = [o.name for o in self.ort_model.graph.output]
        outs = self.session.run(None, {self.session.get_inputs()[0].name: feed})
        got = {}
        for name, v in zip(names, outs):
            if v.dtype == np.int8:
                got[name] = np.transpose(v, (0, 2, 3, 1)) if v.ndim == 4 else v
        got[self.input] = np.transpose(x, (0, 2, 3, 1))
        return got

    def float_steps(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """The float model's values in steps of each quantised value (``v / scale +
        zp``, held to the int8 range, not rounded), NHWC, by quantised value."""
        if self.float_session is None:
            return {}
        outs = self.float_session.run(None, {self.float_session.get_inputs()[0].name:
                                             self._float_input(x)})
        got = {}
        for (q, (_, s, zp)), v in zip(self.real.items(), outs):
            v = np.clip(v.astype(np.float64) / s + zp, -128, 127)
            got[q] = np.transpose(v, (0, 2, 3, 1)) if v.ndim == 4 else v
        return got

    def compare(self, x: np.ndarray, variants=tuple(VARIANTS)) -> dict:
        """Every variant, isolated and end to end, against onnxruntime on image `x`,
        and the propagation of the chip's own differences; per ONNX value."""
        imp = onnx_import._Importer(onnx, self.chip_model, {self.input: x}, None, 0)
        graph, names = imp.graph, imp.names
        ort = self.onnxruntime(x)
        real = self.float_steps(x)
        truth = reference.evaluate(graph)
        by_tensor = {}                          # graph tensor -> ONNX value
        for v, t in names.items():
            if v in ort:
                by_tensor.setdefault(t, v)
        specs = {names[v]: s for v, s in self.specs.items() if v in names}
        nhwc_in = graph.nodes[0].outputs[0]     # the input's transpose to NHWC
        by_tensor[nhwc_in] = self.input
        result = {}
        env = {v: {nhwc_in: ort[self.input]} for v in variants}   # end to end
        iso = {v: {nhwc_in: ort[self.input]} for v in variants}   # fed onnxruntime's
        for node in graph.nodes[1:]:
            out = node.outputs[0]
            if out not in by_tensor and not isinstance(node.op, Conv2d):
                continue                        # the output's transpose to NCHW
            for v in variants:
                env[v][out] = run_node(graph, node, [env[v][t] for t in node.inputs],
                                       specs, v)
                fed = [ort[by_tensor[t]] if t in by_tensor else iso[v][t]
                       for t in node.inputs]
                iso[v][out] = run_node(graph, node, fed, specs, v)
            assert np.array_equal(env["chip"][out], truth[out]), out
            if out not in by_tensor:
                continue                        # a requantising branch of a Concat
            theirs = ort[by_tensor[out]].astype(np.int64)
            row = {"op": type(node.op).__name__, "values": int(theirs.size)}
            for v in variants:
                for how, mine in (("iso", iso[v][out]), ("e2e", env[v][out])):
                    d = np.abs(mine.astype(np.int64) - theirs)
                    row[f"{v}.{how}.differ"] = int((d > 0).sum())
                    row[f"{v}.{how}.max"] = int(d.max())
                    row[f"{v}.{how}.abs"] = int(d.sum())
            row["ties"] = int((iso["exact_up"][out] != iso["exact_even"][out]).sum())
            # what the layer did to the differences it was fed: the chip's layer on
            # its own inputs against it on onnxruntime's (no rounding of its own in it)
            d_in = np.concatenate([(env["chip"][t].astype(np.int64)
                                    - ort[by_tensor[t]]).ravel() if t in by_tensor else
                                   (env["chip"][t].astype(np.int64)
                                    - iso["chip"][t]).ravel() for t in node.inputs])
            d_prop = env["chip"][out].astype(np.int64) - iso["chip"][out].astype(np.int64)
            row["in.abs"] = int(np.abs(d_in).sum())
            row["in.values"] = int(d_in.size)
            row["in.max"] = int(np.abs(d_in).max())
            row["prop.abs"] = int(np.abs(d_prop).sum())
            row["prop.max"] = int(np.abs(d_prop).max())
            row["gain"], row["gain.mean"] = gains(graph, node, specs)
            row["eps"], row["k"] = step_bound(graph, node, specs)
            if self.first:
                row["exh.max"], row["exh.frac"] = exhaustive(graph, node, specs)
            if by_tensor[out] in real:          # both sides against the float model
                f = real[by_tensor[out]]
                row["onnx.float.abs"] = float(np.abs(theirs - f).sum())
                row["chip.float.abs"] = float(np.abs(env["chip"][out] - f).sum())
            result[by_tensor[out]] = row
        last = by_tensor[graph.producer(graph.outputs[0]).inputs[0]] \
            if graph.outputs[0] not in by_tensor else by_tensor[graph.outputs[0]]
        result[last]["top1.same"] = int(np.argmax(env["chip"][names[last]])
                                        == np.argmax(ort[last]))
        self.first = False
        self.last_ort = [ort[v] for v in result]
        return result


# -- reporting ------------------------------------------------------------------------------


def summarise(rows_per_image: list[dict]) -> dict:
    """Per ONNX value: the counts and sums added over the images, the maxima's
    maximum."""
    out = {}
    for rows in rows_per_image:
        for name, row in rows.items():
            acc = out.setdefault(name, {})
            for k, v in row.items():
                if k in ("op", "gain", "gain.mean", "eps", "k", "exh.max", "exh.frac"):
                    acc[k] = v
                elif k.endswith(".max"):
                    acc[k] = max(acc.get(k, 0), v)
                else:
                    acc[k] = acc.get(k, 0) + v
    return out


def _pct(r, key) -> str:
    return f"{100 * r[key + '.differ'] / r['values']:6.2f}% <={r[key + '.max']}"


def print_layers(title: str, summary: dict) -> None:
    print(f"\n{title}")
    print(f"{'value':<26}{'op':<14}{'chip iso':>12}{'chip e2e':>14}{'k':>3}{'eps':>8}"
          f"{'all':>4}{'all %':>8}"
          f"{'gain':>7}{'mean':>6}{'in':>8}{'amp':>6}{'onnx~f':>8}{'chip~f':>8}")
    for name, r in summary.items():
        inp = r["in.abs"] / r["in.values"]
        amp = r["prop.abs"] / r["values"] / inp if r["in.abs"] else float("nan")
        line = (f"{name[:25]:<26}{r['op']:<14}{_pct(r, 'chip.iso'):>12}"
                f"{_pct(r, 'chip.e2e'):>14}{r['k']:>3}{r['eps']:>8.4f}"
                f"{r.get('exh.max', 0):>4}{100 * r.get('exh.frac', 0):>8.3f}{r['gain']:>7.2f}"
                f"{r['gain.mean']:>6.2f}{inp:>8.4f}{amp:>6.2f}")
        if "onnx.float.abs" in r:
            line += (f"{r['onnx.float.abs'] / r['values']:>8.3f}"
                     f"{r['chip.float.abs'] / r['values']:>8.3f}")
        print(line)


def print_variants(summary: dict, variants) -> None:
    """Per variant: how many values differ from onnxruntime over every layer fed
    onnxruntime's inputs, and at the last value end to end."""
    last = list(summary.values())[-1]
    print(f"{'variant':<12}{'iso: differing':>16}{'max':>5}{'worst layer':>13}"
          f"{'e2e last':>10}{'max':>5}{'mean |d|':>10}{'e2e worst':>11}")
    for v in variants:
        n = sum(r[f"{v}.iso.differ"] for r in summary.values())
        total = sum(r["values"] for r in summary.values())
        worst = max(r[f"{v}.iso.differ"] / r["values"] for r in summary.values())
        worst_e2e = max(r[f"{v}.e2e.differ"] / r["values"] for r in summary.values())
        print(f"{v:<12}{100 * n / total:>15.4f}%"
              f"{max(r[f'{v}.iso.max'] for r in summary.values()):>5}"
              f"{100 * worst:>12.3f}%{100 * last[f'{v}.e2e.differ'] / last['values']:>9.2f}%"
              f"{last[f'{v}.e2e.max']:>5}{last[f'{v}.e2e.abs'] / last['values']:>10.3f}"
              f"{100 * worst_e2e:>10.2f}%")


MODELS = {
    "squeezenet": lambda seed, size: squeezenet_float(seed, size),
    "resnet": lambda seed, size: onnx_zoo.float_resnet(seed, size),
    "mobilenet": lambda seed, size: onnx_zoo.float_mobilenet(seed),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(MODELS), default="squeezenet")
    p.add_argument("--size", type=int, default=224, help="input height and width "
                   "(squeezenet, resnet)")
    p.add_argument("--images", type=int, default=2, help="input images per model")
    p.add_argument("--forms", default="qdq,qdq-pc,qop",
                   help="comma-separated: qdq, qdq-pc (weights per channel), qop")
    p.add_argument("--seed", type=int, default=0, help="the weights' seed")
    p.add_argument("--json", help="write every count there")
    args = p.parse_args(argv)
    fmodel = MODELS[args.model](args.seed, args.size)
    report, last_ort = {}, {}
    for form in args.forms.split(","):
        qmodel = quantised(fmodel, form)
        case = Case(qmodel, form, fmodel)
        rng = np.random.default_rng(100 + args.seed)
        rows, last_ort[form] = [], []
        for _ in range(args.images):
            rows.append(case.compare(case.image(rng)))
            last_ort[form].append(case.last_ort)
        summary = summarise(rows)
        report[form] = summary
        size = "x".join(map(str, case.shape[2:]))
        print_layers(f"{args.model} {size}, {form}, {args.images} images: "
                     f"chip against onnxruntime (% of values differing, max steps)", summary)
        print_variants(summary, VARIANTS)
        top1 = sum(r.get("top1.same", 0) for r in summary.values())
        print(f"top-1 of the last value the same: {top1} of {args.images} images")
    if "qdq" in last_ort and "qop" in last_ort:
        # one calibration, so one set of scales: the QDQ form (float operators) and the
        # QOperator form (integer kernels) are the same model to ONNX
        print("\nonnxruntime against itself, the QDQ form's values against the QOperator "
              "form's (% differing, max steps):")
        for k, (a, b) in enumerate(zip(zip(*last_ort["qdq"]), zip(*last_ort["qop"]))):
            d = np.concatenate([np.abs(x.astype(np.int64) - y).ravel()
                                for x, y in zip(a, b)])
            report.setdefault("ort_qdq_vs_qop", []).append(
                {"differ": int((d > 0).sum()), "values": int(d.size), "max": int(d.max())})
            print(f"  layer {k:>2}: {100 * (d > 0).mean():6.3f}% <={d.max()}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
