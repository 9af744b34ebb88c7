"""A non-square tile grid (``tiny_tall``: 4x2 tiles of 4x4, a 16x8 array, the seed's
128x64 shape scaled down; docs/contract.md, "Geometry and data"). Every int8 tensor is
in blocks of R = 16 columns; a GEMM's N-blocks of C = 8 columns are the two sub-blocks
of one (the second written with ``wb_src = keep`` on the first's other groups), and a
transpose cuts each 16x16 block into two 16x8 sub-blocks (seed 004's 128x128 block
on a 128x64 array). GEMMs with ragged K, M, N, a small CNN, transposes (int8 and
int32), a transpose between dense layers and ``a @ bᵀ`` run on its Verilated RTL in one
simulator start: results equal numpy and the golden model, cycles the prediction. The
pure-Python part compiles for 4x2 and 4x1 grids and checks the refusals."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from test_transpose_nd import int32_graph

from systolica import golden
from systolica.arch import isa
from systolica.arch.config import preset
from systolica.arch.instructions import SPEC
from systolica.arch.isa import Opcode
from systolica.arch.loadable import Loadable
from systolica.compiler import CompileError, compile_network
from systolica.compiler.graph import reference
from systolica.compiler.graph.graph import GraphBuilder
from systolica.compiler.planning import layout
from systolica.models import cnn_cases
from systolica.models import zoo as models

from chip_runs import (
    assert_cases_and_random_programs_on_rtl,
    assert_matches_prediction,
    assert_outputs_match,
    compile_and_run_on_rtl,
)
from tiers import sample

TALL = preset("tiny_tall")
# a 4x1 grid: R = 4C, one ACC row is one DRAM word
TALL4 = TALL.replace(name="tiny_tall4", tile_cols=1)
# ratios whose ACC rows end in a padded DRAM word: 3x1 (R = 12, C = 4: two 12-byte
# words for 16 bytes), 6x2 (R = 24, C = 8) and 8x1 (R = 32, C = 4: half a word)
TALL31 = TALL.replace(name="tiny_3x1", tile_rows=3, tile_cols=1)
TALL62 = TALL.replace(name="tiny_6x2", tile_rows=6, tile_cols=2)
TALL81 = TALL.replace(name="tiny_8x1", tile_rows=8, tile_cols=1)
GRIDS = [TALL, TALL4, TALL31, TALL62, TALL81]


def _rng(seed):
    return np.random.default_rng(seed)


def gemm(M, K, N, dtype="int8", seed=0):
    def make():
        rng = _rng(seed)
        b = GraphBuilder(f"gemm_{M}x{K}x{N}_{dtype}")
        x = b.input(rng.integers(-128, 128, (M, K), dtype=np.int8))
        w = rng.integers(-128, 128, (K, N), dtype=np.int8)
        bias = rng.integers(-3000, 3000, N, dtype=np.int32)
        if dtype == "int32":
            y = b.dense(x, w, bias, relu=True, out_dtype="int32")
        else:
            y = b.dense(x, w, bias, mult=5, shift=11, zp=3)
        return b.build(y)
    return make


def mlp():
    rng = _rng(1)
    b = GraphBuilder("mlp")
    x = b.input(rng.integers(-128, 128, (11, 30), dtype=np.int8))
    h = b.dense(x, rng.integers(-128, 128, (30, 27), dtype=np.int8), mult=1, shift=9,
                relu=True)
    return b.build(b.dense(h, rng.integers(-128, 128, (27, 10), dtype=np.int8), mult=1,
                           shift=9))


def transpose(M, N, seed=2):
    def make():
        b = GraphBuilder(f"transpose_{M}x{N}")
        x = b.input(_rng(seed).integers(-128, 128, (M, N), dtype=np.int8))
        return b.build(b.transpose(x))
    return make


def dense_transpose_dense():
    rng = _rng(3)
    b = GraphBuilder("dense_transpose_dense")
    x = b.input(rng.integers(-128, 128, (13, 20), dtype=np.int8))
    h = b.dense(x, rng.integers(-128, 128, (20, 18), dtype=np.int8), mult=1, shift=9)
    t = b.transpose(h)
    return b.build(b.dense(t, rng.integers(-128, 128, (13, 9), dtype=np.int8), mult=1,
                           shift=9))


def matmul_t():
    rng = _rng(4)
    b = GraphBuilder("matmul_t")
    a = b.input(rng.integers(-128, 128, (9, 20), dtype=np.int8), name="a")
    bt = b.input(rng.integers(-128, 128, (19, 20), dtype=np.int8), name="b")
    return b.build(b.matmul_t(a, bt, shift=9))


def cnn():
    rng = _rng(5)
    b = GraphBuilder("small_cnn")
    x = b.input(rng.integers(-128, 128, (1, 9, 9, 3), dtype=np.int8))
    h = b.conv2d(x, rng.integers(-128, 128, (3, 3, 3, 8), dtype=np.int8),
                 rng.integers(-300, 300, 8, dtype=np.int32), pads=1, mult=5, shift=11,
                 relu=True)
    h = b.max_pool2d(h, 2)
    h = b.conv2d(h, rng.integers(-128, 128, (3, 3, 8, 6), dtype=np.int8), stride=2,
                 pads=1, mult=3, shift=11)
    f = b.flatten(b.global_avg_pool(h))
    return b.build(b.dense(f, rng.integers(-128, 128, (6, 5), dtype=np.int8), mult=1,
                           shift=8))


CASES = {
    "gemm_ragged": gemm(19, 37, 30),            # 3 K-blocks, 4 N-blocks (2 blocks of 16)
    "gemm_odd_subblocks": gemm(5, 20, 13),      # 2 N-blocks: one block of 16, both subs
    "gemm_one_subblock": gemm(33, 16, 8),       # N = C: sub-block 0 only
    "gemm_int32": gemm(7, 9, 21, "int32"),      # ACC rows: 2 DRAM words each
    "gemm_exit_top": gemm(40, 3, 6),            # sums leave tile row 0 (early = 3)
    "mlp": mlp,                                 # hidden 27 > C read back as K-blocks
    "transpose_16x16": transpose(16, 16),       # seed 004: one block, two 16x8 subs
    "transpose_12x7": transpose(12, 7),         # 12 block rows: two sub-blocks
    "transpose_37x21": transpose(37, 21),       # ragged blocks, 2 x 3 blocks
    "dense_transpose_dense": dense_transpose_dense,
    "matmul_t": matmul_t,
    "cnn": cnn,
    # feature maps of more channels than C = 8: a layer's N-blocks of 8 are the two
    # sub-blocks of each 16-channel block (convolutions, strided, projection, add,
    # pools, an int8 head of 27); a bottleneck's 1x1 expansion to 32 channels
    "wide_maps_24": lambda: cnn_cases.wide_maps_case(1, channels=24, classes=27),
    "bottleneck_32": lambda: models.bottleneck_block(size=8, cin=16, width=8),
    # int32 transposes: blocks of 8 input rows by 16 columns, each output word in two
    # sub-blocks of 8 bytes (the second keeping the first's groups)
    "int32_transpose_20x9x13": lambda: int32_graph(20, 9, 13, seed=3),
    "int32_transpose_17x30x40_twice": lambda: int32_graph(17, 30, 40, seed=4, twice=True),
}


def _numpy_and_golden(cfg, name):
    c = compile_network(cfg, CASES[name]())
    gold = c.results(golden.run(cfg, Loadable.for_chip(cfg, c.image, c.dram, c.prog_addr)).dram)
    want = reference.outputs(c.graph)
    for k in want:
        np.testing.assert_array_equal(gold[k], want[k], err_msg=f"{name}: golden vs numpy")
    return c


@pytest.mark.parametrize("cfg", GRIDS, ids=lambda c: c.name)
@pytest.mark.parametrize("name", sample(sorted(CASES), 5))
def test_compiles_and_golden_equals_numpy(cfg, name):
    """Pure Python, 4x2, 4x1, 3x1, 6x2 and 8x1 grids: every case compiles, and the
    golden model running the program equals numpy (on the 4x1 grid the CNN's 8
    channels are two N-blocks of C = 4, sub-blocks 0 and 1 of a 16-channel block; on
    the 3x1 grid an int32 transpose's input words hold 3, 3, 3, 1 ... elements, never
    across an N-block's padded end)."""
    _numpy_and_golden(cfg, name)


def test_sub_blocks_use_keep():
    """A 2-sub-block GEMM's second VRUN keeps the first's groups: the program sets
    ``wb_src`` to ``keep`` somewhere; a GEMM of N <= C never does."""
    from systolica.arch import fabric
    table = fabric.muxes(TALL)

    def kept(c):
        return any(table[i].name.startswith("wb_src") and
                   table[i].sources[v] == fabric.KEEP
                   for ins in c.program if ins.op is Opcode.SETCFG
                   for i, v in isa.setcfg_pairs(ins.fields))
    assert kept(compile_network(TALL, gemm(5, 20, 13)()))
    assert not kept(compile_network(TALL, gemm(33, 16, 8)()))


def test_seed004_block_wider_than_the_array():
    """Seed 004's 128x128 block on a 128x64 array, scaled down: a 16x16 block on the
    16x8 array is two 16x8 sub-blocks, each a west load of 8 of its rows (CBUF rows
    ``a`` and ``a + 8``) and an identity MATMUL of 16 rows, written into partitions
    0..7 and 8..15 of the result's rows."""
    c = compile_network(TALL, transpose(16, 16)())
    ops = [i for i in c.program if i.op is not Opcode.SETCFG]
    wloads = [i.w_addr for i in ops if i.op is Opcode.WLOAD]
    assert len(wloads) == 2 and wloads[1] - wloads[0] == TALL.cols
    assert [i.rows for i in ops if i.op is Opcode.MATMUL] == [16, 16]
    vruns = [i for i in ops if i.op is Opcode.VRUN]
    assert len(vruns) == 2 and vruns[0].dst == vruns[1].dst


def test_geometry_of_padded_acc_rows():
    """A tall grid's ratio is any whole number. Where ``4C`` bytes are not whole
    ``R``-byte words (3x1: 16 bytes in 12-byte words; 8x1: in one 32-byte word) an ACC
    row takes whole words, the last padded: packing writes zeros there, unpacking
    ignores it, and the golden model's LOAD_ACC / STORE_ACC do the same."""
    for cfg, words in ((TALL31, 2), (TALL62, 2), (TALL81, 1), (TALL, 2), (TALL4, 1)):
        assert cfg.acc_row_words == words
        assert cfg.acc_row_padded == (cfg in (TALL31, TALL62, TALL81))
    rows = _rng(9).integers(-2**31, 2**31, (5, TALL31.cols), dtype=np.int64).astype(np.int32)
    words = layout.pack_acc_rows(TALL31, rows)
    assert words.shape == (10, 12) and not words[1::2, 4:].any()
    np.testing.assert_array_equal(layout.unpack_acc_rows(TALL31, words), rows)
    chip = SimpleNamespace(cfg=TALL31, dram=np.full((64, 12), 0xAB, np.uint8),
                           acc=np.zeros((32, TALL31.cols), np.int32), rd_bytes=0, wr_bytes=0)
    chip.acc[3:8] = rows
    store = {"kind": isa.DmaKind.STORE_ACC, "dram_addr": 10, "dram_stride": 2,
             "buf_addr": 3, "rows": 5}
    SPEC[Opcode.DMA].execute(chip, store)
    np.testing.assert_array_equal(chip.dram[10:20], words)
    chip.dram[11:20:2, 4:] = 0x5A               # a padded word's rest is not loaded
    SPEC[Opcode.DMA].execute(chip, dict(store, kind=isa.DmaKind.LOAD_ACC, buf_addr=20))
    np.testing.assert_array_equal(chip.acc[20:25], rows)


def test_a_chain_takes_at_most_c_channels_a_layer():
    # layer by layer a feature map takes any number of channels; a chain of
    # convolutions at most C = 8 a layer: the cost model never chains more, and a
    # chain asked for is refused by layer name
    g = models.small_cnn(channels=16)
    assert compile_network(TALL, g, segments="all").segments == {}
    with pytest.raises(CompileError, match="layer 'block_conv1': 16 output channels on "
                                           "chip 'tiny_tall'.* a chain of convolutions "
                                           "takes at most 8 output channels a layer"):
        compile_network(TALL, g, segments={"block_conv1": 2})
    assert compile_network(TALL, models.small_cnn(channels=8), segments="all").segments


def conv(cout, stride=1, seed=6, cin=5):
    """One 3x3 convolution of `cout` output channels on a 7x9 map."""
    def make():
        rng = _rng(seed)
        b = GraphBuilder(f"conv_{cout}_s{stride}")
        x = b.input(rng.integers(-128, 128, (1, 7, 9, cin), dtype=np.int8), zero_point=3)
        return b.build(b.conv2d(x, rng.integers(-60, 61, (3, 3, cin, cout), dtype=np.int8),
                                rng.integers(-2000, 2000, cout, dtype=np.int32),
                                stride=stride, pads=1, mult=7, shift=12, zp=-2, relu=True))
    return make


def pool(kind, channels=20, seed=7):
    """A max, average or global average pool of a `channels`-channel map."""
    def make():
        rng = _rng(seed)
        b = GraphBuilder(f"{kind}_{channels}")
        x = b.input(rng.integers(-128, 128, (1, 6, 7, channels), dtype=np.int8),
                    zero_point=-5)
        if kind == "max":
            t = b.max_pool2d(x, 2, 2, (0, 0, 1, 1))
        elif kind == "avg":
            t = b.avg_pool2d(x, 3, 1, (1, 1, 1, 1))
        else:
            t = b.global_avg_pool(x)
        return b.build(t)
    return make


def add(channels=24, seed=8):
    def make():
        rng = _rng(seed)
        b = GraphBuilder(f"add_{channels}")
        a = b.input(rng.integers(-128, 128, (1, 5, 6, channels), dtype=np.int8),
                    name="a", zero_point=4)
        c = b.input(rng.integers(-128, 128, (1, 5, 6, channels), dtype=np.int8),
                    name="b", zero_point=-9)
        return b.build(b.add(a, c, mult_a=37, mult_b=-52, shift=6, zp=2, relu=True))
    return make


# feature-map layers of more output channels than min(R, C) (ragged and whole blocks)
MANY_CHANNELS = {
    "conv_12": conv(12),
    "conv_16": conv(16),
    "conv_24_stride2": conv(24, stride=2),
    "conv_40_wide_input": conv(40, cin=20),
    "maxpool_20": pool("max"),
    "avgpool_20": pool("avg"),
    "global_avgpool_20": pool("global"),
    "add_24": add(),
    "wide_maps_12": lambda: cnn_cases.wide_maps_case(2, channels=12, classes=11),
    "wide_maps_16_int32_head": lambda: cnn_cases.wide_maps_case(3, channels=16, classes=21,
                                                                head="int32"),
    "small_cnn_16": lambda: models.small_cnn(channels=16),
    "bottleneck_32": lambda: models.bottleneck_block(size=8, cin=16, width=8),
    # branches of 16 channels stored into their blocks of a Concat's map, a 1x1 head
    "inception_16": lambda: models.inception_block(head=12),
}


def golden_equals_numpy_on_time(cfg, graph, **options):
    """Compile `graph` for `cfg` (with `options`): the golden model's outputs equal
    numpy's, its cycles the prediction."""
    c = compile_network(cfg, graph, **options)
    run = golden.run(cfg, c.loadable)
    gold = c.results(run.dram)
    for k, want in reference.outputs(c.graph).items():
        np.testing.assert_array_equal(gold[k], want, err_msg=f"{graph.name}: golden vs numpy")
    assert run.cycles == c.predicted_cycles
    return c


@pytest.mark.parametrize("cfg", GRIDS, ids=lambda c: c.name)
@pytest.mark.parametrize("name", sample(sorted(MANY_CHANNELS), 12))
def test_feature_maps_of_more_channels_than_columns(cfg, name):
    """On a tall array (R = k*C) a feature-map layer's N-blocks of C output channels
    are the k sub-blocks of each R-channel block: golden equals numpy, in the
    predicted cycles (on the 4x2 and 6x2 grids C = 8, on the others C = 4)."""
    golden_equals_numpy_on_time(cfg, MANY_CHANNELS[name]())


def _layer_ops(c, op):
    return [i for i in c.program if i.op is op]


def test_sub_blocks_of_a_feature_map_share_a_store():
    """A 3x3 convolution to 16 channels on the 16x8 array: two N-blocks of 8 (two
    MATMULs per tap where 8 channels take one), each VRUN into its sub-block of one
    staging half (the second keeping the first's groups), one store per block."""
    from systolica.arch import fabric
    table = fabric.muxes(TALL)
    eight, sixteen = (compile_network(TALL, conv(n)()) for n in (8, 16))
    assert len(_layer_ops(sixteen, Opcode.MATMUL)) == 2 * len(_layer_ops(eight,
                                                                         Opcode.MATMUL))
    stores = [i for i in sixteen.program if i.op is Opcode.DMA
              and i.kind == isa.DmaKind.STORE_CBUF]
    vruns = _layer_ops(sixteen, Opcode.VRUN)
    assert len(vruns) == 2 * len(stores)
    assert all(a.dst == b.dst for a, b in zip(vruns[::2], vruns[1::2]))
    assert any(table[i].name.startswith("wb_src") and table[i].sources[v] == fabric.KEEP
               for ins in sixteen.program if ins.op is Opcode.SETCFG
               for i, v in isa.setcfg_pairs(ins.fields))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["crop_fetch", "fused_crop"])
