"""What every block testbench shares (cocotb side): clock and reset, port access by
Amaranth name, one clock cycle at a time, and an error list the test ends on.

A cycle of a block test: :meth:`BlockTB.next_cycle` waits for the rising edge that
begins it; the testbench then drives the inputs for this cycle; :meth:`BlockTB.settle`
waits until the values are stable, and the outputs read then belong to this cycle
(registers as updated by that edge, combinational outputs from this cycle's inputs).
The next rising edge samples what was driven. A memory model with a read latency of
``L`` cycles answers, in cycle ``t + L``, the address it read in cycle ``t``
(:class:`ReadPort`).

Amaranth flattens an ``.array(n)`` member ``west_a`` into ports ``west_a__0`` ...;
:meth:`BlockTB.port` hides that.
"""

from __future__ import annotations

import os

from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

CLOCK_NS = 10


def case_names() -> list[str]:
    """The cases the pytest side asked for (``BLOCK_CASE``, comma-separated), to run
    one after another in one simulation."""
    return [c for c in case_name().split(",") if c]


def requested_cases() -> list[str]:
    """:func:`case_names` for ``cocotb.parametrize`` at import: none when the module is
    imported outside a block run (the pytest side reads its tables; a run without a
    case fails there as "no cocotb test ran")."""
    return case_names() if "BLOCK_CASE" in os.environ else []


def case_name() -> str:
    """The case the pytest side asked for (``BLOCK_CASE`` in the environment)."""
    try:
        return os.environ["BLOCK_CASE"]
    except KeyError:
        raise RuntimeError("BLOCK_CASE is not set: run block tests through pytest "
                           "(testbenches/blocks/test_blocks.py)") from None


def with_acc_read(cfg, latency: int, **changes):
    """``cfg`` with the ACC's read latency ``latency`` (2: each bank's output
    registered, as the ``ulx3s`` preset has it)."""
    return cfg.replace(latency={**cfg.latency, "acc_read": latency}, **changes)


def acc_latency(cfg):
    """``cfg`` with the ACC read latency ``ACC_READ_LATENCY`` names (a block's second
    build, test_blocks.py), or as it is."""
    lat = os.environ.get("ACC_READ_LATENCY")
    return cfg if lat is None else with_acc_read(cfg, int(lat))


class ReadPort:
    """A memory read port of ``latency`` cycles, as the RTL's buffers have: what a read
    (``en``) latches in cycle ``t`` shows from ``t + latency``; without ``en`` the
    memory keeps what it last read (and an output register copies it)."""

    def __init__(self, latency: int):
        self.pipe = [0] * latency

    @property
    def data(self) -> int:
        """The port's data this cycle."""
        return self.pipe[0]

    def clock(self, read: int | None = None) -> None:
        """End the cycle: ``read`` is the data latched by this cycle's read, None
        without one."""
        self.pipe = self.pipe[1:] + [self.pipe[-1] if read is None else read]


def wrap32(x: int) -> int:
    """Two's-complement wrap to int32."""
    x &= 0xFFFF_FFFF
    return x - (1 << 32) if x & 0x8000_0000 else x


def to_signed(x: int, bits: int) -> int:
    x &= (1 << bits) - 1
    return x - (1 << bits) if x >> (bits - 1) else x


def touches(cfg, op, instrs, resource: str) -> tuple[dict, dict]:
    """The reads and the writes of ``resource`` (e.g. ``"acc"``) that the
    instructions ``instrs`` (issue cycle, fields) of opcode ``op`` make according to
    their effects (``Instruction.effects``): two dicts, absolute cycle -> address. A
    unit has one port per buffer, so no two touches may share a cycle."""
    from systolica.arch.instructions import SPEC
    from systolica.arch.isa import PAYLOAD

    out = ({}, {})
    for t, a in instrs:
        fields = {name: a.get(name, 0) for name, _ in PAYLOAD[op]}
        fx = SPEC[op].effects(cfg, fields)
        for side, tcs in zip(out, (fx.reads, fx.writes)):
            for tc in tcs:
                if tc.resource != resource:
                    continue
                for addr, c in zip(tc.addrs.tolist(), tc.cycles.tolist()):
                    assert t + c not in side, f"two {resource} touches in cycle {t + c}"
                    side[t + c] = addr
    return out


def pack(values, bits: int) -> int:
    """Elements (any sign) into one little-endian bit vector, element 0 lowest."""
    out = 0
    mask = (1 << bits) - 1
    for k, v in enumerate(values):
        out |= (int(v) & mask) << (k * bits)
    return out


def unpack(word: int, bits: int, count: int, signed: bool = True) -> list[int]:
    out = []
    for k in range(count):
        v = (word >> (k * bits)) & ((1 << bits) - 1)
        out.append(to_signed(v, bits) if signed else v)
    return out


def pack_fields(layout, values: dict) -> int:
    """An Amaranth ``data.StructLayout`` value (e.g. an ISA payload) as an integer."""
    word = 0
    for name, field in layout:
        v = int(values.get(name, 0))
        width = field.width
        if not 0 <= v < (1 << width):
            raise ValueError(f"field {name}={v} does not fit {width} bits")
        word |= v << field.offset
    unknown = set(values) - {name for name, _ in layout}
    if unknown:
        raise ValueError(f"unknown field(s) {sorted(unknown)}")
    return word


