"""Operations and segments (docs/assignment.md, steps 4 and 6): what one operation
holds, segments in an order where every value is made before it is read, and a model
the chip ran whole before assignment still runs whole, the same program byte for
byte."""

from __future__ import annotations

import functools

import numpy as np

from systolica.arch.config import preset
from systolica.compiler import compile_network
from systolica.compiler.assignment.operations import operations
from systolica.compiler.assignment.partition import PlanOptions, plan_model
from systolica.compiler.frontend import onnx_import
from systolica.models import onnx_zoo

TINY = preset("tiny")


@functools.cache
def _plan(make):
    return plan_model(TINY, make())


def test_a_qdq_conv_with_its_relu_is_one_operation():
    plan = _plan(onnx_zoo.qdq_cnn)
    conv = next(p.op for p in plan.placements if p.op.kind == "Conv")
    kinds = sorted(n.op_type for n in conv.nodes)
    assert kinds.count("Relu") == 1 and "QuantizeLinear" in kinds
    assert "DequantizeLinear" in kinds
    # work: the convolution's multiply-accumulates
    assert conv.work > conv.bytes_out


def test_segments_read_only_values_made_before_them():
    for make in (onnx_zoo.float_cnn, onnx_zoo.float_resnet, onnx_zoo.qdq_resnet):
        plan = _plan(make)
        known = set(plan.model.inputs)
        for seg in plan.segments:
            assert set(seg.reads) <= known, (make.__name__, seg.index)
            known.update(seg.writes)
        assert set(plan.outputs) <= known
        procs = [s.processor for s in plan.segments]
        assert all(a != b for a, b in zip(procs, procs[1:])), procs


def test_a_model_the_chip_ran_whole_is_one_chip_segment_and_the_same_program():
    """Assignment costs no speed: the QOperator inception block, every node of which
    the chip ran before, is one chip program equal to the importer's."""
    plan = _plan(onnx_zoo.inception)
    assert [s.processor for s in plan.segments] == ["chip"]
    inputs = dict(plan.model.inputs)
    seg = onnx_import.load(plan.segments[0].proto, inputs=inputs)
    whole = onnx_import.load(onnx_zoo.inception(), inputs=inputs)
    assert compile_network(TINY, seg).image == compile_network(TINY, whole).image


def test_the_report_counts_every_operation_once():
    plan = _plan(onnx_zoo.float_resnet)
    assert sum(plan.per_processor().values()) == len(operations(plan.model.proto))
    seen = [op.index for s in plan.segments for op in s.ops]
    assert sorted(seen) == list(range(len(plan.placements)))


def test_the_seed_gives_the_inputs():
    a = plan_model(TINY, onnx_zoo.float_cnn(), options=PlanOptions(seed=1))
    b = plan_model(TINY, onnx_zoo.float_cnn(), options=PlanOptions(seed=2))
    assert not np.array_equal(a.model.inputs["x"], b.model.inputs["x"])
