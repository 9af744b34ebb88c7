"""The ONNX model of a set of operations: what one segment runs (a chip program's
source, or the host's sub-model)."""

from __future__ import annotations

from collections.abc import Sequence

from systolica.compiler.assignment.operations import Operation, value_types


def submodel(proto, ops: Sequence[Operation], name: str, *, outputs: Sequence[str] = ()):
    """A model running `ops` of `proto`: its inputs the values they read from outside,
    its outputs `outputs` (default: the values they write)."""
    from onnx import helper
    g = proto.graph
    order = {id(n): k for k, n in enumerate(g.node)}
    nodes = sorted({id(n): n for op in ops for n in op.nodes}.values(),
                   key=lambda n: order[id(n)])
    made = {o for n in nodes for o in n.output if o}
    consts = {t.name: t for t in g.initializer}
    used = [v for n in nodes for v in n.input if v]
    types = value_types(proto)

    def info(v):
        elem, shape = types.get(v, (0, None))
        return helper.make_tensor_value_info(v, elem, list(shape) if shape else None)

    inputs = [v for v in dict.fromkeys(used) if v not in made and v not in consts]
    outs = list(outputs) or [v for op in ops for v in op.writes]
    model = helper.make_model(
        helper.make_graph(nodes, name, [info(v) for v in inputs],
                          [info(v) for v in dict.fromkeys(outs)],
                          [consts[v] for v in dict.fromkeys(used) if v in consts]),
        opset_imports=list(proto.opset_import))
    model.ir_version = proto.ir_version
    return model
