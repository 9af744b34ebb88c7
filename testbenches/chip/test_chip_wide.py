"""A wide tile grid (``tiny_wide``: 2x4 tiles of 4x4, an 8x16 array, C = 2R;
docs/contract.md, "Wide grids"). Its weight blocks are 16 CBUF rows of 8 bytes, loaded
from the west (the transposed load, every ``w_in`` on ``west`` from reset); a GEMM's
N-block of 16 columns leaves the vector unit as two slices of 8, one VRUN each, slice 1
taking ACC groups 2 and 3 by ``wb_src``. GEMMs with ragged K, M and N, int32 outputs,
passes over the accumulator halves, a network of dense layers, a small CNN, seed 001's
chain through the UBUF, transposes (2-D and N-D) and ``a @ bᵀ`` run on its Verilated RTL
in one simulator start: results equal numpy and the golden model, cycles the
prediction. Random programs (WLOADs by either edge with random multiplexers) agree
between its RTL and the golden model; so do the cases on a 1x3 grid (C = 3R), a ratio
that is not a power of two. The pure-Python part checks the layouts against the
contract's words and the refusals, and runs the cases on 1x4, 1x3, 2x6 and 1x8 grids
through the golden model."""

from __future__ import annotations

import numpy as np
import pytest
from test_chip_nonsquare import (  # its 8-channel CNN: R here
    MANY_CHANNELS,
    cnn,
    conv,
    golden_equals_numpy_on_time,
    matmul_t,
    transpose,
)
from test_transpose_nd import int32_graph

from systolica import golden
from systolica.app import demo
from systolica.arch import fabric, isa, timing
from systolica.arch.config import ConfigError, preset
from systolica.arch.isa import DmaKind, Instr, Opcode
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode
from systolica.compiler import CompileError, compile_network
from systolica.compiler.graph import reference
from systolica.compiler.graph.graph import GraphBuilder
from systolica.compiler.lowering import routing
from systolica.compiler.lowering.chain import ChainChoice
from systolica.compiler.lowering.dense import DENSE_RING_BLOCKS
from systolica.compiler.planning import layout
from systolica.models import cnn_cases
from systolica.models import zoo as models
from systolica.models.chain_cases import seed_two_layer
from systolica.sim import randprog

from chip_runs import (
    assert_cases_and_random_programs_on_rtl,
    assert_matches_prediction,
    assert_outputs_match,
    case_network,
    compile_and_run_on_rtl,
)
from tiers import sample

WIDE = preset("tiny_wide")
# a 1x4 grid: C = 4R, an ACC row is 16 DRAM words (of 4 bytes: four times as many)
WIDE4 = WIDE.replace(name="tiny_wide4", tile_rows=1, dram_words=1 << 16)
# two more wide shapes: 1x2 (C = 2R of 4-byte rows) and 2x8 (four slices of two tile
# rows: slice 3 takes ACC groups 6 and 7; without general lanes, whose multiplexers a
# 2x8 grid has too many of for SETCFG)
WIDE12 = WIDE.replace(name="tiny_wide12", tile_rows=1, tile_cols=2)
WIDE28 = WIDE.replace(name="tiny_wide28", tile_cols=8, general_lanes=False)
# wide grids of ratios that are not powers of two, and of 8: 1x3 (C = 3R, ACC rows of 12
# words), 2x6 (three slices of two tile rows), both run on the RTL by `make regress`,
# and 1x8 (eight slices of 4-byte rows)
WIDE13 = WIDE.replace(name="tiny_wide13", tile_rows=1, tile_cols=3, dram_words=1 << 16)
WIDE26 = WIDE.replace(name="tiny_wide26", tile_cols=6)
WIDE18 = WIDE.replace(name="tiny_wide18", tile_rows=1, tile_cols=8, dram_words=1 << 16,
                      general_lanes=False)
RATIOS = (WIDE13, WIDE26, WIDE18)


def _rng(seed):
    return np.random.default_rng(seed)


