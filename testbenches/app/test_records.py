"""Records (systolica/app/records.py, docs/records.md): the files `sim`, `compile` and
`bench` write validate against their JSON Schema, the CSV reads back, and each
buffer's access counts, derived from the program's fields, agree with the counts the
golden model makes as it runs the program (the witness), which a miscount fails."""

from __future__ import annotations

import csv
import json
from functools import cache

import jsonschema
import pytest

from systolica import golden
from systolica.app import cli, demo, records
from systolica.arch import energy
from systolica.arch.config import preset
from systolica.compiler import compile_network
from systolica.compiler.backend import unit_use
from systolica.compiler.lowering.chain import ChainChoice
from systolica.models import chain_cases

import onnx_seeds

TINY = preset("tiny")
#: tiny with its UBUF in an SRAM of its own, after the CBUF's rows
OWN = TINY.replace(name="tiny-ubuf-sram", ubuf_base=TINY.cbuf_depth, ubuf_rows=256,
                   ubuf_own_sram=True)


@cache
def _compiled(name: str):
    """Small programs that, between them, use every buffer: the demo CNN (DMA, WLOAD,
    MATMUL with accumulation, VRUN with bias), the MLP, the Concat demo (ROUTE), and
    seed 001's two-layer chain with crops and fetches through the UBUF and fused
    crops."""
    if name == "chain_crop_fetch":
        return compile_network(TINY, chain_cases.seed_two_layer(),
                               chain=ChainChoice("crop_fetch", 8))
    if name == "chain_fused_crop":
        return compile_network(TINY, chain_cases.seed_two_layer(),
                               chain=ChainChoice("fused_crop", 8))
    if name == "chain_own_sram":
        return compile_network(OWN, chain_cases.seed_two_layer(),
                               chain=ChainChoice("crop_fetch", 8))
    if name == "cnn_fetched":           # the chip fetches the whole program from DRAM
        return compile_network(TINY, demo.cnn(), fetch_from=0)
    return compile_network(TINY, {"cnn": demo.cnn, "mlp": demo.mlp,
                                  "concat": demo.concat}[name]())


#: The witness's programs: the Concat demo (every buffer but the UBUF, ROUTEs) in the
#: fast tier, the rest in `make test`.
WITNESSES = [name if name == "concat" else pytest.param(name, marks=pytest.mark.slow)
             for name in ("concat", "cnn", "mlp", "chain_crop_fetch", "chain_fused_crop",
                          "chain_own_sram")]


def _mismatches(compiled) -> list[str]:
    """Where the records' per-buffer counts and the golden model's differ."""
    run = records.network_records(compiled.cfg, compiled).run
    seen = golden.run(compiled.cfg, compiled.loadable).accesses
    out = []
    for buffer in records.BUFFERS:
        for mode in ("read", "write"):
            counted = run["buffers"][buffer][f"{mode}s"]
            if counted != seen.get((buffer, mode), 0):
                out.append(f"{buffer} {mode}s: records {counted}, golden "
                           f"{seen.get((buffer, mode), 0)}")
    return out


@pytest.mark.parametrize("name", WITNESSES)
def test_access_counts_agree_with_the_golden_model(name):
    compiled = _compiled(name)
    assert _mismatches(compiled) == []
    run = records.network_records(compiled.cfg, compiled).run
    assert run["buffers"]["cbuf"]["reads"] and run["buffers"]["acc"]["writes"]
    if name.startswith("chain"):        # the UBUF is used, and counted as such
        assert run["ubuf_wr_bytes"] == compiled.ubuf_bytes_written > 0
        assert run["ubuf_rd_bytes"] == compiled.ubuf_bytes_read > 0


