"""The symbolic computation graph (compiler/matching/polyhedral.py, workloads.py):
its lazy queries agree with the layer's loop nest, one product instance at a time."""

from __future__ import annotations

import itertools

import pytest

from systolica.compiler.errors import CompileError
from systolica.compiler.matching import workloads as W
from systolica.compiler.matching.polyhedral import Node, SymbolicGraph

#: small layers with every geometry parameter off its default
CONV = W.conv2d(n=2, h=7, w=6, cin=4, cout=6, kernel=(3, 2), stride=(2, 1),
                dilation=(1, 2), pads=(1, 0, 1, 1), groups=2)


def _conv_operands(wl, m):
    """The loop nest's own statement: which x and w one product reads."""
    n, g, k, oh, ow, c, kh, kw = m
    (sh, sw), (dh, dw) = wl.param("stride"), wl.param("dilation")
    return ((n, sh * oh + dh * kh, sw * ow + dw * kw, g * wl.size("c") + c),
            (kh, kw, c, g * wl.size("k") + k))


def _instances(wl, every=7):
    box = itertools.product(*(range(s) for s in wl.sizes))
    return list(itertools.islice(box, 0, None, every))


def test_conv_operands_match_the_loop_nest():
    g = SymbolicGraph(CONV)
    for m in _instances(CONV, every=37):
        ops = g.operands(Node("M", m))
        assert (ops["x"].coords, ops["w"].coords) == _conv_operands(CONV, m)
        assert g.reduction_of(Node("M", m)) == Node("O", m[:5])
        assert g.has_edge(ops["x"], Node("M", m)) and g.has_edge(Node("M", m), Node("O", m[:5]))


def test_readers_and_the_functional_propagator():
    g = SymbolicGraph(CONV)
    x = Node("X", (1, 2, 2, 3))                 # group 1, channel 1 of it
    readers = []
    g.readers(x).foreach_point(lambda p: readers.append(p))
    brute = [m for m in itertools.product(*(range(s) for s in CONV.sizes))
             if _conv_operands(CONV, m)[0] == x.coords]
    assert len(readers) == len(brute) > 0
    m = brute[0]
    assert g.mult_of(Node("O", m[:5]), x) == Node("M", m)
    assert g.mult_of(Node("O", (1, 0, 0, 0, 0)), x) is None   # group 0 does not read it


def test_membership_is_the_instance_set():
    g = SymbolicGraph(CONV)
    assert g.contains(Node("M", (1, 1, 2, 2, 4, 1, 2, 1)))
    assert not g.contains(Node("M", (1, 2, 0, 0, 0, 0, 0, 0)))     # no group 2
    assert g.contains(Node("O", (0, 0, 0, 0, 0)))


def test_fused_taps():
    wl = W.conv2d(h=5, w=5, cin=2, cout=2, kernel=3)
    f = SymbolicGraph(wl.fused())
    assert wl.fused().dims == ("n", "g", "k", "oh", "ow", "c", "t")
    assert wl.fused().size("t") == 9 and wl.fused().reduction == {"c", "t"}
    ops = f.operands(Node("M", (0, 0, 1, 1, 2, 1, 7)))              # t 7 = tap (2, 1)
    assert ops["x"].coords == (0, 3, 3, 1) and ops["w"].coords == (7, 1, 1)


@pytest.mark.parametrize("wl, m, x, w", [
    (W.dense(m=3, k=5, n=4), (2, 3, 4), (2, 4), (4, 3)),
    (W.bmm(b=2, m=3, k=5, n=4), (1, 2, 3, 4), (1, 2, 4), (1, 4, 3)),
])
def test_dense_and_batched(wl, m, x, w):
    ops = SymbolicGraph(wl).operands(Node("M", m))
    assert ops["x"].coords == x and ops["w"].coords == w


def test_pooling_reads_one_channel_times_the_neutral_1():
    wl = W.pool2d(h=4, w=4, channels=3, kernel=2, op="max")
    g = SymbolicGraph(wl)
    ops = g.operands(Node("M", (0, 2, 0, 1, 1, 0, 1, 0)))
    assert ops["x"].coords == (0, 3, 2, 2) and ops["w"] == Node("C", (1,))
    assert g.label(Node("O", (0, 2, 0, 1, 1))).kind == "max"


def test_slices_are_lexicographic_in_the_asset_dims():
    g = SymbolicGraph(W.conv2d(h=8, w=8, cin=3, cout=4, kernel=3))
    terms = g.terms(g.origin(), ("kh", "kw", "c"), 16)
    assert [g.point(t)["c"] for t in terms[:4]] == [0, 1, 2, 0]
    assert len(terms) == 27
    assert [n.coords for n in g.along(g.origin(), ("k",), 3)] == \
        [(0, 0, 0, 0, 0), (0, 0, 1, 0, 0), (0, 0, 2, 0, 0)]


@pytest.mark.parametrize("kw", [
    dict(h=4, w=4, cin=3, cout=4, groups=2),
    dict(h=2, w=2, cin=2, cout=2, kernel=5),
])
def test_bad_workloads_are_refused(kw):
    with pytest.raises(CompileError, match="conv workload"):
        W.conv2d(**kw)
