"""The shared compile of Verilator's runtime (systolica.sim.objcache), with a stand-in
compiler that logs each call: an object is reused only while its command, source and
headers are unchanged, and the design's own C++ is always compiled."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from systolica.sim import objcache

#: Writes "<source text>|<header text>|<args>" as the object and a make dependency
#: file listing the header, as ``g++ -MMD`` would; appends its call to $CALLS.
FAKE_CXX = textwrap.dedent("""\
    import os, sys
    from pathlib import Path
    args = sys.argv[1:]
    src = Path(next(a for a in args if a.endswith(".cpp")))
    out = Path(args[args.index("-o") + 1])
    header = src.with_name("lib.h")
    out.write_text(src.read_text() + "|" + header.read_text() + "|" + " ".join(args))
    out.with_suffix(".d").write_text(f"{out}: {src} \\\\\\n {header}\\n")
    with open(os.environ["CALLS"], "a") as f:
        f.write(src.name + "\\n")
    """)


@pytest.fixture
def setup(tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "runtime.cpp").write_text("runtime v1")
    (lib / "lib.h").write_text("header v1")
    cxx = tmp_path / "cxx"
    cxx.write_text(f"#!{sys.executable}\n" + FAKE_CXX)
    cxx.chmod(0o755)
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    (tmp_path / "calls").write_text("")
    return tmp_path, lib, cxx


def compile_in(build: Path, cache: Path, cxx: Path, source: Path, *flags: str) -> str:
    build.mkdir(exist_ok=True)
    here = os.getcwd()
    os.chdir(build)
    try:
        code = objcache.main([str(cache), str(cxx), *flags, "-c", "-o", "runtime.o",
                              str(source)])
    finally:
        os.chdir(here)
    assert code == 0
    assert (build / "runtime.d").exists()
    return (build / "runtime.o").read_text()


def calls(tmp_path: Path) -> int:
    return len((tmp_path / "calls").read_text().split())


def test_a_second_build_reuses_the_runtime_object(setup):
    tmp, lib, cxx = setup
    cache = tmp / "cache"
    first = compile_in(tmp / "a", cache, cxx, lib / "runtime.cpp", "-Os")
    again = compile_in(tmp / "b", cache, cxx, lib / "runtime.cpp", "-Os")
    assert again == first and calls(tmp) == 1


@pytest.mark.parametrize("change", ["source", "header", "flags"])
def test_a_changed_input_compiles_again(setup, change):
    tmp, lib, cxx = setup
    cache = tmp / "cache"
    compile_in(tmp / "a", cache, cxx, lib / "runtime.cpp", "-Os")
    flags = ["-Os"]
    if change == "flags":
        flags = ["-O1"]
    else:
        (lib / ("runtime.cpp" if change == "source" else "lib.h")).write_text(f"{change} v2")
    obj = compile_in(tmp / "b", cache, cxx, lib / "runtime.cpp", *flags)
    assert calls(tmp) == 2
    assert (f"{change} v2" if change != "flags" else "-O1") in obj


def test_the_designs_own_code_is_never_cached(setup):
    tmp, lib, cxx = setup
    cache = tmp / "cache"
    for build in ("a", "b"):
        (tmp / build).mkdir()
        own = tmp / build / "runtime.cpp"
        own.write_text("design")
        (tmp / build / "lib.h").write_text("h")
        compile_in(tmp / build, cache, cxx, own, "-Os")
    assert calls(tmp) == 2
    assert not cache.exists() or not any(cache.iterdir())
