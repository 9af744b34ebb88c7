"""Assign configuration updates to cycles inside their update windows (seed 002, Fig. 4).

An update window ``[lo, hi]`` (inclusive) is the set of issue cycles at which one
multiplexer update may issue. The chip limits updates per cycle, allows them only on
multiples of an interval, and limits updates per power domain per cycle. Greedy,
most constrained first: the window with the fewest feasible cycles (recounted after
every assignment) takes its earliest feasible cycle. Only windows covering a cycle
that just filled up need recounting, so a run costs about the total number of
(window, candidate cycle) pairs.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from systolica.compiler.errors import CompileError


class ConfigUpdateError(CompileError):
    """Configuration updates that cannot all be placed."""


@dataclass(frozen=True)
class UpdateWindow:
    name: str
    lo: int          # first cycle the update may issue at
    hi: int          # last cycle (inclusive)
    domain: str = ""  # power domain of the multiplexer
    page: int = 0     # its SETCFG page: one cycle's updates share one (isa.mux_page)

    def __str__(self):
        return f"{self.name} [{self.lo}, {self.hi}]"


def window_between(name: str, old_use: tuple[int, int], new_use: tuple[int, int],
                   domain: str = "", page: int = 0) -> UpdateWindow:
    """The update window between the last use of the old setting and the first use
    of the new one, given as ``[lo, hi)`` cycle spans (``timing.mux_use``). An update
    issued at ``t`` takes effect at ``t + 1``: it may issue from the old use's last
    cycle up to the cycle before the new use."""
    return UpdateWindow(name, old_use[1] - 1, new_use[0] - 1, domain, page)


def domain_limit(domain_budget: int | Mapping[str, int] | None, domain: str) -> int | None:
    """Updates power domain `domain` may take per cycle under `domain_budget` (one
    number for all, or per domain), None where unlimited."""
    if isinstance(domain_budget, Mapping):
        return domain_budget.get(domain)
    return domain_budget


def assign_updates(windows: Iterable[UpdateWindow], *, per_cycle: int, interval: int = 1,
                   domain_budget: int | Mapping[str, int] | None = None,
                   allowed: Collection[int] | Callable[[int], bool] | None = None,
                   busy: Collection[int] | None = None) -> dict[str, int]:
    """Issue cycle of each window's update, by window name.

    `per_cycle`: updates one cycle can take; `interval`: updates only on multiples of
    it; `domain_budget`: updates per power domain per cycle (one number for all, or
    per domain; a domain not in the mapping is unlimited); `allowed`: the cycles
    permitted at all (a set of cycles or a predicate); `busy`: instead of `allowed`,
    the cycles taken (e.g. the program's issue slots), every other cycle from 0 on
    being allowed -- the fast form for long programs. The updates of one cycle share a
    page (one SETCFG names one page's multiplexers).
    Raises ConfigUpdateError naming the windows that collide and their cycles.
    """
    windows = list(windows)
    names = [w.name for w in windows]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ConfigUpdateError(f"two update windows are named {dup!r}")
    if per_cycle < 1 or interval < 1:
        raise ConfigUpdateError(f"per_cycle ({per_cycle}) and interval ({interval}) must "
                                f"be positive")

    def budget(domain: str) -> int | None:
        return domain_limit(domain_budget, domain)

    if busy is not None:
        if allowed is not None:
            raise ValueError("give assign_updates `allowed` or `busy`, not both")
        taken = frozenset(busy)
        allowed = lambda c: c >= 0 and c not in taken          # noqa: E731
        # the taken cycles that are multiples of the interval, to count a window's
        # allowed cycles without visiting them
        taken_steps = sorted(c for c in taken if c >= 0 and c % interval == 0)
    allowed_sorted = sorted(allowed) if isinstance(allowed, Collection) else None

    def candidates(w: UpdateWindow, limit: int) -> list[int] | None:
        """The window's allowed cycles; None if there are more than `limit` (such a
        window can never run out: fewer cycles than that can fill up)."""
        if allowed_sorted is not None:
            a, b = bisect_left(allowed_sorted, w.lo), bisect_right(allowed_sorted, w.hi)
            span = (c for c in allowed_sorted[a:b] if c % interval == 0)
        else:
            first = -(-w.lo // interval) * interval
            span = range(first, w.hi + 1, interval)
            if allowed is None:
                return list(span) if len(span) <= limit else None
            if busy is not None:
                span = range(max(first, 0), w.hi + 1, interval)
                if not span:
                    return []
                hits = (bisect_right(taken_steps, w.hi)
                        - bisect_left(taken_steps, max(first, 0)))
                if len(span) - hits > limit:
                    return None
                return [c for c in span if c not in taken]
            span = (c for c in span if allowed(c))
        out = []
        for c in span:
            out.append(c)
            if len(out) > limit:
                return None
        return out

    limit = len(windows)
    cands: list[list[int] | None] = [candidates(w, limit) for w in windows]
    load: dict[int, int] = {}
    dload: dict[tuple[int, str], int] = {}
    page_at: dict[int, int] = {}                        # cycle -> page of its updates

    budgets = [budget(w.domain) for w in windows]     # per window, asked often

    def feasible(k: int, c: int) -> bool:
        if load.get(c, 0) >= per_cycle or page_at.get(c, windows[k].page) != windows[k].page:
            return False
        b = budgets[k]
        return b is None or dload.get((c, windows[k].domain), 0) < b

    cover: dict[int, list[int]] = {}
    count = [0] * len(windows)
    for k, cs in enumerate(cands):
        if cs is None:
            count[k] = limit + 1
            continue
        if not cs:
            w = windows[k]
            why = f"multiple of {interval}" if interval > 1 else "cycle"
            raise ConfigUpdateError(
                f"update window {w} contains no {why} where updates are allowed, so "
                f"update {w.name} cannot be placed")
        count[k] = len(cs)
        for c in cs:
            cover.setdefault(c, []).append(k)

    heap = [(count[k], windows[k].hi, k) for k in range(len(windows))]
    heapq.heapify(heap)
    result: dict[str, int] = {}
    placed_at: dict[int, list[int]] = {}
    done = [False] * len(windows)
    while heap:
        n, _, k = heapq.heappop(heap)
        if done[k] or n != count[k]:
            continue                                    # stale entry
        w = windows[k]
        if cands[k] is not None:
            c = next((c for c in cands[k] if feasible(k, c)), None)
        else:
            c = next((c for c in _scan(w, interval, allowed) if feasible(k, c)), None)
        if c is None:
            raise _collision(windows, k, cands[k], placed_at, per_cycle, budget)
        done[k] = True
        result[w.name] = c
        placed_at.setdefault(c, []).append(k)
        was_full = load.get(c, 0) >= per_cycle
        opened = c not in page_at                       # the cycle's page is now w's
        page_at[c] = w.page
        load[c] = load.get(c, 0) + 1
        key = (c, w.domain)
        dload[key] = dload.get(key, 0) + 1
        if was_full:
            continue                                    # no window lost this cycle now
        now_full = load[c] >= per_cycle
        b = budgets[k]
        domain_full = b is not None and dload[key] == b
        for v in cover.get(c, ()):
            if done[v]:
                continue
            wv = windows[v]
            same = wv.domain == w.domain
            if not (now_full or (same and domain_full) or (opened and wv.page != w.page)):
                continue
            vb = budgets[v]
            if vb is None or dload.get((c, wv.domain), 0) - same < vb:   # it was open
                count[v] -= 1
                heapq.heappush(heap, (count[v], wv.hi, v))
    return result


def _scan(w: UpdateWindow, interval: int, allowed) -> Iterable[int]:
    first = -(-w.lo // interval) * interval
    for c in range(first, w.hi + 1, interval):
        if allowed is None or (allowed(c) if callable(allowed) else c in allowed):
            yield c


def _collision(windows, k, cands, placed_at, per_cycle, budget) -> ConfigUpdateError:
    w = windows[k]
    cycles = cands if cands is not None else sorted(placed_at)
    cycles = [c for c in cycles if c in placed_at and w.lo <= c <= w.hi]
    rivals = sorted({j for c in cycles for j in placed_at[c]},
                    key=lambda j: (windows[j].lo, windows[j].name))
    b = budget(w.domain)
    limit = f"{per_cycle} update(s) per cycle" + (
        f" and {b} per cycle in power domain {w.domain or '(default)'}" if b is not None else "")
    if any(windows[j].page != w.page for j in rivals):
        limit += (f", all of one SETCFG page (update {w.name} is in page {w.page}, "
                  f"{', '.join(windows[j].name for j in rivals if windows[j].page != w.page)}"
                  f" in another)")
    return ConfigUpdateError(
        f"configuration updates collide: windows "
        f"{', '.join(str(windows[j]) for j in rivals + [k])} compete for cycle(s) "
        f"{', '.join(map(str, cycles))}, which take {limit}; update {w.name} has no "
        f"cycle left (widen a window or spread the uses)")
