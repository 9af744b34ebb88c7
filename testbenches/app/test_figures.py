"""The figures page from a bench run's records (systolica.app.figures): each kind of
record becomes the table rows written out below, an unknown kind is listed rather than
dropped, and a missing or malformed bench file is one line and exit status 2."""

from __future__ import annotations

import json

import pytest

from systolica import files
from systolica.app import figures

RUN = {"name": "gemm_64x64x64", "config": "base", "M": 64, "K": 64, "N": 64,
       "layers": [], "cycles": 1344, "predicted_cycles": 1344, "golden_cycles": 1344,
       "macs": 262144, "array_macs": 262144, "mac_utilization": 0.7619,
       "dram_bytes": 12544, "dram_rd_bytes": 8448, "dram_wr_bytes": 4096,
       "sim_cycles_per_second": 141523.7, "harness": "cocotb", "outputs_match": True,
       "ok": True}
ONNX_RUN = {**RUN, "name": "onnx_inception", "config": "tiny", "cycles": 4083,
            "predicted_cycles": 4083, "mac_utilization": 0.342, "dram_bytes": 14440,
            "sim_cycles_per_second": 280000, "harness": "cxx", "ok": False,
            "onnxruntime": {"values": 175, "differing": 0, "max_difference": 0}}
COMPILE = {"name": "resnet50_224", "config": "base", "kind": "compile",
           "strategy": "layer_by_layer", "segments_chained": 0, "instructions": 366684,
           "predicted_cycles": 17417369, "mac_utilization": 0.92004,
           "dram_bytes": 71905536, "min_bytes": 64950000, "dram_ratio_to_min": 1.1071,
           "compile_seconds": 64.83, "layers": []}
CHAIN_LBL = {**RUN, "name": "seed001_two_layer", "config": "tiny", "kind": "chain",
             "strategy": "layer_by_layer", "cycles": 19268, "predicted_cycles": 19268,
             "mac_utilization": 0.983, "dram_bytes": 16128, "min_bytes": 8800,
             "dram_ratio_to_min": 1.8327, "array_macs": 1212416, "ubuf_bytes_written": 0,
             "tiling": {"conv0": "persistent/2"}}
CHAIN = {**CHAIN_LBL, "strategy": "crop_fetch", "passes": 2, "cycles": 20121,
         "predicted_cycles": 20121, "mac_utilization": 0.942, "dram_bytes": 9856,
         "dram_ratio_to_min": 1.12, "ubuf_bytes_written": 512}
REFUSED = {"name": "three_3x3_56x56x64", "config": "base", "kind": "chain",
           "strategy": "fused_crop", "error": "layer 'conv1': | does not fit the CBUF"}
TRANSPOSE = {"name": "transpose_64x64", "config": "tiny", "kind": "transpose", "ok": True,
             "base": {"cycles": 200, "dram_bytes": 8192},
             "on_chip": {"cycles": 1140, "dram_bytes": 8256},
             "dram_round_trip": {"cycles": 1240, "dram_bytes": 16384},
             "on_chip_extra": {"cycles": 940, "dram_bytes": 64},
             "dram_round_trip_extra": {"cycles": 1040, "dram_bytes": 8192}}
TRANSPOSE_ND = {"name": "transpose_4x64x64_021", "config": "tiny", "kind": "transpose_nd",
                "shape": [4, 64, 64], "perm": [0, 2, 1], "ok": True,
                "on_chip": {"cycles": 4512, "dram_bytes": 32832},
                "dram_round_trip": {"cycles": 4109, "dram_bytes": 32768}}
TRANSPOSE_INT32 = {"name": "transpose_int32_64x64", "config": "tiny",
                   "kind": "transpose_int32", "shape": [64, 64], "ok": True,
                   "on_chip": {"cycles": 18050, "dram_bytes": 50000},
                   "base": {"cycles": 4600, "dram_bytes": 16144},
                   "transpose_layer_cycles": 13400,
                   "on_chip_extra": {"cycles": 13450, "dram_bytes": 33856}}
