"""Configuration-update scheduling: seed 002 Fig. 4 (cycles x, y, z; two updates per
cycle), its infeasible variant, the update interval and power-domain budgets."""

import re

import pytest

from systolica.compiler import CompileError
from systolica.compiler.scheduling.config_updates import (
    ConfigUpdateError,
    UpdateWindow,
    assign_updates,
    window_between,
)

X, Y, Z = 10, 20, 30
# Fig. 4: update windows 412 (only x), 422 (x..z), 435 (only z), 443 (only x), 445 (only z);
# cu0..cu4 are their updates
CU = {"cu0": "uw412", "cu1": "uw422", "cu2": "uw435", "cu3": "uw443", "cu4": "uw445"}
FIG4 = [UpdateWindow("uw412", 8, 12), UpdateWindow("uw422", 5, 35),
        UpdateWindow("uw435", 28, 33), UpdateWindow("uw443", 9, 15),
        UpdateWindow("uw445", 25, 31)]


def test_seed_fig4():
    got = assign_updates(FIG4, per_cycle=2, allowed={X, Y, Z})
    assert {cu: got[w] for cu, w in CU.items()} == \
        {"cu0": X, "cu3": X, "cu2": Z, "cu4": Z, "cu1": Y}


def test_seed_fig4_with_a_predicate_for_allowed_cycles():
    got = assign_updates(FIG4, per_cycle=2, allowed=lambda c: c in (X, Y, Z))
    assert got == assign_updates(FIG4, per_cycle=2, allowed={X, Y, Z})


def test_seed_fig4_window_422_equal_to_412_has_no_solution():
    windows = [w if w.name != "uw422" else UpdateWindow("uw422", 8, 12) for w in FIG4]
    with pytest.raises(ConfigUpdateError) as e:
        assign_updates(windows, per_cycle=2, allowed={X, Y, Z})
    msg = str(e.value)
    for name in ("uw412 [8, 12]", "uw422 [8, 12]", "uw443 [9, 15]"):
        assert name in msg
    assert "compete for cycle(s) 10," in msg and "2 update(s) per cycle" in msg
    assert "uw435" not in msg and "uw445" not in msg
    assert isinstance(e.value, CompileError)


def test_most_constrained_first_beats_earliest_first():
    # earliest-deadline order would put wide at 0 and leave narrow nothing
    windows = [UpdateWindow("wide", 0, 3), UpdateWindow("narrow", 0, 0)]
    assert assign_updates(windows, per_cycle=1) == {"narrow": 0, "wide": 1}


def test_recount_after_each_assignment():
    # b and c both start with 2 feasible cycles; once a takes 1, b has one left
    windows = [UpdateWindow("a", 1, 1), UpdateWindow("c", 2, 3), UpdateWindow("b", 1, 2)]
    assert assign_updates(windows, per_cycle=1) == {"a": 1, "b": 2, "c": 3}


def test_interval():
    windows = [UpdateWindow("a", 1, 9), UpdateWindow("b", 3, 9), UpdateWindow("c", 4, 4)]
    assert assign_updates(windows, per_cycle=2) == {"c": 4, "a": 1, "b": 3}
    assert assign_updates(windows, per_cycle=2, interval=4) == {"c": 4, "a": 4, "b": 8}
    with pytest.raises(ConfigUpdateError, match=r"b \[3, 9\] compete for cycle\(s\) 4, 8"):
        assign_updates(windows, per_cycle=1, interval=4)


def test_window_without_an_allowed_cycle():
    with pytest.raises(ConfigUpdateError,
                       match=r"window w \[5, 7\] contains no multiple of 4"):
        assign_updates([UpdateWindow("w", 5, 7)], per_cycle=1, interval=4)
    with pytest.raises(ConfigUpdateError, match=r"window w \[5, 7\] contains no cycle"):
        assign_updates([UpdateWindow("w", 5, 7)], per_cycle=1, allowed={4, 8})


