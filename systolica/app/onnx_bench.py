"""The bench's real models (``make bench``): the onnx package's topologies given
weights (:mod:`systolica.models.light`), quantised with random calibration data,
planned for ``base`` and run whole; one record each (docs/assignment.md)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from systolica.app import onnx_report, onnx_run
from systolica.arch.config import preset
from systolica.compiler.assignment.partition import plan_model
from systolica.compiler.errors import CompileError
from systolica.models import light

CONFIG = "base"


@dataclass(frozen=True)
class ModelCase:
    name: str
    rtl: bool           # its chip programs also on the Verilated chip


CASES = (ModelCase("light_squeezenet", True), ModelCase("light_resnet50", True),
         ModelCase("light_inception_v1", False), ModelCase("light_vgg19", False))


def record(case: ModelCase, progress=None) -> dict:
    """`case` planned and run: cycles on the chip and seconds on the host, MAC
    utilisation, DRAM bytes, where each operation ran, compile and wall times, and
    the agreement with onnxruntime; or the error that stopped it."""
    cfg = preset(CONFIG)
    t = time.perf_counter()
    try:
        plan = plan_model(cfg, light.model(case.name))
        plan_s = time.perf_counter() - t
        run = onnx_run.run_plan(plan, compare=False, progress=progress)
        if case.rtl:
            onnx_run.run_on_rtl(run)
        onnx_run.compare_with_onnxruntime(run)
    except CompileError as e:
        return {"name": case.name, "config": CONFIG, "kind": "onnx_model", "ok": False,
                "error": str(e)}
    data = onnx_report.to_json(run)
    host_kinds: dict[str, int] = {}
    for p in plan.placements:
        if p.processor == "host":
            host_kinds[p.op.kind] = host_kinds.get(p.op.kind, 0) + 1
    outputs = [a for a in run.agreement if a.name in plan.outputs]
    return {
        "name": case.name, "config": CONFIG, "kind": "onnx_model", "ok": run.ok,
        "operations": len(plan.placements), "per_processor": plan.per_processor(),
        "host_kinds": host_kinds, "segments": len(plan.segments),
        "chip_cycles": run.chip_cycles,
        "rtl_cycles": (sum(s.rtl_cycles for s in run.segments if s.rtl_cycles is not None)
                       if case.rtl else None),
        "host_seconds": run.host_seconds, "macs": run.macs,
        "mac_utilization": data["mac_utilisation"], "dram_bytes": data["dram_bytes"],
        "plan_seconds": plan_s, "compile_seconds": data["compile_s"],
        "golden_seconds": run.golden_s, "rtl_seconds": run.rtl_s,
        "onnxruntime_outputs": [{"output": a.name, "differing": a.differing,
                                 "values": a.values, "max_difference": a.max_difference}
                                for a in outputs],
        "isolated_within_bound": sum(a.ok for a in run.isolated),
        "isolated_exact": sum(a.differing == 0 for a in run.isolated),
        "isolated_max_difference": max((a.max_difference for a in run.isolated),
                                       default=0.0),
        "problems": run.problems(),
    }


def records(progress=None) -> list[dict]:
    return [record(case, progress) for case in CASES]


def print_records(recs: list[dict]) -> None:
    for r in recs:
        if "error" in r:
            print(f"{r['name']:>20} on {r['config']}: not run: {r['error']}")
            continue
        rtl = "" if r["rtl_cycles"] is None else f", RTL {r['rtl_cycles']}"
        print(f"{r['name']:>20} on {r['config']}: {r['per_processor']}, chip "
              f"{r['chip_cycles']} cycles{rtl}, host {r['host_seconds']:.3f} s, util "
              f"{r['mac_utilization']:.3f}, compile {r['compile_seconds']:.0f} s, golden "
              f"{r['golden_seconds']:.0f} s  {'ok' if r['ok'] else 'FAIL'}")
