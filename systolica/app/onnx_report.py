"""What `systolica sim --onnx` shows: every operation, where it ran and the numbers
that decided it; each segment's cycles or seconds; the agreement with onnxruntime;
and the same as JSON."""

from __future__ import annotations

import json
import math

from systolica import files
from systolica.app.onnx_run import ModelRun
from systolica.compiler.assignment.partition import Plan


def _num(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.3g}"


def plan_lines(plan: Plan) -> list[str]:
    lines = [f"{len(plan.placements)} operations: " + ", ".join(
        f"{n} on the {p}" for p, n in sorted(plan.per_processor().items())),
        f"{'#':>4} {'operation':<28} {'kind':<18} {'on':<5} {'work':>10} "
        f"{'c=t+a (s)':>10} {'p=s+o':>7}  why"]
    for p in plan.placements:
        sc = p.scores.get(p.processor)
        cost = _num(sc.cost) if sc else "-"
        benefit = f"{sc.benefit:.2f}" if sc else "-"
        why = p.why
        other = [f"{j}: {r}" for j, r in p.refusals.items()
                 if not (j == "core" and r == plan.library.no_core)]   # said once, below
        if other:
            why += "; not " + "; not ".join(o.splitlines()[0][:140] for o in other)
        lines.append(f"{p.op.index:>4} {p.op.name[:28]:<28} {p.op.kind[:18]:<18} "
                     f"{p.processor:<5} {p.op.work:>10} {cost:>10} {benefit:>7}  {why}")
    lines += core_lines(plan)
    if plan.library.no_core:
        lines.append(f"not on the core: {plan.library.no_core}")
    return lines


def core_lines(plan: Plan) -> list[str]:
    """Each operation on the management core with the scores that put it there: its
    cost and benefit on the core against the host's cost (and the chip's refusal)."""
    out = []
    for p in plan.placements:
        if p.processor != "core":
            continue
        core, host = p.scores["core"], p.scores.get("host")
        vs = "" if host is None else (f" against the host's c={_num(host.cost)} s "
                                      f"(t={_num(host.t)}, a={_num(host.a)})")
        out.append(f"on the core: {p.op.name} ({p.op.kind}, {p.op.elements_in or p.op.work} "
                   f"elements): c=t+a={_num(core.t)}+{_num(core.a)} s, p=s+o="
                   f"{core.s:.2f}+{core.o:.2f}{vs}; {p.why}")
    return out


def run_lines(run: ModelRun) -> list[str]:
    plan = run.plan
    lines = [f"{'seg':>4} {'on':<5} {'operations':<40} {'cycles':>10} {'seconds':>10} "
             f"{'RTL':>10}"]
    for s in run.segments:
        ops = ", ".join(o.name for o in s.segment.ops)
        rtl = "-" if s.rtl_cycles is None else str(s.rtl_cycles)
        lines.append(f"{s.segment.index:>4} {s.segment.processor:<5} {ops[:40]:<40} "
                     f"{s.cycles or '-':>10} {s.seconds:>10.3g} {rtl:>10}")
    macs = run.macs
    util = macs / (run.chip_cycles * plan.cfg.macs) if run.chip_cycles else 0.0
    lines.append(f"chip: {run.chip_cycles} cycles ({run.chip_cycles / plan.library.clock_hz:.4g}"
                 f" s at {plan.library.clock_hz / 1e6:g} MHz), {macs} MACs, MAC utilisation "
                 f"{util:.1%}; host: {run.host_seconds:.4g} s")
    if any(s.segment.processor == "core" for s in run.segments):
        rtl_core = [s.rtl_cycles for s in run.segments
                    if s.segment.processor == "core" and s.rtl_cycles is not None]
        lines.append(f"core: {run.core_cycles} cycles (the instruction-set model's count)"
                     + (f", RTL {sum(rtl_core)}" if rtl_core else "")
                     + f"; chip and core: {run.cycles} cycles")
    lines.append(f"golden model and host: {run.golden_s:.1f} s"
                 + ("" if run.rtl_s is None else f"; RTL: {run.rtl_s:.1f} s"))
    outputs = [a for a in run.agreement if a.name in plan.outputs]
    inner = [a for a in run.agreement if a.name not in plan.outputs]
    for a in outputs:
        lines.append(f"onnxruntime, output {a.name!r}: {a.differing} of {a.values} values "
                     f"differ, by at most {a.max_difference:g} (tolerance {a.tolerance:g})")
    if inner:
        first = next((a for a in inner if a.differing), None)
        worst = max(inner, key=lambda a: a.max_difference)
        lines.append(f"onnxruntime, {len(inner)} tensors between segments: "
                     + ("all equal" if first is None else
                        f"the first differing is {first.name!r} ({first.differing} of "
                        f"{first.values} values); the largest difference "
                        f"{worst.max_difference:g} steps in {worst.name!r}"))
    if run.isolated:
        within = sum(a.ok for a in run.isolated)
        exact = sum(a.differing == 0 for a in run.isolated)
        worst = max(run.isolated, key=lambda a: a.max_difference)
        lines.append(f"onnxruntime, each chip operation fed its inputs: {within} of "
                     f"{len(run.isolated)} within their bound, {exact} exact; the largest "
                     f"difference {worst.max_difference:g} steps in {worst.name!r} (bound "
                     f"{worst.tolerance:g})")
    for note in plan.notes:
        lines.append(f"note: {note}")
    problems = run.problems()
    lines.append("PASS" if not problems else "FAIL: " + "; ".join(problems))
    return lines


def to_json(run: ModelRun) -> dict:
    plan = run.plan
    return {
        "model": plan.model.name, "chip": plan.cfg.name, "ok": run.ok,
        "problems": run.problems(),
        "per_processor": plan.per_processor(),
        "chip_cycles": run.chip_cycles, "core_cycles": run.core_cycles,
        "host_seconds": run.host_seconds,
        "macs": run.macs,
        "mac_utilisation": run.macs / (run.chip_cycles * plan.cfg.macs)
        if run.chip_cycles else 0.0,
        "dram_bytes": sum(s.dram_bytes for s in run.segments),
        "compile_s": sum(s.compile_s for s in run.segments),
        "golden_s": run.golden_s, "rtl_s": run.rtl_s,
        "operations": [{"name": p.op.name, "kind": p.op.kind, "processor": p.processor,
                        "why": p.why, "work": p.op.work,
                        "scores": {j: {"t": s.t, "a": s.a, "s": s.s, "o": s.o}
                                   for j, s in p.scores.items()},
                        "refusals": p.refusals} for p in plan.placements],
        "segments": [{"index": s.segment.index, "processor": s.segment.processor,
                      "operations": [o.name for o in s.segment.ops],
                      "cycles": s.cycles, "rtl_cycles": s.rtl_cycles,
                      "seconds": s.seconds} for s in run.segments],
        "onnxruntime": [{"output": a.name, "values": a.values, "differing": a.differing,
                         "max_difference": a.max_difference, "tolerance": a.tolerance}
                        for a in run.agreement if a.name in plan.outputs],
        "onnxruntime_isolated": [{"operation": a.name, "values": a.values,
                                  "differing": a.differing,
                                  "max_difference": a.max_difference, "bound": a.tolerance}
                                 for a in run.isolated],
        "notes": plan.notes,
    }


def write_json(run: ModelRun, path: str) -> None:
    with files.atomic_open(path) as f:
        json.dump(to_json(run), f, indent=1, default=float)
