"""Build the management core's firmware (``firmware/core/``) into its memory images.

:func:`build` compiles the C and assembly sources with zig's clang for RV32IM
(``ziglang`` from PyPI), links them with ``link.ld`` for the core's memory map, and
cuts the ELF into the two images the chip loads: the instruction memory's (code and
read-only data, from address 0) and the data memory's (initialised data; the mailbox
and ``.bss`` are zeros). Two headers are generated beside the objects, never kept in
the source tree, so every number has one copy: ``regs.h`` from
:mod:`systolica.arch.regs`, ``table.h``, the mailbox's layout, from this module, and
``kdesc.h``, the kernels' descriptors, from :mod:`systolica.firmware.core_kernels`.

A build happens once per set of inputs, the way the Verilated simulators are built
(:mod:`systolica.sim.verilated`): the directory under ``<build root>/firmware/`` is
named by a hash of the sources, the generated headers, the memory sizes, the flags
and the compiler's version; a lock lets concurrent processes share one build, and a
stamp written last marks it finished.

The mailbox (at the start of the data memory): the host writes ``magic``,
``n_steps`` and the steps before it releases the core's reset; the firmware writes
``result`` last, once, when the table has run or stopped (:class:`FwResult`).
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from systolica.arch import regs
from systolica.firmware import core_kernels
from systolica.sim.verilated import build_root, locked

SOURCES = Path(__file__).resolve().parent / "core"

#: the core's byte addresses (docs/management-core.md, "Memory map")
IMEM_BASE = 0x0000_0000
DMEM_BASE = 0x1000_0000
REGS_BASE = 0x4000_0000
#: DRAM byte b is the core's byte DRAM_BASE + b (the window reaches 2**31 bytes)
DRAM_BASE = core_kernels.DRAM_WINDOW
#: defaults of the memory sizes, until ChipConfig carries them
IMEM_BYTES = 8 * 1024
DMEM_BYTES = 8 * 1024
MAX_STEPS = 64

TARGET = ("-target", "riscv32-freestanding-none", "-mcpu=generic_rv32+m")
CFLAGS = (*TARGET, "-O2", "-g0", "-ffreestanding", "-fno-builtin", "-nostdlib", "-std=c11",
          "-Wall", "-Wextra", "-Werror", "-fno-asynchronous-unwind-tables",
          "-fomit-frame-pointer", "-mno-relax")
#: the ELF's machine (EM_RISCV) and its flag for compressed instructions (EF_RISCV_RVC)
EM_RISCV = 243
EF_RISCV_RVC = 0x1

#: the mailbox's ``magic``: "STB1", a table of this layout
FW_MAGIC = 0x5354_4231


class FwResult(enum.IntEnum):
    """The mailbox's ``result``: what the firmware leaves the host."""
    RUNNING = 0       # not finished (or not started)
    OK = 1            # every step ran; ``cycles`` is the chip's cycles summed
    CHIP_FAULT = 2    # the chip stopped step ``fault_step`` with ErrorCode ``fault_code``
                      # at program index ``fault_pc``, cycle ``fault_cycle``
    BAD_TABLE = 3     # ``magic`` is not FW_MAGIC or ``n_steps`` exceeds the table
    BAD_STEP = 4      # step ``fault_step`` cannot run: FwStepProblem ``fault_code``
    TRAP = 5          # the core trapped (``fault_code``: PicoRV32's pending IRQ mask,
                      # ``fault_pc``: the return address) during step ``fault_step``


class FwFlag(enum.IntFlag):
    """The mailbox's ``flags``: how the firmware runs the table."""
    OVERLAP = 1       # write the next chip step's configuration while one runs (the
                      # double-buffered registers); clear: only after it has stopped


class FwStepKind(enum.IntEnum):
    CHIP = 1          # a chip program: PROG_ADDR, PROG_LEN, the UBUF region, START
    KERNEL = 2        # an operation the core computes itself (``kernel``, ``args``)


