"""Any ONNX model end to end (docs/assignment.md, step 7): planned, its chip programs
on the golden model (and the RTL), its host operations in numpy, the outputs against
onnxruntime; a run whose numbers disagree fails, and `systolica sim --onnx` says so
in its exit status. Corrupting either processor's result must fail the run."""

from __future__ import annotations

import functools
import json

import numpy as np
import onnx
import pytest

from systolica.app import cli, onnx_run
from systolica.arch.config import preset
from systolica.compiler.assignment.partition import plan_model
from systolica.models import onnx_zoo

TINY = preset("tiny")


@functools.cache
def _plan(make, chip="tiny"):
    return plan_model(preset(chip), make())


@pytest.mark.slow
@pytest.mark.parametrize("make", [onnx_zoo.float_cnn, onnx_zoo.float_resnet,
                                  onnx_zoo.float_mobilenet, onnx_zoo.qdq_resnet],
                         ids=lambda m: m.__name__)
def test_float_and_qdq_models_run_on_both_processors(make):
    run = onnx_run.run_plan(_plan(make, "tiny" if make is not onnx_zoo.float_resnet
                                  else "tiny_tall"))
    assert run.ok, run.problems()
    assert {"chip", "host"} <= set(run.plan.per_processor())
    convs = [p for p in run.plan.placements if p.op.kind == "Conv"]
    assert convs and all(p.processor == "chip" for p in convs)
    chips = [s for s in run.segments if s.segment.processor == "chip"]
    assert all(s.golden_cycles == s.cycles and s.matches_reference for s in chips)
    outputs = [a for a in run.agreement if a.name in run.plan.outputs]
    assert outputs and all(a.ok for a in outputs)
    chip_ops = [op for s in run.plan.segments if s.processor == "chip" for op in s.ops
                if op.kind not in ("Flatten", "Relu")]
    assert len(run.isolated) >= len(chip_ops) and all(a.ok for a in run.isolated)


@pytest.mark.slow
def test_a_wrong_host_result_fails_the_run(monkeypatch):
    from systolica.host import kernels
    real = kernels.HostModel.run

    def off_by_a_lot(self, feeds):
        return {k: (v * 3 if v.dtype.kind == "f" else v) for k, v in
                real(self, feeds).items()}

    monkeypatch.setattr(kernels.HostModel, "run", off_by_a_lot)
    run = onnx_run.run_plan(_plan(onnx_zoo.float_cnn))
    assert not run.ok and any("differs from onnxruntime" in p for p in run.problems())


@pytest.mark.slow
def test_a_wrong_chip_result_fails_the_run(monkeypatch):
    from systolica import golden
    real = golden.run

    def flipped(cfg, loadable):
        res = real(cfg, loadable)
        res.dram[:] ^= 0x55
        return res

    monkeypatch.setattr(onnx_run.golden, "run", flipped)
    run = onnx_run.run_plan(_plan(onnx_zoo.float_cnn))
    assert any("differs from numpy" in p for p in run.problems())


@pytest.mark.slow
def test_a_chip_operation_past_its_bound_fails_the_run(monkeypatch):
    """Multipliers 3 % off: fed onnxruntime's inputs, a convolution is then more than
    its one step away."""
    from systolica.compiler.frontend import onnx_import
    real = onnx_import.requant_for

    def off(scale, per_channel=True):
        return real(np.asarray(scale) * 1.03, per_channel)

    monkeypatch.setattr(onnx_import, "requant_for", off)
    run = onnx_run.run_plan(plan_model(TINY, onnx_zoo.float_cnn()))
    assert any("past its bound" in p for p in run.problems())
    assert all(s.matches_reference for s in run.segments)      # the chip is consistent


def test_bounds_per_layer():
    from systolica.app.onnx_oracle import layer_bound
    from systolica.compiler.graph.ops import Add, Conv2d, Dense, MaxPool2d
    w = np.ones((4, 4), np.int8)
    assert layer_bound(Dense(w, mult=40000, shift=20)) == 1
    assert layer_bound(Dense(w, mult=100, shift=10)) == 2
    assert layer_bound(Dense(w, out_dtype="int32")) == 0
    assert layer_bound(Conv2d(np.ones((1, 1, 4, 4), np.int8), out_dtype="int32")) == 0
    assert layer_bound(Add(3, 5, 6)) == 1 + 255 // 64
    assert layer_bound(MaxPool2d(2)) == 0


@pytest.mark.rtl
def test_chip_programs_on_the_rtl_equal_golden_and_prediction(tiny_build):
    run = onnx_run.run_plan(_plan(onnx_zoo.float_mobilenet), rtl=True)
    assert run.ok, run.problems()
    chips = [s for s in run.segments if s.segment.processor == "chip"]
    assert chips and all(s.rtl_cycles == s.cycles and s.rtl_matches_golden for s in chips)


def _cli(argv, capsys):
    try:
        status = cli.main(argv)
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.slow
def test_sim_onnx_reports_and_writes_json(tmp_path, capsys):
    model = tmp_path / "cnn.onnx"
    onnx.save(onnx_zoo.float_cnn(), str(model))
    report = tmp_path / "run.json"
    status, out, _ = _cli(["sim", "--config", "tiny", "--onnx", str(model), "--golden-only",
                           "--report-json", str(report)], capsys)
    assert status == 0 and "PASS" in out and "on the chip" in out
    data = json.loads(report.read_text())
    assert data["ok"] and data["per_processor"]["chip"] >= 4
    assert {o["processor"] for o in data["operations"]} == {"chip", "host"}


