"""Cutting an axis into passes (compiler/planning/tiling.py): seed 001's worked example, and every
pass against a brute-force walk of the windows."""

from __future__ import annotations

import itertools

import pytest

from systolica.compiler import CompileError
from systolica.compiler.planning.tiling import halo, input_span, output_size, passes


def test_seed_example_three_passes_of_160():
    """960-wide input, 7x7 kernel, stride 2, pads 3 and 2: 480 outputs in three passes
    of 160 read 322, 325 and 323 columns; 970 = 960 + two halos of 5."""
    cut = passes(960, 7, 160, stride=2, pad_before=3, pad_after=2)
    assert output_size(960, 7, 2, 1, 3, 2) == 480
    assert [p.inputs for p in cut] == [322, 325, 323]
    assert [(p.pad_before, p.pad_after) for p in cut] == [(3, 0), (0, 0), (0, 2)]
    assert sum(p.inputs for p in cut) == 960 + 2 * halo(7, 2) == 970
    assert [(p.out_lo, p.out_hi) for p in cut] == [(0, 160), (160, 320), (320, 480)]


def _brute(in_size, kernel, stride, dilation, pb, pa, lo, hi):
    taps = {stride * o - pb + k * dilation for o in range(lo, hi) for k in range(kernel)}
    inside = sorted(t for t in taps if 0 <= t < in_size)
    return inside[0], inside[-1] + 1, max(0, -min(taps)), max(0, max(taps) - in_size + 1)


CASES = [c for c in itertools.product((1, 5, 16, 23), (1, 2, 3, 7, 11), (1, 2, 4), (1, 2),
                                     (0, 1, 3), (0, 2))
         if c[0] + c[4] + c[5] >= (c[1] - 1) * c[3] + 1 and c[4] < c[1] and c[5] < c[1]]


def test_every_pass_reads_exactly_its_windows():
    """Over a grid of sizes, kernels, strides, dilations and paddings (one test: each
    case takes microseconds), every pass of every cut matches the windows it covers."""
    assert len(CASES) > 200
    for in_size, kernel, stride, dilation, pb, pa in CASES:
        n = output_size(in_size, kernel, stride, dilation, pb, pa)
        assert n == len(range(0, in_size + pb + pa - (kernel - 1) * dilation, stride))
        for per in (1, 3, n):
            for p in passes(in_size, kernel, per, stride, dilation, pb, pa):
                want = _brute(in_size, kernel, stride, dilation, pb, pa, p.out_lo, p.out_hi)
                got = (p.in_lo, p.in_hi, p.pad_before, p.pad_after)
                assert got == want, (in_size, kernel, stride, dilation, pb, pa, per)


@pytest.mark.parametrize("call, words", [
    (lambda: output_size(4, 7), ["kernel of 7", "does not fit an input of 4", "pad more"]),
    (lambda: passes(16, 3, 0), ["outputs per pass", "positive integer"]),
    (lambda: input_span(5, 5, 16, 3), ["outputs [5, 5)"]),
    (lambda: output_size(16, 3, stride=0), ["stride must be an integer >= 1"]),
    (lambda: output_size(16, 3, pad_before=True), ["padding before", "True"]),
])
def test_bad_tiling_requests_say_what_is_wrong(call, words):
    with pytest.raises(CompileError) as err:
        call()
    for w in words:
        assert w in str(err.value)
