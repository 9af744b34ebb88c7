"""The closed set of operation types a network graph may hold.

An op type is a frozen dataclass: its parameters are validated when it is built (the
error names the layer), and it declares how many tensors it reads (``arity``: least,
most or None for no limit) and, in ``infer``, the type of the tensor it produces from
the types it reads, refusing inputs it cannot take with a message that names the
layer and what to do. The graph verifier checks every node with it.

Feature maps are int8 ``(N, H, W, C)`` (NHWC); docs/cnn.md states each op's integer
semantics and ``compiler/graph/reference.py`` is their numpy statement. Every op also says
how many multiply-accumulates its weights cost (``macs``; 0 for ops without weights).

Adding an op type: its class here and in ``OPS``, and its lowering rule (a module of
``compiler/lowering/`` registering a ``Rule``; docs/walkthrough.md lists the rest).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from systolica.arch import isa
from systolica.compiler.errors import CompileError

INT8 = (-128, 127)
INT32 = (-(1 << 31), (1 << 31) - 1)
MULT_BITS = 16
SHIFT_MAX = 63
DTYPES = ("int8", "int32")
OUT_DTYPES = DTYPES


@dataclass(frozen=True)
class Quant:
    """How a tensor's integers map to real numbers, ``real = scale * (q - zero_point)``.
    The integer semantics are the ops' own (docs/contract.md); these parameters travel
    with the tensors for front ends and reports. ``scale`` is None when unknown."""
    zero_point: int = 0
    scale: float | None = None


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: str
    quant: Quant = Quant()


def _cut(value, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 5] + "..." + text[-2:]


def integer_array(what: str, values, ndim: int, lo: int, hi: int, kind: str,
                  dtype) -> np.ndarray:
    """`values` as a `dtype` array, or a CompileError naming the first bad element."""
    if values is None or isinstance(values, (str, bytes, bytearray, memoryview, dict,
                                             set, frozenset)):
        raise CompileError(f"{what} must be a {ndim}-D array of integers ({kind}), a "
                           f"numpy array or nested lists, not {type(values).__name__}"
                           + ("" if values is None else f" {_cut(values)}"))
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError) as e:
        raise CompileError(f"{what} must be a {ndim}-D array of integers ({kind}): {e}") \
            from None
    if arr.dtype.kind == "b":
        raise CompileError(f"{what} is a boolean array; give integers ({kind}), e.g. "
                           f"with .astype(np.{kind})")
    if arr.ndim != ndim:
        raise CompileError(f"{what} must be a {ndim}-D array, not shape {arr.shape}")
    if any(d < 1 for d in arr.shape):
        raise CompileError(f"{what} has an empty dimension (shape {arr.shape}); "
                           f"every dimension must be at least 1")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise CompileError(f"{what} must hold integers ({kind}), not {arr.dtype}; "
                               f"quantise it first")
    wide = arr.astype(np.int64) if arr.dtype != np.uint64 else arr
    bad = np.argwhere((wide < lo) | (wide > hi))
    if len(bad):
        idx = tuple(int(i) for i in bad[0])
        raise CompileError(f"{what}[{', '.join(map(str, idx))}] = {int(arr[idx])} does not "
                           f"fit {kind} [{lo}, {hi}] ({len(bad)} element(s) out of range)")
    return wide.astype(dtype)


@dataclass(frozen=True, eq=False)  # arrays inside: compare by identity
class Dense:
    """``y = post(x @ weights + bias)`` for int8 ``x`` of shape ``[M, K]``.

    ``weights`` is int8 ``[K, N]``, ``bias`` int32 ``[N]`` or None. With
    ``out_dtype="int8"`` the int32 sum is requantised as the VRUN instruction does:
    ``clamp(((x*mult + round) >> shift) + zp, -128, 127)``, then ReLU clamps at ``zp``.
    With ``out_dtype="int32"`` the sum is the output (ReLU clamps at 0) and the
    requantisation parameters must keep their defaults.

    A dense layer may read several tensors ``[M, K_i]`` (a join): they are read as one,
    concatenated along K, so ``weights`` has ``sum(K_i)`` rows, the first input's first.
    """

    weights: np.ndarray
    bias: np.ndarray | None = None
    mult: int = 1
    shift: int = 0
    zp: int = 0
    relu: bool = False
    out_dtype: str = "int8"
    name: str = "dense"

    arity: ClassVar[tuple[int, int | None]] = (1, None)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise CompileError(f"a layer's name must be a non-empty string, not {self.name!r}")
        who = f"layer {self.name!r}"
        w = integer_array(f"{who}: weights", self.weights, 2, *INT8, "int8", np.int8)
        object.__setattr__(self, "weights", w)
        if self.bias is not None:
            b = integer_array(f"{who}: bias", self.bias, 1, *INT32, "int32", np.int32)
            if b.shape[0] != w.shape[1]:
                raise CompileError(f"{who}: bias has {b.shape[0]} elements but the weights "
                                   f"have N = {w.shape[1]} output columns; they must match")
            object.__setattr__(self, "bias", b)
        if self.out_dtype not in OUT_DTYPES:
            raise CompileError(f"{who}: out_dtype must be one of {OUT_DTYPES}, "
                               f"not {self.out_dtype!r}")
        for pname, value, lo, hi in (("mult", self.mult, 0, (1 << MULT_BITS) - 1),
                                     ("shift", self.shift, 0, SHIFT_MAX),
                                     ("zp", self.zp, *INT8)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) \
                    or not lo <= value <= hi:
                raise CompileError(f"{who}: {pname} = {value!r} is out of range; it must be "
                                   f"an integer in [{lo}, {hi}]")
            object.__setattr__(self, pname, int(value))
        if self.mult == 0:
            raise CompileError(f"{who}: mult = 0 makes every output equal zp; give a "
                               f"mult in [1, {(1 << MULT_BITS) - 1}]")
        if not isinstance(self.relu, (bool, np.bool_)):
            raise CompileError(f"{who}: relu must be True or False, not {self.relu!r}")
        object.__setattr__(self, "relu", bool(self.relu))
        if self.out_dtype == "int32" and (self.mult, self.shift, self.zp) != (1, 0, 0):
            raise CompileError(f"{who}: int32 output is not requantised; leave mult, shift "
                               f"and zp at 1, 0, 0 or use out_dtype='int8'")

    @property
    def K(self) -> int:
        return self.weights.shape[0]

    @property
    def N(self) -> int:
        return self.weights.shape[1]

    def infer(self, inputs: Sequence, source: Callable[[str], str]) -> TensorType:
        """The output type for input tensors `inputs` (``.name``, ``.shape``,
        ``.dtype``); ``source(name)`` says where a tensor comes from, for messages."""
        who = f"layer {self.name!r}"
        for t in inputs:
            if t.dtype != "int8":
                raise CompileError(
                    f"{source(t.name)}: only the last layer may produce int32, but {who} "
                    f"reads its output and needs int8 activations; give it requantisation "
                    f"parameters (mult, shift, zp) and out_dtype='int8'")
            if len(t.shape) != 2:
                raise CompileError(f"{who}: reads {source(t.name)} of shape {t.shape}, but a "
                                   f"dense layer reads 2-D [M, K] activations")
        rows = {t.shape[0] for t in inputs}
        if len(rows) > 1:
            listed = ", ".join(f"{source(t.name)} has {t.shape[0]}" for t in inputs)
            raise CompileError(f"{who}: its inputs have different numbers of rows (M): "
                               f"{listed}; the tensors a layer reads must have equal M")
        k = sum(t.shape[1] for t in inputs)
        if self.K != k:
            if len(inputs) == 1:
                raise CompileError(f"{who}: weights have K = {self.K} rows but "
                                   f"{source(inputs[0].name)} has {k} columns; make them equal")
            listed = " + ".join(f"{t.shape[1]} ({source(t.name)})" for t in inputs)
            raise CompileError(f"{who}: weights have K = {self.K} rows but its inputs have "
                               f"{k} columns together ({listed}); the weights' rows follow "
                               f"the inputs' columns in order, so make them equal")
        zp = self.zp if self.out_dtype == "int8" else 0
        return TensorType((inputs[0].shape[0], self.N), self.out_dtype, Quant(zp))

    def macs(self, out_shape: tuple[int, ...]) -> int:
        """Multiply-accumulates for an output of shape `out_shape` (``M * K * N``)."""
        return math.prod(out_shape) * self.K




# -- convolutional layers (docs/cnn.md) --------------------------------------------------
#: The largest kernel extent, ``dilation * (K - 1) + 1``, along each axis. A tap's
#: offset in the window, ``kernel index * dilation``, is the MATMUL's ``dh``/``dw``
#: field (``isa.TAP_BITS`` wide; the tap tables' signed deltas between two taps,
#: ``isa.TAP_DELTA_BITS``, are one bit wider), so it runs from 0 to
#: ``2**TAP_BITS - 1``. Nothing else in the window walk bounds a kernel: the tile
#: loop's window grows with it and the planner fits it to the CBUF or refuses. (A
#: dilated kernel's extent is checked against the same field when it is lowered.)
KERNEL_MAX = 1 << isa.TAP_BITS
STRIDE_MAX = 4
ADD_MULT = INT8           # Add's multipliers are the weights of a diagonal block


def _check_name(name) -> str:
    if not isinstance(name, str) or not name:
        raise CompileError(f"a layer's name must be a non-empty string, not {name!r}")
    return f"layer {name!r}"


def _int(who: str, pname: str, value, lo: int, hi: int | None) -> int:
    """`value` as an int in ``[lo, hi]`` (``hi`` None: no upper bound)."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)) \
            or value < lo or (hi is not None and value > hi):
        wanted = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"
        raise CompileError(f"{who}: {pname} = {value!r} is out of range; it must be {wanted}")
    return int(value)


