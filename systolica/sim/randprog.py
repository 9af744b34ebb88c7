"""Random differential programs: legal ones built by the compiler, and illegal ones
made from them by one deliberate mistake.

A legal program is a random mix of chip micro-ops (all four DMA kinds, WLOAD, MATMUL
with and without accumulate, VRUN in all its modes) over random addresses, strides
and row counts, with random multiplexer settings (``MicroOp.needs``). Issue cycles
come from the compiler's scheduler and the SETCFGs from its update placement, so the
program is legal by construction; it only ever reads buffer rows and weight banks it
has written before, since the chip's memories keep what the previous run left.
An illegal program breaks one rule of the sequencer (late issue, a unit still busy,
an address range, a configuration limit, a multiplexer changed while in use) at one
instruction, or adds one that uses a CBUF bank port another unit is using (a bank
conflict); the fault code, pc and cycle are known in advance.

Everything derives from one integer seed. The module lives with the simulation
harness because it is stimulus for the RTL-against-golden comparison, and it ships in
the package so that ``python -m systolica.sim.randprog SEED`` reproduces a failure
from any install::

    python -m systolica.sim.randprog 1234             # a legal program
    python -m systolica.sim.randprog --illegal 1234   # its broken twin
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

import numpy as np

from systolica import golden
from systolica.arch import disasm, fabric, geometry, instructions, isa, timing
from systolica.arch.config import PRESETS, ChipConfig, preset
from systolica.arch.instructions import READ
from systolica.arch.isa import CopyKind, DmaKind, Instr, Opcode
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode
from systolica.compiler.errors import CompileError
from systolica.compiler.frontend.chip_text import format_ops
from systolica.compiler.microops.ir import MicroOp, make
from systolica.compiler.planning import lanes
from systolica.compiler.scheduling.config_updates import ConfigUpdateError
from systolica.compiler.scheduling.reconfigure import add_updates
from systolica.compiler.scheduling.schedule import schedule
from systolica.sim.jobs import RtlJob

#: How an illegal program is broken; the seed picks one (``seed % len``).
CATEGORIES = ("late", "unit_busy", "addr_range", "cfg_limit", "cfg_in_use", "bank_conflict",
              "cfg_range")

#: Chips beyond the presets: ``tiny`` with tight configuration-update limits (updates
#: on even cycles only, two pairs per SETCFG, one per power domain), which makes the
#: compiler's update placement work and lets a SETCFG break the update interval.
VARIANTS = {
    "tiny-tight": lambda: preset("tiny").replace(
        name="tiny-tight", config_update_interval=2, max_config_updates_per_cycle=2,
        power_domain_budget=1),
}


def config(name: str) -> ChipConfig:
    """A preset or one of :data:`VARIANTS` by name."""
    return VARIANTS[name]() if name in VARIANTS else preset(name)


@dataclass(frozen=True)
class RandomProgram:
    """A generated program with what it needs to run and be checked.

    ``ops`` are the micro-ops in generation order (before scheduling); ``program`` the
    instructions in issue order; ``readback`` the DRAM word ranges the program writes
    (merged), which the comparison reads back; ``expect`` the fault an illegal
    program was made to raise, ``(code, pc, cycle)``, None for a legal one.
    """
    seed: int
    cfg: ChipConfig = field(repr=False)
    ops: tuple[MicroOp, ...] = field(repr=False)
    program: tuple[Instr, ...] = field(repr=False)
    dram: np.ndarray = field(repr=False)
    readback: tuple[tuple[int, int], ...] = field(repr=False)
    category: str = "legal"
    expect: tuple[ErrorCode, int, int] | None = None
    note: str = ""

    @property
    def legal(self) -> bool:
        return self.expect is None

    @property
    def name(self) -> str:
        return f"{self.category}-{self.seed}"

    @property
    def image(self) -> bytes:
        return isa.to_bytes([isa.encode(i) for i in self.program])

    def job(self) -> RtlJob:
        """A job for :func:`systolica.sim.rtlsim.run`; faults are judged by
        :func:`compare`, not by the runner."""
        return RtlJob(Loadable.for_chip(self.cfg, self.image, self.dram),
                      readback=tuple(self.readback) or ((0, 1),), expect_fault=None,
                      name=self.name)

    def reproduce(self) -> str:
        """A shell command that regenerates this program and reruns the comparison."""
        flag = "" if self.legal else f" --illegal --category {self.category}"
        return (f"python -m systolica.sim.randprog --config {self.cfg.name}{flag} "
                f"{self.seed}")

    def listing(self) -> str:
        return "\n".join(f"{pc:5d} {disasm.disassemble_one(i)}"
                         for pc, i in enumerate(self.program))

    def text(self) -> str:
        """The micro-ops as program text: ``systolica schedule`` turns it into the
        legal program again (an illegal one's mistake is in its instructions only)."""
        return format_ops(list(self.ops))


# -- legal programs ----------------------------------------------------------------------
def _runs(mask: np.ndarray, min_len: int) -> list[tuple[int, int]]:
    """Maximal runs ``(lo, hi)`` of True in `mask` at least `min_len` long."""
    padded = np.concatenate(([False], mask, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2]) if b - a >= min_len]


