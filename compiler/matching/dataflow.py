"""Labelled directed dataflow graphs (seed 000, Fig. 4a): nodes are inputs, constants
and scalar operations; edges are ``seq`` (data flows from a node to the op consuming
it) or ``spatial`` (the two ops may run in parallel). A commutative reduction is ONE
node marked by a self-edge; its terms (and optional initial value) flow into it.

The explicit graphs here describe small computations and the reduced MATMUL
instruction (instruction.py); a layer's graph is held symbolically (polyhedral.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

SEQ, SPATIAL = "seq", "spatial"
#: Operation labels and their neutral elements (the value of a dummy operand).
NEUTRAL = {"+": 0, "max": -128, "*": 1}


@dataclass(frozen=True)
class Label:
    """``kind`` is ``input`` (``name`` the tensor), ``const`` (``value``) or an op
    (``+``, ``*``, ``max``)."""
    kind: str
    name: str = ""
    value: int | None = None

    @property
    def is_op(self) -> bool:
        return self.kind not in ("input", "const")


@dataclass
class DataflowGraph:
    """An explicit labelled directed graph. ``attrs[node]`` holds free annotations (a
    node's coordinates ``point``, its ``role`` in an instruction)."""
    labels: dict = field(default_factory=dict)
    edges: set = field(default_factory=set)
    attrs: dict = field(default_factory=dict)

    def add(self, node, label: Label, **attrs):
        if node in self.labels:
            raise ValueError(f"node {node!r} is already in the graph")
        self.labels[node] = label
        self.attrs[node] = attrs
        return node

    def input(self, node, name: str, **attrs):
        return self.add(node, Label("input", name), **attrs)

    def const(self, node, value: int, **attrs):
        return self.add(node, Label("const", value=value), **attrs)

    def op(self, node, kind: str, operands: Iterable = (), *, reduction: bool = False,
           **attrs):
        """An operation node fed by `operands`; ``reduction`` marks it commutative
        reduction (the self-edge)."""
        self.add(node, Label(kind), **attrs)
        for a in operands:
            self.edge(a, node)
        if reduction:
            self.edge(node, node)
        return node

    def edge(self, src, dst, kind: str = SEQ):
        for n in (src, dst):
            if n not in self.labels:
                raise ValueError(f"edge {src!r} -> {dst!r}: no node {n!r}")
        self.edges.add((src, dst, kind))

    def star(self, center, leaves: Iterable):
        """Spatial edges from `center` to each leaf: a star subset of the clique of
        mutually parallel ops (their transitive closure is the clique)."""
        for leaf in leaves:
            if leaf != center:
                self.edge(center, leaf, SPATIAL)

    def has_edge(self, src, dst, kind: str = SEQ) -> bool:
        return (src, dst, kind) in self.edges

    def is_reduction(self, node) -> bool:
        return (node, node, SEQ) in self.edges

    def _adjacency(self):
        key = (len(self.labels), len(self.edges))
        if getattr(self, "_adj_key", None) != key:
            order = {n: i for i, n in enumerate(self.labels)}
            preds, succs = {n: [] for n in self.labels}, {n: [] for n in self.labels}
            for s, d, k in self.edges:
                if k == SEQ and s != d:
                    preds[d].append(s)
                    succs[s].append(d)
            for table in (preds, succs):
                for v in table.values():
                    v.sort(key=order.__getitem__)
            self._adj, self._adj_key = (preds, succs), key
        return self._adj

    def preds(self, node) -> list:
        """The operands of `node` in insertion order (the self-edge left out)."""
        return self._adjacency()[0][node]

    def succs(self, node) -> list:
        return self._adjacency()[1][node]

    def parallel(self, a, b) -> bool:
        """Mutually parallel: connected through spatial edges (the star's closure)."""
        if a == b:
            return False
        seen, todo = {a}, [a]
        while todo:
            n = todo.pop()
            for s, d, k in self.edges:
                if k != SPATIAL or n not in (s, d):
                    continue
                other = d if s == n else s
                if other == b:
                    return True
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        return False

    def outputs(self) -> list:
        """Op nodes whose result no other node reads (a self-edge aside)."""
        return [n for n, lab in self.labels.items() if lab.is_op and not self.succs(n)]

    def nodes(self, kind: str | None = None) -> Iterator:
        return (n for n, lab in self.labels.items() if kind is None or lab.kind == kind)


def dot_product(n: int, *, ids: dict | None = None, init: bool = True) -> DataflowGraph:
    """One output of a matrix product: ``sum_i x_i * y_i`` (Fig. 4a with ``n = 4``):
    inputs ``x1..xn`` and ``y1..yn``, products, one reduction with a self-edge and, with
    `init`, the initial value 0. `ids` renames nodes (``{"x1": 411, ...}``)."""
    ids = ids or {}
    g = DataflowGraph()
    name = lambda s: ids.get(s, s)  # noqa: E731
    for i in range(1, n + 1):
        g.input(name(f"x{i}"), "x", point={"c": i - 1}, role="x")
        g.input(name(f"y{i}"), "y", point={"c": i - 1}, role="w")
    prods = [g.op(name(f"p{i}"), "*", (name(f"x{i}"), name(f"y{i}")),
                  point={"c": i - 1}, role="mul") for i in range(1, n + 1)]
    operands = list(prods)
    if init:
        operands.append(g.const(name("zero"), 0, role="init"))
    g.op(name("sum"), "+", operands, reduction=True, point={}, role="out")
    return g


def matmul(m: int, k: int, c: int, *, x: str = "x", w: str = "w") -> DataflowGraph:
    """``out[m, k] = sum_c x[m, c] * w[c, k]`` explicitly (dims as docs/matching.md's
    dense layer: ``m`` stream, ``k`` columns, ``c`` reduced); all outputs parallel."""
    g = DataflowGraph()
    for i in range(m):
        for r in range(c):
            g.input((x, i, r), x, point={"m": i, "c": r}, role="x")
    for r in range(c):
        for j in range(k):
            g.input((w, r, j), w, point={"c": r, "k": j}, role="w")
    outs = []
    for i in range(m):
        for j in range(k):
            prods = [g.op(("*", i, j, r), "*", ((x, i, r), (w, r, j)),
                          point={"m": i, "k": j, "c": r}, role="mul") for r in range(c)]
            outs.append(g.op(("+", i, j), "+", prods, reduction=True,
                             point={"m": i, "k": j}, role="out"))
    if outs:
        g.star(outs[0], outs[1:])
    return g


def reduction_sum(n: int, *, name: str = "x") -> DataflowGraph:
    """``sum_i x_i`` over `n` inputs: a reduction with no products (a pure sum)."""
    g = DataflowGraph()
    for i in range(n):
        g.input((name, i), name, point={"c": i}, role="x")
    g.op("sum", "+", [(name, i) for i in range(n)], reduction=True, point={}, role="out")
    return g
