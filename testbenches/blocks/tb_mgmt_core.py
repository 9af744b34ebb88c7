"""The management core (:class:`systolica.rtl.mgmt_core.MgmtCore`): PicoRV32 and its
memories, running programs.

Both sides of the test are here. The pytest side (:func:`build_images`) assembles the
programs with ``ziglang`` and writes each as a memory image (JSON: byte address ->
word, from the ELF's loadable segments); the cocotb side loads an image through the
block's load port with the core held, lets it run, and serves its register window
(answering each request after 0 to 3 cycles) while recording what it writes.

Cases:

* ``isa``: the 45 RV32I(M) instruction tests of ``pythondata-cpu-picorv32``
  (``verilog/tests/*.S``, adapted riscv-tests) linked into one image, run one after
  another as PicoRV32's own firmware runs them (``firmware/start.S``), with the test
  environment of ``mgmt_core/isa_env.h``: every test prints ``<name>..OK`` on the
  console (window word 31), a failing one prints ``ERROR`` and stops the core on
  ``ebreak``; the image ends by writing ``123456789`` there.
* ``irq``: ``mgmt_core/irq_test.S``: interrupt 0 raised while the program counts
  enters the handler at ``PROGADDR_IRQ`` once, with the pending mask 1; the program
  then finishes its count.
* ``bad_access``: ``mgmt_core/bad_access.S``: a store to the instruction memory has no
  effect, a load from an unmapped address reads 0, both complete, and ``bad_access``
  rises.
* ``dram``: ``mgmt_core/dram.S`` on each instance of the test's top
  (:mod:`mgmt_core_pair`: DRAM words of 16 and of 4 bytes) with :class:`Dram` behind
  the DRAM port, its grant toggled in seeded random stretches (long ones low among
  them): loads and stores of every width through the window check themselves, the
  testbench's words are read by the core and the core's by the testbench, accesses
  past the end read 0 and raise ``bad_access``; then each misaligned access of
  ``dram.S`` traps before it reaches the DRAM.
* ``firmware``: the project's firmware (``systolica.firmware.core_image``) runs a
  two-step table against a stand-in of the chip's register file (:class:`ChipRegs`)
  behind the window; once it has parked the core is held and the mailbox read back
  through ``load_rdata``: result OK, both steps done, the chip's cycles summed.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import ClockCycles, Event, FallingEdge, First, ReadOnly, RisingEdge, Timer
from mgmt_core_pair import DRAM_BYTES, INSTANCES

from systolica.rtl.mgmt_core import DMEM_BASE, IMEM_BASE
from systolica.sim.verilated import locked

from tb_base import CLOCK_NS, case_names

HERE = Path(__file__).resolve().parent / "mgmt_core"
#: The memories of the block under test (words), the first instance of the pair; the
#: programs are linked for them (the second's instruction memory holds ``dram.S``).
IMEM_WORDS, DMEM_WORDS = INSTANCES[0]["imem_words"], INSTANCES[0]["dmem_words"]
#: How many instruction tests the package ships (a different number is a different
#: package, which this test should be looked at for).
ISA_TESTS = 45
CONSOLE, MSG, HANDLER = 31, 30, 29
ISA_DONE = 123456789
ARMED, FINISHED, IRQ_COUNT = 0x1111, 0x2222, 300
#: Cycle limits: the whole suite takes about 100,000 cycles.
ISA_CYCLES, IRQ_CYCLES = 400_000, 20_000
CASES = dict.fromkeys(("isa", "irq", "bad_access", "dram", "firmware"))  # filled in below
#: The cases whose programs are assembled here (the firmware case's is the project's).
PROGRAMS = ("isa", "irq", "bad_access", "dram")
#: The firmware case's table: (prog_addr, prog_len, ubuf_base, ubuf_rows) per chip step;
#: a run takes FW_RUN_CYCLES and reports 1000 + prog_len cycles.
FW_STEPS = ((0x100, 40, 0, 0), (0x800, 70, 64, 32))
FW_RUN_CYCLES, FW_CYCLES, FW_QUIET = 50, 20_000, 2_000
TARGET = ("-target", "riscv32-freestanding-none", "-mcpu=generic_rv32+m")


# -- the pytest side: the programs ------------------------------------------------------

def package_dir() -> Path:
    import pythondata_cpu_picorv32 as package
    return Path(package.data_location)


def isa_tests() -> list[Path]:
    return sorted((package_dir() / "tests").glob("*.S"))


def _zig() -> list[str]:
    import ziglang
    return [str(Path(ziglang.__file__).resolve().parent / "zig"), "cc"]


def _link_script() -> str:
    return f"""
