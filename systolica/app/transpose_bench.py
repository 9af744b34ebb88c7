"""The transpose figures of ``make bench``: a tensor held in the CBUF is needed
transposed in the CBUF (seed 004). Three programs per shape run on the RTL (``tiny``),
each scheduled by the compiler:

* ``base``: load ``X`` into the CBUF, store as many rows as the result has, in the
  same DMAs (what every variant does around the transpose itself; from ``X``'s rows,
  as the result's are not written in it and a program reads no row it did not
  write);
* ``on_chip``: ``base`` plus the transpose on the array (per block a west weight
  load, an identity MATMUL, a VRUN into the result region), the identity loaded once
  (and, for a ragged ``M``, zeros written to the rows past ``X`` that the last
  blocks' west loads read);
* ``dram_round_trip``: ``base`` plus storing ``X`` to DRAM and re-loading ``Xᵀ``.
  The chip's DMA moves whole words of ``R`` bytes, so no descriptor stride can move
  single elements: the host must rearrange the bytes in DRAM between the two (not
  counted here: the round trip's figures are a lower bound).

A record gives each program's cycles and DRAM bytes (the chip's counters) and the
transpose's own cost, the difference to ``base``; every result is checked against
numpy.

N-D permutations (``ND_CASES``: a batched ``[4, 64, 64]`` transpose and an NCHW map
``(1, 8, 16, 16)`` to NHWC ``(1, 16, 16, 8)``) start and end in DRAM: ``on_chip`` is the
compiler's program for the ``Transpose`` layer (loads, block transposes, stores), and
``dram_round_trip`` a program that only loads ``X`` into the CBUF and stores it back,
what any way through the chip moves: the host must rearrange the bytes itself (not
counted: a lower bound).

The int32 record (``INT32_CASE``) transposes a dense layer's int32 ``[64, 64]`` output
DRAM to DRAM; its cost is the difference to the dense layer alone."""

from __future__ import annotations

import dataclasses

import numpy as np

from systolica.arch import isa
from systolica.arch.config import ChipConfig, preset
from systolica.arch.isa import DmaKind, Opcode
from systolica.arch.loadable import Loadable
from systolica.compiler.microops.ir import MicroOp, make
from systolica.compiler.planning import layout
from systolica.compiler.scheduling.reconfigure import add_updates
from systolica.compiler.scheduling.schedule import schedule
from systolica.sim.jobs import RtlJob

#: (M, N) shapes: square, and ragged in both directions.
SHAPES = ((64, 64), (100, 37))
#: (shape, perm) of the N-D records.
ND_CASES = (((4, 64, 64), (0, 2, 1)), ((1, 8, 16, 16), (0, 2, 3, 1)))
CONFIG = "tiny"


def _west(cfg: ChipConfig) -> dict[str, str]:
    return {f"w_in[{i}][{j}]": "west" for i in range(cfg.tile_rows)
            for j in range(cfg.tile_cols)}