@pytest.mark.slow
def test_sim_onnx_fails_when_onnxruntime_disagrees(tmp_path, capsys):
    model = tmp_path / "cnn.onnx"
    onnx.save(onnx_zoo.float_cnn(), str(model))
    status, out, _ = _cli(["sim", "--config", "tiny", "--onnx", str(model), "--golden-only",
                           "--tolerance", "0"], capsys)
    assert status == 1 and "FAIL" in out and "differs from onnxruntime" in out


@pytest.mark.parametrize("argv, words", [
    (["--assign", "conv1"], "NODE=PROCESSOR"),
    (["--assign", "nosuch=host"], "names no operation"),
    (["--assign", "conv1=gpu"], "the processors are chip, core, host"),
])
def test_bad_assignments_are_clear_errors(tmp_path, capsys, argv, words):
    model = tmp_path / "cnn.onnx"
    onnx.save(onnx_zoo.float_cnn(), str(model))
    status, _, err = _cli(["sim", "--config", "tiny", "--onnx", str(model), "--golden-only",
                           *argv], capsys)
    assert status == 2 and words in err


def _matmul_of_inputs(tmp_path):
    """A QLinearMatMul of uint8 ``[3, 4] @ [4, 2]`` whose operands are all inputs, and
    its right operand and parameters saved as .npy files."""
    from onnx import TensorProto, helper
    values = {"bs": np.float32(0.02), "bz": np.uint8(100), "b": np.random.default_rng(5)
              .integers(0, 256, (4, 2)).astype(np.uint8), "as": np.float32(0.05),
              "az": np.uint8(128), "ys": np.float32(0.1), "yz": np.uint8(120)}
    types = {np.float32: TensorProto.FLOAT, np.uint8: TensorProto.UINT8}
    ins = [helper.make_tensor_value_info("a", TensorProto.UINT8, [3, 4])] + [
        helper.make_tensor_value_info(k, types[type(v) if np.ndim(v) == 0 else v.dtype.type],
                                      list(np.shape(v))) for k, v in values.items()]
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                            ["y"], name="mm")
    model = helper.make_model(helper.make_graph(
        [node], "m", ins, [helper.make_tensor_value_info("y", TensorProto.UINT8, None)]),
        opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path / "mm.onnx"
    onnx.save(model, str(path))
    argv = []
    for k, v in values.items():
        np.save(tmp_path / f"{k}.npy", np.asarray(v))
        argv += ["--constant", f"{k}={tmp_path / f'{k}.npy'}"]
    return path, argv


def test_sim_onnx_takes_inputs_as_constants(tmp_path, capsys):
    path, constants = _matmul_of_inputs(tmp_path)
    status, out, err = _cli(["sim", "--config", "tiny", "--onnx", str(path), "--golden-only",
                             *constants], capsys)
    assert status == 0 and "PASS" in out, out + err
    rows = [line.split()[1:4] for line in out.splitlines()]
    assert ["mm", "QLinearMatMul", "chip"] in rows
    assert "note: made the uint8 operands of mm int8" in out


@pytest.mark.parametrize("argv, words", [
    (["--constant", "b"], "NAME=FILE.npy"),
    (["--constant", "b=/nonexistent.npy"], "not a readable .npy file"),
    (["--constant", "nosuch={npy}"], "has no input 'nosuch' to make a constant"),
])
def test_bad_constants_are_clear_errors(tmp_path, capsys, argv, words):
    path, _ = _matmul_of_inputs(tmp_path)
    argv = [a.format(npy=tmp_path / "b.npy") for a in argv]
    status, _, err = _cli(["sim", "--config", "tiny", "--onnx", str(path), "--golden-only",
                           *argv], capsys)
    assert status == 2 and words in err, err


def test_an_old_opset_is_refused_before_any_work(tmp_path, capsys):
    model = onnx_zoo.float_cnn()
    model.opset_import[0].version = 9
    path = tmp_path / "old.onnx"
    onnx.save(model, str(path))
    status, _, err = _cli(["sim", "--config", "tiny", "--onnx", str(path)], capsys)
    assert status == 2 and "opset 9" in err and "version_converter" in err


def test_library_is_measured_on_request(tmp_path, capsys):
    out = tmp_path / "lib.json"
    status, text, _ = _cli(["library", "--config", "tiny", "--out", str(out)], capsys)
    assert status == 0 and "conv" in text
    data = json.loads(out.read_text())
    assert data["chip"] == "tiny" and np.isfinite(data["kinds"]["chip"]["conv"][0][1])


@pytest.mark.slow
def test_calibration_data_is_taken_from_a_file(tmp_path, capsys):
    model = tmp_path / "cnn.onnx"
    onnx.save(onnx_zoo.float_cnn(), str(model))
    data = tmp_path / "cal.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((3, 1, 3, 16, 16))
             .astype(np.float32))
    status, out, _ = _cli(["sim", "--config", "tiny", "--onnx", str(model), "--golden-only",
                           "--calibration", str(data)], capsys)
    assert status == 0 and "quantised with 3 calibration input(s) given" in out
    (tmp_path / "bad.npz").write_text("no")
    status, _, err = _cli(["sim", "--config", "tiny", "--onnx", str(model),
                           "--calibration", str(tmp_path / "bad.npz")], capsys)
    assert status == 2 and "not a readable .npz" in err
