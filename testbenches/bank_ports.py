"""The CBUF bank-port rule of docs/contract.md ("CBUF banks"), restated from the
contract alone for the chip tests: which port (read or write) of which bank every
CBUF access of an instruction uses in which cycle, and the first cycle two
instructions use the same one. It assumes every instruction issues at its cycle
field (a program with no other fault)."""

from __future__ import annotations

from collections import defaultdict

from systolica.arch import isa
from systolica.arch.config import ChipConfig
from systolica.arch.instructions import PARAM_ROWS, Wload
from systolica.arch.isa import DmaKind, Instr, Opcode


def uses(cfg: ChipConfig, ins: Instr) -> list[tuple[int, str, int]]:
    """``(cycle, "read" | "write", bank)`` of every CBUF access of ``ins``."""
    f, t, sh = ins.fields, ins.cycle, cfg.cbuf_bank_shift
    if ins.op is Opcode.DMA and f["kind"] == DmaKind.LOAD_CBUF:
        # word i returns in t+2+i and its row is written then
        return [(t + 2 + i, "write", (f["buf_addr"] + i) >> sh) for i in range(f["rows"])]
    if ins.op is Opcode.DMA and f["kind"] == DmaKind.STORE_CBUF:
        return [(t + 1 + i, "read", (f["buf_addr"] + i) >> sh) for i in range(f["rows"])]
    if ins.op is Opcode.WLOAD:
        # every shift reads, conveyor slots included
        return [(t + 1 + s, "read", (f["w_addr"] + r) >> sh)
                for s, r in enumerate(Wload.read_order(cfg))]
    if ins.op is Opcode.MATMUL and f.get("conv"):
        first = f["act_addr"] >> sh
        last = (f["act_addr"] + f["in_h"] * f["in_w"] - 1) >> sh
        return [(t + 1 + i, "read", b) for i in range(f["rows"])
                for b in range(first, last + 1)]
    if ins.op is Opcode.MATMUL:
        return [(t + 1 + i, "read", (f["act_addr"] + i) >> sh) for i in range(f["rows"])]
    if ins.op is Opcode.VRUN and not f["to_acc"]:
        head = 1 + (PARAM_ROWS if f.get("params") else 1)
        late = cfg.latency["acc_read"] + cfg.latency["vpu"]
        return [(t + head + i + late, "write", (f["dst"] + i) >> sh)
                for i in range(f["rows"])]
    return []


def first_conflict(cfg: ChipConfig, image: bytes) -> tuple[int, int] | None:
    """``(fault_pc, fault_cycle)`` of the program's first bank conflict, or None: the
    chip faults the cycle after the conflict, with the number of instructions issued
    before that (those of the conflict's own cycle included)."""
    program = [isa.decode(w) for w in isa.from_bytes(image)]
    users = defaultdict(int)
    for ins in program:
        for use in uses(cfg, ins):
            users[use] += 1
    cycles = [c for (c, _, _), n in users.items() if n > 1]
    if not cycles:
        return None
    cycle = min(cycles) + 1
    return sum(ins.cycle < cycle for ins in program), cycle
