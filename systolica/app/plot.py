"""The unit occupancy plot: one track per unit over the run, a bar per slice of
cycles as high as the unit was busy in it, coloured by the layer it worked for; the
layers' shares of the run as bands behind. A self-contained SVG (no plotting
library), every bar with a tooltip of its figures."""

from __future__ import annotations

from html import escape
from pathlib import Path

from systolica import files
from systolica.compiler.backend import unit_use

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
           "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
WIDTH, LEFT, RIGHT, TRACK, GAP, TOP = 1000, 70, 30, 40, 10, 72


def occupancy_svg(compiled, title: str = "", bins: int = 400) -> str:
    """The plot of a compiled program (its predicted cycles: the RTL's, once checked)."""
    cfg, cycles = compiled.cfg, max(compiled.predicted_cycles, 1)
    busy = unit_use.intervals(cfg, compiled.program, compiled.layer_of)
    units = unit_use.units(busy)
    width = -(-cycles // bins)                  # cycles per bin
    bins = -(-cycles // width)
    plot_w = WIDTH - LEFT - RIGHT
    x = lambda c: LEFT + plot_w * c / cycles    # noqa: E731
    names = {rec.index: rec.name for rec in compiled.layers}
    colour = {rec.index: PALETTE[n % len(PALETTE)] for n, rec in enumerate(compiled.layers)}
    height = TOP + len(units) * (TRACK + GAP) + 50 + 18 * (-(-len(names) // 5))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<text x="{LEFT}" y="20" font-size="14" font-weight="bold">'
           f'{escape(title or "unit occupancy")}</text>',
           f'<text x="{LEFT}" y="38">{cycles:,} cycles on chip {escape(cfg.name)}; a bar is '
           f'{width} cycle{"s" if width > 1 else ""}, as high as the unit was busy</text>']
    bottom = TOP + len(units) * (TRACK + GAP) - GAP
    for n, rec in enumerate(compiled.layers):         # the layers' shares, behind
        x0, x1 = x(rec.start_cycle), x(max(rec.end_cycle, rec.start_cycle))
        if x1 > x0:
            out.append(f'<rect x="{x0:.1f}" y="{TOP - 6}" width="{x1 - x0:.1f}" '
                       f'height="{bottom - TOP + 6}" fill="{"#f4f4f4" if n % 2 else "#e9e9e9"}">'
                       f'<title>{escape(rec.name)}: cycles {rec.start_cycle}..'
                       f'{rec.end_cycle}</title></rect>')
            if x1 - x0 > 7 * len(rec.name):             # named where it fits
                out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{TOP - 10}" '
                           f'text-anchor="middle">{escape(rec.name)}</text>')
    for t, unit in enumerate(units):
        y0 = TOP + t * (TRACK + GAP)
        out.append(f'<text x="{LEFT - 8}" y="{y0 + TRACK / 2 + 4}" text-anchor="end">'
                   f'{unit}</text>')
        for k, per_layer in enumerate(unit_use.binned(busy, unit, width, bins)):
            lo, hi = k * width, min((k + 1) * width, cycles)
            y = y0 + TRACK
            for layer, n in sorted(per_layer.items()):
                h = TRACK * n / (hi - lo)
                y -= h
                out.append(f'<rect x="{x(lo):.2f}" y="{y:.2f}" width="{x(hi) - x(lo):.2f}" '
                           f'height="{h:.2f}" fill="{colour.get(layer, "#888")}">'
                           f'<title>{unit} cycles {lo}..{hi - 1}: busy {n} for '
                           f'{escape(names.get(layer, str(layer)))}</title></rect>')
    for c in range(0, 5):                               # the cycle axis
        cyc = cycles * c // 4
        out.append(f'<text x="{x(cyc):.1f}" y="{bottom + 16}" text-anchor="middle">'
                   f'{cyc:,}</text>')
    for n, rec in enumerate(compiled.layers):           # the legend
        lx, ly = LEFT + (n % 5) * 180, bottom + 40 + 18 * (n // 5)
        out.append(f'<rect x="{lx}" y="{ly - 10}" width="12" height="12" '
                   f'fill="{colour[rec.index]}"/><text x="{lx + 16}" y="{ly}">'
                   f'{escape(rec.name[:24])}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_occupancy(path: str | Path, compiled, title: str = "") -> None:
    files.write_atomic(path, occupancy_svg(compiled, title))
