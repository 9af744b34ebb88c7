"""``ROUTE``: CBUF rows through the general lanes (docs/contract.md, "ROUTE").

Programs set a route (turns, and skip links where they save a register), move rows
through it and store them. The expected words are built from the contract's words
(``route_bench.expected``: partition group ``g`` of row ``r`` takes the west tile row
the route sends to column group ``(g + col0) % Tc``), not from the golden model;
the golden model and the RTL must equal them, and the cycles the prediction."""

from __future__ import annotations

import numpy as np
import pytest
from test_concat_lanes import concat_net

from systolica import golden
from systolica.app import route_bench
from systolica.app.route_bench import OUT, M
from systolica.arch import fabric, isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import Instr, Opcode
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode
from systolica.compiler import compile_network
from systolica.compiler.planning import lanes

from chip_runs import assert_matches_prediction, assert_outputs_match, run_many_on_rtl

# (moves: column group -> west tile row, col0) per preset; each preset's first case
# takes a skip link where the grid has one
CASES = {
    "tiny": [({0: 1, 1: 0}, 0), ({0: 0, 1: 0}, 1)],
    "tiny_tall": [({0: 0, 1: 1}, 0), ({0: 3, 1: 0}, 1), ({1: 2}, 1)],
    "tiny_wide": [({3: 0, 2: 1}, 2), ({0: 1, 1: 1, 2: 0, 3: 0}, 1), ({0: 1, 1: 0}, 0)],
}
_dram, _expected, _program = route_bench.dram, route_bench.expected, route_bench.program


def _image(prog):
    return isa.to_bytes([isa.encode(i) for i in prog])


@pytest.mark.parametrize("name", CASES)
def test_routes_move_groups_in_the_golden_model(name):
    cfg = preset(name)
    for seed, (moves, col0) in enumerate(CASES[name]):
        for skips in (False, True):
            route, keep, prog = _program(cfg, moves, col0, skips)
            dram = _dram(cfg, seed)
            res = golden.run(cfg, Loadable.for_chip(cfg, _image(prog), dram))
            assert res.error == ErrorCode.NONE
            np.testing.assert_array_equal(res.dram[OUT:OUT + M, :cfg.rows],
                                          _expected(cfg, dram, moves, col0, keep))
            assert res.cycles == timing.run_cycles(cfg, prog)


def test_skip_links_shorten_the_routes_that_can_take_them():
    """Each first case crosses at least two tiles in one direction: its span is a
    cycle shorter with the skip links, and so is the run."""
    for name in ("tiny_tall", "tiny_wide"):
        cfg = preset(name)
        moves, col0 = CASES[name][0]
        plain, _, p0 = _program(cfg, moves, col0, skips=False)
        short, _, p1 = _program(cfg, moves, col0, skips=True)
        assert short.skips > 0 and short.span == plain.span - 1
        assert timing.run_cycles(cfg, p1) == timing.run_cycles(cfg, p0) - 1
    # tiny has no tile two back: nothing to skip
    tiny = lanes.plan_route(preset("tiny"), {0: 0, 1: 0})
    assert tiny.skips == 0


