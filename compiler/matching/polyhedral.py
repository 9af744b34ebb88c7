"""A layer's computation dataflow graph held symbolically (seed 000, Fig. 4b): the
instance sets of its input tensors, multiplications ``M`` and reductions ``O`` (one
commutative-reduction node per output element) as isl sets, and its edges as isl maps
(``M -> X``, ``M -> W`` the access functions, ``M -> O`` the reduction). Nodes are
instantiated lazily, one query at a time (membership, the operands of a product, the
products reading an input element, the slice of a set the search looks at); the
graph is never enumerated."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import islpy as isl

from systolica.compiler.matching.dataflow import Label
from systolica.compiler.matching.workloads import Workload


@dataclass(frozen=True)
class Node:
    """A computation node: ``kind`` ``X``/``W`` (input elements), ``C`` (a constant),
    ``M`` (a product), ``O`` (a reduction); ``coords`` its tuple in that set. ``via``
    (not part of its identity) is the product coordinate it was reached through."""
    kind: str
    coords: tuple
    via: tuple | None = field(default=None, compare=False, hash=False)


def _points(s: isl.Set) -> list[tuple]:
    out = []
    n = s.dim(isl.dim_type.set)
    s.foreach_point(lambda p: out.append(tuple(
        p.get_coordinate_val(isl.dim_type.set, i).to_python() for i in range(n))))
    return out


def _function(rel: isl.Map):
    """A single-valued relation as its output dims' piecewise quasi-affine functions
    and the space of the points they are evaluated at."""
    pma = isl.PwMultiAff.from_map(rel)
    return (rel.domain().get_space(),
            [pma.get_pw_aff(i) for i in range(pma.dim(isl.dim_type.out))])


def _eval(func, coords: tuple) -> tuple | None:
    """The function's value at `coords`, None outside its domain."""
    space, affs = func
    pt = isl.Point.zero(space)
    for i, v in enumerate(coords):
        pt = pt.set_coordinate_val(isl.dim_type.set, i, v)
    vals = [a.eval(pt) for a in affs]
    if any(v.is_nan() for v in vals):
        return None
    return tuple(v.to_python() for v in vals)


def _tuple(name: str, vals) -> str:
    return f"{name}[{','.join(str(v) for v in vals)}]"


