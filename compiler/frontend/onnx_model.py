"""An ONNX model as the assigner takes it: read, its opset checked, its symbolic
dimensions bound to the inputs given, its shapes inferred (docs/assignment.md,
"The pipeline", step 1)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from systolica.compiler.errors import CompileError, InvalidOnnxNode

#: The default domain's opsets the front end reads (older models: convert them with
#: ``onnx.version_converter.convert_version(model, 13)``).
OPSETS = range(13, 22)

#: The most values of an input the front end makes random data for (its declared
#: shape's product): a larger declared input is refused before anything is allocated.
MAX_INPUT_VALUES = 1 << 26

#: ONNX element types the host and the chip pass between them, as numpy dtypes.
_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64,
           9: np.bool_, 10: np.float16, 11: np.float64}


@dataclass
class OnnxModel:
    """A checked model (`proto`) and the inputs it will run on, by name."""
    proto: object
    name: str
    inputs: dict[str, np.ndarray]
    notes: list[str] = field(default_factory=list)

    @property
    def graph(self):
        return self.proto.graph

    def value_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every value's inferred static shape (values of unknown shape left out)."""
        out = {}
        g = self.proto.graph
        for vi in list(g.value_info) + list(g.input) + list(g.output):
            dims = vi.type.tensor_type.shape.dim
            if vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value")
                                                             for d in dims):
                out[vi.name] = tuple(d.dim_value for d in dims)
        for t in g.initializer:
            out[t.name] = tuple(t.dims)
        return out

    def is_float(self) -> bool:
        """Whether the model computes in float (no QuantizeLinear, no QLinear or
        integer operator): it needs quantising before the chip can run it."""
        quantised = ("QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul",
                     "ConvInteger", "MatMulInteger")
        return not any(n.op_type in quantised for n in self.proto.graph.node)


def onnx_package():
    """The onnx package, or an error saying how to install it."""
    try:
        import onnx
    except ImportError:
        raise CompileError("importing an ONNX model needs the onnx package: "
                           "pip install 'systolica[onnx]' (or pip install onnx)") from None
    return onnx


def read(model, what: str = "ONNX model"):
    """A ModelProto from a path, bytes or a ModelProto; a clear error otherwise."""
    onnx = onnx_package()
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        try:
            return onnx.load_from_string(bytes(model))
        except Exception as e:
            raise CompileError(f"{what}: the bytes are not an ONNX model ({e})") from None
    if isinstance(model, (str, Path)):
        path = Path(model)
        if not path.is_file():
            raise CompileError(f"{what} {str(path)!r}: no such file")
        try:
            return onnx.load(str(path))
        except Exception as e:                 # a truncated or foreign file
            raise CompileError(f"{what} {str(path)!r} cannot be read: {e}") from None
    raise CompileError(f"an ONNX model is a path, bytes or onnx.ModelProto, not "
                       f"{type(model).__name__}")


def opset(proto, where: str) -> int:
    """The default domain's opset of `proto`; an error naming it if not in OPSETS."""
    versions = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise CompileError(f"{where}: imports no opset of the default ONNX domain")
    v = versions[0]
    if v not in OPSETS:
        raise CompileError(
            f"{where}: opset {v}; the front end reads opsets {OPSETS.start} to "
            f"{OPSETS.stop - 1}: convert the model first, e.g. "
            f"onnx.version_converter.convert_version(model, {OPSETS.start})")
    return v


