"""The management core's cycles: PicoRV32 as :mod:`systolica.rtl.mgmt_core` configures
it (RV32IM, ``COMPRESSED_ISA = 0``, ``BARREL_SHIFTER = 0`` with ``TWO_STAGE_SHIFT``,
``ENABLE_FAST_MUL = 0``, ``ENABLE_DIV``, ``TWO_CYCLE_ALU = 0``, dual-ported registers)
with the block's memories: every fetch and every access to the instruction memory,
the data memory or the DRAM window (granted) is ready the cycle after its request,
an access to the register window in the cycle of its request
(docs/management-core.md, "The core's cycles").

PicoRV32 runs one instruction at a time, so the cycles of a run are the sum of each
instruction's own (:class:`CoreTiming`): a fixed cost by class, plus what depends on
the data: a conditional branch taken, a shift's amount in a register, a load or store
that reaches the register window, a DRAM access that waits for the array to stop,
and ``waitirq``, which sleeps until the interrupt line rises.

:class:`CycleModel` counts them on a running ``unicorn`` emulator, cheaply: a block
hook adds each translated block's fixed cycles (cached by address) and settles the
branch that ended the block before (taken if the next block is not the next
instruction); code hooks sit only on the shifts by a register; the register window's
callbacks and the custom instructions' hook (:mod:`.core_iss`) add the rest. The
counter ``rdcycle`` reads is written into its destination at the start of the next
block (qemu ends a block at every CSR access).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

#: opcodes (the low seven bits)
LOAD, STORE, OP_IMM, OP, BRANCH, JAL, JALR, LUI, AUIPC, SYSTEM, CUSTOM0, MISC_MEM = (
    0x03, 0x23, 0x13, 0x33, 0x63, 0x6F, 0x67, 0x37, 0x17, 0x73, 0x0B, 0x0F)
#: the counters PicoRV32 reads with ``csrrs rd, csr, x0``: ``cycle`` and ``time`` (both
#: its cycle counter) and their high halves; ``instret`` is not modelled
COUNTER_CSRS = (0xC00, 0xC01, 0xC80, 0xC81)
INSTRET_CSRS = (0xC02, 0xC82)
WAITIRQ_FUNCT7 = 4


class UnmodelledInstruction(RuntimeError):
    """The firmware uses a counter the cycle model does not give exactly (instret, or
    a counter read inside a translated block): refused rather than a wrong count."""


@dataclass(frozen=True)
class CoreTiming:
    """PicoRV32's cycles per instruction class with the block's memories (one wait
    state on every fetch and memory access). Each is derived from ``picorv32.v``'s
    state machine (its README's table holds for memories without wait states: three
    cycles for an ALU instruction, five for a load) with a cycle more for every
    memory transfer that the core waits for, and confirmed on the Verilated core
    (docs/management-core.md). ``rdcycle`` reads the counter ``rdcycle_offset``
    cycles after its instruction starts; an access to the register window is made
    ``access_offset`` cycles after its instruction starts; the first instruction
    starts at cycle 0 of the counter."""
    alu: int = 4                 # lui, auipc, register and immediate ALU, fence, CSR
    branch_not_taken: int = 4
    branch_taken: int = 7
    jal: int = 4                 # decoded with the fetch
    jalr: int = 7
    load: int = 7                # instruction / data memory, DRAM window (granted)
    store: int = 7
    register_window: int = -1    # a load or store there: ready in its request's cycle
    shift: int = 4               # and a cycle per 4 bits, and per bit, of the amount
    mul: int = 40                # ENABLE_MUL: 32 steps of picorv32_pcpi_mul
    mulh: int = 72               # mulh, mulhsu, mulhu: 64 steps
    div: int = 40                # div, divu, rem, remu (also by zero)
    custom: int = 4              # getq, setq, maskirq, and waitirq with the line high
    retirq: int = 7              # as jalr (not measured: the firmware never returns)
    trap: int = 7                # an illegal instruction entering the handler (not
                                 # measured: the mailbox keeps no cycle of a trap)
    waitirq_wake: int = 1        # the next instruction starts a cycle after the line rose
    rdcycle_offset: int = 5
    access_offset: int = 9
    #: the array's interrupt rises this many cycles after the START write's cycle plus
    #: the run's CYCLES (rtl/sequencer.py: running from the next cycle, done a cycle
    #: after the last, the register file's flag a cycle later)
    start_to_irq: int = 2

    def shift_cost(self, amount: int) -> int:
        """A shift without the barrel shifter: by four while at least four remain, then
        by one (TWO_STAGE_SHIFT)."""
        amount &= 31
        return self.shift + (amount >> 2) + (amount & 3)

    def static(self, word: int) -> int:
        """The cycles of instruction `word` that do not depend on the data: a branch
        as not taken, a shift by a register as by 0, a load or store as to memory,
        waitirq as woken at once."""
        op, f3, f7 = word & 0x7F, (word >> 12) & 7, word >> 25
        if op == OP:
            if f7 == 1:
                return self.mul if f3 == 0 else self.mulh if f3 < 4 else self.div
            return self.shift if f3 in (1, 5) else self.alu
        if op == OP_IMM:
            return self.shift_cost((word >> 20) & 31) if f3 in (1, 5) else self.alu
        if op == LOAD:
            return self.load
        if op == STORE:
            return self.store
        if op == BRANCH:
            return self.branch_not_taken
        if op == JAL:
            return self.jal
        if op == JALR:
            return self.jalr
        if op == CUSTOM0 and f7 == 2:
            return self.retirq
        return self.alu if op != CUSTOM0 else self.custom


#: the costs of the chip's core (rtl/mgmt_core.py)
TIMING = CoreTiming()


def is_register_shift(word: int) -> bool:
    return word & 0x7F == OP and (word >> 12) & 7 in (1, 5) and word >> 25 in (0, 0x20)


def is_counter_read(word: int) -> bool:
    """``csrrs rd, <counter>, x0`` with rd not x0 (rdcycle, rdtime, rdinstret, ...)."""
    return (word & 0x7F == SYSTEM and (word >> 12) & 7 == 2 and (word >> 15) & 31 == 0
            and (word >> 20) in COUNTER_CSRS and (word >> 7) & 31 != 0)


def branch_taken(word: int, a: int, b: int) -> bool:
    """Whether the conditional branch `word` is taken with rs1 = `a`, rs2 = `b`."""
    f3 = (word >> 12) & 7
    sa, sb = a - (a >> 31 << 32), b - (b >> 31 << 32)
    return {0: a == b, 1: a != b, 4: sa < sb, 5: sa >= sb, 6: a < b, 7: a >= b}.get(f3, False)


#: what settles a block's last instruction when the block is left
PLAIN, BRANCH_AWAY, BRANCH_NEXT, COUNTER = range(4)


def branch_offset(word: int) -> int:
    imm = ((word >> 31) & 1) << 12 | ((word >> 7) & 1) << 11 | ((word >> 25) & 0x3F) << 5 \
        | ((word >> 8) & 0xF) << 1
    return imm - (imm >> 12 << 13)


@dataclass
class _Block:
    prefix: list[int]        # cycles before each instruction of the block
    total: int               # the block's cycles
    count: int               # its instructions
    end: int                 # the address after it
    last: int                # its last instruction
    settle: int              # PLAIN, BRANCH_AWAY (to another address than `end`),
                             # BRANCH_NEXT (to `end`: decided on its operands), COUNTER


class CycleModel:
    """The core's cycle counter on a unicorn run of code at ``[code_base, code_base
    + len(code))`` (the words it is translated from; code elsewhere counts as
    ALU instructions). ``cycles`` is the counter at the start of the instruction
    being run (or, after the run, at its end, once :meth:`finish` is called)."""

    def __init__(self, uc, code: bytes, code_base: int = 0,
                 timing: CoreTiming = TIMING):
        from unicorn import UC_HOOK_BLOCK, UC_HOOK_CODE
        from unicorn.riscv_const import UC_RISCV_REG_X0
        self.uc, self.timing, self.base = uc, timing, code_base
        self.words = struct.unpack(f"<{len(code) // 4}I", code[:len(code) // 4 * 4])
        self._x0 = UC_RISCV_REG_X0
        self._blocks: dict[tuple[int, int], _Block] = {}
        self.t = 0               # the current block's start, plus what was added in it
        self.block_start = None  # the current block's address (None: none open)
        self.block = None
        self.instructions = 0
        self.reads: list[tuple[int, int]] = []     # (value read, instructions before)
        uc.hook_add(UC_HOOK_BLOCK, self._on_block)
        for k, word in enumerate(self.words):
            if is_register_shift(word):
                address = code_base + 4 * k
                uc.hook_add(UC_HOOK_CODE, self._on_shift, word, address, address)

    def word(self, address: int) -> int:
        k = (address - self.base) >> 2
        return self.words[k] if 0 <= k < len(self.words) else 0x13

    def _block(self, address: int, size: int) -> _Block:
        key = (address, size)
        block = self._blocks.get(key)
        if block is None:
            prefix, total, count = [], 0, size // 4
            for k in range(count):
                word = self.word(address + 4 * k)
                if k < count - 1 and is_counter_read(word) or (
                        word & 0x7F == SYSTEM and word >> 20 in INSTRET_CSRS):
                    raise UnmodelledInstruction(
                        f"the cycle model reads counters only at the end of a translated "
                        f"block and has no instret (instruction 0x{word:08x} at "
                        f"0x{address + 4 * k:x}); read the cycle counter with rdcycle "
                        f"instead")
                prefix.append(total)
                total += self.timing.static(word)
            last, end = self.word(address + size - 4), address + size
            settle = PLAIN
            if last & 0x7F == BRANCH:
                settle = BRANCH_NEXT if end - 4 + branch_offset(last) == end else BRANCH_AWAY
            elif is_counter_read(last):
                settle = COUNTER
            block = self._blocks[key] = _Block(prefix, total, count, end, last, settle)
        return block

    def _close(self, next_address: int) -> None:
        """The open block ran to its end: add its cycles, settle its last instruction
        (a branch's direction; a counter read's value into its register)."""
        block = self.block
        self.t += block.total
        self.instructions += block.count
        self.block = None
        settle = block.settle
        if settle == PLAIN:
            return
        timing = self.timing
        if settle == BRANCH_AWAY:
            if next_address != block.end:
                self.t += timing.branch_taken - timing.branch_not_taken
        elif settle == BRANCH_NEXT:
            last, read = block.last, self.uc.reg_read
            rs1, rs2 = (last >> 15) & 31, (last >> 20) & 31
            if branch_taken(last, read(self._x0 + rs1) if rs1 else 0,
                            read(self._x0 + rs2) if rs2 else 0):
                self.t += timing.branch_taken - timing.branch_not_taken
        else:
            last = block.last
            value = self.t - block.total + block.prefix[-1] + timing.rdcycle_offset
            value = value >> 32 if last >> 20 >= 0xC80 else value
            self.reads.append((value & 0xFFFF_FFFF, self.instructions - 1))
            self.uc.reg_write(self._x0 + ((last >> 7) & 31), value & 0xFFFF_FFFF)

    def _on_block(self, uc, address, size, data):
        if self.block is not None:
            self._close(address)
        self.block, self.block_start = self._block(address, size), address

    def _on_shift(self, uc, address, size, word):
        rs2 = (word >> 20) & 31
        amount = uc.reg_read(self._x0 + rs2) if rs2 else 0
        self.t += self.timing.shift_cost(amount) - self.timing.shift

    def at(self, pc: int) -> int:
        """The counter at the start of instruction `pc`: of the open block, or the
        one after it (a faulting instruction qemu leaves out of the block)."""
        block = self.block
        if block is not None:
            k = (pc - self.block_start) >> 2
            if 0 <= k < block.count:
                return self.t + block.prefix[k]
            self._close(pc)
        return self.t

    def access(self, pc: int) -> int:
        """A load or store at `pc` reaches the register window: return the cycle of
        the access, and count its cycle less."""
        now = self.at(pc) + self.timing.access_offset
        self.t += self.timing.register_window
        return now

    def wait(self, cycles: int) -> None:
        """The instruction being run waits `cycles` more (a DRAM access until the
        array stops)."""
        self.t += cycles

    def leave(self, pc: int, cycles: int) -> None:
        """The instruction at `pc` (a custom one, handled outside the emulator, or one
        that traps) took `cycles`: the block ends with it."""
        block = self.block
        inside = block is not None and 0 <= (pc - self.block_start) >> 2 < block.count
        before = self.at(pc)
        self.instructions += ((pc - self.block_start) >> 2) + 1 if inside else 1
        self.t = before + cycles
        self.block = self.block_start = None

    def finish(self, pc: int | None = None) -> int:
        """The run stopped before instruction `pc` (None: at the end of the open
        block): return the counter there."""
        if self.block is not None:
            if pc is None:
                self._close(self.block.end)
            else:
                k = (pc - self.block_start) >> 2
                self.t += self.block.prefix[k]
                self.instructions += k
            self.block = self.block_start = None
        return self.t
