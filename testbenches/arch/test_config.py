"""The chip presets' memories against the instruction set's address fields
(``systolica/arch/config.py``), and what a large external memory costs a run: ``base``
addresses 256 MiB, all that the DMA's 24-bit word address reaches, and the golden
model takes memory only for the words a run touches."""

from __future__ import annotations

import numpy as np
import pytest

from systolica import golden
from systolica.arch import fetch, isa, timing
from systolica.arch.config import PRESETS, preset
from systolica.arch.isa import DmaKind, Instr, Opcode
from systolica.arch.loadable import Loadable

MIB = 1 << 20
#: VGG-19 compiled for ``base`` layer by layer (``zoo.vgg19``, 143.7 M weights): its
#: data (weights, parameters, every map) 161,006,256 bytes and its program 1,696,547
#: instructions of 16 bytes; ``test_vgg19_fits_base_dram`` (``make regress``) compiles it
VGG19_BYTES = 161_006_256 + 1_696_547 * 16


def test_base_dram_holds_vgg19():
    cfg = preset("base")
    assert cfg.dram_bytes == 256 * MIB
    assert cfg.dram_words == 1 << isa.DRAM_ADDR_BITS
    assert cfg.dram_bytes > VGG19_BYTES > 64 * MIB      # more than base's DRAM was


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_dram_word_is_addressable(name):
    """The last word of every preset's DRAM is a DMA address the instruction encodes."""
    cfg = preset(name)
    assert cfg.dram_words <= 1 << isa.DRAM_ADDR_BITS
    last = Instr(Opcode.DMA, 0, dict(kind=DmaKind.LOAD_CBUF, dram_addr=cfg.dram_words - 1,
                                     dram_stride=1, buf_addr=0, rows=1))
    assert isa.decode(isa.encode(last)).fields["dram_addr"] == cfg.dram_words - 1


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_golden_model_touches_only_the_words_a_run_uses():
    """A copy from the last words of base's 256 MiB to the first: the golden model's
    result holds the whole DRAM, but the run takes memory for the pages it touches."""
    cfg = preset("base")
    top, R = cfg.dram_words, cfg.rows
    data = np.random.default_rng(0).integers(1, 256, (8, R), dtype=np.uint8)
    load = Instr(Opcode.DMA, 0, dict(kind=DmaKind.LOAD_CBUF, dram_addr=top - 8,
                                     dram_stride=1, buf_addr=0, rows=8))
    store = Instr(Opcode.DMA, timing.done(cfg, load),
                  dict(kind=DmaKind.STORE_CBUF, dram_addr=0, dram_stride=1, buf_addr=0,
                       rows=8))
    before = _resident_bytes()
    run = golden.run(cfg, Loadable.for_chip(cfg,
                                            isa.to_bytes([isa.encode(load), isa.encode(store)]),
                                   ((top - 8, data),)))
    grown = _resident_bytes() - before
    assert run.error.name == "NONE" and run.dram.shape == (top, R)
    assert np.array_equal(run.dram[:8], data) and np.array_equal(run.dram[top - 8:], data)
    assert not run.dram[8:4096].any()
    assert grown < 16 * MIB, f"the run took {grown / MIB:.0f} MiB"


@pytest.mark.slow
@pytest.mark.regress      # a two-minute compile of 1.7 M instructions, 3 GB of memory
def test_vgg19_fits_base_dram():
    from systolica.compiler import compile_network
    from systolica.models import zoo
    cfg = preset("base")
    compiled = compile_network(cfg, zoo.vgg19())
    end = compiled.prog_addr + len(compiled.program) * fetch.words_per_instruction(cfg)
    assert end * cfg.dram_word_bytes <= cfg.dram_bytes
    assert end * cfg.dram_word_bytes == VGG19_BYTES > 64 * MIB
