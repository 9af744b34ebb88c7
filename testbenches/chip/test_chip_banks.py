"""CBUF bank conflicts on the Verilated tiny chip: the chip faults ``BANK_CONFLICT``
exactly the cycle after the first cycle two units use one port of one bank, as the
contract's rule (:mod:`bank_ports`) finds it, with the number of instructions issued
before the fault as ``FAULT_PC``; a program without one runs to its end. Directed programs show the
parts of the rule a compiled program may not reach (a WLOAD's conveyor-slot read, a
window walk's claim on every bank of its tile); compiled GEMMs, MLPs and
convolutions show it on real schedules."""

from __future__ import annotations

import pytest
import test_chip_cnn
import test_chip_gemm

from systolica.arch import timing
from systolica.arch.config import preset
from systolica.arch.instructions import Wload
from systolica.arch.isa import DmaKind, Instr, Opcode
from systolica.arch.regs import ErrorCode

from bank_ports import first_conflict
from chip_runs import program_image, run_many_on_rtl

pytestmark = pytest.mark.rtl

CFG = preset("tiny")
ROWS = CFG.cbuf_bank_rows


def store(cycle, buf_addr, rows=1):
    return Instr(Opcode.DMA, cycle, dict(kind=DmaKind.STORE_CBUF, dram_addr=0,
                                         dram_stride=1, buf_addr=buf_addr, rows=rows))


def wload(cycle, w_addr):
    return Instr(Opcode.WLOAD, cycle, dict(w_addr=w_addr, bank=0))


def walk(cycle, act_addr, rows, in_h, in_w):
    """A window walk with the reset geometry (one output pixel per row, no taps): row
    ``i`` reads pixel ``i * in_w`` of the tile in every partition."""
    return Instr(Opcode.MATMUL, cycle, dict(act_addr=act_addr, rows=rows, acc_addr=0,
                                            conv=1, in_h=in_h, in_w=in_w))


# The conveyor slot of tiny's WLOAD (the shift that re-reads the row its next shift
# reads: shift 4, cycle t+5); a one-row store in that cycle alone meets it.
_ORDER = Wload.read_order(CFG)
CONVEYOR = 1 + next(k for k in range(len(_ORDER) - 1) if _ORDER[k] == _ORDER[k + 1])

DIRECTED = {
    "wload_conveyor_slot": [wload(0, 100), store(CONVEYOR - 1, 40)],
    "wload_other_bank": [wload(0, 100), store(CONVEYOR - 1, ROWS + 40, rows=6)],
    "wload_after_last_shift": [wload(0, 100),
                               store(timing.weight_shifts(CFG), 40, rows=3)],
    # the tile spans banks 0 and 1 while every pixel the walk reads is in bank 0
    "walk_claims_its_tile": [walk(0, ROWS - 8, 2, 2, 8), store(1, ROWS + 100)],
    "walk_other_bank": [walk(0, ROWS - 8, 3, 2, 8), store(1, 2 * ROWS + 100, rows=4)],
    "row_walk_bank_edge": [Instr(Opcode.MATMUL, 0, dict(act_addr=ROWS - 2, rows=4,
                                                        acc_addr=0)),
                           store(2, ROWS + 7)],
}
COMPILED = {**test_chip_gemm.CASES,
            **{k: test_chip_cnn.CASES[k] for k in ("conv0", "conv_1ch", "small_cnn")}}


@pytest.fixture(scope="module")
def runs():
    from systolica.compiler import compile_network
    programs = {name: program_image(p) for name, p in DIRECTED.items()}
    jobs = [dict(program=p, name=n, expect_fault=None) for n, p in programs.items()]
    for name, make in COMPILED.items():
        compiled = compile_network(CFG, make())
        programs[name] = compiled.image
        jobs.append(dict(program=compiled, name=name, expect_fault=None))
    results = run_many_on_rtl(CFG, jobs)
    return {name: (programs[name], res) for name, res in zip(programs, results)}


def test_directed_cases_mean_what_they_say():
    # the conflict's cycle + 1: the chip faults the cycle after
    want = {"wload_conveyor_slot": (2, CONVEYOR + 1), "walk_claims_its_tile": (2, 3),
            "row_walk_bank_edge": (2, 4)}
    for name, program in DIRECTED.items():
        assert first_conflict(CFG, program_image(program)) == want.get(name), name


@pytest.mark.parametrize("case", [*DIRECTED, *COMPILED])
def test_bank_conflict_where_the_rule_says(runs, case):
    image, res = runs[case]
    want = first_conflict(CFG, image)
    if want is None:        # and no other fault either
        assert res.error_name == ErrorCode.NONE.name, (
            f"{res.error_name} at pc {res.fault_pc}, cycle {res.fault_cycle}")
    else:
        got = (res.error_name, res.fault_pc, res.fault_cycle)
        assert got == (ErrorCode.BANK_CONFLICT.name, *want)