def test_chain_in_passes(strategy):
    """Seed 001's two chained convolutions in passes through the UBUF, 8 channels:
    golden equals numpy; 12 channels (more than C) are refused, not miscompiled."""
    from systolica.compiler.lowering.chain import ChainChoice
    from systolica.models.chain_cases import seed_two_layer
    c = compile_network(TALL, seed_two_layer(8), chain=ChainChoice(strategy, 8))
    gold = c.results(golden.run(TALL, Loadable.for_chip(TALL, c.image, c.dram, c.prog_addr)).dram)
    for k, want in reference.outputs(c.graph).items():
        np.testing.assert_array_equal(gold[k], want)
    with pytest.raises(CompileError, match="12 output channels"):
        compile_network(TALL, seed_two_layer(12), chain=ChainChoice(strategy, 8))


@pytest.fixture(scope="module")
def rtl_runs():
    return compile_and_run_on_rtl(TALL, CASES)


@pytest.mark.rtl
@pytest.mark.parametrize("name", sorted(CASES))
def test_rtl_equals_numpy_golden_and_prediction(rtl_runs, name):
    compiled, res = rtl_runs[name]
    assert_outputs_match(TALL, compiled, res)
    assert_matches_prediction(TALL, compiled, res)


@pytest.mark.rtl
def test_rtl_programs_take_every_exit(rtl_runs):
    """The cases' MATMULs leave the array at every tile row (partial-sum exits)."""
    early = {i.fields["early"] for c, _ in rtl_runs.values() for i in c.program
             if i.op is Opcode.MATMUL}
    assert early == set(range(TALL.tile_rows))


