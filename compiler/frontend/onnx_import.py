"""ONNX models in the QOperator form (int8 tensors between ``QLinear*`` operators), or
in the QDQ form folded into it (:func:`fold_qdq`), or a mix of the two, as graphs
(docs/compiler.md, "ONNX models").

What a model may hold: ``QLinearConv`` (any group dividing its channels, int8 weights
with any zero point, a scale per tensor or per output channel, an int32 bias; over an
``[N, C, W]`` input a 1-D convolution, the 2-D one over an ``H = 1`` map, as are 1-D
pools),
``QLinearMatMul`` (a constant int8 ``[K, N]`` right operand with any zero point and one
scale, or a scale per column when it reads a Flatten of a map: a convolution over the
map), ``ConvInteger`` and ``MatMulInteger`` (their int32 outputs the accumulators: a
convolution or dense layer with ``out_dtype="int32"``), ``MaxPool``,
``Concat`` (of maps along their channels, of ``[M, K]`` along K), ``Flatten`` of a map
(of one larger than ``1 x 1`` read only by matmuls, whose weight rows are reordered
from ONNX's C, H, W to the chip's H, W, C), ``Relu`` on a tensor whose zero point is
0, and onnxruntime's (domain ``com.microsoft``) ``QLinearAdd``,
``QLinearGlobalAveragePool``, ``QLinearConcat`` (each input with its own scale and
zero point) and ``QGemm`` (``transB``, ``alpha``, an int32 bias ``C``; the matmul's
rules for the right operand). Its inputs and outputs are int8 (the host quantises
before and dequantises after: a float input's QuantizeLinear and an output's
DequantizeLinear are left to it). Weights less their zero point that leave int8 are
taken over a common factor or in parts (:func:`int8_parts`). Maps are NCHW in ONNX and
NHWC on the chip: an input
map enters through a transpose on the chip (``GraphBuilder.input(..., layout="NCHW")``)
and an output map leaves through another; an input of N ``1 x 1`` maps (``[N, C, 1,
1]``, N > 1) read only by pointwise convolutions whose outputs the model gives (a
batched matmul, ``onnx_simplify._group_batches``) is one ``1 x N`` map on the chip
and those outputs ``1 x N`` maps, the same bytes as the ONNX values.

A node the chip does not run is refused by :class:`OnnxNodeError`, which names the
node (``.node``, ``.op_type``) and what to change; a model-level fault (a file that
cannot be read, an input or output of the wrong type) by a plain CompileError. Every
scale and zero point read is checked: a scale positive and finite, a zero point an
int8 integer.

A ``QLinearConcat`` input quantised otherwise than the join is written at the join's
scale and zero point by the layer that makes it, where that layer requantises (a
convolution, matmul, Add, global pool or join), the join alone reads its output and
the chip's clamps hold the branch's own range there
(:meth:`_Importer._requantise_in_producers`): the chip then rounds once where
onnxruntime rounds twice (to the branch's scale, then the join's), so they may differ
by a step there. Elsewhere an identity layer requantises the input
(:meth:`_Importer._requantised`).

The requantisation differs in one way the model cannot express: ONNX scales a
product by a float ``x_scale * w_scale / y_scale`` and rounds half to even, the chip
by ``mult / 2**shift`` (16-bit ``mult``) and rounds half up. So an imported model
equals the numpy reference and the golden model bit for bit, and onnxruntime within
one step of int8 (``testbenches/compiler/frontend/test_onnx_import.py`` counts how
often they differ).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from systolica.compiler.errors import CompileError, InvalidOnnxNode, OnnxNodeError
from systolica.compiler.frontend import onnx_model
from systolica.compiler.frontend.onnx_model import scale_fault as _scale_fault
from systolica.compiler.graph.graph import Graph, GraphBuilder
from systolica.compiler.graph.ops import MULT_BITS, requant_for

__all__ = ["OnnxNodeError", "QDQ_OPS", "SUPPORTED", "fold_qdq", "load"]

#: The operators :func:`load` takes (every other one is refused by name); the last
#: four are onnxruntime's (domain ``com.microsoft``), which its quantiser writes.
SUPPORTED = ("QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "MaxPool",
             "AveragePool", "GlobalMaxPool", "Concat", "Flatten", "Relu", "QLinearAdd",
             "QLinearGlobalAveragePool", "QLinearConcat", "QGemm")

#: The float operators :func:`fold_qdq` takes between DequantizeLinear and
#: QuantizeLinear; a Relu folds into the first four.
QDQ_OPS = ("Conv", "MatMul", "Gemm", "Add", "GlobalAveragePool", "MaxPool", "AveragePool",
           "GlobalMaxPool", "Concat", "Flatten")

#: How many inputs each operator of SUPPORTED and QDQ_OPS takes (fewest, most).
_ARITY = {"QLinearConv": (8, 9), "QLinearMatMul": (8, 8), "ConvInteger": (2, 4),
          "MatMulInteger": (2, 4), "MaxPool": (1, 1), "AveragePool": (1, 1),
          "GlobalMaxPool": (1, 1), "Concat": (1, 99), "Flatten": (1, 1), "Relu": (1, 1),
          "QLinearAdd": (7, 8), "QLinearGlobalAveragePool": (4, 5), "QLinearConcat": (5, 99),
          "QGemm": (6, 9), "Conv": (2, 3), "MatMul": (2, 2), "Gemm": (2, 3), "Add": (2, 2),
          "GlobalAveragePool": (1, 1)}

#: Where an operator that requantises declares its output's scale and zero point
#: (input indices): the layers that can write at another scale (a join's).
_OUT_QUANT = {"QLinearConv": (6, 7), "QLinearMatMul": (6, 7), "QLinearAdd": (6, 7),
              "QGemm": (7, 8), "QLinearGlobalAveragePool": (3, 4), "QLinearConcat": (0, 1)}

#: The operators that read a 1-D map (an NCW input of rank 3) as a map of height 1.
_WINDOWS = ("QLinearConv", "ConvInteger", "MaxPool", "AveragePool")

#: The int8 operators that keep their input's quantisation.
_KEEPS_QUANT = ("MaxPool", "AveragePool", "GlobalMaxPool", "Flatten", "Relu", "Concat")


def _in_quant(node, k: int) -> tuple[int | None, int] | None:
    """Where `node` declares the scale and zero point of its input `k` (input
    indices; no scale for the integer operators), or None where it declares none."""
    t = node.op_type
    if k == 0 and t in ("ConvInteger", "MatMulInteger"):
        return None, 2
    if k == 0 and t in ("QLinearConv", "QLinearMatMul", "QGemm", "QLinearGlobalAveragePool"):
        return 1, 2
    if t == "QLinearAdd" and k in (0, 3):
        return k + 1, k + 2
    if t == "QLinearConcat" and k >= 2 and (k - 2) % 3 == 0:
        return k + 1, k + 2
    return None


def _node_error(node, message: str, op_type: str | None = None) -> OnnxNodeError:
    return OnnxNodeError(message, node=node.name, op_type=op_type or node.op_type)


def _zero_point_fault(a: np.ndarray) -> str | None:
    """What is wrong with the zero points `a` (integers in int8's range), or None."""
    if a.dtype == np.uint8:
        return ("is uint8: the tensor it quantises is uint8, and the chip computes int8 "
                "(quantise activations and weights to int8, onnxruntime's QuantType.QInt8; "
                "plan_model makes a QLinearConv's, QLinearMatMul's, ConvInteger's or "
                "MatMulInteger's uint8 operands int8 on the way in)")
    if not np.issubdtype(a.dtype, np.integer):
        return f"is {a.dtype}, not an integer"
    bad = (a < -128) | (a > 127)
    if not bad.any():
        return None
    i = int(np.flatnonzero(bad.ravel())[0])
    v = str(a.ravel()[i])
    where = "" if a.size == 1 else f" at index {i}"
    return f"is {v}{where}, outside int8's [-128, 127]"


def _checked(node, tensor: str, a: np.ndarray, what: str, kind: str, error=_node_error):
    """`a`, the values of `node`'s `what` (the initialiser `tensor`), if they are a
    good scale (`kind` "scale") or zero point ("zero point"); else the node's error
    naming the tensor."""
    fault = (_scale_fault if kind == "scale" else _zero_point_fault)(np.asarray(a))
    if fault:
        rule = ("a scale must be a positive, finite float" if kind == "scale" else
                "a zero point must be an int8 integer")
        e = error(node, f"ONNX node {node.name!r} ({node.op_type}): its {what} "
                        f"{tensor!r} {fault}; {rule}")
        if kind == "scale":                 # no processor runs it: the model's fault
            e = InvalidOnnxNode(str(e), node=e.node, op_type=e.op_type)
        raise e
    return a


def load(model, inputs: Mapping[str, np.ndarray] | None = None, *,
         name: str | None = None, seed: int = 0) -> Graph:
    """The graph of ONNX `model` (a path, bytes or a ``ModelProto``), its inputs the
    int8 arrays `inputs` by ONNX input name (missing ones: seeded random data of the
    declared shape). A model that holds QuantizeLinear or DequantizeLinear (the QDQ
    form, or a QOperator model whose float input is quantised and output dequantised)
    is first folded (:func:`fold_qdq`); its float inputs are then the int8 values their
    QuantizeLinear makes, under the input's name. Raises OnnxNodeError naming the node
    (as the model names it, with its operator) and what to change where a node holds
    something the chip does not run, CompileError where the model as a whole does."""
    onnx = onnx_model.onnx_package()
    where = onnx_model.where_of(model)
    proto = onnx_model.read(model, where)
    origin: dict[str, str] = {}
    try:
        if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in proto.graph.node):
            origin = {n.name: n.op_type for n in proto.graph.node if n.name}
            proto = fold_qdq(proto)
        return _Importer(onnx, proto, dict(inputs or {}), name, seed, origin).graph
    except CompileError as e:
        if not isinstance(model, (str, Path)):
            raise
        raise onnx_model.located(e, where) from None


