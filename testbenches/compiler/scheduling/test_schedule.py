"""Scheduler: the issue rules, unit occupancy and hazards, on hand-built micro-op lists
and on whole compiled programs. Expected cycles come from systolica.arch.timing."""

import random
import re

import numpy as np
import pytest

from systolica.arch import isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Opcode
from systolica.compiler import CompileError, Dense, Network, compile_network, gemm
from systolica.compiler.errors import InternalError
from systolica.compiler.lowering.lower import lower
from systolica.compiler.microops.ir import conflict, make, required_gap, verify_reorder
from systolica.compiler.scheduling.schedule import schedule

from tiers import sample

CFG = preset("tiny")
R = CFG.rows


def done(op):
    return timing.done(CFG, op.instr(0))


def occupancy(op):
    return timing.occupancy(CFG, op.instr(0))


def load(buf, rows=R, dram=0):
    return make(CFG, Opcode.DMA, kind=DmaKind.LOAD_CBUF, dram_addr=dram, dram_stride=1,
                buf_addr=buf, rows=rows)


def matmul(acc=0, accumulate=1, bank=0, act=100, rows=6):
    return make(CFG, Opcode.MATMUL, act_addr=act, rows=rows, acc_addr=acc,
                accumulate=accumulate, bank=bank)


def test_same_unit_waits_for_occupancy():
    ops = [load(0), load(R)]
    assert schedule(CFG, ops) == [0, occupancy(ops[0])]


def test_read_after_write_waits_for_the_writer():
    ops = [load(0), make(CFG, Opcode.WLOAD, w_addr=0, bank=0), matmul(bank=0)]
    c = schedule(CFG, ops)
    assert c[1] == c[0] + done(ops[0])                   # CBUF rows: the whole DMA
    # the weight bank: the MATMUL's rows meet it once the last shift is in
    assert c[2] == c[1] + timing.weight_shifts(CFG) == c[1] + required_gap(CFG, *ops[1:])
    assert c[2] < c[1] + done(ops[1])


def test_write_after_read_waits_until_the_rows_left_the_cells():
    ops = [matmul(bank=1), make(CFG, Opcode.WLOAD, w_addr=0, bank=1)]
    c = schedule(CFG, ops)
    assert c[1] == c[0] + ops[0].fields["rows"] + 2 * timing.skew_max(CFG)
    assert c[1] == c[0] + required_gap(CFG, *ops)
    assert c[1] < c[0] + done(ops[0])                    # before the sums are written


def test_accumulates_into_the_same_rows_only_keep_order():
    ops = [matmul(acc=0), matmul(acc=0)]
    c = schedule(CFG, ops)
    assert c[1] == c[0] + occupancy(ops[0])          # not done: the pipeline orders them
    assert c[1] < c[0] + done(ops[0])


def test_independent_later_op_fills_an_earlier_gap():
    first = load(0, rows=40)
    wait = make(CFG, Opcode.WLOAD, w_addr=0, bank=0)        # needs the load
    free = make(CFG, Opcode.WLOAD, w_addr=200, bank=1)      # unrelated, but same unit
    use = matmul(bank=1, act=300)
    c = schedule(CFG, [first, wait, free, use])
    assert c[2] < c[1]                                      # placed before in time
    assert c[2] + occupancy(free) <= c[1]
    assert c[3] == c[2] + required_gap(CFG, free, use)


def test_one_instruction_per_cycle():
    ops = [make(CFG, Opcode.SETCFG, index=i, value=0) for i in range(3)] + [load(0)]
    assert sorted(schedule(CFG, ops)) == [0, 1, 2, 3]


def test_fabric_ops_wait_for_setcfg():
    ops = [load(0), make(CFG, Opcode.SETCFG, index=0, value=1),
           make(CFG, Opcode.WLOAD, w_addr=0, bank=0)]
    c = schedule(CFG, ops)
    assert c[2] >= c[1] + done(ops[1]) and c[2] >= c[0] + done(ops[0])


def compiled_ops(net, cfg=CFG):
    lowered = lower(cfg, net)
    return lowered, schedule(cfg, lowered.ops)


