"""Per-op lowering rules: the loop nest a dense layer becomes (compared op by op), and
the multiplexer settings every micro-op states it relies on."""

import numpy as np
import pytest

from systolica import golden
from systolica.arch import fabric, isa
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Opcode
from systolica.arch.loadable import Loadable
from systolica.compiler import Dense, GraphBuilder, Network, compile_network, gemm, plan_memory
from systolica.compiler.graph import reference
from systolica.compiler.graph.graph import OPS, as_graph
from systolica.compiler.lowering.emitter import Emitter
from systolica.compiler.lowering.lower import lower
from systolica.compiler.lowering.registry import RULES, rule_for
from systolica.compiler.lowering.routing import gemm_routing, multiplexers_passed
from systolica.compiler.lowering.rule import Rule
from systolica.compiler.planning.memory import acc_half_rows

TINY, BASE = preset("tiny"), preset("base")
R = TINY.rows


def emitted(cfg, net):
    """The rules' blocks for `net`, and its plan."""
    graph = as_graph(net)
    plan = plan_memory(cfg, graph)
    em = Emitter.for_plan(cfg, graph, plan)
    return [blk for i, n in enumerate(graph.nodes) for blk in rule_for(n).emit(em, i, n)], plan


def brief(mop):
    """An op as ``(opcode, fields that matter here)``."""
    f = mop.fields
    keys = {Opcode.DMA: ("kind", "dram_addr", "buf_addr", "rows"),
            Opcode.WLOAD: ("w_addr", "bank"),
            Opcode.MATMUL: ("act_addr", "rows", "acc_addr", "accumulate", "bank"),
            Opcode.VRUN: ("src", "rows", "dst", "to_acc", "use_bias")}[mop.op]
    return (mop.op.name,) + tuple(f[k] for k in keys)


def fan_out_join():
    rng = np.random.default_rng(5)
    g = GraphBuilder("dag")
    x = g.input(rng.integers(-128, 128, (6, 20)), name="x")
    h = g.dense(x, rng.integers(-128, 128, (20, 16)), mult=40, shift=12, name="h")
    g.dense(h, rng.integers(-128, 128, (16, 9)), rng.integers(-99, 99, 9), mult=30,
            shift=12, name="a")
    g.dense([h, x], rng.integers(-128, 128, (36, 3)), out_dtype="int32", name="j")
    return g.build()


def test_every_op_type_has_one_rule_in_a_lowering():
    assert set(RULES) == set(OPS)
    for op, rule in RULES.items():
        assert rule.op is op and (rule.dense or rule.maps), op
        # a rule of the dense lowering answers the planner and emits
        if rule.dense:
            for method in ("max_rows", "params", "needs", "tiles_used", "emit"):
                assert getattr(type(rule), method) is not getattr(Rule, method), (op, method)
        if rule.maps:
            assert type(rule).map_job is not Rule.map_job, op


