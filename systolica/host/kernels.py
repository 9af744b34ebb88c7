"""The host's kernels: the ONNX reference evaluator (``onnx.reference``), numpy code
written from the ONNX specification, maintained with the standard, so an operation on
the host computes what ONNX defines. onnxruntime's int8 operators of the
``com.microsoft`` domain that its quantiser writes are added here from their
definition (dequantise, compute in float, quantise, rounding half to even)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
from onnx.reference.op_run import OpRun


def _dq(x, s, zp):
    return (x.astype(np.float32) - np.asarray(zp, np.float32)) * np.asarray(s, np.float32)


def _q(y, s, zp, dtype):
    info = np.iinfo(dtype)
    v = np.rint(y / np.asarray(s, np.float32)) + np.asarray(zp, np.float32)
    return np.clip(v, info.min, info.max).astype(dtype)


class QLinearAdd(OpRun):
    op_domain = "com.microsoft"

    def _run(self, a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp):
        return (_q(_dq(a, a_s, a_zp) + _dq(b, b_s, b_zp), y_s, y_zp, y_zp.dtype),)


class QLinearConcat(OpRun):
    op_domain = "com.microsoft"

    def _run(self, y_s, y_zp, *triples, axis=None, **unused):
        parts = [_dq(triples[k], triples[k + 1], triples[k + 2])
                 for k in range(0, len(triples), 3)]
        return (_q(np.concatenate(parts, axis=axis), y_s, y_zp, y_zp.dtype),)


class QLinearGlobalAveragePool(OpRun):
    op_domain = "com.microsoft"

    def _run(self, x, x_s, x_zp, y_s, y_zp, channels_last=None, **unused):
        axes = (1, 2) if channels_last else (2, 3)
        mean = _dq(x, x_s, x_zp).mean(axis=axes, keepdims=True)
        return (_q(mean, y_s, y_zp, y_zp.dtype),)


def _along(v, axis, ndim):
    """A per-axis scale or zero point shaped to broadcast along `axis`."""
    v = np.asarray(v)
    if v.ndim == 0:
        return v
    shape = [1] * ndim
    shape[axis] = v.size
    return v.reshape(shape)


class QuantizeLinear(OpRun):
    """Opsets 13 to 18 (the evaluator has 19 on): ``saturate(rint(x / s) + zp)``."""

    def _run(self, x, s, zp=None, axis=None, **unused):
        axis = 1 if axis is None else axis % x.ndim
        zp = np.uint8(0) if zp is None else zp
        return (_q(x, _along(s, axis, x.ndim), _along(zp, axis, x.ndim),
                   np.asarray(zp).dtype),)


class DequantizeLinear(OpRun):
    """Opsets 13 to 18: ``(x - zp) * s``."""

    def _run(self, x, s, zp=None, axis=None, **unused):
        axis = 1 if axis is None else axis % max(x.ndim, 1)
        zp = 0 if zp is None else zp
        return (_dq(x, _along(s, axis, x.ndim), _along(zp, axis, x.ndim)),)


class BatchNormalization(OpRun):
    """Inference: ``scale (x - mean) / sqrt(var + eps) + bias`` per channel. The
    evaluator's opset 9 to 13 kernel takes the schema's default momentum as a request
    to update the statistics from the batch (training), which a model run for
    inference never means."""

    def _run(self, x, scale, bias, mean, var, epsilon=None, **unused):
        eps = 1e-5 if epsilon is None else epsilon
        shape = (-1,) + (1,) * (x.ndim - 2)
        y = (scale.reshape(shape) * (x - mean.reshape(shape))
             / np.sqrt(var.reshape(shape) + eps) + bias.reshape(shape))
        return (y.astype(x.dtype),)


_CUSTOM = {c.__name__: c for c in (QLinearAdd, QLinearConcat, QLinearGlobalAveragePool,
                                   QuantizeLinear, DequantizeLinear, BatchNormalization)}


def _is_function(op_type: str) -> bool:
    """Whether ONNX defines `op_type` by a function of other operators (HardSwish,
    ...): the evaluator runs its body."""
    import onnx.defs
    try:
        schema = onnx.defs.get_schema(op_type)
    except Exception:
        return False
    return schema.has_function or schema.has_context_dependent_function


def missing(nodes: Iterable) -> list[str]:
    """The op types of `nodes` with no host kernel."""
    from onnx.reference.ops import load_op
    out = []
    for n in nodes:
        if n.domain in ("", "ai.onnx") and n.op_type not in _CUSTOM:
            try:
                load_op("", n.op_type)
            except Exception:
                if not _is_function(n.op_type):
                    out.append(n.op_type)
        elif n.op_type not in _CUSTOM:
            out.append(f"{n.domain}.{n.op_type}")
    return sorted(set(out))


class HostModel:
    """A sub-model ready to run on the host (built once, run on many inputs)."""

    def __init__(self, proto):
        from onnx.reference import ReferenceEvaluator
        self.proto = proto
        self._run = ReferenceEvaluator(proto, new_ops=list(_CUSTOM.values()))
        self.outputs = [o.name for o in proto.graph.output]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = self._run.run(None, dict(feeds))
        return {k: np.asarray(v) for k, v in zip(self.outputs, values)}
