"""The command line as a user meets it: version, choices, round trips between its
commands, output cut short by the reader, and word of a long build when no terminal
shows a spinner. Bad arguments and files are in test_bad_inputs.py."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from systolica.app import bench_cases, cli
from systolica.arch import disasm, image_file, isa
from systolica.arch.config import PRESETS, preset
from systolica.compiler.frontend import stp
from systolica.sim import rtlsim, verilated

from paths import EXAMPLES


def run(argv, capsys) -> tuple[int, str, str]:
    try:
        status = cli.main(argv)
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


def test_version_comes_from_the_package_metadata(capsys):
    status, out, _ = run(["--version"], capsys)
    assert status == 0 and out.strip() == f"systolica {metadata.version('systolica')}"


@pytest.mark.parametrize("command", ["sim", "compile", "schedule", "chain"])
def test_config_lists_its_choices(command, capsys):
    status, out, _ = run([command, "--help"], capsys)
    assert status == 0 and f"--config {{{','.join(sorted(PRESETS))}}}" in out


def test_compile_then_disasm_round_trip(tmp_path, capsys):
    image = tmp_path / "out" / "g.bin"               # the directory is made for it
    status, out, _ = run(["compile", "--gemm", "8x16x8", "--out", str(image)], capsys)
    assert status == 0 and "instructions" in out and "cycles predicted" in out
    n = out.split()[0]
    words = image_file.unpack(image.read_bytes(), source="g.bin", cfg=preset("tiny")).words
    assert len(isa.from_bytes(words)) == int(n)
    status, listing, err = run(["disasm", str(image)], capsys)
    assert status == 0 and err == ""
    head, _, listing = listing.partition("\n")
    assert head.startswith(f"# {image}: chip tiny ({preset('tiny').program_key}), {n} instructions")
    assert listing == disasm.disassemble(words) + "\n"
    status, listed, _ = run(["compile", "--gemm", "8x16x8", "--listing"], capsys)
    code = "".join(line for line in listed.splitlines(keepends=True)
                   if not line.startswith("# "))
    assert status == 0 and code == listing
    # the split the cost model chose (here none: K = 16 fills a tile group's 4 rows)
    assert "# layer 'gemm_8x16x8': the whole array (not 2 groups: K = 16 > 4" in listed


def test_compile_an_onnx_model(tmp_path, capsys):
    """`compile --onnx` compiles what `sim --onnx` would run: the same program image
    (the model imported with the seed's random inputs), its listing and the predicted
    figures, and the trace and the plot."""
    import onnx

    from systolica.compiler import compile_network
    from systolica.compiler.frontend import onnx_import
    from systolica.models import onnx_zoo
    model, image = tmp_path / "inception.onnx", tmp_path / "inception.bin"
    onnx.save(onnx_zoo.inception(), model)
    trace, plot = tmp_path / "t.json", tmp_path / "p.svg"
    status, out, err = run(["compile", "--onnx", str(model), "--seed", "3", "--out",
                            str(image), "--trace", str(trace), "--plot", str(plot)], capsys)
    want = compile_network(preset("tiny"), onnx_import.load(str(model), seed=3))
    assert status == 0 and err == ""
    assert (f"{len(want.program)} instructions, {want.predicted_cycles} cycles predicted, "
            f"MAC utilisation {want.utilisation:.3f}") in out.splitlines()
    assert image.read_bytes() == want.loadable.to_file()
    assert trace.read_text().startswith(("{", "[")) and plot.read_text().startswith("<svg")
    assert f"{want.network.name} on chip tiny (predicted)" in plot.read_text()
    # another seed, other inputs: the same program, other data in DRAM
    other = compile_network(preset("tiny"), onnx_import.load(str(model), seed=4))
    assert other.image == want.image and not np.array_equal(other.dram, want.dram)
    status, listed, _ = run(["compile", "--onnx", str(model), "--listing"], capsys)
    code = [line for line in listed.splitlines() if not line.startswith("# ")]
    assert status == 0 and code == want.disassemble().splitlines()


@pytest.mark.parametrize("argv, words", [
    (["--gemm", "8x8x8", "--onnx", "m.onnx"], ["--onnx", "not allowed with", "--gemm"]),
    ([], ["one of the arguments --gemm --onnx --demo is required"]),
    (["--onnx", "{model}", "--int32"], ["--int32 is for --gemm", "drop --int32"]),
])
def test_compile_takes_a_gemm_or_a_model(argv, words, tmp_path, capsys):
    import onnx

    from systolica.models import onnx_zoo
    model = tmp_path / "m.onnx"
    onnx.save(onnx_zoo.inception(), model)
    status, out, err = run(["compile", *(a.format(model=model) for a in argv)], capsys)
    assert status == 2 and out == ""
    assert all(w in err.splitlines()[-1] for w in words), err


def test_compile_draws_the_predicted_unit_occupancy(tmp_path, capsys):
    plot = tmp_path / "plots" / "g.svg"
    status, out, _ = run(["compile", "--gemm", "64x16x8", "--plot", str(plot)], capsys)
    assert status == 0 and f"unit occupancy plot: {plot}" in out
    svg = plot.read_text()
    assert svg.startswith("<svg") and "gemm_64x16x8 on chip tiny (predicted)" in svg
    assert ">mm</text>" in svg and ">dma</text>" in svg


def test_compile_names_the_split_it_chose(capsys):
    status, out, _ = run(["compile", "--gemm", "64x3x4"], capsys)
    assert status == 0
    assert "layer 'gemm_64x3x4': split into 2 tile groups" in out


def test_compile_names_each_convolutions_mapping(tmp_path, capsys):
    """Each convolution's mapping onto the array, the matcher's or the static one."""
    import onnx

    from systolica.models import onnx_zoo
    model = tmp_path / "resnet.onnx"
    onnx.save(onnx_zoo.qdq_resnet(), model)
    for mode in ("matcher", "static"):
        status, out, _ = run(["compile", "--onnx", str(model), "--mapping", mode], capsys)
        assert status == 0
        assert "layer 'block1_conv1': rows (c8) cols (k8)" in out
        assert f"blocks ({mode})" in out and "mappings chosen in" in out


@pytest.mark.slow
def test_compile_of_a_long_program_names_its_dram_address(capsys):
    """A program longer than the instruction memory is fetched from DRAM: the user is
    told where to load it and what to write to PROG_ADDR."""
    from systolica.compiler import compile_network
    status, out, _ = run(["compile", "--gemm", "48x256x96", "--seed", "3"], capsys)
    compiled = compile_network(preset("tiny"), bench_cases.gemm_network(48, 256, 96, seed=3))
    assert status == 0 and len(compiled.program) > preset("tiny").imem_depth
    assert f"set PROG_ADDR to {compiled.prog_addr}" in out
    status, out, _ = run(["compile", "--gemm", "8x16x8"], capsys)
    assert status == 0 and "PROG_ADDR" not in out


def test_schedule_writes_the_chip_image(tmp_path, capsys):
    image = tmp_path / "g.bin"
    status, out, _ = run(["schedule", str(EXAMPLES / "gemm_tiny.stp"), "--image", str(image)],
                         capsys)
    assert status == 0 and "mm" in out
    expected = stp.compile_file(preset("tiny"), EXAMPLES / "gemm_tiny.stp").chip.image
    assert image_file.unpack(image.read_bytes(), source="g.bin", cfg=preset("tiny")).words \
        == expected


def test_program_text_with_a_byte_order_mark_is_read(tmp_path, capsys):
    source = tmp_path / "bom.stp"
    source.write_bytes(b"\xef\xbb\xbf" + (EXAMPLES / "seed_table1.stp").read_bytes())
    status, out, err = run(["schedule", str(source)], capsys)
    assert status == 0 and err == "" and "add0" in out


@pytest.mark.slow
def test_output_piped_into_head_ends_quietly(tmp_path):
    """The reader stops after one line; the rest goes nowhere, with no traceback, and
    the exit status is that of a process ended by SIGPIPE."""
    word = isa.encode(isa.Instr(isa.Opcode.DMA, 5, dict(kind=0, dram_addr=1, dram_stride=1,
                                                        buf_addr=2, rows=3)))
    words = isa.to_bytes([word] * 20000)                   # ~1.5 MB of text
    (tmp_path / "big.bin").write_bytes(image_file.pack(preset("tiny"), words))
    script = (f"{sys.executable} -m systolica.app.cli disasm big.bin | head -2; "
              f"echo ${{PIPESTATUS[0]}} > status")
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.stderr == ""
    assert proc.stdout.splitlines()[1:] == [f"{0:5d} {disasm.disassemble_one(isa.decode(word))}"]
    assert (tmp_path / "status").read_text().strip() == str(cli.EXIT_BROKEN_PIPE)


def test_console_script_reports_an_error_in_one_line():
    script = Path(sys.executable).parent / "systolica"
    proc = subprocess.run([str(script), "compile", "--gemm", "0x4x4"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines()[-1].startswith("systolica: error: argument --gemm: ")
    assert "Traceback" not in proc.stderr


def test_a_slow_build_says_so_without_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr(cli, "BUILD_NOTICE_SECONDS", 0.05)
    monkeypatch.setattr(verilated, "cached", lambda design: None)   # not built yet
    monkeypatch.setattr(rtlsim, "build",
                        lambda cfg, waves=False, harness="cocotb": time.sleep(0.5))
    cli._ensure_built(preset("tiny"))
    first, second = capsys.readouterr().err.splitlines()
    assert first.startswith("systolica: building the Verilated tiny chip into ")
    assert re.fullmatch(r"systolica: \.\.\. done in \d+ s", second)


def test_a_quick_build_says_nothing(monkeypatch, capsys):
    monkeypatch.setattr(rtlsim, "build", lambda cfg, waves=False, harness="cocotb": None)
    cli._ensure_built(preset("tiny"))
    time.sleep(0.1)
    assert capsys.readouterr().err == ""


def test_sim_checks_the_network_before_building(monkeypatch, capsys):
    """An argument error in `sim` comes before the minutes-long build, not after."""
    built = []
    monkeypatch.setattr(rtlsim, "build",
                        lambda cfg, waves=False, harness="cocotb": built.append(cfg))
    status, _, err = run(["sim", "--gemm", "8x3500x8"], capsys)
    assert status == 2 and built == [] and "imem_depth" in err


def test_chain_checks_the_chain_before_building(monkeypatch, capsys):
    """A pass smaller than the halo is refused, with what to do, before the build."""
    built = []
    monkeypatch.setattr(rtlsim, "build",
                        lambda cfg, waves=False, harness="cocotb": built.append(cfg))
    status, _, err = run(["chain", "--strategy", "crop_fetch", "--outputs-per-pass", "1"],
                         capsys)
    assert status == 2 and built == [] and "more outputs per pass" in err


def test_chain_takes_a_strategy_per_layer(monkeypatch, capsys):
    """`--strategy` names one per layer, comma-separated; a wrong name or count is
    refused before the build."""
    built = []
    monkeypatch.setattr(rtlsim, "build",
                        lambda cfg, waves=False, harness="cocotb": built.append(cfg))
    status, _, err = run(["chain", "--strategy", "crop_fetch,fused"], capsys)
    assert status == 2 and "fused: not one of baseline, crop_fetch, fused_crop" in err
    status, _, err = run(["chain", "--strategy", "fused_crop,crop_fetch,baseline"], capsys)
    assert status == 2 and built == [] and "3 kinds for the 2 layers" in err


def test_interrupt_ends_with_one_line(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "cmd_disasm", interrupted)
    status, _, err = run(["disasm", "x.bin"], capsys)
    assert status == 130 and err == "systolica: interrupted\n"


def test_cache_lists_each_build_and_cleans_them(tmp_path, monkeypatch, capsys):
    """`systolica cache` shows where the cache is and each build (design, harness,
    waves, size, last use); `cache clean` removes what it is asked to and says so."""
    from test_cache import fake_build
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    root = tmp_path / "verilated"
    fake_build(root, "chip-tiny-ab", "1" * 16, days_ago=0.1, size=3_000_000,
               info={"label": "chip-tiny-ab", "harness": "cocotb", "waves": None})
    fake_build(root, "chip-tiny-ab-vcd", "2" * 16, days_ago=8, size=4_000_000,
               info={"label": "chip-tiny-ab", "harness": "cocotb", "waves": "vcd"})
    (root / ".objcache").mkdir()
    (root / ".objcache" / "verilated.o").write_bytes(b"\0" * 500)
    status, out, _ = run(["cache"], capsys)
    head, columns, *rows = out.splitlines()
    assert status == 0 and head == (f"cache {root} (set SYSTOLICA_CACHE to move it): "
                                    f"2 builds, 7.0 MB, and 500 B of runtime objects "
                                    f"they share")
    assert columns.split() == ["design", "harness", "waves", "size", "last", "used", "build"]
    assert [row.split() for row in rows] == [
        ["chip-tiny-ab", "cocotb", "-", "3.0", "MB", "2", "h", "ago", f"chip-tiny-ab/{'1' * 16}"],
        ["chip-tiny-ab", "cocotb", "vcd", "4.0", "MB", "8", "days", "ago",
         f"chip-tiny-ab-vcd/{'2' * 16}"]]

    status, out, _ = run(["cache", "clean", "--older-than", "7"], capsys)
    assert status == 0 and out.startswith(f"cache {root}: removed 1 build (the builds "
                                          f"unused for 7 days), 4.0 MB freed")
    status, out, _ = run(["cache", "clean"], capsys)
    assert status == 0 and "removed 0 builds (the unfinished builds)" in out \
        and "--older-than DAYS" in out
    status, out, _ = run(["cache", "clean", "--all"], capsys)
    assert status == 0 and "removed 1 build (every build), 3.0 MB freed" in out
    status, out, _ = run(["cache"], capsys)
    assert out == f"cache {root} (set SYSTOLICA_CACHE to move it): 0 builds, 0 B\n"


def _vcd(path: Path) -> tuple[dict[str, str], list[int]]:
    """A VCD file's signals of the top (name -> identifier code) and its times."""
    names, times, scopes, header = {}, [], [], True
    for line in path.read_text().splitlines():
        words = line.split()
        if header and words[:1] == ["$scope"]:
            scopes.append(words[2])
        elif header and words[:1] == ["$upscope"]:
            scopes.pop()
        elif header and words[:1] == ["$var"] and scopes == ["sim_top"]:
            names[words[4]] = words[3]
        elif words[:1] == ["$enddefinitions"]:
            header = False
        elif not header and line.startswith("#"):
            times.append(int(line[1:]))
    return names, times


@pytest.mark.rtl
def test_sim_writes_a_vcd_where_it_is_told_and_says_where(tmp_path, capsys):
    """`sim --waves-file x.vcd`: a VCD (its own build of the chip) at that path, named
    in the report, that a viewer can read: the top's ports declared, the clock
    toggling, time going forward. On the smallest chip: a build of its own (about 20
    CPU seconds) that runs a few hundred cycles."""
    waves = tmp_path / "w" / "x.vcd"
    status, out, _ = run(["sim", "--config", "tangnano9k", "--gemm", "4x4x4",
                          "--waves-file", str(waves), "--trace", str(tmp_path / "t.json"),
                          "--plot", str(tmp_path / "u.svg")], capsys)
    assert status == 0 and f"waveform: {waves} (open it with `gtkwave {waves}`" in out
    assert waves.read_text().startswith("$version Generated by VerilatedVcd")
    names, times = _vcd(waves)
    assert {"clk", "rst", "irq", "reg_addr", "reg_wdata"} <= set(names)
    assert times == sorted(times) and len(times) > 100
    clock = names["clk"]
    assert sum(line in (f"0{clock}", f"1{clock}")
               for line in waves.read_text().splitlines()) > 100
