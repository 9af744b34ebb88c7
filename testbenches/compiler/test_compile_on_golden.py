"""Compiled programs run on the golden model must reproduce the numpy reference, with
the cycle count and counters the compiler predicted."""

import numpy as np
import pytest

from systolica import golden
from systolica.arch import isa
from systolica.arch.config import preset
from systolica.arch.loadable import Loadable
from systolica.arch.regs import ErrorCode
from systolica.compiler import CompileError, Dense, Network, compile_network, gemm
from systolica.compiler.graph import reference
from systolica.compiler.planning.memory import acc_half_rows

from tiers import sample

TINY, BASE = preset("tiny"), preset("base")


def check(cfg, net):
    """Compile, run on the golden model, compare with the reference and predictions."""
    compiled = compile_network(cfg, net)
    run = golden.run(cfg, Loadable.for_chip(cfg, compiled.image, compiled.dram))
    assert run.error is ErrorCode.NONE
    assert np.array_equal(compiled.result(run.dram), reference.run(net))
    assert run.cycles == compiled.predicted_cycles
    assert run.macs == compiled.array_macs
    assert run.dram_bytes_read == compiled.dram_bytes_read
    assert run.dram_bytes_written == compiled.dram_bytes_written
    assert len(compiled.program) <= cfg.imem_depth
    return compiled


def data(rng, M, K, N):
    return (rng.integers(-128, 128, (M, K)), rng.integers(-128, 128, (K, N)),
            rng.integers(-(1 << 20), 1 << 20, N))


@pytest.mark.parametrize("cfg, M, K, N", sample([
    (TINY, 1, 1, 1),
    (BASE, 1, 1, 1),
    (TINY, 1, 40, 9),                              # M = 1
    (TINY, 5, 8 * 12 + 3, 8),                      # K >> R, ragged
    (TINY, 7, 8, 8 * 3 + 5),                       # N not a multiple of C
    (TINY, acc_half_rows(TINY) * 2 + 9, 20, 11),   # M > Mt: three M-chunks
    (TINY, acc_half_rows(TINY) + 1, 5, 3),         # M-chunks of a single K-block
    (BASE, 33, 16, 16),
], 2))
@pytest.mark.parametrize("post", [
    dict(mult=1, shift=0, zp=0),
    dict(mult=9000, shift=21, zp=-7, relu=True),
    dict(mult=65535, shift=63, zp=127),
    dict(out_dtype="int32"),
    dict(out_dtype="int32", relu=True),
])
def test_edge_shapes(cfg, M, K, N, post):
    rng = np.random.default_rng(M * 1000 + K * 10 + N)
    a, b, bias = data(rng, M, K, N)
    check(cfg, gemm(a, b, bias, **post))
    check(cfg, gemm(a, b, **post))


# (seed % 2 picks the chip: every 5th seed reaches both in the fast tier)
@pytest.mark.parametrize("seed", sample(range(8), 5))
def test_random_gemms(seed):
    rng = np.random.default_rng(seed)
    cfg = (TINY, BASE)[seed % 2]
    M, K, N = (int(x) for x in rng.integers(1, 120, 3))
    a, b, bias = data(rng, M, K, N)
    check(cfg, gemm(a, b, bias, mult=int(rng.integers(1, 1 << 16)),
                    shift=int(rng.integers(10, 30)), zp=int(rng.integers(-128, 128)),
                    relu=bool(seed & 2)))


def test_int32_wraps():
    # bias + sum passes 2**31 - 1 and wraps like int32 arithmetic
    a, b = np.full((2, 8), 127), np.full((8, 3), 127)
    compiled = check(TINY, gemm(a, b, np.full(3, (1 << 31) - 1), out_dtype="int32"))
    out = compiled.result(golden.run(TINY, Loadable.for_chip(TINY, compiled.image,
                                                             compiled.dram)).dram)
    assert out[0, 0] == (1 << 31) - 1 + 8 * 127 * 127 - (1 << 32)