ROUTE = {"name": "route_256_rows", "config": "tiny_tall", "kind": "lane_route",
         "moves": {"0": 1}, "ok": True,
         "without_skip_links": {"cycles": 300, "span": 4, "skip_links": 0,
                                "route_cycles": 261},
         "with_skip_links": {"cycles": 299, "span": 3, "skip_links": 1,
                             "route_cycles": 260}}
POWER = {"name": "power_gemm", "config": "tiny", "kind": "power", "milliwatts": 12.5,
         "ok": True, "by_unit": {"mm": 7}}

RECORDS = [RUN, COMPILE, CHAIN_LBL, CHAIN, REFUSED, TRANSPOSE, ONNX_RUN, TRANSPOSE_ND,
           TRANSPOSE_INT32, ROUTE, POWER]

#: (the section's title, its rows in order) for RECORDS
EXPECTED = [
    ("Networks on the RTL", [
        "| gemm_64x64x64 | base | 1,344 | 1,344 | 0.762 | 12,544 | 142k | cocotb | yes |",
        "| onnx_inception | tiny | 4,083 | 4,083 | 0.342 | 14,440 | 280k | cxx | NO |"]),
    ("Network compiles", [
        "| resnet50_224 | base | layer_by_layer | 0 | 366,684 | 17,417,369 | 0.920 "
        "| 71,905,536 | 1.11x | 64.8 |"]),
    ("Chains of convolutions on the RTL", [
        "| seed001_two_layer | tiny | layer_by_layer | - | 19,268 | 19,268 | 0.983 "
        "| 16,128 | 1.83x | 1,212,416 | 0 | yes |",
        "| seed001_two_layer | tiny | crop_fetch | 2 | 20,121 | 20,121 | 0.942 | 9,856 "
        "| 1.12x | 1,212,416 | 512 | yes |",
        "| three_3x3_56x56x64 | base | fused_crop | layer 'conv1': \\| does not fit the "
        "CBUF |"]),
    ("Transposes in the CBUF", [
        "| transpose_64x64 | tiny | 940 | 64 | 1,040 | 8,192 | yes |"]),
    ("N-D permutations, DRAM to DRAM", [
        "| transpose_4x64x64_021 | tiny | 4x64x64 | 0,2,1 | 4,512 | 32,832 | 4,109 "
        "| 32,768 | yes |"]),
    ("int32 transposes", [
        "| transpose_int32_64x64 | tiny | 64x64 | 18,050 | 50,000 | 13,450 | 33,856 "
        "| 13,400 | yes |"]),
    ("Lane routes", [
        "| route_256_rows | tiny_tall | 4 -> 3 | 1 | 261 -> 260 | 300 -> 299 | yes |"]),
    ("Records of other kinds", [
        '| power | power_gemm | tiny | by_unit: {"mm":7}, milliwatts: 12.5, ok: yes |']),
]


def sections(text: str) -> dict[str, list[str]]:
    """Each ``## `` section of a page: its tables' rows (their headers left out)."""
    out: dict[str, list[str]] = {}
    title = None
    lines = text.splitlines() + [""]
    for line, after in zip(lines, lines[1:]):
        if line.startswith("## "):
            title = line[3:]
            out[title] = []
        elif title and line.startswith("| ") and not after.startswith("|---"):
            out[title].append(line)
    return out


def test_first_line_says_how_the_page_is_made():
    first = figures.page(RECORDS).splitlines()[0]
    assert first == ("Generated by `python -m systolica.app.figures build/bench.json "
                     "docs/figures.md` from a bench run (`make bench`); do not edit this "
                     "page by hand.")


def test_sections_in_order():
    assert list(sections(figures.page(RECORDS))) == [title for title, _ in EXPECTED]


@pytest.mark.parametrize("title, rows", EXPECTED, ids=[t for t, _ in EXPECTED])
def test_table_rows(title, rows):
    # a refused chain is a row of a table of its own, under the chains' table
    assert sections(figures.page(RECORDS))[title] == rows


def test_agreement_with_onnxruntime_follows_the_runs():
    text = figures.page([RUN, ONNX_RUN])
    assert ("Against onnxruntime (the chip equals numpy, checked by the run):\n\n"
            "* onnx_inception: differs in 0 of 175 output values, by at most 0\n") in text


