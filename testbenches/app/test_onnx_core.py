"""Classifiers whose Softmax or ArgMax runs on the chip's management core
(docs/assignment.md, "The management core"): planned with the core as the third
processor, run with the core's segments as tables of the firmware's kernels on the
instruction-set model (and on the Verilated chip's core), against the kernels' numpy
statements, the RTL and onnxruntime. A chip without the core runs them on the host;
``--assign NODE=core`` is the user's choice where the core can, a clear error where
it cannot."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from systolica.app import onnx_report, onnx_run
from systolica.arch.config import preset
from systolica.compiler.assignment.partition import PlanOptions, plan_model
from systolica.compiler.errors import CompileError
from systolica.models import onnx_zoo

TINY = preset("tiny")


@functools.cache
def _model(head: str, make=onnx_zoo.float_lenet):
    return onnx_zoo.ort_quantized(make(head=head))


@functools.cache
def _plan(head: str, chip: str = "tiny", make=onnx_zoo.float_lenet, **overrides):
    return plan_model(preset(chip), _model(head, make),
                      options=PlanOptions(overrides=overrides or None))


def _where(plan, kind: str) -> str:
    return next(p.processor for p in plan.placements if p.op.kind == kind)


@pytest.mark.slow
@pytest.mark.parametrize("head, kind, make, where", [
    ("softmax", "Softmax", onnx_zoo.float_lenet, "core"),
    ("argmax", "ArgMax", onnx_zoo.float_lenet, "core"),
    ("softmax", "Softmax", onnx_zoo.float_mlp, "host"),
    ("argmax", "ArgMax", onnx_zoo.float_mlp, "core")],
    ids=["lenet-softmax", "lenet-argmax", "mlp-softmax", "mlp-argmax"])
def test_a_classifiers_head_runs_where_it_costs_least(head, kind, make, where):
    """After the chip's last layer the core reads the logits in place (no transfer):
    LeNet's Softmax of 10 and ArgMax cost less on the core than the host's trip, the
    MLP's Softmax of 12 rows of 10 more (the core's per-element time, measured on the
    RTL, exceeds the host's). The core's segment (the firmware on the ISS) equals the
    kernels' numpy statements and the model agrees with onnxruntime."""
    plan = _plan(head, make=make)
    assert _where(plan, kind) == where
    placed = next(p for p in plan.placements if p.op.kind == kind)
    assert placed.scores["core"].t == 0.0            # read in place from the chip's DRAM
    assert (placed.scores["core"].cost < placed.scores["host"].cost) == (where == "core")
    assert any(f"on the core: {placed.op.name} ({kind}" in line
               for line in onnx_report.plan_lines(plan)) == (where == "core")
    run = onnx_run.run_plan(plan)
    assert run.ok, run.problems()
    core = [s for s in run.segments if s.segment.processor == "core"]
    assert len(core) == (where == "core")
    assert all(s.matches_reference and s.cycles > 0 for s in core)
    # the logits are read where and as the chip left them
    assert all(set(s.core_table.layouts.values()) == {"chip"} for s in core)
    assert run.cycles == run.chip_cycles + run.core_cycles
    assert onnx_report.to_json(run)["core_cycles"] == run.core_cycles


@pytest.mark.slow
def test_a_wrong_core_result_fails_the_run(monkeypatch):
    """The check can fail: a kernel statement that differs from the firmware's."""
    from systolica.firmware import core_kernels
    real = core_kernels.compute
    monkeypatch.setattr(core_kernels, "compute",
                        lambda desc, inputs: real(desc, inputs) + 1)
    run = onnx_run.run_plan(_plan("softmax"), compare=False)
    assert any("core segment" in p and "numpy statements" in p for p in run.problems())


@pytest.mark.slow
def test_a_chip_without_the_core_runs_the_head_on_the_host():
    plan = _plan("softmax", "tangnano9k")
    placed = next(p for p in plan.placements if p.op.kind == "Softmax")
    assert placed.processor == "host"
    assert "no management core" in placed.refusals["core"]


@pytest.mark.slow
def test_the_user_puts_an_operation_on_the_core_where_it_can():
    plan = _plan("softmax", softmax="host")
    assert _where(plan, "Softmax") == "host"
    with pytest.raises(CompileError, match=r"--assign conv1=core: core cannot run it "
                                           r"\(the core has no Conv kernel\)"):
        _plan("softmax", conv1="core")
    with pytest.raises(CompileError, match=r"--assign softmax=core: core cannot run it "
                                           r"\(chip tangnano9k has no management core"):
        _plan("softmax", "tangnano9k", softmax="core")


