"""Golden model: the instruction set's functional semantics (docs/contract.md), with the
sequencer's fault checks and the performance counters, vectorised with numpy.

Instructions take effect one after another in issue order. Timing matters for the
fault checks, the cycle counter, and the fabric: an instruction sees each multiplexer
setting in force while its data passes that multiplexer (``timing.mux_use``), which
may come from a SETCFG issued after it. The RTL must produce the same DRAM image,
counters and fault registers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .arch import fabric, isa, timing
from .arch.config import ChipConfig
from .arch.isa import DmaKind, Opcode
from .arch.regs import ErrorCode


@dataclass
class GoldenResult:
    dram: np.ndarray          # uint8 (dram_words, rows) after the run
    cbuf: np.ndarray          # int8 (cbuf_depth, rows)
    acc: np.ndarray           # int32 (acc_depth, cols)
    cycles: int               # what the CYCLES register reads
    error: ErrorCode
    fault_pc: int             # 0 unless a fault stopped the run
    fault_cycle: int
    issued: int               # instructions that took effect
    macs: int                 # MACS counter: rows streamed x R x C
    dram_bytes_read: int
    dram_bytes_written: int


class GoldenError(ValueError):
    """A program whose result the hardware does not define (a multiplexer setting that
    changes while an instruction's data passes it)."""


def _wrap32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64).astype(np.int32)  # integer casts wrap modulo 2**32