def test_domain_budget():
    windows = [UpdateWindow("q", 0, 0, "d1"), UpdateWindow("p1", 0, 1, "d0"),
               UpdateWindow("p2", 0, 1, "d0")]
    assert assign_updates(windows, per_cycle=3) == {"q": 0, "p1": 0, "p2": 0}
    assert assign_updates(windows, per_cycle=3, domain_budget=1) == {"q": 0, "p1": 0, "p2": 1}
    assert assign_updates(windows, per_cycle=3, domain_budget={"d0": 2}) == \
        {"q": 0, "p1": 0, "p2": 0}
    tight = [UpdateWindow("p1", 0, 0, "d0"), UpdateWindow("p2", 0, 0, "d0"),
             UpdateWindow("q", 0, 0, "d1")]
    with pytest.raises(ConfigUpdateError) as e:
        assign_updates(tight, per_cycle=3, domain_budget=1)
    assert "p1 [0, 0], p2 [0, 0]" in str(e.value)
    assert "1 per cycle in power domain d0" in str(e.value)


def test_domain_budget_recounts_only_that_domain():
    # after a fills domain d0 at cycle 2, b (d0) has only 3 left; c (d1) keeps 2 and 3
    windows = [UpdateWindow("a", 2, 2, "d0"), UpdateWindow("b", 2, 3, "d0"),
               UpdateWindow("c", 2, 3, "d1"), UpdateWindow("d", 3, 3, "d1")]
    got = assign_updates(windows, per_cycle=2, domain_budget=1)
    assert got == {"a": 2, "d": 3, "b": 3, "c": 2}


def test_one_cycle_updates_one_page():
    """One SETCFG names one page's multiplexers (isa.mux_page): updates of two pages
    never share a cycle, and a window left without one says why."""
    windows = [UpdateWindow("a", 0, 1, "d", page=1), UpdateWindow("b", 0, 0, "d"),
               UpdateWindow("c", 0, 1, "d")]
    assert assign_updates(windows, per_cycle=8) == {"b": 0, "c": 0, "a": 1}
    tight = [UpdateWindow("a", 0, 0, page=1), UpdateWindow("b", 0, 0)]
    with pytest.raises(ConfigUpdateError, match=r"all of one SETCFG page \(update b is "
                                                r"in page 0, a in another\)"):
        assign_updates(tight, per_cycle=8)


def test_placements_across_pages_keep_every_limit():
    """Random windows of two pages and two domains: what the solver places keeps every
    limit, and it places most of what a brute-force search finds placeable."""
    import itertools
    import random
    rng = random.Random(7)
    solved = solvable = 0
    for _ in range(300):
        windows = []
        for k in range(rng.randrange(2, 6)):
            lo = rng.randrange(4)
            windows.append(UpdateWindow(f"w{k}", lo, lo + rng.randrange(3),
                                        f"d{rng.randrange(2)}", rng.randrange(2)))
        limits = dict(per_cycle=rng.randrange(1, 4), domain_budget=rng.randrange(1, 3))

        def ok(at):
            return all(w.lo <= at[w.name] <= w.hi for w in windows) and all(
                sum(at[w.name] == c for w in windows) <= limits["per_cycle"]
                and len({w.page for w in windows if at[w.name] == c}) <= 1
                and all(sum(at[w.name] == c and w.domain == d for w in windows)
                        <= limits["domain_budget"] for d in ("d0", "d1"))
                for c in set(at.values()))
        placeable = any(ok({w.name: c for w, c in zip(windows, cs)}) for cs in
                        itertools.product(*(range(w.lo, w.hi + 1) for w in windows)))
        solvable += placeable
        try:
            at = assign_updates(windows, **limits)
        except ConfigUpdateError:
            continue
        assert ok(at), (windows, limits, at)
        solved += 1
    assert solved >= 0.9 * solvable > 100


