"""Seeing a schedule: a text listing and Chrome trace / Perfetto JSON.

Both take rows (cycle, unit, duration, text) built from a datapath
:class:`~systolica.compiler.scheduling.datapath.Schedule` or from a scheduled chip program (a list
of :class:`~systolica.arch.isa.Instr`, durations from :func:`systolica.arch.timing.occupancy`).
In the trace one cycle is one microsecond; each unit is a track (thread), each
operation a complete ("X") event over its occupancy, each configuration update an
instant ("i") event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from systolica import files
from systolica.arch import fabric, isa, timing
from systolica.arch.config import ChipConfig
from systolica.compiler.scheduling.datapath import Schedule

CONFIG_TRACK = "config"


@dataclass(frozen=True)
class Row:
    cycle: int
    unit: str
    duration: int
    text: str
    args: dict = field(default_factory=dict)
    instant: bool = False     # a configuration update


def schedule_rows(schedule: Schedule, updates: Mapping[str, int] | None = None) -> list[Row]:
    """Rows of a datapath schedule (issue cycles), plus configuration updates
    (name -> issue cycle, e.g. from ``assign_updates``) as instants."""
    rows = []
    for s in schedule.slots:
        st = s.statement
        rows.append(Row(s.issue, s.unit, s.occupancy, st.text, {
            "statement": st.text, "line": st.line, "relative_cycle": s.cycle,
            "latency": s.latency, "occupancy": s.occupancy,
            **({"inserted": True} if s.inserted else {})}))
    for name, cycle in (updates or {}).items():
        rows.append(Row(cycle, CONFIG_TRACK, 0, f"update {name}", {"update": name},
                        instant=True))
    return _sorted(rows)


def _setcfg_text(cfg: ChipConfig, ins: isa.Instr) -> str:
    table = fabric.muxes(cfg)
    pairs = []
    for i, v in isa.setcfg_pairs(ins.fields, ins.op):
        if 0 <= i < len(table) and 0 <= v < len(table[i].sources):
            pairs.append(f"{table[i].name} <- {table[i].sources[v]}")
        else:
            pairs.append(f"mux {i} <- {v}")
    return f"{ins.op.name} " + ", ".join(pairs)


def chip_rows(cfg: ChipConfig, program: Sequence[isa.Instr],
              texts: Sequence[str] | None = None) -> list[Row]:
    """Rows of a scheduled chip program; `texts` (optional) names each instruction,
    e.g. its statement, instead of the disassembly."""
    rows = []
    for n, ins in enumerate(program):
        asm = str(ins).split(":", 1)[1].strip()
        text = texts[n] if texts is not None else (
            _setcfg_text(cfg, ins) if ins.op in isa.SETCFGS else asm)
        args = {"instruction": asm, "pc": n, "done": timing.done(cfg, ins),
                **{k: int(v) for k, v in ins.fields.items()}}
        if ins.op in isa.SETCFGS:
            rows.append(Row(ins.cycle, timing.UNIT[ins.op], 1, text, args, instant=True))
        else:
            rows.append(Row(ins.cycle, timing.UNIT[ins.op], timing.occupancy(cfg, ins),
                            text, args))
    return _sorted(rows)


def _sorted(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (r.cycle, r.instant is False, r.unit))


def events(rows: Sequence[Row], *, process: str = "systolica", pid: int = 0) -> list[dict]:
    """Trace events: process and thread names, then one event per row."""
    tracks: dict[str, int] = {}
    for r in sorted(rows, key=lambda r: (r.unit == CONFIG_TRACK, r.unit)):
        tracks.setdefault(r.unit, len(tracks))
    out: list[dict] = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                        "args": {"name": process}}]
    for unit, tid in tracks.items():
        out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"name": unit}})
        out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"sort_index": tid}})
    for r in rows:
        ev = {"name": r.text, "cat": "config" if r.instant else "op", "pid": pid,
              "tid": tracks[r.unit], "ts": r.cycle, "args": dict(r.args)}
        if r.instant:
            ev.update(ph="i", s="t")
        else:
            ev.update(ph="X", dur=r.duration)
        out.append(ev)
    return out


def schedule_events(schedule: Schedule, updates: Mapping[str, int] | None = None,
                    **kw) -> list[dict]:
    return events(schedule_rows(schedule, updates), **kw)


def chip_events(cfg: ChipConfig, program: Sequence[isa.Instr],
                texts: Sequence[str] | None = None, **kw) -> list[dict]:
    return events(chip_rows(cfg, program, texts), **kw)


def write_trace(path: str | Path, events: Sequence[dict]) -> None:
    """Chrome trace JSON (object form), loadable in Perfetto and chrome://tracing."""
    doc = {"traceEvents": list(events), "displayTimeUnit": "ns",
           "otherData": {"time_unit": "1 us = 1 clock cycle"}}
    files.write_atomic(path, json.dumps(doc, indent=1) + "\n")


def listing(what: Schedule | Sequence[isa.Instr] | Sequence[Row],
            cfg: ChipConfig | None = None) -> str:
    """A text listing, one line per operation: issue cycle, unit, statement. A chip
    program needs `cfg`."""
    if isinstance(what, Schedule):
        rows = schedule_rows(what)
    elif what and isinstance(what[0], isa.Instr):
        if cfg is None:
            raise TypeError("listing of a chip program needs its ChipConfig")
        rows = chip_rows(cfg, what)
    else:
        rows = list(what)
    width = max((len(r.unit) for r in rows), default=4)
    # Datapath statements also show their relative cycle (negative allowed), the
    # compiler's intermediate form before normalising for issue.
    relative = any("relative_cycle" in r.args for r in rows)
    rel = lambda r: f"{r.args.get('relative_cycle', ''):>8}  " if relative else ""
    lines = [f"{'cycle':>7}  " + (f"{'relative':>8}  " if relative else "")
             + f"{'unit':<{width}}  statement"]
    for r in rows:
        lines.append(f"{r.cycle:>7}  {rel(r)}{r.unit:<{width}}  {r.text}")
    return "\n".join(lines)
