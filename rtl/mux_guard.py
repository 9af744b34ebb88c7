"""The multiplexer guard: which multiplexers issued instructions' data is passing now,
so that a SETCFG naming one of them faults ``CFG_IN_USE`` (``docs/contract.md``)."""

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from systolica.arch import fabric, instructions, isa, timing
from systolica.arch.config import ChipConfig
from systolica.arch.isa import Instr, Opcode
from systolica.rtl.ports import check_config, mux_number_bits, setcfg_numbers


@dataclass(frozen=True)
class Window:
    """Multiplexer ``mux`` is in use by an instruction of ``op`` issued at ``t`` for the
    SETCFG issue cycles ``t + lo <= u < t + lo + length``, ``length = base + per_row *
    rows`` (none if not positive), unless one of the 1-bit fields ``closed_by`` is set
    or a field of ``when`` has another value (a flag that moves the window gives one
    window per value). This restates :func:`systolica.arch.timing.mux_use`
    (``length = hi - 1 - lo``)."""

    mux: int
    op: Opcode
    lo: int
    base: int
    per_row: int
    closed_by: tuple[str, ...]
    when: tuple[tuple[str, int], ...] = ()

    def length(self, fields: dict) -> int:
        if any(fields.get(f, 0) for f in self.closed_by):
            return 0
        if any(fields.get(f, 0) != v for f, v in self.when):
            return 0
        return max(0, self.base + self.per_row * fields.get("rows", 0))


class GuardError(ValueError):
    """``timing.mux_use`` describes a window the guard cannot hold."""


def windows(cfg: ChipConfig) -> tuple[Window, ...]:
    """Every (multiplexer, opcode) window, found by asking :func:`timing.mux_use` about
    sample instructions: all fields zero but ``rows`` (1, 2 and 3) and one 1-bit flag
    at a time. A flag may close the window; at most one field per opcode may move or
    resize it, a flag or a wider field (a MATMUL's ``early``), and then there is a
    window for each of its legal values. Raises
    :class:`GuardError` if a window's start depends on the rows, its length is not
    linear in them, or the flags change it in another way."""
    out = []
    for mux in fabric.muxes(cfg):
        for op in Opcode:
            if op is not Opcode.ILLEGAL:
                out += _windows(cfg, op, mux)
    return tuple(out)


def _windows(cfg: ChipConfig, op: Opcode, mux: fabric.Mux) -> list[Window]:
    layout = isa.PAYLOAD[op]
    names = [name for name, _ in layout]
    flags = [name for name, fld in layout if fld.width == 1 and name != "rows"]
    wide = [name for name, fld in layout if fld.width > 1 and name != "rows"]
    has_rows = "rows" in names

    def probe(rows=1, **fields):
        values = dict.fromkeys(names, 0)
        if has_rows:
            values["rows"] = rows
        values.update(fields)
        return timing.mux_use(cfg, Instr(op, 0, values), mux.name)

    what = f"{op.name} on {mux.name}"
    plain = probe()
    moving = [f for f in flags + wide if probe(**{f: 1}) not in (None, plain)]
    if plain is None and moving:
        raise GuardError(f"{what}: setting {moving[0]} opens a window "
                         f"({probe(**{moving[0]: 1})})")
    if len(moving) > 1:
        raise GuardError(f"{what}: more than one field moves the window ({moving})")
    if plain is None:
        return []
    values = [0, 1]
    if moving and moving[0] in wide:
        # the values an instruction can issue with (others fault ILLEGAL_OPCODE)
        zeros = dict.fromkeys(names, 0)
        values = [v for v in range(1 << layout[moving[0]].width)
                  if instructions.legal(cfg, op, {**zeros, moving[0]: v})]
    out = []
    for when in ([((moving[0], v),) for v in values] if moving else [()]):
        fixed = dict(when)
        mode = probe(**fixed)
        others = [f for f in flags if f not in fixed]
        for f in others:
            flagged = probe(**fixed, **{f: 1})
            if flagged is not None and flagged != mode:
                raise GuardError(f"{what}: setting {f} changes the window to {flagged}")
        closed_by = tuple(f for f in others if probe(**fixed, **{f: 1}) is None)
        lo = mode[0]
        if lo < 0:
            raise GuardError(f"{what}: the window starts before the issue ({mode})")
        lengths = []
        for rows in (1, 2, 3) if has_rows else (1,):
            use = probe(rows, **fixed)
            if use is None or use[0] != lo:
                raise GuardError(f"{what}: the window's start depends on rows "
                                 f"({mode}, {use})")
            lengths.append(use[1] - 1 - lo)
        per_row = lengths[1] - lengths[0] if has_rows else 0
        if has_rows and lengths[2] - lengths[1] != per_row:
            raise GuardError(f"{what}: the window's length is not linear in rows "
                             f"({lengths})")
        out.append(Window(mux.index, op, lo, lengths[0] - per_row, per_row, closed_by,
                          when))
    return out


