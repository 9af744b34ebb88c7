"""The lane router on the RTL, for ``make bench``: rows moved through the general lanes
by one ``ROUTE`` with the skip links and without them (the same move, a cycle longer
per two tiles skipped), and a Concat network against its twin that reads the branches
as separate tensors (docs/compiler.md, "Concat through the lanes").

:func:`program` is the directed program the tests use too: it loads source and
destination rows, sets the route the compiler would (two pairs a SETCFG, within every
budget), moves ``M`` rows and stores the destination.
"""

from __future__ import annotations

import numpy as np

from systolica.arch import fabric, isa, timing
from systolica.arch.config import ChipConfig, preset
from systolica.arch.isa import DmaKind, Instr, Opcode
from systolica.arch.loadable import Loadable
from systolica.compiler.planning import lanes
from systolica.sim.jobs import RtlJob

M, SRC, DST, OUT = 24, 0, 100, 200


def places(rows: int) -> tuple[int, int, int]:
    """``(source row, destination row, output word)`` for `rows` rows: ``SRC``,
    ``DST``, ``OUT`` unless the rows would overlap."""
    dst = max(DST, rows)
    return SRC, dst, 2 * dst

#: (chip, column group -> west tile row, col0): moves a skip link shortens
SKIP_CASES = (("tiny_tall", {0: 0, 1: 1}, 0), ("tiny_wide", {3: 0, 2: 1}, 2))


def program(cfg: ChipConfig, moves: dict[int, int], col0: int, skips: bool = True,
            delay_shift: int = 0, rows: int = M):
    """``(route, keep, program)``: `moves` (column group -> west tile row) routed by
    :func:`.lanes.plan_route`, every partition group whose column group carries nothing
    kept; `delay_shift` more cycles of span and of every delay (the same result)."""
    route = lanes.plan_route(cfg, moves, skips=skips)
    src, dst, out = places(rows)
    table = fabric.by_name(cfg)
    pairs = [(table[k].index, table[k].value_of(v)) for k, v in route.routing.items()]
    prog = [Instr(Opcode.DMA, 0, dict(kind=DmaKind.LOAD_CBUF, dram_addr=src, dram_stride=1,
                                      buf_addr=src, rows=rows)),
            Instr(Opcode.DMA, rows + 1, dict(kind=DmaKind.LOAD_CBUF, dram_addr=dst,
                                             dram_stride=1, buf_addr=dst, rows=rows))]
    c = 1
    for k in range(0, len(pairs), 2):
        fmt = fabric.setcfg_format(cfg)
        prog.append(Instr(fmt.op, c, fmt.fields(pairs[k:k + 2])))
        c += 3
    keep = sum(1 << g for g in range(cfg.rows // cfg.tile_size)
               if (g + col0) % cfg.tile_cols not in moves)
    fields = {name: 0 for name, _ in isa.PAYLOAD[Opcode.ROUTE]}
    fields.update(src=src, dst=dst, rows=rows, span=route.span + delay_shift, col0=col0,
                  keep=keep)
    fields.update({k: v + delay_shift for k, v in route.delays().items()})
    prog.append(Instr(Opcode.ROUTE, max(c, 2 * rows + 3), fields))
    t = prog[-1].cycle + timing.done(cfg, prog[-1])
    prog.append(Instr(Opcode.DMA, t, dict(kind=DmaKind.STORE_CBUF, dram_addr=out,
                                          dram_stride=1, buf_addr=dst, rows=rows)))
    return route, keep, sorted(prog, key=lambda i: i.cycle)


def dram(cfg: ChipConfig, seed: int, rows: int = M) -> np.ndarray:
    """Random source rows and random destination rows (kept groups must show them)."""
    rng = np.random.default_rng(seed)
    src, dst, out = places(rows)
    image = np.zeros((out + rows, cfg.dram_word_bytes), np.uint8)
    image[src:src + rows, :cfg.rows] = rng.integers(0, 256, (rows, cfg.rows), dtype=np.uint8)
    image[dst:dst + rows, :cfg.rows] = rng.integers(0, 256, (rows, cfg.rows), dtype=np.uint8)
    return image


def expected(cfg: ChipConfig, image: np.ndarray, moves: dict[int, int], col0: int,
             keep: int, rows: int = M) -> np.ndarray:
    """The destination rows after the move, from the contract's words: partition group
    ``g`` takes the west tile row sent to column group ``(g + col0) % Tc``."""
    n, tc = cfg.tile_size, cfg.tile_cols
    src, dst, _ = places(rows)
    out = image[dst:dst + rows, :cfg.rows].copy()
    for g in range(cfg.rows // n):
        if not keep >> g & 1:
            i = moves[(g + col0) % tc]
            out[:, g * n:(g + 1) * n] = image[src:src + rows, i * n:(i + 1) * n]
    return out


def skip_records(rows: int = 256) -> list[dict]:
    """Each :data:`SKIP_CASES` move of `rows` rows on the RTL with and without the skip
    links: cycles, span, the rows equal to the contract's."""
    from systolica.sim import rtlsim
    out = []
    for name, moves, col0 in SKIP_CASES:
        cfg = preset(name)
        jobs, meta = [], []
        for skips in (False, True):
            route, keep, prog = program(cfg, moves, col0, skips, rows=rows)
            image = dram(cfg, 5, rows)
            words = isa.to_bytes([isa.encode(i) for i in prog])
            jobs.append(RtlJob(Loadable.for_chip(cfg, words, image),
                               readback=((places(rows)[2], rows),),
                               name=f"route_{name}_{'skips' if skips else 'plain'}"))
            meta.append((skips, route, prog, expected(cfg, image, moves, col0, keep, rows)))
        rec = {"name": f"route_{rows}_rows", "config": name, "kind": "lane_route",
               "moves": {str(j): i for j, i in moves.items()}, "ok": True}
        for res, (skips, route, prog, want) in zip(rtlsim.run(cfg, jobs), meta):
            got = res.readback[0].reshape(rows, -1)[:, :cfg.rows]
            ok = (res.error_name == "NONE" and np.array_equal(got, want)
                  and res.cycles == timing.run_cycles(cfg, prog))
            rec["ok"] = rec["ok"] and ok
            rec["with_skip_links" if skips else "without_skip_links"] = {
                "cycles": res.cycles, "span": route.span, "skip_links": route.skips,
                "route_cycles": timing.done(cfg, next(i for i in prog
                                                      if i.op is Opcode.ROUTE))}
        out.append(rec)
    return out


def print_records(recs: list[dict]) -> None:
    print("lane routes on the RTL (one ROUTE, with and without the skip links):")
    for r in recs:
        a, b = r["without_skip_links"], r["with_skip_links"]
        print(f"{r['name']:>20} on {r['config']:<9} span {a['span']} -> {b['span']} "
              f"({b['skip_links']} skip links), ROUTE {a['route_cycles']} -> "
              f"{b['route_cycles']} cycles, run {a['cycles']} -> {b['cycles']}  "
              f"{'ok' if r['ok'] else 'MISMATCH'}")