class FwStepProblem(enum.IntEnum):
    UNKNOWN_KIND = 1      # ``kind`` is no FwStepKind
    NO_KERNEL = 2         # the firmware has no kernel of that number (core_kernels.Kernel)
    PROGRAM_REFUSED = 3   # PROG_ADDR / PROG_LEN did not read back as written
    UBUF_REFUSED = 4      # the chip refused the UBUF region (ChipConfig.ubuf_problem)
    BAD_DESCRIPTOR = 5    # a kernel's descriptor (at DRAM byte ``arg0``) is misaligned or
                          # past ``dram_bytes``, names another kernel, or has a parameter
                          # out of its range
    BAD_VIEW = 6          # a kernel's tensor view has an element type the kernel does not
                          # take, is misaligned for it, or runs past ``dram_bytes``


#: one step of the table, 32-bit words in this order: what the host writes, then what
#: the firmware records: a chip step's START on the core's cycle counter and its
#: CYCLES; a kernel step's start on that counter and the core's cycles it took
STEP_FIELDS = ("kind", "prog_addr", "prog_len", "ubuf_base", "ubuf_rows", "kernel",
               "arg0", "arg1", "t_start", "t_cycles")
#: the mailbox's words before the steps
MAILBOX_FIELDS = ("magic", "n_steps", "flags", "result", "steps_done", "fault_step",
                  "fault_code", "fault_pc", "fault_cycle", "cycles", "dram_bytes")
#: ``dram_bytes``: the host writes the DRAM's size (at most DRAM_WINDOW_BYTES, the
#: window's reach); a kernel touches no byte at or past it


def field_offset(name: str) -> int:
    """The byte offset of a mailbox word from the start of the data memory."""
    return 4 * MAILBOX_FIELDS.index(name)


def step_offset(index: int, name: str = "kind") -> int:
    """The byte offset of word `name` of step `index` from the start of the data memory."""
    return 4 * (len(MAILBOX_FIELDS) + index * len(STEP_FIELDS) + STEP_FIELDS.index(name))


class FirmwareError(RuntimeError):
    """The firmware did not build, or its image does not fit the core's memories."""


# -- the generated headers --------------------------------------------------------------

def _guard(text: str, name: str, what: str) -> str:
    return (f"/* {what}\n * Generated by systolica.firmware.core_image: do not edit. */\n"
            f"#ifndef SYSTOLICA_{name}_H\n#define SYSTOLICA_{name}_H\n\n{text}\n#endif\n")


def regs_header() -> str:
    """``regs.h``: the register window, every register, the CTRL and STATUS bits and
    the error codes of :mod:`systolica.arch.regs`."""
    lines = [f"#define REGS_BASE 0x{REGS_BASE:08x}u", ""]
    lines += [f"#define REG_{r.name} {r.value}u" for r in regs.Reg]
    lines.append("")
    for name in sorted(n for n in vars(regs) if n.startswith(("CTRL_", "STATUS_"))):
        lines.append(f"#define {name} 0x{getattr(regs, name):x}u")
    lines.append("")
    lines += [f"#define ERROR_{e.name} {e.value}u" for e in regs.ErrorCode]
    return _guard("\n".join(lines) + "\n", "REGS",
                  "The chip's register interface (systolica/arch/regs.py).")


def table_header(max_steps: int) -> str:
    """``table.h``: the mailbox's layout and codes (this module's tables)."""
    lines = ["#include <stdint.h>", "", f"#define FW_MAGIC 0x{FW_MAGIC:08x}u",
             f"#define FW_MAX_STEPS {max_steps}u", f"#define FW_DRAM_BASE 0x{DRAM_BASE:08x}u",
             f"#define FW_DRAM_WINDOW_BYTES 0x{core_kernels.DRAM_WINDOW_BYTES:08x}u", ""]
    for enum_cls, prefix in ((FwResult, "FW_RESULT"), (FwFlag, "FW_FLAG"),
                             (FwStepKind, "FW_STEP"),
                             (FwStepProblem, "FW_STEP_PROBLEM")):
        lines += [f"#define {prefix}_{e.name} {e.value}u" for e in enum_cls]
        lines.append("")
    lines.append("struct fw_step {")
    lines += [f"    uint32_t {f};" for f in STEP_FIELDS]
    lines += ["};", "", "struct fw_mailbox {"]
    lines += [f"    uint32_t {f};" for f in MAILBOX_FIELDS]
    lines += ["    struct fw_step steps[FW_MAX_STEPS];", "};"]
    return _guard("\n".join(lines) + "\n", "TABLE",
                  "The mailbox: the step table the host writes, the result the firmware "
                  "writes.")


