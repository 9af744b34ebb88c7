"""The compiler's error types, raised by every pass and caught by the front ends."""


class CompileError(ValueError):
    """A network that cannot be compiled for the chosen chip, with the reason and what
    to change: the user's to fix."""


class InternalError(RuntimeError):
    """A broken invariant of the compiler itself (a bug, not the input's fault)."""

    def __init__(self, message: str):
        super().__init__(f"internal: {message}")


class OnnxNodeError(CompileError):
    """One node of an ONNX model that the importer does not take: ``node`` is its name as
    the model gives it (empty for an unnamed node), ``op_type`` its operator as the model
    writes it (``"Conv"`` for a QDQ convolution, even where the message speaks of the
    ``QLinearConv`` it was folded into). The message names the node and what to change.
    A caller that places operations (the chip or the host) runs such a node elsewhere;
    a model-level refusal (a file that cannot be read, an input or output of the wrong
    type) is a plain CompileError."""

    def __init__(self, message: str, *, node: str, op_type: str):
        super().__init__(message)
        self.node = node
        self.op_type = op_type

    def __reduce__(self):                   # keyword arguments survive pickling
        return _onnx_node_error, (str(self), self.node, self.op_type)


def _onnx_node_error(message: str, node: str, op_type: str) -> OnnxNodeError:
    return OnnxNodeError(message, node=node, op_type=op_type)


class InvalidOnnxNode(OnnxNodeError):
    """An ONNX node that no processor can run as written: it breaks the ONNX
    specification or contradicts itself (a scale of 0, below 0, NaN or infinite; pads
    of the wrong length; a pool without ``kernel_shape``; weights of another rank than
    the convolution's input). Unlike a plain OnnxNodeError it is not moved to the
    host: the model is the user's to correct."""

    def __reduce__(self):
        return _invalid_onnx_node, (str(self), self.node, self.op_type)


def _invalid_onnx_node(message: str, node: str, op_type: str) -> InvalidOnnxNode:
    return InvalidOnnxNode(message, node=node, op_type=op_type)