NETS = [
    gemm(np.ones((40, 30)), np.ones((30, 20)), np.ones(20)),
    gemm(np.ones((300, 9)), np.ones((9, 17)), out_dtype="int32", relu=True),
    Network(np.ones((20, 16)), [Dense(np.ones((16, 24)), np.ones(24)),
                                Dense(np.ones((24, 8))), Dense(np.ones((8, 5)))]),
]


@pytest.mark.parametrize("net", NETS)
def test_compiled_schedule_respects_every_rule(net):
    lowered, cycles = compiled_ops(net)
    ops = lowered.ops
    assert sorted(cycles) == sorted(set(cycles)), "two instructions in one cycle"
    order = sorted(range(len(ops)), key=cycles.__getitem__)
    last_on_unit = {}
    for i in order:
        unit = timing.UNIT[ops[i].op]
        if unit in last_on_unit:
            j = last_on_unit[unit]
            assert cycles[i] >= cycles[j] + occupancy(ops[j])
        last_on_unit[unit] = i
    for j in range(len(ops)):
        for i in range(j):
            gap = required_gap(CFG, ops[i], ops[j])
            if gap is not None:
                assert cycles[j] >= cycles[i] + gap, (ops[i], ops[j])


@pytest.mark.parametrize("net", NETS)
def test_pipelined_order_computes_what_the_loop_nest_does(net):
    lowered = lower(CFG, net)
    verify_reorder(CFG, lowered.sequential, lowered.ops)
    assert lowered.ops != lowered.sequential                 # something was overlapped
    assert [op.op for op in lowered.ops[:1]] == [Opcode.DMA]
    swapped = list(lowered.sequential)
    k = next(i for i, op in enumerate(swapped) if op.op is Opcode.WLOAD)
    j = max(i for i in range(k) if conflict(swapped[i], swapped[k]))
    swapped.insert(j, swapped.pop(k))                         # WLOAD before its DMA
    with pytest.raises(InternalError, match="reordering"):
        verify_reorder(CFG, lowered.sequential, swapped)


@pytest.mark.parametrize("far_limit", [None, 4])
def test_reorder_check_sees_far_moves_and_agrees_with_the_address_check(
        far_limit, monkeypatch):
    """A swap of conflicting ops far apart is caught, by the pair walk or (more ops
    moved ahead than it keeps) address by address, and on random permutations the
    two checks agree."""
    from systolica.compiler.microops import ir
    if far_limit is not None:
        monkeypatch.setattr(ir, "_FAR", far_limit)
    seq = lower(CFG, NETS[0]).sequential
    far = list(seq)
    k = len(far) - 1 - next(i for i, op in enumerate(reversed(far))
                            if conflict(far[0], op))
    far.insert(0, far.pop(k))           # the last op touching op 0's data, first
    assert k > 8
    with pytest.raises(InternalError, match="reordering"):
        verify_reorder(CFG, seq, far)
    rng = random.Random(5)
    for _ in range(40):
        perm = list(seq)
        for _ in range(3):
            a = rng.randrange(len(perm))
            b = min(len(perm) - 1, a + rng.randrange(1, 9))
            perm.insert(b, perm.pop(a))
        pos = {id(m): i for i, m in enumerate(perm)}
        by_address = _raises(lambda: ir._verify_reorder_by_address(CFG, seq, pos))
        assert _raises(lambda: verify_reorder(CFG, seq, perm)) == by_address


def _raises(check) -> bool:
    try:
        check()
    except InternalError:
        return True
    return False


def test_every_multiplexer_is_set_before_its_first_use():
    """Programs never depend on settings an earlier program left behind."""
    from systolica.arch import fabric
    from systolica.compiler.scheduling.reconfigure import add_updates, uses
    compiled = compile_network(CFG, NETS[0])
    table = fabric.muxes(CFG)
    set_at: dict[int, list[tuple[int, int]]] = {}
    for ins in compiled.program:
        if ins.op is Opcode.SETCFG:
            for index, value in isa.setcfg_pairs(ins.fields):
                set_at.setdefault(index, []).append((ins.cycle, value))
    lowered = lower(CFG, NETS[0])
    cycles, _ = add_updates(CFG, lowered.ops, schedule(CFG, lowered.ops))
    used = uses(CFG, lowered.ops, cycles)
    assert used
    for name, lst in used.items():
        index = fabric.by_name(CFG)[name].index
        first = lst[0]
        assert any(c < first.lo and v == table[index].default for c, v in set_at[index]), name


