"""The firmware's command loop, run in the instruction-set model
(:mod:`systolica.firmware.core_iss`) with a small stand-in for the chip's register
interface: it walks the host's step table, configures and starts each program, sleeps
until the run stops, and writes the result word once, with the fault's details when a
step cannot run or the chip faults."""

from __future__ import annotations

import struct

import pytest

from systolica.arch.regs import (
    CTRL_IRQ_ACK,
    CTRL_START,
    ErrorCode,
    Reg,
)
from systolica.firmware import core_image, core_iss
from systolica.firmware.core_image import (
    DMEM_BASE,
    FW_MAGIC,
    MAILBOX_FIELDS,
    FwFlag,
    FwResult,
    FwStepKind,
    FwStepProblem,
)

IRQ_TRAP = core_iss.IRQ_TRAP
INSTRUCTION_LIMIT = 200_000


class FakeChip(core_iss.RegisterModel):
    """The register interface (:class:`~systolica.firmware.core_iss.RegisterModel`)
    with runs that take no time and cycles of their own: a run ends DONE after
    ``1000 + PROG_LEN`` cycles, or with ERROR for a program address in `faults`; a
    UBUF region whose rows are not a power of two is refused."""

    def __init__(self, faults: dict[int, tuple[ErrorCode, int, int]] | None = None):
        super().__init__()
        self.faults = dict(faults or {})

    def ubuf_allowed(self, base: int, rows: int) -> bool:
        return not rows & (rows - 1)

    def finish(self, dram) -> None:
        fault = self.faults.get(self.active[Reg.PROG_ADDR])
        if fault:
            self.fault(*fault)
        else:
            self.done_in(1000 + self.active[Reg.PROG_LEN])


CoreRun = core_iss.IssRun


def run_firmware(image: core_image.CoreImage, chip: FakeChip, mailbox: bytes,
                 patches: dict[int, int] | None = None, *, dram: bytearray | None = None,
                 count: bool = False, limit: int = INSTRUCTION_LIMIT) -> CoreRun:
    """:func:`systolica.firmware.core_iss.run` with the stand-in chip (a halt of the
    core fails the test)."""
    return core_iss.run(image, chip, mailbox, patches, dram=dram, count=count, limit=limit)


def mailbox(steps: list[dict], *, magic: int = FW_MAGIC, n_steps: int | None = None,
            flags: int = 0, dram_bytes: int = 0) -> bytes:
    """The table the host writes: a header and each step's words (missing ones 0)."""
    head = dict.fromkeys(MAILBOX_FIELDS, 0) | {
        "magic": magic, "n_steps": len(steps) if n_steps is None else n_steps,
        "flags": flags, "dram_bytes": dram_bytes}
    words = [head[f] for f in MAILBOX_FIELDS]
    for step in steps:
        words += [step.get(f, 0) for f in core_image.STEP_FIELDS]
    return struct.pack(f"<{len(words)}I", *words)


def chip_step(prog_addr: int, prog_len: int, ubuf_base: int = 0, ubuf_rows: int = 0) -> dict:
    return dict(kind=FwStepKind.CHIP, prog_addr=prog_addr, prog_len=prog_len,
                ubuf_base=ubuf_base, ubuf_rows=ubuf_rows)


@pytest.fixture(scope="module")
def image():
    return core_image.build()


def test_the_loop_runs_a_two_step_table(image):
    chip = FakeChip()
    out = run_firmware(image, chip,
                       mailbox([chip_step(0x100, 40), chip_step(0x800, 70, 64, 32)])).mailbox
    assert out["result"] == FwResult.OK and out["steps_done"] == 2
    assert out["cycles"] == (1000 + 40) + (1000 + 70)
    assert chip.starts == [(0x100, 40, 0, 0, 0), (0x800, 70, 64, 32, 0)]
    # configuration, START, the acknowledgement of the interrupt, for each step; then
    # the one message to the host
    second = chip.writes[chip.writes.index(("CTRL", CTRL_IRQ_ACK)) + 1:]
    assert second == [("PROG_ADDR", 0x800), ("PROG_LEN", 70), ("PROG_FETCH", 0),
                      ("UBUF_ROWS", 0), ("UBUF_BASE", 64), ("UBUF_ROWS", 32),
                      ("CTRL", CTRL_START), ("CTRL", CTRL_IRQ_ACK),
                      ("CORE_MSG", FwResult.OK)]
    assert chip.messages == [FwResult.OK]
    assert not chip.irq and not chip.running


