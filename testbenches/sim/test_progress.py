"""How far a long simulation has got (systolica.sim.progress): a bar on a terminal, a
line now and then in a log, nothing for a run too short to need it."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from systolica.sim import progress


class Clock:
    """time.monotonic, moved by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    return clock


def plain() -> Console:
    return Console(file=io.StringIO(), force_terminal=False)


def test_a_log_gets_a_line_now_and_then_with_the_time_left(clock):
    out = io.StringIO()
    with progress.Display("net on tiny", console=plain(), stream=out,
                          every_s=30) as show:
        clock.now += 10
        show(0, "net", 1_000, 4_000)          # too soon for a line
        clock.now += 50
        show(0, "net", 2_000, 4_000)          # a minute in, half done
        clock.now += 5
        show(0, "net", 2_500, 4_000)          # too soon after the last line
        clock.now += 3600
        show(0, "net", 9_000, 4_000)          # past the prediction: said as done
    assert out.getvalue().splitlines() == [
        "systolica: simulating net on tiny: 2,000 of 4,000 cycles (50%), 1:00 so far, about "
        "1:00 left",
        "systolica: simulating net on tiny: 4,000 of 4,000 cycles (100%), 1:01:05 so far, "
        "about 0:00 left"]


def test_a_short_run_says_nothing(clock):
    out = io.StringIO()
    with progress.Display("net", console=plain(), stream=out) as show:
        clock.now += progress.Display.EVERY_S / 2
        show(0, "net", 10, 10)
    assert out.getvalue() == ""


def test_a_terminal_gets_a_bar_that_goes_when_the_run_ends():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80)
    with progress.Display("net on tiny", console=console) as show:
        show(0, "net", 1_234, 5_000)
        bar = show._bar
        task, = bar.tasks
        assert (task.description, task.completed, task.total) \
            == ("net on tiny", 1_234, 5_000)
        bar.refresh()
        assert "1,234/5,000 cycles" in out.getvalue()
    assert show._bar is None and bar.live.transient


def test_every_must_be_a_time():
    with pytest.raises(ValueError, match="every_s must be a positive number of seconds"):
        progress.Display("net", every_s=0)
