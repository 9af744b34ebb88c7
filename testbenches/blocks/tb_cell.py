"""Cell: int8 x int8 MAC with two weight banks and a weight shift chain.

Every cycle the testbench drives one set of inputs and compares all four outputs with
:class:`CellModel`; the cases differ only in the stimulus they generate.
"""

from __future__ import annotations

import random

import cocotb

from tb_base import BlockTB, requested_cases, wrap32

INPUTS = ("a_in", "sel_in", "psum_in", "w_in", "w_shift", "w_bank")
SIGNED = {"a_in", "psum_in", "w_in", "a_out", "psum_out", "w_out"}


class CellModel:
    """The cell's registers: two weight banks and the three output registers."""

    def __init__(self):
        self.w = [0, 0]
        self.a_out = self.sel_out = self.psum_out = 0

    def outputs(self, i: dict) -> dict:
        return {"a_out": self.a_out, "sel_out": self.sel_out,
                "psum_out": self.psum_out, "w_out": self.w[i["w_bank"]]}

    def clock(self, i: dict) -> None:
        self.psum_out = wrap32(i["psum_in"] + i["a_in"] * self.w[i["sel_in"]])
        self.a_out, self.sel_out = i["a_in"], i["sel_in"]
        if i["w_shift"]:
            self.w[i["w_bank"]] = i["w_in"]


def _idle(**over) -> dict:
    d = dict.fromkeys(INPUTS, 0)
    d.update(over)
    return d


def _rand_s(rng, bits):
    return rng.randrange(-(1 << (bits - 1)), 1 << (bits - 1))


def stim_both_banks(rng):
    """Load a weight into each bank, then MACs alternating between them."""
    w0, w1 = -77, 113
    yield _idle(w_in=w0, w_shift=1, w_bank=0)
    yield _idle(w_in=w1, w_shift=1, w_bank=1)
    for k in range(64):
        yield _idle(a_in=_rand_s(rng, 8), sel_in=k & 1, psum_in=_rand_s(rng, 20),
                    w_bank=rng.randrange(2))


def stim_shift_chain(rng):
    """A stream of weights shifted through, bank by bank; w_out (combinational on
    w_bank) shows the selected bank, and the other bank keeps computing."""
    for k in range(48):
        bank = (k // 6) & 1
        yield _idle(w_in=_rand_s(rng, 8), w_shift=int(k % 3 != 2), w_bank=bank,
                    a_in=_rand_s(rng, 8), sel_in=1 - bank, psum_in=_rand_s(rng, 16))
    for bank in (0, 1, 0, 1):
        yield _idle(w_bank=bank)


def stim_wrap(rng):
    """Partial sums at the int32 limits wrap (two's complement)."""
    yield _idle(w_in=-128, w_shift=1, w_bank=0)
    yield _idle(w_in=127, w_shift=1, w_bank=1)
    edges = [(1 << 31) - 1, -(1 << 31), (1 << 31) - 16384, -(1 << 31) + 100, 0, -1]
    for psum in edges:
        for a in (-128, 127, -1, 1):
            for sel in (0, 1):
                yield _idle(a_in=a, sel_in=sel, psum_in=psum)


def stim_random(rng):
    for _ in range(400):
        yield {"a_in": _rand_s(rng, 8), "sel_in": rng.randrange(2),
               "psum_in": _rand_s(rng, 32), "w_in": _rand_s(rng, 8),
               "w_shift": rng.randrange(2), "w_bank": rng.randrange(2)}


CASES = {
    "both_banks": stim_both_banks,
    "shift_chain": stim_shift_chain,
    "wrap_int32": stim_wrap,
    "random": stim_random,
}


class CellTB(BlockTB):
    def __init__(self, dut):
        super().__init__(dut)
        self.model = CellModel()
        self.checked = 0

    def read(self, name):
        return self.get_s(name) if name in SIGNED else self.get(name)

    async def run(self, stimulus) -> None:
        await self.start(_idle())
        for inputs in list(stimulus) + [_idle()] * 2:
            await self.next_cycle()
            for name, v in inputs.items():
                self.set(name, v)
            await self.settle()
            for name, want in self.model.outputs(inputs).items():
                self.expect(name, self.read(name), want)
            self.model.clock(inputs)
            self.checked += 1


@cocotb.test()
@cocotb.parametrize(case=requested_cases())
async def run_case(dut, case):
    tb = CellTB(dut)
    await tb.run(CASES[case](random.Random(case)))
    assert tb.checked > 10
    tb.finish()
