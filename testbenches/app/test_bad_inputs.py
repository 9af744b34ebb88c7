"""The bad-input catalogue: every row is something a user may give by mistake, and what
they must get back — one exception of the documented type (Python API) or exit status 2
with one ``systolica: error: ...`` line (command line), never a traceback, never silent
acceptance. The key words of each row name what is at fault (argument, file:line,
layer, instruction) and what to do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from systolica.app import cli
from systolica.arch import isa
from systolica.arch.config import DEFAULT_LATENCY, PRESETS, ChipConfig, ConfigError, preset
from systolica.compiler import CompileError, Dense, GraphBuilder, Network, compile_network, gemm
from systolica.compiler.frontend import stp, text
from systolica.compiler.graph.ops import Conv2d

from paths import EXAMPLES
from tiers import sample

TINY = preset("tiny")
A = np.ones((4, 8), dtype=np.int8)
B = np.ones((8, 4), dtype=np.int8)


def assert_clear(message: str, words) -> None:
    """The message holds every key word (case aside) and no traceback."""
    assert message.strip() and "Traceback" not in message
    for word in words:
        assert word.lower() in message.lower(), f"{word!r} missing from: {message}"


# -- the Python API ----------------------------------------------------------------------
def layers_chain(*weights, **kw):
    return Network(A, tuple(Dense(w, name=f"fc{i}", **kw) for i, w in enumerate(weights)))


def conv_graph(layer):
    """A graph whose input is a (1, 4, 4, 3) map, with `layer(builder, input)` added."""
    g = GraphBuilder("cnn")
    layer(g, g.input(np.ones((1, 4, 4, 3), np.int8)))
    return g.build()


def _one_conv(x, w, **options):
    g = GraphBuilder("cnn")
    return g.build(g.conv2d(g.input(x), w, name="c", **options))


def compile_not_utf8():
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "not-utf8.stp"
        path.write_bytes(b"x \xff\n")
        return stp.compile_file(TINY, path)


API = [
    # (id, build, exception, key words)
    ("bool-array-as-int8", lambda: gemm(A.astype(bool), B), CompileError,
     ["input", "boolean", "astype"]),
    ("bool-weights", lambda: gemm(A, B.astype(bool)), CompileError,
     ["'gemm'", "weights", "boolean"]),
    ("bool-bias", lambda: gemm(A, B, np.ones(4, bool)), CompileError,
     ["bias", "boolean"]),
    ("relu-string", lambda: gemm(A, B, relu="no"), CompileError,
     ["'gemm'", "relu", "'no'", "True or False"]),
    ("relu-int", lambda: gemm(A, B, relu=2), CompileError, ["relu", "True or False"]),
    ("relu-none", lambda: Dense(B, relu=None), CompileError, ["relu", "None", "True or False"]),
    ("float-with-fraction", lambda: gemm(A + 0.5, B), CompileError,
     ["input", "integers", "float64", "quantise"]),
    ("nan", lambda: gemm(np.full((4, 8), np.nan), B), CompileError,
     ["input", "integers", "quantise"]),
    ("inf-weights", lambda: gemm(A, np.full((8, 4), np.inf)), CompileError,
     ["weights", "integers", "quantise"]),
    ("complex", lambda: gemm(A.astype(complex), B), CompileError, ["input", "complex"]),
    ("strings", lambda: gemm(np.array([["1", "2"]]), B), CompileError, ["input", "integers"]),
    ("ragged-list", lambda: gemm([[1, 2], [3]], B), CompileError,
     ["input", "2-D array of integers", "inhomogeneous"]),
    ("none-input", lambda: gemm(None, B), CompileError, ["input", "2-D", "None"]),
    ("scalar-input", lambda: gemm(3, B), CompileError, ["input", "2-D", "shape ()"]),
    ("1d-input", lambda: gemm(np.ones(8, np.int8), B), CompileError, ["input", "2-D", "(8,)"]),
    ("3d-input", lambda: gemm(np.ones((2, 4, 8), np.int8), B), CompileError,
     ["input", "2-D", "(2, 4, 8)"]),
    ("empty-input", lambda: gemm(np.zeros((0, 8), np.int8), B), CompileError,
     ["input", "empty dimension", "at least 1"]),
    ("empty-weights", lambda: gemm(A, np.zeros((8, 0), np.int8)), CompileError,
     ["weights", "empty dimension", "at least 1"]),
    ("input-out-of-int8", lambda: gemm(np.full((4, 8), 200), B), CompileError,
     ["input[0, 0] = 200", "int8 [-128, 127]"]),
    ("uint8-over-127", lambda: gemm(np.full((4, 8), 200, np.uint8), B), CompileError,
     ["input[0, 0] = 200", "int8"]),
    ("weights-out-of-int8", lambda: gemm(A, np.full((8, 4), -129)), CompileError,
     ["weights[0, 0] = -129", "int8"]),
    ("bias-out-of-int32", lambda: gemm(A, B, np.full(4, 1 << 40)), CompileError,
     ["bias[0]", "int32"]),
    ("bias-fraction", lambda: gemm(A, B, np.full(4, 0.5)), CompileError,
     ["bias", "integers", "quantise"]),
    ("bias-length", lambda: gemm(A, B, np.ones(3, np.int32)), CompileError,
     ["bias has 3 elements", "N = 4", "must match"]),
    ("bias-2d", lambda: gemm(A, B, np.ones((1, 4), np.int32)), CompileError,
     ["bias", "1-D"]),
    ("k-mismatch", lambda: gemm(A, np.ones((7, 4), np.int8)), CompileError,
     ["'gemm'", "K = 7", "8 columns", "make them equal"]),
    ("chain-mismatch", lambda: layers_chain(B, np.ones((5, 2), np.int8)), CompileError,
     ["'fc1'", "K = 5", "layer 'fc0' has 4 columns"]),
    ("mult-negative", lambda: gemm(A, B, mult=-1), CompileError, ["mult = -1", "[0, 65535]"]),
    ("mult-too-big", lambda: gemm(A, B, mult=1 << 20), CompileError,
     ["mult = 1048576", "[0, 65535]"]),
    ("mult-fraction", lambda: gemm(A, B, mult=1.5), CompileError, ["mult = 1.5", "integer"]),
    ("mult-bool", lambda: gemm(A, B, mult=True), CompileError, ["mult = True", "integer"]),
    ("mult-zero", lambda: gemm(A, B, mult=0), CompileError,
     ["mult = 0", "every output equal zp", "[1, 65535]"]),
    ("shift-64", lambda: gemm(A, B, shift=64), CompileError, ["shift = 64", "[0, 63]"]),
    ("shift-negative", lambda: gemm(A, B, shift=-1), CompileError, ["shift = -1", "[0, 63]"]),
    ("zp-out-of-int8", lambda: gemm(A, B, zp=200), CompileError, ["zp = 200", "[-128, 127]"]),
    ("out-dtype-unknown", lambda: gemm(A, B, out_dtype="int16"), CompileError,
     ["out_dtype", "'int16'", "'int8', 'int32'"]),
    ("out-dtype-numpy-type", lambda: gemm(A, B, out_dtype=np.int32), CompileError,
     ["out_dtype", "'int8', 'int32'"]),
    ("int32-requantised", lambda: gemm(A, B, mult=3, out_dtype="int32"), CompileError,
     ["int32 output is not requantised", "out_dtype='int8'"]),
    ("int32-in-the-middle",
     lambda: Network(A, (Dense(B, out_dtype="int32", name="fc1"), Dense(np.ones((4, 2))))),
     CompileError, ["'fc1'", "only the last layer may produce int32"]),
    ("no-layers", lambda: Network(A, ()), CompileError, ["no layers", "add at least one Dense"]),
    ("layer-not-dense", lambda: Network(A, ("fc1",)), CompileError,
     ["layer 0 is a str", "only Dense"]),
    ("layers-one-dense", lambda: Network(A, Dense(B)), CompileError,
     ["layers must be a list or tuple", "Dense"]),
    ("layers-none", lambda: Network(A, None), CompileError,
     ["layers must be a list or tuple", "NoneType"]),
    ("duplicate-layer-names",
     lambda: Network(A, (Dense(B, name="x"), Dense(np.ones((4, 4)), name="x"))),
     CompileError, ["layer names must be unique", "'x'"]),
    ("layer-name-int", lambda: gemm(A, B, name=3), CompileError,
     ["name must be a non-empty string", "3"]),
    ("layer-name-empty", lambda: Dense(B, name=""), CompileError,
     ["name must be a non-empty string"]),
    ("conv-groups-not-dividing", lambda: Conv2d(np.ones((3, 3, 4, 6)), groups=4, name="g"),
     CompileError, ["'g'", "groups = 4", "does not divide Cout = 6", "Cin = 4 x 4 = 16"]),
    ("conv-pads-past-kernel", lambda: Conv2d(np.ones((3, 3, 4, 8)), pads=(0, 3, 0, 0),
                                             name="c"),
     CompileError, ["'c'", "pads left = 3", "kernel extent 3"]),
    ("conv-stride-5", lambda: Conv2d(np.ones((3, 3, 4, 8)), stride=5, name="c"),
     CompileError, ["'c'", "stride sh = 5", "[1, 4]"]),
    ("conv-per-channel-mult-length",
     lambda: Conv2d(np.ones((1, 1, 4, 8)), mult=[1, 2], name="c"), CompileError,
     ["'c'", "mult has 2 elements", "Cout = 8", "one per channel"]),
    ("conv-channels-mismatch",
     lambda: conv_graph(lambda g, x: g.conv2d(x, np.ones((3, 3, 4, 8)), name="c")),
     CompileError, ["'c'", "Cin = 4", "C = 3", "make them equal"]),
    ("conv-kernel-over-input",
     lambda: conv_graph(lambda g, x: g.conv2d(x, np.ones((7, 7, 3, 8)), name="c")),
     CompileError, ["'c'", "spans 7 pixels", "H = 4", "smaller kernel or more padding"]),
    ("add-shapes-differ",
     lambda: conv_graph(lambda g, x: g.add(x, g.max_pool2d(x, 2), name="s")),
     CompileError, ["'s'", "(1, 4, 4, 3)", "(1, 2, 2, 3)", "equal shapes"]),
    ("add-of-matrices", lambda: _add_of_matrices(), CompileError,
     ["'s'", "(4, 8)", "residual add reads a 4-D (N, H, W, C) feature map"]),
    ("split-a-transpose", lambda: compile_network(TINY, _transposed(), split={"t": 2}),
     CompileError, ["'t' is a Transpose", "only dense layers"]),
    ("split-not-a-number", lambda: compile_network(TINY, _chain(), split={"fc1": [2]}),
     CompileError, ["'fc1'", "positive integer", "[2]"]),
    ("split-chain-disagrees", lambda: compile_network(TINY, _chain(), split={"fc1": 2,
                                                                             "fc2": 1}),
     CompileError, ["'fc1' and 'fc2'", "one chain", "give both the same"]),
    ("dense-reads-feature-map",
     lambda: conv_graph(lambda g, x: g.dense(x, np.ones((3, 2)), name="fc")),
     CompileError, ["'fc'", "(1, 4, 4, 3)", "2-D [M, K]"]),
    ("flatten-of-a-map-compiles",
     lambda: compile_network(TINY, conv_graph(lambda g, x: g.dense(
         g.flatten(x, name="flat"), np.ones((48, 2)), name="fc"))),
     CompileError, ["'flat'", "Flatten of a 4x4 map", "GlobalAvgPool"]),
    ("conv-dilated-past-the-window-walk",
     lambda: compile_network(TINY, _one_conv(np.ones((1, 80, 80, 3), np.int8),
                                             np.ones((11, 11, 3, 8)), dilation=7)),
     CompileError, ["'c'", "dilation is 70", "at most 63", "smaller kernel or dilation"]),
    ("conv-window-over-the-cbuf",
     lambda: compile_network(TINY, _one_conv(np.ones((1, 8, 20, 320), np.int8),
                                             np.ones((7, 7, 320, 8)), pads=3)),
     CompileError, ["'c'", "even a tile of one output pixel", "1960 CBUF rows", "short by",
                    "bytes", "larger CBUF"]),
    ("concat-needs-more-cbuf-banks-than-rows",
     lambda: compile_network(TINY, _six_branches()),
     CompileError, ["'b5'", "7 banks of 256 rows", "need 9", "bank of its own",
                    "fewer rows do not help", "fewer branches", "cbuf_banks"]),
    ("transpose-perm-repeats-an-axis",
     lambda: conv_graph(lambda g, x: g.transpose(x, (0, 1, 1, 2), name="t")),
     CompileError, ["'t'", "perm (0, 1, 1, 2)", "axis 1 twice", "permutation of 0..3"]),
    ("transpose-perm-too-short",
     lambda: conv_graph(lambda g, x: g.transpose(x, (0, 2, 1), name="t")),
     CompileError, ["'t'", "perm (0, 2, 1)", "3 axes", "(1, 4, 4, 3)", "has 4"]),
    ("transpose-perm-axis-out-of-range",
     lambda: conv_graph(lambda g, x: g.transpose(x, (0, 1, 2, 4), name="t")),
     CompileError, ["'t'", "perm (0, 1, 2, 4)", "axis 4", "axes 0..3"]),
    ("transpose-perm-not-integers", lambda: GraphBuilder("n").transpose("x", "ab", name="t"),
     CompileError, ["'t'", "perm 'ab'", "integer axes"]),
    ("transpose-of-int32-on-a-2x2-array", lambda: compile_network(
        preset("tangnano9k"), _transpose_after(out_dtype="int32")), CompileError,
     ["'t'", "int32 transpose", "multiple of 4", "'tangnano9k'", "2x2", "'tiny'",
      "transpose int8 data"]),
    ("transpose-unnamed", lambda: GraphBuilder("n").transpose("x", name=""), CompileError,
     ["layer's name must be a non-empty string"]),
    ("transposed-input-also-read-on-chip", lambda: compile_network(TINY, _transpose_shared()),
     CompileError, ["'t'", "graph input 'x'", "cannot also be read on chip", "'fc'",
                    "own copy"]),
    ("transpose-dram-overflow",
     lambda: compile_network(TINY, _transpose_of(np.ones((3000, 30), np.int8))),
     CompileError, ["'t'", "DRAM too small", "dram_words"]),
    ("matmul-t-k-differs", lambda: _matmul_t(np.ones((4, 8), np.int8),
                                             np.ones((3, 5), np.int8)), CompileError,
     ["'s'", "equal K", "8 columns", "5", "make them equal"]),
    ("matmul-t-same-tensor", lambda: _matmul_t(A, None), CompileError,
     ["'s'", "both operands", "give it a copy"]),
    ("matmul-t-int32-operand", lambda: _matmul_t_int32(), CompileError,
     ["'s'", "matmul_t reads int8", "int32"]),
    ("matmul-t-bad-mult", lambda: _matmul_t(A, A, mult=0), CompileError,
     ["'s'", "mult = 0", "[1, 65535]"]),
    ("matmul-t-padding-on-chip", lambda: compile_network(TINY, _matmul_t_on_chip()),
     CompileError, ["'s'", "K = 12", "multiple of the array's 8 rows", "made on chip",
                    "graph's inputs"]),
    ("input-7d", lambda: GraphBuilder("n").input(np.ones((1, 1, 1, 1, 1, 4, 3), np.int8)),
     CompileError, ["input", "7-D", "(N, H, W, C)"]),
    ("input-nchw-not-a-map", lambda: GraphBuilder("n").input(np.ones((4, 3), np.int8),
                                                            layout="NCHW"),
     CompileError, ["input", "layout='NCHW'", "(N, C, H, W)", "2-D"]),
    ("input-unknown-layout", lambda: GraphBuilder("n").input(np.ones((4, 3), np.int8),
                                                             layout="CHW"),
     CompileError, ["input", "layout must be one of", "'CHW'"]),
    ("compile-an-array", lambda: compile_network(TINY, A), CompileError,
     ["compile_network takes a Network or Graph", "ndarray"]),
    ("compile-none", lambda: compile_network(TINY, None), CompileError,
     ["compile_network takes a Network or Graph", "NoneType"]),
    ("compile-cfg-by-name", lambda: compile_network("tiny", gemm(A, B)), CompileError,
     ["cfg must be a ChipConfig", "preset('tiny')", "str"]),
    ("compile-arguments-swapped", lambda: compile_network(gemm(A, B), TINY), CompileError,
     ["cfg must be a ChipConfig", "not Network"]),
    ("compile-dram-overflow",
     lambda: compile_network(TINY, gemm(np.ones((100000, 8), np.int8), B)), CompileError,
     ["'gemm'", "DRAM too small", "dram_words"]),
    ("compile-imem-overflow",
     lambda: compile_network(TINY, gemm(np.ones((8, 3500), np.int8),
                                        np.ones((3500, 8), np.int8))),
     CompileError, ["'gemm'", "program image", "imem_depth", "split the network or the batch"]),
    ("parse-syntax", lambda: text.parse("x = read ram(\n", "p.stp"), CompileError,
     ["p.stp:1:14", "expected"]),
    ("program-file-not-utf8", compile_not_utf8, CompileError,
     ["not-utf8.stp:1:3", "not UTF-8", "saved as UTF-8"]),
    ("parse-undefined", lambda: text.parse("x = read ram(a)\n", "p.stp"), CompileError,
     ["p.stp:1:14", "'a' is used but never defined", "proc input"]),
    ("fetch-from-negative", lambda: compile_network(TINY, gemm(A, B), fetch_from=-1),
     CompileError, ["fetch_from", "-1", "PROG_FETCH", "0: fetch the whole program"]),
    ("fetch-from-not-an-integer", lambda: compile_network(TINY, gemm(A, B), fetch_from=1.5),
     CompileError, ["fetch_from", "1.5", "integer"]),
    ("fetch-from-bool", lambda: compile_network(TINY, gemm(A, B), fetch_from=True),
     CompileError, ["fetch_from", "True", "integer"]),
]


def _matmul_t(a, b, **options):
    g = GraphBuilder("n")
    x = g.input(a, name="a")
    y = x if b is None else g.input(b, name="b")
    g.matmul_t(x, y, name="s", **options)
    return g.build()


def _matmul_t_int32():
    g = GraphBuilder("n")
    x = g.input(A, name="a")
    h = g.dense(x, B, out_dtype="int32", name="fc")
    g.matmul_t(x, h, name="s")
    return g.build()


def _add_of_matrices():
    g = GraphBuilder("n")
    x = g.input(A, name="x")
    return g.add(x, g.input(A, name="y"), name="s")


def _transposed():
    g = GraphBuilder("n")
    g.transpose(g.input(A, name="x"), name="t")
    return g.build()


def _chain():
    from systolica.app.demo import mlp
    return mlp(batch=40, widths=(4, 4, 2), name="chain")


def _matmul_t_on_chip():
    g = GraphBuilder("n")
    x = g.input(np.ones((4, 12), np.int8), name="x")
    w = np.ones((12, 12), np.int8)
    g.matmul_t(g.dense(x, w, name="a"), g.dense(x, w, name="b"), out_dtype="int32",
               name="s")
    return g.build()


def _transpose_of(x):
    g = GraphBuilder("n")
    g.transpose(g.input(x, name="x"), name="t")
    return g.build()


def _transpose_after(**dense):
    g = GraphBuilder("n")
    h = g.dense(g.input(A, name="x"), B, name="fc", **dense)
    g.transpose(h, name="t")
    return g.build()


def _six_branches():
    """Six dense branches of a one-row input joined by a Concat: a few rows each, but
    nine regions live at once on tiny's seven free CBUF banks."""
    g = GraphBuilder("n")
    x = g.input(np.ones((1, 4), np.int8), name="x")
    return g.build(g.concat(*(g.dense(x, np.ones((4, 4)), name=f"b{i}") for i in range(6)),
                            name="cat"))