def load(model, inputs: Mapping[str, np.ndarray] | None = None, *, seed: int = 0,
         name: str | None = None, constants: Iterable[str] = ()) -> OnnxModel:
    """Read and check `model`; bind its inputs to `inputs` (by ONNX name; missing
    ones: seeded random data of the declared shape, which must then be static) and
    infer every value's shape. The inputs named in `constants` (each given in
    `inputs`) become initialisers holding their data: weights, scales and zero points
    a model takes as inputs (the chip needs them constant)."""
    from onnx import shape_inference
    where = where_of(model)
    proto = read(model, where)
    opset(proto, where)
    g = proto.graph
    consts = {t.name for t in g.initializer}
    declared = [vi for vi in g.input if vi.name not in consts]
    given = dict(inputs or {})
    frozen = _constants(constants, declared, given, consts, where)
    unknown = sorted(set(given) - {vi.name for vi in declared})
    if unknown:
        raise CompileError(f"{where} has no input(s) {unknown}; its inputs are "
                           f"{[vi.name for vi in declared]}")
    rng = np.random.default_rng(seed)
    bound: dict[str, np.ndarray] = {}
    for vi in declared:
        bound[vi.name] = _bind(vi, given.get(vi.name), rng, where)
    if frozen:
        proto = _freeze(proto, {v: bound.pop(v) for v in frozen})
        g = proto.graph
        declared = [vi for vi in g.input if vi.name not in consts]
    _sort(proto, where)
    _check_outputs(proto, where)
    _check_node_names(proto, where)
    _name_nodes(proto)
    check_scales(proto, where)
    _check_constant_sizes(proto, where)
    # the bound shapes replace symbolic dimensions, so inference sees static ones
    for vi in declared:
        dims = vi.type.tensor_type.shape.dim
        for d, n in zip(dims, bound[vi.name].shape):
            d.Clear()
            d.dim_value = int(n)
    try:
        proto = shape_inference.infer_shapes(proto, strict_mode=True, data_prop=True)
    except Exception as e:
        raise CompileError(_inference_error(where, str(e))) from None
    _check_weights(proto, where)
    return OnnxModel(proto, name or g.name or "onnx", bound)


def located(error: CompileError, where: str) -> CompileError:
    """`error` (of its own type, an OnnxNodeError's node kept) with its message
    prefixed by `where` (the model's path), unless it names it already."""
    from systolica.compiler.errors import OnnxNodeError
    message = str(error)
    if where in message:
        return error
    message = f"{where}: {message}"
    if isinstance(error, OnnxNodeError):
        return type(error)(message, node=error.node, op_type=error.op_type)
    try:
        return type(error)(message)
    except TypeError:                       # a subclass of another signature
        return CompileError(message)


#: The convolutions whose weights (input index) have the rank of their input map.
_CONV_WEIGHTS = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3, "ConvTranspose": 1}


def _check_weights(proto, where: str) -> None:
    """A convolution's weights have its input's rank (ONNX's shape inference does not
    check it for the integer operators, and the ONNX reference evaluator then runs a
    convolution other than the one written)."""
    g = proto.graph
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim)
             for vi in list(g.value_info) + list(g.input) + list(g.output)
             if vi.type.tensor_type.HasField("shape")}
    ranks.update({t.name: len(t.dims) for t in g.initializer})
    for n in g.node:
        at = _CONV_WEIGHTS.get(n.op_type) if n.domain in ("", "ai.onnx") else None
        if at is None or len(n.input) <= at:
            continue
        x, w = ranks.get(n.input[0]), ranks.get(n.input[at])
        if x is not None and w is not None and x != w:
            raise InvalidOnnxNode(
                f"{where}: node {n.name!r} ({n.op_type}): its weights {n.input[at]!r} have "
                f"rank {w}, its input {n.input[0]!r} rank {x}; a convolution's weights are "
                f"[Cout, Cin/group, *kernel] with the input's rank: correct the weights",
                node=n.name, op_type=n.op_type)


#: The most values a constant folded on the way in may hold.
MAX_FOLDED_VALUES = 1 << 26


