"""Small ONNX models in the QOperator form, built with onnx.helper (seeded weights):
for the importer's tests, ``make bench`` and trying ``systolica sim --onnx``
(docs/compiler.md, "ONNX models"). Needs the onnx package."""

from __future__ import annotations

from pathlib import Path

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

    def matmul(self, x, xq, k, n, yq, relu=False, w_scales=None):
        self.n += 1
        w = self.rng.integers(-60, 60, (k, n), dtype=np.int8)
        y = f"mm{self.n}"
        wq = (self.q(0.02, 0) if w_scales is None else
              [self.const(np.asarray(w_scales, np.float32)), self.const(np.zeros(n, np.int8))])
        self.nodes.append(helper.make_node(
            "QLinearMatMul", [x, *self.q(*xq), self.const(w), *wq, *self.q(*yq)],
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


class _QDQ:
    """A QDQ model under construction: float operators between DequantizeLinear and
    QuantizeLinear, as onnxruntime's quantiser writes them."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []

    def const(self, a, name):
        self.inits.append(numpy_helper.from_array(np.asarray(a), name))
        return name

    def q(self, v, scale, zp, name):
        self.nodes.append(helper.make_node(
            "QuantizeLinear", [v, self.const(np.float32(scale), f"{name}_s"),
                               self.const(np.int8(zp), f"{name}_z")], [name], name=f"Q_{name}"))
        return name

    def dq(self, v, scale, zp, name, axis=None, zdtype=np.int8):
        s = np.asarray(scale, np.float32)
        z = (np.zeros(s.shape, np.int64) + zp).astype(zdtype)
        kw = {} if axis is None else {"axis": axis}
        self.nodes.append(helper.make_node(
            "DequantizeLinear", [v, self.const(s, f"{name}_s"), self.const(z, f"{name}_z")],
            [name], name=f"DQ_{name}", **kw))
        return name

    def qdq(self, v, scale, zp, name):
        """`v` quantised and dequantised: the float value the next operator reads."""
        return self.dq(self.q(v, scale, zp, f"{name}_q"), scale, zp, f"{name}_f")

    def conv(self, x, xs, cin, cout, k, name, ys, yz, *, pads=0, relu=True, stride=1,
             quantise=True):
        rng = self.rng
        ws = rng.uniform(0.004, 0.012, cout).astype(np.float32)
        w = self.const(rng.integers(-80, 80, (cout, cin, k, k), dtype=np.int8), f"{name}_w")
        b = self.const(rng.integers(-3000, 3000, cout, dtype=np.int32), f"{name}_b")
        wf = self.dq(w, ws, 0, f"{name}_wf", axis=0)
        bf = self.dq(b, (ws * xs).astype(np.float32), 0, f"{name}_bf", axis=0,
                     zdtype=np.int32)
        y = f"{name}_y"
        self.nodes.append(helper.make_node("Conv", [x, wf, bf], [y], name=name,
                                           kernel_shape=[k, k], pads=[pads] * 4,
                                           strides=[stride, stride]))
        if relu:
            self.nodes.append(helper.make_node("Relu", [y], [f"{name}_r"],
                                               name=f"{name}_relu"))
            y = f"{name}_r"
        return self.qdq(y, ys, yz, name) if quantise else y

    def node(self, op, inputs, name, ys, yz, **attrs):
        self.nodes.append(helper.make_node(op, inputs, [f"{name}_out"], name=name, **attrs))
        return self.qdq(f"{name}_out", ys, yz, name)

    def gemm(self, x, xs, k, n, name, ys, yz):
        w = self.const(self.rng.integers(-80, 80, (n, k), dtype=np.int8), f"{name}_w")
        wf = self.dq(w, 0.01, 0, f"{name}_wf")
        bf = self.dq(self.const(self.rng.integers(-500, 500, n, dtype=np.int32), f"{name}_b"),
                     np.float32(xs * 0.01), 0, f"{name}_bf", zdtype=np.int32)
        self.nodes.append(helper.make_node("Gemm", [x, wf, bf], [f"{name}_y"], name=name,
                                           transB=1))
        return self.dq(self.q(f"{name}_y", ys, yz, f"{name}_q"), ys, yz, "logits")

    def build(self, name, shape, out) -> ModelProto:
        graph = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def qdq_cnn(seed: int = 0) -> ModelProto:
    """The QDQ form, as onnxruntime's quantiser writes it: a float (1, 4, 8, 8) NCHW
    input quantised, a conv + Relu with a scale per output channel, a max pool, a
    second conv + Relu with a nonzero output zero point, a 4x4 conv to a 1 x 1 map,
    Flatten, a Gemm (``transB``) with a bias, and the logits dequantised to float."""
    m = _QDQ(seed)
    x = m.qdq("x", 0.03, 2, "x")
    h = m.conv(x, 0.03, 4, 8, 3, "conv1", 0.05, 0, pads=1)
    p = m.node("MaxPool", [h], "pool", 0.05, 0, kernel_shape=[2, 2], strides=[2, 2])
    h = m.conv(p, 0.05, 8, 12, 3, "conv2", 0.07, -20, pads=1)
    h = m.conv(h, 0.07, 12, 16, 4, "conv3", 0.08, 0, relu=False)
    flat = m.node("Flatten", [h], "flatten", 0.08, 0, axis=1)
    return m.build("qdq_cnn", [1, 4, 8, 8], m.gemm(flat, 0.08, 16, 10, "fc", 0.4, 3))


def qdq_resnet(seed: int = 0) -> ModelProto:
    """A small residual network in the QDQ form: a stem conv + Relu, a basic block
    (conv + Relu, conv, Add with the shortcut, Relu), a strided block with a 1x1
    projection, a global average pool, Flatten and a Gemm."""
    m = _QDQ(seed)
    x = m.qdq("x", 0.03, 0, "x")
    h = m.conv(x, 0.03, 3, 8, 3, "stem", 0.05, -128, pads=1)

    def block(h, hs, cin, cout, stride, name):
        a = m.conv(h, hs, cin, cout, 3, f"{name}_conv1", 0.06, -128, pads=1, stride=stride)
        b = m.conv(a, 0.06, cout, cout, 3, f"{name}_conv2", 0.07, 5, pads=1, relu=False)
        short = h if stride == 1 and cin == cout else m.conv(
            h, hs, cin, cout, 1, f"{name}_proj", 0.07, -3, stride=stride, relu=False)
        m.nodes.append(helper.make_node("Add", [b, short], [f"{name}_sum"], name=f"{name}_add"))
        m.nodes.append(helper.make_node("Relu", [f"{name}_sum"], [f"{name}_out"],
                                        name=f"{name}_relu"))
        return m.qdq(f"{name}_out", 0.06, -128, name)

    h = block(h, 0.05, 8, 8, 1, "block1")
    h = block(h, 0.06, 8, 16, 2, "block2")
    g = m.node("GlobalAveragePool", [h], "gap", 0.03, -128)
    flat = m.node("Flatten", [g], "flatten", 0.03, -128, axis=1)
    return m.build("qdq_resnet", [1, 3, 12, 12], m.gemm(flat, 0.03, 16, 10, "fc", 0.3, 0))


class _FloatNet:
    """A float NCHW network under construction for onnxruntime's quantiser: seeded
    normal weights (a conv's scaled by ``1 / sqrt(fan_in)``), biases of 0.1."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []

    def const(self, name, shape, scale) -> str:
        self.inits.append(numpy_helper.from_array(
            (self.rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def node(self, op, inputs, output, name, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=name, **attrs))
        return output

    def relu(self, x, name, six=False) -> str:
        """``max(x, 0)``, or with `six` ReLU6 as exporters write it: ``Clip(x, 0, 6)``."""
        if not six:
            return self.node("Relu", [x], f"{name}_relu", f"{name}_relu")
        if "relu6_lo" not in {t.name for t in self.inits}:
            self.inits += [numpy_helper.from_array(np.float32(0), "relu6_lo"),
                           numpy_helper.from_array(np.float32(6), "relu6_hi")]
        return self.node("Clip", [x, "relu6_lo", "relu6_hi"], f"{name}_relu6",
                         f"{name}_relu6")

    def conv(self, x, cin, cout, k, name, stride=1, group=1, relu=True, six=False,
             gain=None) -> str:
        """A conv (its weights' scale ``gain / sqrt(fan_in)``, 1 by default) + Relu."""
        scale = 1 / np.sqrt(cin // group * k * k)
        w = self.const(f"{name}_w", (cout, cin // group, k, k),
                       scale if gain is None else gain * scale)
        self.node("Conv", [x, w, self.const(f"{name}_b", (cout,), 0.1)], name, name,
                  pads=[k // 2] * 4, strides=[stride] * 2,
                  **({"group": group} if group != 1 else {}))
        return self.relu(name, name, six) if relu else name

    def gemm(self, x, k, n, name, scale, output=None) -> str:
        """``x @ W.T + b`` (``transB``) of ``W`` ``[n, k]``."""
        return self.node("Gemm", [x, self.const(f"{name}_w", (n, k), scale),
                                  self.const(f"{name}_b", (n,), 0.1)], output or name, name,
                         transB=1)

    def head(self, h, channels, scale=0.25) -> str:
        """Global average pool, Flatten, a Gemm (``fc``) to 10 logits."""
        self.node("GlobalAveragePool", [h], "gap", "gap")
        self.node("Flatten", ["gap"], "flat", "flatten", axis=1)
        return self.gemm("flat", channels, 10, "fc", scale, "logits")

    def build(self, name, shape, out, classes=10, batch=1, head=None) -> ModelProto:
        """The model of input ``x`` `shape` and output `out` ``[batch, classes]``; with
        `head` ``"softmax"`` its output is ``probs``, a Softmax of `out` over the
        classes, with ``"argmax"`` ``label``, the class of the largest (int64
        ``[batch, 1]``)."""
        out_type, out_shape = TensorProto.FLOAT, [batch, classes]
        if head == "softmax":
            out = self.node("Softmax", [out], "probs", "softmax", axis=-1)
        elif head == "argmax":
            out = self.node("ArgMax", [out], "label", "argmax", axis=-1, keepdims=1)
            out_type, out_shape = TensorProto.INT64, [batch, 1]
        elif head is not None:
            raise ValueError(f"head must be None, 'softmax' or 'argmax', not {head!r}")
        graph = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(out, out_type, out_shape)], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def float_cnn(seed: int = 0) -> ModelProto:
    """A float NCHW (1, 3, 16, 16) network for onnxruntime's quantiser
    (:func:`ort_quantized`): conv + Relu, a 2x2 max pool, conv + Relu, two branches
    (a 1x1 conv of 6 channels and a 3x3 of 10, each + Relu) joined by a Concat, a
    strided 3x3 conv + Relu, a global average pool, Flatten, a Gemm (``transB``) to 10
    logits."""
    m = _FloatNet(seed)
    h = m.conv("x", 3, 8, 3, "conv1")
    m.node("MaxPool", [h], "pool", "pool", kernel_shape=[2, 2], strides=[2, 2])
    h = m.conv("pool", 8, 16, 3, "conv2")
    a, b = m.conv(h, 16, 6, 1, "branch1x1"), m.conv(h, 16, 10, 3, "branch3x3")
    m.node("Concat", [a, b], "join", "join", axis=1)
    h = m.conv("join", 16, 16, 3, "conv3", stride=2)
    return m.build("float_cnn", [1, 3, 16, 16], m.head(h, 16))


def float_lenet(seed: int = 0, head: str | None = None) -> ModelProto:
    """A float NCHW (1, 3, 12, 12) network that flattens a map larger than 1 x 1: conv
    + Relu, a 2x2 max pool, a strided conv + Relu to a 16-channel 3x3 map, Flatten
    (ONNX's C, H, W order), a Gemm + Relu to 32 and a Gemm to 10 logits; with `head`
    a classifier's Softmax or ArgMax over them (``_FloatNet.build``)."""
    m = _FloatNet(seed)
    h = m.conv("x", 3, 8, 3, "conv1")
    m.node("MaxPool", [h], "pool", "pool", kernel_shape=[2, 2], strides=[2, 2])
    h = m.conv("pool", 8, 16, 3, "conv2", stride=2)
    m.node("Flatten", [h], "flat", "flatten", axis=1)
    h = m.relu(m.gemm("flat", 144, 32, "fc1", 1 / np.sqrt(144)), "fc1")
    return m.build("float_lenet", [1, 3, 12, 12], m.gemm(h, 32, 10, "fc2", 1 / np.sqrt(32)),
                   head=head)


def float_mlp(seed: int = 0, batch: int = 12, widths=(20, 32, 24, 10),
              head: str | None = None) -> ModelProto:
    """A float multilayer perceptron on a ``[batch, widths[0]]`` input: Gemms through
    `widths`, each but the last followed by a Relu (with weights per channel, its
    first layer reads the graph input itself, not a Flatten of a map); with `head` a
    Softmax or ArgMax over each row's logits."""
    m = _FloatNet(seed)
    h = "x"
    for i, (k, n) in enumerate(zip(widths, widths[1:])):
        last = i == len(widths) - 2
        h = m.gemm(h, k, n, f"fc{i + 1}", 1 / np.sqrt(k), "logits" if last else None)
        if not last:
            h = m.relu(h, f"fc{i + 1}")
    return m.build("float_mlp", [batch, widths[0]], h, widths[-1], batch, head=head)


def float_resnet(seed: int = 0, size: int = 32) -> ModelProto:
    """A float NCHW (1, 3, size, size) residual network: a 3x3 stem to 16 channels + Relu,
    a 3x3/2 max pool (padded), three basic blocks (16, then 32 with a strided 1x1
    projection, then 32; each conv + Relu, conv, Add with the shortcut, Relu), a global
    average pool, Flatten and a Gemm to 10 logits."""
    m = _FloatNet(seed)

    def block(x, cin, cout, stride, name):
        a = m.conv(x, cin, cout, 3, f"{name}_conv1", stride)
        b = m.conv(a, cout, cout, 3, f"{name}_conv2", relu=False)
        short = x if stride == 1 and cin == cout else \
            m.conv(x, cin, cout, 1, f"{name}_proj", stride, relu=False)
        return m.relu(m.node("Add", [b, short], f"{name}_sum", f"{name}_add"), name)

    h = m.conv("x", 3, 16, 3, "stem")
    m.node("MaxPool", [h], "pool", "pool", kernel_shape=[3, 3], strides=[2, 2],
           pads=[1, 1, 1, 1])
    h = block(block(block("pool", 16, 16, 1, "block1"), 16, 32, 2, "block2"), 32, 32, 1,
              "block3")
    return m.build("float_resnet", [1, 3, size, size], m.head(h, 32, scale=0.2))


def float_mobilenet(seed: int = 0, relu6: bool = False) -> ModelProto:
    """A float NCHW (1, 3, 16, 16) network of MobileNetV2's blocks: a strided 3x3 stem +
    Relu, three inverted residual blocks (a 1x1 expansion + Relu, a 3x3 depthwise conv
    (``group`` = channels) + Relu, a linear 1x1 projection; an Add with the input where
    the shapes allow), a global average pool, Flatten and a Gemm to 10 logits. With
    `relu6` every Relu is MobileNetV2's ReLU6, ``Clip(x, 0, 6)``."""
    m = _FloatNet(seed)

    def block(x, cin, cout, stride, name):
        wide = 2 * cin
        h = m.conv(x, cin, wide, 1, f"{name}_expand", six=relu6)
        h = m.conv(h, wide, wide, 3, f"{name}_depthwise", stride, group=wide, six=relu6)
        h = m.conv(h, wide, cout, 1, f"{name}_project", relu=False)
        if stride != 1 or cin != cout:
            return h
        return m.node("Add", [h, x], f"{name}_sum", f"{name}_add")

    h = m.conv("x", 3, 8, 3, "stem", 2, six=relu6)
    h = block(block(block(h, 8, 8, 1, "block1"), 8, 16, 2, "block2"), 16, 16, 1, "block3")
    return m.build("float_mobilenet", [1, 3, 16, 16], m.head(h, 16))


def float_densenet(seed: int = 0, blocks: int = 2, layers: int = 3, growth: int = 4,
                   size: int = 16, gain: float = 3.0) -> ModelProto:
    """A float NCHW (1, 3, size, size) network of DenseNet's blocks, joined as the ONNX
    model zoo's DenseNet-121 joins them: a 3x3 stem + Relu, a 2x2 max pool, `blocks`
    dense blocks of `layers` layers (a 1x1 conv to ``4 * growth`` + Relu, a 3x3 conv
    to `growth` + Relu, its weights `gain` times larger, a Concat of the block so far
    with it: ``cat_k = Concat(cat_k-1, new_k)``, so each join's first input is also
    read by the next layer, and its range may be the new features' or the block's), a
    1x1 transition conv + Relu halving the channels and a 2x2 max pool between blocks
    (the chip's importer takes no AveragePool in the QDQ form), a global average pool,
    Flatten and a Gemm to 10 logits."""
    m = _FloatNet(seed)
    h = m.conv("x", 3, 8, 3, "stem")
    h = m.node("MaxPool", [h], "pool", "pool", kernel_shape=[2, 2], strides=[2, 2])
    c = 8
    for b in range(1, blocks + 1):
        for n in range(1, layers + 1):
            name = f"block{b}_layer{n}"
            a = m.conv(h, c, 4 * growth, 1, f"{name}_1x1")
            new = m.conv(a, 4 * growth, growth, 3, f"{name}_3x3", gain=gain)
            h = m.node("Concat", [h, new], f"{name}_cat", f"{name}_cat", axis=1)
            c += growth
        if b < blocks:
            t = m.conv(h, c, c // 2, 1, f"transition{b}")
            h = m.node("MaxPool", [t], f"transition{b}_pool", f"transition{b}_pool",
                       kernel_shape=[2, 2], strides=[2, 2])
            c //= 2
    return m.build("float_densenet", [1, 3, size, size], m.head(h, c))


def float_squeezenet(seed: int = 0, size: int = 64, softmax: bool = False) -> ModelProto:
    """SqueezeNet 1.1 as the onnx package ships it for its backend tests
    (``onnx/backend/test/data/light/light_squeezenet.onnx``, its weights left out as
    ConstantOfShape) with seeded weights (He's scale), a float NCHW (1, 3, size, size)
    input ``x`` and without its Dropout and Softmax: eight fire modules (a 1x1
    squeeze conv + Relu, then a 1x1 and a 3x3 expand conv + Relu joined by a Concat),
    three 3x3/2 max pools, a 1x1 conv to 1000 classes + Relu and a global average pool
    to the (1, 1000, 1, 1) ``logits``; with `softmax` the real model's Softmax after
    them too (over the classes, axis 1, as its opset 9 computes it), the output
    ``probs``."""
    import onnx
    src = onnx.load(str(Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
                        / "light_squeezenet.onnx"))
    rng = np.random.default_rng(seed)
    known = {t.name: numpy_helper.to_array(t) for t in src.graph.initializer}
    inits = [t for t in src.graph.initializer if not t.name.endswith("__SHAPE")]
    first = next(vi.name for vi in src.graph.input if vi.name not in known)
    rename = {first: "x"}
    nodes, out = [], None
    for n in src.graph.node:
        ins = [rename.get(v, v) for v in n.input]
        if n.op_type == "ConstantOfShape":            # a weight or bias left out
            shape = tuple(int(d) for d in known[n.input[0]])
            scale = np.sqrt(2 / np.prod(shape[1:])) if len(shape) > 1 else 0.1
            inits.append(numpy_helper.from_array(
                (rng.standard_normal(shape) * scale).astype(np.float32), n.output[0]))
        elif n.op_type == "Dropout":
            rename[n.output[0]] = ins[0]
        elif n.op_type == "Softmax":
            out = ins[0]
        else:
            nodes.append(helper.make_node(n.op_type, ins, list(n.output), name=n.name,
                                          **{a.name: helper.get_attribute_value(a)
                                             for a in n.attribute}))
    for node in nodes:
        node.output[:] = ["logits" if o == out else o for o in node.output]
    final = "logits"
    if softmax:
        nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], name="softmax",
                                      axis=1))
        final = "probs"
    graph = helper.make_graph(
        nodes, "float_squeezenet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(final, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def ort_quantized(model: ModelProto, *, per_channel: bool = False, seed: int = 0,
                  samples: int = 16, quant_format: str = "QDQ") -> ModelProto:
    """`model` (float, one input) as onnxruntime's ``quantize_static`` writes it: the
    QDQ form (or with `quant_format` ``"QOperator"`` its QLinear operators, a float
    input quantised and the outputs dequantised), int8 activations and weights (a
    scale per output channel with `per_channel`), calibrated on `samples` seeded
    uniform inputs in [0, 1). Needs onnxruntime."""
    from systolica.compiler.frontend.onnx_quantise import run_quantiser
    vi = model.graph.input[0]
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    calibration = [{vi.name: rng.random(shape, dtype=np.float32)} for _ in range(samples)]
    return run_quantiser(model, calibration, per_channel=per_channel,
                         quant_format=quant_format)


def runtime_session(model: ModelProto | str):
    """An onnxruntime session computing `model` as ONNX defines it: each
    ``DequantizeLinear``, float operator and ``QuantizeLinear`` on its own. Its graph
    optimisations are off because they fuse QDQ patterns into int8 kernels whose
    results depend on the CPU (on an AVX2 machine up to 5 steps from the definition in
    a residual network), which would make the oracle differ between machines. Needs
    onnxruntime."""
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = model if isinstance(model, str) else model.SerializeToString()
    return onnxruntime.InferenceSession(source, options, providers=["CPUExecutionProvider"])
