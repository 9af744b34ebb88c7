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
        "chip_cycles": run.chip_cycles, "core_cycles": run.core_cycles,
        "rtl_cycles": (sum(s.rtl_cycles for s in run.segments if s.rtl_cycles is not None
                           and s.segment.processor == "chip") if case.rtl else None),
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
        "problems": run.problems(), **core_fields(plan),
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


#: The zoo's models with a classifier's head, planned for ``tiny`` (quantised by
#: onnxruntime): SqueezeNet with its Softmax kept, LeNet and the MLP with a Softmax or
#: an ArgMax. (The bench's real models, :data:`CASES`, have their Softmax too: their
#: records say where it went.)
CORE_CASES = (("float_squeezenet_softmax", "tiny"), ("float_lenet_softmax", "tiny"),
              ("float_lenet_argmax", "tiny"), ("float_mlp_softmax", "tiny"),
              ("float_mlp_argmax", "tiny"))


def core_model(name: str):
    """The ONNX model of a :data:`CORE_CASES` name."""
    from systolica.models import onnx_zoo
    if name == "float_squeezenet_softmax":
        return onnx_zoo.ort_quantized(onnx_zoo.float_squeezenet(softmax=True), samples=4)
    make, head = name.rsplit("_", 1)
    return onnx_zoo.ort_quantized(getattr(onnx_zoo, make)(head=head))


def core_plan_record(name: str, config: str) -> dict:
    """Where the assignment put each operation of model `name` planned for chip
    `config` (chip, core, host), with the scores that decided each core candidate:
    its cost and benefit on the core against the host's cost (docs/assignment.md,
    "The management core")."""
    t = time.perf_counter()
    try:
        plan = plan_model(preset(config), core_model(name))
    except CompileError as e:
        return {"name": name, "config": config, "kind": "onnx_core_plan", "ok": False,
                "error": str(e)}
    return {"name": name, "config": config, "kind": "onnx_core_plan", "ok": True,
            "per_processor": plan.per_processor(), **core_fields(plan),
            "plan_seconds": time.perf_counter() - t}


def core_fields(plan) -> dict:
    """Each processor's operations, and every operation the core could run with its
    scores there and the host's cost."""
    where: dict[str, list[str]] = {}
    for p in plan.placements:
        where.setdefault(p.processor, []).append(f"{p.op.name} ({p.op.kind})")
    candidates = []
    for p in plan.placements:
        core = p.scores.get("core")
        if core is None:
            continue
        host = p.scores.get("host")
        candidates.append({
            "operation": p.op.name, "kind": p.op.kind, "processor": p.processor,
            "elements": p.op.elements_in or p.op.work, "why": p.why,
            "core": {"t": core.t, "a": core.a, "s": core.s, "o": core.o,
                     "cost": core.cost, "benefit": core.benefit},
            "host_cost": None if host is None else host.cost})
    return {"operations": where, "core_candidates": candidates}


def core_plan_records() -> list[dict]:
    return [core_plan_record(name, config) for name, config in CORE_CASES]


def print_core_plan_records(recs: list[dict]) -> None:
    for r in recs:
        if "error" in r:
            print(f"{r['name']:>26} on {r['config']}: not planned: {r['error']}")
            continue
        core = ", ".join(r["operations"].get("core", [])) or "none"
        print(f"{r['name']:>26} on {r['config']}: {r['per_processor']}; on the core: {core}")
        for c in r["core_candidates"]:
            host = "-" if c["host_cost"] is None else f"{c['host_cost']:.3g} s"
            print(f"{'':>28}{c['operation']} ({c['kind']}, {c['elements']} elements) on "
                  f"{c['processor']}: core c={c['core']['cost']:.3g} s p="
                  f"{c['core']['benefit']:.2f}, host c={host}")