def fold_qdq(proto):
    """A QDQ model as the QOperator model it means. ``Q(op(DQ(x), DQ(w), DQ(b)))``
    becomes ``QLinearConv`` for Conv, ``QLinearMatMul`` for MatMul (a constant right
    operand) and onnxruntime's ``QGemm`` for Gemm (its ``beta`` folded into the bias);
    a bias quantised at another scale than ``x_scale * w_scale`` is rescaled to it. A
    Relu between the op and Q folds into it (``Q(relu(v)) = max(Q(v), y_zp)``: the
    chip's clamp at the zero point, whatever it is). ``Q(Add(DQ(a), DQ(b)))`` becomes
    ``QLinearAdd`` (a Relu folding as before), ``Q(GlobalAveragePool(DQ(x)))``
    ``QLinearGlobalAveragePool`` and ``Q(Concat(DQ(x_i)))`` ``QLinearConcat`` (each
    input keeps its own scale, as onnxruntime's quantiser writes a branch; the
    importer has the branch's layer write at the join's); ``Q(DQ(x))`` a one-input
    ``QLinearConcat`` (a requantisation; at one scale and zero point, nothing);
    ``Q(MaxPool(DQ(x)))``, ``Q(Flatten(DQ(x)))`` and ``Q(Relu(DQ(x)))`` with one scale
    and zero point the int8 operators. Other nodes (QOperator ones, int8 pools) stay
    as they are. A float input read only by a QuantizeLinear becomes that int8 value
    (under the input's name), a float output made by a DequantizeLinear the int8
    value it reads. Each scale and zero point read is checked; a float operator the
    chip does not run, or whose output no QuantizeLinear quantises, is refused by an
    OnnxNodeError naming it."""
    from onnx import NodeProto, TensorProto, helper, numpy_helper
    g = proto.graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    consts[n.output[0]] = numpy_helper.to_array(a.t)
    made = {o: n for n in g.node for o in n.output}
    readers: dict[str, list] = {}
    for n in g.node:
        for v in n.input:
            readers.setdefault(v, []).append(n)
    rename: dict[str, str] = {}        # a float input's Q output -> the input's name
    inputs, floating = [], set()
    for vi in g.input:
        if vi.name in consts:
            continue
        rs = readers.get(vi.name, [])
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            if len(rs) != 1 or rs[0].op_type != "QuantizeLinear":
                raise CompileError(f"ONNX input {vi.name!r} is float and not quantised by "
                                   f"one QuantizeLinear; the chip takes int8 inputs")
            rename[rs[0].output[0]] = vi.name
            floating.add(vi.name)
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            inputs.append(helper.make_tensor_value_info(vi.name, TensorProto.INT8, shape))
        else:
            inputs.append(vi)
    float_inputs = set(floating)
    out_nodes, inits = [], list(g.initializer)
    host = [made[o] for o in rename] + [made[vo.name] for vo in g.output if vo.name in made
                                        and made[vo.name].op_type == "DequantizeLinear"]

    def value(v):
        return rename.get(v, v)

    def const(node, name, what):
        if name not in consts:
            raise _node_error(node, f"ONNX node {node.name!r} ({node.op_type}): its {what} "
                                    f"{name!r} is computed, not a constant; the chip takes "
                                    f"constant quantisation parameters")
        return consts[name]

    def quant(node, qdq, what):
        """The scale and zero point (initialiser names) of QuantizeLinear or
        DequantizeLinear `qdq`, `node`'s `what`, checked."""
        s = qdq.input[1]
        _checked(node, s, const(node, s, f"{what}'s scale"), f"{what}'s scale", "scale")
        zp = qdq.input[2] if len(qdq.input) > 2 and qdq.input[2] else None
        if zp is None:
            zp = f"{qdq.output[0]}__zp"
            if zp not in consts:
                consts[zp] = np.zeros(np.shape(consts[s]), np.int8)
                inits.append(numpy_helper.from_array(consts[zp], zp))
        else:
            _checked(node, zp, const(node, zp, f"{what}'s zero point"),
                     f"{what}'s zero point", "zero point")
        return s, zp

    def dequantised(v, what, node):
        """The DequantizeLinear making `v`, which `node` reads as its `what`."""
        n = made.get(v)
        if n is None or n.op_type != "DequantizeLinear":
            raise _node_error(node, f"ONNX node {node.name!r} ({node.op_type}): its {what} "
                                    f"{v!r} is not a DequantizeLinear's output; in the QDQ "
                                    f"form every operand is dequantised int8")
        return n

    def dq(v, what, node):
        """``(int8 value, scale name, zero point name)`` of a DequantizeLinear output."""
        n = dequantised(v, what, node)
        s, zp = quant(node, n, what)
        return value(n.input[0]), s, zp

    def bias(node, v, x_s, w_s, factor=1.0):
        """The int32 bias `v` (dequantised) of `node` in units of ``x_scale * w_scale /
        factor``: its own initialiser, or one rescaled to those units."""
        n = dequantised(v, "bias", node)
        b_name, b_s = value(n.input[0]), n.input[1]
        _checked(node, b_s, const(node, b_s, "bias's scale"), "bias's scale", "scale")
        if len(n.input) > 2 and n.input[2] and np.any(const(node, n.input[2],
                                                            "bias's zero point") != 0):
            raise _node_error(node, f"ONNX node {node.name!r} ({node.op_type}): its bias's "
                                    f"zero point {n.input[2]!r} is not 0; a bias is "
                                    f"quantised with zero point 0")
        b = const(node, b_name, "bias")
        if b.dtype != np.int32:
            raise _node_error(node, f"ONNX node {node.name!r} ({node.op_type}): its bias "
                                    f"{b_name!r} is {b.dtype}; the chip adds an int32 bias")
        sizes = {k: np.size(consts[k]) for k in (b_s, x_s, w_s)}
        if b.ndim != 1 or any(n not in (1, b.size) for n in sizes.values()):
            raise InvalidOnnxNode(f"ONNX node {node.name!r} ({node.op_type}): its bias "
                                  f"{b_name!r} has shape {list(b.shape)}, and the scales "
                                  f"of its bias, input and weights {list(sizes.values())} "
                                  f"values; a bias and each scale hold one value, or one "
                                  f"per output channel", node=node.name,
                                  op_type=node.op_type)
        ratio = factor * consts[b_s].astype(np.float64) / (
            consts[x_s].astype(np.float64) * consts[w_s].astype(np.float64))
        scaled = np.round(b.astype(np.float64) * ratio)
        if np.array_equal(scaled, b):
            return b_name
        if np.any(np.abs(scaled) > np.iinfo(np.int32).max):
            raise _node_error(node, f"ONNX node {node.name!r} ({node.op_type}): its bias "
                                    f"{b_name!r} in units of the input's and weights' "
                                    f"scales does not fit int32")
        name = f"{b_name}__rescaled"
        consts[name] = scaled.astype(np.int32)
        inits.append(numpy_helper.from_array(consts[name], name))
        return name

    def same(s1, z1, s2, z2) -> bool:
        return (np.array_equal(consts[s1], consts[s2])
                and np.array_equal(consts[z1], consts[z2]))

    def carried(node, op, leave=()):
        """`node` with `op`'s attributes (but those in `leave`) as the model has them."""
        node.attribute.extend(a for a in op.attribute if a.name not in leave)
        return node

    def not_lowered(op):
        return _node_error(op, f"ONNX node {op.name!r}: {op.op_type} between "
                               f"DequantizeLinear and QuantizeLinear is not lowered; the "
                               f"QDQ form takes {', '.join(QDQ_OPS[:4])} (each with a Relu), "
                               f"{', '.join(QDQ_OPS[4:-1])} and {QDQ_OPS[-1]}")

    def fold(q):
        """The QOperator nodes of the pattern QuantizeLinear `q` closes."""
        op = made.get(q.input[0])
        relu = None
        if op is not None and op.op_type == "Relu":
            relu, op = op, made.get(op.input[0])
        if op is None:
            who = relu or q
            raise _node_error(who, f"ONNX node {who.name!r} ({who.op_type}) reads "
                                   f"{who.input[0]!r}, a value no node makes; the chip "
                                   f"takes int8 inputs")
        out = q.output[0]
        if op.op_type == "DequantizeLinear":            # a requantisation, or a Relu
            who = relu or q
            y_s, y_zp = quant(who, q, "output")
            x, x_s, x_zp = dq(op.output[0], "input", who)
            if relu is not None:
                if not same(x_s, x_zp, y_s, y_zp):
                    raise _node_error(relu, f"ONNX node {relu.name!r} (Relu): its input and "
                                            f"output are quantised differently; the chip "
                                            f"folds a Relu into the layer before it")
                out_nodes.append(helper.make_node("Relu", [x], [out], name=relu.name,
                                                  doc_string=QDQ_RELU))
            elif same(x_s, x_zp, y_s, y_zp):
                rename[out] = x
            else:
                out_nodes.append(helper.make_node("QLinearConcat", [y_s, y_zp, x, x_s, x_zp],
                                                  [out], name=q.name, axis=1,
                                                  domain="com.microsoft"))
            return
        if op.op_type not in QDQ_OPS:
            raise not_lowered(op)
        low, high = _ARITY[op.op_type]
        if not low <= len(op.input) <= high:
            raise InvalidOnnxNode(f"ONNX node {op.name!r} ({op.op_type}): {len(op.input)} "
                                  f"inputs; it takes " + (f"{low}" if low == high else
                                                          f"{low} to {high}"
                                                          if high < 99 else
                                                          f"at least {low}"),
                                  node=op.name, op_type=op.op_type)
        if relu is not None and op.op_type not in QDQ_OPS[:4]:
            raise _node_error(relu, f"ONNX node {relu.name!r} (Relu): follows "
                                    f"{op.op_type} {op.name!r}; the chip folds a Relu only "
                                    f"into the {', '.join(QDQ_OPS[:3])} or {QDQ_OPS[3]} "
                                    f"before it: quantise the {op.op_type}'s output too, or "
                                    f"put the Relu before it")
        y_s, y_zp = quant(op, q, "output")
        conv_out = f"{out}__pre_relu" if relu else out
        attrs = {a.name: helper.get_attribute_value(a) for a in op.attribute}
        if op.op_type == "Conv":
            x, x_s, x_zp = dq(op.input[0], "input", op)
            w, w_s, w_zp = dq(op.input[1], "weights", op)
            ins = [x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp]
            if len(op.input) > 2 and op.input[2]:
                ins.append(bias(op, op.input[2], x_s, w_s))
            out_nodes.append(carried(helper.make_node("QLinearConv", ins, [conv_out],
                                                      name=op.name), op))
        elif op.op_type in ("MatMul", "Gemm"):
            x, x_s, x_zp = dq(op.input[0], "left operand", op)
            w, w_s, w_zp = dq(op.input[1], "right operand", op)
            if op.op_type == "MatMul":
                out_nodes.append(helper.make_node("QLinearMatMul", [x, x_s, x_zp, w, w_s, w_zp,
                                                                    y_s, y_zp], [conv_out],
                                                  name=op.name))
            else:
                alpha, beta = attrs.pop("alpha", 1.0), attrs.pop("beta", 1.0)
                if not (np.isfinite(alpha) and alpha > 0):
                    raise _node_error(op, f"ONNX node {op.name!r} (Gemm): alpha {alpha}; "
                                          f"the chip scales a product by a positive factor")
                if not np.isfinite(beta):
                    raise InvalidOnnxNode(f"ONNX node {op.name!r} (Gemm): beta {beta}; a "
                                          f"finite factor of the bias is asked for",
                                          node=op.name, op_type=op.op_type)
                c = (bias(op, op.input[2], x_s, w_s, beta / alpha)
                     if len(op.input) > 2 and op.input[2] else "")
                node = carried(helper.make_node("QGemm", [x, x_s, x_zp, w, w_s, w_zp, c,
                                                          y_s, y_zp], [conv_out],
                                                name=op.name, domain="com.microsoft"),
                               op, ("alpha", "beta"))
                if alpha != 1.0:
                    node.attribute.append(helper.make_attribute("alpha", alpha))
                out_nodes.append(node)
        elif op.op_type == "Add":
            (a, a_s, a_zp), (b, b_s, b_zp) = (dq(v, "operand", op) for v in op.input)
            out_nodes.append(helper.make_node("QLinearAdd", [a, a_s, a_zp, b, b_s, b_zp,
                                                             y_s, y_zp], [conv_out],
                                              name=op.name, domain="com.microsoft"))
        elif op.op_type == "GlobalAveragePool":
            x, x_s, x_zp = dq(op.input[0], "input", op)
            out_nodes.append(helper.make_node("QLinearGlobalAveragePool",
                                              [x, x_s, x_zp, y_s, y_zp], [out], name=op.name,
                                              domain="com.microsoft", channels_last=0))
        elif op.op_type == "Concat":
            ins = [y_s, y_zp]
            for v in op.input:
                ins.extend(dq(v, "input", op))
            out_nodes.append(carried(helper.make_node("QLinearConcat", ins, [out],
                                                      name=op.name, domain="com.microsoft"),
                                     op))
        else:                               # MaxPool, AveragePool, GlobalMaxPool, Flatten
            ins = []
            for v in op.input:
                x, s_name, zp_name = dq(v, "input", op)
                if not same(s_name, zp_name, y_s, y_zp):
                    raise _node_error(op, f"ONNX node {op.name!r} ({op.op_type}): its input "
                                          f"and output are quantised differently; the chip "
                                          f"moves int8 values unchanged here")
                ins.append(x)
            out_nodes.append(carried(helper.make_node(op.op_type, ins, [out], name=op.name),
                                     op))
        if relu is not None:
            out_nodes.append(helper.make_node("Relu", [conv_out], [out], name=relu.name,
                                              doc_string=QDQ_RELU))

    for n in host:          # the host quantises the inputs and dequantises the outputs
        quant(n, n, "input" if n.op_type == "QuantizeLinear" else "output")
    # the pattern each QuantizeLinear closes: the op it quantises, a Relu between
    taken: set[int] = set()
    for q in g.node:
        if q.op_type != "QuantizeLinear" or q.output[0] in rename:
            continue
        op = made.get(q.input[0])
        if op is not None and op.op_type == "Relu":
            taken.add(id(op))
            op = made.get(op.input[0])
        if op is not None and op.op_type != "DequantizeLinear":
            taken.add(id(op))
    floating |= {o for n in g.node if n.op_type == "DequantizeLinear" or id(n) in taken
                 for o in n.output}
    for n in g.node:
        if n.op_type == "QuantizeLinear":
            if n.output[0] not in rename:
                fold(n)
        elif n.op_type != "DequantizeLinear" and id(n) not in taken:
            v = next((v for v in n.input if v in floating), None)
            if v is not None and n.op_type not in QDQ_OPS + ("Relu",):
                raise not_lowered(n)
            if v is not None:
                raise _node_error(n, f"ONNX node {n.name!r} ({n.op_type}): reads the float "
                                     f"{v!r}, and no QuantizeLinear quantises its output "
                                     f"{n.output[0]!r}; the chip computes int8: quantise it "
                                     f"(QuantizeLinear, then DequantizeLinear for its "
                                     f"readers)")
            kept = NodeProto()
            kept.CopyFrom(n)
            kept.input[:] = [value(v) for v in n.input]
            out_nodes.append(kept)
    made_now = {o for n in out_nodes for o in n.output}
    outputs = []
    for vo in g.output:
        n = made.get(vo.name)
        if n is not None and n.op_type == "DequantizeLinear":
            outputs.append(helper.make_tensor_value_info(value(n.input[0]), TensorProto.INT8,
                                                         None))
        elif value(vo.name) in float_inputs:
            raise CompileError(f"ONNX output {vo.name!r} is the input {value(vo.name)!r} "
                               f"quantised, which no operator reads; the chip's outputs are "
                               f"its layers'")
        elif value(vo.name) in made_now:
            outputs.append(vo if value(vo.name) == vo.name else
                           helper.make_tensor_value_info(value(vo.name), TensorProto.INT8, None))
        else:
            raise CompileError(f"ONNX output {vo.name!r} is not quantised: the chip makes "
                               f"int8 outputs, so end the model with QuantizeLinear (and, "
                               f"optionally, DequantizeLinear)")
    folded = helper.make_graph(out_nodes, g.name, inputs, outputs, inits)
    opsets = list(proto.opset_import)
    if not any(o.domain == "com.microsoft" for o in opsets):
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    return helper.make_model(folded, opset_imports=opsets)


