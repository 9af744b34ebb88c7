"""The grid's general lanes (seed 002's bus lines: four directions, crossings, skip links)
on a 3 x 3 grid of 2 x 2 tiles, the smallest with a skip link in every direction that
has one, against a model written from docs/contract.md ("General lanes, crossings and
skip links"), not from the RTL:

* tile ``(i, j)`` holds four lane registers of ``n`` bytes, ``E``, ``W``, ``S``, ``N``;
  in each cycle each takes the source its multiplexer ``gen_<d>[i][j]`` names: the
  lane arriving from that side (the neighbour's register, or the grid's edge input at
  the edge; a turn keeps the byte's place), ``skip`` (the same direction's register two
  tiles back), or zero;
* a value at a source in cycle ``c`` is in the register in ``c + 1``; the edge outputs
  show the registers of the last tile on the way.

Every case drives the edge inputs and the multiplexer controls cycle by cycle and
checks every edge output in every cycle against the model. The directed cases also
check the model against the contract's latencies (a path of ``h`` registers takes
``h`` cycles; a skip passes two tiles in one) before the simulator runs.
"""

from __future__ import annotations

import random

import cocotb
from tb_tile import Plan

from systolica.arch import fabric
from systolica.arch.config import preset

from tb_base import BlockTB, requested_cases

CFG = preset("tiny").replace(name="lanes3x3", tile_rows=3, tile_cols=3, tile_size=2)
T, TC, n, R, C = CFG.tile_rows, CFG.tile_cols, CFG.tile_size, CFG.rows, CFG.cols
GEN = [m for m in fabric.muxes(CFG) if m.name.split("[")[0] in fabric.GENERAL]
SLOT = {m.name: k for k, m in enumerate(GEN)}          # gen_sel index of each

EDGE_IN = {"gen_in_w": R, "gen_in_e": R, "gen_in_n": C, "gen_in_s": C}
EDGE_OUT = {"gen_out_e": R, "gen_out_w": R, "gen_out_s": C, "gen_out_n": C}


class LaneModel:
    """The lanes' registers, stepped a cycle at a time."""

    def __init__(self):
        self.regs = {(kind, i, j): [0] * n for kind in fabric.GENERAL
                     for i in range(T) for j in range(TC)}

    def outputs(self) -> dict:
        out = {}
        for k in range(n):
            for i in range(T):
                out[("gen_out_e", i * n + k)] = self.regs["gen_e", i, TC - 1][k]
                out[("gen_out_w", i * n + k)] = self.regs["gen_w", i, 0][k]
            for j in range(TC):
                out[("gen_out_s", j * n + k)] = self.regs["gen_s", T - 1, j][k]
                out[("gen_out_n", j * n + k)] = self.regs["gen_n", 0, j][k]
        return out

    def arriving(self, inputs: dict, i: int, j: int, side: str) -> list[int]:
        edge = lambda port, base: [inputs.get((port, base + k), 0) for k in range(n)]  # noqa: E731
        if side == "west":      # travelling east
            return edge("gen_in_w", i * n) if j == 0 else self.regs["gen_e", i, j - 1]
        if side == "east":      # travelling west
            return edge("gen_in_e", i * n) if j == TC - 1 else self.regs["gen_w", i, j + 1]
        if side == "north":     # travelling south
            return edge("gen_in_n", j * n) if i == 0 else self.regs["gen_s", i - 1, j]
        assert side == "south"  # travelling north
        return edge("gen_in_s", j * n) if i == T - 1 else self.regs["gen_n", i + 1, j]

    def step(self, inputs: dict) -> None:
        new = {}
        for mux in GEN:
            kind, _, rest = mux.name.partition("[")
            i, j = (int(x) for x in rest.rstrip("]").split("]["))
            value = inputs.get(("gen_sel", SLOT[mux.name]), mux.default)
            source = mux.sources[value] if value < len(mux.sources) else fabric.ZERO
            if source == fabric.ZERO:
                new[kind, i, j] = [0] * n
            elif source == "skip":      # the same direction's register two tiles back
                di, dj = {"gen_e": (0, -2), "gen_w": (0, 2), "gen_s": (-2, 0)}[kind]
                new[kind, i, j] = list(self.regs[kind, i + di, j + dj])
            else:
                new[kind, i, j] = list(self.arriving(inputs, i, j, source))
        self.regs = new


