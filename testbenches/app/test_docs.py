"""The documentation cannot rot unnoticed: the Python blocks of docs/walkthrough.md
run, in order, in one namespace; every ``systolica`` line of docs/cli.md uses options
the command line has; every relative link of README.md and docs/ leads to a file;
every file of the repository they name exists (but for the files the walk-through
says to add)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_readme import check_command_line

from systolica.app import figures

from paths import REPO

ROOT = REPO
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
#: files the walk-through's "Where to change things" names as ones to add
TO_ADD = {"compiler/lowering/softmax.py"}


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_walkthrough_python_blocks_run():
    doc = DOCS / "walkthrough.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)
    assert len(blocks) >= 4, "the walk-through lost its examples"
    namespace: dict = {}
    for k, block in enumerate(blocks):
        exec(compile(block, f"{doc.name} block {k + 1}", "exec"), namespace)


def cli_lines() -> list[list[str]]:
    text = (DOCS / "cli.md").read_text()
    return [line.split()[1:] for block in re.findall(r"^```console\n(.*?)^```$", text,
                                                      re.S | re.M)
            for line in block.splitlines() if line.startswith("systolica ")]


def test_cli_page_shows_every_command():
    from systolica.app import cli
    sub = next(a for a in cli.parser()._actions if a.dest == "command")
    assert {words[0] for words in cli_lines() if words} >= set(sub.choices)


@pytest.mark.parametrize("words", cli_lines(), ids=lambda w: " ".join(w[:1]))
def test_cli_page_synopsis_matches_the_parser(words):
    check_command_line(words)


def links(page: Path) -> list[str]:
    """The relative link targets of a page (no anchors, no web addresses)."""
    targets = re.findall(r"\]\(([^)\s]+)\)", page.read_text())
    return [t.split("#")[0] for t in targets
            if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_links_lead_to_files(page):
    missing = [t for t in links(page) if not (page.parent / t).exists()]
    assert not missing, f"{name(page)} links to {missing}"


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_named_files_exist(page):
    named = set(re.findall(r"`((?:rtl|compiler|systolica|testbenches|firmware|examples|docs)"
                           r"/[\w./-]+\.\w+)`", page.read_text()))
    missing = sorted(p for p in named - TO_ADD if not (ROOT / p).exists())
    assert not missing, f"{name(page)} names files that do not exist: {missing}"


def test_figures_page_says_how_it_is_made():
    text = (DOCS / "figures.md").read_text()
    assert text.startswith(figures.FIRST_LINE) or figures.COMMAND in text