def sizes_script(imem_bytes: int, dmem_bytes: int) -> str:
    return f"IMEM_BYTES = {imem_bytes};\nDMEM_BYTES = {dmem_bytes};\n"


# -- the build --------------------------------------------------------------------------

@dataclass(frozen=True)
class CoreImage:
    """A built firmware: its ELF, the two memory images (little-endian bytes, from the
    memory's first address; the instruction memory's padded to whole words), the
    section sizes and the symbols' addresses."""
    elf: Path
    imem: bytes
    dmem: bytes
    text_bytes: int       # .text and .rodata (instruction memory)
    data_bytes: int       # .data (initialised, in the data memory's image)
    bss_bytes: int        # .bss and the mailbox (zeros)
    imem_bytes: int
    dmem_bytes: int
    symbols: dict[str, int]
    build_seconds: float  # of the build that made it (not of a cache hit)


def _check_size(name: str, value: int) -> int:
    if not isinstance(value, int) or value < 256 or value & (value - 1):
        raise FirmwareError(f"{name} must be a power of two of at least 256 bytes, "
                            f"not {value!r}")
    return value


@functools.cache
def _zig_version() -> str:
    from importlib.metadata import version
    return version("ziglang")


def _inputs(imem_bytes: int, dmem_bytes: int, max_steps: int) -> dict[str, str]:
    """Every file the build reads, by name: the sources and the generated files."""
    files = {p.name: p.read_text() for p in sorted(SOURCES.iterdir())
             if p.suffix in (".c", ".h", ".S", ".ld")}
    files["regs.h"] = regs_header()
    files["table.h"] = table_header(max_steps)
    files["kdesc.h"] = core_kernels.descriptor_header()
    files["sizes.ld"] = sizes_script(imem_bytes, dmem_bytes)
    return files