def check_folded_size(n, consts, where: str = "") -> None:
    """The constant `n` would make (a ConstantOfShape, Expand, Tile or Range, whose
    output's size its operands' values set) holds at most MAX_FOLDED_VALUES values:
    checked before the evaluator allocates it."""
    ins = [consts.get(v) for v in n.input]
    try:
        if n.op_type == "ConstantOfShape":
            shape = [int(d) for d in np.asarray(ins[0]).reshape(-1)]
        elif n.op_type == "Expand":
            shape = list(np.broadcast_shapes(np.shape(ins[0]),
                                             tuple(int(d) for d in np.asarray(ins[1])
                                                   .reshape(-1))))
        elif n.op_type == "Tile":
            shape = [int(a) * int(r) for a, r in zip(np.shape(ins[0]),
                                                     np.asarray(ins[1]).reshape(-1))]
        elif n.op_type == "Range":
            start, limit, delta = (float(np.asarray(v).reshape(-1)[0]) for v in ins)
            shape = [int(np.ceil((limit - start) / delta))] if delta else [1 << 62]
        else:
            return
    except (TypeError, ValueError, IndexError, OverflowError):
        return                          # the evaluator says what is wrong with it
    count = 1
    for d in shape:
        count *= max(d, 0)
    if count > MAX_FOLDED_VALUES:
        raise CompileError(f"{where}ONNX node {n.name!r} ({n.op_type}): its operands are "
                           f"constant "
                           f"and it would make {count} values (shape {shape}), more than "
                           f"the {MAX_FOLDED_VALUES} the front end folds; correct its "
                           f"operands")


def _check_constant_sizes(proto, where: str) -> None:
    """Every node of constant operands whose output's size they set is within
    MAX_FOLDED_VALUES (ONNX's shape inference would compute it: terabytes for a
    Range to 10**12)."""
    from onnx import numpy_helper
    consts = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    for n in proto.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value" and n.output:
                    consts[n.output[0]] = numpy_helper.to_array(a.t)
        elif n.input and all(v in consts for v in n.input):
            check_folded_size(n, consts, f"{where}: ")


def where_of(model) -> str:
    """How messages name `model`: by its path where it has one."""
    return f"ONNX model {str(model)!r}" if isinstance(model, (str, Path)) else "ONNX model"


def _inference_error(where: str, text: str) -> str:
    """ONNX shape inference's refusal as one line naming the node it blames."""
    import re
    first = text.strip().splitlines()[0] if text.strip() else "no reason given"
    found = re.search(r"\(op_type:([^,]+), node name: ([^)]*)\): (?:\[\w+\] )?(.*)", first)
    if found:
        op, node, why = found.groups()
        return (f"{where}: node {node!r} ({op}): {why.strip()} (ONNX shape inference); "
                f"correct the node as the ONNX specification of {op} asks")
    return (f"{where}: ONNX shape inference refuses it ({first}); correct the model "
            f"(onnx.checker.check_model(model, full_check=True) says more)")


def _check_outputs(proto, where: str) -> None:
    """Every graph output is made by a node, or is an input or initialiser."""
    g = proto.graph
    known = ({vi.name for vi in g.input} | {t.name for t in g.initializer}
             | {o for n in g.node for o in n.output if o})
    for vo in g.output:
        if vo.name not in known:
            raise CompileError(f"{where}: its output {vo.name!r} is made by no node, input "
                               f"or initialiser; remove it from the graph's outputs or "
                               f"make it")


#: Where each quantised operator takes its scales (input index: the scale's role).
SCALES = {
    "QuantizeLinear": {1: "scale"}, "DequantizeLinear": {1: "scale"},
    "QLinearConv": {1: "input scale", 4: "weight scale", 6: "output scale"},
    "QLinearMatMul": {1: "left scale", 4: "right scale", 6: "output scale"},
    "QLinearAdd": {1: "scale", 4: "scale", 6: "output scale"},
    "QLinearMul": {1: "scale", 4: "scale", 6: "output scale"},
    "QGemm": {1: "left scale", 4: "right scale", 7: "output scale"},
    "QLinearGlobalAveragePool": {1: "input scale", 3: "output scale"},
    "QLinearAveragePool": {1: "input scale", 3: "output scale"},
    "QLinearLeakyRelu": {1: "input scale", 3: "output scale"},
    "QLinearSigmoid": {1: "input scale", 3: "output scale"},
    "QLinearSoftmax": {1: "input scale", 3: "output scale"},
}


def _scale_inputs(node) -> dict[int, str]:
    if node.op_type == "QLinearConcat":
        return {0: "output scale", **{k + 1: "input scale"
                                      for k in range(2, len(node.input), 3)}}
    return SCALES.get(node.op_type, {})


