"""The instruction table: the closed forms the compiler schedules with agree with the
cycle-level effects the golden model executes, for random instructions on every
preset; ranges cover exactly what the effects touch; text names and disassembly come
from the table."""

from __future__ import annotations

import numpy as np
import pytest

from systolica.arch import disasm, fabric, instructions, isa, timing
from systolica.arch.config import PRESETS
from systolica.arch.instructions import Range
from systolica.arch.isa import DmaKind, Instr, Opcode

from tiers import sample

CONFIGS = [PRESETS[name] for name in sorted(PRESETS)]


def _random_fields(cfg, op, rng):
    rows = int(rng.integers(1, 40))
    if op is Opcode.DMA:
        kind = int(rng.integers(0, 4))
        return dict(kind=kind, dram_addr=int(rng.integers(0, 1000)),
                    dram_stride=int(rng.integers(0, 9)), buf_addr=int(rng.integers(0, 100)),
                    rows=rows)
    if op is Opcode.WLOAD:
        return dict(w_addr=int(rng.integers(0, 100)), bank=int(rng.integers(0, 2)))
    if op is Opcode.MATMUL:
        conv = int(rng.integers(0, 2))
        return dict(act_addr=int(rng.integers(0, 100)), rows=rows,
                    acc_addr=int(rng.integers(0, 100)), accumulate=int(rng.integers(0, 2)),
                    bank=int(rng.integers(0, 2)), conv=conv, max=int(rng.integers(0, 2)),
                    dh=int(rng.integers(0, 4)), dw=int(rng.integers(0, 4)),
                    taps=int(rng.integers(0, isa.TAP_TABLES)),
                    in_w=int(rng.integers(1, 20)) * conv, in_h=int(rng.integers(1, 9)) * conv,
                    early=int(rng.integers(0, cfg.tile_rows)))
    if op is Opcode.CONVCFG:
        return dict(out_w=int(rng.integers(1, 20)), sh=int(rng.integers(1, 5)),
                    sw=int(rng.integers(1, 5)), top=int(rng.integers(0, 4)),
                    left=int(rng.integers(0, 4)), pad=int(rng.integers(0, 256)))
    if op is Opcode.TAPS:
        # a word writes up to TAPS_PER_WORD entries, one per array row at most
        count = int(rng.integers(1, min(isa.TAPS_PER_WORD, cfg.rows) + 1))
        return dict(table=int(rng.integers(0, isa.TAP_TABLES)),
                    first=int(rng.integers(0, cfg.rows - count + 1)), count=count,
                    **{f"t{a}{k}": isa.signed_field(int(rng.integers(-9, 9)),
                                                    isa.TAP_DELTA_BITS)
                       for k in range(1, count + 1) for a in "hw"})
    if op is Opcode.VRUN:
        to_acc = int(rng.integers(0, 2))
        crop = int(rng.integers(0, 2)) * (1 - to_acc)
        # a fused crop: a destination below the UBUF whose image there may wrap
        dst = int(rng.integers(0, cfg.ubuf_base - rows)) if crop else int(rng.integers(0, 100))
        return dict(src=int(rng.integers(0, 100)), rows=rows, dst=dst,
                    bias_addr=int(rng.integers(0, 100)), use_bias=int(rng.integers(0, 2)),
                    to_acc=to_acc, requant=1, relu=0, mult=1, shift=0, zp=0,
                    params=int(rng.integers(0, 2)), crop=crop)
    if op is Opcode.COPY:
        # the UBUF's far end included, and CBUF rows across bank boundaries
        return dict(kind=int(rng.integers(0, 2)),
                    cbuf_addr=int(rng.integers(0, cfg.cbuf_depth - rows + 1)),
                    ubuf_addr=int(rng.integers(0, cfg.ubuf_rows - rows + 1)), rows=rows)
    if op is Opcode.ROUTE:
        span = int(rng.integers(1, 8))
        return dict(src=int(rng.integers(0, cfg.cbuf_depth - rows + 1)),
                    dst=int(rng.integers(0, cfg.cbuf_depth - rows + 1)), rows=rows, span=span,
                    col0=0, keep=int(rng.integers(0, 256)),
                    **{f"delay{j}": int(rng.integers(0, span + 1)) % 8
                       for j in range(isa.ROUTE_GROUPS)})
    return isa.setcfg_fields([(0, 0)])


