"""Grids with more multiplexers than one SETCFG page (docs/contract.md, "SETCFG
pages"): a SETCFG's pairs name multiplexers ``page * 128 + index``, one page per
SETCFG, so a chip may have up to 256. Grids here: 8x8 tiles of one cell (an 8x8 array,
232 multiplexers: the seed's 8x8 tile grid, its tiles shrunk), 6x6 tiles of 2x2 (a
12x12 array, 138) and 4x4 tiles of 2x2 with the general lanes (8x8, 132). Their
programs compile (the compiler never puts two pages' updates in one cycle), equal
numpy on the golden model in the predicted cycles; `make regress` runs them on the 8x8
and 6x6 grids' Verilated RTL (`make test` checks the pages on the RTL block by block:
the fabric registers' paged build, the sequencer's and the chip's page faults)."""

from __future__ import annotations

import pytest
import test_chip_mixed as mixed
import test_chip_nonsquare as tall
import test_chip_wide as wide

from systolica.arch import fabric, isa
from systolica.arch.config import preset
from systolica.arch.isa import Opcode
from systolica.compiler import compile_network

from chip_runs import assert_cases_and_random_programs_on_rtl, case_network
from tiers import sample

TINY = preset("tiny")
G66 = TINY.replace(name="tiny_6x6", tile_rows=6, tile_cols=6, tile_size=2,
                   general_lanes=False)
G88 = preset("tiny_8x8")
G44 = TINY.replace(name="tiny_4x4", tile_rows=4, tile_cols=4, tile_size=2)
GRIDS = [G66, G88, G44]
#: the non-square grids' cases and two GEMMs the 8x8 grid splits (K = 4: two groups of
#: four tile rows; K = 2: four groups of two)
CASES = {**mixed.CASES, "split_600x4x4": wide.gemm(600, 4, 4, seed=5),
         "split_600x2x2": wide.gemm(600, 2, 2, seed=6)}

#: the cases on the RTL: GEMMs (two split), a dense network, CNNs, a chain, int8 and
#: int32 transposes, a Concat of maps (the general lanes are off: no ROUTE) and a
#: depthwise layer
RTL_CASES = {"wide_gemm_ragged", "split_600x4x4", "split_600x2x2", "wide_mlp", "wide_cnn",
             "wide_chain_fused_crop", "wide_transpose_37x21", "wide_int32_transpose_20x9x13",
             "maps_inception_16", "depthwise_4"}


def test_multiplexer_numbers_span_two_pages():
    """The grids' tables pass 128; page 1 holds the 8x8 grid's partial-sum inputs and
    its accumulator and writeback multiplexers, the 4x4 grid's last northbound lanes.
    A grid past 256 takes SETCFGW instead (test_chip_setcfgw.py)."""
    assert [len(fabric.muxes(g)) for g in GRIDS] == [138, 232, 132]
    names = [m.name for m in fabric.muxes(G88) if isa.mux_page(m.index) == 1]
    assert names[0] == "w_in[6][0]" and "psum_in[0][0]" in names and "acc_src[7]" in names
    assert [m.name for m in fabric.muxes(G44) if m.index >= 128] == [
        f"gen_n[3][{j}]" for j in range(4)]
    assert all(fabric.setcfg_format(g).op is Opcode.SETCFG for g in GRIDS)
    past = TINY.replace(tile_rows=6, tile_cols=6, tile_size=2)
    assert len(fabric.muxes(past)) == 282
    assert fabric.setcfg_format(past).op is Opcode.SETCFGW


def test_a_setcfg_names_one_page():
    """Encoding keeps a SETCFG's pairs in one page; across pages it names the fix."""
    fields = isa.setcfg_fields([(130, 1), (255, 2)])
    assert fields["page"] == 1 and fields["index"] == 2 and fields["index1"] == 127
    word = isa.encode(isa.Instr(Opcode.SETCFG, 3, fields))
    assert isa.setcfg_pairs(isa.decode(word).fields) == [(130, 1), (255, 2)]
    with pytest.raises(isa.EncodingError, match="lie in pages 0, 1: write one SETCFG per page"):
        isa.setcfg_fields([(1, 1), (200, 0)])


def test_split_programs_set_both_pages():
    """A split GEMM on the 8x8 grid reroutes multiplexers of both pages (feeds in page
    0, partial sums and writeback in page 1) from SETCFGs of one page each."""
    for name, groups in (("split_600x4x4", 2), ("split_600x2x2", 4)):
        c = compile_network(G88, CASES[name]())
        pages = [ins.fields["page"] for ins in c.program if ins.op is Opcode.SETCFG]
        assert 0 in pages and 1 in pages
        assert c.plan.split("layer0") == groups


@pytest.mark.parametrize("cfg,name", sample(
    [pytest.param(g, n, id=f"{g.name}-{n}") for g in GRIDS for n in sorted(CASES)
     if g is not G44 or n in RTL_CASES or n.startswith("wide_")], 70, 2))
def test_compiles_and_golden_equals_numpy(cfg, name):
    """Pure Python: the non-square grids' cases compile on these grids and the golden
    model running them equals numpy in the predicted cycles."""
    graph, options = case_network(CASES[name])
    tall.golden_equals_numpy_on_time(cfg, graph, **options)


@pytest.mark.rtl
@pytest.mark.regress
@pytest.mark.parametrize("cfg", [G88, G66], ids=lambda c: c.name)
def test_rtl_equals_numpy_golden_and_prediction(cfg):
    """:data:`RTL_CASES` on its Verilated RTL in one simulator start (results equal
    numpy and the golden model, cycles the prediction), and random legal and illegal
    programs agree between its RTL and the golden model."""
    assert_cases_and_random_programs_on_rtl(
        cfg, {k: v for k, v in CASES.items() if k in RTL_CASES}, seed=2000)
