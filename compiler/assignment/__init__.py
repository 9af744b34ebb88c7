"""Operation assignment (seed 003; docs/assignment.md): an ONNX model's operations
placed on the chip or the host by cost and benefit, cut into segments."""
