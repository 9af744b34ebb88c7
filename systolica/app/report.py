"""The run report: a table per layer for people, a record per run for machines."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from systolica.app.flow import NetworkRun
from systolica.compiler.backend import unit_use
from systolica.compiler.planning import split


def _mark(ok: bool) -> str:
    return "[green]yes[/]" if ok else "[bold red]NO[/]"


def mapping_lines(compiled) -> list[str]:
    """Per convolution: the mapping it runs (docs/matching.md), and the time the
    compile spent choosing them."""
    lines = [f"layer {name!r}: {m.describe()} ({m.origin})"
             for name, m in compiled.mappings.items()]
    if lines:
        lines.append(f"mappings chosen in {compiled.phase_seconds.get('match', 0.0):.3f} s")
    return lines


def split_lines(compiled) -> list[str]:
    """Per dense layer: the tile groups it runs in, and why not more
    (docs/compiler.md, "Splitting the array")."""
    cfg = compiled.cfg
    lines = []
    for name, choice in compiled.plan.splits.items():
        est = ", ".join(f"{s}: {c}" for s, c in sorted(choice.estimates.items()))
        s = choice.s
        kind = (f"split into {s} groups of {split.group_rows(cfg, s)}x"
                f"{split.group_cols(cfg, s)} cells" if split.cell_groups(cfg, s) else
                f"split into {s} tile groups" if s > 1 else "the whole array")
        whose = "its chain's" if choice.chain else "its"
        lines.append(f"layer {name!r}: {kind} ({choice.why}; {whose} estimated cycles "
                     f"by groups {est})")
    return lines


def unit_busy(run: NetworkRun) -> dict[str, dict[str, int]]:
    """Per layer: each unit's busy cycles in the layer's share of the run (the
    report's predicted cycles of it)."""
    c = run.compiled
    busy = unit_use.intervals(c.cfg, c.program, c.layer_of)
    return {layer.name: unit_use.in_window(busy, layer.start, layer.predicted_end)
            for layer in run.layers}


def print_run(run: NetworkRun, console: Console | None = None) -> None:
    # Wide enough for the table and summary lines when output goes to a file or CI log.
    console = console or Console(width=max(Console().width, 124))
    cfg = run.cfg
    console.print(f"[bold]{run.name}[/] on chip [bold]{cfg.name}[/]: {cfg.tile_rows}x"
                  f"{cfg.tile_cols} tiles of {cfg.tile_size}x{cfg.tile_size} cells "
                  f"({cfg.rows}x{cfg.cols} = {cfg.macs} MACs), "
                  f"{len(run.compiled.program)} instructions")
    table = Table(show_edge=False, header_style="bold")
    for col in ("layer", "M", "K", "N", "cycles pred", "cycles RTL", "match",
                "MAC util", "DRAM rd B", "DRAM wr B", "busiest"):
        table.add_column(col, justify="left" if col == "layer" else "right")
    busy = unit_busy(run)
    for layer in run.layers:
        unit, share = unit_use.busiest(busy.get(layer.name, {}), layer.predicted_cycles)
        table.add_row(layer.name, str(layer.M), str(layer.K), str(layer.N),
                      str(layer.predicted_cycles), str(layer.measured_cycles),
                      _mark(layer.ok),
                      f"{layer.utilisation(cfg):.3f}", str(layer.dram_rd_bytes),
                      str(layer.dram_wr_bytes), f"{unit} {share:.2f}" if unit else "")
    table.add_row("[bold]total", "", "", "", str(run.predicted_cycles),
                  str(run.measured_cycles), _mark(run.predicted_cycles == run.measured_cycles),
                  f"{run.utilisation:.3f}", str(run.dram_rd_bytes), str(run.dram_wr_bytes), "",
                  style="bold")
    console.print(table)
    if run.layers:
        console.print("per layer, one run: the chip's counters read where each layer ends "
                      "(as predicted); match: the cycle counter and every counter (MACs, "
                      "DRAM, fetch, UBUF bytes) as the golden model says at that cycle",
                      highlight=False)
    console.print("busiest: the unit busy longest in the layer's cycles and its share of "
                  "them (near 1: it sets the pace)", highlight=False)
    for layer in run.layers:
        for line in layer.mismatches():
            console.print(f"layer {layer.name!r}: {line}", highlight=False)
    for line in split_lines(run.compiled):
        console.print(line, highlight=False)
    console.print(f"outputs: RTL == golden model {_mark(run.rtl_matches_golden)}, "
                  f"RTL == numpy {_mark(run.rtl_matches_numpy)}; golden model cycles "
                  f"{run.golden_cycles} {_mark(run.golden_cycles == run.predicted_cycles)}; "
                  f"chip error {run.error}")
    if run.compiled.ubuf_bytes_written or run.ubuf_wr_bytes or run.ubuf_rd_bytes:
        ok = (run.ubuf_wr_bytes, run.ubuf_rd_bytes) == (run.compiled.ubuf_bytes_written,
                                                        run.compiled.ubuf_bytes_read)
        console.print(f"UBUF: {run.ubuf_wr_bytes} B cropped in, {run.ubuf_rd_bytes} B "
                      f"fetched out (predicted {run.compiled.ubuf_bytes_written} / "
                      f"{run.compiled.ubuf_bytes_read}) {_mark(ok)}")
    if run.compiled.fetch_bytes_read or run.fetch_rd_bytes:
        console.print(f"instruction fetch from DRAM: {run.fetch_rd_bytes} B read, "
                      f"{run.compiled.fetch_bytes_read} B predicted "
                      f"{_mark(run.fetch_rd_bytes == run.compiled.fetch_bytes_read)}")
    console.print(f"compile {run.compile_s:.2f} s; RTL simulation {run.measured_cycles} cycles "
                  f"in {run.sim_s:.2f} s ({run.sim_cycles_per_second:,.0f} cycles/s)")
    if run.waves:
        console.print(f"waveform: {run.waves} (open it with `gtkwave {run.waves}` or "
                      f"`surfer {run.waves}`; docs/simulation.md)", soft_wrap=True)
    console.print("[bold green]PASS[/]" if run.ok else "[bold red]FAIL[/]")


def record(run: NetworkRun, name: str) -> dict:
    """One machine-readable bench record."""
    layer = run.compiled.layers
    busy = unit_busy(run)
    return {
        "name": name,
        "config": run.cfg.name,
        "M": layer[0].M,
        "K": layer[0].K,
        "N": layer[-1].N,
        "layers": [{"name": l.name, "M": l.M, "K": l.K, "N": l.N,
                    "predicted_cycles": l.predicted_cycles, "cycles": l.measured_cycles,
                    "mac_utilization": l.utilisation(run.cfg),
                    "dram_rd_bytes": l.dram_rd_bytes, "dram_wr_bytes": l.dram_wr_bytes,
                    # where its cycles go: each unit's busy cycles in them
                    "unit_busy_cycles": busy.get(l.name, {})}
                   for l in run.layers],
        "cycles": run.measured_cycles,
        "predicted_cycles": run.predicted_cycles,
        "golden_cycles": run.golden_cycles,
        "macs": run.macs,
        "array_macs": run.macs_counter,
        "mac_utilization": run.utilisation,
        "dram_bytes": run.dram_rd_bytes + run.dram_wr_bytes,
        "dram_rd_bytes": run.dram_rd_bytes,
        "dram_wr_bytes": run.dram_wr_bytes,
        "fetch_rd_bytes": run.fetch_rd_bytes,
        "ubuf_bytes_written": run.ubuf_wr_bytes,
        "ubuf_bytes_read": run.ubuf_rd_bytes,
        "instructions": len(run.compiled.program),
        # tile groups per dense layer (docs/compiler.md, "Splitting the array")
        "splits": {l.name: l.split for l in layer},
        "compile_seconds": run.compile_s,
        "sim_seconds": run.sim_s,
        "sim_cycles_per_second": run.sim_cycles_per_second,
        "harness": run.harness,
        "outputs_match": run.rtl_matches_golden and run.rtl_matches_numpy,
        "ok": run.ok,
    }


def print_network_record(rec: dict) -> None:
    """A compiled network's figures (cnn_bench.network_record), per stage of layers
    named ``<stage>_...``, then the totals against their targets."""
    stages: dict[str, list[dict]] = {}
    for layer in rec["layers"]:
        stages.setdefault(layer["name"].split("_")[0], []).append(layer)
    print(f"{rec['name']} on {rec['config']} ({rec['strategy']}, "
          f"{rec.get('segments_chained', 0)} segments chained; "
          f"{', '.join(f'{n} {k}' for k, n in rec.get('tilings', {}).items())}): "
          f"{rec['instructions']} instructions, "
          f"{rec['predicted_cycles']} cycles predicted, compiled in "
          f"{rec['compile_seconds']:.1f} s")
    print(f"{'stage':>10} {'layers':>6} {'GMACs':>7} {'cycles':>10} {'util':>6} "
          f"{'DRAM MB':>8} {'/min':>5}")
    for name, layers in stages.items():
        macs = sum(l["macs"] for l in layers)
        cycles = sum(l["predicted_cycles"] for l in layers)
        moved = sum(l["dram_rd_bytes"] + l["dram_wr_bytes"] for l in layers)
        least = sum(l["min_bytes"] for l in layers)
        print(f"{name:>10} {len(layers):>6} {macs / 1e9:>7.3f} {cycles:>10} "
              f"{macs / max(cycles, 1) / rec['array_macs_per_cycle']:>6.3f} "
              f"{moved / 1e6:>8.2f} {moved / max(least, 1):>5.2f}")
    t = rec["targets"]
    print(f"conv MAC-weighted utilisation {rec['conv_mac_weighted_utilization']:.3f} "
          f"(target {t['conv_mac_weighted_utilization']}), lowest but the stem "
          f"{rec['min_conv_utilization_except_stem']:.3f} (target "
          f"{t['min_conv_utilization_except_stem']}), stem {rec['stem_utilization']:.3f} "
          f"(target {t['stem_utilization']}); DRAM {rec['dram_bytes'] / 1e6:.1f} MB, "
          f"{rec['dram_bytes'] / rec['min_bytes']:.2f}x the minimum, UBUF "
          f"{rec['ubuf_bytes']} B; compile "
          f"{rec['compile_seconds']:.1f} s (target {t['compile_seconds']:.0f} s)")
    for c in rec.get("chains", []):
        print(f"  chained {' -> '.join(c['layers'])}: {c['strategy']}, "
              f"{c['outputs_per_pass']} rows per pass ({c['passes']} passes), weights "
              f"{c['weights']}")