def simulate(plan: Plan, horizon: int) -> list[dict]:
    """The model's edge outputs in every cycle ``0 .. horizon - 1`` (each seen
    before that cycle's clock edge)."""
    model, seen = LaneModel(), []
    for t in range(horizon):
        seen.append(model.outputs())
        model.step(plan.inputs[t] if t < len(plan.inputs) else {})
    return seen


def setting(plan: Plan, first: int, last: int, **muxes: str) -> None:
    """Hold multiplexers (``gen_e_0_1="north"`` for ``gen_e[0][1]``) on a source."""
    for key, source in muxes.items():
        kind, i, j = key.rsplit("_", 2)
        name = f"{kind}[{i}][{j}]"
        mux = fabric.by_name(CFG)[name]
        plan.hold(first, last, ("gen_sel", SLOT[name]), mux.value_of(source))


def finish(plan: Plan, horizon: int, marks=()) -> Plan:
    """Expect every edge output in every cycle as the model has it; ``marks``: the
    contract's ``(cycle, port, value)`` for the marked values, checked against the
    model first."""
    seen = simulate(plan, horizon)
    for cycle, key, value in marks:
        assert seen[cycle][key] == value, (
            f"the lane model disagrees with the contract: {key} in cycle {cycle} is "
            f"{seen[cycle][key]}, not {value}")
        assert sum(1 for c in range(horizon) if seen[c][key] == value) == 1, (
            f"{key} shows the mark {value} more than once")
    for cycle, outs in enumerate(seen):
        for key, value in outs.items():
            plan.expect(cycle, key, value)
    return plan


def pulse(plan: Plan, cycle: int, port: str, index: int, value: int) -> None:
    plan.drive(cycle, (port, index), value)


# -- directed paths: where and when a value arrives --------------------------------------

START, HORIZON = 3, 16


def straight(rng) -> Plan:
    """Reset routing (straight on): each direction crosses the grid in one cycle per
    tile: east and west in ``TC``, south and north in ``T``."""
    plan, marks = Plan(), []
    for port, out, count, hops in (("gen_in_w", "gen_out_e", R, TC),
                                   ("gen_in_e", "gen_out_w", R, TC),
                                   ("gen_in_n", "gen_out_s", C, T),
                                   ("gen_in_s", "gen_out_n", C, T)):
        for x in range(count):
            value = 1 + rng.randrange(255)
            while any(v == value for *_, v in marks):
                value = 1 + rng.randrange(255)
            at = START + x % 3
            pulse(plan, at, port, x, value)
            marks.append((at + hops, (out, x), value))
    return finish(plan, HORIZON, marks)


def turn(kind_in: str, kind_out: str, rng) -> Plan:
    """One lane turned at tile (1, 1), the middle crossing: in on the edge that feeds
    ``kind_in``'s direction, straight to the crossing, turned, straight out: three
    registers (one per tile; the turn adds none), three cycles."""
    plan = Plan()
    enter = {"gen_e": "gen_in_w", "gen_w": "gen_in_e", "gen_s": "gen_in_n",
             "gen_n": "gen_in_s"}[kind_in]
    leave = {"gen_e": "gen_out_e", "gen_w": "gen_out_w", "gen_s": "gen_out_s",
             "gen_n": "gen_out_n"}[kind_out]
    came_from = {"gen_e": "west", "gen_w": "east", "gen_s": "north", "gen_n": "south"}[kind_in]
    b = 1                                             # byte 1 of the lane
    index_in = (1 * n + b)                            # tile row / column 1
    value = 1 + rng.randrange(255)
    pulse(plan, START, enter, index_in, value)
    setting(plan, 0, HORIZON, **{f"{kind_out}_1_1": came_from})
    # registers passed: the tiles from the edge up to the crossing's neighbour (1),
    # the crossing (1), the tiles after it to the far edge (1)
    index_out = 1 * n + b
    return finish(plan, HORIZON, [(START + 3, (leave, index_out), value)])


def back(rng) -> Plan:
    """Out and back along tile row 0 (seed 002's pattern, on three tiles): east from
    the west edge through (0, 0) and (0, 1), turned back west at (0, 2), then the skip
    link from (0, 2) to (0, 0): 4 registers, where going back straight on takes 5."""
    plan = Plan()
    value = 1 + rng.randrange(255)
    pulse(plan, START, "gen_in_w", 0, value)
    setting(plan, 0, HORIZON, gen_w_0_2="west", gen_w_0_0="skip")
    return finish(plan, HORIZON, [(START + 4, ("gen_out_w", 0), value)])