def _transpose_shared():
    g = GraphBuilder("n")
    x = g.input(A, name="x")
    g.transpose(x, name="t")
    g.dense(x, B, name="fc")
    return g.build()


@pytest.mark.parametrize("build, error, words",
                         [pytest.param(*row[1:], id=row[0]) for row in API])
def test_python_api(build, error, words):
    with pytest.raises(error) as info:
        build()
    assert_clear(str(info.value), words)


# -- ChipConfig ----------------------------------------------------------------------------
CONFIG = [
    # (id, changes to the tiny preset, key words)
    ("tile-rows-zero", dict(tile_rows=0, tile_cols=0), ["tile_rows", "positive integer", "0"]),
    ("tile-size-negative", dict(tile_size=-1), ["tile_size", "positive integer", "-1"]),
    ("tile-size-float", dict(tile_size=4.0), ["tile_size", "integer", "4.0"]),
    ("tile-size-string", dict(tile_size="4"), ["tile_size", "integer", "'4'"]),
    ("tile-size-bool", dict(tile_size=True), ["tile_size", "integer", "True"]),
    ("cbuf-depth-none", dict(cbuf_depth=None), ["cbuf_depth", "integer", "None"]),
    ("acc-depth-zero", dict(acc_depth=0), ["acc_depth", "positive integer"]),
    ("dram-words-negative", dict(dram_words=-5), ["dram_words", "positive integer"]),
    ("imem-depth-zero", dict(imem_depth=0), ["imem_depth", "positive integer"]),
    ("interval-zero", dict(config_update_interval=0),
     ["config_update_interval", "positive integer"]),
    ("grid-too-many-sources", dict(tile_rows=32, tile_cols=2, general_lanes=False),
     ["32x2", "multiplexers", "up to 33 sources", "SETCFGW", "fewer tiles"]),
    ("banks-do-not-divide", dict(cbuf_banks=3), ["cbuf_depth 2048", "multiple", "cbuf_banks 3"]),
    ("cbuf-below-one-block", dict(cbuf_depth=4, cbuf_banks=1, ubuf_base=0, ubuf_rows=0),
     ["cbuf_depth 4", "weight block", "at least 8"]),
    ("acc-depth-tiny", dict(acc_depth=2), ["acc_depth", "at least 4"]),
    ("ubuf-past-cbuf", dict(ubuf_base=2000, ubuf_rows=100),
     ["UBUF region [2000, 2100)", "outside the CBUF", "ubuf_base"]),
    ("ubuf-not-whole-banks", dict(ubuf_base=1920, ubuf_rows=128),
     ["whole CBUF banks", "[1920, 2048)", "256 rows"]),
    ("ubuf-not-power-of-two", dict(ubuf_base=1280, ubuf_rows=768),
     ["ubuf_rows must be a power of two", "768"]),
    ("ubuf-own-sram-placed-inside", dict(ubuf_own_sram=True),
     ["own SRAM", "ubuf_base = cbuf_depth (2048)"]),
    ("ubuf-negative", dict(ubuf_base=-1), ["ubuf_base", "non-negative integer"]),
    ("ubuf-rows-negative", dict(ubuf_rows=-5), ["ubuf_rows", "non-negative integer"]),
    ("ubuf-float", dict(ubuf_base=1.5), ["ubuf_base", "integer", "1.5"]),
    ("ubuf-bool", dict(ubuf_rows=True), ["ubuf_rows", "integer", "True"]),
    ("latency-missing-keys", dict(latency={"vpu": 3}),
     ["latency table lacks", "dram_read", "DEFAULT_LATENCY"]),
    ("latency-zero", dict(latency={**DEFAULT_LATENCY, "vpu": 0}),
     ["latency['vpu']", "positive integer"]),
    ("latency-bool", dict(latency={**DEFAULT_LATENCY, "vpu": True}),
     ["latency['vpu']", "positive integer", "True"]),
    ("latency-float", dict(latency={**DEFAULT_LATENCY, "vpu": 3.0}),
     ["latency['vpu']", "3.0"]),
    ("latency-not-a-dict", dict(latency=[1, 2]), ["latency must be a dict", "[1, 2]"]),
    ("latency-none", dict(latency=None), ["latency must be a dict", "None"]),
    ("latency-key-int", dict(latency={**DEFAULT_LATENCY, 3: 4}),
     ["latency key 3", "operation name"]),
    ("slow-memory-read", dict(latency={**DEFAULT_LATENCY, "dram_read": 2}),
     ["memory read latency 1 only", "dram_read to 1"]),
    ("slow-acc-read", dict(latency={**DEFAULT_LATENCY, "acc_read": 3}),
     ["latency['acc_read'] is 1, or 2", "not 3"]),
    ("cbuf-beyond-isa", dict(cbuf_depth=1 << 17, ubuf_base=0, ubuf_rows=0),
     ["cbuf_depth 131072", "16-bit address field"]),
    ("acc-beyond-isa", dict(acc_depth=1 << 13), ["acc_depth 8192", "12-bit address field"]),
    ("dram-beyond-isa", dict(dram_words=1 << 25), ["dram_words", "24-bit address field"]),
    ("imem-beyond-prog-len", dict(imem_depth=1 << 40), ["imem_depth", "PROG_LEN"]),
    ("interval-beyond-cycle", dict(config_update_interval=1 << 40),
     ["config_update_interval", "cycle field"]),
    ("tile-size-beyond-hwcfg", dict(tile_size=1 << 16), ["tile_size 65536", "HWCFG"]),
    ("too-many-updates", dict(max_config_updates_per_cycle=9),
     ["max_config_updates_per_cycle 9", "8 pairs"]),
    ("grid-beyond-setcfgw", dict(tile_rows=1, tile_cols=31, general_lanes=False),
     ["1x31 tile grid", "up to 33 sources", "5-bit value", "fewer tiles"]),
    ("lanes-beyond-route", dict(tile_rows=12, tile_cols=3, general_lanes=True),
     ["ROUTE names at most 8 tile rows", "12x3", "general_lanes=False"]),
    ("general-lanes-not-bool", dict(general_lanes=1), ["general_lanes must be True or False"]),
    ("name-int", dict(name=3), ["name must be a non-empty string", "3"]),
    ("name-empty", dict(name=""), ["name must be a non-empty string"]),
    ("name-with-slash", dict(name="my/chip"), ["name", "'my/chip'", "build directories"]),
    ("unknown-field", dict(tile=3), ["no field(s) tile", "tile_size"]),
]


