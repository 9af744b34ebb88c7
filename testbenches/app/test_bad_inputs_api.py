"""The bad-input catalogue, continued (``test_bad_inputs.py`` holds the first part and
the rules): the Python API given the wrong type of thing, chip configurations out of
range or edited in place, chip files (``ChipConfig.from_dict`` / ``from_json`` and
``--config FILE.json``), and program text past the bounds of the work it asks for.
Each row is one input and the key words of the one error it must get back."""

from __future__ import annotations

import json
import operator
import os
from pathlib import Path

import numpy as np
import pytest

from systolica import golden
from systolica.app import flow
from systolica.arch.config import (
    DEFAULT_LATENCY,
    MAX_LATENCY,
    PRESETS,
    ChipConfig,
    ConfigError,
    preset,
)
from systolica.compiler import CompileError, Dense, GraphBuilder, Network, gemm, plan_memory
from systolica.compiler.frontend import stp, text
from systolica.compiler.scheduling.datapath import MAX_DELAY_REGISTERS
from systolica.sim import rtlsim

from paths import EXAMPLES
from test_bad_inputs import assert_clear, assert_refused, run_cli

TINY = preset("tiny")
A = np.ones((4, 8), np.int8)
B = np.ones((8, 4), np.int8)


@pytest.fixture(autouse=True)
def no_chip_build(monkeypatch):
    """Every bad input must be refused before a Verilated chip is built (the build
    step under ``rtlsim.build``, whose own check is one of the rows)."""
    from systolica.sim import verilated

    def refuse(*_, **__):
        raise AssertionError("a bad input reached the Verilator build")
    monkeypatch.setattr(verilated, "build", refuse)


def _graph_with_a_layer():
    g = GraphBuilder("n")
    g.dense(g.input(A, name="x"), B, name="fc")
    return g


def _job():
    from systolica.sim.jobs import RtlJob
    return RtlJob(_compiled().loadable)


def _compiled():
    from systolica.compiler import compile_network
    return compile_network(TINY, gemm(A, B))


