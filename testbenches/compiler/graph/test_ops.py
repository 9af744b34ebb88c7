"""The CNN front end: op construction and shape inference (errors name the layer), the
numpy reference of each op against a plain loop formulation written here from
docs/cnn.md, and the model builders (ResNet-50's 53 convolutions and 4.09 G MACs)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from systolica.compiler import CompileError
from systolica.compiler.graph import reference
from systolica.compiler.graph.graph import GraphBuilder, Tensor
from systolica.compiler.graph.ops import (
    Add,
    AvgPool2d,
    Conv2d,
    Dense,
    Flatten,
    GlobalAvgPool,
    MaxPool2d,
    average_params,
)
from systolica.models import zoo as models

RNG = np.random.default_rng(7)


def int8(shape, rng=RNG):
    return rng.integers(-128, 128, size=shape).astype(np.int8)


def fmap(shape, zp=0):
    return Tensor("x", tuple(shape), "int8", _quant(zp))


def _quant(zp):
    from systolica.compiler.graph.ops import Quant
    return Quant(zp)


def source(name):
    return f"tensor {name!r}"


def W(kh=3, kw=3, cin=4, cout=8):
    return np.ones((kh, kw, cin, cout), np.int8)


# -- construction ------------------------------------------------------------------------
@pytest.mark.parametrize("build, words", [
    (lambda: Conv2d(W(cout=9), groups=2, name="g"),
     ["layer 'g'", "groups = 2", "Cout = 9", "Cin = 2 x 4 = 8", "dividing both"]),
    (lambda: Conv2d(W(cin=1, cout=6), groups=4, name="dw"), ["layer 'dw'", "groups = 4",
                                                              "(3, 3, 1, 6)", "Cout = 6"]),
    (lambda: Conv2d(W(), groups=0, name="dw"), ["layer 'dw'", "groups = 0",
                                                "positive integer"]),
    (lambda: Conv2d(W(), pads=(3, 0, 0, 0), name="c"),
     ["layer 'c'", "pads top = 3", "kernel extent 3"]),
    (lambda: Conv2d(W(), pads=(0, 0, 0, -1), name="c"), ["layer 'c'", "pads right = -1"]),
    (lambda: Conv2d(W(), pads=(1, 1), name="c"), ["layer 'c'", "pads", "4 integers"]),
    (lambda: Conv2d(W(1, 1), pads=1, name="c"), ["layer 'c'", "pads top = 1", "extent 1"]),
    (lambda: Conv2d(W(3, 3), dilation=2, pads=(5, 0, 0, 0), name="c"),
     ["pads top = 5", "extent 5"]),
    (lambda: Conv2d(W(), stride=5, name="c"), ["layer 'c'", "stride sh = 5", "[1, 4]"]),
    (lambda: Conv2d(W(), stride=(1, 0), name="c"), ["stride sw = 0", "[1, 4]"]),
    (lambda: Conv2d(W(), dilation=0, name="c"), ["dilation dh = 0", ">= 1"]),
    (lambda: Conv2d(W(65, 1), name="c"), ["layer 'c'", "KH = 65", "larger than 64",
                                           "6-bit field", "MATMUL"]),
    (lambda: Conv2d(np.ones((3, 3, 4)), name="c"), ["layer 'c'", "weights", "4-D"]),
    (lambda: Conv2d(np.full((3, 3, 4, 8), 200), name="c"),
     ["layer 'c'", "weights[0, 0, 0, 0] = 200"]),
    (lambda: Conv2d(W(), np.zeros(7), name="c"), ["bias has 7", "Cout = 8"]),
    (lambda: Conv2d(W(), mult=0, name="c"), ["layer 'c'", "mult = 0", "[1, 65535]"]),
    (lambda: Conv2d(W(), mult=np.ones(7, int), name="c"),
     ["mult has 7 elements", "Cout = 8"]),
    (lambda: Conv2d(W(), shift=np.array([0, 1, 2, 3, 64, 0, 0, 0]), name="c"),
     ["layer 'c'", "shift[4] = 64", "[0, 63]"]),
    (lambda: Conv2d(W(), mult=np.full(8, 1 << 16), name="c"), ["mult[0] = 65536"]),
    (lambda: Conv2d(W(), zp=128, name="c"), ["zp = 128", "[-128, 127]"]),
    (lambda: Conv2d(W(), relu=1, name="c"), ["relu must be True or False"]),
    (lambda: Conv2d(W(), zp=10, relu6=5, name="c"), ["relu6 = 5", "below zp = 10"]),
    (lambda: Conv2d(W(), relu6=200, name="c"), ["relu6 = 200", "[-128, 127]"]),
    (lambda: Conv2d(W(), name=""), ["name must be a non-empty string"]),
    (lambda: Conv2d(W(), out_dtype="int16", name="c"), ["layer 'c'", "out_dtype", "int16"]),
    (lambda: Conv2d(W(), mult=3, out_dtype="int32", name="c"),
     ["layer 'c'", "int32 output is not requantised"]),
    (lambda: Conv2d(W(), relu=True, out_dtype="int32", name="c"),
     ["layer 'c'", "int32 output is not requantised"]),
    (lambda: Conv2d(W(3, 3, 1, 4), groups=4, out_dtype="int32", name="c"),
     ["layer 'c'", "int32 output", "not depthwise ones", "groups = 4"]),
    (lambda: MaxPool2d(3, 2, 3, name="p"), ["layer 'p'", "pads top = 3", "extent 3"]),
    (lambda: MaxPool2d(65, name="p"), ["layer 'p'", "kernel kh = 65", "[1, 64]"]),
    (lambda: MaxPool2d(2, 5, name="p"), ["layer 'p'", "stride sh = 5"]),
    (lambda: AvgPool2d(2, mult=3, name="p"), ["layer 'p'", "both mult and shift"]),
    (lambda: AvgPool2d(2, mult=0, shift=2, name="p"), ["layer 'p'", "mult = 0"]),
    (lambda: GlobalAvgPool(None, None, name="g"), ["layer 'g'", "needs mult and shift"]),
    (lambda: GlobalAvgPool(1, 64, name="g"), ["layer 'g'", "shift = 64"]),
    (lambda: Add(128, 1, name="a"), ["layer 'a'", "mult_a = 128", "[-128, 127]"]),
    (lambda: Add(1, -129, name="a"), ["layer 'a'", "mult_b = -129"]),
    (lambda: Add(1, 1, 64, name="a"), ["layer 'a'", "shift = 64"]),
    (lambda: Add(relu="yes", name="a"), ["layer 'a'", "relu must be True or False"]),
    (lambda: Flatten(name=None), ["name must be a non-empty string"]),
])
def test_construction_errors_name_the_layer(build, words):
    with pytest.raises(CompileError) as info:
        build()
    for word in words:
        assert word in str(info.value), str(info.value)


@pytest.mark.parametrize("shape, groups, depthwise, cin", [
    ((3, 3, 4, 8), 1, False, 4),
    ((3, 3, 1, 8), 8, True, 8),        # depthwise: groups = Cin = Cout
    ((3, 3, 1, 1), 1, False, 1),       # one channel: groups = 1, an ordinary convolution
    ((3, 3, 1, 8), 4, False, 4),       # one input channel per group, two outputs
    ((3, 3, 2, 8), 4, False, 8),
    ((1, 1, 4, 64), 32, False, 128),   # ResNeXt's 32 groups
])
def test_groups_depthwise_and_cin(shape, groups, depthwise, cin):
    op = Conv2d(np.ones(shape, np.int8), groups=groups, name="c")
    assert (op.depthwise, op.grouped, op.Cin) == (depthwise, groups > 1 and not depthwise,
                                                  cin)
    assert op.macs((1, 2, 2, shape[3])) == 4 * shape[3] * shape[0] * shape[1] * shape[2]


def test_relu6_implies_relu_and_parameters_are_normalised():
    c = Conv2d(W(), stride=2, pads=1, dilation=(1, 2), zp=-5, relu6=90,
               mult=np.arange(1, 9), shift=3, name="c")
    assert (c.stride, c.pads, c.dilation, c.relu, c.relu6) == \
        ((2, 2), (1, 1, 1, 1), (1, 2), True, 90)
    assert c.extent == (3, 5) and c.mult.tolist() == list(range(1, 9)) and c.shift == 3
    assert MaxPool2d(3).stride == (3, 3)                  # stride defaults to the kernel
    assert AvgPool2d((2, 3)).mult, AvgPool2d((2, 3)).shift == average_params(6)


# -- shape inference ---------------------------------------------------------------------
@pytest.mark.parametrize("op, shape, want", [
    (Conv2d(W(7, 7, 3, 64), stride=2, pads=3), (1, 224, 224, 3), (1, 112, 112, 64)),
    (Conv2d(W(3, 3), pads=(1, 0, 0, 2)), (2, 5, 6, 4), (2, 4, 6, 8)),     # asymmetric
    (Conv2d(W(3, 3), dilation=2, pads=2), (1, 9, 9, 4), (1, 9, 9, 8)),
    (Conv2d(W(3, 3), dilation=(3, 1)), (1, 9, 9, 4), (1, 3, 7, 8)),
    (Conv2d(W(1, 5), stride=(1, 4), pads=(0, 2, 0, 2)), (1, 3, 17, 4), (1, 3, 5, 8)),
    (Conv2d(W(11, 11), stride=4, pads=2), (1, 227, 227, 4), (1, 56, 56, 8)),
    (Conv2d(W(3, 1), stride=(2, 1)), (1, 4, 1, 4), (1, 1, 1, 8)),
    (MaxPool2d(3, 2, 1), (1, 112, 112, 64), (1, 56, 56, 64)),
    (MaxPool2d((2, 3), (2, 1)), (1, 7, 7, 2), (1, 3, 5, 2)),
    (AvgPool2d(3, 1, (1, 1, 0, 0)), (1, 4, 4, 2), (1, 3, 3, 2)),
    (GlobalAvgPool(1, 0), (3, 7, 5, 16), (3, 1, 1, 16)),
    (Flatten(), (2, 3, 4, 5), (2, 60)),
    (Flatten(), (2, 1, 1, 5), (2, 5)),
])
def test_infer_shapes(op, shape, want):
    assert op.infer([fmap(shape)], source).shape == want


def test_output_zero_points():
    x = Tensor("x", (1, 4, 4, 8), "int8", _quant(-7))
    assert Conv2d(W(1, 1, 8, 8), zp=3).infer([x], source).quant.zero_point == 3
    assert MaxPool2d(2).infer([x], source).quant == x.quant
    assert AvgPool2d(2).infer([x], source).quant.zero_point == -7
    assert GlobalAvgPool(1, 0).infer([x], source).quant.zero_point == -7
    assert Add(zp=5).infer([x, x], source).quant.zero_point == 5
    assert Flatten().infer([x], source).quant == x.quant
    y = Conv2d(W(1, 1, 8, 8), out_dtype="int32").infer([x], source)
    assert (y.dtype, y.quant.zero_point) == ("int32", 0)


@pytest.mark.parametrize("op, inputs, words", [
    (Conv2d(W(3, 3, 4, 8), name="c"), [(1, 8, 8, 3)],
     ["layer 'c'", "Cin = 4", "C = 3"]),
    (Conv2d(W(5, 5, 4, 8), name="c"), [(1, 4, 9, 4)],
     ["layer 'c'", "spans 5 pixels along H", "H = 4", "empty"]),
    (Conv2d(W(3, 3, 4, 8), dilation=(1, 4), name="c"), [(1, 9, 8, 4)],
     ["spans 9 pixels along W", "W = 8"]),
    (Conv2d(W(), name="c"), [(8, 4)], ["layer 'c'", "4-D (N, H, W, C)"]),
    (MaxPool2d(3, name="p"), [(1, 2, 2, 1)], ["layer 'p'", "spans 3 pixels"]),
    (Flatten(name="f"), [(4, 8)], ["layer 'f'", "4-D"]),
    (Add(name="a"), [(1, 2, 2, 8), (1, 2, 2, 4)],
     ["layer 'a'", "(1, 2, 2, 8)", "(1, 2, 2, 4)", "equal shapes"]),
])
def test_infer_refuses(op, inputs, words):
    with pytest.raises(CompileError) as info:
        op.infer([fmap(s) for s in inputs], source)
    for word in words:
        assert word in str(info.value), str(info.value)


@pytest.mark.parametrize("count", list(range(1, 122)) + [196, 3136])
def test_average_params_are_the_most_precise_16_bit_reciprocal(count):
    mult, shift = average_params(count)
    assert 1 <= mult <= 65535 and 0 <= shift <= 63
    assert abs(mult - 2 ** shift / count) <= 0.5                   # rounded
    assert round(2 ** (shift + 1) / count) > 65535                 # one more bit overflows
    if count & (count - 1) == 0:
        assert mult * count == 2 ** shift                          # powers of two exact


# -- the graph -----------------------------------------------------------------------------
def test_builder_residual_graph():
    g = GraphBuilder("res")
    x = g.input(int8((1, 6, 6, 4)), zero_point=-3)
    c = g.conv2d(x, W(3, 3, 4, 4), pads=1, shift=4, relu=True)
    p = g.max_pool2d(c, 2)
    a = g.conv2d(p, W(1, 1, 4, 4), shift=2)
    s = g.add(p, a, relu=True, shift=1, name="sum")
    f = g.flatten(g.global_avg_pool(s))
    g.dense(f, np.ones((4, 3)))
    graph = g.build()
    assert [type(n.op).__name__ for n in graph.nodes] == \
        ["Conv2d", "MaxPool2d", "Conv2d", "Add", "GlobalAvgPool", "Flatten", "Dense"]
    assert [n.name for n in graph.nodes][:3] == ["conv0", "max_pool1", "conv2"]
    assert [n.name for n in graph.consumers(p)] == ["conv2", "sum"]     # fan-out
    assert graph.node("sum").inputs == (p, a)
    gap = graph.node("global_avg_pool4").op
    assert (gap.mult, gap.shift) == average_params(9)
    assert graph.tensor(f).shape == (1, 4) and graph.tensor(x).shape == (1, 6, 6, 4)
    assert reference.run(graph).shape == (1, 3)


@pytest.mark.parametrize("data, words", [
    (np.zeros(4, np.int8), ["input", "1-D"]),
    (np.zeros((1, 1, 1, 2, 2, 2, 2), np.int8), ["input", "7-D"]),
    (np.full((1, 2, 2, 3), 300), ["input[0, 0, 0, 0] = 300", "int8"]),
])
def test_builder_input_rank(data, words):
    with pytest.raises(CompileError) as info:
        GraphBuilder("n").input(data)
    for word in words:
        assert word in str(info.value), str(info.value)


@pytest.mark.parametrize("build, words", [
    (lambda g: g.conv2d("x", W(3, 3, 3, 4), groups=3, name="dw"), ["layer 'dw'", "groups"]),
    (lambda g: g.conv2d("x", W(3, 3, 1, 4), groups=2, name="g"),
     ["layer 'g'", "Cin = 2", "C = 3"]),
    (lambda g: g.conv2d("x", W(3, 3, 2, 4), name="c"), ["layer 'c'", "Cin = 2", "C = 3"]),
    (lambda g: g.add("x", g.conv2d("x", W(1, 1, 3, 4)), name="s"),
     ["layer 's'", "equal shapes"]),
    (lambda g: g.dense("x", np.ones((3, 2)), name="d"), ["layer 'd'", "2-D [M, K]"]),
    (lambda g: g.layer(Add(), ["x", "x", "x"]), ["reads 3 tensors", "at most 2"]),
])
def test_builder_refuses_cnn_layers(build, words):
    g = GraphBuilder("net")
    g.input(int8((1, 4, 4, 3)), name="x")
    with pytest.raises(CompileError) as info:
        build(g)
    for word in words:
        assert word in str(info.value), str(info.value)


# -- the reference against loops written from docs/cnn.md ---------------------------------
def scaled(v: int, mult: int, shift: int) -> int:
    return (v * mult + ((1 << (shift - 1)) if shift else 0)) >> shift


def wrap(v: int) -> int:
    return (v + (1 << 31)) % (1 << 32) - (1 << 31)


def conv_loops(x, x_zp, op: Conv2d):
    """Seven loops, one multiply-accumulate per step; a tap outside the map reads x_zp."""
    n_, h_, w_, _ = x.shape
    kh_, kw_, _, cout = op.weights.shape
    (sh, sw), (dh, dw), (top, left, bottom, right) = op.stride, op.dilation, op.pads
    ho = (h_ + top + bottom - dh * (kh_ - 1) - 1) // sh + 1
    wo = (w_ + left + right - dw * (kw_ - 1) - 1) // sw + 1
    mult = np.broadcast_to(op.mult, (cout,))
    shift = np.broadcast_to(op.shift, (cout,))
    y = np.zeros((n_, ho, wo, cout), np.int64)
    for n, oh, ow, co in itertools.product(range(n_), range(ho), range(wo), range(cout)):
        acc = 0 if op.bias is None else int(op.bias[co])
        # output channel co reads the input channels of its group (depthwise: co alone)
        per = op.weights.shape[2]
        group = co // (cout // op.groups)
        channels = [(group * per + wi, wi) for wi in range(per)]
        for kh, kw, (ci, wi) in itertools.product(range(kh_), range(kw_), channels):
            ih, iw = oh * sh + kh * dh - top, ow * sw + kw * dw - left
            v = int(x[n, ih, iw, ci]) if 0 <= ih < h_ and 0 <= iw < w_ else x_zp
            acc += (v - x_zp) * int(op.weights[kh, kw, wi, co])
        v = min(max(scaled(wrap(acc), int(mult[co]), int(shift[co])) + op.zp, -128), 127)
        if op.relu:
            v = max(v, op.zp)
        if op.relu6 is not None:
            v = min(v, op.relu6)
        y[n, oh, ow, co] = v
    return y


def window_loops(x, kernel, stride, pads, combine):
    """`combine(values, n_padding)` over each window; padding pixels are not in values."""
    n_, h_, w_, c_ = x.shape
    (kh_, kw_), (sh, sw), (top, left, bottom, right) = kernel, stride, pads
    ho, wo = (h_ + top + bottom - kh_) // sh + 1, (w_ + left + right - kw_) // sw + 1
    y = np.zeros((n_, ho, wo, c_), np.int64)
    for n, oh, ow, c in itertools.product(range(n_), range(ho), range(wo), range(c_)):
        values, padding = [], 0
        for kh, kw in itertools.product(range(kh_), range(kw_)):
            ih, iw = oh * sh + kh - top, ow * sw + kw - left
            if 0 <= ih < h_ and 0 <= iw < w_:
                values.append(int(x[n, ih, iw, c]))
            else:
                padding += 1
        y[n, oh, ow, c] = combine(values, padding)
    return y


CONVS = [      # shift "auto": scale the accumulator's spread to about 40 steps
    dict(weights=(3, 3, 3, 4)),
    dict(weights=(3, 3, 3, 4), pads=1, bias=True, zp=-4, relu=True),
    dict(weights=(3, 2, 5, 3), pads=(2, 0, 1, 1), stride=(2, 1)),
    dict(weights=(3, 3, 2, 3), dilation=(2, 3), pads=(4, 1, 0, 6), zp=7),
    dict(weights=(5, 5, 2, 2), stride=4, pads=(1, 3, 4, 2), relu=True),
    dict(weights=(1, 1, 6, 5), mult=[1, 300, 65535, 77, 2], shift=[8, 16, 24, 14, 9]),
    dict(weights=(3, 3, 3, 4), pads=1, bias=True, mult=[100, 200, 300, 400], zp=-20,
         relu6=40),
    dict(weights=(1, 1, 2, 2), bias=[(1 << 31) - 1, -(1 << 31)], shift=30),   # wraps
    # depthwise: one kernel per channel
    dict(weights=(3, 3, 1, 5), groups=5, pads=1, bias=True, relu=True),
    dict(weights=(3, 3, 1, 4), groups=4, stride=2, dilation=(1, 2), pads=(1, 2, 0, 1),
         mult=[100, 200, 300, 400], zp=-20, relu6=40),
    # grouped: output channel o reads the input channels of group o // (Cout / groups)
    dict(weights=(3, 3, 2, 6), groups=3, pads=1, bias=True),
    dict(weights=(1, 1, 4, 8), groups=2, stride=2, mult=list(range(100, 900, 100))),
    dict(weights=(3, 2, 1, 6), groups=3, dilation=(2, 1), pads=(1, 0, 2, 1), zp=5,
         relu=True),         # one input channel per group, two outputs: not depthwise
]


@pytest.mark.parametrize("case", range(len(CONVS)))
@pytest.mark.parametrize("x_zp", [0, -128, 37])
def test_conv_reference_matches_loops(case, x_zp):
    rng = np.random.default_rng([case, x_zp + 128])
    spec = dict(CONVS[case])
    w = int8(spec.pop("weights"), rng)
    x = int8((2, 7, 9, w.shape[2] * spec.get("groups", 1)), rng)
    bias = spec.pop("bias", None)
    if bias is True:
        bias = rng.integers(-5000, 5000, w.shape[3])
    if "shift" not in spec:
        spread = np.sqrt(w[..., 0].size) * w.std() * np.sqrt(np.mean((x - x_zp) ** 2.0))
        spread *= np.mean(spec.get("mult", 1))
        spec["shift"] = max(0, round(np.log2(spread / 40)))
    op = Conv2d(w, bias, name="c", **spec)
    got = reference.conv2d(x, x_zp, op)
    want = conv_loops(x, x_zp, op)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want)
    inside = np.mean((got > -128) & (got < 127) & (got != op.zp))
    assert inside > 0.3, inside                     # the case is not degenerate
    if op.groups == 1:              # the accumulator itself, as an int32 output
        wide = Conv2d(w, bias, stride=op.stride, pads=op.pads, dilation=op.dilation,
                      out_dtype="int32", name="c")
        acc = reference.conv2d(x, x_zp, wide)
        assert acc.dtype == np.int32
        np.testing.assert_array_equal(acc, reference.conv2d_acc(x, x_zp, op))


POOLS = [((2, 2), (2, 2), (0, 0, 0, 0)), ((3, 3), (2, 2), (1, 1, 1, 1)),
         ((3, 2), (1, 2), (2, 0, 0, 1)), ((1, 1), (4, 3), (0, 0, 0, 0))]


@pytest.mark.parametrize("kernel, stride, pads", POOLS)
def test_max_pool_reference_matches_loops(kernel, stride, pads):
    x = int8((2, 7, 8, 3))
    got = reference.max_pool2d(x, MaxPool2d(kernel, stride, pads))
    np.testing.assert_array_equal(got, window_loops(x, kernel, stride, pads,
                                                    lambda v, _: max(v)))


def test_max_pool_padding_never_wins():
    x = np.full((1, 3, 3, 1), -128, np.int8)
    assert (reference.max_pool2d(x, MaxPool2d(3, 1, 1)) == -128).all()


@pytest.mark.parametrize("kernel, stride, pads", POOLS)
@pytest.mark.parametrize("x_zp, given", [(0, None), (-128, None), (11, (3, 4))])
def test_avg_pool_reference_matches_loops(kernel, stride, pads, x_zp, given):
    x = int8((2, 7, 8, 3))
    mult, shift = given or average_params(kernel[0] * kernel[1])
    op = AvgPool2d(kernel, stride, pads, *(given or (None, None)))

    def average(values, padding):          # padding pixels hold x_zp (counted)
        total = sum(v - x_zp for v in values) + padding * 0
        return min(max(x_zp + scaled(total, mult, shift), -128), 127)

    np.testing.assert_array_equal(reference.avg_pool2d(x, x_zp, op),
                                  window_loops(x, kernel, stride, pads, average))


@pytest.mark.parametrize("x_zp", [0, -128, 50])
def test_global_avg_pool_reference_matches_loops(x_zp):
    x = int8((2, 5, 3, 4))
    mult, shift = average_params(15)
    got = reference.global_avg_pool(x, x_zp, GlobalAvgPool(mult, shift))
    assert got.shape == (2, 1, 1, 4)
    for n, c in itertools.product(range(2), range(4)):
        total = sum(int(v) - x_zp for v in x[n, :, :, c].ravel())
        assert got[n, 0, 0, c] == min(max(x_zp + scaled(total, mult, shift), -128), 127)


@pytest.mark.parametrize("ma, mb, shift, zp, relu", [
    (1, 1, 0, 0, False), (91, 91, 7, -128, True), (-5, 127, 3, 20, True),
    (-128, -128, 1, 0, False)])
def test_add_reference_matches_loops(ma, mb, shift, zp, relu):
    a, b = int8((2, 3, 3, 5)), int8((2, 3, 3, 5))
    a_zp, b_zp = -128, 9
    got = reference.add(a, a_zp, b, b_zp, Add(ma, mb, shift, zp, relu))
    for i in np.ndindex(a.shape):
        v = zp + scaled(ma * (int(a[i]) - a_zp) + mb * (int(b[i]) - b_zp), 1, shift)
        v = min(max(v, -128), 127)
        assert got[i] == (max(v, zp) if relu else v), i


def test_flatten_is_h_w_c_order():
    x = int8((2, 3, 4, 5))
    got = reference.flatten(x)
    for n, h, w, c in np.ndindex(x.shape):
        assert got[n, (h * 4 + w) * 5 + c] == x[n, h, w, c]


def test_graph_reference_uses_each_inputs_zero_point():
    """`outputs` passes a tensor's own zero point to the layers that read it."""
    g = GraphBuilder("zp")
    x = g.input(int8((1, 4, 4, 2)), zero_point=-128)
    c = g.conv2d(x, int8((3, 3, 2, 2)), pads=1, shift=8, zp=-100, relu=True, name="c")
    g.add(c, g.avg_pool2d(x, 1, 1), mult_a=3, mult_b=-2, shift=2, name="s")
    graph = g.build()
    got = reference.outputs(graph)["s"]
    conv = conv_loops(graph.data[x], -128, graph.node("c").op)
    want = np.clip(((3 * (conv + 100) - 2 * (graph.data[x].astype(np.int64) + 128) + 2)
                    >> 2), -128, 127)
    np.testing.assert_array_equal(got, want)