def scale_fault(a: np.ndarray) -> str | None:
    """What is wrong with the scale values `a` (a float, positive and finite), or None."""
    if not np.issubdtype(a.dtype, np.floating):
        return f"is {a.dtype}, not a float"
    if a.size == 0:
        return "is empty"
    bad = ~(np.isfinite(a) & (a > 0))
    if not bad.any():
        return None
    i = int(np.flatnonzero(bad.ravel())[0])
    v = str(a.ravel()[i])                   # as the model holds it (float32)
    return f"is {v}" if a.size == 1 else f"has {v} at index {i}"


def check_scales(proto, where: str) -> None:
    """Every constant scale of a quantised node (an initialiser or a Constant node's
    value) is positive and finite: a scale of 0, below 0, NaN or infinite is refused
    by an InvalidOnnxNode naming the node, its operator and the tensor, never moved to
    another processor (no processor computes what such a model means)."""
    from onnx import numpy_helper

    g = proto.graph
    inits = {t.name: t for t in g.initializer}
    constants = {n.output[0]: a.t for n in g.node if n.op_type == "Constant" and n.output
                 for a in n.attribute if a.name == "value"}
    for n in g.node:
        for k, role in _scale_inputs(n).items():
            v = n.input[k] if k < len(n.input) else ""
            t = inits.get(v) or constants.get(v)
            if not v or t is None:
                continue
            a = np.asarray(numpy_helper.to_array(t))
            if not np.issubdtype(a.dtype, np.floating):
                continue                # a type the importer or the host refuses itself
            fault = scale_fault(a)
            if fault:
                raise InvalidOnnxNode(
                    f"{where}: node {n.name!r} ({n.op_type}): its {role} {v!r} {fault}; a "
                    f"scale must be a positive, finite float: correct the model's "
                    f"quantisation (e.g. quantise it again)", node=n.name, op_type=n.op_type)


def declared_dims(vi, where: str) -> list[int | str]:
    """Input `vi`'s declared dimensions: sizes, or the names of symbolic ones ("?"
    for an unnamed one); a size below 1 is refused naming the input and the axis."""
    out: list[int | str] = []
    for axis, d in enumerate(vi.type.tensor_type.shape.dim):
        if not d.HasField("dim_value"):
            out.append(d.dim_param or "?")
        elif d.dim_value < 1:
            raise CompileError(f"{where}: input {vi.name!r} declares dimension {axis} as "
                               f"{d.dim_value}; a size must be at least 1 (or a symbolic "
                               f"name, bound by the data given): correct the model's input")
        else:
            out.append(int(d.dim_value))
    return out


def check_random_size(name: str, dims: list[int], where: str) -> None:
    """Random data for input `name` of shape `dims` is within MAX_INPUT_VALUES
    (checked before anything is allocated)."""
    count = 1
    for d in dims:
        count *= int(d)
    if count > MAX_INPUT_VALUES:
        raise CompileError(f"{where}: input {name!r} of shape {dims} holds {count} values, "
                           f"more than the {MAX_INPUT_VALUES} the front end makes random "
                           f"data for: declare a smaller input, or give its data")


def _constants(names: Iterable[str], declared, given: Mapping[str, np.ndarray],
               initialisers: set[str], where: str) -> tuple[str, ...]:
    """The inputs `names` that are to become constants, checked: each an input of the
    model (not already an initialiser) whose data is given."""
    if isinstance(names, str):
        names = (names,)
    names = tuple(dict.fromkeys(names))
    inputs = [vi.name for vi in declared]
    for v in names:
        if v in initialisers:
            raise CompileError(f"{where}: constant {v!r} is an initialiser already; name "
                               f"only inputs in constants")
        if v not in inputs:
            raise CompileError(f"{where} has no input {v!r} to make a constant; its inputs "
                               f"are {inputs}")
        if v not in given:
            raise CompileError(f"{where}: input {v!r} is to be a constant but no data is "
                               f"given for it; give its value in the inputs")
    return names