class _Chip:
    def __init__(self, cfg: ChipConfig, dram: np.ndarray):
        self.cfg = cfg
        self.n = cfg.tile_size
        self.table = fabric.muxes(cfg)
        # Per multiplexer: (cycle from which it holds, value), oldest first.
        self.timeline = [[(-1, m.default)] for m in self.table]
        self.now: isa.Instr | None = None          # the instruction being executed
        self.pc = 0
        self.dram = dram
        self.cbuf = np.zeros((cfg.cbuf_depth, cfg.rows), dtype=np.int8)
        self.acc = np.zeros((cfg.acc_depth, cfg.cols), dtype=np.int32)
        self.banks = np.zeros((2, cfg.rows, cfg.cols), dtype=np.int8)
        self.macs = self.rd_bytes = self.wr_bytes = 0
        self.index = {m.name: m.index for m in self.table}

    # -- multiplexer settings --------------------------------------------------------
    def setting(self, index: int, cycle: int) -> int:
        value = self.table[index].default
        for since, v in self.timeline[index]:
            if since > cycle:
                break
            value = v
        return value

    def source(self, name: str) -> str:
        m = self.table[self.index[name]]
        ins = self.now
        use = timing.mux_use(self.cfg, ins, name)
        lo, hi = (ins.cycle, ins.cycle + 1) if use is None else \
            (ins.cycle + use[0], ins.cycle + use[1])
        value = self.setting(m.index, lo)
        for since, v in self.timeline[m.index]:
            if lo < since < hi and v != value:
                raise GoldenError(
                    f"multiplexer {name} changes at cycle {since} while "
                    f"{ins.op.name} (pc {self.pc}, issued at {ins.cycle}) uses it in "
                    f"cycles {lo}..{hi - 1}; move the SETCFG out of that window")
        return m.sources[value]

    def group(self, name: str) -> int | None:
        """The group number a feed/select multiplexer picks, or None for zero."""
        src = self.source(name)
        return None if src == fabric.ZERO else int(src.rsplit(".g", 1)[1])

    def _lanes(self, kind: str, open_: str) -> np.ndarray:
        t, tc = self.cfg.tile_rows, self.cfg.tile_cols
        return np.array([[self.source(f"{kind}[{i}][{j}]") == open_ for j in range(tc)]
                         for i in range(t)])

    def _feed(self, kind: str, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Per array lane ``p`` (count tiles of n): the CBUF partition feeding it and
        whether it is fed at all."""
        n = self.n
        idx, live = np.zeros(count * n, dtype=np.int64), np.zeros(count * n, dtype=bool)
        for k in range(count):
            g = self.group(f"{kind}[{k}]")
            if g is not None:
                idx[k * n:(k + 1) * n] = g * n + np.arange(n)
                live[k * n:(k + 1) * n] = True
        return idx, live

    @staticmethod
    def _regroup(y: np.ndarray, picks: list[int | None], n: int) -> np.ndarray:
        out = np.zeros((y.shape[0], len(picks) * n), dtype=y.dtype)
        for g, src in enumerate(picks):
            if src is not None:
                out[:, g * n:(g + 1) * n] = y[:, src * n:(src + 1) * n]
        return out

    # -- instructions ----------------------------------------------------------------
    def dma(self, f: dict) -> None:
        cfg = self.cfg
        to_acc = f["kind"] in (DmaKind.LOAD_ACC, DmaKind.STORE_ACC)
        w = cfg.acc_row_words if to_acc else 1
        rows = f["rows"]
        words = (f["dram_addr"] + np.arange(rows)[:, None] * f["dram_stride"]
                 + np.arange(w)[None, :])                                  # [rows, w]
        buf = slice(f["buf_addr"], f["buf_addr"] + rows)
        moved = rows * w * cfg.rows
        if f["kind"] == DmaKind.LOAD_CBUF:
            self.cbuf[buf] = self.dram[words[:, 0]].view(np.int8)
        elif f["kind"] == DmaKind.LOAD_ACC:
            raw = np.ascontiguousarray(self.dram[words].reshape(rows, w * cfg.rows))
            self.acc[buf] = raw.view("<i4").reshape(rows, cfg.cols)
        elif f["kind"] == DmaKind.STORE_CBUF:
            self.dram[words[:, 0]] = self.cbuf[buf].view(np.uint8)
        else:
            raw = np.ascontiguousarray(self.acc[buf].astype("<i4")).view(np.uint8)
            self.dram[words] = raw.reshape(rows, w, cfg.rows)
        if f["kind"] in (DmaKind.LOAD_CBUF, DmaKind.LOAD_ACC):
            self.rd_bytes += moved
        else:
            self.wr_bytes += moved

    def wload(self, f: dict) -> None:
        cfg, n = self.cfg, self.n
        idx, live = self._feed("north_feed", cfg.tile_cols)          # per column c
        open_ = np.logical_and.accumulate(self._lanes("w_in", "lane"), axis=0)  # [i, j]
        rows = self.cbuf[f["w_addr"]:f["w_addr"] + cfg.rows]          # [r, partition]
        w = rows[:, idx] * live[None, :]
        w = w * np.repeat(np.repeat(open_, n, axis=0), n, axis=1)
        self.banks[f["bank"]] = w.astype(np.int8)

    def matmul(self, f: dict) -> None:
        cfg, n = self.cfg, self.n
        rows = f["rows"]
        idx, live = self._feed("west_feed", cfg.tile_rows)           # per array row r
        act = self.cbuf[f["act_addr"]:f["act_addr"] + rows][:, idx].astype(np.int64)
        act *= live[None, :]
        seen = np.logical_and.accumulate(self._lanes("act_in", "lane"), axis=1)  # [i, j]
        mask = np.repeat(np.repeat(seen, n, axis=0), n, axis=1)       # [r, c]
        chain = self._lanes("psum_in", fabric.ZERO)                   # reduction starts
        for j in range(cfg.tile_cols):
            starts = np.flatnonzero(chain[:, j])
            i0 = int(starts[-1]) if len(starts) else 0
            mask[:n * i0, j * n:(j + 1) * n] = False
        weights = self.banks[f["bank"]].astype(np.int64) * mask
        sums = act @ weights                                           # [rows, C]
        picks = [self.group(f"acc_src[{g}]") for g in range(cfg.tile_cols)]
        sums = self._regroup(sums, picks, n)
        dst = slice(f["acc_addr"], f["acc_addr"] + rows)
        base = self.acc[dst].astype(np.int64) if f["accumulate"] else 0
        self.acc[dst] = _wrap32(base + sums)
        self.macs += rows * cfg.macs

    def vrun(self, f: dict) -> None:
        cfg = self.cfg
        rows = f["rows"]
        x = self.acc[f["src"]:f["src"] + rows].astype(np.int64)
        if f["use_bias"]:
            x = _wrap32(x + self.acc[f["bias_addr"]].astype(np.int64)).astype(np.int64)
        zp = f["zp"] - 256 if f["zp"] >= 128 else f["zp"]
        if f["requant"]:
            shift = f["shift"]
            y = (x * f["mult"] + ((1 << (shift - 1)) if shift else 0)) >> shift
            y = np.clip(y + zp, -128, 127)
            if f["relu"]:
                y = np.maximum(y, zp)
        else:
            y = np.maximum(x, 0) if f["relu"] else x
            if not f["to_acc"]:
                y = np.clip(y, -128, 127)
        if f["to_acc"]:
            self.acc[f["dst"]:f["dst"] + rows] = _wrap32(y)
        else:
            picks = [self.group(f"wb_src[{g}]") for g in range(cfg.tile_rows)]
            self.cbuf[f["dst"]:f["dst"] + rows] = self._regroup(y, picks, self.n).astype(np.int8)

    def setcfg(self, f: dict) -> None:
        """SETCFGs act through the timeline built before execution."""


def _range_ok(cfg: ChipConfig, ins: isa.Instr) -> bool:
    """The ADDR_RANGE check: no empty range, nothing past the end of its memory."""
    f = ins.fields
    if ins.op is Opcode.DMA:
        to_acc = f["kind"] in (DmaKind.LOAD_ACC, DmaKind.STORE_ACC)
        w = cfg.acc_row_words if to_acc else 1
        depth = cfg.acc_depth if to_acc else cfg.cbuf_depth
        return f["rows"] > 0 and f["dram_addr"] + (f["rows"] - 1) * f["dram_stride"] + w \
            <= cfg.dram_words and f["buf_addr"] + f["rows"] <= depth
    if ins.op is Opcode.WLOAD:
        return f["w_addr"] + cfg.rows <= cfg.cbuf_depth
    if ins.op is Opcode.MATMUL:
        return f["rows"] > 0 and f["act_addr"] + f["rows"] <= cfg.cbuf_depth \
            and f["acc_addr"] + f["rows"] <= cfg.acc_depth
    if ins.op is Opcode.VRUN:
        depth = cfg.acc_depth if f["to_acc"] else cfg.cbuf_depth
        return f["rows"] > 0 and f["src"] + f["rows"] <= cfg.acc_depth \
            and f["bias_addr"] < cfg.acc_depth and f["dst"] + f["rows"] <= depth
    return True


def _cfg_ok(cfg: ChipConfig, ins: isa.Instr) -> bool:
    table = fabric.muxes(cfg)
    return all(index < len(table) and value < len(table[index].sources)
               for index, value in isa.setcfg_pairs(ins.fields))


def _cfg_limits_ok(cfg: ChipConfig, ins: isa.Instr) -> bool:
    """The CFG_LIMIT check: pairs per instruction, update interval, domain budget."""
    pairs = isa.setcfg_pairs(ins.fields)
    if len(pairs) > cfg.max_config_updates_per_cycle:
        return False
    if ins.cycle % cfg.config_update_interval:
        return False
    table = fabric.muxes(cfg)
    per_domain: dict[str, int] = {}
    for index, _ in pairs:
        d = table[index].domain
        per_domain[d] = per_domain.get(d, 0) + 1
    return all(n <= cfg.power_domain_budget for n in per_domain.values())


def run(cfg: ChipConfig, image: bytes, dram: np.ndarray) -> GoldenResult:
    """Run a program image on a copy of `dram` (uint8 ``(cfg.dram_words, cfg.rows)``)."""
    dram = np.array(dram, dtype=np.uint8, copy=True)
    if dram.shape != (cfg.dram_words, cfg.rows):
        raise ValueError(f"DRAM image must have shape {(cfg.dram_words, cfg.rows)}, "
                         f"not {dram.shape}")
    program = [isa.decode(w) for w in isa.from_bytes(image)]
    chip = _Chip(cfg, dram)
    execute = {Opcode.DMA: chip.dma, Opcode.WLOAD: chip.wload, Opcode.MATMUL: chip.matmul,
               Opcode.VRUN: chip.vrun, Opcode.SETCFG: chip.setcfg}

    issued, fault = _check(cfg, program)
    # SETCFG writes take effect the cycle after they issue, for every instruction
    # whose data passes the multiplexer from then on.
    for ins in issued:
        if ins.op is Opcode.SETCFG:
            for index, value in isa.setcfg_pairs(ins.fields):
                chip.timeline[index].append((ins.cycle + 1, value))
    for pc, ins in enumerate(issued):
        chip.now, chip.pc = ins, pc
        execute[ins.op](ins.fields)
    if fault is not None:
        error, pc, cycle = fault
        return GoldenResult(chip.dram, chip.cbuf, chip.acc, cycle, error, pc, cycle,
                            len(issued), chip.macs, chip.rd_bytes, chip.wr_bytes)
    return GoldenResult(chip.dram, chip.cbuf, chip.acc, timing.run_cycles(cfg, issued),
                        ErrorCode.NONE, 0, 0, len(issued), chip.macs, chip.rd_bytes,
                        chip.wr_bytes)


def _check(cfg: ChipConfig, program: list[isa.Instr]
           ) -> tuple[list[isa.Instr], tuple[ErrorCode, int, int] | None]:
    """The sequencer's checks: the instructions that issue, and the fault (code, pc,
    cycle) that stops the run, if any."""
    if len(program) > cfg.imem_depth:
        return [], (ErrorCode.PROG_RANGE, 0, 0)
    unit_free: dict[str, int] = {}      # unit -> cycle it accepts the next instruction
    prev = None
    for pc, ins in enumerate(program):
        arrival = 0 if prev is None else prev + 1
        if ins.op is Opcode.ILLEGAL:
            return program[:pc], (ErrorCode.ILLEGAL_OPCODE, pc, arrival)
        if ins.cycle < arrival:
            return program[:pc], (ErrorCode.LATE, pc, arrival)
        unit = timing.UNIT[ins.op]
        setcfg = ins.op is Opcode.SETCFG
        checks = ((lambda: ins.cycle >= unit_free.get(unit, 0), ErrorCode.UNIT_BUSY),
                  (lambda: _range_ok(cfg, ins), ErrorCode.ADDR_RANGE),
                  (lambda: not setcfg or _cfg_ok(cfg, ins), ErrorCode.CFG_RANGE),
                  (lambda: not setcfg or _cfg_limits_ok(cfg, ins), ErrorCode.CFG_LIMIT))
        for ok, code in checks:      # in the sequencer's order; each assumes the last
            if not ok():
                return program[:pc], (code, pc, ins.cycle)
        unit_free[unit] = ins.cycle + timing.occupancy(cfg, ins)
        prev = ins.cycle
    return program, None
