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
