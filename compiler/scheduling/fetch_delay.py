"""Delay instructions whose word the fetcher would bring in too late.

A program longer than the instruction memory, or one the host does not preload (the
PROG_FETCH register below its length: ``fetch_from``), is fetched from DRAM while it
runs, from instruction ``P = min(fetch_from, imem_depth, len)`` on, in the DRAM port
cycles the DMAs leave free (the rule: :mod:`systolica.arch.fetch`).
Entry point: :func:`delay_for_fetch`, run on the scheduled program (sorted by issue
cycle). It replays the fetcher instruction by instruction; where an instruction's
last word would be addressed later than ``ready_after`` cycles before its issue
cycle, it delays that instruction and every later-issued one by the deficit (rounded
up to whole configuration-update intervals, so SETCFGs keep their cycle grid).

Delaying a whole suffix keeps every dependence: each later instruction moves away
from the earlier ones it waits for, never towards them. The one relation it could
break is a SETCFG issued after an instruction whose multiplexer window it sets (legal
while the window has not opened): the cut is moved back until every window of the
instructions before it opens no later than the first SETCFG after it. (Windows of
densely issued instructions overlap one another all the way back; only a SETCFG can
be hurt by them.) The schedule verifier (the golden model's own
fetcher) checks the result.

A program that fits the instruction memory but is fetched (``fetch_from`` below its
length: the firmware's programs, fetched whole) is delayed as a whole instead: by the
least multiple of the update interval that puts every instruction on time. Its
fetcher never waits for a slot, and every DMA moves with the program, so a later start
only gives the fetcher more free port cycles ahead of it; and a whole program moved
keeps every relation within it. A delayed suffix would not: a DMA moved against a long
MATMUL before the cut can land on the ACC bank port the MATMUL still writes (an int32
GEMM on ``ulx3s``, whose ACC is one bank).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from systolica.arch import disasm, fabric, fetch, instructions, isa, timing
from systolica.arch.config import ChipConfig
from systolica.arch.isa import Opcode
from systolica.compiler.errors import CompileError

#: Delays of one instruction after which the pass gives up (it cannot happen when the
#: instruction memory is deeper than the few instructions a multiplexer window spans).
MAX_ROUNDS = 64


def _window_opens(cfg: ChipConfig, program: list[isa.Instr]) -> list[int]:
    """Per instruction, the cycle after issue at which its last multiplexer window
    opens (-1: it passes none)."""
    names = [m.name for m in fabric.muxes(cfg)]
    cache: dict = {}
    out = []
    for ins in program:
        if not instructions.SPEC[ins.op].uses_fabric:
            out.append(-1)
            continue
        key = (ins.op, tuple(sorted(ins.fields.items())))
        lo = cache.get(key)
        if lo is None:
            spans = [timing.mux_use(cfg, ins, n) for n in names]
            lo = cache[key] = max((s[0] for s in spans if s is not None), default=-1)
        out.append(lo)
    return out


def _port_cycles(cfg: ChipConfig, program: list[isa.Instr]) -> list:
    """Per instruction, the cycles ``(first, last)`` after issue a DMA uses the DRAM
    port (None: not a DMA)."""
    cache: dict = {}
    out = []
    dma = Opcode.DMA
    for ins in program:
        if ins.op is not dma:
            out.append(None)
            continue
        key = (ins.fields["kind"], ins.fields["rows"])
        span = cache.get(key)
        if span is None:
            span = cache[key] = fetch.dma_port_cycles(cfg, ins)
        out.append(span)
    return out


def _late(t: np.ndarray, port: list, depth: int, start: int, words: int, lands: int
          ) -> np.ndarray:
    """Whether each fetched instruction (``start ..``) would be late in schedule ``t``
    as it stands: the fetcher in closed form. An instruction's first word may go once
    its slot is free: at once below ``depth``, else the cycle after instruction
    ``i - depth`` issued. The ``k``-th free port cycle is found
    through ranks (free cycles before a cycle); word ``h`` takes rank
    ``max over h' <= h of rank(gate[h']) + h - h'``, a running maximum."""
    is_dma = np.array([p is not None and p[0] <= p[1] for p in port], dtype=bool)
    idx = np.flatnonzero(is_dma)
    first = t[idx] + np.array([port[i][0] for i in idx], dtype=np.int64)
    last = t[idx] + np.array([port[i][1] for i in idx], dtype=np.int64)
    length = last - first + 1
    before = np.concatenate(([0], np.cumsum(length)))      # busy cycles before run j
    index = np.arange(start, len(t))
    free = np.where(index >= depth, t[np.maximum(index - depth, 0)] + 1, 0)
    gate = np.repeat(free, words)                            # per word
    k = np.searchsorted(first, gate, side="left")            # runs starting before gate
    # the last cycle of run k - 1 (a cycle long past for k = 0: no run before, or none
    # at all in a program without DMAs)
    last_before = np.concatenate(([-(1 << 40)], last))
    tail = np.maximum(last_before[k] - gate + 1, 0)
    rank = gate - (before[k] - tail)
    h = np.arange(len(gate), dtype=np.int64)
    q = np.maximum.accumulate(rank - h) + h
    runs = np.searchsorted(first - before[:-1], q, side="right")
    cycle = q + before[runs]
    ready = cycle[words - 1::words] + lands
    return ready > t[start:]