def _ints(who: str, pname: str, value, n: int, lo: int, hi: int | None,
          order: str) -> tuple[int, ...]:
    """One int (used for all `n`) or `n` ints, each in ``[lo, hi]``, as a tuple."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        value = (value,) * n
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)) \
            or len(value) != n:
        raise CompileError(f"{who}: {pname} must be an integer or {n} integers {order}, "
                           f"not {value!r}")
    names = order.strip("()").split(", ")
    return tuple(_int(who, f"{pname} {names[i]}", v, lo, hi) for i, v in enumerate(value))


def _channel_param(who: str, pname: str, value, lo: int, hi: int, channels: int):
    """An int in ``[lo, hi]``, or a 1-D int64 array of one such value per output channel."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return _int(who, pname, value, lo, hi)
    if isinstance(value, (bool, np.bool_)) or value is None or isinstance(value, str):
        raise CompileError(f"{who}: {pname} must be an integer in [{lo}, {hi}] or one per "
                           f"output channel, not {value!r}")
    arr = integer_array(f"{who}: {pname}", value, 1, INT32[0], INT32[1], "int32", np.int64)
    if arr.shape[0] != channels:
        raise CompileError(f"{who}: {pname} has {arr.shape[0]} elements but the layer has "
                           f"Cout = {channels} output channels; give one per channel or "
                           f"a single integer")
    bad = np.flatnonzero((arr < lo) | (arr > hi))
    if len(bad):
        raise CompileError(f"{who}: {pname}[{bad[0]}] = {int(arr[bad[0]])} is out of range; "
                           f"each must be an integer in [{lo}, {hi}]")
    arr.flags.writeable = False
    return arr


