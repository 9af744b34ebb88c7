"""FabricRegs (``tiny`` preset; a 4x4 grid whose 132 multiplexers span two SETCFG
pages; a 2x16 grid of one-cell tiles whose 134 multiplexers of up to 18 sources take
SETCFGW, in five pages of 32): one control register per multiplexer of
:func:`systolica.arch.fabric.muxes`, reset to :func:`systolica.arch.fabric.defaults`, written by
the ``more + 1`` pairs of a SETCFG payload on the issue port (``issue.valid``,
``issue.payload``) at the clock edge, in pair order.

The model is a list of register values; every cycle all ``value[k]`` outputs are
compared with it.
"""

from __future__ import annotations

import os
import random

import cocotb

from systolica.arch import fabric, isa
from systolica.arch.config import preset
from systolica.arch.isa import Opcode

from tb_base import BlockTB, case_names, pack_fields

# the second build (test_blocks.py) is a 4x4 grid of 2x2 tiles with the general lanes:
# 132 multiplexers, so its SETCFGs name two pages; the third a 2x16 grid, whose wb_src
# has 18 sources, past SETCFG's 4-bit values
PAGED = preset("tiny").replace(name="tiny_4x4", tile_rows=4, tile_cols=4, tile_size=2)
WIDE = preset("tiny").replace(name="tiny_2x16", tile_rows=2, tile_cols=16, tile_size=1,
                              general_lanes=False, core_imem_bytes=0, core_dmem_bytes=0)
CFG = {"paged": PAGED, "wide": WIDE}.get(os.environ.get("FABRIC_VARIANT"), preset("tiny"))
MUXES = fabric.muxes(CFG)
#: the chip's format, from the opcode alone (SETCFGW where SETCFG's 8-bit numbers or
#: 4-bit values fall short: the contract's rule, not fabric.setcfg_format)
OP = Opcode.SETCFG if len(MUXES) <= 256 and max(len(m.sources) for m in MUXES) <= 16 \
    else Opcode.SETCFGW
SETCFG = isa.PAYLOAD[OP]
INDEX_BITS, VALUE_BITS = SETCFG["index"].width, SETCFG["value"].width
PAGE_SIZE = 1 << INDEX_BITS
#: the number bits the registers compare: as many as the multiplexers need, at least
#: the index (a chip of one page ignores the page, whose SETCFGs the sequencer faults
#: before they issue)
TABLE_BITS = max(INDEX_BITS, (len(MUXES) - 1).bit_length())
PAIRS = isa.SETCFG_PAIRS


def payload(pairs, count: int) -> int:
    """A SETCFG payload with ``pairs`` (multiplexer numbers, all in the first one's
    page) in its fields and ``count`` of them in force."""
    page = pairs[0][0] // PAGE_SIZE
    fields = {"more": count - 1, "page": page}
    for j, (number, value) in enumerate(pairs):
        assert j >= count or number // PAGE_SIZE == page, pairs
        suffix = str(j) if j else ""
        fields[f"index{suffix}"] = number % PAGE_SIZE
        fields[f"value{suffix}"] = value
    return pack_fields(SETCFG, fields)


def case_reset(rng):
    """Nothing written: the reset values route a plain GEMM."""
    top = (1 << VALUE_BITS) - 1
    return [(0, 0, 0)] * 3 + [(0, k, top) for k in range(len(MUXES))]   # we low: ignored


def case_pairs(rng):
    """Several pairs per write, including the same multiplexer twice (the later pair
    wins) and pairs beyond ``count`` (ignored)."""
    writes = []
    for _ in range(200):
        n = rng.randrange(1, PAIRS + 1)
        page = rng.randrange((len(MUXES) + 2) // PAGE_SIZE + 1)
        base = page * PAGE_SIZE
        top = min(len(MUXES) + 3, base + PAGE_SIZE)
        pairs = [(rng.randrange(base, top), rng.randrange(1 << VALUE_BITS))
                 for _ in range(PAIRS)]
        if rng.random() < 0.3:
            pairs[n - 1] = (pairs[0][0], rng.randrange(1 << VALUE_BITS))
        writes.append((rng.randrange(4) != 0, pairs, n))
    return writes


def case_each(rng):
    """Each register in turn takes each of its sources, then back to the default."""
    s = []
    for k, mux in enumerate(MUXES):
        for v in range(len(mux.sources)):
            s.append((1, k, v))
        s.append((1, k, mux.default))
    return s


def case_random(rng):
    """Random writes, back to back and with gaps, all values of the format (the
    sequencer rejects values beyond a multiplexer's sources; the register stores what
    it gets)."""
    return [(rng.randrange(2), rng.randrange(len(MUXES)), rng.randrange(1 << VALUE_BITS))
            for _ in range(300)]


def case_out_of_table(rng):
    """A number beyond the table changes no register (page bits past the table's acts
    as if absent: the sequencer never issues such a SETCFG)."""
    top = (1 << (INDEX_BITS + SETCFG["page"].width)) - 1
    return ([(1, k, 9) for k in range(len(MUXES), top + 1, 7 if top < 1024 else 97)]
            + [(1, top, 15), (1, len(MUXES), 3)]
            + [(1, 3, 2), (1, len(MUXES) + 3, 1)])


CASES = {"each": case_each, "random": case_random, "reset": case_reset,
         "out_of_table": case_out_of_table, "pairs": case_pairs}


class FabricRegsTB(BlockTB):
    async def run(self, writes) -> None:
        model = fabric.defaults(CFG)
        for write in list(writes) + [(0, 0, 0)] * 2:
            if len(write) == 3 and isinstance(write[1], int):   # one pair
                we, index, value = write
                pairs, count = [(index, value)] + [(0, 0)] * (PAIRS - 1), 1
            else:
                we, pairs, count = write
            await self.next_cycle()
            self.set("issue__valid", int(we))
            self.set("issue__payload", payload(pairs, count))
            await self.settle()
            for k, mux in enumerate(MUXES):
                self.expect(f"value[{k}] ({mux.name})", self.get("value", k), model[k])
            if we:
                for number, value in pairs[:count]:
                    index = number % (1 << TABLE_BITS)    # the bits the chip decodes
                    if index < len(MUXES):
                        model[index] = value


@cocotb.test()
async def run_case(dut):
    tb = FabricRegsTB(dut)
    await tb.start({"issue__valid": 0, "issue__payload": 0})
    for name in case_names():
        # Each case starts from reset (so every case after the first also checks that
        # reset restores the defaults over written values).
        tb.label = f"[{name}] "
        await tb.run(CASES[name](random.Random(name)))
        await tb.reset()
    tb.finish()
