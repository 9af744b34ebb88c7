"""The management core's timeline (``make bench``): a table of chip programs run back
to back by the firmware, with the double-buffered configuration (the next program's
registers written while one runs) and without (written after it stops); the cycles
between programs are what the overlap saves (docs/management-core.md).

The table is the demo CNN (:func:`systolica.models.zoo.small_cnn`) of several seeds
(weights and image), each its own program in its own part of the DRAM; every output
is checked against the golden model and every program's CYCLES against its
prediction."""

from __future__ import annotations

import numpy as np

from systolica.arch import fetch
from systolica.arch.config import preset

CONFIG = "tiny"
IMAGES = 4


def programs(cfg, images: int = IMAGES) -> list:
    """The demo CNN of seeds 0.., each compiled to be fetched whole (the firmware
    starts it) from the DRAM word the one before left free."""
    from systolica.compiler import compile_network
    from systolica.compiler.options import CompileOptions
    from systolica.models.zoo import small_cnn
    out, base = [], 0
    for k in range(images):
        net = small_cnn(k)
        compiled = compile_network(cfg, net, options=CompileOptions(dram_base=base,
                                                                  fetch_from=0))
        out.append(compiled)
        base = compiled.prog_addr + fetch.region_words(cfg, len(compiled.program))
    return out


def records(cfg_name: str = CONFIG, images: int = IMAGES) -> list[dict]:
    """One record per way (``overlap`` and ``one_at_a_time``): each program's START
    (the core's cycle counter) and CYCLES, the gaps between programs, the whole
    table's cycles, whether every output and cycle count matched, and the firmware's
    size."""
    from systolica import golden
    from systolica.firmware import core_image
    from systolica.sim import core_run
    cfg = preset(cfg_name)
    compiled = programs(cfg, images)
    gold = [golden.run(cfg, c.loadable) for c in compiled]
    ranges = [(c.dram_map.output, c.dram_map.output_words) for c in compiled]
    image = core_image.for_chip(cfg)
    out = []
    for way, overlap in (("overlap", True), ("one_at_a_time", False)):
        run = core_run.run(cfg, [c.loadable for c in compiled], readback=ranges,
                           overlap=overlap)
        steps = run.table.steps
        ok = run.table.mailbox["result"] == 1 and not run.table.problems
        for c, g, step, words in zip(compiled, gold, steps, run.readback, strict=True):
            lo = c.dram_map.output
            ok &= step["t_cycles"] == c.predicted_cycles == g.cycles
            ok &= bool(np.array_equal(words, g.dram[lo:lo + c.dram_map.output_words]))
        last = steps[-1]
        out.append({
            "kind": "core_table", "name": f"demo_cnn_x{images}_{way}", "config": cfg_name,
            "way": way, "programs": images,
            "program_cycles": [s["t_cycles"] for s in steps],
            "starts": [s["t_start"] for s in steps],
            "gaps": run.table.gaps(),
            "table_cycles": last["t_start"] + last["t_cycles"] - steps[0]["t_start"],
            "sim_cycles": run.sim_cycles,
            "firmware_text_bytes": image.text_bytes, "firmware_data_bytes": image.data_bytes,
            "firmware_bss_bytes": image.bss_bytes, "ok": bool(ok)})
    saved = out[1]["table_cycles"] - out[0]["table_cycles"]
    for r in out:
        r["cycles_saved_by_overlap"] = saved
    return out


def print_records(records: list[dict]) -> None:
    for r in records:
        print(f"{r['name']:>28} on {r['config']}: {r['table_cycles']:>7} cycles for "
              f"{r['programs']} programs, gaps {r['gaps']} "
              f"{'ok' if r['ok'] else 'MISMATCH'}")
    if records:
        print(f"  the double-buffered configuration saves "
              f"{records[0]['cycles_saved_by_overlap']} cycles")
