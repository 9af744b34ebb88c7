"""ONNX models in the QOperator form (int8 tensors between ``QLinear*`` operators), or
in the QDQ form folded into it (:func:`fold_qdq`), as graphs (docs/compiler.md, "ONNX
models").

What a model may hold: ``QLinearConv`` (one group or depthwise, weights with zero
point 0, a scale per tensor or per output channel, an int32 bias), ``QLinearMatMul`` (a
constant ``[K, N]`` right operand with zero point 0 and one scale, or a scale per
column when it reads a Flatten of a map: a convolution over the map), ``MaxPool``,
``Concat`` (of maps along their channels, of ``[M, K]`` along K), ``Flatten`` of a map
(of one larger than ``1 x 1`` read only by matmuls, whose weight rows are reordered
from ONNX's C, H, W to the chip's H, W, C), ``Relu`` on a tensor whose zero point is
0, and onnxruntime's ``QLinearAdd`` and ``QLinearGlobalAveragePool``. Its inputs and
outputs are int8 (the host quantises before and dequantises after). Maps are NCHW in
ONNX and NHWC on the chip: an input map enters through a transpose on the chip
(``GraphBuilder.input(..., layout="NCHW")``) and an output map leaves through another.

The requantisation differs in one way the model cannot express: ONNX scales a
product by a float ``x_scale * w_scale / y_scale`` and rounds half to even, the chip
by ``mult / 2**shift`` (16-bit ``mult``) and rounds half up. So an imported model
equals the numpy reference and the golden model bit for bit, and onnxruntime within
one step of int8 (``testbenches/test_onnx_import.py`` counts how often they differ).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from systolica.compiler.errors import CompileError
from systolica.compiler.graph.graph import Graph, GraphBuilder
from systolica.compiler.graph.ops import requant_for

#: The operators :func:`load` takes (every other one is refused by name); the last
#: two are onnxruntime's (domain ``com.microsoft``), which its quantiser writes.
SUPPORTED = ("QLinearConv", "QLinearMatMul", "MaxPool", "Concat", "Flatten", "Relu",
             "QLinearAdd", "QLinearGlobalAveragePool")


def load(model, inputs: Mapping[str, np.ndarray] | None = None, *,
         name: str | None = None, seed: int = 0) -> Graph:
    """The graph of ONNX `model` (a path, bytes or a ``ModelProto``), its inputs the
    int8 arrays `inputs` by ONNX input name (missing ones: seeded random data of the
    declared shape). A model in the QDQ form (float operators between
    DequantizeLinear and QuantizeLinear) is first folded into the QOperator form
    (:func:`fold_qdq`); its float inputs are then the int8 values their
    QuantizeLinear makes, under the input's name. Raises CompileError naming the node
    and what to change where the model holds something the chip does not run."""
    onnx = _onnx()
    proto = _proto(onnx, model)
    if any(n.op_type == "DequantizeLinear" for n in proto.graph.node):
        proto = fold_qdq(proto)
    return _Importer(onnx, proto, dict(inputs or {}), name, seed).graph


def fold_qdq(proto):
    """A QDQ model as the QOperator model it means: ``Q(op(DQ(x), DQ(w), DQ(b)))`` for
    Conv, MatMul and Gemm (a constant right operand, optionally ``transB``) becomes
    ``QLinearConv`` / ``QLinearMatMul`` (a Gemm's bias as a ninth input, which only
    this importer reads), a Relu between the op and Q folding into it (``Q(relu(v)) =
    max(Q(v), y_zp)``: the chip's clamp at the zero point, whatever it is);
    ``Q(Add(DQ(a), DQ(b)))`` becomes ``QLinearAdd`` (a Relu folding as before) and
    ``Q(GlobalAveragePool(DQ(x)))`` ``QLinearGlobalAveragePool`` (onnxruntime's
    operators); ``Q(MaxPool(DQ(x)))``, ``Q(Concat(DQ(x_i)))`` and
    ``Q(Flatten(DQ(x)))`` with one scale and zero point become the int8 operators (a
    Concat input quantised otherwise, as onnxruntime's quantiser writes a branch, is
    first requantised by an identity layer). A float input read only by a
    QuantizeLinear becomes that int8 value (under the input's name), a float output
    made by a DequantizeLinear the int8 value it reads."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx import shape_inference as onnx_shape_inference
    g = proto.graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    made = {o: n for n in g.node for o in n.output}
    readers: dict[str, list] = {}
    for n in g.node:
        for v in n.input:
            readers.setdefault(v, []).append(n)
    rename: dict[str, str] = {}        # a float input's Q output -> the input's name
    inputs = []
    for vi in g.input:
        if vi.name in consts:
            continue
        rs = readers.get(vi.name, [])
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            if len(rs) != 1 or rs[0].op_type != "QuantizeLinear":
                raise CompileError(f"ONNX input {vi.name!r} is float and not quantised by "
                                   f"one QuantizeLinear; the chip takes int8 inputs")
            rename[rs[0].output[0]] = vi.name
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            inputs.append(helper.make_tensor_value_info(vi.name, TensorProto.INT8, shape))
        else:
            inputs.append(vi)
    out_nodes, inits = [], list(g.initializer)

    def value(v):
        return rename.get(v, v)

    def dq(v, what, node):
        """``(int8 value, scale name, zero point name)`` of a DequantizeLinear output."""
        n = made.get(v)
        if n is None or n.op_type != "DequantizeLinear":
            raise CompileError(f"ONNX node {node.name!r} ({node.op_type}): its {what} "
                               f"{v!r} is not a DequantizeLinear's output; in the QDQ form "
                               f"every operand is dequantised int8")
        zp = n.input[2] if len(n.input) > 2 and n.input[2] else None
        if zp is None:
            zp = f"{n.output[0]}__zp"
            inits.append(numpy_helper.from_array(np.zeros(
                np.shape(consts.get(n.input[1], 0)), np.int8), zp))
        return value(n.input[0]), n.input[1], zp

    shapes: dict[str, list[int]] = {}

    def requantised(op, k, v, s_name, zp_name, y_s, y_zp):
        """Input `k` of Concat `op` (the int8 `v`, quantised by `s_name`, `zp_name`)
        requantised to the join's `y_s`, `y_zp` by a 1x1 convolution (a matmul for
        ``[M, K]`` tensors) with identity weights: ``Q_y(DQ(v))``, rounded as any
        layer of the chip rounds."""
        if not shapes:
            inferred = onnx_shape_inference.infer_shapes(proto).graph
            for vi in list(inferred.value_info) + list(inferred.input):
                shapes[vi.name] = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        shape = shapes.get(op.input[k])
        if not shape or len(shape) not in (2, 4) or not shape[1]:
            raise CompileError(f"ONNX node {op.name!r} (Concat): input {op.input[k]!r} is "
                               f"quantised differently from the output and its shape is "
                               f"not known; give the model's value shapes (onnx shape "
                               f"inference) or quantise the inputs as the output")
        c = shape[1]
        eye = np.eye(c, dtype=np.int8)
        w = f"{op.name}__requant{k}_w"
        inits.append(numpy_helper.from_array(eye[:, :, None, None] if len(shape) == 4
                                             else eye, w))
        one, zero = f"{op.name}__requant_one", f"{op.name}__requant_zero"
        if one not in consts:
            consts[one], consts[zero] = np.float32(1.0), np.int8(0)
            inits.extend([numpy_helper.from_array(consts[one], one),
                          numpy_helper.from_array(consts[zero], zero)])
        y = f"{op.name}__requant{k}"
        ins = [v, s_name, zp_name, w, one, zero, y_s, y_zp]
        out_nodes.append(helper.make_node("QLinearConv" if len(shape) == 4 else
                                          "QLinearMatMul", ins, [y], name=y))
        return y

    def const_scale(name, values):
        inits.append(numpy_helper.from_array(np.asarray(values, np.float32), name))
        return name

    for q in g.node:
        if q.op_type != "QuantizeLinear" or q.output[0] in rename:
            continue
        y_s = q.input[1]
        y_zp = q.input[2] if len(q.input) > 2 and q.input[2] else None
        if y_zp is None:
            y_zp = f"{q.output[0]}__zp"
            inits.append(numpy_helper.from_array(np.int8(0), y_zp))
        op = made.get(q.input[0])
        relu = op is not None and op.op_type == "Relu"
        if relu:
            op = made.get(op.input[0])
        if op is None:
            raise CompileError(f"ONNX node {q.name!r} (QuantizeLinear) quantises a value no "
                               f"node makes")
        out = q.output[0]
        conv_out = f"{out}__pre_relu" if relu else out
        if op.op_type == "Conv":
            x, x_s, x_zp = dq(op.input[0], "input", op)
            w, w_s, w_zp = dq(op.input[1], "weights", op)
            ins = [x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp]
            if len(op.input) > 2 and op.input[2]:
                ins.append(dq(op.input[2], "bias", op)[0])
            out_nodes.append(helper.make_node("QLinearConv", ins, [conv_out], name=op.name,
                                              **{a.name: helper.get_attribute_value(a)
                                                 for a in op.attribute}))
        elif op.op_type in ("MatMul", "Gemm"):
            a = {x.name: helper.get_attribute_value(x) for x in op.attribute}
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
                raise CompileError(f"ONNX node {op.name!r} (Gemm): transA, alpha and beta "
                                   f"are not lowered; export a plain x @ W + b")
            x, x_s, x_zp = dq(op.input[0], "left operand", op)
            w, w_s, w_zp = dq(op.input[1], "right operand", op)
            if a.get("transB", 0):
                if w not in consts:
                    raise CompileError(f"ONNX node {op.name!r} (Gemm): a transposed "
                                       f"right operand must be a constant")
                wt = f"{w}__t"
                inits.append(numpy_helper.from_array(np.ascontiguousarray(consts[w].T), wt))
                consts[wt] = consts[w].T
                w = wt
            ins = [x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp]
            if op.op_type == "Gemm" and len(op.input) > 2 and op.input[2]:
                ins.append(dq(op.input[2], "bias", op)[0])
            out_nodes.append(helper.make_node("QLinearMatMul", ins, [conv_out], name=op.name))
        elif op.op_type == "Add":
            (a, a_s, a_zp), (b, b_s, b_zp) = (dq(v, "operand", op) for v in op.input)
            out_nodes.append(helper.make_node("QLinearAdd", [a, a_s, a_zp, b, b_s, b_zp,
                                                             y_s, y_zp], [conv_out],
                                              name=op.name, domain="com.microsoft"))
        elif op.op_type == "GlobalAveragePool" and not relu:
            x, x_s, x_zp = dq(op.input[0], "input", op)
            out_nodes.append(helper.make_node("QLinearGlobalAveragePool",
                                              [x, x_s, x_zp, y_s, y_zp], [out], name=op.name,
                                              domain="com.microsoft", channels_last=0))
        elif op.op_type in ("MaxPool", "Concat", "Flatten") and not relu:
            parts = [dq(v, "input", op) for v in op.input]
            ins = []
            for k, (v, s_name, zp_name) in enumerate(parts):
                same = (np.array_equal(consts.get(s_name), consts.get(y_s))
                        and np.array_equal(consts.get(zp_name), consts.get(y_zp)))
                if same:
                    ins.append(v)
                elif op.op_type == "Concat":
                    # onnxruntime's quantiser gives each joined branch its own scale:
                    # the branch is requantised to the join's by an identity layer
                    ins.append(requantised(op, k, v, s_name, zp_name, y_s, y_zp))
                else:
                    raise CompileError(f"ONNX node {op.name!r} ({op.op_type}): its input "
                                       f"and output are quantised differently; the chip "
                                       f"moves int8 values unchanged here")
            out_nodes.append(helper.make_node(op.op_type, ins, [out],
                                              name=op.name,
                                              **{a.name: helper.get_attribute_value(a)
                                                 for a in op.attribute}))
        else:
            raise CompileError(f"ONNX node {op.name!r}: {op.op_type} between "
                               f"DequantizeLinear and QuantizeLinear is not lowered; the "
                               f"QDQ form takes Conv, MatMul, Gemm, Add (each with a "
                               f"Relu), GlobalAveragePool, MaxPool, Concat and Flatten")
        if relu:
            out_nodes.append(helper.make_node("Relu", [conv_out], [out],
                                              name=f"{op.name}__relu", doc_string=QDQ_RELU))
    outputs = []
    for vo in g.output:
        n = made.get(vo.name)
        if n is not None and n.op_type == "DequantizeLinear":
            outputs.append(helper.make_tensor_value_info(value(n.input[0]), TensorProto.INT8,
                                                         None))
        elif any(vo.name in n.output for n in out_nodes):
            outputs.append(vo)
        else:
            raise CompileError(f"ONNX output {vo.name!r} is not quantised: the chip makes "
                               f"int8 outputs, so end the model with QuantizeLinear (and, "
                               f"optionally, DequantizeLinear)")
    folded = helper.make_graph(out_nodes, g.name, inputs, outputs, inits)
    return helper.make_model(folded, opset_imports=list(proto.opset_import))


#: The doc string of a Relu a QDQ fold made: it folds into its producer at any zero
#: point (it stood between the op and the QuantizeLinear).
QDQ_RELU = "folded from QDQ"


def _onnx():
    try:
        import onnx
    except ImportError:
        raise CompileError("importing an ONNX model needs the onnx package: "
                           "pip install 'systolica[onnx]' (or pip install onnx)") from None
    return onnx


def _proto(onnx, model):
    if isinstance(model, (str, Path)):
        path = Path(model)
        if not path.is_file():
            raise CompileError(f"ONNX model {str(path)!r}: no such file")
        try:
            return onnx.load(str(path))
        except Exception as e:                 # a truncated or foreign file
            raise CompileError(f"ONNX model {str(path)!r} cannot be read: {e}") from None
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    if isinstance(model, onnx.ModelProto):
        return model
    raise CompileError(f"an ONNX model is a path, bytes or onnx.ModelProto, not "
                       f"{type(model).__name__}")


class _Importer:
    def __init__(self, onnx, proto, data: dict, name: str | None, seed: int):
        from onnx import numpy_helper
        self.onnx = onnx
        graph = proto.graph
        self.consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        for node in graph.node:             # Constant nodes are initialisers too
            if node.op_type == "Constant":
                self.consts[node.output[0]] = numpy_helper.to_array(
                    next(a.t for a in node.attribute if a.name == "value"))
        self.g = GraphBuilder(name or graph.name or "onnx")
        self.names: dict[str, str] = {}     # ONNX value -> graph tensor
        self.nchw: set[str] = set()         # ONNX values that are maps (NCHW there)
        consumers: dict[str, list] = {}
        for node in graph.node:
            for v in node.input:
                consumers.setdefault(v, []).append(node)
        self.consumers = consumers
        self.fused: set[str] = set()        # Relu outputs folded into their producer
        # [N, C] values held as their 1 x 1 maps (:meth:`_flatten`), and the Flatten
        # layers made of them for readers that take [N, C]
        self.unflattened: set[str] = set()
        self.flats: dict[str, str] = {}
        # Flatten outputs of maps larger than 1 x 1: their (H, W, C)
        self.chw: dict[str, tuple[int, int, int]] = {}
        self.outputs = {vo.name for vo in graph.output}
        rng = np.random.default_rng(seed)
        for vi in graph.input:
            if vi.name in self.consts:
                continue
            self._input(vi, data.pop(vi.name, None), consumers.get(vi.name, []), rng)
        if data:
            raise CompileError(f"ONNX model {self.g.name!r} has no input(s) "
                               f"{sorted(data)}; its inputs are "
                               f"{[v.name for v in graph.input if v.name not in self.consts]}")
        for node in graph.node:
            if node.op_type != "Constant":
                self._node(node)
        outs = []
        for vo in graph.output:
            t = self.names[vo.name]     # an [N, C] held as a 1 x 1 map: that map
            outs.append(self.g.nchw(t, name=_safe(vo.name)) if vo.name in self.nchw else t)
        self.graph = self.g.build(*outs)

    # -- values ---------------------------------------------------------------------
    def _input(self, vi, x, readers, rng):
        elem = vi.type.tensor_type.elem_type
        if elem != self.onnx.TensorProto.INT8:
            raise CompileError(
                f"ONNX input {vi.name!r} is {self.onnx.TensorProto.DataType.Name(elem)}; "
                f"the chip takes int8 inputs: quantise on the host and give the model "
                f"from the first QLinear operator on (drop its QuantizeLinear)")
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if x is None:
            if not all(shape):
                raise CompileError(f"ONNX input {vi.name!r} has shape {shape} with "
                                   f"unknown sizes; give its data in `inputs`")
            x = rng.integers(-128, 128, size=shape, dtype=np.int8)
        x = np.asarray(x)
        if x.dtype != np.int8:
            raise CompileError(f"input {vi.name!r}: data must be int8, not {x.dtype}")
        zp, scale = self._input_quant(vi.name, readers)
        tname = _safe(vi.name)
        if x.ndim == 4:
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

    def _input_quant(self, value: str, readers) -> tuple[int, float | None]:
        """An input's zero point and scale: those its QLinear readers give it."""
        for node in readers:
            if node.op_type in ("QLinearConv", "QLinearMatMul"):
                return int(self._scalar(node, 2, "zero point")), \
                    float(self._scalar(node, 1, "scale"))
        return 0, None

    def _const(self, node, k: int, what: str) -> np.ndarray:
        if k >= len(node.input) or not node.input[k]:
            raise CompileError(f"ONNX node {node.name!r} ({node.op_type}): no {what}")
        v = node.input[k]
        if v not in self.consts:
            raise CompileError(f"ONNX node {node.name!r} ({node.op_type}): its {what} "
                               f"{v!r} is computed, not a constant; the chip takes "
                               f"constant weights and quantisation parameters")
        return self.consts[v]

    def _scalar(self, node, k: int, what: str):
        a = self._const(node, k, what)
        if a.size != 1:
            raise CompileError(f"ONNX node {node.name!r} ({node.op_type}): its {what} has "
                               f"{a.size} values; the chip takes one here")
        return a.reshape(()).item()

    def _value(self, node, k: int = 0) -> str:
        v = node.input[k]
        if v not in self.names:
            raise CompileError(f"ONNX node {node.name!r} ({node.op_type}) reads {v!r}, "
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
        return node.op_type == "QLinearMatMul" and len(node.input) > 4 \
            and node.input[4] in self.consts and np.unique(self.consts[node.input[4]]).size > 1

    # -- nodes ----------------------------------------------------------------------
    def _node(self, node):
        if node.op_type not in SUPPORTED:
            raise CompileError(
                f"ONNX node {node.name!r}: {node.op_type} is not lowered to the chip; the "
                f"importer takes {', '.join(SUPPORTED)} (QOperator form, int8 between "
                f"them)")
        attrs = {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}
        out = getattr(self, f"_{node.op_type.lower()}")(node, attrs)
        self.names[node.output[0]] = out

    def _name(self, node) -> str:
        return _safe(node.name or node.output[0])

    def _requant(self, node, x_scale, w_scale, y_scale, per_channel: bool):
        scale = np.atleast_1d(np.asarray(w_scale, np.float64)) * float(x_scale) \
            / float(y_scale)
        if np.any(scale <= 0):
            raise CompileError(f"ONNX node {node.name!r} ({node.op_type}): its scales "
                               f"must be positive")
        return requant_for(scale, per_channel)

    def _check_x(self, node, x: str):
        zp = int(self._scalar(node, 2, "input zero point"))
        have = self.g.tensor(x).quant.zero_point
        if zp != have:
            raise CompileError(f"ONNX node {node.name!r} ({node.op_type}): reads "
                               f"{node.input[0]!r} with zero point {zp}, but it was made "
                               f"with {have}; requantise it to one zero point")

    def _qlinearconv(self, node, a):
        x = self._value(node)
        if node.input[0] not in self.nchw:
            raise CompileError(f"ONNX node {node.name!r} (QLinearConv): its input is not "
                               f"a map")
        self._check_x(node, x)
        w = self._const(node, 3, "weights")
        w_zp = self._const(node, 5, "weight zero point")
        if np.any(w_zp != 0) or w.dtype != np.int8:
            raise CompileError(f"ONNX node {node.name!r} (QLinearConv): weights must be "
                               f"int8 with zero point 0 (symmetric); quantise them so")
        group = a.get("group", 1)
        if group != 1 and (w.shape[1] != 1 or group != w.shape[0]):
            raise CompileError(f"ONNX node {node.name!r} (QLinearConv): group {group} "
                               f"with weights of shape {list(w.shape)}; the chip runs "
                               f"convolutions of one group and depthwise ones (group = "
                               f"channels, weights [C, 1, kh, kw])")
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise CompileError(f"ONNX node {node.name!r} (QLinearConv): auto_pad "
                               f"{a['auto_pad']!r}; export with explicit pads")
        pads = list(a.get("pads", [0, 0, 0, 0]))
        cout = w.shape[0]
        mult, shift = self._requant(node, self._scalar(node, 1, "input scale"),
                                    self._const(node, 4, "weight scale"),
                                    self._scalar(node, 6, "output scale"), True)
        if np.ndim(mult) == 0:
            mult = np.full(cout, mult)
        bias = (self._const(node, 8, "bias").astype(np.int32) if len(node.input) > 8
                and node.input[8] else None)
        out = self.g.conv2d(x, np.transpose(w, (2, 3, 1, 0)), bias,
                            stride=tuple(a.get("strides", [1, 1])),
                            pads=(pads[0], pads[1], pads[2], pads[3]),
                            dilation=tuple(a.get("dilations", [1, 1])), groups=group,
                            mult=mult, shift=shift,
                            zp=int(self._scalar(node, 7, "output zero point")),
                            relu=self._fuses_relu(node), name=self._name(node))
        self.nchw.add(node.output[0])
        return out

    def _qlinearmatmul(self, node, a):
        x = self._value(node)
        per_column = node.input[0] in self.unflattened and self._per_column(node)
        if per_column:
            pass                                # a map, read by a convolution over it
        elif node.input[0] in self.nchw or len(self.g.tensor(x).shape) != 2:
            raise CompileError(f"ONNX node {node.name!r} (QLinearMatMul): takes an [M, K] "
                               f"left operand (Flatten a map first)")
        self._check_x(node, x)
        w = self._const(node, 3, "right operand")
        if w.ndim != 2 or np.any(self._const(node, 5, "right zero point") != 0):
            raise CompileError(f"ONNX node {node.name!r} (QLinearMatMul): the right "
                               f"operand must be a constant [K, N] int8 with zero point 0")
        w_scale = np.atleast_1d(self._const(node, 4, "right scale"))
        if per_column:
            return self._per_column_dense(node, x, w, w_scale)
        if node.input[0] in self.chw:
            w = _hwc_rows(node, w, self.chw[node.input[0]]).reshape(w.shape)
        if np.unique(w_scale).size != 1:
            raise CompileError(f"ONNX node {node.name!r} (QLinearMatMul): one scale for "
                               f"the right operand (the chip's dense layer has one "
                               f"multiplier), unless it reads a Flatten of a map, a graph "
                               f"input that only such matmuls read, or another such "
                               f"matmul's output (it then runs as a convolution, a "
                               f"multiplier per output channel); quantise its weights per "
                               f"tensor, or all of them per channel")
        mult, shift = self._requant(node, self._scalar(node, 1, "left scale"), w_scale[0],
                                    self._scalar(node, 6, "output scale"), False)
        # sum((x - x_zp) * w) = x @ w - x_zp * sum(w): the zero point folds into a bias
        x_zp = self.g.tensor(x).quant.zero_point
        bias = (-x_zp * w.astype(np.int64).sum(axis=0)) if x_zp else None
        if len(node.input) > 8 and node.input[8]:      # a folded Gemm's bias
            extra = self._const(node, 8, "bias").astype(np.int64)
            bias = extra if bias is None else bias + extra
        bias = None if bias is None else bias.astype(np.int32)
        return self.g.dense(x, w, bias, mult=mult, shift=shift,
                            zp=int(self._scalar(node, 7, "output zero point")),
                            relu=self._fuses_relu(node), name=self._name(node))

    def _per_column_dense(self, node, map_: str, w: np.ndarray, w_scale: np.ndarray):
        """A QLinearMatMul with a scale per output column reading a Flatten of the map
        `map_`: a convolution of that map whose kernel covers it (1x1 for a ``1 x 1``
        map), a multiplier per output channel; its output a ``1 x 1`` map standing for
        the ``[N, C]`` value."""
        mult, shift = self._requant(node, self._scalar(node, 1, "left scale"), w_scale,
                                    self._scalar(node, 6, "output scale"), True)
        bias = (self._const(node, 8, "bias").astype(np.int32) if len(node.input) > 8
                and node.input[8] else None)
        kernel = _hwc_rows(node, w, self.g.tensor(map_).shape[1:])
        y = self.g.conv2d(map_, kernel, bias, mult=mult, shift=shift,
                          zp=int(self._scalar(node, 7, "output zero point")),
                          relu=self._fuses_relu(node), name=self._name(node))
        self.unflattened.add(node.output[0])
        return y

    def _maxpool(self, node, a):
        x = self._value(node)
        if a.get("ceil_mode", 0) or any(d != 1 for d in a.get("dilations", [1, 1])):
            raise CompileError(f"ONNX node {node.name!r} (MaxPool): ceil_mode and "
                               f"dilations are not lowered; export with ceil_mode=0")
        pads = list(a.get("pads", [0, 0, 0, 0]))
        out = self.g.max_pool2d(x, tuple(a["kernel_shape"]),
                                tuple(a.get("strides", a["kernel_shape"])),
                                (pads[0], pads[1], pads[2], pads[3]), name=self._name(node))
        self.nchw.add(node.output[0])
        return out

    def _concat(self, node, a):
        xs = [self._value(node, k) for k in range(len(node.input))]
        maps = [v in self.nchw for v in node.input]
        axis = a["axis"]
        rank = 4 if all(maps) else 2
        if any(maps) != all(maps) or axis not in ((1, -3) if rank == 4 else (1, -1)):
            raise CompileError(f"ONNX node {node.name!r} (Concat): joins maps along their "
                               f"channels (axis 1) or [M, K] tensors along K (axis 1)")
        out = self.g.concat(*xs, name=self._name(node))
        if rank == 4:
            self.nchw.add(node.output[0])
        return out

    def _flatten(self, node, a):
        x = self._value(node)
        shape = self.g.tensor(x).shape
        readers = self.consumers.get(node.output[0], [])
        if a.get("axis", 1) != 1 or node.input[0] not in self.nchw:
            raise CompileError(f"ONNX node {node.name!r} (Flatten): flattens a map along "
                               f"axis 1 only")
        if shape[1] * shape[2] != 1:
            # ONNX flattens C, H, W and the chip H, W, C: the matmuls reading it take
            # their weight rows in the chip's order (:meth:`_qlinearmatmul`)
            if not readers or node.output[0] in self.outputs or not all(
                    r.op_type == "QLinearMatMul" and r.input[0] == node.output[0]
                    for r in readers):
                raise CompileError(
                    f"ONNX node {node.name!r} (Flatten): a {shape[1]}x{shape[2]} map is "
                    f"flattened in C, H, W order by ONNX and H, W, C by the chip, so only "
                    f"QLinearMatMuls may read it (their weight rows are reordered); here "
                    f"another reader or a graph output takes it: put a global pool "
                    f"before the Flatten, or read it by a matmul")
            self.chw[node.output[0]] = shape[1:]
        if any(self._per_column(r) and r.input[0] == node.output[0] for r in readers):
            # a matmul with a scale per output column reads it: it runs as a
            # convolution over the map (a multiplier per output channel); a reader
            # that takes the [N, C] value gets it flattened (:meth:`_value`)
            self.unflattened.add(node.output[0])
            return x
        return self.g.flatten(x, name=self._name(node))

    def _qlinearadd(self, node, a):
        """``y = y_zp + (a_s (a - a_zp) + b_s (b - b_zp)) / y_s`` as the chip's Add:
        8-bit multipliers over a common shift (the weights of a diagonal block), so
        it may differ from onnxruntime by a step more than the other layers."""
        xa, xb = self._value(node, 0), self._value(node, 3)
        for t, k in ((xa, 2), (xb, 5)):
            zp = int(self._scalar(node, k, "zero point"))
            if zp != self.g.tensor(t).quant.zero_point:
                raise CompileError(f"ONNX node {node.name!r} (QLinearAdd): reads an operand "
                                   f"with zero point {zp}, but it was made with "
                                   f"{self.g.tensor(t).quant.zero_point}")
        y_s = float(self._scalar(node, 6, "output scale"))
        ratios = np.array([float(self._scalar(node, 1, "scale")),
                           float(self._scalar(node, 4, "scale"))]) / y_s
        shift = 0
        while shift < 30 and np.all(np.round(ratios * 2.0 ** (shift + 1)) <= 127):
            shift += 1
        ma, mb = (int(np.clip(np.round(r * 2.0 ** shift), 1, 127)) for r in ratios)
        out = self.g.add(xa, xb, mult_a=ma, mult_b=mb, shift=shift,
                         zp=int(self._scalar(node, 7, "output zero point")),
                         relu=self._fuses_relu(node), name=self._name(node))
        if node.input[0] in self.nchw:
            self.nchw.add(node.output[0])
        return out

    def _qlinearglobalaveragepool(self, node, a):
        x = self._value(node)
        if a.get("channels_last", 0) or node.input[0] not in self.nchw:
            raise CompileError(f"ONNX node {node.name!r} (QLinearGlobalAveragePool): takes "
                               f"an NCHW map (channels_last 0)")
        y_zp = int(self._scalar(node, 4, "output zero point"))
        self._check_x(node, x)
        _, h, w, _ = self.g.tensor(x).shape
        scale = float(self._scalar(node, 1, "input scale")) / \
            (float(self._scalar(node, 3, "output scale")) * h * w)
        mult, shift = requant_for(scale, False)
        out = self.g.global_avg_pool(x, mult=mult, shift=shift, zp=y_zp,
                                     name=self._name(node))
        self.nchw.add(node.output[0])
        return out

    def _fuses_relu(self, node) -> bool:
        """Whether `node`'s only reader is a Relu the chip folds into it: its clamp at
        the output zero point is ONNX's ``max(y, 0)`` when that zero point is 0."""
        readers = self.consumers.get(node.output[0], [])
        if len(readers) == 1 and readers[0].op_type == "Relu" and (
                int(self._scalar(node, 7, "output zero point")) == 0
                or readers[0].doc_string == QDQ_RELU):
            self.fused.add(readers[0].output[0])
            return True
        return False

    def _relu(self, node, a):
        if node.output[0] not in self.fused:
            raise CompileError(f"ONNX node {node.name!r} (Relu): folds into the layer "
                               f"before it (QLinearConv or QLinearMatMul) when that "
                               f"layer's output has zero point 0 and no other reader")
        self.nchw.update(node.output[:1] if node.input[0] in self.nchw else [])
        return self._value(node)


def _hwc_rows(node, w: np.ndarray, hwc) -> np.ndarray:
    """A matmul's ``[C*H*W, N]`` weights reading a flattened ``(H, W, C)`` map, its rows
    in ONNX's C, H, W order, as ``[H, W, C, N]``: the chip flattens H, W, C."""
    h, w_, c = hwc
    if w.shape[0] != c * h * w_:
        raise CompileError(f"ONNX node {node.name!r} (QLinearMatMul): {w.shape[0]} weight "
                           f"rows for a flattened {c}x{h}x{w_} map")
    return w.reshape(c, h, w_, -1).transpose(1, 2, 0, 3)


def _safe(name: str) -> str:
    """An ONNX value or node name as a graph name (they may hold any character)."""
    out = "".join(c if c.isalnum() or c in "_" else "_" for c in name)
    return out if out and not out[0].isdigit() else f"t_{out}"
