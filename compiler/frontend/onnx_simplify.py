"""The scalar clean-up of an ONNX model before its operations are assigned
(docs/assignment.md, step 2): constant propagation, identity operators removed,
BatchNormalization folded into the convolution before it, the integer operators'
uint8 operands made int8, batched matmuls by a constant made one grouped convolution
(or, where that cannot take them, split per batch), dead code dropped. Each change
the user might look for is said in a note."""

from __future__ import annotations

import numpy as np

from systolica.compiler.errors import CompileError, InvalidOnnxNode
from systolica.compiler.frontend.onnx_model import OnnxModel, check_folded_size

#: Operators that pass their input through at inference (Dropout's mask aside).
IDENTITIES = ("Identity", "Dropout")

#: Never folded although their operands are constant: the QDQ form's weights stay
#: int8 behind their DequantizeLinear, where the importer reads their quantisation.
_KEPT = ("QuantizeLinear", "DequantizeLinear")


def simplify(model: OnnxModel) -> OnnxModel:
    """`model` cleaned up, in place; returns it."""
    _remove_identities(model)
    _fold_constants(model)
    _canonicalise(model)
    _fold_batch_norms(model)
    if _signed(model) or _has_batched(model):
        _infer_shapes(model)        # the operands' shapes, for the batched matmuls
    _group_batches(model)
    _unbatch(model)
    _drop_dead(model)
    _infer_shapes(model)            # shapes again: folding replaced values
    return model


def _infer_shapes(model: OnnxModel) -> None:
    from onnx import shape_inference
    del model.proto.graph.value_info[:]
    model.proto = shape_inference.infer_shapes(model.proto, data_prop=True)


def _consts(g) -> dict[str, np.ndarray]:
    from onnx import numpy_helper
    return {t.name: numpy_helper.to_array(t) for t in g.initializer}


def _replace_nodes(model: OnnxModel, nodes: list, note: str) -> None:
    """The graph's nodes become `nodes`, and `note` says what a pass changed."""
    del model.proto.graph.node[:]
    model.proto.graph.node.extend(nodes)
    model.notes.append(note)


def _rewire(g, old: str, new: str) -> None:
    for n in g.node:
        for k, v in enumerate(n.input):
            if v == old:
                n.input[k] = new


def _remove_identities(model: OnnxModel) -> None:
    g = model.proto.graph
    outputs = {o.name for o in g.output}
    keep, removed = [], 0
    for n in g.node:
        extra = [o for o in n.output[1:] if o]      # Dropout's mask
        if n.op_type in IDENTITIES and n.output[0] not in outputs and not any(
                o in {v for m in g.node for v in m.input} for o in extra):
            _rewire(g, n.output[0], n.input[0])
            removed += 1
            continue
        keep.append(n)
    if removed:
        _replace_nodes(model, keep,
                       f"removed {removed} identity operator(s) (Identity, Dropout "
                       f"at inference)")


