"""The management core's kernels (``firmware/core/kernels.c``): their descriptors and
their integer algorithms (docs/management-core.md, "The core's kernels").

One source for both sides: the descriptors' layouts here generate the C structs
(:func:`descriptor_header`, ``kdesc.h`` beside the firmware's objects), the builders
(:func:`softmax`, :func:`argmax`, :func:`requantise`, :func:`add`) turn an ONNX
operator's parameters (scales, zero points, shapes) and where its tensors are in DRAM
(:class:`View`, :func:`chip_view`, :func:`array_view`) into the bytes the firmware
reads, and :func:`reference` computes what the firmware must, in numpy, from the
descriptor alone (it never runs the firmware).

This module is the firmware's interface, as :mod:`systolica.firmware.core_image`'s
mailbox is, not a compiler pass: the compiler's lowering of an operation assigned to
the core calls the builders and places the bytes with the network's parameters. Its
refusals are :class:`~systolica.compiler.errors.CompileError`, naming the operation
(`name`) and the parameter at fault.
"""

from __future__ import annotations

import enum
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from systolica.compiler.errors import CompileError

#: the core's byte address of DRAM byte 0 (its DRAM window) and how far it reaches
DRAM_WINDOW = 0x8000_0000
DRAM_WINDOW_BYTES = 1 << 31


class Kernel(enum.IntEnum):
    """A kernel step's ``kernel``: what the core computes."""
    SOFTMAX = 1
    ARGMAX = 2
    REQUANTISE = 3
    ADD = 4


class ElemType(enum.IntEnum):
    """A view's ``dtype``."""
    INT8 = 1
    UINT8 = 2
    INT32 = 3
    INT64 = 4


SIZE = {ElemType.INT8: 1, ElemType.UINT8: 1, ElemType.INT32: 4, ElemType.INT64: 8}
RANGE = {ElemType.INT8: (-128, 127), ElemType.UINT8: (0, 255),
         ElemType.INT32: (-(1 << 31), (1 << 31) - 1), ElemType.INT64: (-(1 << 63), (1 << 63) - 1)}
NUMPY = {ElemType.INT8: np.int8, ElemType.UINT8: np.uint8, ElemType.INT32: np.int32,
         ElemType.INT64: np.int64}
BY_NAME = {"int8": ElemType.INT8, "uint8": ElemType.UINT8, "int32": ElemType.INT32,
           "int64": ElemType.INT64}

#: the softmax's exponential table: T[d] = round(ONE * exp(-x_scale * d)), d in 0..255
SOFTMAX_ONE_BITS = 30
SOFTMAX_TABLE = 256
#: its output: NUM = round(2**NUM_BITS / y_scale), y = (T*floor(NUM/S) + half) >> NUM_BITS
SOFTMAX_NUM_BITS = 46
SOFTMAX_NUM_LIMIT = 1 << 62
#: the add's multipliers and shift (its sum stays within 32 bits)
ADD_MULT_BITS = 20
ADD_SHIFT_MAX = 31
#: the requantisation's multiplier (the chip's: 16 bits, compiler.graph.ops) and shift
REQUANT_MULT_LIMIT = 1 << 31
REQUANT_SHIFT_MAX = 63


# -- the layouts: one list of fields for Python and C -------------------------------------

VIEW_FIELDS = ("base", "dtype", "row_stride", "block", "block_stride", "elem_stride")

U32, I32, VIEW = "uint32_t", "int32_t", "struct kview"
HEAD = (("kernel", U32), ("rows", U32), ("cols", U32))

#: each descriptor's fields in order: (name, C type) or (name, C type, count)
FIELDS: Mapping[Kernel, tuple[tuple, ...]] = {
    Kernel.SOFTMAX: HEAD + (("x", VIEW), ("y", VIEW), ("out_zp", I32), ("out_min", I32),
                            ("out_max", I32), ("num_lo", U32), ("num_hi", U32),
                            ("table", U32, SOFTMAX_TABLE)),
    Kernel.ARGMAX: HEAD + (("x", VIEW), ("y", VIEW), ("select_last", U32)),
    Kernel.REQUANTISE: HEAD + (("x", VIEW), ("y", VIEW), ("x_zp", I32), ("mult", U32),
                               ("shift", U32), ("out_zp", I32), ("out_min", I32),
                               ("out_max", I32)),
    Kernel.ADD: HEAD + (("a", VIEW), ("b", VIEW), ("y", VIEW), ("a_zp", I32), ("b_zp", I32),
                        ("mult_a", U32), ("mult_b", U32), ("shift", U32), ("out_zp", I32),
                        ("out_min", I32), ("out_max", I32)),
}


