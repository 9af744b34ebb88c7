"""What the management core's kernels run of an ONNX model (docs/assignment.md, "The
management core"): an operation read as one kernel call, its parameters taken from
the model (scales and zero points of its ``DequantizeLinear`` and ``QuantizeLinear``
nodes), or the reason the core cannot run it.

The kernels (``firmware/core_kernels.py``) work on a 2-D tensor ``[rows, cols]``: the
operation's tensor with its last axis as ``cols`` and the others as ``rows``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from systolica.compiler.assignment.operations import Operation, value_types

#: The library's kind (the kernel) for each ONNX kind the core runs.
CORE_FAMILIES = {"Softmax": "softmax", "QLinearSoftmax": "softmax", "ArgMax": "argmax",
                 "Add": "add", "QLinearAdd": "add"}

#: ONNX element types the kernels have a view for (core_kernels.ElemType's names).
DTYPES = {3: "int8", 2: "uint8", 6: "int32", 7: "int64"}


@dataclass(frozen=True)
class CoreOp:
    """An operation as one kernel call: its kernel, the 2-D shape, the values it
    reads (by ONNX name, with their element types) and writes, and the builder's
    parameters (``firmware/core_kernels.py``: scales, zero points, flags)."""
    kernel: str
    rows: int
    cols: int
    inputs: tuple[str, ...]
    input_dtypes: tuple[str, ...]
    output: str
    output_dtype: str
    output_shape: tuple[int, ...]
    params: dict = field(default_factory=dict)


class _Refused(Exception):
    pass


def lower(op: Operation, proto) -> CoreOp | str:
    """`op` of `proto` as a kernel call, or why the core cannot run it."""
    if op.scalar:
        return "a scalar operation (shapes, parameters)"
    if op.kind not in CORE_FAMILIES:
        return f"the core has no {op.kind} kernel"
    try:
        lowered = _Lowering(op, proto).run()
    except _Refused as e:
        return str(e)
    from systolica.compiler.errors import CompileError
    try:
        descriptor(lowered, name=op.name)
    except CompileError as e:         # a scale or zero point past the kernel's reach
        return str(e)
    return lowered


def descriptor(c: CoreOp, views=None, name: str | None = None):
    """The kernel's descriptor of `c` (``firmware/core_kernels.py``), its operands and
    result at `views` (by the inputs' order, then the output; default: row-major
    arrays at DRAM byte 0, for checking the parameters)."""
    from systolica.firmware import core_kernels as ck
    out_cols = 1 if c.kernel == "argmax" else c.cols
    if views is None:
        views = [ck.array_view(0, (c.rows, c.cols), t) for t in c.input_dtypes]
        views.append(ck.array_view(0, (c.rows, out_cols), c.output_dtype))
    *ins, y = views
    shape = dict(rows=c.rows, cols=c.cols, name=name)
    if c.kernel == "softmax":
        return ck.softmax(ins[0], y, **shape, **c.params)
    if c.kernel == "argmax":
        return ck.argmax(ins[0], y, **shape, **c.params)
    return ck.add(ins[0], ins[1], y, **shape, **c.params)


class _Lowering:
    def __init__(self, op: Operation, proto):
        from onnx import numpy_helper
        self.op, self.proto = op, proto
        self.consts = {t.name: t for t in proto.graph.initializer}
        self.array = lambda v: numpy_helper.to_array(self.consts[v])
        self.types = value_types(proto)
        self.main = next(n for n in op.nodes if n.op_type == op.kind)
        self.made = {o: n for n in op.nodes for o in n.output}
        self.opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
                          13)

    def run(self) -> CoreOp:
        if any(n.op_type == "Relu" for n in self.op.nodes) and self.op.kind not in (
                "Add", "QLinearAdd"):
            raise _Refused("a Relu after it: the kernel has no clamp")
        return {"Softmax": self.softmax, "QLinearSoftmax": self.qlinear_softmax,
                "ArgMax": self.argmax, "Add": self.add,
                "QLinearAdd": self.qlinear_add}[self.op.kind]()

    # -- the parts ----------------------------------------------------------------------

    def scalar(self, v: str, what: str, default=None):
        if not v:
            if default is None:
                raise _Refused(f"no {what}")
            return default
        if v not in self.consts:
            raise _Refused(f"its {what} is computed, not a constant")
        a = self.array(v)
        if a.size != 1:
            raise _Refused(f"its {what} is one per channel ({a.size} values); the kernel "
                           f"takes one per tensor")
        return a.reshape(()).item() if a.dtype.kind == "f" else a.reshape(())

    def shape(self, v: str) -> tuple[int, ...]:
        shape = self.types.get(v, (0, None))[1]
        if not shape:
            raise _Refused(f"the shape of {v!r} is not known (or a scalar)")
        return tuple(int(d) for d in shape)

    def dtype(self, v: str, allowed: tuple[str, ...], what: str) -> str:
        elem = self.types.get(v, (0, None))[0]
        name = DTYPES.get(elem)
        if name not in allowed:
            from onnx import helper
            got = helper.tensor_dtype_to_np_dtype(elem).name if elem else "unknown"
            raise _Refused(f"{what} is {got}; the kernel has a view for "
                           f"{' or '.join(allowed)} only")
        return name

    def along(self, shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
        """``(axis, rows, cols)`` of a kernel over `axis` of `shape`: the last axis, or
        one only axes of 1 follow (SqueezeNet's Softmax over the channels of a
        ``[1, 1000, 1, 1]`` map)."""
        rank = len(shape)
        if not -rank <= axis < rank:
            raise _Refused(f"axis {axis} is outside a rank-{rank} tensor")
        axis %= rank
        if any(d != 1 for d in shape[axis + 1:]):
            raise _Refused(f"over axis {axis} of a {list(shape)} tensor: the kernel runs "
                           f"over the last axis only (or one only axes of 1 follow)")
        return axis, int(np.prod(shape[:axis], dtype=np.int64)), int(shape[axis])

    def attr(self, node, name: str, default):
        from onnx import helper
        for a in node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default

    def dequantised(self, v: str, what: str) -> tuple[str, float, int, str]:
        """The int8 value a ``DequantizeLinear`` of the operation reads to make `v`,
        its scale and zero point and its type."""
        dq = self.made.get(v)
        if dq is None or dq.op_type != "DequantizeLinear":
            raise _Refused(f"{what} is float, not dequantised from int8 within the "
                           f"operation (a DequantizeLinear)")
        x = dq.input[0]
        t = self.dtype(x, ("int8", "uint8"), what)
        zp = self.scalar(dq.input[2] if len(dq.input) > 2 else "", f"{what}'s zero point",
                         np.zeros((), np.int8 if t == "int8" else np.uint8))
        return x, float(self.scalar(dq.input[1], f"{what}'s scale")), int(zp), t

    def quantised(self, v: str) -> tuple[str, float, int, str]:
        """The ``QuantizeLinear`` of the operation that quantises `v`: its output,
        scale, zero point and type; the float `v` must not leave the operation."""
        qs = [n for n in self.op.nodes if n.op_type == "QuantizeLinear" and n.input[0] == v]
        if v in self.op.writes or len(qs) != 1:
            raise _Refused("its float result is read, not quantised to int8 once: the "
                           "kernel writes int8")
        q = qs[0]
        zp_v = q.input[2] if len(q.input) > 2 else ""
        zp = self.scalar(zp_v, "output zero point", np.zeros((), np.uint8))
        t = DTYPES.get(3 if np.asarray(zp).dtype == np.int8 else
                       2 if np.asarray(zp).dtype == np.uint8 else 0)
        if t is None:
            raise _Refused(f"its output is {np.asarray(zp).dtype}; the kernel writes int8 "
                           f"or uint8")
        return q.output[0], float(self.scalar(q.input[1], "output scale")), int(zp), t

    # -- the operators ------------------------------------------------------------------

    def softmax_of(self, x, xs, xt, y, ys, yzp, yt, axis) -> CoreOp:
        shape = self.shape(x)
        _, rows, cols = self.along(shape, axis)
        return CoreOp("softmax", rows, cols, (x,), (xt,), y, yt, shape,
                      dict(x_scale=xs, y_scale=ys, y_zp=yzp))

    def softmax(self) -> CoreOp:
        n = self.main
        x, xs, _, xt = self.dequantised(n.input[0], "its input")
        y, ys, yzp, yt = self.quantised(n.output[0])
        if self.opset < 13:       # over the axes from `axis` on, as one (default 1)
            shape = self.shape(x)
            axis = self.attr(n, "axis", 1)
            if not -len(shape) <= axis < len(shape):
                raise _Refused(f"axis {axis} is outside a rank-{len(shape)} tensor")
            axis %= len(shape)
            return CoreOp("softmax", int(np.prod(shape[:axis], dtype=np.int64)),
                          int(np.prod(shape[axis:], dtype=np.int64)), (x,), (xt,), y, yt,
                          shape, dict(x_scale=xs, y_scale=ys, y_zp=yzp))
        return self.softmax_of(x, xs, xt, y, ys, yzp, yt, self.attr(n, "axis", -1))

    def qlinear_softmax(self) -> CoreOp:
        n = self.main
        if self.attr(n, "opset", 13) < 13 and len(self.shape(n.input[0])) != 2:
            raise _Refused("a QLinearSoftmax of opset before 13 flattens its input; the "
                           "kernel runs over its last axis")
        x = n.input[0]
        xt = self.dtype(x, ("int8", "uint8"), "its input")
        yzp = self.scalar(n.input[4] if len(n.input) > 4 else "", "output zero point",
                          np.zeros((), np.uint8))
        yt = "int8" if np.asarray(yzp).dtype == np.int8 else "uint8"
        return self.softmax_of(x, float(self.scalar(n.input[1], "input scale")), xt,
                               n.output[0], float(self.scalar(n.input[3], "output scale")),
                               int(yzp), yt, self.attr(n, "axis", -1))

    def argmax(self) -> CoreOp:
        n = self.main
        if self.made.get(n.input[0]) is not None:
            x, _, _, xt = self.dequantised(n.input[0], "its input")     # a scale > 0 keeps
        else:                                                           # the order
            x = n.input[0]
            xt = self.dtype(x, ("int8", "uint8", "int32"), "its input")
        shape = self.shape(x)
        axis, rows, cols = self.along(shape, self.attr(n, "axis", 0))
        keep = self.attr(n, "keepdims", 1)
        y = n.output[0]
        if y not in self.op.writes:
            raise _Refused("its result is quantised or consumed within the operation")
        out_shape = shape[:axis] + ((1,) if keep else ()) + shape[axis + 1:]
        return CoreOp("argmax", rows, cols, (x,), (xt,), y, "int64", out_shape,
                      dict(select_last_index=int(self.attr(n, "select_last_index", 0))))

    def add_of(self, a, b, params, y, yt) -> CoreOp:
        sa, sb = self.shape(a), self.shape(b)
        if sa != sb:
            raise _Refused(f"it broadcasts {list(sa)} with {list(sb)}; the core adds "
                           f"tensors of one shape")
        rows, cols = int(np.prod(sa[:-1], dtype=np.int64)), int(sa[-1])
        relu = any(n.op_type == "Relu" for n in self.op.nodes)
        return CoreOp("add", rows, cols, (a, b), (params.pop("a_t"), params.pop("b_t")), y,
                      yt, sa, dict(params, relu=relu))

    def add(self) -> CoreOp:
        n = self.main
        a, a_s, a_zp, a_t = self.dequantised(n.input[0], "its first input")
        b, b_s, b_zp, b_t = self.dequantised(n.input[1], "its second input")
        relu = next((r for r in self.op.nodes if r.op_type == "Relu"), None)
        y, ys, yzp, yt = self.quantised(relu.output[0] if relu else n.output[0])
        return self.add_of(a, b, dict(a_scale=a_s, a_zp=a_zp, b_scale=b_s, b_zp=b_zp,
                                      y_scale=ys, y_zp=yzp, a_t=a_t, b_t=b_t), y, yt)

    def qlinear_add(self) -> CoreOp:
        n = self.main
        if len(n.input) < 8:
            raise _Refused("QLinearAdd takes 8 inputs (A, its scale and zero point, B, ...)")
        a, b = n.input[0], n.input[3]
        a_t = self.dtype(a, ("int8", "uint8"), "its first input")
        b_t = self.dtype(b, ("int8", "uint8"), "its second input")
        yzp = self.scalar(n.input[7], "output zero point", np.zeros((), np.uint8))
        yt = "int8" if np.asarray(yzp).dtype == np.int8 else "uint8"
        y = n.output[0]
        if any(r.op_type == "Relu" for r in self.op.nodes):
            raise _Refused("a Relu after a QLinearAdd is a float clamp of int8 values")
        return self.add_of(a, b, dict(
            a_scale=float(self.scalar(n.input[1], "first input's scale")),
            a_zp=int(self.scalar(n.input[2], "first input's zero point")),
            b_scale=float(self.scalar(n.input[4], "second input's scale")),
            b_zp=int(self.scalar(n.input[5], "second input's zero point")),
            y_scale=float(self.scalar(n.input[6], "output scale")), y_zp=int(yzp),
            a_t=a_t, b_t=b_t), y, yt)
