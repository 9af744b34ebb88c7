"""The cache of Verilated builds as ``systolica cache`` sees it (systolica.sim.cache):
listing and cleaning, on a temporary cache of fake builds (no Verilator)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from systolica.sim import cache, verilated

DAY = 86400.0
NOW = time.time()


def fake_build(root: Path, family: str, key: str, *, days_ago: float = 0.0,
               size: int = 1000, info: dict | None = None, finished: bool = True) -> Path:
    """A build folder as :func:`verilated.build` leaves it, last used `days_ago`."""
    out = root / family / key
    (out / "sim_build").mkdir(parents=True)
    (out / "sim_build" / "sim_top").write_bytes(b"\0" * size)
    if info is not None:
        (out / verilated.BUILD_INFO).write_text(json.dumps(info))
    when = NOW - days_ago * DAY
    if finished:
        (out / "build.stamp").write_text(key)
        os.utime(out / "build.stamp", (when, when))
    os.utime(out, (when, when))
    return out


@pytest.fixture
def root(tmp_path) -> Path:
    """A cache of four builds: a fresh chip build, an old waveform build of a C++
    harness, one from before build.json and an unfinished one."""
    root = tmp_path / "verilated"
    fake_build(root, "chip-tiny-ab", "1" * 16, days_ago=0.01, size=3000,
               info={"label": "chip-tiny-ab", "harness": "cocotb", "waves": None})
    fake_build(root, "chip-base-cd-vcd", "2" * 16, days_ago=9, size=5000,
               info={"label": "chip-base-cd", "harness": "cocotb", "waves": "vcd"})
    fake_build(root, "chip-tiny-ab-cxx", "3" * 16, days_ago=3, size=2000)
    fake_build(root, "block-cell-waves", "4" * 16, days_ago=1, size=700, finished=False)
    (root / cache.OBJCACHE / "ab").mkdir(parents=True)
    (root / cache.OBJCACHE / "ab" / "object.o").write_bytes(b"\0" * 400)
    return root


def test_builds_say_what_each_is_most_recent_first(root):
    found = cache.builds(root)
    assert [(b.design, b.harness, b.waves, b.finished) for b in found] == [
        ("chip-tiny-ab", "cocotb", None, True),
        ("block-cell", "?", "fst", False),          # unfinished: no build.json
        ("chip-tiny-ab-cxx", "cxx", None, True),    # from before build.json
        ("chip-base-cd", "cocotb", "vcd", True)]
    assert [b.size for b in found] == [
        sum(f.stat().st_size for f in b.path.rglob("*") if f.is_file()) for b in found]
    assert [b.size // 1000 for b in found] == [3, 0, 2, 5]
    assert found[0].key == "1" * 16
    assert found[3].last_used == pytest.approx(NOW - 9 * DAY, abs=1)


def test_an_empty_or_missing_cache_has_no_builds(tmp_path):
    assert cache.builds(tmp_path / "none") == []
    assert cache.clean(tmp_path / "none", everything=True).removed == []


@pytest.mark.parametrize("options, left", [
    ({}, ["chip-base-cd", "chip-tiny-ab", "chip-tiny-ab-cxx"]),
    ({"older_than_days": 2}, ["block-cell", "chip-tiny-ab"]),
    ({"everything": True}, []),
], ids=["unfinished", "older-than", "all"])
def test_clean_removes_what_it_is_asked_to(root, options, left):
    before = {b.design: b.size for b in cache.builds(root)}
    done = cache.clean(root, now=NOW, **options)
    assert sorted(b.design for b in cache.builds(root)) == left
    assert sorted(b.design for b in done.removed) == sorted(set(before) - set(left))
    assert done.busy == []
    objects = 400 if options.get("everything") else 0
    assert done.freed == sum(before[d] for d in set(before) - set(left)) + objects
    assert (root / cache.OBJCACHE).exists() != bool(options.get("everything"))
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) \
        == sorted({"chip-base-cd": "chip-base-cd-vcd", "block-cell": "block-cell-waves"}
                  .get(d, d) for d in left)


def test_clean_leaves_a_build_that_a_process_holds(root):
    held = root / "chip-base-cd-vcd" / ("2" * 16)
    with verilated.locked(held / ".lock"):
        done = cache.clean(root, everything=True)
    assert [b.path for b in done.busy] == [held] and held.exists()
    assert [b.path for b in cache.builds(root)] == [held]


def test_clean_refuses_negative_days(root):
    with pytest.raises(ValueError, match="non-negative number of days"):
        cache.clean(root, older_than_days=-1)


@pytest.mark.parametrize("size, text", [(0, "0 B"), (999, "999 B"), (1500, "1.5 kB"),
                                        (23_400_000, "23 MB"), (2_940_000_000, "2.9 GB")])
def test_human_size(size, text):
    assert cache.human_size(size) == text


@pytest.mark.parametrize("seconds, text", [(5, "just now"), (125, "2 min ago"),
                                           (7300, "2 h ago"), (DAY * 1.5, "1 day ago"),
                                           (DAY * 30, "30 days ago")])
def test_human_age(seconds, text):
    assert cache.human_age(seconds) == text
