"""The one builder of Verilated designs (systolica.sim.verilated): what its cache key
covers, that it is found without generating Verilog, that one build serves every
process, and that a test must be marked ``rtl`` to build at all."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path

import pytest

from systolica.arch.config import preset
from systolica.sim import rtlsim, verilated

from block_runner import OPT_VARIABLES, Block, build
from paths import REPO


def _never() -> str:
    raise AssertionError("the Verilog was generated although only the key was needed")


def design(**changes) -> verilated.Design:
    fields = dict(top="top", label="probe", verilog=_never, generator=("systolica.rtl.vpu",),
                  params="cfg=1")
    return verilated.Design(**{**fields, **changes})


def test_key_is_computed_without_generating_verilog():
    assert verilated.digest(design()) == verilated.digest(design())
    assert verilated.digest(rtlsim.design(preset("tiny"))) \
        == verilated.digest(rtlsim.design(preset("tiny")))


@pytest.mark.parametrize("change", [
    dict(top="other"), dict(params="cfg=2"), dict(generator=("systolica.rtl.dma",)),
    dict(parameters={"WORDS": 4}), dict(build_args=("-Wno-fatal",)),
    dict(make_variables={"OPT_FAST": "-O0"}), dict(waves=True),
], ids=lambda change: next(iter(change)))
def test_every_input_is_in_the_key(change):
    assert verilated.digest(design(**change)) != verilated.digest(design())


def test_label_and_generator_function_are_not():
    assert verilated.digest(design(label="x", verilog=lambda: "")) == verilated.digest(design())


def test_hand_written_sources_are_in_the_key(tmp_path):
    top = tmp_path / "top.v"
    top.write_text("module top; endmodule\n")
    before = verilated.digest(design(sources=(top,)))
    top.write_text("module top; wire w; endmodule\n")
    assert verilated.digest(design(sources=(top,))) != before


def test_chip_key_follows_configuration_and_waves():
    tiny, base = preset("tiny"), preset("base")
    keys = {verilated.digest(rtlsim.design(cfg, waves))
            for cfg in (tiny, base, tiny.replace(config_update_interval=2))
            for waves in (False, True)}
    assert len(keys) == 6


def test_a_vcd_build_is_its_own_and_fst_is_the_default():
    tiny = preset("tiny")
    fst, vcd = rtlsim.design(tiny, "fst"), rtlsim.design(tiny, "vcd")
    assert verilated.digest(rtlsim.design(tiny, True)) == verilated.digest(fst)
    assert len({verilated.digest(d) for d in (rtlsim.design(tiny), fst, vcd)}) == 3
    assert [verilated.family(d) for d in (rtlsim.design(tiny), fst, vcd)] \
        == [f"chip-{tiny.key}", f"chip-{tiny.key}-waves", f"chip-{tiny.key}-vcd"]
    assert "--trace-fst" not in verilated._build_args(vcd)
    # the format of a build that writes no waveform is no input of it
    assert verilated.digest(design(wave_format="vcd")) == verilated.digest(design())
    assert verilated.digest(design(waves=True, wave_format="vcd")) \
        != verilated.digest(design(waves=True))


@pytest.mark.parametrize("variable", verilated.COMPILER_ENV)
def test_the_cxx_compiler_and_its_flags_are_in_the_key(variable, monkeypatch):
    before = verilated.digest(design())
    monkeypatch.setenv(variable, "-DSOMETHING")
    assert verilated.digest(design()) != before
    monkeypatch.delenv(variable)
    assert verilated.digest(design()) == before
    monkeypatch.setattr(verilated, "CXX", "no-such-compiler")
    verilated._compiler_identity.cache_clear()
    assert verilated.digest(design()) != before
    verilated._compiler_identity.cache_clear()


def test_tool_versions_are_in_the_key_and_cocotb_s_place_only_where_it_is_linked(
        monkeypatch):
    cocotb_run, own_main = verilated._tool_versions(), verilated._tool_versions(False)
    assert '"verilator": ' in cocotb_run and '"cocotb at": ' in cocotb_run
    assert '"verilator": ' in own_main and "cocotb at" not in own_main
    before = verilated.digest(design())
    monkeypatch.setattr(verilated, "_tool_versions",
                        lambda cocotb_linked=True: '{"verilator": "0.0"}')
    assert verilated.digest(design()) != before


def test_the_cache_is_where_the_environment_says(monkeypatch, tmp_path):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path / "mine"))
    assert verilated.builds_root() == tmp_path / "mine" / "verilated"
    assert verilated.directory(design()).parent == tmp_path / "mine" / "verilated" / "probe"
    monkeypatch.delenv("SYSTOLICA_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert verilated.cache_root() == tmp_path / "xdg" / "systolica"
    assert verilated.cached(design()) is None     # nothing built there: no Verilog made


def test_source_closure_follows_imports_within_the_package():
    vpu = verilated.source_closure(("systolica.rtl.vpu",))
    assert {"systolica.rtl.vpu", "systolica.rtl.matmul", "systolica.rtl.array",
            "systolica.arch.config", "systolica.arch.isa", "systolica.arch.timing",
            "systolica.rtl", "systolica.arch", "systolica"} <= set(vpu)
    assert "systolica.rtl.dma" not in vpu and "systolica.rtl.chip" not in vpu
    chip = verilated.source_closure(("systolica.rtl.verilog",))
    rtl_modules = {f"systolica.rtl.{p.stem}" for p in (REPO / "rtl").glob("*.py")
                   if p.stem != "__init__"}
    assert rtl_modules <= set(chip)
    assert not any(m.startswith(("systolica.compiler", "systolica.app", "systolica.sim"))
                   or m == "systolica.golden" for m in chip)


def test_source_closure_sees_a_change_two_imports_away(tmp_path, monkeypatch):
    pkg = tmp_path / "closure_probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "top.py").write_text("from . import middle\n")
    (pkg / "middle.py").write_text("from closure_probe.bottom import VALUE\n")
    (pkg / "bottom.py").write_text("VALUE = 1\n")
    (pkg / "unrelated.py").write_text("VALUE = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "closure_probe", raising=False)

    def key():
        verilated._source_digest.cache_clear()
        return verilated.digest(design(generator=("closure_probe.top",)))

    assert set(verilated.source_closure(("closure_probe.top",))) \
        == {"closure_probe", "closure_probe.top", "closure_probe.middle",
            "closure_probe.bottom"}
    before = key()
    (pkg / "unrelated.py").write_text("VALUE = 3\n")
    assert key() == before
    (pkg / "bottom.py").write_text("VALUE = 4\n")
    assert key() != before
    verilated._source_digest.cache_clear()


def test_a_generator_without_source_is_refused():
    with pytest.raises(verilated.BuildError, match="'no.such.module' has no Python source"):
        verilated.digest(design(generator=("no.such.module",)))


def test_component_factory_must_be_a_partial_of_the_class():
    from systolica.rtl.vpu import VectorUnit
    with pytest.raises(TypeError, match=r"functools.partial\(<component class>"):
        verilated.component("vpu", lambda: VectorUnit(preset("tiny")))
    tiny = verilated.component("vpu", partial(VectorUnit, cfg=preset("tiny")))
    base = verilated.component("vpu", partial(VectorUnit, cfg=preset("base")))
    assert tiny.generator == ("systolica.rtl.vpu",)
    assert verilated.digest(tiny) != verilated.digest(base)


def test_a_test_not_marked_rtl_cannot_build():
    with pytest.raises(AssertionError, match="is not marked rtl"):
        rtlsim.build(preset("tiny"))


# -- with Verilator ---------------------------------------------------------------------

def _cell() -> Block:
    from systolica.rtl.array import Cell
    return Block(name="cell", factory=partial(Cell), tb="tb_cell", cases={"x": ("x",)})


@pytest.mark.rtl
def test_another_process_reuses_the_build_without_generating_verilog():
    """A fresh process finds the build by its inputs alone: a design whose Verilog
    cannot be generated still gets the directory built before (the cell block's, the
    one the block tests use)."""
    out = build(_cell())
    script = textwrap.dedent(f"""
        import dataclasses, json, sys
        from functools import partial
        from systolica.rtl.array import Cell
        from systolica.sim import verilated
        def boom():
            raise SystemExit("generated the Verilog")
        d = verilated.component("cell", partial(Cell), label="block-cell",
                                make_variables={OPT_VARIABLES!r})
        print(json.dumps(str(verilated.build(dataclasses.replace(d, verilog=boom)))))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert Path(json.loads(done.stdout.splitlines()[-1])) == out
    assert (out / "build.stamp").read_text() == verilated.digest(_cell().design)


@pytest.mark.rtl
def test_a_failed_build_names_the_design_and_shows_the_log(tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path))
    broken = dataclasses.replace(_cell().design, verilog=lambda: "module cell(; endmodule\n",
                                 params="deliberately broken Verilog")
    with pytest.raises(verilated.BuildError, match=r"(?s)Verilator build of block-cell "
                                                   r"failed.*build\.log ends:.*%Error"):
        verilated.build(broken)
    out = tmp_path / "verilated" / "block-cell" / verilated.digest(broken)[:16]
    assert (out / "build.log").exists() and not (out / "build.stamp").exists()
    (out / "build.log").unlink()
    with pytest.raises(verilated.BuildError, match="Verilator build of block-cell failed"):
        verilated.build(broken)     # the same error, without building again
    assert not (out / "build.log").exists()
