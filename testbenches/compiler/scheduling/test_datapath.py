"""Cycle assignment for datapath statements: the seed's Table 1 / Table 2, other
latency tables, path-latency mismatches and delay insertion, dependency cycles,
missing latencies and component overlaps."""


import pytest

from systolica.arch.config import preset
from systolica.compiler.frontend.text import parse, parse_file
from systolica.compiler.scheduling.datapath import (
    CycleError,
    assign_cycles,
    latency_of,
    occupancy_of,
    schedule_program,
)

from paths import EXAMPLES

CFG = preset("tiny")
# seed 002, Fig. 2
FIG2 = {"read": 1, "read.bigram": 2, "mul": 4, "add": 3, "write": 1}
TABLE1 = """\
proc table1(addr)
x = read ram(addr)
y = read ram(addr)
z = read bigram(addr)
m = mul mul0(y, z)
s = add add0(m, x)
write ram(addr, s)
"""


def cycles(sched):
    return {s.statement.text: s.cycle for s in sched}


def issues(sched):
    return {s.statement.text: s.issue for s in sched}


def run(text, table, **kw):
    prog = parse(text, "p.stp")
    return assign_cycles(table, prog.statements, inputs=prog.inputs, filename="p.stp", **kw)


def test_seed_table2():
    sched = run(TABLE1, FIG2)
    assert cycles(sched) == {"y = read ram(addr)": 0, "z = read bigram(addr)": -1,
                             "m = mul mul0(y, z)": 1, "x = read ram(addr)": 4,
                             "s = add add0(m, x)": 5, "write ram(addr, s)": 8}
    assert issues(sched) == {k: v + 1 for k, v in cycles(sched).items()}
    assert min(s.issue for s in sched) == 0
    m = sched.of("m")
    assert (m.unit, m.latency, m.occupancy) == ("mul0", 4, 1)
    assert sched.at_line(7).statement.op == "write"
    assert sched.length == 10      # write issues at 9, its result at 10


def test_seed_table1_example_file_carries_its_latencies():
    prog = parse_file(EXAMPLES / "seed_table1.stp")
    assert prog.latency == FIG2
    sched = schedule_program(CFG, prog)
    assert [sched.of(v).cycle for v in "yzmxs"] == [0, -1, 1, 4, 5]
    assert schedule_program(CFG, prog).slots == sched.slots      # deterministic


def test_mismatch_example_file():
    prog = parse_file(EXAMPLES / "latency_mismatch.stp")
    with pytest.raises(CycleError, match="takes 4 cycles .* takes 3 cycles"):
        schedule_program(CFG, prog)
    assert len(schedule_program(CFG, prog, insert_delays=True).inserted) == 1


def test_same_program_two_latency_tables():
    faster = {**FIG2, "mul": 2, "read.bigram": 1}
    a, b = run(TABLE1, FIG2), run(TABLE1, faster)
    assert cycles(b) == {"y = read ram(addr)": 0, "z = read bigram(addr)": 0,
                         "m = mul mul0(y, z)": 1, "x = read ram(addr)": 2,
                         "s = add add0(m, x)": 3, "write ram(addr, s)": 6}
    assert cycles(a) != cycles(b)
    assert a.length == 10 and b.length == 7


def test_anchor_is_first_operand_of_first_statement_with_operands():
    # s reads m first, so m's producer sits at cycle 0 even though x comes first in text
    sched = run("x = read ram(0)\ny = read ram2(0)\nm = mul mul0(y, y)\n"
                "s = add add0(m, x)\n", FIG2)
    assert sched.of("y").cycle == 0
    assert (sched.of("m").cycle, sched.of("x").cycle, sched.of("s").cycle) == (1, 4, 5)


MISMATCH = """\
proc p(addr)
a = read ram(addr)
b = add add0(a, 7)
c = shift sh0(a, 1)
p = mul mul0(b, c)
"""
MISMATCH_LAT = {"read": 1, "add": 3, "shift": 2, "mul": 4}


def test_mismatched_paths_named_with_latencies_and_delay():
    with pytest.raises(CycleError) as e:
        run(MISMATCH, MISMATCH_LAT)
    msg = str(e.value)
    assert msg.startswith("p.stp:5: 'p = mul mul0(b, c)' (line 5)")
    assert "a (line 2) -> b (line 3) -> p (line 5) takes 4 cycles (read 1 + add 3)" in msg
    assert "a (line 2) -> c (line 4) -> p (line 5) takes 3 cycles (read 1 + shift 2)" in msg
    assert "insert 1 delay register(s)" in msg and "through c" in msg


