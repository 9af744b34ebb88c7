"""Partial-sum exits (docs/contract.md, "Partial-sum exits"; `compiler/lowering/exits.py`): a
MATMUL whose last tile rows are fed zeros takes its sums out above them. The rule reads
the routing alone; the golden model, which collects only the rows above a MATMUL's
exit, shows that a program with exits still equals numpy, and that a wrong exit
would not (the golden model does not call the rule)."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch import fabric, isa
from systolica.arch.config import preset
from systolica.arch.isa import Instr, Opcode
from systolica.arch.loadable import Loadable
from systolica.compiler import compile_network
from systolica.compiler.graph import reference
from systolica.compiler.graph.graph import GraphBuilder
from systolica.compiler.lowering import exits

TALL = preset("tiny_tall")      # 4 tile rows of 4


def _plain(cfg) -> dict:
    """Every tile row fed, every reduction running down the whole column."""
    return {**{f"west_feed[{i}]": f"cbuf.g{i}" for i in range(cfg.tile_rows)},
            **{f"psum_in[{i}][{j}]": "north" for i in range(1, cfg.tile_rows)
               for j in range(cfg.tile_cols)}}


def test_the_exit_skips_the_tile_rows_fed_zeros():
    needs = _plain(TALL)
    assert exits.early(TALL, needs) == 0
    needs["west_feed[3]"] = needs["west_feed[2]"] = fabric.ZERO
    assert exits.early(TALL, needs) == 2
    # a row fed zeros above a fed one is no use: the exit is below the fed one
    assert exits.early(TALL, {**needs, "west_feed[2]": "cbuf.g2", "west_feed[1]": fabric.ZERO}) == 1
    # a reduction starting below the exit would drop the rows above it: no exit there
    assert exits.early(TALL, {**needs, "psum_in[3][1]": fabric.ZERO}) == 0
    assert exits.early(TALL, {**needs, "psum_in[2][0]": fabric.ZERO}) == 1
    # tile row 0 always collects
    everything = {**needs, **{f"west_feed[{i}]": fabric.ZERO for i in range(4)}}
    assert exits.early(TALL, everything) == 3


def _dense(M, K, N, seed=1):
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"dense_{M}x{K}x{N}")
    x = b.input(rng.integers(-128, 128, (M, K), dtype=np.int8))
    y = b.dense(x, rng.integers(-128, 128, (K, N), dtype=np.int8),
                rng.integers(-999, 999, N, dtype=np.int32), mult=3, shift=9)
    return b.build(y)


def _golden_output(cfg, c, image=None):
    run = golden.run(cfg, Loadable.for_chip(cfg, c.image if image is None else image,
                                            c.dram, c.prog_addr, ubuf=c.ubuf))
    return run, next(iter(c.results(run.dram).values()))


def _early(c) -> set[int]:
    return {i.fields["early"] for i in c.program if i.op is Opcode.MATMUL}


@pytest.mark.parametrize("K, early", [(3, 3), (4, 3), (5, 2), (12, 1), (16, 0)])
def test_a_dense_layer_exits_below_its_k_block(K, early):
    """On the 4x2 grid a K-block of K rows reaches ceil(K/4) tile rows; unsplit, its
    MATMULs' sums leave below the last of them, equal to numpy in the predicted
    cycles."""
    c = compile_network(TALL, _dense(90, K, 6), split=1)
    assert _early(c) == {early}
    run, out = _golden_output(TALL, c)
    np.testing.assert_array_equal(out, next(iter(reference.outputs(c.graph).values())))
    assert run.cycles == c.predicted_cycles


def test_a_wrong_exit_is_seen():
    """The same program with every MATMUL's exit one tile row too high: the golden
    model's outputs leave numpy's (the products of the tile row it skips are lost)."""
    c = compile_network(TALL, _dense(40, 8, 6), split=1)
    assert _early(c) == {2}
    words = isa.from_bytes(c.image)
    for k, ins in enumerate(c.program):
        if ins.op is Opcode.MATMUL:
            words[k] = isa.encode(Instr(ins.op, ins.cycle, {**ins.fields, "early": 3}))
    run, out = _golden_output(TALL, c, isa.to_bytes(words))
    assert not np.array_equal(out, next(iter(reference.outputs(c.graph).values())))


def test_a_split_layer_takes_no_exit():
    """Tile groups down the diagonal feed every tile row."""
    c = compile_network(TALL, _dense(2048, 2, 2))
    assert c.plan.splits["layer0"].s == 4
    assert _early(c) == {0}
