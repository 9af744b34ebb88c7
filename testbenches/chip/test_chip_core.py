"""The management core in the chip (docs/management-core.md, "The core in the chip"):
its registers, cycle by cycle, with small programs for the core (``tb_chip_core``);
and a table of compiled programs the firmware runs: the host loads the firmware and
the table through the CORE_* registers, the core sequences the chip's programs itself
and signals the host once; the outputs equal the golden model's bit for bit and every
program's CYCLES its prediction."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch import fetch
from systolica.arch.config import preset
from systolica.compiler import compile_network
from systolica.compiler.options import CompileOptions
from systolica.firmware.core_image import FwResult
from systolica.models.zoo import small_cnn
from systolica.sim import core_run, rtlsim

from block_runner import run_block

pytestmark = pytest.mark.rtl

CFG = preset("tiny")


def test_the_core_registers():
    import tb_chip_core
    run_block(rtlsim.build(CFG), rtlsim.HDL_TOPLEVEL, "tb_chip_core",
              extra_env={"BLOCK_CASE": ",".join(tb_chip_core.CASES)})


def _programs(count: int):
    """`count` small CNNs (different weights), each in its own part of the DRAM."""
    out, base = [], 0
    for seed in range(count):
        compiled = compile_network(CFG, small_cnn(seed, size=8, channels=4),
                                   options=CompileOptions(dram_base=base))
        out.append(compiled)
        base = compiled.prog_addr + fetch.region_words(CFG, len(compiled.program))
    return out


@pytest.fixture(scope="module")
def programs():
    return _programs(3)


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "one-at-a-time"])
def test_the_core_runs_a_table_of_programs(programs, overlap):
    ranges = [(c.dram_map.output, c.dram_map.output_words) for c in programs]
    got = core_run.run(CFG, [c.loadable for c in programs], readback=ranges,
                       overlap=overlap)
    table = got.table
    assert table.result == FwResult.OK and not table.problems, table.mailbox
    assert table.mailbox["steps_done"] == len(programs)
    for compiled, step, words in zip(programs, table.steps, got.readback, strict=True):
        gold = golden.run(CFG, compiled.loadable)
        assert step["t_cycles"] == compiled.predicted_cycles == gold.cycles
        lo = compiled.dram_map.output
        assert np.array_equal(words, gold.dram[lo:lo + compiled.dram_map.output_words])
    print("gaps", overlap, table.gaps())
