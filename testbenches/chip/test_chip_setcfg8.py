"""Eight configuration updates in one SETCFG (isa.SETCFG_PAIRS, seed 002's widest
update): a GEMM whose activation partitions, weight partitions, accumulator groups and
writeback groups are all swapped before it runs. The compiler sets every multiplexer
the program uses before its first use (20 on tiny); on a chip allowing eight updates
per cycle it packs them into SETCFGs of eight pairs. The RTL runs them, and the result
equals numpy and the golden model, the cycle count the prediction."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch import fabric, isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Opcode
from systolica.arch.loadable import Loadable
from systolica.compiler.microops.ir import make
from systolica.compiler.scheduling.reconfigure import add_updates
from systolica.compiler.scheduling.schedule import schedule

from chip_runs import run_on_rtl

# tiny, with the seed's eight updates per cycle (and no per-domain limit below that:
# all eight multiplexers are at the array's edge)
K8 = preset("tiny").replace(name="tiny_k8", max_config_updates_per_cycle=8,
                            power_domain_budget=8)
M = 12
MULT, SHIFT = 3, 9
OUT = 400          # DRAM word of the result


def _swap(kind: str, source: str, cfg) -> dict[str, str]:
    """Multiplexers ``kind[0..]`` take their sources in reverse group order."""
    n = cfg.tile_rows if kind in ("west_feed", "wb_src") else cfg.tile_cols
    return {f"{kind}[{g}]": f"{source}{n - 1 - g}" for g in range(n)}


def _program(cfg):
    R = cfg.rows
    w_addr = cfg.cbuf_bank_rows          # weights in the bank after the activations'
    out_addr = 2 * cfg.cbuf_bank_rows
    dma = lambda kind, dram, buf, rows: make(cfg, Opcode.DMA, kind=kind, dram_addr=dram,
                                             dram_stride=1, buf_addr=buf, rows=rows)
    wload = make(cfg, Opcode.WLOAD, w_addr=w_addr, bank=0)
    wload.needs = _swap("north_feed", "cbuf.g", cfg)
    mm = make(cfg, Opcode.MATMUL, act_addr=0, rows=M, acc_addr=0, accumulate=0, bank=0)
    mm.needs = {**_swap("west_feed", "cbuf.g", cfg), **_swap("acc_src", "col.g", cfg)}
    vrun = make(cfg, Opcode.VRUN, src=0, rows=M, dst=out_addr, requant=1, mult=MULT,
                shift=SHIFT)
    vrun.needs = _swap("wb_src", "col.g", cfg)
    ops = [dma(DmaKind.LOAD_CBUF, 0, 0, M), dma(DmaKind.LOAD_CBUF, 64, w_addr, R),
           wload, mm, vrun, dma(DmaKind.STORE_CBUF, OUT, out_addr, M)]
    cycles, updates = add_updates(cfg, ops, schedule(cfg, ops))
    return sorted([op.instr(c) for op, c in zip(ops, cycles)] + [u for u, _ in updates],
                  key=lambda i: i.cycle)


def _setcfgs(program):
    return [isa.setcfg_pairs(i.fields) for i in program if i.op is Opcode.SETCFG]


def test_eight_updates_per_setcfg():
    """The compiler's placement: 20 updates in SETCFGs of 8, 8 and 4 pairs where the
    chip allows eight per cycle; on tiny (four per cycle, two per power domain) in
    SETCFGs of at most two pairs of one domain."""
    pairs = _setcfgs(_program(K8))
    assert sorted(len(p) for p in pairs) == [4, 8, 8]
    table = fabric.muxes(K8)
    swapped = {**_swap("north_feed", "cbuf.g", K8), **_swap("west_feed", "cbuf.g", K8),
               **_swap("acc_src", "col.g", K8), **_swap("wb_src", "col.g", K8)}
    got = {table[i].name: table[i].sources[v] for p in pairs for i, v in p}
    assert len(got) == 20 and {k: got[k] for k in swapped} == swapped
    tiny = _setcfgs(_program(preset("tiny")))
    assert max(len(p) for p in tiny) <= 4 and sum(len(p) for p in tiny) == 20


def test_eight_pair_word_round_trips():
    pairs = [(k * 9 + 1, k + 1) for k in range(isa.SETCFG_PAIRS)]
    word = isa.encode(isa.Instr(Opcode.SETCFG, 5, isa.setcfg_fields(pairs)))
    assert isa.setcfg_pairs(isa.decode(word).fields) == pairs
    with pytest.raises(isa.EncodingError, match="1 to 8 pairs"):
        isa.setcfg_fields(pairs + [(0, 0)])


@pytest.mark.rtl
@pytest.mark.regress     # a Verilated build of its own; make test runs 8-pair SETCFGs on
def test_eight_pair_setcfg_on_rtl():   # tiny_tall (test_chip_nonsquare.py)
    cfg = K8
    R, C, n = cfg.rows, cfg.cols, cfg.tile_size
    rng = np.random.default_rng(8)
    a = rng.integers(-128, 128, (M, R), dtype=np.int8)
    w = rng.integers(-128, 128, (R, C), dtype=np.int8)
    dram = np.zeros((1024, cfg.dram_word_bytes), np.uint8)
    dram[0:M, :R] = a.view(np.uint8)
    dram[64:64 + R, :C] = w.view(np.uint8)
    program = _program(cfg)
    assert max(len(p) for p in _setcfgs(program)) == 8
    image = isa.to_bytes([isa.encode(i) for i in program])
    res = run_on_rtl(cfg, image, dram, readback=[(OUT, M)])
    assert res.error_name == "NONE"
    gold = golden.run(cfg, Loadable.for_chip(cfg, image, dram))
    got = res.readback[0].reshape(M, -1)
    np.testing.assert_array_equal(got, gold.dram[OUT:OUT + M])
    # numpy: reversed groups of n partitions (rows), of weight bytes, of accumulator
    # groups and of writeback groups
    rev = lambda width: np.concatenate([np.arange(g * n, g * n + n)
                                        for g in reversed(range(width // n))])
    acc = a[:, rev(R)].astype(np.int64) @ w[:, rev(C)].astype(np.int64)
    acc = acc[:, rev(C)]
    y = np.clip((acc * MULT + (1 << (SHIFT - 1))) >> SHIFT, -128, 127)
    want = np.zeros((M, R), np.int64)
    want[:, :C] = y
    want = want[:, rev(R)].astype(np.int8)
    np.testing.assert_array_equal(got.view(np.int8)[:, :R], want)
    assert res.cycles == gold.cycles == timing.run_cycles(cfg, program)
