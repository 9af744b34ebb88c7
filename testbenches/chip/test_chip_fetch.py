"""Programs longer than the instruction memory on the RTL: fetched from DRAM while
they run, bit-exact, in the predicted cycles; a fetch-late word faults like the golden
model says. One extra configuration (tiny with an 8-instruction memory, so that a
small GEMM fetches almost all of its program) and the tiny preset itself."""

from __future__ import annotations

import numpy as np
import pytest
from test_fetch import hog

from systolica import golden
from systolica.arch import fetch, isa, timing
from systolica.arch.config import preset
from systolica.arch.loadable import Loadable
from systolica.compiler import compile_network, gemm
from systolica.compiler.graph import reference
from systolica.compiler.scheduling.fetch_delay import delay_for_fetch

from chip_runs import run_many_on_rtl

pytestmark = pytest.mark.rtl
TINY = preset("tiny")
SMALL = TINY.replace(imem_depth=8)
PROG_ADDR = 1000


def _image(program) -> bytes:
    return isa.to_bytes([isa.encode(i) for i in program])


def _net(M, K, N, seed):
    rng = np.random.default_rng(seed)
    return gemm(rng.integers(-128, 128, (M, K), dtype=np.int8),
                rng.integers(-128, 128, (K, N), dtype=np.int8),
                rng.integers(-900, 900, N, dtype=np.int32), out_dtype="int32")


def _compiled_case(cfg, compiled, name):
    gold = golden.run(cfg, Loadable.for_chip(cfg, compiled.image, compiled.dram,
                                             compiled.prog_addr))
    return dict(program=compiled, name=name, readback=[(0, compiled.dram_map.end)]), gold


def test_long_programs_on_a_small_instruction_memory():
    compiled = compile_network(SMALL, _net(64, 64, 64, 1))
    assert compiled.fetch_delay > 0 and len(compiled.program) > 20 * SMALL.imem_depth
    late = hog(SMALL, 24, 27)
    delayed = delay_for_fetch(SMALL, hog(SMALL, 8, 9))
    over = SMALL.dram_words - fetch.region_words(SMALL, len(late)) + 1
    # a deep K: matmul windows overlapping back to the start (test_fetch.py)
    deep = compile_network(SMALL, _net(8, 256, 8, 3))
    assert deep.fetch_delay > 0
    jobs, golds = [], []
    for case, name in ((compiled, "gemm"), (deep, "deep_k")):
        job, gold = _compiled_case(SMALL, case, name)
        jobs.append(job)
        golds.append(gold)
    deep_gold = golds.pop()
    for name, program, at, fault in (("late", late, PROG_ADDR, True),
                                     ("delayed", delayed, PROG_ADDR, False),
                                     ("prog_range", late, over, True)):
        jobs.append(dict(program=_image(program), name=name, prog_addr=at,
                         expect_fault=fault, readback=[(0, 1)]))
        golds.append(golden.run(SMALL, Loadable.for_chip(
            SMALL, _image(program), np.zeros((1, SMALL.rows), np.uint8), at)))
    res = dict(zip([j["name"] for j in jobs], run_many_on_rtl(SMALL, jobs)))
    np.testing.assert_array_equal(deep.result(res["deep_k"].readback[0]),
                                  reference.run(deep.network))
    assert res["deep_k"].error_name == "NONE"
    assert res["deep_k"].cycles == deep.predicted_cycles == deep_gold.cycles

    got = compiled.result(res["gemm"].readback[0])
    np.testing.assert_array_equal(got, reference.run(compiled.network))
    assert res["gemm"].cycles == compiled.predicted_cycles == golds[0].cycles
    assert res["gemm"].error_name == "NONE"
    # the FETCH_RD_BYTES counter: every fetched word once, as predicted
    assert res["gemm"].fetch_rd_bytes == compiled.fetch_bytes_read \
        == golds[0].fetch_bytes_read > 0
    assert res["delayed"].fetch_rd_bytes == golds[2].fetch_bytes_read > 0
    for name, gold in zip(["late", "delayed", "prog_range"], golds[1:]):
        r = res[name]
        assert (r.error_name, r.fault_pc, r.fault_cycle, r.cycles) == \
            (gold.error.name, gold.fault_pc, gold.fault_cycle, gold.cycles), name
    assert (res["late"].error_name, res["late"].fault_cycle) == ("FETCH_LATE", 25)
    assert res["delayed"].cycles == timing.run_cycles(SMALL, delayed) == 28
    assert res["prog_range"].error_name == "PROG_RANGE"


def test_program_longer_than_the_tiny_instruction_memory():
    compiled = compile_network(TINY, _net(32, 512, 64, 2))
    assert len(compiled.program) > TINY.imem_depth
    job, gold = _compiled_case(TINY, compiled, "gemm_32x512x64")
    (res,) = run_many_on_rtl(TINY, [job])
    assert res.error_name == "NONE"
    np.testing.assert_array_equal(compiled.result(res.readback[0]),
                                  reference.run(compiled.network))
    assert res.cycles == compiled.predicted_cycles == gold.cycles
    assert res.fetch_rd_bytes == compiled.fetch_bytes_read == gold.fetch_bytes_read > 0