def _fold_constants(model: OnnxModel) -> None:
    """Evaluate every node whose operands are all known (constants, or a tensor's
    static shape for ``Shape``) by the ONNX reference evaluator; its results become
    initialisers."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator
    g = model.proto.graph
    consts = _consts(g)
    shapes = model.value_shapes()
    opsets = list(model.proto.opset_import)
    keep, folded = [], 0
    for n in g.node:
        if n.op_type == "Constant":
            value = _constant_value(n)
            if value is not None:
                consts[n.output[0]] = value
                g.initializer.append(numpy_helper.from_array(value, n.output[0]))
                folded += 1
                continue
        if n.op_type == "Shape" and n.input[0] in shapes and len(n.attribute) == 0:
            value = np.array(shapes[n.input[0]], np.int64)
            consts[n.output[0]] = value
            g.initializer.append(numpy_helper.from_array(value, n.output[0]))
            folded += 1
            continue
        ins = [v for v in n.input if v]
        if (n.op_type in _KEPT or n.domain not in ("", "ai.onnx") or not ins
                and n.op_type != "ConstantOfShape" or not all(v in consts for v in ins)):
            keep.append(n)
            continue
        check_folded_size(n, consts)
        one = helper.make_model(
            helper.make_graph([n], "fold", [], [helper.make_tensor_value_info(
                o, 0, None) for o in n.output if o],
                [numpy_helper.from_array(consts[v], v) for v in dict.fromkeys(ins)]),
            opset_imports=opsets)
        try:
            values = ReferenceEvaluator(one).run(None, {})
        except Exception as e:
            raise CompileError(f"ONNX node {n.name!r} ({n.op_type}): its operands are "
                               f"constant but it cannot be evaluated ({e})") from None
        for o, v in zip([o for o in n.output if o], values):
            v = np.asarray(v)
            consts[o] = v
            g.initializer.append(numpy_helper.from_array(v, o))
        folded += 1
    if folded:
        _replace_nodes(model, keep,
                       f"evaluated {folded} node(s) of constant operands on the way "
                       f"in (constant propagation)")


def _constant_value(n):
    from onnx import helper, numpy_helper
    for a in n.attribute:
        if a.name == "value":
            return numpy_helper.to_array(a.t)
        if a.name in ("value_float", "value_int"):
            return np.array(helper.get_attribute_value(a),
                            np.float32 if a.name == "value_float" else np.int64)
        if a.name in ("value_floats", "value_ints"):
            return np.array(helper.get_attribute_value(a),
                            np.float32 if a.name == "value_floats" else np.int64)
    return None


def _canonicalise(model: OnnxModel) -> None:
    """Operators written in the form the rest of the compiler knows, where ONNX
    defines both alike: a two-input ``Sum`` is an ``Add``; an ``AveragePool`` whose
    window is its whole unpadded map a ``GlobalAveragePool``; a ``Reshape`` of
    ``[N, ...]`` to ``[N, rest]`` a ``Flatten``."""
    from onnx import helper
    g = model.proto.graph
    shapes = model.value_shapes()
    consts = _consts(g)
    changed = 0
    for k, n in enumerate(g.node):
        new = None
        if n.op_type == "Sum" and len(n.input) == 2:
            new = helper.make_node("Add", list(n.input), list(n.output), name=n.name)
        elif n.op_type == "AveragePool" and len(shapes.get(n.input[0], ())) == 4:
            a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
            _, _, h, w = shapes[n.input[0]]
            if (list(a.get("kernel_shape", [])) == [h, w] and not any(a.get("pads", []))
                    and a.get("auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET", b"VALID")
                    and not a.get("ceil_mode", 0)):
                new = helper.make_node("GlobalAveragePool", [n.input[0]], list(n.output),
                                       name=n.name)
        elif (n.op_type == "Reshape" and n.input[1] in consts
              and len(shapes.get(n.input[0], ())) >= 2):
            src = shapes[n.input[0]]
            shape = consts[n.input[1]]
            if shape.ndim != 1 or shape.dtype != np.int64:
                raise InvalidOnnxNode(f"ONNX node {n.name!r} (Reshape): its shape "
                                      f"{n.input[1]!r} is {shape.dtype} of shape "
                                      f"{list(shape.shape)}; ONNX asks for a 1-D int64 "
                                      f"tensor", node=n.name, op_type=n.op_type)
            want = [int(d) for d in shape]
            rest = int(np.prod(src[1:]))
            if len(want) == 2 and want[0] in (src[0], 0) and want[1] in (rest, -1):
                new = helper.make_node("Flatten", [n.input[0]], list(n.output), name=n.name,
                                       axis=1)
        if new is not None:
            g.node[k].CopyFrom(new)
            changed += 1
    if changed:
        model.notes.append(f"wrote {changed} operator(s) in the form the chip lowers (a "
                           f"two-input Sum as Add, a whole-map AveragePool as "
                           f"GlobalAveragePool, a Reshape to [N, rest] as Flatten)")


def _fold_batch_norms(model: OnnxModel) -> None:
    """``BatchNormalization(Conv(x, w, b))`` with constant parameters, the Conv read by
    the normalisation alone, as one Conv: ``w * s``, ``(b - mean) * s + beta`` with
    ``s = gamma / sqrt(var + eps)`` per output channel."""
    from onnx import helper, numpy_helper
    g = model.proto.graph
    consts = _consts(g)
    made = {o: n for n in g.node for o in n.output}
    readers: dict[str, int] = {}
    for n in g.node:
        for v in n.input:
            readers[v] = readers.get(v, 0) + 1
    outputs = {o.name for o in g.output}
    folded = 0
    drop: set[int] = set()
    for n in g.node:
        if n.op_type != "BatchNormalization" or len([o for o in n.output if o]) != 1:
            continue
        conv = made.get(n.input[0])
        params = n.input[1:5]
        if (conv is None or conv.op_type != "Conv" or readers.get(conv.output[0]) != 1
                or conv.output[0] in outputs or not all(p in consts for p in params)
                or conv.input[1] not in consts
                or (len(conv.input) > 2 and conv.input[2] and conv.input[2] not in consts)):
            continue
        eps = next((helper.get_attribute_value(a) for a in n.attribute
                    if a.name == "epsilon"), 1e-5)
        gamma, beta, mean, var = (consts[p].astype(np.float64) for p in params)
        w = consts[conv.input[1]].astype(np.float64)
        b = (consts[conv.input[2]].astype(np.float64)
             if len(conv.input) > 2 and conv.input[2] else np.zeros(w.shape[:1]))
        _check_channels(n, params, (gamma, beta, mean, var), conv, w, b)
        for p, v, what in zip(params, (gamma, beta, mean, var + eps),
                              ("scale", "bias", "mean", "variance plus epsilon")):
            bad = ~np.isfinite(v) | ((v <= 0) if what.startswith("variance") else False)
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise InvalidOnnxNode(f"ONNX node {n.name!r} (BatchNormalization): its "
                                      f"{what} ({p!r}) is {v[k]:g} at channel {k}; it must "
                                      f"be finite" + (" and positive" if what.startswith(
                                          "variance") else ""),
                                      node=n.name, op_type=n.op_type)
        s = gamma / np.sqrt(var + eps)
        w_name, b_name = f"{conv.name or conv.output[0]}__bn_w", \
            f"{conv.name or conv.output[0]}__bn_b"
        g.initializer.extend([
            numpy_helper.from_array((w * s.reshape(-1, *[1] * (w.ndim - 1))).astype(
                np.float32), w_name),
            numpy_helper.from_array(((b - mean) * s + beta).astype(np.float32), b_name)])
        del conv.input[1:]
        conv.input.extend([w_name, b_name])
        conv.output[0] = n.output[0]
        drop.add(id(n))
        folded += 1
    if folded:
        keep = [n for n in g.node if id(n) not in drop]
        _replace_nodes(model, keep,
                       f"folded {folded} BatchNormalization(s) into the Conv before "
                       f"each")


def _check_channels(bn, params, values, conv, w, b) -> None:
    """A BatchNormalization's parameters and its Conv's bias hold one value per output
    channel of the Conv: else an InvalidOnnxNode naming the node and the tensor."""
    channels = w.shape[0] if w.ndim else 0
    named = [(bn, p, v) for p, v in zip(params, values)]
    if len(conv.input) > 2 and conv.input[2]:
        named.append((conv, conv.input[2], b))
    for node, name, v in named:
        if v.shape != (channels,):
            raise InvalidOnnxNode(f"ONNX node {node.name!r} ({node.op_type}): its "
                                  f"{name!r} has shape {list(v.shape)}; the convolution "
                                  f"{conv.name!r} has {channels} output channels, one "
                                  f"value each", node=node.name, op_type=node.op_type)


#: The integer operators whose uint8 operands :func:`_signed` makes int8: their
#: (operand, zero point) input indices, and their output's zero point (None: int32).
UINT8_OPERANDS = {
    "QLinearConv": (((0, 2), (3, 5)), 7),
    "QLinearMatMul": (((0, 2), (3, 5)), 7),
    "ConvInteger": (((0, 2), (1, 3)), None),
    "MatMulInteger": (((0, 2), (1, 3)), None),
}


def _elem_types(g) -> dict[str, int]:
    out = {vi.name: vi.type.tensor_type.elem_type
           for vi in list(g.value_info) + list(g.input) + list(g.output)}
    out.update({t.name: t.data_type for t in g.initializer})
    return out


class _Names:
    """Fresh value and node names beside those a graph has."""

    def __init__(self, g):
        self.taken = ({vi.name for vi in list(g.value_info) + list(g.input) + list(g.output)}
                      | {t.name for t in g.initializer} | {n.name for n in g.node}
                      | {o for n in g.node for o in list(n.input) + list(n.output)})

    def __call__(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name


def _signed(model: OnnxModel) -> bool:
    """The uint8 operands of QLinearConv, QLinearMatMul, ConvInteger and MatMulInteger
    as int8: ``x - 128`` at zero point ``zp - 128`` gives the same ``x - zp`` (an absent
    zero point of a uint8 operand is 0, so -128). A constant is rewritten; a graph
    input or computed value is converted by the host (DequantizeLinear at zero point
    128 then QuantizeLinear to int8, both at scale 1: exact), and a uint8 output
    converted back alike (DequantizeLinear at -128, QuantizeLinear to uint8). The chip
    computes int8; a node whose zero points are not constants stays uint8. Whether
    any node changed."""
    from onnx import TensorProto, helper, numpy_helper
    g = model.proto.graph
    consts = _consts(g)
    types = _elem_types(g)
    fresh = _Names(g)
    signed: dict[str, str] = {}             # a uint8 value -> its int8 value
    shared: dict[tuple, str] = {}           # the conversions' scalars

    def scalar(value) -> str:
        key = (value.dtype.str, value.item())
        if key not in shared:
            shared[key] = fresh(f"int8_shift_{value.dtype.name}_{value.item()}")
            g.initializer.append(numpy_helper.from_array(value, shared[key]))
        return shared[key]

    def convert(v: str, out: list) -> str:
        if v in signed:
            return signed[v]
        name = fresh(f"{v}__int8")
        if v in consts:
            value = (consts[v].astype(np.int16) - 128).astype(np.int8)
            g.initializer.append(numpy_helper.from_array(value, name))
        else:
            real = fresh(f"{v}__minus_128")
            out += [helper.make_node("DequantizeLinear",
                                     [v, scalar(np.array(1, np.float32)),
                                      scalar(np.array(128, np.uint8))], [real],
                                     name=fresh(f"{v}__to_int8_dq")),
                    helper.make_node("QuantizeLinear",
                                     [real, scalar(np.array(1, np.float32)),
                                      scalar(np.array(0, np.int8))], [name],
                                     name=fresh(f"{v}__to_int8_q"))]
        signed[v] = name
        return name

    nodes, changed = [], []
    for n in g.node:
        spec = UINT8_OPERANDS.get(n.op_type) if n.domain in ("", "ai.onnx") else None
        if spec is None:
            nodes.append(n)
            continue
        pairs, y_zp = spec
        todo = [(v, z) for v, z in pairs
                if v < len(n.input) and types.get(n.input[v]) == TensorProto.UINT8]
        out_u8 = (y_zp is not None and y_zp < len(n.input)
                  and types.get(n.input[y_zp]) == TensorProto.UINT8)
        zps = [n.input[z] for z in [z for _, z in todo] + ([y_zp] if out_u8 else [])
               if z < len(n.input) and n.input[z]]
        if not (todo or out_u8) or any(z not in consts for z in zps):
            nodes.append(n)
            continue
        for v, z in todo:
            n.input[v] = convert(n.input[v], nodes)
            while len(n.input) <= z:
                n.input.append("")
            n.input[z] = (convert(n.input[z], nodes) if n.input[z]
                          else scalar(np.array(-128, np.int8)))
        nodes.append(n)
        if out_u8:
            n.input[y_zp] = convert(n.input[y_zp], nodes)
            y = n.output[0]
            n.output[0] = fresh(f"{y}__int8")
            real = fresh(f"{y}__plus_128")
            nodes += [helper.make_node("DequantizeLinear",
                                       [n.output[0], scalar(np.array(1, np.float32)),
                                        scalar(np.array(-128, np.int8))], [real],
                                       name=fresh(f"{y}__to_uint8_dq")),
                      helper.make_node("QuantizeLinear",
                                       [real, scalar(np.array(1, np.float32)),
                                        scalar(np.array(0, np.uint8))], [y],
                                       name=fresh(f"{y}__to_uint8_q"))]
        changed.append(n.name)
    if changed:
        _replace_nodes(model, nodes,
                       f"made the uint8 operands of {', '.join(changed)} int8 (x - 128 "
                       f"at zero point zp - 128; the host converts inputs and outputs)")
    return bool(changed)


#: The batched matmuls :func:`_group_batches` takes: their left and right operands'
#: inputs, and the convolution each becomes.
_GROUPED = {"MatMul": ((0, 1), "Conv"), "QLinearMatMul": ((0, 3), "QLinearConv")}


def _has_batched(model: OnnxModel) -> bool:
    """Whether some matmul has a constant 3-D right operand, or some
    DequantizeLinear a constant 3-D input (a QDQ matmul's): the left operand's shape
    is then needed."""
    g = model.proto.graph
    dims = {t.name: len(t.dims) for t in g.initializer}
    right = {**_MATMUL_OPERANDS, **{op: at for op, (at, _) in _GROUPED.items()},
             "DequantizeLinear": (None, 0)}
    return any(n.op_type in right and n.domain in ("", "ai.onnx")
               and dims.get(n.input[right[n.op_type][1]]) == 3 for n in g.node)


def _batched_operands(n, consts, shapes):
    """`n`'s ``(B, M, K, N)`` and right operand if it is a MatMul or QLinearMatMul of
    ``[B, M, K]`` by a constant ``[B, K, N]`` that :func:`_group_batches` takes (a
    QLinearMatMul's scales and zero points constant: the left operand's and the
    output's one, the right operand's one or one per column, int8 operands), else
    None."""
    if n.op_type not in _GROUPED or n.domain not in ("", "ai.onnx"):
        return None
    (a_at, w_at), _ = _GROUPED[n.op_type]
    a_shape, w = shapes.get(n.input[a_at]), consts.get(n.input[w_at])
    if (w is None or w.ndim != 3 or a_shape is None or len(a_shape) != 3
            or tuple(a_shape[::2]) != w.shape[:2] or n.input[a_at] in consts):
        return None
    batches, k, n_out = w.shape
    if n.op_type == "QLinearMatMul":
        quant = [consts.get(v) for v in n.input[1:3] + n.input[4:8]]
        if (any(q is None for q in quant) or w.dtype != np.int8
                or quant[1].dtype != np.int8 or quant[5].dtype != np.int8
                or any(q.size != 1 for q in quant[:2] + quant[4:])
                or any(q.size not in (1, n_out) or q.ndim > 1 for q in quant[2:4])):
            return None
        from systolica.compiler.frontend.onnx_import import int8_parts
        parts, _ = int8_parts(w.astype(np.int64) - quant[3].astype(np.int64).reshape(
            1, 1, -1), 2, factor="channel")
        if len(parts) > 1:                  # as dense layers, read in parts along K
            return None
    elif w.dtype != np.float32:
        return None
    return (batches, a_shape[1], k, n_out), w


def _qdq_batched(n, consts, shapes, producers, readers, outputs):
    """The QDQ form of a batched MatMul that :func:`_group_batches` takes: `n` a float
    MatMul of ``DequantizeLinear(a)`` (``a`` int8 ``[B, M, K]``) by
    ``DequantizeLinear(w)`` (``w`` a constant int8 ``[B, K, N]``), each at one
    constant scale and zero point, its output read by one QuantizeLinear to int8 (one
    scale and zero point) alone: ``((B, M, K, N), w, (a's DequantizeLinear, w's, the
    QuantizeLinear))``, else None."""
    if n.op_type != "MatMul" or n.domain not in ("", "ai.onnx") or n.output[0] in outputs:
        return None
    dqs = [producers.get(v) for v in n.input[:2]]
    qs = readers.get(n.output[0], [])
    if len(qs) != 1 or any(d is None or d.op_type != "DequantizeLinear" for d in dqs):
        return None
    (a_dq, w_dq), q = dqs, qs[0]
    if q.op_type != "QuantizeLinear":
        return None

    def one_int8(node) -> bool:
        params = [consts.get(v) for v in node.input[1:3]]
        return len(node.input) == 3 and all(p is not None and p.size == 1 for p in params) \
            and params[1].dtype == np.int8
    w, a_shape = consts.get(w_dq.input[0]), shapes.get(a_dq.input[0])
    if (not all(one_int8(x) for x in (a_dq, w_dq, q)) or w is None or w.ndim != 3
            or a_shape is None or len(a_shape) != 3 or tuple(a_shape[::2]) != w.shape[:2]
            or a_dq.input[0] in consts):
        return None
    return (*w.shape[:1], a_shape[1], *w.shape[1:]), w, (a_dq, w_dq, q)


def _group_batches(model: OnnxModel) -> None:
    """A MatMul or QLinearMatMul of ``[B, M, K]`` by a constant ``[B, K, N]`` (a right
    operand per batch; its values less their zero point int8, or int8 over a factor
    per column) as one grouped 1x1 convolution (``Conv``, ``QLinearConv``;
    ``group`` B) over M 1 x 1 maps of B*K channels (channel ``b*K + k`` of map ``m``
    is batch ``b``'s ``[m, k]``; the host's ``Transpose`` and ``Reshape`` make them
    from ``[B, M, K]``), its weights ``[B*N, K, 1, 1]`` (output channel ``b*N + n``
    reads group ``b``), its M maps of B*N channels read back as ``[B, M, N]``
    (``Reshape``, ``Transpose``). The chip holds the M maps as one 1 x M map (the same
    bytes: ``onnx_import``), which the convolution streams. A QLinearMatMul's right
    scale and zero point, one or one per column, become one or one per output channel
    (the scales float32, as QLinearConv takes them). The chip's matcher packs the
    groups side by side (docs/matching.md). The int32 MatMulInteger stays with
    :func:`_unbatch`: the chip has no grouped convolution with an int32 output."""
    from onnx import helper, numpy_helper
    g = model.proto.graph
    consts = _consts(g)
    shapes = model.value_shapes()
    fresh = _Names(g)
    nodes, changed = [], []

    def const(value: np.ndarray, base: str) -> str:
        name = fresh(base)
        g.initializer.append(numpy_helper.from_array(value, name))
        return name

    producers = {o: x for x in g.node for o in x.output}
    readers: dict[str, list] = {}
    for x in g.node:
        for v in x.input:
            readers.setdefault(v, []).append(x)
    outputs = {o.name for o in g.output}
    taken: set[int] = set()         # the QuantizeLinear nodes a rewrite replaced
    for n in g.node:
        if id(n) in taken:
            continue
        qdq = None
        found = _qdq_batched(n, consts, shapes, producers, readers, outputs)
        if found is not None:
            *found, qdq = found
        else:
            found = _batched_operands(n, consts, shapes)
        if found is None:
            nodes.append(n)
            continue
        (batches, m, k, n_out), w = found
        (a_at, w_at), conv = _GROUPED[n.op_type]
        left, right, y = ((qdq[0].input[0], qdq[1].input[0], qdq[2].output[0]) if qdq
                          else (n.input[a_at], n.input[w_at], n.output[0]))
        base = n.name or n.output[0]
        kernel = const(np.ascontiguousarray(w.transpose(0, 2, 1)).reshape(
            batches * n_out, k, 1, 1), f"{right}__grouped")
        rows, x_map, y_map = (fresh(f"{left}__mbk"), fresh(f"{left}__maps"),
                              fresh(f"{y}__maps"))
        y_mbn = fresh(f"{y}__mbn")
        nodes += [helper.make_node("Transpose", [left], [rows], perm=[1, 0, 2],
                                   name=fresh(f"{base}__to_maps_t")),
                  helper.make_node("Reshape", [rows, const(np.array(
                      [m, batches * k, 1, 1], np.int64), f"{base}__maps_shape")], [x_map],
                                   name=fresh(f"{base}__to_maps"))]
        if qdq:
            # DequantizeLinear, Conv, QuantizeLinear: the QDQ form of the convolution
            a_dq, w_dq, q = qdq
            taken.add(id(q))
            x_f, w_f, y_f = (fresh(f"{x_map}__dq"), fresh(f"{kernel}__dq"),
                             fresh(f"{y_map}__float"))
            nodes += [helper.make_node("DequantizeLinear", [x_map, *a_dq.input[1:]], [x_f],
                                       name=fresh(f"{base}__maps_dq")),
                      helper.make_node("DequantizeLinear", [kernel, *w_dq.input[1:]], [w_f],
                                       name=fresh(f"{base}__weights_dq")),
                      helper.make_node("Conv", [x_f, w_f], [y_f], group=batches,
                                       kernel_shape=[1, 1], name=fresh(f"{base}__grouped")),
                      helper.make_node("QuantizeLinear", [y_f, *q.input[1:]], [y_map],
                                       name=fresh(f"{base}__grouped_q"))]
        elif conv == "Conv":
            ins = [x_map, kernel]
        else:
            def per_channel(v: str, dtype) -> str:
                q = consts[v].astype(dtype)
                q = q.reshape(()) if q.size == 1 else np.tile(q, batches)
                return const(q, f"{v}__grouped")
            f32 = np.float32
            ins = [x_map, const(consts[n.input[1]].astype(f32).reshape(()), f"{n.input[1]}__f32"),
                   n.input[2], kernel, per_channel(n.input[4], f32),
                   per_channel(n.input[5], np.int8),
                   const(consts[n.input[6]].astype(f32).reshape(()), f"{n.input[6]}__f32"),
                   n.input[7]]
        if not qdq:
            nodes.append(helper.make_node(conv, ins, [y_map], group=batches,
                                          kernel_shape=[1, 1], name=fresh(f"{base}__grouped")))
        nodes += [helper.make_node("Reshape", [y_map, const(np.array(
                      [m, batches, n_out], np.int64), f"{base}__out_shape")], [y_mbn],
                                   name=fresh(f"{base}__from_maps")),
                  helper.make_node("Transpose", [y_mbn], [y], perm=[1, 0, 2],
                                   name=fresh(f"{base}__from_maps_t"))]
        changed.append(f"{base} ({batches})")
    if changed:
        _replace_nodes(model, nodes,
                       f"made the batched matmul(s) {', '.join(changed)} one grouped "
                       f"1x1 convolution each (a group per batch; the host views "
                       f"[B, M, K] as M 1 x 1 maps of B*K channels, which the chip "
                       f"holds as one 1 x M map, and the output back as [B, M, N])")


#: The batched matmuls :func:`_unbatch` splits: their left and right operands' inputs.
_MATMUL_OPERANDS = {"QLinearMatMul": (0, 3), "MatMulInteger": (0, 1)}


def _unbatch(model: OnnxModel) -> None:
    """A QLinearMatMul or MatMulInteger of ``[B, M, K]`` by a constant ``[B, K, N]`` (a
    right operand per batch; its scales and zero points one, or one per column) as
    `B` matmuls of ``[M, K]`` by ``[K, N]``, each a dense layer of the chip: the host
    takes each batch's left operand (``Gather``) and stacks the results (``Concat``,
    ``Reshape``)."""
    from onnx import helper, numpy_helper
    g = model.proto.graph
    consts = _consts(g)
    shapes = model.value_shapes()
    fresh = _Names(g)
    nodes, changed = [], []
    for n in g.node:
        at = _MATMUL_OPERANDS.get(n.op_type) if n.domain in ("", "ai.onnx") else None
        a_shape = shapes.get(n.input[0]) if at else None
        w = consts.get(n.input[at[1]]) if at else None
        rest = [v for k, v in enumerate(n.input) if v and k not in at] if at else []
        if (w is None or w.ndim != 3 or a_shape is None or len(a_shape) != 3
                or a_shape[0] != w.shape[0] or any(v not in consts or consts[v].ndim > 1
                                                   for v in rest)):
            nodes.append(n)
            continue
        batches, (m, n_out) = w.shape[0], (a_shape[1], w.shape[2])
        base = n.name or n.output[0]
        parts = []
        for b in range(batches):
            index = fresh(f"{base}__index{b}")
            g.initializer.append(numpy_helper.from_array(np.array(b, np.int64), index))
            a_b = fresh(f"{n.input[0]}__batch{b}")
            nodes.append(helper.make_node("Gather", [n.input[0], index], [a_b], axis=0,
                                          name=fresh(f"{base}__take{b}")))
            w_b = fresh(f"{n.input[at[1]]}__batch{b}")
            g.initializer.append(numpy_helper.from_array(w[b], w_b))
            ins = list(n.input)
            ins[at[0]], ins[at[1]] = a_b, w_b
            parts.append(fresh(f"{n.output[0]}__batch{b}"))
            nodes.append(helper.make_node(n.op_type, ins, [parts[-1]],
                                          name=fresh(f"{base}__batch{b}")))
        stacked = fresh(f"{n.output[0]}__rows")
        shape = fresh(f"{base}__shape")
        g.initializer.append(numpy_helper.from_array(
            np.array([batches, m, n_out], np.int64), shape))
        nodes += [helper.make_node("Concat", parts, [stacked], axis=0,
                                   name=fresh(f"{base}__stack")),
                  helper.make_node("Reshape", [stacked, shape], [n.output[0]],
                                   name=fresh(f"{base}__reshape"))]
        changed.append(f"{base} ({batches})")
    if changed:
        _replace_nodes(model, nodes,
                       f"split the batched matmul(s) {', '.join(changed)} into a matmul "
                       f"per batch (the host takes the batches apart and stacks the "
                       f"results)")


def _drop_dead(model: OnnxModel) -> None:
    """Nodes that no graph output needs, initialisers nothing reads and inputs no
    node reads are dropped, with a note naming them."""
    g = model.proto.graph
    needed = {o.name for o in g.output}
    live = []
    for n in reversed(list(g.node)):
        if any(o in needed for o in n.output if o):
            live.append(n)
            needed.update(v for v in n.input if v)
    live.reverse()
    dead = [n.name or n.output[0] for n in g.node if n not in live]
    if dead:
        del g.node[:]
        g.node.extend(live)
        shown = ", ".join(dead[:5]) + (f" and {len(dead) - 5} more" if len(dead) > 5 else "")
        model.notes.append(f"dropped {len(dead)} node(s) no output needs: {shown}")
    unused = [i.name for i in g.input if i.name not in needed]
    if unused:
        keep = [i for i in g.input if i.name in needed]
        del g.input[:]
        g.input.extend(keep)
        for name in unused:
            model.inputs.pop(name, None)
        model.notes.append(f"dropped input(s) no output needs: {', '.join(unused)}")
    inits = [t for t in g.initializer if t.name in needed]
    if len(inits) != len(g.initializer):
        del g.initializer[:]
        g.initializer.extend(inits)
