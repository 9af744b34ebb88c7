"""What the code generator can lower: docs/matching.md's realisability table, in one
place. It is the input constraint set of the problem (the portfolio's assets are built
from it: the feeder walks only these dims) and the final check on a generalised
mapping (whole channels and groups, tap tables)."""

from __future__ import annotations

import math

from systolica.compiler.errors import CompileError
from systolica.compiler.matching.csp import Asset, Options
from systolica.compiler.matching.mapping import Axis, Mapping
from systolica.compiler.matching.workloads import Workload

#: Per layout, the workload dims the rows may walk (outermost first). ``g`` on the
#: rows goes with ``g`` on the columns (block-diagonal: whole groups).
ROWS = {"blocks": (("c",), ("g", "c")),
        "replicated": (("t", "c"), ("kh", "kw", "c"))}
COLS = (("k",), ("g", "k"))
STREAM = {"conv": ("oh", "ow"), "dense": ("m",), "bmm": ("m",)}
#: Per-layer tap tables (docs/cnn.md): distinct row packing patterns a layer may use.
TAP_TABLES = 7


def assets(workload: Workload, rows: int, cols: int, rung: Options) -> list[Asset]:
    """The portfolio for `workload` on an ``rows x cols`` array at relaxation `rung`:
    one asset per mapping of instruction dims (rows, columns, stream) to workload dims
    the table allows, reduction dims only on rows (``g`` beside them for whole
    groups); the replicated layouts need inputs read by several rows."""
    kind = "conv" if workload.kind.endswith("pool") or workload.kind == "conv" \
        else workload.kind
    if kind not in STREAM:
        raise CompileError(f"matcher: no instruction mapping is defined for a "
                           f"{workload.kind!r} workload; expected conv, maxpool, avgpool, "
                           f"dense or bmm")
    stream = STREAM[kind]
    pool = workload.kind.endswith("pool")
    layouts = ["blocks"] + (["replicated"] if rung.repeat_inputs and kind == "conv"
                            and not pool else [])
    groups, kg = workload.size("g"), workload.size("k")
    out = []
    for layout in layouts:
        for row in ROWS[layout]:
            if kind != "conv" and row != ("c",):
                continue
            if "g" in row:
                cg = workload.size("c")
                gcols = min(groups, cols // kg, rows // cg)
                if groups < 2 or gcols < 2:
                    continue
                out.append(Asset(row, ("g", "k"), stream, layout,
                                 (("g", gcols), ("k", kg)), (("g", gcols),)))
                continue
            if pool:
                continue
            if layout == "replicated" and workload.size("c") * 2 > rows:
                continue                    # no room for a second tap
            out.append(Asset(row, ("k",), stream, layout))
    return out


def tap_patterns(mapping: Mapping, workload: Workload) -> int:
    """Distinct tap patterns the mapping's row partitions read over the layer."""
    kh, kw = workload.param("kernel") if workload.stencil else (1, 1)
    if "t" in mapping.dims("rows"):
        te = mapping.extent("t")
        pats = set()
        for start in range(0, kh * kw, te):
            taps = [divmod(t, kw) for t in range(start, min(start + te, kh * kw))]
            pats.add(tuple((a - taps[0][0], b - taps[0][1]) for a, b in taps))
        return len(pats)
    eh, ew = mapping.extent("kh"), mapping.extent("kw")
    return len({(min(eh, kh - i), min(ew, kw - j))
                for i in range(0, kh, eh) for j in range(0, kw, ew)})


def _within(dims: tuple[str, ...], patterns) -> bool:
    """`dims` is one of `patterns` with some of its dims left out (an axis of extent 1
    is dropped from a mapping)."""
    return any(all(d in p for d in dims) and
               [p.index(d) for d in dims] == sorted(p.index(d) for d in dims)
               for p in patterns)


def check(mapping: Mapping, workload: Workload, rows: int, cols: int) -> str | None:
    """Why the code generator cannot lower `mapping` (None: it can)."""
    kind = "conv" if workload.kind.endswith("pool") else workload.kind
    if mapping.layout not in ROWS:
        return f"layout {mapping.layout!r} is neither 'blocks' nor 'replicated'"
    if set(mapping.dims("stream")) - set(STREAM.get(kind, ())):
        return f"the stream walks {' and '.join(STREAM.get(kind, ()))} only"
    if not _within(mapping.dims("cols"), COLS):
        return "the columns hold output channels (k, or g x k)"
    if not _within(mapping.dims("rows"), ROWS[mapping.layout]):
        return (f"in the {mapping.layout} layout the rows hold "
                f"{' or '.join(' x '.join(p) for p in ROWS[mapping.layout])}")
    rprod = math.prod(a.extent for a in mapping.rows)
    cprod = math.prod(a.extent for a in mapping.cols)
    if rprod > rows or cprod > cols:
        return f"{rprod} rows x {cprod} columns exceed the {rows}x{cols} array"
    if any(a.dim not in ("c", "kh", "kw", "t", "g") for a in mapping.rows):
        return "a non-reduction dim on the rows"
    g_rows, g_cols = mapping.extent("g") if "g" in mapping.dims("rows") else 1, \
        mapping.extent("g") if "g" in mapping.dims("cols") else 1
    if "g" in mapping.dims("rows") or "g" in mapping.dims("cols"):
        if mapping.dims("rows").count("g") and mapping.dims("cols").count("g"):
            g_rows = next(a.extent for a in mapping.rows if a.dim == "g")
            g_cols = next(a.extent for a in mapping.cols if a.dim == "g")
        if g_rows != g_cols:
            return f"{g_rows} groups on the rows, {g_cols} on the columns"
        if mapping.extent("c") != workload.size("c") or \
                mapping.extent("k") != workload.size("k"):
            return "block-diagonal packing needs whole groups"
    if mapping.layout == "replicated":
        if mapping.extent("c") != workload.size("c"):
            return "the replicated layout needs every channel of a pixel in a word"
        if tap_patterns(mapping, workload) > TAP_TABLES:
            return f"more than {TAP_TABLES} tap patterns"
    return None


def axes(dims, extents: dict) -> tuple[Axis, ...]:
    return tuple(Axis(d, extents[d]) for d in dims if extents.get(d, 1) > 1)
