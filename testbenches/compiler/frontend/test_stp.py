"""Multiplexer settings in program text go through the same update-window solver as
compiled networks: a ``cfg set`` value is a need of the statements that read it, the
scheduler keeps each change clear of the other setting's uses, and the SETCFGs land in
their windows under the chip's limits. The result is checked with the golden model
against numpy."""


import numpy as np
import pytest

from systolica import golden
from systolica.arch import fabric, isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import Opcode
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode
from systolica.compiler import CompileError
from systolica.compiler.frontend.stp import compile_file, compile_program
from systolica.compiler.frontend.text import ParseError, parse

from paths import EXAMPLES

CFG = preset("tiny")
TABLE = fabric.by_name(CFG)
PERM = np.r_[4:8, 0:4]            # west_feed swapped: tile row 0 gets partitions 4..7

LOADS = """\
a = dma load_cbuf(dram_addr=0, dram_stride=1, buf_addr=100, rows=8)
w1 = dma load_cbuf(dram_addr=64, dram_stride=1, buf_addr=0, rows=8)
b1 = wload load(w1, w_addr=0, bank=0)
"""
SWAP = ('swap = cfg set(mux="west_feed[0]", source="cbuf.g1", mux1="west_feed[1]", '
        'source1="cbuf.g0")\n')


def reroute_dram(seed=5):
    rng = np.random.default_rng(seed)
    a, w1, w2 = (rng.integers(-128, 128, (8, 8), dtype=np.int8) for _ in range(3))
    dram = np.zeros((CFG.dram_words, CFG.rows), np.uint8)
    dram[0:8], dram[64:72], dram[72:80] = (x.view(np.uint8) for x in (a, w1, w2))
    return a, w1, w2, dram


def settings_in_force(program, cfg=CFG):
    """Per multiplexer index: (cycle from which it holds, value) from the SETCFGs."""
    out = {}
    for ins in program:
        if ins.op is Opcode.SETCFG:
            for index, value in isa.setcfg_pairs(ins.fields):
                out.setdefault(index, []).append((ins.cycle + 1, value))
    return out


def test_second_setting_of_a_multiplexer_waits_for_the_first_consumer():
    """Regression: the second cfg set on west_feed used to be issued before the first
    MATMUL, which then summed the wrong partitions with no warning."""
    text = (EXAMPLES / "reroute_tiny.stp").read_text()
    assert "p1 = mm matmul(a, b1, swap," in text and "p2 = mm matmul(a, b2, straight," in text
    chip = compile_file(CFG, EXAMPLES / "reroute_tiny.stp").chip
    a, w1, w2, dram = reroute_dram()
    run = golden.run(CFG, Loadable.for_chip(CFG, chip.image, dram))
    assert run.error is ErrorCode.NONE
    got = run.dram[128:192].reshape(16, 32).view("<i4")
    np.testing.assert_array_equal(got[:8], a[:, PERM].astype(np.int64) @ w1.astype(np.int64))
    np.testing.assert_array_equal(got[8:], a.astype(np.int64) @ w2.astype(np.int64))
    assert run.cycles == timing.run_cycles(CFG, chip.program)

    # every MATMUL sees one west_feed setting, the one it reads, from its first row on
    at = {s.name: i for s, i in zip(chip.statements, chip.program)}
    held = settings_in_force(chip.program)
    for name, want in (("p1", "cbuf.g1"), ("p2", "cbuf.g0")):
        lo, hi = timing.mux_use(CFG, at[name], "west_feed[0]")
        lo, hi = at[name].cycle + lo, at[name].cycle + hi
        changes = held[TABLE["west_feed[0]"].index]
        value = [v for since, v in changes if since <= lo][-1]
        assert TABLE["west_feed[0]"].sources[value] == want
        assert not any(lo < since < hi for since, _ in changes)


def test_every_multiplexer_used_is_set_before_its_first_use():
    chip = compile_file(CFG, EXAMPLES / "gemm_tiny.stp").chip
    held = settings_in_force(chip.program)
    for ins in chip.program:
        for mux in fabric.muxes(CFG):
            use = timing.mux_use(CFG, ins, mux.name)
            if use is not None:
                assert any(since <= ins.cycle + use[0] for since, _ in held[mux.index]), \
                    (mux.name, str(ins))


def test_placed_updates_are_listed_with_the_statements_they_serve():
    result = compile_file(CFG, EXAMPLES / "reroute_tiny.stp")
    sets = [s.text for s in result.chip.statements if s.component == "cfg"]
    assert all(t.startswith("cfg set(mux=") and "  # for " in t for t in sets)
    assert any("p1 (swap)" in t for t in sets) and any("p2 (straight)" in t for t in sets)
    assert not any("(straight)" in t and "p1" in t for t in sets)