class SymbolicGraph:
    """The computation dataflow graph of `workload` (see the module docstring)."""

    def __init__(self, workload: Workload):
        self.workload = wl = workload
        self.dims = wl.dims
        dims = ",".join(wl.dims)
        bounds = [f"0 <= {d} < {s}" for d, s in zip(wl.dims, wl.sizes)]
        self.mults = isl.Set(f"{{ M[{dims}] : {' and '.join(bounds)} }}")
        out = wl.out_dims
        self.outputs = self.mults.apply(isl.Map(f"{{ M[{dims}] -> O[{','.join(out)}] }}"))
        self.reduce = isl.Map(f"{{ M[{dims}] -> O[{','.join(out)}] }}").intersect_domain(
            self.mults)
        x, w = self._accesses()
        self.access = {"x": isl.Map(x).intersect_domain(self.mults)}
        self.access["w"] = isl.Map(w).intersect_domain(self.mults) if w else None
        self.red_label = "max" if wl.kind == "maxpool" else "+"
        self._memo: dict = {}
        # the functional relations as piecewise quasi-affine functions, evaluated at
        # one point per query (seed paragraph 92: a functional relation names the
        # partner directly): M -> X, M -> W, and [O -> X] -> M (the product reading an
        # input element for a given output)
        self._funcs = {}
        for role, rel in self.access.items():
            if rel is not None:
                self._funcs[role] = _function(rel)
        self._funcs["mult_of"] = _function(self.reduce.range_product(
            self.access["x"]).reverse())
        if self.access["w"] is not None:
            self._funcs["mult_of_w"] = _function(self.reduce.range_product(
                self.access["w"]).reverse())

    def _cached(self, key, make):
        """Queries are memoised: the search asks the same ones on every backtrack."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def _accesses(self) -> tuple[str, str | None]:
        wl, dims = self.workload, ",".join(self.workload.dims)
        if wl.kind in ("dense", "bmm"):
            b = "b," if wl.kind == "bmm" else ""
            return (f"{{ M[{dims}] -> X[{b}m,c] }}", f"{{ M[{dims}] -> W[{b}c,k] }}")
        sh, sw = wl.param("stride")
        dh, dw = wl.param("dilation")
        cg, kg, kw_size = wl.size("c"), wl.size("k"), wl.param("kernel")[1]
        if "t" in wl.dims:      # the fused taps: kh, kw recovered from t
            body = (f"exists (kh, kw : t = {kw_size}*kh + kw and 0 <= kw < {kw_size} and "
                    f"h = {sh}*oh + {dh}*kh and w = {sw}*ow + {dw}*kw) and ci = {cg}*g + c")
            tap = "t"
        else:
            body = f"h = {sh}*oh + {dh}*kh and w = {sw}*ow + {dw}*kw and ci = {cg}*g + c"
            tap = "kh,kw"
        x = f"{{ M[{dims}] -> X[n,h,w,ci] : {body} }}"
        if wl.kind.endswith("pool"):
            return x, None
        w = f"{{ M[{dims}] -> W[{tap},c,co] : co = {kg}*g + k }}"
        return x, w

    # -- lazy queries ------------------------------------------------------------
    def label(self, node: Node) -> Label:
        if node.kind == "M":
            return Label("*")
        if node.kind == "O":
            return Label(self.red_label)
        if node.kind == "C":
            return Label("const", value=node.coords[0])
        return Label("input", node.kind.lower())

    def contains(self, node: Node) -> bool:
        space = {"M": self.mults, "O": self.outputs}.get(node.kind)
        if space is None:
            return node.kind in ("X", "W", "C")
        pt = isl.Point.zero(space.get_space())
        for i, v in enumerate(node.coords):
            pt = pt.set_coordinate_val(isl.dim_type.set, i, v)
        return isl.Set.from_point(pt).is_subset(space)

    def is_reduction(self, node: Node) -> bool:
        """Reductions carry the self-edge (and only they)."""
        return node.kind == "O"

    def operands(self, mult: Node) -> dict:
        """The inputs of a product instance: ``{"x": X element, "w": W element}`` (a
        pool's weight is the constant 1, the neutral element of the product)."""
        return self._cached(("operands", mult.coords), lambda: self._operands(mult))

    def _operands(self, mult: Node) -> dict:
        out = {}
        for role, rel in self.access.items():
            if rel is None:
                out[role] = Node("C", (1,))
                continue
            coords = _eval(self._funcs[role], mult.coords)
            if coords is None:
                raise KeyError(f"{mult} is not a product of {self.workload.describe()}")
            out[role] = Node(rel.get_tuple_name(isl.dim_type.out), coords, mult.coords)
        return out

    def readers(self, element: Node) -> isl.Set:
        """The products reading input `element` (symbolic: an isl set)."""
        rel = self.access["x" if element.kind == "X" else "w"]
        return isl.Set(f"{{ {_tuple(element.kind, element.coords)} }}").apply(rel.reverse())

    def constants(self, out: Node, label: Label) -> list:
        """A layer's reductions start from their neutral element implicitly."""
        return []

    def common_reader(self, a: Node, b: Node) -> Node | None:
        """The product reading both input elements (at most one), or None."""
        if "C" in (a.kind, b.kind):
            return None
        pts = _points(self.readers(a).intersect(self.readers(b)))
        return Node("M", pts[0]) if len(pts) == 1 else None

    def terms_set(self, out: Node) -> isl.Set:
        """The products reduced into output `out` (symbolic)."""
        return isl.Set(f"{{ {_tuple('O', out.coords)} }}").apply(self.reduce.reverse())

    def reduction_of(self, mult: Node) -> Node:
        return Node("O", tuple(v for d, v in zip(self.dims, mult.coords)
                               if d not in self.workload.reduction))

    def has_edge(self, src: Node, dst: Node) -> bool:
        if dst.kind == "O" and src.kind == "M":
            return self.reduction_of(src) == dst and self._cached(
                ("contains", src), lambda: self.contains(src))
        if dst.kind == "M" and src.kind in ("X", "W", "C"):
            return src in self.operands(dst).values()
        return src == dst and dst.kind == "O"

    def parallel(self, a: Node, b: Node) -> bool:
        """All output elements of a layer are mutually parallel."""
        return a.kind == b.kind == "O" and a != b

    def mult_of(self, out: Node, element: Node) -> Node | None:
        """The product that reads `element` and is reduced into `out` (at most one: the
        propagator of seed 000 paragraph 92 on a functional relation), or None."""
        if element.kind == "C":
            return None
        return self._cached(("mult_of", out, element),
                            lambda: self._mult_of(out, element))

    def _mult_of(self, out: Node, element: Node) -> Node | None:
        func = self._funcs["mult_of" if element.kind == "X" else "mult_of_w"]
        coords = _eval(func, out.coords + element.coords)
        return Node("M", coords) if coords is not None else None

    def point(self, node: Node) -> dict:
        """The coordinates (dim -> value) the search orders and shapes by."""
        if node.kind == "O":
            return dict(zip(self.workload.out_dims, node.coords))
        if node.kind == "M":
            return dict(zip(self.dims, node.coords))
        return dict(zip(self.dims, node.via)) if node.via is not None else {}

    # -- the slices the search instantiates ---------------------------------------
    def _slice(self, space: isl.Set, name: str, names: tuple, base: dict, vary: tuple,
               bound: int, order: tuple) -> list[tuple]:
        cons = []
        for d in names:
            v = base.get(d, 0)
            if d in vary:
                cons.append(f"{v} <= {d} < {v + bound}")
            else:
                cons.append(f"{d} = {v}")
        s = space.intersect(isl.Set(f"{{ {name}[{','.join(names)}] : "
                                    f"{' and '.join(cons)} }}"))
        pts = _points(s)
        idx = [names.index(d) for d in order if d in names]
        return sorted(pts, key=lambda p: tuple(p[i] for i in idx))

    def along(self, origin: Node, dims: tuple, bound: int) -> list[Node]:
        """Outputs that differ from `origin` only in `dims`, each within `bound` of it,
        lexicographic (the last of `dims` fastest)."""
        return self._cached(("along", origin, dims, bound),
                            lambda: self._along(origin, dims, bound))

    def _along(self, origin: Node, dims: tuple, bound: int) -> list[Node]:
        names = self.workload.out_dims
        pts = self._slice(self.outputs, "O", names, dict(zip(names, origin.coords)),
                          dims, bound, dims)
        return [Node("O", p) for p in pts]

    def terms(self, out: Node, dims: tuple, bound: int) -> list[Node]:
        """The products of `out` that vary only in the reduction `dims` (the others at
        0, the fixed origin), lexicographic in `dims`."""
        return self._cached(("terms", out, dims, bound),
                            lambda: self._terms(out, dims, bound))

    def _terms(self, out: Node, dims: tuple, bound: int) -> list[Node]:
        base = dict(zip(self.workload.out_dims, out.coords))
        pts = self._slice(self.mults, "M", self.dims, base, dims, bound, dims)
        return [Node("M", p) for p in pts]

    def row_inputs(self, out: Node, dims: tuple, bound: int) -> list[Node]:
        """Input elements read at `out`'s position by products that vary in `dims`
        (which may include ``g``: whole groups side by side), lexicographic in `dims`;
        the first output channel of each group stands for the group."""
        return self._cached(("row_inputs", out, dims, bound),
                            lambda: self._row_inputs(out, dims, bound))

    def _row_inputs(self, out: Node, dims: tuple, bound: int) -> list[Node]:
        base = dict(zip(self.workload.out_dims, out.coords))
        base["k"] = 0
        seen, out_nodes = set(), []
        for p in self._slice(self.mults, "M", self.dims, base, dims, bound, dims):
            x = self.operands(Node("M", p))["x"]
            if x not in seen:
                seen.add(x)
                out_nodes.append(x)
        return out_nodes

    def origin(self) -> Node:
        return Node("O", (0,) * len(self.workload.out_dims))


def product_box(sizes: dict, dims: tuple, bound: int):
    """Lexicographic points of the box ``[0, min(size, bound))`` over `dims`."""
    return itertools.product(*(range(min(sizes[d], bound)) for d in dims))
