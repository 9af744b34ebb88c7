"""How far a chip operation may be from onnxruntime, and the check that it is not
farther (docs/assignment.md, "Agreement with onnxruntime"; the derivation is
docs/notes/onnx-agreement.md).

ONNX requantises by a float scale, the chip by ``mult / 2**shift``. Fed the same int8
inputs, one operation of the chip differs from ONNX by at most ``1 + floor(256 e)``
steps, ``e`` the multiplier's relative error (at most ``0.5 / mult``): one step for a
16-bit multiplier of at least 129. An Add's two 8-bit multipliers over a common shift
are each within ``2**-(shift+1)`` of their ratio: ``1 + floor(255 / 2**shift)``. A max
pool, a Flatten, a folded Relu and a Concat of one quantisation move int8 values and
are exact. End to end there is no useful bound (each layer amplifies what it is fed),
so the check is per operation, each fed onnxruntime's own inputs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from systolica.compiler.assignment.partition import Plan
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.ops import Add, AvgPool2d, Conv2d, Dense, GlobalAvgPool, MatMulT


class OracleError(CompileError):
    """onnxruntime could not run the model to compare with."""


@dataclass
class Agreement:
    """One output against onnxruntime: values differing, and by how much (steps of
    its int8 scale for a quantised value, else absolute)."""
    name: str
    values: int
    differing: int
    max_difference: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.max_difference <= self.tolerance


def layer_bound(op) -> int:
    """The steps one layer of the chip may differ from ONNX given the same inputs."""
    if isinstance(op, Add):
        return 1 + math.floor(255 / 2 ** op.shift)
    if isinstance(op, (Dense, MatMulT, Conv2d)) and op.out_dtype == "int32":
        return 0                        # no requantisation: exact
    if isinstance(op, (Conv2d, Dense, MatMulT, GlobalAvgPool, AvgPool2d)):
        mult = int(np.min(np.atleast_1d(op.mult)))
        return 1 + math.floor(256 * 0.5 / mult)
    return 0                            # moves int8 values


def graph_bound(graph) -> int:
    """An operation's bound: its graph's largest layer bound (its layers are fed by
    each other only through exact moves, or it is one layer and its requantisations
    of the inputs, each bounded alike)."""
    return max((layer_bound(n.op) for n in graph.nodes), default=0)


#: The largest difference end to end an output may show: int8 values in steps (and
#: float ones a DequantizeLinear made, in its steps), other float ones absolute (a
#: Softmax's probabilities). Not a bound (there is none end to end):
#: a guard against a run gone wrong, past the per-operation bounds that are checked.
DEFAULT_TOLERANCE = {"int8": 8.0, "float": 0.05}


def against_onnxruntime(plan: Plan, ours: dict[str, np.ndarray],
                        tolerance: float | None
                        ) -> tuple[list[Agreement], list[Agreement]]:
    """``(end to end, isolated)``: the model's outputs and then every value a chip
    or core segment gave (the tolerance binds the outputs; the values between segments show
    where a difference began), against onnxruntime's; and each chip operation run by
    the numpy reference of its import on onnxruntime's inputs, against onnxruntime's
    output, within its bound."""
    chip_ops = [op for s in plan.segments if s.processor == "chip" for op in s.ops]
    # the values chip and core segments give (the core's: its kernels' int8 results)
    watched = [v for s in plan.segments if s.processor != "host" for v in s.writes]
    watched += [v for op in chip_ops for v in op.reads + op.writes]
    theirs = _onnxruntime_values(plan, [v for v in dict.fromkeys(watched)
                                        if v not in plan.outputs], ours)
    steps = _dequantised_steps(plan)
    end_to_end = []
    for o in list(plan.outputs) + [v for s in plan.segments if s.processor != "host"
                                   for v in s.writes if v not in plan.outputs]:
        if o in plan.outputs and (o not in ours or o not in theirs):
            # an output not compared is not an output that agrees
            end_to_end.append(Agreement(o, 0, 0, math.inf, 0.0 if tolerance is None
                                        else tolerance))
            continue
        if o not in ours or o not in theirs:
            continue
        tol = math.inf if o not in plan.outputs else tolerance
        end_to_end.append(_agreement(o, ours[o], theirs[o], tol, steps.get(o)))
    isolated = [_isolated(plan, op, theirs) for op in chip_ops]
    return end_to_end, [a for a in isolated if a is not None]


def _with_producers(plan: Plan, op) -> list:
    """`op` and the operations of its chip segment that make its operands: a join is
    imported with the layers that write it (alone, its operands would be the
    program's inputs, which the chip does not join in place)."""
    seg = next(s for s in plan.segments if op in s.ops)
    return [o for o in seg.ops if o.index in op.preds] + [op]


def _onnxruntime_values(plan: Plan, extra: list[str],
                        ours: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every output of the model and the values `extra`, as onnxruntime computes them
    on the run's inputs. An extra value's type is the model's, or where ONNX's shape
    inference gives none (an output of onnxruntime's own operators) that of ours."""
    from onnx import helper

    from systolica.compiler.assignment.operations import value_types
    from systolica.models.onnx_zoo import runtime_session
    proto = type(plan.model.proto)()
    proto.CopyFrom(plan.model.proto)
    types = value_types(plan.model.proto)

    def elem_type(v: str) -> int:
        known = types.get(v, (0, None))[0]
        if known or v not in ours:
            return known
        return helper.np_dtype_to_tensor_dtype(np.asarray(ours[v]).dtype)
    proto.graph.output.extend(helper.make_tensor_value_info(v, elem_type(v), None)
                              for v in extra)
    try:
        sess = runtime_session(proto)
        feeds = {i.name: plan.model.inputs[i.name] for i in sess.get_inputs()}
        results = sess.run(None, feeds)
    except Exception as e:          # onnxruntime's own errors are plain RuntimeErrors
        why = str(e).splitlines()[0]
        values = _reference_values(plan, proto, why)
        plan.notes.append(f"onnxruntime cannot run model {plan.model.name!r} ({why}); "
                          f"compared with the ONNX reference evaluator (onnx.reference) "
                          f"instead")
        return values
    return {o.name: np.asarray(r) for o, r in zip(sess.get_outputs(), results)}


def _reference_values(plan: Plan, proto, why: str) -> dict[str, np.ndarray]:
    """`proto`'s outputs as the ONNX reference evaluator computes them (with the host's
    kernels: onnxruntime lacks some of its kernels' forms, e.g. a ConvInteger with a
    weight zero point per channel)."""
    from systolica.host.kernels import HostModel
    try:
        host = HostModel(proto)
        return host.run({i.name: plan.model.inputs[i.name] for i in proto.graph.input})
    except Exception as e:
        raise OracleError(f"onnxruntime cannot run model {plan.model.name!r} to compare "
                          f"with ({why}), nor the ONNX reference evaluator "
                          f"({str(e).splitlines()[0]})") from None


def _dequantised_steps(plan: Plan) -> dict[str, float]:
    """The model's float outputs made by a DequantizeLinear of one scale: that scale
    (they are compared in its steps)."""
    from onnx import numpy_helper
    g = plan.model.proto.graph
    consts = {t.name: t for t in g.initializer}
    out = {}
    for n in g.node:
        if (n.op_type == "DequantizeLinear" and n.output[0] in plan.outputs
                and n.input[1] in consts):
            scale = numpy_helper.to_array(consts[n.input[1]])
            if scale.size == 1:
                out[n.output[0]] = float(scale)
    return out


def _agreement(name, mine, theirs, tolerance, step: float | None = None) -> Agreement:
    mine, theirs = np.asarray(mine), np.asarray(theirs)
    if mine.size != theirs.size:            # a value of another shape agrees with none
        return Agreement(name, int(theirs.size), int(theirs.size), math.inf,
                         DEFAULT_TOLERANCE["int8"] if tolerance is None else tolerance)
    if step:                    # a dequantised int8 value: compared in its steps
        mine, theirs = np.rint(mine / step).astype(np.int64), np.rint(theirs / step)
    if mine.dtype.kind in "iu":
        diff = np.abs(mine.astype(np.int64) - theirs.astype(np.int64).reshape(mine.shape))
        tol = DEFAULT_TOLERANCE["int8"] if tolerance is None else tolerance
    else:
        diff = np.abs(mine.astype(np.float64) - theirs.astype(np.float64).reshape(mine.shape))
        tol = DEFAULT_TOLERANCE["float"] if tolerance is None else tolerance
    return Agreement(name, int(diff.size), int((diff > 0).sum()),
                     float(diff.max()) if diff.size else 0.0, tol)


def _isolated(plan: Plan, op, theirs: dict[str, np.ndarray]) -> Agreement | None:
    """Chip operation `op` imported alone (a join with the layers that write it: the
    bound holds, the join moves their values exactly), fed onnxruntime's inputs, its
    numpy reference (which the golden model and the RTL equal) against onnxruntime."""
    from systolica.compiler.assignment.submodel import submodel
    from systolica.compiler.errors import OnnxNodeError
    from systolica.compiler.frontend import onnx_import
    from systolica.compiler.graph import reference
    sub = submodel(plan.model.proto, [op], f"op_{op.index}",
                   outputs=[v for v in op.writes])
    try:
        graph = onnx_import.load(sub, inputs={i.name: theirs[i.name]
                                              for i in sub.graph.input})
    except OnnxNodeError:
        if op.kind in ("Flatten", "Relu"):
            # a move the chip takes only beside its reader or producer: its values are
            # checked as its reader's operands (an exact reshape or clamp)
            return None
        sub = submodel(plan.model.proto, _with_producers(plan, op), f"op_{op.index}",
                       outputs=[v for v in op.writes])
        graph = onnx_import.load(sub, inputs={i.name: theirs[i.name]
                                              for i in sub.graph.input})
    got = reference.outputs(graph)
    values, differing, worst = 0, 0, 0.0
    for v, t in zip([o.name for o in sub.graph.output], graph.outputs):
        mine = got[t].reshape(theirs[v].shape)
        diff = np.abs(mine.astype(np.int64) - theirs[v].astype(np.int64))
        values += diff.size
        differing += int((diff > 0).sum())
        worst = max(worst, float(diff.max()) if diff.size else 0.0)
    return Agreement(op.name, values, differing, worst, float(graph_bound(graph)))
