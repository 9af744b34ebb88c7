"""Measuring the function library (``systolica library``): chip kernels compiled and
their cycles taken from the compiler's exact cycle model (which the RTL equals), host
kernels timed on this machine. Each kind is measured at three shape classes."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from systolica.arch.config import ChipConfig
from systolica.compiler.assignment import library
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.graph import GraphBuilder

_RNG = np.random.default_rng(0)


def _i8(*shape):
    return _RNG.integers(-8, 8, size=shape, dtype=np.int8)


def _conv(h, c):
    g = GraphBuilder(f"cal_conv_{h}_{c}")
    x = g.input(_i8(1, h, h, c))
    return g.build(g.conv2d(x, _i8(3, 3, c, c), pads=1, mult=1, shift=6)), h * h * c * c * 9


def _dense(m, k, n):
    g = GraphBuilder(f"cal_dense_{m}_{k}_{n}")
    x = g.input(_i8(m, k))
    return g.build(g.dense(x, _i8(k, n), mult=1, shift=6)), m * k * n


def _max_pool(h, c):
    g = GraphBuilder(f"cal_pool_{h}_{c}")
    x = g.input(_i8(1, h, h, c))
    return g.build(g.max_pool2d(x, 2, 2)), (h // 2) * (h // 2) * c


def _avg_pool(h, c):
    g = GraphBuilder(f"cal_avg_{h}_{c}")
    x = g.input(_i8(1, h, h, c))
    return g.build(g.avg_pool2d(x, 3, 1, 1)), h * h * c


def _add(h, c):
    g = GraphBuilder(f"cal_add_{h}_{c}")
    a, b = g.input(_i8(1, h, h, c), name="a"), g.input(_i8(1, h, h, c), name="b")
    return g.build(g.add(a, b, shift=1)), h * h * c


def _gap(h, c):
    g = GraphBuilder(f"cal_gap_{h}_{c}")
    x = g.input(_i8(1, h, h, c))
    return g.build(g.global_avg_pool(x)), c


def _concat(m, k):
    # [M, K] operands: a Concat of two input maps is refused by the scheduler's
    # verifier (docs/notes/operation-assignment.md), of maps from layers it is free
    g = GraphBuilder(f"cal_concat_{m}_{k}")
    a, b = g.input(_i8(m, k), name="a"), g.input(_i8(m, k), name="b")
    return g.build(g.concat(a, b)), 2 * m * k


def _map_in(h, c):
    g = GraphBuilder(f"cal_in_{h}_{c}")
    x = g.input(_i8(1, c, h, h), layout="NCHW")
    return g.build(x), h * h * c


#: The chip's calibration kernels per family, four shape classes each (the smallest
#: for the FPGA presets' small memories).
CHIP_KERNELS: dict[str, list[Callable]] = {
    "conv": [lambda: _conv(4, 4), lambda: _conv(8, 16), lambda: _conv(16, 32),
             lambda: _conv(28, 64)],
    "dense": [lambda: _dense(4, 16, 16), lambda: _dense(16, 64, 64),
              lambda: _dense(64, 256, 256), lambda: _dense(128, 512, 512)],
    "max_pool": [lambda: _max_pool(4, 4), lambda: _max_pool(8, 16),
                 lambda: _max_pool(16, 32), lambda: _max_pool(32, 64)],
    "avg_pool": [lambda: _avg_pool(4, 4), lambda: _avg_pool(8, 16),
                 lambda: _avg_pool(16, 32), lambda: _avg_pool(32, 64)],
    "add": [lambda: _add(4, 4), lambda: _add(8, 16), lambda: _add(16, 32),
            lambda: _add(32, 64)],
    "global_avg_pool": [lambda: _gap(2, 4), lambda: _gap(4, 16), lambda: _gap(7, 64),
                        lambda: _gap(7, 256)],
    "concat": [lambda: _concat(16, 8), lambda: _concat(64, 32), lambda: _concat(256, 64),
               lambda: _concat(1024, 64)],
}


def chip_points(cfg: ChipConfig, clock_hz: float, kernels=CHIP_KERNELS):
    """Per family, ``(work, seconds)`` of the kernels that fit the chip."""
    from systolica.compiler import compile_network
    out = {}
    for family, makers in kernels.items():
        pts = []
        for make in makers:
            graph, work = make()
            try:
                cycles = compile_network(cfg, graph).predicted_cycles
            except CompileError:
                continue            # past this chip's memories: a smaller class suffices
            pts.append((float(work), cycles / clock_hz))
        if not pts and family == "concat":
            # no general lanes: maps are joined in place, each producer writing its
            # channels of the joined tensor (compiler/graph/concat_pad.py)
            pts = [(1.0, 1.0 / clock_hz)]
        if not pts:
            raise CompileError(f"no calibration kernel of {family!r} fits chip {cfg.name!r}")
        out[family] = pts
    # Flatten and a folded Relu move nothing on the chip
    out["move"] = [(1.0, 1.0 / clock_hz)]
    return out


def chip_transfer(cfg: ChipConfig, clock_hz: float):
    """``(bytes, seconds)`` of a map entering a chip program from the host's layout
    (its transpose on the chip; leaving costs the same)."""
    from systolica.compiler import compile_network
    pts = []
    for h, c in ((4, 4), (8, 16), (16, 32), (28, 64)):
        graph, nbytes = _map_in(h, c)
        try:
            pts.append((float(nbytes), compile_network(cfg, graph).predicted_cycles
                        / clock_hz))
        except CompileError:
            continue
    return pts


def _one_node(op_type, inputs: dict, attrs=None, extra_inits=None):
    from onnx import TensorProto, helper, numpy_helper
    types = {np.float32: TensorProto.FLOAT, np.int8: TensorProto.INT8}
    ins = [helper.make_tensor_value_info(k, types[v.dtype.type], v.shape)
           for k, v in inputs.items()]
    inits = [numpy_helper.from_array(v, k) for k, v in (extra_inits or {}).items()]
    node = helper.make_node(op_type, list(inputs) + list(extra_inits or {}), ["y"],
                            **(attrs or {}))
    model = helper.make_model(helper.make_graph([node], op_type, ins,
                                                [helper.make_tensor_value_info("y", 0, None)],
                                                inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    return model


def _host_cases():
    f = np.float32
    r = np.random.default_rng(1)

    def m(*s):
        return r.standard_normal(s).astype(f)

    cases = {}
    cases["Conv"] = [(_one_node("Conv", {"x": m(1, c, h, h)}, {"pads": [1, 1, 1, 1]},
                                {"w": m(c, c, 3, 3)}), h * h * c * c * 9)
                     for h, c in ((8, 16), (16, 32), (28, 32))]
    cases["MatMul"] = [(_one_node("MatMul", {"x": m(mm, k)}, None, {"w": m(k, n)}),
                        mm * k * n) for mm, k, n in ((16, 64, 64), (64, 256, 256),
                                                     (128, 512, 512))]
    cases["Gemm"] = [(_one_node("Gemm", {"x": m(1, k)}, None, {"w": m(k, n)}), k * n)
                     for k, n in ((256, 256), (1024, 1024), (4096, 1000))]
    for kind, attrs in (("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2]}),
                        ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2]}),
                        ("LRN", {"size": 5})):
        cases[kind] = [(_one_node(kind, {"x": m(1, c, h, h)}, attrs), h * h * c)
                       for h, c in ((8, 16), (16, 32), (28, 64))]
    for kind in ("GlobalAveragePool", "Relu", "Sigmoid", "Softmax", "Flatten"):
        cases[kind] = [(_one_node(kind, {"x": m(1, c, h, h)}), h * h * c)
                       for h, c in ((8, 16), (16, 32), (28, 64))]
    cases["Add"] = [(_one_node("Add", {"a": m(1, c, h, h), "b": m(1, c, h, h)}), h * h * c)
                    for h, c in ((8, 16), (16, 32), (28, 64))]
    cases["Concat"] = [(_one_node("Concat", {"a": m(1, c, h, h), "b": m(1, c, h, h)},
                                  {"axis": 1}), 2 * h * h * c)
                       for h, c in ((8, 16), (16, 32), (28, 64))]
    cases["QuantizeLinear"] = [
        (_one_node("QuantizeLinear", {"x": m(1, c, h, h)}, None,
                   {"s": np.float32(0.05), "z": np.int8(0)}), h * h * c)
        for h, c in ((8, 16), (16, 32), (28, 64))]
    cases["DequantizeLinear"] = [
        (_one_node("DequantizeLinear", {"x": r.integers(-128, 128, (1, c, h, h)).astype(
            np.int8)}, None, {"s": np.float32(0.05), "z": np.int8(0)}), h * h * c)
        for h, c in ((8, 16), (16, 32), (28, 64))]
    return cases


def host_points(repeat: int = 3):
    """Per ONNX kind, ``(work, seconds)`` of the host kernel, the best of `repeat`."""
    from systolica.host.kernels import HostModel
    out = {}
    for kind, cases in _host_cases().items():
        pts = []
        for model, work in cases:
            host = HostModel(model)
            feeds = {i.name: _feed(i) for i in model.graph.input}
            best = min(_timed(lambda: host.run(feeds)) for _ in range(repeat))
            pts.append((float(work), best))
        out[kind] = pts
    return out


def _feed(vi):
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    if vi.type.tensor_type.elem_type == 3:
        return np.random.default_rng(2).integers(-128, 128, shape).astype(np.int8)
    return np.random.default_rng(2).standard_normal(shape).astype(np.float32)


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def host_transfer():
    """``(bytes, seconds)`` of the host copying a tensor into the chip's memory."""
    pts = []
    for n in (1 << 12, 1 << 16, 1 << 20):
        src, dst = np.ones(n, np.int8), np.empty(n, np.int8)
        pts.append((float(n), min(_timed(lambda: np.copyto(dst, src)) for _ in range(5))))
    return pts


