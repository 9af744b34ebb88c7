"""How far a long simulation has got, shown on stderr while it runs: a progress bar
with the time left on a terminal, else a plain line now and then, so that a log shows
the run going on and how long it has still to go.

The figures come from the harness (``rtlsim.run(..., progress=...)``): the cycles it
has simulated, a few times a second, and the cycles the program should take.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Display:
    """A :data:`systolica.sim.rtlsim.Progress` that shows what it is told:
    ``with Display("demo on chip tiny") as show: rtlsim.run(..., progress=show)``.

    On a terminal (``console.is_terminal``) a bar per job, its cycles and the time
    left, gone once the run ends; otherwise, a line on ``stream`` every
    ``every_s`` seconds of the run (none for a run shorter than that). ``title``
    names the run (e.g. ``"demo on tiny"``).
    """

    #: Seconds between two lines when stderr is not a terminal.
    EVERY_S = 30.0

    def __init__(self, title: str, *, console: Console | None = None,
                 stream: TextIO | None = None, every_s: float = EVERY_S):
        if not every_s > 0:
            raise ValueError(f"every_s must be a positive number of seconds, not {every_s!r}")
        self.title = title
        self.console = console or Console(stderr=True)
        self.stream = stream
        self.every_s = every_s
        self._bar: Progress | None = None
        self._tasks: dict[int, TaskID] = {}
        self._began = self._said = 0.0

    def __enter__(self) -> Display:
        self._began = self._said = time.monotonic()
        if self.console.is_terminal:
            self._bar = Progress(
                TextColumn("{task.description}"), BarColumn(bar_width=16),
                TextColumn("{task.completed:,}/{task.total:,} cycles"),
                TimeRemainingColumn(compact=True), TextColumn("left"),
                console=self.console, transient=True)
            self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __call__(self, index: int, name: str, cycles: int, expected: int) -> None:
        """The harness has simulated `cycles` of job `index` (`name`), which should
        take `expected`."""
        done = min(cycles, expected)
        if self._bar is not None:
            task = self._tasks.get(index)
            if task is None:
                task = self._tasks[index] = self._bar.add_task(
                    self.title + (f", job {index} ({name})" if index else ""),
                    total=max(expected, 1))
            self._bar.update(task, completed=done)
            return
        now = time.monotonic()
        if now - self._said < self.every_s:
            return
        self._said = now
        spent = now - self._began
        left = spent * (expected - done) / done if done else None
        line = (f"systolica: simulating {self.title}: {done:,} of {expected:,} cycles "
                f"({done / max(expected, 1):.0%}), {_duration(spent)} so far"
                + (f", about {_duration(left)} left" if left is not None else ""))
        print(line, file=self.stream or sys.stderr, flush=True)
