"""The bad-input catalogue of the command line's doors (the style of
``test_bad_inputs.py``): options that conflict or would do nothing, output paths that
cannot be written (refused before any work), inputs that are not regular files or are
too large (refused before a byte is read: a named pipe must not hang, ``/dev/zero``
must not fill memory). Every row ends in exit status 2 and one ``systolica: error:``
line naming the option or path at fault and what to do.

Then what the files module promises beyond refusals: an interrupted write leaves the
old file and no temporary one, a write through a link keeps the link, a checked output
leaves nothing behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import systolica.compiler
from systolica import files
from systolica.app import cli
from systolica.arch import image_file
from systolica.arch.config import preset
from systolica.compiler import CompileError
from systolica.compiler.assignment import library

# no_chip_build: autouse, every bad input refused before the Verilated chip is built
from test_bad_inputs import assert_clear, assert_refused, no_chip_build, run_cli  # noqa: F401
from tiers import examples, sample

#: A place no one (root included) can create a file in.
UNWRITABLE = "/proc/systolica-out"


@pytest.fixture(scope="module")
def d(tmp_path_factory) -> Path:
    """A directory of inputs that are not what they seem."""
    d = tmp_path_factory.mktemp("doors")
    os.mkfifo(d / "fifo")
    (d / "a-dir").mkdir()
    (d / "file").write_text("a plain file\n")
    (d / "text.bin").write_bytes(b"x = read ram(addr)\n")
    (d / "b").mkdir()
    (d / "b" / "plots").write_text("not a directory\n")
    with open(d / "huge.bin", "wb") as f:           # sparse: costs no disk
        f.truncate(files.LIMITS["image"] + 16)
    with open(d / "huge.stp", "wb") as f:
        f.truncate(files.LIMITS["text"] + 1)
    np.save(d / "one.npy", np.zeros(3))
    return d


ONNX = ["--onnx", "{d}/text.bin"]

CLI_DOORS = [
    # (id, argv with {d} = the inputs directory, key words)
    # -- sim: one thing to run, and every option used by it
    ("sim-gemm-and-onnx", ["sim", "--gemm", "8x8x8", *ONNX],
     ["--onnx", "not allowed with argument --gemm"]),
    ("sim-demo-and-gemm", ["sim", "--demo", "mlp", "--gemm", "8x8x8"],
     ["--gemm", "not allowed with argument --demo", "give only one of them"]),
    ("sim-demo-and-onnx", ["sim", "--demo", "mlp", *ONNX],
     ["--onnx", "not allowed with argument --demo"]),
    ("sim-golden-only-without-onnx", ["sim", "--golden-only"],
     ["--golden-only is for --onnx", "drop --golden-only"]),
    ("sim-tolerance-without-onnx", ["sim", "--gemm", "8x8x8", "--tolerance", "2"],
     ["--tolerance is for --onnx", "give --onnx FILE or drop --tolerance"]),
    ("sim-assign-without-onnx", ["sim", "--assign", "conv1=host"],
     ["--assign is for --onnx"]),
    ("sim-constant-without-onnx", ["sim", "--constant", "w={d}/one.npy"],
     ["--constant is for --onnx"]),
    ("sim-calibration-without-onnx", ["sim", "--calibration", "{d}/one.npy"],
     ["--calibration is for --onnx"]),
    ("sim-report-json-without-onnx", ["sim", "--report-json", "{d}/r.json"],
     ["--report-json is for --onnx"]),
    ("sim-benefit-threshold-without-onnx", ["sim", "--benefit-threshold", "0.5"],
     ["--benefit-threshold is for --onnx"]),
    ("sim-cost-threshold-without-onnx", ["sim", "--cost-threshold", "1"],
     ["--cost-threshold is for --onnx"]),
    ("sim-onnx-with-trace", ["sim", *ONNX, "--trace", "{d}/t.json"],
     ["--trace does nothing with --onnx", "no schedule timeline", "drop --trace"]),
    ("sim-onnx-with-plot", ["sim", *ONNX, "--plot", "{d}/u.svg"],
     ["--plot does nothing with --onnx", "drop --plot"]),
    ("sim-onnx-with-waves", ["sim", *ONNX, "--waves"],
     ["--waves does nothing with --onnx", "drop --waves"]),
    ("sim-seed-with-demo", ["sim", "--demo", "mlp", "--seed", "3"],
     ["--seed does nothing for the demo network", "drop --seed", "--gemm"]),
    ("sim-tolerance-negative", ["sim", *ONNX, "--tolerance", "-1"],
     ["--tolerance", "at least 0", "'-1'"]),
    ("sim-tolerance-nan", ["sim", *ONNX, "--tolerance", "nan"],
     ["--tolerance", "expected a finite number", "'nan'"]),
    ("sim-tolerance-inf", ["sim", *ONNX, "--tolerance", "inf"],
     ["--tolerance", "expected a finite number", "'inf'"]),
    ("sim-cost-threshold-negative", ["sim", *ONNX, "--cost-threshold", "-0.5"],
     ["--cost-threshold", "at least 0", "'-0.5'"]),
    ("sim-benefit-threshold-inf", ["sim", *ONNX, "--benefit-threshold", "inf"],
     ["--benefit-threshold", "expected a finite number", "'inf'"]),
    # -- sim: its outputs and inputs
    ("sim-trace-empty", ["sim", "--trace", ""], ["--trace ''", "file name is empty"]),
    ("sim-plot-ends-in-slash", ["sim", "--plot", "{d}/newdir/"],
     ["--plot", "newdir/ names a directory", "give a file name in it"]),
    ("sim-trace-unwritable", ["sim", "--trace", UNWRITABLE + "/t.json"],
     ["--trace", "cannot write in /proc", "another path"]),
    ("sim-report-json-unwritable", ["sim", *ONNX, "--report-json", UNWRITABLE],
     ["--report-json", "cannot write in /proc"]),
    ("sim-report-json-under-a-file", ["sim", *ONNX, "--report-json", "{d}/file/r.json"],
     ["--report-json", "file is a file, not a directory"]),
    ("sim-onnx-fifo", ["sim", "--onnx", "{d}/fifo"],
     ["--onnx", "fifo is a named pipe, not a regular file", "ONNX model"]),
    ("sim-onnx-dev-zero", ["sim", "--onnx", "/dev/zero"],
     ["--onnx /dev/zero is a character device", "save an ONNX model to a file"]),
    ("sim-onnx-directory", ["sim", "--onnx", "{d}/a-dir"],
     ["--onnx", "a-dir is a directory", "ONNX model"]),
    ("sim-constant-fifo", ["sim", *ONNX, "--constant", "w={d}/fifo"],
     ["--constant", "not a readable .npy", "named pipe"]),
    ("sim-calibration-fifo", ["sim", *ONNX, "--calibration", "{d}/fifo"],
     ["--calibration", "named pipe", ".npz"]),
    ("sim-calibration-missing", ["sim", *ONNX, "--calibration", "{d}/none.npz"],
     ["--calibration", "none.npz: no such file", ".npz"]),
    ("sim-calibration-an-npy", ["sim", *ONNX, "--calibration", "{d}/one.npy"],
     ["--calibration", "not a readable .npz", "one array", "numpy.savez"]),
    # -- chain
    ("chain-outputs-per-pass-zero", ["chain", "--outputs-per-pass", "0"],
     ["--outputs-per-pass", "positive integer", "'0'"]),
    ("chain-outputs-per-pass-negative", ["chain", "--outputs-per-pass", "-2"],
     ["--outputs-per-pass", "positive integer", "'-2'"]),
    ("chain-outputs-per-pass-word", ["chain", "--outputs-per-pass", "many"],
     ["--outputs-per-pass", "'many'"]),
    ("chain-outputs-per-pass-over-the-rows", ["chain", "--outputs-per-pass", "17"],
     ["--outputs-per-pass 17", "seed001 has 16 output rows", "at most 16"]),
    ("chain-weights-per-layer-count", ["chain", "--weights", "pass,pass,pass"],
     ["--weights pass,pass,pass", "3 kinds for the 2 layers", "one per layer"]),
    ("chain-strategy-per-layer-count", ["chain", "--example", "seed001-four", "--strategy",
                                        "baseline,fused_crop"],
     ["--strategy baseline,fused_crop", "2 kinds for the 3 layers", "seed001-four"]),
    # -- run (refused before the port is opened)
    ("run-demo-and-gemm", ["run", "--port", "{d}/fifo", "--demo", "mlp", "--gemm", "8x8x8"],
     ["--gemm", "not allowed with argument --demo"]),
    ("run-seed-with-demo", ["run", "--port", "{d}/fifo", "--seed", "1"],
     ["--seed does nothing for the demo network", "--gemm"]),
    # -- compile
    ("compile-out-empty", ["compile", "--gemm", "8x8x8", "--out", ""],
     ["--out ''", "file name is empty", "give a file name"]),
    ("compile-out-ends-in-slash", ["compile", "--gemm", "8x8x8", "--out", "{d}/newdir/"],
     ["--out", "newdir/ names a directory", "newdir/out"]),
    ("compile-out-dot", ["compile", "--gemm", "8x8x8", "--out", "{d}/."],
     ["--out", "names a directory"]),
    ("compile-out-unwritable", ["compile", "--gemm", "8x8x8", "--out", UNWRITABLE],
     ["--out", "cannot write in /proc", "another path"]),
    ("compile-out-device", ["compile", "--gemm", "8x8x8", "--out", "/dev/null"],
     ["--out /dev/null is a character device, not a regular file", "file name"]),
    ("compile-out-fifo", ["compile", "--gemm", "8x8x8", "--out", "{d}/fifo"],
     ["--out", "fifo is a named pipe"]),
    ("compile-out-name-too-long", ["compile", "--gemm", "8x8x8", "--out", "{d}/" + "x" * 300],
     ["--out", "the file name is 300 bytes long", "more than the 255", "shorter one"]),
    ("compile-plot-empty", ["compile", "--gemm", "8x8x8", "--plot", ""],
     ["--plot ''", "file name is empty"]),
    ("compile-out-is-also-trace", ["compile", "--gemm", "8x8x8", "--out", "{d}/x",
                                   "--trace", "{d}/x"],
     ["--trace", "x is also --out", "replace the other", "a file of its own"]),
    ("compile-plot-is-also-out", ["compile", "--gemm", "8x8x8", "--out", "{d}/x",
                                  "--plot", "{d}/../{n}/x"],
     ["--plot", "is also --out"]),
    ("compile-out-is-the-onnx-input", ["compile", "--onnx", "{d}/text.bin", "--out",
                                       "{d}/text.bin"],
     ["--out", "text.bin is also the input", "a file of its own"]),
    ("compile-onnx-fifo", ["compile", "--onnx", "{d}/fifo"], ["--onnx", "named pipe"]),
    # -- bench (refused before a minute of work)
    ("bench-out-unwritable", ["bench", "--out", UNWRITABLE + "/bench.json"],
     ["--out", "cannot write in /proc", "another path"]),
    ("bench-out-empty", ["bench", "--out", ""], ["--out ''", "file name is empty"]),
    ("bench-plots-is-a-file", ["bench", "--out", "{d}/b/bench.json"],
     ["--out", "plots into", "b/plots, which is a file", "move it away"]),
    ("bench-out-ends-in-slash", ["bench", "--out", "{d}/records/"],
     ["--out", "records/ names a directory"]),
    # -- library (refused before the measuring)
    ("library-out-unwritable", ["library", "--out", UNWRITABLE], ["--out", "cannot write"]),
    ("library-out-directory", ["library", "--out", "{d}/a-dir"],
     ["--out", "a-dir is a directory", "file name"]),
    ("library-out-empty", ["library", "--out", ""], ["--out ''", "file name is empty"]),
    # -- disasm
    ("disasm-fifo", ["disasm", "{d}/fifo"],
     ["fifo is a named pipe, not a regular file", "program image"]),
    ("disasm-dev-zero", ["disasm", "/dev/zero"],
     ["/dev/zero is a character device", "only files are read"]),
    ("disasm-too-large", ["disasm", "{d}/huge.bin"],
     ["huge.bin is 268,435,472 bytes", "more than the 256 MiB", "program image"]),
    ("disasm-empty-name", ["disasm", ""], ["file name is empty", "program image"]),
    # -- schedule
    ("schedule-fifo", ["schedule", "{d}/fifo"], ["fifo is a named pipe", "program text"]),
    ("schedule-dev-zero", ["schedule", "/dev/zero"], ["/dev/zero is a character device"]),
    ("schedule-too-large", ["schedule", "{d}/huge.stp"],
     ["huge.stp is 67,108,865 bytes", "more than the 64 MiB", "program text"]),
    ("schedule-trace-empty", ["schedule", "{d}/text.bin", "--trace", ""],
     ["--trace ''", "file name is empty"]),
    ("schedule-image-ends-in-slash", ["schedule", "{d}/text.bin", "--image", "{d}/img/"],
     ["--image", "img/ names a directory"]),
    ("schedule-image-is-the-program", ["schedule", "{d}/text.bin", "--image", "{d}/text.bin"],
     ["--image", "text.bin is also the input", "replace the other"]),
    ("schedule-trace-is-the-image", ["schedule", "{d}/text.bin", "--image", "{d}/p.bin",
                                     "--trace", "{d}/p.bin"],
     ["--trace", "p.bin is also --image"]),
    ("sim-report-json-is-the-onnx-input", ["sim", *ONNX, "--report-json", "{d}/text.bin"],
     ["--report-json", "text.bin is also the input"]),
    ("sim-trace-is-also-plot", ["sim", "--trace", "{d}/u.svg", "--plot", "{d}/u.svg"],
     ["--plot", "u.svg is also --trace"]),
    ("schedule-trace-unwritable", ["schedule", "{d}/text.bin", "--trace", UNWRITABLE],
     ["--trace", "cannot write in /proc"]),
    ("run-firmware-without-a-core", ["run", "--port", "{d}/fifo", "--board", "tangnano9k",
                                     "--firmware"],
     ["--firmware", "tangnano9k", "no management core", "leave out --firmware"]),
    # -- waveforms: the format by the file's suffix or --waves-format, never both apart
    ("sim-waves-file-of-no-known-suffix", ["sim", "--waves-file", "{d}/w.txt"],
     ["--waves-file", "w.txt", ".fst or .vcd", "--waves-format"]),
    ("sim-waves-file-suffix-against-its-format",
     ["sim", "--waves-file", "{d}/w.vcd", "--waves-format", "fst"],
     ["--waves-file", "w.vcd", "--waves-format is fst", "drop --waves-format"]),
    ("sim-onnx-with-waves-file", ["sim", *ONNX, "--waves-file", "{d}/w.vcd"],
     ["--waves-file does nothing with --onnx", "drop --waves-file"]),
    ("sim-onnx-with-waves-format", ["sim", *ONNX, "--waves-format", "vcd"],
     ["--waves-format does nothing with --onnx", "drop --waves-format"]),
    ("sim-waves-file-is-the-trace", ["sim", "--waves-file", "{d}/w.vcd", "--trace",
                                     "{d}/w.vcd"],
     ["--waves-file", "w.vcd is also --trace"]),
    ("sim-waves-file-unwritable", ["sim", "--waves-file", UNWRITABLE + ".vcd"],
     ["--waves-file", "cannot write in /proc"]),
    ("sim-waves-format-unknown", ["sim", "--waves-format", "ghw"],
     ["--waves-format", "invalid choice: 'ghw'", "fst", "vcd"]),
    # -- cache clean: which builds, said once
    ("cache-clean-negative-days", ["cache", "clean", "--older-than", "-1"],
     ["--older-than", "at least 0", "'-1'"]),
    ("cache-clean-days-not-a-number", ["cache", "clean", "--older-than", "week"],
     ["--older-than", "expected a finite number", "'week'"]),
    ("cache-clean-older-than-and-all", ["cache", "clean", "--older-than", "3", "--all"],
     ["--all", "not allowed with argument --older-than", "give only one of them"]),
    # -- library --core: the core's points need a chip with the core
    ("library-core-without-a-core", ["library", "--config", "tangnano9k", "--core"],
     ["--core", "chip tangnano9k has no management core", "--config tiny"]),
]


def catalogue() -> dict[str, int]:
    """This module's rows by area (``test_catalogue.py`` adds up every module's); the
    tables defined further down are looked up when it is called."""
    return {"command line": len(CLI_DOORS) + len(ENTRY_POINTS), "Python API": len(LIBRARY),
            "ONNX files": len(ONNX_DOORS)}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv, words",
                         sample([pytest.param(*row[1:], id=row[0]) for row in CLI_DOORS], 2))
def test_command_line_doors(argv, words, d, capsys):
    argv = [a.format(d=d, n=d.name) for a in argv]
    before = sorted(p.name for p in d.iterdir())
    assert_refused(*run_cli(argv, capsys), words)
    assert sorted(p.name for p in d.iterdir()) == before, "a refused command wrote a file"


# -- what is written ------------------------------------------------------------------------
def test_an_interrupted_write_leaves_the_old_file_and_no_other(tmp_path):
    out = tmp_path / "out.bin"
    out.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt), files.atomic_open(out, "wb") as f:
        f.write(b"half of the new")
        raise KeyboardInterrupt
    assert out.read_bytes() == b"old" and os.listdir(tmp_path) == ["out.bin"]


def test_ctrl_c_while_compile_writes_leaves_the_old_image(tmp_path, capsys, monkeypatch):
    out = tmp_path / "prog.bin"
    out.write_bytes(b"the image before")

    def interrupted(fd):
        raise KeyboardInterrupt
    monkeypatch.setattr(files.os, "fsync", interrupted)
    status, _, err = run_cli(["compile", "--gemm", "8x8x8", "--out", str(out)], capsys)
    assert status == cli.EXIT_INTERRUPTED and err == "systolica: interrupted\n"
    assert out.read_bytes() == b"the image before" and os.listdir(tmp_path) == ["prog.bin"]


def test_compile_out_makes_its_directories_and_writes_the_whole_image(tmp_path, capsys):
    out = tmp_path / "new" / "dir" / "prog.bin"
    status, _, _ = run_cli(["compile", "--gemm", "8x8x8", "--out", str(out)], capsys)
    assert status == 0
    image = image_file.unpack(out.read_bytes(), source=str(out), cfg=preset("tiny"))
    assert image.count > 0 and os.listdir(out.parent) == ["prog.bin"]
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_write_through_a_link_keeps_the_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    files.write_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_checking_an_output_leaves_nothing_behind(tmp_path):
    files.check_output(tmp_path / "a" / "b" / "out.json", "--out")
    assert os.listdir(tmp_path) == []


def test_a_name_as_long_as_the_file_system_takes_is_written(tmp_path):
    out = tmp_path / ("x" * 255)
    files.check_output(out, "--out")
    files.write_atomic(out, b"whole")
    assert os.listdir(tmp_path) == [out.name] and out.read_bytes() == b"whole"


@pytest.mark.timeout(30)
def test_a_fifo_is_refused_without_waiting_for_a_writer(d):
    """Opened non-blocking and checked on the descriptor: no reader thread is left
    waiting (the refusal comes back at once)."""
    done = []
    t = threading.Thread(target=lambda: done.append(pytest.raises(
        files.FileError, files.read_input, d / "fifo", "a program image")), daemon=True)
    t.start()
    t.join(5)
    assert done and "named pipe" in str(done[0].value)


# -- a function library given to the assigner (compiler/assignment/library.load) ------------
LIBRARY = [
    # (id, the file's content, or None for a named pipe; key words)
    ("library-empty-object", "{}", ["'chip'", "cannot be read", "systolica library --config"]),
    ("library-a-list", "[1, 2]", ["cannot be read", "make it again"]),
    ("library-not-json", "chip: tiny\n", ["cannot be read", "Expecting value"]),
    ("library-fingerprint-not-an-object",
     '{"chip": "tiny", "clock_hz": 1, "fingerprint": 3, "kinds": {}, "transfer": {}}',
     ["fingerprint is 3, not an object"]),
    ("library-fifo", None, ["no function library", "systolica library --config tiny"]),
    ("library-core-points-not-json", "core:{", ["core's function library", "cannot be read",
                                                "systolica library --core"]),
]


@pytest.mark.parametrize("content, words", [pytest.param(*row[1:], id=row[0])
                                            for row in LIBRARY])
def test_function_library_file(content, words, tmp_path, monkeypatch):
    path = tmp_path / "lib.json"
    if content is None:
        os.mkfifo(path)
    else:
        path.write_text(content)
    core = content.startswith("core:") if content else False
    if core:        # the core's points (library.CORE_DATA), merged with the chip's
        path.write_text(content[len("core:"):])
        monkeypatch.setattr(library, "CORE_DATA", path)
    with pytest.raises(CompileError) as e:
        library.load(preset("tiny"), None if core else path)
    assert_clear(str(e.value), [str(path)] + words)


# -- random command lines ------------------------------------------------------------------
class Reached(Exception):
    """The command got past its doors to the work (stubbed out here)."""


#: Per command: options and the values each may take, good and bad ({d}: the inputs).
PATHS = ["{d}/out.x", "{d}/out.x", "", "{d}/a-dir", "{d}/newdir/", "{d}/fifo", "/dev/null",
         UNWRITABLE, "{d}/file/x", "{d}/text.bin"]
#: the records' options (docs/records.md), on sim, compile and bench
RECORDS = {"--json": PATHS, "--csv": PATHS, "--clock-mhz": ["100", "0.5", "0", "-3", "x"],
           "--energy": ["{d}/file", "{d}/fifo", "/dev/zero", "{d}/none.toml"]}
OPTIONS = {
    "sim": {"--gemm": ["8x8x8", "0x4x4", "4x4"], "--demo": ["cnn", "mlp", "nope"],
            "--onnx": ["{d}/text.bin", "{d}/fifo", "/dev/zero", "{d}/none.onnx"],
            "--golden-only": None, "--waves": None, "--seed": ["0", "3", "-1", "x"],
            "--tolerance": ["0", "2.5", "-1", "nan"], "--assign": ["c=host", "c"],
            "--constant": ["w={d}/one.npy", "w={d}/fifo", "w"],
            "--calibration": ["{d}/one.npy", "{d}/fifo"],
            "--benefit-threshold": ["0.5", "inf"], "--cost-threshold": ["1", "-1"],
            "--trace": PATHS, "--plot": PATHS, "--report-json": PATHS,
            "--waves-file": ["{d}/w.vcd", "{d}/w.fst", "{d}/w.txt", *PATHS],
            "--waves-format": ["vcd", "fst", "lxt"], **RECORDS},
    "compile": {"--gemm": ["8x8x8", "1x1x0"], "--onnx": ["{d}/text.bin", "{d}/fifo"],
                "--seed": ["1", "-2"], "--int32": None, "--listing": None,
                "--out": PATHS, "--trace": PATHS, "--plot": PATHS,
                "--demo": ["cnn", "nope"], **RECORDS},
    "chain": {"--example": ["seed001", "bank-split", "x"],
              "--strategy": ["all", "baseline", "baseline,fused_crop", "a,b,c"],
              "--outputs-per-pass": ["4", "0", "-3", "99"],
              "--weights": ["pass", "stream,pass,pass"], "--no-share": None},
    "run": {"--port": ["{d}/fifo"], "--gemm": ["8x8x8"], "--demo": ["mlp"],
            "--seed": ["1"], "--board": ["ulx3s", "nope", "tangnano9k"], "--firmware": None},
    "bench": {"--out": PATHS, **RECORDS},
    "library": {"--out": PATHS},
    "schedule": {"FILE": ["{d}/text.bin", "{d}/fifo", "/dev/zero", "{d}/huge.stp"],
                 "--trace": PATHS, "--image": PATHS, "--insert-delays": None},
    "disasm": {"FILE": ["{d}/text.bin", "{d}/fifo", "/dev/zero", "{d}/huge.bin", ""]},
}


@st.composite
def command_lines(draw) -> list[str]:
    command = draw(st.sampled_from(sorted(OPTIONS)))
    argv = [command]
    for option, values in OPTIONS[command].items():
        if option != "FILE" and not draw(st.booleans()):
            continue
        if option != "FILE":
            argv.append(option)
        if values is not None:
            argv.append(draw(st.sampled_from(values)))
    return argv


@pytest.fixture
def stubbed_work(monkeypatch):
    """The long steps of every command raise Reached: only the doors run."""
    from systolica.app import bench_cases, board
    from systolica.compiler.assignment import calibrate, partition
    from systolica.compiler.frontend import stp

    def reached(*_, **__):
        raise Reached
    for owner, name in ((systolica.compiler, "compile_network"), (partition, "plan_model"),
                        (calibrate, "measure"), (bench_cases, "cases"),
                        (board, "run_on_port"), (stp, "compile_program")):
        monkeypatch.setattr(owner, name, reached)


@settings(database=None, derandomize=True, deadline=None, max_examples=examples(120),
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=command_lines())
def test_random_command_lines_are_refused_in_one_line_or_reach_the_work(
        argv, d, stubbed_work, capsys):
    """Any mix of options: one `systolica: error:` line and exit 2 (argparse's usage
    before it), or the work begins; never a traceback, and nothing written before
    the work."""
    argv = [a.format(d=d, n=d.name) for a in argv]
    before = sorted(p.name for p in d.iterdir())
    try:
        status, out, err = run_cli(argv, capsys)
    except Reached:
        capsys.readouterr()
    else:
        assert status == 2, (argv, status, out, err)
        assert_refused(status, out, err, [])
    assert sorted(p.name for p in d.iterdir()) == before, argv


# -- the other entry points ----------------------------------------------------------------
def _figures(d):
    from systolica.app import figures
    return figures.main([str(d / "fifo"), str(d / "figures.md")])


def _logic_depth(d):
    from systolica.app import logic_depth
    return logic_depth.main([str(d / "fifo")])


def _bitstream(d):
    from systolica.app import bitstream
    return bitstream.main(["--out", str(d / "file")])


def _deepbench_table(d):
    from systolica.app import deepbench
    return deepbench.main(["--table", "--records", str(d / "fifo")])


def _deepbench_both(d):
    from systolica.app import deepbench
    return deepbench.main(["--table", "--record-hand-rules"])


ENTRY_POINTS = [
    # (id, run(d) -> exit status, key words of the one error line)
    ("figures-bench-fifo", _figures, ["fifo is a named pipe", "bench's JSON file"]),
    ("logic-depth-netlist-fifo", _logic_depth, ["fifo is a named pipe", "netlist"]),
    ("bitstream-out-is-a-file", _bitstream, ["--out", "file is a file, not a directory"]),
    ("deepbench-records-fifo", _deepbench_table,
     ["deepbench: error:", "fifo is a named pipe", "bench's JSON file"]),
    ("deepbench-table-and-record", _deepbench_both,
     ["--record-hand-rules", "not allowed with argument --table"]),
]


@pytest.mark.parametrize("run, words", [pytest.param(*row[1:], id=row[0])
                                        for row in ENTRY_POINTS])
def test_other_entry_points(run, words, d, capsys):
    try:
        status = run(d)
    except SystemExit as exc:       # argparse's error
        status = exc.code
    out, err = capsys.readouterr()
    assert status == 2 and out == "", (status, out, err)
    assert_clear(err.strip().splitlines()[-1], words)


#: Run as a process: `compile --out` whose compile stalls, to be interrupted.
STALLED = """
import sys, time
from pathlib import Path
import systolica.compiler
from systolica.app import cli
def stall(*_, **__):
    Path(sys.argv[1]).write_text("")
    time.sleep(60)