# -- the Python API: the wrong type of thing ---------------------------------------------
API_TYPES = [
    # (id, build, exception, key words)
    ("gemm-input-a-string", lambda: gemm("1 2 3", B), CompileError,
     ["input", "2-D array of integers", "numpy array or nested lists", "not str"]),
    ("gemm-input-bytes", lambda: gemm(b"\x01\x02", B), CompileError,
     ["input", "2-D array", "not bytes"]),
    ("gemm-input-a-dict", lambda: gemm({"a": 1}, B), CompileError,
     ["input", "2-D array", "not dict"]),
    ("gemm-weights-a-string", lambda: gemm(A, "weights.npy"), CompileError,
     ["weights", "2-D array", "not str 'weights.npy'"]),
    ("gemm-bias-a-string", lambda: gemm(A, B, "0"), CompileError,
     ["bias", "1-D array", "not str"]),
    ("dense-weights-bytes", lambda: Dense(b"\x00" * 32), CompileError,
     ["weights", "2-D array", "not bytes"]),
    ("network-input-bytes", lambda: Network(b"\x00" * 32, (Dense(B),)), CompileError,
     ["input", "2-D array", "not bytes"]),
    ("builder-input-a-string", lambda: GraphBuilder("n").input("x.npy"), CompileError,
     ["input", "array of integers", "not str 'x.npy'"]),
    ("builder-name-an-int", lambda: GraphBuilder(3), CompileError,
     ["GraphBuilder(name)", "non-empty string", "not 3"]),
    ("builder-name-none", lambda: GraphBuilder(None), CompileError,
     ["GraphBuilder(name)", "not None"]),
    ("layer-reads-an-array", lambda: GraphBuilder("n").dense(A, B), CompileError,
     ["reads an array of shape (8,)", "tensor names", "give the array to input()"]),
    ("build-output-an-array", lambda: _graph_with_a_layer().build(A), CompileError,
     ["build(*outputs)", "tensor names", "array(", "'fc'"]),
    ("build-output-unknown", lambda: _graph_with_a_layer().build("nope"), CompileError,
     ["build(*outputs)", "'nope'", "the network has ['fc', 'x']"]),
    ("plan-memory-cfg-by-name", lambda: plan_memory("tiny", gemm(A, B)), CompileError,
     ["plan_memory(cfg, network)", "cfg must be a ChipConfig", "preset('tiny')", "not str"]),
    ("golden-run-cfg-by-name", lambda: golden.run("tiny", _compiled().loadable), TypeError,
     ["golden.run(cfg, program)", "ChipConfig", "preset('tiny')", "not str"]),
    ("golden-run-cfg-a-dict", lambda: golden.run(TINY.to_dict(), _compiled().loadable),
     TypeError, ["golden.run", "cfg must be a ChipConfig", "from_file", "not dict"]),
    ("golden-check-an-image", lambda: golden.check(TINY, _compiled().image), TypeError,
     ["golden.check(cfg, program)", "list of isa.Instr", "isa.decode", "not bytes"]),
    ("golden-check-a-list-of-words", lambda: golden.check(TINY, [1, 2]), TypeError,
     ["program must be a list of isa.Instr", "not a list of int"]),
    ("golden-check-cfg-by-name", lambda: golden.check("tiny", _compiled().program),
     TypeError, ["golden.check", "cfg must be a ChipConfig", "not str"]),
    ("run-network-of-a-graph", lambda: flow.run_network(gemm(A, B).graph), TypeError,
     ["run_network", "a Compiled", "not Graph", "compile_network(cfg, network)"]),
    ("rtl-build-cfg-by-name", lambda: rtlsim.build("tiny"), TypeError,
     ["rtlsim.build(cfg)", "ChipConfig", "preset('tiny')"]),
    ("rtl-run-cfg-by-name", lambda: rtlsim.run("base", []), TypeError,
     ["rtlsim.run(cfg, jobs)", "ChipConfig", "preset('base')"]),
    ("rtl-run-one-job-not-a-list", lambda: rtlsim.run(TINY, _job()), TypeError,
     ["rtlsim.run(cfg, jobs)", "list of RtlJob", "[job]", "not RtlJob"]),
    ("results-of-a-list", lambda: _compiled().results([0] * 8), CompileError,
     ["results(dram_after)", "run.dram", "uint8 array of (words, 8)", "not list"]),
    ("results-of-a-wrong-shape", lambda: _compiled().results(np.zeros((4, 4), np.uint8)),
     CompileError, ["results(dram_after)", "(words, 8)", "not shape (4, 4)"]),
    ("stp-file-cfg-by-name",
     lambda: stp.compile_file("tiny", EXAMPLES / "gemm_tiny.stp"), CompileError,
     ["compile_file(cfg, path)", "cfg must be a ChipConfig", "preset('tiny')"]),
    ("stp-program-a-string",
     lambda: stp.compile_program(TINY, "x = read ram(a)\n"), CompileError,
     ["compile_program(cfg, prog)", "prog must be a Program", "text.parse", "not str"]),
    ("parse-bytes", lambda: text.parse(b"x = read ram(a)\n"), CompileError,
     ["parse(text, filename)", "str of program text", "decode", "parse_file", "not bytes"]),
    ("parse-none", lambda: text.parse(None), CompileError,
     ["parse(text, filename)", "not NoneType"]),
    ("plan-model-cfg-by-name", lambda: _plan_model("tiny", "model.onnx"), CompileError,
     ["plan_model(cfg, model)", "cfg must be a ChipConfig", "preset('tiny')"]),
    ("plan-model-options-a-dict", lambda: _plan_model(TINY, "model.onnx", options={}),
     CompileError, ["plan_model", "options must be a PlanOptions", "not dict"]),
    ("plan-model-inputs-a-list", lambda: _plan_model(TINY, "model.onnx", [A]),
     CompileError, ["plan_model", "inputs must be a mapping of input name to array",
                    "not list"]),
    ("run-plan-of-a-path", lambda: _run_plan("model.onnx"), TypeError,
     ["run_plan takes what plan_model returns", "not str"]),
    # the management core's kernels: descriptors from an operator's parameters
    ("core-softmax-output-scale", lambda: _kernel("softmax", y_scale=1e-6), CompileError,
     ["softmax 'k'", "output scale", "below 2**-16", "QuantizeLinear", "1/256"]),
    ("core-softmax-of-int32", lambda: _kernel("softmax", x="int32"), CompileError,
     ["softmax 'k'", "input is int32", "takes int8 or uint8"]),
    ("core-softmax-zero-point", lambda: _kernel("softmax", y_zp=200), CompileError,
     ["softmax 'k'", "output zero point", "int8", "[-128, 127]", "200"]),
    ("core-kernel-no-rows", lambda: _kernel("argmax", rows=0), CompileError,
     ["argmax 'k'", "rows", "from 1", "empty tensor"]),
    ("core-argmax-int8-output", lambda: _kernel("argmax", y="int8"), CompileError,
     ["argmax 'k'", "output is int8", "int32 or int64"]),
    ("core-requantise-int32-zero-point", lambda: _kernel("requantise", x="int32", x_zp=3),
     CompileError, ["requantise 'k'", "int32 input", "zero point 0", "not 3"]),
    ("core-requantise-ratio", lambda: _kernel("requantise", x_scale=1e6), CompileError,
     ["requantise 'k'", "input scale over the output's", "65535", "saturates"]),
    ("core-add-negative-scale", lambda: _kernel("add", a_scale=-0.5), CompileError,
     ["add 'k'", "first input's scale", "positive finite", "-0.5"]),
    ("core-add-ratio", lambda: _kernel("add", b_scale=1e7), CompileError,
     ["add 'k'", "scale over the output's", "2**20"]),
    ("core-chip-view-int64", lambda: _chip_view("int64"), CompileError,
     ["chip_view", "int8 or int32", "not int64"]),
    ("core-view-negative-stride", lambda: _view(row_stride=-4), CompileError,
     ["view", "row_stride", "[0, 2**32)", "-4"]),
    ("core-step-not-fetched-whole", lambda: _chip_step(None), ValueError,
     ["fetched whole", "PROG_FETCH 0", "fetch_from None", "CompileOptions(fetch_from=0)"]),
]


