"""The management core's kernels (firmware/core/kernels.c), run by the firmware in the
instruction-set model of ``test_core_loop`` with the DRAM window mapped: each kernel,
on random shapes, element types, layouts, scales and data, leaves DRAM exactly as the
numpy statement of its algorithm (``core_kernels.reference``) does, every byte
outside its output untouched; the chip's own layouts are read and written in place;
a descriptor the firmware cannot run stops the table with its FwStepProblem before it
writes anything. ``test_core_kernels_onnx`` checks the numpy statement against
onnxruntime."""

from __future__ import annotations

import struct
from dataclasses import replace

import numpy as np
import pytest
import test_core_loop as loop
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from systolica import golden
from systolica.arch.config import preset
from systolica.compiler import Dense, Network, compile_network
from systolica.compiler.planning import layout
from systolica.firmware import core_image, core_kernels
from systolica.firmware.core_image import FwResult, FwStepKind, FwStepProblem
from systolica.firmware.core_kernels import (
    FIELDS,
    RANGE,
    SIZE,
    VIEW,
    VIEW_FIELDS,
    Descriptor,
    ElemType,
    Kernel,
    View,
    array_view,
    chip_view,
)

import tiers

I8, U8, I32, I64 = ElemType.INT8, ElemType.UINT8, ElemType.INT32, ElemType.INT64
DRAM_BYTES = 128 * 1024
DESC_SPACING = 0x500                     # a softmax descriptor is 1,104 bytes
REGION = 0x2000                          # each tensor's room
FIRST_REGION = 4 * DESC_SPACING + 0xC00  # 0x2000


@pytest.fixture(scope="module")
def image():
    return core_image.build()


def run_steps(image, dram: bytearray, descriptors: list[Descriptor], *, count=False,
              limit=loop.INSTRUCTION_LIMIT) -> loop.CoreRun:
    """Place each descriptor at DESC_SPACING * k in `dram`, run one kernel step each,
    in order, and leave what the firmware wrote in `dram`."""
    steps = []
    for k, desc in enumerate(descriptors):
        at = k * DESC_SPACING
        packed = desc.pack()
        dram[at:at + len(packed)] = packed
        steps.append(dict(kind=FwStepKind.KERNEL, kernel=desc.kernel, arg0=at))
    return loop.run_firmware(image, loop.FakeChip(), loop.mailbox(steps, dram_bytes=len(dram)),
                             dram=dram, count=count, limit=limit)


def assert_ok(run: loop.CoreRun, steps: int) -> None:
    out = run.mailbox
    assert (out["result"], out["fault_step"], out["fault_code"]) == (FwResult.OK, 0, 0), out
    assert out["steps_done"] == steps


# -- random kernels ----------------------------------------------------------------------

@st.composite
def views(draw, base: int, rows: int, cols: int, dtype: ElemType) -> View:
    """A row-major array (rows padded), or the chip's blocked form (a block of columns
    holds each row in turn), with elements one or two apart."""
    size = SIZE[dtype]
    step = size * draw(st.sampled_from((1, 1, 2)))
    if draw(st.booleans()):
        return View(base, dtype, cols * step + size * draw(st.integers(0, 3)), cols, 0, step)
    block = draw(st.integers(1, cols))
    word = block * step + size * draw(st.integers(0, 2))
    return View(base, dtype, word, block, rows * word, step)


def fill(rng, dram: bytearray, view: View, rows: int, cols: int, mode: str) -> None:
    """Values for an input: its type's whole range, a narrow one, or a few (extremes
    and zero: ties and saturation)."""
    lo, hi = RANGE[view.dtype]
    if mode == "full":
        values = rng.integers(lo, hi, (rows, cols), endpoint=True)
    elif mode == "narrow":
        values = rng.integers(max(lo, -40), min(hi, 40), (rows, cols), endpoint=True)
    else:
        values = rng.choice(np.clip([lo, hi, 0, 1, -1, hi - 1], lo, hi), (rows, cols))
    view.write(dram, values)