def test_one_setting_read_by_two_statements_is_written_once():
    text = SWAP + LOADS + """\
p1 = mm matmul(a, b1, swap, act_addr=100, rows=8, acc_addr=0, accumulate=0, bank=0)
p2 = mm matmul(a, b1, swap, act_addr=100, rows=8, acc_addr=8, accumulate=0, bank=0)
"""
    chip = compile_program(CFG, parse(text, "twice.stp")).chip
    writes = [v for ins in chip.program if ins.op is Opcode.SETCFG
              for i, v in isa.setcfg_pairs(ins.fields) if i == TABLE["west_feed[0]"].index]
    assert writes == [TABLE["west_feed[0]"].value_of("cbuf.g1")]


@pytest.mark.parametrize("limits", [
    dict(config_update_interval=4),
    dict(power_domain_budget=1, max_config_updates_per_cycle=1),
    dict(config_update_interval=3, power_domain_budget=1),
])
def test_text_programs_keep_the_chips_update_limits(limits):
    cfg = CFG.replace(**limits)
    chip = compile_file(cfg, EXAMPLES / "reroute_tiny.stp").chip
    domain = {m.index: m.domain for m in fabric.muxes(cfg)}
    for ins in chip.program:
        if ins.op is Opcode.SETCFG:
            pairs = isa.setcfg_pairs(ins.fields)
            assert ins.cycle % cfg.config_update_interval == 0
            assert len(pairs) <= cfg.max_config_updates_per_cycle
            per = [domain[i] for i, _ in pairs]
            assert max(per.count(d) for d in per) <= cfg.power_domain_budget
    a, w1, w2, dram = reroute_dram()
    run = golden.run(cfg, Loadable.for_chip(cfg, chip.image, dram))
    assert run.error is ErrorCode.NONE
    got = run.dram[128:192].reshape(16, 32).view("<i4")
    np.testing.assert_array_equal(got[:8], a[:, PERM].astype(np.int64) @ w1.astype(np.int64))


MM = "p = mm matmul(a, b1, {reads}act_addr=100, rows=8, acc_addr=0, accumulate=0, bank=0)\n"


@pytest.mark.parametrize("text, line, expected", [
    (SWAP + LOADS + MM.format(reads=""), 1,
     "no chip statement reads 'swap', so nothing needs this setting"),
    ('cfg set(mux="west_feed[0]", source="zero")\n' + LOADS + MM.format(reads=""), 1,
     "a cfg set defines exactly one value"),
    (LOADS + 'r = cfg set(a, mux="west_feed[0]", source="zero")\n' + MM.format(reads="r, "),
     4, "a cfg set reads no values"),
    (SWAP + LOADS.replace("b1 = wload load(w1,", "b1 = wload load(w1, swap,") +
     MM.format(reads="swap, "), 4,
     "reads 'swap' ('swap = cfg set(mux=\"west_feed[0]\""),
    (SWAP + 'z = cfg set(mux="west_feed[0]", source="zero")\n' + LOADS +
     MM.format(reads="swap, z, "), 6, "which sets it to cbuf.g1; one instruction sees one"),
    (SWAP + LOADS + MM.format(reads="swap, ") +
     "o = dma store_cbuf(swap, dram_addr=9, dram_stride=1, buf_addr=100, rows=1)\n", 6,
     "this DMA's data does not pass west_feed[0]"),
    ('proc p() -> (v)\nr = cfg set(mux="wb_src[0]", source="col.g1")\n' + LOADS
     + MM.format(reads="") + "v = vpu vrun(p, r, src=0, rows=8, dst=8, to_acc=1)\n", 7,
     "this VRUN's data does not pass wb_src[0]"),
    ('proc p() -> (r)\nr = cfg set(mux="west_feed[0]", source="zero")\n' + LOADS
     + MM.format(reads="r, "), 2, "proc output 'r' is a multiplexer setting, not data"),
])
def test_cfg_set_errors_name_the_line(text, line, expected):
    with pytest.raises(ParseError) as e:
        compile_program(CFG, parse(text, "cfg.stp"))
    assert str(e.value).startswith(f"cfg.stp:{line}:") and expected in str(e.value)
    assert isinstance(e.value, CompileError)


def test_latency_line_in_a_chip_only_program_is_an_error():
    text = "latency cbuf_read = 2\n" + LOADS
    with pytest.raises(CompileError, match=r"^lat.stp:1:1: latency cbuf_read: .*RTL fixes"):
        compile_program(CFG, parse(text, "lat.stp"))


def test_a_program_without_statements_is_refused():
    with pytest.raises(CompileError, match=r"empty\.stp has no statements"):
        compile_program(preset("tiny"), parse("# only a comment\n", "empty.stp"))