def _chip_step(fetch_from):
    """The core's step of a GEMM compiled with `fetch_from`."""
    from systolica.compiler import compile_network
    from systolica.firmware.core_host import ChipStep
    return ChipStep.of(compile_network(TINY, gemm(A, B), fetch_from=fetch_from).loadable,
                       TINY)


def _kernel(kind: str, x: str = "int8", y: str | None = None, rows: int = 2, **params):
    """A kernel descriptor for a [rows, 8] tensor, `params` changed."""
    from systolica.firmware import core_kernels as ck
    y = y or ("int64" if kind == "argmax" else "int8")
    xv, yv = ck.array_view(0, (rows or 1, 8), x), ck.array_view(4096, (rows or 1, 8), y)
    q = dict(x_scale=0.1, y_scale=1 / 256, y_zp=0)
    if kind == "softmax":
        return ck.softmax(xv, yv, rows=rows, cols=8, name="k", **(q | params))
    if kind == "argmax":
        return ck.argmax(xv, yv, rows=rows, cols=8, name="k", **params)
    if kind == "requantise":
        return ck.requantise(xv, yv, rows=rows, cols=8, name="k", **(q | dict(x_zp=0)
                                                                     | params))
    return ck.add(xv, xv, yv, rows=rows, cols=8, name="k", **(dict(
        a_scale=0.1, a_zp=0, b_scale=0.1, b_zp=0, y_scale=0.1, y_zp=0) | params))


def _chip_view(dtype: str):
    from systolica.firmware import core_kernels as ck
    return ck.chip_view(TINY, 0, (4, 8), dtype)


def _view(**fields):
    from systolica.firmware import core_kernels as ck
    return ck.View(**(dict(base=0, dtype=ck.ElemType.INT8, row_stride=8, block=8,
                           block_stride=0, elem_stride=1) | fields))


def _plan_model(*args, **kw):
    from systolica.compiler.assignment.partition import plan_model
    return plan_model(*args, **kw)


def _run_plan(*args, **kw):
    from systolica.app.onnx_run import run_plan
    return run_plan(*args, **kw)


@pytest.mark.parametrize("build, error, words",
                         [pytest.param(*row[1:], id=row[0]) for row in API_TYPES])
def test_python_api_types(build, error, words):
    with pytest.raises(error) as info:
        build()
    assert_clear(str(info.value), words)


