"""Convolutional networks as graphs, with deterministic seeded int8 weights.

The weights are random (seeded), the quantisation realistic: as a graph is built, each
layer is run (``compiler/graph/reference.py``) on a calibration image, and its bias centres
every output channel's accumulator (as a folded batch norm would) while ``mult`` and
``shift`` scale the accumulator's spread to ``TARGET`` int8 steps, so activations use
the int8 range without saturating. Post-ReLU tensors have zero point ``RELU_ZP``
(-128, as uint8 activations stored as int8); others have 0. The calibration image is
the graph's own input; convolutions are calibrated with float32 products (fast; only
statistics are needed), the rest with the reference.

* :func:`resnet50`: ResNet-50 v1.5 (torchvision's layer shapes: the stride of a
  downsampling bottleneck is on its 3x3 convolution): 53 convolutions, 4.087 G MACs
  in them at 224 x 224.
* :func:`vgg19`: VGG-19 (configuration E): 16 3x3 convolutions, 19.5 G MACs in them at
  224 x 224, and 143.7 M weights, most of them in its three dense layers.
* :func:`small_cnn`: a small residual CNN for the ``tiny`` chip.
* :func:`bottleneck_block`: one bottleneck with a projection shortcut.
* :func:`branches`: dense branches joined by a Concat (or read separately by the
  layer after them), for the lane router.
* :func:`layer_macs`, :func:`macs`: multiply-accumulates per layer and in total.
"""

from __future__ import annotations

import numpy as np

from systolica.compiler.graph import reference
from systolica.compiler.graph.graph import Graph, GraphBuilder
from systolica.compiler.graph.ops import ADD_MULT, Conv2d, requant_for

__all__ = ["RELU_ZP", "TARGET", "bottleneck_block", "branches", "layer_macs",
           "macs", "requant_for", "resnet50", "small_cnn", "vgg19"]

TARGET = 40.0            # spread (std) of a layer's output before ReLU, in int8 steps
RELU_ZP = -128
WEIGHT_STD = 24.0        # the random weights' spread before clipping to int8
CALIBRATION_SIZE = 128
ADD_SHIFT = 7            # an Add's multipliers are in 128ths
MIN_SAMPLES = 16         # calibration values per channel for per-channel quantisation


def layer_macs(graph: Graph) -> dict[str, int]:
    """Multiply-accumulates of each layer (``op.macs`` of its output shape; 0 for
    layers without weights), by layer name in graph order."""
    return {n.name: n.op.macs(graph.tensor(n.outputs[0]).shape) for n in graph.nodes}


def macs(graph: Graph, kinds: tuple[type, ...] | None = None) -> int:
    """Total multiply-accumulates of `graph`, or of its layers of op types `kinds`."""
    per_layer = layer_macs(graph)
    return sum(per_layer[n.name] for n in graph.nodes
               if kinds is None or isinstance(n.op, kinds))


def _conv_sum(x: np.ndarray, x_zp: int, w: np.ndarray, stride: int, pads: int) -> np.ndarray:
    """About ``sum over taps of (x_pad - x_zp) * w``, as int64: one float32 product of
    the gathered windows and the weights (fast; calibration needs only statistics)."""
    kh, kw, cin, cout = w.shape
    n, h, wd, _ = x.shape
    ho, wo = (h + 2 * pads - kh) // stride + 1, (wd + 2 * pads - kw) // stride + 1
    xp = np.zeros((n, h + 2 * pads, wd + 2 * pads, cin), np.float32)
    xp[:, pads:pads + h, pads:pads + wd, :] = x.astype(np.float32) - x_zp
    cols = np.empty((n, ho, wo, kh, kw, cin), np.float32)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, :, i, j, :] = xp[:, i:i + stride * (ho - 1) + 1:stride,
                                        j:j + stride * (wo - 1) + 1:stride, :]
    acc = cols.reshape(-1, kh * kw * cin) @ w.reshape(-1, cout).astype(np.float32)
    return np.round(acc).astype(np.int64).reshape(n, ho, wo, cout)


