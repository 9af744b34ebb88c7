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
    import sys
    path = list(sys.path)     # onnxruntime's quantiser puts its transformers on the path
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
    if calibration is None:
        rng = np.random.default_rng(seed)
        calibration = [{k: rng.standard_normal(v.shape).astype(v.dtype)
                        for k, v in model.inputs.items()} for _ in range(samples)]
        model.notes.append(f"quantised with {samples} random calibration inputs: the "
                           f"figures are for performance, not accuracy; give "
                           f"calibration data for a model that must stay accurate")
    else:
        calibration = list(calibration)
        model.notes.append(f"quantised with {len(calibration)} calibration input(s) given")

    class _Reader(CalibrationDataReader):
        def __init__(self):
            self.left = iter(calibration)

        def get_next(self):
            return next(self.left, None)

    import logging
    quiet = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)   # its advice to pre-process: done here
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        onnx.save(model.proto, str(src))
        try:
            quantize_static(str(src), str(dst), _Reader(), quant_format=QuantFormat.QDQ,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                            per_channel=per_channel,
                            extra_options={"WeightSymmetric": True})
        except Exception as e:
            raise CompileError(f"ONNX model {model.name!r}: onnxruntime's quantiser "
                               f"failed ({str(e).splitlines()[0]})") from None
        finally:
            logging.getLogger().setLevel(quiet)
        proto = onnx.load(str(dst))
    from onnx import shape_inference
    proto = shape_inference.infer_shapes(proto, data_prop=True)
    return OnnxModel(proto, model.name, model.inputs, model.notes)