def _bool(who: str, pname: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise CompileError(f"{who}: {pname} must be True or False, not {value!r}")
    return bool(value)


def _feature_map(who: str, op: str, t, source: Callable[[str], str]) -> None:
    """Refuse a tensor `op` cannot read as an int8 NHWC feature map."""
    if t.dtype != "int8":
        raise CompileError(
            f"{source(t.name)}: only the last layer may produce int32, but {who} reads its "
            f"output and needs int8 activations; give it requantisation parameters")
    if len(t.shape) != 4:
        raise CompileError(f"{who}: reads {source(t.name)} of shape {t.shape}, but a {op} "
                           f"reads a 4-D (N, H, W, C) feature map")


def _window(who: str, source: str, shape: tuple[int, ...], kernel: tuple[int, int],
            stride: tuple[int, int], pads: tuple[int, int, int, int],
            dilation: tuple[int, int] = (1, 1)) -> tuple[int, int]:
    """Output ``(H_out, W_out)`` of a window over the (N, H, W, C) `shape`:
    ``(H + top + bottom - dh*(KH-1) - 1) // sh + 1``, and the same along W."""
    top, left, bottom, right = pads
    out = []
    for axis, size, k, s, d, lo, hi in (("H", shape[1], kernel[0], stride[0], dilation[0],
                                         top, bottom),
                                        ("W", shape[2], kernel[1], stride[1], dilation[1],
                                         left, right)):
        extent, padded = d * (k - 1) + 1, size + lo + hi
        if extent > padded:
            raise CompileError(
                f"{who}: its kernel spans {extent} pixels along {axis} (kernel {k}, "
                f"dilation {d}) but {source} has {axis} = {size} ({padded} padded), so the "
                f"output would be empty; use a smaller kernel or more padding")
        out.append((padded - extent) // s + 1)
    return out[0], out[1]


def _check_pads(who: str, pads: tuple[int, int, int, int], extent: tuple[int, int]) -> None:
    for i, side in enumerate(("top", "left", "bottom", "right")):
        limit = extent[i % 2]
        if pads[i] >= limit:
            raise CompileError(f"{who}: pads {side} = {pads[i]} must be less than the "
                               f"(dilated) kernel extent {limit} along {'HW'[i % 2]}, or "
                               f"a window would hold padding only")


@dataclass(frozen=True, eq=False)  # arrays inside: compare by identity
class Conv2d:
    """2-D convolution of an int8 ``(N, H, W, Cin)`` map (docs/cnn.md).

    ``weights`` int8 ``[KH, KW, Cin / groups, Cout]`` (each kernel size 1 to
    :data:`KERNEL_MAX`, 64: the MATMUL's tap field), ``bias`` int32
    ``[Cout]`` or None; ``stride = (sh, sw)`` each 1 to 4 (an int: both), ``pads =
    (top, left, bottom, right)`` each below the dilated kernel extent (an int: all four),
    ``dilation = (dh, dw)`` each at least 1. ``acc = bias + sum over taps of
    (x_pad - x_zp) * w`` with the input padded with its own zero point, requantised as a
    dense layer with ``mult`` (1 to 65535) and ``shift`` (0 to 63), each an int or one per
    output channel, then ReLU clamps at ``zp``; ``relu6`` (an int8 value >= ``zp``, the
    quantised 6.0) also clamps above and implies ReLU (``relu`` becomes True).
    ``groups`` divides ``Cin`` and ``Cout``: output channel ``o`` reads the ``Cin /
    groups`` input channels of group ``o // (Cout / groups)`` (``groups = 1``: all of
    them; :attr:`depthwise`, ``groups = Cin = Cout`` with weights ``[KH, KW, 1, C]``:
    channel ``o`` alone). With ``out_dtype="int32"`` (groups = 1) ``acc`` is the
    output, an int32 map (ONNX's ``ConvInteger``): ``mult``, ``shift``, ``zp`` keep
    their defaults and there is no ReLU; only the last layer may make one (a transpose
    may read it). A 1-D convolution is one over an ``H = 1`` map with ``KH = 1``.
    """

    weights: np.ndarray
    bias: np.ndarray | None = None
    stride: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    mult: int | np.ndarray = 1
    shift: int | np.ndarray = 0
    zp: int = 0
    relu: bool = False
    relu6: int | None = None
    name: str = "conv"
    out_dtype: str = "int8"

    arity: ClassVar[tuple[int, int | None]] = (1, 1)

    def __post_init__(self):
        who = _check_name(self.name)
        w = integer_array(f"{who}: weights", self.weights, 4, *INT8, "int8", np.int8)
        object.__setattr__(self, "weights", w)
        for axis, k in zip("HW", w.shape[:2]):
            if k > KERNEL_MAX:
                raise CompileError(f"{who}: kernel size K{axis} = {k} is larger than "
                                   f"{KERNEL_MAX}: a tap's offset in the window (0 to "
                                   f"{KERNEL_MAX - 1}) is a {isa.TAP_BITS}-bit field of "
                                   f"the MATMUL instruction; split the kernel into "
                                   f"layers of at most {KERNEL_MAX} taps and add them")
        if self.bias is not None:
            b = integer_array(f"{who}: bias", self.bias, 1, *INT32, "int32", np.int32)
            if b.shape[0] != self.Cout:
                raise CompileError(f"{who}: bias has {b.shape[0]} elements but the weights "
                                   f"have Cout = {self.Cout} output channels; they must match")
            object.__setattr__(self, "bias", b)
        if not isinstance(self.groups, (int, np.integer)) or isinstance(self.groups, bool) \
                or self.groups < 1:
            raise CompileError(f"{who}: groups = {self.groups!r}; give a positive integer "
                               f"dividing Cout (1: a convolution over all input channels)")
        if self.Cout % self.groups:
            raise CompileError(f"{who}: groups = {self.groups} does not divide Cout = "
                               f"{self.Cout} (weights {w.shape}: Cin = {self.groups} x "
                               f"{w.shape[2]} = {w.shape[2] * self.groups}); each group "
                               f"needs Cout / groups output channels, so give groups "
                               f"dividing both Cin and Cout")
        object.__setattr__(self, "groups", int(self.groups))
        object.__setattr__(self, "stride",
                           _ints(who, "stride", self.stride, 2, 1, STRIDE_MAX, "(sh, sw)"))
        object.__setattr__(self, "dilation",
                           _ints(who, "dilation", self.dilation, 2, 1, None, "(dh, dw)"))
        object.__setattr__(self, "pads", _ints(who, "pads", self.pads, 4, 0, None,
                                               "(top, left, bottom, right)"))
        _check_pads(who, self.pads, self.extent)
        object.__setattr__(self, "mult", _channel_param(who, "mult", self.mult, 1,
                                                        (1 << MULT_BITS) - 1, self.Cout))
        object.__setattr__(self, "shift", _channel_param(who, "shift", self.shift, 0,
                                                         SHIFT_MAX, self.Cout))
        object.__setattr__(self, "zp", _int(who, "zp", self.zp, *INT8))
        relu = _bool(who, "relu", self.relu)
        if self.relu6 is not None:
            object.__setattr__(self, "relu6", _int(who, "relu6", self.relu6, *INT8))
            if self.relu6 < self.zp:
                raise CompileError(f"{who}: relu6 = {self.relu6} is below zp = {self.zp}; "
                                   f"the upper clamp (the quantised 6.0) must be >= zp")
            relu = True
        object.__setattr__(self, "relu", relu)
        if self.out_dtype not in OUT_DTYPES:
            raise CompileError(f"{who}: out_dtype must be one of {OUT_DTYPES}, "
                               f"not {self.out_dtype!r}")
        if self.out_dtype == "int32":
            if np.any(np.asarray(self.mult) != 1) or np.any(np.asarray(self.shift) != 0) \
                    or self.zp != 0 or relu:
                raise CompileError(f"{who}: int32 output is not requantised; leave mult, "
                                   f"shift and zp at 1, 0, 0 without relu, or use "
                                   f"out_dtype='int8'")
            if self.depthwise:
                raise CompileError(f"{who}: an int32 output is taken from convolutions "
                                   f"over channel groups, not depthwise ones (groups = "
                                   f"{self.groups} = Cin = Cout); use out_dtype='int8'")

    @property
    def kernel(self) -> tuple[int, int]:
        return self.weights.shape[0], self.weights.shape[1]

    @property
    def Cin(self) -> int:
        """Input channels: the weights' ``Cin`` times ``groups`` (depthwise: ``C``)."""
        return self.weights.shape[2] * self.groups

    @property
    def depthwise(self) -> bool:
        """One ``KH x KW`` kernel per channel (``groups = Cin = Cout > 1``, weights
        ``[KH, KW, 1, C]``): output channel ``c`` reads input channel ``c`` only. Other
        grouped convolutions (:attr:`grouped`) are not depthwise."""
        return self.groups > 1 and self.weights.shape[2] == 1 and self.groups == self.Cout

    @property
    def grouped(self) -> bool:
        """``groups > 1`` and not :attr:`depthwise`: output channel ``o`` reads the
        ``Cin / groups`` input channels of group ``o // (Cout / groups)``."""
        return self.groups > 1 and not self.depthwise

    @property
    def Cout(self) -> int:
        return self.weights.shape[3]

    @property
    def extent(self) -> tuple[int, int]:
        """The dilated kernel's extent ``(dh*(KH-1)+1, dw*(KW-1)+1)``."""
        return tuple(d * (k - 1) + 1 for d, k in zip(self.dilation, self.kernel))

    def infer(self, inputs: Sequence, source: Callable[[str], str]) -> TensorType:
        who = f"layer {self.name!r}"
        (t,) = inputs
        _feature_map(who, "convolution", t, source)
        if t.shape[3] != self.Cin:
            per = f" ({self.groups} groups of {self.weights.shape[2]})" if self.groups > 1 \
                else ""
            raise CompileError(f"{who}: weights have Cin = {self.Cin} input channels{per} "
                               f"but {source(t.name)} has C = {t.shape[3]}; make them equal")
        h, w = _window(who, source(t.name), t.shape, self.kernel, self.stride, self.pads,
                       self.dilation)
        return TensorType((t.shape[0], h, w, self.Cout), self.out_dtype,
                          Quant(self.zp if self.out_dtype == "int8" else 0))

    def macs(self, out_shape: tuple[int, ...]) -> int:
        """``N * H_out * W_out * KH * KW * Cin * Cout`` (``Cin`` per group: 1 for a
        depthwise convolution)."""
        return math.prod(out_shape) * self.kernel[0] * self.kernel[1] * self.weights.shape[2]


def _pool_geometry(op, who: str) -> None:
    object.__setattr__(op, "kernel", _ints(who, "kernel", op.kernel, 2, 1, KERNEL_MAX,
                                           "(kh, kw)"))
    stride = op.kernel if op.stride is None else op.stride
    object.__setattr__(op, "stride",
                       _ints(who, "stride", stride, 2, 1, STRIDE_MAX, "(sh, sw)"))
    object.__setattr__(op, "pads", _ints(who, "pads", op.pads, 4, 0, None,
                                         "(top, left, bottom, right)"))
    _check_pads(who, op.pads, op.kernel)


def average_params(count: int) -> tuple[int, int]:
    """``(mult, shift)`` with ``mult / 2**shift`` closest to ``1 / count``: the largest
    ``shift`` (at most 63) whose ``mult = round(2**shift / count)`` (halves up) fits the
    16-bit multiplier, so a power-of-two `count` is exact. Deterministic; the pooling
    ops use it when their ``mult``/``shift`` are not given."""
    if not isinstance(count, (int, np.integer)) or isinstance(count, bool) or count < 1:
        raise CompileError(f"average_params: the window size must be a positive integer, "
                           f"not {count!r}")
    limit = (1 << MULT_BITS) - 1
    best = None
    for shift in range(SHIFT_MAX + 1):
        mult = ((1 << shift) * 2 + count) // (2 * count)       # round half up
        if mult > limit:
            break
        if mult >= 1:
            best = mult, shift
    return best


def _average_params(op, who: str, count: int) -> None:
    """Validate or default an average's ``mult``/``shift`` for a window of `count`."""
    if (op.mult is None) != (op.shift is None):
        raise CompileError(f"{who}: give both mult and shift, or neither (then they are "
                           f"chosen for 1/{count})")
    if op.mult is None:
        mult, shift = average_params(count)
    else:
        mult = _int(who, "mult", op.mult, 1, (1 << MULT_BITS) - 1)
        shift = _int(who, "shift", op.shift, 0, SHIFT_MAX)
    object.__setattr__(op, "mult", mult)
    object.__setattr__(op, "shift", shift)


@dataclass(frozen=True)
class MaxPool2d:
    """Maximum over a ``kernel = (kh, kw)`` window (1 to :data:`KERNEL_MAX` each) moved
    by ``stride`` (default: the kernel; 1 to 4 each) over an int8 (N, H, W, C) map padded by
    ``pads = (top, left, bottom, right)`` (each below the kernel); padding never wins.
    The output has the input's quantisation."""

    kernel: tuple[int, int] | int = (2, 2)
    stride: tuple[int, int] | int | None = None
    pads: tuple[int, int, int, int] | int = (0, 0, 0, 0)
    name: str = "max_pool"

    arity: ClassVar[tuple[int, int | None]] = (1, 1)

    def __post_init__(self):
        _pool_geometry(self, _check_name(self.name))

    def infer(self, inputs: Sequence, source: Callable[[str], str]) -> TensorType:
        who = f"layer {self.name!r}"
        (t,) = inputs
        _feature_map(who, "max pool", t, source)
        h, w = _window(who, source(t.name), t.shape, self.kernel, self.stride, self.pads)
        return TensorType((t.shape[0], h, w, t.shape[3]), "int8", t.quant)

    def macs(self, out_shape: tuple[int, ...]) -> int:
        return 0


@dataclass(frozen=True)
class AvgPool2d:
    """Average over a window, geometry as :class:`MaxPool2d`, padding counted:
    ``y = clamp(x_zp + ((sum(x_pad - x_zp) * mult + round) >> shift))``. Without
    ``mult``/``shift`` they are :func:`average_params` of ``kh * kw``. The output keeps
    the input's zero point."""

    kernel: tuple[int, int] | int = (2, 2)
    stride: tuple[int, int] | int | None = None
    pads: tuple[int, int, int, int] | int = (0, 0, 0, 0)
    mult: int | None = None
    shift: int | None = None
    name: str = "avg_pool"

    arity: ClassVar[tuple[int, int | None]] = (1, 1)

    def __post_init__(self):
        who = _check_name(self.name)
        _pool_geometry(self, who)
        _average_params(self, who, self.kernel[0] * self.kernel[1])

    def infer(self, inputs: Sequence, source: Callable[[str], str]) -> TensorType:
        who = f"layer {self.name!r}"
        (t,) = inputs
        _feature_map(who, "average pool", t, source)
        h, w = _window(who, source(t.name), t.shape, self.kernel, self.stride, self.pads)
        return TensorType((t.shape[0], h, w, t.shape[3]), "int8", Quant(t.quant.zero_point))

    def macs(self, out_shape: tuple[int, ...]) -> int:
        return 0


@dataclass(frozen=True)
class GlobalAvgPool:
    """:class:`AvgPool2d` over the whole ``H x W``: ``(N, H, W, C) -> (N, 1, 1, C)``.
    ``mult``/``shift`` are required here (the window size is the input's);
    ``GraphBuilder.global_avg_pool`` picks them with :func:`average_params` of
    ``H * W`` when not given. ``zp``: the output's zero point (None: the input's, the
    average then ``x_zp + (sum(x - x_zp) * mult >> shift)``)."""

    mult: int
    shift: int
    name: str = "global_avg_pool"
    zp: int | None = None

    arity: ClassVar[tuple[int, int | None]] = (1, 1)

    def __post_init__(self):
        who = _check_name(self.name)
        if self.mult is None or self.shift is None:
            raise CompileError(f"{who}: a GlobalAvgPool needs mult and shift (the builder's "
                               f"global_avg_pool picks them for 1/(H*W) when not given)")
        _average_params(self, who, 1)
        if self.zp is not None:
            object.__setattr__(self, "zp", _int(who, "zp", self.zp, *INT8))

    def infer(self, inputs: Sequence, source: Callable[[str], str]) -> TensorType:
        who = f"layer {self.name!r}"
        (t,) = inputs
        _feature_map(who, "global average pool", t, source)
        zp = t.quant.zero_point if self.zp is None else self.zp
        return TensorType((t.shape[0], 1, 1, t.shape[3]), "int8", Quant(zp))

    def macs(self, out_shape: tuple[int, ...]) -> int:
        return 0


@dataclass(frozen=True)
class Add:
    """Elementwise sum of two int8 tensors of equal shape (a residual join):
    ``y = clamp(zp + ((mult_a*(a - a_zp) + mult_b*(b - b_zp) + round) >> shift))``,
    then ReLU clamps at ``zp``. ``mult_a``, ``mult_b`` in [-128, 127] (they are the
    weights of a diagonal block on the array), ``shift`` in [0, 63]."""

    mult_a: int = 1
    mult_b: int = 1
    shift: int = 0
    zp: int = 0
    relu: bool = False
    name: str = "add"

    arity: ClassVar[tuple[int, int | None]] = (2, 2)

    def __post_init__(self):
        who = _check_name(self.name)
        for pname, lo, hi in (("mult_a", *ADD_MULT), ("mult_b", *ADD_MULT),
                              ("shift", 0, SHIFT_MAX), ("zp", *INT8)):
            object.__setattr__(self, pname, _int(who, pname, getattr(self, pname), lo, hi))
        object.__setattr__(self, "relu", _bool(who, "relu", self.relu))

    def infer(self, inputs: Sequence, source: Callable[[str], str]) -> TensorType:
        who = f"layer {self.name!r}"
        a, b = inputs
        for t in inputs:        # the streaming CNN lowering adds feature maps
            _feature_map(who, "residual add", t, source)
        if a.shape != b.shape:
            raise CompileError(f"{who}: adds {source(a.name)} of shape {a.shape} to "
                               f"{source(b.name)} of shape {b.shape}; an Add needs equal "
                               f"shapes")
        return TensorType(a.shape, "int8", Quant(self.zp))

    def macs(self, out_shape: tuple[int, ...]) -> int:
        return 0


@dataclass(frozen=True)
class Flatten:
    """``(N, H, W, C) -> (N, H*W*C)`` in ``h, w, c`` order, for a dense layer to read.
    The output has the input's quantisation."""

    name: str = "flatten"

    arity: ClassVar[tuple[int, int | None]] = (1, 1)

    def __post_init__(self):
        _check_name(self.name)

    def infer(self, inputs: Sequence, source: Callable[[str], str]) -> TensorType:
        who = f"layer {self.name!r}"
        (t,) = inputs
        _feature_map(who, "flatten", t, source)
        n, h, w, c = t.shape
        return TensorType((n, h * w * c), "int8", t.quant)

    def macs(self, out_shape: tuple[int, ...]) -> int:
        return 0


@dataclass(frozen=True)
class Transpose:
    """``y = np.transpose(x, perm)`` for an int8 or int32 tensor of any rank: output axis ``k`` is
    input axis ``perm[k]``. ``perm=None`` swaps the last two axes (``[M, N] -> [N, M]``:
    ``y[j, i] = x[i, j]``). The output has the input's quantisation. The chip transposes
    on the array (seed 004, docs/contract.md "Transposes"): an N-D permutation is a
    batch of 2-D block transposes with strided DMAs, or, when the last axis stays, a
    copy of whole rows."""

    name: str = "transpose"
    perm: tuple[int, ...] | None = None

    arity: ClassVar[tuple[int, int | None]] = (1, 1)

    def __post_init__(self):
        who = _check_name(self.name)
        if self.perm is None:
            return
        try:
            perm = tuple(self.perm)
        except TypeError:
            raise CompileError(f"{who}: perm must be a sequence of axes (e.g. (0, 2, 1)), "
                               f"not {self.perm!r}") from None
        if not perm or not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool)
                               for a in perm):
            raise CompileError(f"{who}: perm {self.perm!r} must be a non-empty sequence of "
                               f"integer axes, e.g. (0, 2, 1)")
        object.__setattr__(self, "perm", tuple(int(a) for a in perm))

    def axes(self, rank: int, source: str = "its input") -> tuple[int, ...]:
        """The permutation for an input of `rank` axes (negative axes count from the
        end, as numpy's), or a CompileError naming the layer, the perm and the fault."""
        who = f"layer {self.name!r}"
        if self.perm is None:
            if rank < 2:
                raise CompileError(f"{who}: {source} has {rank} axis; a transpose without "
                                   f"perm swaps the last two axes, so give perm=(0,)")
            return tuple(range(rank - 2)) + (rank - 1, rank - 2)
        perm = self.perm
        if len(perm) != rank:
            raise CompileError(f"{who}: perm {perm} names {len(perm)} axes but {source} "
                               f"has {rank}; give one entry per axis, a permutation of "
                               f"0..{rank - 1}")
        bad = [a for a in perm if not -rank <= a < rank]
        if bad:
            raise CompileError(f"{who}: perm {perm} names axis {bad[0]}, but {source} has "
                               f"axes 0..{rank - 1} only")
        norm = tuple(a % rank for a in perm)
        if len(set(norm)) != rank:
            twice = next(a for a in norm if norm.count(a) > 1)
            raise CompileError(f"{who}: perm {perm} names axis {twice} twice; it must be a "
                               f"permutation of 0..{rank - 1}")
        return norm

    def infer(self, inputs: Sequence, source: Callable[[str], str]) -> TensorType:
        (t,) = inputs
        perm = self.axes(len(t.shape), f"{source(t.name)} (shape {t.shape})")
        return TensorType(tuple(t.shape[a] for a in perm), t.dtype, t.quant)

    def macs(self, out_shape: tuple[int, ...]) -> int:
        return 0


