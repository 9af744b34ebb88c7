"""Random programs on the RTL against the golden model (``systolica.sim.randprog``).

Legal programs (compiler-scheduled random mixes of every instruction and mode, with
random routings and configuration updates) must leave the same DRAM, counters and
cycle count on the RTL as in the golden model; illegal ones (one rule broken) must
fault with the code, pc and cycle the golden model predicts. Each program comes from
one seed; a failure names it with the command that reproduces it. ``make test`` runs
a few dozen, ``make regress`` thousands, batched into few simulator processes.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from systolica.arch import fabric
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Opcode
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode
from systolica.sim import randprog

CFG = preset("tiny")
#: Mistakes this instruction set can express (CFG_IN_USE is the newest fault).
CATEGORIES = [c for c in randprog.CATEGORIES
              if c != "cfg_in_use" or hasattr(ErrorCode, "CFG_IN_USE")]
QUICK_LEGAL = range(0, 40)
QUICK_ILLEGAL = range(0, 5 * len(CATEGORIES))
#: make regress: (chip, kind, seeds), run in chunks of CHUNK programs per simulator.
#: ``tiny-tight`` limits configuration updates (interval 2, 2 pairs, 1 per domain).
#: 10,000 programs in all, a third of them illegal.
REGRESS = [("tiny", "legal", range(10_000, 16_000)), ("tiny", "illegal", range(20_000, 22_800)),
           ("tiny-tight", "legal", range(30_000, 30_700)),
           ("tiny-tight", "illegal", range(40_000, 40_500))]
CHUNK = 100


def legal(seeds, cfg=CFG) -> list[randprog.RandomProgram]:
    return [randprog.legal(cfg, s) for s in seeds]


def illegal(seeds, cfg=CFG) -> list[randprog.RandomProgram]:
    return [randprog.illegal(cfg, s, CATEGORIES[s % len(CATEGORIES)]) for s in seeds]


def check(progs: list[randprog.RandomProgram]) -> None:
    failures = randprog.check_on_rtl(progs)
    assert not failures, (f"{len(failures)} of {len(progs)} random programs differ "
                          f"between RTL and golden model:\n" + "\n".join(failures))


# -- the generator itself (pure Python) ------------------------------------------------
def test_a_seed_gives_one_program():
    a, b = randprog.legal(CFG, 7), randprog.legal(CFG, 7)
    assert a.image == b.image and np.array_equal(a.dram, b.dram)
    assert a.image != randprog.legal(CFG, 8).image
    c, d = randprog.illegal(CFG, 7, "unit_busy"), randprog.illegal(CFG, 7, "unit_busy")
    assert c.image == d.image and c.expect == d.expect


def test_legal_programs_cover_every_instruction_mode_and_multiplexer():
    # (the general lanes are routed for ROUTEs: turns, skip links on the paths, any
    # source off them)
    seen = Counter()
    table = fabric.muxes(CFG)
    for prog in legal(QUICK_LEGAL):
        for ins in prog.program:
            f = ins.fields
            if ins.op is Opcode.DMA:
                seen[DmaKind(f["kind"]).name] += 1
                seen["dma stride " + ("0" if f["dram_stride"] == 0 else "other")] += 1
            elif ins.op is Opcode.MATMUL:
                seen[f"matmul accumulate={f['accumulate']}"] += 1
                seen[f"matmul conv={f['conv']}"] += 1
                seen[f"matmul early={min(f['early'], 1)}"] += 1
                if f["accumulate"] and f["max"]:
                    seen["matmul max"] += 1
            elif ins.op is Opcode.VRUN:
                for k in ("to_acc", "requant", "relu", "use_bias", "crop"):
                    seen[f"vrun {k}={f[k]}"] += 1
            elif ins.op is Opcode.COPY:
                seen[f"COPY {randprog.CopyKind(f['kind']).name}"] += 1
            elif ins.op is Opcode.SETCFG:
                for index, value in randprog.isa.setcfg_pairs(f):
                    if value != table[index].default:
                        seen["routed " + table[index].name.split("[")[0]] += 1
            else:
                seen[ins.op.name] += 1
    want = {k.name for k in DmaKind} | {"WLOAD", "dma stride 0", "dma stride other"} \
        | {f"matmul accumulate={v}" for v in (0, 1)} \
        | {f"matmul conv={v}" for v in (0, 1)} | {"matmul max", "CONVCFG", "TAPS"} \
        | {f"matmul early={v}" for v in (0, 1)} \
        | {"COPY CROP", "COPY FETCH"} \
        | {f"vrun {k}={v}" for k in ("to_acc", "requant", "relu", "use_bias", "crop")
           for v in (0, 1)} \
        | {"routed " + m.name.split("[")[0] for m in table if m.name[:7] != "psum_in"} \
        | {"routed psum_in", "ROUTE"}
    assert want <= set(seen), f"never generated: {sorted(want - set(seen))}"


@pytest.mark.parametrize("seeds", [range(4), pytest.param(range(4, 30), marks=pytest.mark.slow)],
                         ids=["first", "more"])
@pytest.mark.parametrize("category", CATEGORIES)
def test_illegal_programs_fault_where_they_were_broken(category, seeds):
    for seed in seeds:
        prog = randprog.illegal(CFG, seed, category)
        gold = randprog.expected(prog)
        assert (gold.error, gold.fault_pc, gold.fault_cycle) == prog.expect, \
            f"seed {seed}: {prog.note}; reproduce: {prog.reproduce()}"


# -- on the RTL ----------------------------------------------------------------------------
@pytest.mark.rtl
def test_random_legal_programs_match_golden():
    check(legal(QUICK_LEGAL))


@pytest.mark.rtl
def test_random_illegal_programs_fault_like_golden():
    check(illegal(QUICK_ILLEGAL))


@pytest.mark.regress
@pytest.mark.rtl
@pytest.mark.parametrize("chip, kind, first", [
    pytest.param(chip, kind, first, id=f"{chip}-{kind}-{first}")
    for chip, kind, seeds in REGRESS for first in seeds[::CHUNK]])
def test_regress_random_programs(chip, kind, first):
    seeds = dict(((c, k), s) for c, k, s in REGRESS)[chip, kind]
    chunk = range(first, min(first + CHUNK, seeds.stop))
    check((legal if kind == "legal" else illegal)(chunk, randprog.config(chip)))


# -- found on the way ------------------------------------------------------------------------
@pytest.mark.parametrize("fields, rule", [
    (dict(src=0, rows=4, dst=8, bias_addr=CFG.acc_depth, use_bias=0, to_acc=1), "runs past"),
    (dict(src=0, rows=30, dst=10, to_acc=1), "start inside the source"),
])
def test_compiler_rejects_vrun_the_chip_does_not_run_as_written(fields, rule):
    """An unused but out-of-range bias address faults ADDR_RANGE on the chip; a VRUN
    into the ACC whose destination starts inside its source (dst = src + 10 here)
    reads rows it has already rewritten on the RTL, unlike the golden model."""
    from systolica.compiler.errors import CompileError
    from systolica.compiler.microops.ir import make
    with pytest.raises(CompileError, match=rule):
        make(CFG, Opcode.VRUN, **fields)
    for ok in (dict(fields, bias_addr=0, dst=0), dict(fields, bias_addr=0, dst=30)):
        make(CFG, Opcode.VRUN, **ok)      # in place, or disjoint: as lowering does


def test_golden_model_rejects_a_vrun_reading_rows_it_rewrote():
    """dst = src + 10: the RTL writes row 10 in the cycle it reads row 4 and later
    reads the new row 10; the golden model's scoreboard used to exempt an
    instruction's own reads, and computed from the old rows."""
    from systolica import golden
    from systolica.arch import isa, timing
    from systolica.arch.isa import Instr
    from systolica.compiler.scheduling.verify import ScheduleError, verify
    load = Instr(Opcode.DMA, 0, dict(kind=DmaKind.LOAD_ACC, dram_addr=0, dram_stride=4,
                                     buf_addr=0, rows=40))
    vrun = Instr(Opcode.VRUN, timing.done(CFG, load), dict(
        src=0, rows=30, dst=10, bias_addr=0, use_bias=0, to_acc=1, requant=0, relu=0,
        mult=0, shift=0, zp=0))
    image = isa.to_bytes([isa.encode(load), isa.encode(vrun)])
    with pytest.raises(golden.GoldenError, match="its own read"):
        golden.run(CFG, Loadable.for_chip(CFG, image,
                                          np.zeros((CFG.dram_words, CFG.rows), np.uint8)))
    with pytest.raises(ScheduleError, match="pc 1 .*its own read"):
        verify(CFG, [load, vrun])
    in_place = Instr(vrun.op, vrun.cycle, dict(vrun.fields, dst=0))
    assert verify(CFG, [load, in_place]) == timing.run_cycles(CFG, [load, in_place])