def gemm(M, K, N, dtype="int8", seed=0, bias=True):
    def make():
        rng = _rng(seed)
        b = GraphBuilder(f"gemm_{M}x{K}x{N}_{dtype}")
        x = b.input(rng.integers(-128, 128, (M, K), dtype=np.int8))
        w = rng.integers(-128, 128, (K, N), dtype=np.int8)
        c = rng.integers(-3000, 3000, N, dtype=np.int32) if bias else None
        if dtype == "int32":
            y = b.dense(x, w, c, relu=True, out_dtype="int32")
        else:
            y = b.dense(x, w, c, mult=5, shift=11, zp=3)
        return b.build(y)
    return make


def mlp(M):
    def make():
        rng = _rng(1)
        b = GraphBuilder(f"mlp_{M}")
        x = b.input(rng.integers(-128, 128, (M, 30), dtype=np.int8))
        h = b.dense(x, rng.integers(-128, 128, (30, 27), dtype=np.int8), mult=1, shift=9,
                    relu=True)
        h = b.dense(h, rng.integers(-128, 128, (27, 40), dtype=np.int8), mult=1, shift=9)
        return b.build(b.dense(h, rng.integers(-128, 128, (40, 10), dtype=np.int8),
                               mult=1, shift=9))
    return make


def split_chain(M, widths):
    def make():
        return demo.mlp(batch=M, widths=widths, seed=4, name=f"chain_{M}")
    return make


def permute(shape, perm, seed=3):
    def make():
        b = GraphBuilder("permute")
        x = b.input(_rng(seed).integers(-128, 128, shape, dtype=np.int8))
        return b.build(b.transpose(x, perm))
    return make


CASES = {
    "gemm_ragged": gemm(19, 37, 30),        # 5 K-blocks, 2 N-blocks: slices 2 + 2
    "gemm_one_slice": gemm(5, 20, 7),       # N < R: slice 0 only
    "gemm_odd_slices": gemm(9, 8, 21),      # 2 N-blocks: slices 2 + 1
    "gemm_int32": gemm(7, 9, 21, "int32"),  # ACC rows of 16 int32: 8 DRAM words each
    "gemm_passes": gemm(300, 12, 16, bias=False),   # 3 passes over the ACC halves
    "mlp": mlp(11),                         # hidden 27 and 40 read back as K-blocks
    "mlp_passes": mlp(120),                 # a dense network in passes
    "cnn": cnn,                             # conv, pool, conv, global pool, dense
    # feature maps of more channels than R = 8: a layer's N-block of 16 output channels
    # leaves as two slices, each into its own 8-channel block (convolutions, strided,
    # projection, add, pools, an int32 head of 21); a bottleneck's expansion to 32
    "wide_maps_24": lambda: cnn_cases.wide_maps_case(4, channels=24, classes=21,
                                                     head="int32"),
    "bottleneck_32": lambda: models.bottleneck_block(size=8, cin=16, width=8),
    "chain_fused_crop": (lambda: seed_two_layer(8), ChainChoice("fused_crop", 8)),
    "transpose_37x21": transpose(37, 21),   # ragged R x R blocks
    "permute_2x3x4x5": permute((2, 3, 4, 5), (3, 1, 0, 2)),
    "matmul_t": matmul_t,                   # b's rows loaded from the west, C at a time
    # a small K and N: split into two tile groups by the cost model, and its twin
    "split_600x4x8": gemm(600, 4, 8, seed=5),
    "split_600x4x8_whole": (gemm(600, 4, 8, seed=5), dict(split=1)),
    # smaller still: four groups of 2x4 cells, each narrower than a tile
    "split_cells_300x2x3": gemm(300, 2, 3, seed=6),
    # a chain of split layers: each inner VRUN packs both groups' outputs into one
    # R-byte row (routing.packed_routing), where the next layer's groups read them
    "split_chain_300x4-4-3-7": split_chain(300, (4, 4, 3, 7)),
    "split_chain_300x4-4-3-7_whole": (split_chain(300, (4, 4, 3, 7)), dict(split=1)),
    # int32 transposes: R x R element blocks, the interleaving blocks west-loaded (stored
    # transposed in C rows), slice 0 written; 13 elements: one N-block of 16 (8 words)
    "int32_transpose_20x9x13": lambda: int32_graph(20, 9, 13, seed=3),
    "int32_transpose_17x30x40_twice": lambda: int32_graph(17, 30, 40, seed=4, twice=True),
}


