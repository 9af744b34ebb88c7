"""Running a planned ONNX model (docs/assignment.md, step 7): its segments in order,
chip programs on the golden model (each also checked against the numpy reference of
its graph, and its cycles against the compiler's prediction), core segments as a
table of the firmware's kernels on the instruction-set model (checked against the
kernels' numpy statements), host segments in numpy; then, with `rtl`, every chip
program again on the Verilated chip in one simulator process, and every core
segment's table on the Verilated chip's core, fed the inputs the golden pass gave
them, their outputs compared bit for bit and their cycles with the prediction. By
induction the RTL's chain of programs computes what the golden chain did. The
outputs are then compared with onnxruntime running the same quantised model on the
same inputs."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from systolica import golden
from systolica.app.onnx_oracle import Agreement, against_onnxruntime
from systolica.compiler.assignment.partition import Plan, Segment
from systolica.compiler.errors import CompileError


@dataclass
class SegmentRun:
    segment: Segment
    seconds: float                  # host: the kernels' wall time; chip: cycles / clock
    compile_s: float = 0.0
    compiled: object = None         # the chip program (chip segments)
    cycles: int = 0                 # predicted
    golden_cycles: int = 0
    rtl_cycles: int | None = None
    macs: int = 0
    dram_bytes: int = 0
    matches_reference: bool = True  # golden = the graph's numpy reference
    rtl_matches_golden: bool | None = None
    rtl_error: str = "NONE"
    core_table: CoreTable | None = None     # core segments: the table and its DRAM


@dataclass
class ModelRun:
    plan: Plan
    segments: list[SegmentRun]
    outputs: dict[str, np.ndarray]
    agreement: list[Agreement] = field(default_factory=list)    # outputs, then values
    isolated: list[Agreement] = field(default_factory=list)     # each chip operation
    golden_s: float = 0.0
    rtl_s: float | None = None
    values: dict[str, np.ndarray] = field(default_factory=dict)   # every tensor passed

    @property
    def chip_cycles(self) -> int:
        return sum(s.cycles for s in self.segments if s.segment.processor == "chip")

    @property
    def core_cycles(self) -> int:
        return sum(s.cycles for s in self.segments if s.segment.processor == "core")

    @property
    def cycles(self) -> int:
        """The chip's and its core's cycles (the host's time is apart)."""
        return self.chip_cycles + self.core_cycles

    @property
    def host_seconds(self) -> float:
        return sum(s.seconds for s in self.segments if s.segment.processor == "host")

    @property
    def macs(self) -> int:
        return sum(s.macs for s in self.segments)

    def problems(self) -> list[str]:
        """Why the run failed (empty: it passed)."""
        out = []
        for s in self.segments:
            if s.segment.processor == "core":
                out += _core_problems(s)
            if s.segment.processor != "chip":
                continue
            label = f"chip segment {s.segment.index}"
            if not s.matches_reference:
                out.append(f"{label}: the golden model differs from numpy")
            if s.golden_cycles != s.cycles:
                out.append(f"{label}: golden {s.golden_cycles} cycles, predicted {s.cycles}")
            if s.rtl_matches_golden is False:
                out.append(f"{label}: the RTL's outputs differ from the golden model's")
            if s.rtl_cycles is not None and s.rtl_cycles != s.cycles:
                out.append(f"{label}: RTL {s.rtl_cycles} cycles, predicted {s.cycles}")
            if s.rtl_error != "NONE":
                out.append(f"{label}: the chip reported {s.rtl_error}")
        for a in self.agreement:
            if not a.ok:
                out.append(f"output {a.name!r} differs from onnxruntime by "
                           f"{a.max_difference:g} (tolerance {a.tolerance:g}; "
                           f"{a.differing} of {a.values} values differ)")
        for a in self.isolated:
            if not a.ok:
                out.append(f"operation {a.name!r}, fed onnxruntime's inputs, differs from "
                           f"it by {a.max_difference:g} steps, past its bound of "
                           f"{a.tolerance:g} ({a.differing} of {a.values} values differ)")
        return out

    @property
    def ok(self) -> bool:
        return not self.problems()


def run_plan(plan: Plan, *, rtl: bool = False, compare: bool = True,
             tolerance: float | None = None,
             progress: Callable[[str, int, int], None] | None = None) -> ModelRun:
    """Run `plan` (see the module docstring). `progress(what, done, total)` is told
    of each step. `tolerance`: the largest difference from onnxruntime allowed per
    output (None: docs/assignment.md's per operator)."""
    if not isinstance(plan, Plan):
        raise TypeError(f"run_plan takes what plan_model returns (a Plan), not "
                        f"{type(plan).__name__}")
    from systolica.compiler import compile_network
    from systolica.compiler.frontend import onnx_import
    from systolica.compiler.graph import reference
    cfg, lib = plan.cfg, plan.library
    values: dict[str, np.ndarray] = dict(plan.model.inputs)
    chip_words: dict[str, np.ndarray] = {}      # chip segments' outputs, their DRAM words
    runs: list[SegmentRun] = []
    t0 = time.perf_counter()
    for k, seg in enumerate(plan.segments):
        if progress:
            progress(f"segment {seg.index} ({seg.processor})", k, len(plan.segments))
        feeds = {v: values[v] for v in seg.reads}
        if seg.processor == "host":
            t = time.perf_counter()
            out = _run_on_host(plan, seg, feeds)
            runs.append(SegmentRun(seg, time.perf_counter() - t))
        elif seg.processor == "core":
            out, seg_run = _run_on_core(plan, seg, feeds, chip_words)
            runs.append(seg_run)
        else:
            t = time.perf_counter()
            graph = onnx_import.load(seg.proto, inputs=feeds, name=f"segment_{seg.index}")
            try:
                compiled = compile_network(cfg, graph)
            except CompileError as e:
                names = ", ".join(op.name for op in seg.ops[:4]) + (
                    " ..." if len(seg.ops) > 4 else "")
                raise CompileError(f"ONNX model {plan.model.name!r}: the operations "
                                   f"{names} do not compile for chip {cfg.name}: {e}; run "
                                   f"them on the host (--assign NODE=host) or choose a "
                                   f"larger chip (--config)") from None
            compile_s = time.perf_counter() - t
            gold = golden.run(cfg, compiled.loadable)
            got = compiled.results(gold.dram)
            want = reference.outputs(graph)
            out = {v: got[t_name].reshape(values_shape(seg, v, got[t_name]))
                   for v, t_name in zip(seg.writes, graph.outputs)}
            for v, t_name in zip(seg.writes, graph.outputs):     # as the chip left them
                at, n = compiled.dram_map.outputs[t_name]
                chip_words[v] = np.array(gold.dram[at:at + n])
            runs.append(SegmentRun(
                seg, compiled.predicted_cycles / lib.clock_hz, compile_s, compiled,
                compiled.predicted_cycles, gold.cycles, macs=compiled.macs,
                dram_bytes=compiled.dram_bytes_read + compiled.dram_bytes_written,
                matches_reference=all(np.array_equal(got[n], want[n]) for n in got)))
        values.update(out)
    run = ModelRun(plan, runs, {o: values[o] for o in plan.outputs},
                   golden_s=time.perf_counter() - t0, values=values)
    if rtl:
        run_on_rtl(run)
    if compare:
        compare_with_onnxruntime(run, tolerance)
    return run


class HostRunError(CompileError):
    """A host segment the ONNX reference evaluator cannot run (a node that breaks the
    ONNX specification in a way the front end's checks do not see)."""


def _run_on_host(plan: Plan, seg: Segment, feeds) -> dict[str, np.ndarray]:
    """`seg`'s outputs by the host's kernels; a HostRunError naming its operations
    where the evaluator refuses them."""
    from systolica.host.kernels import HostModel
    try:
        return HostModel(seg.proto).run(feeds)
    except Exception as e:      # the evaluator's kernels raise whatever numpy raises
        names = ", ".join(f"{op.name!r} ({op.kind})" for op in seg.ops[:4]) + (
            " ..." if len(seg.ops) > 4 else "")
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise HostRunError(f"ONNX model {plan.model.name!r}: the host cannot run "
                           f"{names}: the ONNX reference evaluator fails ({why}); check "
                           f"these nodes against the ONNX specification") from None


@dataclass
class CoreTable:
    """A core segment as the firmware runs it: its kernel steps, the DRAM pieces of
    their inputs, where each output is (value, view, rows, cols, ONNX shape), the
    DRAM words the table reaches, and what the golden run left there."""
    steps: list
    data: list
    outputs: list
    words: int
    layouts: dict = field(default_factory=dict)   # operand -> "chip" or "row-major"
    golden_dram: np.ndarray | None = None
    result: int = 0                       # the mailbox's result on the ISS (1: OK)
    rtl_result: int | None = None


def core_table(plan: Plan, seg: Segment, feeds, chip_words=None) -> CoreTable:
    """The table of kernel steps running `seg` on the core, in a DRAM of its own from
    word 0: each operand a chip segment gave as the chip left it, read through
    ``core_kernels.chip_view`` (where that view reads the operand's values: not a
    layout of tile groups, nor a map whose pixels are not the kernel's rows), else a
    row-major array (ONNX's layout, ``core_kernels.array_view``); each result after
    them, row-major; each descriptor after its result. `chip_words`: the DRAM words
    of the chip segments' outputs by value."""
    from systolica.compiler.assignment.core_ops import descriptor, lower
    from systolica.firmware import core_kernels as ck
    from systolica.firmware.core_host import KernelStep
    W = plan.cfg.dram_word_bytes
    at, data, views, steps, outputs, layouts = 0, [], {}, [], [], {}
    chip_words = chip_words or {}

    def in_chip_layout(v, rows, cols, dtype, x):
        """The chip's words of `v` placed at `at` and their view, if it reads `x`."""
        nonlocal at
        words = chip_words.get(v)
        if words is None or dtype not in ("int8", "uint8"):
            return None
        try:
            seen = ck.chip_view(plan.cfg, 0, (rows, cols), dtype).read(words.tobytes(),
                                                                       rows, cols)
        except IndexError:              # the view reaches past the chip's words
            return None
        if not np.array_equal(seen, x.reshape(rows, cols)):
            return None
        view = ck.chip_view(plan.cfg, at, (rows, cols), dtype)
        data.append((at, np.asarray(words, np.uint8)))
        at += words.shape[0]
        return view

    def place(rows, cols, dtype):
        nonlocal at
        view = ck.array_view(at * W, (rows, cols), dtype)
        at += -(-rows * cols * ck.SIZE[view.dtype] // W)
        return view

    for op in seg.ops:
        c = lower(op, plan.model.proto)
        if isinstance(c, str):          # the assigner checked it: a broken plan
            raise CompileError(f"ONNX node {op.name!r} ({op.kind}) was placed on the core, "
                               f"which cannot run it: {c}")
        ins = []
        for v, dtype in zip(c.inputs, c.input_dtypes):
            if v not in views:
                x = np.ascontiguousarray(np.asarray(feeds[v]).astype(ck.NUMPY[ck.BY_NAME[dtype]]))
                views[v] = in_chip_layout(v, c.rows, c.cols, dtype, x)
                layouts[v] = "chip"
                if views[v] is None:
                    layouts[v] = "row-major"
                    views[v] = place(c.rows, c.cols, dtype)
                    raw = np.zeros(-(-x.nbytes // W) * W, np.uint8)
                    raw[:x.nbytes] = x.reshape(-1).view(np.uint8)
                    data.append((views[v].base // W, raw.reshape(-1, W)))
            ins.append(views[v])
        out_cols = 1 if c.kernel == "argmax" else c.cols
        y = views[c.output] = place(c.rows, out_cols, c.output_dtype)
        desc = descriptor(c, [*ins, y], name=op.name)
        steps.append(KernelStep(desc, at, W))
        at += -(-ck.descriptor_bytes(desc.kernel) // W)
        outputs.append((c.output, y, c.rows, out_cols, c.output_shape))
    return CoreTable(steps, data, outputs, at, layouts)


def _run_on_core(plan: Plan, seg: Segment, feeds, chip_words=None
                 ) -> tuple[dict[str, np.ndarray], SegmentRun]:
    """`seg` on the instruction-set model running the firmware (the golden model of
    the core: ``core_iss.golden_table``), checked against the kernels' numpy
    statements (``core_kernels.reference``) on the same DRAM; its predicted cycles
    are the kernel steps' ``t_cycles`` there."""
    from systolica.firmware import core_iss, core_kernels
    from systolica.firmware.core_image import DMEM_BASE, step_offset
    table = core_table(plan, seg, feeds, chip_words)
    gold = core_iss.golden_table(plan.cfg, table.steps, data=table.data)
    table.golden_dram = gold.dram
    table.result = gold.mailbox["result"]
    W = plan.cfg.dram_word_bytes
    ref = bytearray(max(gold.dram.size, table.words * W))
    for first, words in table.data:
        ref[first * W:first * W + words.size] = words.tobytes()
    for step in table.steps:
        core_kernels.reference(step.descriptor, ref)
    got = bytes(gold.dram.reshape(-1))
    out, same = {}, True
    for value, view, rows, cols, shape in table.outputs:
        mine = view.read(got, rows, cols)
        same &= bool(np.array_equal(mine, view.read(ref, rows, cols)))
        out[value] = mine.reshape(shape)
    cycles = sum(gold.iss.word(DMEM_BASE + step_offset(k, "t_cycles"))
                 for k in range(len(table.steps)))
    return out, SegmentRun(seg, cycles / plan.library.clock_hz, cycles=cycles,
                           golden_cycles=cycles, matches_reference=same, core_table=table)


def _core_problems(s: SegmentRun) -> list[str]:
    label = f"core segment {s.segment.index}"
    t = s.core_table
    out = []
    if t.result != 1:
        out.append(f"{label}: the firmware on the instruction-set model ended with result "
                   f"{t.result}, not OK")
    if not s.matches_reference:
        out.append(f"{label}: the firmware on the instruction-set model differs from the "
                   f"kernels' numpy statements")
    if t.rtl_result is not None and t.rtl_result != 1:
        out.append(f"{label}: the firmware on the RTL ended with result {t.rtl_result}, "
                   f"not OK")
    if s.rtl_matches_golden is False:
        out.append(f"{label}: the RTL's outputs differ from the instruction-set model's")
    # the instruction-set model counts the core's cycles as PicoRV32 takes them
    if s.rtl_cycles is not None and s.rtl_cycles != s.cycles:
        out.append(f"{label}: RTL {s.rtl_cycles} core cycles, predicted {s.cycles}")
    return out


def compare_with_onnxruntime(run: ModelRun, tolerance: float | None = None) -> None:
    """Fill `run`'s agreement with onnxruntime, end to end and per chip operation."""
    run.agreement, run.isolated = against_onnxruntime(run.plan, run.values, tolerance)


def values_shape(seg: Segment, value: str, array: np.ndarray) -> tuple[int, ...]:
    """The ONNX shape of `value` (a chip program gives ``[M, N]`` for a vector)."""
    from systolica.compiler.assignment.operations import value_types
    shape = value_types(seg.proto).get(value, (0, None))[1]
    return tuple(shape) if shape and int(np.prod(shape)) == array.size else array.shape


def run_on_rtl(*runs: ModelRun, progress=None) -> None:
    """Every chip program of `runs` (of one chip) again on the Verilated chip, in one
    simulator process, fed what the golden pass fed it; its outputs and cycles filled
    in. `progress`: an :data:`systolica.sim.rtlsim.Progress`."""
    from systolica.sim import rtlsim
    from systolica.sim.jobs import RtlJob
    if not runs:
        return
    cfg = runs[0].plan.cfg
    if any(r.plan.cfg != cfg for r in runs):
        raise ValueError("run_on_rtl: the runs are planned for different chips; run each "
                         "chip's in a call of its own")
    chips = [s for r in runs for s in r.segments if s.segment.processor == "chip"]
    several = len(runs) > 1
    jobs = [RtlJob(s.compiled.loadable,
                   readback=tuple(s.compiled.dram_map.outputs.values()),
                   name=(f"{r.plan.model.name}_" if several else "")
                   + f"segment_{s.segment.index}")
            for r in runs for s in r.segments if s.segment.processor == "chip"]
    t = time.perf_counter()
    results = rtlsim.run(cfg, jobs, progress=progress) if jobs else []
    seconds = time.perf_counter() - t
    for r in runs:
        r.rtl_s = seconds
    for s, res in zip(chips, results):
        gold = golden.run(cfg, s.compiled.loadable).dram
        s.rtl_cycles = res.cycles
        s.rtl_error = res.error_name
        s.rtl_matches_golden = all(
            np.array_equal(np.asarray(words), gold[at:at + n])
            for (at, n), words in zip(s.compiled.dram_map.outputs.values(), res.readback))
    t = time.perf_counter()
    for r in runs:
        for s in r.segments:
            if s.segment.processor == "core":
                _core_on_rtl(cfg, s)
    for r in runs:
        r.rtl_s = seconds + time.perf_counter() - t


def _core_on_rtl(cfg, s: SegmentRun) -> None:
    """A core segment's table on the Verilated chip's core (its own simulator run):
    its outputs against the instruction-set model's, its kernel steps' cycles."""
    from systolica.sim import core_run
    t = s.core_table
    got = core_run.run(cfg, t.steps, data=t.data, readback=[(0, t.words)])
    t.rtl_result = got.table.mailbox["result"]
    W = cfg.dram_word_bytes
    mine, gold = bytes(got.readback[0].reshape(-1)), bytes(t.golden_dram.reshape(-1))
    s.rtl_matches_golden = all(
        np.array_equal(view.read(mine, rows, cols), view.read(gold, rows, cols))
        for _, view, rows, cols, _ in t.outputs) and len(mine) == t.words * W
    s.rtl_cycles = sum(step["t_cycles"] for step in got.table.steps)
    if got.table.problems:
        s.rtl_error = "; ".join(got.table.problems)
