"""The README's examples run, so they cannot rot: its python blocks execute (they only
compile, which is fast; `make sim` stays out of here), its .stp blocks schedule, and
every option its command-line synopsis shows exists."""

from __future__ import annotations

import re

import pytest

from systolica.app import cli
from systolica.arch.config import preset
from systolica.compiler.frontend import stp, text

from paths import REPO

README = REPO / "README.md"


def blocks(language: str) -> list[str]:
    """The fenced blocks of README.md marked with `language`."""
    return re.findall(rf"^```{language}\n(.*?)^```$", README.read_text(), re.S | re.M)


def test_readme_has_the_examples_this_test_runs():
    assert len(blocks("python")) >= 1 and len(blocks("stp")) >= 1
    assert len(blocks("console")) >= 1


@pytest.mark.parametrize("source", blocks("python"))
def test_python_example_runs(source, capsys):
    exec(compile(source, f"{README}:python", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out.strip()


@pytest.mark.parametrize("source", blocks("stp"))
def test_program_text_example_schedules(source):
    cfg = preset("tiny")
    result = stp.compile_program(cfg, text.parse(source, f"{README.name}:stp"))
    assert result.rows(cfg)


def synopsis() -> list[list[str]]:
    """Each ``systolica ...`` line of the README's console blocks, as words."""
    return [line.split()[1:] for block in blocks("console") for line in block.splitlines()
            if line.startswith("systolica ")]


@pytest.mark.parametrize("words", synopsis(), ids=lambda w: " ".join(w[:1]))
def test_command_line_synopsis_matches_the_parser(words):
    check_command_line(words)


def check_command_line(words: list[str]) -> None:
    """`words` (a ``systolica`` line without its first word) name a command the CLI
    has, only options it takes, and each ``--option {a,b}`` list its choices in full."""
    top = cli.parser()
    parser = top
    if not words[0].startswith("--"):
        sub = next(a for a in top._actions if a.dest == "command")
        assert words[0] in sub.choices, f"no command {words[0]!r}"
        parser = sub.choices[words[0]]
        for word in words[1:2]:         # a command's own command (`cache clean`)
            inner = [a for a in parser._actions if a.choices and not a.option_strings
                     and word in a.choices]
            parser = inner[0].choices[word] if inner else parser
    known = {s for action in parser._actions for s in action.option_strings}
    shown = set(re.findall(r"--[a-z][a-z0-9-]*", " ".join(words)))
    assert shown <= known, shown - known
    choices = {action.option_strings[0]: sorted(action.choices) for action in parser._actions
               if action.option_strings and action.choices}
    for option, choice in re.findall(r"(--[a-z][a-z0-9-]*) \{([a-z0-9_,]+)\}", " ".join(words)):
        assert choice.split(",") == choices[option], option


@pytest.mark.parametrize("source", blocks("toml"))
def test_chip_file_example_loads(source):
    from systolica.arch import chipfile
    cfg = chipfile.loads(source, source=f"{README.name}:toml", stem="readme_chip")
    assert cfg.name == "readme_chip" and cfg != preset("tiny")
