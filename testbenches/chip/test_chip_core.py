"""The management core in the chip (docs/management-core.md, "The core in the chip"):
its registers, cycle by cycle, with small programs for the core (``tb_chip_core``);
and tables the firmware runs: the host loads the firmware and the table through the
CORE_* registers, the core sequences the chip's programs and its own kernels and
signals the host once. The outputs equal the golden model's bit for bit (each
program alone, and the same firmware on the instruction-set model with the golden
model behind its register window, :func:`systolica.firmware.core_iss.golden_table`),
and every program's CYCLES its prediction. The core's own cycles equal the cycle
model's (:mod:`systolica.firmware.core_cycles`) exactly: the counter at the end of
each random program, every step's START and cycles in tables of programs (with and
without the overlap) and of each kernel at two sizes; the comparison fails when a
class's cost is one cycle off."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch import fetch
from systolica.arch.config import preset
from systolica.compiler import compile_network
from systolica.compiler.options import CompileOptions
from systolica.firmware import core_cycles, core_iss
from systolica.firmware.core_image import FwResult
from systolica.models.zoo import small_cnn
from systolica.sim import core_run, rtlsim

from block_runner import run_block

pytestmark = pytest.mark.rtl

CFG = preset("tiny")


#: Random RV32IM programs run by the core in the chip and by the ISS.
RANDOM_PROGRAMS = 12


def test_the_core_registers_and_random_programs_against_the_iss(tmp_path):
    """The register cases, then RANDOM_PROGRAMS random programs on the Verilated
    chip's core: every register and scratch word equals unicorn's."""
    import json

    import rv32_random
    import tb_chip_core
    programs = [rv32_random.program(seed) for seed in range(RANDOM_PROGRAMS)]
    (tmp_path / "programs.json").write_text(json.dumps(programs))
    run_block(rtlsim.build(CFG), rtlsim.HDL_TOPLEVEL, "tb_chip_core",
              extra_env={"BLOCK_CASE": ",".join(tb_chip_core.CASES),
                         "CORE_RANDOM": str(tmp_path / "programs.json"),
                         "CORE_RANDOM_OUT": str(tmp_path / "got.json")})
    got = json.loads((tmp_path / "got.json").read_text())
    for seed, (words, mine) in enumerate(zip(programs, got, strict=True)):
        want = rv32_random.on_iss(words)
        assert mine == want, f"random program {seed}: the core and the ISS differ at " \
            f"words {[k for k, (a, b) in enumerate(zip(mine, want)) if a != b]}"
    # the counter word checks the cycle model: every class one cycle off is caught
    for name in MUTATED_CLASSES:
        timing = _mutated(name)
        assert any(rv32_random.on_iss(words, timing=timing) != mine
                   for words, mine in zip(programs, got)), \
            f"{name} one cycle off is not caught by the random programs"


#: The cycle model's classes the random programs exercise (the rest: the tables)
MUTATED_CLASSES = ("alu", "load", "store", "register_window", "shift", "mul", "mulh",
                   "div", "branch_taken", "branch_not_taken", "rdcycle_offset")


def _mutated(name: str) -> core_cycles.CoreTiming:
    from dataclasses import replace
    return replace(core_cycles.TIMING, **{name: getattr(core_cycles.TIMING, name) + 1})


def test_a_random_program_differs_on_the_iss_when_an_instruction_changes():
    """The differential check can fail: a program whose multiplies and divides are
    made adds (an RV32I core's answer would differ so) leaves other words."""
    import rv32_random
    words = rv32_random.program(0)
    changed = [w & ~(0x7F << 25) & ~(7 << 12) if w & 0x7F == 0x33 and w >> 25 == 1 else w
               for w in words]
    assert changed != words
    assert rv32_random.on_iss(changed) != rv32_random.on_iss(words)


def _programs(count: int):
    """`count` small CNNs (different weights), each in its own part of the DRAM."""
    out, base = [], 0
    for seed in range(count):
        compiled = compile_network(CFG, small_cnn(seed, size=8, channels=4),
                                   options=CompileOptions(dram_base=base, fetch_from=0))
        out.append(compiled)
        base = compiled.prog_addr + fetch.region_words(CFG, len(compiled.program))
    return out


@pytest.fixture(scope="module")
def programs():
    return _programs(3)


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "one-at-a-time"])
def test_the_core_runs_a_table_of_programs(programs, overlap):
    ranges = [(c.dram_map.output, c.dram_map.output_words) for c in programs]
    got = core_run.run(CFG, [c.loadable for c in programs], readback=ranges,
                       overlap=overlap)
    table = got.table
    assert table.result == FwResult.OK and not table.problems, table.mailbox
    assert table.mailbox["steps_done"] == len(programs)
    iss = core_iss.golden_table(CFG, [c.loadable for c in programs], overlap=overlap)
    assert {k: iss.mailbox[k] for k in ("result", "steps_done", "cycles")} == \
        {k: table.mailbox[k] for k in ("result", "steps_done", "cycles")}
    timeline = [(s["t_start"], s["t_cycles"]) for s in table.steps]
    assert [(s["t_start"], s["t_cycles"]) for s in iss.steps] == timeline
    for name in ("waitirq_wake", "access_offset", "start_to_irq") if overlap else ():
        mutated = core_iss.golden_table(CFG, [c.loadable for c in programs],
                                        overlap=overlap, timing=_mutated(name))
        assert [(s["t_start"], s["t_cycles"]) for s in mutated.steps] != timeline, name
    for compiled, step, words in zip(programs, table.steps, got.readback, strict=True):
        gold = golden.run(CFG, compiled.loadable)
        assert step["t_cycles"] == compiled.predicted_cycles == gold.cycles
        lo = compiled.dram_map.output
        assert np.array_equal(words, gold.dram[lo:lo + compiled.dram_map.output_words])
        assert np.array_equal(words, iss.dram[lo:lo + compiled.dram_map.output_words])
    print("gaps", overlap, table.gaps())


