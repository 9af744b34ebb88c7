"""The constraint problem (compiler/matching/csp.py) on the seed's explicit examples:
an 8x8 instruction inside a 16x16 matrix product, a 16x16 one serving an 8x8 product
only through dummies, the 4-input sum on 3 elements; backward variable selection,
relaxation, enumeration; and, switching each constraint off, the wrong solutions it
keeps out."""

from __future__ import annotations

from test_dataflow import fig4a

from systolica.compiler.matching import csp
from systolica.compiler.matching.dataflow import dot_product, matmul, reduction_sum
from systolica.compiler.matching.instruction import matmul_graph

MATMUL = csp.Asset(rows=("c",), cols=("k",), stream=("m",))
SUM = csp.Asset(rows=("c",), cols=(), stream=())


def test_8x8_instruction_tiles_a_16x16_matmul():
    comp = csp.ExplicitView(matmul(16, 16, 16))
    (sol,) = csp.search(matmul_graph(8, range(8), range(8)), comp, MATMUL)
    a = sol.assignment
    assert not any(isinstance(v, csp.Dummy) for v in a.values())
    # out[s, j] on computation output (m=s, k=j), product p on c=p: tiling 2 per dim
    assert all(a[("+", s, j)] == ("+", s, j) for s in range(8) for j in range(8))
    assert a[("*", 3, 2, 5)] == ("*", 3, 2, 5)
    assert sol.grid.shape() == {0: 8}
    assert {d: 16 // 8 for d in "mkc"} == {"m": 2, "k": 2, "c": 2}


def test_16x16_instruction_serves_an_8x8_matmul_only_with_dummies():
    instr, comp = matmul_graph(16, range(16), range(2)), csp.ExplicitView(matmul(8, 8, 8))
    assert csp.search(instr, comp, MATMUL) == []
    (sol,) = csp.search(instr, comp, MATMUL, csp.Options(dummies=True))
    a = sol.assignment
    assert a[("+", 0, 7)] == ("+", 0, 7) and a[("+", 0, 8)] == csp.Dummy("+")
    assert a[("*", 0, 0, 7)] == ("*", 0, 7, 7) or a[("*", 0, 0, 7)] == ("*", 0, 0, 7)
    assert a[("*", 0, 0, 8)] == csp.Dummy("*")
    assert a[("w", 8, 0)] == csp.Dummy("w") and a[("w", 8, 0)].value == 0
    assert sol.grid.shape() == {0: 8}


def test_4_input_sum_on_3_elements_pads_with_the_neutral_0():
    instr, comp = reduction_sum(4), csp.ExplicitView(reduction_sum(3))
    assert csp.search(instr, comp, SUM) == []
    (sol,) = csp.search(instr, comp, SUM, csp.Options(dummies=True))
    a = sol.assignment
    assert [a[("x", i)] for i in range(3)] == [("x", 0), ("x", 1), ("x", 2)]
    assert isinstance(a[("x", 3)], csp.Dummy) and a[("x", 3)].value == 0


def test_solve_climbs_the_relaxation_ladder():
    instr, comp = reduction_sum(4), csp.ExplicitView(reduction_sum(3))
    sols, rung = csp.solve(instr, comp, [SUM])
    assert rung == csp.LADDER[1] and len(sols) == 1
    assert csp.solve(reduction_sum(4), csp.ExplicitView(reduction_sum(4)), [SUM])[1] \
        == csp.LADDER[0]


def test_backward_variable_selection_takes_outputs_first():
    p = csp.Problem(matmul_graph(4, range(2), range(2)), csp.ExplicitView(matmul(4, 4, 4)),
                    MATMUL)
    assert p.order[0] == ("+", 0, 0)
    assert p.order[1:4] == [("*", 0, 0, 0), ("x", 0, 0), ("w", 0, 0)]
    outs = [v for v in p.order if v[0] == "+"]
    assert outs == [("+", 0, 0), ("+", 0, 1), ("+", 1, 0), ("+", 1, 1)]
    # every node comes after the first node it feeds
    pos = {v: i for i, v in enumerate(p.order)}
    assert all(pos[v] > min(pos[s] for s in p.instr.succs(v))
               for v in p.order if p.instr.succs(v))


def test_portfolio_assets_choose_the_dims():
    # an asset orders the values along its dims; the dataflow keeps the columns on the
    # dim the shared row inputs do not index (k), so the transposed asset finds none
    comp = csp.ExplicitView(matmul(4, 4, 4))
    instr = matmul_graph(4, range(2), range(2))
    (a,) = csp.search(instr, comp, MATMUL)
    assert a.assignment[("+", 0, 1)] == ("+", 0, 1)
    assert a.assignment[("+", 1, 0)] == ("+", 1, 0)
    assert csp.search(instr, comp, csp.Asset(rows=("c",), cols=("m",), stream=("k",))) \
        == []


def test_enumeration_yields_several_solutions():
    # without the fixed origin the 2x2 instruction sits at several places of a 4x4
    instr = matmul_graph(4, range(2), range(2))
    sols = csp.search(instr, csp.ExplicitView(matmul(4, 4, 4)), MATMUL,
                      csp.Options(fixed_origin=False, limit=5))
    firsts = [s.assignment[("+", 0, 0)] for s in sols]
    assert len(sols) >= 2 and len(set(firsts)) == len(firsts)


def _without(name: str, **kw) -> csp.Options:
    return csp.Options(constraints=csp.CONSTRAINTS - {name}, **kw)


def test_mutation_hyperrectangle():
    """Off, the rows may take the products in any order: 4! embeddings instead of 1."""
    args = dot_product(4), csp.ExplicitView(fig4a()), SUM
    assert len(csp.search(*args, csp.Options(limit=30))) == 1
    assert len(csp.search(*args, _without("hyperrect", limit=30))) == 24


def test_mutation_self_edge():
    """Off, the reduction also maps onto a plain (ordered, unmarked) sum."""
    g = fig4a()
    g.op(999, "+", [431, 432, 433, 434, 461])
    args = dot_product(4), csp.ExplicitView(g), SUM
    strict = csp.search(*args, csp.Options(fixed_origin=False, limit=5))
    loose = csp.search(*args, _without("self_edge", fixed_origin=False, limit=5))
    assert [s.assignment["sum"] for s in strict] == [441]
    assert [s.assignment["sum"] for s in loose] == [441, 999]


def test_mutation_injective():
    """Off, an instruction with more products than the sum has 'fits' the sum by
    mapping two products onto one."""
    args = dot_product(5, init=False), csp.ExplicitView(dot_product(4, init=False)), SUM
    on = csp.CONSTRAINTS - {"hyperrect"}
    assert csp.search(*args, csp.Options(constraints=on)) == []
    (bad,) = csp.search(*args, csp.Options(constraints=on - {"injective"}))
    assert len({bad.assignment[f"p{i}"] for i in range(1, 6)}) < 5
