"""Input validation: every bad network is refused up front with a message that names
the layer and the problem."""

import numpy as np
import pytest

from systolica.compiler import CompileError, Dense, Network, gemm

A = np.ones((4, 8), dtype=np.int8)
B = np.ones((8, 5), dtype=np.int8)


def with_value(shape, index, value):
    x = np.zeros(shape, dtype=np.int64)
    x[index] = value
    return x


@pytest.mark.parametrize("build, words", [
    (lambda: gemm(np.zeros((0, 8)), B), ["input", "empty dimension"]),
    (lambda: gemm(A, np.zeros((8, 0))), ["'gemm'", "weights", "empty dimension"]),
    (lambda: gemm(A, np.ones(8)), ["weights", "2-D"]),
    (lambda: gemm(A, np.ones((7, 5))), ["'gemm'", "K = 7", "8 columns"]),
    (lambda: gemm(A, with_value((8, 5), (2, 3), 200)), ["weights[2, 3] = 200", "int8"]),
    (lambda: gemm(np.full((4, 8), -129), B), ["input[0, 0] = -129"]),
    (lambda: gemm(A, B, np.array([0, 0, 0, 1 << 31, 0])), ["bias[3] = 2147483648", "int32"]),
    (lambda: gemm(A, B, np.zeros(4)), ["bias has 4 elements", "N = 5"]),
    (lambda: gemm(A, B * 0.5), ["integers"]),
    (lambda: gemm(A, B, mult=1 << 16), ["mult = 65536", "[0, 65535]"]),
    (lambda: gemm(A, B, shift=64), ["shift = 64", "[0, 63]"]),
    (lambda: gemm(A, B, zp=128), ["zp = 128", "[-128, 127]"]),
    (lambda: gemm(A, B, out_dtype="int16"), ["out_dtype", "int16"]),
    (lambda: gemm(A, B, shift=3, out_dtype="int32"), ["int32 output is not requantised"]),
    (lambda: Network(A, []), ["no layers"]),
    (lambda: Network(A, [Dense(B, out_dtype="int32", name="fc1"), Dense(np.ones((5, 2)))]),
     ["'fc1'", "only the last layer may produce int32"]),
    (lambda: Network(A, [Dense(B, name="fc1"), Dense(np.ones((4, 2)), name="fc2")]),
     ["'fc2'", "K = 4", "layer 'fc1' has 5 columns"]),
    (lambda: Network(A, [Dense(B, name="x"), Dense(np.ones((5, 2)), name="x")]),
     ["unique"]),
    (lambda: gemm(A, B, relu="no"), ["'gemm'", "relu must be True or False", "'no'"]),
    (lambda: gemm(A > 0, B), ["input is a boolean array", "integers"]),
    (lambda: gemm(A, B > 0), ["'gemm'", "weights is a boolean array"]),
    (lambda: Network(A, Dense(B)), ["layers must be a list or tuple", "not Dense"]),
])
def test_bad_network_is_refused_with_its_reason(build, words):
    with pytest.raises(CompileError) as info:
        build()
    for word in words:
        assert word in str(info.value)


def test_compile_error_is_a_value_error():
    assert issubclass(CompileError, ValueError)


def test_layers_get_default_names_and_int8_arrays():
    net = Network(np.arange(8).reshape(1, 8), [Dense(np.ones((8, 3))), Dense(np.ones((3, 2)))])
    assert [layer.name for layer in net.layers] == ["layer0", "layer1"]
    assert net.input.dtype == np.int8 and net.layers[0].weights.dtype == np.int8
    assert net.out_shape == (1, 2)


# -- graphs: the builder, fan-out and joins ---------------------------------------------

from dataclasses import replace  # noqa: E402

from systolica.compiler import Graph, GraphBuilder, Node, Quant, Tensor  # noqa: E402
from systolica.compiler.graph.graph import verify  # noqa: E402


def two_heads() -> Graph:
    """x -> trunk -> {head (int8), wide (int32)}; join reads trunk and x."""
    g = GraphBuilder("two_heads")
    x = g.input(np.ones((4, 8)), name="x", zero_point=3, scale=0.5)
    h = g.dense(x, np.ones((8, 6)), mult=3, shift=2, zp=-1, name="trunk")
    g.dense(h, np.ones((6, 5)), name="head")
    g.dense(h, np.ones((6, 2)), out_dtype="int32", name="wide")
    g.dense([h, x], np.ones((14, 3)), name="join")
    return g.build()


