"""Front ends: ONNX models (``onnx_import``) and program text (``text``, ``stp``,
``chip_text``: latency-insensitive statements, seed 002) into the compiler."""
