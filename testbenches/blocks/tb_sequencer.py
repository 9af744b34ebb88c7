"""Sequencer (``tiny`` preset): a program written through ``ctrl.imem``, then run.

:func:`reference` is the sequencer of ``docs/contract.md`` in Python: where each
instruction issues, which fault stops the run (``PROG_RANGE``, ``ILLEGAL_OPCODE``,
``LATE``, ``UNIT_BUSY``, ``ADDR_RANGE``, ``CFG_RANGE``, ``CFG_LIMIT``, ``CFG_IN_USE``,
checked in that order) at which cycle, and when the run ends. A case may raise
``bank_conflict`` (the CBUF crossbar's flag) in chosen run cycles: the first one while
running, before the run's end, is a ``BANK_CONFLICT`` fault the cycle after, before
the head's own faults there; in the conflict's cycle itself the head issues or faults
as without it (``FAULT_PC`` counts the instructions issued up to that cycle). The testbench's unit
models hold each issue port's ``ready`` low for the instruction's ``timing.occupancy``
(plus any cycles a case forces it low) and its ``drained`` low until
``t + timing.done``. The checker requires every ``valid`` strobe on the right unit
exactly at the instruction's cycle with its payload, no other strobe, the ``fault``
or ``done`` pulse at the reference's cycle, and ``error``, ``fault_pc`` and ``cycle``
(frozen) to match afterwards.
"""

from __future__ import annotations

import os

import cocotb

from systolica.arch import fabric, fetch, isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import CopyKind, DmaKind, Instr, Opcode
from systolica.arch.regs import ErrorCode

from tb_base import BlockTB, case_names

#: The tiny preset; the pytest side may ask for another configuration-update interval
#: (a separate build) to check the interval rule.
CFG = preset("tiny").replace(
    config_update_interval=int(os.environ.get("SEQ_UPDATE_INTERVAL", "1")))
#: The sequencer's issue ports (``<unit>__valid``, ``__payload``, ``__ready``,
#: ``__drained``); ``fabric`` has no handshake.
UNIT_OF = {Opcode.DMA: "dma", Opcode.WLOAD: "wload", Opcode.MATMUL: "mm",
           Opcode.VRUN: "vpu", Opcode.COPY: "ubuf", Opcode.ROUTE: "lanes",
           Opcode.SETCFG: "fabric"}
UNITS = tuple(UNIT_OF.values())
BUSY_UNITS = UNITS[:-1]
HEADER_BITS = isa.WORD_BITS - isa.PAYLOAD_BITS


def I(op, cycle, **fields):  # noqa: E743  (I for instruction, as in the listings)
    return Instr(op, cycle, fields)


def raw(opcode: int, cycle: int) -> int:
    """A program word with an opcode outside the ISA."""
    return opcode | cycle << 4


def in_range(ins: Instr) -> bool:
    """The ADDR_RANGE rule of docs/contract.md."""
    f = ins.fields
    if ins.op is Opcode.DMA:
        acc = f["kind"] in (DmaKind.LOAD_ACC, DmaKind.STORE_ACC)
        w = CFG.acc_row_words if acc else 1
        return (f["rows"] != 0
                and f["dram_addr"] + (f["rows"] - 1) * f["dram_stride"] + w <= CFG.dram_words
                and f["buf_addr"] + f["rows"] <= (CFG.acc_depth if acc else CFG.cbuf_depth))
    if ins.op is Opcode.WLOAD:
        return f["w_addr"] + CFG.rows <= CFG.cbuf_depth
    if ins.op is Opcode.MATMUL:      # a conv reads its tile's in_h * in_w pixels
        span = f.get("in_h", 0) * f.get("in_w", 0) if f.get("conv") else f["rows"]
        return (f["rows"] != 0 and span != 0 and f["act_addr"] + span <= CFG.cbuf_depth
                and f["acc_addr"] + f["rows"] <= CFG.acc_depth)
    if ins.op is Opcode.VRUN:
        return (f["rows"] != 0 and f["src"] + f["rows"] <= CFG.acc_depth
                and f["bias_addr"] + (4 if f.get("params") else 1) <= CFG.acc_depth
                and f["dst"] + f["rows"] <= (CFG.acc_depth if f["to_acc"] else CFG.cbuf_depth)
                and (not f.get("crop") or f["rows"] <= CFG.ubuf_rows))
    if ins.op is Opcode.COPY:
        return (f["rows"] != 0 and f["cbuf_addr"] + f["rows"] <= CFG.cbuf_depth
                and f["ubuf_addr"] + f["rows"] <= CFG.ubuf_rows)
    return True