def skip(kind: str, rng) -> Plan:
    """A skip link against the lane beside it: the same value enters two lanes of one
    direction at once; on one the last tile takes ``skip``, on the other ``straight``:
    the skipped one arrives a cycle sooner (one register for two tiles)."""
    plan = Plan()
    enter, leave, muxname = {
        "gen_e": ("gen_in_w", "gen_out_e", lambda q: f"gen_e_{q}_2"),
        "gen_w": ("gen_in_e", "gen_out_w", lambda q: f"gen_w_{q}_0"),
        "gen_s": ("gen_in_n", "gen_out_s", lambda q: f"gen_s_2_{q}"),
    }[kind]
    value_skip, value_lane = rng.sample(range(1, 256), 2)
    pulse(plan, START, enter, 0 * n + 1, value_skip)            # tile row / column 0
    pulse(plan, START, enter, 1 * n + 1, value_lane)            # tile row / column 1
    setting(plan, 0, HORIZON, **{muxname(0): "skip"})
    return finish(plan, HORIZON, [(START + 2, (leave, 0 * n + 1), value_skip),
                                  (START + 3, (leave, 1 * n + 1), value_lane)])


def zero_and_switch(rng) -> Plan:
    """A multiplexer on zero blocks its lane; switched back mid-stream it passes the
    values that reach it from the next cycle on."""
    plan = Plan()
    values = rng.sample(range(1, 256), 8)
    for k, v in enumerate(values):
        pulse(plan, START + k, "gen_in_n", 2, v)                # column 2: tile column 1
    setting(plan, 0, START + 3, gen_s_1_1="zero")
    # gen_s[1][1] takes gen_s[0][1]'s register: values[k] is there in START + k + 1
    marks = [(START + k + 3, ("gen_out_s", 2), v) for k, v in enumerate(values) if k >= 3]
    return finish(plan, HORIZON, marks)


def randomised(rng) -> Plan:
    """Random inputs on every edge and random sources, changed every few cycles."""
    plan, horizon = Plan(), 60
    for t in range(horizon):
        for port, count in EDGE_IN.items():
            for x in range(count):
                plan.drive(t, (port, x), rng.randrange(256))
    t = 0
    while t < horizon:
        hold = rng.randrange(1, 6)
        for mux in GEN:
            value = rng.randrange(len(mux.sources) + 1)     # one past: zero too
            plan.hold(t, t + hold - 1, ("gen_sel", SLOT[mux.name]), value)
        t += hold
    return finish(plan, horizon)


CASES = {
    "straight": straight,
    "turn_east_south": lambda rng: turn("gen_e", "gen_s", rng),
    "turn_east_north": lambda rng: turn("gen_e", "gen_n", rng),
    "turn_south_west": lambda rng: turn("gen_s", "gen_w", rng),
    "turn_west_south": lambda rng: turn("gen_w", "gen_s", rng),
    "turn_north_east": lambda rng: turn("gen_n", "gen_e", rng),
    "turn_west_north": lambda rng: turn("gen_w", "gen_n", rng),
    "skip_east": lambda rng: skip("gen_e", rng),
    "skip_west": lambda rng: skip("gen_w", rng),
    "skip_south": lambda rng: skip("gen_s", rng),
    "out_and_back": back,
    "zero_and_switch": zero_and_switch,
    "random": randomised,
}

INPUT_KEYS = ([(p, x) for p, count in EDGE_IN.items() for x in range(count)]
              + [("gen_sel", k) for k in range(len(GEN))])
OUTPUTS = [(p, x) for p, count in EDGE_OUT.items() for x in range(count)]


class LanesTB(BlockTB):
    async def run(self, plan: Plan) -> None:
        # Controls idle at their reset value (straight on), not 0, where a case holds none.
        for t in range(len(plan.inputs)):
            for k, mux in enumerate(GEN):
                plan.inputs[t].setdefault(("gen_sel", k), mux.default)
        await self.run_plan(plan.inputs, plan.expected, INPUT_KEYS, OUTPUTS)


@cocotb.test()
@cocotb.parametrize(case=requested_cases())
async def run_case(dut, case):
    tb = LanesTB(dut)
    plan = CASES[case](random.Random(case))
    assert len(plan.expected) >= 10 * (2 * R + 2 * C)
    await tb.run(plan)
    tb.finish()