SCALE = st.floats(-10, 2).map(lambda e: 2.0 ** e)


@st.composite
def kernel_cases(draw, kernel: Kernel, slot: int):
    """A kernel's descriptor on random views in tensor regions of its own (`slot`), and
    how to fill its inputs."""
    rows, cols = draw(st.integers(1, 4)), draw(st.integers(1, 40))
    region = iter(range(FIRST_REGION + 3 * slot * REGION, DRAM_BYTES, REGION))
    t8 = st.sampled_from((I8, U8))

    def zp(t):
        return draw(st.integers(*RANGE[t])) if t != I32 else 0

    def view(t, c=cols):
        return draw(views(next(region), rows, c, t))

    mode = draw(st.sampled_from(("full", "narrow", "few")))
    if kernel == Kernel.SOFTMAX:
        x, y = view(draw(t8)), view(draw(t8))
        y_scale = draw(st.sampled_from((1 / 256, 1 / 255)) | st.floats(-14, 0).map(
            lambda e: 2.0 ** e))
        desc = core_kernels.softmax(x, y, rows=rows, cols=cols, x_scale=draw(SCALE),
                                    y_scale=y_scale, y_zp=zp(y.dtype))
    elif kernel == Kernel.ARGMAX:
        x, y = view(draw(st.sampled_from((I8, U8, I32)))), view(
            draw(st.sampled_from((I32, I64))), 1)
        desc = core_kernels.argmax(x, y, rows=rows, cols=cols,
                                   select_last_index=draw(st.booleans()))
    elif kernel == Kernel.REQUANTISE:
        x, y = view(draw(st.sampled_from((I8, U8, I32)))), view(draw(t8))
        low = -24 if x.dtype == I32 else -6
        desc = core_kernels.requantise(
            x, y, rows=rows, cols=cols, x_scale=2.0 ** draw(st.floats(low, 4)), x_zp=zp(x.dtype),
            y_scale=1.0, y_zp=zp(y.dtype), relu=draw(st.booleans()))
    else:
        a, y = view(draw(t8)), view(draw(t8))
        broadcast = draw(st.sampled_from(("none", "none", "row", "column")))
        b_type = draw(t8)
        if broadcast == "row":          # one row for all: row stride 0
            b = View(next(region), b_type, 0, cols, 0, SIZE[b_type])
        elif broadcast == "column":     # one value per row: element and block strides 0
            b = View(next(region), b_type, 1, cols, 0, 0)
        else:
            b = view(b_type)
        desc = core_kernels.add(a, b, y, rows=rows, cols=cols, a_scale=draw(SCALE),
                                a_zp=zp(a.dtype), b_scale=draw(SCALE), b_zp=zp(b.dtype),
                                y_scale=draw(SCALE), y_zp=zp(y.dtype),
                                relu=draw(st.booleans()))
    for v in desc.views().values():
        assert v.end(rows, cols) <= v.base + REGION and v.end(rows, cols) <= DRAM_BYTES
    return desc, mode