# -- multiplexer settings ---------------------------------------------------------------------
SWAP = {"west_feed[0]": "cbuf.g1", "west_feed[1]": "cbuf.g0"}


def routed(needs_list, rows=8):
    ops = [load(0), load(100), make(CFG, Opcode.WLOAD, w_addr=0, bank=0)]
    for k, needs in enumerate(needs_list):
        op = matmul(acc=8 * k, accumulate=0, rows=rows)
        op.needs = dict(needs)
        ops.append(op)
    return ops


def test_default_needs_schedule_as_no_needs():
    defaults = {"west_feed[0]": "cbuf.g0", "acc_src[1]": "col.g1"}
    assert schedule(CFG, routed([defaults, {}, defaults])) == schedule(CFG, routed([{}] * 3))


def test_other_setting_waits_for_the_uses_and_keeps_an_update_slot():
    from systolica.compiler.scheduling.reconfigure import plan_updates
    ops = routed([SWAP, {}, SWAP])
    cycles = schedule(CFG, ops)
    plain = schedule(CFG, routed([{}] * 3))
    assert cycles[:4] == plain[:4]
    spans = [(c + timing.mux_use(CFG, op.instr(0), "west_feed[0]")[0],
              c + timing.mux_use(CFG, op.instr(0), "west_feed[0]")[1])
             for op, c in zip(ops[3:], cycles[3:])]
    assert spans[0][1] <= spans[1][0] and spans[1][1] <= spans[2][0]   # one after another
    shifted, updates = plan_updates(CFG, ops, cycles)
    assert shifted == cycles                                     # the first SETCFGs fit
    changes = sorted((u.cycle, u.value) for u in updates if u.mux == "west_feed[0]")
    assert [v for _, v in changes] == [1, 0, 1]
    for (c, _), (lo, _), (_, hi_before) in zip(changes[1:], spans[1:], spans):
        assert hi_before - 1 <= c <= lo - 1 and c not in cycles


@pytest.mark.parametrize("interval", [1, 2, 5])
def test_update_slots_respect_the_interval(interval):
    from systolica.compiler.scheduling.reconfigure import plan_updates
    cfg = CFG.replace(config_update_interval=interval)
    ops = routed([SWAP, {}, SWAP, {}], rows=3)
    cycles, updates = plan_updates(cfg, ops, schedule(cfg, ops))
    assert updates and all(u.cycle % interval == 0 for u in updates)
    assert not {u.cycle for u in updates} & set(cycles)


@pytest.mark.parametrize("config, M, K, N", [("tiny_8x8", 300, 5, 5), ("tiny_tall", 64, 3, 4)])
def test_the_schedule_shifts_by_the_least_the_updates_need(monkeypatch, config, M, K, N):
    """On a grid of many multiplexers the first updates need room before the first
    op: the shift found is at or above the bound the search starts from, and one
    interval less does not fit."""
    from systolica.compiler.scheduling import reconfigure
    from systolica.compiler.scheduling.config_updates import ConfigUpdateError
    seen = []
    plan = reconfigure.plan_updates

    def spy(cfg, ops, cycles, who=None):
        got = plan(cfg, ops, cycles, who)
        seen.append((cfg, ops, cycles, got))
        return got

    monkeypatch.setattr(reconfigure, "plan_updates", spy)
    rng = np.random.default_rng(1)
    compile_network(preset(config), gemm(
        rng.integers(-128, 128, (M, K), dtype=np.int8),
        rng.integers(-128, 128, (K, N), dtype=np.int8),
        rng.integers(-99, 99, N, dtype=np.int32), out_dtype="int32", name="g"))
    (cfg, ops, cycles, (shifted, _)), = seen
    step = cfg.config_update_interval
    shift = shifted[0] - cycles[0]
    bound = reconfigure._least_shift(cfg, reconfigure.uses(cfg, ops, cycles), cycles)
    assert shift >= bound * step
    if config == "tiny_8x8":
        assert shift > 0                    # the case this test is for
    if shift > 0:
        with pytest.raises(ConfigUpdateError):
            reconfigure._place(cfg, ops, [c + shift - step for c in cycles], None)