def defined(ins: Instr) -> bool:
    """ILLEGAL_OPCODE also for fields the opcode does not define: a VRUN with
    ``params`` needs ``requant`` and neither ``to_acc`` nor ``relu``; one with ``crop``
    needs ``to_acc = 0`` and a destination outside the UBUF."""
    f = ins.fields
    if ins.op is not Opcode.VRUN:
        return True
    if f.get("params") and (not f.get("requant") or f.get("to_acc") or f.get("relu")):
        return False
    outside = (f["dst"] + f["rows"] <= CFG.ubuf_base
               or f["dst"] >= CFG.ubuf_base + CFG.ubuf_rows)
    return not f.get("crop") or (not f["to_acc"] and outside)


def cfg_ok(ins: Instr) -> bool:
    """CFG_RANGE: every pair names a multiplexer and one of its sources."""
    if ins.op is not Opcode.SETCFG:
        return True
    muxes = fabric.muxes(CFG)
    return all(i < len(muxes) and v < len(muxes[i].sources)
               for i, v in isa.setcfg_pairs(ins.fields))


def cfg_limits_ok(ins: Instr) -> bool:
    """CFG_LIMIT: pairs per SETCFG, the update interval, the power-domain budget."""
    if ins.op is not Opcode.SETCFG:
        return True
    pairs = isa.setcfg_pairs(ins.fields)
    domains = [fabric.muxes(CFG)[i].domain for i, _ in pairs]
    return (len(pairs) <= CFG.max_config_updates_per_cycle
            and ins.cycle % CFG.config_update_interval == 0
            and all(domains.count(d) <= CFG.power_domain_budget for d in domains))


def in_use(ins: Instr, issued: list[Instr]) -> bool:
    """CFG_IN_USE: a pair of a SETCFG issued at ``u`` names a multiplexer that an
    earlier instruction issued at ``t`` uses, ``t + lo <= u < t + hi - 1`` with
    ``(lo, hi) = timing.mux_use``."""
    if ins.op is not Opcode.SETCFG:
        return False
    muxes = fabric.muxes(CFG)
    for index, _ in isa.setcfg_pairs(ins.fields):
        for prev in issued:
            use = timing.mux_use(CFG, prev, muxes[index].name)
            if use and prev.cycle + use[0] <= ins.cycle < prev.cycle + use[1] - 1:
                return True
    return False


def payload_bits(word: int, op: Opcode) -> int:
    """What the issue port of ``op``'s unit carries: the payload, cut to its layout."""
    return (word >> HEADER_BITS) & ((1 << isa.PAYLOAD[op].size) - 1)


def reference(imem: dict, prog_len: int, held_low: dict) -> dict:
    """Issue cycles, the fault (code, pc, cycle) or None, and the end cycle, for the
    program memory ``imem`` (pc -> word; unwritten words are 0); ``held_low``
    ``["conflict"]`` holds the cycles in which the CBUF reports a bank conflict."""
    ref = _reference(imem, prog_len, held_low)
    if ref["fault"] and ref["fault"][0] is ErrorCode.PROG_RANGE:
        return ref                                  # checked first, at cycle 0
    # a conflict in the run's last cycle (its fault or its end) comes too late
    hits = sorted(c for c in held_low.get("conflict", ()) if c < ref["end"])
    if not hits:
        return ref
    k = hits[0]
    issues = [i for i in ref["issues"] if i[0] <= k]
    return {"issues": issues, "fault": (ErrorCode.BANK_CONFLICT, len(issues), k + 1),
            "end": k + 1}