#: Each kernel at two sizes, one table on the Verilated core.
KERNELS = (("softmax", 9), ("softmax", 70), ("argmax", 9), ("argmax", 70),
           ("requantise", 9), ("requantise", 70), ("add", 9), ("add", 70))


def test_each_kernel_takes_the_cycles_the_model_gives():
    """A table of each kernel at two sizes on the Verilated chip: outputs as the
    kernels' numpy statements, and every step's START and cycles (``rdcycle`` around
    the kernel) the cycle model's on the ISS, which also :func:`core_iss.step_cycles`
    gives for each step alone; one cycle more for a taken branch is caught."""
    from systolica.app import core_bench
    from systolica.firmware import core_kernels
    kernels = core_bench.kernel_table(CFG, KERNELS)
    got = core_run.run(CFG, kernels.steps, data=kernels.data,
                       readback=[(first, words) for first, words, _, _ in kernels.outputs])
    assert got.table.result == FwResult.OK and not got.table.problems, got.table.mailbox
    for (_, _, desc, inputs), mine in zip(kernels.outputs, got.readback,
                                          strict=True):
        assert np.array_equal(core_bench.kernel_output(desc, mine),
                              core_kernels.compute(desc, inputs)), desc.name
    iss = core_iss.golden_table(CFG, kernels.steps, data=kernels.data)
    timeline = [(s["t_start"], s["t_cycles"]) for s in got.table.steps]
    assert [(s["t_start"], s["t_cycles"]) for s in iss.steps] == timeline
    assert [core_iss.step_cycles(CFG, step, data=kernels.data)
            for step in kernels.steps] == [c for _, c in timeline]
    for name in ("branch_taken", "load", "jal", "jalr"):
        mutated = core_iss.golden_table(CFG, kernels.steps, data=kernels.data,
                                        timing=_mutated(name))
        assert [(s["t_start"], s["t_cycles"]) for s in mutated.steps] != timeline, name
    print("kernels", [(n, c) for (n, _), (_, c) in zip(KERNELS, timeline)])


def _classifier_with_softmax():
    """float_lenet with a Softmax over its logits, quantised by onnxruntime (QDQ)."""
    from onnx import TensorProto, helper

    from systolica.models import onnx_zoo
    model = onnx_zoo.float_lenet()
    graph = model.graph
    logits = graph.output[0].name
    graph.node.append(helper.make_node("Softmax", [logits], ["probs"], name="softmax",
                                       axis=-1))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10]))
    return onnx_zoo.ort_quantized(model)