#: The doc string of a Relu a QDQ fold made (or the importer moved to a join's
#: quantisation): it folds into its producer at any zero point (it stood between the
#: op and the QuantizeLinear).
QDQ_RELU = "folded from QDQ"


#: How a batched matmul reaches the chip, told where the importer alone refuses one.
_BATCHED = ("; a batched one ([B, M, K] by a constant [B, K, N], one scale and zero point "
            "for each operand and the output, or per column for the right one) runs on "
            "the chip as one grouped convolution when the model is planned (plan_model, "
            "systolica sim --onnx): docs/assignment.md, 'Batches'")


class _Importer:
    def __init__(self, onnx, proto, data: dict, name: str | None, seed: int,
                 origin: Mapping[str, str]):
        from onnx import NodeProto, numpy_helper
        self.onnx = onnx
        self.origin = origin                # node name -> its operator in the model
        graph = proto.graph
        self.consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.nodes = []                     # copies: _requantise_in_producers edits some
        for node in graph.node:
            copy = NodeProto()
            copy.CopyFrom(node)
            self.nodes.append(copy)
        for node in self.nodes:             # Constant nodes are initialisers too
            if node.op_type == "Constant":
                self.consts[node.output[0]] = numpy_helper.to_array(
                    next(a.t for a in node.attribute if a.name == "value"))
        self.g = GraphBuilder(name or graph.name or "onnx")
        self.names: dict[str, str] = {}     # ONNX value -> graph tensor
        self.nchw: set[str] = set()         # ONNX values that are maps (NCHW there)
        # of them, the 1-D maps (NCW there): (N, 1, W, C) maps on the chip
        self.ncw: set[str] = set()
        # of them, batches of N 1 x 1 maps ([N, C, 1, 1] there) that only pointwise
        # convolutions read: one (1, 1, N, C) map on the chip, the same bytes
        self.pixels: set[str] = set()
        consumers: dict[str, list] = {}
        for node in self.nodes:
            for v in node.input:
                consumers.setdefault(v, []).append(node)
        self.consumers = consumers
        self.producers = {o: n for n in self.nodes for o in n.output}
        self.fused: set[str] = set()        # Relu outputs folded into their producer
        # layers written at a join's quantisation: the range (int8 there) they clamp to
        self.clamps: dict[int, tuple[int, int]] = {}
        # [N, C] values held as their 1 x 1 maps (:meth:`_flatten`), and the Flatten
        # layers made of them for readers that take [N, C]
        self.unflattened: set[str] = set()
        self.flats: dict[str, str] = {}
        # Flatten outputs of maps larger than 1 x 1: their (H, W, C)
        self.chw: dict[str, tuple[int, int, int]] = {}
        self.outputs = {vo.name for vo in graph.output}
        self.graph_inputs = {vi.name for vi in graph.input}
        self._requantise_in_producers()
        rng = np.random.default_rng(seed)
        for vi in graph.input:
            if vi.name in self.consts:
                continue
            self._input(vi, data.pop(vi.name, None), consumers.get(vi.name, []), rng)
        if data:
            raise CompileError(f"ONNX model {self.g.name!r} has no input(s) "
                               f"{sorted(data)}; its inputs are "
                               f"{[v.name for v in graph.input if v.name not in self.consts]}")
        for node in self.nodes:
            if node.op_type != "Constant":
                self._node(node)
        outs = []
        for vo in graph.output:
            if vo.name not in self.names:
                raise CompileError(f"ONNX output {vo.name!r} is made by no operator; the "
                                   f"chip's outputs are its layers'")
            t = self.names[vo.name]     # an [N, C] held as a 1 x 1 map: that map
            outs.append(self.g.nchw(t, name=self._fresh(_safe(vo.name)))
                        if vo.name in self.nchw and vo.name not in self.pixels else t)
        self.graph = self.g.build(*outs)

    def _error(self, node, message: str) -> OnnxNodeError:
        """`node`'s refusal, under its operator in the model (a folded QDQ node's)."""
        return OnnxNodeError(message, node=node.name,
                             op_type=self.origin.get(node.name, node.op_type))

    def _invalid(self, node, message: str) -> InvalidOnnxNode:
        """`node`'s refusal where it breaks the ONNX specification (no processor runs
        it): the message names the node, its operator, and asks to correct it."""
        op = self.origin.get(node.name, node.op_type)
        return InvalidOnnxNode(f"ONNX node {node.name!r} ({op}): {message}; correct the "
                               f"node as the ONNX specification of {op} asks",
                               node=node.name, op_type=op)

    def _window(self, node, a, weights: tuple[int, ...] | None = None):
        """A 2-D convolution's or pool's ``(kernel_shape, strides, pads, dilations)``
        with ONNX's defaults (strides and dilations 1, pads 0; a convolution's kernel
        from its `weights`' spatial shape, a pool's given), each checked: two positive
        sizes, four non-negative pads (begin H, begin W, end H, end W). Over a 1-D map
        (NCW) one size and two pads (begin W, end W), returned as the 2-D window over
        its ``H = 1`` map: kernel, stride and dilation 1 along H, no pads there."""
        dims = 1 if node.input[0] in self.ncw else 2
        if "kernel_shape" in a:
            try:
                kernel = tuple(int(k) for k in a["kernel_shape"])
            except (TypeError, ValueError):
                raise self._invalid(node, f"kernel_shape {a['kernel_shape']!r} is not a "
                                          f"list of integers") from None
            if weights is not None and kernel != tuple(weights):
                raise self._invalid(node, f"kernel_shape {list(kernel)}, but its weights "
                                          f"are {list(weights)} wide")
        elif weights is not None:
            kernel = tuple(int(k) for k in weights)
        else:
            raise self._invalid(node, "no kernel_shape (a pool must give it)")
        fields = {"kernel_shape": (kernel, dims, 1),
                  "strides": (a.get("strides", (1,) * dims), dims, 1),
                  "pads": (a.get("pads", (0,) * 2 * dims), 2 * dims, 0),
                  "dilations": (a.get("dilations", (1,) * dims), dims, 1)}
        out = []
        for what, (values, count, low) in fields.items():
            try:
                values = tuple(int(v) for v in values)
            except (TypeError, ValueError):
                raise self._invalid(node, f"{what} {values!r} is not a list of "
                                          f"integers") from None
            if len(values) != count:
                raise self._invalid(node, f"{what} {list(values)} has {len(values)} values; "
                                          f"a {dims}-D {node.op_type} takes {count}"
                                          + ((" (begin H, begin W, end H, end W)" if dims == 2
                                              else " (begin W, end W)")
                                             if what == "pads" else ""))
            if any(v < low for v in values):
                raise self._invalid(node, f"{what} {list(values)}: each must be at least "
                                          f"{low}")
            out.append(values)
        if dims == 1:
            (k,), (s,), (begin, end), (d,) = out
            out = [(1, k), (1, s), (0, begin, 0, end), (1, d)]
        return tuple(out)

    # -- values ---------------------------------------------------------------------
    def _input(self, vi, x, readers, rng):
        elem = vi.type.tensor_type.elem_type
        if elem != self.onnx.TensorProto.INT8:
            raise CompileError(
                f"ONNX input {vi.name!r} is {self.onnx.TensorProto.DataType.Name(elem)}; "
                f"the chip takes int8 inputs: quantise on the host and give the model "
                f"from the first QLinear operator on (drop its QuantizeLinear)")
        where = f"ONNX model {self.g.name!r}"
        shape = onnx_model.declared_dims(vi, where)
        if x is None:
            if not all(isinstance(d, int) for d in shape):
                raise CompileError(f"ONNX input {vi.name!r} has shape {shape} with "
                                   f"unknown sizes; give its data in `inputs`")
            onnx_model.check_random_size(vi.name, shape, where)
            x = rng.integers(-128, 128, size=shape, dtype=np.int8)
        x = np.asarray(x)
        if x.dtype != np.int8:
            raise CompileError(f"input {vi.name!r}: data must be int8, not {x.dtype}")
        zp, scale = self._input_quant(vi.name)
        # a name no tensor has, nor (a map) its NHWC view: ONNX names that differ may
        # be alike once made safe ("a.b", "a_b"), or one the view of another ("x_nhwc")
        tname, i = _safe(vi.name), 1
        one_d = x.ndim == 3 and readers and vi.name not in self.outputs \
            and all(r.op_type in _WINDOWS and r.input[0] == vi.name for r in readers)
        while self._taken(tname) or (x.ndim == 4 or one_d) and self._taken(f"{tname}_nhwc"):
            tname, i = f"{_safe(vi.name)}_{i}", i + 1
        if one_d:
            # read only by 1-D convolutions and pools: an [N, C, W] map is the
            # [N, C, 1, W] one (the same DRAM bytes), a map of height 1 on the chip
            n, c, w = x.shape
            self.names[vi.name] = self.g.input(x.reshape(n, c, 1, w), name=tname,
                                               zero_point=zp, scale=scale, layout="NCHW")
            self.nchw.add(vi.name)
            self.ncw.add(vi.name)
        elif x.ndim == 4 and x.shape[0] > 1 and x.shape[2:] == (1, 1) and readers \
                and vi.name not in self.outputs \
                and all(self._pointwise(r, vi.name) for r in readers):
            # N 1 x 1 maps read only by pointwise convolutions whose outputs the model
            # gives (a batched matmul: onnx_simplify._group_batches): one 1 x N map on
            # the chip, the same DRAM bytes, which the convolutions stream; their
            # outputs, 1 x N maps, are the bytes of their [N, C, 1, 1] values too
            n, c = x.shape[:2]
            self.names[vi.name] = self.g.input(x.reshape(1, 1, n, c), name=tname,
                                               zero_point=zp, scale=scale)
            self.nchw.add(vi.name)
            self.pixels.add(vi.name)
        elif x.ndim == 4:
            self.names[vi.name] = self.g.input(x, name=tname, zero_point=zp, scale=scale,
                                               layout="NCHW")
            self.nchw.add(vi.name)
        elif x.ndim == 2 and readers and vi.name not in self.outputs \
                and all(self._per_column(r) for r in readers):
            # read only by matmuls with a scale per output column: a batch of 1 x 1
            # maps (the same DRAM words as [M, K]), each matmul a 1x1 convolution over
            # it with a multiplier per output channel (:meth:`_per_column_dense`)
            self.names[vi.name] = self.g.input(x.reshape(x.shape[0], 1, 1, x.shape[1]),
                                               name=tname, zero_point=zp, scale=scale)
            self.unflattened.add(vi.name)
        else:
            self.names[vi.name] = self.g.input(x, name=tname, zero_point=zp, scale=scale)

    def _pointwise(self, node, value: str) -> bool:
        """Whether `node` is a 1x1 QLinearConv or ConvInteger of `value`, stride 1,
        unpadded, whose output the model gives and no node reads."""
        if node.op_type not in ("QLinearConv", "ConvInteger") or node.input[0] != value:
            return False
        w = self.consts.get(node.input[3 if node.op_type == "QLinearConv" else 1])
        a = {x.name: self.onnx.helper.get_attribute_value(x) for x in node.attribute}
        return (w is not None and w.ndim == 4 and w.shape[2:] == (1, 1)
                and all(int(s) == 1 for s in a.get("strides", (1, 1)))
                and not any(int(p) for p in a.get("pads", ()))
                and a.get("auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET")
                and node.output[0] in self.outputs
                and not self.consumers.get(node.output[0]))

    def _input_quant(self, value: str) -> tuple[int, float | None]:
        """An input's zero point and scale: those the first QLinear operator reading it
        declares, directly or through operators that keep its quantisation (MaxPool,
        Flatten, Relu, Concat); 0 and unknown if none does."""
        level, seen = [value], {value}
        while level:
            after = []
            for v in level:
                for node in self.consumers.get(v, []):
                    for k, u in enumerate(node.input):
                        at = _in_quant(node, k) if u == v else None
                        if at:
                            return (self._zero_point(node, at[1], "zero point"),
                                    None if at[0] is None else
                                    self._scale(node, at[0], "scale"))
                    if node.op_type in _KEEPS_QUANT and node.output[0] not in seen:
                        seen.add(node.output[0])
                        after.append(node.output[0])
            level = after
        return 0, None

    def _const(self, node, k: int, what: str) -> np.ndarray:
        if k >= len(node.input) or not node.input[k]:
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): no {what}")
        v = node.input[k]
        if v not in self.consts:
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): its {what} "
                                    f"{v!r} is computed, not a constant; the chip takes "
                                    f"constant weights and quantisation parameters")
        return self.consts[v]

    def _one(self, node, a: np.ndarray, what: str):
        if a.size != 1:
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): its {what} "
                                    f"has {a.size} values; the chip takes one here")
        return a.reshape(()).item()

    def _scales(self, node, k: int, what: str) -> np.ndarray:
        """`node`'s scales at input `k` (one, or one per channel), checked."""
        a = self._const(node, k, what)
        return np.atleast_1d(_checked(node, node.input[k], a, what, "scale", self._error))

    def _scale(self, node, k: int, what: str) -> float:
        return float(self._one(node, self._scales(node, k, what), what))

    def _zero_points(self, node, k: int, what: str) -> np.ndarray:
        """`node`'s zero points at input `k` (0 where it gives none), checked."""
        if k >= len(node.input) or not node.input[k]:
            return np.zeros(1, np.int8)
        a = self._const(node, k, what)
        _checked(node, node.input[k], a, what, "zero point", self._error)
        if a.dtype != np.int8:
            # ONNX types the tensor a zero point quantises by it: int32 is no int8 value
            raise self._invalid(node, f"its {what} {node.input[k]!r} is {a.dtype}; the "
                                      f"zero point of an int8 tensor is int8 (ONNX takes "
                                      f"the tensor's type from it)")
        return np.atleast_1d(a)

    def _zero_point(self, node, k: int, what: str) -> int:
        return int(self._one(node, self._zero_points(node, k, what), what))

    def _value(self, node, k: int = 0) -> str:
        v = node.input[k]
        if v not in self.names:
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}) reads {v!r}, "
                                    f"which no supported node makes")
        if v in self.unflattened and not self._per_column(node):
            # a reader that takes the [N, C] value itself: flatten the map once (in the
            # chip's H, W, C order: a matmul reading it reorders its rows, `chw`)
            flat = f"{_safe(v)}_flat"
            if flat not in self.flats:
                self.flats[flat] = self.g.flatten(self.names[v], name=flat)
            return self.flats[flat]
        return self.names[v]

    def _per_column(self, node) -> bool:
        """Whether `node` is a matmul with a scale per output column (run as a
        convolution when it reads a Flatten of a map: :meth:`_flatten`)."""
        return node.op_type in ("QLinearMatMul", "QGemm") and len(node.input) > 4 \
            and node.input[4] in self.consts and np.unique(self.consts[node.input[4]]).size > 1

    # -- joins at one quantisation ---------------------------------------------------
    def _requantise_in_producers(self):
        """Each QLinearConcat input quantised otherwise than the join, made by a layer
        that requantises (a convolution, matmul, Add, global pool or join) whose output
        only the join reads (through Relus and MaxPools nothing else reads): that layer
        writes at the join's scale and zero point (its multiplier computed for the
        join's scale), so the join moves its values unchanged and no identity layer is
        needed (:meth:`_requantised`). The branch's own int8 range still bounds its
        values (onnxruntime clips them there before requantising them to the join's):
        the layer clamps to that range at the join's scale, which the chip's clamps
        take at the output zero point (below; a ReLU's, which the range of a branch
        after a Relu starts at) and at any value above (a convolution's, ``relu6``);
        where it needs another clamp, an identity layer stays. Outer joins first: a
        join written at its reader's quantisation passes it on to its own inputs."""
        for join in reversed(self.nodes):
            if join.op_type != "QLinearConcat":
                continue
            y = self._quant_at(join, 0, 1, "output")
            for k in range(2, len(join.input) - 2, 3):
                x = self._quant_at(join, k + 1, k + 2, "input")
                if self._same(x, y):
                    continue
                found = self._requantiser(join, join.input[k])
                if found is None:
                    continue
                maker, relu = found
                s_at, zp_at = _OUT_QUANT[maker.op_type]
                if not self._same(self._quant_at(maker, s_at, zp_at, "output"), x):
                    continue                        # read otherwise than made: as it is
                lo, hi = (int(np.clip(np.round((q - x[1][0]) * (float(x[0][0]) /
                                                                  float(y[0][0])))
                                      + y[1][0], -128, 127)) for q in (-128, 127))
                low = relu or lo == -128 or lo == y[1][0]      # a clamp at the zero point
                high = hi == 127 or (maker.op_type == "QLinearConv"
                                     and (relu or lo == y[1][0]))    # relu6 clamps at zp too
                if not (low and high) or id(maker) in self.clamps:
                    continue
                self.clamps[id(maker)] = (lo, hi)
                maker.input[s_at], maker.input[zp_at] = join.input[0], join.input[1]
                join.input[k + 1], join.input[k + 2] = join.input[0], join.input[1]

    def _quant_at(self, node, s_at: int, zp_at: int, what: str):
        """`node`'s scale and zero point at inputs `s_at`, `zp_at` (checked), as arrays."""
        return (self._scales(node, s_at, f"{what} scale"),
                self._zero_points(node, zp_at, f"{what} zero point").astype(np.int64))

    @staticmethod
    def _same(a, b) -> bool:
        return all(np.array_equal(x, y) for x, y in zip(a, b))

    def _requantiser(self, join, v: str):
        """The layer that makes `v`, input of `join`, if it requantises and `join` alone
        reads its output (through Relus and MaxPools nothing else reads), and whether a
        Relu is on the way; else None. The Relu then clamps at the join's zero point
        (``Q(relu(v)) = max(Q(v), zp)`` at any zero point)."""
        reader, relus = join, []
        while True:
            rs = self.consumers.get(v, [])
            if v in self.outputs or len(rs) != 1 or rs[0] is not reader \
                    or list(reader.input).count(v) != 1:
                return None
            maker = self.producers.get(v)
            if maker is None:
                return None
            if maker.op_type in _OUT_QUANT:
                if relus and maker.op_type not in ("QLinearConv", "QLinearMatMul", "QGemm",
                                                   "QLinearAdd"):
                    return None                     # a Relu it cannot take
                for relu in relus:
                    relu.doc_string = QDQ_RELU
                return maker, bool(relus)
            if maker.op_type not in ("Relu", "MaxPool") or len(relus) > 1:
                return None
            if maker.op_type == "Relu":
                relus.append(maker)
            reader, v = maker, maker.input[0]

    def _requantised(self, node, i: int, x: str, x_scale: float, y_scale: float,
                     y_zp: int) -> str:
        """Input `i` of join `node` (the tensor `x`, quantised by `x_scale` and its zero
        point) requantised to the join's `y_scale` and `y_zp` by an identity layer: a
        1x1 convolution of a map, a matmul of an ``[M, K]`` tensor, ``Q_y(DQ(x))``
        rounded as any layer of the chip rounds. Kept only where no layer can write at
        the join's quantisation itself (:meth:`_requantise_in_producers`): a graph
        input, a value other nodes read too, the output of a pool or Flatten."""
        name = self._fresh(_safe(f"{node.name or node.output[0]}__requant{i}"))
        mult, shift = self._requant(node, x_scale, 1.0, y_scale, True)
        t = self.g.tensor(x)
        eye = np.eye(t.shape[-1], dtype=np.int8)
        if len(t.shape) == 4:
            mult = np.full(t.shape[-1], mult) if np.ndim(mult) == 0 else mult
            return self.g.conv2d(x, eye[None, None], None, mult=mult, shift=shift, zp=y_zp,
                                 name=name)
        zp = t.quant.zero_point
        bias = np.full(t.shape[-1], -zp, np.int32) if zp else None
        return self.g.dense(x, eye, bias, mult=mult, shift=shift, zp=y_zp, name=name)

    # -- nodes ----------------------------------------------------------------------
    def _node(self, node):
        if node.op_type not in SUPPORTED:
            raise self._error(
                node, f"ONNX node {node.name!r}: {node.op_type} is not lowered to the chip; "
                      f"the importer takes {', '.join(SUPPORTED)} (QOperator form, int8 "
                      f"between them)")
        low, high = _ARITY[node.op_type]
        if not low <= len(node.input) <= high or not node.output or not node.output[0]:
            raise self._invalid(node, f"{len(node.input)} inputs and outputs "
                                      f"{list(node.output)}; {node.op_type} takes "
                                      + (f"{low}" if low == high else f"{low} to {high}"
                                         if high < 99 else f"at least {low}")
                                      + " inputs and makes one output")
        attrs = {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}
        try:
            out = getattr(self, f"_{node.op_type.lower()}")(node, attrs)
        except OnnxNodeError:
            raise
        except CompileError as e:              # the graph's own check of the layer
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): {e}") \
                from None
        self.names[node.output[0]] = out
        if node.output[0] in self.nchw and any(v in self.ncw for v in node.input):
            self.ncw.add(node.output[0])        # a 1-D map's reader makes a 1-D map

    def _fresh(self, base: str) -> str:
        """`base`, or `base` with a number, whichever no tensor of the graph has (ONNX
        names need not be unique, and a node and a value may share one)."""
        name, i = base, 1
        while self._taken(name):
            name, i = f"{base}_{i}", i + 1
        return name

    def _taken(self, name: str) -> bool:
        try:
            self.g.tensor(name)
        except CompileError:
            return False
        return True

    def _name(self, node) -> str:
        return self._fresh(_safe(node.name or node.output[0]))

    def _requant(self, node, x_scale, w_scale, y_scale, per_channel: bool):
        scale = np.atleast_1d(np.asarray(w_scale, np.float64)) * float(x_scale) \
            / float(y_scale)
        limit = (1 << MULT_BITS) - 1
        if np.round(scale.max()) > limit:
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): its "
                                    f"x_scale * w_scale / y_scale is {scale.max():.6g}, more "
                                    f"than the chip's multiplier takes ({limit}); check the "
                                    f"output scale")
        return requant_for(scale, per_channel)

    def _check_x(self, node, x: str):
        zp = self._zero_point(node, 2, "input zero point")
        have = self.g.tensor(x).quant.zero_point
        if zp != have:
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): reads "
                                    f"{node.input[0]!r} with zero point {zp}, but it was "
                                    f"made with {have}; requantise it to one zero point")

    def _qlinearconv(self, node, a):
        return self._conv(node, a, 3, int32=False)

    def _convinteger(self, node, a):
        """ONNX's ``Y = conv(X - x_zp, W - w_zp)`` in int32: a convolution with an int32
        output (the chip pads with the input's zero point, as ONNX pads ``X - x_zp``
        with 0)."""
        return self._conv(node, a, 1, int32=True)

    def _conv(self, node, a, w_at: int, int32: bool):
        """A QLinearConv (weights at input `w_at` = 3) or ConvInteger (1, `int32`): the
        chip's convolution of ``W - w_zp``; where that leaves int8, ``W - w_zp`` over
        each output channel's common factor (which the multiplier takes), or split
        over the input channels read as many times (:func:`int8_parts`)."""
        x = self._value(node)
        if node.input[0] not in self.nchw:
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): its input is "
                                    f"not a map")
        self._check_x(node, x)
        w = self._const(node, w_at, "weights")
        one_d = node.input[0] in self.ncw
        if w.ndim != (3 if one_d else 4):
            raise self._invalid(node, f"its weights have shape {list(w.shape)} (rank "
                                      f"{w.ndim}) for a map of rank {3 if one_d else 4}; a "
                                      + ("1-D convolution's weights are [Cout, Cin/group, "
                                         "kw]" if one_d else "2-D convolution's weights are "
                                         "[Cout, Cin/group, kh, kw]"))
        if one_d:                       # a 1-D kernel: the 2-D one of height 1
            w = w[:, :, None, :]
        w = self._centred(node, w, w_at + 2, 0, "weights")
        group = a.get("group", 1)
        channels = self.g.tensor(x).shape[3]
        if group != 1 and (not isinstance(group, int) or group < 1 or w.shape[0] % group
                           or w.shape[1] * group != channels):
            raise self._invalid(node, f"group {group!r} with weights of shape "
                                      f"{list(w.shape)} over {channels} input channels; "
                                      f"group must divide Cout = {w.shape[0]} and the "
                                      f"weights hold Cin/group = {channels}/{group} "
                                      f"channels per group")
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): auto_pad "
                                    f"{a['auto_pad']!r}; export with explicit pads")
        kernel_shape, strides, pads, dilations = self._window(
            node, a, w.shape[3 if one_d else 2:])
        bias = (self._const(node, 8, "bias").astype(np.int64) if not int32
                and len(node.input) > 8 and node.input[8] else None)
        if bias is not None and bias.shape != (w.shape[0],):
            raise self._invalid(node, f"its bias {node.input[8]!r} has shape "
                                      f"{list(bias.shape)} for {w.shape[0]} output "
                                      f"channels; a bias holds one int32 per channel")
        parts, g = int8_parts(w, 0, factor=None if int32 else "channel", bias=bias)
        if len(parts) > 1 and group != 1:
            kind = "depthwise" if group == channels == w.shape[0] else "grouped"
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): its {kind} "
                                    f"weights less their zero point (group {group}) leave "
                                    f"int8 with no common factor per channel; the chip "
                                    f"holds int8 weights")
        kernel = np.concatenate([np.transpose(p, (2, 3, 1, 0)) for p in parts], axis=2)
        geometry = dict(stride=strides, pads=pads, dilation=dilations, groups=group,
                        name=self._name(node))
        xs = self._repeated(node, x, parts)
        if int32:
            out = self.g.conv2d(xs, kernel, None, out_dtype="int32", **geometry)
        else:
            w_scales = self._scales(node, 4, "weight scale")
            if w_scales.size not in (1, w.shape[0]):
                raise self._invalid(node, f"its weight scale {node.input[4]!r} has "
                                          f"{w_scales.size} values for {w.shape[0]} output "
                                          f"channels; give one, or one per channel")
            mult, shift = self._requant(node, self._scale(node, 1, "input scale"),
                                        w_scales * g,
                                        self._scale(node, 6, "output scale"), True)
            if np.ndim(mult) == 0:
                mult = np.full(w.shape[0], mult)
            out = self.g.conv2d(xs, kernel,
                                None if bias is None else self._int32_bias(node, bias // g),
                                mult=mult, shift=shift,
                                zp=self._zero_point(node, 7, "output zero point"),
                                relu=self._fuses_relu(node), relu6=self._clamp_above(node),
                                **geometry)
        self.nchw.add(node.output[0])
        if node.input[0] in self.pixels:
            self.pixels.add(node.output[0])
        return out

    def _qlinearmatmul(self, node, a):
        return self._matmul(node, self._const(node, 3, "right operand"), 1.0)

    def _qgemm(self, node, a):
        """onnxruntime's ``Y = alpha * (A - a_zp) @ (B - b_zp) + C`` (``C`` int32 at the
        scale ``alpha * a_scale * b_scale``) quantised to ``y_scale``: a matmul whose
        right operand is ``B`` (``B.T`` with ``transB``), its scale ``alpha *
        b_scale``, its bias ``C``."""
        if a.get("transA", 0):
            raise self._error(node, f"ONNX node {node.name!r} (QGemm): transA is not "
                                    f"lowered; the chip's left operand is [M, K]")
        if len(node.input) < 9 or not node.input[7]:
            raise self._error(node, f"ONNX node {node.name!r} (QGemm): no output scale (a "
                                    f"float output); the chip makes int8: quantise it")
        alpha = float(a.get("alpha", 1.0))
        if not (np.isfinite(alpha) and alpha > 0):
            raise self._error(node, f"ONNX node {node.name!r} (QGemm): alpha {alpha}; the "
                                    f"chip scales a product by a positive factor")
        w = self._const(node, 3, "right operand")
        if w.ndim == 2 and a.get("transB", 0):
            w = np.ascontiguousarray(w.T)
        return self._matmul(node, w, alpha)

    def _bias(self, node, n: int) -> np.ndarray | None:
        """A QGemm's int32 ``C`` as one value per output column (int64), or None."""
        if node.op_type != "QGemm" or len(node.input) < 7 or not node.input[6]:
            return None
        c = self._const(node, 6, "bias")
        if c.dtype != np.int32 or c.size not in (1, n) or c.ndim > 2 \
                or (c.ndim == 2 and c.shape[0] != 1):
            raise self._error(node, f"ONNX node {node.name!r} (QGemm): its C is {c.dtype} "
                                    f"of shape {list(c.shape)}; the chip adds an int32 bias "
                                    f"per output column ([N] or [1, N])")
        return np.broadcast_to(c.reshape(-1), (n,)).astype(np.int64)

    def _matmul(self, node, w: np.ndarray, alpha: float):
        """A QLinearMatMul or QGemm (right operand `w` ``[K, N]``, its scale times
        `alpha`): the chip's dense layer, or a convolution over a map."""
        x = self._value(node)
        per_column = node.input[0] in self.unflattened and self._per_column(node)
        if per_column:
            pass                                # a map, read by a convolution over it
        elif node.input[0] in self.nchw or len(self.g.tensor(x).shape) != 2:
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): takes an "
                                    f"[M, K] left operand (Flatten a map first)"
                              + _BATCHED * (len(self.g.tensor(x).shape) == 3))
        self._check_x(node, x)
        if w.ndim != 2:
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): the right "
                                    f"operand must be a constant [K, N] int8, not of shape "
                                    f"{list(w.shape)}")
        w = self._centred(node, w, 5, 1, "right operand")
        w_scale = self._scales(node, 4, "right scale")
        if w_scale.size not in (1, w.shape[1]):
            raise self._invalid(node, f"its right scale {node.input[4]!r} has "
                                      f"{w_scale.size} values for {w.shape[1]} output "
                                      f"columns; give one, or one per column")
        if alpha != 1.0:
            w_scale = w_scale * alpha
        bias = self._bias(node, w.shape[1])
        if per_column:
            return self._per_column_dense(node, x, w, w_scale, bias)
        if node.input[0] in self.chw:
            w = self._hwc_rows(node, w, self.chw[node.input[0]]).reshape(w.shape)
        if np.unique(w_scale).size != 1:
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): one scale "
                                    f"for the right operand (the chip's dense layer has one "
                                    f"multiplier), unless it reads a Flatten of a map, a "
                                    f"graph input that only such matmuls read, or another "
                                    f"such matmul's output (it then runs as a convolution, "
                                    f"a multiplier per output channel); quantise its weights "
                                    f"per tensor, or all of them per channel")
        y_s, y_zp = _OUT_QUANT[node.op_type]
        # sum((x - x_zp) * w) = x @ w - x_zp * sum(w): the zero point folds into a bias
        x_zp = self.g.tensor(x).quant.zero_point
        folded = (-x_zp * w.sum(axis=0)) if x_zp else None
        if bias is not None:
            folded = bias if folded is None else folded + bias
        parts, g = int8_parts(w, 1, factor="tensor", bias=folded)
        g = int(g[0])
        mult, shift = self._requant(node, self._scale(node, 1, "left scale"),
                                    float(w_scale[0]) * g,
                                    self._scale(node, y_s, "output scale"),
                                    False)
        folded = None if folded is None else self._int32_bias(node, folded // g)
        return self.g.dense([x] * len(parts), np.concatenate(parts), folded, mult=mult,
                            shift=shift, zp=self._zero_point(node, y_zp, "output zero point"),
                            relu=self._fuses_relu(node), name=self._name(node))

    def _matmulinteger(self, node, a):
        """ONNX's ``Y = (A - a_zp) @ (B - b_zp)`` in int32: a dense layer with an int32
        output, `B - b_zp` its weights (several K-blocks where that leaves int8:
        :func:`int8_parts`), the left zero point folded into a bias."""
        x = self._value(node)
        if node.input[0] in self.nchw or len(self.g.tensor(x).shape) != 2:
            raise self._error(node, f"ONNX node {node.name!r} (MatMulInteger): takes an "
                                    f"[M, K] left operand")
        self._check_x(node, x)
        w = self._const(node, 1, "right operand")
        if w.ndim != 2:
            raise self._error(node, f"ONNX node {node.name!r} (MatMulInteger): the right "
                                    f"operand must be a constant [K, N] int8, not of shape "
                                    f"{list(w.shape)}")
        w = self._centred(node, w, 3, 1, "right operand")
        if node.input[0] in self.chw:
            w = self._hwc_rows(node, w, self.chw[node.input[0]]).reshape(w.shape)
        parts, _ = int8_parts(w, 1)
        x_zp = self.g.tensor(x).quant.zero_point
        bias = self._int32_bias(node, -x_zp * w.sum(axis=0)) if x_zp else None
        return self.g.dense([x] * len(parts), np.concatenate(parts), bias, out_dtype="int32",
                            name=self._name(node))

    def _centred(self, node, w: np.ndarray, zp_at: int, axis: int, what: str) -> np.ndarray:
        """`node`'s constant int8 `what` `w` less its zero points (input `zp_at`: one,
        or one per output channel along `axis`), as int64. It may leave int8 (a uint8
        tensor made int8, or a zero point far from its values): :func:`int8_parts`."""
        if w.dtype != np.int8:
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): its {what} "
                                    f"is {w.dtype}; the chip multiplies int8 (a uint8 one "
                                    f"with a constant zero point is made int8 on the way in)")
        if w.ndim <= axis:
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): its {what} "
                                    f"has shape {list(w.shape)}, no axis {axis} of output "
                                    f"channels")
        zp = self._zero_points(node, zp_at, f"{what}'s zero point").astype(np.int64)
        if zp.size not in (1, w.shape[axis]):
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): its {what}'s "
                                    f"zero point has {zp.size} values for {w.shape[axis]} "
                                    f"output channels; give one, or one per channel")
        shape = [1] * w.ndim
        shape[axis] = -1
        return w.astype(np.int64) - (zp.reshape(shape) if zp.size > 1 else zp.reshape(()))

    def _int32_bias(self, node, b: np.ndarray) -> np.ndarray:
        if np.any(np.abs(b) > np.iinfo(np.int32).max):
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): its bias, "
                                    f"with the input zero point folded in, does not fit "
                                    f"int32")
        return b.astype(np.int32)

    def _repeated(self, node, x: str, parts: list[np.ndarray]) -> str:
        """The map `x` once for each weight part along the input channels: a
        convolution reads it with the parts' weights side by side. A 1x1 convolution
        of `x` makes it, its weights identities side by side, at multiplier 1 and shift
        0 with `x`'s zero point (``x - zp + zp``: exact); a Concat of `x` with itself
        would need whole blocks of channels."""
        if len(parts) == 1:
            return x
        t = self.g.tensor(x)
        eye = np.eye(t.shape[-1], dtype=np.int8)
        return self.g.conv2d(x, np.concatenate([eye] * len(parts), axis=1)[None, None],
                             zp=t.quant.zero_point,
                             name=self._fresh(_safe(f"{node.name or node.output[0]}__repeat")))

    def _per_column_dense(self, node, map_: str, w: np.ndarray, w_scale: np.ndarray,
                          bias: np.ndarray | None):
        """A matmul with a scale per output column reading a Flatten of the map `map_`:
        a convolution of that map whose kernel covers it (1x1 for a ``1 x 1`` map), a
        multiplier per output channel; its output a ``1 x 1`` map standing for the
        ``[N, C]`` value."""
        y_s, y_zp = _OUT_QUANT[node.op_type]
        kernel = self._hwc_rows(node, w, self.g.tensor(map_).shape[1:])
        parts, g = int8_parts(kernel, 3, factor="channel", bias=bias)
        mult, shift = self._requant(node, self._scale(node, 1, "left scale"), w_scale * g,
                                    self._scale(node, y_s, "output scale"), True)
        y = self.g.conv2d(self._repeated(node, map_, parts), np.concatenate(parts, axis=2),
                          None if bias is None else self._int32_bias(node, bias // g),
                          mult=mult, shift=shift,
                          zp=self._zero_point(node, y_zp, "output zero point"),
                          relu=self._fuses_relu(node), name=self._name(node))
        self.unflattened.add(node.output[0])
        return y

    def _hwc_rows(self, node, w: np.ndarray, hwc) -> np.ndarray:
        """A matmul's ``[C*H*W, N]`` weights reading a flattened ``(H, W, C)`` map, its
        rows in ONNX's C, H, W order, as ``[H, W, C, N]``: the chip flattens H, W, C."""
        h, w_, c = hwc
        if w.shape[0] != c * h * w_:
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): "
                                    f"{w.shape[0]} weight rows for a flattened {c}x{h}x{w_} "
                                    f"map")
        return w.reshape(c, h, w_, -1).transpose(1, 2, 0, 3)

    def _maxpool(self, node, a):
        x = self._value(node)
        kernel_shape, strides, pads, dilations = self._window(node, a)
        if a.get("ceil_mode", 0) or dilations != (1, 1):
            raise self._error(node, f"ONNX node {node.name!r} (MaxPool): ceil_mode and "
                                    f"dilations are not lowered; export with ceil_mode=0")
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
            raise self._error(node, f"ONNX node {node.name!r} (MaxPool): auto_pad "
                                    f"{a['auto_pad']!r}; export with explicit pads")
        out = self.g.max_pool2d(x, kernel_shape, strides, pads, name=self._name(node))
        self.nchw.add(node.output[0])
        return out

    def _averagepool(self, node, a):
        """An average over windows at one quantisation: the chip sums the window less
        the zero point and divides by its size (a 16-bit multiplier, within a step of
        ONNX's float average). The padding counts in the chip's divisor, so a padded
        pool must count it too (``count_include_pad=1``)."""
        x = self._value(node)
        kernel_shape, strides, pads, dilations = self._window(node, a)
        if a.get("ceil_mode", 0) or dilations != (1, 1):
            raise self._error(node, f"ONNX node {node.name!r} (AveragePool): ceil_mode and "
                                    f"dilations are not lowered; export with ceil_mode=0")
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
            raise self._error(node, f"ONNX node {node.name!r} (AveragePool): auto_pad "
                                    f"{a['auto_pad']!r}; export with explicit pads")
        if any(pads) and not a.get("count_include_pad", 0):
            raise self._error(node, f"ONNX node {node.name!r} (AveragePool): pads {list(pads)} "
                                    f"without count_include_pad: each window near the edge "
                                    f"divides by its own count, the chip by the window's "
                                    f"size")
        out = self.g.avg_pool2d(x, kernel_shape, strides, pads, name=self._name(node))
        self.nchw.add(node.output[0])
        return out

    def _globalmaxpool(self, node, a):
        """The largest value of each channel: a max pool whose window is the map."""
        x = self._value(node)
        _, h, w, _ = self.g.tensor(x).shape
        out = self.g.max_pool2d(x, (h, w), (h, w), name=self._name(node))
        self.nchw.add(node.output[0])
        return out

    def _concat(self, node, a):
        xs = [self._value(node, k) for k in range(len(node.input))]
        return self._join(node, xs, list(node.input), a.get("axis"))

    def _qlinearconcat(self, node, a):
        """onnxruntime's ``Y = Q_y(concat(DQ(x_i)))``: each input at the join's scale
        and zero point joins as it is (its layer writes there where it can:
        :meth:`_requantise_in_producers`), another through an identity layer."""
        if len(node.input) < 5 or (len(node.input) - 2) % 3:
            raise self._error(node, f"ONNX node {node.name!r} (QLinearConcat): takes "
                                    f"y_scale, y_zero_point and a (x, x_scale, "
                                    f"x_zero_point) for each input, not {len(node.input)} "
                                    f"inputs")
        y_s = self._scale(node, 0, "output scale")
        y_zp = self._zero_point(node, 1, "output zero point")
        xs = []
        for i, k in enumerate(range(2, len(node.input), 3)):
            x = self._value(node, k)
            s = self._scale(node, k + 1, "input scale")
            zp = self._zero_point(node, k + 2, "input zero point")
            have = self.g.tensor(x).quant.zero_point
            if zp != have:
                raise self._error(node, f"ONNX node {node.name!r} (QLinearConcat): reads "
                                        f"{node.input[k]!r} with zero point {zp}, but it was "
                                        f"made with {have}")
            xs.append(x if (s, zp) == (y_s, y_zp) else
                      self._requantised(node, i, x, s, y_s, y_zp))
        if len(xs) > 1:
            return self._join(node, xs, list(node.input[2::3]), a.get("axis"))
        v = node.input[2]                       # a requantisation, or nothing
        if v in self.nchw:
            self.nchw.add(node.output[0])
        if v in self.chw and xs[0] == self.names[v]:
            self.chw[node.output[0]] = self.chw[v]
        return xs[0]

    def _join(self, node, xs: list[str], inputs: list[str], axis) -> str:
        maps = [v in self.nchw for v in inputs]
        rank = 4 if all(maps) else 2
        channel_axes = (1, -2) if all(v in self.ncw for v in inputs) else (1, -3)
        if any(maps) != all(maps) or axis not in (channel_axes if rank == 4 else (1, -1)):
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): joins maps "
                                    f"along their channels (axis 1) or [M, K] tensors along "
                                    f"K (axis 1)")
        given = [v for v, x in zip(inputs, xs)
                 if v in self.graph_inputs and x == self.names.get(v)]
        if rank == 4 and given:
            # a map join is written in place by the layers that make its inputs; an
            # input of the program is the host's, laid out by a transpose view
            raise self._error(node, f"ONNX node {node.name!r} ({node.op_type}): joins the "
                                    f"model's input {given[0]!r}; the chip joins maps its "
                                    f"layers make (each writes its channels of the join)")
        out = self.g.concat(*xs, name=self._name(node))
        if rank == 4:
            self.nchw.add(node.output[0])
        return out

    def _flatten(self, node, a):
        x = self._value(node)
        shape = self.g.tensor(x).shape
        readers = self.consumers.get(node.output[0], [])
        if a.get("axis", 1) != 1 or node.input[0] not in self.nchw:
            raise self._error(node, f"ONNX node {node.name!r} (Flatten): flattens a map "
                                    f"along axis 1 only")
        if shape[1] * shape[2] != 1:
            # ONNX flattens C, H, W and the chip H, W, C: the matmuls reading it take
            # their weight rows in the chip's order (:meth:`_matmul`)
            if not readers or node.output[0] in self.outputs or not all(
                    r.op_type in ("QLinearMatMul", "QGemm") and r.input[0] == node.output[0]
                    for r in readers):
                raise self._error(
                    node, f"ONNX node {node.name!r} (Flatten): a {shape[1]}x{shape[2]} map "
                          f"is flattened in C, H, W order by ONNX and H, W, C by the chip, "
                          f"so only QLinearMatMuls may read it (their weight rows are "
                          f"reordered); here another reader or a graph output takes it: "
                          f"put a global pool before the Flatten, or read it by a matmul")
            self.chw[node.output[0]] = shape[1:]
        if any(self._per_column(r) and r.input[0] == node.output[0] for r in readers):
            # a matmul with a scale per output column reads it: it runs as a
            # convolution over the map (a multiplier per output channel); a reader
            # that takes the [N, C] value gets it flattened (:meth:`_value`)
            self.unflattened.add(node.output[0])
            return x
        if node.output[0] in self.outputs and shape[1] * shape[2] == 1:
            # the program's output: a 1 x 1 map holds the [N, C] value's bytes in its
            # order (the chip has no Flatten as an output)
            return x
        return self.g.flatten(x, name=self._name(node))

    def _qlinearadd(self, node, a):
        """``y = y_zp + (a_s (a - a_zp) + b_s (b - b_zp)) / y_s`` as the chip's Add:
        8-bit multipliers over a common shift (the weights of a diagonal block), so
        it may differ from onnxruntime by a step more than the other layers."""
        xa, xb = self._value(node, 0), self._value(node, 3)
        for t, k in ((xa, 2), (xb, 5)):
            zp = self._zero_point(node, k, "zero point")
            if zp != self.g.tensor(t).quant.zero_point:
                raise self._error(node, f"ONNX node {node.name!r} (QLinearAdd): reads an "
                                        f"operand with zero point {zp}, but it was made "
                                        f"with {self.g.tensor(t).quant.zero_point}")
        y_s = self._scale(node, 6, "output scale")
        ratios = np.array([self._scale(node, 1, "scale"), self._scale(node, 4, "scale")]) / y_s
        shift = 0
        while shift < 30 and np.all(np.round(ratios * 2.0 ** (shift + 1)) <= 127):
            shift += 1
        mults = np.round(ratios * 2.0 ** shift)
        if np.any(mults > 127) or np.any(mults < 1):
            raise self._error(node, f"ONNX node {node.name!r} (QLinearAdd): its operands' "
                                    f"scales over the output's ({node.input[6]!r}) are "
                                    f"{ratios[0]:.6g} and {ratios[1]:.6g}; the chip's Add "
                                    f"multiplies by 1 to 127 over a common shift of at most "
                                    f"30, so each must lie in [2**-31, 127.5] and their "
                                    f"ratio within about 127")
        ma, mb = (int(m) for m in mults)
        out = self.g.add(xa, xb, mult_a=ma, mult_b=mb, shift=shift,
                         zp=self._zero_point(node, 7, "output zero point"),
                         relu=self._fuses_relu(node), name=self._name(node))
        if node.input[0] in self.nchw:
            self.nchw.add(node.output[0])
        return out

    def _qlinearglobalaveragepool(self, node, a):
        x = self._value(node)
        if a.get("channels_last", 0) or node.input[0] not in self.nchw:
            raise self._error(node, f"ONNX node {node.name!r} (QLinearGlobalAveragePool): "
                                    f"takes an NCHW map (channels_last 0)")
        y_zp = self._zero_point(node, 4, "output zero point")
        self._check_x(node, x)
        _, h, w, _ = self.g.tensor(x).shape
        scale = self._scale(node, 1, "input scale") / \
            (self._scale(node, 3, "output scale") * h * w)
        mult, shift = requant_for(scale, False)
        out = self.g.global_avg_pool(x, mult=mult, shift=shift, zp=y_zp,
                                     name=self._name(node))
        self.nchw.add(node.output[0])
        return out

    def _fuses_relu(self, node) -> bool:
        """Whether `node` clamps at its output zero point: its only reader is a Relu the
        chip folds into it (its clamp at the output zero point is ONNX's ``max(y, 0)``
        when that zero point is 0), or it writes at a join's quantisation within a
        range that starts there (:meth:`_requantise_in_producers`)."""
        readers = self.consumers.get(node.output[0], [])
        if len(readers) == 1 and readers[0].op_type == "Relu" \
                and node.output[0] not in self.outputs and (
                self._zero_point(node, _OUT_QUANT[node.op_type][1], "output zero point") == 0
                or readers[0].doc_string == QDQ_RELU):
            self.fused.add(readers[0].output[0])
            return True
        return self.clamps.get(id(node), (-128, 127))[0] > -128

    def _clamp_above(self, node) -> int | None:
        """The int8 value a convolution written at a join's quantisation clamps to from
        above (its branch's largest), or None."""
        hi = self.clamps.get(id(node), (-128, 127))[1]
        return hi if hi < 127 else None

    def _relu(self, node, a):
        if node.output[0] not in self.fused:
            raise self._error(node, f"ONNX node {node.name!r} (Relu): folds into the layer "
                                    f"before it (QLinearConv or QLinearMatMul) when that "
                                    f"layer's output has zero point 0, no other reader and "
                                    f"is no graph output")
        self.nchw.update(node.output[:1] if node.input[0] in self.nchw else [])
        return self._value(node)


