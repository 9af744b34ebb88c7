"""The schedule verifier rejects deliberately broken schedules, naming the
instruction (pc and disassembly) and the rule it breaks; a compiled program passes."""

from __future__ import annotations

import dataclasses

import pytest

from systolica.app import demo
from systolica.arch import fabric, isa
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Instr, Opcode
from systolica.compiler import compile_network
from systolica.compiler.scheduling.verify import ScheduleError, check_regions, verify

CFG = preset("tiny")
R, M = CFG.rows, 8
ACT = CFG.cbuf_bank_rows + 8        # activations in the bank after the weights'
MUX = fabric.by_name(CFG)


def _good():
    """Load weights, WLOAD them, load activations, MATMUL, VRUN to CBUF, store: each
    at the earliest cycle its inputs are ready, worked out by hand from the pipeline
    (docs/contract.md): a CBUF row loaded by a DMA issued at t is written in t+2+i; a
    WLOAD issued at t reads its rows from t+1 (bottom row first) and shifts its bank
    in t+2 .. t+10; a MATMUL issued at t reads its bank from t+2 and writes ACC row i
    in t+21+i; a VRUN issued at t reads ACC row i in t+2+i and writes it in t+6+i."""
    def at(cycle, op, **f):
        return Instr(op, cycle, {name: f.get(name, 0) for name, _ in isa.PAYLOAD[op]})
    load = dict(kind=DmaKind.LOAD_CBUF, dram_stride=1)
    return [
        at(0, Opcode.DMA, dram_addr=0, buf_addr=0, rows=R, **load),       # weights
        at(9, Opcode.WLOAD, w_addr=0, bank=0),                            # row 7 in at 9
        at(10, Opcode.DMA, dram_addr=8, buf_addr=ACT, rows=M, **load),    # activations
        at(18, Opcode.MATMUL, act_addr=ACT, rows=M, acc_addr=0, accumulate=0, bank=0),
        at(38, Opcode.VRUN, src=0, rows=M, dst=32, requant=1, mult=1),
        at(44, Opcode.DMA, kind=DmaKind.STORE_CBUF, dram_addr=64, buf_addr=32, rows=M,
           dram_stride=1),
    ]


def _moved(program, pc, delta):
    out = list(program)
    out[pc] = dataclasses.replace(out[pc], cycle=out[pc].cycle + delta)
    return sorted(out, key=lambda i: i.cycle)


def test_hand_schedule_is_tight_and_passes():
    program = _good()
    assert verify(CFG, program) == program[-1].cycle + M + 2
    # every instruction but the first sits at its earliest legal cycle
    for pc in range(1, len(program)):
        with pytest.raises(ScheduleError):
            verify(CFG, _moved(program, pc, -1))


def test_compiled_program_passes():
    c = compile_network(CFG, demo.mlp())
    assert verify(CFG, c.program) == c.predicted_cycles