# -- chip configurations: ranges, and the presets read-only ------------------------------
CONFIG_RANGES = [
    # (id, changes to the tiny preset, key words)
    ("latency-vpu-a-billion", dict(latency={**DEFAULT_LATENCY, "vpu": 10 ** 9}),
     ["latency['vpu']", f"at most {MAX_LATENCY} cycles", "1000000000"]),
    ("latency-vpu-not-the-rtls", dict(latency={**DEFAULT_LATENCY, "vpu": 4}),
     ["vector unit has 3 stages", "set latency vpu to 3", "not 4"]),
    ("latency-datapath-op-huge", dict(latency={**DEFAULT_LATENCY, "read.bigram": 10 ** 7}),
     ["latency['read.bigram']", f"at most {MAX_LATENCY}", "10000000"]),
    ("latency-datapath-op-zero", dict(latency={**DEFAULT_LATENCY, "mul": 0}),
     ["latency['mul']", "positive integer"]),
    ("latency-a-list-of-pairs", dict(latency=list(DEFAULT_LATENCY.items())),
     ["latency must be a dict", "DEFAULT_LATENCY"]),
    ("power-domain-budget-a-billion", dict(power_domain_budget=10 ** 9),
     ["power_domain_budget 1000000000", "max_config_updates_per_cycle 4", "at most 4"]),
    ("power-domain-budget-over-the-pairs", dict(power_domain_budget=5),
     ["power_domain_budget 5", "exceeds max_config_updates_per_cycle 4"]),
    ("name-too-long", dict(name="x" * 65), ["name", "at most 64", "build directories",
                                            "xxxx...x'"]),
    ("ubuf-off-the-banks-after-a-bank-change", dict(cbuf_banks=1),
     ["whole CBUF banks", "(ubuf_base, ubuf_rows)", "2048 rows", "cbuf_depth / cbuf_banks"]),
    ("dram-of-64-gib", dict(tile_rows=1, tile_cols=1, tile_size=4096, cbuf_depth=65536,
                            ubuf_base=0, ubuf_rows=0, dram_words=1 << 24),
     ["dram_words 16777216", "4096-byte words", "64 GiB", "more than the 4 GiB",
      "make dram_words at most 1048576"]),
    ("value-a-huge-list", dict(tile_size=list(range(10000))),
     ["tile_size must be a positive integer", "..."]),
]


@pytest.mark.parametrize("changes, words",
                         [pytest.param(*row[1:], id=row[0]) for row in CONFIG_RANGES])
def test_chip_config_ranges(changes, words):
    with pytest.raises(ConfigError) as info:
        TINY.replace(**changes)
    assert_clear(str(info.value), words)
    assert len(str(info.value)) < 400


PRESET_EDITS = [
    # (id, edit, exception, key words): the presets and the default table are read-only
    ("preset-latency-set", lambda: operator.setitem(preset("tiny").latency, "vpu", 9), TypeError,
     ["mappingproxy", "does not support item assignment"]),
    ("preset-latency-update", lambda: preset("base").latency.update(vpu=9), AttributeError,
     ["mappingproxy", "update"]),
    ("preset-table-replaced", lambda: operator.setitem(PRESETS, "tiny", TINY.replace(name="x")),
     TypeError, ["mappingproxy", "item assignment"]),
    ("preset-field-set", lambda: setattr(preset("tiny"), "tile_size", 8), AttributeError,
     ["cannot assign to field 'tile_size'"]),
    ("default-latency-set", lambda: operator.setitem(DEFAULT_LATENCY, "vpu", 4), TypeError,
     ["mappingproxy", "item assignment"]),
]


@pytest.mark.parametrize("edit, error, words",
                         [pytest.param(*row[1:], id=row[0]) for row in PRESET_EDITS])
def test_presets_refuse_edits(edit, error, words):
    before = preset("tiny").to_dict(), preset("base").to_dict(), dict(DEFAULT_LATENCY)
    with pytest.raises(error) as info:
        edit()
    assert_clear(str(info.value), words)
    assert (preset("tiny").to_dict(), preset("base").to_dict(), dict(DEFAULT_LATENCY)) \
        == before


# -- chip files ------------------------------------------------------------------------
GOOD = json.loads(TINY.replace(name="mine").to_json())


def _with(**changes) -> str:
    return json.dumps({**GOOD, **changes})


def _without(*keys) -> str:
    return json.dumps({k: v for k, v in GOOD.items() if k not in keys})