systolica.compiler.compile_network = stall
sys.exit(cli.main(["compile", "--gemm", "8x8x8", "--out", sys.argv[2]]))
"""


@pytest.mark.timeout(60)
def test_ctrl_c_in_a_real_process_is_one_line_and_exit_130(tmp_path):
    out = tmp_path / "prog.bin"
    out.write_bytes(b"before")
    proc = subprocess.Popen([sys.executable, "-c", STALLED, str(tmp_path / "stalling"),
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    while not (tmp_path / "stalling").exists():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert (proc.returncode, stdout, stderr) == (130, "", "systolica: interrupted\n")
    assert out.read_bytes() == b"before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog.bin", "stalling"]


# -- options an ONNX model makes idle --------------------------------------------------------
@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    import onnx

    from systolica.models import onnx_zoo
    m = tmp_path_factory.mktemp("models")
    onnx.save(onnx_zoo.qdq_cnn(), str(m / "qdq.onnx"))
    np.savez(m / "cal.npz", x=np.zeros((2, 1, 3, 16, 16), np.float32))
    return m


ONNX_DOORS = [
    ("sim-calibration-for-a-quantised-model",
     ["sim", "--onnx", "{m}/qdq.onnx", "--golden-only", "--calibration", "{m}/cal.npz"],
     ["'qdq_cnn'", "quantised already", "--calibration", "for a float model", "drop them"]),
]


@pytest.mark.parametrize("argv, words", [pytest.param(*row[1:], id=row[0])
                                         for row in ONNX_DOORS])
def test_onnx_model_doors(argv, words, models, capsys):
    assert_refused(*run_cli([a.format(m=models) for a in argv], capsys), words)