@pytest.mark.parametrize("op, needs, expected", [
    (lambda: make(CFG, Opcode.WLOAD, w_addr=0, bank=0), {"west_feed[0]": "zero"},
     "its data does not pass west_feed[0]"),
    (lambda: load(0), {"west_feed[0]": "zero"}, "a DMA passes no multiplexer"),
    (lambda: matmul(), {"west_feed[7]": "zero"}, "no multiplexer 'west_feed[7]'"),
    (lambda: matmul(), {"west_feed[0]": "cbuf.g9"}, "has no source 'cbuf.g9'"),
])
def test_needs_that_could_never_take_effect_are_errors(op, needs, expected):
    m = op()
    m.needs = needs
    with pytest.raises(CompileError, match=re.escape(expected)):
        schedule(CFG, [m])


@pytest.mark.parametrize("kind", [DmaKind.LOAD_CBUF, DmaKind.STORE_ACC])
def test_a_moved_dma_is_the_dma_made_at_its_address(kind):
    """``ir.moved`` gives what ``make`` gives for the DMA at the new DRAM address, and
    an address past the DRAM gets ``make``'s error."""
    from systolica.compiler.microops.ir import moved
    base = make(CFG, Opcode.DMA, 3, kind=kind, buf_addr=5, rows=4, dram_stride=9)
    for addr in (1, 700, CFG.dram_words - 3 * 9 - CFG.acc_row_words):
        want = make(CFG, Opcode.DMA, 3, kind=kind, buf_addr=5, rows=4, dram_stride=9,
                    dram_addr=addr)
        got = moved(CFG, base, addr)
        assert (got.fields, got.accesses, got.layer) == (want.fields, want.accesses, 3)
        assert got.fields is not base.fields and base.fields["dram_addr"] == 0
    with pytest.raises(CompileError, match="runs past the end of that memory"):
        moved(CFG, base, CFG.dram_words - 3 * 9)


# -- partial-sum exits: the collector order ----------------------------------------------------
def _mm(cfg, act, acc, early, rows=6, bank=0):
    return make(cfg, Opcode.MATMUL, act_addr=act, rows=rows, acc_addr=acc, accumulate=0,
                bank=bank, early=early)


def _load(cfg, buf, rows):
    return make(cfg, Opcode.DMA, kind=DmaKind.LOAD_CBUF, dram_addr=0, dram_stride=1,
                buf_addr=buf, rows=rows)


def collector_faults(cfg, ops, cycles):
    """Consecutive MATMULs (in issue order) A, B with ``t_B < t_A + rows_A + max(0,
    lead_B - lead_A)``, the lead ``early * (n + 1)`` (docs/contract.md)."""
    mms = sorted((t, op.fields["rows"], op.fields["early"] * (cfg.tile_size + 1))
                 for op, t in zip(ops, cycles) if op.op is Opcode.MATMUL)
    return [(a, b) for a, b in zip(mms, mms[1:])
            if b[0] < a[0] + a[1] + max(0, b[2] - a[2])]


def mixed_exits(cfg, seed, count=24):
    """MATMULs of random early, rows and operands, some behind loads of random length
    (they wait, and the ones after fill the gaps in front of them)."""
    rng = random.Random(seed)
    ops = []
    for k in range(count):
        act = 64 * k
        if rng.random() < 0.4:
            ops.append(_load(cfg, act, rng.randrange(1, 40)))
        ops.append(_mm(cfg, act, 8 * (k % 24), rng.randrange(cfg.tile_rows),
                       rows=rng.randrange(1, 9), bank=rng.randrange(2)))
    return ops