def test_dense_layer_is_a_loop_nest_over_n_blocks_and_k_blocks():
    net = gemm(np.ones((5, 2 * R)), np.ones((2 * R, 2 * R)), np.ones(2 * R))
    blocks, plan = emitted(TINY, net)
    ring = plan.scratch("cbuf", "weight ring").lo
    x, out = plan.tensor("cbuf", "input").lo, plan.scratch("cbuf", "gemm.staging").lo
    w, b = plan.param("gemm", "weights").lo, plan.param("gemm", "bias").lo
    xd, od = plan.tensor("dram", "input").lo, plan.tensor("dram", "gemm").lo
    Mt, arw, bias_slot = acc_half_rows(TINY), TINY.acc_row_words, 2 * acc_half_rows(TINY)
    load, load_acc, store = DmaKind.LOAD_CBUF, DmaKind.LOAD_ACC, DmaKind.STORE_CBUF
    got = [([brief(m) for m in blk.bias],
            [([brief(m) for m in st.loads], brief(st.matmul)) for st in blk.steps],
            [brief(m) for m in blk.epilogue]) for blk in blocks]
    assert got == [
        ([("DMA", load_acc, b, bias_slot, 1)],
         [([("DMA", load, w, ring, R), ("DMA", load, xd, x, 5), ("WLOAD", ring, 0)],
           ("MATMUL", x, 5, 0, 0, 0)),
          ([("DMA", load, w + R, ring + R, R), ("DMA", load, xd + 5, x + 5, 5),
            ("WLOAD", ring + R, 1)],
           ("MATMUL", x + 5, 5, 0, 1, 1))],
         [("VRUN", 0, 5, out, 0, 1), ("DMA", store, od, out, 5)]),
        ([("DMA", load_acc, b + arw, bias_slot + 1, 1)],
         [([("DMA", load, w + 2 * R, ring + 2 * R, R), ("WLOAD", ring + 2 * R, 0)],
           ("MATMUL", x, 5, Mt, 0, 0)),
          ([("DMA", load, w + 3 * R, ring + 3 * R, R), ("WLOAD", ring + 3 * R, 1)],
           ("MATMUL", x + 5, 5, Mt, 1, 1))],
         [("VRUN", Mt, 5, out + 5, 0, 1), ("DMA", store, od + 5, out + 5, 5)]),
    ]


def test_a_join_sums_over_the_k_blocks_of_every_input_in_order():
    blocks, plan = emitted(TINY, fan_out_join())
    (join,) = [blk for blk in blocks if blk.layer == 2]
    h, x = plan.tensor("cbuf", "h").lo, plan.tensor("cbuf", "x").lo
    assert [(st.matmul.fields["act_addr"], st.matmul.fields["accumulate"])
            for st in join.steps] == [(h, 0), (h + 6, 1), (x, 1), (x + 6, 1), (x + 12, 1)]
    ws = [plan.param("j", f"weights[{i}]").lo for i in (0, 1)]
    assert [st.loads[0].fields["dram_addr"] for st in join.steps] == \
        [ws[0], ws[0] + R, ws[1], ws[1] + R, ws[1] + 2 * R]
    # int32 output: no vector pass (no bias, no ReLU), stored straight from ACC
    assert [brief(m)[:2] for m in join.epilogue] == [("DMA", DmaKind.STORE_ACC)]


def test_an_input_read_by_two_layers_is_loaded_once():
    blocks, plan = emitted(TINY, fan_out_join())
    x = plan.tensor("cbuf", "x")
    writes = [m for blk in blocks for st in blk.steps for m in st.loads
              if m.op is Opcode.DMA and x.lo <= m.fields["buf_addr"] < x.hi]
    assert [(m.layer, m.fields["buf_addr"]) for m in writes] == \
        [(0, x.lo), (0, x.lo + 6), (0, x.lo + 12)]


def test_an_output_that_a_layer_reads_is_written_on_chip_and_stored_from_there():
    g = GraphBuilder("both")
    x = g.input(np.ones((4, 8)))
    h = g.dense(x, np.ones((8, 8)), name="h")
    g.dense(h, np.ones((8, 2)), name="y")
    blocks, plan = emitted(TINY, g.build("h", "y"))
    h_cbuf, h_dram = plan.tensor("cbuf", "h").lo, plan.tensor("dram", "h").lo
    assert [brief(m) for m in blocks[0].epilogue] == [
        ("VRUN", 0, 4, h_cbuf, 0, 0), ("DMA", DmaKind.STORE_CBUF, h_dram, h_cbuf, 4)]


NETS = {
    "gemm": (TINY, gemm(np.ones((9, 20)), np.ones((20, 12)), np.ones(12), relu=True)),
    "int32": (TINY, gemm(np.ones((9, 20)), np.ones((20, 12)), np.ones(12),
                         out_dtype="int32")),
    "chain_base": (BASE, Network(np.ones((20, 40)), [Dense(np.ones((40, 24))),
                                                     Dense(np.ones((24, 17)))])),
    "dag": (TINY, fan_out_join()),
}