@pytest.mark.parametrize("cfg, M, dims, last", [
    (TINY, 30, [20, 9, 40, 3], dict(out_dtype="int32")),
    (TINY, 8, [8, 8, 8], {}),
    (BASE, 64, [64, 128, 16], dict(relu=True)),
    (TINY, acc_half_rows(TINY), [17, 33, 5], dict(zp=-3)),  # largest chain M
])
def test_mlp_chains(cfg, M, dims, last):
    rng = np.random.default_rng(len(dims) * M)
    layers = [Dense(rng.integers(-128, 128, (dims[i], dims[i + 1])),
                    rng.integers(-4000, 4000, dims[i + 1]),
                    mult=int(rng.integers(1, 600)), shift=15, zp=int(rng.integers(-9, 9)),
                    relu=True) for i in range(len(dims) - 2)]
    post = last if last.get("out_dtype") == "int32" else {"mult": 300, "shift": 14, **last}
    layers.append(Dense(rng.integers(-128, 128, dims[-2:]), rng.integers(-4000, 4000, dims[-1]),
                        **post))
    net = Network(rng.integers(-128, 128, (M, dims[0])), layers)
    compiled = check(cfg, net)
    # only the input is read and only the output written
    assert compiled.dram_bytes_written == compiled.dram_map.output_words * cfg.rows
    names = [r.name for r in compiled.layers]
    assert names == [f"layer{i}" for i in range(len(layers))]
    for rec in compiled.layers:
        assert 0 <= rec.first_cycle < rec.end_cycle <= compiled.predicted_cycles
    assert compiled.layers[-1].end_cycle == compiled.predicted_cycles


def test_bench_gemm_is_compute_bound():
    rng = np.random.default_rng(0)
    a, b, _ = data(rng, 256, 256, 256)
    compiled = check(BASE, gemm(a, b, mult=5, shift=14))
    assert compiled.macs == 256 ** 3
    ideal = 256 ** 3 // BASE.macs            # cycles with every MAC busy
    assert ideal < compiled.predicted_cycles < 1.05 * ideal


@pytest.mark.parametrize("cfg, net, words", [
    (TINY, lambda: gemm(np.ones((1, 8 * 2000)), np.ones((8 * 2000, 2))),
     ["'gemm'", "CBUF too small by", "cbuf_depth 2048"]),
    (TINY.replace(dram_words=64), lambda: gemm(np.ones((40, 8)), np.ones((8, 8))),
     ["'gemm'", "DRAM too small by", "dram_words is 64"]),
    (TINY, lambda: Network(np.ones((3000, 8)),
                           [Dense(np.ones((8, 8))), Dense(np.ones((8, 8)), name="fc")]),
     ["'layer0'", "CBUF too small by", "tensor 'input' 3000", "cbuf_depth 2048"]),
    (TINY, lambda: gemm(np.ones((128, 256)), np.ones((256, 128))),
     ["'gemm'", "DRAM too small by", "program image", "imem_depth 2048"]),
])
def test_problem_larger_than_the_chip_is_refused(cfg, net, words):
    with pytest.raises(CompileError) as info:
        compile_network(cfg, net())
    for word in words:
        assert word in str(info.value)


def test_image_round_trips_and_disassembles():
    rng = np.random.default_rng(3)
    a, b, bias = data(rng, 9, 20, 12)
    compiled = compile_network(TINY, gemm(a, b, bias, relu=True))
    words = isa.from_bytes(compiled.image)
    assert [isa.decode(w) for w in words] == compiled.program
    assert [isa.encode(i) for i in compiled.program] == words
    text = compiled.disassemble().splitlines()
    assert len(text) == len(compiled.program)
    assert all(f" {i.op.name} " in line + " " for i, line in zip(compiled.program, text))


# -- graphs: fan-out, joins, several outputs --------------------------------------------

from systolica.app import bench_cases, demo  # noqa: E402
from systolica.compiler import GraphBuilder  # noqa: E402


def dag(rng, M, width, name="dag"):
    """x -> trunk -> {head (int8), wide (int32, ReLU)} and join([trunk, x, head])."""
    def w(k, n):
        return rng.integers(-128, 128, (k, n))

    def b(n):
        return rng.integers(-4000, 4000, n)
    g = GraphBuilder(name)
    x = g.input(rng.integers(-128, 128, (M, width)), name="x")
    h = g.dense(x, w(width, width + 5), b(width + 5), mult=int(rng.integers(1, 600)),
                shift=15, zp=-2, relu=True, name="trunk")
    a = g.dense(h, w(width + 5, 11), b(11), mult=300, shift=15, zp=3, name="head")
    g.dense(h, w(width + 5, 6), b(6), out_dtype="int32", relu=True, name="wide")
    j = g.dense([h, x, a], w(2 * width + 16, 9), mult=90, shift=16, name="join")
    return g.build(a, "wide", j)          # head is an output and read by join


@pytest.mark.parametrize("cfg, M, width", [(TINY, 12, 20), (TINY, 1, 3), (BASE, 40, 37),
                                           (TINY, acc_half_rows(TINY), 9)])