def test_window_between_uses():
    # old setting used in [3, 7), new one from 12: issue from 6 (effective 7) to 11
    assert window_between("u", (3, 7), (12, 15), "d") == UpdateWindow("u", 6, 11, "d")


def test_duplicate_names_rejected():
    with pytest.raises(ConfigUpdateError, match="two update windows are named 'a'"):
        assign_updates([UpdateWindow("a", 0, 1), UpdateWindow("a", 2, 3)], per_cycle=1)


def test_many_windows_are_fast():
    import time
    n = 10_000
    windows = [UpdateWindow(f"w{i}", i, i + 40, f"d{i % 4}") for i in range(n)]
    t = time.perf_counter()
    got = assign_updates(windows, per_cycle=2, interval=2, domain_budget=1)
    assert time.perf_counter() - t < 10
    assert len(got) == n
    assert all(c % 2 == 0 and windows[i].lo <= c <= windows[i].hi
               for i, c in enumerate(got[w.name] for w in windows))
    per = {}
    for w in windows:
        per.setdefault(got[w.name], []).append(w.domain)
    assert all(len(d) <= 2 and len(set(d)) == len(d) for d in per.values())


def test_seed_fig4_with_eight_updates_per_cycle():
    """Fig. 4 with four multiplexers behind each window and K = 8 (the seed's widest
    SETCFG, isa.SETCFG_PAIRS): x and z each take exactly eight updates, y four."""
    from systolica.arch import isa
    assert isa.SETCFG_PAIRS == 8
    windows = [UpdateWindow(f"{w.name}.{k}", w.lo, w.hi) for w in FIG4 for k in range(4)]
    got = assign_updates(windows, per_cycle=8, allowed={X, Y, Z})
    for cu, w in CU.items():
        want = {"cu0": X, "cu3": X, "cu2": Z, "cu4": Z, "cu1": Y}[cu]
        assert {got[f"{w}.{k}"] for k in range(4)} == {want}, cu
    assert sorted(got.values()).count(X) == sorted(got.values()).count(Z) == 8
    # a ninth update that can only go at x does not fit
    with pytest.raises(ConfigUpdateError) as e:
        assign_updates(windows + [UpdateWindow("uw9", 9, 11)], per_cycle=8,
                       allowed={X, Y, Z})
    assert "uw9 [9, 11]" in str(e.value) and "8 update(s) per cycle" in str(e.value)
    # seven per cycle: the same windows do not fit either
    with pytest.raises(ConfigUpdateError, match="7 update"):
        assign_updates(windows, per_cycle=7, allowed={X, Y, Z})


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("interval", [1, 3])
def test_busy_cycles_place_as_the_predicate_does(seed, interval):
    """``busy`` (the fast form: every cycle from 0 on but these) places each update
    where the equivalent predicate does, on windows wide and narrow, in two pages and
    two power domains."""
    import random
    rng = random.Random(seed)
    busy = set(rng.sample(range(200), 40))
    windows = []
    for k in range(60):
        lo = rng.randrange(-5, 150)
        hi = max(lo, 0) + rng.choice([8, 12, 30, 300])
        windows.append(UpdateWindow(f"w{k}", lo, hi, domain=f"d{k % 2}", page=k % 3 // 2))
    kw = dict(per_cycle=3, interval=interval, domain_budget={"d0": 2})
    try:
        want = assign_updates(windows, allowed=lambda c: c >= 0 and c not in busy, **kw)
    except ConfigUpdateError as e:
        with pytest.raises(ConfigUpdateError, match=re.escape(str(e))):
            assign_updates(windows, busy=busy, **kw)
        return
    assert assign_updates(windows, busy=busy, **kw) == want


def test_busy_and_allowed_together_are_refused():
    with pytest.raises(ValueError, match="`allowed` or `busy`"):
        assign_updates(FIG4, per_cycle=2, allowed={X}, busy={Y})
