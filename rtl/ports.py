"""The interfaces blocks connect through, declared once as ``wiring.Signature`` s.

* :class:`Issue`: sequencer -> execution unit, one instruction at its cycle;
* :class:`RunControl`: register file -> sequencer (start, program length, program
  memory writes) and the run's status back;
* :class:`DramMaster`: the DMA's external-memory port;
* :func:`buffer_read` / :func:`buffer_write`: a unit's port on the CBUF or the ACC,
  the signatures of :mod:`amaranth.lib.memory` ports, so a unit connects straight to a
  port of the banked buffer's crossbar (:mod:`.cbuf`).

Each signature is written from the side that starts the transfer (sequencer,
register file, DMA as master, memory port as in Amaranth); the other side takes it
with ``In(...)`` and the chip joins them with ``connect``.
"""

from __future__ import annotations

from amaranth.hdl import Array, Const, Shape, Signal, Value
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from systolica.arch import fabric, isa
from systolica.arch.config import ChipConfig
from systolica.arch.regs import ErrorCode

PC_BITS = 32        # program index: PROG_LEN is a 32-bit register
#: Shape of an error code (:class:`systolica.arch.regs.ErrorCode`) on a port.
ERROR_SHAPE = range(max(ErrorCode) + 1)
BUFFERS = ("cbuf", "acc")


def setcfg_numbers(cfg: ChipConfig, sc) -> list[tuple]:
    """A payload view's (multiplexer number, value) slots in the chip's SETCFG format
    (:func:`systolica.arch.fabric.setcfg_format`), each number cut to the
    :func:`mux_number_bits` that reach the chip's multiplexers. A SETCFG whose page
    has bits past them is ``CFG_RANGE`` (:func:`setcfg_page_ok`), a fault the sequencer
    raises before any other check or unit acts on the numbers."""
    bits = mux_number_bits(cfg)
    return [(number[:bits], value)
            for number, value in fabric.setcfg_format(cfg).payload_pairs(sc)]


def setcfg_page_ok(cfg: ChipConfig, sc) -> Value:
    """Whether a SETCFG's page has no bits past the chip's :func:`mux_number_bits`."""
    kept = mux_number_bits(cfg) - fabric.setcfg_format(cfg).index_bits
    return sc.page[kept:] == 0 if kept < len(sc.page) else Const(1)


def mux_lookup(cfg: ChipConfig, values: list[int], width: int, pad: int):
    """A constant per multiplexer (`values`, in multiplexer order), looked up by a
    number of :func:`setcfg_numbers` for that chip; numbers past the table read `pad`."""
    bits = mux_number_bits(cfg)
    table = Array([Const(v, width) for v in values]
                  + [Const(pad, width)] * ((1 << bits) - len(values)))
    return lambda number: table[number]


def mux_number_bits(cfg: ChipConfig) -> int:
    """The bits of a multiplexer number the chip decodes: its SETCFG format's index,
    and as many page bits as its multiplexers need (none on a chip of one page)."""
    fmt = fabric.setcfg_format(cfg)
    return max(fmt.index_bits, ceil_log2(len(fabric.muxes(cfg))))


def delayed(m, value, cycles: int, name: str):
    """``value`` through ``cycles`` registers of module ``m`` (``name_0`` first)."""
    for k in range(cycles):
        reg = Signal.like(value, name=f"{name}_{k}")
        m.d.sync += reg.eq(value)
        value = reg
    return value


def check_config(cfg, block: str) -> ChipConfig:
    """``cfg`` if it is a :class:`ChipConfig`; else a ``TypeError`` naming ``block``."""
    if not isinstance(cfg, ChipConfig):
        raise TypeError(f"{block} needs cfg=ChipConfig (e.g. systolica.arch.config."
                        f"preset('tiny')), not {cfg!r}")
    return cfg


class Issue(wiring.Signature):
    """One instruction from the sequencer to its unit.

    Members (sequencer side): ``valid`` is high for the one cycle the instruction
    issues, with its ``payload`` (the opcode's :data:`systolica.arch.isa.PAYLOAD`
    layout). With ``handshake``, the unit answers ``ready`` (it accepts an instruction
    this cycle; the sequencer faults ``UNIT_BUSY`` instead of waiting) and ``drained``
    (every effect of the instructions it accepted is done).

    With ``ahead``, also the two words that may be the head this cycle, each straight
    from a register: ``now`` (the head of the cycle before, kept when it did not issue)
    and ``after`` (the word after it), and ``took`` (the head of the cycle before
    issued). ``payload`` is always ``after`` if ``took`` else ``now``: a unit may work
    out what it latches from both words and choose after its logic, so that ``took``
    (a register driving every unit's payload) is not in front of a deep path.
    """

    def __init__(self, payload: data.Layout, *, handshake: bool = True,
                 ahead: bool = False):
        if not isinstance(payload, data.Layout):
            raise TypeError(f"Issue payload must be an amaranth data layout (an entry of "
                            f"isa.PAYLOAD), not {payload!r}")
        if not isinstance(handshake, bool):
            raise TypeError(f"Issue handshake must be True or False, not {handshake!r}")
        if not isinstance(ahead, bool):
            raise TypeError(f"Issue ahead must be True or False, not {ahead!r}")
        self._payload, self._handshake, self._ahead = payload, handshake, ahead
        members = {"valid": Out(1), "payload": Out(payload)}
        if handshake:
            members.update(ready=In(1), drained=In(1))
        if ahead:
            members.update(took=Out(1), now=Out(payload), after=Out(payload))
        super().__init__(members)

    @property
    def payload_layout(self) -> data.Layout:
        return self._payload

    @property
    def handshake(self) -> bool:
        return self._handshake

    @property
    def ahead(self) -> bool:
        return self._ahead

    def __eq__(self, other):
        return (type(other) is Issue and self._payload == other._payload
                and self._handshake == other._handshake and self._ahead == other._ahead)

    def __repr__(self):
        return (f"Issue({self._payload!r}, handshake={self._handshake}, "
                f"ahead={self._ahead})")