class BlockTB:
    """Base of the per-block testbench classes: clock, reset, ports, checker."""

    def __init__(self, dut):
        self.dut = dut
        self.cycle = 0          # cycles since reset was released
        self.errors: list[str] = []
        self.label = ""         # prefix of error messages (e.g. the case name)

    # -- ports -----------------------------------------------------------------------
    def port(self, name: str, index: int | None = None):
        return getattr(self.dut, name if index is None else f"{name}__{index}")

    def set(self, name: str, value: int, index: int | None = None) -> None:
        handle = self.port(name, index)
        handle.value = int(value) & ((1 << len(handle)) - 1)

    def get(self, name: str, index: int | None = None) -> int:
        return int(self.port(name, index).value)

    def get_s(self, name: str, index: int | None = None) -> int:
        return self.port(name, index).value.to_signed()

    # -- time ------------------------------------------------------------------------
    async def start(self, inputs: dict | None = None, reset_cycles: int = 2) -> None:
        """Start the clock, drive ``inputs`` (name or (name, index) -> value) and
        hold reset for ``reset_cycles``; returns at the start of cycle 0."""
        Clock(self.dut.clk, CLOCK_NS, unit="ns").start()
        self.dut.rst.value = 1
        for key, value in (inputs or {}).items():
            name, index = key if isinstance(key, tuple) else (key, None)
            self.set(name, value, index)
        for _ in range(reset_cycles):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0
        self.cycle = -1

    async def next_cycle(self) -> None:
        """Wait for the rising edge that begins the next cycle (drive inputs after)."""
        await RisingEdge(self.dut.clk)
        self.cycle += 1

    async def settle(self) -> None:
        """Wait until this cycle's values are stable (no driving after this)."""
        await ReadOnly()

    async def drive_and_record(self, cycles: list[dict], watch, signed=()) -> list[dict]:
        """Drive one input dict per cycle (keys: name or (name, index)) and return, per
        cycle, the values of the ``watch`` keys (signed for names in ``signed``)."""
        record = []
        for inputs in cycles:
            await self.next_cycle()
            for key, value in inputs.items():
                name, index = key if isinstance(key, tuple) else (key, None)
                self.set(name, value, index)
            await self.settle()
            row = {}
            for key in watch:
                name, index = key if isinstance(key, tuple) else (key, None)
                row[key] = self.get_s(name, index) if name in signed else self.get(name, index)
            record.append(row)
        return record

    # -- checking --------------------------------------------------------------------
    def expect(self, what: str, got, want) -> bool:
        if got != want:
            self.errors.append(f"{self.label}cycle {self.cycle}: {what}: got {got!r}, "
                               f"expected {want!r}")
            return False
        return True

    def fail(self, message: str) -> None:
        self.errors.append(f"{self.label}cycle {self.cycle}: {message}")

    async def run_plan(self, inputs: list[dict], expected, input_keys, outputs,
                       signed=()) -> None:
        """Drive ``inputs`` (one dict per cycle; missing keys are 0) from reset and
        check ``expected``: ``(cycle, (port, index), value)`` triples."""
        horizon = max(c for c, _, _ in expected) + 1
        cycles = [{k: (inputs[t] if t < len(inputs) else {}).get(k, 0) for k in input_keys}
                  for t in range(horizon)]
        await self.start({k: 0 for k in input_keys})
        record = await self.drive_and_record(cycles, outputs, signed)
        for cycle, key, want in expected:
            self.cycle = cycle
            self.expect(f"{key[0]}[{key[1]}]", record[cycle][key], want)

    async def reset(self) -> None:
        """One cycle of reset between cases."""
        await self.next_cycle()
        self.dut.rst.value = 1
        await self.next_cycle()
        self.dut.rst.value = 0

    def check_handshake(self, cfg, instrs, ready, drained, end: int) -> None:
        """A unit's ``ready`` and ``drained`` (indexed by cycle) against
        :mod:`systolica.arch.timing`: ready when each instruction issues and again exactly
        ``occupancy`` cycles later, not in between; not drained before ``done``; drained
        from ``end`` (the last instruction's done) on."""
        from systolica.arch import timing
        for ins in instrs:
            t, what = ins.cycle, f"{ins.op.name} issued {ins.cycle}"
            occ = timing.occupancy(cfg, ins)
            self.cycle = t
            self.expect(f"ready when {what}", ready[t], 1)
            for x in range(t + 1, t + occ):
                self.cycle = x
                self.expect(f"ready ({what}, occupancy {occ})", ready[x], 0)
            self.cycle = t + occ
            self.expect(f"ready ({what}, occupancy {occ})", ready[t + occ], 1)
        self.check_drained(cfg, instrs, drained, end)

    def check_drained(self, cfg, instrs, drained, end: int) -> None:
        """``drained`` (indexed by cycle): not before each instruction's ``done``,
        drained from ``end`` (the last one's done) on."""
        from systolica.arch import timing
        for ins in instrs:
            t, done = ins.cycle, timing.done(cfg, ins)
            for x in range(t + 1, t + done):
                self.cycle = x
                self.expect(f"drained ({ins.op.name} issued {t}, done {done})", drained[x], 0)
        for x in range(end, max(drained) + 1):
            self.cycle = x
            self.expect(f"drained after the last done ({end})", drained[x], 1)
        self.cycle = max(drained)

    def finish(self, limit: int = 25) -> None:
        """End of a test: every check passed."""
        if self.errors:
            shown = "\n  ".join(self.errors[:limit])
            more = (f"\n  ... and {len(self.errors) - limit} more"
                    if len(self.errors) > limit else "")
            raise AssertionError(f"{len(self.errors)} mismatch(es):\n  {shown}{more}")
