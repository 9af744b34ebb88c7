"""The package's import graph: absolute imports only, no cycles in the compiler or in
the chip facts, and ``isa`` (what everything encodes with) importing nothing of ours.
Imports inside ``if TYPE_CHECKING:`` are for the type checker and do not count."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

from paths import REPO

#: source folder -> the package it installs as (pyproject.toml's package-dir)
TREES = {"systolica": "systolica", "rtl": "systolica.rtl", "compiler": "systolica.compiler",
         "firmware": "systolica.firmware"}


def _modules() -> dict[str, Path]:
    out = {}
    for folder, package in TREES.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([package, *parts])] = path
    return out


MODULES = _modules()


@cache
def _imports(path: Path) -> list[ast.ImportFrom | ast.Import]:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


@cache
def _edges(module: str) -> frozenset[str]:
    out = set()
    for node in _imports(MODULES[module]):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in MODULES}
        elif node.module and node.module.startswith("systolica"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                out.add(full if full in MODULES else node.module)
    return frozenset(out & set(MODULES))


def _cycles(scope: str) -> list[list[str]]:
    """The strongly connected components of more than one module within `scope`."""
    graph = {m: {t for t in _edges(m) if t.startswith(scope)}
             for m in MODULES if m.startswith(scope)}
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("scope", ["systolica.compiler", "systolica.arch", "systolica"])
def test_no_import_cycles(scope):
    assert _cycles(scope) == [], f"import cycles in {scope}"


def test_isa_imports_nothing_of_ours():
    assert _edges("systolica.arch.isa") == set()


def test_every_import_of_ours_is_absolute():
    relative = [f"{MODULES[m].relative_to(REPO)}:{n.lineno}" for m in MODULES
                for n in _imports(MODULES[m]) if isinstance(n, ast.ImportFrom) and n.level]
    assert relative == []


def test_the_check_sees_a_cycle(tmp_path, monkeypatch):
    """A planted cycle is found (the check can fail)."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from systolica.compiler.b import x\n")
    b.write_text("if TYPE_CHECKING:\n    from systolica.compiler.c import y\n"
                 "from systolica.compiler.a import x\n")
    monkeypatch.setitem(MODULES, "systolica.compiler.a", a)
    monkeypatch.setitem(MODULES, "systolica.compiler.b", b)
    _edges.cache_clear()
    try:
        assert ["systolica.compiler.a", "systolica.compiler.b"] in _cycles("systolica.compiler")
    finally:
        _edges.cache_clear()