def test_builder_gives_every_tensor_its_shape_dtype_and_quantisation():
    graph = two_heads()
    assert graph.inputs == ("x",)
    assert graph.outputs == ("head", "wide", "join")        # what no layer reads
    assert [n.name for n in graph.nodes] == ["trunk", "head", "wide", "join"]
    assert graph.tensor("x") == Tensor("x", (4, 8), "int8", Quant(3, 0.5))
    assert graph.tensor("trunk") == Tensor("trunk", (4, 6), "int8", Quant(-1))
    assert graph.tensor("wide") == Tensor("wide", (4, 2), "int32", Quant(0))
    assert graph.tensor("join").shape == (4, 3)


def test_fan_out_and_join_are_visible_as_producers_and_consumers():
    graph = two_heads()
    assert [n.name for n in graph.consumers("trunk")] == ["head", "wide", "join"]
    assert [n.name for n in graph.consumers("x")] == ["trunk", "join"]
    assert graph.producer("x") is None and graph.producer("join").name == "join"
    assert graph.node("join").inputs == ("trunk", "x")


def test_network_is_a_chain_graph():
    net = Network(A, [Dense(B, name="fc1"), Dense(np.ones((5, 2)))])
    graph = net.graph
    assert [(n.name, n.inputs, n.outputs) for n in graph.nodes] == \
        [("fc1", ("input",), ("fc1",)), ("layer1", ("fc1",), ("layer1",))]
    assert graph.outputs == ("layer1",)
    assert np.array_equal(graph.data["input"], net.input)


@pytest.mark.parametrize("build, words", [
    (lambda g: g.dense("nope", B), ["layer 'layer0' reads 'nope'", "'x'"]),
    (lambda g: (g.dense("x", B, name="a"), g.dense("x", B, name="a")),
     ["'a' is used twice"]),
    (lambda g: g.dense("x", B, name="x"), ["tensor named 'x' already exists"]),
    (lambda g: g.input(np.ones((4, 2)), name="x"), ["tensor named 'x' already exists"]),
    (lambda g: (g.input(np.ones((3, 2)), name="y"), g.dense(["x", "y"], np.ones((10, 2)),
                                                          name="j")),
     ["'j'", "different numbers of rows", "input 'x' has 4", "input 'y' has 3"]),
    (lambda g: (g.input(np.ones((4, 2)), name="y"), g.dense(["x", "y"], np.ones((9, 2)),
                                                          name="j")),
     ["'j'", "K = 9", "10 columns together", "8 (input 'x') + 2 (input 'y')"]),
    (lambda g: g.dense(g.dense("x", B, out_dtype="int32", name="s"), np.ones((5, 1)),
                       name="t"),
     ["layer 's'", "only the last layer may produce int32", "layer 't'"]),
    (lambda g: g.dense([], B), ["reads 0 tensors", "at least 1"]),
    (lambda g: g.layer("relu", "x"), ["is a str", "Dense"]),
    (lambda g: g.add(Dense(B), "x", mult_a=2), ["a is a Dense", "add(a, b", "layer(op"]),
])
def test_builder_refuses_a_bad_layer_at_the_call(build, words):
    g = GraphBuilder("net")
    g.input(A, name="x")
    with pytest.raises(CompileError) as info:
        build(g)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_builder_without_layers_is_refused():
    g = GraphBuilder("empty")
    g.input(A)
    with pytest.raises(CompileError, match="no layers"):
        g.build()


# -- the verifier: one function, errors that name the layer or tensor at fault -----------

def rebuilt(graph: Graph, **changes) -> Graph:
    """`graph` with some fields replaced, verified again (a Graph is verified when built)."""
    fields = dict(tensors=graph.tensors, nodes=graph.nodes, inputs=graph.inputs,
                  outputs=graph.outputs, data=dict(graph.data), name=graph.name)
    fields.update(changes)
    return Graph(**fields)


def node(graph, name):
    return graph.node(name)


def retyped(graph, name, **changes):
    return tuple(replace(t, **changes) if t.name == name else t for t in graph.tensors)