def _freeze(proto, values: Mapping[str, np.ndarray]):
    """A copy of `proto` whose inputs `values` are initialisers holding them."""
    from onnx import numpy_helper
    out = type(proto)()
    out.CopyFrom(proto)
    g = out.graph
    keep = [vi for vi in g.input if vi.name not in values]
    del g.input[:]
    g.input.extend(keep)
    g.initializer.extend(numpy_helper.from_array(np.asarray(x), v) for v, x in values.items())
    return out


def _check_node_names(proto, where: str) -> None:
    """No two nodes share a name (ONNX asks it; ``--assign`` and the reports name
    operations by their nodes)."""
    seen: dict[str, int] = {}
    for k, n in enumerate(proto.graph.node):
        if n.name and n.name in seen:
            first = proto.graph.node[seen[n.name]]
            raise CompileError(f"{where}: nodes {seen[n.name]} ({first.op_type}) and {k} "
                               f"({n.op_type}) are both named {n.name!r}; ONNX asks for "
                               f"unique node names: rename one")
        seen.setdefault(n.name, k)


def _name_nodes(proto) -> None:
    """Every node named (``<op_type>_<index>`` where the model gives none): reports,
    refusals and ``--assign`` name operations by their nodes."""
    taken = {n.name for n in proto.graph.node}
    for k, n in enumerate(proto.graph.node):
        if not n.name:
            name = f"{n.op_type}_{k}"
            while name in taken:
                name += "_"
            n.name = name
            taken.add(name)


def _sort(proto, where: str) -> None:
    """The nodes in an order where every value is made before it is read (ONNX asks
    for it; some exporters do not keep it); a value nothing makes is an error naming
    its reader."""
    g = proto.graph
    known = {vi.name for vi in g.input} | {t.name for t in g.initializer} | {""}
    left, done = list(g.node), []
    while left:
        ready = [n for n in left if all(v in known for v in n.input)]
        if not ready:
            n = left[0]
            v = next(v for v in n.input if v not in known)
            made = any(v in m.output for m in left)
            raise CompileError(f"{where}: node {n.name or n.op_type!r} reads {v!r}, which "
                               + ("is made only in a cycle of nodes" if made else
                                  "no node, input or initialiser makes"))
        for n in ready:
            known.update(n.output)
        ids = {id(n) for n in ready}
        done += ready
        left = [n for n in left if id(n) not in ids]
    if [id(n) for n in done] != [id(n) for n in g.node]:
        copies = [type(n)() for n in done]
        for c, n in zip(copies, done):
            c.CopyFrom(n)
        del g.node[:]
        g.node.extend(copies)


def _bind(vi, x, rng, where: str) -> np.ndarray:
    """Input `vi`'s data: `x` checked against the declared type and shape, or random
    data of that shape (a symbolic dimension then must be given)."""
    tt = vi.type.tensor_type
    dtype = _DTYPES.get(tt.elem_type)
    if dtype is None:
        raise CompileError(f"{where}: input {vi.name!r} has ONNX element type "
                           f"{tt.elem_type}, which the host does not pass")
    dims = declared_dims(vi, where)
    if x is None:
        if not all(isinstance(d, int) for d in dims):
            raise CompileError(f"{where}: input {vi.name!r} has shape {dims}; give its "
                               f"data so that the symbolic sizes are bound")
        check_random_size(vi.name, dims, where)
        if np.issubdtype(dtype, np.floating):
            return rng.standard_normal(dims).astype(dtype)
        if dtype == np.bool_:
            return rng.integers(0, 2, size=dims).astype(np.bool_)
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -128), min(info.max, 127) + 1, size=dims,
                            dtype=dtype)
    x = np.asarray(x)
    if x.dtype != dtype:
        raise CompileError(f"{where}: input {vi.name!r}: the model takes {np.dtype(dtype).name}, "
                           f"the data given is {x.dtype.name}")
    if len(dims) != x.ndim or any(isinstance(d, int) and d != n for d, n in
                                  zip(dims, x.shape)):
        raise CompileError(f"{where}: input {vi.name!r}: the model takes shape {dims}, the data "
                           f"given has {list(x.shape)}")
    return x