@dataclass(frozen=True)
class Concat:
    """``y = np.concatenate(xs, axis=-1)`` of two or more int8 tensors ``[M, K_i]`` with
    one ``M``, or feature maps ``(N, H, W, C_i)`` of one ``N, H, W`` (their channels),
    and one zero point (the output's quantisation is theirs). On the chip the lane
    router moves each ``[M, K_i]`` input's partition groups to their place in the
    output's rows (docs/compiler.md, "Concat through the lanes"), so every input but
    the last must have a multiple of the lane width (``tile_size``) columns; feature
    maps are laid out in DRAM as channel blocks of the output's (docs/cnn.md,
    "Concat of feature maps"), an input but the last whose channels are not a multiple
    of ``R`` padded to one by its producer (a convolution) with zero channels."""

    name: str = "concat"

    arity: ClassVar[tuple[int, int | None]] = (2, None)

    def __post_init__(self):
        _check_name(self.name)

    def infer(self, inputs: Sequence, source: Callable[[str], str]) -> TensorType:
        who = f"layer {self.name!r}"
        first = inputs[0]
        for t in inputs:
            if t.dtype != "int8" or len(t.shape) not in (2, 4) \
                    or len(t.shape) != len(first.shape):
                raise CompileError(f"{who}: concatenates int8 [M, K] tensors (their "
                                   f"columns) or int8 (N, H, W, C) feature maps (their "
                                   f"channels), all of one kind, but {source(t.name)} is "
                                   f"{t.dtype} of shape {t.shape} and {source(first.name)} "
                                   f"of shape {first.shape}")
            if len(t.shape) == 2 and t.shape[0] != first.shape[0]:
                raise CompileError(f"{who}: {source(t.name)} has {t.shape[0]} rows and "
                                   f"{source(first.name)} {first.shape[0]}; a Concat joins "
                                   f"columns of tensors with the same rows")
            if t.shape[:-1] != first.shape[:-1]:
                raise CompileError(f"{who}: {source(t.name)} has (N, H, W) {t.shape[:-1]} "
                                   f"and {source(first.name)} {first.shape[:-1]}; a Concat "
                                   f"joins the channels of maps of one batch and size")
            if t.quant.zero_point != first.quant.zero_point or None not in (
                    t.quant.scale, first.quant.scale) and t.quant.scale != first.quant.scale:
                raise CompileError(f"{who}: {source(t.name)} and {source(first.name)} are "
                                   f"quantised differently ({t.quant} and {first.quant}); "
                                   f"requantise them to one scale and zero point first")
        # a scale left unknown by a layer (None) takes a joined input's
        scale = next((t.quant.scale for t in inputs if t.quant.scale is not None), None)
        return TensorType((*first.shape[:-1], sum(t.shape[-1] for t in inputs)), "int8",
                          Quant(first.quant.zero_point, scale))

    def macs(self, out_shape: tuple[int, ...]) -> int:
        return 0