def _without_collector_order(monkeypatch):
    """The scheduler as it was: no collector order check."""
    from systolica.compiler.scheduling import schedule as schedule_module

    class Nothing:
        def clash_end(self, t, rows, lead):
            return None

        def add(self, t, rows, lead):
            pass

    monkeypatch.setattr(schedule_module, "IssueOrder", Nothing)


def _program(ops, cycles):
    return sorted((op.instr(t) for op, t in zip(ops, cycles)), key=lambda i: i.cycle)


def _golden_knows_collector_order(cfg) -> bool:
    from systolica import golden
    a, b = _mm(cfg, 0, 0, 0), _mm(cfg, 100, 8, 1)
    return golden.check(cfg, [a.instr(0), b.instr(a.fields["rows"])]).fault is not None


@pytest.mark.parametrize("config, seed", sample([(c, k) for c in ("tiny", "tiny_tall")
                                                  for k in range(6)], 4))
def test_mixed_exits_reach_the_collector_in_issue_order(config, seed, monkeypatch):
    cfg = preset(config)
    ops = mixed_exits(cfg, seed)
    cycles = schedule(cfg, ops)
    assert collector_faults(cfg, ops, cycles) == []
    assert len(set(cycles)) == len(cycles)
    _without_collector_order(monkeypatch)
    if seed == 0:                       # the rule is what moved them
        assert collector_faults(cfg, ops, schedule(cfg, ops))


@pytest.mark.parametrize("config", ["tiny", "tiny_tall"])
@pytest.mark.parametrize("seed", range(3))
def test_mixed_exits_pass_the_golden_timing_check(config, seed):
    from systolica import golden
    cfg = preset(config)
    assert _golden_knows_collector_order(cfg)
    ops = mixed_exits(cfg, seed)
    timeline = golden.check(cfg, _program(ops, schedule(cfg, ops)))
    assert timeline.fault is None, timeline


@pytest.mark.parametrize("wait", sample(range(1, 30), 3))
def test_a_gap_takes_a_matmul_only_if_it_keeps_the_collector_order(wait, monkeypatch):
    """A load of `wait` rows holds back a MATMUL exiting one tile row up (5 cycles
    sooner on ``tiny``); the independent plain MATMUL after it may fill the gap in
    front of it only if it reaches the collector in time, else it goes behind."""
    lead = CFG.tile_size + 1
    ops = [_load(CFG, 200, wait), _mm(CFG, 0, 0, 0), _mm(CFG, 200, 8, 1),
           _mm(CFG, 20, 16, 0)]
    _, first, held, filler = cycles = schedule(CFG, ops)
    m = 6
    assert collector_faults(CFG, ops, cycles) == []
    assert held == max(first + m + lead, cycles[0] + done(ops[0]))   # and its load's
    gap = held - (first + m)
    if gap >= m + lead:                 # fits with the lead: in the gap
        assert filler == first + m
    else:                               # only its occupancy would fit: behind
        assert filler == held + m
        if gap >= m:                    # the successor check is what moved it
            _without_collector_order(monkeypatch)
            unchecked = schedule(CFG, ops)
            assert unchecked[3] < unchecked[2]
            assert collector_faults(CFG, ops, unchecked)


@pytest.mark.parametrize("which", sample(range(len(NETS) + 1), 2))
def test_without_exits_the_collector_order_changes_no_cycle(which, monkeypatch):
    """With every early 0 the rule is the unit's occupancy: the schedules of whole
    networks (the NETS, a small CNN) are the ones without the check."""
    from systolica.compiler import driver as program
    from systolica.models import zoo as models
    seen = []
    monkeypatch.setattr(program, "schedule",
                        lambda cfg, ops: seen.append((cfg, ops)) or schedule(cfg, ops))
    net = NETS[which] if which < len(NETS) else models.small_cnn()
    compile_network(CFG, net)
    (cfg, ops), = seen
    assert any(op.op is Opcode.MATMUL for op in ops)
    assert not any(op.fields.get("early") for op in ops)
    cycles = schedule(cfg, ops)
    _without_collector_order(monkeypatch)
    assert schedule(cfg, ops) == cycles
