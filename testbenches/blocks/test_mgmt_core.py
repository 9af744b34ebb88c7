# amaranth: UnusedElaboratable=no
"""The management core block (:class:`systolica.rtl.mgmt_core.MgmtCore`): PicoRV32's
instruction tests, an interrupt, accesses outside the map, the DRAM window (with DRAM
words of 16 and of 4 bytes) and the project's firmware on the Verilated block
(``tb_mgmt_core``), and its parameters.

Its model is built through :func:`systolica.sim.verilated.build` like every block's, with
``picorv32.v`` of ``pythondata-cpu-picorv32`` as a further Verilog source; the model's
top is :class:`mgmt_core_pair.MgmtCorePair`, two instances of the block that differ in
their DRAM word, so that one build and one simulator start check both. The programs
are assembled on this side (``tb_mgmt_core.build_images``) and handed to the simulator
as image files. All cases run in one simulator start.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import mgmt_core_pair
import pytest
import tb_mgmt_core

from systolica.rtl.mgmt_core import MgmtCore, picorv32_source
from systolica.sim import verilated
from systolica.sim.verilated import build_root

from block_runner import OPT_VARIABLES, run_block


def design() -> verilated.Design:
    factory = partial(mgmt_core_pair.MgmtCorePair, instances=mgmt_core_pair.INSTANCES)
    pair = verilated.component(mgmt_core_pair.TOP, factory, label="block-mgmt_core",
                               sources=(picorv32_source(),),
                               make_variables=OPT_VARIABLES)
    # the pair's module is outside the package: name the block's source as well
    return dataclasses.replace(pair, generator=(*pair.generator, MgmtCore.__module__))


@pytest.mark.rtl
def test_the_core_runs_the_isa_tests_an_interrupt_and_the_firmware():
    images = tb_mgmt_core.build_images(build_root() / "firmware" / "mgmt_core")
    images["firmware"] = tb_mgmt_core.firmware_image(build_root() / "firmware" / "mgmt_core")
    build_dir = verilated.build(design())
    run_block(build_dir, mgmt_core_pair.TOP, "tb_mgmt_core",
              extra_env={"BLOCK_CASE": ",".join(tb_mgmt_core.CASES),
                         **{f"MGMT_IMAGE_{c.upper()}": str(p) for c, p in images.items()}})


def test_the_package_ships_the_instruction_tests():
    assert picorv32_source().is_file()
    assert len(tb_mgmt_core.isa_tests()) == tb_mgmt_core.ISA_TESTS


@pytest.mark.parametrize("kwargs, message", [
    ({"imem_words": 1000}, "imem_words must be a power of two of at least 16"),
    ({"dmem_words": 8}, "dmem_words must be a power of two of at least 16"),
    ({"dmem_words": True}, "dmem_words must be a power of two"),
    ({"imem_words": 16, "imem_init": [0] * 17}, "imem_init has 17 words, more than"),
    ({"dram_word_bytes": 2}, "dram_word_bytes must be a power of two of at least 4"),
    ({"dram_word_bytes": 12}, "dram_word_bytes must be a power of two of at least 4"),
    ({"dram_word_bytes": True}, "dram_word_bytes must be a power of two"),
    ({"dram_words": 0}, "dram_words must be a positive integer of at most 16777216"),
    ({"dram_words": (1 << 24) + 1}, r"dram_words must be .* \(the 24-bit DRAM word"),
    ({"dram_words": 4096.0}, "dram_words must be a positive integer"),
])
def test_bad_parameters(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        MgmtCore(**kwargs)
