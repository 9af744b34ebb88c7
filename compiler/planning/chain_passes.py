"""Chained layers in passes, with or without an overlap buffer (seed 001).

A chain of convolution or pooling layers runs through the CBUF in passes: each pass
produces a band of the last layer's output rows, and every layer before it computes
the rows of its own output that band needs, from the network input in DRAM for the
first layer and from the previous layer's rows in the CBUF after that. Neighbouring
bands need overlapping rows of every intermediate output (the halo). Two ways to get
them:

* baseline: every pass computes all the rows it needs, so the halo rows are computed
  again and the first layer re-reads their input from DRAM;
* overlap buffer (UBUF): a layer computes each output row once; the rows a later pass
  needs are *cropped* into the UBUF when they are computed and *fetched* back when
  that pass runs. Only the first layer's input halo is still read again from DRAM
  (as in the seed), and it is smaller: it covers the first layer's window over its
  new rows only, not over the whole chain's halo.

:func:`plan_passes` gives, per pass and layer, which rows are computed, which input rows they
read, which of those come from the UBUF, and which computed rows go there. Rows are
along the cut axis of each layer's own output (or, for ``reads``, its input); the
other axes are whole. Seed 001's worked example (two 16-row layers, 7x7 pad 3 then
5x5 pad 2, two passes): without the UBUF both passes are ``conv0(dram 13 -> 10)``,
``conv1(10 -> 8)``; with it pass 1 is ``conv0(dram 9 -> 6)``, ``fetch 4 + conv1(6 + 4
-> 8)`` after pass 0 cropped 4 rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from systolica.compiler.errors import CompileError
from systolica.compiler.planning.tiling import output_size

Rows = tuple[int, int]          # [lo, hi)


@dataclass(frozen=True)
class Axis:
    """One layer's window along the cut axis."""
    kernel: int
    stride: int = 1
    dilation: int = 1
    pad_before: int = 0
    pad_after: int = 0


@dataclass(frozen=True)
class Step:
    """What layer ``layer`` does in one pass. ``compute``: its output rows computed in
    this pass (None: none); ``reads``: the input rows those outputs' windows touch;
    ``fetch``: the part of ``reads`` taken from the UBUF (computed by the previous
    layer in earlier passes); ``crop``: computed rows kept in the UBUF for later
    passes."""
    layer: int
    compute: Rows | None
    reads: Rows | None
    fetch: Rows | None = None
    crop: Rows | None = None

    @property
    def computed(self) -> int:
        return _count(self.compute)

    @property
    def read(self) -> int:
        return _count(self.reads)

    @property
    def fetched(self) -> int:
        return _count(self.fetch)

    @property
    def cropped(self) -> int:
        return _count(self.crop)


def sizes(in_size: int, layers: list[Axis]) -> list[int]:
    """Rows of the input and of every layer's output along the cut axis."""
    out = [in_size]
    for k, ax in enumerate(layers):
        try:
            out.append(output_size(out[-1], ax.kernel, ax.stride, ax.dilation,
                                   ax.pad_before, ax.pad_after))
        except CompileError as e:
            raise CompileError(f"chain layer {k}: {e}") from None
    return out


def plan_passes(in_size: int, layers: list[Axis], outputs_per_pass: int, *,
         ubuf: bool | Sequence[bool]) -> list[list[Step]]:
    """The chain's passes (each a list of steps, first layer first), the last layer's
    output cut into bands of ``outputs_per_pass`` rows. ``ubuf``: whether each layer's
    output rows are kept in the UBUF for later passes (one flag for all, or one per
    layer); a layer whose output is not kept computes its halo rows again."""
    if not layers:
        raise CompileError("a chain needs at least one layer")
    if not isinstance(outputs_per_pass, int) or outputs_per_pass < 1:
        raise CompileError(f"outputs per pass must be a positive integer, not "
                           f"{outputs_per_pass!r}")
    size = sizes(in_size, layers)
    keep = [bool(ubuf)] * len(layers) if isinstance(ubuf, bool) else [bool(u) for u in ubuf]
    if len(keep) != len(layers):
        raise CompileError(f"a chain of {len(layers)} layers needs {len(layers)} keep "
                           f"flags, not {len(keep)}")
    done = [0] * len(layers)            # rows of each output computed so far (a prefix)
    passes: list[list[Step]] = []
    for lo in range(0, size[-1], outputs_per_pass):
        need: Rows | None = (lo, min(lo + outputs_per_pass, size[-1]))
        steps: list[Step] = []
        for k in reversed(range(len(layers))):
            compute = need
            if keep[k] and compute is not None and compute[0] < done[k]:
                compute = (done[k], compute[1]) if compute[1] > done[k] else None
            reads = _reads(size[k], layers[k], compute)
            fetch = None
            if k > 0 and keep[k - 1] and reads is not None and reads[0] < done[k - 1]:
                fetch = (reads[0], min(reads[1], done[k - 1]))
            steps.append(Step(k, compute, reads, fetch))
            if compute is not None:
                # the monotone bands make every computed set a prefix
                done[k] = max(done[k], compute[1])
            need = reads
        passes.append(steps[::-1])
    return _with_crops(passes) if any(keep) else passes