class RunControl(wiring.Signature):
    """The register file's hold on the sequencer.

    Members (register-file side): ``start`` (one cycle, ignored while running),
    ``prog_len``, ``prog_addr`` (DRAM word address of the program image),
    ``prog_fetch`` (the first instruction the fetcher reads: it starts at
    ``min(prog_fetch, imem_depth, prog_len)``), each the run's value (in ``start``'s
    cycle already the one that run takes), ``imem`` (a
    write port on the program memory, taken only while the chip is stopped: the
    instruction fetcher has the memory's write port while it runs; addresses past its
    depth are dropped), and the run's status: ``running``, ``done`` / ``fault`` (one
    cycle at the end), ``error``, ``fault_pc``, ``cycle``.
    """

    def __init__(self):
        super().__init__({
            "start": Out(1), "prog_len": Out(32), "prog_addr": Out(32), "prog_fetch": Out(32),
            "imem": In(memory.WritePort.Signature(addr_width=32, shape=isa.WORD_BITS)),
            "running": In(1), "done": In(1), "fault": In(1), "error": In(ERROR_SHAPE),
            "fault_pc": In(PC_BITS), "cycle": In(isa.CYCLE_BITS),
        })

    def __eq__(self, other):
        return type(other) is RunControl

    def __repr__(self):
        return "RunControl()"


class DramMaster(wiring.Signature):
    """The external-memory port, master side: one word of ``word_bits`` per cycle;
    read data arrives the cycle after ``re``. The DMA and the sequencer's instruction
    fetcher each have one; the chip gives the DMA priority."""

    def __init__(self, *, word_bits: int):
        if not isinstance(word_bits, int) or word_bits < 1:
            raise TypeError(f"DRAM word width must be a positive integer, not {word_bits!r}")
        self._word_bits = word_bits
        super().__init__({
            "addr": Out(isa.DRAM_ADDR_BITS), "re": Out(1), "rdata": In(word_bits),
            "we": Out(1), "wdata": Out(word_bits),
        })

    @classmethod
    def of(cls, cfg: ChipConfig) -> DramMaster:
        return cls(word_bits=8 * cfg.dram_word_bytes)

    def __eq__(self, other):
        return type(other) is DramMaster and self._word_bits == other._word_bits

    def __repr__(self):
        return f"DramMaster(word_bits={self._word_bits})"


def _geometry(cfg: ChipConfig, name: str) -> tuple[int, Shape]:
    if name not in BUFFERS:
        raise ValueError(f"buffer must be one of {BUFFERS}, not {name!r}")
    if name == "cbuf":
        # one int8 per partition; a UBUF in its own SRAM follows the CBUF's rows
        return cfg.cbuf_physical_rows, Shape.cast(8 * cfg.rows)
    return cfg.acc_depth, Shape.cast(32 * cfg.cols)           # one int32 per column


def buffer_read(cfg: ChipConfig, name: str) -> memory.ReadPort.Signature:
    """A read port of buffer ``name`` (data the cycle after the address); a reading
    unit declares ``In(buffer_read(...))``."""
    depth, shape = _geometry(cfg, name)
    return memory.ReadPort.Signature(addr_width=ceil_log2(depth), shape=shape)


def partitioned_read(cfg: ChipConfig) -> wiring.Signature:
    """A CBUF read port with one address per partition (the matmul unit's window
    walk): ``addr`` is an array of ``cfg.rows`` addresses, ``data`` the row of bytes,
    byte ``p`` from address ``p``, the cycle after. ``en`` says the unit reads this
    cycle and ``banks`` (one bit per CBUF bank) which banks' read ports it claims:
    every bank its addresses may fall in (docs/contract.md, "CBUF banks")."""
    depth, shape = _geometry(cfg, "cbuf")
    return wiring.Signature({"addr": In(ceil_log2(depth)).array(cfg.rows),
                             "en": In(1), "banks": In(cfg.cbuf_physical_banks),
                             "data": Out(shape)})   # the buffer's side, as buffer_read


def buffer_write(cfg: ChipConfig, name: str) -> memory.WritePort.Signature:
    """A write port of buffer ``name`` (written at the clock edge while ``en``); a
    writing unit declares ``In(buffer_write(...))``."""
    depth, shape = _geometry(cfg, name)
    return memory.WritePort.Signature(addr_width=ceil_log2(depth), shape=shape)


def ubuf_place(cfg: ChipConfig) -> dict:
    """Input members ``ubuf_base``, ``ubuf_rows``: the UBUF registers (docs/contract.md,
    "The UBUF"), for the units that find the UBUF by them."""
    width = cfg.ubuf_span[1].bit_length()
    return {"ubuf_base": In(width), "ubuf_rows": In(width)}


class UbufAt:
    """``cfg`` as the instruction table sees it at run time: its attributes, but
    ``ubuf_base`` and ``ubuf_rows`` the registers' signals (for the sequencer's
    legality and range checks)."""

    def __init__(self, cfg: ChipConfig, base, rows):
        self._cfg, self.ubuf_base, self.ubuf_rows = cfg, base, rows

    def __getattr__(self, name):
        return getattr(self._cfg, name)