def test_a_miscount_fails_the_witness(monkeypatch):
    """The mutation: a VRUN's bias row left uncounted, and the witness says where."""
    compiled = _compiled("concat")
    real = records._instruction_counts

    def forgets_the_bias(cfg, op, f):
        v = list(real(cfg, op, f))
        if f.get("use_bias"):
            v[records._AT["acc_reads"]] -= 1
        return tuple(v)
    monkeypatch.setattr(records, "_instruction_counts", forgets_the_bias)
    assert [m.split(":")[0] for m in _mismatches(compiled)] == ["acc reads"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cnn", "concat", "chain_fused_crop", "cnn_fetched"])
def test_figures_agree_with_the_compiler(name):
    """Totals are the compiler's counters; layers add up to the run; each layer's unit
    busy cycles are unit_use's in its window."""
    compiled = _compiled(name)
    r = records.network_records(TINY, compiled)
    run = r.run
    assert (run["cycles"], run["macs"], run["array_macs"]) == \
        (compiled.predicted_cycles, compiled.macs, compiled.array_macs)
    assert (run["dram_rd_bytes"], run["dram_wr_bytes"], run["fetch_rd_bytes"],
            run["ubuf_wr_bytes"], run["ubuf_rd_bytes"]) == \
        (compiled.dram_bytes_read, compiled.dram_bytes_written, compiled.fetch_bytes_read,
         compiled.ubuf_bytes_written, compiled.ubuf_bytes_read)
    if name == "cnn_fetched":
        assert run["fetch_rd_bytes"] > 0 and run["energy_j"]["fetch"] > 0
    for key in ("cycles", "macs", "dram_rd_bytes", "dram_wr_bytes", "fetch_rd_bytes",
                "instructions", "config_writes", "vector_lanes", "accumulates"):
        assert sum(layer[key] for layer in r.layers) == run[key], key
    assert sum(layer["energy_j"]["total"] for layer in r.layers) == \
        pytest.approx(run["energy_j"]["total"])
    busy = unit_use.intervals(compiled.cfg, compiled.program, compiled.layer_of)
    for layer, rec in zip(r.layers, compiled.layers):
        assert layer["unit_busy_cycles"] == unit_use.in_window(busy, rec.start_cycle,
                                                               rec.end_cycle)
    assert run["unit_busy_cycles"] == unit_use.in_window(busy, 0, compiled.predicted_cycles)


@pytest.mark.slow
def test_clock_and_energy_table():
    compiled = _compiled("cnn")
    plain = records.network_records(TINY, compiled)
    assert plain.run["clock_hz"] == records.default_clock_hz(TINY) == 500e6
    assert records.default_clock_hz(preset("ulx3s")) == 50e6     # its board's clock
    table = energy.DEFAULT.with_overrides({"dram_pj_per_byte": 0.0})
    r = records.network_records(TINY, compiled, clock_hz=100e6, energy=table)
    assert r.run["time_s"] == pytest.approx(compiled.predicted_cycles / 100e6)
    assert r.run["energy_j"]["dram"] == 0 < plain.run["energy_j"]["dram"]
    assert r.run["energy_table_pj"]["dram_pj_per_byte"] == 0
    assert r.run["chip"] == TINY.to_dict()


def _validate(path) -> dict:
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, records.schema())
    return doc


def test_compile_json_and_csv_of_the_demo(tmp_path, capsys):
    j, c = tmp_path / "cnn.json", tmp_path / "cnn.csv"
    assert cli.main(["compile", "--demo", "cnn", "--json", str(j), "--csv", str(c),
                     "--clock-mhz", "250"]) == 0
    doc = _validate(j)
    assert doc["schema_version"] == records.SCHEMA_VERSION
    assert doc["run"]["clock_hz"] == 250e6 and doc["run"]["chip"]["name"] == "tiny"
    rows = list(csv.DictReader(c.read_text().splitlines()))
    # the round trip: one row per layer, every flat field as the JSON has it
    assert [r["layer"] for r in rows] == [layer["layer"] for layer in doc["layers"]]
    for row, layer in zip(rows, doc["layers"]):
        flat = records.flatten(layer)
        assert set(row) == set(flat)
        for key, value in flat.items():
            assert row[key] == str(value), key
    assert "records:" in capsys.readouterr().out


def test_compile_json_of_an_onnx_model(tmp_path, capsys):
    import onnx
    model, j = tmp_path / "conv_chain.onnx", tmp_path / "r.json"
    onnx.save(onnx_seeds.conv_chain(), model)
    assert cli.main(["compile", "--onnx", str(model), "--json", str(j)]) == 0
    doc = _validate(j)
    assert {op["processor"] for op in doc["run"]["operations"]} == {"chip"}


@pytest.mark.slow
def test_sim_json_of_an_assigned_onnx_model(tmp_path, capsys):
    """`sim --onnx --golden-only`: the chip segments' layers, every operation on the
    processor the assignment chose."""
    import onnx
    model, j, c = tmp_path / "conv_chain.onnx", tmp_path / "r.json", tmp_path / "r.csv"
    onnx.save(onnx_seeds.conv_chain(), model)
    assert cli.main(["sim", "--onnx", str(model), "--golden-only", "--assign",
                     "MaxPool_2=host", "--json", str(j), "--csv", str(c)]) == 0
    doc = _validate(j)
    where = {op["name"]: op["processor"] for op in doc["run"]["operations"]}
    assert where["MaxPool_2"] == "host" and where["qconv1"] == where["qmm5"] == "chip"
    assert doc["run"]["segments"] == 2          # the chip's, either side of the host's
    assert {layer["segment"] for layer in doc["layers"]} == {0, 2}
    assert len(list(csv.DictReader(c.read_text().splitlines()))) == len(doc["layers"])


