"""Random convolutions through the matcher (hypothesis, derandomised): every layer gets
at least the one-group-at-a-time ``blocks`` mapping, every candidate passes the
realisability check, and the row grid the search found covers the reduction exactly
(tiling factors x extents reach every size, the last tile ragged at most)."""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systolica.arch.config import preset
from systolica.compiler.matching import match, realisable
from systolica.compiler.matching import workloads as W

import tiers

#: ``SYSTOLICA_FUZZ_EXAMPLES=N``: a longer, random campaign.
CAMPAIGN = int(os.environ.get("SYSTOLICA_FUZZ_EXAMPLES", 0))


@st.composite
def convs(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3, 4]))
    cg = draw(st.integers(1, 20))
    kg = draw(st.integers(1, 12))
    kh, kw = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    h = draw(st.integers(dh * (kh - 1) + 1, 24))
    w = draw(st.integers(dw * (kw - 1) + 1, 24))
    return W.conv2d(h=h, w=w, cin=cg * groups, cout=kg * groups, kernel=(kh, kw),
                    stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
                    dilation=(dh, dw), groups=groups)


@pytest.mark.slow
@settings(max_examples=CAMPAIGN or tiers.examples(40), derandomize=not CAMPAIGN,
          deadline=None, database=None)
@given(wl=convs(), chip=st.sampled_from(["tiny", "base", "base-16x8", "base-8x16"]))
def test_random_convs(wl, chip):
    cfg = {"base-16x8": preset("base").replace(tile_cols=1),
           "base-8x16": preset("base").replace(tile_rows=1)}.get(chip) or preset(chip)
    found = match.candidates(cfg, wl)
    rows = [c.mapping.rows for c in found if c.mapping.layout == "blocks"
            and c.mapping.dims("rows") == ("c",)]
    assert rows, f"{wl.describe()}: no one-group blocks mapping"
    for c in found:
        m = c.mapping
        assert realisable.check(m, wl, cfg.rows, cfg.cols) is None
        sizes = dict(zip(wl.fused().dims, wl.fused().sizes)) if "t" in m.dims("rows") \
            else dict(zip(wl.dims, wl.sizes))
        tiles = dict(c.tiling)
        for d, s in sizes.items():
            e = m.extent(d)
            assert tiles[d] * e >= s > (tiles[d] - 1) * e
        assert math.prod(a.extent for a in m.rows) <= cfg.rows
