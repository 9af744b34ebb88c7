"""A sweep's report: the Pareto front of cycles (and energy) against the chip's cost,
and per-layer MAC utilisation heatmaps (layers x chips), as one self-contained HTML
file with SVG plots (matplotlib), and the Pareto plot as PNG on request.

The cost is the synthesised area (LUTs) where the sweep ran with ``--area``, else the
array's MACs and the on-chip SRAM bytes (docs/sweeps.md, "The report")."""

from __future__ import annotations

import html as _html
import io
from collections.abc import Sequence
from pathlib import Path

#: Costs against which a front is drawn, in order of preference: (column, label).
COSTS = (("luts", "LUTs (yosys synth_ecp5)"), ("chip_macs", "array MACs"),
         ("chip_sram_bytes", "on-chip SRAM bytes"))
#: What is minimised against the cost: (column, label).
GOALS = (("cycles", "cycles"), ("energy_j", "energy (J)"))


def pareto_front(rows: Sequence[dict], x: str, y: str) -> list[int]:
    """Indices (into `rows`) of the points no other point beats: none has ``x`` and
    ``y`` both at most as large and one smaller. Rows without both values are left
    out; of points with equal values all stay. In order of ``x``."""
    have = [i for i, r in enumerate(rows) if r.get(x) is not None and r.get(y) is not None]
    front = []
    for i in have:
        xi, yi = rows[i][x], rows[i][y]
        if not any(rows[j][x] <= xi and rows[j][y] <= yi
                   and (rows[j][x] < xi or rows[j][y] < yi) for j in have):
            front.append(i)
    return sorted(front, key=lambda i: (rows[i][x], rows[i][y]))


def _costs(rows: Sequence[dict]) -> list[tuple[str, str]]:
    """The cost axes the rows allow: the area alone when synthesised, else MACs and SRAM."""
    if any(r.get("luts") is not None for r in rows):
        return [COSTS[0]]
    return [c for c in COSTS[1:] if any(r.get(c[0]) is not None for r in rows)]


def _goals(rows: Sequence[dict]) -> list[tuple[str, str]]:
    return [g for g in GOALS if any(r.get(g[0]) is not None for r in rows)]


def _by_model(points: Sequence[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for p in points:
        if p.get("status") == "ok":
            out.setdefault(p["model"], []).append(p)
    return out


def pareto_figure(title: str, points: Sequence[dict]):
    """One panel per (model, goal, cost): every point, the front joined and labelled."""
    from matplotlib.figure import Figure
    models = _by_model(points)
    panels = [(m, g, c) for m, rows in models.items() for g in _goals(rows)
              for c in _costs(rows)]
    cols = min(2, max(1, len(panels)))
    nrows = max(1, -(-len(panels) // cols))
    fig = Figure(figsize=(6.2 * cols, 4.4 * nrows), layout="constrained")
    fig.suptitle(f"{title}: Pareto fronts")
    for n, (model, (goal, glabel), (cost, clabel)) in enumerate(panels):
        ax = fig.add_subplot(nrows, cols, n + 1)
        rows = models[model]
        xs = [r[cost] for r in rows if r.get(goal) is not None and r.get(cost) is not None]
        ys = [r[goal] for r in rows if r.get(goal) is not None and r.get(cost) is not None]
        ax.scatter(xs, ys, s=18, color="0.6", label="chips")
        front = [rows[i] for i in pareto_front(rows, cost, goal)]
        ax.plot([r[cost] for r in front], [r[goal] for r in front], "o-", color="C3",
                drawstyle="steps-post",
                label="Pareto front")
        for r in front:
            ax.annotate(str(r["point"]), (r[cost], r[goal]), textcoords="offset points",
                        xytext=(4, 4), fontsize=8)
        if xs and min(xs) > 0 and max(xs) / min(xs) > 8:
            ax.set_xscale("log")
        if ys and min(ys) > 0 and max(ys) / min(ys) > 8:
            ax.set_yscale("log")
        ax.set_xlabel(clabel)
        ax.set_ylabel(glabel)
        ax.set_title(f"{model}: {glabel} vs {clabel}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")     # a front may reach the lower left corner
    if not panels:
        fig.text(0.5, 0.5, "no point compiled", ha="center")
    return fig


def heatmap_figure(model: str, layers: Sequence[dict]):
    """MAC utilisation per layer (rows) and chip (columns) of one model."""
    import numpy as np
    from matplotlib.figure import Figure
    names = list(dict.fromkeys(l["layer"] for l in layers))
    chips = list(dict.fromkeys(l["point"] for l in layers))
    grid = np.full((len(names), len(chips)), np.nan)
    for l in layers:
        grid[names.index(l["layer"]), chips.index(l["point"])] = l["mac_utilization"]
    fig = Figure(figsize=(2.5 + 0.45 * len(chips), 1.2 + 0.16 * len(names)),
                 layout="constrained")
    ax = fig.add_subplot()
    im = ax.imshow(grid, aspect="auto", vmin=0.0, vmax=1.0, cmap="viridis",
                   interpolation="nearest")
    ax.set_xticks(range(len(chips)), [str(c) for c in chips], fontsize=8)
    ax.set_yticks(range(len(names)), names, fontsize=6)
    ax.set_xlabel("point")
    ax.set_title(f"{model}: MAC utilisation per layer", fontsize=10)
    fig.colorbar(im, ax=ax, label="MAC utilisation")
    return fig


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    text = buf.getvalue()
    return text[text.index("<svg"):]


def pareto_png(path: Path, title: str, points: Sequence[dict]) -> None:
    pareto_figure(title, points).savefig(path, format="png", dpi=110)


def html(title: str, points: Sequence[dict], layers: Sequence[dict], *,
         seconds: float | None = None) -> str:
    """The report: the fronts, the heatmaps, the fronts' points and the whole table."""
    esc = _html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)} sweep"
             f"</title><style>body{{font-family:sans-serif;margin:1.5em}}table{{border-"
             f"collapse:collapse;font-size:12px}}td,th{{border:1px solid #ccc;padding:2px "
             f"6px;text-align:right}}th{{background:#eee}}</style></head><body>",
             f"<h1>Sweep {esc(title)}</h1>"]
    status = {}
    for p in points:
        status[p["status"]] = status.get(p["status"], 0) + 1
    took = f", {seconds:.1f} s" if seconds is not None else ""
    parts.append(f"<p>{len(points)} points: "
                 + ", ".join(f"{n} {s}" for s, n in sorted(status.items())) + f"{took}.</p>")
    parts.append("<h2>Pareto fronts</h2>" + _svg(pareto_figure(title, points)))
    models = _by_model(points)
    for model, rows in models.items():
        for goal, glabel in _goals(rows):
            for cost, clabel in _costs(rows):
                front = [rows[i] for i in pareto_front(rows, cost, goal)]
                parts.append(f"<h3>{esc(model)}: front of {esc(glabel)} against "
                             f"{esc(clabel)}</h3>" + _table(front))
    parts.append("<h2>Per-layer MAC utilisation</h2>")
    for model in models:
        mine = [l for l in layers if l["model"] == model]
        if mine:
            parts.append(_svg(heatmap_figure(model, mine)))
    parts.append("<h2>All points</h2>" + _table(points))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _table(rows: Sequence[dict]) -> str:
    if not rows:
        return "<p>none</p>"
    cols = [c for c in dict.fromkeys(k for r in rows for k in r)
            if any(r.get(c) is not None for r in rows)]

    def cell(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        return "" if v is None else _html.escape(str(v))
    head = "".join(f"<th>{_html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{cell(r.get(c))}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"
