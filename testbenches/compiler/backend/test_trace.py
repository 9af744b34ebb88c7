"""Listing and Chrome trace / Perfetto JSON of datapath schedules and chip programs,
and the `systolica schedule` command on the example programs."""

import json
from pathlib import Path

import numpy as np
import pytest

from systolica import golden
from systolica.app.cli import main
from systolica.arch import image_file, isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Opcode
from systolica.arch.loadable import Loadable
from systolica.compiler.backend.trace import (
    chip_events,
    events,
    listing,
    schedule_events,
    schedule_rows,
    write_trace,
)
from systolica.compiler.frontend import stp
from systolica.compiler.frontend.text import parse
from systolica.compiler.microops.ir import make, required_gap
from systolica.compiler.scheduling.config_updates import UpdateWindow, assign_updates
from systolica.compiler.scheduling.datapath import assign_cycles

from paths import EXAMPLES

CFG = preset("tiny")
FIG2 = {"read": 1, "read.bigram": 2, "mul": 4, "add": 3, "write": 1, "mul.mul.occupancy": 2}
TABLE1 = (EXAMPLES / "seed_table1.stp").read_text()


def table1():
    prog = parse(TABLE1)
    return assign_cycles({**FIG2, **prog.latency, "mul.mul.occupancy": 2}, prog.statements,
                         inputs=prog.inputs)


def load(path):
    doc = json.loads(Path(path).read_text())
    evs = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in evs if e.get("name") == "thread_name"}
    return evs, names


def test_datapath_trace_tracks_and_events(tmp_path):
    sched = table1()
    updates = assign_updates([UpdateWindow("cu0", 3, 4), UpdateWindow("cu1", 3, 3)],
                             per_cycle=1)
    write_trace(tmp_path / "t.json", schedule_events(sched, updates))
    evs, tracks = load(tmp_path / "t.json")
    assert sorted(tracks.values()) == ["add0", "bigram", "config", "mul0", "ram"]
    ops = {e["name"]: e for e in evs if e["ph"] == "X"}
    assert len(ops) == 6
    mul = ops["m = mul mul0(y, z)"]
    assert (mul["ts"], mul["dur"], tracks[mul["tid"]]) == (2, 2, "mul0")
    assert mul["args"]["relative_cycle"] == 1 and mul["args"]["latency"] == 4
    assert [(tracks[ops[k]["tid"]], ops[k]["ts"]) for k in
            ("z = read bigram(addr)", "y = read ram(addr)", "x = read ram(addr)",
             "write ram(addr, s)")] == [("bigram", 0), ("ram", 1), ("ram", 5), ("ram", 9)]
    inst = sorted((e["name"], e["ts"], tracks[e["tid"]]) for e in evs if e["ph"] == "i")
    assert inst == [("update cu0", 4, "config"), ("update cu1", 3, "config")]
    assert all(e["s"] == "t" for e in evs if e["ph"] == "i")


def test_datapath_listing():
    text = listing(table1())
    lines = text.splitlines()
    assert lines[0].split() == ["cycle", "relative", "unit", "statement"]
    assert [line.split(None, 3) for line in lines[1:]] == [       # seed 002, Table 2
        ["0", "-1", "bigram", "z = read bigram(addr)"], ["1", "0", "ram", "y = read ram(addr)"],
        ["2", "1", "mul0", "m = mul mul0(y, z)"], ["5", "4", "ram", "x = read ram(addr)"],
        ["6", "5", "add0", "s = add add0(m, x)"], ["9", "8", "ram", "write ram(addr, s)"]]


def chip_program():
    return [isa.Instr(Opcode.SETCFG, 0, {"index": 0, "value": 1}),
            isa.Instr(Opcode.DMA, 1, {"kind": DmaKind.LOAD_CBUF, "dram_addr": 0,
                                      "dram_stride": 1, "buf_addr": 0, "rows": 8}),
            isa.Instr(Opcode.MATMUL, 12, {"act_addr": 0, "rows": 5, "acc_addr": 0,
                                          "accumulate": 0, "bank": 0})]


def test_chip_trace(tmp_path):
    program = chip_program()
    write_trace(tmp_path / "c.json", chip_events(CFG, program))
    evs, tracks = load(tmp_path / "c.json")
    assert sorted(tracks.values()) == ["cfg", "dma", "mm"]
    x = {tracks[e["tid"]]: e for e in evs if e["ph"] == "X"}
    assert (x["dma"]["ts"], x["dma"]["dur"]) == (1, timing.occupancy(CFG, program[1]))
    assert (x["mm"]["ts"], x["mm"]["dur"]) == (12, 5)
    assert x["mm"]["args"]["done"] == timing.done(CFG, program[2])
    (cfg_ev,) = [e for e in evs if e["ph"] == "i"]
    assert (cfg_ev["ts"], tracks[cfg_ev["tid"]]) == (0, "cfg")
    assert cfg_ev["name"] == "SETCFG west_feed[0] <- cbuf.g1"


def test_chip_listing_needs_config_and_shows_units():
    program = chip_program()
    with pytest.raises(TypeError):
        listing(program)
    lines = listing(program, CFG).splitlines()[1:]
    assert [line.split()[:2] for line in lines] == [["0", "cfg"], ["1", "dma"], ["12", "mm"]]


def test_events_metadata_first_and_one_track_per_unit():
    evs = events(schedule_rows(table1()), process="p", pid=3)
    meta = [e for e in evs if e["ph"] == "M"]
    assert evs[:len(meta)] == meta and all(e["pid"] == 3 for e in evs)
    tids = {e["args"]["name"]: e["tid"] for e in meta if e["name"] == "thread_name"}
    assert len(set(tids.values())) == len(tids) == 4


