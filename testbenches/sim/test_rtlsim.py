"""The simulation harness itself: DRAM image files, the firmware driver's register
sequence, and runs of small programs on the tiny chip's RTL (load/dump of the DRAM
model, several jobs in one simulator, faults, timeouts, waveforms)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

from systolica.arch import isa, timing
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Instr, Opcode
from systolica.arch.loadable import Loadable
from systolica.arch.regs import (
    CTRL_IRQ_ACK,
    CTRL_START,
    STATUS_RUNNING,
    ErrorCode,
    Reg,
    hwcfg_word,
)
from systolica.firmware import dramfile
from systolica.firmware.driver import Driver
from systolica.sim import rtlsim
from systolica.sim.jobs import RtlJob

from chip_runs import COUNTING, rtl_job, run_many_on_rtl, run_on_rtl, sample_cycles

# -- host side, no simulator ------------------------------------------------------------

def test_dram_hex_roundtrip(tmp_path):
    image = np.random.default_rng(0).integers(0, 256, (37, 8), dtype=np.uint8)
    dramfile.write_hex(tmp_path / "m.hex", image)
    lines = (tmp_path / "m.hex").read_text().split()
    # most significant byte first: byte 7 of word 0 leads its line
    assert lines[0] == bytes(image[0, ::-1]).hex()
    assert np.array_equal(dramfile.read_hex(tmp_path / "m.hex", 8), image)


def test_dram_load_file_holds_only_nonzero_runs(tmp_path):
    image = np.zeros((10, 2), np.uint8)
    image[1], image[2], image[7] = [1, 2], [3, 0], [0, 255]
    dramfile.write_segments(tmp_path / "m.hex", [
        (0x100, image), (5, np.zeros((3, 2), np.uint8)), (0, image[1:2])])
    assert (tmp_path / "m.hex").read_text().split() == [
        "@101", "0201", "0003", "@107", "ff00", "@0", "0201"]


@pytest.mark.parametrize("dram, why", [
    ([(3, np.zeros((4, 7), np.uint8))], "shape \\(4, 7\\) must be \\(words, 8\\)"),
    ([(16383, np.zeros((2, 8), np.uint8))], "inside the 16384-word DRAM"),
    ([(-1, np.zeros((1, 8), np.uint8))], "at word -1"),
    ([np.zeros((1, 8), np.uint8)], "segment 0 must be a \\(first_word, array\\) pair"),
    (np.zeros((2, 8), np.float32), "must be uint8"),
])
def test_bad_dram_segments_are_refused_before_building(tiny_cfg, dram, why):
    with pytest.raises(rtlsim.RtlSimError, match=why):
        rtlsim.run(tiny_cfg, [RtlJob(Loadable.for_chip(tiny_cfg, b"", dram))])


class RecordingBus:
    def __init__(self, irq_after: int | None = 0):
        self.log = []
        self.irq_after = irq_after

    async def write(self, reg, value):
        self.log.append(("w", Reg(reg), value))

    async def read(self, reg):
        self.log.append(("r", Reg(reg)))
        return 0

    async def wait_irq(self, timeout_cycles):
        return self.irq_after is not None and self.irq_after <= timeout_cycles


def _drive(coro):
    import asyncio
    return asyncio.run(coro)


def test_driver_register_sequence():
    words = [(1 << 127) | 0x0123_4567_89AB_CDEF, 5]
    bus = RecordingBus()
    drv = Driver(bus)

    async def session():
        await drv.load_program(isa.to_bytes(words))
        await drv.start()
        await drv.wait_done(100)
        await drv.ack()
    _drive(session())

    writes = [(reg, value) for kind, reg, *value in bus.log if kind == "w"
              for value in value]
    # PROG_FETCH: the instructions preloaded (all: no depth given)
    assert writes[:4] == [(Reg.PROG_LEN, 2), (Reg.PROG_ADDR, 0), (Reg.PROG_FETCH, 2),
                          (Reg.IMEM_ADDR, 0)]
    writes = writes[2:]
    assert writes[2:6] == [(Reg.IMEM_DATA, 0x89AB_CDEF), (Reg.IMEM_DATA, 0x0123_4567),
                           (Reg.IMEM_DATA, 0), (Reg.IMEM_DATA, 0x8000_0000)]
    assert writes[6:10] == [(Reg.IMEM_DATA, 5)] + [(Reg.IMEM_DATA, 0)] * 3
    assert writes[10:] == [(Reg.CTRL, CTRL_START), (Reg.CTRL, CTRL_IRQ_ACK)]


def test_driver_timeout_is_an_error():
    from systolica.firmware.driver import ChipTimeout
    drv = Driver(RecordingBus(irq_after=None))
    with pytest.raises(ChipTimeout, match="no interrupt within 50 cycles"):
        _drive(drv.wait_done(50))


def test_driver_rejects_partial_words():
    with pytest.raises(ValueError, match="multiple of 16"):
        _drive(Driver(RecordingBus()).load_program(b"\0" * 20))


def test_cxx_script_follows_the_driver():
    """The C++ harness's commands are the driver's register sequence: reset, load the
    DRAM, the program, the measured window opening at the start write, the wait, the
    counters, a dump of each non-empty readback range, the acknowledge."""
    from systolica.firmware.driver import COUNTER_REGS
    from systolica.sim import cxxsim
    lines = cxxsim.script(isa.to_bytes([5]), 77, [(300, 6, "/r/a b.hex"), (9, 0, "/r/e"),
                                                  (1 << 22, 2, "/r/c.hex")]).splitlines()
    assert lines[:7] == ["reset 2", "load", f"write {int(Reg.PROG_LEN)} 1",
                         f"write {int(Reg.PROG_ADDR)} 0", f"write {int(Reg.PROG_FETCH)} 1",
                         f"write {int(Reg.IMEM_ADDR)} 0", f"write {int(Reg.IMEM_DATA)} 5"]
    del lines[3:5]
    assert lines[5:8] == [f"write {int(Reg.IMEM_DATA)} 0"] * 3
    assert lines[8:11] == ["mark", f"write {int(Reg.CTRL)} {CTRL_START}", "wait 77"]
    assert lines[11:-3] == [f"read {r.name} {int(r)}" for r in COUNTER_REGS]
    assert lines[-3:] == ["dump 300 6 /r/a b.hex", f"dump {1 << 22} 2 /r/c.hex",
                          f"write {int(Reg.CTRL)} {CTRL_IRQ_ACK}"]


def test_cxx_script_samples_the_counters_and_says_how_far_it_got():
    """Each sample waits until the cycle counter reads its cycle (or the run ends, or
    the timeout passes), then reads every counter as ``s<k>.<register>``, before the
    wait for the interrupt; the progress file is named before anything runs."""
    from systolica.firmware.driver import COUNTER_REGS
    from systolica.sim import cxxsim
    lines = cxxsim.script(isa.to_bytes([5]), 77, samples=(10, 40),
                          progress=("progress", "3")).splitlines()
    assert lines[:3] == ["reset 2", "load", "progress progress 3"]
    start = lines.index(f"write {int(Reg.CTRL)} {CTRL_START}")
    reads = [[f"read s{k}.{r.name} {int(r)}" for r in COUNTER_REGS] for k in (0, 1)]
    assert lines[start + 1:lines.index("wait 77")] == [
        f"until {int(Reg.CYCLES)} 10 77", *reads[0], f"until {int(Reg.CYCLES)} 40 77",
        *reads[1]]


@pytest.mark.parametrize("samples", [(5, 3), (-1,), (2.5,), (True,)])
def test_samples_are_increasing_cycles(samples):
    with pytest.raises(TypeError, match="samples must be cycles"):
        RtlJob(Loadable.for_chip(preset("tiny"), b"", None), samples=samples)


@pytest.mark.parametrize("harness, waves, message", [
    ("verilog", False, "harness must be one of cocotb, cxx, not 'verilog'"),
    ("cxx", True, "waveforms are written by the cocotb harness only"),
    ("cxx", "vcd", "waveforms are written by the cocotb harness only"),
    ("cocotb", "gif", r"waves must be True, False or a waveform format \(fst, vcd\), "
                      r"not 'gif'"),
])
def test_bad_harness_is_refused(tiny_cfg, harness, waves, message):
    with pytest.raises(rtlsim.RtlSimError, match=message):
        rtlsim.run(tiny_cfg, [RtlJob(Loadable.for_chip(tiny_cfg, b"",
                                                       None))], waves=waves, harness=harness)


def test_a_waves_file_needs_waves(tiny_cfg, tmp_path):
    with pytest.raises(rtlsim.RtlSimError, match="waves_file names where the waveform "
                                                 "goes: give waves too"):
        rtlsim.run(tiny_cfg, [RtlJob(Loadable.for_chip(tiny_cfg, b"", None))],
                   waves_file=tmp_path / "x.vcd")
    assert not (tmp_path / "x.vcd").exists()


def test_the_chip_build_takes_its_cxx_level_from_the_environment(monkeypatch, tiny_cfg):
    """$SYSTOLICA_OPT_FAST replaces -O3 and so changes the build's key; a value that is
    no optimisation level is refused by name before anything is built."""
    from systolica.sim import verilated
    monkeypatch.delenv(rtlsim.OPT_FAST_ENV, raising=False)
    default = rtlsim.design(tiny_cfg)
    assert default.make_variables["OPT_FAST"] == "-O3"
    monkeypatch.setenv(rtlsim.OPT_FAST_ENV, "-O1")
    quick = rtlsim.design(tiny_cfg)
    assert quick.make_variables["OPT_FAST"] == "-O1"
    assert verilated.digest(quick) != verilated.digest(default)
    monkeypatch.setenv(rtlsim.OPT_FAST_ENV, "fast")
    with pytest.raises(rtlsim.RtlSimError, match=r"SYSTOLICA_OPT_FAST='fast' is not a C\+\+ "
                                                 r"optimisation level: set one of -O0"):
        rtlsim.run(tiny_cfg, [RtlJob(Loadable.for_chip(tiny_cfg, b"", None))])


# -- on the RTL -------------------------------------------------------------------------

def _random_dram(cfg, seed=1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (cfg.dram_words, cfg.dram_word_bytes), dtype=np.uint8)


def _copy_program(cfg, src: int, dst: int, rows: int) -> list[Instr]:
    """DRAM[src:src+rows] -> CBUF[0:rows] -> DRAM[dst:dst+rows]."""
    load = Instr(Opcode.DMA, 0, {"kind": DmaKind.LOAD_CBUF, "dram_addr": src,
                                 "dram_stride": 1, "buf_addr": 0, "rows": rows})
    store = Instr(Opcode.DMA, timing.done(cfg, load),
                  {"kind": DmaKind.STORE_CBUF, "dram_addr": dst, "dram_stride": 1,
                   "buf_addr": 0, "rows": rows})
    return [load, store]


@pytest.mark.rtl
def test_empty_program_keeps_dram(tiny_cfg, tiny_build):
    dram = _random_dram(tiny_cfg)
    res = run_on_rtl(tiny_cfg, b"", dram)
    assert res.status_flags == "DONE" and res.error_name == "NONE"
    assert (res.cycles, res.macs, res.dram_rd_bytes, res.dram_wr_bytes) \
        == (0, 0, 0, 0)
    assert res.hwcfg == hwcfg_word(tiny_cfg.tile_rows, tiny_cfg.tile_cols,
                                      tiny_cfg.tile_size)
    assert np.array_equal(res.dram, dram)


@pytest.mark.rtl
def test_jobs_share_one_simulator(tiny_cfg, tiny_build):
    cfg = tiny_cfg
    dram = _random_dram(cfg, seed=2)
    copy = _copy_program(cfg, src=10, dst=300, rows=6)
    results = run_many_on_rtl(cfg, [
        dict(program=copy, dram=dram, readback=[(300, 6), (0, 4)], name="copy"),
        dict(program=[Instr(Opcode.ILLEGAL, 0, {})], readback=[], expect_fault=True,
             name="illegal"),
        dict(program=copy, dram=dram[:20], readback=[(300, 6), (20, 30)],
             name="short image"),
    ])
    first, illegal, short = results
    assert first.status_flags == "DONE", first
    assert np.array_equal(first.readback[0], dram[10:16])
    assert np.array_equal(first.readback[1], dram[0:4])
    assert first.cycles == timing.run_cycles(cfg, copy)
    assert first.dram_rd_bytes == first.dram_wr_bytes == 6 * cfg.dram_word_bytes
    assert first.dram is None

    assert illegal.faulted and illegal.error == ErrorCode.ILLEGAL_OPCODE
    assert illegal.fault_pc == 0
    assert illegal.readback == []

    # each job starts from its own image: a short one is zero-padded, whatever the
    # jobs before it left in the memory
    assert np.array_equal(short.readback[0], dram[10:16])
    assert not short.readback[1].any() and short.readback[1].shape == (30, 8)


#: ``tiny`` with as many DRAM words as ``base`` (2**24, all the DMA's address reaches).
TINY_LARGE = preset("tiny").replace(name="tiny-2e24", dram_words=1 << 24)


@pytest.mark.rtl
@pytest.mark.regress   # a build of its own, for a 2**24-word memory
def test_large_dram_loads_and_reads_back_only_the_regions_used():
    cfg, top = TINY_LARGE, TINY_LARGE.dram_words
    rng = np.random.default_rng(3)
    low = rng.integers(0, 256, (6, 8), dtype=np.uint8)
    high = rng.integers(1, 256, (20, 8), dtype=np.uint8)
    copy = _copy_program(cfg, src=top - 40, dst=100, rows=6)
    results = rtlsim.run(cfg, [
        rtl_job(cfg, copy, [(3, low), (top - 40, high)], name="far apart",
                readback=[(100, 6), (3, 6), (top - 40, 20), (top - 20, 20), (0, 0)]),
        rtl_job(cfg, b"", readback=[(3, 6), (100, 6), (top - 40, 20)], name="after"),
        # no ranges: the whole memory, read back where the run can have left words
        rtl_job(cfg, copy, [(3, low), (top - 40, high)], name="whole"),
    ], keep=True)
    far, after, whole = results
    assert far.status_flags == "DONE" and far.cycles == timing.run_cycles(cfg, copy)
    moved, got_low, got_high, past_high, empty = far.readback
    assert np.array_equal(moved, high[:6])
    assert np.array_equal(got_low, low) and np.array_equal(got_high, high)
    assert not past_high.any() and empty.shape == (0, 8)
    # the next job starts from zeros: the first one's data and writes are gone
    assert not any(r.any() for r in after.readback)
    want = np.zeros((top, 8), np.uint8)
    want[3:9], want[top - 40:top - 20], want[100:106] = low, high, high[:6]
    assert whole.dram.shape == (top, 8) and np.array_equal(whole.dram, want)
    # what travels between host and simulator follows the data, not the memory
    run_dir = max(Path(rtlsim.build_root(), "runs").glob(f"{cfg.key}-*"),
                  key=lambda d: d.stat().st_mtime)
    sizes = {f.name: f.stat().st_size for f in run_dir.iterdir()
             if f.suffix in (".hex", ".npy")}
    shutil.rmtree(run_dir)
    assert sizes["job0-dram.hex"] < 1000, sizes
    assert all(n < 4096 * 8 + 1000 for n in sizes.values()), sizes


def test_used_ranges_are_the_loaded_words_and_the_stores():
    """What a run without readback ranges reads back: its segments and the words its
    stores name (a strided store's whole span), close ranges merged, nothing past the
    memory."""
    cfg = preset("tiny")
    top, W = cfg.dram_words, cfg.acc_row_words
    stores = [Instr(Opcode.DMA, 0, dict(kind=DmaKind.STORE_CBUF, dram_addr=9000,
                                        dram_stride=3, buf_addr=0, rows=4)),
              Instr(Opcode.DMA, 0, dict(kind=DmaKind.STORE_ACC, dram_addr=top - W,
                                        dram_stride=W, buf_addr=0, rows=1)),
              Instr(Opcode.DMA, 0, dict(kind=DmaKind.LOAD_CBUF, dram_addr=5000,
                                        dram_stride=1, buf_addr=0, rows=10))]
    segments = [(0, np.ones((10, 8), np.uint8)), (20, np.ones((5, 8), np.uint8)),
                (9005, np.ones((1, 8), np.uint8))]
    assert rtlsim.used_ranges(cfg, segments, stores) == [
        (0, 25), (9000, 10), (top - W, W)]


@pytest.mark.rtl
@pytest.mark.parametrize("case", sorted(COUNTING))
def test_counters_read_while_running_are_the_golden_models(tiny_cfg, tiny_build, case):
    """The counters the harness reads at about a hundred cycles of a run (each once
    the chip's cycle counter reads it) are, register for register, what the golden
    model says they read there: the MACs as rows are fed, DRAM words as they move,
    instruction words as they are fetched, UBUF rows as they are cropped and fetched;
    and the run ends as it would without the samples."""
    from systolica import golden
    compiled = COUNTING[case]()
    end = compiled.predicted_cycles
    # and in the middle of the first few instructions that move the counter the case is
    # here for (a UBUF copy is over in a few dozen cycles)
    name, op = {"cnn": ("macs", Opcode.MATMUL), "crop_fetch": ("ubuf_rd_bytes", Opcode.COPY),
                "fused_crop": ("ubuf_wr_bytes", Opcode.VRUN),
                "fetched": ("fetch_rd_bytes", None)}[case]
    middles = [ins.cycle + timing.done(tiny_cfg, ins) // 2 for ins in compiled.program
               if ins.op is op][:10]
    at = tuple(sorted({*sample_cycles(end), *middles}))
    job = rtl_job(tiny_cfg, compiled, readback=[(compiled.dram_map.output, 4)])
    alone, sampled = rtlsim.run(tiny_cfg, [job, dataclasses.replace(job, samples=at)])
    want = golden.run(tiny_cfg, compiled.loadable, sample_at=at).samples
    got = [{k: s[k] for k in golden.SAMPLED} for s in sampled.samples]
    wrong = [(c, w, g) for c, w, g in zip(at, want, got) if w != g]
    assert not wrong and len(got) == len(at), wrong[:3]
    # running until the end (the cycle counter reads it in the run's last cycle), then
    # the run's registers
    assert [s["status"] & STATUS_RUNNING for s in sampled.samples] \
        == [int(c <= end) for c in at]
    assert {k: getattr(sampled, k) for k in golden.SAMPLED} \
        == {k: getattr(alone, k) for k in golden.SAMPLED} == got[-1]
    assert np.array_equal(sampled.readback[0], alone.readback[0])
    # the counter the case is here for is read with some counted and not all
    assert any(0 < s[name] < got[-1][name] for s in got), name


@pytest.mark.rtl
def test_unexpected_fault_is_reported(tiny_cfg, tiny_build):
    with pytest.raises(rtlsim.RtlSimError, match="faulted with ILLEGAL_OPCODE at pc 1"):
        run_on_rtl(tiny_cfg, [Instr(Opcode.SETCFG, 0, {"index": 0, "value": 0}), 0],
                   readback=[])


@pytest.mark.rtl
def test_hang_times_out(tiny_cfg, tiny_build):
    late = Instr(Opcode.SETCFG, 1_000_000, {"index": 0, "value": 0})
    with pytest.raises(rtlsim.RtlSimError, match="no interrupt within 500 cycles"):
        run_on_rtl(tiny_cfg, [late], timeout_cycles=500, readback=[])


#: The smallest chip (a 2x2 array): what these tests check is the harness, not the
#: array, and its builds take a fraction of tiny's.
SMALL = preset("tangnano9k")


# regress: `make test` writes a waveform through the command line (a VCD,
# testbenches/app/test_cli.py); an FST build of its own costs half a minute more.
@pytest.mark.regress
@pytest.mark.rtl
def test_waves_write_fst():
    res = rtlsim.run(SMALL, [RtlJob(Loadable.for_chip(SMALL, b"",
                                                      None), readback=())], waves=True)[0]
    fst = Path(res.fst)
    assert res.waves == res.fst and fst.name == "dump.fst" and fst.stat().st_size > 0
    assert fst.read_bytes()[0] == 0   # FST header block


@pytest.mark.rtl
def test_cxx_harness_agrees_with_cocotb():
    """The plain C++ harness and cocotb, on the same Verilog and the same jobs, leave
    the same registers and the same DRAM: a GEMM (whole DRAM read back), a copy with
    ranges, a fault, and a job after them that finds the memory zeroed."""
    from systolica.app.bench_cases import gemm_network as _gemm_network
    from systolica.compiler import compile_network
    cfg = SMALL
    gemm = compile_network(cfg, _gemm_network(12, 10, 6, 3))
    at = (0, 7, gemm.predicted_cycles // 2, gemm.predicted_cycles, gemm.predicted_cycles + 9)
    jobs = [dataclasses.replace(rtl_job(cfg, gemm, name="gemm"), samples=at),
            rtl_job(cfg, _copy_program(cfg, src=10, dst=300, rows=6), _random_dram(cfg, 4),
                    readback=[(300, 6), (0, 4)], name="copy"),
            rtl_job(cfg, [Instr(Opcode.ILLEGAL, 0, {})], readback=[], expect_fault=True,
                    name="illegal"),
            rtl_job(cfg, b"", readback=[(300, 6), (10, 4), (5, 0)], name="after")]
    told = {"cocotb": [], "cxx": []}
    cocotb, cxx = (rtlsim.run(cfg, jobs, harness=h,
                              progress=lambda *args, h=h: told[h].append(args))
                   for h in ("cocotb", "cxx"))
    registers = ("status", "error", "fault_pc", "fault_cycle", "cycles", "macs",
                 "dram_rd_bytes", "dram_wr_bytes", "hwcfg", "irq", "faulted",
                 "timed_out", "status_flags", "error_name", "name", "samples")
    for a, b in zip(cocotb, cxx, strict=True):
        assert (a.harness, b.harness) == ("cocotb", "cxx")
        assert {k: getattr(a, k) for k in registers} == {k: getattr(b, k) for k in registers}, \
            a.name
        assert len(a.readback) == len(b.readback)
        assert all(np.array_equal(x, y) for x, y in zip(a.readback, b.readback))
        assert (a.dram is None) == (b.dram is None)
    assert cxx[0].cycles == gemm.predicted_cycles and cxx[0].macs > 0
    # the counters read while it ran, as the golden model says
    from systolica import golden
    want = golden.run(cfg, gemm.loadable, sample_at=at).samples
    assert [{k: s[k] for k in golden.SAMPLED} for s in cxx[0].samples] == want
    assert 0 < want[2]["macs"] < want[3]["macs"]
    # each harness said how far each job had got, last at its end
    for harness, results in (("cocotb", cocotb), ("cxx", cxx)):
        last = {index: (name, cycles, expected)
                for index, name, cycles, expected in told[harness]}
        assert last[0] == ("gemm", results[0].sim_cycles, gemm.predicted_cycles), harness
        assert sorted(last) == [0, 1, 2, 3], harness
        assert all(last[i][1] == r.sim_cycles for i, r in enumerate(results)), harness
    assert np.array_equal(cxx[0].dram, cocotb[0].dram)
    assert not np.array_equal(cxx[0].dram[:len(gemm.dram)], gemm.dram)  # it wrote
    assert cxx[2].error == ErrorCode.ILLEGAL_OPCODE
    # each job starts from a zeroed memory, and an empty range is an empty array
    assert not any(r.any() for r in cxx[3].readback)
    assert cxx[3].readback[2].shape == (0, cfg.dram_word_bytes)