def _softmax_parameters(proto) -> dict:
    """The scales around the Softmax of a host segment: DequantizeLinear's input scale,
    QuantizeLinear's output scale and zero point."""
    from onnx import numpy_helper
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    nodes = list(proto.graph.node)
    soft = next(n for n in nodes if n.op_type == "Softmax")
    deq = next(n for n in nodes if n.output[0] == soft.input[0])
    quant = next(n for n in nodes if n.input[0] == soft.output[0])
    return dict(x_scale=float(inits[deq.input[1]]), y_scale=float(inits[quant.input[1]]),
                y_zp=int(inits[quant.input[2]]), y_dtype=str(inits[quant.input[2]].dtype),
                logits=deq.input[0], probs=quant.output[0])


def test_a_classifier_whose_softmax_runs_on_the_core():
    """The chip computes the logits, the core's softmax kernel turns them into int8
    probabilities in DRAM, both steps run by the firmware: the logits equal the golden
    model's, the probabilities the kernel's numpy statement on them exactly, and the
    model's own (onnxruntime, and the host's numpy Softmax) within one step."""
    from systolica.app.onnx_run import run_plan
    from systolica.compiler.assignment.partition import plan_model
    from systolica.compiler.frontend import onnx_import
    from systolica.firmware import core_kernels
    from systolica.firmware.core_host import KernelStep
    from systolica.models import onnx_zoo

    model = _classifier_with_softmax()
    plan = plan_model(CFG, model)
    run = run_plan(plan)
    chip = [s for s in plan.segments if s.processor == "chip"][-1]
    host = next(s for s in plan.segments if any(op.kind == "Softmax" for op in s.ops))
    p = _softmax_parameters(host.proto)
    assert p["logits"] in chip.writes
    graph = onnx_import.load(chip.proto, inputs={v: run.values[v] for v in chip.reads},
                             name="logits")
    compiled = compile_network(CFG, graph, options=CompileOptions(fetch_from=0))
    W = CFG.dram_word_bytes
    (out_t, (out_word, out_words)), = compiled.dram_map.outputs.items()
    free = compiled.prog_addr + fetch.region_words(CFG, len(compiled.program))
    rows, cols = 1, 10
    desc = core_kernels.softmax(
        core_kernels.chip_view(CFG, out_word, (rows, cols)),
        core_kernels.array_view(free * W, (rows, cols), p["y_dtype"]),
        rows=rows, cols=cols, x_scale=p["x_scale"], y_scale=p["y_scale"], y_zp=p["y_zp"],
        name="softmax")
    probs_words = -(-cols // W)
    steps = [compiled.loadable, KernelStep(desc, free + probs_words, W)]
    got = core_run.run(CFG, steps, readback=[(out_word, out_words), (free, probs_words)])
    assert got.table.result == FwResult.OK and not got.table.problems, got.table.mailbox

    gold = golden.run(CFG, compiled.loadable)
    assert got.table.steps[0]["t_cycles"] == compiled.predicted_cycles == gold.cycles
    assert np.array_equal(got.readback[0], gold.dram[out_word:out_word + out_words])
    logits = compiled.results(gold.dram)[out_t].reshape(rows, cols)
    assert np.array_equal(logits, run.values[p["logits"]].reshape(rows, cols))
    probs = got.readback[1].reshape(-1)[:cols].view(p["y_dtype"]).reshape(rows, cols)
    assert np.array_equal(probs, core_kernels.compute(desc, {"x": logits}))
    iss = core_iss.golden_table(CFG, steps)         # the same firmware, on the ISS
    assert iss.mailbox["result"] == FwResult.OK
    assert [(s["t_start"], s["t_cycles"]) for s in iss.steps] == \
        [(s["t_start"], s["t_cycles"]) for s in got.table.steps]
    assert np.array_equal(got.readback[1], iss.dram[free:free + probs_words])
    ours = (probs.astype(np.float64) - p["y_zp"]) * p["y_scale"]
    host = run.outputs[plan.outputs[0]].reshape(rows, cols)     # numpy's Softmax
    assert np.abs(ours - host).max() <= p["y_scale"] * 1.0001
    session = onnx_zoo.runtime_session(model)
    feed = {i.name: plan.model.inputs[i.name] for i in session.get_inputs()}
    ort = session.run(None, feed)[0].reshape(rows, cols)
    assert np.abs(ours - ort).max() <= p["y_scale"] * 1.0001
