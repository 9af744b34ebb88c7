"""The constraint problem of seed 000: embed the instruction dataflow graph in the
computation's, one variable per instruction node, and search it.

* **Domains** are computation nodes (instantiated lazily from the symbolic graph, a
  slice at a time) plus a **dummy** value per label: a dummy product or input stands
  for the neutral element (weight 0 under the sum, 1 under a product), a dummy output
  for a result nobody reads, so a large instruction serves a small problem.
* **Dataflow constraints**: label-preserving (the chip's sum also serves ``max``),
  injective (an op instance at most once; inputs too unless the layout replicates
  them), every instruction edge mapped to a computation edge, the **self-edge** of a
  reduction only to a reduction; **parallelism**: outputs parallel to the star's
  centre ``out[0, 0]``.
* **Input constraints** (the feeder's access patterns, docs/matching.md's
  realisability table): rows walk only the asset's row dims (the others fixed at the
  origin: no stencil walk the layout cannot feed), stride 1 (**density**), the first
  output at the origin (**fixed origin**); the columns step the asset's column dims in
  mixed radix.
* The **hyper-rectangle** propagator (hyperrect.py) on the row inputs; the **unary
  pruning** constraint (paragraph 101): a group of ``n`` variables spans less than
  ``n`` along any dimension.
* **Backward variable selection** (outputs first, then their products, then the
  products' inputs) and **portfolio value selection** (an :class:`Asset` per mapping of
  instruction dims to workload dims, lexicographic inside it).
* **Relaxation**: :func:`solve` re-solves with a looser :class:`Options` when nothing
  is found; :func:`search` **enumerates** solutions.

We wrote the search rather than use a general solver (ortools, python-constraint):
the domains are symbolic and huge (never enumerated) and the propagators (the
functional relations of paragraph 92, the hyper-rectangle) need the graph; a generic
solver would need the domains listed up front."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace

from systolica.compiler.matching import hyperrect
from systolica.compiler.matching.dataflow import NEUTRAL, DataflowGraph, Label

#: The constraints a problem enforces; tests switch one off to show it matters.
CONSTRAINTS = frozenset({"labels", "self_edge", "injective", "edges", "parallel",
                         "hyperrect", "columns"})
#: An instruction op label and the computation labels it can stand for (seed
#: paragraph 95: an op that generalises the target's; the accumulator has a max mode).
SERVES = {"+": ("+", "max"), "*": ("*",)}


@dataclass(frozen=True)
class Dummy:
    """A dummy value: the neutral element of `label` (0 under a sum, 1 under a
    product), or an output nobody reads."""
    label: str

    @property
    def value(self):
        return NEUTRAL.get(self.label, 0)


@dataclass(frozen=True)
class Asset:
    """One portfolio asset: the workload dims (outermost first) walked along the
    instruction's rows, columns and stream, and the input layout. ``col_extents``
    (dim -> extent) makes the column walk mixed radix (whole groups); ``row_limits``
    (dim -> extent) is a unary pruning constraint on the rows (paragraph 101: a
    threshold other than the group's size, e.g. as many groups as the columns hold)."""
    rows: tuple
    cols: tuple
    stream: tuple
    layout: str = "blocks"
    col_extents: tuple = ()
    row_limits: tuple = ()

    def describe(self) -> str:
        return (f"rows {'x'.join(self.rows)} cols {'x'.join(self.cols)} stream "
                f"{'x'.join(self.stream)} {self.layout}")


@dataclass(frozen=True)
class Options:
    """Which relaxations are on: ``dummies`` (neutral padding), ``repeat_inputs`` (an
    input element read by several rows: the replicated layout), ``fixed_origin``."""
    dummies: bool = False
    repeat_inputs: bool = False
    fixed_origin: bool = True
    dense: bool = True
    constraints: frozenset = CONSTRAINTS
    limit: int = 1
    budget: int = 200_000


@dataclass
class Solution:
    """One invocation: instruction node -> computation node or :class:`Dummy`."""
    assignment: dict
    asset: Asset
    options: Options
    seconds: float = 0.0
    grid: hyperrect.Grid | None = None
    rows: list = field(default_factory=list)


class _Exhausted(Exception):
    pass


class ExplicitView:
    """An explicit :class:`DataflowGraph` seen through the symbolic graph's queries,
    so the same search runs on the seed's small figures."""

    def __init__(self, g: DataflowGraph):
        self.g = g

    def label(self, n) -> Label:
        return self.g.labels[n]

    def is_reduction(self, n) -> bool:
        return self.g.is_reduction(n)

    def point(self, n) -> dict:
        return dict(self.g.attrs[n].get("point", {}))

    def operands(self, m) -> dict:
        out = {}
        for p in self.g.preds(m):
            out[self.g.attrs[p].get("role", "x")] = p
        return out

    def has_edge(self, src, dst) -> bool:
        return self.g.has_edge(src, dst)

    def parallel(self, a, b) -> bool:
        return self.g.parallel(a, b) if self.g.edges and any(
            k == "spatial" for _, _, k in self.g.edges) else (a != b)

    def reduction_of(self, m):
        succ = [s for s in self.g.succs(m) if self.g.is_reduction(s)]
        return succ[0] if succ else None

    def mult_of(self, out, element):
        hits = [m for m in self.g.succs(element) if out in self.g.succs(m)]
        return hits[0] if len(hits) == 1 else None

    def constants(self, out, label: Label) -> list:
        return [p for p in self.g.preds(out) if self.g.labels[p] == label]

    def common_reader(self, a, b):
        hits = [m for m in self.g.succs(a) if m in self.g.succs(b)]
        return hits[0] if len(hits) == 1 else None

    def _lex(self, nodes, base: dict, dims: tuple, bound: int):
        keep = []
        for n in nodes:
            pt = self.point(n)
            if all(pt.get(d, 0) == base.get(d, 0) for d in pt if d not in dims) and \
                    all(base.get(d, 0) <= pt.get(d, 0) < base.get(d, 0) + bound
                        for d in dims):
                keep.append(n)
        return sorted(keep, key=lambda n: tuple(self.point(n).get(d, 0) for d in dims))

    def _sums(self):
        """Every node a reduction might map to: the self-edge rule, not this list,
        keeps the plain ones out."""
        return [n for n, lab in self.g.labels.items() if lab.kind in SERVES["+"]]

    def origin(self):
        return min(self._sums(), key=lambda n: (not self.g.is_reduction(n),
                                                tuple(sorted(self.point(n).items()))))

    def along(self, origin, dims: tuple, bound: int):
        return self._lex(self._sums(), self.point(origin), dims, bound)

    def terms(self, out, dims: tuple, bound: int):
        return self._lex([p for p in self.g.preds(out) if self.g.labels[p].is_op],
                         self.point(out), dims, bound)

    def direct_terms(self, out, dims: tuple, bound: int):
        return self._lex([p for p in self.g.preds(out) if not self.g.labels[p].is_op
                          and self.g.labels[p].kind == "input"], self.point(out), dims,
                         bound)

    def row_inputs(self, out, dims: tuple, bound: int):
        base = self.point(out)
        xs = [n for n in self.g.labels if self.g.attrs[n].get("role") == "x"]
        return self._lex(xs, {d: v for d, v in base.items() if d not in ("k",)},
                         dims, bound)


class Problem:
    """The CSP: instruction graph `instr`, computation `comp` (a symbolic graph or an
    :class:`ExplicitView`), one `asset` and `options`."""

    def __init__(self, instr: DataflowGraph, comp, asset: Asset, options: Options = Options()):
        self.instr, self.comp, self.asset, self.opt = instr, comp, asset, options
        self.on = options.constraints
        self.order = self._backward_order()
        self.rows_group = [v for v in self.order if instr.attrs[v].get("role") == "x"
                           and (instr.attrs[v].get("inst") or (0,))[0] in (0, None)]
        #: the product at the same row of the first output: it walks the grid first
        first = self.order[0]
        self.row_mult = {}
        for m in instr.preds(first):
            for x in instr.preds(m):
                if x in self.rows_group:
                    self.row_mult[m] = x
        self.n_rows = len(self.rows_group)
        self.col_size = 1 + max([instr.attrs[v]["inst"][1] or 0 for v in instr.labels
                                 if instr.attrs[v].get("inst")] + [0])
        self.nodes = 0

    # -- variable selection: backward (outputs first) -------------------------------
    def _backward_order(self) -> list:
        g = self.instr
        outs = g.outputs()

        def rank(o):
            inst = g.attrs[o].get("inst") or (0, 0, None)
            s, j = inst[0] or 0, inst[1] or 0
            return (0 if (s, j) == (0, 0) else 1 if s == 0 else 2 if j == 0 else 3, s, j)
        order, seen = [], set()

        def visit(v):
            if v in seen:
                return
            seen.add(v)
            order.append(v)
            for u in g.preds(v):
                visit(u)
        for o in sorted(outs, key=rank):
            visit(o)
        return order

    # -- domains ------------------------------------------------------------------
    def _axis_dims(self, v) -> tuple:
        inst = self.instr.attrs[v].get("inst") or (0, 0, None)
        s, j = inst[0] or 0, inst[1] or 0
        if s and j:
            return self.asset.stream + self.asset.cols
        return self.asset.stream if s else self.asset.cols

    def domain(self, v, a: dict) -> list:
        g, comp = self.instr, self.comp
        lab = g.labels[v]
        dummy = [Dummy(lab.kind if lab.is_op else lab.name)] if self.opt.dummies else []
        real = {u: a[u] for u in (*g.preds(v), *g.succs(v))
                if u in a and not isinstance(a[u], Dummy)}
        if lab.is_op and g.is_reduction(v):
            return self._output_domain(v, a) + dummy
        succ = [u for u in g.succs(v) if u in a]
        if lab.is_op:                                   # a product
            (u,) = succ
            if isinstance(a[u], Dummy):
                return dummy
            ins = [real[p] for p in g.preds(v) if p in real]
            if ins:                                     # functional: paragraph 92
                m = comp.mult_of(a[u], ins[0])
                return ([m] if m is not None else []) + dummy
            if v in self._row_mults():
                return self._pruned_rows(v, a, comp.terms(a[u], self.asset.rows,
                                                          self.n_rows)) + dummy
            return dummy
        # an input
        if lab.kind == "const":
            outs = [a[u] for u in succ if not isinstance(a[u], Dummy)]
            neutral = [Dummy("+")] if lab.value == NEUTRAL["+"] and (
                self.opt.dummies or not outs) else []
            return (comp.constants(outs[0], lab) if outs else []) + neutral
        role = g.attrs[v].get("role")
        for u in succ:
            if not isinstance(a[u], Dummy):
                if g.labels[u].is_op and not g.is_reduction(u):
                    return [comp.operands(a[u])[role]]
                return self._pruned_rows(v, a, comp.direct_terms(
                    a[u], self.asset.rows, self.n_rows)) + dummy
        if v in self.rows_group:
            origin = a[self.order[0]]
            if isinstance(origin, Dummy):
                return dummy
            return self._pruned_rows(v, a, comp.row_inputs(origin, self.asset.rows,
                                                           self.n_rows)) + dummy
        return dummy or [Dummy(lab.name)]

    def _row_mults(self):
        if not hasattr(self, "_rm"):
            first = self.order[0]
            self._rm = set(self.instr.preds(first))
        return self._rm

    def _output_domain(self, v, a) -> list:
        comp, first = self.comp, self.order[0]
        if v == first:
            return [comp.origin()] if self.opt.fixed_origin else \
                comp.along(comp.origin(), self.asset.stream + self.asset.cols, 2)
        centre = a[first]
        if isinstance(centre, Dummy):
            return []
        # an output whose products' inputs are all known follows from them
        for m in self.instr.preds(v):
            ins = [a.get(p) for p in self.instr.preds(m)]
            if len(ins) == 2 and all(x is not None and not isinstance(x, Dummy)
                                     for x in ins):
                common = comp.common_reader(*ins)
                return [comp.reduction_of(common)] if common is not None else []
        return comp.along(centre, self._axis_dims(v), self.col_size)

    def _coords(self, val) -> tuple:
        pt = self.comp.point(val)
        return tuple(pt.get(d, 0) for d in self.asset.rows)

    def _row_points(self, a) -> list:
        return [self._coords(a[v]) for v in self.rows_group
                if v in a and not isinstance(a[v], Dummy)]

    def _pruned_rows(self, v, a, values) -> list:
        if self.asset.row_limits:
            limits = [(self.asset.rows.index(d), e) for d, e in self.asset.row_limits]
            values = [x for x in values if all(self._coords(x)[i] < e for i, e in limits)]
        if "hyperrect" not in self.on or (v not in self.rows_group
                                          and v not in self.row_mult):
            return list(values)
        pts = self._row_points(a)
        if not pts:
            return list(values)
        box = hyperrect.bounds(pts, self.n_rows, dense=self.opt.dense)
        if box is None:
            return []
        return [x for x in values if all(lo <= self._coords(x)[d] <= hi
                                         for d, (lo, hi) in box.items())]

    # -- constraints ---------------------------------------------------------------
    def consistent(self, v, val, a: dict, used: dict) -> bool:
        g, comp, on = self.instr, self.comp, self.on
        lab = g.labels[v]
        if isinstance(val, Dummy):
            # a real product never reads a dummy (its value would be lost); a dummy
            # term of a real reduction is its neutral element; a dummy output reads
            # only dummy terms
            for u in g.succs(v):
                if u in a and not isinstance(a[u], Dummy) and g.labels[u].is_op \
                        and not g.is_reduction(u):
                    return False
            if g.is_reduction(v) and any(u in a and not isinstance(a[u], Dummy)
                                         for u in g.preds(v)):
                return False
            return self._rows_ok(v, val, a)
        clab = comp.label(val)
        if "labels" in on:
            if lab.is_op != clab.is_op:
                return False
            if lab.is_op and clab.kind not in SERVES.get(lab.kind, (lab.kind,)):
                return False
        if "self_edge" in on and g.is_reduction(v) and not comp.is_reduction(val):
            return False
        if "injective" in on and val in used and (
                lab.is_op or not (self.opt.repeat_inputs or clab.kind == "const")):
            return False
        if "edges" in on:
            for u in g.preds(v):
                if u in a and not isinstance(a[u], Dummy) and not comp.has_edge(a[u], val):
                    return False
                if u in a and isinstance(a[u], Dummy) and lab.is_op and not g.is_reduction(v):
                    return False
            for u in g.succs(v):
                if u in a and not isinstance(a[u], Dummy) and not comp.has_edge(val, a[u]):
                    return False
        if "parallel" in on and g.is_reduction(v) and v != self.order[0]:
            centre = a.get(self.order[0])
            if centre is not None and not isinstance(centre, Dummy) and \
                    not comp.parallel(centre, val):
                return False
        if "columns" in on and g.is_reduction(v) and self.asset.cols:
            if not self._column_ok(v, val, a):
                return False
        return self._rows_ok(v, val, a)

    def _column_ok(self, v, val, a) -> bool:
        inst = self.instr.attrs[v].get("inst")
        if not inst or inst[0] or not inst[1]:
            return True
        j, pos = inst[1], {}
        extents = self.asset.col_extents or ((self.asset.cols[-1], self.col_size),)
        for d, e in reversed(extents):
            pos[d], j = j % e, j // e
        if j:                                   # past the columns' product: a dummy
            return False
        centre = self.comp.point(a[self.order[0]])
        pt = self.comp.point(val)
        return all(pt[d] == centre[d] + pos.get(d, 0) for d in self.asset.cols)

    def _rows_ok(self, v, val, a) -> bool:
        if "hyperrect" not in self.on:
            return True
        if v in self.row_mult:
            if isinstance(val, Dummy):
                return True                         # its input may still be real
            v = self.row_mult[v]
        elif v not in self.rows_group:
            return True
        seq = [a[u] for u in self.rows_group if u in a and u != v] + [val]
        if any(isinstance(x, Dummy) for x in seq[:-1]) and not isinstance(val, Dummy):
            return False                            # dummies only at the group's tail
        pts = [self._coords(x) for x in seq if not isinstance(x, Dummy)]
        if not pts:
            return True
        if self.opt.fixed_origin and any(pts[0]):
            return False                            # the first input at the origin
        dense = self.opt.dense
        if len(pts) > 1 and hyperrect.walk(pts, dense=dense) is None:
            return False
        if len(seq) == self.n_rows:
            return hyperrect.complete(pts, self.n_rows, dummies=self.opt.dummies,
                                      dense=dense) is not None
        if isinstance(val, Dummy):
            return hyperrect.complete(pts, self.n_rows, dummies=True,
                                      dense=dense) is not None
        return True

    # -- search -------------------------------------------------------------------
    def solutions(self):
        """Solutions in search order (depth-first, backtracking)."""
        a, used = {}, {}
        yield from self._dfs(0, a, used)

    def _dfs(self, i, a, used):
        if i == len(self.order):
            yield dict(a)
            return
        v = self.order[i]
        for val in self.domain(v, a):
            self.nodes += 1
            if self.nodes > self.opt.budget:
                raise _Exhausted
            if not self.consistent(v, val, a, used):
                continue
            a[v] = val
            if not isinstance(val, Dummy):
                used[val] = used.get(val, 0) + 1
            yield from self._dfs(i + 1, a, used)
            del a[v]
            if not isinstance(val, Dummy):
                used[val] -= 1
                if not used[val]:
                    del used[val]


def search(instr: DataflowGraph, comp, asset: Asset, options: Options = Options()) \
        -> list[Solution]:
    """Up to ``options.limit`` solutions of one asset (enumeration), each timed."""
    p = Problem(instr, comp, asset, options)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 2 * len(p.order) + 200))
    out, t0 = [], time.perf_counter()
    try:
        for a in p.solutions():
            t1 = time.perf_counter()
            sol = Solution(a, asset, options, t1 - t0)
            pts = p._row_points(a)
            sol.rows = pts
            sol.grid = hyperrect.complete(pts, p.n_rows, dummies=True) if pts else None
            out.append(sol)
            t0 = t1
            if len(out) >= options.limit:
                break
    except _Exhausted:
        pass
    return out


#: The relaxation ladder :func:`solve` climbs when nothing is found (seed paragraphs
#: 110-111): neutral padding, then inputs repeated across rows (the replicated layout),
#: then any origin.
LADDER = (Options(), Options(dummies=True), Options(dummies=True, repeat_inputs=True),
          Options(dummies=True, repeat_inputs=True, fixed_origin=False))


def solve(instr: DataflowGraph, comp, assets, *, ladder=LADDER, limit: int = 1) \
        -> tuple[list[Solution], Options | None]:
    """The portfolio over `assets` at the strictest rung of the ladder that has a
    solution: (solutions, that rung), ([], None) when even the loosest has none."""
    for rung in ladder:
        rung = replace(rung, limit=limit)
        found = [s for asset in assets for s in search(instr, comp, asset, rung)]
        if found:
            return found, rung
    return [], None
