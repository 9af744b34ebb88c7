"""An ONNX model as the assigner takes it: read, its opset checked, its symbolic
dimensions bound to the inputs given, its shapes inferred (docs/assignment.md,
"The pipeline", step 1)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from systolica.compiler.errors import CompileError

#: The default domain's opsets the front end reads (older models: convert them with
#: ``onnx.version_converter.convert_version(model, 13)``).
OPSETS = range(13, 22)

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
    where = f"ONNX model {str(model)!r}" if isinstance(model, (str, Path)) else "ONNX model"
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
    _name_nodes(proto)
    # the bound shapes replace symbolic dimensions, so inference sees static ones
    for vi in declared:
        dims = vi.type.tensor_type.shape.dim
        for d, n in zip(dims, bound[vi.name].shape):
            d.Clear()
            d.dim_value = int(n)
    try:
        proto = shape_inference.infer_shapes(proto, strict_mode=True, data_prop=True)
    except Exception as e:
        raise CompileError(f"{where}: its shapes do not agree with its inputs' "
                           f"({str(e).splitlines()[0]})") from None
    return OnnxModel(proto, name or g.name or "onnx", bound)


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
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
            for d in tt.shape.dim]
    if x is None:
        if not all(isinstance(d, int) and d > 0 for d in dims):
            raise CompileError(f"{where}: input {vi.name!r} has shape {dims}; give its "
                               f"data so that the symbolic sizes are bound")
        if np.issubdtype(dtype, np.floating):
            return rng.standard_normal(dims).astype(dtype)
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -128), min(info.max, 127) + 1, size=dims,
                            dtype=dtype)
    x = np.asarray(x)
    if x.dtype != dtype:
        raise CompileError(f"input {vi.name!r}: the model takes {np.dtype(dtype).name}, "
                           f"the data given is {x.dtype.name}")
    if len(dims) != x.ndim or any(isinstance(d, int) and d != n for d, n in
                                  zip(dims, x.shape)):
        raise CompileError(f"input {vi.name!r}: the model takes shape {dims}, the data "
                           f"given has {list(x.shape)}")
    return x
