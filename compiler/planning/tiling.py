"""Cutting a convolution or pooling layer into passes along one spatial axis.

When a layer's input does not fit the CBUF it is computed in passes of output rows
(or columns). A pass producing outputs ``[o0, o1)`` reads the input rows that the
window of any of those outputs touches::

    first = stride*o0 - pad_before
    last = stride*(o1-1) + (kernel-1)*dilation - pad_before

clipped to the input; what falls outside is padding, which the pass supplies itself.
So a pass of ``n`` outputs reads ``stride*(n-1) + (kernel-1)*dilation + 1`` rows less
the padding it covers, and neighbouring passes overlap by ``(kernel-1)*dilation + 1 -
stride`` rows (the halo). Seed 001's example: a 960-wide input, 7x7 kernel, stride 2,
pads 3 and 2, output 480 cut into three passes of 160 reads 322, 325 and 323 columns.
"""

from __future__ import annotations

from dataclasses import dataclass

from systolica.compiler.errors import CompileError


@dataclass(frozen=True)
class Pass:
    """One pass along an axis: outputs ``[out_lo, out_hi)`` read inputs
    ``[in_lo, in_hi)``; their windows reach ``pad_before`` rows before the input and
    ``pad_after`` rows past its end (padding the pass supplies itself)."""
    out_lo: int
    out_hi: int
    in_lo: int
    in_hi: int
    pad_before: int
    pad_after: int

    @property
    def outputs(self) -> int:
        return self.out_hi - self.out_lo

    @property
    def inputs(self) -> int:
        return self.in_hi - self.in_lo


def output_size(in_size: int, kernel: int, stride: int = 1, dilation: int = 1,
                pad_before: int = 0, pad_after: int = 0) -> int:
    """Outputs along an axis (floor division, as ONNX and PyTorch count them)."""
    _check(in_size, kernel, stride, dilation, pad_before, pad_after)
    span = in_size + pad_before + pad_after - (kernel - 1) * dilation - 1
    if span < 0:
        raise CompileError(f"a kernel of {kernel} (dilation {dilation}) does not fit an "
                           f"input of {in_size} with padding {pad_before}+{pad_after}; "
                           f"pad more or use a smaller kernel")
    return span // stride + 1


def input_span(out_lo: int, out_hi: int, in_size: int, kernel: int, stride: int = 1,
               dilation: int = 1, pad_before: int = 0, pad_after: int = 0) -> Pass:
    """The input rows outputs ``[out_lo, out_hi)`` read (from the first to the last
    tap that lands inside the input; with dilation a clipped window may skip the
    rows at its edge) and how far their windows reach past either end."""
    n_out = output_size(in_size, kernel, stride, dilation, pad_before, pad_after)
    if not 0 <= out_lo < out_hi <= n_out:
        raise CompileError(f"outputs [{out_lo}, {out_hi}) are not inside the "
                           f"{n_out} outputs of this axis")
    reach = (kernel - 1) * dilation
    first = stride * out_lo - pad_before
    last = stride * (out_hi - 1) + reach - pad_before
    lo = hi = None
    for o in range(out_lo, out_hi):            # the lowest tap inside the input
        start = stride * o - pad_before
        k = max(0, -(start // dilation) if start < 0 else 0)
        k = k if start + k * dilation >= 0 else k + 1
        if k < kernel and start + k * dilation < in_size:
            lo = start + k * dilation if lo is None else min(lo, start + k * dilation)
        if start >= 0:
            break
    for o in reversed(range(out_lo, out_hi)):  # the highest tap inside the input
        end = stride * o - pad_before + reach
        k = max(0, -(-(end - in_size + 1) // dilation))
        if k < kernel and end - k * dilation >= 0:
            hi = end - k * dilation if hi is None else max(hi, end - k * dilation)
        if end < in_size:
            break
    if lo is None or hi is None:
        raise CompileError(f"outputs [{out_lo}, {out_hi}) read only padding; use less "
                           f"padding")
    return Pass(out_lo, out_hi, lo, hi + 1, max(0, -first), max(0, last - in_size + 1))


def passes(in_size: int, kernel: int, outputs_per_pass: int, stride: int = 1,
           dilation: int = 1, pad_before: int = 0, pad_after: int = 0) -> list[Pass]:
    """An axis cut into passes of ``outputs_per_pass`` outputs (the last may be
    shorter)."""
    if not isinstance(outputs_per_pass, int) or outputs_per_pass < 1:
        raise CompileError(f"outputs per pass must be a positive integer, not "
                           f"{outputs_per_pass!r}")
    n_out = output_size(in_size, kernel, stride, dilation, pad_before, pad_after)
    return [input_span(lo, min(lo + outputs_per_pass, n_out), in_size, kernel, stride,
                       dilation, pad_before, pad_after)
            for lo in range(0, n_out, outputs_per_pass)]


def halo(kernel: int, stride: int = 1, dilation: int = 1) -> int:
    """Input rows two neighbouring passes both read (0 when windows do not overlap)."""
    return max((kernel - 1) * dilation + 1 - stride, 0)


def _check(in_size, kernel, stride, dilation, pad_before, pad_after) -> None:
    for name, value, lo in (("input size", in_size, 1), ("kernel", kernel, 1),
                            ("stride", stride, 1), ("dilation", dilation, 1),
                            ("padding before", pad_before, 0),
                            ("padding after", pad_after, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < lo:
            raise CompileError(f"{name} must be an integer >= {lo}, not {value!r}")
