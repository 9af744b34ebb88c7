"""PROG_FETCH on the RTL (docs/management-core.md, "Where the fetcher starts"):
programs compiled for a fetch start (``fetch_from`` 0: fetched whole, as the
management core runs them; 3: three instructions preloaded) run on the Verilated chip
bit-exact, in the predicted cycles, with the fetch traffic the golden model counts:
short ones and one longer than the instruction memory, on tiny and tiny_tall. And
the double-buffered configuration end to end: program B's registers written while A
runs, B started in the cycle after A's interrupt (``tb_back_to_back.py``)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from systolica import golden
from systolica.arch import fetch, isa
from systolica.arch.config import preset
from systolica.arch.isa import Opcode
from systolica.arch.loadable import Loadable
from systolica.compiler import compile_network
from systolica.compiler.graph import reference
from systolica.firmware import dramfile
from systolica.sim import rtlsim

from block_runner import run_block
from chip_runs import random_gemm, run_many_on_rtl

pytestmark = pytest.mark.rtl
TINY = preset("tiny")
TALL = preset("tiny_tall")

#: (name, network, fetch_from): short programs fetched whole or from instruction 3,
#: and one longer than the instruction memory (2,048 instructions) fetched whole.
CASES = [("short_from_0", (8, 16, 8, 1), 0), ("short_from_3", (8, 16, 8, 1), 3),
         ("long_from_0", (32, 512, 64, 2), 0)]


def _cases(cfg):
    out = []
    for name, shape, fetch_from in CASES:
        net = random_gemm(*shape, int32=True)
        compiled = compile_network(cfg, net, fetch_from=fetch_from)
        plain = compile_network(cfg, net)
        out.append((name, net, compiled, plain))
    return out


@pytest.mark.parametrize("cfg", [TINY, TALL], ids=["tiny", "tiny_tall"])
def test_programs_fetched_from_prog_fetch_run_as_predicted(cfg):
    cases = _cases(cfg)
    jobs, golds = [], []
    for name, _, compiled, _ in cases:
        assert compiled.loadable.fetch_from == compiled.fetch_from
        jobs.append(dict(program=compiled, name=name,
                         readback=[(0, compiled.dram_map.end)]))
        golds.append(golden.run(cfg, compiled.loadable))
    results = run_many_on_rtl(cfg, jobs)
    for (name, net, compiled, plain), res, gold in zip(cases, results, golds, strict=True):
        np.testing.assert_array_equal(compiled.result(res.readback[0]), reference.run(net),
                                      err_msg=name)
        assert res.error_name == "NONE", name
        assert res.cycles == compiled.predicted_cycles == gold.cycles, name
        # every instruction from the fetch start on is read once
        first = fetch.fetch_start(cfg, len(compiled.program), compiled.fetch_from)
        assert first == min(compiled.fetch_from, len(compiled.program))
        assert res.fetch_rd_bytes == compiled.fetch_bytes_read == gold.fetch_bytes_read \
            == (len(compiled.program) - first) * fetch.words_per_instruction(cfg) \
            * cfg.dram_word_bytes, name
        # fetching costs cycles, never fewer than the preloaded program's
        assert compiled.predicted_cycles >= plain.predicted_cycles, name


# -- back to back ---------------------------------------------------------------------
def _moved(compiled, offset: int) -> Loadable:
    """`compiled`'s program with its DRAM (data and program region) `offset` words
    further: every DMA's DRAM address moved, the image recoded, the DRAM image placed
    at `offset`; fetched whole (PROG_FETCH 0)."""
    program = [replace(ins, fields={**ins.fields, "dram_addr": ins.fields["dram_addr"] + offset})
               if ins.op is Opcode.DMA else ins for ins in compiled.program]
    image = isa.to_bytes([isa.encode(i) for i in program])
    return Loadable.for_chip(compiled.cfg, image, ((offset, compiled.dram),),
                             compiled.prog_addr + offset, compiled.ubuf, compiled.fetch_from)


def test_b_configured_while_a_runs_starts_after_a_interrupt(tmp_path):
    """A (preloaded, PROG_FETCH at its reset) runs; B's PROG_LEN, PROG_ADDR,
    PROG_FETCH (0) and UBUF registers are written while it does (IMEM_DATA too, which
    the chip must ignore); B is started in the cycle after A's interrupt, before the
    interrupt is acknowledged. Both leave the outputs numpy gives, in the cycles
    predicted."""
    cfg = TINY
    net_a, net_b = random_gemm(8, 16, 8, 3, int32=True), random_gemm(12, 8, 16, 4, int32=True)
    a = compile_network(cfg, net_a)
    b = compile_network(cfg, net_b, fetch_from=0)
    a_end = a.prog_addr + fetch.region_words(cfg, len(a.program))
    offset = -(-a_end // 64) * 64
    b_moved = _moved(b, offset)
    gold_b = golden.run(cfg, b_moved)
    assert gold_b.cycles == b.predicted_cycles
    segments = [(0, np.asarray(a.dram)), (offset, np.asarray(b.dram)),
                (b_moved.prog_addr, fetch.program_words(cfg, b_moved.image))]
    dramfile.write_segments(tmp_path / "dram.hex", segments)
    (tmp_path / "a.img").write_bytes(a.loadable.to_file())
    (tmp_path / "b.img").write_bytes(b_moved.to_file())
    spec = {"chip": cfg.to_dict(), "dram": "dram.hex", "a": "a.img", "b": "b.img",
            "word_bytes": cfg.dram_word_bytes,
            "readback": [[0, a.dram_map.end], [offset, b.dram_map.end]],
            "timeout_cycles": 10 * (a.predicted_cycles + b.predicted_cycles) + 10_000,
            "results": "results.json"}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    run_block(rtlsim.build(cfg), rtlsim.HDL_TOPLEVEL, "tb_back_to_back",
              extra_env={"SYSTOLICA_BACK_TO_BACK": str(tmp_path / "spec.json")},
              plusargs=("+DRAM_IN=dram_in.hex", "+DRAM_OUT=dram_out.hex"))
    got = json.loads((tmp_path / "results.json").read_text())
    assert (got["a"]["error"], got["b"]["error"]) == ("NONE", "NONE")
    assert got["a"]["cycles"] == a.predicted_cycles
    assert got["b"]["cycles"] == b.predicted_cycles
    # B's START went in the cycle after A's interrupt rose
    assert got["b_start_after_irq"] == 1
    after_a, after_b = (np.load(tmp_path / name) for name in got["readback"])
    np.testing.assert_array_equal(a.result(after_a), reference.run(net_a))
    np.testing.assert_array_equal(b.result(after_b), reference.run(net_b))
    assert got["b"]["fetch_rd_bytes"] == b.fetch_bytes_read == gold_b.fetch_bytes_read