@pytest.mark.rtl
def test_rtl_programs_issue_eight_pair_setcfgs(rtl_runs):
    """tiny_tall allows eight updates per cycle: the programs' first settings go out
    eight at a time (the RTL ran them above)."""
    widest = max(len(isa.setcfg_pairs(i.fields)) for c, _ in rtl_runs.values()
                 for i in c.program if i.op is Opcode.SETCFG)
    assert widest == isa.SETCFG_PAIRS == TALL.max_config_updates_per_cycle


@pytest.mark.rtl
@pytest.mark.regress
@pytest.mark.parametrize("cfg", [TALL31, TALL81], ids=lambda c: c.name)
def test_padded_acc_rows_on_the_rtl(cfg):
    """A 3x1 grid and an 8x1 (`make regress`): ACC rows padded to whole DRAM words,
    three (eight) sub-blocks to a CBUF row. Six cases (on the 8x1 grid every case and
    the feature-map layers of more channels than C) run on its Verilated RTL in one
    simulator start (results equal numpy and the golden model, cycles the
    prediction); random legal and illegal programs, whose LOAD_ACC / STORE_ACC move
    padded rows, agree between its RTL and the golden model."""
    # the 3x1 grid takes six cases that move padded rows (biases, int32 outputs and
    # transposes; every case runs on the golden model above), the 8x1 all
    cases = ({k: CASES[k] for k in ("gemm_ragged", "gemm_int32", "mlp", "cnn",
                                    "int32_transpose_20x9x13", "dense_transpose_dense")}
             if cfg is TALL31 else {**CASES, **MANY_CHANNELS})
    assert_cases_and_random_programs_on_rtl(cfg, cases, seed=1200)