# -- models ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def resnet():
    return models.resnet50()


@pytest.mark.slow
def test_resnet50_has_53_convolutions_and_4_09_g_macs(resnet):
    convs = [n for n in resnet.nodes if isinstance(n.op, Conv2d)]
    assert len(convs) == 53
    conv_macs = models.macs(resnet, (Conv2d,))
    assert conv_macs == pytest.approx(4.09e9, rel=0.005)
    by_hand = sum(int(np.prod(resnet.tensor(n.outputs[0]).shape[1:3]))
                  * int(np.prod(n.op.weights.shape)) for n in convs)
    assert conv_macs == by_hand
    assert models.macs(resnet) == conv_macs + 2048 * 1000
    assert sum(isinstance(n.op, Add) for n in resnet.nodes) == 16
    assert resnet.tensor(resnet.outputs[0]).shape == (1, 1000)
    stem, pool = resnet.node("conv1"), resnet.node("maxpool")
    assert (stem.op.kernel, stem.op.stride, stem.op.pads) == ((7, 7), (2, 2), (3, 3, 3, 3))
    assert resnet.tensor("maxpool").shape == (1, 56, 56, 64) and pool.op.pads == (1, 1, 1, 1)
    # v1.5: a downsampling block strides on its 3x3 convolution
    assert resnet.node("layer2_0_conv1").op.stride == (1, 1)
    assert resnet.node("layer2_0_conv2").op.stride == (2, 2)
    assert resnet.tensor("layer4_2_add").shape == (1, 7, 7, 2048)


