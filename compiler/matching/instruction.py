"""The instruction dataflow graph of the chip's MATMUL (seed 000): a stream of input
rows ``x[s, p]`` (``p < R``) times the weights ``w[p, j]`` (``R x C``), one commutative
reduction per output ``out[s, j]`` (a self-edge), ``R`` products each; all outputs
mutually parallel (a star of spatial edges around ``out[0, 0]``).

The search uses a reduced instance (seed paragraph 113: the graph may hold a subset of
the outputs, the invocation found is generalised): every row, but only the columns
``0, 1, C-1`` and the stream rows ``0, 1`` (``out[1, j]`` for ``j > 0`` would follow
from the others). Each node's ``inst`` attribute is its ``(s, j, p)`` position."""

from __future__ import annotations

from systolica.arch.config import ChipConfig
from systolica.compiler.matching.dataflow import DataflowGraph


def matmul_graph(rows: int, cols, stream, *, outputs=None) -> DataflowGraph:
    """The MATMUL over the columns `cols` and stream rows `stream` (index lists), all
    `rows` rows; `outputs` (``(s, j)`` pairs) narrows the outputs held."""
    cols, stream = list(cols), list(stream)
    outputs = list(outputs) if outputs is not None else \
        [(s, j) for s in stream for j in cols]
    g = DataflowGraph()
    for s in stream:
        for p in range(rows):
            g.input(("x", s, p), "x", role="x", inst=(s, None, p))
    for p in range(rows):
        for j in cols:
            g.input(("w", p, j), "w", role="w", inst=(None, j, p))
    for s, j in outputs:
        prods = [g.op(("*", s, j, p), "*", (("x", s, p), ("w", p, j)), role="mul",
                      inst=(s, j, p)) for p in range(rows)]
        g.op(("+", s, j), "+", prods, reduction=True, role="out", inst=(s, j, None))
    outs = [("+", s, j) for s, j in outputs]
    g.star(outs[0], outs[1:])
    for n in list(g.labels):        # drop inputs no output of the subset reads
        if not g.succs(n) and not g.labels[n].is_op:
            del g.labels[n], g.attrs[n]
    return g


def instruction_graph(cfg: ChipConfig, *, full: bool = False) -> DataflowGraph:
    """The reduced MATMUL of `cfg` the search embeds (`full`: every column, two stream
    rows)."""
    r, c = cfg.rows, cfg.cols
    if full:
        return matmul_graph(r, range(c), range(2))
    cols = sorted({0, min(1, c - 1), c - 1})
    return matmul_graph(r, cols, range(2),
                        outputs=[(0, j) for j in cols] + [(1, 0)])
