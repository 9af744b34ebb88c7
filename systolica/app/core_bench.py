"""The management core's timeline (``make bench``): a table of chip programs run back
to back by the firmware, with the double-buffered configuration (the next program's
registers written while one runs) and without (written after it stops); the cycles
between programs are what the overlap saves (docs/management-core.md).

The table is the demo CNN (:func:`systolica.models.zoo.small_cnn`) of several seeds
(weights and image), each its own program in its own part of the DRAM; every output
is checked against the golden model and every program's CYCLES against its
prediction."""

from __future__ import annotations

from dataclasses import dataclass

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
    size; the same table's STARTs on the instruction-set model with the core's cycle
    model (``model_starts``) and whether every START and CYCLES equal the RTL's
    (``model_exact``)."""
    from systolica import golden
    from systolica.firmware import core_image, core_iss
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
        model = core_iss.golden_table(cfg, [c.loadable for c in compiled], overlap=overlap)
        model_starts = [s["t_start"] for s in model.steps]
        out.append({
            "kind": "core_table", "name": f"demo_cnn_x{images}_{way}", "config": cfg_name,
            "way": way, "programs": images,
            "program_cycles": [s["t_cycles"] for s in steps],
            "starts": [s["t_start"] for s in steps],
            "gaps": run.table.gaps(),
            "model_starts": model_starts,
            "model_exact": [(s["t_start"], s["t_cycles"]) for s in steps]
            == [(s["t_start"], s["t_cycles"]) for s in model.steps],
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
              f"{'ok' if r['ok'] else 'MISMATCH'}, the cycle model's timeline "
              f"{'exact' if r['model_exact'] else 'DIFFERS'}")
    if records:
        print(f"  the double-buffered configuration saves "
              f"{records[0]['cycles_saved_by_overlap']} cycles")


#: The kernels timed on the RTL: (name, elements per row) for one row each.
KERNEL_SIZES = (("softmax", 10), ("softmax", 1000), ("argmax", 10), ("argmax", 1000),
                ("requantise", 10), ("requantise", 1000), ("add", 10), ("add", 1000))


@dataclass
class KernelTable:
    """A table of kernel steps on random int8 rows: the steps, the DRAM pieces of
    their inputs, and per step its output's ``(first word, words)``, descriptor and
    inputs by name."""
    steps: list
    data: list
    outputs: list[tuple[int, int, object, dict]]


def kernel_table(cfg, sizes=KERNEL_SIZES, seed: int = 7) -> KernelTable:
    """One kernel step per ``(name, elements)`` of `sizes` (softmax, argmax with an
    int64 index, requantise, add; one row each), inputs random int8, each step's
    inputs, output and descriptor in their own DRAM words one after the other."""
    from systolica.firmware import core_kernels
    from systolica.firmware.core_host import KernelStep
    W = cfg.dram_word_bytes
    rng = np.random.default_rng(seed)
    steps, data, outs, at = [], [], [], 0
    for name, n in sizes:
        names = ("a", "b") if name == "add" else ("x",)
        inputs, views = {}, {}
        for input_name in names:
            x = rng.integers(-128, 128, (1, n), dtype=np.int8)
            padded = np.zeros(-(-n // W) * W, np.uint8)
            padded[:n] = x.view(np.uint8).reshape(-1)
            data.append((at, padded.reshape(-1, W)))
            inputs[input_name] = x
            views[input_name] = core_kernels.array_view(at * W, (1, n))
            at += -(-n // W)
        y_dtype = "int64" if name == "argmax" else "int8"
        y_elements = 1 if name == "argmax" else n
        y_words = -(-(8 if name == "argmax" else n) // W)
        y = core_kernels.array_view(at * W, (1, y_elements), y_dtype)
        if name == "softmax":
            desc = core_kernels.softmax(views["x"], y, rows=1, cols=n, x_scale=0.05,
                                        y_scale=1 / 256, y_zp=-128)
        elif name == "argmax":
            desc = core_kernels.argmax(views["x"], y, rows=1, cols=n)
        elif name == "requantise":
            desc = core_kernels.requantise(views["x"], y, rows=1, cols=n, x_scale=0.05,
                                           x_zp=3, y_scale=0.11, y_zp=-5)
        elif name == "add":
            desc = core_kernels.add(views["a"], views["b"], y, rows=1, cols=n,
                                    a_scale=0.05, a_zp=1, b_scale=0.07, b_zp=-2,
                                    y_scale=0.1, y_zp=4)
        else:
            raise ValueError(f"no kernel {name!r}: softmax, argmax, requantise or add")
        outs.append((at, y_words, desc, inputs))
        at += y_words
        steps.append(KernelStep(desc, at, W))
        at += -(-core_kernels.descriptor_bytes(desc.kernel) // W)
    return KernelTable(steps, data, outs)


def kernel_output(desc, words: np.ndarray) -> np.ndarray:
    """A kernel's output read back from its DRAM words."""
    from systolica.firmware import core_kernels
    raw = words.reshape(-1)
    if desc.kernel == core_kernels.Kernel.ARGMAX:
        return raw[:8].view(np.int64).reshape(1, 1)
    return raw[:desc.cols].view(np.int8).reshape(1, desc.cols)


def kernel_records(cfg_name: str = CONFIG, sizes=KERNEL_SIZES) -> list[dict]:
    """Each kernel of :data:`KERNEL_SIZES` run by the firmware on the Verilated chip in
    one table (random int8 input, one row): the core's cycles it took (``rdcycle``
    around it) and the cycle model's (:mod:`systolica.firmware.core_cycles`, on the
    instruction-set model), the instructions it ran and the cycles per instruction,
    whether its output equals the kernel's numpy statement and the same table on the
    instruction-set model, and the cycles per element."""
    from systolica.firmware import core_iss, core_kernels
    from systolica.sim import core_run
    cfg = preset(cfg_name)
    table = kernel_table(cfg, sizes)
    run = core_run.run(cfg, table.steps, data=table.data,
                       readback=[(first, words) for first, words, _, _ in table.outputs])
    iss = core_iss.golden_table(cfg, table.steps, data=table.data)
    out = []
    for k, ((first, words, desc, inputs), step, model, got) in enumerate(zip(
            table.outputs, run.table.steps, iss.steps, run.readback, strict=True)):
        want = core_kernels.compute(desc, inputs)
        ok = bool(np.array_equal(kernel_output(desc, got), want))
        ok &= bool(np.array_equal(got, iss.dram[first:first + words]))
        instructions = iss.step_instructions(k)
        out.append({"kind": "core_kernel", "name": f"{desc.kernel.name.lower()}_{desc.cols}",
                    "config": cfg_name, "elements": desc.cols,
                    "core_cycles": step["t_cycles"], "model_cycles": model["t_cycles"],
                    "model_exact": step["t_cycles"] == model["t_cycles"]
                    and step["t_start"] == model["t_start"],
                    "instructions": instructions,
                    "cpi": step["t_cycles"] / instructions,
                    "cycles_per_element": step["t_cycles"] / desc.cols,
                    "ok": ok and run.table.mailbox["result"] == 1})
    return out


def print_kernel_records(records: list[dict]) -> None:
    for r in records:
        print(f"{r['name']:>16} on {r['config']}'s core: {r['core_cycles']:>8} cycles "
              f"({r['cycles_per_element']:.1f} per element, {r['cpi']:.2f} per "
              f"instruction), model {r['model_cycles']:>8} "
              f"{'exact' if r['model_exact'] else 'DIFFERS'}, "
              f"{'ok' if r['ok'] else 'MISMATCH'}")