BROKEN = {
    # name: (program transform, words the message must contain)
    "WLOAD before its rows are loaded": (
        lambda p: _moved(p, 1, -1), ["pc 1", "WLOAD", "read before write", "cbuf[7]",
                                     "1 cycle(s) later"]),
    "MATMUL before its weights are in": (
        lambda p: _moved(p, 3, -1), ["pc 3", "MATMUL", "read before write", "wbank0"]),
    "VRUN before the sums are written": (
        lambda p: _moved(p, 4, -3), ["pc 4", "VRUN", "read before write", "acc["]),
    "store before the vector unit wrote": (
        lambda p: _moved(p, 5, -1), ["pc 5", "DMA", "read before write", "cbuf[32]"]),
    "store of CBUF rows nothing wrote": (
        lambda p: [*p[:5], dataclasses.replace(p[5], fields={**p[5].fields, "buf_addr": 40})],
        ["pc 5", "DMA", "unwritten read", "cbuf[40]", "a reset does not clear the CBUF"]),
    "VRUN of ACC rows no MATMUL wrote": (
        lambda p: [*p[:4], dataclasses.replace(p[4], fields={**p[4].fields, "src": M}), p[5]],
        ["pc 4", "VRUN", "unwritten read", f"acc[{M}]"]),
    "DMA while the DMA unit is busy": (
        lambda p: _moved(p, 2, -2), ["pc 1", "UNIT_BUSY", "dma unit", "cycle 9"]),
    "instruction out of order": (
        lambda p: [p[0], dataclasses.replace(p[2], cycle=p[1].cycle), p[1], *p[3:]],
        ["LATE", "reaches issue"]),
    "range past the CBUF": (
        lambda p: [dataclasses.replace(p[0], fields={**p[0].fields,
                                                     "buf_addr": CFG.cbuf_depth - 2}), *p[1:]],
        ["pc 0", "ADDR_RANGE", "cbuf range", f"{CFG.cbuf_depth} rows"]),
    "rows = 0": (
        lambda p: [*p[:3], dataclasses.replace(p[3], fields={**p[3].fields, "rows": 0}),
                   *p[4:]], ["pc 3", "ADDR_RANGE", "rows = 0"]),
    "overwrite rows a MATMUL still reads": (
        lambda p: sorted(p + [Instr(Opcode.DMA, 19, dict(kind=DmaKind.LOAD_CBUF, dram_addr=0,
                                                          dram_stride=1, buf_addr=ACT + 6,
                                                          rows=2))],
                         key=lambda i: i.cycle),
        ["pc 4", "write before read", f"cbuf[{ACT + 6}]", "pc 3 (issued earlier)"]),
    "weight loader and feeder on one bank's read port": (
        lambda p: [*p[:2], dataclasses.replace(p[2], fields={**p[2].fields, "buf_addr": 8}),
                   dataclasses.replace(p[3], fields={**p[3].fields, "act_addr": 8},
                                       cycle=p[3].cycle - 1), *p[4:]],
        ["BANK_CONFLICT in cycle 19", "mm unit (pc 3)", "wload unit (pc 1)",
         "read port of CBUF bank 0"]),
    "SETCFG inside a MATMUL's window": (
        lambda p: sorted(p + [Instr(Opcode.SETCFG, 22, isa.setcfg_fields(
            [(MUX["west_feed[0]"].index, 0)]))], key=lambda i: i.cycle),
        ["CFG_IN_USE", "west_feed[0]", "pc 3"]),
    "too many updates in one SETCFG": (
        lambda p: [Instr(Opcode.SETCFG, 0, isa.setcfg_fields([(k, 0) for k in range(5)])),
                   *[dataclasses.replace(i, cycle=i.cycle + 1) for i in p]],
        ["pc 0", "CFG_LIMIT", "5 updates", "at most 4"]),
    "SETCFG naming no multiplexer": (
        lambda p: [Instr(Opcode.SETCFG, 0, isa.setcfg_fields([(100, 0)])),
                   *[dataclasses.replace(i, cycle=i.cycle + 1) for i in p]],
        ["pc 0", "CFG_RANGE", "no multiplexer 100"]),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_schedule_is_rejected(case):
    transform, words = BROKEN[case]
    with pytest.raises(ScheduleError) as err:
        verify(CFG, transform(_good()))
    for w in words:
        assert w in str(err.value), (w, str(err.value))


# -- writes inside the memory plan ---------------------------------------------------------
def _free_row(c, memory: str) -> int:
    """A row of `memory` that no region of the plan holds in any layer."""
    depth = {"cbuf": c.cfg.cbuf_depth, "acc": c.cfg.acc_depth}[memory]
    held = [(r.lo, r.hi) for r in c.plan.regions if r.memory == memory]
    return next(a for a in range(depth) if not any(lo <= a < hi for lo, hi in held))


def _first(c, op, **match):
    return next(pc for pc, i in enumerate(c.program) if i.op is op
                and all(i.fields[k] == v for k, v in match.items()))


def _with(c, pc, **fields):
    out = list(c.program)
    out[pc] = dataclasses.replace(out[pc], fields={**out[pc].fields, **fields})
    return out


@pytest.mark.parametrize("demo_net", ["mlp", "concat", "cnn"])
def test_compiled_programs_write_inside_their_plan(demo_net):
    c = compile_network(CFG, getattr(demo, demo_net)())
    check_regions(CFG, c.plan.regions, c.program, c.layer_of)


def test_writes_outside_the_plan_are_rejected():
    """A VRUN into CBUF rows and DMA stores into DRAM words that no region holds: each
    is named, though the replay alone passes them (the rows are free). (The MLP's plan
    holds every ACC row: its halves and bias slots.)"""
    c = compile_network(CFG, demo.mlp())
    vrun = _first(c, Opcode.VRUN, to_acc=0)
    stores = [pc for pc, i in enumerate(c.program) if i.op is Opcode.DMA
              and i.fields["kind"] == DmaKind.STORE_CBUF]
    broken = [(_with(c, vrun, dst=_free_row(c, "cbuf")), vrun, "CBUF rows")]
    # every copy of a store is checked, not only the first of its shape: the last
    # store, moved past the DRAM regions, is caught too
    for pc in (stores[0], stores[-1]):
        broken.append((_with(c, pc, dram_addr=CFG.dram_words - 64), pc, "DRAM rows"))
    for program, pc, words in broken:
        with pytest.raises(ScheduleError) as err:
            check_regions(CFG, c.plan.regions, program, c.layer_of)
        for w in (f"pc {pc}", words, "outside every region"):
            assert w in str(err.value), (w, str(err.value))
