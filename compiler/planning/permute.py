"""An N-D permutation of an int8 tensor as the pieces the array moves (docs/contract.md,
"Transposes"). Entry point: :func:`plan_pieces`.

A tensor of any rank is stored as its 2-D view ``[prod(shape[:-1]), shape[-1]]`` in the
activation layout: its rows are the index tuples of the leading axes, in order, its
columns the last axis. A permutation then either

* moves the last axis (``q = perm[-1]`` is not the input's last axis): for every index
  of the other axes (the batch) the ``[Q, L]`` matrix whose rows are the input rows
  along axis ``q`` is transposed; its rows are ``sq`` rows apart in the input's view and
  its transposed rows ``sl`` apart in the output's (one strided DMA each way); or
* keeps it: every output row is one input row, a copy in runs of evenly spaced rows.

Pure Python on shapes; it knows nothing of the chip but the run length and the DMA's
stride limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class PermPlan:
    mode: str                     # "transpose" or "copy"
    in_rows: int                  # rows of the input's 2-D view
    out_rows: int                 # rows of the output's 2-D view
    L: int                        # the input's last axis (its view's columns)
    Q: int                        # the output's last axis
    # "transpose": per batch (first input row, first output row); rows of the [Q, L]
    # matrix are `sq` input rows apart, rows of its transpose `sl` output rows apart
    bases: tuple[tuple[int, int], ...] = ()
    sq: int = 1
    sl: int = 1
    # "copy": (first output row, first input row, input row stride, rows) per run
    runs: tuple[tuple[int, int, int, int], ...] = ()


def row_strides(shape: tuple[int, ...]) -> list[int]:
    """Rows of the 2-D view between consecutive indices of each leading axis."""
    return [math.prod(shape[a + 1:-1]) for a in range(len(shape) - 1)]


@lru_cache(maxsize=256)
def plan_pieces(shape: tuple[int, ...], perm: tuple[int, ...], run: int,
         max_stride: int) -> PermPlan:
    """The pieces of ``np.transpose(x, perm)`` for ``x`` of `shape` (``perm`` already
    normalised: a permutation of ``range(len(shape))``); copy runs of at most `run`
    rows, each with an input row stride of at most `max_stride`."""
    n = len(shape)
    last = n - 1
    out_shape = tuple(shape[p] for p in perm)
    rs_in, rs_out = row_strides(shape), row_strides(out_shape)
    out_stride = {perm[k]: rs_out[k] for k in range(n - 1)}   # input axis -> output rows
    P_in, P_out = math.prod(shape[:-1]), math.prod(out_shape[:-1])
    q = perm[-1]
    if q != last:
        batch = [a for a in range(n - 1) if a != q]
        bases = tuple((sum(i * rs_in[a] for i, a in zip(idx, batch)),
                       sum(i * out_stride[a] for i, a in zip(idx, batch)))
                      for idx in np.ndindex(*[shape[a] for a in batch]))
        return PermPlan("transpose", P_in, P_out, shape[-1], shape[q], bases=bases,
                        sq=rs_in[q], sl=out_stride[last])
    # output row j holds input row src[j]
    src = np.arange(P_in).reshape(shape[:-1]).transpose(perm[:-1]).reshape(-1) \
        if n > 1 else np.zeros(1, dtype=np.int64)
    runs, j = [], 0
    while j < P_out:
        count, stride = 1, 1
        if j + 1 < P_out:
            d = int(src[j + 1] - src[j])
            if 0 < d <= max_stride:
                stride = d
                while count < run and j + count < P_out \
                        and src[j + count] - src[j + count - 1] == d:
                    count += 1
        runs.append((j, int(src[j]), stride, count))
        j += count
    return PermPlan("copy", P_in, P_out, shape[-1], out_shape[-1], runs=tuple(runs))