def test_with_the_overlap_the_next_step_is_configured_while_one_runs(image):
    """FwFlag.OVERLAP: step 2's configuration is written between step 1's START and
    its end, and step 2 starts right after it (its START clears the interrupt); each
    step's START time and cycles are recorded."""
    chip = FakeChip()
    run = run_firmware(image, chip, mailbox(
        [chip_step(0x100, 40), chip_step(0x800, 70, 64, 32), chip_step(0x900, 5)],
        flags=FwFlag.OVERLAP))
    out = run.mailbox
    assert out["result"] == FwResult.OK and out["steps_done"] == 3
    assert chip.starts == [(0x100, 40, 0, 0, 0), (0x800, 70, 64, 32, 0), (0x900, 5, 0, 0, 0)]
    first = chip.writes.index(("CTRL", CTRL_START))
    assert chip.writes[first + 1:first + 7] == [
        ("PROG_ADDR", 0x800), ("PROG_LEN", 70), ("PROG_FETCH", 0), ("UBUF_ROWS", 0),
        ("UBUF_BASE", 64), ("UBUF_ROWS", 32)]
    assert chip.writes[first + 7] == ("CTRL", CTRL_START)
    assert chip.writes[-2:] == [("CTRL", CTRL_IRQ_ACK), ("CORE_MSG", FwResult.OK)]
    t_start = [run.word(DMEM_BASE + core_image.step_offset(i, "t_start")) for i in range(3)]
    t_cycles = [run.word(DMEM_BASE + core_image.step_offset(i, "t_cycles")) for i in range(3)]
    assert t_start == sorted(t_start) and len(set(t_start)) == 3
    assert t_cycles == [1040, 1070, 1005]


def test_with_the_overlap_a_refused_next_step_stops_after_the_current_one(image):
    chip = FakeChip()
    out = run_firmware(image, chip, mailbox(
        [chip_step(0x100, 8), chip_step(0x200, 8, ubuf_base=64, ubuf_rows=48)],
        flags=FwFlag.OVERLAP)).mailbox
    assert (out["result"], out["steps_done"], out["fault_step"], out["fault_code"]) == (
        FwResult.BAD_STEP, 1, 1, FwStepProblem.UBUF_REFUSED)
    assert len(chip.starts) == 1 and not chip.irq and not chip.running
    assert chip.messages == [FwResult.BAD_STEP]


def test_a_chip_fault_stops_the_table_with_its_code_pc_and_cycle(image):
    chip = FakeChip(faults={0x200: (ErrorCode.LATE, 17, 1234)})
    out = run_firmware(image, chip, mailbox(
        [chip_step(0x100, 8), chip_step(0x200, 8), chip_step(0x300, 8)])).mailbox
    assert out["result"] == FwResult.CHIP_FAULT
    assert (out["steps_done"], out["fault_step"]) == (1, 1)
    assert (out["fault_code"], out["fault_pc"], out["fault_cycle"]) == (ErrorCode.LATE, 17, 1234)
    assert len(chip.starts) == 2 and not chip.irq       # acknowledged, the third not started


@pytest.mark.parametrize("table, result, step, code", [
    (mailbox([chip_step(0x100, 8)], magic=0), FwResult.BAD_TABLE, 0, 0),
    (mailbox([], n_steps=core_image.MAX_STEPS + 1), FwResult.BAD_TABLE, 0, 0),
    (mailbox([]), FwResult.OK, 0, 0),
    (mailbox([chip_step(0x100, 8), dict(kind=FwStepKind.KERNEL, kernel=99)]),
     FwResult.BAD_STEP, 1, FwStepProblem.NO_KERNEL),
    (mailbox([dict(kind=9)]), FwResult.BAD_STEP, 0, FwStepProblem.UNKNOWN_KIND),
    (mailbox([chip_step(0x100, 8, ubuf_base=64, ubuf_rows=48)]),
     FwResult.BAD_STEP, 0, FwStepProblem.UBUF_REFUSED),
], ids=["magic", "too-many-steps", "empty", "kernel", "unknown-kind", "ubuf-refused"])
def test_a_table_the_firmware_cannot_run_is_reported(image, table, result, step, code):
    chip = FakeChip()
    out = run_firmware(image, chip, table).mailbox
    assert (out["result"], out["fault_step"], out["fault_code"]) == (result, step, code)
    assert not chip.running


def test_a_trap_enters_the_handler_which_records_it_and_parks(image):
    """An illegal instruction at main's first word: the interrupt entry saves the
    registers on the interrupt stack and the handler reports the trap."""
    main = image.symbols["main"]
    run = run_firmware(image, FakeChip(), mailbox([chip_step(0x100, 8)]), patches={main: 0})
    out = run.mailbox
    assert (out["result"], out["fault_code"], out["fault_pc"]) == (FwResult.TRAP, IRQ_TRAP,
                                                                   main + 4)
    frame = image.symbols["__irq_stack_top"] - 128
    assert run.word(frame + 4 * 2) == image.symbols["__stack_top"]     # the saved sp