def programs(cfg: ChipConfig, x: np.ndarray) -> tuple[dict[str, list[isa.Instr]], np.ndarray,
                                                      tuple[int, int]]:
    """The three scheduled programs for ``X``, the DRAM image they start from, and the
    DRAM span ``(word, words)`` holding the result afterwards."""
    R, M, N = cfg.rows, *x.shape
    kbs, mbs = layout.blocks(N, R), layout.blocks(M, R)
    bank = cfg.cbuf_bank_rows

    def up(rows: int) -> int:
        return -(-rows // bank) * bank

    x_at, out_at = 0, up(kbs * M + cfg.weight_rows)  # the last block's weight load
    ident_at = out_at + up(mbs * N)
    x_dram = 0
    xt_dram = x_dram + kbs * M                      # Xᵀ as the host would leave it
    ident_dram = xt_dram + mbs * N
    out_dram = ident_dram + R                       # where every program stores its result
    scratch_dram = out_dram + mbs * N               # the round trip's store of X
    # rows past X that the last blocks' west loads read (weight_rows from mb*R), and
    # a word of zeros to write them with
    past = (mbs - 1) * R + cfg.weight_rows - M
    zero_dram = scratch_dram + kbs * M
    image = np.zeros((zero_dram + (past > 0), R), np.uint8)
    image[x_dram:xt_dram] = layout.pack_activations(cfg, x)
    image[xt_dram:ident_dram] = layout.pack_activations(cfg, x.T)
    image[ident_dram:out_dram] = np.eye(R, dtype=np.uint8)

    def dma(kind, dram, buf, rows) -> MicroOp:
        return make(cfg, Opcode.DMA, kind=kind, dram_addr=dram, dram_stride=1,
                    buf_addr=buf, rows=rows)

    load_x = [dma(DmaKind.LOAD_CBUF, x_dram + kb * M, x_at + kb * M, M) for kb in range(kbs)]
    store_out = [dma(DmaKind.STORE_CBUF, out_dram + mb * N, out_at + mb * N, N)
                 for mb in range(mbs)]
    # base: the same stores (one per N rows of the result), from X's rows
    if N > kbs * M:
        raise ValueError(f"the base program stores {N} rows at a time from X's {kbs * M}")
    store_x = [dma(DmaKind.STORE_CBUF, out_dram + mb * N,
                   x_at + (mb * N) % (kbs * M - N + 1), N) for mb in range(mbs)]
    on_chip = [dma(DmaKind.LOAD_CBUF, ident_dram, ident_at, R)]
    if past > 0:
        zeros = make(cfg, Opcode.DMA, kind=DmaKind.LOAD_CBUF, dram_addr=zero_dram,
                     dram_stride=0, buf_addr=x_at + kbs * M, rows=past)
        on_chip.append(zeros)
    k = 0
    for mb in range(mbs):
        for kb in range(kbs):
            cols = min(R, N - kb * R)
            wload = make(cfg, Opcode.WLOAD, w_addr=x_at + kb * M + mb * R, bank=k % 2)
            wload.needs = _west(cfg)
            acc = (k % 2) * R
            on_chip += [wload,
                        make(cfg, Opcode.MATMUL, act_addr=ident_at, rows=cols, acc_addr=acc,
                             accumulate=0, bank=k % 2),
                        make(cfg, Opcode.VRUN, src=acc, rows=cols, to_acc=0,
                             dst=out_at + mb * N + kb * R)]
            k += 1
    round_trip = ([dma(DmaKind.STORE_CBUF, scratch_dram + kb * M, x_at + kb * M, M)
                   for kb in range(kbs)]
                  + [dma(DmaKind.LOAD_CBUF, xt_dram + mb * N, out_at + mb * N, N)
                     for mb in range(mbs)])
    out = {}
    for name, middle, store in (("base", [], store_x), ("on_chip", on_chip, store_out),
                                ("dram_round_trip", round_trip, store_out)):
        ops = load_x + middle + store
        cycles, updates = add_updates(cfg, ops, schedule(cfg, ops))
        out[name] = sorted([op.instr(c) for op, c in zip(ops, cycles)]
                           + [u for u, _ in updates], key=lambda i: i.cycle)
    return out, image, (out_dram, mbs * N)


def nd_programs(cfg: ChipConfig, x: np.ndarray, perm: tuple[int, ...]):
    """The compiled N-D transpose of `x` and the DMA-only round trip (load ``X`` into
    the CBUF in chunks, store it back to the output's words), each an RTL job, and the
    compiled program (its output map, predicted cycles)."""
    from systolica.compiler import GraphBuilder, compile_network
    g = GraphBuilder(f"transpose_{'x'.join(map(str, x.shape))}")
    g.transpose(g.input(x, name="x"), perm, name="t")
    compiled = compile_network(cfg, g.build())
    (x_at, x_words), = compiled.dram_map.inputs.values()
    (out_at, out_words), = compiled.dram_map.outputs.values()
    chunk = 4 * cfg.cbuf_bank_rows // 2

    def dma(kind, dram, buf, rows) -> MicroOp:
        return make(cfg, Opcode.DMA, kind=kind, dram_addr=dram, dram_stride=1,
                    buf_addr=buf, rows=rows)

    ops, loaded = [], {}             # buffer -> rows a load wrote in it
    for k, w in enumerate(range(0, max(x_words, out_words), chunk)):
        buf = (k % 2) * 2 * cfg.cbuf_bank_rows
        if w < x_words:
            loaded[buf] = max(loaded.get(buf, 0), min(chunk, x_words - w))
            ops.append(dma(DmaKind.LOAD_CBUF, x_at + w, buf, min(chunk, x_words - w)))
        if w < out_words:
            # (past X's words, rows of a buffer loaded before: a program reads no row
            # it did not write)
            rows = min(chunk, out_words - w)
            src = buf if loaded.get(buf, 0) >= rows else max(loaded, key=loaded.get)
            for at in range(0, rows, loaded[src]):
                ops.append(dma(DmaKind.STORE_CBUF, out_at + w + at, src,
                               min(loaded[src], rows - at)))
    cycles, updates = add_updates(cfg, ops, schedule(cfg, ops))
    trip = sorted([op.instr(c) for op, c in zip(ops, cycles)] + [u for u, _ in updates],
                  key=lambda i: i.cycle)
    readback = ((out_at, out_words),)
    jobs = {"on_chip": RtlJob(compiled.loadable, readback=readback),
            "dram_round_trip": RtlJob(Loadable.for_chip(
                cfg, isa.to_bytes([isa.encode(i) for i in trip]), compiled.dram),
                readback=readback)}
    return jobs, compiled


def nd_records(cfg_name: str = CONFIG, cases=ND_CASES) -> list[dict]:
    """Run every N-D case's two programs on the RTL (one simulator start)."""
    from systolica.sim import rtlsim
    cfg = preset(cfg_name)
    rng = np.random.default_rng(5)
    jobs, meta = [], []
    for shape, perm in cases:
        x = rng.integers(-128, 128, shape, dtype=np.int8)
        progs, compiled = nd_programs(cfg, x, perm)
        for name, job in progs.items():
            jobs.append(dataclasses.replace(job, name=f"{compiled.graph.name}_{name}"))
            meta.append((shape, perm, name, x, compiled))
    results = rtlsim.run(cfg, jobs)
    out: dict[tuple, dict] = {}
    for (shape, perm, name, x, compiled), res in zip(meta, results):
        rec = out.setdefault((shape, perm), {
            "name": f"transpose_{'x'.join(map(str, shape))}_{''.join(map(str, perm))}",
            "config": cfg_name, "kind": "transpose_nd", "shape": list(shape),
            "perm": list(perm), "ok": True})
        ok = res.error_name == "NONE"
        if name == "on_chip":
            got = compiled.results(_placed(compiled, res.readback[0]))["t"]
            ok = ok and np.array_equal(got, np.transpose(x, perm)) \
                and res.cycles == compiled.predicted_cycles
        rec["ok"] = rec["ok"] and ok
        rec[name] = {"cycles": res.cycles,
                     "dram_bytes": res.dram_rd_bytes + res.dram_wr_bytes}
    return list(out.values())


#: (M, K, N) of the int32 record: ``d = x @ w + bias`` (int32 ``[M, N]``) transposed
INT32_CASE = (64, 64, 64)


def int32_graphs(m: int, k: int, n: int, seed: int = 6):
    """An int32 tensor (a dense layer's int32 output, its bias over the whole int32
    range) transposed, and the same graph without the transpose (its output ``d``)."""
    from systolica.compiler import GraphBuilder
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (m, k))
    w = rng.integers(-128, 128, (k, n))
    bias = rng.integers(-2 ** 31, 2 ** 31 - 1, n)
    out = []
    for transposed in (True, False):
        g = GraphBuilder(f"int32_{m}x{n}{'_transpose' if transposed else ''}")
        d = g.dense(g.input(x, name="x"), w, bias, out_dtype="int32", name="d")
        if transposed:
            g.transpose(d, name="t")
        out.append(g.build())
    return out


