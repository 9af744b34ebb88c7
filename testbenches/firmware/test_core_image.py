"""The management core's firmware builds from the project's files into RV32IM images
that sit in the core's memory map, with headers generated from the chip's one copy of
its numbers, once per set of inputs; an image that does not fit says which memory."""

from __future__ import annotations

import re
import struct

import pytest
from elftools.elf.elffile import ELFFile

from systolica.arch import regs
from systolica.firmware import core_image
from systolica.firmware.core_image import (
    DMEM_BASE,
    IMEM_BASE,
    MAILBOX_FIELDS,
    STEP_FIELDS,
    FirmwareError,
)


@pytest.fixture(scope="module")
def image():
    return core_image.build()


def _defines(header: str) -> dict[str, int]:
    return {name: int(value, 0) for name, value
            in re.findall(r"#define (\w+) (0x[0-9a-f]+|\d+)u", header)}


def test_the_elf_is_rv32_without_compressed_instructions(image):
    raw = image.elf.read_bytes()
    assert raw[4] == 1                                            # ELFCLASS32
    assert struct.unpack_from("<H", raw, 18)[0] == core_image.EM_RISCV == 243
    assert struct.unpack_from("<I", raw, 36)[0] & core_image.EF_RISCV_RVC == 0
    with open(image.elf, "rb") as f:
        elf = ELFFile(f)
        arch = elf.get_section_by_name(".riscv.attributes").data()
        text = elf.get_section_by_name(".text").data()
    isa = re.search(rb"rv32[a-z0-9_]+", arch).group().decode()         # e.g. rv32i2p1_m2p0
    extensions = {re.sub(r"\d+p\d+$", "", part) for part in isa.split("_")}
    assert extensions <= {"rv32i", "m", "zmmul"} and "m" in extensions, isa  # RV32IM only
    # a 16-bit instruction has other low bits than 0b11: none, walking 32-bit words
    assert all(word & 3 == 3 for word, in struct.iter_unpack("<I", text))


def test_the_sections_sit_in_the_memory_map(image):
    with open(image.elf, "rb") as f:
        placed = {s.name: (s["sh_addr"], s["sh_size"]) for s in ELFFile(f).iter_sections()
                  if s["sh_flags"] & 0x2}
    assert placed[".text"][0] == IMEM_BASE
    assert placed[".mailbox"][0] == DMEM_BASE
    for name, (addr, size) in placed.items():
        inside = [base for base, length in ((IMEM_BASE, image.imem_bytes),
                                            (DMEM_BASE, image.dmem_bytes))
                  if base <= addr and addr + size <= base + length]
        assert inside, name
    # the reset vector at 0, PicoRV32's interrupt vector (PROGADDR_IRQ) at 0x10
    assert image.symbols["_start"] == 0 and image.symbols["irq_entry"] == 0x10
    assert image.symbols["__irq_stack_top"] == DMEM_BASE + image.dmem_bytes


def test_the_images_hold_the_loaded_sections_and_fit(image):
    with open(image.elf, "rb") as f:
        elf = ELFFile(f)
        text = elf.get_section_by_name(".text").data()
        rodata = elf.get_section_by_name(".rodata")
        read_only = rodata["sh_size"] if rodata else 0     # code's tables, after .text
    assert image.imem[:len(text)] == text and len(image.imem) % 4 == 0
    assert image.text_bytes == len(text) + read_only <= len(image.imem) <= image.imem_bytes
    assert len(image.dmem) == image.data_bytes <= image.dmem_bytes
    mailbox = 4 * (len(MAILBOX_FIELDS) + core_image.MAX_STEPS * len(STEP_FIELDS))
    assert image.bss_bytes >= mailbox


def test_the_mailbox_layout_is_the_generated_struct(image):
    with open(image.elf, "rb") as f:
        symbol, = ELFFile(f).get_section_by_name(".symtab").get_symbol_by_name("fw_mailbox")
    assert symbol["st_value"] == DMEM_BASE
    assert symbol["st_size"] == core_image.step_offset(core_image.MAX_STEPS)
    assert core_image.field_offset("result") == 4 * MAILBOX_FIELDS.index("result")
    assert core_image.step_offset(1, "prog_len") == 4 * (len(MAILBOX_FIELDS) + len(STEP_FIELDS) + 2)


def test_the_register_header_is_regs_py():
    defines = _defines(core_image.regs_header())
    expected = {f"REG_{r.name}": r.value for r in regs.Reg}
    expected |= {f"ERROR_{e.name}": e.value for e in regs.ErrorCode}
    expected |= {n: getattr(regs, n) for n in vars(regs) if n.startswith(("CTRL_", "STATUS_"))}
    expected["REGS_BASE"] = core_image.REGS_BASE
    assert defines == expected


def test_the_build_compiles_the_headers_it_generates_now(image):
    """The generated headers live beside the objects and are written by the build that
    uses them, so they are as fresh as regs.py: a change to it is a new build."""
    folder = image.elf.parent
    assert (folder / "regs.h").read_text() == core_image.regs_header()
    assert (folder / "table.h").read_text() == core_image.table_header(core_image.MAX_STEPS)
    assert not list(core_image.SOURCES.glob("regs.h")) and not list(
        core_image.SOURCES.glob("table.h"))


def test_the_build_is_cached_by_its_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("SYSTOLICA_BUILD", str(tmp_path))
    first = core_image.build()
    assert first.elf.is_relative_to(tmp_path)
    made = first.elf.stat().st_mtime_ns
    assert core_image.build() is first                       # remembered in the process
    monkeypatch.setattr(core_image, "_built", {})            # as another process finds it
    again = core_image.build()
    assert again.elf == first.elf and again.elf.stat().st_mtime_ns == made
    assert again.imem == first.imem
    bigger = core_image.build(dmem_bytes=2 * core_image.DMEM_BYTES)
    assert bigger.elf.parent != first.elf.parent
    assert bigger.symbols["__irq_stack_top"] == DMEM_BASE + 2 * core_image.DMEM_BYTES


@pytest.mark.parametrize("params, message", [
    (dict(imem_bytes=512), "does not fit the core's instruction memory: .text overflows it"),
    (dict(max_steps=1000), "does not fit the core's data memory: .mailbox overflows it"),
    (dict(dmem_bytes=4096, max_steps=90), "less than the 1024 bytes of stack"),
    (dict(imem_bytes=3000), "instruction memory's size must be a power of two"),
    (dict(dmem_bytes=128), "data memory's size must be a power of two of at least 256"),
    (dict(max_steps=0), "step table needs at least one entry"),
], ids=["imem", "dmem", "stack", "imem-size", "dmem-size", "no-steps"])
def test_an_image_that_does_not_fit_is_refused(params, message):
    with pytest.raises(FirmwareError, match=re.escape(message)):
        core_image.build(**params)