def test_geometry():
    """The derived sizes the contract names, and the reset routing it promises."""
    assert (WIDE.rows, WIDE.cols, WIDE.slices, WIDE.sub_blocks) == (8, 16, 2, 1)
    assert WIDE.wide and not preset("tiny_tall").wide and not preset("tiny").wide
    assert WIDE.weight_rows == 16 and WIDE.acc_row_words == 8 and WIDE4.acc_row_words == 16
    # one shift per weight row and tile conveyor along the longer side
    assert timing.weight_shifts(WIDE) == 16 + 3
    assert timing.skew_max(WIDE) == 15 + 3
    assert timing.array_span(WIDE) == (7 + 1) + (15 + 3)
    table = fabric.by_name(WIDE)
    assert all(table[f"w_in[{i}][{j}]"].sources[table[f"w_in[{i}][{j}]"].default] == "west"
               for i in range(2) for j in range(4))
    assert all(table[f"north_feed[{j}]"].sources[table[f"north_feed[{j}]"].default]
               == fabric.ZERO for j in range(4))
    assert [table[f"wb_src[{g}]"].sources[table[f"wb_src[{g}]"].default]
            for g in range(2)] == ["col.g0", "col.g1"]


def test_geometry_of_other_ratios():
    """A wide grid's ratio is any whole number: slices, ACC row words and the reset
    routing follow it (slice 0's groups first)."""
    assert [(c.rows, c.cols, c.slices, c.acc_row_words) for c in RATIOS] == \
        [(4, 12, 3, 12), (8, 24, 3, 12), (4, 32, 8, 32)]
    for cfg in RATIOS:
        table = fabric.by_name(cfg)
        assert [table[f"wb_src[{g}]"].sources[table[f"wb_src[{g}]"].default]
                for g in range(cfg.tile_rows)] == [f"col.g{g}" for g in range(cfg.tile_rows)]
        assert timing.weight_shifts(cfg) == cfg.cols + cfg.tile_cols - 1


def test_geometry_refusals():
    # any grid is taken (2x3 and 3x2: test_chip_mixed.py) up to SETCFGW's reach: a
    # 1x16 grid's wb_src has 18 sources (SETCFGW's 5-bit values), a 1x31 grid's 33
    long = WIDE.replace(name="long", tile_rows=1, tile_cols=16, general_lanes=False)
    assert fabric.setcfg_format(long).op is Opcode.SETCFGW
    with pytest.raises(ConfigError, match="1x31 tile grid has .* up to 33 sources"):
        WIDE.replace(name="long", tile_rows=1, tile_cols=31, general_lanes=False)
    with pytest.raises(ConfigError, match="cannot hold one weight block \\(16 rows\\)"):
        WIDE.replace(name="small", cbuf_depth=8, cbuf_banks=1, ubuf_base=0, ubuf_rows=0)


def test_weight_layout_is_the_transposed_block():
    """Word ``c`` of block ``(nb, kb)`` holds column ``nb*C + c`` of rows ``kb*R ..``
    (built here from the contract's words, not from the packer)."""
    w = _rng(7).integers(-128, 128, (19, 21), dtype=np.int8)
    got = layout.pack_weights(WIDE, w).view(np.int8)
    R, C = WIDE.rows, WIDE.cols
    want = np.zeros((2 * 3 * C, R), np.int8)
    for nb in range(2):
        for kb in range(3):
            for c in range(C):
                for r in range(R):
                    k, n = kb * R + r, nb * C + c
                    if k < 19 and n < 21:
                        want[(nb * 3 + kb) * C + c, r] = w[k, n]
    np.testing.assert_array_equal(got, want)


def _serial(cfg, *ops):
    """Instructions one after another, each issued when the previous one is done."""
    program, t = [], 0
    for op, fields in ops:
        program.append(Instr(op, t, fields))
        t += timing.done(cfg, program[-1])
    return program