@pytest.mark.slow
def test_several_runs_in_one_file(tmp_path):
    runs = [records.network_records(TINY, _compiled(n)) for n in ("cnn", "mlp")]
    records.write_json(tmp_path / "two.json", runs)
    doc = _validate(tmp_path / "two.json")
    assert [r["run"]["network"] for r in doc["runs"]] == \
        [r.run["network"] for r in runs]
    records.write_csv(tmp_path / "two.csv", runs)
    rows = list(csv.DictReader((tmp_path / "two.csv").read_text().splitlines()))
    assert len(rows) == sum(len(r.layers) for r in runs)


def test_bench_records_name_their_chip():
    out = records.with_chips([{"name": "a", "config": "base"}, {"name": "b"}])
    assert out[0]["chip"] == preset("base").to_dict()
    assert out[0]["schema_version"] == records.SCHEMA_VERSION
    assert out[1] == {"name": "b"}


def test_the_schema_refuses_a_wrong_record(tmp_path):
    doc = records.network_records(TINY, _compiled("mlp")).to_json()
    doc = json.loads(json.dumps(doc))
    del doc["layers"][0]["buffers"]["acc"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, records.schema())


@pytest.mark.slow
def test_sim_records_carry_the_rtl_cycles():
    """`sim`'s records: the compiled network's, with the RTL's cycles per layer and run
    (here a run as flow.run_network reports one, its cycles as predicted)."""
    from types import SimpleNamespace
    compiled = _compiled("cnn")
    run = SimpleNamespace(cfg=TINY, compiled=compiled, ok=True,
                          measured_cycles=compiled.predicted_cycles,
                          layers=[SimpleNamespace(name=layer.name,
                                                  measured_cycles=layer.end_cycle)
                                  for layer in compiled.layers])
    r = cli._sim_records(run, {"clock_hz": None, "energy": None})
    assert r.run["rtl_cycles"] == compiled.predicted_cycles and r.run["rtl_ok"]
    assert [layer["rtl_cycles"] for layer in r.layers] == \
        [layer.end_cycle for layer in compiled.layers]
    jsonschema.validate(json.loads(records.json_text(r)), records.schema())


def test_energy_from_the_chip_file_and_energy_option(tmp_path):
    """A TOML chip file's own [energy] table (--config), then --energy's over it."""
    from types import SimpleNamespace
    chip = tmp_path / "mine.toml"
    chip.write_text('name = "mine"\n\n[energy]\nmac_pj = 0.5\ndram_pj_per_byte = 90\n')
    more = tmp_path / "more.toml"
    more.write_text("[energy]\ndram_pj_per_byte = 70\n")
    assert cli._config_file(["compile", "--config", str(chip)]) == str(chip)
    assert cli._config_file(["compile", f"--config={chip}"]) == str(chip)
    assert cli._config_file(["compile", "--config", "base"]) is None
    got = cli._record_settings(SimpleNamespace(config_file=str(chip), energy=None,
                                               clock_mhz=None))["energy"]
    assert (got.mac_pj, got.dram_pj_per_byte) == (0.5, 90)
    got = cli._record_settings(SimpleNamespace(config_file=str(chip), energy=str(more),
                                               clock_mhz=100))
    assert (got["energy"].mac_pj, got["energy"].dram_pj_per_byte) == (0.5, 70)
    assert got["clock_hz"] == 100e6
    chip.write_text('name = "mine"\n\n[energy]\nmac = 0.5\n')
    with pytest.raises(energy.ConfigError) as info:
        cli._record_settings(SimpleNamespace(config_file=str(chip), energy=None,
                                             clock_mhz=None))
    assert "mine.toml: [energy]: unknown energy key 'mac'" in str(info.value)


def test_records_refuse_another_chip_and_a_clock_of_zero():
    compiled = _compiled("concat")
    with pytest.raises(ValueError, match="compiled for chip 'tiny', not for the 'base'"):
        records.network_records(preset("base"), compiled)
    with pytest.raises(ValueError, match="clock_hz must be above 0"):
        records.network_records(TINY, compiled, clock_hz=0)
