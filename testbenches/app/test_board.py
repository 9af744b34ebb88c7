"""``systolica run --port``'s flow without a board: what the firmware's mailbox says
when its table did not finish, as the host's error (the whole flow runs on the
simulated FPGA top in ``testbenches/fpga/test_fpga_top.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from systolica.app import board
from systolica.arch.config import preset
from systolica.arch.regs import ErrorCode
from systolica.firmware.core_host import TableRun
from systolica.firmware.core_image import MAILBOX_FIELDS, FwResult, FwStepProblem


def _table(result, **fields) -> TableRun:
    head = dict.fromkeys(MAILBOX_FIELDS, 0) | dict(n_steps=2, result=result) | fields
    return TableRun(head, [], core_status=2, message=result)


@pytest.mark.parametrize("result, fields, words", [
    (FwResult.CHIP_FAULT, dict(fault_step=1, fault_code=ErrorCode.ILLEGAL_OPCODE,
                               fault_pc=7, fault_cycle=123),
     ["step 1 (second)", "faulted ILLEGAL_OPCODE", "at pc 7", "cycle 123"]),
    (FwResult.BAD_STEP, dict(fault_step=0, fault_code=FwStepProblem.UBUF_REFUSED),
     ["cannot run step 0 (first)", "UBUF_REFUSED"]),
    (FwResult.BAD_STEP, dict(fault_step=0, fault_code=99), ["step 0 (first)", "problem 99"]),
    (FwResult.BAD_TABLE, {}, ["refused the step table"]),
    (FwResult.TRAP, dict(fault_step=5, fault_code=2, fault_pc=0x1F4),
     ["trapped in step 5", "0x2", "0x1f4"]),
    (FwResult.RUNNING, dict(steps_done=1), ["without finishing", "result 0", "1 steps done"]),
    (77, {}, ["result 77"]),
], ids=["chip-fault", "bad-step", "bad-step-unknown", "bad-table", "trap", "running",
        "unknown"])
def test_what_stopped_the_firmwares_table_is_named(result, fields, words):
    text = board.table_fault(_table(result, **fields), ["first", "second"])
    for word in words:
        assert word in text, f"{word!r} missing from: {text}"


def test_a_finished_table_is_no_fault():
    assert board.table_fault(_table(FwResult.OK, steps_done=2), ["a", "b"]) is None


def test_firmware_needs_a_chip_with_the_core():
    with pytest.raises(ValueError, match=r"tangnano9k has no management core.*leave out "
                                         r"--firmware"):
        board.firmware_options(preset("tangnano9k"))
    board.firmware_options(preset("ulx3s"))


def _int32_gemm(m, k, n, seed):
    from systolica.compiler import gemm
    rng = np.random.default_rng(seed)
    return gemm(rng.integers(-128, 128, size=(m, k), dtype=np.int8),
                rng.integers(-128, 128, size=(k, n), dtype=np.int8),
                rng.integers(-4000, 4000, size=n, dtype=np.int32),
                relu=True, out_dtype="int32", name=f"g{m}x{k}x{n}")


@pytest.mark.parametrize("shape", [
    (24, 20, 12),
    # found by the FPGA top's firmware_runs: a delayed suffix put a DMA and a MATMUL on
    # ACC bank 0's write port in one cycle (ulx3s has one ACC bank)
    (9, 16, 13),
])
def test_a_gemm_compiles_for_the_firmware_on_the_ulx3s(shape):
    """What `systolica run --firmware` compiles: a program fetched whole (PROG_FETCH 0)."""
    from systolica.compiler import compile_network
    cfg = preset("ulx3s")
    compiled = compile_network(cfg, _int32_gemm(*shape, seed=2), board.firmware_options(cfg))
    assert compiled.loadable.fetch_from == 0