def int32_records(cfg_name: str = CONFIG, case=INT32_CASE) -> list[dict]:
    """The int32 transpose of ``make bench`` on the RTL: the graph with the transpose
    (``on_chip``: the dense layer, its int32 output through DRAM, the transpose DRAM to
    DRAM) against the dense layer alone (``base``); its cost is the difference. The
    result is checked against numpy and the prediction."""
    from systolica.compiler import compile_network
    from systolica.compiler.graph import reference
    from systolica.sim import rtlsim
    cfg = preset(cfg_name)
    graphs = int32_graphs(*case)
    compiled = [compile_network(cfg, g) for g in graphs]
    jobs = [RtlJob(c.loadable, readback=(c.dram_map.outputs[c.graph.outputs[0]],),
                   name=c.graph.name) for c in compiled]
    results = rtlsim.run(cfg, jobs)
    rec = {"name": f"transpose_int32_{case[0]}x{case[2]}", "config": cfg_name,
           "kind": "transpose_int32", "shape": [case[0], case[2]], "ok": True}
    for name, c, res in zip(("on_chip", "base"), compiled, results):
        (at, n), = c.dram_map.outputs.values()
        image = np.zeros((at + n, cfg.rows), np.uint8)
        image[at:at + n] = res.readback[0]
        want = reference.outputs(c.graph)
        got = c.results(image)
        rec["ok"] = rec["ok"] and res.error_name == "NONE" \
            and res.cycles == c.predicted_cycles \
            and all(np.array_equal(got[k], want[k]) for k in want)
        rec[name] = {"cycles": res.cycles,
                     "dram_bytes": res.dram_rd_bytes + res.dram_wr_bytes}
        if name == "on_chip":
            rec["transpose_layer_cycles"] = next(l.cycles for l in c.layers if l.name == "t")
    rec["on_chip_extra"] = {k: rec["on_chip"][k] - rec["base"][k]
                            for k in ("cycles", "dram_bytes")}
    return [rec]