MEMORY {{
    imem (rx) : ORIGIN = {IMEM_BASE:#x}, LENGTH = {4 * IMEM_WORDS:#x}
    dmem (rw) : ORIGIN = {DMEM_BASE:#x}, LENGTH = {4 * DMEM_WORDS:#x}
}}
SECTIONS {{
    .text : {{ *(.text.start) *(.text .text.*) *(.rodata .rodata.* .srodata*) }} > imem
    .data : {{ *(.data .data.* .sdata*) *(.bss .bss.* .sbss* COMMON) }} > dmem
}}
"""


def _isa_start(names: list[str]) -> str:
    """The suite's entry: each test in turn (it returns to ``<name>_ret``), then the
    end mark; an interrupt (there should be none) stops the core."""
    calls = "".join(f"\tjal zero, {n}\n\t.global {n}_ret\n{n}_ret:\n" for n in names)
    return (f'\t.section .text.start, "ax"\n\t.global _start\n_start:\n\tj start\n'
            f"\t.balign 16\nirq_vec:\n\tebreak\nstart:\n{calls}"
            f"\tli a0, 0x40000000\n\tli a1, {ISA_DONE}\n\tsw a1, {4 * CONSOLE}(a0)\n"
            f"1:\tj 1b\n")


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{what} failed ({done.returncode}): {' '.join(cmd)}\n"
                           f"{done.stderr[-3000:]}")


def _image(elf: Path) -> dict[int, int]:
    """Byte address -> word of the loadable segments of ``elf``."""
    from elftools.elf.elffile import ELFFile
    words: dict[int, int] = {}
    with open(elf, "rb") as f:
        for seg in ELFFile(f).iter_segments():
            if seg["p_type"] != "PT_LOAD" or not seg["p_filesz"]:
                continue
            data = seg.data() + bytes(-len(seg.data()) % 4)
            base = seg["p_paddr"]
            for i in range(0, len(data), 4):
                words[base + i] = int.from_bytes(data[i:i + 4], "little")
    return words


def build_images(out: Path) -> dict[str, Path]:
    """Assemble and link the programs of :data:`PROGRAMS` into ``out`` (reused when
    their inputs have not changed); returns case -> image file."""
    tests = isa_tests()
    inputs = [HERE / "isa_env.h", HERE / "irq_test.S", HERE / "bad_access.S",
              HERE / "dram.S", *tests,
              *(package_dir() / "tests" / h for h in ("test_macros.h", "riscv_test.h")),
              package_dir() / "firmware" / "custom_ops.S", Path(__file__)]
    h = hashlib.sha256(" ".join(_zig()).encode())
    for p in inputs:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    out = Path(out) / h.hexdigest()[:16]
    images = {case: out / f"{case}.json" for case in PROGRAMS}
    out.mkdir(parents=True, exist_ok=True)
    with locked(out / ".lock"):         # one build for concurrent test processes
        if not all(p.exists() for p in images.values()):
            _assemble(out, tests, images)
    return images


def _assemble(out: Path, tests: list[Path], images: dict[str, Path]) -> None:
    (out / "link.ld").write_text(_link_script())
    link = [*_zig(), *TARGET, "-nostdlib", "-ffreestanding", "-T", str(out / "link.ld"),
            "-Wl,--build-id=none"]
    names = [t.stem for t in tests]
    objs = []
    for test in tests:
        n = test.stem
        obj = out / f"{n}.o"
        _run([*_zig(), *TARGET, "-c", "-include", str(HERE / "isa_env.h"),
              f"-DTEST_FUNC_NAME={n}", f'-DTEST_FUNC_TXT="{n}"', f"-DTEST_FUNC_RET={n}_ret",
              str(test), "-o", str(obj)], f"assembling {test.name}")
        objs.append(str(obj))
    (out / "isa_start.S").write_text(_isa_start(names))
    _run([*link, str(out / "isa_start.S"), *objs, "-o", str(out / "isa.elf")],
         "linking the instruction tests")
    _run([*link, f"-I{package_dir() / 'firmware'}", str(HERE / "irq_test.S"),
          "-o", str(out / "irq.elf")], "linking the interrupt test")
    _run([*link, str(HERE / "bad_access.S"), "-o", str(out / "bad_access.elf")],
         "linking the bad-access test")
    _run([*link, str(HERE / "dram.S"), "-o", str(out / "dram.elf")],
         "linking the DRAM window test")
    for case in PROGRAMS:
        image = _image(out / f"{case}.elf")
        tmp = images[case].with_suffix(".tmp")
        tmp.write_text(json.dumps({str(a): w for a, w in sorted(image.items())}))
        tmp.replace(images[case])


def firmware_image(out: Path) -> Path:
    """The firmware (built for the test's memories) with the mailbox of
    :data:`FW_STEPS`, as one image file in ``out``."""
    from systolica.firmware import core_image
    fw = core_image.build(imem_bytes=4 * IMEM_WORDS, dmem_bytes=4 * DMEM_WORDS)
    head = dict.fromkeys(core_image.MAILBOX_FIELDS, 0) | {
        "magic": core_image.FW_MAGIC, "n_steps": len(FW_STEPS)}
    words = [head[f] for f in core_image.MAILBOX_FIELDS]
    for addr, length, base, rows in FW_STEPS:
        step = dict(kind=core_image.FwStepKind.CHIP, prog_addr=addr, prog_len=length,
                    ubuf_base=base, ubuf_rows=rows)
        words += [step.get(f, 0) for f in core_image.STEP_FIELDS]
    image = {IMEM_BASE + i: int.from_bytes(fw.imem[i:i + 4], "little")
             for i in range(0, len(fw.imem), 4)}
    image |= {DMEM_BASE + i: int.from_bytes(fw.dmem[i:i + 4], "little")
              for i in range(0, len(fw.dmem), 4)}
    image |= {DMEM_BASE + 4 * i: w for i, w in enumerate(words)}
    text = json.dumps({str(a): w for a, w in sorted(image.items())})
    path = Path(out) / f"firmware-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


# -- the cocotb side --------------------------------------------------------------------

class CoreTB:
    """Clock, reset, the load port, and the register window: each request is answered
    after 0 to 3 cycles (``reg_rdata`` is the word's index); every write is recorded
    as ``(cycle, word, value)``."""

    def __init__(self, dut, seed: str):
        self.dut = dut
        self.rng = random.Random(seed)
        self.writes: list[tuple[int, int, int]] = []
        self.reads = 0
        self.on_write = None        # called with (word, value) when a write completes
        self.on_read = None         # answers a read of a word (else the word's index)
        self.ran = self.raised = 0    # cycles the last run took; when the IRQ rose
        self.bad = 0                # bad_access at the end of the last run

    def cycle(self) -> int:
        return int(get_sim_time("ns")) // CLOCK_NS

    async def start(self) -> None:
        dut = self.dut
        Clock(dut.clk, CLOCK_NS, unit="ns").start()
        for name in ("run", "load_en", "load_addr", "load_data", "reg_ready", "reg_rdata",
                     "irq", "sel", "dram_rdata", "dram_grant"):
            getattr(dut, name).value = 0
        dut.rst.value = 1
        await ClockCycles(dut.clk, 2)
        dut.rst.value = 0
        cocotb.start_soon(self.serve())

    async def load(self, image: dict[int, int]) -> None:
        """Write ``image`` through the load port, the core held."""
        dut = self.dut
        dut.run.value = 0
        await RisingEdge(dut.clk)
        for addr, word in image.items():
            dut.load_en.value = 1
            dut.load_addr.value = addr
            dut.load_data.value = word
            await RisingEdge(dut.clk)
        dut.load_en.value = 0

    async def serve(self) -> None:
        dut = self.dut
        while True:
            await ReadOnly()
            if not dut.reg_valid.value:
                await RisingEdge(dut.reg_valid)
                await ReadOnly()
            word, we, value = (int(dut.reg_addr.value), int(dut.reg_we.value),
                               int(dut.reg_wdata.value))
            for _ in range(self.rng.choice((0, 0, 1, 3)) + 1):
                await FallingEdge(dut.clk)
            dut.reg_ready.value = 1
            dut.reg_rdata.value = self.on_read(word) if self.on_read and not we else word
            await RisingEdge(dut.clk)
            dut.reg_ready.value = 0
            if we:
                self.writes.append((self.cycle(), word, value))
                if self.on_write:
                    self.on_write(word, value)
            else:
                self.reads += 1

    async def read_back(self, addr: int, words: int) -> list[int]:
        """``words`` words from byte address ``addr`` through ``load_rdata`` (the core
        held)."""
        dut, out = self.dut, []
        for i in range(words):
            await RisingEdge(dut.clk)
            dut.load_addr.value = addr + 4 * i
            await RisingEdge(dut.clk)
            await ReadOnly()
            out.append(int(dut.load_rdata.value))
        await RisingEdge(dut.clk)
        return out

    def console(self) -> str:
        return "".join(chr(v) if 32 <= v < 127 or v == 10 else f"<{v}>"
                       for _, w, v in self.writes if w == CONSOLE)

    async def run_until(self, done: Event, cycles: int) -> str:
        """Let the core run until ``done`` is set, it traps, or ``cycles`` pass: which
        of "done", "trap", "timeout"."""
        dut = self.dut
        dut.run.value = 1
        began = self.cycle()
        trap = RisingEdge(dut.trap)
        end = await First(done.wait(), trap, ClockCycles(dut.clk, cycles))
        self.ran = self.cycle() - began
        await ReadOnly()
        self.bad = int(dut.bad_access.value)
        await RisingEdge(dut.clk)
        dut.run.value = 0
        await RisingEdge(dut.clk)
        return "done" if end is not trap and done.is_set() else (
            "trap" if end is trap else "timeout")


def _read_image(case: str) -> dict[int, int]:
    path = os.environ[f"MGMT_IMAGE_{case.upper()}"]
    return {int(a): w for a, w in json.loads(Path(path).read_text()).items()}


async def case_isa(tb: CoreTB) -> None:
    done = Event()
    tb.on_write = lambda word, value: (word == CONSOLE and value == ISA_DONE
                                       and done.set())
    await tb.load(_read_image("isa"))
    end = await tb.run_until(done, ISA_CYCLES)
    text = tb.console().replace(f"<{ISA_DONE}>", "")
    lines = text.splitlines()
    passed = [line.removesuffix("..OK") for line in lines if line.endswith("..OK")]
    tb.dut._log.info("isa: %d tests passed in %d cycles (%s); %s", len(passed), tb.ran,
                     end, " ".join(passed))
    problems = []
    if end != "done":
        problems.append(f"the suite ended by {end} after {tb.ran} cycles")
    if len(passed) != ISA_TESTS or len(lines) != ISA_TESTS:
        problems.append(f"{len(passed)} of {ISA_TESTS} tests passed")
    if tb.bad:
        problems.append("an access outside the memory map")
    if problems:
        raise AssertionError("; ".join(problems) + f"; console:\n{text}")


async def case_irq(tb: CoreTB) -> None:
    dut = tb.dut
    armed, finished = Event(), Event()
    handled = []

    def on_write(word, value):
        if word == HANDLER:
            handled.append((tb.cycle(), value))
            dut.irq.value = 0           # the handler's write acknowledges the interrupt
        elif word == MSG and value == ARMED:
            armed.set()
        elif word == MSG and value == FINISHED:
            finished.set()

    tb.on_write = on_write
    await tb.load(_read_image("irq"))

    async def raise_irq():
        await armed.wait()
        await ClockCycles(dut.clk, 40)
        dut.irq.value = 1
        tb.raised = tb.cycle()

    cocotb.start_soon(raise_irq())
    end = await tb.run_until(finished, IRQ_CYCLES)
    await ClockCycles(dut.clk, 10)
    problems = []
    if end != "done":
        problems.append(f"the program ended by {end} after {tb.ran} cycles")
    if [v for _, v in handled] != [1]:
        problems.append(f"the handler ran with pending masks {[v for _, v in handled]}, "
                        f"not once with 1")
    counts = [v for _, w, v in tb.writes if w == MSG][1:-1]
    if counts != [IRQ_COUNT]:
        problems.append(f"the count after the interrupt is {counts}, not {IRQ_COUNT}")
    if problems:
        raise AssertionError("; ".join(problems))
    tb.dut._log.info("irq: raised at cycle %d, the handler's write at %d", tb.raised,
                     handled[0][0])


async def case_bad_access(tb: CoreTB) -> None:
    finished = Event()
    tb.on_write = lambda word, value: word == MSG and value == FINISHED and finished.set()
    image = _read_image("bad_access")
    await tb.load(image)
    end = await tb.run_until(finished, IRQ_CYCLES)
    got = [v for _, w, v in tb.writes if w == MSG]
    want = [image[0], 0, FINISHED]
    if end != "done" or got != want or not tb.bad:
        raise AssertionError(f"bad accesses: the program ended by {end} and wrote "
                             f"{[hex(v) for v in got]}, expected {[hex(v) for v in want]}; "
                             f"bad_access {tb.bad}, expected 1")


#: dram.S: the window word that chooses the run, how many checks pass before the
#: accesses past the end and after them, the program's messages, and its cycle limit
#: (grant low included).
DRAM_MODE, DRAM_CHECKS, DRAM_ALL_CHECKS, MISALIGNED_RUNS = 28, 29, 32, 4
DRAM_FAILED, NOT_TRAPPED, DRAM_CYCLES = 0xFA11_0000, 0x7A7A, 20_000
#: The DRAM's last 16 bytes (the testbench fills them with 0x40 + i, the first 256 with
#: 0x80 + i, the rest with noise) and the bytes dram.S stores (address -> value).
DRAM_TOP = DRAM_BYTES - 16
DRAM_STORES = {0x40: 0x00, 0x41: 0xA5, 0x42: 0x11, 0x43: 0x22, 0x44: 0x88, 0x45: 0x77,
               0x46: 0x34, 0x47: 0x12, 0x48: 0xEF, 0x49: 0xBE, 0x4A: 0xAD, 0x4B: 0xDE,
               0x4F: 0x5A, 0x50: 0xEF, 0x51: 0xBE, DRAM_TOP: 0x99,
               DRAM_TOP + 12: 0x0D, DRAM_TOP + 13: 0xF0, DRAM_TOP + 14: 0xFE,
               DRAM_TOP + 15: 0xCA}
#: The grant's stretches (cycles, drawn at random): the first is low, long.
GRANT_FIRST_LOW = 1000
GRANT_LOW, GRANT_HIGH = (1, 1, 2, 3, 7, 30, 150), (1, 1, 2, 3, 9, 40)


class Dram:
    """The chip's DRAM behind the block's DRAM port: ``words`` words of ``word_bytes``
    (a dict, word -> value), read data the cycle after ``dram_re`` (noise in every
    other cycle and above the word), and ``dram_grant`` toggled in random stretches of
    :data:`GRANT_LOW` / :data:`GRANT_HIGH` cycles, beginning with
    :data:`GRANT_FIRST_LOW` low. Checks that the block reads or writes only in a
    granted cycle, one access a cycle, inside the DRAM."""

    def __init__(self, dut, rng: random.Random, word_bytes: int, words: int):
        self.dut, self.rng = dut, rng
        self.word_bytes, self.n_words = word_bytes, words
        self.words: dict[int, int] = {}
        self.problems: list[str] = []
        self.reads = self.writes = 0
        self.ungranted_after_read = 0   # reads whose next cycle was not granted
        self.low_cycles = 0
        self.active = self.always_granted = False
        self.changed = Event()      # ends a stretch early: active or always_granted changed

    def change(self, *, active: bool = True, always_granted: bool = False) -> None:
        self.active, self.always_granted = active, always_granted
        self.changed.set()

    def fill(self, data: bytes) -> None:
        w = self.word_bytes
        self.words = {i: int.from_bytes(data[w * i:w * (i + 1)], "little")
                      for i in range(self.n_words)}

    def contents(self) -> bytes:
        return b"".join(self.words[i].to_bytes(self.word_bytes, "little")
                        for i in range(self.n_words))

    async def run(self) -> None:
        dut, rng = self.dut, self.rng
        width = len(dut.dram_rdata)
        grant, left = 0, GRANT_FIRST_LOW
        pending = None          # the word read in the cycle before
        self.active = True
        await FallingEdge(dut.clk)
        while self.active:
            if self.always_granted:
                grant, left = 1, 1
            elif not left:
                grant ^= 1
                left = rng.choice(GRANT_HIGH if grant else GRANT_LOW)
            if pending is not None and not grant:
                self.ungranted_after_read += 1
            noise = rng.getrandbits(width)
            dut.dram_grant.value = grant
            if not grant and pending is None:
                # nothing to answer: let the stretch pass on a timer, watching for an
                # access (checking each cycle, or counting clock edges, would wake
                # Python every cycle)
                dut.dram_rdata.value = noise
                self.low_cycles += left
                passed = Timer(((left - 1) * 4 + 1) * CLOCK_NS / 4, unit="ns")
                changed = self.changed.wait()
                fired = await First(passed, RisingEdge(dut.dram_re), RisingEdge(dut.dram_we),
                                    changed)
                left = 0
                if fired is changed:
                    self.changed.clear()
                elif fired is not passed:
                    self.problems.append(f"cycle {self.cycle()}: an access with dram_grant "
                                         f"low")
                await FallingEdge(dut.clk)
                continue
            left -= 1
            self.low_cycles += not grant
            dut.dram_rdata.value = noise if pending is None else \
                noise >> 8 * self.word_bytes << 8 * self.word_bytes | self.words[pending]
            await ReadOnly()
            re, we = int(dut.dram_re.value), int(dut.dram_we.value)
            addr = int(dut.dram_addr.value)
            pending = None
            if (re or we) and (not grant or (re and we) or addr >= self.n_words):
                self.problems.append(f"cycle {self.cycle()}: dram_re {re}, dram_we {we} at "
                                     f"word {addr} of {self.n_words} with dram_grant {grant}")
            elif re:
                self.reads += 1
                pending = addr
            elif we:
                self.writes += 1
                self.words[addr] = int(dut.dram_wdata.value) & ((1 << 8 * self.word_bytes) - 1)
            await FallingEdge(dut.clk)
        dut.dram_grant.value = 0

    def cycle(self) -> int:
        return int(get_sim_time("ns")) // CLOCK_NS


async def case_dram(tb: CoreTB) -> None:
    image = _read_image("dram")
    problems = []
    for sel, params in enumerate(INSTANCES):
        await FallingEdge(tb.dut.clk)       # the pair gates the instances' clocks by sel
        tb.dut.sel.value = sel
        problems += [f"{params['dram_word_bytes']}-byte DRAM words: {p}"
                     for p in await _dram_instance(tb, image, params)]
    await FallingEdge(tb.dut.clk)
    tb.dut.sel.value = 0
    tb.on_read = tb.on_write = None
    if problems:
        raise AssertionError("; ".join(problems))


async def _dram_instance(tb: CoreTB, image: dict[int, int], params: dict) -> list[str]:
    dut = tb.dut
    dram = Dram(dut, tb.rng, params["dram_word_bytes"], params["dram_words"])
    initial = bytearray(tb.rng.randbytes(DRAM_BYTES))
    initial[:0x100] = bytes((b + 0x80) & 0xFF for b in range(0x100))
    initial[DRAM_TOP:] = bytes(0x40 + i for i in range(16))
    dram.fill(initial)
    await tb.load(image)
    mode, finished, bad_before = [0], Event(), []

    def on_write(word, value):
        if word == MSG and not bad_before:
            bad_before.append(int(dut.bad_access.value))
        if word == MSG and (value in (FINISHED, NOT_TRAPPED)
                            or value & ~0xFFFF == DRAM_FAILED):
            finished.set()

    tb.on_read = lambda word: mode[0] if word == DRAM_MODE else word
    tb.on_write = on_write
    cocotb.start_soon(dram.run())
    tb.writes.clear()
    end = await tb.run_until(finished, DRAM_CYCLES)
    await ClockCycles(dut.clk, 2)
    got = [v for _, w, v in tb.writes if w == MSG]
    want = [DRAM_CHECKS, DRAM_ALL_CHECKS, FINISHED]
    expected = bytearray(initial)
    for addr, value in DRAM_STORES.items():
        expected[addr] = value
    contents = dram.contents()
    wrong = [a for a in range(DRAM_BYTES) if contents[a] != expected[a]]
    problems = []
    if end != "done" or got != want:
        problems.append(f"the program ended by {end} after {tb.ran} cycles with messages "
                        f"{[hex(v) for v in got]}, expected {[hex(v) for v in want]}")
    if bad_before != [0] or not tb.bad:
        problems.append(f"bad_access was {bad_before} before the accesses past the end "
                        f"and {tb.bad} after them, expected [0] and 1")
    if wrong:
        problems.append(f"{len(wrong)} DRAM bytes differ from what dram.S stores, from "
                        + ", ".join(f"{a:#x}: {contents[a]:#04x} not {expected[a]:#04x}"
                                    for a in wrong[:6]))
    dut._log.info("dram, %d-byte words: %d checks in %d cycles, %d reads, %d writes, %d "
                  "cycles without the grant, %d reads followed by one", dram.word_bytes,
                  DRAM_ALL_CHECKS, tb.ran, dram.reads, dram.writes, dram.low_cycles,
                  dram.ungranted_after_read)
    writes = dram.writes
    if not dram.ungranted_after_read:
        problems.append("no read was followed by an ungranted cycle (the grant's pattern "
                        "no longer tests a store's wait)")
    # PicoRV32 issues a misaligned access it traps on (aligned down): with the grant
    # held high the block reads the word, but the store must not write it
    dram.change(always_granted=True)
    await ClockCycles(dut.clk, 2)
    for mode[0] in range(1, MISALIGNED_RUNS + 1):
        tb.writes.clear()
        reads = dram.reads
        end = await tb.run_until(Event(), IRQ_CYCLES)
        got = [v for _, w, v in tb.writes if w == MSG]
        if end != "trap" or got or tb.bad:
            problems.append(f"misaligned access {mode[0]} of dram.S ended by {end} with "
                            f"messages {[hex(v) for v in got]} and bad_access {tb.bad}, "
                            f"expected a trap and neither")
        if dram.reads == reads:
            problems.append(f"misaligned access {mode[0]} did not reach the DRAM port: "
                            f"this test no longer sees PicoRV32 issue it")
    if dram.writes != writes or dram.contents() != contents:
        problems.append("a misaligned store reached the DRAM")
    dram.change(active=False)
    await ClockCycles(dut.clk, 2)
    return problems + dram.problems


class ChipRegs:
    """The chip's register file (rtl/csr.py) as the firmware sees it, with runs of
    :data:`FW_RUN_CYCLES`: START (stopped) begins a run, which ends DONE with
    ``CYCLES`` = 1000 + ``PROG_LEN`` and raises ``irq``; IRQ_ACK or the next START
    clears DONE and the line; other registers take writes only while stopped, and
    ``UBUF_ROWS`` only a power of two or 0."""

    def __init__(self, dut):
        from systolica.arch.regs import Reg
        self.dut, self.Reg = dut, Reg
        self.values = dict.fromkeys(map(int, Reg), 0)
        self.running = self.done = False
        self.starts: list[tuple[int, ...]] = []
        self.acks = 0

    def read(self, word: int) -> int:
        from systolica.arch.regs import STATUS_DONE, STATUS_RUNNING
        if word == self.Reg.STATUS:
            return STATUS_RUNNING * self.running | STATUS_DONE * self.done
        return self.values.get(word, 0)

    def write(self, word: int, value: int) -> None:
        from systolica.arch.regs import CTRL_IRQ_ACK, CTRL_START
        Reg, v = self.Reg, self.values
        if word == Reg.CTRL:
            if value & CTRL_START and not self.running:
                self.running, self.done = True, False
                self.dut.irq.value = 0
                self.starts.append(tuple(v[r] for r in (Reg.PROG_ADDR, Reg.PROG_LEN,
                                                        Reg.UBUF_BASE, Reg.UBUF_ROWS)))
                cocotb.start_soon(self.finish_run())
            elif value & CTRL_IRQ_ACK:
                self.done = False
                self.dut.irq.value = 0
                self.acks += 1
        elif word == Reg.UBUF_ROWS and value & (value - 1):
            pass
        elif not self.running and word in v:
            v[word] = value

    async def finish_run(self) -> None:
        await ClockCycles(self.dut.clk, FW_RUN_CYCLES)
        self.running, self.done = False, True
        self.values[self.Reg.CYCLES] = 1000 + self.values[self.Reg.PROG_LEN]
        self.dut.irq.value = 1


async def case_firmware(tb: CoreTB) -> None:
    from systolica.firmware.core_image import MAILBOX_FIELDS, FwResult
    chip = ChipRegs(tb.dut)
    parked = Event()

    def on_write(word, value):
        chip.write(word, value)
        if chip.acks == len(FW_STEPS) and not parked.is_set():
            cocotb.start_soon(quiet())

    async def quiet():      # the last step acknowledged: let it write the result
        await ClockCycles(tb.dut.clk, FW_QUIET)
        parked.set()

    tb.on_write, tb.on_read = on_write, chip.read
    await tb.load(_read_image("firmware"))
    end = await tb.run_until(parked, FW_CYCLES)
    tb.on_read = None
    mailbox = dict(zip(MAILBOX_FIELDS,
                       await tb.read_back(DMEM_BASE, len(MAILBOX_FIELDS))))
    want = {"result": FwResult.OK, "steps_done": len(FW_STEPS),
            "cycles": sum(1000 + length for _, length, _, _ in FW_STEPS)}
    got = {k: mailbox[k] for k in want}
    if end != "done" or got != want or chip.starts != list(FW_STEPS) or tb.bad:
        raise AssertionError(f"firmware: ended by {end} after {tb.ran} cycles, mailbox "
                             f"{mailbox}, expected {want}; chip starts {chip.starts}, "
                             f"expected {list(FW_STEPS)}; bad_access {tb.bad}")
    tb.dut._log.info("firmware: %d steps, result OK, in %d cycles (%d of them quiet)",
                     len(FW_STEPS), tb.ran, FW_QUIET)


CASES.update(isa=case_isa, irq=case_irq, bad_access=case_bad_access, dram=case_dram,
             firmware=case_firmware)


@cocotb.test()
async def run_case(dut):
    tb = CoreTB(dut, seed="mgmt_core")
    await tb.start()
    for name in case_names():
        tb.writes.clear()
        await CASES[name](tb)