def test_fan_out_and_join_match_numpy_on_the_golden_model(cfg, M, width):
    graph = dag(np.random.default_rng(M + width), M, width)
    compiled = compile_network(cfg, graph)
    run = golden.run(cfg, Loadable.for_chip(cfg, compiled.image, compiled.dram))
    assert run.error is ErrorCode.NONE
    got, want = compiled.results(run.dram), reference.outputs(graph)
    assert list(got) == list(want) == ["head", "wide", "join"]
    for name in want:
        assert got[name].dtype == want[name].dtype and np.array_equal(got[name], want[name])
    assert run.cycles == compiled.predicted_cycles
    assert run.macs == compiled.array_macs
    assert run.dram_bytes_written == compiled.dram_bytes_written == \
        compiled.dram_map.output_words * cfg.rows         # only the outputs come back
    assert [r.name for r in compiled.layers] == ["trunk", "head", "wide", "join"]
    assert compiled.layers[3].K == 2 * width + 16


def test_several_outputs_are_read_with_results_not_result():
    compiled = compile_network(TINY, dag(np.random.default_rng(0), 4, 8))
    with pytest.raises(CompileError, match=r"3 outputs .*results\(\)"):
        compiled.result(compiled.dram)


def test_bench_cycle_counts_are_unchanged():
    assert compile_network(BASE, bench_cases.gemm_network(256, 256, 256, 1)).predicted_cycles \
        == 66648
    assert compile_network(BASE, bench_cases.gemm_network(64, 64, 64, 2)).predicted_cycles == 1344
    assert compile_network(TINY, demo.mlp()).predicted_cycles == 2264


def test_an_input_first_read_by_a_later_layer_is_fetched_during_the_layer_before():
    rng = np.random.default_rng(118)
    g = GraphBuilder("late_input")
    x = g.input(rng.integers(-128, 128, (16, 8)), name="x")
    y = g.input(rng.integers(-128, 128, (16, 12)), name="y")
    a = g.dense(x, rng.integers(-128, 128, (8, 8)), mult=99, shift=12, name="a")
    g.dense([a, y], rng.integers(-128, 128, (20, 5)), mult=80, shift=13, name="b")
    graph = g.build()
    compiled = compile_network(TINY, graph)
    assert compiled.plan.tensor("cbuf", "y").first == 0
    run = golden.run(TINY, Loadable.for_chip(TINY, compiled.image, compiled.dram))
    assert np.array_equal(compiled.result(run.dram), reference.run(graph))
    assert run.cycles == compiled.predicted_cycles


def random_graph(seed: int):
    """1-2 inputs, 1-5 dense layers each reading 1-3 earlier int8 tensors (repeats
    allowed), int8 or int32 outputs: every tensor nobody reads is an output."""
    rng = np.random.default_rng(seed)
    M = int(rng.integers(1, 40))
    g = GraphBuilder(f"random{seed}")
    tensors = [(g.input(rng.integers(-128, 128, (M, k)), name=f"in{i}"), k)
               for i, k in enumerate(rng.integers(1, 30, int(rng.integers(1, 3))))]
    layers = int(rng.integers(1, 6))
    for li in range(layers):
        picks = [tensors[int(p)] for p in rng.choice(len(tensors), int(rng.integers(1, 4)))]
        if li == 0:
            picks = tensors + picks[1:]               # every input is read
        K, N = sum(int(k) for _, k in picks), int(rng.integers(1, 30))
        post = (dict(out_dtype="int32", relu=bool(seed & 1)) if li == layers - 1 and seed % 3
                else dict(mult=int(rng.integers(1, 2000)), shift=int(rng.integers(10, 20)),
                          zp=int(rng.integers(-5, 5)), relu=bool(rng.integers(2))))
        bias = rng.integers(-3000, 3000, N) if rng.integers(2) else None
        name = g.dense([t for t, _ in picks], rng.integers(-128, 128, (K, N)), bias,
                       name=f"l{li}", **post)
        if post.get("out_dtype") != "int32":
            tensors.append((name, N))
    return g.build()


# (seed % 2 picks the chip: every 5th seed reaches both in the fast tier)
@pytest.mark.parametrize("seed", sample(range(16), 5))
def test_random_graphs_match_numpy_on_the_golden_model(seed):
    cfg = (TINY, BASE)[seed % 2]
    graph = random_graph(seed)
    compiled = compile_network(cfg, graph)
    run = golden.run(cfg, Loadable.for_chip(cfg, compiled.image, compiled.dram))
    assert run.error is ErrorCode.NONE
    got, want = compiled.results(run.dram), reference.outputs(graph)
    assert all(np.array_equal(got[name], want[name]) for name in want)
    assert run.cycles == compiled.predicted_cycles
