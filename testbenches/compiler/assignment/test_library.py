"""The function library (docs/assignment.md, "The function library"): lookups
between and past the measured points, the files of the presets fresh, and a stale
library detected."""

from __future__ import annotations

import dataclasses
import json

import pytest

from systolica.arch.config import PRESETS, preset
from systolica.compiler.assignment import calibrate, library
from systolica.compiler.errors import CompileError


def test_lookups_interpolate_in_log_log_and_scale_past_the_last_point():
    pts = [(10.0, 1.0), (1000.0, 10.0)]
    assert library.interpolate(pts, 10) == 1.0
    assert library.interpolate(pts, 1) == 1.0            # below: the smallest's time
    assert library.interpolate(pts, 100) == pytest.approx(10 ** 0.5)
    assert library.interpolate(pts, 4000) == pytest.approx(40.0)


@pytest.mark.parametrize("chip", sorted(PRESETS))
def test_the_presets_libraries_are_fresh(chip):
    """A change to a chip's configuration or to the cycle model must come with its
    library measured again: systolica library --config <chip>."""
    cfg = preset(chip)
    lib = library.load(cfg)
    now = library.fingerprint(cfg)
    assert lib.fingerprint["chip"] == now["chip"], f"systolica library --config {chip}"
    assert lib.fingerprint["cycle_model"] == now["cycle_model"], \
        f"systolica library --config {chip}"
    for family in ("conv", "dense", "max_pool", "avg_pool", "add", "global_avg_pool", "move"):
        assert lib.kinds["chip"][family], family
    assert lib.kinds["host"]["Softmax"] and lib.transfer["chip"] and lib.transfer["host"]


def test_a_library_for_another_chip_is_refused(tmp_path):
    cfg = preset("tiny")
    path = tmp_path / "lib.json"
    raw = json.loads(library.path_for(cfg).read_text())
    raw["fingerprint"]["chip"] = "0" * 16
    path.write_text(json.dumps(raw))
    with pytest.raises(CompileError, match="stale.*configuration.*systolica library "
                                           "--config tiny"):
        library.load(cfg, path)


def test_another_cycle_model_or_host_is_noted(tmp_path):
    cfg = preset("tiny")
    path = tmp_path / "lib.json"
    raw = json.loads(library.path_for(cfg).read_text())
    raw["fingerprint"]["cycle_model"] = "0" * 16
    raw["fingerprint"]["host"] = "another machine"
    path.write_text(json.dumps(raw))
    notes = library.load(cfg, path).notes
    assert any("cycle model" in n for n in notes) and any("another machine" in n
                                                           for n in notes)


def test_a_missing_or_broken_library_says_how_to_make_it(tmp_path):
    cfg = preset("tiny")
    with pytest.raises(CompileError, match="no function library.*systolica library"):
        library.load(cfg, tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(CompileError, match="cannot be read.*systolica library"):
        library.load(cfg, tmp_path / "bad.json")


def test_chip_points_are_the_compilers_cycles():
    """A calibration kernel's time is its predicted cycles at the clock."""
    cfg = preset("tiny")
    graph, work = calibrate._dense(16, 64, 64)
    from systolica.compiler import compile_network
    cycles = compile_network(cfg, graph).predicted_cycles
    pts = calibrate.chip_points(cfg, 1e6, {"dense": [lambda: (graph, work)]})
    assert pts["dense"] == [(float(work), cycles / 1e6)]


def test_a_kernel_that_fits_no_chip_memory_is_left_out():
    small = dataclasses.replace(preset("tiny"), name="tiny_small")
    pts = calibrate.chip_points(small, 1e6, {"conv": [lambda: calibrate._conv(8, 16),
                                                      lambda: calibrate._conv(64, 64)]})
    assert len(pts["conv"]) == 1


@pytest.mark.rtl
def test_the_chip_points_are_the_rtls_cycles(tiny_build):
    """The library's chip times are the compiler's predictions; the calibration
    kernels on the Verilated chip take exactly those cycles."""
    from systolica.compiler import compile_network
    from systolica.sim import rtlsim
    from systolica.sim.jobs import RtlJob
    cfg = preset("tiny")
    lib = library.load(cfg)
    kernels = [calibrate._conv(8, 16), calibrate._dense(16, 64, 64),
               calibrate._max_pool(8, 16), calibrate._avg_pool(8, 16),
               calibrate._add(8, 16), calibrate._gap(4, 16)]
    families = ["conv", "dense", "max_pool", "avg_pool", "add", "global_avg_pool"]
    compiled = [compile_network(cfg, graph) for graph, _ in kernels]
    results = rtlsim.run(cfg, [RtlJob(c.loadable, readback=((0, 1),)) for c in compiled])
    for family, (_, work), c, res in zip(families, kernels, compiled, results):
        assert res.cycles == c.predicted_cycles, family
        assert (float(work), c.predicted_cycles / lib.clock_hz) in \
            [tuple(p) for p in lib.kinds["chip"][family]], family


def test_the_nearest_preset_shares_the_arrays_shape():
    assert calibrate.nearest_preset(preset("tiny").replace(name="x", dram_words=4096)) \
        == preset("tiny")
    assert calibrate.nearest_preset(preset("base").replace(name="y", imem_depth=1024)) \
        == preset("base")
    assert calibrate.nearest_preset(preset("tiny").replace(
        name="z", tile_rows=16, tile_cols=16, tile_size=1, general_lanes=False)) \
        == preset("tiny_16x16")


@pytest.mark.slow
def test_a_chip_without_a_library_file_is_measured_as_it_is_planned(tmp_path):
    """A chip file's chip: chip kinds from the compiler's cycle model (as `systolica
    library` measures them), host kinds from the nearest preset's library, a note
    saying so; measured once per chip in a process; a library file given is used."""
    cfg = preset("tiny").replace(name="mine", dram_words=8192, imem_depth=1024)
    lib = calibrate.library_for(cfg)
    near = library.load(preset("tiny"))
    assert lib.chip == "mine" and lib.fingerprint == {**library.fingerprint(cfg),
                                                      "host": near.fingerprint["host"]}
    dense = {"dense": calibrate.CHIP_KERNELS["dense"]}
    assert lib.kinds["chip"]["dense"] == calibrate.chip_points(
        cfg, library.NOMINAL_CLOCK_HZ, dense)["dense"]
    assert set(lib.kinds["chip"]) == set(near.kinds["chip"])
    assert lib.kinds["host"] == near.kinds["host"]
    assert lib.transfer == {"chip": calibrate.chip_transfer(cfg, library.NOMINAL_CLOCK_HZ),
                            "host": near.transfer["host"]}
    assert any("no function library file" in n and "preset tiny's" in n for n in lib.notes)
    again = calibrate.library_for(cfg)
    assert again.kinds is lib.kinds and again.notes == lib.notes
    library.save(lib, tmp_path / "mine.json")
    kept = calibrate.library_for(cfg, tmp_path / "mine.json")
    assert (kept.chip, kept.kinds["chip"], kept.notes) == ("mine", lib.kinds["chip"], [])
