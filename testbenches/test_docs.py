"""The Python blocks of docs/walkthrough.md run, in order, in one namespace: the
walk-through a newcomer follows cannot rot."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "walkthrough.md"


def test_walkthrough_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 4, "the walk-through lost its examples"
    namespace: dict = {}
    for k, block in enumerate(blocks):
        exec(compile(block, f"{DOC.name} block {k + 1}", "exec"), namespace)
