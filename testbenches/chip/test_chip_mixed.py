"""Tile grids whose sides do not divide (docs/contract.md, "Grids whose sides do not
divide"): a 2x3 grid of 4x4 tiles (an 8x12 array) and a 3x2 (12x8). An N-block of ``C``
outputs goes to the blocks of ``R`` columns it overlaps, one VRUN per piece, a
block's later pieces keeping its earlier ones. The wide and tall grids' cases (GEMMs,
dense networks, CNNs, chains, transposes, Concats of maps, depthwise layers) compile
and equal numpy on the golden model in the predicted cycles; `make regress` runs them
on the 2x3 and 3x2 grids' Verilated RTL. A dense layer of small K and N splits into
two tile groups here too (each a tile row and a tile column on the diagonal, the last
tile column or row in none); a chain of them, whose packed outputs would lie across
blocks, is refused."""

from __future__ import annotations

import pytest
import test_chip_nonsquare as tall
import test_chip_wide as wide
from test_depthwise import _random_depthwise

from systolica.arch import fabric
from systolica.arch.config import preset
from systolica.arch.isa import Opcode
from systolica.compiler import CompileError, compile_network
from systolica.compiler.lowering import routing
from systolica.compiler.planning import layout, split
from systolica.compiler.planning.layout import Piece
from systolica.models import zoo as models

from chip_runs import assert_cases_and_random_programs_on_rtl, case_network
from tiers import sample

G23 = preset("tiny_2x3")
G32 = G23.replace(name="tiny_3x2", tile_rows=3, tile_cols=2)
# larger ones, golden model only: 3x4 (12x16) and 2x5 (8x20)
G34 = G23.replace(name="tiny_3x4", tile_rows=3, tile_cols=4)
G25 = G23.replace(name="tiny_2x5", tile_rows=2, tile_cols=5)
GRIDS = [G23, G32, G34, G25]

CASES = {**{f"wide_{k}": v for k, v in wide.CASES.items()},
         **{f"tall_{k}": v for k, v in tall.CASES.items()},
         **{f"maps_{k}": v for k, v in tall.MANY_CHANNELS.items()},
         "inverted_residual": lambda: models.inverted_residual_block(),
         **{f"depthwise_{s}": (lambda s=s: _random_depthwise(s)) for s in (1, 4, 7)},
         # two tile groups, int8 and int32 (a group's K and N at most one tile's 4)
         "split_600x4x4": wide.gemm(600, 4, 4, seed=5),
         "split_301x3x2_int32": wide.gemm(301, 3, 2, dtype="int32", seed=6),
         # a chain in two tile groups: the packed outputs, 8 columns, one K-block
         "split_chain_200x4x4x3x4": wide.split_chain(200, (4, 4, 3, 4))}


def rtl_cases(cfg) -> set[str]:
    """The cases run on the RTL: on the 2x3 grid (`make test`) eleven of the wide
    grid's (GEMMs ragged in every dimension, int32 output, a dense network, CNNs with
    maps wider than R, a chain, transposes int8 and int32, ``a @ bᵀ``), two more
    feature-map cases and one depthwise layer; on the 3x2 (`make regress`) all."""
    if cfg is not G23:
        return set(CASES)
    return {f"wide_{k}" for k in ("gemm_ragged", "gemm_odd_slices", "gemm_int32", "mlp",
                                  "cnn", "wide_maps_24", "bottleneck_32", "chain_fused_crop",
                                  "transpose_37x21", "matmul_t", "int32_transpose_20x9x13")
            } | {"maps_conv_24_stride2", "maps_inception_16", "depthwise_4", "split_600x4x4",
                 "split_301x3x2_int32", "split_chain_200x4x4x3x4"}


def test_pieces_of_the_2x3_grid():
    """The contract's example: on the 8x12 array N-block 0 writes block 0 whole and
    group 0 of block 1 (zeroing group 1); N-block 1 keeps that and writes group 1 of
    block 1 (ACC group 0), then block 2 whole; a ragged last N-block ends its last
    block."""
    assert layout.pieces(G23, 0, 24) == [Piece(0, 0, True, True), Piece(1, 2, True, False)]
    assert layout.pieces(G23, 1, 24) == [Piece(1, -1, False, True), Piece(2, 1, True, True)]
    assert layout.pieces(G23, 1, 16) == [Piece(1, -1, False, True)]
    assert layout.max_pieces(G23) == 2 and layout.max_pieces(G32) == 2
    assert routing.piece_routing(G23, Piece(1, -1, False, True)) == {
        "wb_src[0]": fabric.KEEP, "wb_src[1]": "col.g0"}
    assert routing.piece_routing(G23, Piece(1, 2, True, False)) == {
        "wb_src[0]": "col.g2", "wb_src[1]": fabric.ZERO}


