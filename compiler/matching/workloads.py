"""Layers as matcher workloads: their dimensions, sizes, which are summed over, and the
affine access functions the symbolic dataflow graph (polyhedral.py) is built from.

Dimension names (docs/matching.md): a convolution has ``n g k oh ow c kh kw`` (``k``
the output channel and ``c`` the input channel within group ``g``), or with the taps
linearised (:meth:`Workload.fused`) ``n g k oh ow c t``, ``t = kh*KW + kw``. A dense
layer ``[M,K]x[K,N]`` has ``m`` (stream), ``k`` (the N output columns) and ``c`` (the
reduced K); a batched product adds ``b``. Pooling is a depthwise reduction: ``g`` is
the channel, ``k`` and ``c`` have size 1, and the weight is the neutral element 1 of
the product (seed 000: a dummy operand), the reduction ``max`` or ``+``."""

from __future__ import annotations

import math
from dataclasses import dataclass

from systolica.compiler.errors import CompileError


@dataclass(frozen=True)
class Workload:
    """``dims`` outermost first with ``sizes``; ``reduction`` the dims summed over;
    ``kind`` ``conv``, ``dense``, ``bmm``, ``maxpool``, ``avgpool``; ``params`` the
    geometry (stride, dilation, pads, kernel, input size) as sorted pairs."""
    kind: str
    dims: tuple[str, ...]
    sizes: tuple[int, ...]
    reduction: frozenset
    params: tuple = ()

    def __post_init__(self):
        if len(self.dims) != len(self.sizes):
            raise CompileError(f"workload {self.kind}: {len(self.dims)} dims, "
                               f"{len(self.sizes)} sizes")
        for d, s in zip(self.dims, self.sizes):
            if not isinstance(s, int) or s < 1:
                raise CompileError(f"workload {self.kind}: dim {d} has size {s!r}, "
                                   f"expected a positive int")

    @property
    def key(self) -> tuple:
        """Hashable identity of the shape: the cache key (with the chip's)."""
        return (self.kind, self.dims, self.sizes, self.params)

    def size(self, dim: str) -> int:
        return self.sizes[self.dims.index(dim)] if dim in self.dims else 1

    def param(self, name: str):
        return dict(self.params)[name]

    @property
    def out_dims(self) -> tuple[str, ...]:
        return tuple(d for d in self.dims if d not in self.reduction)

    @property
    def red_dims(self) -> tuple[str, ...]:
        return tuple(d for d in self.dims if d in self.reduction)

    @property
    def macs(self) -> int:
        return math.prod(self.sizes)

    @property
    def stencil(self) -> bool:
        return "kh" in self.dims

    def fused(self) -> Workload:
        """The seed's relaxation of the stencil dims: ``kh, kw`` fused into ``t``."""
        if not self.stencil:
            return self
        dims, sizes = [], []
        for d, s in zip(self.dims, self.sizes):
            if d == "kh":
                dims.append("t")
                sizes.append(s * self.size("kw"))
            elif d != "kw":
                dims.append(d)
                sizes.append(s)
        return Workload(self.kind, tuple(dims), tuple(sizes),
                        (self.reduction - {"kh", "kw"}) | {"t"}, self.params)

    def describe(self) -> str:
        return f"{self.kind} " + " ".join(f"{d}{s}" for d, s in zip(self.dims, self.sizes))


def _pair(v, what: str) -> tuple[int, int]:
    v = (v, v) if isinstance(v, int) else tuple(v)
    if len(v) != 2 or any(not isinstance(x, int) or x < 1 for x in v):
        raise CompileError(f"conv workload: {what} must be one or two positive ints, not {v!r}")
    return v


def conv2d(*, n: int = 1, h: int, w: int, cin: int, cout: int, kernel=(1, 1), stride=1,
           dilation=1, pads=(0, 0, 0, 0), groups: int = 1, kind: str = "conv") -> Workload:
    """A convolution over an NHWC ``(n, h, w, cin)`` map, weights
    ``[KH, KW, cin/groups, cout]``; pooling (`kind` ``maxpool``/``avgpool``) is the
    depthwise case with ``groups = cin = cout`` and unit weights."""
    kh, kw = _pair(kernel, "kernel")
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    pads = (pads,) * 4 if isinstance(pads, int) else tuple(pads)
    if groups < 1 or cin % groups or cout % groups:
        raise CompileError(f"conv workload: groups={groups} must divide cin={cin} and "
                           f"cout={cout}")
    hp, wp = h + pads[0] + pads[2], w + pads[1] + pads[3]
    oh = (hp - dh * (kh - 1) - 1) // sh + 1
    ow = (wp - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise CompileError(f"conv workload: a {kh}x{kw} kernel (dilation {dh}x{dw}) does "
                           f"not fit the padded {hp}x{wp} input")
    params = (("dilation", (dh, dw)), ("input", (hp, wp)), ("kernel", (kh, kw)),
              ("pads", pads), ("stride", (sh, sw)))
    return Workload(kind, ("n", "g", "k", "oh", "ow", "c", "kh", "kw"),
                    (n, groups, cout // groups, oh, ow, cin // groups, kh, kw),
                    frozenset({"c", "kh", "kw"}), params)


def conv1d(*, n: int = 1, length: int, cin: int, cout: int, kernel: int = 3, stride=1,
           pads=(0, 0), groups: int = 1) -> Workload:
    """A 1-D convolution: a 2-D one over a ``(n, 1, length, cin)`` map."""
    return conv2d(n=n, h=1, w=length, cin=cin, cout=cout, kernel=(1, kernel),
                  stride=(1, stride), pads=(0, pads[0], 0, pads[1]), groups=groups)


def pool2d(*, n: int = 1, h: int, w: int, channels: int, kernel=(2, 2), stride=None,
           pads=(0, 0, 0, 0), op: str = "max") -> Workload:
    return conv2d(n=n, h=h, w=w, cin=channels, cout=channels, kernel=kernel,
                  stride=kernel if stride is None else stride, pads=pads,
                  groups=channels, kind=f"{op}pool")


def dense(*, m: int, k: int, n: int) -> Workload:
    """``[m, k] x [k, n]``: dims ``m`` (stream), ``k`` (the n output columns), ``c``
    (the reduced k)."""
    return Workload("dense", ("m", "k", "c"), (m, n, k), frozenset({"c"}))


def bmm(*, b: int, m: int, k: int, n: int) -> Workload:
    """``[b, m, k] x [b, k, n]``: a dense product per batch entry ``b``."""
    return Workload("bmm", ("b", "m", "k", "c"), (b, m, n, k), frozenset({"c"}))