def _golden(cfg, program, dram=None):
    if dram is None:
        dram = np.zeros((cfg.dram_words, cfg.rows), np.uint8)
    return golden.run(cfg, Loadable.for_chip(cfg, isa.to_bytes([isa.encode(i) for i in program]),
                                             dram))


def test_wload_takes_c_rows_from_the_west():
    """The golden model's WLOAD on its own: ``C`` CBUF rows (row ``c`` is array column
    ``c``, the contract's transposed load; an identity activation reads the bank back
    into the ACC), and a block reaching past the CBUF by any of its ``C`` rows faults
    ADDR_RANGE (one of ``R`` rows would fit)."""
    R, C, w_addr = WIDE.rows, WIDE.cols, 100
    rows = _rng(3).integers(-128, 128, (C, R), dtype=np.int8)
    dram = np.zeros((WIDE.dram_words, R), np.uint8)
    dram[:C] = rows.view(np.uint8)
    dram[C:C + R] = np.eye(R, dtype=np.uint8)
    load = dict(kind=DmaKind.LOAD_CBUF, dram_stride=1)
    res = _golden(WIDE, _serial(
        WIDE, (Opcode.DMA, dict(load, dram_addr=0, buf_addr=w_addr, rows=C)),
        (Opcode.DMA, dict(load, dram_addr=C, buf_addr=0, rows=R)),
        (Opcode.WLOAD, dict(w_addr=w_addr, bank=0)),
        (Opcode.MATMUL, dict(act_addr=0, rows=R, acc_addr=0, bank=0))), dram)
    assert res.error is ErrorCode.NONE
    np.testing.assert_array_equal(res.acc[:R], rows.T.astype(np.int32))
    top = WIDE.cbuf_depth
    for w_addr, error in ((top - C, None), (top - C + 1, ErrorCode.ADDR_RANGE),
                          (top - R, ErrorCode.ADDR_RANGE)):
        # the timing pass alone: a west load of rows nothing wrote is no program to run
        t = golden.check(WIDE, _serial(WIDE, (Opcode.WLOAD, dict(w_addr=w_addr, bank=0))))
        assert (t.fault and t.fault[0]) is error, (w_addr, t.fault)


def _windows_apart(windows, every):
    """Whether each run of `every` consecutive ``[lo, hi)`` windows is pairwise apart."""
    for i in range(len(windows)):
        run = sorted(windows[i:i + every])
        if any(a[1] > b[0] for a, b in zip(run, run[1:])):
            return False
    return True


@pytest.mark.parametrize("cfg, name", [(WIDE, "gemm_passes"), (WIDE, "mlp_passes"),
                                       (WIDE, "gemm_ragged"), (WIDE4, "gemm_passes")],
                         ids=lambda v: getattr(v, "name", v))
def test_weight_ring_and_staging_slots_are_apart(cfg, name):
    """The weight ring holds DENSE_RING_BLOCKS blocks of ``C`` rows, the output staging an
    N-block's ``k`` slices per accumulator half: every WLOAD and staging VRUN stays in
    its region, and blocks (slices) in flight together never share CBUF rows (a
    shared row would only serialise the program, so results alone cannot tell)."""
    c = compile_network(cfg, CASES[name]())
    plan = c.plan
    ring = plan.region("cbuf", "weight ring")
    assert ring.size == DENSE_RING_BLOCKS * cfg.cols
    loads = [(i.fields["w_addr"], i.fields["w_addr"] + cfg.weight_rows)
             for i in c.program if i.op is Opcode.WLOAD]
    assert loads and all(ring.lo <= lo and hi <= ring.hi for lo, hi in loads)
    assert _windows_apart(loads, DENSE_RING_BLOCKS)
    last = c.graph.nodes[-1].name
    staging = plan.region("cbuf", f"{last}.staging")
    rows = plan.passes.get(last, plan.rows[last])       # rows per pass
    assert staging.size == 2 * cfg.slices * rows
    outs = [(i.fields["dst"], i.fields["dst"] + i.fields["rows"])
            for i, layer in zip(c.program, c.layer_of, strict=True)
            if i.op is Opcode.VRUN and layer == len(c.graph.nodes) - 1]
    assert len(outs) >= 2 and all(staging.lo <= lo and hi <= staging.hi for lo, hi in outs)
    assert _windows_apart(outs, 2 * cfg.slices)


