"""Numpy reference of the integer semantics: the oracle the compiled programs are
checked against. It shares no code with the lowering or the golden model.

Each function states one op of docs/cnn.md plainly: int64 arithmetic, explicit
padding with the input's zero point, one slice per kernel tap (vectorised over
pixels and channels)."""

from __future__ import annotations

import numpy as np

from systolica.compiler.graph.graph import (
    Add,
    AvgPool2d,
    Concat,
    Conv2d,
    Dense,
    Flatten,
    GlobalAvgPool,
    Graph,
    MatMulT,
    MaxPool2d,
    Network,
    Transpose,
    as_graph,
)


def wrap32(x: np.ndarray) -> np.ndarray:
    """Two's-complement int32 wrap of int64 values."""
    return ((x.astype(np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int64)


def requantise(x: np.ndarray, mult: int, shift: int, zp: int, relu: bool) -> np.ndarray:
    """VRUN's requantisation of int32 values to int8 (docs/contract.md)."""
    rounding = (1 << (shift - 1)) if shift else 0
    y = (x.astype(np.int64) * mult + rounding) >> shift
    y = np.clip(y + zp, -128, 127)
    if relu:
        y = np.maximum(y, zp)
    return y.astype(np.int8)


def scale_down(x: np.ndarray, mult, shift) -> np.ndarray:
    """``(x*mult + (1 << (shift-1) if shift else 0)) >> shift`` in int64, with `mult`
    and `shift` scalars or one per channel (the last axis of `x`)."""
    mult = np.asarray(mult, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    rounding = np.where(shift > 0, np.left_shift(np.int64(1), np.maximum(shift - 1, 0)), 0)
    return (x.astype(np.int64) * mult + rounding) >> shift


def dense(x: np.ndarray, layer: Dense) -> np.ndarray:
    acc = wrap32(x.astype(np.int64) @ layer.weights.astype(np.int64))
    if layer.bias is not None:
        acc = wrap32(acc + layer.bias.astype(np.int64))
    if layer.out_dtype == "int32":
        return (np.maximum(acc, 0) if layer.relu else acc).astype(np.int32)
    return requantise(acc, layer.mult, layer.shift, layer.zp, layer.relu)


def matmul_t(a: np.ndarray, b: np.ndarray, layer: MatMulT) -> np.ndarray:
    acc = wrap32(a.astype(np.int64) @ b.astype(np.int64).T)
    if layer.out_dtype == "int32":
        return (np.maximum(acc, 0) if layer.relu else acc).astype(np.int32)
    return requantise(acc, layer.mult, layer.shift, layer.zp, layer.relu)


def pad(x: np.ndarray, pads, value) -> np.ndarray:
    """`x` (N, H, W, C) as int64 with ``pads = (top, left, bottom, right)`` rows and
    columns of `value` around each map."""
    top, left, bottom, right = pads
    n, h, w, c = x.shape
    out = np.full((n, h + top + bottom, w + left + right, c), value, dtype=np.int64)
    out[:, top:top + h, left:left + w, :] = x
    return out


def taps(xp: np.ndarray, kernel, stride, dilation, out_hw):
    """For each kernel tap ``(i, j)``: the (N, H_out, W_out, C) input pixels it reads
    from the padded map `xp`."""
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = kernel, stride, dilation, out_hw
    for i in range(kh):
        for j in range(kw):
            yield i, j, xp[:, i * dh: i * dh + sh * (ho - 1) + 1: sh,
                           j * dw: j * dw + sw * (wo - 1) + 1: sw, :]


def out_size(size: int, lo: int, hi: int, k: int, s: int, d: int) -> int:
    return (size + lo + hi - d * (k - 1) - 1) // s + 1


def out_hw(x: np.ndarray, kernel, stride, pads, dilation=(1, 1)) -> tuple[int, int]:
    top, left, bottom, right = pads
    return (out_size(x.shape[1], top, bottom, kernel[0], stride[0], dilation[0]),
            out_size(x.shape[2], left, right, kernel[1], stride[1], dilation[1]))


def clamp8(y: np.ndarray) -> np.ndarray:
    return np.clip(y, -128, 127)


def conv2d(x: np.ndarray, x_zp: int, layer: Conv2d) -> np.ndarray:
    return conv2d_output(conv2d_acc(x, x_zp, layer), layer)


def conv2d_output(acc: np.ndarray, layer: Conv2d) -> np.ndarray:
    """The output of `layer` from its accumulator (bias included): int8, or with
    ``out_dtype="int32"`` the accumulator itself."""
    if layer.out_dtype == "int32":
        return acc.astype(np.int32)
    y = clamp8(scale_down(acc, layer.mult, layer.shift) + layer.zp)
    if layer.relu:
        y = np.maximum(y, layer.zp)
    if layer.relu6 is not None:
        y = np.minimum(y, layer.relu6)
    return y.astype(np.int8)


def conv2d_acc(x: np.ndarray, x_zp: int, layer: Conv2d) -> np.ndarray:
    """The int32 accumulator ``bias + sum over taps of (x_pad - x_zp) * w`` (as int64)."""
    w = layer.weights.astype(np.int64)
    kernel = w.shape[:2]
    hw = out_hw(x, kernel, layer.stride, layer.pads, layer.dilation)
    xp = pad(x.astype(np.int64) - x_zp, layer.pads, 0)     # x_pad - x_zp
    acc = np.zeros((x.shape[0], *hw, w.shape[3]), dtype=np.int64)
    g, cin, cout = layer.groups, w.shape[2], w.shape[3] // layer.groups
    for i, j, window in taps(xp, kernel, layer.stride, layer.dilation, hw):
        if g == 1:                  # every input channel to every output channel
            acc += window @ w[i, j]
        else:                       # group k: input channels k*cin.., outputs k*cout..
            acc += np.einsum("...gc,cgo->...go", window.reshape(*window.shape[:3], g, cin),
                             w[i, j].reshape(cin, g, cout)).reshape(acc.shape)
    acc = wrap32(acc)
    if layer.bias is not None:
        acc = wrap32(acc + layer.bias.astype(np.int64))
    return acc


def max_pool2d(x: np.ndarray, layer: MaxPool2d) -> np.ndarray:
    hw = out_hw(x, layer.kernel, layer.stride, layer.pads)
    xp = pad(x, layer.pads, np.iinfo(np.int64).min)           # padding never wins
    y = np.full((x.shape[0], *hw, x.shape[3]), np.iinfo(np.int64).min, dtype=np.int64)
    for _, _, window in taps(xp, layer.kernel, layer.stride, (1, 1), hw):
        y = np.maximum(y, window)
    return y.astype(np.int8)


def average(total: np.ndarray, x_zp: int, mult: int, shift: int) -> np.ndarray:
    return clamp8(x_zp + scale_down(total, mult, shift)).astype(np.int8)


def avg_pool2d(x: np.ndarray, x_zp: int, layer: AvgPool2d) -> np.ndarray:
    hw = out_hw(x, layer.kernel, layer.stride, layer.pads)
    xp = pad(x.astype(np.int64) - x_zp, layer.pads, 0)        # padding counts, as x_zp
    total = np.zeros((x.shape[0], *hw, x.shape[3]), dtype=np.int64)
    for _, _, window in taps(xp, layer.kernel, layer.stride, (1, 1), hw):
        total += window
    return average(total, x_zp, layer.mult, layer.shift)


def global_avg_pool(x: np.ndarray, x_zp: int, layer: GlobalAvgPool) -> np.ndarray:
    total = (x.astype(np.int64) - x_zp).sum(axis=(1, 2), keepdims=True)
    return average(total, x_zp if layer.zp is None else layer.zp, layer.mult, layer.shift)


def add(a: np.ndarray, a_zp: int, b: np.ndarray, b_zp: int, layer: Add) -> np.ndarray:
    total = layer.mult_a * (a.astype(np.int64) - a_zp) + \
        layer.mult_b * (b.astype(np.int64) - b_zp)
    y = clamp8(layer.zp + scale_down(total, 1, layer.shift))
    if layer.relu:
        y = np.maximum(y, layer.zp)
    return y.astype(np.int8)


def flatten(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], -1)         # NHWC: h, w, c order


def transpose(x: np.ndarray, perm) -> np.ndarray:
    """numpy's transpose; without `perm` the last two axes swap."""
    if perm is None:
        perm = list(range(x.ndim - 2)) + [x.ndim - 1, x.ndim - 2]
    return np.ascontiguousarray(np.transpose(x, perm))


def evaluate(graph: Graph) -> dict[str, np.ndarray]:
    """Every tensor of `graph` by name."""
    values = dict(graph.data)
    for node in graph.nodes:
        op, xs = node.op, [values[t] for t in node.inputs]
        zps = [graph.tensor(t).quant.zero_point for t in node.inputs]
        if isinstance(op, Dense):
            y = dense(np.concatenate(xs, axis=1), op)
        elif isinstance(op, Conv2d):
            y = conv2d(xs[0], zps[0], op)
        elif isinstance(op, MaxPool2d):
            y = max_pool2d(xs[0], op)
        elif isinstance(op, AvgPool2d):
            y = avg_pool2d(xs[0], zps[0], op)
        elif isinstance(op, GlobalAvgPool):
            y = global_avg_pool(xs[0], zps[0], op)
        elif isinstance(op, Add):
            y = add(xs[0], zps[0], xs[1], zps[1], op)
        elif isinstance(op, Flatten):
            y = flatten(xs[0])
        elif isinstance(op, Transpose):
            y = transpose(xs[0], op.perm)
        elif isinstance(op, MatMulT):
            y = matmul_t(xs[0], xs[1], op)
        elif isinstance(op, Concat):
            y = np.concatenate(xs, axis=-1)
        else:
            raise TypeError(f"reference: no semantics for layer {node.name!r} "
                            f"({type(op).__name__})")
        values[node.outputs[0]] = y
    return values


def outputs(network: Graph | Network) -> dict[str, np.ndarray]:
    """Every graph output by tensor name (a dense layer reading several tensors reads
    them concatenated along K)."""
    graph = as_graph(network)
    values = evaluate(graph)
    return {t: values[t] for t in graph.outputs}


def run(network: Graph | Network) -> np.ndarray:
    """The output of a single-output network: int8 or int32 ``[M, N]``."""
    outs = outputs(network)
    if len(outs) != 1:
        raise ValueError(f"the network has {len(outs)} outputs; use outputs()")
    return next(iter(outs.values()))
