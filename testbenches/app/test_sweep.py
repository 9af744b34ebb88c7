"""``systolica sweep`` (systolica/app/sweep.py): spec files and their errors, the
points a spec makes (refused chips recorded, not raised), and a small sweep of the demo
CNN on a local Dask cluster the test starts and stops itself, interrupted and resumed
from the cache."""

from __future__ import annotations

import csv
import json

import pytest

from systolica.app import records, sweep
from systolica.app.cli import main
from systolica.arch.config import ConfigError, preset
from systolica.compiler import compile_network

SMALL = """
name = "small"
base = "tiny"
clock_mhz = 100
[sweep]
tile_size = [4, 8]
acc_depth = [256, 512]
[[models]]
name = "demo_cnn"
"""

# (id, spec text, words the error must hold)
BAD_SPECS = [
    ("unknown-field", SMALL.replace("acc_depth =", "acc_dpth ="),
     ["sweep.acc_dpth", "'acc_dpth' is not a ChipConfig field", "tile_rows"]),
    ("bad-value", SMALL.replace("[4, 8]", "[4, 0]"),
     ["sweep.tile_size[1]", "tile_size", "at least 1", "not 0"]),
    ("bool-for-size", SMALL.replace("[4, 8]", "[true]"),
     ["sweep.tile_size[0]", "integer", "not True"]),
    ("not-a-list", SMALL.replace("[4, 8]", "4"), ["sweep.tile_size", "non-empty list"]),
    ("empty-list", SMALL.replace("[4, 8]", "[]"), ["sweep.tile_size", "non-empty list"]),
    ("unknown-top-key", "workers = 3\n" + SMALL, ["'workers'", "a sweep spec has"]),
    ("unknown-field-in-table", SMALL.replace("[4, 8]", "[{tile_sise = 4}]"),
     ["sweep.tile_size[0].tile_sise", "not a ChipConfig field"]),
    ("bad-clock", SMALL.replace("clock_mhz = 100", "clock_mhz = -5"),
     ["clock_mhz", "positive number of MHz"]),
    ("unknown-preset", SMALL.replace('base = "tiny"', 'base = "huge"'),
     ["base", "'huge'", "tiny"]),
    ("unknown-model", SMALL.replace('"demo_cnn"', '"alexnet"'),
     ["models[0].name", "'alexnet'", "resnet50"]),
    ("no-models", SMALL.split("[[models]]")[0], ["models is missing", "demo_cnn"]),
    ("bad-model-arg", SMALL + "args = {depth = 3}\n",
     ["models[0].args", "'depth'", "seed"]),
    ("bad-option", SMALL + "options = {chains = \"x\"}\n", ["models[0].options", "chain"]),
    ("no-onnx-file", SMALL.replace('name = "demo_cnn"', 'onnx = "none.onnx"'),
     ["models[0].onnx", "none.onnx"]),
    ("not-toml", "name = \n", ["not valid TOML", "line 1"]),
    ("field-on-two-axes", SMALL.replace("acc_depth = [256, 512]",
                                        "grid = [{acc_depth = 256, tile_size = 2}]"),
     ["sweep.grid and sweep.tile_size both set tile_size", "one axis only"]),
]


@pytest.mark.parametrize("text, words", [c[1:] for c in BAD_SPECS],
                         ids=[c[0] for c in BAD_SPECS])
def test_bad_spec_names_the_key(tmp_path, text, words):
    path = tmp_path / "spec.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        sweep.load_spec(path)
    assert str(e.value).startswith(str(path)), e.value
    for word in words:
        assert word in str(e.value), (word, str(e.value))


def test_points_are_the_product_and_refused_chips_are_recorded(tmp_path):
    path = tmp_path / "spec.toml"
    # acc_depth 3 is too small for a chip: refused with ConfigError's text
    path.write_text(SMALL.replace("[256, 512]", "[256, 3]")
                    + "[[models]]\nname = \"demo_mlp\"\n")
    spec = sweep.load_spec(path)
    tasks = sweep.plan(spec)
    assert len(tasks) == 2 * 2 * 2
    assert [t["params"] for t in tasks[::2]] == [
        {"tile_size": 4, "acc_depth": 256}, {"tile_size": 4, "acc_depth": 3},
        {"tile_size": 8, "acc_depth": 256}, {"tile_size": 8, "acc_depth": 3}]
    refused = [t for t in tasks if t["refused"]]
    assert len(refused) == 4
    assert all("acc_depth must be at least 4, not 3" in t["refused"] for t in refused)
    ok = tasks[0]
    assert ok["chip"] == preset("tiny").replace(name=ok["chip"]["name"], tile_size=4,
                                                acc_depth=256).to_dict()
    assert ok["clock_hz"] == 100e6


def test_fields_set_together_and_grid_form():
    spec = sweep.parse_spec({"base": "tiny", "models": ["demo_cnn"], "sweep": {
        "grid": [{"tile_rows": 2, "tile_cols": 2}, {"tile_rows": 4, "tile_cols": 2}],
        "clock_mhz": [50, 100]}})
    assert spec.points() == [{"tile_rows": 2, "tile_cols": 2, "clock_mhz": 50},
                             {"tile_rows": 2, "tile_cols": 2, "clock_mhz": 100},
                             {"tile_rows": 4, "tile_cols": 2, "clock_mhz": 50},
                             {"tile_rows": 4, "tile_cols": 2, "clock_mhz": 100}]
    quick = sweep.grid_spec("tiny", ["tile_size=4,8", "feed_register=true"], ["demo_cnn"])
    assert quick.points() == [{"tile_size": 4, "feed_register": True},
                              {"tile_size": 8, "feed_register": True}]