def test_insert_delays_balances_the_shorter_path():
    sched = run(MISMATCH, MISMATCH_LAT, insert_delays=True)
    assert [st.text for st in sched.inserted] == ["c_d1 = delay dreg0(c)"]
    assert sched.of("p").statement.args == ("b", "c_d1")
    a, b, c, d, p = (sched.of(v) for v in ("a", "b", "c", "c_d1", "p"))
    assert (a.cycle, b.cycle, c.cycle, d.cycle, p.cycle) == (0, 1, 1, 3, 4)
    assert b.cycle + b.latency == p.cycle == d.cycle + d.latency
    assert d.statement.line == c.statement.line


def test_one_chain_serves_consumers_needing_different_delays():
    text = ("a = read ram(0)\nb = add add0(a, a)\np = mul mul0(b, a)\n"
            "q = add add1(p, a)\n")
    sched = run(text, MISMATCH_LAT, insert_delays=True)
    # a arrives at 1; p wants it at 4 (3 registers), q at 8 (7 registers): one chain
    assert [s.statement.op for s in sched if s.inserted] == ["delay"] * 7
    assert sched.of("p").statement.args == ("b", "a_d3")
    assert sched.of("q").statement.args == ("p", "a_d7")
    for s in sched:
        for v in s.statement.operands:
            src = sched.of(v)
            assert s.cycle == src.cycle + src.latency      # exact timing everywhere


def test_mismatch_without_common_source():
    # b feeds m and n, which are tied to a at different distances
    text = "a = read ram(0)\nb = read ram2(0)\ne = add add0(a, a)\n" \
           "m = mul mul0(a, b)\nn = mul mul1(b, e)\n"
    with pytest.raises(CycleError, match="insert 3 delay register"):
        run(text, MISMATCH_LAT)
    sched = run(text, MISMATCH_LAT, insert_delays=True)
    assert len(sched.inserted) == 3


def test_dependency_cycle_names_statements():
    text = "a = add add0(c, 1)\nb = mul mul0(a, a)\nc = add add1(b, 2)\nd = read ram(0)\n"
    with pytest.raises(CycleError) as e:
        run(text, MISMATCH_LAT)
    msg = str(e.value)
    assert msg.startswith("p.stp:2:1: dependency cycle: ")
    assert "a (line 1)" in msg and "b (line 2)" in msg and "c (line 3)" in msg
    assert "d (line 4)" not in msg


def test_missing_latency_names_op_component_and_keys():
    with pytest.raises(CycleError) as e:
        run("x = read ram(0)\ny = sqrt sq0(x)\n", FIG2)
    msg = str(e.value)
    assert "'sqrt'" in msg and "'sq0'" in msg and "'sqrt.sq'" in msg and "'sqrt'" in msg


def test_latency_lookup_by_component_class():
    assert latency_of(FIG2, "read", "bigram7") == 2
    assert latency_of(FIG2, "read", "ram3") == 1
    assert latency_of({}, "delay", "dreg4") == 1
    assert occupancy_of({"mul.mul.occupancy": 3}, "mul", "mul12") == 3
    assert occupancy_of({}, "mul", "mul12") == 1


def test_unit_needed_twice_in_one_cycle():
    # both reads of x and y must come 1 cycle before the add, on the same RAM
    with pytest.raises(CycleError) as e:
        run("x = read ram(0)\ny = read ram(1)\ns = add add0(x, y)\n", FIG2)
    msg = str(e.value)
    assert "needs ram twice in cycle 0, but there is one" in msg
    assert "'x = read ram(0)' (line 1)" in msg and "'y = read ram(1)' (line 2)" in msg


def test_occupancy_overlap():
    # a holds mul0 for cycles 1..3; c (a faster op on the same unit) must issue at 3
    table = {**FIG2, "mul.mul.occupancy": 3, "mac": 2}
    with pytest.raises(CycleError, match=r"needs mul0 twice in cycle 3.*'a = mul mul0\(x, x\)' "
                                         r"\(line 2\) occupies cycles 1\.\.3"):
        run("x = read ram(0)\na = mul mul0(x, x)\ny = read ram2(0)\nc = mac mul0(y, y)\n"
            "s = add add0(a, c)\n", table)


