"""Small ONNX models in the QOperator form, built with onnx.helper (seeded weights):
for the importer's tests, ``make bench`` and trying ``systolica sim --onnx``
(docs/compiler.md, "ONNX models"). Needs the onnx package."""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper


class QModel:
    """A QOperator model under construction: int8 values, constant initialisers."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def const(self, array, name=None) -> str:
        name = name or f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def q(self, scale, zp) -> list[str]:
        return [self.const(np.float32(scale)), self.const(np.int8(zp))]

    def conv(self, x, xq, cin, cout, k, yq, *, stride=1, pads=None, w_scales=None,
             relu=False, dilation=1):
        self.n += 1
        w = self.rng.integers(-60, 60, (cout, cin, k, k), dtype=np.int8)
        ws = np.float32(0.01) if w_scales is None else np.asarray(w_scales, np.float32)
        bias = self.rng.integers(-2000, 2000, cout, dtype=np.int32)
        y = f"conv{self.n}"
        p = k // 2 * dilation if pads is None else pads
        self.nodes.append(helper.make_node(
            "QLinearConv", [x, *self.q(*xq), self.const(w), self.const(ws),
                            self.const(np.zeros(np.shape(ws), np.int8)), *self.q(*yq),
                            self.const(bias)],
            [y], name=f"qconv{self.n}", strides=[stride, stride],
            pads=[p, p, p, p] if np.ndim(p) == 0 else list(p),
            dilations=[dilation, dilation], kernel_shape=[k, k]))
        if relu:
            self.nodes.append(helper.make_node("Relu", [y], [y + "_relu"], name=f"relu{self.n}"))
            return y + "_relu"
        return y

    def matmul(self, x, xq, k, n, yq, relu=False):
        self.n += 1
        w = self.rng.integers(-60, 60, (k, n), dtype=np.int8)
        y = f"mm{self.n}"
        self.nodes.append(helper.make_node(
            "QLinearMatMul", [x, *self.q(*xq), self.const(w), *self.q(0.02, 0), *self.q(*yq)],
            [y], name=f"qmm{self.n}"))
        if relu:
            self.nodes.append(helper.make_node("Relu", [y], [y + "_relu"], name=f"relu{self.n}"))
            return y + "_relu"
        return y

    def node(self, op, inputs, **attrs):
        self.n += 1
        y = f"{op.lower()}{self.n}"
        self.nodes.append(helper.make_node(op, inputs, [y], name=f"{op}_{self.n}", **attrs))
        return y

    def build(self, inputs, outputs) -> ModelProto:
        graph = helper.make_graph(
            self.nodes, "m",
            [helper.make_tensor_value_info(n, TensorProto.INT8, s) for n, s in inputs],
            [helper.make_tensor_value_info(n, TensorProto.INT8, None) for n in outputs],
            self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        return model


def inception(seed: int = 0, channels: int = 8) -> ModelProto:
    """NCHW int8 (1, 6, 10, 10) in: a 1x1 branch, a 3x3 branch with a scale per output
    channel, a 3x3 max pool then 1x1 branch, joined by a Concat, then a strided 3x3
    convolution with a Relu (1, 7, 5, 5) out."""
    m = QModel(seed)
    xq, yq = (0.05, 3), (0.08, -5)
    b1 = m.conv("x", xq, 6, channels, 1, yq)
    b2 = m.conv("x", xq, 6, channels, 3, yq, w_scales=np.linspace(0.005, 0.02, channels))
    pool = m.node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    b3 = m.conv(pool, xq, 6, 5, 1, yq)
    cat = m.node("Concat", [b1, b2, b3], axis=1)
    y = m.conv(cat, yq, 2 * channels + 5, 7, 3, (0.1, 0), stride=2, relu=True)
    return m.build([("x", [1, 6, 10, 10])], [y])


def qdq_cnn(seed: int = 0) -> ModelProto:
    """The QDQ form (float operators between DequantizeLinear and QuantizeLinear), as
    onnxruntime's quantiser writes it: a float (1, 4, 8, 8) NCHW input quantised, a
    conv + Relu with a scale per output channel, a max pool, a second conv + Relu
    with a nonzero output zero point, a 4x4 conv to a 1 x 1 map, Flatten, a Gemm
    (``transB``) with a bias, and the logits dequantised to float."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def const(a, name):
        inits.append(numpy_helper.from_array(np.asarray(a), name))
        return name

    def q(v, scale, zp, name):
        nodes.append(helper.make_node("QuantizeLinear", [v, const(np.float32(scale), f"{name}_s"),
                                                         const(np.int8(zp), f"{name}_z")],
                                      [name], name=f"Q_{name}"))
        return name

    def dq(v, scale, zp, name, axis=None, zdtype=np.int8):
        s = np.asarray(scale, np.float32)
        z = (np.zeros(s.shape, np.int64) + zp).astype(zdtype)
        kw = {} if axis is None else {"axis": axis}
        nodes.append(helper.make_node("DequantizeLinear", [v, const(s, f"{name}_s"),
                                                           const(z, f"{name}_z")],
                                      [name], name=f"DQ_{name}", **kw))
        return name

    def conv(x, xs, cin, cout, k, name, ys, yz, *, pads=0, relu=True, stride=1):
        ws = rng.uniform(0.004, 0.012, cout).astype(np.float32)
        w = const(rng.integers(-80, 80, (cout, cin, k, k), dtype=np.int8), f"{name}_w")
        b = const(rng.integers(-3000, 3000, cout, dtype=np.int32), f"{name}_b")
        wf = dq(w, ws, 0, f"{name}_wf", axis=0)
        bf = dq(b, (ws * xs).astype(np.float32), 0, f"{name}_bf", axis=0, zdtype=np.int32)
        y = f"{name}_y"
        nodes.append(helper.make_node("Conv", [x, wf, bf], [y], name=name,
                                      kernel_shape=[k, k], pads=[pads] * 4,
                                      strides=[stride, stride]))
        if relu:
            nodes.append(helper.make_node("Relu", [y], [f"{name}_r"], name=f"{name}_relu"))
            y = f"{name}_r"
        return dq(q(y, ys, yz, f"{name}_q"), ys, yz, f"{name}_f")

    x = dq(q("x", 0.03, 2, "x_q"), 0.03, 2, "x_f")
    h = conv(x, 0.03, 4, 8, 3, "conv1", 0.05, 0, pads=1)
    pq = q("pool_out", 0.05, 0, "pool_q")
    nodes.append(helper.make_node("MaxPool", [h], ["pool_out"], name="pool",
                                  kernel_shape=[2, 2], strides=[2, 2]))
    p = dq(pq, 0.05, 0, "pool_f")
    h = conv(p, 0.05, 8, 12, 3, "conv2", 0.07, -20, pads=1)
    h = conv(h, 0.07, 12, 16, 4, "conv3", 0.08, 0, relu=False)
    nodes.append(helper.make_node("Flatten", [h], ["flat_out"], name="flatten", axis=1))
    flat = dq(q("flat_out", 0.08, 0, "flat_q"), 0.08, 0, "flat")
    w = const(rng.integers(-80, 80, (10, 16), dtype=np.int8), "fc_w")
    wf = dq(w, 0.01, 0, "fc_wf")
    bf = dq(const(rng.integers(-500, 500, 10, dtype=np.int32), "fc_b"),
            np.float32(0.08 * 0.01), 0, "fc_bf", zdtype=np.int32)
    nodes.append(helper.make_node("Gemm", [flat, wf, bf], ["fc_y"], name="fc", transB=1))
    y = dq(q("fc_y", 0.4, 3, "fc_q"), 0.4, 3, "logits")
    graph = helper.make_graph(
        nodes, "qdq_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