class _Builder:
    """A GraphBuilder that makes seeded weights and calibrates each layer's
    quantisation on a calibration image as the layer is added."""

    def __init__(self, name: str, seed: int, per_channel: bool):
        self.g = GraphBuilder(name)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.per_channel = per_channel
        self.calib: dict[str, np.ndarray] = {}

    def zp(self, t: str) -> int:
        return self.g.tensor(t).quant.zero_point

    def input(self, shape, zero_point: int = 0) -> str:
        lo = zero_point if zero_point == RELU_ZP else -128
        x = self.rng.integers(lo, 128, size=shape).astype(np.int8)
        t = self.g.input(x, zero_point=zero_point)
        self.calib[t] = x
        return t

    def weights(self, shape) -> np.ndarray:
        w = np.round(self.rng.normal(0.0, WEIGHT_STD, size=shape))
        return np.clip(w, -127, 127).astype(np.int8)

    def _centre(self, acc: np.ndarray, per_channel: bool):
        """Bias and (mult, shift) that centre `acc` ([..., channels]) and scale its
        spread to TARGET: per channel, or (also when the calibration gives fewer than
        MIN_SAMPLES values per channel) with one mean and scale for all channels."""
        flat = acc.reshape(-1, acc.shape[-1]).astype(np.float64)
        if per_channel and flat.shape[0] >= MIN_SAMPLES:
            mean, std = flat.mean(axis=0), flat.std(axis=0)
        else:
            mean = np.full(flat.shape[1], flat.mean())
            std = np.full(flat.shape[1], flat.std())
            per_channel = False
        bias = np.clip(np.round(-mean), -(1 << 30), 1 << 30).astype(np.int32)
        return bias, requant_for(TARGET / np.maximum(std, 1.0), per_channel)

    def conv(self, x: str, k: int, cout: int, *, stride: int = 1, relu: bool = True,
             name: str) -> str:
        w = self.weights((k, k, self.g.tensor(x).shape[3], cout))
        acc = _conv_sum(self.calib[x], self.zp(x), w, stride, k // 2)
        return self._calibrated(x, w, acc, relu, name, stride=stride, pads=k // 2)

    def depthwise(self, x: str, k: int, *, stride: int = 1, name: str) -> str:
        """A depthwise ``k x k`` convolution (one kernel per channel) + ReLU."""
        c = self.g.tensor(x).shape[3]
        w = self.weights((k, k, 1, c))
        geometry = dict(stride=stride, pads=k // 2, groups=c)
        acc = reference.conv2d_acc(self.calib[x], self.zp(x),
                                   Conv2d(w, None, name=name, **geometry))
        return self._calibrated(x, w, acc, True, name, **geometry)

    def _calibrated(self, x: str, w: np.ndarray, acc: np.ndarray, relu: bool, name: str,
                    **geometry) -> str:
        """A convolution of `x` by `w` whose calibration sums are `acc`: its bias and
        requantisation centre them, and its output becomes the next calibration."""
        bias, (mult, shift) = self._centre(acc, self.per_channel)
        t = self.g.conv2d(x, w, bias, mult=mult, shift=shift, zp=RELU_ZP if relu else 0,
                          relu=relu, name=name, **geometry)
        self.calib[t] = reference.conv2d_output(reference.wrap32(acc + bias),
                                                self.g.layer_op(t))
        return t

    def add(self, a: str, b: str, *, name: str) -> str:
        """``a + b`` scaled so the sum's spread is about TARGET, then ReLU."""
        total = (self.calib[a].astype(np.int64) - self.zp(a)) + \
            (self.calib[b].astype(np.int64) - self.zp(b))
        mult = int(np.clip(np.round((1 << ADD_SHIFT) * TARGET / max(total.std(), 1.0)),
                           1, ADD_MULT[1]))
        t = self.g.add(a, b, mult_a=mult, mult_b=mult, shift=ADD_SHIFT, zp=RELU_ZP,
                       relu=True, name=name)
        self.calib[t] = reference.add(self.calib[a], self.zp(a), self.calib[b], self.zp(b),
                                      self.g.layer_op(t))
        return t

    def max_pool(self, x: str, kernel: int, stride: int, pads: int, name: str) -> str:
        t = self.g.max_pool2d(x, kernel, stride, pads, name=name)
        self.calib[t] = reference.max_pool2d(self.calib[x], self.g.layer_op(t))
        return t

    def dense(self, x: str, n: int, *, relu: bool, name: str) -> str:
        """A dense layer of a flattened `x` to `n` outputs (ReLU or not; its bias folds
        in the input's zero point), its weights drawn and its calibration summed a
        slice of rows at a time (VGG's first one has 103 M weights)."""
        k = self.g.tensor(x).shape[1]
        rows = max(1, (1 << 22) // n)
        w = np.empty((k, n), np.int8)
        features = self.calib[x].astype(np.int64)
        acc = np.zeros((features.shape[0], n), np.int64)
        for r in range(0, k, rows):
            part = self.rng.standard_normal((min(rows, k - r), n), dtype=np.float32)
            w[r:r + rows] = np.clip(np.round(part * WEIGHT_STD), -127, 127)
            acc += features[:, r:r + rows] @ w[r:r + rows].astype(np.int64)
        bias, (mult, shift) = self._centre(acc, per_channel=False)
        t = self.g.dense(x, w, bias, mult=mult, shift=shift, zp=RELU_ZP if relu else 0,
                         relu=relu, name=name)
        self.calib[t] = reference.requantise(reference.wrap32(acc + bias), mult, shift,
                                             RELU_ZP if relu else 0, relu)
        return t

    def head(self, x: str, classes: int) -> str:
        """Global average pool, flatten, dense to `classes` int8 logits (the dense
        layer's bias folds in its input's zero point)."""
        p = self.g.global_avg_pool(x, name="avgpool")
        f = self.g.flatten(p, name="flat")
        pooled = reference.global_avg_pool(self.calib[x], self.zp(x), self.g.layer_op(p))
        features = reference.flatten(pooled).astype(np.int64)
        w = self.weights((features.shape[1], classes))
        acc = features @ w.astype(np.int64)
        bias, (mult, shift) = self._centre(acc, per_channel=False)
        return self.g.dense(f, w, bias, mult=mult, shift=shift, name="fc")

    def bottleneck(self, x: str, width: int, stride: int, projection: bool,
                   name: str) -> str:
        """1x1 (ReLU), 3x3 with the stride (ReLU), 1x1 to ``4 * width``; the shortcut
        is `x` or its 1x1 projection (with the stride); Add, ReLU."""
        a = self.conv(x, 1, width, name=f"{name}_conv1")
        b = self.conv(a, 3, width, stride=stride, name=f"{name}_conv2")
        c = self.conv(b, 1, 4 * width, relu=False, name=f"{name}_conv3")
        short = self.conv(x, 1, 4 * width, stride=stride, relu=False,
                          name=f"{name}_downsample") if projection else x
        return self.add(c, short, name=f"{name}_add")


def inception_block(batch: int = 1, size: int = 8, cin: int = 16,
                    widths: tuple[int, int, int, int] = (16, 16, 16, 5), seed: int = 0, *,
                    per_channel: bool = True, head: int | None = 8) -> Graph:
    """A GoogLeNet inception module on a post-ReLU int8 ``(batch, size, size, cin)``
    map: a 1x1 branch, a 1x1 then 3x3 branch, a 1x1 then 5x5 branch and a 3x3 max
    pool then 1x1 branch, of ``widths`` output channels, joined by a Concat of their
    channels (on the chip, a layout: docs/cnn.md, "Concat of feature maps"), then a
    1x1 convolution to `head` channels (None: the join is the output)."""
    w1, w3, w5, wp = widths
    net = _Builder("inception", seed, per_channel)
    x = net.input((batch, size, size, cin), zero_point=RELU_ZP)
    b1 = net.conv(x, 1, w1, name="branch1x1")
    b3 = net.conv(net.conv(x, 1, max(w3 // 2, 1), name="branch3x3_reduce"), 3, w3,
                  name="branch3x3")
    b5 = net.conv(net.conv(x, 1, max(w5 // 2, 1), name="branch5x5_reduce"), 5, w5,
                  name="branch5x5")
    bp = net.conv(net.max_pool(x, 3, 1, 1, name="pool"), 1, wp, name="pool_proj")
    joined = net.g.concat(b1, b3, b5, bp, name="join")
    if head is not None:
        net.calib[joined] = np.concatenate([net.calib[t] for t in (b1, b3, b5, bp)], -1)
        net.conv(joined, 1, head, name="head")
    return net.g.build()


def inverted_residual_block(batch: int = 1, size: int = 8, cin: int = 8,
                            expand: int = 4, cout: int = 8, stride: int = 1,
                            seed: int = 0, *, per_channel: bool = True) -> Graph:
    """MobileNetV2's block on a post-ReLU int8 ``(batch, size, size, cin)`` map: a 1x1
    expansion to ``expand * cin`` channels (ReLU), a 3x3 depthwise convolution with
    `stride` (ReLU), a 1x1 projection to `cout` (linear), and with stride 1 and
    ``cin == cout`` an Add with the input (ReLU)."""
    net = _Builder("inverted_residual", seed, per_channel)
    x = net.input((batch, size, size, cin), zero_point=RELU_ZP)
    h = net.conv(x, 1, expand * cin, name="expand")
    h = net.depthwise(h, 3, stride=stride, name="depthwise")
    h = net.conv(h, 1, cout, relu=False, name="project")
    if stride == 1 and cin == cout:
        net.add(h, x, name="residual")
    return net.g.build()


#: (width, blocks, stride of the first block) per stage.
RESNET50_STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))


def resnet50(batch: int = 1, size: int = 224, seed: int = 0, *,
             per_channel: bool = True) -> Graph:
    """ResNet-50 v1.5 on an int8 ``(batch, size, size, 3)`` image: 7x7/2 stem
    convolution to 64 channels (pads 3, ReLU), 3x3/2 max pool (pads 1), bottleneck
    stages of 3, 4, 6, 3 blocks of widths 64, 128, 256, 512 (expansion 4; the first
    block of each has a projection shortcut and, from the second stage on, stride 2 on
    its 3x3 convolution and projection), global average pool, flatten, dense to 1000
    int8 logits. `size` must be a multiple of 32."""
    if not isinstance(size, int) or size < 32 or size % 32:
        raise ValueError(f"resnet50: size must be a multiple of 32, at least 32, not {size!r}")
    net = _Builder("resnet50", seed, per_channel)
    x = net.input((batch, size, size, 3))
    x = net.conv(x, 7, 64, stride=2, name="conv1")
    x = net.max_pool(x, 3, 2, 1, name="maxpool")
    for s, (width, blocks, stride) in enumerate(RESNET50_STAGES, start=1):
        for i in range(blocks):
            x = net.bottleneck(x, width, stride if i == 0 else 1, projection=i == 0,
                               name=f"layer{s}_{i}")
    net.head(x, 1000)
    return net.g.build()


#: VGG-19's stages: (3x3 convolutions, channels), each followed by a 2x2 max pool
VGG19_STAGES = ((2, 64), (2, 128), (4, 256), (4, 512), (4, 512))


def vgg19(batch: int = 1, size: int = 224, seed: int = 0, *, classes: int = 1000,
          per_channel: bool = True) -> Graph:
    """VGG-19 (configuration E) on an int8 ``(batch, size, size, 3)`` image: five
    stages of 3x3 convolutions (pads 1, ReLU; 2, 2, 4, 4, 4 of 64, 128, 256, 512, 512
    channels) each followed by a 2x2 max pool, flatten, dense layers to 4096, 4096
    (ReLU) and `classes` int8 logits. `size` must be a multiple of 32."""
    if not isinstance(size, int) or size < 32 or size % 32:
        raise ValueError(f"vgg19: size must be a multiple of 32, at least 32, not {size!r}")
    net = _Builder("vgg19", seed, per_channel)
    x = net.input((batch, size, size, 3))
    for s, (convs, channels) in enumerate(VGG19_STAGES, start=1):
        for i in range(1, convs + 1):
            x = net.conv(x, 3, channels, name=f"conv{s}_{i}")
        x = net.max_pool(x, 2, 2, 0, name=f"pool{s}")
    pooled = x
    x = net.g.flatten(x, name="flat")
    net.calib[x] = reference.flatten(net.calib[pooled])
    x = net.dense(x, 4096, relu=True, name="fc6")
    x = net.dense(x, 4096, relu=True, name="fc7")
    net.dense(x, classes, relu=False, name="fc8")
    return net.g.build()


def small_cnn(seed: int = 0, *, batch: int = 1, size: int = 16, channels: int = 8,
              classes: int = 10, per_channel: bool = True) -> Graph:
    """A small residual CNN for the ``tiny`` chip: int8 ``(batch, size, size, 3)``
    image (3 channels: replicated on an 8-row array), 3x3 convolution to `channels`
    (ReLU), 2x2 max pool, a residual block (two 3x3 convolutions, Add, ReLU), global
    average pool, flatten, dense to `classes` int8 logits. 0.13 M MACs as given."""
    net = _Builder("small_cnn", seed, per_channel)
    x = net.input((batch, size, size, 3))
    x = net.conv(x, 3, channels, name="conv1")
    x = net.max_pool(x, 2, 2, 0, name="pool1")
    a = net.conv(x, 3, channels, name="block_conv1")
    b = net.conv(a, 3, channels, relu=False, name="block_conv2")
    x = net.add(b, x, name="block_add")
    net.head(x, classes)
    return net.g.build()


def bottleneck_block(batch: int = 1, size: int = 8, cin: int = 16, width: int = 8,
                     stride: int = 1, seed: int = 0, *, per_channel: bool = True) -> Graph:
    """One ResNet bottleneck with a projection shortcut on a post-ReLU int8
    ``(batch, size, size, cin)`` map (zero point -128): output ``(batch, size/stride,
    size/stride, 4 * width)`` (``size`` rounded up when odd)."""
    net = _Builder("bottleneck", seed, per_channel)
    x = net.input((batch, size, size, cin), zero_point=RELU_ZP)
    net.bottleneck(x, width, stride, projection=True, name="block")
    return net.g.build()


def branches(M: int, widths: tuple[int, ...], seed: int = 0, *, after: bool = True,
             direct: bool = False, joined: bool = True, name: str = "branches") -> Graph:
    """Dense branches ``widths[i]`` wide from one ``[M, 6]`` input (with `direct`, graph
    inputs of those widths instead) joined by a Concat, then a dense layer to 5 over
    the join (`after`) or the join as the output. ``joined=False``: the layer after
    reads the branches as separate tensors instead (no Concat; the same numbers)."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder(name)
    if direct:
        parts = [g.input(rng.integers(-128, 128, (M, k), dtype=np.int8), name=f"x{i}")
                 for i, k in enumerate(widths)]
    else:
        x = g.input(rng.integers(-128, 128, (M, 6), dtype=np.int8), name="x")
        parts = [g.dense(x, rng.integers(-128, 128, (6, k), dtype=np.int8),
                         rng.integers(-500, 500, k, dtype=np.int32), shift=8, zp=3,
                         name=f"d{i}") for i, k in enumerate(widths)]
    joint = g.concat(*parts, name="cat") if joined else parts
    if after or not joined:
        g.dense(joint, rng.integers(-128, 128, (sum(widths), 5), dtype=np.int8), shift=9,
                relu=True, name="after")
    return g.build()