def _placed(compiled, words: np.ndarray) -> np.ndarray:
    """A DRAM image holding the output `words` where the compiled program put them."""
    (at, n), = compiled.dram_map.outputs.values()
    image = np.zeros((at + n, compiled.cfg.rows), np.uint8)
    image[at:at + n] = words
    return image


def records(cfg_name: str = CONFIG, shapes=SHAPES) -> list[dict]:
    """Run every shape's three programs on the RTL (one simulator start); one record
    per shape."""
    from systolica.sim import rtlsim
    cfg = preset(cfg_name)
    rng = np.random.default_rng(4)
    jobs, meta = [], []
    for M, N in shapes:
        x = rng.integers(-128, 128, (M, N), dtype=np.int8)
        progs, image, (at, words) = programs(cfg, x)
        for name, program in progs.items():
            code = isa.to_bytes([isa.encode(i) for i in program])
            jobs.append(RtlJob(Loadable.for_chip(cfg, code, image),
                               readback=((at, words),), name=f"transpose_{M}x{N}_{name}"))
            meta.append((M, N, name, x))
    results = rtlsim.run(cfg, jobs)
    by_shape: dict[tuple[int, int], dict] = {}
    for (M, N, name, x), res in zip(meta, results):
        rec = by_shape.setdefault((M, N), {"name": f"transpose_{M}x{N}", "config": cfg_name,
                                           "kind": "transpose", "ok": True})
        got = layout.unpack_int8(cfg, res.readback[0], N, M)
        ok = res.error_name == "NONE" and (name == "base" or np.array_equal(got, x.T))
        rec["ok"] = rec["ok"] and ok
        rec[name] = {"cycles": res.cycles,
                     "dram_bytes": res.dram_rd_bytes + res.dram_wr_bytes}
    out = []
    for rec in by_shape.values():
        for name in ("on_chip", "dram_round_trip"):
            rec[f"{name}_extra"] = {k: rec[name][k] - rec["base"][k]
                                    for k in ("cycles", "dram_bytes")}
        out.append(rec)
    return out


def print_records(recs: list[dict]) -> None:
    print("transposes on the RTL (cost beyond loading X and storing the result):")
    for r in recs:
        if r["kind"] == "transpose_int32":
            a, b = r["on_chip"], r["on_chip_extra"]
            print(f"{r['name']:>20} on {r['config']:<5} DRAM to DRAM after a dense layer: "
                  f"{a['cycles']:>6} cycles {a['dram_bytes']:>7} B DRAM, of which the "
                  f"transpose {b['cycles']:>6} cycles {b['dram_bytes']:>7} B DRAM "
                  f"(its layer: {r['transpose_layer_cycles']} cycles)  "
                  f"{'ok' if r['ok'] else 'MISMATCH'}")
            continue
        if r["kind"] == "transpose_nd":
            a, b = r["on_chip"], r["dram_round_trip"]
            print(f"{r['name']:>20} on {r['config']:<5} DRAM to DRAM, on chip: "
                  f"{a['cycles']:>6} cycles {a['dram_bytes']:>7} B DRAM   load and store "
                  f"only: {b['cycles']:>6} cycles {b['dram_bytes']:>7} B DRAM (+ the "
                  f"host's rearranging)  {'ok' if r['ok'] else 'MISMATCH'}")
            continue
        a, b = r["on_chip_extra"], r["dram_round_trip_extra"]
        print(f"{r['name']:>20} on {r['config']:<5} on chip: {a['cycles']:>6} cycles "
              f"{a['dram_bytes']:>7} B DRAM   DRAM round trip: {b['cycles']:>6} cycles "
              f"{b['dram_bytes']:>7} B DRAM (+ the host's rearranging)  "
              f"{'ok' if r['ok'] else 'MISMATCH'}")
