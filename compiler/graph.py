"""The networks the compiler accepts: a chain of dense (fully connected) layers.

Everything is validated when the objects are built, so a mistake is reported against
the layer that has it, before any lowering or memory allocation happens.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

INT8 = (-128, 127)
INT32 = (-(1 << 31), (1 << 31) - 1)
MULT_BITS = 16
SHIFT_MAX = 63
OUT_DTYPES = ("int8", "int32")


class CompileError(ValueError):
    """A network that cannot be compiled for the chosen chip, with the reason."""


def _integer_array(what: str, values, ndim: int, lo: int, hi: int, kind: str,
                   dtype) -> np.ndarray:
    """`values` as a `dtype` array, or a CompileError naming the first bad element."""
    if values is None:
        raise CompileError(f"{what} must be a {ndim}-D integer array, not None")
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError) as e:
        raise CompileError(f"{what} is not an array ({e}); give a {ndim}-D array of "
                           f"{kind} values") from None
    if arr.dtype.kind == "b":
        raise CompileError(f"{what} is a boolean array, not {kind}; convert it "
                           f"(e.g. .astype(np.int8)) if 0/1 values are meant")
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


def _check_name(what: str, name) -> None:
    if not isinstance(name, str) or not name:
        raise CompileError(f"a {what} name must be a non-empty string, not {name!r}")


@dataclass(frozen=True, eq=False)  # arrays inside: compare by identity
class Dense:
    """``y = post(x @ weights + bias)`` for int8 ``x`` of shape ``[M, K]``.

    ``weights`` is int8 ``[K, N]``, ``bias`` int32 ``[N]`` or None. With
    ``out_dtype="int8"`` the int32 sum is requantised as the VRUN instruction does:
    ``clamp(((x*mult + round) >> shift) + zp, -128, 127)``, then ReLU clamps at ``zp``.
    With ``out_dtype="int32"`` the sum is the output (ReLU clamps at 0) and the
    requantisation parameters must keep their defaults.
    """

    weights: np.ndarray
    bias: np.ndarray | None = None
    mult: int = 1
    shift: int = 0
    zp: int = 0
    relu: bool = False
    out_dtype: str = "int8"
    name: str = "dense"

    def __post_init__(self):
        _check_name("layer", self.name)
        who = f"layer {self.name!r}"
        w = _integer_array(f"{who}: weights", self.weights, 2, *INT8, "int8", np.int8)
        object.__setattr__(self, "weights", w)
        if self.bias is not None:
            b = _integer_array(f"{who}: bias", self.bias, 1, *INT32, "int32", np.int32)
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


@dataclass(frozen=True, eq=False)
class Network:
    """An int8 input ``[M, K]`` followed by a chain of dense layers.

    Layers without a name are called ``layer0``, ``layer1``, ... Intermediate results
    stay on chip, so every layer but the last must produce int8.
    """

    input: np.ndarray
    layers: tuple[Dense, ...] = field(default_factory=tuple)
    name: str = "network"

    def __post_init__(self):
        _check_name("network", self.name)
        x = _integer_array(f"network {self.name!r}: input", self.input, 2, *INT8, "int8",
                           np.int8)
        object.__setattr__(self, "input", x)
        if isinstance(self.layers, Dense) or not isinstance(self.layers, (list, tuple)):
            raise CompileError(f"network {self.name!r}: layers must be a list or tuple of "
                               f"Dense layers, not {type(self.layers).__name__}")
        layers = tuple(self.layers)
        if not layers:
            raise CompileError(f"network {self.name!r} has no layers; add at least one Dense")
        named = []
        for i, layer in enumerate(layers):
            if not isinstance(layer, Dense):
                raise CompileError(f"network {self.name!r}: layer {i} is a "
                                   f"{type(layer).__name__}, only Dense layers are supported")
            named.append(layer if layer.name != "dense" else
                         dataclasses.replace(layer, name=f"layer{i}"))
        names = [layer.name for layer in named]
        if len(set(names)) != len(names):
            raise CompileError(f"network {self.name!r}: layer names must be unique, got {names}")
        k = x.shape[1]
        for i, layer in enumerate(named):
            src = "the input" if i == 0 else f"layer {named[i - 1].name!r}"
            if layer.K != k:
                raise CompileError(f"layer {layer.name!r}: weights have K = {layer.K} rows but "
                                   f"{src} has {k} columns; make them equal")
            if layer.out_dtype != "int8" and i != len(named) - 1:
                raise CompileError(f"layer {layer.name!r}: only the last layer may produce "
                                   f"int32; the next layer needs int8 activations, so give "
                                   f"it requantisation parameters")
            k = layer.N
        object.__setattr__(self, "layers", tuple(named))

    @property
    def M(self) -> int:
        return self.input.shape[0]

    @property
    def out_shape(self) -> tuple[int, int]:
        return (self.M, self.layers[-1].N)


def gemm(a, b, bias=None, *, mult: int = 1, shift: int = 0, zp: int = 0,
         relu: bool = False, out_dtype: str = "int8", name: str = "gemm") -> Network:
    """One layer: ``post(a @ b + bias)`` with ``a`` int8 ``[M, K]`` and ``b`` int8 ``[K, N]``."""
    return Network(a, (Dense(b, bias, mult=mult, shift=shift, zp=zp, relu=relu,
                             out_dtype=out_dtype, name=name),), name=name)