def test_slices_route_acc_groups():
    """An N-block of 21 columns' two slices: slice 1's VRUN sets ``wb_src`` to ACC
    groups 2 and 3; the weights take the west lanes, as from reset."""
    c = compile_network(WIDE, gemm(9, 8, 21)())
    table = fabric.muxes(WIDE)
    set_to = {(table[i].name, table[i].sources[v]) for ins in c.program
              if ins.op is Opcode.SETCFG for i, v in isa.setcfg_pairs(ins.fields)}
    assert {("wb_src[0]", "col.g2"), ("wb_src[1]", "col.g3")} <= set_to
    # the weight routing the program sets is the wide grid's reset routing
    table = fabric.by_name(WIDE)
    weights = {(n, v) for n, v in set_to if n.startswith(("w_in", "north_feed", "west_wfeed"))}
    assert len(weights) == 2 * 4 + 4 + 2
    assert all(table[n].sources[table[n].default] == v for n, v in weights)
    assert sum(i.op is Opcode.VRUN for i in c.program) == 3


@pytest.mark.parametrize("name, cfg", sample(
    [pytest.param(name, cfg, id=f"{name}-{cfg.name}")
     for name in sorted(CASES) for cfg in (WIDE, WIDE4, *RATIOS)], 19, 2))
def test_compiles_and_golden_equals_numpy(cfg, name):
    """Pure Python, 2x4, 1x4, 1x3, 2x6 and 1x8 grids: every case compiles, and the
    golden model running the program equals numpy (the 4-byte rows of the 1xk grids
    hold the 120-row network's tensors in twice the CBUF rows, and a chain of
    convolutions takes 4 channels a layer at most: refused; layer by layer a map of
    more channels leaves in slices)."""
    refused = {"mlp_passes": r"CBUF too small by \d+ rows",
               "chain_fused_crop": "at most 4 output"}
    graph, options = case_network(CASES[name])
    if cfg.rows == 4 and name in refused:
        with pytest.raises(CompileError, match=refused[name]):
            compile_network(cfg, graph, **options)
        return
    c = compile_network(cfg, graph, **options)
    gold = c.results(golden.run(cfg, c.loadable).dram)
    for k, want in reference.outputs(c.graph).items():
        np.testing.assert_array_equal(gold[k], want, err_msg=f"{name}: golden vs numpy")


# (seed % 2 picks the grid: every 5th seed reaches both in the fast tier)
@pytest.mark.parametrize("seed", sample(range(12), 5))
def test_random_dense_networks_golden_equals_numpy(seed):
    rng = _rng(100 + seed)
    M = int(rng.integers(1, 90))
    widths = [int(w) for w in rng.integers(1, 40, int(rng.integers(2, 5)))]
    b = GraphBuilder(f"random_{seed}")
    x = b.input(rng.integers(-128, 128, (M, widths[0]), dtype=np.int8))
    for k, n in zip(widths, widths[1:]):
        x = b.dense(x, rng.integers(-128, 128, (k, n), dtype=np.int8),
                    rng.integers(-999, 999, n, dtype=np.int32), mult=3, shift=11,
                    relu=bool(rng.integers(2)))
    cfg = WIDE if seed % 2 else WIDE4
    c = compile_network(cfg, b.build(x))
    gold = c.results(golden.run(cfg, Loadable.for_chip(cfg, c.image, c.dram, c.prog_addr)).dram)
    for k, want in reference.outputs(c.graph).items():
        np.testing.assert_array_equal(gold[k], want)