def int8_parts(w: np.ndarray, axis: int, *, factor: str | None = None,
               bias: np.ndarray | None = None) -> tuple[list[np.ndarray], np.ndarray]:
    """Integer weights `w` (``W - w_zp``: within [-255, 255]), output channels along
    `axis`, as int8 weights the chip computes with exactly: ``(parts, g)`` with ``w =
    g * sum(parts)``, `g` one integer per output channel.

    Weights that fit int8 are one part (g = 1). Else, with `factor` (``"channel"``: a
    factor per output channel, ``"tensor"``: one for all), when the greatest common
    divisor `g` of the values brings them into int8 and divides the int32 `bias` (the
    sum is then taken over g and the multiplier times g: ``0 - 255`` is ``255 * -1``),
    that. Else the parts are clipped to int8 one after the other (two for ``|w| <=
    254``, three for 255): ``x @ w = [x, x] @ [w1; w2]``, the input read once per
    part along K (a matmul) or its input channels (a convolution)."""
    n = w.shape[axis]
    ones = np.ones(n, dtype=np.int64)
    if w.size == 0 or (w.min() >= -128 and w.max() <= 127):
        return [w.astype(np.int8)], ones
    shape = [1] * w.ndim
    shape[axis] = -1
    if factor is not None:
        a = np.moveaxis(np.abs(w), axis, 0).reshape(n, -1)
        g = (np.gcd.reduce(a, axis=1) if factor == "channel"
             else np.full(n, np.gcd.reduce(a.ravel())))
        g = np.maximum(g, 1)
        q = w // g.reshape(shape)
        if q.min() >= -128 and q.max() <= 127 and (bias is None or not np.any(bias % g)):
            return [q.astype(np.int8)], g.astype(np.int64)
    parts, rest = [], w.astype(np.int64)
    while rest.any() or not parts:
        p = np.clip(rest, -128, 127)
        parts.append(p.astype(np.int8))
        rest = rest - p
    return parts, ones


def _safe(name: str) -> str:
    """An ONNX value or node name as a graph name (they may hold any character)."""
    out = "".join(c if c.isalnum() or c in "_" else "_" for c in name)
    return out if out and not out[0].isdigit() else f"t_{out}"
