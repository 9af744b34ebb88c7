"""Explicit dataflow graphs (compiler/matching/dataflow.py): the seed's Fig. 4a, one
output of a 4x4 matrix product, built with the figure's node ids."""

from __future__ import annotations

from systolica.compiler.matching import csp
from systolica.compiler.matching.dataflow import SEQ, Label, dot_product, matmul

#: Fig. 4a's reference numerals.
FIG4A = ({f"x{i}": 410 + i for i in range(1, 5)} | {f"y{i}": 420 + i for i in range(1, 5)}
         | {f"p{i}": 430 + i for i in range(1, 5)} | {"sum": 441, "zero": 461})


def fig4a():
    return dot_product(4, ids=FIG4A)


def test_fig4a_structure():
    g = fig4a()
    assert [g.labels[n] for n in (411, 414, 421, 424)] == [Label("input", "x")] * 2 + \
        [Label("input", "y")] * 2
    assert g.labels[461] == Label("const", value=0)
    for i in range(1, 5):
        assert g.labels[430 + i] == Label("*")
        assert g.preds(430 + i) == [410 + i, 420 + i]
    # 441 sums the products and the initial 0; the self-edge (451) marks it a reduction
    assert g.labels[441] == Label("+")
    assert g.preds(441) == [431, 432, 433, 434, 461]
    assert (441, 441, SEQ) in g.edges and g.is_reduction(441)
    assert [n for n in g.labels if g.is_reduction(n)] == [441]
    assert g.outputs() == [441]
    assert len(g.edges) == 4 * 3 + 1 + 1           # x, y -> p -> sum; 0 -> sum; 451


def test_fig4a_matched_by_an_instruction_of_its_shape():
    (sol,) = csp.search(dot_product(4), csp.ExplicitView(fig4a()),
                        csp.Asset(rows=("c",), cols=(), stream=()), csp.Options(limit=4))
    a = sol.assignment
    assert a["sum"] == 441 and a["zero"] == 461
    assert [a[f"p{i}"] for i in range(1, 5)] == [431, 432, 433, 434]
    assert [a[f"x{i}"] for i in range(1, 5)] == [411, 412, 413, 414]
    assert [a[f"y{i}"] for i in range(1, 5)] == [421, 422, 423, 424]


def test_matmul_outputs_are_parallel_through_a_star():
    g = matmul(2, 3, 4)
    outs = [n for n in g.labels if g.is_reduction(n)]
    assert len(outs) == 6
    spatial = [e for e in g.edges if e[2] == "spatial"]
    assert len(spatial) == 5                       # a star, not the 15-edge clique
    assert all(g.parallel(a, b) for a in outs for b in outs if a != b)
    assert not g.parallel(outs[0], ("*", 0, 0, 0))
