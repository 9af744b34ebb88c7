"""Two commands building the same design at once share one build, and a build killed
midway is done again, not trusted (systolica.sim.verilated: a lock around build and
stamp, the stamp written last and atomically).

The design is a four-bit counter with its own C++ ``main`` (no cocotb): the cheapest
thing Verilator builds. Its build root is a fresh directory whose runtime-object cache
is the shared one, so only the counter's own C++ is compiled.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from systolica.sim import verilated

#: Run in a process of its own: build the counter; print the build directory.
SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from systolica.sim import verilated

    HERE = Path(sys.argv[1])
    MODE = sys.argv[2]

    def verilog():
        with open(HERE / "generated.log", "a") as f:
            f.write(f"{os.getpid()} {MODE}\\n")
        if MODE == "stall":             # holds the lock until killed
            (HERE / "stalling").write_text("")
            time.sleep(600)
        return ("module counter(input wire clk, output reg [3:0] q);\\n"
                "  always @(posedge clk) q <= q + 4'd1;\\n"
                "endmodule\\n")

    design = verilated.Design(
        top="counter", label="probe-counter", verilog=verilog,
        generator=("systolica.sim.verilated",), params=f"sharing probe {HERE}",
        main=HERE / "main.cpp", public="top",
        make_variables={"OPT_FAST": "-O0", "OPT_SLOW": "-O0", "OPT_GLOBAL": "-O0"})
    print(json.dumps(str(verilated.build(design))))
""")

MAIN = textwrap.dedent("""
    #include "Vtop.h"
    #include "verilated.h"
    int main(int argc, char **argv) {
        VerilatedContext ctx;
        ctx.commandArgs(argc, argv);
        Vtop top{&ctx};
        for (int i = 0; i < 10; i++) { top.clk = i & 1; top.eval(); }
        top.final();
        return top.q == 5 ? 0 : 1;
    }
""")


def _start(here: Path, mode: str) -> subprocess.Popen:
    env = {**os.environ, "SYSTOLICA_CACHE": str(here / "build")}
    return subprocess.Popen([sys.executable, here / "build_probe.py", str(here), mode],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _generated(here: Path) -> list[str]:
    log = here / "generated.log"
    return log.read_text().split("\n")[:-1] if log.exists() else []


@pytest.mark.rtl
@pytest.mark.timeout(300)
def test_concurrent_builds_share_one_and_a_killed_build_is_redone(tmp_path):
    here = tmp_path
    (here / "build_probe.py").write_text(SCRIPT)
    (here / "main.cpp").write_text(MAIN)
    shared = verilated.builds_root().resolve() / ".objcache"
    shared.mkdir(parents=True, exist_ok=True)
    (here / "build" / "verilated").mkdir(parents=True)
    (here / "build" / "verilated" / ".objcache").symlink_to(shared)

    first = _start(here, "stall")           # takes the lock, then is killed in the build
    deadline = time.monotonic() + 120
    while not (here / "stalling").exists():
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "the first build never started"
        time.sleep(0.05)
    second = _start(here, "build")          # the same design: waits for the lock
    time.sleep(1.0)
    assert second.poll() is None, "the second build did not wait for the first"
    assert [line.split()[1] for line in _generated(here)] == ["stall"]
    first.send_signal(signal.SIGKILL)
    first.communicate()

    out, err = second.communicate(timeout=240)
    assert second.returncode == 0, err
    built = Path(json.loads(out.splitlines()[-1]))
    # the killed build left no stamp, so the second did it again, whole
    assert [line.split()[1] for line in _generated(here)] == ["stall", "build"]
    assert (built / "build.stamp").exists()
    assert not [p for p in built.iterdir() if p.name.endswith(".tmp")]
    assert subprocess.run([built / "sim_build" / "counter"], timeout=30).returncode == 0

    third = _start(here, "build")           # a later command reuses it, building nothing
    out, err = third.communicate(timeout=120)
    assert third.returncode == 0, err
    assert Path(json.loads(out.splitlines()[-1])) == built
    assert len(_generated(here)) == 2


def test_a_stale_build_in_use_by_another_process_is_not_pruned(tmp_path):
    """Old builds of a family are deleted when a new one is made, but not one whose
    lock is held (a process building or checking it now)."""
    family = tmp_path / "family"
    new, old = family / "new", family / "old"
    for d in (new, old):
        (d / "sim_build").mkdir(parents=True)
        (d / "build.stamp").write_text("key")
    long_ago = time.time() - verilated.STALE_BUILD_SECONDS - 60
    for p in (old, old / "build.stamp"):
        os.utime(p, (long_ago, long_ago))
    with verilated.locked(old / ".lock"):
        os.utime(old, (long_ago, long_ago))
        verilated._prune(family, keep=new)
        assert old.exists()
    verilated._prune(family, keep=new)
    assert not old.exists() and new.exists()