@pytest.mark.slow
def test_resnet50_reference_does_not_saturate():
    graph = models.resnet50(size=32)
    values = reference.evaluate(graph)
    for node in graph.nodes:
        y = values[node.outputs[0]]
        zp = graph.tensor(node.outputs[0]).quant.zero_point
        clipped = np.mean((y == 127) | ((y == -128) & (zp != -128)))
        assert clipped < 0.02, (node.name, clipped)
        assert np.mean(y == zp) < 0.7, node.name           # not dead either
    logits = values["fc"]
    assert logits.shape == (1, 1000) and len(np.unique(logits)) > 100


def test_small_cnn_runs_and_is_small():
    graph = models.small_cnn()
    assert graph.tensor(graph.inputs[0]).shape == (1, 16, 16, 3)
    assert models.macs(graph) < 1e6
    assert [type(n.op).__name__ for n in graph.nodes] == \
        ["Conv2d", "MaxPool2d", "Conv2d", "Conv2d", "Add", "GlobalAvgPool", "Flatten",
         "Dense"]
    out = reference.run(graph)
    assert out.shape == (1, 10) and len(np.unique(out)) > 5 and np.abs(out).max() < 127
    assert np.array_equal(out, reference.run(models.small_cnn()))           # deterministic
    assert not np.array_equal(out, reference.run(models.small_cnn(seed=1)))


@pytest.mark.parametrize("stride", [1, 2])
def test_bottleneck_block(stride):
    graph = models.bottleneck_block(size=8, cin=16, width=8, stride=stride)
    assert sum(isinstance(n.op, Conv2d) for n in graph.nodes) == 4
    assert graph.tensor(graph.outputs[0]).shape == (1, 8 // stride, 8 // stride, 32)
    assert graph.tensor(graph.inputs[0]).quant.zero_point == models.RELU_ZP
    out = reference.run(graph)
    assert len(np.unique(out)) > 20


def test_layer_macs_counts_dense_and_conv_only():
    per_layer = models.layer_macs(models.small_cnn())
    assert per_layer["conv1"] == 16 * 16 * 3 * 3 * 3 * 8
    assert per_layer["block_conv1"] == 8 * 8 * 3 * 3 * 8 * 8
    assert per_layer["fc"] == 8 * 10
    assert per_layer["pool1"] == per_layer["block_add"] == per_layer["flat"] == 0
    assert Dense(np.ones((4, 3))).macs((5, 3)) == 60
