"""The closed set of operation types a network graph may hold.

An op type is a frozen dataclass: its parameters are validated when it is built (the
error names the layer), and it declares how many tensors it reads (``arity``: least,
most or None for no limit) and, in ``infer``, the type of the tensor it produces from
the types it reads, refusing inputs it cannot take with a message that names the
layer and what to do. The graph verifier checks every node with it.

Adding an op type: its class here and in ``OPS``, and its lowering rule
(``compiler/rules.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .errors import CompileError

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


def integer_array(what: str, values, ndim: int, lo: int, hi: int, kind: str,
                  dtype) -> np.ndarray:
    """`values` as a `dtype` array, or a CompileError naming the first bad element."""
    if values is None:
        raise CompileError(f"{what} must be a {ndim}-D array of integers ({kind}), not None")
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


#: Every op type a graph may hold.
OPS: tuple[type, ...] = (Dense,)