def _words(spec: tuple) -> int:
    name, ctype, *count = spec
    return (len(VIEW_FIELDS) if ctype == VIEW else 1) * (count[0] if count else 1)


def descriptor_bytes(kernel: Kernel) -> int:
    return 4 * sum(_words(s) for s in FIELDS[kernel])


def descriptor_header() -> str:
    """``kdesc.h``: the kernel numbers, element types, the view and every descriptor as
    C structs of 32-bit words (this module's tables)."""
    lines = ["#include <stdint.h>", ""]
    lines += [f"#define KERNEL_{k.name} {k.value}u" for k in Kernel]
    lines += [f"#define KERNEL_COUNT {len(Kernel)}u", ""]
    lines += [f"#define ELEM_{t.name} {t.value}u" for t in ElemType]
    lines += ["", f"#define SOFTMAX_ONE (1u << {SOFTMAX_ONE_BITS})",
              f"#define SOFTMAX_TABLE {SOFTMAX_TABLE}u",
              f"#define SOFTMAX_NUM_BITS {SOFTMAX_NUM_BITS}u",
              f"#define SOFTMAX_NUM_HI_LIMIT 0x{SOFTMAX_NUM_LIMIT >> 32:x}u",
              f"#define ADD_MULT_LIMIT (1u << {ADD_MULT_BITS})",
              f"#define ADD_SHIFT_MAX {ADD_SHIFT_MAX}u",
              f"#define REQUANT_MULT_LIMIT 0x{REQUANT_MULT_LIMIT:x}u",
              f"#define REQUANT_SHIFT_MAX {REQUANT_SHIFT_MAX}u", "", "struct kview {"]
    lines += [f"    uint32_t {f};" for f in VIEW_FIELDS]
    lines.append("};")
    for kernel, specs in FIELDS.items():
        lines += ["", f"struct kd_{kernel.name.lower()} {{"]
        for name, ctype, *count in specs:
            lines.append(f"    {ctype} {name}" + (f"[{count[0]}];" if count else ";"))
        lines.append("};")
    body = "\n".join(lines) + "\n"
    return ("/* The management core's kernel descriptors "
            "(systolica/firmware/core_kernels.py).\n"
            " * Generated by systolica.firmware.core_kernels: do not edit. */\n"
            f"#ifndef SYSTOLICA_KDESC_H\n#define SYSTOLICA_KDESC_H\n\n{body}\n#endif\n")