@pytest.mark.parametrize("name", list(NETS))
def test_every_micro_op_states_the_routing_of_each_multiplexer_it_passes(name):
    cfg, net = NETS[name]
    table = fabric.by_name(cfg)
    ops = lower(cfg, net).ops
    for mop in ops:
        assert set(mop.needs) == multiplexers_passed(cfg, mop), mop
        for mux, source in mop.needs.items():     # every tile row and column is used
            assert table[mux].value_of(source) == table[mux].default, (mop, mux)
    assert {m.op for m in ops if m.needs} >= {Opcode.WLOAD, Opcode.MATMUL}


def test_gemm_routing_zeroes_only_the_feeds_it_is_told_are_padding():
    full = gemm_routing(BASE, Opcode.MATMUL)
    short = gemm_routing(BASE, Opcode.MATMUL, tile_rows=1, tile_cols=1)
    assert {k: v for k, v in short.items() if full[k] != v} == {"west_feed[1]": "zero"}
    wl = gemm_routing(BASE, Opcode.WLOAD, tile_rows=1, tile_cols=1)
    assert {k: v for k, v in wl.items() if gemm_routing(BASE, Opcode.WLOAD)[k] != v} == \
        {"north_feed[1]": "zero"}
    assert gemm_routing(BASE, Opcode.VRUN, to_acc=True) == {}
    assert gemm_routing(BASE, Opcode.DMA) == {}


def small_dag():
    """Every K-block and N-block fits in tile row 0 and tile column 0 of tiny."""
    rng = np.random.default_rng(9)
    g = GraphBuilder("small")
    x = g.input(rng.integers(-128, 128, (5, 3)), name="x")
    h = g.dense(x, rng.integers(-128, 128, (3, 4)), mult=60, shift=9, zp=2, relu=True,
                name="h")
    g.dense(h, rng.integers(-128, 128, (4, 2)), rng.integers(-99, 99, 2), mult=50,
            shift=9, name="a")
    g.dense([h, x], rng.integers(-128, 128, (7, 4)), out_dtype="int32", name="j")
    return g.build()


def settings(compiled):
    """``{mux: [source set, in program order]}`` from the program's SETCFGs."""
    table = fabric.muxes(compiled.cfg)
    out = {}
    for ins in compiled.program:
        if ins.op is Opcode.SETCFG:
            for index, value in isa.setcfg_pairs(ins.fields):
                out.setdefault(table[index].name, []).append(table[index].sources[value])
    return out


def test_tile_rows_and_columns_no_layer_reaches_are_fed_zeros_for_the_whole_program():
    compiled = compile_network(TINY, small_dag())
    set_to = settings(compiled)
    assert set_to["west_feed[1]"] == ["zero"] and set_to["north_feed[1]"] == ["zero"]
    assert set_to["west_feed[0]"] == ["cbuf.g0"] and set_to["north_feed[0]"] == ["cbuf.g0"]
    run = golden.run(TINY, Loadable.for_chip(TINY, compiled.image, compiled.dram))
    want = reference.outputs(compiled.graph)
    got = compiled.results(run.dram)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    assert run.cycles == compiled.predicted_cycles


def test_one_layer_reaching_every_tile_row_keeps_every_feed():
    g = GraphBuilder("mixed")
    x = g.input(np.ones((5, 3)))
    h = g.dense(x, np.ones((3, 2 * R)), name="h")          # N reaches every tile column
    g.dense(h, np.ones((2 * R, 2)), name="y")               # K reaches every tile row
    set_to = settings(compile_network(TINY, g.build()))
    assert all(sources == [fabric.by_name(TINY)[m].sources[fabric.by_name(TINY)[m].default]]
               for m, sources in set_to.items())