def test_a_later_sample_reads_a_later_row():
    """One more cycle of span and of every delay changes nothing; a delay one short
    of the route samples the next row, and the last row takes zero."""
    cfg = preset("tiny_tall")
    moves, col0 = {0: 3, 1: 0}, 1
    route, keep, prog = _program(cfg, moves, col0, delay_shift=1)
    dram = _dram(cfg, 3)
    res = golden.run(cfg, Loadable.for_chip(cfg, _image(prog), dram))
    np.testing.assert_array_equal(res.dram[OUT:OUT + M, :cfg.rows],
                                  _expected(cfg, dram, moves, col0, keep))
    ins = next(i for i in prog if i.op is Opcode.ROUTE)
    ins.fields["delay1"] -= 1        # column group 1 now samples a cycle later
    res = golden.run(cfg, Loadable.for_chip(cfg, _image(prog), dram))
    got = res.dram[OUT:OUT + M, :cfg.rows]
    n = cfg.tile_size
    want = _expected(cfg, dram, moves, col0, keep)
    for g in range(cfg.rows // n):
        if not keep >> g & 1 and (g + col0) % cfg.tile_cols == 1:
            want[:-1, g * n:(g + 1) * n] = want[1:, g * n:(g + 1) * n]
            want[-1, g * n:(g + 1) * n] = 0
    np.testing.assert_array_equal(got, want)


def test_a_sample_before_the_route_is_undefined():
    cfg = preset("tiny_tall")
    _, _, prog = _program(cfg, {0: 3, 1: 0}, 1)
    ins = next(i for i in prog if i.op is Opcode.ROUTE)
    ins.fields["delay1"] = ins.fields["span"]     # 4 registers: sampled before cycle 1
    with pytest.raises(golden.GoldenError, match="column group 1 is sampled"):
        golden.run(cfg, Loadable.for_chip(cfg, _image(prog), _dram(cfg, 0)))


def test_a_route_onto_its_own_rows():
    """A destination one row past the source: each row is read before it is rewritten,
    so the rows move as a copy would; five rows past, a row is rewritten before it is
    read: a hazard."""
    cfg = preset("tiny")
    moves = {0: 1, 1: 0}
    _, keep, prog = _program(cfg, moves, 0)
    dram = _dram(cfg, 2)
    src = next(i for i in prog if i.op is Opcode.ROUTE).fields["src"]
    for shift, ok in ((1, True), (5, False)):
        p = [Instr(i.op, i.cycle, dict(i.fields)) for i in prog]
        next(i for i in p if i.op is Opcode.ROUTE).fields["dst"] = src + shift
        if not ok:
            with pytest.raises(golden.GoldenError, match="write before read"):
                golden.run(cfg, Loadable.for_chip(cfg, _image(p), dram))
            continue
        res = golden.run(cfg, Loadable.for_chip(cfg, _image(p), dram))
        assert res.error == ErrorCode.NONE
        rows = dram[src:src + M, :cfg.rows].view(np.int8)
        want = np.concatenate([rows[:, 4:8], rows[:, 0:4]], axis=1)    # groups swapped
        np.testing.assert_array_equal(res.cbuf[src + shift:src + shift + M], want)


def test_a_lane_loop_is_undefined():
    cfg = preset("tiny")
    table = fabric.by_name(cfg)
    _, _, prog = _program(cfg, {0: 0, 1: 0}, 0)
    # S(1,0) from W(1,1), which with E(1,0) turns back into the other: a loop
    loop = [(table["gen_s[1][0]"].index, table["gen_s[1][0]"].value_of("east")),
            (table["gen_w[1][1]"].index, table["gen_w[1][1]"].value_of("west")),
            (table["gen_e[1][0]"].index, table["gen_e[1][0]"].value_of("east"))]
    ins = next(i for i in prog if i.op is Opcode.ROUTE)
    prog.append(Instr(Opcode.SETCFG, ins.cycle - 2, isa.setcfg_fields(loop[:2])))
    prog.append(Instr(Opcode.SETCFG, ins.cycle - 1, isa.setcfg_fields(loop[2:])))
    with pytest.raises(golden.GoldenError, match="loop"):
        golden.run(cfg, Loadable.for_chip(cfg, _image(sorted(prog, key=lambda i: i.cycle)),
                                          _dram(cfg, 0)))


def test_route_faults():
    """Illegal fields, and ROUTE on a chip without lanes, fault ILLEGAL_OPCODE; a range
    past the CBUF faults ADDR_RANGE; a SETCFG of a lane while a ROUTE uses it faults
    CFG_IN_USE."""
    cfg = preset("tiny_tall")
    _, _, prog = _program(cfg, {0: 0, 1: 1}, 0)
    at = next(k for k, i in enumerate(prog) if i.op is Opcode.ROUTE)

    def with_fields(**f):
        p = [Instr(i.op, i.cycle, dict(i.fields)) for i in prog]
        p[at].fields.update(f)
        return golden.run(cfg, Loadable.for_chip(cfg, _image(p), _dram(cfg, 0))).error

    assert with_fields(span=0) == ErrorCode.ILLEGAL_OPCODE
    assert with_fields(span=7) == ErrorCode.ILLEGAL_OPCODE        # route_span_max 6
    assert with_fields(delay1=4) == ErrorCode.ILLEGAL_OPCODE      # span 3
    assert with_fields(col0=2) == ErrorCode.ILLEGAL_OPCODE        # Tc = 2
    assert with_fields(dst=cfg.cbuf_depth - 1) == ErrorCode.ADDR_RANGE
    assert with_fields(rows=0) == ErrorCode.ADDR_RANGE
    base = preset("base")
    assert golden.run(base, Loadable.for_chip(
        base, _image([Instr(Opcode.ROUTE, 0, dict(prog[at].fields))]),
        np.zeros((64, base.dram_word_bytes), np.uint8))).error \
        == ErrorCode.ILLEGAL_OPCODE
    table = fabric.by_name(cfg)
    mux = table["gen_e[3][1]"]           # on no path, but every lane is in use
    late = Instr(Opcode.SETCFG, prog[at].cycle + 5,
                 isa.setcfg_fields([(mux.index, mux.value_of("zero"))]))
    res = golden.run(cfg, Loadable.for_chip(cfg,
                                            _image(sorted(prog + [late], key=lambda i: i.cycle)),
                                   _dram(cfg, 0)))
    assert res.error == ErrorCode.CFG_IN_USE



@pytest.mark.parametrize("name", CASES)
def test_route_timing_is_the_contracts(name):
    """From the contract's words: the router takes the next instruction in the cycle
    of its last write (``L + span + rows`` after issue), is done a cycle later, and
    holds every general lane from cycle 1 to ``L + route_span_max + rows``. (A
    prediction later than the RTL's ready cycle would not show in a run: the chip
    waits for each instruction's cycle.)"""
    from systolica.arch import geometry
    cfg = preset(name)
    L, top = cfg.latency["cbuf_read"], geometry.route_span_max(cfg)
    general = {m.name: m.name.split("[")[0] in fabric.GENERAL for m in fabric.muxes(cfg)}
    lanes_ = [m for m, lane in general.items() if lane]
    other = next(m for m, lane in general.items() if not lane)
    for span in range(1, top + 1):
        for rows in (1, 2, 37):
            fields = {k: 0 for k, _ in isa.PAYLOAD[Opcode.ROUTE]}
            fields.update(src=0, dst=100, rows=rows, span=span)
            ins = Instr(Opcode.ROUTE, 0, fields)
            assert timing.occupancy(cfg, ins) == L + span + rows
            assert timing.done(cfg, ins) == L + span + rows + 1
            assert {timing.mux_use(cfg, ins, m) for m in lanes_} == {(1, L + top + rows)}
            assert timing.mux_use(cfg, ins, other) is None

# -- samples at the edges of the route's rows --------------------------------------------
def _sampled(cfg, moves, col0, j, lag, seed=5):
    """`(program, dram, expected)`: the route of `moves` with column group `j` sampled
    `lag` rows late (negative: early): the span and every delay raised by
    ``max(1, -lag)`` (the same result), then ``delay_j`` lowered by `lag`. From the
    contract's words: a group of column group `j` in row `r` holds source row
    ``r + lag``, or zero outside the rows the route drove."""
    L = cfg.latency["cbuf_read"]
    shift = max(1, -lag)
    route, keep, prog = _program(cfg, moves, col0, delay_shift=shift)
    ins = next(i for i in prog if i.op is Opcode.ROUTE)
    ins.fields[f"delay{j}"] -= lag
    assert 0 <= ins.fields[f"delay{j}"] <= ins.fields["span"]
    assert L + ins.fields["span"] - ins.fields[f"delay{j}"] - route.latency[j] >= 0
    dram = _dram(cfg, seed)
    want = _expected(cfg, dram, moves, col0, keep)
    n = cfg.tile_size
    for g in range(cfg.rows // n):
        if keep >> g & 1 or (g + col0) % cfg.tile_cols != j:
            continue
        cols = slice(g * n, (g + 1) * n)
        moved = want[:, cols].copy()
        want[:, cols] = 0
        for r in range(M):
            if 0 <= r + lag < M:
                want[r, cols] = moved[r + lag]
    return prog, dram, want


#: (moves, col0, sampled column group) per lane chip, the group's route a few
#: registers long so that it can be sampled up to L rows early
EDGES = {"tiny": ({0: 1, 1: 0}, 0, 1), "tiny_tall": ({0: 3, 1: 0}, 1, 1),
         "tiny_wide": ({3: 0, 2: 1}, 2, 3)}


@pytest.mark.parametrize("name", EDGES)
def test_samples_at_the_edges_of_the_rows(name):
    """A sample whose origin is cycle 1 after issue (``L + span - delay - lat = 0``) is
    defined: its first row is the zero driven before the rows; one a cycle earlier is
    undefined; a sample a row late gives the last row zero."""
    cfg = preset(name)
    moves, col0, j = EDGES[name]
    L = cfg.latency["cbuf_read"]
    for lag in (-L, 1):
        prog, dram, want = _sampled(cfg, moves, col0, j, lag)
        res = golden.run(cfg, Loadable.for_chip(cfg, _image(prog), dram))
        assert res.error == ErrorCode.NONE
        np.testing.assert_array_equal(res.dram[OUT:OUT + M, :cfg.rows], want)
    prog, dram, _ = _sampled(cfg, moves, col0, j, -L)
    ins = next(i for i in prog if i.op is Opcode.ROUTE)
    ins.fields[f"delay{j}"] += 1       # its origin a cycle before the route's first
    assert ins.fields[f"delay{j}"] <= ins.fields["span"]
    with pytest.raises(golden.GoldenError, match=f"column group {j} is sampled 1 cycle"):
        golden.run(cfg, Loadable.for_chip(cfg, _image(prog), dram))


def _unrouted(cfg, seed=6):
    """`(program, dram, expected)`: a ROUTE with the lanes as reset leaves them (every
    lane straight on): each column group's path runs north to the grid's north edge,
    which the chip ties to zero, so every written group is zero."""
    _, _, prog = _program(cfg, {0: 0}, 0)
    prog = [i for i in prog if i.op is not Opcode.SETCFG]
    ins = next(i for i in prog if i.op is Opcode.ROUTE)
    ins.fields["keep"] = 0
    dram = _dram(cfg, seed)
    return prog, dram, np.zeros((M, cfg.rows), np.uint8)


@pytest.mark.parametrize("name", CASES)
def test_a_path_from_another_edge_carries_zero(name):
    cfg = preset(name)
    prog, dram, want = _unrouted(cfg)
    res = golden.run(cfg, Loadable.for_chip(cfg, _image(prog), dram))
    assert res.error == ErrorCode.NONE
    np.testing.assert_array_equal(res.dram[OUT:OUT + M, :cfg.rows], want)


def _rtl_jobs(cfg):
    jobs, want = [], []
    for seed, (moves, col0) in enumerate(CASES[cfg.name]):
        for skips in (False, True):
            route, keep, prog = _program(cfg, moves, col0, skips)
            dram = _dram(cfg, seed)
            jobs.append(dict(program=_image(prog), dram=dram, readback=[(OUT, M)]))
            want.append((prog, dram, _expected(cfg, dram, moves, col0, keep)))
    # samples L rows early (the zero driven before the rows) and a row late (the zero
    # after them), and a route from the tied-off north edge
    moves, col0, j = EDGES[cfg.name]
    edges = [_sampled(cfg, moves, col0, j, lag) for lag in (-cfg.latency["cbuf_read"], 1)]
    for prog, dram, expected in edges + [_unrouted(cfg)]:
        jobs.append(dict(program=_image(prog), dram=dram, readback=[(OUT, M)]))
        want.append((prog, dram, expected))
    return jobs, want


def _concats(cfg):
    """Compiled Concat networks (test_concat_lanes's builder): into a dense layer,
    as the output, of graph inputs, with a ragged last input."""
    n = cfg.tile_size
    return {f"cat{k}": compile_network(cfg, concat_net(M, widths, k, after=after,
                                                       direct=direct))
            for k, (M, widths, after, direct) in enumerate(
                [(40, (n, 2 * n, 3), True, False), (23, (2 * n, n, n), False, True),
                 (31, (n, cfg.rows + n, 2), False, False)])}


@pytest.mark.rtl
@pytest.mark.parametrize("name", CASES)
def test_routes_and_concats_on_rtl(name):
    """The directed programs and the compiled Concats in one simulator start."""
    cfg = preset(name)
    jobs, want = _rtl_jobs(cfg)
    nets = _concats(cfg)
    runs = run_many_on_rtl(cfg, jobs + [dict(program=c, name=k) for k, c in nets.items()])
    for res, (prog, dram, expected) in zip(runs, want):
        assert res.error_name == "NONE"
        got = res.readback[0].reshape(M, -1)[:, :cfg.rows]
        np.testing.assert_array_equal(got, expected)
        assert res.cycles == golden.run(cfg, Loadable.for_chip(cfg, _image(prog), dram)).cycles \
            == timing.run_cycles(cfg, prog)
    for res, compiled in zip(runs[len(jobs):], nets.values()):
        assert_outputs_match(cfg, compiled, res)
        assert_matches_prediction(cfg, compiled, res)