@dataclass(frozen=True)
class MatMulT:
    """``y = post(a @ bᵀ)`` for two int8 tensors of the graph, ``a [M, K]`` and
    ``b [N, K]`` (attention's ``Q·Kᵀ``): a dense layer whose weights are ``bᵀ``, a
    tensor rather than a parameter. ``post`` is :class:`Dense`'s without a bias:
    requantised to int8 by ``mult``, ``shift``, ``zp`` (ReLU at ``zp``), or the int32
    sums (``out_dtype="int32"``, ReLU at 0). The chip loads ``b``'s blocks along the
    array's rows (the west weight load), so ``bᵀ`` is never formed."""

    mult: int = 1
    shift: int = 0
    zp: int = 0
    relu: bool = False
    out_dtype: str = "int8"
    name: str = "matmul_t"

    arity: ClassVar[tuple[int, int | None]] = (2, 2)
    bias: ClassVar[None] = None

    def __post_init__(self):
        who = _check_name(self.name)
        if self.out_dtype not in OUT_DTYPES:
            raise CompileError(f"{who}: out_dtype must be one of {OUT_DTYPES}, "
                               f"not {self.out_dtype!r}")
        object.__setattr__(self, "mult", _int(who, "mult", self.mult, 1, (1 << MULT_BITS) - 1))
        object.__setattr__(self, "shift", _int(who, "shift", self.shift, 0, SHIFT_MAX))
        object.__setattr__(self, "zp", _int(who, "zp", self.zp, *INT8))
        object.__setattr__(self, "relu", _bool(who, "relu", self.relu))
        if self.out_dtype == "int32" and (self.mult, self.shift, self.zp) != (1, 0, 0):
            raise CompileError(f"{who}: int32 output is not requantised; leave mult, shift "
                               f"and zp at 1, 0, 0 or use out_dtype='int8'")

    def infer(self, inputs: Sequence, source: Callable[[str], str]) -> TensorType:
        who = f"layer {self.name!r}"
        a, b = inputs
        for t in (a, b):
            if t.dtype != "int8":
                raise CompileError(f"{who}: matmul_t reads int8 tensors, but "
                                   f"{source(t.name)} is {t.dtype}; give the layer before "
                                   f"it out_dtype='int8'")
            if len(t.shape) != 2:
                raise CompileError(f"{who}: matmul_t reads 2-D tensors, but "
                                   f"{source(t.name)} has shape {t.shape}")
        if a.name == b.name:
            raise CompileError(f"{who}: reads {source(a.name)} as both operands; a @ aᵀ "
                               f"needs the tensor twice at once: give it a copy")
        if a.shape[1] != b.shape[1]:
            raise CompileError(f"{who}: a @ bᵀ needs equal K, but {source(a.name)} has "
                               f"{a.shape[1]} columns and {source(b.name)} {b.shape[1]}; "
                               f"make them equal")
        zp = self.zp if self.out_dtype == "int8" else 0
        return TensorType((a.shape[0], b.shape[0]), self.out_dtype, Quant(zp))

    def macs(self, out_shape: tuple[int, ...]) -> int:
        return 0        # K is its inputs': the rule counts them (rules.MatMulTRule.macs)


#: Every op type a graph may hold.
OPS: tuple[type, ...] = (Dense, Conv2d, MaxPool2d, AvgPool2d, GlobalAvgPool, Add, Flatten,
                         Transpose, MatMulT, Concat)


def requant_for(scale, per_channel: bool = True):
    """``(mult, shift)`` with ``mult / 2**shift`` closest to `scale` (a positive float
    or one per channel) at the largest shift whose multipliers fit 16 bits. With
    `per_channel` False (or one scale) ``mult`` is an int: the mean scale's."""
    scale = np.atleast_1d(np.asarray(scale, dtype=np.float64))
    if not per_channel or len(scale) == 1:
        scale = np.array([scale.mean()])
    limit = (1 << MULT_BITS) - 1
    shift = 0
    while shift < SHIFT_MAX and np.all(np.round(scale * 2.0 ** (shift + 1)) <= limit):
        shift += 1
    mult = np.clip(np.round(scale * 2.0 ** shift), 1, limit).astype(np.int64)
    return (int(mult[0]) if len(mult) == 1 else mult), shift
