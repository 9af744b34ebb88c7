"""An ONNX model as the operations the assigner places (docs/assignment.md, step 4).

A *tensor operation* is a compute node with the ``DequantizeLinear`` nodes of its
operands and the ``QuantizeLinear`` nodes of its result: what one processor runs
with int8 tensors at its edges. A ``QuantizeLinear`` of a graph input and a
``DequantizeLinear`` of a graph output are operations of their own (the host's
quantising and dequantising). A *scalar operation* computes shapes, counts or
quantisation parameters: after the clean-up (constant propagation) none is left in a
model of static shapes; any left runs on the host."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

QDQ = ("QuantizeLinear", "DequantizeLinear")

#: Compute kinds whose work is multiply-accumulates (the rest: output elements).
MAC_KINDS = ("Conv", "QLinearConv", "ConvInteger", "MatMul", "QLinearMatMul",
             "MatMulInteger", "Gemm", "QGemm", "ConvTranspose")


@dataclass
class Operation:
    index: int
    name: str                   # the compute node's name (an override names it so)
    kind: str                   # its op_type
    nodes: list                 # the NodeProtos it runs, in the model's order
    reads: tuple[str, ...]      # values it takes from other operations or the inputs
    writes: tuple[str, ...]     # values it gives to others or to the outputs
    work: int                   # MACs, or output elements
    bytes_in: int
    bytes_out: int
    scalar: bool = False        # computes shapes or parameters, not tensors
    elements_in: int = 0        # the largest operand's elements
    preds: set[int] = field(default_factory=set)
    succs: set[int] = field(default_factory=set)


def value_types(proto) -> dict[str, tuple[int, tuple[int, ...] | None]]:
    """Every value's ONNX element type and static shape (None where unknown)."""
    g = proto.graph
    out: dict[str, tuple[int, tuple[int, ...] | None]] = {}
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        tt = vi.type.tensor_type
        dims = tt.shape.dim
        shape = tuple(d.dim_value for d in dims) if tt.HasField("shape") and all(
            d.HasField("dim_value") for d in dims) else None
        if vi.name not in out or out[vi.name][1] is None:
            out[vi.name] = (tt.elem_type, shape)
    for t in g.initializer:
        out[t.name] = (t.data_type, tuple(t.dims))
    return out


_ITEM_BYTES = {1: 4, 2: 1, 3: 1, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8}


def _nbytes(types, v: str) -> int:
    elem, shape = types.get(v, (0, None))
    return 0 if shape is None else int(np.prod(shape, dtype=np.int64)) * _ITEM_BYTES.get(elem, 4)


def operations(proto) -> list[Operation]:
    """The operations of `proto` (cleaned up, shapes inferred) in a topological
    order, linked to their producers and readers."""
    g = proto.graph
    consts = {t.name for t in g.initializer}
    made = {o: n for n in g.node for o in n.output if o}
    readers: dict[str, list] = {}
    for n in g.node:
        for v in n.input:
            if v:
                readers.setdefault(v, []).append(n)
    graph_outputs = {o.name for o in g.output}
    types = value_types(proto)
    order = {id(n): k for k, n in enumerate(g.node)}
    owned: set[int] = set()          # Q nodes taken by their compute node
    ops: list[Operation] = []

    def add(kind, name, nodes, reads, writes, work, scalar=False):
        nodes = sorted({id(n): n for n in nodes}.values(), key=lambda n: order[id(n)])
        ops.append(Operation(len(ops), name, kind, nodes, tuple(dict.fromkeys(reads)),
                             tuple(dict.fromkeys(writes)), int(work),
                             sum(_nbytes(types, v) for v in dict.fromkeys(reads)),
                             sum(_nbytes(types, v) for v in dict.fromkeys(writes)), scalar,
                             max((_elements(types, v) for v in reads), default=0)))

    for n in g.node:
        if n.op_type in QDQ or id(n) in owned:
            continue
        nodes, reads, writes = [n], [], []
        for v in n.input:
            if not v or v in consts:
                continue
            p = made.get(v)
            if p is not None and p.op_type == "DequantizeLinear":
                nodes.append(p)
                if p.input[0] not in consts:
                    reads.append(p.input[0])
            else:
                reads.append(v)
        outs = list(n.output)
        act = _activation(n, readers, graph_outputs)
        if act is not None:         # op -> Relu -> Q: the activation is the op's clamp
            nodes.append(act)
            owned.add(id(act))
            outs = list(act.output)
        for o in outs:
            if not o:
                continue
            rs = readers.get(o, [])
            qs = [r for r in rs if r.op_type == "QuantizeLinear"]
            for q in qs:
                nodes.append(q)
                owned.add(id(q))
                writes.append(q.output[0])
            if o in graph_outputs or len(qs) < len(rs):
                writes.append(o)
        add(n.op_type, n.name or n.output[0], nodes, reads, writes, _work(n, types),
            scalar=_is_scalar(n, types))
    for n in g.node:
        if n.op_type == "QuantizeLinear" and id(n) not in owned:
            add(n.op_type, n.name or n.output[0], [n], [n.input[0]], [n.output[0]],
                _elements(types, n.output[0]))
        elif n.op_type == "DequantizeLinear" and n.input[0] not in consts and (
                n.output[0] in graph_outputs or any(r.op_type in QDQ for r in
                                                    readers.get(n.output[0], []))):
            add(n.op_type, n.name or n.output[0], [n], [n.input[0]], [n.output[0]],
                _elements(types, n.output[0]))
    return _link(ops)