BROKEN = {
    "duplicate tensor": (lambda g: dict(tensors=g.tensors + (g.tensor("head"),)),
                         ["two tensors are named 'head'"]),
    "duplicate layer": (lambda g: dict(nodes=g.nodes + (Node(node(g, "head").op, ("trunk",),
                                                             ("extra",)),),
                                       tensors=g.tensors + (Tensor("extra", (4, 5)),)),
                        ["two layers are named 'head'"]),
    "undeclared tensor": (lambda g: dict(nodes=tuple(Node(n.op, ("ghost",), n.outputs)
                                                     if n.name == "head" else n
                                                     for n in g.nodes)),
                          ["layer 'head' names tensor 'ghost'", "does not declare"]),
    "defined twice": (lambda g: dict(nodes=tuple(Node(n.op, n.inputs, ("head",))
                                                 if n.name == "wide" else n
                                                 for n in g.nodes)),
                      ["'head' is produced by both layer 'head' and layer 'wide'"]),
    "cycle": (lambda g: dict(nodes=tuple(Node(n.op, ("head",), n.outputs)
                                         if n.name == "trunk" else n for n in g.nodes),
                             tensors=retyped(g, "head", shape=(4, 5))),
              ["'head' -> 'trunk' -> 'head'", "form a cycle", "acyclic"]),
    "out of order": (lambda g: dict(nodes=g.nodes[1:] + g.nodes[:1]),
                     ["layer 'head' reads 'trunk' before layer 'trunk' produces it"]),
    "wrong shape": (lambda g: dict(tensors=retyped(g, "head", shape=(4, 6))),
                    ["layer 'head'", "declared as", "(4, 6)", "(4, 5)"]),
    "wrong zero point": (lambda g: dict(tensors=retyped(g, "trunk", quant=Quant(0))),
                         ["layer 'trunk'", "zero_point=0", "zero_point=-1"]),
    "wrong dtype": (lambda g: dict(tensors=retyped(g, "head", dtype="int32")),
                    ["layer 'head'", "declared as", "int32"]),
    "int32 zero point": (lambda g: dict(tensors=retyped(g, "wide", quant=Quant(4))),
                         ["tensor 'wide'", "zero point must be 0"]),
    "bad dtype": (lambda g: dict(tensors=retyped(g, "head", dtype="float32")),
                  ["tensor 'head'", "dtype must be one of"]),
    "bad shape": (lambda g: dict(tensors=retyped(g, "head", shape=(4, 0))),
                  ["tensor 'head'", "positive integers"]),
    "int32 read by a layer": (lambda g: dict(
        nodes=tuple(Node(n.op, ("wide", "x"), n.outputs) if n.name == "join" else n
                    for n in g.nodes)),
        ["layer 'wide'", "only the last layer may produce int32", "layer 'join'"]),
    "unused output": (lambda g: dict(outputs=("wide", "join")),
                      ["layer 'head'", "read by no layer and is not a graph output"]),
    "unused input": (lambda g: dict(inputs=("x", "spare"), tensors=g.tensors + (
        Tensor("spare", (4, 8)),), data={**g.data, "spare": np.zeros((4, 8), np.int8)}),
        ["input 'spare' is read by no layer"]),
    "undefined tensor": (lambda g: dict(tensors=g.tensors + (Tensor("stray", (1, 1)),)),
                         ["tensor 'stray' is neither a graph input nor produced"]),
    "no outputs": (lambda g: dict(outputs=()), ["has no outputs"]),
    "output is an input": (lambda g: dict(outputs=g.outputs + ("x",)),
                           ["output 'x' is a graph input"]),
    "input without data": (lambda g: dict(data={}), ["input 'x' has no data"]),
    "input data mismatch": (lambda g: dict(data={"x": np.zeros((4, 7), np.int8)}),
                            ["input 'x'", "shape (4, 8)", "(4, 7)"]),
    "unknown op": (lambda g: dict(nodes=g.nodes + (Node(object(), ("x",), ("odd",)),),
                                  tensors=g.tensors + (Tensor("odd", (4, 8)),)),
                   ["is a object", "the op types are Dense"]),
    "no inputs to a layer": (lambda g: dict(nodes=tuple(Node(n.op, (), n.outputs)
                                                        if n.name == "head" else n
                                                        for n in g.nodes)),
                             ["layer 'head' reads 0 tensors", "at least 1"]),
    "two outputs of a layer": (lambda g: dict(
        nodes=tuple(Node(n.op, n.inputs, ("head", "head2")) if n.name == "head" else n
                    for n in g.nodes), tensors=g.tensors + (Tensor("head2", (4, 5)),)),
        ["layer 'head' names 2 outputs", "exactly one"]),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_verifier_names_the_layer_or_tensor_at_fault(case):
    good = two_heads()
    change, words = BROKEN[case]
    with pytest.raises(CompileError) as info:
        rebuilt(good, **change(good))
    for word in words:
        assert word in str(info.value), str(info.value)


def test_a_good_graph_passes_the_verifier_again():
    graph = two_heads()
    verify(graph)
    assert rebuilt(graph).outputs == graph.outputs