CHIP_FILES = [
    # (id, the file's text (str or bytes), key words); the file is chip.json
    ("empty", "", ["chip.json is empty", "preset('tiny').to_json()"]),
    ("a-list", "[2, 2, 4]", ["chip.json", "JSON object", "ChipConfig fields", "not list"]),
    ("a-number", "42", ["chip.json", "JSON object", "not int"]),
    ("syntax-trailing-comma", '{"name": "mine",}',
     ["chip.json:1:17", "not valid JSON", "double quotes", "Chip files"]),
    ("syntax-unclosed", '{"name": "mine"', ["chip.json:1:16", "not valid JSON"]),
    ("syntax-line-3", '{\n"name": "mine",\n"tile_rows": two\n}',
     ["chip.json:3:14", "not valid JSON"]),
    ("not-utf8", b'{"name": "m\xe9"}', ["chip.json", "not UTF-8", "0xe9", "offset 11"]),
    ("key-twice", '{"name": "a", "name": "b"}', ["chip.json", "key 'name' is given twice"]),
    ("nan", _with(tile_size=0).replace('"tile_size": 0', '"tile_size": NaN'),
     ["chip.json", "NaN is not a number a chip can have"]),
    ("infinity", _with(dram_words=0).replace('"dram_words": 0', '"dram_words": Infinity'),
     ["chip.json", "Infinity"]),
    ("a-number-of-5000-digits", _with(dram_words=0).replace('"dram_words": 0',
                                                            '"dram_words": 1' + "0" * 5000),
     ["chip.json", "thousands of digits", "small integers"]),
    ("nested-too-deep", "[" * 100000, ["chip.json", "nested too deeply", "flat JSON object"]),
    ("unknown-key", _with(tiles=4), ["chip.json", "unknown key(s) 'tiles'", "tile_size"]),
    ("unknown-keys-listed", _with(Tile_size=4, rows=8),
     ["unknown key(s) 'Tile_size', 'rows'", "tile_rows"]),
    ("missing-keys", _without("tile_size", "imem_depth"),
     ["chip.json", "missing key(s) tile_size, imem_depth", "to_json()"]),
    ("value-a-float", _with(tile_size=4.0), ["chip.json", "tile_size", "integer", "4.0"]),
    ("value-a-string", _with(cbuf_depth="2048"),
     ["chip.json", "cbuf_depth", "integer", "'2048'"]),
    ("value-null", _with(acc_depth=None), ["chip.json", "acc_depth", "None"]),
    ("value-out-of-range", _with(dram_words=1 << 30),
     ["chip.json", "dram_words", "24-bit address field"]),
    ("flag-a-string", _with(feed_register="yes"),
     ["chip.json", "feed_register must be True or False", "'yes'"]),
    ("latency-a-list", _with(latency=[1, 1, 1, 3]), ["chip.json", "latency must be a dict"]),
    ("latency-key-missing", _with(latency={"vpu": 3}),
     ["chip.json", "latency table lacks", "acc_read", "DEFAULT_LATENCY"]),
    ("latency-value-huge", _with(latency={**DEFAULT_LATENCY, "vpu": 10 ** 9}),
     ["chip.json", "latency['vpu']", f"at most {MAX_LATENCY}"]),
    ("name-of-a-preset-for-another-chip", _with(name="tiny", imem_depth=1024),
     ["chip.json", "'tiny' is a preset's", "differs from it in imem_depth",
      "a name of its own"]),
    ("name-with-a-slash", _with(name="../x"), ["chip.json", "name", "'../x'"]),
]


@pytest.mark.parametrize("content, words",
                         [pytest.param(*row[1:], id=row[0]) for row in CHIP_FILES])