def digest(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for part in (json.dumps(files, sort_keys=True), json.dumps(CFLAGS), _zig_version()):
        h.update(part.encode() + b"\0\1")
    return h.hexdigest()


_built: dict[tuple[str, str], CoreImage] = {}


def for_chip(cfg) -> CoreImage:
    """The firmware for chip `cfg`'s management core (its memory sizes)."""
    if not cfg.has_core:
        raise FirmwareError(f"chip {cfg.name} has no management core (core_imem_bytes 0)")
    return build(imem_bytes=cfg.core_imem_bytes, dmem_bytes=cfg.core_dmem_bytes)


def build(*, imem_bytes: int = IMEM_BYTES, dmem_bytes: int = DMEM_BYTES,
          max_steps: int = MAX_STEPS) -> CoreImage:
    """Build (or reuse) the firmware for memories of these sizes and a step table of
    `max_steps` entries; raise :class:`FirmwareError` if it does not compile or fit."""
    _check_size("the instruction memory's size", imem_bytes)
    _check_size("the data memory's size", dmem_bytes)
    if not isinstance(max_steps, int) or max_steps < 1:
        raise FirmwareError(f"the step table needs at least one entry, not {max_steps!r}")
    files = _inputs(imem_bytes, dmem_bytes, max_steps)
    key, root = digest(files), build_root()
    if (str(root), key) in _built:
        return _built[str(root), key]
    out = root / "firmware" / key[:16]
    out.mkdir(parents=True, exist_ok=True)
    stamp, elf = out / "build.stamp", out / "firmware.elf"
    with locked(out / ".lock"):
        if stamp.exists() and stamp.read_text() == key and elf.exists():
            seconds = float((out / "build.time").read_text())
        else:
            stamp.unlink(missing_ok=True)
            seconds = _compile(files, out, elf)
            (out / "build.time").write_text(f"{seconds:.3f}\n")
            tmp = out / "build.stamp.tmp"
            tmp.write_text(key)
            tmp.replace(stamp)
    image = _images(elf, imem_bytes, dmem_bytes, seconds)
    _built[str(root), key] = image
    return image


def _compile(files: dict[str, str], out: Path, elf: Path) -> float:
    for name, text in files.items():
        (out / name).write_text(text)
    sources = sorted(n for n in files if n.endswith((".c", ".S")))
    cmd = [sys.executable, "-m", "ziglang", "cc", *CFLAGS, "-I.", "-T", "link.ld",
           *sources, "-o", elf.name]
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=out, capture_output=True, text=True,
                          env={**os.environ, "ZIG_GLOBAL_CACHE_DIR": str(out.parent / ".zig")})
    seconds = time.monotonic() - start
    (out / "build.log").write_text(" ".join(cmd) + "\n" + done.stdout + done.stderr)
    if done.returncode:
        overflow = re.search(r"section '(\S+)' will not fit in region '(\w+)': "
                             r"overflowed by (\d+) bytes", done.stderr)
        if overflow:
            section, region, over = overflow.groups()
            memory = {"IMEM": "instruction", "DMEM": "data"}.get(region, region)
            raise FirmwareError(
                f"the firmware does not fit the core's {memory} memory: {section} overflows "
                f"it by {over} bytes; give the core a larger {memory} memory "
                + ("(imem_bytes) or shrink the firmware" if region == "IMEM" else
                   "(dmem_bytes) or a smaller step table (max_steps)"))
        if "STACK_MIN_BYTES" in done.stderr:
            raise FirmwareError("the firmware's data leave less than the 1024 bytes of stack "
                                "link.ld asks for in the core's data memory; give the core a "
                                "larger data memory (dmem_bytes) or a smaller step table "
                                "(max_steps)")
        raise FirmwareError(f"the firmware did not build (zig cc exited with "
                            f"{done.returncode}):\n{done.stderr.strip()[-3000:]}")
    return seconds


def _images(elf_path: Path, imem_bytes: int, dmem_bytes: int, seconds: float) -> CoreImage:
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    memories = {"imem": (IMEM_BASE, imem_bytes), "dmem": (DMEM_BASE, dmem_bytes)}
    images = {"imem": bytearray(), "dmem": bytearray()}
    sizes = {"text": 0, "data": 0, "bss": 0}
    with open(elf_path, "rb") as f:
        elf = ELFFile(f)
        if elf["e_machine"] != "EM_RISCV" or elf.elfclass != 32:
            raise FirmwareError(f"{elf_path} is not a 32-bit RISC-V ELF")
        for section in elf.iter_sections():
            if not section["sh_flags"] & 0x2:          # SHF_ALLOC
                continue
            addr, size = section["sh_addr"], section["sh_size"]
            where = next((m for m, (base, length) in memories.items()
                          if base <= addr and addr + size <= base + length), None)
            if where is None:
                raise FirmwareError(f"section {section.name} ({size} bytes at 0x{addr:08x}) "
                                    f"lies outside the core's memories")
            if section["sh_type"] == "SHT_NOBITS":
                sizes["bss"] += size
                continue
            sizes["text" if where == "imem" else "data"] += size
            image, offset = images[where], addr - memories[where][0]
            if len(image) < offset + size:
                image.extend(bytes(offset + size - len(image)))
            image[offset:offset + size] = section.data()
        symtab = elf.get_section_by_name(".symtab")
        symbols = ({s.name: s["st_value"] for s in symtab.iter_symbols() if s.name}
                   if isinstance(symtab, SymbolTableSection) else {})
    for image in images.values():
        image.extend(bytes(-len(image) % 4))
    return CoreImage(elf=elf_path, imem=bytes(images["imem"]), dmem=bytes(images["dmem"]),
                     text_bytes=sizes["text"], data_bytes=sizes["data"],
                     bss_bytes=sizes["bss"], imem_bytes=imem_bytes, dmem_bytes=dmem_bytes,
                     symbols=symbols, build_seconds=seconds)
