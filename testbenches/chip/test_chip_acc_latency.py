"""The ACC's read latency 2 (``latency["acc_read"] = 2``: each ACC bank's output
registered, as the ``ulx3s`` preset has it for its clock;
docs/notes/fpga-ulx3s-timing.md). On ``tiny`` with that latency the matmul unit adds a
row two cycles after reading it and forwards from both of its writes still in flight,
the vector unit and an ACC store wait a cycle more, and the compiler, the schedule
verifier and the golden model take every one of those cycles from the latency table.
Networks that accumulate across K-blocks, one-row MATMULs back to back into one ACC
row, int32 outputs (ACC stores), convolutions, pools and a residual compile and equal
numpy on the golden model. On the chip's own Verilated RTL (a build of its own, in
``make regress``) they equal numpy and the golden model, cycles the prediction, and
random legal and illegal programs agree between its RTL and the golden model; ``make
test`` runs each unit the latency moves on its RTL at latency 2 (the block tests of
the matmul unit, the vector unit, the DMA and the ACC)."""

from __future__ import annotations

import numpy as np
import pytest
from test_chip_nonsquare import gemm, transpose

from systolica import golden
from systolica.arch import timing
from systolica.arch.config import ConfigError, preset
from systolica.arch.instructions import SPEC
from systolica.arch.isa import Instr, Opcode
from systolica.arch.loadable import Loadable
from systolica.compiler import compile_network
from systolica.compiler.graph import reference
from systolica.models import cnn_cases
from systolica.models import zoo as models

from chip_runs import assert_cases_and_random_programs_on_rtl
from tb_base import with_acc_read

TINY = preset("tiny")
ACC2 = with_acc_read(TINY, 2, name="tiny_acc2")

CASES = {
    "gemm_ragged": gemm(19, 37, 30),        # 5 K-blocks of 8 accumulate in the ACC
    "gemm_one_row": gemm(1, 40, 8),         # one-row MATMULs into one ACC row
    "gemm_int32": gemm(7, 9, 21, "int32"),  # int32 outputs: ACC stores
    "transpose_13x11": transpose(13, 11),
    "small_cnn": lambda: models.small_cnn(seed=3, size=8),
    "pool": lambda: cnn_cases.pool_case(2),             # max pools: the running max
    "residual": lambda: cnn_cases.residual_chain_case(1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_equals_numpy(name):
    """Pure Python: every case compiles for the latency and the golden model running
    the program equals numpy."""
    c = compile_network(ACC2, CASES[name]())
    got = c.results(golden.run(ACC2, Loadable.for_chip(ACC2, c.image, c.dram, c.prog_addr)).dram)
    for k, want in reference.outputs(c.graph).items():
        np.testing.assert_array_equal(got[k], want, err_msg=f"{name}: golden vs numpy")


def test_the_latency_moves_the_units_it_should():
    """A MATMUL writes its rows, a VRUN its outputs and an ACC store its words a cycle
    later; a CBUF store and a load do not move; a VRUN's occupancy does not."""
    def at(cfg, op, **fields):
        return Instr(op, 0, fields)

    matmul = dict(act_addr=0, rows=4, acc_addr=0, accumulate=1)
    vrun = dict(src=0, dst=0, rows=4, bias_addr=8, use_bias=1)
    assert (timing.done(ACC2, at(ACC2, Opcode.MATMUL, **matmul))
            == timing.done(TINY, at(TINY, Opcode.MATMUL, **matmul)) + 1)
    assert (timing.done(ACC2, at(ACC2, Opcode.VRUN, **vrun))
            == timing.done(TINY, at(TINY, Opcode.VRUN, **vrun)) + 1)
    assert (timing.occupancy(ACC2, at(ACC2, Opcode.VRUN, **vrun))
            == timing.occupancy(TINY, at(TINY, Opcode.VRUN, **vrun)))
    for kind, later in ((3, 1), (2, 0), (0, 0), (1, 0)):    # STORE_ACC, STORE_CBUF, loads
        dma = dict(kind=kind, dram_addr=0, dram_stride=4, buf_addr=0, rows=3)
        for f in (timing.occupancy, timing.done):
            assert (f(ACC2, at(ACC2, Opcode.DMA, **dma))
                    == f(TINY, at(TINY, Opcode.DMA, **dma)) + later)
        # the cycle-level view agrees (the golden model takes the unit's accept from it)
        assert (SPEC[Opcode.DMA].effects(ACC2, dma).accept
                == timing.occupancy(ACC2, at(ACC2, Opcode.DMA, **dma)))


def test_other_latencies_are_refused():
    with pytest.raises(ConfigError, match="acc_read'] is 1, or 2"):
        TINY.replace(latency={**TINY.latency, "acc_read": 3})


@pytest.mark.rtl
@pytest.mark.regress    # a chip build of its own; the units at latency 2: test_blocks.py
def test_rtl_equals_numpy_golden_and_prediction():
    """Every case on the Verilated RTL of ``tiny`` with the ACC's read latency 2, then
    random legal and illegal programs against the golden model."""
    assert_cases_and_random_programs_on_rtl(ACC2, CASES, seed=1700)
