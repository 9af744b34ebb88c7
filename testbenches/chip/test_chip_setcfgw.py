"""Grids past SETCFG's reach take SETCFGW (docs/contract.md, "SETCFG formats"): its
pairs name multiplexers ``page * 32 + index`` with 5-bit values, so a fabric may have
16,384 multiplexers of up to 32 sources. The grid here is the seed's 16x16 tile grid,
its tiles shrunk to one cell (`tiny_16x16`: a 16x16 array, 848 multiplexers, `wb_src`
of 18 sources). Its programs compile with SETCFGW alone, equal numpy on the golden
model in the predicted cycles, and split a GEMM of K = 1 into 16 tile groups; a chip
faults the format it does not take (ILLEGAL_OPCODE). `make regress` runs the grid's
cases and random programs on its Verilated RTL; `make test` checks the wide registers
block by block (`tb_fabric_regs`' 2x16 build), SETCFGW's faults and split GEMMs on
the RTL of a small SETCFGW chip (17x3 one-cell tiles: `west_feed` of 18 sources), and
SETCFGW's fault on tiny's RTL (`test_chip_faults`)."""

from __future__ import annotations

import numpy as np
import pytest
import test_chip_mixed as mixed
import test_chip_nonsquare as tall
import test_chip_wide as wide

from systolica import golden
from systolica.arch import fabric, isa
from systolica.arch.config import preset
from systolica.arch.isa import Instr, Opcode
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode
from systolica.compiler import compile_network

from chip_runs import (
    assert_cases_and_random_programs_on_rtl,
    assert_matches_prediction,
    assert_outputs_match,
    case_network,
    compile_and_run_on_rtl,
    run_many_on_rtl,
)

G16 = preset("tiny_16x16")
#: a SETCFGW chip small enough for `make test` (a 17x3 array): 210 multiplexers,
#: `west_feed` of 18 sources, past SETCFG's 16; sides that do not divide
G173 = preset("tiny").replace(name="tiny_17x3", tile_rows=17, tile_cols=3, tile_size=1,
                              general_lanes=False)
#: three GEMMs the grid splits (K = 1 in 16 tile groups, K = 4 in 4, K = 5 in 3 of
#: five tiles each, the last tile row and column in none) and the non-square grids'
#: cases
CASES = {"split_600x1x1": wide.gemm(600, 1, 1, seed=7),
         "split_600x4x4": wide.gemm(600, 4, 4, seed=5),
         "split_300x5x5": wide.gemm(300, 5, 5, seed=8), **mixed.CASES}
#: on the RTL: the splits, a ragged GEMM, a dense network, a CNN and an int8 transpose
RTL_CASES = {"split_600x1x1", "split_600x4x4", "split_300x5x5", "wide_gemm_ragged",
             "wide_mlp", "wide_cnn", "wide_transpose_37x21"}


def test_the_grid_needs_the_wide_format():
    """848 multiplexers, `wb_src` of 18 sources: past SETCFG's 256 and 16; SETCFGW's
    pages of 32 hold them (27 pages)."""
    table = fabric.muxes(G16)
    assert len(table) == 848
    assert max(len(m.sources) for m in table) == 18
    assert fabric.setcfg_format(G16).op is Opcode.SETCFGW
    assert isa.mux_page(len(table) - 1, Opcode.SETCFGW) == 26


def test_a_setcfgw_names_one_page_of_32():
    """Encoding keeps pairs in one page of 32 and reads them back; 5-bit values."""
    fields = isa.setcfg_fields([(840, 17), (847, 31)], Opcode.SETCFGW)
    assert (fields["page"], fields["index"], fields["index1"]) == (26, 8, 15)
    word = isa.encode(Instr(Opcode.SETCFGW, 3, fields))
    back = isa.decode(word)
    assert back.op is Opcode.SETCFGW
    assert isa.setcfg_pairs(back.fields, back.op) == [(840, 17), (847, 31)]
    with pytest.raises(isa.EncodingError, match="lie in pages 0, 1: write one SETCFGW"):
        isa.setcfg_fields([(1, 1), (40, 0)], Opcode.SETCFGW)
    with pytest.raises(isa.EncodingError, match="value1=32 does not fit 5"):
        isa.encode(Instr(Opcode.SETCFGW, 0, {**fields, "value1": 32}))


@pytest.mark.parametrize("cfg,op", [(preset("tiny"), Opcode.SETCFGW), (G16, Opcode.SETCFG)],
                         ids=["tiny-SETCFGW", "tiny_16x16-SETCFG"])
def test_the_other_format_is_illegal(cfg, op):
    """A chip takes one format: the other faults ILLEGAL_OPCODE, naming the rule."""
    ins = Instr(op, 2, isa.setcfg_fields([(3, 1)], op))
    timeline = golden.check(cfg, [ins])
    assert timeline.fault[:2] == (ErrorCode.ILLEGAL_OPCODE, 0)
    assert f"{op.name} on a chip whose multiplexers it can name" in timeline.fault_reason


