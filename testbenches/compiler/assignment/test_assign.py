"""Assignment by cost and benefit (seed 003; docs/assignment.md, step 5), on a
quantised CNN with libraries made up for each case, so that every rule is seen
deciding: the thresholds, fusion with a predecessor, least cost, the user's
override."""

from __future__ import annotations

import functools
import math

import pytest

from systolica.compiler.assignment.assign import Thresholds, assign
from systolica.compiler.assignment.library import Library
from systolica.compiler.assignment.operations import operations
from systolica.compiler.errors import CompileError
from systolica.compiler.frontend import onnx_model, onnx_quantise, onnx_simplify
from systolica.models import onnx_zoo


@functools.cache
def _model():
    m = onnx_simplify.simplify(onnx_model.load(onnx_zoo.float_cnn()))
    return onnx_quantise.quantise(m, samples=2).proto


def _library(chip_rate=1e-9, host_rate=1e-6, pool_chip=None):
    """Seconds per unit of work: the chip's, the host's (every kind), and the chip's
    max pool (None: the chip's rate)."""
    line = lambda r: [(1.0, r), (1e9, r * 1e9)]      # noqa: E731
    chip = {f: line(chip_rate) for f in ("conv", "dense", "add", "global_avg_pool", "avg_pool",
                                          "concat", "move")}
    chip["max_pool"] = line(pool_chip or chip_rate)
    host = {k: line(host_rate) for k in ("Conv", "MaxPool", "Relu", "QuantizeLinear",
                                         "DequantizeLinear", "Gemm", "Concat")}
    return Library("tiny", 1e8, {}, {"chip": chip, "host": host},
                   {"chip": line(1e-12), "host": line(1e-12)})


def _placed(lib, **kw):
    proto = _model()
    return {p.op.name: p for p in assign(operations(proto), proto, lib, **kw)}


def test_a_fast_chip_takes_every_convolution_it_runs():
    placed = _placed(_library())
    convs = [p for p in placed.values() if p.op.kind == "Conv"]
    assert convs and all(p.processor == "chip" for p in convs)
    assert all("benefit" in p.why for p in convs)
    q = next(p for p in placed.values() if p.op.kind == "QuantizeLinear")
    assert q.processor == "host" and "edges" in q.refusals["chip"]


def test_scores_are_the_seeds_sums():
    p = _placed(_library())["conv1"]
    sc = p.scores["chip"]
    assert sc.cost == sc.t + sc.a and sc.benefit == sc.s + sc.o
    assert sc.o == 1.0 and sc.s > 0          # a convolution: multiplies in int8


def test_when_no_processor_passes_the_least_cost_wins():
    placed = _placed(_library(), thresholds=Thresholds(benefit=1e6))
    p = placed["conv1"]
    assert p.processor == "chip" and "least cost" in p.why
    placed = _placed(_library(), thresholds=Thresholds(cost=0.0))
    assert "least cost" in placed["conv1"].why


def test_a_slow_operation_joins_its_fast_predecessor():
    """A max pool slower on the chip than on the host, alone, yet fused with the
    convolution before it the pair is faster on the chip."""
    placed = _placed(_library(chip_rate=1e-9, host_rate=1e-6, pool_chip=1e-5))
    pool = placed["pool"]
    assert pool.scores["chip"].s < 0
    assert pool.processor == "chip" and "fused with 'conv1'" in pool.why


def test_a_slow_chip_loses_everything_to_the_host():
    placed = _placed(_library(chip_rate=1e-3, host_rate=1e-9))
    assert all(p.processor == "host" for p in placed.values())


def test_the_users_override_comes_first_and_is_checked():
    lib = _library()
    assert _placed(lib, overrides={"conv1": "host"})["conv1"].why == "the user's choice"
    with pytest.raises(CompileError, match="names no operation.*nosuch"):
        _placed(lib, overrides={"nosuch": "host"})
    with pytest.raises(CompileError, match="the processors are chip, core, host"):
        _placed(lib, overrides={"conv1": "gpu"})
    q = next(p.op.name for p in _placed(lib).values() if p.op.kind == "QuantizeLinear")
    with pytest.raises(CompileError, match=f"--assign {q}=chip: chip cannot run it"):
        _placed(lib, overrides={q: "chip"})


def test_thresholds_default_to_any_benefit_at_any_cost():
    assert Thresholds() == Thresholds(0.0, math.inf)