def _reference(imem: dict, prog_len: int, held_low: dict) -> dict:
    issues = []
    # PROG_ADDR stays 0: a program longer than the memory is fetched from DRAM word
    # 0 on, and PROG_RANGE says its region runs past the end of the DRAM
    if prog_len > CFG.imem_depth and \
            prog_len * fetch.words_per_instruction(CFG) > CFG.dram_words:
        return {"issues": [], "fault": (ErrorCode.PROG_RANGE, 0, 0), "end": 0}
    arrive, free, end = 0, dict.fromkeys(UNITS, 0), 0
    issued: list[Instr] = []
    for pc in range(prog_len):
        word = imem.get(pc, 0)
        ins = isa.decode(word)
        if ins.op is Opcode.ILLEGAL or not defined(ins):
            return {"issues": issues, "fault": (ErrorCode.ILLEGAL_OPCODE, pc, arrive),
                    "end": arrive}
        if ins.cycle < arrive:
            return {"issues": issues, "fault": (ErrorCode.LATE, pc, arrive), "end": arrive}
        t, unit = ins.cycle, UNIT_OF[ins.op]
        if free[unit] > t or t in held_low.get(unit, ()):
            return {"issues": issues, "fault": (ErrorCode.UNIT_BUSY, pc, t), "end": t}
        if not in_range(ins):
            return {"issues": issues, "fault": (ErrorCode.ADDR_RANGE, pc, t), "end": t}
        if not cfg_ok(ins):
            return {"issues": issues, "fault": (ErrorCode.CFG_RANGE, pc, t), "end": t}
        if not cfg_limits_ok(ins):
            return {"issues": issues, "fault": (ErrorCode.CFG_LIMIT, pc, t), "end": t}
        if in_use(ins, issued):
            return {"issues": issues, "fault": (ErrorCode.CFG_IN_USE, pc, t), "end": t}
        issues.append((t, unit, payload_bits(word, ins.op)))
        issued.append(ins)
        free[unit] = t + timing.occupancy(CFG, ins)
        end = max(end, t + timing.done(CFG, ins))
        arrive = t + 1
    return {"issues": issues, "fault": None, "end": max(arrive, end)}


# -- cases: (program, prog_len or None for len(program), units held low) ---------------
def dma(cycle, kind=DmaKind.LOAD_CBUF, dram_addr=0, stride=1, buf=0, rows=4):
    return I(Opcode.DMA, cycle, kind=int(kind), dram_addr=dram_addr, dram_stride=stride,
             buf_addr=buf, rows=rows)


def wload(cycle, w_addr=0, bank=0):
    return I(Opcode.WLOAD, cycle, w_addr=w_addr, bank=bank)


def matmul(cycle, act=0, rows=4, acc=0, accumulate=0, bank=0, **kw):
    return I(Opcode.MATMUL, cycle, act_addr=act, rows=rows, acc_addr=acc,
             accumulate=accumulate, bank=bank, **kw)


def vrun(cycle, src=0, rows=4, dst=0, bias=0, to_acc=0, **kw):
    return I(Opcode.VRUN, cycle, src=src, rows=rows, dst=dst, bias_addr=bias,
             to_acc=to_acc, **kw)


def copy(cycle, kind=CopyKind.CROP, cbuf=0, ubuf=0, rows=4):
    return I(Opcode.COPY, cycle, kind=int(kind), cbuf_addr=cbuf, ubuf_addr=ubuf, rows=rows)


def setcfg_pairs(cycle, pairs):
    return Instr(Opcode.SETCFG, cycle, isa.setcfg_fields(pairs))


def setcfg(cycle, index=0, value=0):
    return I(Opcode.SETCFG, cycle, index=index, value=value)


D, A, Cb, Rr = CFG.dram_words, CFG.acc_depth, CFG.cbuf_depth, CFG.rows
W = CFG.acc_row_words
U = CFG.ubuf_rows
MUX = fabric.by_name(CFG)


def touch(cycle, *names):
    """A SETCFG naming the multiplexers ``names``, each set to its reset value: naming
    one in use faults whatever the value."""
    return setcfg_pairs(cycle, [(MUX[n].index, MUX[n].default) for n in names])


#: An instruction of each opcode whose data passes multiplexers, and some of those.
USERS = {
    "mm": (matmul(3, rows=5), ("west_feed[1]", "act_in[1][1]", "psum_in[1][0]", "acc_src[0]")),
    "wload": (wload(3), ("north_feed[0]", "w_in[1][1]")),
    "vrun": (vrun(3, rows=4), ("wb_src[1]",)),
}