@pytest.mark.slow
def test_split_programs_use_setcfgw_alone():
    """The K = 1 GEMM splits into 16 tile groups and the K = 5 one into 3 (the cost
    model's choices), every multiplexer update in SETCFGWs of one page each."""
    assert compile_network(G16, CASES["split_300x5x5"]()).plan.split("layer0") == 3
    c = compile_network(G16, CASES["split_600x1x1"]())
    assert c.plan.split("layer0") == 16
    ops = {ins.op for ins in c.program if ins.op in isa.SETCFGS}
    assert ops == {Opcode.SETCFGW}
    pages = {ins.fields["page"] for ins in c.program if ins.op is Opcode.SETCFGW}
    assert len(pages) > 16


@pytest.mark.slow
@pytest.mark.parametrize("name", ["split_300x5x5"] + [
    pytest.param(n, marks=pytest.mark.regress) for n in sorted(CASES) if n != "split_300x5x5"])
def test_compiles_and_golden_equals_numpy(name):
    """Pure Python: the cases compile on the 16x16 grid and the golden model running
    them equals numpy in the predicted cycles. A compile here takes 7 to 10 seconds,
    most of it placing the updates of 848 multiplexers, so `make test` runs one (three
    groups of five tiles) and `make regress` the rest (and the RTL's cases on the
    RTL)."""
    graph, options = case_network(CASES[name])
    tall.golden_equals_numpy_on_time(G16, graph, **options)


@pytest.mark.rtl
@pytest.mark.regress
def test_rtl_equals_numpy_golden_and_prediction():
    """:data:`RTL_CASES` on the grid's Verilated RTL in one simulator start (results
    equal numpy and the golden model, cycles the prediction), and random legal and
    illegal programs agree between its RTL and the golden model."""
    assert_cases_and_random_programs_on_rtl(
        G16, {k: v for k, v in CASES.items() if k in RTL_CASES}, seed=3000)


def _setcfgw(cycle, pairs):
    return Instr(Opcode.SETCFGW, cycle, isa.setcfg_fields(pairs, Opcode.SETCFGW))


def _load(cycle):
    return Instr(Opcode.DMA, cycle, dict(kind=isa.DmaKind.LOAD_CBUF, dram_addr=0,
                                         dram_stride=1, buf_addr=0, rows=4))


_LAST = len(fabric.muxes(G173)) - 1        # 209 (west_wfeed[16]): page 6, index 17
#: SETCFGW's faults on the 17x3 chip (code from the golden model; the RTL must agree)
FAULTS = {
    "setcfg_on_a_setcfgw_chip": ([Instr(Opcode.SETCFG, 1, isa.setcfg_fields([(3, 1)]))],
                                 ErrorCode.ILLEGAL_OPCODE),
    "past_the_table_in_the_last_page": ([_setcfgw(1, [(_LAST, 0), (_LAST + 1, 0)])],
                                        ErrorCode.CFG_RANGE),
    "a_page_bit_past_the_table": ([_load(0), _setcfgw(2, [(3 + 32 * 256, 0)])],
                                  ErrorCode.CFG_RANGE),
    "a_source_past_the_mux": ([_setcfgw(1, [(0, 1), (1, 31)])], ErrorCode.CFG_RANGE),
    "too_many_pairs": ([_setcfgw(1, [(k, 0) for k in (0, 6, 12, 20, 21)])],
                       ErrorCode.CFG_LIMIT),
    # source 17 (zero): past SETCFG's 4-bit values
    "the_last_mux_set_and_used": ([_setcfgw(0, [(_LAST, 17), (_LAST - 1, 0)]), _load(1)],
                                  ErrorCode.NONE),
}


@pytest.mark.rtl
@pytest.mark.regress   # its own 17x3 chip build; SETCFGW decoding: tb_fabric_regs
def test_setcfgw_faults_and_a_split_on_the_rtl():
    """On the 17x3 chip's RTL: each of :data:`FAULTS` as the golden model says (code,
    pc, cycle), then GEMMs split into three groups (the cost model's: tile row 15 and
    16 in none) and two (asked: neither side divides) equal numpy and the golden model
    in the predicted cycles, their updates in SETCFGWs."""
    assert fabric.setcfg_format(G173).op is Opcode.SETCFGW
    images = {name: isa.to_bytes([isa.encode(i) for i in prog])
              for name, (prog, _) in FAULTS.items()}
    zeros = np.zeros((G173.dram_words, G173.rows), np.uint8)
    runs = run_many_on_rtl(G173, [dict(program=images[n], name=n, readback=[(0, 1)],
                                      expect_fault=code is not ErrorCode.NONE)
                                 for n, (_, code) in FAULTS.items()])
    for (name, (_, code)), res in zip(FAULTS.items(), runs):
        gold = golden.run(G173, Loadable.for_chip(G173, images[name], zeros))
        assert gold.error == code, name
        assert res.error == code, f"{name}: chip says {res.error_name}"
        assert (res.fault_pc, res.fault_cycle) == (gold.fault_pc, gold.fault_cycle)
    cases = {"split_301x1x1": wide.gemm(301, 1, 1, seed=9),
             "split_301x1x1_in_2": (wide.gemm(301, 1, 1, seed=9), {"split": {"layer0": 2}})}
    for (name, (compiled, res)), groups in zip(compile_and_run_on_rtl(G173, cases).items(),
                                               (3, 2)):
        assert compiled.plan.split("layer0") == groups, name
        assert Opcode.SETCFGW in {i.op for i in compiled.program}
        assert_outputs_match(G173, compiled, res)
        assert_matches_prediction(G173, compiled, res)