def test_gemm_example_computes_the_product():
    result = stp.compile_file(CFG, EXAMPLES / "gemm_tiny.stp")
    assert result.datapath is None
    prog = result.chip.program
    assert [i.op for i in prog if i.op is not Opcode.SETCFG] == [
        Opcode.DMA, Opcode.DMA, Opcode.WLOAD, Opcode.MATMUL, Opcode.VRUN, Opcode.DMA]
    assert [i.cycle for i in prog] == sorted(i.cycle for i in prog)
    # each named dependency waits until the buffer it shares with its producer is
    # written (a weight bank: the load's last shift; otherwise the producer is done);
    # `route` is a multiplexer setting, placed by the update-window solver
    at = {s.name: i for s, i in zip(result.chip.statements, prog)}
    assert "route" not in at
    for s, i in zip(result.chip.statements, prog):
        for v in s.operands:
            if v == "route":
                continue
            gap = required_gap(CFG, make(CFG, at[v].op, **at[v].fields),
                               make(CFG, i.op, **i.fields))
            assert gap is not None and i.cycle >= at[v].cycle + gap
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, size=(8, 8), dtype=np.int8)
    w = rng.integers(-128, 128, size=(8, 8), dtype=np.int8)
    dram = np.zeros((CFG.dram_words, CFG.rows), dtype=np.uint8)
    dram[0:8] = a.view(np.uint8)
    dram[64:72] = w.view(np.uint8)
    run = golden.run(CFG, Loadable.for_chip(CFG, result.chip.image, dram))
    out = run.dram[128:160].reshape(-1).view("<i4").reshape(8, 8)
    assert np.array_equal(out, a.astype(np.int32) @ w.astype(np.int32))


def test_chip_dependency_without_shared_buffer_is_an_error():
    text = ("a = dma load_cbuf(dram_addr=0, dram_stride=1, buf_addr=0, rows=8)\n"
            "b = dma load_cbuf(a, dram_addr=8, dram_stride=1, buf_addr=8, rows=8)\n"
            "m = mm matmul(a, act_addr=0, rows=8, acc_addr=0, accumulate=0, bank=0)\n")
    with pytest.raises(stp.CompileError, match="share no buffer rows") as e:
        stp.compile_program(CFG, parse(text, "d.stp"))
    assert str(e.value).startswith("d.stp:2: ")


# -- the command ------------------------------------------------------------------------
def test_cli_seed_table1(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["schedule", str(EXAMPLES / "seed_table1.stp"), "--trace", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["0", "1", "2", "5", "6", "9"]
    _, tracks = load(out)
    assert sorted(tracks.values()) == ["add0", "bigram", "mul0", "ram"]


def test_cli_mismatch_error_is_one_line(capsys):
    assert main(["schedule", str(EXAMPLES / "latency_mismatch.stp")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("systolica: error: ") and "insert 1 delay" in err
    assert main(["schedule", str(EXAMPLES / "latency_mismatch.stp"), "--insert-delays"]) == 0
    assert "c_d1 = delay dreg0(c)" in capsys.readouterr().out


def test_cli_parse_error(tmp_path, capsys):
    bad = tmp_path / "bad.stp"
    bad.write_text("x = read ram(\n")
    assert main(["schedule", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:1:14: expected" in err and err.count("\n") == 1


def test_cli_gemm_image(tmp_path, capsys):
    image = tmp_path / "g.bin"
    assert main(["schedule", str(EXAMPLES / "gemm_tiny.stp"), "--image", str(image)]) == 0
    words = isa.from_bytes(image_file.unpack(image.read_bytes(), source=str(image),
                                             cfg=CFG).words)
    prog = [isa.decode(w) for w in words]
    assert [i.op for i in prog][-1] is Opcode.DMA
    assert len([i for i in prog if i.op is not Opcode.SETCFG]) == 6
    out = capsys.readouterr().out
    assert "acc = mm matmul(a, wb, route" in out
    assert [line.split()[1] for line in out.splitlines()[1:]].count("cfg") == \
        len([i for i in prog if i.op is Opcode.SETCFG]) > 0
    assert main(["schedule", str(EXAMPLES / "seed_table1.stp"), "--image", str(image)]) == 2
    assert "no chip statements" in capsys.readouterr().err


def test_cli_reroute_example_lists_the_placed_updates(capsys):
    assert main(["schedule", str(EXAMPLES / "reroute_tiny.stp")]) == 0
    rows = [line.split(None, 2) for line in capsys.readouterr().out.splitlines()[1:]]
    cfg_rows = [r for r in rows if r[1] == "cfg"]
    assert cfg_rows and all(r[2].startswith("cfg set(mux=") for r in cfg_rows)
    p1 = next(int(r[0]) for r in rows if r[2].startswith("p1 = mm matmul"))
    second = [int(r[0]) for r in cfg_rows if "(straight)" in r[2]]
    assert len(second) == 1 and second[0] > p1


@pytest.mark.parametrize("data, expected", [
    (b"latency vpu = 4\nx = read ram(0)\n", ":1:1: latency vpu: 'vpu' is a latency of the chip"),
    (b"x = read ram(0) # \xe9\n", ":1:19: not UTF-8 text (byte 0xe9)"),
])
def test_cli_bad_program_text_is_one_line(tmp_path, capsys, data, expected):
    bad = tmp_path / "bad.stp"
    bad.write_bytes(data)
    assert main(["schedule", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}{expected}" in err and err.count("\n") == 1 and "Traceback" not in err
