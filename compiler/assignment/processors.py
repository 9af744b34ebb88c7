"""The processors an operation may run on, in the order the assigner tries them
(docs/assignment.md, step 5): the array with its vector unit (``chip``), the chip's
management core (``core``: its C kernels on tensors in the chip's DRAM), then the
host CPU (``host``: numpy kernels as ONNX defines them). Each says whether it can run an
operation, and if not, why (the report's reason)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from systolica.compiler.assignment.operations import Operation
from systolica.compiler.assignment.submodel import submodel
from systolica.compiler.errors import CompileError

#: What the library calls each chip-run ONNX kind (its calibration kernel's family).
CHIP_FAMILIES = {
    "Conv": "conv", "QLinearConv": "conv", "ConvInteger": "conv",
    "MatMul": "dense", "Gemm": "dense", "QLinearMatMul": "dense", "QGemm": "dense",
    "MatMulInteger": "dense",
    "MaxPool": "max_pool", "GlobalMaxPool": "max_pool", "AveragePool": "avg_pool",
    "Add": "add", "QLinearAdd": "add",
    "GlobalAveragePool": "global_avg_pool", "QLinearGlobalAveragePool": "global_avg_pool",
    "Concat": "concat", "QLinearConcat": "concat", "Flatten": "move", "Relu": "move",
}


class Processor(ABC):
    name: str

    @abstractmethod
    def refusal(self, op: Operation, proto) -> str | None:
        """Why this processor cannot run `op` of model `proto`; None if it can."""

    @abstractmethod
    def family(self, op: Operation) -> str:
        """The function library's kind for `op` on this processor."""

    def work(self, op: Operation) -> int:
        """`op`'s work as the library's points count it (MACs, or elements)."""
        return op.work


class Chip(Processor):
    """The array and its vector unit: an operation runs here if the ONNX importer
    lowers it (tried on the operation alone; its neighbours are checked when the
    segments are imported)."""
    name = "chip"

    def refusal(self, op: Operation, proto) -> str | None:
        if op.scalar:
            return "a scalar operation (shapes, parameters)"
        if op.kind in ("QuantizeLinear", "DequantizeLinear"):
            return "quantising and dequantising at the model's edges are the host's"
        if op.kind not in CHIP_FAMILIES:
            return f"the chip has no {op.kind}"
        if CHIP_FAMILIES[op.kind] in ("move", "concat"):
            # a view or clamp of its producer, or a join its producers write: alone its
            # operands would be the program's inputs; its segment decides
            return None
        from systolica.compiler.frontend import onnx_import
        try:
            onnx_import.load(submodel(proto, [op], f"try_{op.index}"))
        except CompileError as e:
            return str(e)
        return None

    def family(self, op: Operation) -> str:
        return CHIP_FAMILIES[op.kind]


class Host(Processor):
    """The host CPU: any operator the ONNX reference evaluator implements (numpy, by
    the ONNX definition)."""
    name = "host"

    def refusal(self, op: Operation, proto) -> str | None:
        from systolica.host import kernels
        missing = kernels.missing([n for n in op.nodes])
        return f"no host kernel for {', '.join(missing)}" if missing else None

    def family(self, op: Operation) -> str:
        return op.kind

    def work(self, op: Operation) -> int:
        return max(op.work, op.elements_in) if op.kind == "ArgMax" else op.work


class Core(Processor):
    """The chip's management core: its C kernels (softmax, argmax, add) on int8
    tensors where they are in the chip's DRAM (``compiler/assignment/core_ops.py``
    says which operations they run). A chip without the core is refused by the
    assigner (its function library has no core points)."""
    name = "core"

    def refusal(self, op: Operation, proto) -> str | None:
        from systolica.compiler.assignment.core_ops import lower
        got = lower(op, proto)
        return got if isinstance(got, str) else None

    def family(self, op: Operation) -> str:
        from systolica.compiler.assignment.core_ops import CORE_FAMILIES
        return CORE_FAMILIES[op.kind]

    def work(self, op: Operation) -> int:
        # every kernel passes over its input: an ArgMax's output is one per row
        return max(op.work, op.elements_in)


PROCESSORS: dict[str, Processor] = {p.name: p for p in (Chip(), Core(), Host())}
ORDER = ("chip", "core", "host")