def test_a_kind_without_a_table_is_listed_with_its_fields():
    text = figures.page([POWER, {"name": "x", "kind": "area"}])
    assert "Kinds this page has no table for (area, power)" in text
    assert sections(text)["Records of other kinds"] == [
        '| power | power_gemm | tiny | by_unit: {"mm":7}, milliwatts: 12.5, ok: yes |',
        "| area | x | - |  |"]


def test_only_the_kinds_present_get_a_section():
    text = figures.page([ROUTE])
    assert list(sections(text)) == ["Lane routes"]
    assert "(1 record)" in text


@pytest.mark.parametrize("records, message", [
    ({"name": "x"}, "holds a JSON dict, not the list of records"),
    ([], "holds no records"),
    ([RUN, 7], "record 1 is 7, not an object"),
    ([{"kind": "compile"}], "record 0 has no field 'name'"),
    ([{k: v for k, v in RUN.items() if k != "harness"}],
     "record 0 ('gemm_64x64x64', kind run) has no field 'harness'"),
    ([{**TRANSPOSE, "on_chip_extra": {"cycles": 940}}],
     "record 0 ('transpose_64x64', kind transpose) has no field 'on_chip_extra.dram_bytes'"),
    ([{**RUN, "cycles": "1344"}],
     "record 0 ('gemm_64x64x64', kind run): field 'cycles' is '1344', not a number"),
    ([{**RUN, "ok": 1}],
     "record 0 ('gemm_64x64x64', kind run): field 'ok' is 1, not true or false"),
    ([{**RUN, "kind": 3}], "record 0: field 'kind' is 3, not a string"),
], ids=["object", "empty", "not-a-record", "no-name", "no-field", "no-subfield",
        "string-number", "int-flag", "kind-type"])
def test_records_that_make_no_page(records, message):
    with pytest.raises(figures.FiguresError) as e:
        figures.page(records)
    assert message in str(e.value)


# -- the command -------------------------------------------------------------------------
def test_main_writes_the_page(tmp_path, capsys):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(RECORDS))
    out = tmp_path / "docs" / "figures.md"
    assert figures.main([str(bench), str(out)]) == 0
    assert out.read_text() == figures.page(RECORDS)
    assert sorted(p.name for p in out.parent.iterdir()) == ["figures.md"]
    assert capsys.readouterr().out == f"wrote {out} from {bench} (11 records)\n"


def test_main_defaults(tmp_path, monkeypatch):
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "bench.json").write_text(json.dumps([ROUTE]))
    monkeypatch.chdir(tmp_path)
    assert figures.main([]) == 0
    assert (tmp_path / "docs" / "figures.md").read_text() == figures.page([ROUTE])


@pytest.mark.parametrize("content, message", [
    (None, "does not exist; run `make bench` to write it"),
    ("[{", "is not JSON (Expecting"),
    ('{"name": 1}', "holds a JSON dict, not the list of records"),
    ("[]", "holds no records; run `make bench` to write it again"),
    (json.dumps([{"name": "x", "config": "tiny"}]),
     "record 0 ('x', kind run) has no field 'cycles'; run `make bench`"),
], ids=["missing", "not-json", "not-a-list", "empty", "incomplete"])
def test_main_refuses_a_bad_bench_file(tmp_path, capsys, content, message):
    bench = tmp_path / "bench.json"
    if content is not None:
        bench.write_text(content)
    out = tmp_path / "figures.md"
    out.write_text("the page before\n")
    assert figures.main([str(bench), str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"figures: error: {bench}") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert out.read_text() == "the page before\n"


def test_a_failed_write_leaves_the_old_page(tmp_path, monkeypatch, capsys):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps([ROUTE]))
    out = tmp_path / "figures.md"
    out.write_text("the page before\n")

    def fail(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(files.os, "replace", fail)
    assert figures.main([str(bench), str(out)]) == 2
    assert capsys.readouterr().err == (f"figures: error: cannot write {out}: No space left "
                                       f"on device\n")
    assert out.read_text() == "the page before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json", "figures.md"]


def test_an_output_that_is_a_directory(tmp_path, capsys):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps([ROUTE]))
    assert figures.main([str(bench), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"figures: error: cannot write {tmp_path}: ")
    assert err.count("\n") == 1
