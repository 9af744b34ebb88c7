"""Random straight-line RV32IM programs for the management core's differential test
(``test_chip_core.py``): the core in the Verilated chip and the instruction-set model
(unicorn) run the same program, and every register and the scratch memory must agree.

A program sets x1..x15 to random words, runs random register, immediate, multiply,
divide, load and store instructions on them (loads and stores within a scratch area
of the data memory that x31 points to), forward branches over the next instruction,
loads from the register window and loads and stores through the DRAM window (into
and from x0 and a DRAM scratch area: their values are not compared, their cycles
are), stores x1..x15 and the core's cycle counter (``rdcycle``) at the start of the
data memory, writes CORE_MSG and spins. The ISS's side counts the core's cycles with
:mod:`systolica.firmware.core_cycles`, so the counter word checks the cycle model."""

from __future__ import annotations

import numpy as np

from systolica.arch.regs import Reg
from systolica.firmware.core_cycles import TIMING, CoreTiming
from systolica.firmware.core_image import DMEM_BASE, DRAM_BASE, REGS_BASE

REGS = range(1, 16)          # the registers the program computes in
SCRATCH = 0x100              # the scratch area's offset in the data memory
SCRATCH_BYTES = 256
BASE_REG, WINDOW_REG, DRAM_REG, CYCLE_REG = 31, 30, 29, 16
DRAM_SCRATCH = 0x1000        # the DRAM window's scratch bytes (DRAM byte offset)
DONE = 0x600D
BRANCHES = {"beq": 0, "bne": 1, "blt": 4, "bge": 5, "bltu": 6, "bgeu": 7}
RDCYCLE = 0xC000_2073

R_OPS = {  # name: (funct7, funct3)
    "add": (0, 0), "sub": (0x20, 0), "sll": (0, 1), "slt": (0, 2), "sltu": (0, 3),
    "xor": (0, 4), "srl": (0, 5), "sra": (0x20, 5), "or": (0, 6), "and": (0, 7),
    "mul": (1, 0), "mulh": (1, 1), "mulhsu": (1, 2), "mulhu": (1, 3), "div": (1, 4),
    "divu": (1, 5), "rem": (1, 6), "remu": (1, 7)}
I_OPS = {"addi": 0, "slti": 2, "sltiu": 3, "xori": 4, "ori": 6, "andi": 7}
SHIFTS = {"slli": (0, 1), "srli": (0, 5), "srai": (0x20, 5)}
LOADS = {"lb": (0, 1), "lh": (1, 2), "lw": (2, 4), "lbu": (4, 1), "lhu": (5, 2)}
STORES = {"sb": (0, 1), "sh": (1, 2), "sw": (2, 4)}


def r_type(funct7, rs2, rs1, funct3, rd, opcode=0x33):
    return funct7 << 25 | rs2 << 20 | rs1 << 15 | funct3 << 12 | rd << 7 | opcode


def i_type(imm, rs1, funct3, rd, opcode=0x13):
    return (imm & 0xFFF) << 20 | rs1 << 15 | funct3 << 12 | rd << 7 | opcode


def s_type(imm, rs2, rs1, funct3):
    return ((imm >> 5) & 0x7F) << 25 | rs2 << 20 | rs1 << 15 | funct3 << 12 \
        | (imm & 0x1F) << 7 | 0x23


def b_type(imm, rs2, rs1, funct3):
    return ((imm >> 12) & 1) << 31 | ((imm >> 5) & 0x3F) << 25 | rs2 << 20 | rs1 << 15 \
        | funct3 << 12 | ((imm >> 1) & 0xF) << 8 | ((imm >> 11) & 1) << 7 | 0x63


def load_word(rd: int, value: int) -> list[int]:
    """``rd = value``: lui and addi (the addi's sign taken into account)."""
    value &= 0xFFFF_FFFF
    low = value & 0xFFF
    upper = (value + (0x1000 if low & 0x800 else 0)) & 0xFFFF_F000
    return [upper | rd << 7 | 0x37, i_type(low, rd, 0, rd)]