@pytest.mark.parametrize("seed", sample(range(14), 2))   # the fast tier: each grid
def test_random_dense_graphs_golden_equals_numpy(seed):
    """Random graphs of dense layers on the 2x4, 1x4, 1x2, 2x8, 1x3, 2x6 and 1x8 grids: one or two
    inputs, layers reading up to three tensors (joins along K, fan-out), with or without
    bias and ReLU, the last layer's output int32 at times."""
    cfg = (WIDE, WIDE4, WIDE12, WIDE28, *RATIOS)[seed % 7]
    golden_equals_numpy(cfg, random_dense_graph(cfg, seed))


def random_dense_graph(cfg, seed: int):
    """One or two inputs, up to three dense layers reading up to three tensors (joins
    along K, fan-out), with or without bias and ReLU, the last one's output int32 at
    times; the batch scaled to the grid's rows."""
    rng = _rng(300 + seed)
    M = max(1, int(rng.integers(1, 70)) * cfg.rows // 8)   # 4-byte rows: half the batch
    b = GraphBuilder(f"graph_{seed}")
    made = [b.input(rng.integers(-128, 128, (M, int(rng.integers(1, 40))), dtype=np.int8),
                    name=f"in{i}") for i in range(int(rng.integers(1, 3)))]
    layers = int(rng.integers(1, 4))
    for i in range(layers):
        reads = made if i == 0 else \
            [str(t) for t in rng.choice(made, int(rng.integers(1, min(3, len(made)) + 1)),
                                        replace=False)]
        K, N = sum(b.tensor(t).shape[1] for t in reads), int(rng.integers(1, 45))
        w = rng.integers(-128, 128, (K, N), dtype=np.int8)
        bias = rng.integers(-4000, 4000, N, dtype=np.int32) if rng.integers(2) else None
        relu = bool(rng.integers(2))
        if i == layers - 1 and seed // 7 == seed % 2:
            b.dense(reads, w, bias, relu=relu, out_dtype="int32")
        else:
            made.append(b.dense(reads, w, bias, mult=int(rng.integers(1, 100)), shift=13,
                                zp=int(rng.integers(-9, 9)), relu=relu))
    return b.build()


def golden_equals_numpy(cfg, graph):
    c = compile_network(cfg, graph)
    gold = c.results(golden.run(cfg, c.loadable).dram)
    want = reference.outputs(c.graph)
    assert list(gold) == list(want)
    for k in want:
        np.testing.assert_array_equal(gold[k], want[k], err_msg=f"{cfg.name}: {k}")


@pytest.mark.parametrize("seed", sample(range(12), 3))
def test_random_permutations_golden_equals_numpy(seed):
    rng = _rng(200 + seed)
    nd = int(rng.integers(2, 5))
    shape = tuple(int(d) for d in rng.integers(1, 16, nd))
    perm = tuple(int(p) for p in rng.permutation(nd))
    cfg = WIDE if seed % 2 else WIDE4
    c = compile_network(cfg, permute(shape, perm, seed)())
    gold = c.results(golden.run(cfg, Loadable.for_chip(cfg, c.image, c.dram, c.prog_addr)).dram)
    for k, want in reference.outputs(c.graph).items():
        np.testing.assert_array_equal(gold[k], want, err_msg=f"{shape} {perm}")


def test_conv_weights_are_stored_transposed():
    """A 1x1 convolution's one weight block: word ``c`` holds output channel ``c``'s
    weights over the input channels, words past R zero (from the contract's words)."""
    w = _rng(8).integers(-128, 128, (1, 1, 3, 5), dtype=np.int8)
    b = GraphBuilder("conv1x1")
    x = b.input(np.zeros((1, 2, 2, 3), np.int8))
    c = compile_network(WIDE, b.build(b.conv2d(x, w)))
    lo, n = c.dram_map.params[("conv0", "weights")]
    assert n == WIDE.weight_rows
    want = np.zeros((WIDE.weight_rows, WIDE.rows), np.int8)
    want[:5, :3] = w[0, 0].T
    np.testing.assert_array_equal(c.dram[lo:lo + n].view(np.int8), want)


def test_refusals():
    # a chain of convolutions takes at most R = 8 output channels a layer (layer by
    # layer any number): the cost model never chains more; asked for, refused by name
    g = models.small_cnn(channels=16)
    assert compile_network(WIDE, g, segments="all").segments == {}
    with pytest.raises(CompileError, match="layer 'conv0': 12 output channels on chip "
                                           "'tiny_wide'.* a chain of convolutions takes "
                                           "at most 8 output channels a layer"):
        compile_network(WIDE, seed_two_layer(12), chain=ChainChoice("crop_fetch", 8))
    # a chain hands each group's outputs on packed into R/s = 4 partitions: an inner
    # layer with N = 6 does not fit them
    b = GraphBuilder("chain")
    x = b.input(np.zeros((64, 4), np.int8))
    g = b.build(b.dense(b.dense(x, np.ones((4, 6), np.int8)), np.ones((6, 4), np.int8)))
    with pytest.raises(CompileError, match="N = 6 > 4: on the wide grid 'tiny_wide' a "
                                           "chain hands each group's outputs on in 4"):
        compile_network(WIDE, g, split={"layer0": 2})


@pytest.mark.parametrize("name, cfg", sample(
    [pytest.param(name, cfg, id=f"{name}-{cfg.name}")
     for name in sorted(MANY_CHANNELS) for cfg in (WIDE, WIDE4, WIDE28, *RATIOS)], 29))
def test_feature_maps_of_more_channels_than_rows(cfg, name):
    """On a wide array (C = k*R) a feature-map layer's N-block of C output channels
    leaves as k slices, each into its own R-channel block (pools and adds: an N-block
    per channel block, slice 0): golden equals numpy, in the predicted cycles (R = 8 on
    the 2x4 and 2x8 grids, 4 on the 1x4 grid)."""
    golden_equals_numpy_on_time(cfg, MANY_CHANNELS[name]())


def test_output_staging_holds_the_slices_the_layer_fills():
    """A dense layer's output staging holds, per accumulator half, the slices of `R`
    columns its `N` outputs fill: one for N <= R (half what two slices took), two for
    R < N <= C; a split layer's packed output is C wide."""
    def staging(graph):
        c = compile_network(WIDE, graph)
        return c.plan.scratch("cbuf", "layer0.staging").size, c
    one, c = staging(gemm(300, 12, 5)())
    two, _ = staging(gemm(300, 12, 13)())
    assert one == 2 * c.plan.rows["layer0"] and two == 2 * one
    split, c = staging(gemm(600, 4, 8)())
    assert c.plan.split("layer0") > 1 and split == 2 * WIDE.slices * c.plan.rows["layer0"]


def test_slices_of_a_feature_map_each_stored():
    """A 3x3 convolution to 16 channels on the 8x16 array: one N-block (as many MATMULs
    as 8 channels take), its two slices each a VRUN into its own staging and a store
    into its own channel block."""
    eight, sixteen = (compile_network(WIDE, conv(n)()) for n in (8, 16))
    mm = [sum(i.op is Opcode.MATMUL for i in c.program) for c in (eight, sixteen)]
    assert mm[0] == mm[1]
    stores = [i for i in sixteen.program if i.op is Opcode.DMA
              and i.kind == DmaKind.STORE_CBUF]
    vruns = [i for i in sixteen.program if i.op is Opcode.VRUN]
    assert len(vruns) == len(stores) == 2 * sum(i.op is Opcode.VRUN for i in eight.program)
    assert vruns[0].dst != vruns[1].dst         # each slice its own staging
    out, _ = sixteen.dram_map.outputs[sixteen.graph.outputs[0]]
    plane = 7 * 9
    assert {s.dram_addr - out for s in stores} == {0, plane}


@pytest.mark.rtl
def test_rtl_split_is_faster_with_fewer_dram_bytes(rtl_runs):
    """The cost model splits the 600x4x8 GEMM into two tile groups; against its
    unsplit twin it takes fewer cycles and DRAM bytes on the RTL (the vector unit
    streams both slices of the packed output, so the gain is short of 2x)."""
    (split, s_res), (whole, w_res) = rtl_runs["split_600x4x8"], rtl_runs["split_600x4x8_whole"]
    assert [r.split for r in split.layers] == [2] and [r.split for r in whole.layers] == [1]
    assert s_res.cycles < w_res.cycles
    assert s_res.dram_rd_bytes + s_res.dram_wr_bytes < \
        w_res.dram_rd_bytes + w_res.dram_wr_bytes


def test_a_chain_of_dense_layers_splits_as_one():
    """Every layer of a chain with inner widths at most R/s = 4 runs in two groups,
    each inner VRUN writing CBUF group g from ACC group 2g (the packed routing)."""
    make = CASES["split_chain_300x4-4-3-7"]
    c = compile_network(WIDE, make())
    assert [r.split for r in c.layers] == [2, 2, 2]
    def count(layer, op):
        return sum(1 for i, l in zip(c.program, c.layer_of) if l == layer and i.op is op)
    # the inner layers: one VRUN per MATMUL; the last: one per slice of its C columns
    assert count(0, Opcode.VRUN) == count(0, Opcode.MATMUL)
    assert count(2, Opcode.VRUN) == 2 * count(2, Opcode.MATMUL)
    assert routing.packed_routing(WIDE, 2) == {"wb_src[0]": "col.g0", "wb_src[1]": "col.g2"}
    whole = compile_network(WIDE, make(), split=1)
    assert c.predicted_cycles < whole.predicted_cycles


@pytest.mark.rtl
def test_rtl_split_into_groups_of_cells(rtl_runs):
    """K = 2 and N = 3 fit groups of 2x4 cells: four of them, past the shorter side's
    two tiles (outputs and cycles: test_rtl_equals_numpy_golden_and_prediction)."""
    compiled, _ = rtl_runs["split_cells_300x2x3"]
    assert [r.split for r in compiled.layers] == [4]


@pytest.mark.rtl
def test_rtl_split_chain_is_faster(rtl_runs):
    (split, s_res), (_, w_res) = (rtl_runs["split_chain_300x4-4-3-7"],
                                      rtl_runs["split_chain_300x4-4-3-7_whole"])
    assert [r.split for r in split.layers] == [2, 2, 2]
    assert s_res.cycles < w_res.cycles


@pytest.fixture(scope="module")
def rtl_runs():
    return compile_and_run_on_rtl(WIDE, CASES)


@pytest.mark.rtl
@pytest.mark.parametrize("name", sorted(CASES))
def test_rtl_equals_numpy_golden_and_prediction(rtl_runs, name):
    compiled, res = rtl_runs[name]
    assert_outputs_match(WIDE, compiled, res)
    assert_matches_prediction(WIDE, compiled, res)


@pytest.mark.rtl
def test_random_programs_match_golden_on_the_wide_rtl():
    """Random legal programs (every instruction mode, random multiplexer settings: a
    WLOAD through the north chain keeps the last R of its 16 rows) and illegal ones
    (faults where they were broken) agree between the wide RTL and the golden model."""
    progs = [randprog.legal(WIDE, s) for s in range(500, 516)]
    # eight updates a cycle are SETCFG's widest: no SETCFG can break the limit
    cats = [c for c in randprog.CATEGORIES if c != "cfg_limit"]
    progs += [randprog.illegal(WIDE, s, cats[s % len(cats)])
              for s in range(600, 600 + 2 * len(cats))]
    failures = randprog.check_on_rtl(progs)
    assert not failures, "\n".join(failures)


@pytest.mark.rtl
@pytest.mark.regress
@pytest.mark.parametrize("cfg", [WIDE13, WIDE26], ids=lambda c: c.name)
def test_other_ratios_on_the_rtl(cfg):
    """A 1x3 grid and a 2x6 (`make regress`): three slices, a ratio that is not a
    power of two. Every case it compiles runs on its Verilated RTL in one simulator start
    (results equal numpy and the golden model, cycles the prediction), and random legal
    and illegal programs agree between its RTL and the golden model."""
    refused = {"mlp_passes", "chain_fused_crop"} if cfg.rows == 4 else set()
    assert_cases_and_random_programs_on_rtl(
        cfg, {k: v for k, v in CASES.items() if k not in refused}, seed=700)