@pytest.mark.parametrize("changes, words",
                         [pytest.param(*row[1:], id=row[0]) for row in CONFIG])
def test_chip_config(changes, words):
    with pytest.raises(ConfigError) as info:
        TINY.replace(**changes)
    assert_clear(str(info.value), words)


CONFIG_CALLS = [
    ("preset-unknown", lambda: preset("huge"), ConfigError,
     ["unknown chip preset 'huge'", ", ".join(sorted(PRESETS))]),
    ("preset-list", lambda: preset(["tiny"]), ConfigError,
     ["unknown chip preset", ", ".join(sorted(PRESETS))]),
    ("positional-arguments", lambda: ChipConfig("x", 2, 2, 4, 2048, 4, 256, 16384, 2048),
     TypeError, ["positional argument"]),
    ("missing-arguments", lambda: ChipConfig(name="x"), TypeError,
     ["missing", "keyword-only", "tile_rows"]),
]


@pytest.mark.parametrize("build, error, words",
                         [pytest.param(*row[1:], id=row[0]) for row in CONFIG_CALLS])
def test_chip_config_calls(build, error, words):
    with pytest.raises(error) as info:
        build()
    assert_clear(str(info.value), words)


@pytest.mark.parametrize("module", sample(["fabric", "config", "isa", "timing"], 4))
def test_config_checks_import_in_any_order(module):
    """ChipConfig checks its fabric, and the fabric module reads configurations: either
    may be imported first (the presets are checked while config is imported)."""
    proc = subprocess.run([sys.executable, "-c", f"import systolica.arch.{module}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


# -- the command line ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """A directory of good and bad inputs for the command line."""
    d = tmp_path_factory.mktemp("inputs")
    good = compile_network(TINY, gemm(np.ones((8, 8)), np.ones((8, 8)))).loadable.to_file()
    n = isa.WORD_BITS // 8
    (d / "good.bin").write_bytes(good)
    (d / "empty.bin").write_bytes(b"")
    (d / "truncated.bin").write_bytes(good[:-7])
    (d / "half-word.bin").write_bytes(good[:n // 2])
    (d / "zeros.bin").write_bytes(bytes(2 * n))
    (d / "text.bin").write_bytes(b"x = read ram(addr)\n")
    (d / "locked.bin").write_bytes(good)
    (d / "a-dir").mkdir()
    # energy tables (docs/records.md, "Energy")
    (d / "energy-bad-key.toml").write_text("[energy]\nmac_pj = 0.3\nsram_pj = 2.0\n")
    (d / "energy-negative.toml").write_text("[energy]\ndram_pj_per_byte = -1.0\n")
    (d / "energy-text.toml").write_text('[energy]\nmac_pj = "cheap"\n')
    (d / "energy-none.toml").write_text("name = \"mine\"\ntile_rows = 2\n")
    (d / "energy-not-toml.toml").write_text("[energy\nmac_pj = \n")
    return d


@pytest.fixture(autouse=True)
def no_chip_build(monkeypatch):
    """Every bad input must be refused before the Verilated chip is built."""
    from systolica.sim import rtlsim

    def refuse(*_, **__):
        raise AssertionError("a bad input reached the Verilator build")
    monkeypatch.setattr(rtlsim, "build", refuse)


@pytest.fixture(autouse=True)
def unreadable(monkeypatch):
    """``locked.bin`` cannot be read (made so here: chmod does not stop root)."""
    real = Path.read_bytes

    def read_bytes(self):
        if self.name == "locked.bin":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    real_open = os.open

    def os_open(path, flags, *args, **kw):      # how systolica.files opens an input
        if os.path.basename(os.fspath(path)) == "locked.bin":
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, flags, *args, **kw)
    monkeypatch.setattr(os, "open", os_open)


def run_cli(argv, capsys) -> tuple[int, str, str]:
    try:
        status = cli.main(argv)
    except SystemExit as exc:               # argparse's own errors
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


def assert_refused(status: int, out: str, err: str, words) -> None:
    """Exit 2, nothing on stdout, one error line last on stderr (argparse's usage lines
    may come before it), no traceback, and the key words in that line."""
    assert status == 2, (status, out, err)
    assert out == "", out
    lines = err.strip().splitlines()
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1 and lines[-1] == errors[0], err
    assert lines[-1].startswith("systolica: error: ")
    assert all(line.startswith(("usage:", " ")) for line in lines[:-1]), err
    assert_clear(lines[-1], words)


CLI = [
    # (id, argv with {d} = the inputs directory, key words)
    ("gemm-zero-sized", ["compile", "--gemm", "0x4x4"],
     ["--gemm", "M = 0", "positive integer", "64x64x64"]),
    ("gemm-zero-n", ["compile", "--gemm", "4x4x0"], ["--gemm", "N = 0", "positive integer"]),
    ("onnx-no-such-file", ["sim", "--onnx", "{d}/none.onnx"], ["ONNX model", "no such file"]),
    ("onnx-not-a-model", ["sim", "--onnx", "{d}/text.bin"], ["ONNX model", "cannot be read"]),
    ("compile-onnx-no-such-file", ["compile", "--onnx", "{d}/none.onnx"],
     ["ONNX model", "no such file"]),
    ("compile-onnx-not-a-model", ["compile", "--onnx", "{d}/text.bin"],
     ["ONNX model", "cannot be read"]),
    ("compile-gemm-and-onnx", ["compile", "--gemm", "8x8x8", "--onnx", "{d}/text.bin"],
     ["--onnx", "not allowed with argument --gemm"]),
    ("gemm-two-sizes", ["compile", "--gemm", "4x4"], ["--gemm", "MxKxN", "'4x4'", "64x64x64"]),
    ("gemm-four-sizes", ["compile", "--gemm", "4x4x4x4"], ["--gemm", "MxKxN", "'4x4x4x4'"]),
    ("gemm-letters", ["compile", "--gemm", "axbxc"], ["--gemm", "MxKxN", "'axbxc'"]),
    ("gemm-negative", ["compile", "--gemm", "-1x2x3"],
     ["--gemm", "M = -1", "positive integer"]),
    ("gemm-negative-joined", ["compile", "--gemm=4x-2x3"], ["--gemm", "K = -2"]),
    ("gemm-fraction", ["compile", "--gemm", "4.5x4x4"], ["--gemm", "MxKxN", "'4.5x4x4'"]),
    ("gemm-empty", ["compile", "--gemm", ""], ["--gemm", "MxKxN"]),
    ("gemm-missing", ["compile"], ["required", "--gemm"]),
    ("gemm-huge", ["compile", "--gemm", "100000x100000x100000"],
     ["--gemm 100000x100000x100000", "bytes of DRAM", "smaller GEMM"]),
    ("gemm-over-tiny-dram", ["compile", "--gemm", "100000x4x4"],
     ["--gemm 100000x4x4", "tiny chip", "--config base"]),
    ("gemm-over-imem", ["compile", "--gemm", "8x3500x8"],
     ["imem_depth 2048", "program image", "split the network or the batch"]),
    ("config-unknown", ["compile", "--gemm", "8x8x8", "--config", "huge"],
     ["--config", "'huge'", "choose from", ", ".join(f"'{n}'" for n in sorted(PRESETS))]),
    ("seed-negative", ["compile", "--gemm", "8x8x8", "--seed", "-3"],
     ["--seed", "non-negative integer", "'-3'"]),
    ("seed-word", ["compile", "--gemm", "8x8x8", "--seed", "abc"], ["--seed", "'abc'"]),
    ("out-is-a-directory", ["compile", "--gemm", "8x8x8", "--out", "{d}/a-dir"],
     ["--out", "a-dir is a directory", "file name"]),
    ("out-under-a-file", ["compile", "--gemm", "8x8x8", "--out", "{d}/good.bin/x.bin"],
     ["--out", "good.bin is a file, not a directory"]),
    ("trace-is-a-directory", ["compile", "--gemm", "8x8x8", "--trace", "{d}"],
     ["--trace", "is a directory", "file name"]),
    ("unknown-option", ["compile", "--gemm", "8x8x8", "--bogus"],
     ["unrecognized arguments", "--bogus"]),
    ("unknown-command", ["frobnicate"], ["'frobnicate'", "choose from", "compile"]),
    ("no-command", [], ["required", "COMMAND"]),
    ("sim-zero-sized", ["sim", "--gemm", "0x4x4"], ["--gemm", "M = 0"]),
    ("sim-config-unknown", ["sim", "--config", "huge"], ["--config", "'huge'", "choose from"]),
    ("sim-over-dram", ["sim", "--gemm", "100000x64x64"],
     ["--gemm 100000x64x64", "DRAM", "smaller GEMM"]),
    ("sim-over-imem", ["sim", "--gemm", "8x3500x8"], ["imem_depth", "split"]),
    ("sim-trace-is-a-directory", ["sim", "--trace", "{d}/a-dir"], ["--trace", "is a directory"]),
    ("sim-plot-is-a-directory", ["sim", "--plot", "{d}/a-dir"], ["--plot", "is a directory"]),
    ("bench-out-is-a-directory", ["bench", "--out", "{d}/a-dir"],
     ["--out", "a-dir is a directory", "file name"]),
    ("disasm-missing-file", ["disasm", "{d}/nope.bin"],
     ["nope.bin: no such file", "program image", "systolica compile --out"]),
    ("disasm-directory", ["disasm", "{d}/a-dir"], ["a-dir is a directory", "program image"]),
    ("disasm-unreadable", ["disasm", "{d}/locked.bin"],
     ["locked.bin: permission denied", "make it readable"]),
    ("disasm-no-argument", ["disasm"], ["required", "image"]),
    ("schedule-missing-file", ["schedule", "{d}/nope.stp"],
     ["nope.stp: no such file", "program text", "docs/scheduling.md"]),
    ("schedule-directory", ["schedule", "{d}/a-dir"], ["a-dir is a directory", ".stp"]),
    ("schedule-config-unknown", ["schedule", str(EXAMPLES / "gemm_tiny.stp"), "--config", "x"],
     ["--config", "'x'", "choose from"]),
    ("schedule-image-without-chip", ["schedule", str(EXAMPLES / "seed_table1.stp"), "--image",
                                     "{d}/t1.bin"],
     ["seed_table1.stp", "no chip statements", "drop --image"]),
    ("schedule-image-is-a-directory", ["schedule", str(EXAMPLES / "gemm_tiny.stp"),
                                       "--image", "{d}/a-dir"],
     ["--image", "is a directory"]),
    ("schedule-latency-mismatch", ["schedule", str(EXAMPLES / "latency_mismatch.stp")],
     ["latency_mismatch.stp:13", "two paths of different latency", "--insert-delays"]),
    ("energy-unknown-key", ["compile", "--demo", "cnn", "--energy", "{d}/energy-bad-key.toml"],
     ["energy-bad-key.toml", "[energy]", "unknown energy key 'sram_pj'",
      "sram_8kib_pj_per_byte", "docs/records.md"]),
    ("energy-negative", ["compile", "--gemm", "8x8x8", "--energy",
                         "{d}/energy-negative.toml"],
     ["energy-negative.toml", "dram_pj_per_byte", "non-negative number", "-1.0"]),
    ("energy-not-a-number", ["sim", "--energy", "{d}/energy-text.toml"],
     ["energy-text.toml", "mac_pj", "non-negative number", "'cheap'"]),
    ("energy-no-table", ["compile", "--demo", "cnn", "--energy", "{d}/energy-none.toml"],
     ["--energy", "energy-none.toml", "no [energy] table", "dram_pj_per_byte"]),
    ("energy-not-toml", ["compile", "--demo", "cnn", "--energy", "{d}/energy-not-toml.toml"],
     ["--energy", "energy-not-toml.toml", "not valid TOML"]),
    ("energy-no-such-file", ["bench", "--energy", "{d}/none.toml"],
     ["--energy", "none.toml", "no such file"]),
    ("clock-zero", ["compile", "--demo", "cnn", "--clock-mhz", "0"],
     ["--clock-mhz 0", "above 0 MHz"]),
    ("clock-negative", ["compile", "--demo", "cnn", "--clock-mhz", "-50"],
     ["--clock-mhz", "at least 0", "'-50'"]),
    ("json-is-a-directory", ["compile", "--demo", "cnn", "--json", "{d}/a-dir"],
     ["--json", "is a directory"]),
    ("csv-same-as-json", ["sim", "--json", "{d}/r.json", "--csv", "{d}/r.json"],
     ["--csv", "is also --json"]),
    ("bench-json-is-a-directory", ["bench", "--json", "{d}/a-dir"],
     ["--json", "is a directory"]),
    ("compile-demo-int32", ["compile", "--demo", "cnn", "--int32"],
     ["--int32 is for --gemm", "drop --int32"]),
    ("compile-demo-and-gemm", ["compile", "--demo", "cnn", "--gemm", "8x8x8"],
     ["--gemm", "not allowed with argument --demo"]),
]

# Program images given to `systolica disasm`.
IMAGES = [
    ("image-empty", "empty.bin", ["empty.bin is empty (0 bytes)", "not a program image"]),
    ("image-truncated", "truncated.bin",
     ["truncated.bin is truncated", "where its header says", "systolica compile --out"]),
    ("image-half-word", "half-word.bin",
     ["half-word.bin is truncated", "8 bytes end inside the 40-byte image header"]),
    ("image-text-file", "text.bin",
     ["text.bin is not a Systolica program image", "image magic", "systolica compile --out"]),
    ("image-zero-words", "zeros.bin",
     ["zeros.bin is not a Systolica program image", "raw word stream"]),
]


@pytest.mark.parametrize(
    "argv, words",
    sample([pytest.param(*row[1:], id=row[0]) for row in CLI]
           + [pytest.param(["disasm", f"{{d}}/{name}"], words, id=case)
              for case, name, words in IMAGES], 2))
def test_command_line(argv, words, files, capsys):
    argv = [a.format(d=files) for a in argv]
    assert_refused(*run_cli(argv, capsys), words)


# Program text (.stp) given to `systolica schedule`: the file is ``case.stp``.
STP = [
    ("syntax-unclosed-call", "proc p(a)\nlatency read = 1\nx = read ram(a\n",
     ["case.stp:3:15", "expected ',' or ')'"]),
    ("stray-character", "proc p(a)\nlatency read = 1\nx = read ram(a) $\n",
     ["case.stp:3:17", "unexpected character '$'", "ASCII names"]),
    ("non-ascii-name", "proc p(a)\nlatency read = 1\nx = read rám(a)\n",
     ["case.stp:3:11", "unexpected character", "ASCII names"]),
    ("unclosed-string", 'r = cfg set(mux="west_feed[0], source=cbuf.g0)\n',
     ["case.stp:1:17", "not closed on this line", "closing"]),
    ("malformed-number", "proc p(q)\nlatency read = 1\nx = read ram(12abc)\n",
     ["case.stp:3:14", "malformed number", "names start with a letter"]),
    ("missing-operation", "x = \n", ["case.stp:1:5", "expected operation name"]),
    ("missing-component", "x = read\n", ["case.stp:1:9", "expected component name"]),
    ("positional-after-keyword", "proc p(q)\nlatency read = 1\nx = read ram(q, k=1, q)\n",
     ["case.stp:3:22", "positional argument after keyword"]),
    ("keyword-twice", "a = dma load_cbuf(rows=1, rows=2)\n",
     ["case.stp:1:27", "keyword 'rows' is given twice"]),
    ("unknown-unit-op", "a = dma load_foo(rows=1)\n",
     ["case.stp:1:1", "dma has no operation 'load_foo'", "load_cbuf"]),
    ("unknown-field", "a = dma load_cbuf(rows=1, bogus=3)\n",
     ["case.stp:1:1", "DMA has no field(s) bogus", "its fields are"]),
    ("field-not-a-number", 'a = dma load_cbuf(rows="x")\n',
     ["case.stp:1:1", "field rows must be an integer"]),
    ("chip-positional-number", "a = dma load_cbuf(3, rows=1)\n",
     ["case.stp:1:1", "by keyword", "rows=8"]),
    ("buffer-range", "a = dma load_cbuf(dram_addr=0, dram_stride=1, buf_addr=5000, rows=8)\n",
     ["case.stp:1:1", "cbuf range [5000, 5008)", "past the end of that memory (2048 rows"]),
    ("wload-range", "w = wload load(w_addr=2047, bank=0)\n",
     ["case.stp:1:1", "WLOAD", "cbuf range [2047, 2055)"]),
    ("zero-rows", "a = dma load_cbuf(dram_addr=0, dram_stride=1, buf_addr=0, rows=0)\n",
     ["case.stp:1:1", "DMA", "rows must be at least 1"]),
    ("unknown-multiplexer", 'r = cfg set(mux="nope", source="cbuf.g0")\n',
     ["case.stp:1:1", "unknown multiplexer 'nope'", "west_feed[0]"]),
    ("unknown-source", 'r = cfg set(mux="west_feed[0]", source="nope")\n',
     ["case.stp:1:1", "no source 'nope'", "cbuf.g0"]),
    ("mux-without-source", 'r = cfg set(mux="west_feed[0]")\n',
     ["case.stp:1:1", "mux and source go together"]),
    ("defined-twice", "proc p(a)\nlatency read = 1\nx = read ram(a)\nx = read ram(a)\n",
     ["case.stp:4:1", "'x' is defined twice", "line 3"]),
    ("defined-twice-in-one", "proc p(a)\nlatency read = 1\nx, x = read ram(a)\n",
     ["case.stp:3:1", "'x' is defined twice by one statement"]),
    ("input-twice", "proc p(a, a)\nx = read ram(a)\n",
     ["case.stp:1:1", "'a' appears twice in the proc header"]),
    ("undefined-value", "proc p()\nlatency read = 1\nx = read ram(q)\n",
     ["case.stp:3:14", "'q' is used but never defined", "proc input"]),
    ("proc-not-first", "proc p(a)\nlatency read = 1\nx = read ram(a)\nproc q(b)\n",
     ["case.stp:4:1", "'proc' header must be the first line"]),
    ("output-undefined", "proc p(a) -> (z)\nlatency read = 1\nx = read ram(a)\n",
     ["case.stp:1:1", "proc output 'z' is not defined"]),
    ("latency-twice", "proc p(a)\nlatency read = 1\nlatency read = 2\nx = read ram(a)\n",
     ["case.stp:3:1", "latency read is given twice"]),
    ("latency-zero", "proc p(a)\nlatency read = 0\nx = read ram(a)\n",
     ["case.stp:2:16", "latency read must be a positive integer"]),
    ("latency-string", 'proc p(a)\nlatency read = "x"\nx = read ram(a)\n',
     ["case.stp:2:16", "expected a latency in cycles"]),
    ("latency-for-a-chip-unit",
     "proc p(a)\nlatency read = 1\nlatency dma = 5\nx = read ram(a)\n",
     ["case.stp:3:1", "latency dma", "changes nothing", "remove it"]),
    ("latency-for-the-vector-unit",
     'latency vpu = 9\nroute = cfg set(mux="west_feed[0]", source="cbuf.g0")\n',
     ["case.stp:1:1", "latency vpu", "chip's own units", "remove the line"]),
    ("latency-nothing-uses",
     "proc p(a)\nlatency read = 1\nlatency frobnicate = 5\nx = read ram(a)\n",
     ["case.stp:3:1", "'frobnicate'", "changes nothing", "correct the key"]),
    ("latency-missing", "proc p(a)\nx = read ram(a)\n",
     ["case.stp:2:1", "no latency for operation 'read'", "latency read = 1"]),
    ("dependency-cycle", "proc p()\nlatency add = 1\nx = add a0(y)\ny = add a1(x)\n",
     ["dependency cycle", "line 3", "line 4", "break the loop"]),
    ("component-clash",
     "proc p(a)\nlatency read = 1\nlatency add = 1\nx = read ram(a)\ny = read ram(a)\n"
     "z = add ad0(x, y)\n",
     ["case.stp:5", "needs ram twice in cycle 0"]),
    ("chip-reads-datapath", "proc p(q)\nlatency read = 1\nx = read ram(q)\n"
     "a = dma load_cbuf(x, rows=1)\n",
     ["case.stp:4", "reads datapath value 'x'", "read buffers"]),
    ("chip-unordered",
     "a = dma load_cbuf(dram_addr=0, dram_stride=1, buf_addr=100, rows=8)\n"
     "acc = mm matmul(a, act_addr=300, rows=8, acc_addr=0, accumulate=0, bank=0)\n",
     ["case.stp:2", "share no buffer rows", "read the rows the producer writes"]),
    ("empty-file", "", ["case.stp has no statements", "nothing to schedule"]),
    ("only-comments", "# nothing here\n\n", ["case.stp has no statements"]),
    ("header-only", "proc p(a)\n", ["case.stp has no statements"]),
    ("not-utf8", b"\xff\xfe x = read ram(a)\n",
     ["case.stp:1:1", "not UTF-8 text (byte 0xff)", "saved as UTF-8"]),
    ("not-utf8-line-3", b"proc p(a)\nlatency read = 1\nx = read r\xe4m(a)\n",
     ["case.stp:3:11", "not UTF-8 text (byte 0xe4)"]),
]


@pytest.mark.parametrize("source, words", [pytest.param(*row[1:], id=row[0]) for row in STP])
def test_program_text(source, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = Path("case.stp")
    path.write_bytes(source if isinstance(source, bytes) else source.encode())
    assert_refused(*run_cli(["schedule", str(path)], capsys), words)


def catalogue() -> dict[str, int]:
    """This module's rows by area (``test_catalogue.py`` adds up every module's)."""
    return {"Python API": len(API), "chip configuration": len(CONFIG) + len(CONFIG_CALLS),
            "command line": len(CLI), "program images": len(IMAGES), "program text": len(STP)}


# -- a few through a real process ------------------------------------------------------------
@pytest.mark.parametrize("argv, words", sample([
    pytest.param(["compile", "--gemm", "0x4x4"], ["M = 0"], id="gemm-zero-sized"),
    pytest.param(["compile", "--gemm", "8x8x8", "--config", "huge"], ["choose from"],
                 id="config-unknown"),
    pytest.param(["disasm", "{d}/empty.bin"], ["empty.bin is empty"], id="image-empty"),
    pytest.param(["schedule", "{d}/nonutf8.stp"], ["nonutf8.stp:1:3", "not UTF-8"],
                 id="not-utf8"),
], 4))
def test_command_line_process(argv, words, files):
    (files / "nonutf8.stp").write_bytes(b"x \xff\n")
    argv = [a.format(d=files) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "systolica.app.cli", *argv],
                          capture_output=True, text=True, timeout=120)
    assert_refused(proc.returncode, proc.stdout, proc.stderr, words)