def program(seed: int, length: int = 120) -> list[int]:
    """The words of random program `seed` (``length`` random instructions)."""
    rng = np.random.default_rng(seed)
    words = load_word(BASE_REG, DMEM_BASE + SCRATCH) + load_word(WINDOW_REG, REGS_BASE) \
        + load_word(DRAM_REG, DRAM_BASE + DRAM_SCRATCH)
    for r in REGS:
        words += load_word(r, int(rng.integers(0, 1 << 32)))
    reg = lambda: int(rng.choice(REGS))
    for _ in range(length):
        kind = rng.choice(["r", "i", "shift", "load", "store", "branch", "window", "dram"],
                          p=[.4, .17, .1, .1, .1, .07, .03, .03])
        if kind == "r":
            funct7, funct3 = R_OPS[rng.choice(list(R_OPS))]
            words.append(r_type(funct7, reg(), reg(), funct3, reg()))
        elif kind == "i":
            words.append(i_type(int(rng.integers(-2048, 2048)), reg(),
                                I_OPS[rng.choice(list(I_OPS))], reg()))
        elif kind == "shift":
            funct7, funct3 = SHIFTS[rng.choice(list(SHIFTS))]
            words.append(r_type(funct7, int(rng.integers(0, 32)), reg(), funct3, reg(),
                                opcode=0x13))
        elif kind == "branch":          # over the next instruction, taken or not
            words.append(b_type(8, reg(), reg(), BRANCHES[rng.choice(list(BRANCHES))]))
        elif kind == "window":          # a register read, into x0
            words.append(i_type(4 * int(rng.choice([Reg.STATUS, Reg.HWCFG, Reg.CYCLES])),
                                WINDOW_REG, 2, 0, opcode=0x03))
        elif kind == "dram":            # a DRAM word or byte: read into x0, or written
            offset = int(rng.integers(0, 64)) * 4
            if rng.random() < .5:
                words.append(i_type(offset, DRAM_REG, int(rng.choice([2, 4])), 0, opcode=0x03))
            else:
                words.append(s_type(offset, reg(), DRAM_REG, int(rng.choice([0, 2]))))
        else:
            table = LOADS if kind == "load" else STORES
            name = rng.choice(list(table))
            funct3, size = table[name]
            offset = int(rng.integers(0, SCRATCH_BYTES // size)) * size
            if kind == "load":
                words.append(i_type(offset, BASE_REG, funct3, reg(), opcode=0x03))
            else:
                words.append(s_type(offset, reg(), BASE_REG, funct3))
    words += [i_type(0, 0, 0, 0), RDCYCLE | CYCLE_REG << 7]    # (a branch skips the nop)
    for k, r in enumerate((*REGS, CYCLE_REG)):   # x1..x15, the counter
        words.append(s_type(4 * k - SCRATCH, r, BASE_REG, 2))
    words += load_word(1, DONE)
    words.append(s_type(4 * Reg.CORE_MSG, 1, WINDOW_REG, 2))
    words.append(0x0000_006F)             # spin
    return words


#: The data memory words a run is compared on: x1..x15, the cycle counter read at the
#: end, then the scratch area.
def compared_words() -> list[int]:
    return [DMEM_BASE + 4 * k for k in range(len(REGS) + 1)] + \
        [DMEM_BASE + SCRATCH + 4 * k for k in range(SCRATCH_BYTES // 4)]


def on_iss(words: list[int], dmem_bytes: int = 8192, timing: CoreTiming = TIMING
           ) -> list[int]:
    """The compared words after `words` ran on unicorn (RV32IM), stopping at the
    CORE_MSG store, with the core's cycles counted by `timing`'s model (register
    reads give 0; they go into x0)."""
    import struct

    from unicorn import UC_ARCH_RISCV, UC_MODE_RISCV32, UC_PROT_ALL, Uc
    from unicorn.riscv_const import UC_RISCV_REG_PC

    from systolica.firmware.core_cycles import CycleModel
    uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV32)
    code = struct.pack(f"<{len(words)}I", *words)
    uc.mem_map(0, 1 << 16, UC_PROT_ALL)
    uc.mem_map(DMEM_BASE, dmem_bytes, UC_PROT_ALL)
    uc.mem_map(DRAM_BASE, 1 << 16, UC_PROT_ALL)
    uc.mem_write(0, code)
    cycles = CycleModel(uc, code, 0, timing)
    seen = []

    def load(uc, offset, size, data):
        cycles.access(uc.reg_read(UC_RISCV_REG_PC))
        return 0

    def store(uc, offset, size, value, data):
        cycles.access(uc.reg_read(UC_RISCV_REG_PC))
        seen.append((offset, value))
        uc.emu_stop()
    uc.mmio_map(REGS_BASE, 0x1000, load, None, store, None)
    uc.emu_start(0, 4 * len(words), count=10 * len(words))
    assert seen == [(4 * Reg.CORE_MSG, DONE)], seen
    return [struct.unpack("<I", uc.mem_read(a, 4))[0] for a in compared_words()]