def in_use_cases() -> dict:
    """A SETCFG just before, at the first and the last cycle of, and just after the
    window (``timing.mux_use``) in which each user holds each of its multiplexers."""
    cases = {}
    for ins, names in USERS.values():
        for name in names:
            lo, hi = timing.mux_use(CFG, ins, name)
            t = ins.cycle
            for where, u in (("before", t + lo - 1), ("first", t + lo),
                             ("last", t + hi - 2), ("after", t + hi - 1)):
                cases[f"in_use_{name}_{where}"] = ([ins, touch(u, name)], None, {})
    return cases

CASES = {
    # Issue timing.
    "every_unit": ([dma(0, rows=6), wload(3, w_addr=8), setcfg(4, 5, 1),
                    matmul(20, act=100, rows=9, acc=2), vrun(40, src=2, rows=9, dst=300,
                                                            mult=300, shift=3, zp=9),
                    setcfg(41, 19, 2), dma(60, DmaKind.STORE_ACC, 1000, 4, 2, 9),
                    copy(62, rows=5), copy(67, CopyKind.FETCH, 40, 3, 2)], None, {}),
    "back_to_back": ([dma(0, rows=2), wload(1), matmul(2), vrun(3), setcfg(4, 1, 1),
                      setcfg(5, 2, 0), dma(6, rows=1), wload(12)], None, {}),
    "at_occupancy": ([dma(0, rows=5), dma(6, DmaKind.LOAD_ACC, rows=2),
                      dma(6 + 2 * W + 1, DmaKind.STORE_CBUF, rows=1),
                      wload(0 + 30), wload(30 + timing.weight_shifts(CFG)),
                      matmul(60, rows=3), matmul(63, rows=1), vrun(80, rows=2), vrun(83)],
                     None, {}),
    "late_start": ([setcfg(1000, 3, 1)], None, {}),
    "empty": ([], None, {}),
    "prog_len_short": ([setcfg(2, 0, 1), raw(0, 0)], 1, {}),
    # Faults.
    "illegal_first": ([raw(0, 0)], None, {}),
    "illegal_later": ([setcfg(5), dma(10), raw(12, 50)], None, {}),
    "illegal_high": ([setcfg(1), raw(15, 2)], None, {}),
    "late": ([dma(10), setcfg(10)], None, {}),
    "late_by_arrival": ([setcfg(7), wload(20), setcfg(20)], None, {}),
    "busy_occupancy": ([dma(0, rows=10), dma(5)], None, {}),
    "busy_before_occupancy": ([dma(0, DmaKind.LOAD_ACC, rows=3), dma(3 * W)], None, {}),
    "busy_wload": ([wload(0), wload(timing.weight_shifts(CFG) - 1)], None, {}),
    "busy_held_mm": ([matmul(3), matmul(11)], None, {"mm": {10, 11, 12}}),
    "busy_held_vpu": ([vrun(7)], None, {"vpu": {7}}),
    "busy_held_dma_other_cycle": ([dma(7)], None, {"dma": {6, 8}}),
    "busy_before_range": ([dma(0, rows=10), dma(5, rows=0)], None, {}),
    "illegal_before_late": ([dma(10), raw(6, 3)], None, {}),
    "prog_range": ([setcfg(0)], CFG.dram_words // fetch.words_per_instruction(CFG) + 1, {}),
    "prog_len_max": ([setcfg(0), setcfg(1), setcfg(2)], CFG.imem_depth, {}),
    "cfg_index": ([setcfg(2, len(fabric.muxes(CFG)), 0)], None, {}),
    "cfg_value": ([setcfg(2, 4, 2)], None, {}),
    # tiny: edge muxes are 0-3 and 16-19, tile row 0 muxes 4, 5, 8, 9, 12, 13
    "cfg_pairs_ok": ([setcfg_pairs(2, [(0, 1), (4, 1), (6, 1), (16, 0)])], None, {}),
    "cfg_too_many_pairs": ([setcfg_pairs(2, [(0, 1), (4, 1), (6, 1), (8, 1), (10, 1)])],
                           None, {}),
    "cfg_domain_budget": ([setcfg_pairs(3, [(0, 1), (1, 1), (2, 0)])], None, {}),
    "cfg_bad_later_pair": ([setcfg_pairs(3, [(0, 1), (1, 1), (4, 9)])], None, {}),
    # page 1 (multiplexers 128..255) holds none of tiny's: its index 0 is not mux 0
    "cfg_page": ([setcfg_pairs(3, [(128, 0)])], None, {}),
    "cfg_later_page": ([setcfg_pairs(2, [(0, 1)]), setcfg_pairs(4, [(129, 0), (131, 1)])],
                       None, {}),
    "cfg_interval_on": ([setcfg(0, 0, 1), dma(1), setcfg(3, 1, 1), setcfg(6, 2, 0)], None, {}),
    "cfg_interval_off": ([setcfg(3, 0, 1), setcfg(4, 1, 1)], None, {}),
    "cfg_value_ok": ([setcfg(2, 0, 2), setcfg(3, 19, 2)], None, {}),
    # ADDR_RANGE: each rule, one past the limit, and the exact fit before it.
    "dma_rows0": ([dma(1, rows=0)], None, {}),
    "dma_dram_fit": ([dma(1, DmaKind.LOAD_ACC, D - W - 3, 3, 0, 2)], None, {}),
    "dma_dram_over": ([dma(1, DmaKind.LOAD_ACC, D - W - 2, 3, 0, 2)], None, {}),
    "dma_dram_stride": ([dma(1, DmaKind.STORE_CBUF, 0, 0xFFFF, 0, 2)], None, {}),
    # the DRAM range's end with a stride: exactly at it, one word past it; one row at
    # the last word (its stride does not count) and at the first word past the end;
    # a product past the check's low bits whose low bits alone would fit
    "dma_dram_strided_fit": ([dma(1, DmaKind.LOAD_CBUF, D - 4 * 13 - 1, 13, 0, 5)], None, {}),
    "dma_dram_strided_over": ([dma(1, DmaKind.STORE_CBUF, D - 4 * 13, 13, 0, 5)], None, {}),
    "dma_dram_last_word": ([dma(1, DmaKind.LOAD_CBUF, D - 1, 0xFFFF, 0, 1)], None, {}),
    "dma_dram_past_end": ([dma(1, DmaKind.STORE_CBUF, D, 0, 0, 1)], None, {}),
    "dma_dram_stride0_fit": ([dma(1, DmaKind.LOAD_CBUF, D - 1, 0, 0, 64)], None, {}),
    "dma_dram_product_wide": ([dma(1, DmaKind.LOAD_CBUF, 0, 129, 0, 1024)], None, {}),
    "dma_cbuf_fit": ([dma(1, DmaKind.STORE_CBUF, 0, 1, Cb - 4, 4)], None, {}),
    "dma_cbuf_over": ([dma(1, DmaKind.LOAD_CBUF, 0, 1, Cb - 3, 4)], None, {}),
    "dma_acc_over": ([dma(1, DmaKind.STORE_ACC, 0, W, A - 3, 4)], None, {}),
    "dma_acc_fit": ([dma(1, DmaKind.STORE_ACC, 0, W, A - 4, 4)], None, {}),
    "wload_fit": ([wload(1, Cb - Rr)], None, {}),
    "wload_over": ([wload(1, Cb - Rr + 1)], None, {}),
    "matmul_rows0": ([matmul(1, rows=0)], None, {}),
    "matmul_act_over": ([matmul(1, act=Cb - 3, rows=4)], None, {}),
    "matmul_acc_over": ([matmul(1, acc=A - 3, rows=4)], None, {}),
    "matmul_fit": ([matmul(1, act=Cb - 4, acc=A - 4, rows=4)], None, {}),
    # a conv's tile of in_h x in_w pixels: exactly at the CBUF's end, one past it, a
    # tile larger than the CBUF, and an empty tile
    "matmul_conv_fit": ([matmul(1, act=Cb - 35, conv=1, in_h=5, in_w=7)], None, {}),
    "matmul_conv_over": ([matmul(1, act=Cb - 34, conv=1, in_h=5, in_w=7)], None, {}),
    "matmul_conv_large": ([matmul(1, conv=1, in_h=64, in_w=64)], None, {}),
    "matmul_conv_empty": ([matmul(1, conv=1, in_h=0, in_w=9)], None, {}),
    "copy_fit": ([copy(1, CopyKind.FETCH, Cb - 4, U - 4, 4)], None, {}),
    "copy_ubuf_over": ([copy(1, ubuf=U - 3, rows=4)], None, {}),
    "copy_cbuf_over": ([copy(1, CopyKind.FETCH, Cb - 3, 0, 4)], None, {}),
    "copy_rows0": ([copy(1, rows=0)], None, {}),
    "vrun_crop_fit": ([vrun(1, dst=CFG.ubuf_base - 4, crop=1)], None, {}),
    "vrun_crop_in_ubuf": ([vrun(1, dst=CFG.ubuf_base - 3, crop=1)], None, {}),
    "vrun_crop_to_acc": ([vrun(1, to_acc=1, crop=1)], None, {}),
    "vrun_rows0": ([vrun(1, rows=0)], None, {}),
    "vrun_src_over": ([vrun(1, src=A - 3)], None, {}),
    "vrun_bias_over": ([vrun(1, bias=A)], None, {}),
    "vrun_dst_acc_over": ([vrun(1, dst=A - 3, to_acc=1)], None, {}),
    "vrun_dst_cbuf_fit": ([vrun(1, dst=Cb - 4, bias=A - 1, src=A - 4)], None, {}),
    "vrun_dst_cbuf_over": ([vrun(1, dst=Cb - 3)], None, {}),
    "vrun_params_fit": ([vrun(1, bias=A - 4, params=1, requant=1)], None, {}),
    "vrun_params_over": ([vrun(1, bias=A - 3, params=1, requant=1)], None, {}),
    # ILLEGAL_OPCODE, at arrival (before its cycle), for what VRUN does not define
    "vrun_params_relu": ([setcfg(0), vrun(9, params=1, requant=1, relu=1)], None, {}),
    "vrun_params_to_acc": ([vrun(4, params=1, requant=1, to_acc=1)], None, {}),
    "vrun_params_no_requant": ([vrun(2, params=1)], None, {}),
    # CFG_IN_USE.
    **in_use_cases(),
    # A later pair names the multiplexer in use (acc_src[1] at its window's first cycle).
    "in_use_later_pair": ([matmul(3, rows=5),
                           touch(3 + timing.mux_use(CFG, matmul(3), "acc_src[1]")[0],
                                 "psum_in[0][0]", "acc_src[1]")], None, {}),
    # Back-to-back MATMULs: west_feed is free for one cycle between their windows.
    "in_use_between_windows": ([matmul(3, rows=3), matmul(6, rows=3),
                                touch(7, "west_feed[0]"), touch(8, "west_feed[0]")], None, {}),
    # A VRUN into the ACC passes no wb_src multiplexer, and does not end the window of
    # an earlier VRUN into the CBUF.
    "in_use_vrun_to_acc": ([vrun(3, rows=4, to_acc=1), touch(9, "wb_src[0]"),
                            touch(10, "wb_src[1]")], None, {}),
    "in_use_vrun_to_acc_later": ([vrun(3, rows=6), vrun(10, src=8, rows=2, dst=8, to_acc=1),
                                  touch(12, "wb_src[0]")], None, {}),
    # BANK_CONFLICT, the cycle after the conflict: between issues, after an issue in
    # the conflict's cycle, before the head's ILLEGAL_OPCODE and UNIT_BUSY, after
    # PROG_RANGE and after a head's fault in the conflict's own cycle, and not after
    # the end.
    "conflict_between": ([dma(0, rows=6), wload(3, w_addr=8), matmul(20, act=100)], None,
                         {"conflict": {12, 13}}),
    "conflict_at_issue": ([dma(0, rows=6), wload(3, w_addr=8), matmul(20)], None,
                          {"conflict": {3}}),
    "conflict_first_cycle": ([setcfg(0, 1, 1)], None, {"conflict": {0}}),
    "conflict_over_illegal": ([setcfg(0), raw(12, 50)], None, {"conflict": {0}}),
    "conflict_after_illegal": ([setcfg(0), raw(12, 50)], None, {"conflict": {1}}),
    "conflict_over_busy": ([dma(0, rows=10), dma(5)], None, {"conflict": {4}}),
    "conflict_after_busy": ([dma(0, rows=10), dma(5)], None, {"conflict": {5}}),
    "conflict_after_range": ([setcfg(0)],
                             CFG.dram_words // fetch.words_per_instruction(CFG) + 1,
                             {"conflict": {0}}),
    "conflict_after_end": ([setcfg(2, 1, 1), dma(3, rows=2)], None,
                           {"conflict": {3 + timing.done(CFG, dma(3, rows=2)) + 1}}),
    # CFG_LIMIT comes first.
    "in_use_after_limit": ([matmul(3, rows=5),
                            touch(5, "west_feed[0]", "west_feed[1]", "act_in[0][0]",
                                  "act_in[1][0]", "w_in[0][0]")], None, {}),
}


class SequencerTB(BlockTB):
    def __init__(self, dut):
        super().__init__(dut)
        self.held_low: dict = {}
        self.imem: dict[int, int] = {}      # what the program memory holds

    async def load(self, words: list[int]) -> None:
        for pc, word in enumerate(words):
            self.imem[pc] = word
            await self.next_cycle()
            self.set("ctrl__imem__en", 1)
            self.set("ctrl__imem__addr", pc)
            self.set("ctrl__imem__data", word)
        await self.next_cycle()
        self.set("ctrl__imem__en", 0)

    async def run(self, prog_len: int, extra_starts=(), start_after_end=False,
                  pending=False) -> None:
        """One run; ``extra_starts`` are run cycles at which START is pulsed again
        (ignored while running). With ``start_after_end`` START is pulsed in the
        cycle after the run's end and the run returns there; the next run, with
        ``pending``, is that START's, taken two cycles later."""
        ref = reference(self.imem, prog_len, self.held_low)
        await self.next_cycle()
        self.set("ctrl__prog_len", prog_len)
        self.set("ctrl__start", int(not pending))
        if pending:                    # taken two cycles after its pulse
            await self.next_cycle()
        base = self.cycle + 1          # run cycle 0: the first with running high
        free = dict.fromkeys(BUSY_UNITS, 0)
        drained_at = dict.fromkeys(BUSY_UNITS, 0)
        issues, ends = [], []
        limit = ref["end"] + 8
        for c in range(limit + 1):
            await self.next_cycle()
            assert self.cycle == base + c
            for u in BUSY_UNITS:
                self.set(f"{u}__ready",
                         int(c >= free[u] and c not in self.held_low.get(u, ())))
                self.set(f"{u}__drained", int(c >= drained_at[u]))
            self.set("ctrl__start", int(c in extra_starts
                                        or (start_after_end and c == ref["end"] + 1)))
            self.set("bank_conflict", int(c in self.held_low.get("conflict", ())))
            await self.settle()
            running = self.get("ctrl__running")
            if c <= ref["end"]:
                self.expect(f"running at run cycle {c}", running, 1)
                self.expect("cycle counter", self.get("ctrl__cycle"), c)
            strobes = [u for u in UNITS if self.get(f"{u}__valid")]
            if len(strobes) > 1:
                self.fail(f"several issue strobes at once: {strobes}")
            for u in strobes:
                issues.append((c, u, self.get(f"{u}__payload")))
                ins = isa.decode(self.imem.get(len(issues) - 1, 0))
                if ins.op is not Opcode.ILLEGAL and u in BUSY_UNITS:
                    free[u] = c + timing.occupancy(CFG, ins)
                    drained_at[u] = max(drained_at[u], c + timing.done(CFG, ins))
            if self.get("ctrl__fault"):
                ends.append((c, "fault"))
            if self.get("ctrl__done"):
                ends.append((c, "done"))
            if c > ref["end"]:
                self.expect("running after the end", running, 0)
                self.expect("frozen cycle counter", self.get("ctrl__cycle"), ref["end"])
                if start_after_end:
                    break
        self.expect("issues (run cycle, unit, payload)", issues, ref["issues"])
        if ref["fault"] is None:
            self.expect("end of run", ends, [(ref["end"], "done")])
            self.expect("error", self.get("ctrl__error"), ErrorCode.NONE)
        else:
            code, pc, at = ref["fault"]
            self.expect("end of run", ends, [(at, "fault")])
            self.expect("error", ErrorCode(self.get("ctrl__error")).name, code.name)
            self.expect("fault_pc", self.get("ctrl__fault_pc"), pc)


def program_words(program) -> list[int]:
    return [w if isinstance(w, int) else isa.encode(w) for w in program]


IDLE = {"ctrl__start": 0, "ctrl__prog_len": 0, "ctrl__imem__en": 0, "ctrl__imem__addr": 0,
        "ctrl__imem__data": 0, "ctrl__prog_addr": 0, "ctrl__prog_fetch": CFG.imem_depth,
        "mem_busy": 0, "mem__rdata": 0,
        "bank_conflict": 0, "ubuf_base": CFG.ubuf_base, "ubuf_rows": CFG.ubuf_rows,
        **{f"{u}__{what}": 1 for u in BUSY_UNITS for what in ("ready", "drained")}}


async def run_program(tb: SequencerTB, name: str) -> None:
    program, prog_len, held = CASES[name]
    words = program_words(program)
    tb.held_low = held
    await tb.load(words)
    await tb.run(len(words) if prog_len is None else prog_len)
    tb.held_low = {}


async def restart(tb: SequencerTB) -> None:
    """A second START after the end runs the program again from pc 0 and cycle 0; a
    START while running is ignored; a fault's error clears on the next START."""
    good = program_words([setcfg(2, 1, 1), dma(5, rows=3), setcfg(30, 2, 1)])
    await tb.load(good + [raw(0, 0)])
    await tb.run(3, extra_starts=(1, 6, 7))
    for _ in range(3):
        await tb.next_cycle()
    await tb.run(4)          # ILLEGAL_OPCODE at pc 3
    await tb.run(3)


async def start_clears_guard(tb: SequencerTB) -> None:
    """A run that faults inside a long MATMUL's windows leaves nothing behind: the
    next run may set those multiplexers at once (acc_src[0] before any window of the
    new run could have started, west_feed[0] later)."""
    await tb.load(program_words([matmul(3, rows=200), setcfg(5, len(MUX), 0)]))
    await tb.run(2)          # CFG_RANGE at cycle 5
    await tb.load(program_words([touch(2, "acc_src[0]"), touch(6, "west_feed[0]")]))
    await tb.run(2)


async def start_after_end(tb: SequencerTB) -> None:
    """A START in the cycle after a run ends (done or fault) is taken two cycles
    later, once the program memory's read registers hold the first words again: the run
    it starts issues every instruction at its cycle, as any other."""
    await tb.load(program_words([setcfg(0, 1, 1), dma(1, rows=3), setcfg(4, 2, 1),
                                 dma(9, rows=2), raw(0, 12)]))
    await tb.run(4, start_after_end=True)
    await tb.run(4, pending=True, start_after_end=True)
    await tb.run(5, pending=True, start_after_end=True)      # ILLEGAL_OPCODE at pc 4
    await tb.run(4, pending=True)


SPECIAL = {"restart": restart, "in_use_start_clears": start_clears_guard,
           "start_after_end": start_after_end}

#: Cases run in one simulation each group (the program memory is not cleared between
#: cases; the reference reads the testbench's copy of it).
GROUPS = {
    "issue": ["every_unit", "back_to_back", "at_occupancy", "late_start", "empty",
              "prog_len_short", "restart", "start_after_end"],
    "faults": ["illegal_first", "illegal_later", "illegal_high", "late", "late_by_arrival",
               "illegal_before_late", "prog_range", "prog_len_max", "cfg_index",
               "cfg_value", "cfg_value_ok", "cfg_pairs_ok", "cfg_too_many_pairs",
               "cfg_domain_budget", "cfg_bad_later_pair", "cfg_page", "cfg_later_page"],
    "unit_busy": [c for c in CASES if c.startswith("busy_")],
    "interval": ["cfg_interval_on", "cfg_interval_off"],
    "in_use": [c for c in [*CASES, *SPECIAL] if c.startswith("in_use_")],
    "addr_range": [c for c in CASES
                   if c.split("_")[0] in ("dma", "wload", "matmul", "vrun", "copy")],
    "bank_conflict": [c for c in CASES if c.startswith("conflict_")],
}
assert sorted(sum(GROUPS.values(), [])) == sorted(list(CASES) + list(SPECIAL))


@cocotb.test()
async def run_case(dut):
    tb = SequencerTB(dut)
    await tb.start(IDLE)
    for name in case_names():
        tb.label = f"[{name}] "
        if name in SPECIAL:
            await SPECIAL[name](tb)
        else:
            await run_program(tb, name)
    tb.finish()