@pytest.fixture(scope="module")
def cluster():
    """A local Dask cluster of two worker processes, for this module's sweeps."""
    from dask.distributed import LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as c:
        yield c


@pytest.mark.slow
def test_sweep_on_a_local_cluster_resumes_after_an_interruption(cluster, tmp_path,
                                                                monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    spec = sweep.load_spec(path)
    engine = sweep.Engine(address=cluster.scheduler_address)

    class Interrupt(Exception):
        pass

    def stop(record):
        raise Interrupt
    with pytest.raises(Interrupt):          # killed after the first point came back
        sweep.run_sweep(spec, engine, on_result=stop)
    done = len(list((tmp_path / "cache" / "sweep").rglob("*.json")))
    assert 1 <= done < 4
    result = sweep.run_sweep(spec, engine)
    assert result.computed == 4 - done      # the finished points were not compiled again
    assert [p["status"] for p in result.points] == ["ok"] * 4
    again = sweep.run_sweep(spec, engine)
    assert again.computed == 0 and again.points == result.points

    # the figures are the compiler's
    cfg = sweep.chip_for(spec.base, {"tile_size": 8, "acc_depth": 512})
    compiled = compile_network(cfg, sweep.builtin_models()["demo_cnn"]())
    row = result.points[3]
    assert row["chip"] == cfg.name and row["cycles"] == compiled.predicted_cycles
    assert row["mac_utilization"] == pytest.approx(compiled.utilisation)
    assert row["dram_bytes"] == compiled.dram_bytes_read + compiled.dram_bytes_written
    assert row["time_s"] == pytest.approx(compiled.predicted_cycles / 100e6)
    energy = records.network_records(cfg, compiled, clock_hz=100e6).run["energy_j"]
    assert row["chip_macs"] == 256 and row["energy_j"] == pytest.approx(energy["total"])
    mine = [l for l in result.layers if l["point"] == 3]
    assert [l["layer"] for l in mine] == [l.name for l in compiled.layers]
    assert sum(l["cycles"] for l in mine) == compiled.predicted_cycles
    assert sum(l["dram_rd_bytes"] for l in mine) == compiled.dram_bytes_read

    # the command: the same sweep from the cache, its tables and report written
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--scheduler", cluster.scheduler_address,
                 "--out", str(out), "--no-progress"]) == 0
    with (out / "points.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["cycles"]) for r in rows] == [p["cycles"] for p in result.points]
    assert {"tile_size", "acc_depth"} <= set(rows[0])
    report = (out / "report.html").read_text()
    assert report.count("<svg") == 2 and "Pareto" in report
    import pyarrow.parquet as pq
    assert pq.read_table(out / "layers.parquet").num_rows == len(result.layers)


@pytest.mark.rtl
@pytest.mark.regress
def test_rtl_sample_confirms_the_cycles(tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path / "cache"))
    spec = sweep.parse_spec({"base": "tiny", "models": ["demo_cnn"],
                             "sweep": {"acc_depth": [256, 512]}})
    result = sweep.run_sweep(spec, sweep.Engine(workers=1), rtl_sample=1)
    first, second = result.points
    assert first["rtl_cycles"] == first["cycles"] and first["rtl_matches"] is True
    assert second["rtl_cycles"] is None     # one point sampled


@pytest.mark.slow
def test_slurm_options_reach_the_job_script():
    engine = sweep.Engine(slurm={"queue": "normal", "walltime": "01:00:00", "cores": 2})
    cluster = engine.cluster()
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    for line in ("#SBATCH -p normal", "#SBATCH -t 01:00:00", "#SBATCH --cpus-per-task=2",
                 "#SBATCH --mem=4G"):
        assert line in script, script


def test_cache_is_keyed_by_tool_version(tmp_path):
    a = sweep.ResultCache(tmp_path, version="1")
    b = sweep.ResultCache(tmp_path, version="2")
    a.put({"cycles": 5}, "chip", "model", None)
    assert a.get("chip", "model", None) == {"cycles": 5}
    assert b.get("chip", "model", None) is None
    assert a.get("chip", "model", 1e8) is None
    assert json.loads(a.path("chip", "model", None).read_text()) == {"cycles": 5}


@pytest.mark.slow
def test_areas_synthesise_side_by_side_on_the_workers(tmp_path, monkeypatch):
    import threading

    from systolica.app import area
    monkeypatch.setenv("SYSTOLICA_CACHE", str(tmp_path / "cache"))
    both = threading.Barrier(2)

    def synthesise(cfg, script="full"):     # returns only once the other chip's started
        both.wait(timeout=30)
        return area.Area(luts=cfg.acc_depth, ffs=1, dsps=2, brams=3, lutram=0, seconds=0.5)
    monkeypatch.setattr(area, "synthesise", synthesise)
    spec = sweep.parse_spec({"base": "tiny", "models": ["demo_mlp"],
                             "sweep": {"acc_depth": [256, 512]}})
    result = sweep.run_sweep(spec, sweep.Engine(workers=2, threads=True), area=True)
    assert [(p["luts"], p["synth_s"]) for p in result.points] == [(256, 0.5), (512, 0.5)]
    cfg = sweep.chip_for(spec.base, {"acc_depth": 512})
    assert area.lookup(cfg).luts == 512      # the client kept it
