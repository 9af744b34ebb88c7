"""The management core's cycle model (:mod:`systolica.firmware.core_cycles`): each
instruction class's cost as PicoRV32 with the block's memories takes it, counted on
unicorn for small programs whose cycles are written out by hand; the register model's
time (a run raises its interrupt ``2 + CYCLES`` after START's write); and a kernel
step's cycles asked alone (:func:`core_iss.step_cycles`) as in a table. The model's
figures against the Verilated core: ``testbenches/chip/test_chip_core.py``."""

from __future__ import annotations

import struct

import pytest
from rv32_random import b_type, i_type, load_word, r_type, s_type

from systolica.arch.config import preset
from systolica.arch.regs import CTRL_START, STATUS_DONE, STATUS_RUNNING, Reg
from systolica.firmware import core_iss
from systolica.firmware.core_cycles import (
    TIMING,
    CycleModel,
    UnmodelledInstruction,
    branch_taken,
)

NOP = i_type(0, 0, 0, 0)
RDCYCLE = 0xC000_2073


def jal(rd: int, imm: int) -> int:
    imm &= 0x1F_FFFF
    return ((imm >> 20) & 1) << 31 | ((imm >> 1) & 0x3FF) << 21 | ((imm >> 11) & 1) << 20 \
        | ((imm >> 12) & 0xFF) << 12 | rd << 7 | 0x6F


@pytest.mark.parametrize("word, cycles", [
    (NOP, 4), (0x1234_5037, 4), (0x0000_0017, 4),                    # addi, lui, auipc
    (r_type(0, 2, 1, 0, 3), 4), (r_type(0, 2, 1, 2, 3), 4),          # add, slt
    (r_type(1, 2, 1, 0, 3), 40), (r_type(1, 2, 1, 1, 3), 72),        # mul, mulh
    (r_type(1, 2, 1, 3, 3), 72), (r_type(1, 2, 1, 4, 3), 40),        # mulhu, div
    (r_type(1, 2, 1, 7, 3), 40),                                     # remu
    (i_type(0, 1, 2, 3, 0x03), 7), (s_type(0, 1, 2, 0), 7),          # lw, sb
    (b_type(8, 1, 2, 0), 4), (jal(1, 8), 4), (i_type(0, 1, 0, 0, 0x67), 7),
    (r_type(0, 0, 1, 1, 3, 0x13), 4), (r_type(0, 5, 1, 1, 3, 0x13), 6),   # slli 0, 5
    (r_type(0x20, 31, 1, 5, 3, 0x13), 14),                                # srai 31
    (RDCYCLE | 5 << 7, 4), (0x0800_400B, 4),                              # waitirq
], ids=lambda v: f"{v:08x}" if v > 100 else str(v))
def test_each_class_costs_what_the_core_takes(word, cycles):
    assert TIMING.static(word) == cycles


@pytest.mark.parametrize("amount", range(32))
def test_a_shift_takes_a_cycle_per_four_bits_then_per_bit(amount):
    steps, left = 0, amount            # picorv32.v, TWO_STAGE_SHIFT: 4 at a time, then 1
    while left:
        left -= 4 if left >= 4 else 1
        steps += 1
    assert TIMING.shift_cost(amount) == 4 + steps
    assert TIMING.shift_cost(amount + 32) == TIMING.shift_cost(amount)   # rs2[4:0]


@pytest.mark.parametrize("funct3, a, b, taken", [
    (0, 5, 5, True), (1, 5, 5, False), (4, 0xFFFF_FFFF, 0, True), (6, 0xFFFF_FFFF, 0, False),
    (5, 0, 0xFFFF_FFFF, True), (7, 0, 0xFFFF_FFFF, False)])
def test_branch_conditions(funct3, a, b, taken):
    assert branch_taken(b_type(8, 2, 1, funct3), a, b) == taken


def counted(words: list[int], regs_read: int = 0) -> tuple[int, int]:
    """(the counter rdcycle left in x16, the cycles at the end) of `words` on
    unicorn; loads from 0x4000_0000 reach a register window that reads
    `regs_read`."""
    from unicorn import UC_ARCH_RISCV, UC_MODE_RISCV32, UC_PROT_ALL, Uc
    from unicorn.riscv_const import UC_RISCV_REG_PC, UC_RISCV_REG_X16
    uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV32)
    code = struct.pack(f"<{len(words)}I", *words)
    uc.mem_map(0, 1 << 16, UC_PROT_ALL)
    uc.mem_map(0x1000_0000, 1 << 12, UC_PROT_ALL)
    uc.mem_write(0, code)
    model = CycleModel(uc, code)

    def read(uc, offset, size, data):
        model.access(uc.reg_read(UC_RISCV_REG_PC))
        return regs_read
    uc.mmio_map(0x4000_0000, 0x1000, read, None, None, None)
    uc.emu_start(0, 4 * len(words))
    end = model.finish()
    return uc.reg_read(UC_RISCV_REG_X16), end


