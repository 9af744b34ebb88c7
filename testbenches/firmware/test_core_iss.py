"""The golden model's way of running a step table (systolica.firmware.core_iss): the
firmware on the instruction-set model with the golden model behind its register
window. Each program's outputs equal its own golden run; a chip fault stops the
table with the golden model's code, pc and cycle."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch import fetch, isa
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Instr, Opcode
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode
from systolica.compiler import compile_network, gemm
from systolica.compiler.options import CompileOptions
from systolica.firmware import core_iss
from systolica.firmware.core_image import FwResult

CFG = preset("tiny")


def _gemms(count: int):
    out, base = [], 0
    rng = np.random.default_rng(5)
    for k in range(count):
        a = rng.integers(-128, 128, (6, 8), dtype=np.int8)
        b = rng.integers(-128, 128, (8, 5), dtype=np.int8)
        net = gemm(a, b, np.zeros(5, np.int32), out_dtype="int32", name=f"g{k}")
        compiled = compile_network(CFG, net, options=CompileOptions(dram_base=base,
                                                                  fetch_from=0))
        out.append(compiled)
        base = compiled.prog_addr + fetch.region_words(CFG, len(compiled.program))
    return out


@pytest.mark.parametrize("overlap", [True, False])
def test_a_table_of_programs_on_the_golden_model(overlap):
    programs = _gemms(3)
    run = core_iss.golden_table(CFG, [c.loadable for c in programs], overlap=overlap)
    assert (run.mailbox["result"], run.mailbox["steps_done"]) == (FwResult.OK, 3)
    assert run.chip.messages == [FwResult.OK]
    assert run.mailbox["cycles"] == sum(c.predicted_cycles for c in programs)
    for c in programs:
        lo, n = c.dram_map.output, c.dram_map.output_words
        assert np.array_equal(run.dram[lo:lo + n], golden.run(CFG, c.loadable).dram[lo:lo + n])


def test_a_chip_fault_stops_the_table_with_the_golden_models_code():
    first, = _gemms(1)
    at = first.prog_addr + fetch.region_words(CFG, len(first.program))
    bad = [Instr(Opcode.DMA, 20, dict(kind=DmaKind.LOAD_CBUF, dram_addr=CFG.dram_words - 1,
                                     dram_stride=1, buf_addr=0, rows=4))]
    image = isa.to_bytes([isa.encode(i) for i in bad])
    faulty = Loadable.for_chip(CFG, image, [], at, fetch_from=0)
    run = core_iss.golden_table(CFG, [first.loadable, faulty])
    gold = golden.run(CFG, faulty)
    assert gold.error == ErrorCode.ADDR_RANGE
    assert (run.mailbox["result"], run.mailbox["fault_step"], run.mailbox["fault_code"],
            run.mailbox["fault_pc"], run.mailbox["fault_cycle"]) == (
        FwResult.CHIP_FAULT, 1, ErrorCode.ADDR_RANGE, gold.fault_pc, gold.fault_cycle)