def _reads(in_size: int, ax: Axis, compute: Rows | None) -> Rows | None:
    """The input band the windows of outputs `compute` span, clipped to the input
    (None: they read only padding). A band, not the hull of the taps that land
    inside: with dilation the hull can skip an edge row that the next band's windows
    read, and the rows a layer has computed would then not be a prefix."""
    if compute is None:
        return None
    lo = ax.stride * compute[0] - ax.pad_before
    hi = ax.stride * (compute[1] - 1) + (ax.kernel - 1) * ax.dilation - ax.pad_before + 1
    lo, hi = max(lo, 0), min(hi, in_size)
    return (lo, hi) if lo < hi else None


def _with_crops(passes: list[list[Step]]) -> list[list[Step]]:
    """Each layer crops, in the pass that computes them, the rows a later pass
    fetches."""
    out = []
    for p, steps in enumerate(passes):
        row = []
        for step in steps:
            crop = None
            if step.compute is not None:
                for later in passes[p + 1:]:
                    if step.layer + 1 >= len(later):
                        continue
                    f = later[step.layer + 1].fetch
                    if f is None:
                        continue
                    lo, hi = max(f[0], step.compute[0]), min(f[1], step.compute[1])
                    if lo < hi:
                        crop = (lo, hi) if crop is None else (min(crop[0], lo),
                                                               max(crop[1], hi))
            row.append(Step(step.layer, step.compute, step.reads, step.fetch, crop))
        out.append(row)
    return out


def ubuf_peak_rows(passes: list[list[Step]]) -> list[int]:
    """Per layer, the most of its rows the UBUF holds at once (cropped, not yet
    fetched for the last time), in rows of that layer's output."""
    layers = len(passes[0])
    peak = [0] * layers
    for k in range(layers):
        live: list[Rows] = []
        for p, steps in enumerate(passes):
            if steps[k].crop is not None:
                live.append(steps[k].crop)
            # rows no later pass fetches are free after this pass
            later = [s[k + 1].fetch for s in passes[p + 1:]
                     if k + 1 < layers and s[k + 1].fetch is not None]
            peak[k] = max(peak[k], sum(_count(r) for r in live))
            live = [r for r in live if any(f[0] < r[1] and r[0] < f[1] for f in later)]
    return peak


def listing(passes: list[list[Step]], names: list[str] | None = None,
            widths: list[int] | None = None) -> str:
    """The passes as the seed writes them: ``conv0(dram 13 -> 10)``, crops and
    fetches, one line per step. With ``widths`` (the input's and every layer's output
    width) each band shows as rows x width, and where each layer writes:
    ``conv0(dram 13x16 -> cbuf 10x16)``."""
    lines = []
    last = len(passes[0]) - 1 if passes else 0

    def band(rows: int, boundary: int) -> str:
        return f"{rows}x{widths[boundary]}" if widths else f"{rows}"

    for p, steps in enumerate(passes):
        for s in steps:
            name = names[s.layer] if names else f"layer{s.layer}"
            if s.compute is None:
                lines.append(f"pass {p}: {name} computes nothing (all rows kept)")
                continue
            src = "dram" if s.layer == 0 else "cbuf"
            fetched = s.fetched
            inputs = (f"{src} {band(s.read - fetched, s.layer)} + ubuf "
                      f"{band(fetched, s.layer)}" if fetched
                      else f"{src} {band(s.read, s.layer)}")
            out = band(s.computed, s.layer + 1)
            if widths:
                out = f"{'dram' if s.layer == last else 'cbuf'} {out}"
            text = f"pass {p}: {'fetch+' if fetched else ''}{name}({inputs} -> {out})"
            if s.crop is not None:
                text += f", crop {band(s.cropped, s.layer + 1)} -> ubuf"
            lines.append(text)
    return "\n".join(lines)


def _count(rows: Rows | None) -> int:
    return 0 if rows is None else rows[1] - rows[0]


def row_chunks(rows: tuple[int, int], per: int) -> list[tuple[int, int]]:
    """Rows ``[a, b)`` in chunks of at most `per`."""
    return [(a, min(a + per, rows[1])) for a in range(rows[0], rows[1], per)]