def test_independent_groups_share_a_unit_without_overlap():
    sched = run("write ram(0, 1)\nwrite ram(1, 2)\nwrite ram(2, 3)\n", FIG2)
    assert sorted(s.cycle for s in sched) == [0, 1, 2]
    two = run("a = read ram(0)\nb = mul mul0(a, a)\nc = read ram(1)\nd = mul mul0(c, c)\n",
              FIG2)
    assert (two.of("a").cycle, two.of("b").cycle) == (0, 1)
    assert (two.of("c").cycle, two.of("d").cycle) == (1, 2)


def test_large_program_is_fast():
    import time
    n = 2000
    lines = ["proc big(addr)", "v0 = read ram0(addr)"]
    for i in range(1, n):
        lines.append(f"v{i} = add add{i % 50}(v{i - 1}, {i})")
    t = time.perf_counter()
    sched = run("\n".join(lines) + "\n", FIG2)
    assert sched.of(f"v{n - 1}").cycle == 1 + 3 * (n - 2)
    assert time.perf_counter() - t < 5


def test_long_paths_are_shortened_in_the_message():
    lines = ["a = read ram(0)"] + [f"v{i} = add add{i}({'a' if i == 0 else f'v{i - 1}'}, 1)"
                                   for i in range(20)] + ["p = mul mul0(v19, a)"]
    with pytest.raises(CycleError) as e:
        run("\n".join(lines) + "\n", MISMATCH_LAT)
    msg = str(e.value)
    assert "takes 61 cycles" in msg and "takes 1 cycles" in msg
    assert "... 13 more ..." in msg and "v19 (line 21) -> p (line 22)" in msg
    assert "insert 60 delay register(s)" in msg and len(msg) < 1000


# -- latency lines must change something ---------------------------------------------------
def test_latency_lines_that_override_are_accepted():
    prog = parse("latency read = 2\nlatency read.bigram = 3\nlatency mul.mul.occupancy = 2\n"
                 "x = read ram(0)\nz = read bigram(0)\nm = mul mul0(x, z)\n"
                 "latency mul = 4\n", "ok.stp")
    sched = schedule_program(CFG, prog)
    assert (sched.of("x").latency, sched.of("z").latency, sched.of("m").occupancy) == (2, 3, 2)


@pytest.mark.parametrize("key", sorted(CFG.latency))
def test_latency_line_for_a_chip_unit_is_an_error(key):
    prog = parse(f"proc p(addr)\nlatency read = 1\nlatency {key} = 2\nx = read ram(addr)\n",
                 "chip.stp")
    with pytest.raises(CycleError) as e:
        schedule_program(CFG, prog)
    msg = str(e.value)
    assert msg.startswith(f"chip.stp:3:1: latency {key}: ")
    assert "RTL fixes at" in msg and "datapath components only" in msg


@pytest.mark.parametrize("line, why", [
    ("latency write = 1", "no datapath statement uses 'write'"),
    ("latency read.bigram = 2", "no datapath statement uses 'read.bigram'"),
    ("latency mul.mul0.occupancy = 2", "uses 'mul.mul0.occupancy'"),   # class is mul
    ("latency mul0 = 2", "no datapath statement uses 'mul0'"),
])
def test_latency_line_that_changes_nothing_is_an_error(line, why):
    text = f"proc p(addr)\nlatency read.ram = 1\nlatency mul = 3\n{line}\n" \
           f"x = read ram(addr)\nm = mul mul0(x, x)\n"
    with pytest.raises(CycleError) as e:
        schedule_program(CFG, parse(text, "n.stp"))
    assert str(e.value).startswith(f"n.stp:4:1: latency {line.split()[1]}: ")
    assert why in str(e.value) and "changes nothing" in str(e.value)


def test_latency_line_shadowed_by_a_more_specific_one_changes_nothing():
    text = "latency read = 1\nlatency read.ram = 2\nx = read ram(0)\n"
    with pytest.raises(CycleError, match=r"^s.stp:1:1: latency read: no datapath statement"):
        schedule_program(CFG, parse(text, "s.stp"))
