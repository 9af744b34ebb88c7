"""The register interface: addresses, bit fields and error codes shared by the RTL and
the firmware driver. Registers are 32 bits wide, addressed by word."""

from __future__ import annotations

import enum

ADDR_BITS = 5


class Reg(enum.IntEnum):
    CTRL = 0           # W: bit0 START (ignored while running), bit1 IRQ_ACK
    STATUS = 1         # R: bit0 RUNNING, bit1 DONE, bit2 ERROR
    ERROR = 2          # R: ErrorCode of the fault that stopped the run
    FAULT_PC = 3       # R: program index of the faulting instruction
    PROG_LEN = 4       # RW: instructions in the program
    IMEM_ADDR = 5      # RW: next program index written through IMEM_DATA
    IMEM_DATA = 6      # W: four writes (low 32 bits first) store one instruction.
                       # IMEM_ADDR and IMEM_DATA ignore writes made while running (the
                       # fetcher owns the program memory then)
    CYCLES = 7         # R: cycles of the last run (frozen at done or fault)
    MACS_LO = 8        # R: MAC operations performed by the array (cells x rows streamed)
    MACS_HI = 9
    DRAM_RD_BYTES = 10
    DRAM_WR_BYTES = 11
    HWCFG = 12         # R: tile_rows | tile_cols << 8 | tile_size << 16
    FAULT_CYCLE = 13   # R: cycle at which the fault was raised
    UBUF_BASE = 14     # RW: first CBUF row of the reserved overlap region (UBUF)
    UBUF_ROWS = 15     # RW: its size in rows (0: no UBUF). Both reset to the
                       # configuration's; a write the rule refuses (ChipConfig.ubuf_problem
                       # with the other register's next value) is ignored
    PROG_ADDR = 16     # RW: DRAM word address of the program image (instructions from
                       # min(PROG_FETCH, imem_depth, PROG_LEN) on are fetched from there)
    FETCH_RD_BYTES = 17  # R: bytes the instruction fetcher read from DRAM (the DMA's
                         # traffic is DRAM_RD_BYTES / DRAM_WR_BYTES)
    UBUF_WR_BYTES = 18   # R: bytes written into the UBUF (crops)
    UBUF_RD_BYTES = 19   # R: bytes read from the UBUF (fetches)
    PROG_FETCH = 20      # RW: the first instruction the fetcher reads from DRAM (those
                         # below must be in the instruction memory); reset: imem_depth.
                         # PROG_LEN, PROG_ADDR, PROG_FETCH, UBUF_BASE and UBUF_ROWS are
                         # double-buffered: writes set the next value (also while
                         # running), START makes it the run's (docs/management-core.md)
    CORE_CTRL = 21       # RW (host): bit0 RUN, the management core runs / is held in reset
    CORE_STATUS = 22     # R: bit0 RUNNING, bit1 MESSAGE, bit2 TRAP, bit3 BAD_ACCESS
    CORE_ADDR = 23       # RW (host): byte address in the core's map for CORE_DATA
    CORE_DATA = 24       # W (host): store a word at CORE_ADDR, CORE_ADDR += 4; R: the word
                         # at CORE_ADDR; only while the core is held
    CORE_MSG = 25        # W (core): the firmware's signal to the host (sets MESSAGE); R


CTRL_START = 1 << 0
CTRL_IRQ_ACK = 1 << 1
STATUS_RUNNING = 1 << 0
STATUS_DONE = 1 << 1
STATUS_ERROR = 1 << 2
CORE_CTRL_RUN = 1 << 0
CORE_STATUS_RUNNING = 1 << 0
CORE_STATUS_MESSAGE = 1 << 1
CORE_STATUS_TRAP = 1 << 2
CORE_STATUS_BAD_ACCESS = 1 << 3


class ErrorCode(enum.IntEnum):
    NONE = 0
    ILLEGAL_OPCODE = 1   # opcode not in the ISA (a zeroed program word, too), or fields
                         # its opcode does not define (VRUN params with relu, to_acc or
                         # without requant)
    ADDR_RANGE = 2       # an instruction's buffer or DRAM range runs past the memory
    LATE = 3             # an instruction reached issue after its scheduled cycle
    UNIT_BUSY = 4        # its unit was still busy at its scheduled cycle
    PROG_RANGE = 5       # the program is fetched (PROG_LEN above min(PROG_FETCH,
                         # imem_depth)) and its region (PROG_ADDR, PROG_LEN) runs past
                         # the end of DRAM
    CFG_RANGE = 6        # SETCFG names no multiplexer, or a source it does not have
    CFG_LIMIT = 7        # SETCFG breaks the configuration-update limits (per instruction,
                         # interval, power-domain budget)
    CFG_IN_USE = 8       # SETCFG names a multiplexer while an earlier instruction's data passes it
    FETCH_LATE = 9       # an instruction's word reached the instruction memory after its
                         # cycle (systolica.arch.fetch)
    BANK_CONFLICT = 10   # two units used the same port of one CBUF bank in one cycle
                         # (docs/contract.md, "CBUF banks")


def hwcfg_word(tile_rows: int, tile_cols: int, tile_size: int) -> int:
    return tile_rows | tile_cols << 8 | tile_size << 16