def test_chip_files(content, words, tmp_path):
    path = tmp_path / "chip.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ConfigError) as info:
        ChipConfig.from_file(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert_clear(message.replace(str(tmp_path) + "/", ""), words)
    assert len(message) < 600


CHIP_FILE_CALLS = [
    ("from-file-missing", lambda d: ChipConfig.from_file(d / "none.json"), ConfigError,
     ["none.json", "cannot read the chip file", "no such file", "JSON chip file"]),
    ("from-file-a-directory", lambda d: ChipConfig.from_file(d), ConfigError,
     ["cannot read the chip file", "is a directory"]),
    ("from-dict-a-string", lambda d: ChipConfig.from_dict("tiny"), ConfigError,
     ["JSON object", "ChipConfig fields", "not str"]),
    ("from-dict-int-keys", lambda d: ChipConfig.from_dict({**GOOD, 3: 4}), ConfigError,
     ["unknown key(s) 3", "tile_rows"]),
    ("from-json-a-dict", lambda d: ChipConfig.from_json(GOOD), ConfigError,
     ["<chip file>", "str or bytes", "not dict"]),
]


@pytest.mark.parametrize("call, error, words",
                         [pytest.param(*row[1:], id=row[0]) for row in CHIP_FILE_CALLS])
def test_chip_file_calls(call, error, words, tmp_path):
    with pytest.raises(error) as info:
        call(tmp_path)
    assert_clear(str(info.value), words)


# -- --config on the command line --------------------------------------------------------
@pytest.fixture(scope="module")
def chips(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("chips")
    (d / "mine.json").write_text(TINY.replace(name="mine").to_json())
    (d / "bad-key.json").write_text(_with(tiles=4))
    (d / "bad-value.json").write_text(_with(tile_size=0))
    (d / "bad-syntax.json").write_text('{"name": "mine",\n"tile_size": 4,,\n}')
    (d / "preset-name.json").write_text(_with(name="tiny", tile_size=2))
    (d / "empty.json").write_text("")
    (d / "a-dir.json").mkdir()
    (d / "chip.txt").write_text(TINY.to_json())
    (d / "huge.json").write_text("{" + " " * (2 << 20) + "}")
    os.mkfifo(d / "pipe.json")
    return d


CLI_CONFIG = [
    # (id, argv with {d} = the chip files' directory, key words)
    ("config-file-missing", ["compile", "--gemm", "8x8x8", "--config", "{d}/none.json"],
     ["argument --config", "none.json: no such file", "chip file (JSON)"]),
    ("config-file-a-directory", ["schedule", str(EXAMPLES / "gemm_tiny.stp"), "--config",
                                 "{d}/a-dir.json"],
     ["argument --config", "a-dir.json is a directory", "chip file"]),
    ("config-file-empty", ["compile", "--gemm", "8x8x8", "--config", "{d}/empty.json"],
     ["argument --config", "empty.json is empty"]),
    ("config-file-bad-syntax", ["sim", "--config", "{d}/bad-syntax.json"],
     ["argument --config", "bad-syntax.json:2:16", "not valid JSON"]),
    ("config-file-unknown-key", ["compile", "--gemm", "8x8x8", "--config",
                                 "{d}/bad-key.json"],
     ["argument --config", "bad-key.json", "unknown key(s) 'tiles'"]),
    ("config-file-bad-value", ["compile", "--gemm", "8x8x8", "--config",
                               "{d}/bad-value.json"],
     ["argument --config", "bad-value.json", "tile_size must be a positive integer"]),
    ("config-file-reuses-a-preset-name", ["library", "--config", "{d}/preset-name.json"],
     ["argument --config", "'tiny' is a preset's", "differs from it in tile_size"]),
    ("config-file-over-its-bound", ["compile", "--gemm", "8x8x8", "--config",
                                    "{d}/huge.json"],
     ["argument --config", "huge.json is 2,097,154 bytes", "more than the 1 MiB",
      "chip file (JSON)"]),
    ("config-file-a-named-pipe", ["schedule", str(EXAMPLES / "gemm_tiny.stp"), "--config",
                                  "{d}/pipe.json"],
     ["argument --config", "pipe.json is a named pipe", "only files are read"]),
    ("config-neither-preset-nor-json", ["compile", "--gemm", "8x8x8", "--config",
                                        "{d}/chip.txt"],
     ["argument --config", "chip.txt", "choose from", "'tiny'", "ending in .toml or .json"]),
]


@pytest.mark.parametrize("argv, words",
                         [pytest.param(*row[1:], id=row[0]) for row in CLI_CONFIG])
def test_config_option(argv, words, chips, capsys):
    argv = [a.format(d=chips) for a in argv]
    assert_refused(*run_cli(argv, capsys), words)


def test_config_option_takes_a_chip_file(chips, capsys):
    """The chip file's chip is the one compiled for (its name in the report)."""
    status, out, err = run_cli(["compile", "--gemm", "8x8x8", "--config",
                                str(chips / "mine.json")], capsys)
    assert status == 0, err
    assert "17 instructions" in out or "instructions" in out


# -- program text: the bounds of the work it asks for ------------------------------------
PAST_BOUNDS = [
    # (id, program text, extra options, key words); the file is case.stp
    ("number-with-a-leading-zero",
     "a = dma load_cbuf(dram_addr=0, dram_stride=1, buf_addr=08, rows=8)\n", [],
     ["case.stp:1:56", "number '08' starts with 0", "without leading zeros"]),
    ("number-of-5000-digits", "proc p(a)\nlatency read = 1" + "0" * 5000 +
     "\nx = read ram(a)\n", [],
     ["case.stp:2:16", "5001 characters", "does not fit in 64 bits"]),
    ("number-past-64-bits", f"x = read ram({1 << 64})\n", [],
     ["case.stp:1:14", "'18446744073709551616'", "64 bits"]),
    ("latency-ten-million", "proc p(a)\nlatency read = 10000000\nx = read ram(a)\n", [],
     ["case.stp:2:16", "latency read", f"at most {MAX_LATENCY} cycles", "10000000"]),
    ("delays-past-the-bound",
     "proc p(a) -> (z)\nlatency read = 1\nlatency slow = 60000\nlatency fast = 1\n"
     "latency mul = 1\nx = read ram(a)\ny = slow s0(x)\nw = fast f0(x)\nz = mul m0(y, w)\n",
     ["--insert-delays"],
     ["case.stp:9:1", "59999 delay registers", "after w, line 8",
      f"more than the {MAX_DELAY_REGISTERS}", "make the paths' latencies closer"]),
    ("delays-past-the-bound-in-steps",
     "proc p(a) -> (z)\nlatency read = 1\nlatency slow = 65536\nlatency mul = 1\n"
     "x = read ram(a)\ny1 = slow s0(x)\ny2 = slow s1(y1)\nz = mul m0(y2, x)\n",
     ["--insert-delays"],
     ["case.stp:8:1", "131072 delay registers", "after x, line 5", "--insert-delays"]),
]


@pytest.mark.parametrize("source, options, words",
                         [pytest.param(*row[1:], id=row[0]) for row in PAST_BOUNDS])
def test_program_text_bounds(source, options, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("case.stp").write_text(source)
    assert_refused(*run_cli(["schedule", "case.stp", *options], capsys), words)


# -- chip values that made work grow with them -------------------------------------------
FAR_APART = TINY.replace(name="far_apart", config_update_interval=(1 << 32) - 1)

BOUNDED_WORK = [
    # (id, build, exception, key words): refused at once (the scheduler stepped one
    # cycle at a time towards the next allowed update cycle: minutes, then hours)
    ("stp-updates-past-the-cycle-field",
     lambda: stp.compile_file(FAR_APART, EXAMPLES / "reroute_tiny.stp"), CompileError,
     ["cannot schedule MATMUL", "past the 32-bit cycle field"]),
    ("network-updates-past-the-cycle-field",
     lambda: _compile_on(FAR_APART, _concat()), CompileError,
     ["configuration updates put an instruction at cycle", "32-bit cycle field",
      "config_update_interval 4294967295", "make it smaller"]),
]


def _compile_on(cfg, network):
    from systolica.compiler import compile_network
    return compile_network(cfg, network)


def _concat():
    from systolica.app import demo
    return demo.concat()


@pytest.mark.parametrize("build, error, words",
                         [pytest.param(*row[1:], id=row[0]) for row in BOUNDED_WORK])
def test_bounded_work(build, error, words):
    with pytest.raises(error) as info:
        build()
    assert_clear(str(info.value), words)


def test_a_long_update_interval_schedules_at_once():
    """Updates one every 2**20 cycles: the scheduler jumps to the allowed cycles."""
    cfg = TINY.replace(name="slow_updates", config_update_interval=1 << 20)
    result = stp.compile_file(cfg, EXAMPLES / "reroute_tiny.stp")
    setcfgs = [ins for ins in result.chip.program if ins.op.name.startswith("SETCFG")]
    assert setcfgs and all(ins.cycle % (1 << 20) == 0 for ins in setcfgs)


def catalogue() -> dict[str, int]:
    """This module's rows by area (``test_catalogue.py`` adds up every module's)."""
    return {"Python API": len(API_TYPES),
            "chip configuration": len(CONFIG_RANGES) + len(PRESET_EDITS),
            "chip files": len(CHIP_FILES) + len(CHIP_FILE_CALLS) + len(CLI_CONFIG),
            "program text": len(PAST_BOUNDS) + len(BOUNDED_WORK)}