def _delayed_whole(program: list[isa.Instr], late_at, step: int) -> list[isa.Instr]:
    """`program` moved by the least multiple of `step` cycles after which no
    instruction is late (``late_at(shift)``): doubled until it is enough, then
    bisected."""
    hi = step
    while late_at(hi).any():
        hi *= 2
    lo = 0                          # late at lo, on time at hi
    while hi - lo > step:
        mid = (lo + hi) // (2 * step) * step
        if mid in (lo, hi):
            break
        lo, hi = (lo, mid) if not late_at(mid).any() else (mid, hi)
    return [replace(ins, cycle=ins.cycle + hi) for ins in program]


def delay_for_fetch(cfg: ChipConfig, program: list[isa.Instr],
                    fetch_from: int | None = None) -> list[isa.Instr]:
    """``program`` (sorted by issue cycle) with the fetch-late instructions and all
    after them delayed; the program itself when it is not fetched. ``fetch_from``:
    the PROG_FETCH register (None: its reset value, ``imem_depth``)."""
    depth, count = cfg.imem_depth, len(program)
    start = fetch.fetch_start(cfg, count, fetch_from)
    if start >= count:
        return program
    words = fetch.words_per_instruction(cfg)
    lands = fetch.ready_after(cfg)
    step = cfg.config_update_interval
    base = [ins.cycle for ins in program]
    port = _port_cycles(cfg, program)
    late_at = lambda shift: _late(np.array(base, dtype=np.int64) + shift, port, depth,
                                  start, words, lands)
    if not late_at(0).any():
        return program
    if count <= depth:
        return _delayed_whole(program, late_at, step)
    opens = _window_opens(cfg, program)
    # per index, the first SETCFG at or after it (count: none)
    next_cfg = [count] * (count + 1)
    for k in range(count - 1, -1, -1):
        next_cfg[k] = k if program[k].op in isa.SETCFGS else next_cfg[k + 1]

    t = [0] * count                  # issue cycles as placed
    shift = 0                        # delay of every instruction not placed yet ...
    redo: dict[int, int] = {}        # ... but those placed again after a cut back
    busy: list[tuple[int, int]] = []  # DMA port runs [first, last] of placed instructions
    # the fetcher's state before each instruction: (next run, free from, runs so far)
    state = [(0, 0, 0)] * count
    reach = [0] * count              # max(issue + last window opening) of those before
    late = [0] * count               # times each instruction was found late
    nxt, free_from, latest = 0, 0, -1
    i = 0

    def first_setcfg_cycle(cut: int) -> int:
        """The planned issue cycle of the first SETCFG at or after ``cut`` (``i``:
        the instruction found late, at ``ti``)."""
        s = next_cfg[cut]
        if s < i:
            return t[s]
        if s == i:
            return ti
        return base[s] + redo.get(s, shift) if s < count else 1 << 62

    while i < count:
        state[i] = (nxt, free_from, len(busy))
        reach[i] = latest
        ti = base[i] + redo.pop(i, shift)
        if i >= start:
            c = max(free_from, t[i - depth] + 1) if i >= depth else free_from
            for _ in range(words):
                while nxt < len(busy):
                    first, last = busy[nxt]
                    if last < c:
                        nxt += 1
                    elif first <= c:
                        c, nxt = last + 1, nxt + 1
                    else:
                        break
                c += 1
            ready = c - 1 + lands
            if ready > ti:
                late[i] += 1
                if late[i] > MAX_ROUNDS:
                    raise CompileError(
                        f"internal: instruction {i} "
                        f"({disasm.disassemble_one(program[i]).strip()}) stays late for the "
                        f"fetcher after {MAX_ROUNDS} delays; the instruction memory "
                        f"(imem_depth {depth}) is too shallow for this schedule")
                deficit = -(-(ready - ti) // step) * step
                # cut where no earlier instruction's window opens after the cycle of
                # the first SETCFG delayed with the cut (as planned now)
                cut = i
                while reach[cut] > first_setcfg_cycle(cut):
                    cut -= 1
                for j in list(redo):            # not placed yet, already delayed
                    redo[j] += deficit
                for j in range(cut, i + 1):     # placed (or about to be): again
                    redo[j] = (t[j] if j < i else ti) - base[j] + deficit
                shift += deficit
                nxt, free_from, runs = state[cut]
                del busy[runs:]
                latest = reach[cut]
                i = cut
                continue
            free_from = c
        t[i] = ti
        if port[i] is not None and port[i][0] <= port[i][1]:
            busy.append((ti + port[i][0], ti + port[i][1]))
        if opens[i] >= 0:
            latest = max(latest, ti + opens[i])
        i += 1
    if t == base:
        return program
    return [ins if ins.cycle == c else replace(ins, cycle=c) for ins, c in zip(program, t)]
