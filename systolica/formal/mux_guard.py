"""The multiplexer guard's property (``rtl/mux_guard.py``, docs/contract.md "Faults",
``CFG_IN_USE``): in every cycle ``busy`` says exactly which multiplexers an earlier
instruction's data is passing, and ``in_use`` whether the SETCFG at the head names
one of them.

The harness issues any legal instruction in any cycle (free opcode and payload,
``Assume`` it legal: the sequencer issues nothing else), clears the guard at any
time, and keeps the instructions issued since the last clear in a history, one per
cycle back. The reference is the windows' definition itself, read from that history
rather than from the guard's counters and delay lines: multiplexer ``x`` is in use at
``u`` iff some instruction issued at ``t < u`` has a window on it with
``t + lo <= u < t + lo + length`` (:class:`~systolica.rtl.mux_guard.Window`, which
restates :func:`systolica.arch.timing.mux_use`; ``testbenches`` check that the two
agree). The history is as long as the proof's bound, so it holds every instruction
a trace of that length can have issued.
"""

from __future__ import annotations

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cat, Const, Mux, Signal, Value
from amaranth.lib import data

from systolica.arch import fabric, instructions, isa
from systolica.arch.config import ChipConfig
from systolica.formal.runner import Harness, Mutation
from systolica.rtl.mux_guard import MuxGuard
from systolica.rtl.ports import UbufAt, setcfg_numbers, ubuf_place

#: Logic whose removal the proof must notice.
MUTATIONS = {
    "guard-disabled": Mutation("guard-disabled", "guard.in_use", 0,
                               "a SETCFG naming a multiplexer in use passes"),
    "delay-line-stuck": Mutation("delay-line-stuck", "guard.g2_past1", 0,
                                 "a window that opens after the issue never opens"),
}


class MuxGuardHarness(Harness):
    """The guard of ``cfg`` fed free legal instructions, with a history of
    ``history`` cycles (at least the proof's bound) for the reference."""

    def __init__(self, *, cfg: ChipConfig, history: int):
        super().__init__()
        self.cfg, self.history = cfg, history
        self.guard = MuxGuard(cfg=cfg)

    def elaborate(self, platform):
        m = self.module()
        m.submodules.guard = guard = self.guard
        cfg = self.cfg
        muxes = fabric.muxes(cfg)
        places = ubuf_place(cfg)
        at = UbufAt(cfg, AnyConst(places["ubuf_base"].shape),
                    AnyConst(places["ubuf_rows"].shape))

        opcode, payload = AnySeq(4), AnySeq(isa.PAYLOAD_BITS)
        issue, clear = AnySeq(1), AnySeq(1)
        m.d.comb += [guard.issue.eq(issue), guard.clear.eq(clear),
                     guard.opcode.eq(opcode), guard.payload.eq(payload),
                     guard.setcfg.eq(AnySeq(guard.setcfg.shape().size))]

        def view(op, bits=payload):
            layout = isa.PAYLOAD[op]
            return data.View(layout, Value.cast(bits)[:layout.size])

        legal = Cat(*((opcode == op) & entry.legal(at, view(op), select=Mux)
                      for op, entry in instructions.SPEC.items())).any()
        m.d.comb += Assume(~issue | legal)

        # the history: instruction issued d cycles ago (d = 1 .. history), none past a clear
        past = []
        valid, op_bits, bits = issue & ~clear, opcode, payload
        for d in range(1, self.history + 1):
            v, o, p = (Signal(name=f"h{d}_valid"), Signal(4, name=f"h{d}_op"),
                       Signal(isa.PAYLOAD_BITS, name=f"h{d}_payload"))
            m.d.sync += [v.eq(valid & ~clear), o.eq(op_bits), p.eq(bits)]
            past.append((d, v, o, p))
            valid, op_bits, bits = v, o, p

        in_use = [Const(0)] * len(muxes)
        for w in guard.windows:
            layout = isa.PAYLOAD[w.op]
            for d, v, o, p in past:
                if d < w.lo:
                    continue
                args = data.View(layout, p[:layout.size])
                opens = v & (o == w.op)
                for f in w.closed_by:
                    opens = opens & ~args[f]
                for f, value in w.when:
                    opens = opens & (args[f] == value)
                length = w.base + (w.per_row * args.rows if w.per_row else 0)
                in_use[w.mux] = in_use[w.mux] | (opens & (d < w.lo + length))
        busy = Signal(len(muxes))
        m.d.comb += busy.eq(Cat(*in_use))

        sc = guard.setcfg
        names = [(k <= sc.more) & (number < len(muxes)) & busy.bit_select(number, 1)
                 for k, (number, _) in enumerate(setcfg_numbers(cfg, sc))]
        m.d.comb += [Assert(guard.busy == busy), Assert(guard.in_use == Cat(*names).any())]
        return m