class MuxGuard(wiring.Component):
    """Watches the instructions the sequencer issues and answers, for the SETCFG at
    the head, whether any of its pairs names a multiplexer in use this cycle.

    Members: ``clear`` (a run starts: forget everything); ``issue`` with ``opcode`` and
    ``payload`` (the instruction issuing this cycle); ``setcfg`` (the head's payload as a
    SETCFG) and ``in_use``; ``busy``, one bit per multiplexer: in use this cycle (so a
    user may match it against the multiplexers a SETCFG names, decoded ahead of time,
    rather than through ``setcfg``). ``in_use`` and ``busy`` depend on registers only,
    never on this cycle's ``issue``: a SETCFG is the only instruction issuing in its
    cycle.
    """

    def __init__(self, *, cfg: ChipConfig):
        self.cfg = check_config(cfg, "MuxGuard")
        self.windows = windows(cfg)
        super().__init__({
            "clear": In(1), "issue": In(1), "opcode": In(Opcode),
            "payload": In(isa.PAYLOAD_BITS),
            "setcfg": In(isa.PAYLOAD[fabric.setcfg_format(cfg).op]),   # the chip's format
            "in_use": Out(1), "busy": Out(len(fabric.muxes(cfg))),
        })

    def elaborate(self, platform):
        # Windows of one opcode with the same length rule form a group. A counter
        # holds how many more cycles the group's latest window runs (``busy(c)``: some
        # window, moved to start at issue, covers cycle ``c``); a shift register
        # remembers ``busy`` of the past cycles, and multiplexer ``x`` is in use at
        # ``u`` iff ``busy(u - lo_x)``: one tap per multiplexer.
        m = Module()
        groups: dict[tuple, list[Window]] = {}
        for w in self.windows:
            groups.setdefault((w.op, w.base, w.per_row, w.closed_by, w.when),
                              []).append(w)
        in_use = [Const(0)] * len(fabric.muxes(self.cfg))
        for k, ((op, base, per_row, closed_by, when), members) in enumerate(groups.items()):
            layout = isa.PAYLOAD[op]
            args = data.View(layout, self.payload[:layout.size])
            opens = self.issue & (self.opcode == op)
            for f in closed_by:
                opens = opens & ~args[f]
            for f, v in when:
                opens = opens & (args[f] == v)
            rows_max = (1 << layout["rows"].width) - 1 if per_row else 0
            length = Signal(range(max(1, base + per_row * rows_max) + 1), name=f"g{k}_len")
            if per_row:
                total = (args.rows if per_row == 1 else args.rows * per_row) + base
            else:
                total = Const(base)
            m.d.comb += length.eq(Mux(total > 0, total, 0))
            left = Signal.like(length, name=f"g{k}_left")
            # cur = the new window's length if it opens and outlasts the running one,
            # else what is left of that; its successor and whether it is non-zero are
            # worked out for both choices, so ``issue`` (a deep signal) only selects
            take = Signal(name=f"g{k}_take")
            m.d.comb += take.eq(opens & (length > left))
            busy = Signal(name=f"g{k}_busy")
            m.d.comb += busy.eq(Mux(take, length != 0, left != 0))
            after = Mux(take, Mux(length != 0, length - 1, 0),
                        Mux(left != 0, left - 1, 0))
            past = [Signal(name=f"g{k}_past{d + 1}") for d in range(max(w.lo for w in members))]
            with m.If(self.clear):
                m.d.sync += [left.eq(0), *(p.eq(0) for p in past)]
            with m.Else():
                m.d.sync += left.eq(after)
                m.d.sync += [p.eq(q) for p, q in zip(past, [busy] + past[:-1])]
            for w in members:
                in_use[w.mux] = in_use[w.mux] | (past[w.lo - 1] if w.lo else left != 0)

        m.d.comb += self.busy.eq(Cat(*in_use))
        busy_vec = Cat(*in_use, Const(0, (1 << mux_number_bits(self.cfg)) - len(in_use)))
        sc = self.setcfg
        pairs = sc.more + 1
        hits = [(k < pairs) & busy_vec.bit_select(number, 1)
                for k, (number, _) in enumerate(setcfg_numbers(self.cfg, sc))]
        m.d.comb += self.in_use.eq(Cat(*hits).any())
        return m