def _activation(n, readers, graph_outputs):
    """The Relu that is `n`'s only reader and is quantised by QuantizeLinears alone
    (the QDQ form's ``Q(Relu(op))``), else None."""
    rs = readers.get(n.output[0], []) if n.output else []
    if len(rs) != 1 or rs[0].op_type != "Relu" or n.output[0] in graph_outputs:
        return None
    after = readers.get(rs[0].output[0], [])
    if after and all(r.op_type == "QuantizeLinear" for r in after):
        return rs[0]
    return None


def _link(ops: list[Operation]) -> list[Operation]:
    """Producers and readers, and the operations renumbered in a topological order."""
    writer = {v: op for op in ops for v in op.writes}
    deps = {op.index: {writer[v].index for v in op.reads if v in writer} for op in ops}
    done: list[Operation] = []
    placed: set[int] = set()
    waiting = list(ops)
    while waiting:
        ready = [op for op in waiting if deps[op.index] <= placed]
        if not ready:
            raise ValueError("the model's operations form a cycle")
        for op in ready:
            placed.add(op.index)
            done.append(op)
        waiting = [op for op in waiting if op.index not in placed]
    renumber = {op.index: k for k, op in enumerate(done)}
    for op in done:
        op.preds = {renumber[d] for d in deps[op.index]}
        op.index = renumber[op.index]
    for op in done:
        for p in op.preds:
            done[p].succs.add(op.index)
    return done


def _elements(types, v: str) -> int:
    shape = types.get(v, (0, None))[1]
    return 0 if shape is None else int(np.prod(shape, dtype=np.int64))


def _is_scalar(n, types) -> bool:
    """Shape or parameter arithmetic: integer results of a few values (a product of
    tensors, a ConvInteger's or MatMulInteger's few int32 values, is none)."""
    if n.op_type in MAC_KINDS:
        return False
    if n.op_type in ("ArgMax", "ArgMin") and (
            types.get(n.input[0], (0, None))[0] not in (6, 7, 9)
            or _elements(types, n.input[0]) > 16):
        return False                # a classifier's label: a reduction of its data
    outs = [types.get(o, (0, None)) for o in n.output if o]
    return bool(outs) and all(e in (6, 7, 9) and s is not None and int(np.prod(s)) <= 16
                              for e, s in outs)


def _work(n, types) -> int:
    out = _elements(types, n.output[0])
    if n.op_type not in MAC_KINDS:
        return out
    w_at = 3 if n.op_type in ("QLinearConv", "QLinearMatMul", "QGemm") else 1
    w = types.get(n.input[w_at], (0, None))[1] if len(n.input) > w_at else None
    if w is None:
        return out
    if "Conv" in n.op_type:          # [Cout, Cin/group, kh, kw]: each output, Cin/g*kh*kw
        return out * int(np.prod(w[1:]))
    return out * int(w[-2] if len(w) >= 2 else 1)        # [.., K] @ [K, N]
