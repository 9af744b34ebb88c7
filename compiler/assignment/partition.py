"""Placed operations as a sequence of segments (docs/assignment.md, step 6), and the
whole of planning a model: load, clean up, quantise, assign, partition, and check
every chip segment through the importer (an operation it turns down in its
context moves to the host, with the importer's reason)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from systolica.arch.config import ChipConfig, require_config
from systolica.compiler.assignment import calibrate
from systolica.compiler.assignment import library as library_module
from systolica.compiler.assignment.assign import Placement, Thresholds, assign
from systolica.compiler.assignment.operations import Operation, operations
from systolica.compiler.assignment.submodel import submodel
from systolica.compiler.errors import CompileError, InvalidOnnxNode, OnnxNodeError
from systolica.compiler.frontend import onnx_model, onnx_quantise, onnx_simplify


@dataclass
class Segment:
    index: int
    processor: str
    ops: list[Operation]
    proto: object                    # its sub-model
    reads: tuple[str, ...]           # the values it takes (by ONNX name)
    writes: tuple[str, ...]          # the values it gives later segments or the outputs


@dataclass
class Plan:
    """A model planned for a chip: its segments in run order."""
    cfg: ChipConfig
    model: onnx_model.OnnxModel      # quantised, cleaned up
    placements: list[Placement]
    segments: list[Segment]
    outputs: tuple[str, ...]
    library: library_module.Library
    notes: list[str] = field(default_factory=list)

    def per_processor(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.placements:
            out[p.processor] = out.get(p.processor, 0) + 1
        return out


@dataclass(frozen=True)
class PlanOptions:
    """How a model is planned: the assigner's thresholds and the user's processor per
    operation name; for a float model, its calibration inputs (None: random) and
    whether weights get a scale per output channel; the seed of random inputs; the
    function library's file (None: the preset's); the inputs to take as constants
    (weights, scales and zero points a model takes as inputs, their data given with
    the inputs: ``onnx_model.load``'s `constants`)."""
    thresholds: Thresholds = Thresholds()
    overrides: Mapping[str, str] | None = None
    calibration: Iterable | None = None
    per_channel: bool = False
    seed: int = 0
    library: str | None = None
    constants: tuple[str, ...] = ()


def plan_model(cfg: ChipConfig, model, inputs: Mapping[str, np.ndarray] | None = None,
               options: PlanOptions = PlanOptions()) -> Plan:
    """Plan ONNX `model` (a path, bytes or ModelProto) for chip `cfg`, its inputs
    `inputs` by name (missing ones: random)."""
    require_config(cfg, "plan_model(cfg, model)", CompileError)
    if not isinstance(options, PlanOptions):
        raise CompileError(f"plan_model: options must be a PlanOptions, not "
                           f"{type(options).__name__}")
    if inputs is not None and not isinstance(inputs, Mapping):
        raise CompileError(f"plan_model: inputs must be a mapping of input name to "
                           f"array (or None: random ones), not {type(inputs).__name__}")
    seed, overrides, thresholds = options.seed, options.overrides, options.thresholds
    where = onnx_model.where_of(model)
    m = onnx_model.load(model, inputs, seed=seed, constants=options.constants)
    onnx_simplify.simplify(m)
    if m.is_float():
        m = onnx_quantise.quantise(m, options.calibration, per_channel=options.per_channel,
                                   seed=seed)
    elif options.calibration is not None:
        raise CompileError(f"model {m.name!r} is quantised already, so its calibration "
                           f"inputs (--calibration) would be ignored: they are for a float "
                           f"model; drop them")
    lib = calibrate.library_for(cfg, options.library)
    ops = operations(m.proto)
    refused: dict[int, str] = {}
    for _ in range(len(ops) + 1):
        placements = assign(ops, m.proto, lib, thresholds=thresholds, overrides=overrides,
                            refused=refused)
        segments = _segments(m.proto, ops, placements)
        turned_down = _check_chip_segments(segments, where)
        if turned_down is None:
            break
        index, reason = turned_down
        if overrides and ops[index].name in overrides:
            raise CompileError(f"--assign {ops[index].name}=chip: {reason}")
        refused[index] = reason
    outputs = tuple(o.name for o in m.proto.graph.output)
    return Plan(cfg, m, placements, segments, outputs, lib, list(m.notes) + lib.notes)


def _run_order(ops: list[Operation], where: dict[int, str]) -> list[Operation]:
    """A topological order that keeps each processor's work together: the ready
    operations of the current processor first."""
    left = {op.index: len(op.preds) for op in ops}
    ready = [op.index for op in ops if not op.preds]
    out: list[Operation] = []
    current = where[ready[0]] if ready else None
    while ready:
        same = [k for k in ready if where[k] == current]
        k = min(same) if same else min(ready)
        current = where[k]
        ready.remove(k)
        out.append(ops[k])
        for s in sorted(ops[k].succs):
            left[s] -= 1
            if left[s] == 0:
                ready.append(s)
    return out


def _segments(proto, ops, placements) -> list[Segment]:
    where = {p.op.index: p.processor for p in placements}
    runs: list[tuple[str, list[Operation]]] = []
    for op in _run_order(ops, where):
        if runs and runs[-1][0] == where[op.index]:
            runs[-1][1].append(op)
        else:
            runs.append((where[op.index], [op]))
    graph_outputs = {o.name for o in proto.graph.output}
    segments = []
    for k, (proc, seg_ops) in enumerate(runs):
        later = {v for _, rest in runs[k + 1:] for op in rest for v in op.reads}
        written = [v for op in seg_ops for v in op.writes
                   if v in later or v in graph_outputs]
        made = {v for op in seg_ops for v in op.writes}
        reads = [v for op in seg_ops for v in op.reads if v not in made]
        if not written:
            continue
        sub = submodel(proto, seg_ops, f"segment_{k}_{proc}", outputs=written)
        segments.append(Segment(len(segments), proc, seg_ops, sub,
                                tuple(dict.fromkeys(reads)), tuple(written)))
    return segments


def _check_chip_segments(segments: list[Segment], where: str) -> tuple[int, str] | None:
    """The first operation a chip segment's import turns down, with the reason;
    None when every chip segment imports. A node no processor can run (an
    InvalidOnnxNode) is the model's fault: raised, naming the model (`where`)."""
    from systolica.compiler.frontend import onnx_import
    for seg in segments:
        if seg.processor != "chip":
            continue
        try:
            onnx_import.load(seg.proto)
        except InvalidOnnxNode as e:
            raise InvalidOnnxNode(f"{where}: {e}", node=e.node, op_type=e.op_type) from None
        except OnnxNodeError as e:
            for op in seg.ops:
                if any(n.name == e.node for n in op.nodes):
                    return op.index, str(e)
            raise CompileError(f"{where}: {e}") from None
        except CompileError as e:
            # not one node's fault (a capacity or model-level error): the user's to see
            ops = ", ".join(op.name for op in seg.ops[:4]) + ("..." if len(seg.ops) > 4
                                                               else "")
            raise CompileError(f"{where}: the operations {ops} on the chip: {e}") from None
    return None
