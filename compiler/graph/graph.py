"""Networks as graphs: layers (nodes) over named tensors, checked by one verifier.

A :class:`Graph` is a DAG: a layer may read several tensors (a join) and a tensor may
be read by several layers (fan-out). Every tensor carries its shape, dtype and
quantisation parameters; the op types are the closed set in ``compiler/graph/ops.py``.
:func:`verify` checks a graph whole and every Graph is verified when it is built, so
a pass that makes a new graph is verified after it runs; its errors name the layer or
tensor at fault and what to do.

:class:`GraphBuilder` builds a graph layer by layer (each call names the tensors the
layer reads); :class:`Network` and :func:`gemm` are the chain-shaped shorthands.
Everything is validated when the objects are built, before any lowering or memory
allocation happens.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from systolica.compiler.errors import CompileError
from systolica.compiler.graph.ops import (
    DTYPES,
    INT8,
    INT32,
    MULT_BITS,
    OPS,
    OUT_DTYPES,
    SHIFT_MAX,
    Add,
    AvgPool2d,
    Concat,
    Conv2d,
    Dense,
    Flatten,
    GlobalAvgPool,
    MatMulT,
    MaxPool2d,
    Quant,
    TensorType,
    Transpose,
    average_params,
    integer_array,
)

__all__ = ["Add", "AvgPool2d", "CompileError", "Concat", "Conv2d", "DTYPES", "Dense", "Flatten",
           "GlobalAvgPool", "Graph", "GraphBuilder", "INT32", "INT8", "MULT_BITS",
           "MatMulT", "MaxPool2d", "Network", "Node", "OPS", "OUT_DTYPES", "Quant", "SHIFT_MAX",
           "Tensor", "TensorType", "Transpose", "as_graph", "gemm", "verify"]

#: The shapes a graph input may have: dense activations and NHWC feature maps.
INPUT_RANKS = {2: "[M, K] activations", 3: "[B, M, N] tensor",
               4: "(N, H, W, C) feature map", 5: "rank-5 tensor", 6: "rank-6 tensor"}
#: The layouts a graph input or output may be given in (GraphBuilder.input, .nchw).
LAYOUTS = ("NHWC", "NCHW")
NCHW_TO_NHWC = (0, 2, 3, 1)
NHWC_TO_NCHW = (0, 3, 1, 2)


def _sequence(what: str, value) -> tuple:
    """`value` as a tuple (one string: a 1-tuple), or a CompileError."""
    if isinstance(value, str):
        return (value,)
    try:
        return tuple(value)
    except TypeError:
        raise CompileError(f"{what} must be a list or tuple, not {type(value).__name__}") \
            from None


@dataclass(frozen=True)
class Tensor:
    """A named tensor: ``shape``, ``dtype`` (``"int8"`` or ``"int32"``), ``quant``."""
    name: str
    shape: tuple[int, ...]
    dtype: str = "int8"
    quant: Quant = Quant()

    def __post_init__(self):
        if isinstance(self.shape, (list, np.ndarray)):
            object.__setattr__(self, "shape", tuple(self.shape))

    @property
    def type(self) -> TensorType:
        return TensorType(self.shape, self.dtype, self.quant)


@dataclass(frozen=True, eq=False)
class Node:
    """One layer: an op (its parameters and name) and the tensors it reads and writes."""
    op: object
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def __post_init__(self):
        for what in ("inputs", "outputs"):
            object.__setattr__(self, what, _sequence(f"layer {self.name!r}: {what}",
                                                     getattr(self, what)))

    @property
    def name(self) -> str:
        return getattr(self.op, "name", "?")

    def __repr__(self):
        return (f"Node({type(self.op).__name__} {self.name!r}, inputs={self.inputs}, "
                f"outputs={self.outputs})")


@dataclass(frozen=True, eq=False)
class Graph:
    """A verified network: tensors, layers in dependency order, the graph's inputs
    (their values in ``data``) and outputs."""
    tensors: tuple[Tensor, ...]
    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    data: Mapping[str, np.ndarray] = field(default_factory=dict)
    name: str = "network"

    def __post_init__(self):
        for what in ("tensors", "nodes", "inputs", "outputs"):
            object.__setattr__(self, what, _sequence(f"Graph {what}", getattr(self, what)))
        if not isinstance(self.data, Mapping):
            raise CompileError(f"Graph data must map input names to arrays, not "
                               f"{type(self.data).__name__}")
        object.__setattr__(self, "data", MappingProxyType(dict(self.data)))
        verify(self)
        producer, consumers = {}, {t.name: [] for t in self.tensors}
        for node in self.nodes:
            for t in node.outputs:
                producer[t] = node
            for t in dict.fromkeys(node.inputs):
                consumers[t].append(node)
        object.__setattr__(self, "_tensors", {t.name: t for t in self.tensors})
        object.__setattr__(self, "_producer", producer)
        object.__setattr__(self, "_consumers", {k: tuple(v) for k, v in consumers.items()})

    def tensor(self, name: str) -> Tensor:
        return self._tensors[name]

    def producer(self, tensor: str) -> Node | None:
        """The layer that produces `tensor`, None for a graph input."""
        return self._producer.get(tensor)

    def consumers(self, tensor: str) -> tuple[Node, ...]:
        """The layers that read `tensor`, in graph order."""
        return self._consumers[tensor]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"network {self.name!r} has no layer {name!r}")


def _source(graph: Graph, producers: Mapping[str, Node]):
    def source(tensor: str) -> str:
        if tensor in producers:
            return f"layer {producers[tensor].name!r}"
        return "the input" if len(graph.inputs) == 1 else f"input {tensor!r}"
    return source


def _rank(data) -> int:
    """The number of dimensions of array-like `data` (0 if it has none or is ragged)."""
    try:
        return np.ndim(data)
    except (TypeError, ValueError):
        return 0


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _check_tensor(t) -> None:
    if not isinstance(t, Tensor):
        raise CompileError(f"a graph's tensors must be Tensor objects, not {type(t).__name__}")
    if not isinstance(t.name, str) or not t.name:
        raise CompileError(f"a tensor's name must be a non-empty string, not {t.name!r}")
    who = f"tensor {t.name!r}"
    if not isinstance(t.shape, tuple) or not t.shape \
            or not all(_is_int(d) and d >= 1 for d in t.shape):
        raise CompileError(f"{who}: shape {t.shape!r} must be a tuple of positive integers")
    if t.dtype not in DTYPES:
        raise CompileError(f"{who}: dtype must be one of {DTYPES}, not {t.dtype!r}")
    q = t.quant
    if not isinstance(q, Quant):
        raise CompileError(f"{who}: quant must be a Quant, not {type(q).__name__}")
    if not _is_int(q.zero_point) or not INT8[0] <= q.zero_point <= INT8[1]:
        raise CompileError(f"{who}: zero point {q.zero_point!r} must be an integer in "
                           f"[{INT8[0]}, {INT8[1]}]")
    if t.dtype == "int32" and q.zero_point != 0:
        raise CompileError(f"{who}: an int32 tensor is not requantised, so its zero point "
                           f"must be 0, not {q.zero_point}")
    if q.scale is not None and not (isinstance(q.scale, (int, float)) and not
                                    isinstance(q.scale, bool) and math.isfinite(q.scale)
                                    and q.scale > 0):
        raise CompileError(f"{who}: scale {q.scale!r} must be a positive number or None")


def _cycle_from(node: Node, producers: Mapping[str, Node]) -> list[str] | None:
    """Layer names on a dependency cycle through `node`, or None."""
    path, seen = [node], set()

    def walk(n: Node) -> bool:
        for t in n.inputs:
            p = producers.get(t)
            if p is None:
                continue
            if p is node:
                return True
            if id(p) in seen:
                continue
            seen.add(id(p))
            path.append(p)
            if walk(p):
                return True
            path.pop()
        return False

    if not walk(node):
        return None
    names = [n.name for n in reversed(path)]     # producers first
    return names + [names[0]]


def verify(graph: Graph) -> None:
    """Raise CompileError unless `graph` is well formed: unique names, every tensor
    declared with a valid type and defined exactly once (a graph input or one layer's
    output), layers in dependency order (so acyclic), each layer's op one of ``OPS``
    with the right number of inputs and outputs, declared output types equal to what
    the ops infer, input data matching their tensors, and nothing unused."""
    if not isinstance(graph.name, str) or not graph.name:
        raise CompileError(f"a network's name must be a non-empty string, not {graph.name!r}")
    net = f"network {graph.name!r}"
    tensors: dict[str, Tensor] = {}
    for t in graph.tensors:
        _check_tensor(t)
        if t.name in tensors:
            raise CompileError(f"{net}: two tensors are named {t.name!r}; tensor names "
                               f"must be unique")
        tensors[t.name] = t

    kinds = ", ".join(op.__name__ for op in OPS)
    names: set[str] = set()
    producers: dict[str, Node] = {}
    for node in graph.nodes:
        if not isinstance(node, Node):
            raise CompileError(f"{net}: a graph's layers must be Node objects, not "
                               f"{type(node).__name__}")
        if not isinstance(node.op, OPS):
            raise CompileError(f"{net}: layer {node.name!r} is a {type(node.op).__name__}; "
                               f"the op types are {kinds}")
        who = f"layer {node.name!r}"
        if node.name in names:
            raise CompileError(f"{net}: two layers are named {node.name!r}; layer names "
                               f"must be unique")
        names.add(node.name)
        least, most = node.op.arity
        if len(node.inputs) < least or (most is not None and len(node.inputs) > most):
            wanted = f"at least {least}" if most is None else \
                f"{least}" if least == most else f"{least} to {most}"
            raise CompileError(f"{who} reads {len(node.inputs)} tensors; a "
                               f"{type(node.op).__name__} reads {wanted}")
        if len(node.outputs) != 1:
            raise CompileError(f"{who} names {len(node.outputs)} outputs; a "
                               f"{type(node.op).__name__} produces exactly one tensor")
        for t in node.inputs + node.outputs:
            if not isinstance(t, str) or t not in tensors:
                raise CompileError(f"{who} names tensor {t!r}, which the graph does not "
                                   f"declare; declare it or fix the name")
        for t in node.outputs:
            if t in producers:
                raise CompileError(f"tensor {t!r} is produced by both layer "
                                   f"{producers[t].name!r} and {who}; give each output "
                                   f"a name of its own")
            producers[t] = node

    for what in ("inputs", "outputs"):
        for t in getattr(graph, what):
            if not isinstance(t, str):
                raise CompileError(f"{net}: {what} are tensor names, not {t!r}")
    if not graph.inputs:
        raise CompileError(f"{net} has no inputs; add one with GraphBuilder.input")
    for t in graph.inputs:
        if t not in tensors:
            raise CompileError(f"{net}: input {t!r} is not a declared tensor")
        if t in producers:
            raise CompileError(f"tensor {t!r} is both a graph input and the output of layer "
                               f"{producers[t].name!r}; give the layer's output another name")
        if tensors[t].dtype != "int8" or len(tensors[t].shape) not in INPUT_RANKS:
            raise CompileError(f"input {t!r} is {tensors[t].dtype} of shape "
                               f"{tensors[t].shape}; inputs are int8 "
                               f"{' or '.join(INPUT_RANKS.values())}")
        if t not in graph.data:
            raise CompileError(f"input {t!r} has no data; give its values in Graph.data")
        d = graph.data[t]
        if not isinstance(d, np.ndarray) or d.dtype != np.int8 or d.shape != tensors[t].shape:
            got = f"{d.dtype} {d.shape}" if isinstance(d, np.ndarray) else type(d).__name__
            raise CompileError(f"input {t!r}: data must be an int8 array of shape "
                               f"{tensors[t].shape}, not {got}")
    if len(set(graph.inputs)) != len(graph.inputs):
        raise CompileError(f"{net}: an input is listed twice in {graph.inputs}")
    extra = set(graph.data) - set(graph.inputs)
    if extra:
        raise CompileError(f"{net}: data given for {sorted(extra)}, which are not inputs")
    for t in tensors:
        if t not in producers and t not in graph.inputs:
            raise CompileError(f"tensor {t!r} is neither a graph input nor produced by a "
                               f"layer; remove it or produce it")

    source = _source(graph, producers)
    defined = set(graph.inputs)
    for node in graph.nodes:
        for t in node.inputs:
            if t in defined:
                continue
            cycle = _cycle_from(node, producers)
            if cycle:
                raise CompileError(f"layers {' -> '.join(map(repr, cycle))} form a cycle "
                                   f"(each one's output feeds the next); a network must be "
                                   f"acyclic")
            raise CompileError(f"layer {node.name!r} reads {t!r} before layer "
                               f"{producers[t].name!r} produces it; list layers after the "
                               f"layers they read from")
        inferred = node.op.infer([tensors[t] for t in node.inputs], source)
        declared = tensors[node.outputs[0]].type
        if declared != inferred:
            raise CompileError(f"layer {node.name!r}: its output {node.outputs[0]!r} is "
                               f"declared as {declared} but the layer produces {inferred}; "
                               f"declare the tensor as the layer produces it")
        defined.update(node.outputs)

    if not graph.outputs:
        raise CompileError(f"{net} has no outputs; name at least one tensor as an output")
    if len(set(graph.outputs)) != len(graph.outputs):
        raise CompileError(f"{net}: an output is listed twice in {graph.outputs}")
    for t in graph.outputs:
        if t not in tensors:
            raise CompileError(f"{net}: output {t!r} is not a declared tensor")
        if t not in producers:
            raise CompileError(f"{net}: output {t!r} is a graph input; outputs must be "
                               f"produced by a layer")
    read = {t for node in graph.nodes for t in node.inputs}
    for t in graph.inputs:
        if t not in read:
            raise CompileError(f"input {t!r} is read by no layer; read it or remove it")
    for node in graph.nodes:
        for t in node.outputs:
            if t not in read and t not in graph.outputs:
                raise CompileError(f"layer {node.name!r}: its output {t!r} is read by no "
                                   f"layer and is not a graph output; make it an output "
                                   f"or remove the layer")


class GraphBuilder:
    """Builds a :class:`Graph` layer by layer. Each call names the tensor(s) the layer
    reads and returns the name of the tensor it produces (the layer's name), so fan-out
    is reading one name twice and a join is a layer reading several::

        g = GraphBuilder("two_heads")
        x = g.input(a)
        h = g.dense(x, w1, b1, mult=300, shift=14, relu=True, name="trunk")
        g.dense(h, w2, name="head_a")
        g.dense([h, x], w3, out_dtype="int32", name="head_b")
        graph = g.build()            # outputs: the tensors no layer reads

    Each layer is checked as it is added, so an error points at the call that made it.
    """

    def __init__(self, name: str = "network"):
        if not isinstance(name, str) or not name:
            raise CompileError(f"GraphBuilder(name): a network's name must be a non-empty "
                               f"string, not {name!r:.60}")
        self.name = name
        self._tensors: dict[str, Tensor] = {}
        self._nodes: list[Node] = []
        self._inputs: list[str] = []
        self._data: dict[str, np.ndarray] = {}

    def input(self, data, *, name: str = "input", zero_point: int = 0,
              scale: float | None = None, layout: str = "NHWC") -> str:
        """A graph input: int8 ``[M, K]`` activations, an int8 ``(N, H, W, C)`` feature
        map, or an int8 tensor of rank 3, 5 or 6 (read by a :class:`Transpose`).
        Returns its tensor name. ``layout="NCHW"``: `data` is an ``(N, C, H, W)`` map
        (as from ONNX or PyTorch); the graph holds it as given, under `name`, and the
        returned name is its NHWC transpose (a :class:`Transpose` layer
        ``<name>_nhwc``, run on the chip), which the network's layers read."""
        if layout not in LAYOUTS:
            raise CompileError(f"input {name!r}: layout must be one of {LAYOUTS}, not "
                               f"{layout!r}")
        if layout == "NCHW" and _rank(data) != 4:
            raise CompileError(f"input {name!r}: layout='NCHW' takes an (N, C, H, W) "
                               f"feature map, not a {_rank(data)}-D array")
        if not isinstance(name, str) or not name:
            raise CompileError(f"an input's name must be a non-empty string, not {name!r}")
        if name in self._tensors:
            raise CompileError(f"network {self.name!r}: a tensor named {name!r} already "
                               f"exists; give the input another name")
        what = f"network {self.name!r}: input" if name == "input" else f"input {name!r}"
        ndim = _rank(data)
        if ndim and ndim not in INPUT_RANKS:
            raise CompileError(f"{what} must be int8 {' or '.join(INPUT_RANKS.values())}, "
                               f"not a {ndim}-D array")
        x = integer_array(what, data, ndim or 2, *INT8, "int8", np.int8)
        t = Tensor(name, x.shape, "int8", Quant(zero_point, scale))
        _check_tensor(t)
        self._tensors[name] = t
        self._inputs.append(name)
        self._data[name] = x
        if layout == "NCHW":
            return self.transpose(name, perm=NCHW_TO_NHWC, name=f"{name}_nhwc")
        return name

    def tensor(self, name: str) -> Tensor:
        """The tensor `name` made so far (its shape, dtype and quantisation)."""
        if name not in self._tensors:
            raise CompileError(f"network {self.name!r} has no tensor {name!r} (it has "
                               f"{sorted(self._tensors)})")
        return self._tensors[name]

    def layer_op(self, name: str):
        """The op of layer `name` added so far."""
        for n in self._nodes:
            if n.name == name:
                return n.op
        raise CompileError(f"network {self.name!r} has no layer {name!r}")

    def layer(self, op, inputs: str | Sequence[str]) -> str:
        """Layer `op` (one of ``OPS``, e.g. a :class:`Dense`) reading `inputs`; returns
        its output tensor's name. An unnamed Dense is called ``layer<i>``, another
        unnamed op its default name and ``<i>`` (``conv3``, ``add7``)."""
        if not isinstance(op, OPS):
            raise CompileError(f"network {self.name!r}: layer {len(self._nodes)} is a "
                               f"{type(op).__name__}; the op types are "
                               f"{', '.join(o.__name__ for o in OPS)}")
        default = type(op).__dataclass_fields__["name"].default
        if op.name == default:
            op = dataclasses.replace(op, name=f"layer{len(self._nodes)}" if
                                     isinstance(op, Dense) else f"{default}{len(self._nodes)}")
        who = f"layer {op.name!r}"
        names = _sequence(f"{who}: inputs", inputs)
        if any(n.name == op.name for n in self._nodes):
            raise CompileError(f"network {self.name!r}: layer names must be unique, and "
                               f"{op.name!r} is used twice")
        if op.name in self._tensors:
            raise CompileError(f"{who}: a tensor named {op.name!r} already exists (a "
                               f"layer's output takes the layer's name); rename the layer")
        for t in names:
            if isinstance(t, np.ndarray):
                raise CompileError(f"{who} reads an array of shape {t.shape}; a layer "
                                   f"reads tensor names: give the array to input() and "
                                   f"pass the name it returns")
            if not isinstance(t, str) or t not in self._tensors:
                raise CompileError(f"{who} reads {t!r:.60}, which is no tensor of network "
                                   f"{self.name!r} (it has {sorted(self._tensors)}); read "
                                   f"a name that input() or a layer call returned")
        producers = {n.outputs[0]: n for n in self._nodes}
        source = (lambda t: f"layer {producers[t].name!r}" if t in producers else
                  "the input" if len(self._inputs) == 1 else f"input {t!r}")
        least, most = op.arity
        if len(names) < least or (most is not None and len(names) > most):
            raise CompileError(f"{who} reads {len(names)} tensors; a {type(op).__name__} "
                               f"reads at least {least}" + ("" if most is None else
                                                            f" and at most {most}"))
        out = op.infer([self._tensors[t] for t in names], source)
        self._tensors[op.name] = Tensor(op.name, out.shape, out.dtype, out.quant)
        self._nodes.append(Node(op, names, (op.name,)))
        return op.name

    def dense(self, inputs: str | Sequence[str], weights, bias=None, *, mult: int = 1,
              shift: int = 0, zp: int = 0, relu: bool = False, out_dtype: str = "int8",
              name: str = "dense") -> str:
        """A :class:`Dense` layer reading `inputs` (several: concatenated along K)."""
        return self.layer(Dense(weights, bias, mult=mult, shift=shift, zp=zp, relu=relu,
                                out_dtype=out_dtype, name=name), inputs)

    def conv2d(self, x: str, weights, bias=None, *, stride=1, pads=0, dilation=1,
               groups: int = 1, mult=1, shift=0, zp: int = 0, relu: bool = False,
               relu6: int | None = None, out_dtype: str = "int8", name: str = "conv") -> str:
        """A :class:`Conv2d` reading feature map `x` (``weights[KH, KW, Cin, Cout]``)."""
        return self.layer(Conv2d(weights, bias, stride=stride, pads=pads, dilation=dilation,
                                 groups=groups, mult=mult, shift=shift, zp=zp, relu=relu,
                                 relu6=relu6, out_dtype=out_dtype, name=name), x)

    def max_pool2d(self, x: str, kernel=2, stride=None, pads=0, *,
                   name: str = "max_pool") -> str:
        """A :class:`MaxPool2d` (stride defaults to the kernel)."""
        return self.layer(MaxPool2d(kernel, stride, pads, name=name), x)

    def avg_pool2d(self, x: str, kernel=2, stride=None, pads=0, *, mult: int | None = None,
                   shift: int | None = None, name: str = "avg_pool") -> str:
        """An :class:`AvgPool2d` (without mult/shift: ``average_params(kh * kw)``)."""
        return self.layer(AvgPool2d(kernel, stride, pads, mult, shift, name=name), x)

    def global_avg_pool(self, x: str, *, mult: int | None = None, shift: int | None = None,
                        zp: int | None = None, name: str = "global_avg_pool") -> str:
        """A :class:`GlobalAvgPool` over `x`'s ``H x W`` (without mult/shift:
        ``average_params(H * W)``; `zp` the output's zero point, None: the input's)."""
        if mult is None and shift is None and x in self._tensors \
                and len(self._tensors[x].shape) == 4:
            _, h, w, _ = self._tensors[x].shape
            mult, shift = average_params(h * w)
        return self.layer(GlobalAvgPool(mult, shift, name=name, zp=zp), x)

    def add(self, a, b, *, mult_a: int = 1, mult_b: int = 1, shift: int = 0, zp: int = 0,
            relu: bool = False, name: str = "add") -> str:
        """An :class:`Add` of tensors `a` and `b` (a residual join).

        ``add(op, inputs)`` with an op object is :meth:`layer`, as before."""
        if not isinstance(a, str):
            if (mult_a, mult_b, shift, zp, relu, name) != (1, 1, 0, 0, False, "add"):
                raise CompileError(f"network {self.name!r}: add(a, b, ...) adds two tensors "
                                   f"named by strings, but a is a {type(a).__name__}; to "
                                   f"add a layer op use layer(op, inputs)")
            return self.layer(a, b)
        return self.layer(Add(mult_a, mult_b, shift, zp, relu, name=name), (a, b))

    def flatten(self, x: str, *, name: str = "flatten") -> str:
        """A :class:`Flatten`: ``(N, H, W, C) -> (N, H*W*C)``."""
        return self.layer(Flatten(name=name), x)

    def transpose(self, x: str, perm=None, *, name: str = "transpose") -> str:
        """A :class:`Transpose`: ``np.transpose(x, perm)`` of an int8 tensor; without
        `perm` the last two axes swap (``[M, N] -> [N, M]``)."""
        return self.layer(Transpose(name=name, perm=perm), x)

    def nchw(self, x: str, *, name: str | None = None) -> str:
        """Feature map `x` ``(N, H, W, C)`` as an ``(N, C, H, W)`` tensor (a
        :class:`Transpose` on the chip, named ``<x>_nchw`` unless `name`): to give a
        graph output in the NCHW layout."""
        if x in self._tensors and len(self._tensors[x].shape) != 4:
            raise CompileError(f"network {self.name!r}: nchw({x!r}) takes an (N, H, W, C) "
                               f"feature map, but {x!r} has shape {self._tensors[x].shape}")
        return self.transpose(x, perm=NHWC_TO_NCHW, name=name or f"{x}_nchw")

    def matmul_t(self, a: str, b: str, *, mult: int = 1, shift: int = 0, zp: int = 0,
                 relu: bool = False, out_dtype: str = "int8", name: str = "matmul_t") -> str:
        """A :class:`MatMulT`: ``a @ bᵀ`` of two int8 tensors ``a [M, K]``, ``b [N, K]``."""
        return self.layer(MatMulT(mult=mult, shift=shift, zp=zp, relu=relu,
                                  out_dtype=out_dtype, name=name), (a, b))

    def concat(self, *xs: str, name: str = "concat") -> str:
        """A :class:`Concat`: tensors `xs` (``[M, K_i]``) side by side, ``[M, sum K_i]``."""
        return self.layer(Concat(name=name), xs)

    def build(self, *outputs: str) -> Graph:
        """The verified graph. `outputs` default to the tensors no layer reads."""
        if not self._nodes:
            raise CompileError(f"network {self.name!r} has no layers; add at least one "
                               f"(e.g. a Dense)")
        if not outputs:
            read = {t for n in self._nodes for t in n.inputs}
            outputs = tuple(n.outputs[0] for n in self._nodes if n.outputs[0] not in read)
        for t in outputs:
            if not isinstance(t, str) or t not in self._tensors:
                raise CompileError(f"network {self.name!r}: build(*outputs) takes tensor "
                                   f"names that input() or a layer call returned, not "
                                   f"{t!r:.60} (the network has {sorted(self._tensors)})")
        return Graph(tuple(self._tensors.values()), tuple(self._nodes), tuple(self._inputs),
                     tuple(outputs), dict(self._data), name=self.name)


@dataclass(frozen=True, eq=False)
class Network:
    """An int8 input ``[M, K]`` followed by a chain of dense layers (``graph`` is the
    same network as a :class:`Graph`).

    Layers without a name are called ``layer0``, ``layer1``, ... Intermediate results
    stay on chip, so every layer but the last must produce int8.
    """

    input: np.ndarray
    layers: tuple[Dense, ...] = field(default_factory=tuple)
    name: str = "network"
    graph: Graph = field(init=False, repr=False)

    def __post_init__(self):
        x = integer_array(f"network {self.name!r}: input", self.input, 2, *INT8, "int8",
                          np.int8)
        object.__setattr__(self, "input", x)
        layers = _sequence(f"network {self.name!r}: layers", self.layers)
        if not layers:
            raise CompileError(f"network {self.name!r} has no layers; add at least one Dense")
        for i, layer in enumerate(layers):
            if not isinstance(layer, Dense):
                raise CompileError(f"network {self.name!r}: layer {i} is a "
                                   f"{type(layer).__name__}, only Dense layers are supported")
        g = GraphBuilder(self.name)
        t = g.input(x)
        for layer in layers:
            t = g.layer(layer, t)
        graph = g.build(t)
        object.__setattr__(self, "layers", tuple(n.op for n in graph.nodes))
        object.__setattr__(self, "graph", graph)

    @property
    def M(self) -> int:
        return self.input.shape[0]

    @property
    def out_shape(self) -> tuple[int, int]:
        return (self.M, self.layers[-1].N)


def as_graph(network) -> Graph:
    """The Graph of a Network or Graph, or a CompileError saying what is accepted."""
    if isinstance(network, Graph):
        return network
    if isinstance(network, Network):
        return network.graph
    raise CompileError(f"expected a Network or Graph, not {type(network).__name__}")


def gemm(a, b, bias=None, *, mult: int = 1, shift: int = 0, zp: int = 0,
         relu: bool = False, out_dtype: str = "int8", name: str = "gemm") -> Network:
    """One layer: ``post(a @ b + bias)`` with ``a`` int8 ``[M, K]`` and ``b`` int8 ``[K, N]``."""
    return Network(a, (Dense(b, bias, mult=mult, shift=shift, zp=zp, relu=relu,
                             out_dtype=out_dtype, name=name),), name=name)