@pytest.mark.parametrize("cfg", [preset("tiny_tall"), preset("tiny_wide"),
                                 wide.WIDE13], ids=lambda c: c.name)
def test_pieces_are_the_sub_blocks_and_slices_of_other_grids(cfg):
    """On a tall grid a piece is sub-block ``nb % k`` of block ``nb // k``, on a wide
    one slice ``s`` of block ``nb*k + s``, with the routing those VRUNs take."""
    T, Tc = cfg.tile_rows, cfg.tile_cols
    N = 5 * max(cfg.rows, cfg.cols) - 4            # a ragged last block or N-block
    for nb in range(layout.blocks(N, cfg.cols)):
        got = layout.pieces(cfg, nb, N)
        if cfg.sub_blocks > 1:
            b, sub = divmod(nb, cfg.sub_blocks)
            last = sub == cfg.sub_blocks - 1 or nb == layout.blocks(N, cfg.cols) - 1
            assert got == [Piece(b, -sub * Tc, sub == 0, last)]
            subs = [sub]
        else:
            k = cfg.slices
            subs = list(range(min(k, layout.blocks(N, cfg.rows) - nb * k)))
            assert got == [Piece(nb * k + s, s * T, True, True) for s in subs]
        for pc, sub in zip(got, subs):
            assert routing.piece_routing(cfg, pc) == routing.gemm_routing(cfg, Opcode.VRUN,
                                                                      sub=sub)


def test_splits_on_these_grids():
    """Two tile groups (the shorter side's tiles): the cost model takes them for a
    layer whose K and N fit one tile (group 1 on tile (1, 1); tile column 2, or tile
    row 2, in no group), and not for N = 8; past them groups of cells (3 of 2x4 on
    the 8x12 array), too small for K = 4. A chain splits where its packed outputs are
    one K-block of R columns, and is refused saying why where they are not."""
    for g in (G23, G32):
        assert [s for s in split.group_counts(g) if not split.cell_groups(g, s)] == [1, 2]
    assert (split.group_rows(G23, 2), split.group_cols(G23, 2)) == (4, 4)
    assert (split.group_rows(G23, 3), split.group_cols(G23, 3)) == (2, 4)
    assert compile_network(G23, CASES["split_600x4x4"]()).plan.split("layer0") == 2
    assert compile_network(G32, CASES["split_600x4x4"]()).plan.split("layer0") == 2
    assert compile_network(G23, wide.gemm(600, 4, 8, seed=5)()).plan.split("layer0") == 1
    with pytest.raises(CompileError, match="layer 'layer0' cannot run in 3 groups of cells: "
                                           "K = 4 > 2"):
        compile_network(G23, wide.gemm(600, 4, 4, seed=5)(), split={"layer0": 3})
    chain = wide.split_chain(300, (4, 4, 3, 4))()
    for g in (G23, G32):
        assert [r.split for r in compile_network(g, chain).layers] == [2, 2, 2]
    with pytest.raises(CompileError, match="3 groups' packed outputs are 12 columns wide, "
                                           "more than the 8-byte row"):
        compile_network(G23, wide.split_chain(300, (2, 2, 2))(), split={"fc1": 3})


@pytest.mark.parametrize("cfg,name", sample(
    [pytest.param(g, n, id=f"{g.name}-{n}") for n in sorted(CASES) for g in GRIDS], 30, 2))
def test_compiles_and_golden_equals_numpy(cfg, name):
    """Pure Python: every case compiles on the 2x3, 3x2, 3x4 and 2x5 grids, and the
    golden model running it equals numpy in the predicted cycles (int32 transposes
    included: on 3x2 an output word is two sub-blocks, the second half full, and on
    3x4 a block's rows and columns stop at N-block ends)."""
    graph, options = case_network(CASES[name])
    tall.golden_equals_numpy_on_time(cfg, graph, **options)


@pytest.mark.rtl
@pytest.mark.regress
@pytest.mark.parametrize("cfg", [G23, G32], ids=lambda c: c.name)
def test_rtl_equals_numpy_golden_and_prediction(cfg):
    """The cases (:func:`rtl_cases`) run on its Verilated RTL in one simulator start
    (results equal numpy and the golden model, cycles the prediction), and random
    legal and illegal programs agree between its RTL and the golden model."""
    assert_cases_and_random_programs_on_rtl(
        cfg, {k: v for k, v in CASES.items() if k in rtl_cases(cfg)}, seed=1000)