def measure(cfg: ChipConfig, clock_hz: float = library.NOMINAL_CLOCK_HZ) -> library.Library:
    return library.Library(
        cfg.name, clock_hz, library.fingerprint(cfg),
        {"chip": chip_points(cfg, clock_hz), "host": host_points()},
        {"chip": chip_transfer(cfg, clock_hz), "host": host_transfer()})


#: The core's calibration kernels: (library kind, rows, cols) of one random int8
#: tensor each (the add: two). The kernels do not depend on the array, so one chip
#: with the core measures them for all (docs/assignment.md, "The management core").
CORE_SHAPES = tuple((kind, rows, cols) for kind in ("softmax", "argmax", "add", "requantise")
                    for rows, cols in ((1, 16), (1, 128), (4, 256), (8, 1024)))


def core_points(cfg: ChipConfig, shapes=CORE_SHAPES) -> dict[str, list[tuple[float, int]]]:
    """Per kind, ``(elements, core cycles)`` of the firmware's kernels run on the
    Verilated chip `cfg` (its management core, in one step table; each output checked
    against the kernel's numpy statement): the cycles the firmware's ``rdcycle``
    measured around each kernel step (its ``t_cycles``)."""
    from systolica.firmware import core_kernels as ck
    from systolica.firmware.core_host import KernelStep
    from systolica.sim import core_run
    W = cfg.dram_word_bytes
    rng = np.random.default_rng(3)
    steps, data, checks, at = [], [], [], 0

    def tensor(rows, cols, dtype="int8"):
        nonlocal at
        view = ck.array_view(at * W, (rows, cols), dtype)
        at += -(-rows * cols * ck.SIZE[view.dtype] // W)
        return view

    for kind, rows, cols in shapes:
        xs = {n: rng.integers(-128, 128, (rows, cols), dtype=np.int8)
              for n in (("a", "b") if kind == "add" else ("x",))}
        views = {n: tensor(rows, cols) for n in xs}
        for n, x in xs.items():
            words = -(-x.size // W)
            padded = np.zeros(words * W, np.uint8)
            padded[:x.size] = x.view(np.uint8).reshape(-1)
            data.append((views[n].base // W, padded.reshape(words, W)))
        if kind == "softmax":
            y = tensor(rows, cols)
            desc = ck.softmax(views["x"], y, rows=rows, cols=cols, x_scale=0.05,
                              y_scale=1 / 256, y_zp=-128)
        elif kind == "argmax":
            y = tensor(rows, 1, "int64")
            desc = ck.argmax(views["x"], y, rows=rows, cols=cols)
        elif kind == "add":
            y = tensor(rows, cols)
            desc = ck.add(views["a"], views["b"], y, rows=rows, cols=cols, a_scale=0.05,
                          a_zp=3, b_scale=0.07, b_zp=-5, y_scale=0.1, y_zp=1)
        else:
            y = tensor(rows, cols)
            desc = ck.requantise(views["x"], y, rows=rows, cols=cols, x_scale=0.05, x_zp=2,
                                 y_scale=0.08, y_zp=-3)
        steps.append(KernelStep(desc, at, W))
        at += -(-ck.descriptor_bytes(desc.kernel) // W)
        checks.append((kind, desc, xs, y))
    end = at
    run = core_run.run(cfg, steps, data=data, readback=[(0, end)])
    if run.table.mailbox["result"] != 1 or run.table.problems:
        raise CompileError(f"the core's calibration table failed on chip {cfg.name}: "
                           f"{run.table.mailbox} {run.table.problems}")
    dram = bytearray(run.readback[0].tobytes())
    out: dict[str, list[tuple[float, int]]] = {}
    for (kind, desc, xs, y), step in zip(checks, run.table.steps, strict=True):
        rows = desc.rows
        want = ck.compute(desc, xs)
        got = y.read(dram, rows, want.shape[1])
        if not np.array_equal(got, want):
            raise CompileError(f"the core's {kind} kernel of {rows} x {desc.cols} differs "
                               f"from its numpy statement on chip {cfg.name}")
        out.setdefault(kind, []).append((float(rows * desc.cols), int(step["t_cycles"])))
    return out


#: Libraries made as chips were planned, by chip key (:func:`library_for`).
_MADE: dict[str, library.Library] = {}


def nearest_preset(cfg: ChipConfig) -> ChipConfig:
    """The preset most like `cfg`: the most fields equal, the array's shape first."""
    from systolica.arch.config import PRESETS
    shape = ("tile_rows", "tile_cols", "tile_size")
    mine = cfg.to_dict()

    def likeness(p: ChipConfig):
        theirs = p.to_dict()
        return (sum(mine[k] == theirs[k] for k in shape),
                sum(mine[k] == theirs[k] for k in mine if k != "name"))
    return max(PRESETS.values(), key=likeness)     # the first of equals: PRESETS' order


def library_for(cfg: ChipConfig, path=None) -> library.Library:
    """The function library the assigner costs `cfg`'s operations by: the file at
    `path`, else the preset's file; a chip without one (a chip file's) gets its chip
    kinds measured now from the compiler's cycle model (what ``systolica library``
    would write for them, a few seconds) and the host kinds of the nearest preset's
    library (the host's times do not depend on the chip), with a note saying so."""
    if path is not None or library.path_for(cfg).is_file():
        return library.load(cfg, path)
    made = _MADE.get(cfg.key)
    if made is None:
        near = nearest_preset(cfg)
        host = library.load(near)
        clock = library.NOMINAL_CLOCK_HZ
        made = library.Library(
            cfg.name, clock, {**library.fingerprint(cfg), "host": host.fingerprint["host"]},
            {"chip": chip_points(cfg, clock), "host": host.kinds["host"]},
            {"chip": chip_transfer(cfg, clock), "host": host.transfer["host"]},
            notes=[*host.notes,
                   f"chip {cfg.name} has no function library file: its chip kinds were "
                   f"measured now from the compiler's cycle model, its host kinds are "
                   f"preset {near.name}'s; `systolica library --config FILE --out "
                   f"LIB.json` keeps them, `--library LIB.json` uses them"])
        library.add_core(made, cfg)     # the core's points: one file for every chip
        _MADE[cfg.key] = made
    return library.Library(made.chip, made.clock_hz, made.fingerprint, made.kinds,
                           made.transfer, list(made.notes), made.core_cycles, made.no_core)