def test_straight_code_sums_its_classes_and_rdcycle_reads_5_in():
    words = [NOP, r_type(1, 2, 1, 0, 3), RDCYCLE | 16 << 7, NOP]     # nop, mul, rdcycle
    read, end = counted(words)
    assert read == 4 + 40 + TIMING.rdcycle_offset
    assert end == 4 + 40 + 4 + 4


def test_instret_is_refused_not_counted_wrong():
    rdinstret = 0xC020_2073 | 16 << 7                       # csrrs x16, instret, x0
    with pytest.raises(UnmodelledInstruction, match="instret"):
        counted([NOP, rdinstret, NOP])


def test_a_loop_pays_the_taken_branches_and_the_register_window_less():
    # x5 = 3; loop: lw x0, 0(x6 = window); addi x5, x5, -1; bne x5, x0, loop
    words = load_word(6, 0x4000_0000) + [i_type(3, 0, 0, 5), i_type(0, 6, 2, 0, 0x03),
                                         i_type(-1, 5, 0, 5), b_type(-8, 0, 5, 1),
                                         RDCYCLE | 16 << 7]
    read, _ = counted(words)
    loop = 3 * (6 + 4 + 4) + 2 * (7 - 4)
    assert read == 8 + 4 + loop + TIMING.rdcycle_offset


def test_a_shift_by_a_register_pays_its_amount_and_a_branch_to_the_next_its_condition():
    words = [i_type(13, 0, 0, 7), r_type(0, 7, 1, 1, 2),       # x7 = 13; sll x2, x1, x7
             b_type(4, 0, 0, 0),                                # beq x0, x0, +4: taken
             b_type(4, 7, 0, 0),                                # beq x0, x7, +4: not
             RDCYCLE | 16 << 7]
    read, _ = counted(words)
    assert read == 4 + (4 + 3 + 1) + 7 + 4 + TIMING.rdcycle_offset


class Timed(core_iss.RegisterModel):
    def finish(self, dram):
        self.done_in(100)


def test_a_run_raises_its_interrupt_2_plus_cycles_after_start():
    chip = Timed()
    chip.now = 50
    chip.write(Reg.CTRL, CTRL_START)
    chip.now = 151
    assert chip.read(Reg.STATUS) == STATUS_RUNNING and chip.read(Reg.CYCLES) == 100
    assert chip.busy_until() == 152 and not chip.irq
    chip.now = 152
    assert chip.read(Reg.STATUS) == STATUS_DONE and chip.read(Reg.CYCLES) == 100
    chip.now = 153                  # a START in the two cycles after the end: the third
    chip.write(Reg.CTRL, CTRL_START)
    assert chip.end == 152 + 2 + 2 + 100
    chip.now = 200
    assert chip.wake() == 256 and chip.now == 256 and chip.irq


def test_waitirq_sleeps_until_the_line_rises():
    chip = Timed()
    chip.now = 10
    assert chip.wake() is None                      # nothing runs: parked
    chip.write(Reg.CTRL, CTRL_START)
    chip.now = 500
    assert chip.wake() == 500                       # ended long ago: at once


def test_a_kernel_step_alone_takes_what_it_takes_in_a_table():
    from systolica.app import core_bench
    cfg = preset("tiny")
    kernels = core_bench.kernel_table(cfg, (("argmax", 20), ("requantise", 12)))
    table = core_iss.golden_table(cfg, kernels.steps, data=kernels.data)
    alone = [core_iss.step_cycles(cfg, s, data=kernels.data) for s in kernels.steps]
    assert alone == [s["t_cycles"] for s in table.steps]
    assert all(3 * table.step_instructions(k) < alone[k] < 10 * table.step_instructions(k)
               for k in range(2))


def test_a_refused_step_has_no_cycles():
    """A kernel whose input lies past the DRAM the table reaches is refused (the
    firmware's BAD_VIEW): no cycles, an error that says why."""
    from systolica.firmware import core_kernels
    from systolica.firmware.core_host import KernelStep
    cfg = preset("tiny")
    W = cfg.dram_word_bytes
    desc = core_kernels.argmax(core_kernels.array_view(1 << 20, (1, 20)),
                               core_kernels.array_view(0, (1, 1), "int64"), rows=1, cols=20)
    with pytest.raises(core_iss.StepRefused, match="did not run the step"):
        core_iss.step_cycles(cfg, KernelStep(desc, 4, W))