CASES = [(cfg, op, seed) for cfg in CONFIGS for op in instructions.SPEC for seed in range(6)]
#: the fast tier: seeds 0 and 3 of each chip and instruction
FAST_CASES = sample(CASES, 3)


@pytest.mark.parametrize("cfg, op, seed", FAST_CASES,
                         ids=[f"{c.name}-{o.name}-{s}" for c, o, s in CASES])
def test_closed_forms_agree_with_effects(cfg, op, seed):
    rng = np.random.default_rng(seed)
    f = _random_fields(cfg, op, rng)
    ins = Instr(op, 0, f)
    fx = instructions.SPEC[op].effects(cfg, f)
    assert timing.occupancy(cfg, ins) == fx.accept
    assert timing.done(cfg, ins) == fx.last + 1
    if fx.collect:     # the collector takes a row a cycle, the first where the order check says
        assert fx.collect[1] - fx.collect[0] == timing.occupancy(cfg, ins)
        assert fx.collect[0] == instructions.SPEC[op].collect_first(cfg, f)
    banks = [t for t in fx.reads + fx.writes if t.resource.startswith("wbank")]
    if banks:
        span = (min(int(t.cycles.min()) for t in banks),
                max(int(t.cycles.max()) for t in banks) + 1)
        assert timing.bank_window(cfg, ins) == span
    for mux in fabric.muxes(cfg):
        want = fx.muxes.get(mux.name)
        got = timing.mux_use(cfg, ins, mux.name)
        assert got == (None if want is None else (want[0], want[1] + 1)), mux.name


@pytest.mark.parametrize("cfg, op, seed", FAST_CASES,
                         ids=[f"{c.name}-{o.name}-{s}" for c, o, s in CASES])
def test_bank_claims_cover_the_bank_ports_used(cfg, op, seed):
    """The scheduler books ``timing.bank_claims`` (closed forms); the bank ports the
    effects use (what the golden model and the RTL's crossbars see) must lie inside
    them, and every claimed port is used: the claims bound the uses tightly."""
    rng = np.random.default_rng(200 + seed)
    f = _random_fields(cfg, op, rng)
    if op is Opcode.DMA:
        f["buf_addr"] = int(rng.integers(0, 3 * cfg.cbuf_bank_rows))
    if op is Opcode.MATMUL:
        f["act_addr"] = int(rng.integers(0, 3 * cfg.cbuf_bank_rows))
    if op is Opcode.WLOAD:
        f["w_addr"] = int(rng.integers(0, 3 * cfg.cbuf_bank_rows))
    entry = instructions.SPEC[op]
    uses = entry.bank_ports(cfg, f, entry.effects(cfg, f))
    claims = timing.bank_claims(cfg, Instr(op, 0, f))
    claimed = {key: (lo, hi) for key, lo, hi in claims}
    assert len(claimed) == len(claims), "a bank port claimed twice"
    used = set()
    for u in uses:
        key = (u.memory, u.mode, u.bank)
        assert key in claimed, f"{key} used in cycles {u.first}..{u.last}, not claimed"
        lo, hi = claimed[key]
        assert lo <= u.first <= u.last < hi, (key, (u.first, u.last), (lo, hi))
        used.add(key)
    assert used == set(claimed), f"claimed, never used: {set(claimed) - used}"


@pytest.mark.parametrize("cfg, op, seed", FAST_CASES,
                         ids=[f"{c.name}-{o.name}-{s}" for c, o, s in CASES])