# -- views ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class View:
    """Where a 2-D tensor ``[rows, cols]`` is in DRAM: element ``(r, c)`` at byte
    ``base + r*row_stride + (c // block)*block_stride + (c % block)*elem_stride``."""
    base: int
    dtype: ElemType
    row_stride: int
    block: int
    block_stride: int
    elem_stride: int

    def __post_init__(self):
        object.__setattr__(self, "dtype", ElemType(self.dtype))
        for name in VIEW_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value < 1 << 32:
                raise CompileError(f"a tensor view's {name} must be an integer in "
                                   f"[0, 2**32), not {value!r}")
        if self.block < 1:
            raise CompileError(f"a tensor view's block must be at least 1, not {self.block}")

    def offsets(self, rows: int, cols: int) -> np.ndarray:
        """Every element's byte address, ``[rows, cols]``."""
        r = np.arange(rows, dtype=np.int64)[:, None]
        c = np.arange(cols, dtype=np.int64)[None, :]
        return (self.base + r * self.row_stride + (c // self.block) * self.block_stride
                + (c % self.block) * self.elem_stride)

    def end(self, rows: int, cols: int) -> int:
        """One past the last byte the view touches."""
        return int(self.offsets(rows, cols).max()) + SIZE[self.dtype]

    def read(self, dram: bytes | bytearray | np.ndarray, rows: int, cols: int) -> np.ndarray:
        raw = np.frombuffer(bytes(dram), np.uint8) if not isinstance(dram, np.ndarray) \
            else dram.reshape(-1).view(np.uint8)
        at = self.offsets(rows, cols)[..., None] + np.arange(SIZE[self.dtype])
        return raw[at].copy().view(np.dtype(NUMPY[self.dtype]).newbyteorder("<")) \
            .reshape(rows, cols).astype(NUMPY[self.dtype])

    def write(self, dram: bytearray, values: np.ndarray) -> None:
        values = np.asarray(values)
        rows, cols = values.shape
        raw = np.ascontiguousarray(values.astype(np.dtype(NUMPY[self.dtype])
                                                 .newbyteorder("<"))).view(np.uint8)
        at = self.offsets(rows, cols)[..., None] + np.arange(SIZE[self.dtype])
        buf = np.frombuffer(dram, np.uint8)
        buf[at.reshape(-1)] = raw.reshape(-1)


def _dtype(what: str, dtype) -> ElemType:
    try:
        return dtype if isinstance(dtype, ElemType) else BY_NAME[str(dtype)]
    except KeyError:
        raise CompileError(f"{what}: element type must be one of {', '.join(BY_NAME)}, "
                           f"not {dtype!r}") from None


def chip_view(cfg, word: int, shape: Sequence[int], dtype: str = "int8") -> View:
    """The view of a tensor the chip leaves at DRAM word `word` (or reads from there),
    in its 2-D form ``[prod(shape[:-1]), shape[-1]]``: int8 in the activation layout
    (blocks of ``R`` columns, ``M`` words each), int32 as accumulator rows (blocks of
    ``C`` columns, ``M`` rows of ``acc_row_words`` words each); docs/contract.md, "DRAM
    layouts". A layer split into tile groups has a layout of its own (not a view)."""
    t = _dtype("chip_view", dtype)
    W, M = cfg.dram_word_bytes, int(np.prod(shape[:-1], dtype=np.int64))
    if t in (ElemType.INT8, ElemType.UINT8):
        return View(word * W, t, W, cfg.rows, M * W, 1)
    if t == ElemType.INT32:
        row = cfg.acc_row_words * W
        return View(word * W, t, row, cfg.cols, M * row, 4)
    raise CompileError(f"chip_view: the chip's tensors are int8 or int32, not {t.name.lower()}")


def array_view(base: int, shape: Sequence[int], dtype: str = "int8") -> View:
    """A row-major array at DRAM byte `base` (numpy's C order, little-endian)."""
    t = _dtype("array_view", dtype)
    cols = int(shape[-1]) if len(shape) else 1
    return View(base, t, cols * SIZE[t], max(cols, 1), 0, SIZE[t])


# -- descriptors ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Descriptor:
    """A kernel's descriptor: its number, the 2-D shape it works on and its fields by
    name (views, integers, the softmax's table)."""
    kernel: Kernel
    rows: int
    cols: int
    fields: Mapping[str, object] = field(default_factory=dict)

    def __getitem__(self, name: str):
        return self.fields[name]

    def pack(self) -> bytes:
        """The descriptor's bytes, as the firmware reads them (little-endian words)."""
        values = dict(self.fields, kernel=int(self.kernel), rows=self.rows, cols=self.cols)
        words: list[int] = []
        for name, ctype, *count in FIELDS[self.kernel]:
            value = values[name]
            if ctype == VIEW:
                words += [int(getattr(value, f)) for f in VIEW_FIELDS]
            elif count:
                words += [int(v) for v in value]
            else:
                words.append(int(value) & 0xFFFF_FFFF)
        return struct.pack(f"<{len(words)}I", *words)

    def views(self) -> dict[str, View]:
        return {k: v for k, v in self.fields.items() if isinstance(v, View)}


def _who(kernel: str, name: str | None) -> str:
    return f"{kernel} {name!r}" if name else kernel


def _shape(who: str, rows, cols) -> tuple[int, int]:
    for what, n in (("rows", rows), ("cols", cols)):
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or not 1 <= n < 1 << 31:
            raise CompileError(f"{who}: {what} must be a whole number from 1 to 2**31-1, "
                               f"not {n!r} (an empty tensor needs no kernel)")
    return int(rows), int(cols)


def _scale(who: str, what: str, value) -> float:
    try:
        s = float(value)
    except (TypeError, ValueError):
        s = math.nan
    if not math.isfinite(s) or s <= 0:
        raise CompileError(f"{who}: {what} must be a positive finite number, not {value!r}")
    return s


def _zero_point(who: str, what: str, value, t: ElemType) -> int:
    lo, hi = RANGE[t]
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or \
            not lo <= value <= hi:
        raise CompileError(f"{who}: {what} must be an integer of {t.name.lower()} "
                           f"([{lo}, {hi}]), not {value!r}")
    return int(value)


def _view(who: str, what: str, view, allowed: tuple[ElemType, ...]) -> View:
    if not isinstance(view, View):
        raise CompileError(f"{who}: {what} must be a View (chip_view, array_view), "
                           f"not {type(view).__name__}")
    if view.dtype not in allowed:
        raise CompileError(f"{who}: {what} is {view.dtype.name.lower()}; this kernel takes "
                           f"{' or '.join(t.name.lower() for t in allowed)}")
    return view


def _clamp(y: View, zp: int, relu: bool) -> tuple[int, int]:
    lo, hi = RANGE[y.dtype]
    return (max(lo, zp) if relu else lo), hi


BYTES8 = (ElemType.INT8, ElemType.UINT8)


def softmax(x: View, y: View, *, rows: int, cols: int, x_scale: float, y_scale: float,
            y_zp: int, name: str | None = None) -> Descriptor:
    """``Q(Softmax(DQ(x)))`` over the last axis: ``DequantizeLinear`` at `x_scale` (its
    zero point cancels), ``Softmax``, ``QuantizeLinear`` at `y_scale`, `y_zp`."""
    who = _who("softmax", name)
    rows, cols = _shape(who, rows, cols)
    _view(who, "its input", x, BYTES8)
    _view(who, "its output", y, BYTES8)
    xs = _scale(who, "the input scale", x_scale)
    ys = _scale(who, "the output scale", y_scale)
    zp = _zero_point(who, "the output zero point", y_zp, y.dtype)
    num = round(2.0 ** SOFTMAX_NUM_BITS / ys)
    if num >= SOFTMAX_NUM_LIMIT:
        raise CompileError(f"{who}: the output scale {ys:g} is below 2**-16: every "
                           f"probability above 2**-8 saturates; give the QuantizeLinear "
                           f"after the Softmax a scale of at least 2**-16 (1/256 is usual)")
    d = np.arange(SOFTMAX_TABLE, dtype=np.float64)
    table = np.round(np.exp(-xs * d) * (1 << SOFTMAX_ONE_BITS)).astype(np.int64)
    lo, hi = _clamp(y, zp, False)
    return Descriptor(Kernel.SOFTMAX, rows, cols, dict(
        x=x, y=y, out_zp=zp, out_min=lo, out_max=hi, num_lo=num & 0xFFFF_FFFF,
        num_hi=num >> 32, table=tuple(int(v) for v in table)))


def argmax(x: View, y: View, *, rows: int, cols: int, select_last_index: bool = False,
           name: str | None = None) -> Descriptor:
    """ONNX ``ArgMax`` over the last axis (`keepdims` changes only the shape): the first
    index of the largest value, or the last with `select_last_index`; `y` int64 as
    ONNX gives it, or int32."""
    who = _who("argmax", name)
    rows, cols = _shape(who, rows, cols)
    _view(who, "its input", x, (*BYTES8, ElemType.INT32))
    _view(who, "its output", y, (ElemType.INT32, ElemType.INT64))
    if select_last_index not in (0, 1):
        raise CompileError(f"{who}: select_last_index must be 0 or 1, not "
                           f"{select_last_index!r}")
    return Descriptor(Kernel.ARGMAX, rows, cols, dict(x=x, y=y,
                                                      select_last=int(select_last_index)))


def requantise(x: View, y: View, *, rows: int, cols: int, x_scale: float, x_zp: int,
               y_scale: float, y_zp: int, relu: bool = False,
               name: str | None = None) -> Descriptor:
    """``Q(DQ(x))`` per tensor, int8 / uint8 / int32 in, int8 / uint8 out, by the
    chip's rule (``requant_for``: a 16-bit multiplier and a shift); `relu` clamps at
    the output zero point."""
    from systolica.compiler.graph.ops import requant_for
    who = _who("requantise", name)
    rows, cols = _shape(who, rows, cols)
    _view(who, "its input", x, (*BYTES8, ElemType.INT32))
    _view(who, "its output", y, BYTES8)
    ratio = _scale(who, "the input scale", x_scale) / _scale(who, "the output scale", y_scale)
    xzp = _zero_point(who, "the input zero point", x_zp, x.dtype)
    if x.dtype == ElemType.INT32 and xzp:
        raise CompileError(f"{who}: an int32 input has zero point 0 (DequantizeLinear), "
                           f"not {xzp}")
    zp = _zero_point(who, "the output zero point", y_zp, y.dtype)
    mult, shift = requant_for(ratio, False)
    if ratio >= (1 << 16):
        raise CompileError(f"{who}: the input scale over the output's is {ratio:g}, past "
                           f"the chip's largest multiplier (65535): every nonzero input "
                           f"saturates; check the two scales")
    lo, hi = _clamp(y, zp, relu)
    return Descriptor(Kernel.REQUANTISE, rows, cols, dict(
        x=x, y=y, x_zp=xzp, mult=int(mult), shift=int(shift), out_zp=zp, out_min=lo,
        out_max=hi))


def add(a: View, b: View, y: View, *, rows: int, cols: int, a_scale: float, a_zp: int,
        b_scale: float, b_zp: int, y_scale: float, y_zp: int, relu: bool = False,
        name: str | None = None) -> Descriptor:
    """``QLinearAdd`` (or ``Q(DQ(a) + DQ(b))``): ``y = y_zp + (a_s (a - a_zp) + b_s (b -
    b_zp)) / y_s`` with the two ratios as 20-bit multipliers over one shift; a view
    with a stride of 0 broadcasts (ONNX's multidirectional broadcasting of a row or a
    column)."""
    who = _who("add", name)
    rows, cols = _shape(who, rows, cols)
    for what, v in (("its first input", a), ("its second input", b), ("its output", y)):
        _view(who, what, v, BYTES8)
    ys = _scale(who, "the output scale", y_scale)
    ratios = (_scale(who, "the first input's scale", a_scale) / ys,
              _scale(who, "the second input's scale", b_scale) / ys)
    azp = _zero_point(who, "the first input's zero point", a_zp, a.dtype)
    bzp = _zero_point(who, "the second input's zero point", b_zp, b.dtype)
    zp = _zero_point(who, "the output zero point", y_zp, y.dtype)
    limit = 1 << ADD_MULT_BITS
    if round(max(ratios)) >= limit:
        raise CompileError(f"{who}: an input's scale over the output's is {max(ratios):g}, "
                           f"past the kernel's largest multiplier (2**20 - 1); check the "
                           f"scales")
    shift = 0
    while shift < ADD_SHIFT_MAX and all(round(r * 2.0 ** (shift + 1)) < limit for r in ratios):
        shift += 1
    mult_a, mult_b = (int(round(r * 2.0 ** shift)) for r in ratios)
    lo, hi = _clamp(y, zp, relu)
    return Descriptor(Kernel.ADD, rows, cols, dict(
        a=a, b=b, y=y, a_zp=azp, b_zp=bzp, mult_a=mult_a, mult_b=mult_b, shift=shift,
        out_zp=zp, out_min=lo, out_max=hi))


# -- the reference: each kernel's integer algorithm in numpy --------------------------------

def _round_shift(v: np.ndarray, shift: int) -> np.ndarray:
    """``(v + 2**(shift-1)) >> shift`` (no rounding term for a shift of 0), int64."""
    return (v + ((1 << shift) >> 1)) >> shift


def compute(desc: Descriptor, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """The kernel's output ``[rows, cols]`` (argmax: ``[rows, 1]``) from its inputs by
    name (``x``, or ``a`` and ``b``), each ``[rows, cols]``."""
    f = desc.fields
    k = desc.kernel
    if k == Kernel.SOFTMAX:
        x = inputs["x"].astype(np.int64)
        table = np.asarray(f["table"], dtype=np.int64)
        t = table[x.max(axis=1, keepdims=True) - x]            # <= 2**30 each
        total = t.sum(axis=1, keepdims=True)                    # >= 2**30: the maximum's
        num = f["num_hi"] << 32 | f["num_lo"]
        recip = num // total                                    # < 2**32
        q = (t * recip + (1 << (SOFTMAX_NUM_BITS - 1))) >> SOFTMAX_NUM_BITS
        return np.clip(f["out_zp"] + q, f["out_min"], f["out_max"])
    if k == Kernel.ARGMAX:
        x = inputs["x"].astype(np.int64)
        if f["select_last"]:
            return (x.shape[1] - 1 - np.argmax(x[:, ::-1], axis=1))[:, None]
        return np.argmax(x, axis=1)[:, None]
    if k == Kernel.REQUANTISE:
        v = (inputs["x"].astype(np.int64) - f["x_zp"]) * f["mult"]
        return np.clip(f["out_zp"] + _round_shift(v, f["shift"]), f["out_min"], f["out_max"])
    if k == Kernel.ADD:
        v = f["mult_a"] * (inputs["a"].astype(np.int64) - f["a_zp"]) + \
            f["mult_b"] * (inputs["b"].astype(np.int64) - f["b_zp"])
        return np.clip(f["out_zp"] + _round_shift(v, f["shift"]), f["out_min"], f["out_max"])
    raise ValueError(f"no kernel {k!r}")


#: each kernel's input views, in order
INPUTS = {Kernel.SOFTMAX: ("x",), Kernel.ARGMAX: ("x",), Kernel.REQUANTISE: ("x",),
          Kernel.ADD: ("a", "b")}


def reference(desc: Descriptor, dram: bytearray) -> None:
    """Run `desc` on a DRAM image in place, as the firmware does: read its inputs
    through their views, write its output through its view."""
    inputs = {n: desc[n].read(dram, desc.rows, desc.cols) for n in INPUTS[desc.kernel]}
    out = compute(desc, inputs)
    desc["y"].write(dram, out)