@dataclass
class _Builder:
    """Draws one micro-op after another, tracking which buffer rows and weight banks
    hold data the program wrote (only those may be read)."""
    cfg: ChipConfig
    rng: np.random.Generator
    cbuf: np.ndarray = field(init=False)
    acc: np.ndarray = field(init=False)
    banks: list = field(default_factory=lambda: [False, False])
    ops: list = field(default_factory=list)
    stored: list = field(default_factory=list)     # DRAM spans written
    outputs: list = field(default_factory=list)    # ("cbuf"|"acc", lo, rows) computed
    needs: dict = field(default_factory=dict)      # last routing drawn
    geometry: dict = field(default_factory=dict)   # last CONVCFG drawn

    def __post_init__(self):
        cfg, rng = self.cfg, self.rng
        self.cbuf = np.zeros(cfg.cbuf_physical_rows, dtype=bool)
        self.acc = np.zeros(cfg.acc_depth, dtype=bool)
        # Locality: most programs work in windows of each memory, so that ops collide
        # on rows (hazards) and DRAM stores are read back by later loads.
        self.windows = {
            "cbuf": self._window(cfg.cbuf_depth, (48, 320)),
            "acc": self._window(cfg.acc_depth, (24, 96)),
            "dram": self._window(cfg.dram_words, (128, 2048)),
        }
        self.max_rows = int(rng.choice([8, 24, 64]))

    def _window(self, size: int, span: tuple[int, int]) -> tuple[int, int]:
        if self.rng.random() < 0.25:
            return 0, size
        n = min(size, int(self.rng.integers(*span)))
        lo = int(self.rng.choice([0, size - n, self.rng.integers(0, size - n + 1)]))
        return lo, lo + n

    # -- random quantities ----------------------------------------------------------
    def rows(self, hi: int | None = None) -> int:
        hi = max(1, min(hi or self.max_rows, self.max_rows * 2))
        r = self.rng.random()
        if r < 0.15:
            return 1
        if r < 0.3:
            return hi
        return int(self.rng.integers(1, hi + 1))

    def place(self, memory: str, length: int) -> int:
        """A start address for `length` rows in `memory`, inside its window if it fits,
        biased to the window's (and the memory's) ends."""
        size = {"cbuf": self.cfg.cbuf_depth, "acc": self.cfg.acc_depth,
                "dram": self.cfg.dram_words}[memory]
        lo, hi = self.windows[memory]
        if hi - lo < length:
            lo, hi = 0, size
        r = self.rng.random()
        if r < 0.1:
            return hi - length
        if r < 0.15:
            return lo
        if r < 0.2 and hi == size:
            return size - length
        return int(self.rng.integers(lo, hi - length + 1))

    def pick(self, memory: str, rows: int | None = None, min_len: int = 1
             ) -> tuple[int, int] | None:
        """A range of written rows ``(lo, rows)``, at most `rows` long, or None."""
        runs = _runs(self.cbuf if memory == "cbuf" else self.acc, min_len)
        if not runs:
            return None
        a, b = runs[int(self.rng.integers(len(runs)))]
        n = min(b - a, self.rows(rows or (b - a)))
        n = max(n, min_len)
        lo = int(self.rng.integers(a, b - n + 1))
        return lo, n

    def routing(self, names: list[str]) -> dict:
        """Multiplexer settings for an op whose data passes `names`: often none (the
        default routing), often the previous op's, else a fresh random subset."""
        table = fabric.by_name(self.cfg)
        r = self.rng.random()
        if r < 0.35:
            needs = {}
        elif r < 0.6:
            needs = {k: v for k, v in self.needs.items() if k in names}
        else:
            share = float(self.rng.choice([0.2, 0.5, 1.0]))
            needs = {k: str(self.rng.choice(table[k].sources)) for k in names
                     if self.rng.random() < share}
        self.needs.update(needs)
        return needs

    # -- ops ------------------------------------------------------------------------
    def add(self, op: Opcode, needs: dict | None = None, **fields) -> MicroOp:
        mop = make(self.cfg, op, **fields)
        mop.needs = dict(needs or {})
        self.ops.append(mop)
        return mop

    def dram_span(self, rows: int, w: int) -> tuple[int, int]:
        """``(dram_addr, dram_stride)`` for `rows` rows of `w` words."""
        cfg, rng = self.cfg, self.rng
        r = rng.random()
        if r < 0.55:
            stride = w
        elif r < 0.65:
            stride = 0
        elif r < 0.8:
            stride = int(rng.integers(1, 3 * w + 1))         # overlapping or sparse
        else:
            stride = int(rng.integers(w, 1 << 16))
        if rows > 1:
            stride = min(stride, (cfg.dram_words - w) // (rows - 1))
        span = (rows - 1) * stride + w
        if self.stored and rng.random() < 0.3:               # read back what was stored
            lo, n = self.stored[int(rng.integers(len(self.stored)))]
            if lo + span <= cfg.dram_words:
                return lo, stride
        return self.place("dram", span), stride

    def load(self, to_acc: bool, rows: int | None = None) -> None:
        memory = "acc" if to_acc else "cbuf"
        w = self.cfg.acc_row_words if to_acc else 1
        n = rows or self.rows()
        buf = self.place(memory, n)
        dram, stride = self.dram_span(n, w)
        self.add(Opcode.DMA, kind=DmaKind.LOAD_ACC if to_acc else DmaKind.LOAD_CBUF,
                 dram_addr=dram, dram_stride=stride, buf_addr=buf, rows=n)
        (self.acc if to_acc else self.cbuf)[buf:buf + n] = True

    def store(self, from_acc: bool, where: tuple[int, int] | None = None) -> bool:
        where = where or self.pick("acc" if from_acc else "cbuf")
        if where is None:
            return False
        buf, n = where
        w = self.cfg.acc_row_words if from_acc else 1
        dram, stride = self.dram_span(n, w)
        if self.rng.random() < 0.3 and self.stored:           # overwrite a stored span
            dram = min(self.stored[-1][0], self.cfg.dram_words - ((n - 1) * stride + w))
        self.add(Opcode.DMA, kind=DmaKind.STORE_ACC if from_acc else DmaKind.STORE_CBUF,
                 dram_addr=dram, dram_stride=stride, buf_addr=buf, rows=n)
        self.stored.append((dram, (n - 1) * stride + w))
        return True

    def wload(self) -> bool:
        R = self.cfg.weight_rows
        where = self.pick("cbuf", R, min_len=R)
        if where is None:
            self.load(False, rows=R + int(self.rng.integers(0, 8)))
            where = self.pick("cbuf", R, min_len=R)
        t, tc = self.cfg.tile_rows, self.cfg.tile_cols
        names = [f"north_feed[{j}]" for j in range(tc)] + \
                [f"west_wfeed[{i}]" for i in range(t)] + \
                [f"w_in[{i}][{j}]" for i in range(t) for j in range(tc)]
        bank = int(self.rng.integers(2))
        self.add(Opcode.WLOAD, self.routing(names), w_addr=where[0], bank=bank)
        self.banks[bank] = True
        return True

    def matmul(self) -> bool:
        cfg, rng = self.cfg, self.rng
        if not any(self.banks):
            self.wload()
        bank = int(rng.choice([b for b in (0, 1) if self.banks[b]]))
        accumulate = int(self.acc.any() and rng.random() < 0.45)
        if accumulate:
            acc, n = self.pick("acc")
            act = self.pick("cbuf", n)
            if act is None:
                self.load(False, rows=n)
                act = self.pick("cbuf", n)
            n = act[1]
        else:
            act = self.pick("cbuf")
            if act is None:
                self.load(False)
                act = self.pick("cbuf")
            n = act[1]
            acc = self.place("acc", n)
        t, tc = cfg.tile_rows, cfg.tile_cols
        names = [f"west_feed[{i}]" for i in range(t)] + \
                [f"act_in[{i}][{j}]" for i in range(t) for j in range(tc)] + \
                [f"psum_in[{i}][{j}]" for i in range(1, t) for j in range(tc)] + \
                [f"acc_src[{g}]" for g in range(tc)]
        self.add(Opcode.MATMUL, self.routing(names), act_addr=act[0], rows=n, acc_addr=acc,
                 accumulate=accumulate, bank=bank, early=self.early())
        self.acc[acc:acc + n] = True
        self.outputs.append(("acc", acc, n))
        return True

    def early(self) -> int:
        """A MATMUL's partial-sum exit: half of them leave the array at a random tile
        row (the sums of the rows above it), the rest at the last."""
        if self.rng.random() < 0.5:
            return 0
        return int(self.rng.integers(0, self.cfg.tile_rows))

    def window(self) -> bool:
        """A window-walking MATMUL over a tile of written CBUF rows, often after a
        fresh geometry and tap table; pads, strides and taps reaching past the tile
        on every side."""
        cfg, rng = self.cfg, self.rng
        if not any(self.banks):
            self.wload()
        tile = self.pick("cbuf", min_len=2)
        if tile is None:
            return False
        lo, size = tile
        in_w = int(rng.integers(1, min(size, 24) + 1))
        in_h = size // in_w
        if rng.random() < 0.7 or not self.geometry:
            self.geometry = dict(out_w=int(rng.integers(1, 2 * in_w + 2)),
                                 sh=int(rng.integers(1, 5)), sw=int(rng.integers(1, 5)),
                                 top=int(rng.integers(0, 4)), left=int(rng.integers(0, 4)),
                                 pad=int(rng.integers(256)))
            self.add(Opcode.CONVCFG, **self.geometry)
        table = int(rng.integers(isa.TAP_TABLES))
        if rng.random() < 0.6:
            first = int(rng.integers(cfg.rows))
            count = int(rng.integers(1, min(isa.TAPS_PER_WORD, cfg.rows - first) + 1))
            self.add(Opcode.TAPS, table=table, first=first, count=count,
                     **{f"t{a}{k}": isa.signed_field(int(rng.integers(-4, 5)),
                                                     isa.TAP_DELTA_BITS)
                        for k in range(1, count + 1) for a in "hw"})
        accumulate = int(self.acc.any() and rng.random() < 0.5)
        if accumulate:
            acc, n = self.pick("acc")
        else:
            n = self.rows()
            acc = self.place("acc", n)
        bank = int(rng.choice([b for b in (0, 1) if self.banks[b]]))
        t, tc = cfg.tile_rows, cfg.tile_cols
        names = [f"west_feed[{i}]" for i in range(t)] + \
                [f"act_in[{i}][{j}]" for i in range(t) for j in range(tc)] + \
                [f"psum_in[{i}][{j}]" for i in range(1, t) for j in range(tc)] + \
                [f"acc_src[{g}]" for g in range(tc)]
        self.add(Opcode.MATMUL, self.routing(names), act_addr=lo, rows=n, acc_addr=acc,
                 accumulate=accumulate, bank=bank, conv=1, max=int(rng.random() < 0.4),
                 dh=int(rng.integers(0, 5)), dw=int(rng.integers(0, 5)), taps=table,
                 in_w=in_w, in_h=in_h, early=self.early())
        self.acc[acc:acc + n] = True
        self.outputs.append(("acc", acc, n))
        return True

    def vrun(self) -> bool:
        cfg, rng = self.cfg, self.rng
        src = self.pick("acc")
        if src is None:
            return False
        s, n = src
        use_bias = int(rng.random() < 0.5)
        bias = self.pick("acc", 1) if use_bias else None
        bias_addr = bias[0] if bias else int(rng.integers(cfg.acc_depth))
        use_bias = int(bias is not None)
        to_acc = int(rng.random() < 0.3)
        if to_acc:
            # In place, below the source (overlapping or not) or above it: a VRUN
            # reads row i a few cycles before it writes row i, so a destination that
            # starts inside its source would read rows it has already rewritten.
            r = rng.random()
            if r < 0.3:
                dst = s
            elif r < 0.5:
                dst = int(rng.integers(max(0, s - n), s + 1))
            else:
                dst = self.place("acc", n)
            if s < dst < s + n:
                dst = s + n if s + 2 * n <= cfg.acc_depth else s
        else:
            dst = self.place("cbuf", n)
        shift = int(rng.integers(0, 64) if rng.random() < 0.2 else rng.integers(6, 24))
        mult = int(rng.integers(0, 1 << 16) if rng.random() < 0.5 else rng.integers(0, 512))
        names = [] if to_acc else [f"wb_src[{g}]" for g in range(cfg.tile_rows)]
        # a fused crop: the rows also land in the UBUF, at their address mod its size
        end = cfg.ubuf_base + cfg.ubuf_rows
        crop = int(not to_acc and 0 < n <= cfg.ubuf_rows and rng.random() < 0.25
                   and (dst + n <= cfg.ubuf_base or dst >= end))
        needs = self.routing(names)
        # a group kept (wb_src = keep) holds what its rows held: only rows this
        # program has written (a run's memories keep the previous run's data)
        rows = np.arange(dst, dst + n)
        if not to_acc and not (self.cbuf[rows].all() and (
                not crop or self.cbuf[cfg.ubuf_base + rows % cfg.ubuf_rows].all())):
            for name in names:      # (a multiplexer not named takes its default)
                if needs.get(name) == fabric.KEEP:
                    needs[name] = self.needs[name] = fabric.ZERO
        self.add(Opcode.VRUN, needs, src=s, rows=n, dst=dst,
                 bias_addr=bias_addr, use_bias=use_bias, to_acc=to_acc,
                 requant=int(rng.random() < 0.6), relu=int(rng.random() < 0.5),
                 mult=mult, shift=shift, zp=int(rng.integers(256)), crop=crop)
        (self.acc if to_acc else self.cbuf)[dst:dst + n] = True
        if crop:
            self.cbuf[cfg.ubuf_base + (np.arange(dst, dst + n) % cfg.ubuf_rows)] = True
        self.outputs.append(("acc" if to_acc else "cbuf", dst, n))
        return True

    def copy(self) -> bool:
        """A crop of written CBUF rows into the UBUF, or a fetch of written UBUF rows
        back into the CBUF."""
        cfg, rng = self.cfg, self.rng
        if not cfg.ubuf_rows:
            return False
        base, size = cfg.ubuf_base, cfg.ubuf_rows
        if rng.random() < 0.5:
            src = self.pick("cbuf", size)
            if src is None:
                return False
            s, n = src
            u = int(rng.integers(0, size - n + 1))
            dst = base + u
            if s < dst < s + n:
                return False            # a crop that starts inside its own unread source
            self.add(Opcode.COPY, kind=CopyKind.CROP, cbuf_addr=s, ubuf_addr=u, rows=n)
        else:
            held = _runs(self.cbuf[base:base + size], 1)
            if not held:
                return False
            a, b = held[int(rng.integers(len(held)))]
            n = self.rows(b - a)
            u = int(rng.integers(a, b - n + 1))
            dst = self.place("cbuf", n)
            if dst < base + u + n and base + u < dst + n:
                return False            # a fetch onto its own source rows (illegal)
            self.add(Opcode.COPY, kind=CopyKind.FETCH, cbuf_addr=dst, ubuf_addr=u, rows=n)
        self.cbuf[dst:dst + n] = True
        self.outputs.append(("cbuf", dst, n))
        return True

    def route(self) -> bool:
        """Written CBUF rows through the general lanes: a random move of tile rows to
        column groups (the compiler's route, skip links included), lanes off its paths
        set at random, a random ``col0``, samples on time or a row late; partition
        groups whose column group carries nothing are kept (on written rows)."""
        cfg, rng = self.cfg, self.rng
        if not cfg.general_lanes:
            return False
        src = self.pick("cbuf")
        if src is None:
            return False
        s, n = src
        t, tc, G = cfg.tile_rows, cfg.tile_cols, cfg.rows // cfg.tile_size
        targets = [j for j in range(tc) if rng.random() < 0.7] or [int(rng.integers(tc))]
        try:
            route = lanes.plan_route(cfg, {j: int(rng.integers(t)) for j in targets},
                               skips=bool(rng.random() < 0.8))
        except CompileError:     # longer than the delay lines (8 tile rows, no skips)
            return False
        col0 = int(rng.integers(tc))
        keep = sum(1 << g for g in range(G)
                   if (g + col0) % tc not in route.moves or rng.random() < 0.2)
        if keep:
            dst = self.pick("cbuf", n, min_len=n)
            if dst is None or dst[1] != n:
                return False
            dst = dst[0]
        else:
            dst = self.place("cbuf", n)
        if dst < s + n and s < dst + n:
            return False                # onto its own source rows
        span = min(route.span + int(rng.integers(0, 3)), geometry.route_span_max(cfg))
        delays = {f"delay{j}": max(0, span - lat - int(rng.integers(0, 2)))
                  for j, lat in route.latency.items()}
        table = fabric.by_name(cfg)
        needs = dict(route.routing)
        for m in fabric.muxes(cfg):         # lanes no path takes: anything
            if m.name.split("[")[0] in fabric.GENERAL and m.name not in needs \
                    and rng.random() < 0.2:
                needs[m.name] = str(rng.choice(table[m.name].sources))
        self.add(Opcode.ROUTE, needs, src=s, dst=dst, rows=n, span=span, col0=col0,
                 keep=keep, **delays)
        self.cbuf[dst:dst + n] = True
        self.outputs.append(("cbuf", dst, n))
        return True

    def draw(self, count: int) -> list[MicroOp]:
        rng = self.rng
        for _ in range(int(rng.integers(1, 3))):
            self.load(False)
        if rng.random() < 0.5:
            self.load(True)
        steps = {
            "load_cbuf": (2.0, lambda: self.load(False) or True),
            "load_acc": (0.8, lambda: self.load(True) or True),
            "store_cbuf": (0.8, lambda: self.store(False)),
            "store_acc": (0.8, lambda: self.store(True)),
            "wload": (1.5, self.wload),
            "matmul": (3.0, self.matmul),
            "window": (1.5, self.window),
            "vrun": (1.8, self.vrun),
            "copy": (0.8, self.copy),
            "route": (0.8, self.route),
        }
        names = list(steps)
        weights = np.array([steps[k][0] for k in names])
        while len(self.ops) < count:
            steps[names[rng.choice(len(names), p=weights / weights.sum())]][1]()
        # End by storing some computed results, so the DRAM shows what the run did,
        # or often everything the buffers hold.
        for memory, lo, n in self.outputs[-int(rng.integers(1, 4)):]:
            self.store(memory == "acc", (lo, n))
        if rng.random() < 0.5:
            self.dump()
        if not self.stored:
            self.store(False) or self.store(True)
        return self.ops

    def dump(self) -> None:
        """Store every written buffer row, run by run, into one fresh DRAM area."""
        runs = [(True, lo, hi) for lo, hi in _runs(self.acc, 1)] + \
               [(False, lo, hi) for lo, hi in _runs(self.cbuf, 1)]
        w = self.cfg.acc_row_words
        words = sum((hi - lo) * (w if acc else 1) for acc, lo, hi in runs)
        if not runs or words > self.cfg.dram_words // 2:
            return
        at = self.place("dram", words)
        for acc, lo, hi in runs:
            n = hi - lo
            self.add(Opcode.DMA, kind=DmaKind.STORE_ACC if acc else DmaKind.STORE_CBUF,
                     dram_addr=at, dram_stride=w if acc else 1, buf_addr=lo, rows=n)
            self.stored.append((at, n * (w if acc else 1)))
            at += n * (w if acc else 1)


def _merge(spans: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for lo, n in sorted(spans):
        if out and lo <= out[-1][0] + out[-1][1]:
            out[-1][1] = max(out[-1][1], lo + n - out[-1][0])
        else:
            out.append([lo, n])
    return tuple((lo, n) for lo, n in out)


def scheduled(cfg: ChipConfig, ops: list[MicroOp]) -> list[Instr]:
    """The compiler's schedule of `ops` with its configuration updates, in issue
    order (as ``compile_network`` assembles a program)."""
    cycles, updates = add_updates(cfg, ops, schedule(cfg, ops))
    return sorted([op.instr(c) for op, c in zip(ops, cycles)] + [u for u, _ in updates],
                  key=lambda i: i.cycle)


def legal(cfg: ChipConfig, seed: int) -> RandomProgram:
    """The legal program of `seed`: random DRAM contents and 4 to 40 micro-ops
    (sometimes up to 80), scheduled and configured by the compiler."""
    rng = np.random.default_rng([seed, 0])
    dram = rng.integers(0, 256, (cfg.dram_words, cfg.dram_word_bytes), dtype=np.uint8)
    for _ in range(50):
        count = int(rng.integers(4, 81 if rng.random() < 0.1 else 41))
        builder = _Builder(cfg, rng)
        ops = builder.draw(count)
        try:
            program = scheduled(cfg, ops)
        except ConfigUpdateError:
            # Two routings the scheduler placed too close to reconfigure between:
            # a program the compiler rejects, so draw another.
            continue
        return RandomProgram(seed, cfg, tuple(ops), tuple(program), dram,
                             _merge(builder.stored))
    raise RuntimeError(f"seed {seed}: no schedulable program in 50 draws")


# -- illegal programs --------------------------------------------------------------------
class _NoSite(Exception):
    """The program offers no place for this kind of mistake."""


def _free_cycles(program: list[Instr], lo: int, hi: int) -> list[int]:
    """Cycles in ``[lo, hi]`` (and >= 0) at which no instruction issues."""
    taken = {i.cycle for i in program}
    return [c for c in range(max(lo, 0), hi + 1) if c not in taken]


def _insert(program: list[Instr], ins: Instr) -> tuple[list[Instr], int]:
    """`program` with `ins` at its issue position (its cycle must be free)."""
    pc = sum(1 for i in program if i.cycle < ins.cycle)
    return program[:pc] + [ins] + program[pc:], pc


def _late(cfg, program, rng):
    k = int(rng.integers(1, len(program)))
    prev = program[k - 1].cycle
    cycle = int(rng.integers(max(0, prev - 20), prev + 1))
    out = list(program)
    out[k] = Instr(program[k].op, cycle, program[k].fields)
    return (out, (ErrorCode.LATE, k, prev + 1),
            f"pc {k} moved from cycle {program[k].cycle} to {cycle}")


def _unit_busy(cfg, program, rng):
    sites = []
    last: dict[str, int] = {}
    for k, ins in enumerate(program):
        unit = timing.UNIT[ins.op]
        if unit in last:
            p = program[last[unit]]
            # its unit's occupancy, or a MATMUL's collector still taking the rows of
            # one with a later exit (docs/contract.md, "Collector order")
            lag = max(0, timing.exit_lead(cfg, ins) - timing.exit_lead(cfg, p))
            free = _free_cycles(program, p.cycle + 1,
                                p.cycle + timing.occupancy(cfg, p) + lag - 1)
            if free:
                sites.append((k, free))
        last[unit] = k
    if not sites:
        raise _NoSite
    k, free = sites[int(rng.integers(len(sites)))]
    moved = Instr(program[k].op, int(rng.choice(free)), program[k].fields)
    out, pc = _insert(program[:k] + program[k + 1:], moved)
    return out, (ErrorCode.UNIT_BUSY, pc, moved.cycle), \
        f"pc {k} moved from cycle {program[k].cycle} into its unit's occupancy"


def _out_of_range(cfg: ChipConfig, ins: Instr, rng) -> dict:
    """`ins`'s fields with one range emptied or run past the end of its memory."""
    f = dict(ins.fields)

    def past(depth: int, length: int, bits: int) -> int:
        """A start address from which `length` rows run past `depth`, fitting `bits`."""
        first = max(depth - length + 1, 0)
        return int(rng.choice([first, rng.integers(first, min(depth + 64, 1 << bits)),
                               (1 << bits) - 1]))

    choices = []
    if ins.op is Opcode.DMA:
        to_acc = f["kind"] in (DmaKind.LOAD_ACC, DmaKind.STORE_ACC)
        w = cfg.acc_row_words if to_acc else 1
        depth = cfg.acc_depth if to_acc else cfg.cbuf_depth
        span = (f["rows"] - 1) * f["dram_stride"] + w
        choices += [("rows", 0),
                    ("buf_addr", past(depth, f["rows"], isa.CBUF_ADDR_BITS)),
                    ("dram_addr", past(cfg.dram_words, span, isa.DRAM_ADDR_BITS))]
        if f["rows"] > 1:
            need = -(-(cfg.dram_words - f["dram_addr"] - w + 1) // (f["rows"] - 1))
            if need < 1 << 16:
                choices.append(("dram_stride", int(rng.integers(need, 1 << 16))))
    elif ins.op is Opcode.WLOAD:
        choices.append(("w_addr", past(cfg.cbuf_depth, cfg.weight_rows, isa.CBUF_ADDR_BITS)))
    elif ins.op is Opcode.MATMUL:
        span = f["in_w"] * f["in_h"] if f["conv"] else f["rows"]
        choices += [("rows", 0),
                    ("act_addr", past(cfg.cbuf_depth, span, isa.CBUF_ADDR_BITS)),
                    ("acc_addr", past(cfg.acc_depth, f["rows"], isa.ACC_ADDR_BITS))]
        if f["conv"]:
            choices += [("in_w", 0), ("in_h", 0),
                        ("in_h", (cfg.cbuf_depth - f["act_addr"]) // f["in_w"] + 1)]
    elif ins.op is Opcode.CONVCFG:
        choices += [("out_w", 0), ("sh", 0), ("sw", 0)]
    elif ins.op is Opcode.TAPS:
        choices += [("count", 0), ("count", isa.TAPS_PER_WORD + 1),
                    ("first", cfg.rows - f["count"] + 1)]
    elif ins.op is Opcode.COPY:
        choices += [("rows", 0),
                    ("cbuf_addr", past(cfg.cbuf_depth, f["rows"], isa.CBUF_ADDR_BITS)),
                    ("ubuf_addr", past(cfg.ubuf_rows, f["rows"], isa.CBUF_ADDR_BITS))]
    elif ins.op is Opcode.ROUTE:
        choices += [("rows", 0), ("src", past(cfg.cbuf_depth, f["rows"], isa.CBUF_ADDR_BITS)),
                    ("dst", past(cfg.cbuf_depth, f["rows"], isa.CBUF_ADDR_BITS))]
    elif ins.op is Opcode.VRUN:
        depth = cfg.acc_depth if f["to_acc"] else cfg.cbuf_depth
        choices += [("rows", 0),
                    ("src", past(cfg.acc_depth, f["rows"], isa.ACC_ADDR_BITS)),
                    ("bias_addr", past(cfg.acc_depth, 1, isa.ACC_ADDR_BITS)),
                    ("dst", past(depth, f["rows"],
                                 isa.ACC_ADDR_BITS if f["to_acc"] else isa.CBUF_ADDR_BITS))]
        if f["rows"] > 1:
            choices.append(("rows", int(rng.integers(cfg.acc_depth - f["src"] + 1,
                                                     1 << isa.ACC_ADDR_BITS))))
    # the drawn change, or the next one that keeps the instruction legal (a VRUN's
    # fused crop, say, takes no more rows than the UBUF: past that it is ILLEGAL_OPCODE)
    first = int(rng.integers(len(choices)))
    for name, value in choices[first:] + choices[:first]:
        g = {**f, name: value}
        if instructions.legal(cfg, ins.op, g):
            return g
    raise _NoSite


def _addr_range(cfg, program, rng):
    sites = [k for k, i in enumerate(program) if i.op not in isa.SETCFGS]
    k = sites[int(rng.integers(len(sites)))]
    fields = _out_of_range(cfg, program[k], rng)
    out = list(program)
    out[k] = Instr(program[k].op, program[k].cycle, fields)
    changed = {a: b for a, b in fields.items() if program[k].fields[a] != b}
    return out, (ErrorCode.ADDR_RANGE, k, program[k].cycle), f"pc {k}: {changed}"


def _cfg_limit(cfg, program, rng):
    table = fabric.muxes(cfg)
    fmt = fabric.setcfg_format(cfg)
    # one SETCFG names one page's multiplexers (fmt.page): draw them from one
    by_domain: dict[tuple[str, int], list[int]] = {}
    for m in table:
        by_domain.setdefault((m.domain, fmt.page(m.index)), []).append(m.index)
    kinds = ["pairs"]
    if any(len(v) > cfg.power_domain_budget for v in by_domain.values()) \
            and cfg.power_domain_budget < cfg.max_config_updates_per_cycle:
        kinds.append("domain")
    if cfg.config_update_interval > 1:
        kinds.append("interval")
    kind = kinds[int(rng.integers(len(kinds)))]
    if kind == "pairs":
        n = int(rng.integers(cfg.max_config_updates_per_cycle + 1, isa.SETCFG_PAIRS + 1))
        pages = fmt.page(len(table) - 1) + 1
        page = int(rng.integers(pages)) if pages > 1 else 0
        pool = [m.index for m in table if fmt.page(m.index) == page]
        if len(pool) < n:
            pool = [m.index for m in table if fmt.page(m.index) == 0]
        muxes = [int(i) for i in rng.choice(pool, n, replace=False)]
    elif kind == "domain":
        pool = [v for v in by_domain.values() if len(v) > cfg.power_domain_budget]
        pool = pool[int(rng.integers(len(pool)))]
        n = int(rng.integers(cfg.power_domain_budget + 1,
                             min(len(pool), cfg.max_config_updates_per_cycle) + 1))
        muxes = [int(i) for i in rng.choice(pool, n, replace=False)]
    else:
        muxes = [int(rng.integers(len(table)))]
    pairs = [(i, int(rng.integers(len(table[i].sources)))) for i in muxes]
    end = max(i.cycle for i in program) + 8
    free = [c for c in _free_cycles(program, 0, end)
            if (c % cfg.config_update_interval != 0) == (kind == "interval")]
    ins = Instr(fmt.op, int(rng.choice(free)), fmt.fields(pairs))
    out, pc = _insert(program, ins)
    return out, (ErrorCode.CFG_LIMIT, pc, ins.cycle), \
        f"{fmt.op.name} at cycle {ins.cycle}: {kind}"


def _cfg_range(cfg, program, rng):
    """A SETCFG (in the chip's format) naming a multiplexer past the chip's table, in
    any page (on a chip of one page, page 1 names none)."""
    count = len(fabric.muxes(cfg))
    fmt = fabric.setcfg_format(cfg)
    number = int(rng.integers(count, 1 << fmt.number_bits))
    end = max(i.cycle for i in program) + 8
    free = [c for c in _free_cycles(program, 0, end) if c % cfg.config_update_interval == 0]
    ins = Instr(fmt.op, int(rng.choice(free)),
                fmt.fields([(number, int(rng.integers(1 << fmt.value_bits)))]))
    out, pc = _insert(program, ins)
    return out, (ErrorCode.CFG_RANGE, pc, ins.cycle), \
        f"{fmt.op.name} of multiplexer {number} " \
        f"(the chip has {count}) at cycle {ins.cycle}"


def _cfg_in_use(cfg, program, rng):
    code = getattr(ErrorCode, "CFG_IN_USE", None)
    if code is None:
        raise _NoSite
    sites = []
    for ins in program:
        for m in fabric.muxes(cfg):
            use = timing.mux_use(cfg, ins, m.name)
            if use is None:
                continue
            free = _free_cycles(program, ins.cycle + use[0], ins.cycle + use[1] - 2)
            free = [c for c in free if c % cfg.config_update_interval == 0]
            if free:
                sites.append((m, free))
    if not sites:
        raise _NoSite
    m, free = sites[int(rng.integers(len(sites)))]
    fmt = fabric.setcfg_format(cfg)
    ins = Instr(fmt.op, int(rng.choice(free)),
                fmt.fields([(m.index, int(rng.integers(len(m.sources))))]))
    out, pc = _insert(program, ins)
    return out, (code, pc, ins.cycle), f"{fmt.op.name} of {m.name} at cycle {ins.cycle}"


def _bank_uses(cfg: ChipConfig, ins: Instr) -> list[tuple[tuple[str, str, int], int, int]]:
    """``((memory, mode, bank), first, last)`` absolute: the bank ports `ins` uses, by
    the contract's rule (its entry's ``bank_ports`` over its effects)."""
    entry = instructions.spec(ins.op)
    return [((u.memory, u.mode, u.bank), ins.cycle + u.first, ins.cycle + u.last)
            for u in entry.bank_ports(cfg, ins.fields, entry.effects(cfg, ins.fields))]


def _first_conflict(cfg: ChipConfig, program: list[Instr]) -> int | None:
    """The first cycle two units use one CBUF or ACC bank port."""
    uses = [(timing.UNIT[i.op], key, lo, hi) for i in program for key, lo, hi in _bank_uses(cfg, i)]
    first = None
    for k, (u, key, lo, hi) in enumerate(uses):
        for v, key2, lo2, hi2 in uses[k + 1:]:
            if u != v and key == key2 and lo <= hi2 and lo2 <= hi:
                c = max(lo, lo2)
                first = c if first is None else min(first, c)
    return first


def _bank_conflict(cfg, program, rng):
    """A DMA added at a free issue cycle, while its unit is free, that uses the port of
    a CBUF bank another unit's instruction is using then, to or from the top of the
    DRAM, adding no hazard of its own: a load (write port) of a row no instruction
    touches, or a store (read port) of one whose last write is over by then (a row no
    instruction wrote would be read undefined)."""
    shift = cfg.cbuf_bank_shift
    touched, last_write = set(), {}     # CBUF row -> the cycle of its last write
    for i in program:
        for r in instructions.ranges(cfg, i.op, i.fields):
            if r.memory == "cbuf" and r.touched:
                touched.update(range(r.lo, r.hi))
        for tc in instructions.spec(i.op).effects(cfg, i.fields).writes:
            if tc.resource == "cbuf":
                for a, c in zip(tc.addrs.tolist(), (tc.cycles + i.cycle).tolist()):
                    last_write[a] = max(last_write.get(a, c), c)
    sites = []
    for x in program:
        if timing.UNIT[x.op] == "dma":
            continue
        for (memory, mode, bank), lo, hi in _bank_uses(cfg, x):
            if memory != "cbuf":
                continue
            rows = range(bank << shift, (bank + 1) << shift)
            rows = [a for a in rows if (a in last_write if mode == READ else a not in touched)]
            if not rows:
                continue
            kind = DmaKind.STORE_CBUF if mode == READ else DmaKind.LOAD_CBUF
            f = dict(kind=kind, dram_addr=cfg.dram_words - 1, dram_stride=0,
                     buf_addr=int(rng.choice(rows)), rows=1)
            probe = Instr(Opcode.DMA, 0, {n: f.get(n, 0) for n, _ in isa.PAYLOAD[Opcode.DMA]})
            ((_, _, w0, w1),) = timing.port_windows(cfg, probe)
            w = (w0, w1)
            # a store reads its row in its issue cycle + 1: after the row's last write
            after = last_write.get(f["buf_addr"], -1) if mode == READ else -1
            for c in _free_cycles(program, max(lo - w[1] + 1, after), hi - w[0]):
                y = Instr(Opcode.DMA, c, probe.fields)
                if _unit_free(cfg, program, y):
                    sites.append(y)
    if not sites:
        raise _NoSite
    y = sites[int(rng.integers(len(sites)))]
    out, _ = _insert(program, y)
    # the chip faults the cycle after the conflict; what issues up to the conflict's
    # own cycle counts
    cycle = _first_conflict(cfg, out) + 1
    pc = sum(1 for i in out if i.cycle < cycle)
    return out, (ErrorCode.BANK_CONFLICT, pc, cycle), \
        f"{disasm.disassemble_one(y).strip()} added"


def _unit_free(cfg: ChipConfig, program: list[Instr], y: Instr) -> bool:
    """Whether `y` at its cycle keeps clear of its unit's other instructions."""
    unit = timing.UNIT[y.op]
    for i in program:
        if timing.UNIT[i.op] != unit:
            continue
        a, b = (i, y) if i.cycle < y.cycle else (y, i)
        if b.cycle < a.cycle + timing.occupancy(cfg, a):
            return False
    return True


BREAK = {"late": _late, "unit_busy": _unit_busy, "addr_range": _addr_range,
         "cfg_limit": _cfg_limit, "cfg_in_use": _cfg_in_use,
         "bank_conflict": _bank_conflict, "cfg_range": _cfg_range}


def illegal(cfg: ChipConfig, seed: int, category: str | None = None) -> RandomProgram:
    """The legal program of `seed` broken in one way (`category`, by default
    ``CATEGORIES[seed % len(CATEGORIES)]``); raises ValueError if this chip or
    instruction set cannot express that mistake (``cfg_in_use`` before the
    ``CFG_IN_USE`` fault exists)."""
    category = category or CATEGORIES[seed % len(CATEGORIES)]
    if category not in BREAK:
        raise ValueError(f"unknown category {category!r}; choose one of {', '.join(BREAK)}")
    rng = np.random.default_rng([seed, 1])
    for attempt in range(20):
        base = legal(cfg, seed if attempt == 0 else seed + (attempt << 32))
        try:
            program, expect, note = BREAK[category](cfg, list(base.program), rng)
        except _NoSite:
            if category == "cfg_in_use" and not hasattr(ErrorCode, "CFG_IN_USE"):
                raise ValueError("this instruction set has no CFG_IN_USE fault") from None
            continue
        return RandomProgram(seed, cfg, base.ops, tuple(program), base.dram, base.readback,
                             category, expect, note)
    raise RuntimeError(f"seed {seed}: no site for a {category} mistake in 20 programs")


# -- comparison ----------------------------------------------------------------------------
def expected(prog: RandomProgram):
    """The golden model's result for `prog` (a :class:`systolica.golden.GoldenResult`)."""
    return golden.run(prog.cfg, Loadable.for_chip(prog.cfg, prog.image, prog.dram))


def compare(prog: RandomProgram, rtl: dict) -> list[str]:
    """What differs between the golden model's run of `prog` and the RTL's result
    dict (:func:`systolica.sim.rtlsim.run`); empty if they agree. A legal program
    must also run without fault and take the predicted cycles; an illegal one must
    fault where it was broken."""
    try:
        gold = expected(prog)
    except golden.GoldenError as e:
        return [f"golden model rejects the program: {e}"]
    problems = []
    if rtl.timed_out:
        problems.append("RTL: no interrupt (timed out)")
    regs = [("error", int(gold.error), rtl.error),
            ("fault_pc", gold.fault_pc, rtl.fault_pc),
            ("fault_cycle", gold.fault_cycle, rtl.fault_cycle),
            ("cycles", gold.cycles, rtl.cycles)]
    if prog.legal:
        if gold.error != ErrorCode.NONE:
            problems.append(f"golden model faults on a legal program: {gold.error.name} at "
                            f"pc {gold.fault_pc}, cycle {gold.fault_cycle}")
        predicted = timing.run_cycles(prog.cfg, list(prog.program))
        if gold.cycles != predicted:
            problems.append(f"golden cycles {gold.cycles} != predicted {predicted}")
        regs += [("macs", gold.macs, rtl.macs),
                 ("dram_rd_bytes", gold.dram_bytes_read, rtl.dram_rd_bytes),
                 ("dram_wr_bytes", gold.dram_bytes_written, rtl.dram_wr_bytes),
                 ("fetch_rd_bytes", gold.fetch_bytes_read, rtl.fetch_rd_bytes),
                 ("ubuf_wr_bytes", gold.ubuf_bytes_written, rtl.ubuf_wr_bytes),
                 ("ubuf_rd_bytes", gold.ubuf_bytes_read, rtl.ubuf_rd_bytes)]
    else:
        code, pc, cycle = prog.expect
        if (gold.error, gold.fault_pc, gold.fault_cycle) != (code, pc, cycle):
            problems.append(f"golden model: {gold.error.name} at pc {gold.fault_pc}, cycle "
                            f"{gold.fault_cycle}; the program was broken for "
                            f"{code.name} at pc {pc}, cycle {cycle} ({prog.note})")
    for name, want, got in regs:
        if want != got:
            show = (lambda v: ErrorCode(v).name) if name == "error" else str
            problems.append(f"{name}: RTL {show(got)}, golden {show(want)}")
    if prog.legal:
        for (lo, n), got in zip(prog.readback, rtl.readback):
            want = gold.dram[lo:lo + n]
            if not np.array_equal(got, want):
                bad = np.flatnonzero((np.asarray(got) != want).any(axis=1))
                problems.append(f"DRAM words {lo}..{lo + n - 1}: {len(bad)} differ, first "
                                f"word {lo + bad[0]}: RTL {np.asarray(got)[bad[0]].tolist()}, "
                                f"golden {want[bad[0]].tolist()}")
    return problems


def report(prog: RandomProgram, problems: list[str]) -> str:
    """A failure message: the seed, what differs, and how to reproduce it."""
    what = "legal" if prog.legal else f"illegal ({prog.category}: {prog.note})"
    return (f"seed {prog.seed}, {what} program of {len(prog.program)} instructions on "
            f"{prog.cfg.name}:\n    " + "\n    ".join(problems)
            + f"\n    reproduce: {prog.reproduce()}")


def check_on_rtl(progs: list[RandomProgram]) -> list[str]:
    """Run `progs` in one simulator process; one failure report per program that
    differs from the golden model."""
    from systolica.sim import rtlsim
    if not progs:
        return []
    cfg = progs[0].cfg
    try:
        results = rtlsim.run(cfg, [p.job() for p in progs])
    except rtlsim.RtlSimError as e:
        raise rtlsim.RtlSimError(
            f"{e}\n(jobs are named <category>-<seed>; reproduce one with "
            f"python -m systolica.sim.randprog [--illegal] SEED)") from None
    return [report(p, problems) for p, res in zip(progs, results)
            if (problems := compare(p, res))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m systolica.sim.randprog",
        description="Generate the random program of a seed, print it, and run it on the "
                    "RTL against the golden model.")
    parser.add_argument("seed", type=int, nargs="+")
    parser.add_argument("--config", default="tiny", choices=[*PRESETS, *VARIANTS],
                        help="chip preset or variant (default tiny)")
    parser.add_argument("--illegal", action="store_true",
                        help="the seed's illegal program instead of its legal one")
    parser.add_argument("--category", choices=CATEGORIES,
                        help="with --illegal: the kind of mistake (default from the seed)")
    parser.add_argument("--no-rtl", action="store_true",
                        help="only print the program and the golden model's result")
    parser.add_argument("--stp", metavar="FILE",
                        help="also write the (first) seed's micro-ops as program text")
    args = parser.parse_args(argv)
    cfg = config(args.config)
    progs = [illegal(cfg, s, args.category) if args.illegal else legal(cfg, s)
             for s in args.seed]
    for p in progs:
        print(f"# seed {p.seed}: {p.category}" + (f" ({p.note})" if p.note else ""))
        print(p.listing())
        try:
            gold = expected(p)
            print(f"# golden: {gold.error.name} pc {gold.fault_pc} cycle "
                  f"{gold.fault_cycle}, cycles {gold.cycles}, macs {gold.macs}")
        except golden.GoldenError as e:
            print(f"# golden: rejects the program: {e}")
    if args.stp:
        with open(args.stp, "w") as f:
            f.write(progs[0].text())
    if args.no_rtl:
        return 0
    failures = check_on_rtl(progs)
    print("\n".join(failures) if failures else f"PASS: {len(progs)} program(s) agree")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