def test_ranges_cover_exactly_what_is_touched(cfg, op, seed):
    rng = np.random.default_rng(100 + seed)
    f = _random_fields(cfg, op, rng)
    fx = instructions.SPEC[op].effects(cfg, f)
    touched: dict[str, set] = {}
    for t in fx.reads + fx.writes:
        if not t.resource.startswith("wbank"):
            touched.setdefault(t.resource, set()).update(int(a) for a in t.addrs)
    ranges: dict[str, set] = {}
    for r in instructions.ranges(cfg, op, f):
        if r.touched:
            ranges.setdefault(r.memory, set()).update(range(r.lo, r.hi))
    for memory, addrs in touched.items():
        assert addrs <= ranges[memory], memory
        if not (op is Opcode.DMA and memory == "dram"):   # a strided span has gaps
            assert addrs == ranges[memory], memory


MOVING = [(cfg, op, seed) for cfg, op, seed in CASES if instructions.SPEC[op].moves]


@pytest.mark.parametrize("cfg, op, seed", sample(MOVING, 3),
                         ids=[f"{c.name}-{o.name}-{s}" for c, o, s in MOVING])
def test_a_moving_field_only_shifts_its_memory(cfg, op, seed):
    """An entry's ``moves`` field (a DMA's ``dram_addr``) shifts its touches and
    ranges of that memory by its value and decides nothing else: the golden model
    prepares such an instruction once, at 0, and moves it; the scheduler keeps its
    closed forms once."""
    entry = instructions.SPEC[op]
    name, memory = entry.moves
    assert memory not in instructions.BANKED and name in isa.payload_fields(op)
    rng = np.random.default_rng(300 + seed)
    f = _random_fields(cfg, op, rng)
    off = int(rng.integers(1, cfg.dram_words // 2))
    f[name], at0 = off, {**f, name: 0}
    fx, fx0 = entry.effects(cfg, f), entry.effects(cfg, at0)
    assert (fx.accept, fx.muxes, fx.last) == (fx0.accept, fx0.muxes, fx0.last)
    for got, base in ((fx.reads, fx0.reads), (fx.writes, fx0.writes)):
        assert [(t.resource, t.forward) for t in got] == \
            [(t.resource, t.forward) for t in base]
        for t, t0 in zip(got, base):
            np.testing.assert_array_equal(t.cycles, t0.cycles)
            np.testing.assert_array_equal(
                t.addrs, t0.addrs + (off if t.resource == memory else 0))
    assert entry.bank_ports(cfg, f, fx) == entry.bank_ports(cfg, at0, fx0)
    assert instructions.legal(cfg, op, f) == instructions.legal(cfg, op, at0)
    moved = [r if r.memory != memory else
             Range(r.memory, r.lo + off, r.hi + off, r.bound, r.mode, r.nonempty,
                   r.touched, r.window)
             for r in instructions.ranges(cfg, op, at0)]
    assert instructions.ranges(cfg, op, f) == moved
    # the closed forms the scheduler keeps per instruction with the field at 0
    assert timing.moving_field(op) == name
    ins, ins0 = Instr(op, 0, f), Instr(op, 0, at0)
    for closed in (timing.occupancy, timing.done, timing.port_windows, timing.bank_claims):
        assert closed(cfg, ins) == closed(cfg, ins0), closed.__name__
    for mux in fabric.muxes(cfg):
        assert timing.mux_use(cfg, ins, mux.name) == timing.mux_use(cfg, ins0, mux.name)


def test_fused_crop_writes_the_image_of_its_rows_in_the_ubuf():
    """CBUF row a also lands in UBUF row a mod ubuf_rows; an image that wraps is two
    ranges; the rules of docs/contract.md ("The UBUF")."""
    cfg = PRESETS["base"].replace(ubuf_base=7680, ubuf_rows=512)
    U = cfg.ubuf_rows
    f = dict(src=0, rows=10, dst=3 * U - 4, bias_addr=0, use_bias=0, to_acc=0, crop=1)
    fx = instructions.SPEC[Opcode.VRUN].effects(cfg, f)
    crop = [t for t in fx.writes if t.addrs[0] >= cfg.ubuf_base]
    assert crop[0].addrs.tolist() == [cfg.ubuf_base + a for a in [U - 4 + k for k in
                                                                  range(4)] + list(range(6))]
    assert np.array_equal(crop[0].cycles, fx.writes[0].cycles)     # the same cycles
    pieces = [(r.lo, r.hi) for r in instructions.ranges(cfg, Opcode.VRUN, f)
              if r.memory == "cbuf" and r.touched and r.lo >= cfg.ubuf_base]
    assert pieces == [(cfg.ubuf_base + U - 4, cfg.ubuf_base + U),
                      (cfg.ubuf_base, cfg.ubuf_base + 6)]
    assert instructions.in_range(cfg, Opcode.VRUN, f) and instructions.legal(cfg, Opcode.VRUN, f)
    assert not instructions.in_range(cfg, Opcode.VRUN, {**f, "rows": U + 1, "dst": 0})
    assert instructions.in_range(cfg, Opcode.VRUN, {**f, "rows": U + 1, "dst": 0, "crop": 0})
    assert not instructions.legal(cfg, Opcode.VRUN, {**f, "to_acc": 1})
    assert not instructions.legal(cfg, Opcode.VRUN, {**f, "dst": cfg.ubuf_base - 5})
    none = cfg.replace(ubuf_base=0, ubuf_rows=0)
    assert not instructions.in_range(none, Opcode.VRUN, {**f, "dst": 0})


def test_range_rule_matches_the_contract():
    cfg = PRESETS["tiny"]
    ok = dict(kind=DmaKind.LOAD_ACC, dram_addr=cfg.dram_words - 2 * cfg.acc_row_words,
              dram_stride=cfg.acc_row_words, buf_addr=cfg.acc_depth - 2, rows=2)
    assert instructions.in_range(cfg, Opcode.DMA, ok)
    assert not instructions.in_range(cfg, Opcode.DMA, {**ok, "rows": 3})
    assert not instructions.in_range(cfg, Opcode.DMA, {**ok, "rows": 0})
    assert not instructions.in_range(cfg, Opcode.DMA, {**ok, "kind": DmaKind.LOAD_CBUF,
                                                       "dram_addr": cfg.dram_words})
    vrun = dict(src=0, rows=1, dst=cfg.cbuf_depth - 1, bias_addr=cfg.acc_depth - 1,
                use_bias=0, to_acc=0)
    assert instructions.in_range(cfg, Opcode.VRUN, vrun)
    assert not instructions.in_range(cfg, Opcode.VRUN, {**vrun, "to_acc": 1})
    assert not instructions.in_range(cfg, Opcode.VRUN, {**vrun, "bias_addr": cfg.acc_depth})
    # with params the four parameter rows from bias_addr must fit
    par = {**vrun, "params": 1, "bias_addr": cfg.acc_depth - 4}
    assert instructions.in_range(cfg, Opcode.VRUN, par)
    assert not instructions.in_range(cfg, Opcode.VRUN, {**par, "bias_addr": cfg.acc_depth - 3})


def test_vrun_params_legal_combinations():
    cfg = PRESETS["tiny"]
    base = dict(src=0, rows=1, dst=0, bias_addr=0, use_bias=0, to_acc=0, requant=0, relu=0)
    for to_acc in (0, 1):
        for requant in (0, 1):
            for relu in (0, 1):
                f = {**base, "to_acc": to_acc, "requant": requant, "relu": relu}
                assert instructions.legal(cfg, Opcode.VRUN, {**f, "params": 0})
                assert instructions.legal(cfg, Opcode.VRUN, {**f, "params": 1}) == (
                    requant == 1 and to_acc == 0 and relu == 0)


def test_text_names_and_units_come_from_the_table():
    assert instructions.TEXT_OPS[("dma", "store_acc")] == (Opcode.DMA,
                                                           {"kind": DmaKind.STORE_ACC})
    assert instructions.UNITS == ("dma", "wload", "mm", "vpu", "cfg", "convcfg", "taps",
                                  "ubuf", "lanes")
    assert {timing.UNIT[op] for op in instructions.SPEC} == set(instructions.UNITS)
    dis = disasm.disassemble_one(Instr(Opcode.DMA, 5, dict(kind=DmaKind.STORE_CBUF, dram_addr=1,
                                                        dram_stride=1, buf_addr=2, rows=3)))
    assert dis.split() == ["5:", "DMA", "STORE_CBUF,", "dram_addr=1,", "dram_stride=1,",
                           "buf_addr=2,", "rows=3"]


def dma_range_cases(cfg, rng, n_random=400):
    """DMA fields around the DRAM range's end: for each kind and a spread of row
    counts and strides, the exact fit, one word past it and one before, the field
    extremes, and random fields (the buffer range always fits unless drawn at random)."""
    D, W = cfg.dram_words, cfg.acc_row_words
    top_addr, top = (1 << isa.DRAM_ADDR_BITS) - 1, 0xFFFF
    cases = []
    for kind in DmaKind:
        w = W if kind in (DmaKind.LOAD_ACC, DmaKind.STORE_ACC) else 1
        for rows in (0, 1, 2, 3, 7, 1000, top):
            for stride in sorted({min(s, top) for s in (0, 1, 2, W, 13, D // 2, D - 1, D, top)}):
                span = (rows - 1) * stride + w if rows else w
                for addr in {D - span - 1, D - span, D - span + 1, 0, 1, D - 1, D, top_addr}:
                    if 0 <= addr <= top_addr:
                        cases.append(dict(kind=int(kind), dram_addr=addr, dram_stride=stride,
                                          buf_addr=0, rows=rows))
    for _ in range(n_random):
        rows, stride = int(rng.integers(0, top + 1)), int(rng.integers(0, top + 1))
        if rng.integers(0, 2):       # near the end of the DRAM
            rows = int(rng.integers(0, 40))
            stride = int(rng.integers(0, min(2 * D // 40 + 2, top + 1)))
        cases.append(dict(kind=int(rng.integers(0, 4)), rows=rows, dram_stride=stride,
                          dram_addr=int(rng.integers(0, D + 50)) if rng.integers(0, 4)
                          else int(rng.integers(0, top_addr + 1)),
                          buf_addr=int(rng.integers(0, 3 * cfg.acc_depth))))
    return cases


def matmul_range_cases(cfg, rng, n_random=400):
    """MATMUL fields around the CBUF's end (a conv's ``in_h * in_w`` pixels or
    ``rows``): the exact fit, one row past it and one before, the field extremes,
    and random fields."""
    Cb, A = cfg.cbuf_depth, cfg.acc_depth
    g, top = (1 << isa.GEOM_BITS) - 1, (1 << isa.CBUF_ADDR_BITS) - 1
    base = dict(acc_addr=0, accumulate=0, bank=0, max=0, dh=0, dw=0, taps=0)
    cases = []
    for in_h, in_w in ((1, 1), (3, 5), (7, 13), (1, g), (g, 1), (g, g), (0, 4), (4, 0),
                       (40, Cb // 40), (64, 64)):
        for conv in (0, 1):
            for rows in (0, 1, 4, Cb, 0xFFFF):
                span = in_h * in_w if conv else rows
                for addr in {Cb - span - 1, Cb - span, Cb - span + 1, 0, Cb - 1, Cb, top}:
                    if 0 <= addr <= top:
                        cases.append(dict(base, act_addr=addr, rows=rows, conv=conv,
                                          in_h=in_h, in_w=in_w))
    for _ in range(n_random):
        in_h, in_w = int(rng.integers(0, g + 1)), int(rng.integers(0, g + 1))
        if rng.integers(0, 2):
            in_h, in_w = int(rng.integers(0, 70)), int(rng.integers(0, 70))
        cases.append(dict(base, act_addr=int(rng.integers(0, Cb + 50)) if rng.integers(0, 4)
                          else int(rng.integers(0, top + 1)),
                          rows=int(rng.integers(0, 0x10000)) if rng.integers(0, 3)
                          else int(rng.integers(0, 40)), conv=int(rng.integers(0, 2)),
                          in_h=in_h, in_w=in_w, acc_addr=int(rng.integers(0, 2 * A)),
                          taps=int(rng.integers(0, isa.TAP_TABLES))))
    return cases


#: The opcodes whose ADDR_RANGE check has a form of its own, and their cases.
RANGE_CASES = {Opcode.DMA: dma_range_cases, Opcode.MATMUL: matmul_range_cases}


def ranges_rule(cfg, op, f):
    """ADDR_RANGE straight from the ranges: every one non-empty and inside its memory."""
    return all(r.nonempty and r.hi <= r.bound for r in instructions.ranges(cfg, op, f))


@pytest.mark.parametrize("op", list(RANGE_CASES), ids=lambda op: op.name)
@pytest.mark.parametrize("cfg", sample(CONFIGS + [PRESETS["tiny"].replace(dram_words=1000)], 2),
                         ids=lambda c: f"{c.name}-{c.dram_words}")
def test_range_check_equals_its_ranges(cfg, op):
    """The DMA's and MATMUL's ADDR_RANGE checks (the sequencer's short forms) fault
    exactly the instructions one of whose ranges ``ranges`` puts outside its memory."""
    cases = RANGE_CASES[op](cfg, np.random.default_rng(7))
    verdicts = [instructions.in_range(cfg, op, f) for f in cases]
    assert verdicts == [ranges_rule(cfg, op, f) for f in cases]
    assert 100 < sum(verdicts) < len(cases) - 100       # both verdicts, many times


def vrun_range_cases(cfg, rng, n_random=300):
    """VRUN fields (with and without the fused crop) against UBUF register values
    ``(ubuf_base, ubuf_rows)``: rows at, one past and one below the UBUF's size, a
    destination where the crop wraps and where it does not, random fields."""
    A, Cb = cfg.acc_depth, cfg.cbuf_depth
    ubufs = [(cfg.ubuf_base, cfg.ubuf_rows), (0, 0), (Cb - 256, 256), (512, 512),
             (100, 300), (Cb - 1, 1)]
    base = dict(src=0, bias_addr=0, use_bias=0, to_acc=0, requant=0, relu=0, params=0)
    cases = []
    for ub, ur in ubufs:
        for rows in sorted({0, 1, 5, max(ur - 1, 0), ur, ur + 1, A, A + 1}):
            for dst in sorted({0, 3, max(ur - 2, 0), ur, ur + 7, ub + ur, Cb - rows - 1}):
                for crop in (0, 1):
                    if 0 <= dst < 1 << isa.CBUF_ADDR_BITS and rows < 1 << isa.ACC_ADDR_BITS:
                        cases.append(((ub, ur), dict(base, rows=rows, dst=dst, crop=crop)))
    for _ in range(n_random):
        ub, ur = ubufs[int(rng.integers(0, len(ubufs)))]
        cases.append(((ub, ur), dict(base, src=int(rng.integers(0, A)),
                                     rows=int(rng.integers(0, 1 << isa.ACC_ADDR_BITS)),
                                     dst=int(rng.integers(0, 1 << isa.CBUF_ADDR_BITS)),
                                     bias_addr=int(rng.integers(0, A + 8)),
                                     use_bias=int(rng.integers(0, 2)),
                                     to_acc=int(rng.integers(0, 2)),
                                     crop=int(rng.integers(0, 2)))))
    return cases


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_vrun_range_check_equals_its_ranges(cfg):
    """The VRUN's ADDR_RANGE check (the crop's pieces as one comparison) faults exactly
    the instructions one of whose ranges lies outside its memory, whatever the UBUF
    registers say."""
    cases = vrun_range_cases(cfg, np.random.default_rng(5))
    verdicts = [instructions.in_range(_At(cfg, ub, ur), Opcode.VRUN, f)
                for (ub, ur), f in cases]
    assert verdicts == [ranges_rule(_At(cfg, ub, ur), Opcode.VRUN, f)
                        for (ub, ur), f in cases]
    assert 50 < sum(verdicts) < len(cases) - 50


class _At:
    """``cfg`` with the UBUF registers' values (as the sequencer sees them)."""

    def __init__(self, cfg, base, rows):
        self._cfg, self.ubuf_base, self.ubuf_rows = cfg, base, rows

    def __getattr__(self, name):
        return getattr(self._cfg, name)