@settings(max_examples=tiers.examples(60), derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_each_kernel_leaves_dram_as_its_reference(image, data, seed):
    """A table of the four kernels in a random order, on random descriptors: the
    firmware's DRAM equals the reference's, byte for byte (inputs, descriptors and
    every byte no output covers included)."""
    order = data.draw(st.permutations(list(Kernel)))
    cases = [data.draw(kernel_cases(k, slot)) for slot, k in enumerate(order)]
    rng = np.random.default_rng(seed)
    dram = bytearray(rng.integers(0, 256, DRAM_BYTES, dtype=np.uint8).tobytes())
    for desc, mode in cases:
        for name in core_kernels.INPUTS[desc.kernel]:
            fill(rng, dram, desc[name], desc.rows, desc.cols, mode)
    want = bytearray(dram)
    for k, (desc, _) in enumerate(cases):
        packed = desc.pack()
        want[k * DESC_SPACING:k * DESC_SPACING + len(packed)] = packed
        core_kernels.reference(desc, want)
    run = run_steps(image, dram, [desc for desc, _ in cases])
    assert_ok(run, len(cases))
    if dram != want:
        at = next(i for i in range(len(dram)) if dram[i] != want[i])
        raise AssertionError(f"DRAM byte 0x{at:x}: firmware {dram[at]}, reference {want[at]}")


# -- explicit cases ----------------------------------------------------------------------

def _one(image, desc: Descriptor, inputs: dict[str, np.ndarray]) -> np.ndarray:
    dram = bytearray(DRAM_BYTES)
    for name, values in inputs.items():
        desc[name].write(dram, values)
    assert_ok(run_steps(image, dram, [desc]), 1)
    return desc["y"].read(dram, desc.rows, 1 if desc.kernel == Kernel.ARGMAX else desc.cols)


def test_softmax_in_place(image):
    """The output view may be the input's: each row is read whole before it is written."""
    x = np.array([[-128, 127, 0, 5], [3, 3, 3, 3]], np.int8)
    v = array_view(0x2000, x.shape)
    desc = core_kernels.softmax(v, v, rows=2, cols=4, x_scale=0.1, y_scale=1 / 256, y_zp=-128)
    want = core_kernels.compute(desc, {"x": x})
    assert np.array_equal(_one(image, desc, {"x": x}), want)
    assert want[1].tolist() == [-64] * 4 and want[0, 1] == 127     # 1/4 each; saturated


def test_argmax_ties_take_the_first_index_or_the_last():
    x = np.array([[1, 7, 7, -3]], np.int8)
    first = core_kernels.argmax(array_view(0, (1, 4)), array_view(64, (1, 1), "int64"),
                                rows=1, cols=4)
    last = core_kernels.argmax(array_view(0, (1, 4)), array_view(64, (1, 1), "int64"),
                               rows=1, cols=4, select_last_index=True)
    assert core_kernels.compute(first, {"x": x}).tolist() == [[1]]
    assert core_kernels.compute(last, {"x": x}).tolist() == [[2]]


CHIPS = ["tiny", "tiny_tall", "tiny_wide", "tiny_2x3", "ulx3s"]


@pytest.mark.parametrize("chip", CHIPS)
def test_kernels_read_and_write_the_chips_layouts_in_place(image, chip):
    """An int32 output of a chip program (accumulator rows) requantised into the
    activation layout the next program reads, then a softmax from that layout into a
    row-major array for the host, and an argmax of the int32 output: each read back
    with the compiler's own unpacking (compiler.planning.layout)."""
    cfg = preset(chip)
    rng = np.random.default_rng(7)
    M, N = 3, 2 * cfg.rows + 3                      # several blocks, the last part full
    acc = rng.integers(-5000, 5000, (M, N)).astype(np.int32)
    W = cfg.dram_word_bytes
    in_word, out_word = 0x4000 // W, 0x8000 // W    # words of the two chip tensors
    nb = layout.blocks(N, cfg.cols)
    padded = np.zeros((M, nb * cfg.cols), np.int32)
    padded[:, :N] = acc
    rows = padded.reshape(M, nb, cfg.cols).transpose(1, 0, 2).reshape(nb * M, cfg.cols)
    packed = layout.pack_acc_rows(cfg, rows)
    dram = bytearray(DRAM_BYTES)
    dram[in_word * W:in_word * W + packed.size] = packed.tobytes()
    assert np.array_equal(layout.unpack_int32(cfg, packed, M, N), acc)
    requant = core_kernels.requantise(
        chip_view(cfg, in_word, (M, N), "int32"), chip_view(cfg, out_word, (M, N), "int8"),
        rows=M, cols=N, x_scale=0.01, x_zp=0, y_scale=0.5, y_zp=3)
    soft = core_kernels.softmax(chip_view(cfg, out_word, (M, N)), array_view(0xC000, (M, N)),
                                rows=M, cols=N, x_scale=0.5, y_scale=1 / 256, y_zp=-128)
    arg = core_kernels.argmax(chip_view(cfg, in_word, (M, N), "int32"),
                              array_view(0xD000, (M, 1), "int64"), rows=M, cols=N)
    assert_ok(run_steps(image, dram, [requant, soft, arg]), 3)
    words = np.frombuffer(bytes(dram), np.uint8).reshape(-1, W)
    mid = layout.unpack_int8(cfg, words[out_word:out_word + layout.output_words(
        cfg, M, N, "int8")], M, N)
    assert np.array_equal(mid, core_kernels.compute(requant, {"x": acc}))
    assert np.array_equal(soft["y"].read(dram, M, N), core_kernels.compute(soft, {"x": mid}))
    assert np.array_equal(arg["y"].read(dram, M, 1).ravel(), np.argmax(acc, axis=1))


@pytest.mark.parametrize("chip", ["tiny", "tiny_wide", "ulx3s"])
def test_a_kernel_between_two_chip_programs(image, chip):
    """Program 1 (a dense layer with int32 outputs) runs on the golden model; the core
    requantises its output where the program left it into the input of program 2 (a
    dense layer compiled with a zero input), where that program reads it; program 2
    then gives what it gives when compiled with the requantised input itself."""
    cfg = preset(chip)
    rng = np.random.default_rng(11)
    M, K, N, P = 5, 2 * cfg.rows + 1, 2 * cfg.cols + 3, 7
    x = rng.integers(-128, 128, (M, K)).astype(np.int8)
    w1 = rng.integers(-128, 128, (K, N)).astype(np.int8)
    w2 = rng.integers(-128, 128, (N, P)).astype(np.int8)
    first = compile_network(cfg, Network(x, (Dense(w1, name="fc1", out_dtype="int32"),)))
    after_first = golden.run(cfg, first.loadable).dram
    acc = first.results(after_first)["fc1"]
    second = compile_network(cfg, Network(np.zeros((M, N), np.int8), (Dense(w2, name="fc2"),)))
    W, half = cfg.dram_word_bytes, cfg.dram_words // 2          # program 2's DRAM above
    image2 = np.asarray(second.loadable.dram_image())
    assert first.dram_map.end <= half and len(image2) <= half
    dram = bytearray(cfg.dram_words * W)
    dram[:half * W] = np.asarray(after_first)[:half].tobytes()
    dram[half * W:half * W + image2.size] = image2.tobytes()
    (out_at, _), = first.dram_map.outputs.values()
    (in_at, in_words), = second.dram_map.inputs.values()
    requant = core_kernels.requantise(
        chip_view(cfg, out_at, (M, N), "int32"), chip_view(cfg, half + in_at, (M, N)),
        rows=M, cols=N, x_scale=0.002, x_zp=0, y_scale=1.0, y_zp=-4)
    assert_ok(run_steps(image, dram, [requant]), 1)
    fed = np.frombuffer(bytes(dram), np.uint8).reshape(-1, W)[half:half + len(image2)]
    x2 = core_kernels.compute(requant, {"x": acc}).astype(np.int8)
    assert np.array_equal(layout.unpack_int8(cfg, fed[in_at:in_at + in_words], M, N), x2)
    got = second.results(golden.run(cfg, replace(second.loadable, dram=fed.copy())).dram)
    want = compile_network(cfg, Network(x2, (Dense(w2, name="fc2"),)))
    assert np.array_equal(got["fc2"], want.results(golden.run(cfg, want.loadable).dram)["fc2"])


def test_kernel_steps_run_between_chip_steps(image):
    """A table of chip and kernel steps runs in order: each program started once, the
    kernel's output the reference's."""
    desc = _good(Kernel.SOFTMAX)
    dram = bytearray(DRAM_BYTES)
    dram[0x2000:0x2010] = bytes(range(16))
    dram[0x400:0x400 + len(desc.pack())] = desc.pack()
    want = bytearray(dram)
    core_kernels.reference(desc, want)
    chip = loop.FakeChip()
    steps = [loop.chip_step(0x100, 40), dict(kind=FwStepKind.KERNEL, kernel=S, arg0=0x400),
             loop.chip_step(0x800, 70)]
    out = loop.run_firmware(image, chip, loop.mailbox(steps, dram_bytes=DRAM_BYTES),
                            dram=dram).mailbox
    assert (out["result"], out["steps_done"]) == (FwResult.OK, 3)
    assert [s[:2] for s in chip.starts] == [(0x100, 40), (0x800, 70)]
    assert out["cycles"] == (1000 + 40) + (1000 + 70) and dram == want


# -- descriptors the firmware refuses ----------------------------------------------------

def field_offset(kernel: Kernel, name: str) -> int:
    """The byte offset of field `name` (``x.dtype`` for a view's) in the descriptor."""
    head, _, sub = name.partition(".")
    at = 0
    for fname, ctype, *count in FIELDS[kernel]:
        if fname == head:
            return at + (4 * VIEW_FIELDS.index(sub) if sub else 0)
        at += 4 * (len(VIEW_FIELDS) if ctype == VIEW else 1) * (count[0] if count else 1)
    raise KeyError(name)


def _good(kernel: Kernel) -> Descriptor:
    x, y = array_view(0x2000, (2, 8)), array_view(0x3000, (2, 8))
    if kernel == Kernel.SOFTMAX:
        return core_kernels.softmax(x, y, rows=2, cols=8, x_scale=0.1, y_scale=1 / 256, y_zp=0)
    if kernel == Kernel.ARGMAX:
        return core_kernels.argmax(x, array_view(0x3000, (2, 1), "int32"), rows=2, cols=8)
    if kernel == Kernel.REQUANTISE:
        return core_kernels.requantise(array_view(0x2000, (2, 8), "int32"), y, rows=2, cols=8,
                                       x_scale=0.1, x_zp=0, y_scale=1.0, y_zp=0)
    return core_kernels.add(x, array_view(0x2800, (2, 8)), y, rows=2, cols=8, a_scale=0.1,
                            a_zp=0, b_scale=0.2, b_zp=0, y_scale=0.3, y_zp=0)


S, A, R, D = Kernel.SOFTMAX, Kernel.ARGMAX, Kernel.REQUANTISE, Kernel.ADD
BAD = FwStepProblem.BAD_DESCRIPTOR
VIEWP = FwStepProblem.BAD_VIEW
#: (id, kernel, step's kernel, arg0, dram_bytes, {field: word}, problem)
REFUSED = [
    ("kernel-0", S, 0, 0, DRAM_BYTES, {}, FwStepProblem.NO_KERNEL),
    ("kernel-5", S, 5, 0, DRAM_BYTES, {}, FwStepProblem.NO_KERNEL),
    ("descriptor-misaligned", S, S, 2, DRAM_BYTES, {}, BAD),
    ("no-dram", R, R, 0, 0, {}, BAD),
    ("descriptor-past-dram", S, S, 0, 1000, {}, BAD),
    ("names-another-kernel", A, A, 0, DRAM_BYTES, {"kernel": int(D)}, BAD),
    ("no-rows", D, D, 0, DRAM_BYTES, {"rows": 0}, BAD),
    ("no-cols", A, A, 0, DRAM_BYTES, {"cols": 0}, BAD),
    ("more-elements-than-dram", A, A, 0, DRAM_BYTES,
     {"rows": 1 << 20, "x.row_stride": 0, "y.row_stride": 0}, BAD),
    ("unknown-dtype", S, S, 0, DRAM_BYTES, {"x.dtype": 9}, VIEWP),
    ("dtype-0", R, R, 0, DRAM_BYTES, {"y.dtype": 0}, VIEWP),
    ("softmax-int32-input", S, S, 0, DRAM_BYTES, {"x.dtype": int(I32)}, VIEWP),
    ("argmax-int8-output", A, A, 0, DRAM_BYTES, {"y.dtype": int(I8)}, VIEWP),
    ("int32-misaligned", R, R, 0, DRAM_BYTES, {"x.base": 0x2002}, VIEWP),
    ("int32-stride-misaligned", R, R, 0, DRAM_BYTES, {"x.elem_stride": 6}, VIEWP),
    ("block-0", D, D, 0, DRAM_BYTES, {"b.block": 0}, VIEWP),
    ("view-past-dram", D, D, 0, DRAM_BYTES, {"y.base": DRAM_BYTES - 15}, VIEWP),
    ("row-past-dram", A, A, 0, DRAM_BYTES, {"x.row_stride": DRAM_BYTES}, VIEWP),
    ("block-past-dram", S, S, 0, DRAM_BYTES,
     {"x.block": 2, "x.block_stride": DRAM_BYTES // 2}, VIEWP),
    ("softmax-table", S, S, 0, DRAM_BYTES, {"table": 12345}, BAD),
    ("softmax-num", S, S, 0, DRAM_BYTES, {"num_hi": 1 << 30}, BAD),
    ("clamp-inverted", S, S, 0, DRAM_BYTES, {"out_min": 5, "out_max": 4}, BAD),
    ("clamp-past-int8", D, D, 0, DRAM_BYTES, {"out_max": 128}, BAD),
    ("zp-past-uint8", R, R, 0, DRAM_BYTES,
     {"y.dtype": int(U8), "out_zp": -1, "out_min": 0, "out_max": 255}, BAD),
    ("argmax-select-2", A, A, 0, DRAM_BYTES, {"select_last": 2}, BAD),
    ("requant-int32-zp", R, R, 0, DRAM_BYTES, {"x_zp": 1}, BAD),
    ("requant-mult", R, R, 0, DRAM_BYTES, {"mult": 1 << 31}, BAD),
    ("requant-shift", R, R, 0, DRAM_BYTES, {"shift": 64}, BAD),
    ("add-mult", D, D, 0, DRAM_BYTES, {"mult_b": 1 << 20}, BAD),
    ("add-shift", D, D, 0, DRAM_BYTES, {"shift": 32}, BAD),
    ("add-zp", D, D, 0, DRAM_BYTES, {"a_zp": 128}, BAD),
]


@pytest.mark.parametrize("kernel, number, arg0, dram_bytes, patch, problem",
                         [pytest.param(*row[1:], id=row[0]) for row in REFUSED])
def test_a_descriptor_the_firmware_cannot_run_stops_the_table(image, kernel, number, arg0,
                                                               dram_bytes, patch, problem):
    """The step stops with its problem before it writes anything, and the step after
    it does not run."""
    bad = bytearray(_good(kernel).pack())
    for name, word in patch.items():
        at = field_offset(kernel, name)
        bad[at:at + 4] = struct.pack("<I", word & 0xFFFF_FFFF)
    dram = bytearray(DRAM_BYTES)
    dram[0x400:0x400 + len(bad)] = bad
    packed = _good(Kernel.ARGMAX).pack()
    dram[0x1000:0x1000 + len(packed)] = packed
    dram[0x2000:0x2010] = bytes(range(1, 17))           # argmax would write 7, 7
    before = bytes(dram)
    steps = [dict(kind=FwStepKind.KERNEL, kernel=number, arg0=0x400 + arg0),
             dict(kind=FwStepKind.KERNEL, kernel=A, arg0=0x1000)]
    run = loop.run_firmware(image, loop.FakeChip(), loop.mailbox(steps, dram_bytes=dram_bytes),
                            dram=dram)
    out = run.mailbox
    assert (out["result"], out["fault_step"], out["fault_code"]) == (FwResult.BAD_STEP, 0,
                                                                     problem)
    assert out["steps_done"] == 0 and bytes(dram) == before


# -- the image ---------------------------------------------------------------------------

def test_the_descriptor_sizes_are_the_firmwares(image):
    """kdesc.h's structs, as the compiler laid them out, have the sizes
    core_kernels packs."""
    with open(image.elf, "rb") as f:
        elf = ELFFile(f)
        sym, = elf.get_section_by_name(".symtab").get_symbol_by_name("descriptor_bytes")
        rodata = elf.get_section_by_name(".rodata")
        raw = rodata.data()[sym["st_value"] - rodata["sh_addr"]:][:sym["st_size"]]
    sizes = struct.unpack(f"<{len(raw) // 4}I", raw)
    assert sizes == (0, *(core_kernels.descriptor_bytes(k) for k in Kernel))
    assert all(len(_good(k).pack()) == core_kernels.descriptor_bytes(k) for k in Kernel)
    assert (image.elf.parent / "kdesc.h").read_text() == core_kernels.descriptor_header()


# -- instructions ------------------------------------------------------------------------

def _timed(kernel: Kernel, rows: int, cols: int, x_type: str) -> Descriptor:
    x, y = array_view(0x2000, (rows, cols), x_type), array_view(0x10000, (rows, cols))
    if kernel == Kernel.SOFTMAX:
        return core_kernels.softmax(x, y, rows=rows, cols=cols, x_scale=0.05,
                                    y_scale=1 / 256, y_zp=-128)
    if kernel == Kernel.ARGMAX:
        return core_kernels.argmax(x, array_view(0x10000, (rows, 1), "int64"), rows=rows,
                                   cols=cols)
    if kernel == Kernel.REQUANTISE:
        return core_kernels.requantise(x, y, rows=rows, cols=cols, x_scale=0.001, x_zp=0,
                                       y_scale=0.07, y_zp=1)
    return core_kernels.add(x, array_view(0x8000, (rows, cols)), y, rows=rows, cols=cols,
                            a_scale=0.1, a_zp=0, b_scale=0.07, b_zp=0, y_scale=0.2, y_zp=0)


#: (kernel, input type, instructions per element at most, per row at most): the
#: measured cost (docs/management-core.md) with a little room, so that a change that
#: slows a kernel's inner loop is seen
BUDGETS = [
    (Kernel.SOFTMAX, "int8", 45, 1200),
    (Kernel.ARGMAX, "int8", 16, 300),
    (Kernel.ARGMAX, "int32", 18, 300),
    (Kernel.REQUANTISE, "int8", 19, 400),
    (Kernel.REQUANTISE, "int32", 31, 400),
    (Kernel.ADD, "int8", 26, 500),
]


@pytest.mark.parametrize("kernel, x_type, per_element, per_row", BUDGETS,
                         ids=[f"{k.name.lower()}-{t}" for k, t, *_ in BUDGETS])
def test_instructions_per_element(image, kernel, x_type, per_element, per_row):
    """Instructions of a kernel step beyond an empty table's, at 1 x 10 and 1 x 1000:
    the slope is the cost of an element, the rest the step's and the row's."""
    rng = np.random.default_rng(3)
    counts = {}
    base = loop.run_firmware(image, loop.FakeChip(), loop.mailbox([]), count=True).instructions
    for cols in (10, 1000):
        dram = bytearray(rng.integers(0, 256, 0x20000, dtype=np.uint8).tobytes())
        run = run_steps(image, dram, [_timed(kernel, 1, cols, x_type)], count=True)
        assert_ok(run, 1)
        counts[cols] = run.instructions - base
    slope = (counts[1000] - counts[10]) / 990
    assert slope <= per_element and counts[10] - 10 * slope <= per_row, (slope, counts)
