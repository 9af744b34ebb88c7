"""A float model quantised on the way in (docs/assignment.md, step 3): onnxruntime's
static quantiser writes the QDQ form with int8 activations and weights, calibrated on
the data the user gives or on random data (fit for performance studies only, which
the report says). onnxruntime's quantiser is the one users quantise with; writing our
own would make a model the chip runs differ from the one they ship."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from systolica.compiler.errors import CompileError
from systolica.compiler.frontend.onnx_model import OnnxModel


def quantise(model: OnnxModel, calibration: Iterable[Mapping[str, np.ndarray]] | None = None,
             *, per_channel: bool = False, samples: int = 4, seed: int = 0) -> OnnxModel:
    """`model` (float) in the QDQ form. `calibration`: input dicts by ONNX name; None:
    `samples` random ones like the model's inputs (noted). The run's inputs stay the
    float ones the model was given; the graph's first QuantizeLinear quantises them."""
    if calibration is None:
        rng = np.random.default_rng(seed)
        calibration = [{k: rng.standard_normal(v.shape).astype(v.dtype)
                        for k, v in model.inputs.items()} for _ in range(samples)]
        model.notes.append(f"quantised with {samples} random calibration inputs: the "
                           f"figures are for performance, not accuracy; give "
                           f"calibration data for a model that must stay accurate")
    else:
        calibration = _checked_calibration(model, calibration)
        model.notes.append(f"quantised with {len(calibration)} calibration input(s) given")
    proto = run_quantiser(model.proto, calibration, per_channel=per_channel,
                          extra_options={"WeightSymmetric": True},
                          what=f"ONNX model {model.name!r}")
    from onnx import shape_inference
    proto = shape_inference.infer_shapes(proto, data_prop=True)
    return OnnxModel(proto, model.name, model.inputs, model.notes)


def run_quantiser(proto, calibration: Iterable[Mapping[str, np.ndarray]], *,
                  per_channel: bool = False, quant_format: str = "QDQ",
                  extra_options: Mapping | None = None, what: str = "ONNX model"):
    """onnxruntime's ``quantize_static`` on the float `proto`, calibrated on the input
    dicts `calibration`: int8 activations and weights, `quant_format` ``"QDQ"`` or
    ``"QOperator"``, a scale per output channel with `per_channel`. It leaves
    ``sys.path`` and the root logger as it found them (its first import puts its
    transformers on the path; it advises pre-processing, which the front end did)."""
    import logging
    import sys
    path = list(sys.path)
    try:
        from onnxruntime.quantization import (
            CalibrationDataReader,
            QuantFormat,
            QuantType,
            quantize_static,
        )
    except ImportError:
        raise CompileError("quantising a float model needs onnxruntime: pip install "
                           "'systolica[onnx]'") from None
    finally:
        sys.path[:] = path
    import onnx

    class _Reader(CalibrationDataReader):
        def __init__(self):
            self.left = iter(calibration)

        def get_next(self):
            return next(self.left, None)

    root = logging.getLogger()
    level = root.level
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        onnx.save(proto, str(src))
        root.setLevel(logging.ERROR)
        try:
            quantize_static(str(src), str(dst), _Reader(),
                            quant_format=getattr(QuantFormat, quant_format),
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                            per_channel=per_channel, extra_options=dict(extra_options or {}))
        except Exception as e:
            raise CompileError(f"{what}: onnxruntime's quantiser failed "
                               f"({str(e).splitlines()[0]})") from None
        finally:
            root.setLevel(level)
        return onnx.load(str(dst))


def _checked_calibration(model: OnnxModel, calibration) -> list[dict[str, np.ndarray]]:
    """The calibration samples, each a dict with an array for every input of `model`
    of its dtype and shape, finite: else a CompileError naming the sample, the input
    and what the model takes."""
    where = f"ONNX model {model.name!r}"
    samples = list(calibration)
    if not samples:
        raise CompileError(f"{where}: no calibration samples given; give at least one, "
                           f"or none at all for random ones")
    for k, sample in enumerate(samples):
        if not isinstance(sample, Mapping):
            raise CompileError(f"{where}: calibration sample {k} is a "
                               f"{type(sample).__name__}, not a dict of arrays by input "
                               f"name")
        missing = sorted(set(model.inputs) - set(sample))
        unknown = sorted(set(sample) - set(model.inputs))
        if missing or unknown:
            raise CompileError(f"{where}: calibration sample {k} "
                               + (f"has no {missing}" if missing else "")
                               + (" and " if missing and unknown else "")
                               + (f"names {unknown}, which are no inputs" if unknown else "")
                               + f"; the model's inputs are {sorted(model.inputs)}")
        for name, want in model.inputs.items():
            got = np.asarray(sample[name])
            if got.shape != want.shape or got.dtype != want.dtype:
                raise CompileError(f"{where}: calibration sample {k}, input {name!r}: "
                                   f"{got.dtype} of shape {list(got.shape)}; the model "
                                   f"takes {want.dtype} of shape {list(want.shape)}")
            if got.dtype.kind == "f" and not np.all(np.isfinite(got)):
                raise CompileError(f"{where}: calibration sample {k}, input {name!r}: "
                                   f"holds NaN or infinite values; calibrate on finite "
                                   f"data")
    return samples
