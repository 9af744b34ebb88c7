"""Cycle assignment for datapath statements (exact timing, seed 002 Table 1 / 2).

A datapath value exists on a wire for one cycle, so a statement runs exactly
``latency(producer)`` cycles after each producer of a value it reads. Statements are
visited in dependency order; each joins its producers' groups (sets of statements
whose relative cycles are already fixed): producers in different groups are shifted
against each other for free, producers in one group must agree, or the program has
two paths of different latency (an error, or delay registers with
``insert_delays=True``). Each group is then anchored (cycle 0 = the first operand of
its first statement with operands) and independent groups are placed so they do not
share a component in the same cycle.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from systolica.arch.config import ChipConfig
from systolica.compiler.errors import CompileError
from systolica.compiler.frontend.text import Program, Statement, format_statement
from systolica.compiler.scheduling.busy import BusyIntervals

DELAY_OP, DELAY_UNIT = "delay", "dreg"

#: The most delay registers ``insert_delays`` adds to one program: each is a statement
#: of its own, so two paths a million cycles apart would take a million of them.
MAX_DELAY_REGISTERS = 4096


class CycleError(CompileError):
    """A datapath program that has no exact-timing schedule."""


# -- latency table --------------------------------------------------------------------
def component_class(component: str) -> str:
    """``mul0`` -> ``mul``: the component name without trailing digits."""
    return re.sub(r"\d+$", "", component) or component


def latency_keys(op: str, component: str) -> tuple[str, str]:
    return f"{op}.{component_class(component)}", op


def latency_of(table: Mapping[str, int], op: str, component: str) -> int:
    """Cycles from a statement's issue to its result: ``table["op.class"]``, else
    ``table["op"]``; ``delay`` defaults to 1."""
    for k in latency_keys(op, component):
        if k in table:
            return table[k]
    if op == DELAY_OP:
        return 1
    raise CycleError(f"no latency for operation '{op}' on component '{component}': the "
                     f"latency table has neither "
                     f"{' nor '.join(map(repr, latency_keys(op, component)))} "
                     f"(add a line like `latency {op} = 1` to the program)")


def occupancy_of(table: Mapping[str, int], op: str, component: str) -> int:
    """Cycles the component is busy: ``table["op.class.occupancy"]``, else 1."""
    return table.get(f"{op}.{component_class(component)}.occupancy", 1)


# -- the result -----------------------------------------------------------------------
@dataclass(frozen=True)
class Slot:
    statement: Statement
    cycle: int         # relative (seed's Table 2); may be negative
    issue: int         # cycle - min over the program: the issue schedule
    unit: str          # the component it occupies
    occupancy: int     # cycles the unit is busy, from `issue`
    latency: int       # cycles until its results are available
    inserted: bool = False   # a delay register added by insert_delays


@dataclass(frozen=True)
class Schedule:
    """Slots in program order (inserted delay registers follow their producer's line)."""
    slots: tuple[Slot, ...]

    def __iter__(self):
        return iter(self.slots)

    def __len__(self):
        return len(self.slots)

    def of(self, value: str) -> Slot:
        """The slot of the statement that defines `value`."""
        for s in self.slots:
            if value in s.statement.outputs:
                return s
        raise KeyError(value)

    def at_line(self, line: int) -> Slot:
        found = [s for s in self.slots if s.statement.line == line and not s.inserted]
        if not found:
            raise KeyError(line)
        return found[0]

    def by_issue(self) -> list[Slot]:
        return sorted(self.slots, key=lambda s: (s.issue, s.unit))

    @property
    def length(self) -> int:
        """Cycles from the first issue until the last unit is free and the last result
        has arrived."""
        return max((s.issue + max(s.occupancy, s.latency) for s in self.slots), default=0)

    @property
    def inserted(self) -> list[Statement]:
        return [s.statement for s in self.slots if s.inserted]


# -- dependency graph ---------------------------------------------------------------------
def producers(statements: Sequence[Statement], inputs: Sequence[str] = (),
              filename: str = "<text>") -> list[list[int]]:
    """For each statement, the indices of the statements producing values it reads
    (unique, in operand order). Names that are proc inputs add no dependency."""
    defined: dict[str, int] = {}
    for i, st in enumerate(statements):
        for out in st.outputs:
            defined[out] = i
    inputs = set(inputs)
    preds = []
    for st in statements:
        ps: list[int] = []
        for a in st.operands:
            if a in defined:
                if defined[a] not in ps:
                    ps.append(defined[a])
            elif a not in inputs:
                raise CycleError(f"{filename}:{st.line}:{st.col}: '{a}' is used but never "
                                 f"defined by a statement of this kind or as a proc input")
        preds.append(ps)
    return preds


def topological_order(statements: Sequence[Statement], preds: list[list[int]],
                      filename: str = "<program>") -> list[int]:
    """Statement indices, producers first (text order among ready statements); raises
    CycleError naming the statements of a dependency cycle."""
    n = len(statements)
    succs: list[list[int]] = [[] for _ in range(n)]
    indeg = [len(p) for p in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    ready = deque(i for i in range(n) if indeg[i] == 0)
    order = []
    while ready:
        i = ready.popleft()
        order.append(i)
        for s in succs[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    if len(order) == n:
        return order
    # walk producers from an unplaced statement until one repeats: that is a cycle
    left = {i for i in range(n) if indeg[i] > 0}
    i = min(left)
    seen: dict[int, int] = {}
    walk = []
    while i not in seen:
        seen[i] = len(walk)
        walk.append(i)
        i = next(p for p in preds[i] if p in left)
    loop = walk[seen[i]:][::-1]
    names = " -> ".join(f"{statements[j].name} (line {statements[j].line})"
                        for j in loop + [loop[0]])
    first = statements[loop[0]]
    raise CycleError(f"{filename}:{first.line}:{first.col}: dependency cycle: {names}; a "
                     f"value cannot depend on itself "
                     f"(break the loop with a memory such as ram)")


# -- cycle assignment -----------------------------------------------------------------------
class _Groups:
    """Weighted union-find: ``offset(i)`` = cycle(i) - cycle(root(i))."""

    def __init__(self, n: int):
        self.parent = list(range(n))
        self.off = [0] * n

    def find(self, i: int) -> tuple[int, int]:
        path = []
        while self.parent[i] != i:
            path.append(i)
            i = self.parent[i]
        root, acc = i, 0
        for j in reversed(path):        # compress, nearest the root first
            acc += self.off[j]
            self.off[j] = acc
            self.parent[j] = root
        return (root, self.off[path[0]]) if path else (root, 0)

    def attach(self, i: int, root: int, offset: int) -> None:
        """Make root `i` a child of `root` at ``cycle(i) = cycle(root) + offset``."""
        self.parent[i] = root
        self.off[i] = offset


def _path(preds: list[list[int]], src: int, dst: int) -> list[int]:
    """A producer chain src -> ... -> dst (inclusive), by breadth-first search."""
    back = {dst: None}
    todo = deque([dst])
    while todo:
        i = todo.popleft()
        if i == src:
            break
        for p in preds[i]:
            if p not in back:
                back[p] = i
                todo.append(p)
    chain = [src]
    while chain[-1] != dst:
        chain.append(back[chain[-1]])
    return chain


def _ancestors(preds: list[list[int]], i: int) -> set[int]:
    seen = {i}
    todo = [i]
    while todo:
        for p in preds[todo.pop()]:
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen


def _mismatch(statements, preds, lat, rank, s: int, p: int, q: int, rp: int, rq: int,
              filename: str) -> CycleError:
    """The error for statement `s` whose operands from `p` and `q` would arrive
    ``rp`` and ``rq`` (same group, rp > rq)."""
    st = statements[s]
    common = _ancestors(preds, p) & _ancestors(preds, q)

    def show(chain):
        def cut(items):              # long paths: both ends and how many between
            if len(items) <= 9:
                return items
            return items[:4] + [f"... {len(items) - 8} more ..."] + items[-4:]
        names = " -> ".join(cut([f"{statements[j].name} (line {statements[j].line})"
                                 for j in chain]))
        parts = " + ".join(cut([f"{statements[j].op} {lat[j]}" for j in chain[:-1]]))
        return names, sum(lat[j] for j in chain[:-1]), parts

    if common:
        a = max(common, key=rank.__getitem__)          # the nearest common source
        long_names, long_lat, long_parts = show(_path(preds, a, p) + [s])
        short_names, short_lat, short_parts = show(_path(preds, a, q) + [s])
        return CycleError(
            f"{filename}:{st.line}: {st.where()} reads values that leave "
            f"{statements[a].name} (line {statements[a].line}) on two paths of different "
            f"latency: {long_names} takes {long_lat} cycles ({long_parts}) but "
            f"{short_names} takes {short_lat} cycles ({short_parts}); insert "
            f"{rp - rq} delay register(s) (`delay dreg`) on the path through "
            f"{statements[q].name}, or schedule with --insert-delays")
    return CycleError(
        f"{filename}:{st.line}: {st.where()} reads {statements[p].name} "
        f"(line {statements[p].line}) and {statements[q].name} (line {statements[q].line}), "
        f"whose cycles are already tied together so that {statements[q].name} arrives "
        f"{rp - rq} cycle(s) before {statements[p].name}; insert {rp - rq} delay "
        f"register(s) (`delay dreg`) after {statements[q].name}, or schedule with "
        f"--insert-delays")


def _check_overlap(slots: list[Slot], filename: str) -> None:
    by_unit: dict[str, list[Slot]] = {}
    for s in slots:
        by_unit.setdefault(s.unit, []).append(s)
    for unit, group in by_unit.items():
        group.sort(key=lambda s: s.cycle)
        holder = group[0]
        for s in group[1:]:
            if s.cycle < holder.cycle + holder.occupancy:
                a, b = holder, s
                span = lambda x: (f"cycle {x.cycle}" if x.occupancy == 1 else
                                  f"cycles {x.cycle}..{x.cycle + x.occupancy - 1}")
                raise CycleError(
                    f"{filename}:{b.statement.line}: the program needs {unit} twice in "
                    f"cycle {b.cycle}, but there is one: {a.statement.where()} occupies "
                    f"{span(a)} and {b.statement.where()} {span(b)}")
            if s.cycle + s.occupancy > holder.cycle + holder.occupancy:
                holder = s


def assign_cycles(latency: Mapping[str, int] | ChipConfig, statements: Sequence[Statement],
                  *, inputs: Sequence[str] = (), insert_delays: bool = False,
                  filename: str = "<text>") -> Schedule:
    """Give every datapath statement its cycle (docs/scheduling.md).

    `latency` is a latency table or a chip configuration (its ``latency``). Raises
    CycleError for a dependency cycle, two paths of different latency (unless
    `insert_delays`, which adds ``delay dreg<k>`` statements of latency 1), a missing
    latency, or a component needed twice in one cycle.
    """
    table = latency.latency if isinstance(latency, ChipConfig) else latency
    statements = list(statements)
    n = len(statements)
    preds = producers(statements, inputs, filename)
    order = topological_order(statements, preds, filename)
    rank = {i: k for k, i in enumerate(order)}
    lat = []
    for s in statements:
        try:
            lat.append(latency_of(table, s.op, s.component))
        except CycleError as e:
            raise CycleError(f"{filename}:{s.line}:{s.col}: {e}") from None
    occ = [occupancy_of(table, s.op, s.component) for s in statements]

    groups = _Groups(n)
    delays: list[tuple[int, int, int]] = []      # (producer, consumer, registers)
    for s in order:
        if not preds[s]:
            continue
        arrivals: dict[int, list[tuple[int, int]]] = {}   # root -> [(arrival, producer)]
        for p in preds[s]:
            root, off = groups.find(p)
            arrivals.setdefault(root, []).append((off + lat[p], p))
        heads = []
        for root, arr in arrivals.items():
            late = max(arr)
            for r, p in arr:
                if r != late[0]:
                    if not insert_delays:
                        raise _mismatch(statements, preds, lat, rank, s, late[1], p,
                                        late[0], r, filename)
                    delays.append((p, s, late[0] - r))
            heads.append((root, late[0]))
        base, at = heads[0]
        for root, arrival in heads[1:]:
            groups.attach(root, base, at - arrival)
        groups.attach(s, base, at)
    needs = _delay_needs(statements, delays, filename)

    # anchor each group, place independent groups clear of each other
    rel = [0] * n
    root_of = [0] * n
    members: dict[int, list[int]] = {}
    for i in range(n):
        root_of[i], rel[i] = groups.find(i)
        members.setdefault(root_of[i], []).append(i)
    cycle = [0] * n
    busy: dict[str, BusyIntervals] = defaultdict(BusyIntervals)   # per component
    # inserted delay registers occupy their own components and run in the gaps
    for root in sorted(members, key=lambda r: min(members[r])):
        group = members[root]
        anchor = next((preds[i][0] for i in group if preds[i]), group[0])
        base = -rel[anchor]
        shift = 0
        slots = [Slot(statements[i], rel[i] + base, 0, statements[i].component, occ[i],
                      lat[i]) for i in group]
        _check_overlap(slots, filename)
        moved = True
        while moved:
            moved = False
            for i in group:
                lo = rel[i] + base + shift
                end = busy[statements[i].component].clash_end(lo, lo + occ[i])
                if end is not None:
                    shift += end - lo
                    moved = True
                    break
        for i in group:
            cycle[i] = rel[i] + base + shift
            busy[statements[i].component].add(cycle[i], cycle[i] + occ[i])

    result = [Slot(st, cycle[i], 0, st.component, occ[i], lat[i])
              for i, st in enumerate(statements)]
    if delays:
        result = _insert_delays(statements, result, needs, cycle, lat)
    low = min((s.cycle for s in result), default=0)
    return Schedule(tuple(dataclasses.replace(s, issue=s.cycle - low) for s in result))


def _delay_needs(statements, delays, filename: str):
    """The delay registers ``delays`` (producer, consumer, cycles) take: per value, the
    length of its chain, and per consumer the tap each of its operands reads. More
    than MAX_DELAY_REGISTERS in all is a CycleError, before any is made."""
    need: dict[str, int] = {}
    producer_of = {o: i for i, st in enumerate(statements) for o in st.outputs}
    renames: dict[int, dict[str, tuple[str, int]]] = {}
    longest: tuple[int, int, int] = (0, 0, 0)          # (registers, producer, consumer)
    for p, s, d in delays:
        longest = max(longest, (d, p, s))
        for v in statements[s].operands:
            if producer_of.get(v) == p:
                need[v] = max(need.get(v, 0), d)
                renames.setdefault(s, {})[v] = (v, d)
    total = sum(need.values())
    if total > MAX_DELAY_REGISTERS:
        d, p, s = longest
        st, sp = statements[s], statements[p]
        raise CycleError(
            f"{filename}:{st.line}:{st.col}: balancing the paths into {st.name} takes "
            f"{total} delay registers ({d} after {sp.name}, line {sp.line}), more than "
            f"the {MAX_DELAY_REGISTERS} that --insert-delays adds to one program; make "
            f"the paths' latencies closer (the latency lines) or add the delays as "
            f"statements of your own")
    return need, renames, producer_of


def _insert_delays(statements, slots, needs, cycle, lat) -> list[Slot]:
    """Chains of ``delay dreg<k>`` registers: each value that a consumer reads too early
    gets one chain (shared by all its consumers); the consumer reads the tap that
    delays it by the missing cycles."""
    taken = {o for st in statements for o in st.outputs}
    taken |= {a for st in statements for a in st.operands}
    chains: dict[str, list[str]] = {}          # value -> delayed names, tap k at [k-1]
    need, renames, producer_of = needs
    for v, d in need.items():
        names = []
        for k in range(1, d + 1):
            name = f"{v}_d{k}"
            while name in taken:
                name += "_"
            taken.add(name)
            names.append(name)
        chains[v] = names
    counter = iter(range(1 << 30))
    units = {st.component for st in statements}
    out: list[Slot] = []
    extra_after: dict[int, list[Slot]] = {}
    for v, names in chains.items():
        p = producer_of[v]
        t = cycle[p] + lat[p]
        src = v
        for k, name in enumerate(names):
            unit = f"{DELAY_UNIT}{next(counter)}"
            while unit in units:
                unit = f"{DELAY_UNIT}{next(counter)}"
            st = Statement((name,), DELAY_OP, unit, (src,), {}, statements[p].line, 0)
            st = dataclasses.replace(st, text=format_statement(st))
            extra_after.setdefault(p, []).append(Slot(st, t + k, 0, unit, 1, 1, True))
            src = name
    for i, slot in enumerate(slots):
        if i in renames:
            st = slot.statement
            args = tuple(chains[a][renames[i][a][1] - 1] if isinstance(a, str)
                         and a in renames[i] else a for a in st.args)
            st = dataclasses.replace(st, args=args)
            slot = dataclasses.replace(slot, statement=dataclasses.replace(
                st, text=format_statement(st)))
        out.append(slot)
        out.extend(extra_after.get(i, []))
    return out


def check_latency(cfg: ChipConfig, program: Program) -> None:
    """Every ``latency`` line of `program` must change some datapath statement's
    latency or occupancy; a line that changes nothing cannot be meant. The chip's own
    keys (``cfg.latency``: memory reads, the vector unit) are fixed by its RTL, so they
    only count where a datapath statement uses them."""
    table = {**cfg.latency, **program.latency}
    used = set()
    for st in program.datapath:
        specific, general = latency_keys(st.op, st.component)
        used.add(specific if specific in table else general)
        used.add(f"{specific}.occupancy")
    for key in program.latency:
        if key in used:
            continue
        line, col = program.latency_at.get(key, (1, 1))
        if key in cfg.latency:
            why = (f"'{key}' is a latency of the chip's own units, which the {cfg.name} "
                   f"chip's RTL fixes at {cfg.latency[key]}; latency lines set the "
                   f"latency of datapath components only (remove the line, or give the "
                   f"chip another configuration)")
        else:
            why = (f"no datapath statement uses '{key}', so the line changes nothing (a "
                   f"statement `op comp(...)` takes `op.<comp without digits>`, else `op`, "
                   f"and occupancy `op.<comp without digits>.occupancy`); remove it or "
                   f"correct the key")
        raise CycleError(f"{program.filename}:{line}:{col}: latency {key}: {why}")


def schedule_program(cfg: ChipConfig, program: Program, *,
                     insert_delays: bool = False) -> Schedule:
    """The datapath statements of `program` with its latency directives over
    ``cfg.latency`` (each of which must change something, :func:`check_latency`)."""
    check_latency(cfg, program)
    return assign_cycles({**cfg.latency, **program.latency}, program.datapath,
                         inputs=program.inputs, insert_delays=insert_delays,
                         filename=program.filename)