@pytest.mark.rtl
def test_a_classifier_with_its_softmax_on_the_core_on_the_rtl(tiny_build):
    """End to end on the Verilated tiny chip: the chip's program and the core's
    softmax table (the firmware on the chip's PicoRV32), outputs bit-exact against the
    golden model and the ISS, the model against onnxruntime within its tolerance; the
    softmax's core cycles on the RTL equal the ISS's count, the prediction."""
    run = onnx_run.run_plan(_plan("softmax"), rtl=True)
    assert run.ok, run.problems()
    chip = [s for s in run.segments if s.segment.processor == "chip"]
    core = [s for s in run.segments if s.segment.processor == "core"]
    assert chip and all(s.rtl_cycles == s.cycles and s.rtl_matches_golden for s in chip)
    assert len(core) == 1 and core[0].rtl_matches_golden and core[0].rtl_cycles > 0
    assert core[0].core_table.rtl_result == 1
    assert set(core[0].core_table.layouts.values()) == {"chip"}
    outputs = [a for a in run.agreement if a.name in run.plan.outputs]
    assert outputs and all(a.ok for a in outputs)
    print("core cycles: predicted", core[0].cycles, "RTL", core[0].rtl_cycles)
    assert core[0].rtl_cycles == core[0].cycles
    assert run.cycles == sum(s.rtl_cycles for s in chip + core)
    core[0].rtl_cycles = core[0].cycles + 1           # a difference is reported
    assert any("core cycles, predicted" in p for p in run.problems())
    probs = run.outputs[run.plan.outputs[0]]
    assert np.isfinite(probs).all()


@pytest.mark.slow
@pytest.mark.parametrize("given", ["chip", "other", "none"])
def test_an_operand_is_read_in_the_chips_layout_where_that_view_reads_it(given):
    """A chip segment's output reaches the kernel as the chip left it when
    ``chip_view`` reads its values; other words (a layout of tile groups, a map whose
    pixels are not the rows), or an operand from the host, are placed row-major. The
    firmware's result is the same either way."""
    from types import SimpleNamespace

    import test_core_ops  # the lowering tests' models

    from systolica.compiler.assignment.operations import operations
    from systolica.compiler.assignment.partition import Segment
    from systolica.firmware import core_kernels as ck
    proto = test_core_ops.qdq_softmax((3, 7))
    op = next(o for o in operations(proto) if o.kind == "Softmax")
    x = np.random.default_rng(0).integers(-128, 128, (3, 7), dtype=np.int8)
    W = TINY.dram_word_bytes
    words = np.zeros((64, W), np.uint8)
    if given == "chip":
        buf = bytearray(words.tobytes())
        ck.chip_view(TINY, 0, (3, 7)).write(buf, x)
        words = np.frombuffer(bytes(buf), np.uint8).reshape(-1, W)
    else:
        words[:] = 5
    plan = SimpleNamespace(cfg=TINY, model=SimpleNamespace(proto=proto),
                           library=SimpleNamespace(clock_hz=1e8))
    seg = Segment(0, "core", [op], None, ("x",), ("y",))
    chip_words = {} if given == "none" else {"x": words}
    out, run = onnx_run._run_on_core(plan, seg, {"x": x}, chip_words)
    assert run.core_table.layouts == {"x": "chip" if given == "chip" else "row-major"}
    assert run.matches_reference and run.core_table.result == 1
    desc = run.core_table.steps[0].descriptor
    assert np.array_equal(out["y"], ck.compute(desc, {"x": x}))


def test_library_core_writes_the_cores_points(tmp_path, capsys, monkeypatch):
    """``systolica library --core`` writes what the calibration measured, with the
    firmware's fingerprint (the measuring itself, on the RTL: the regress test)."""
    import json

    from systolica.app import cli
    from systolica.compiler.assignment import calibrate, library
    monkeypatch.setattr(calibrate, "core_points",
                        lambda cfg: {"softmax": [(16.0, 100), (128.0, 700)]})
    out = tmp_path / "core.json"
    assert cli.main(["library", "--core", "--out", str(out)]) == 0
    raw = json.loads(out.read_text())
    assert raw["kinds"] == {"softmax": [[16.0, 100], [128.0, 700]]}
    assert raw["measured_on"] == "tiny" and raw["fingerprint"] == library.core_fingerprint()
    assert "softmax 16 -> 100, 128 -> 700" in capsys.readouterr().out


@pytest.mark.rtl
@pytest.mark.regress
def test_the_cores_points_are_what_the_rtl_measures(tiny_build):
    """The calibration run on the Verilated tiny chip gives the file's points again
    (the simulation is deterministic): systolica library --core regenerates them."""
    import json

    from systolica.compiler.assignment import calibrate, library
    raw = json.loads(library.CORE_DATA.read_text())
    got = calibrate.core_points(TINY)
    assert {k: [[w, c] for w, c in v] for k, v in got.items()} == raw["kinds"]


@pytest.mark.slow
def test_the_report_says_once_that_a_chip_has_no_core():
    lines = onnx_report.plan_lines(_plan("softmax", "tangnano9k"))
    assert sum("no management core" in line for line in lines) == 1
    assert lines[-1] == "not on the core: chip tangnano9k has no management core " \
                        "(core_imem_bytes 0)"
