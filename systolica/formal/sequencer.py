"""The sequencer's properties (``rtl/sequencer.py``, docs/contract.md "Faults"),
proved against a reference that takes one instruction at a time.

The harness loads a program through the register file's write port on the program
memory (any words, any addresses, while the chip is stopped), starts it, and answers
every unit's ``ready`` and ``drained``, the bank conflict, the DMA's use of the
external memory and the fetcher's read data with free values. Beside the sequencer
it keeps its own copy of the program, counts the run's cycles and the instructions
issued (``pc``), and decides from the head's word alone, in the contract's order,
what the cycle must do: issue it, raise which fault, or wait. In every running cycle:

* **issue**: a unit's ``valid`` rises exactly when the reference issues the head,
  with the head's payload, on the head's unit; never to a unit that is not
  ``ready`` (``UNIT_BUSY`` instead);
* **faults**: a conflict in the cycle before, an illegal word, a late one, and at
  its cycle a busy unit, an address range, a multiplexer range, an update limit or a
  multiplexer in use raise ``fault`` with that code, and the next cycle the run has
  stopped with the code in ``error``, ``fault_pc`` the head's index and the cycle
  counter frozen at the fault's cycle; ``PROG_RANGE`` in cycle 0 exactly when a
  program longer than the memory runs past the DRAM;
* **no hang**: the cycle counter counts every running cycle, and ``done`` rises
  exactly when every instruction has issued and every unit has drained: a run is
  waiting only for an instruction's cycle (which the counter reaches) or a unit.

The reference works out the head's word, its cycle checks (due, late), the unit's
``ready``, the conflict, the fault order, the issue, the end and what the stop
latches on its own; the checks of the word alone (legality, ranges, the SETCFG range
and limits: :data:`PROBED`) it reads from the sequencer's registers (``chk``, a
probe), which the sequencer works out a cycle ahead from the same registered words
it issues from. Working them out again here is the instruction table's arithmetic
twice (products of 16-bit fields), which a bit-level solver proves equal only in
minutes per cycle; the harness can still do it (``probed=()``) for a few cycles.
So what is proved is that the sequencer takes the right word in the right cycle
(its two candidate words a cycle ahead, the ring's reads), acts on its checks in
the contract's order and latches the stop; the multiplexer guard's answer comes from
a second guard fed the reference's issues (the guard is proved on its own,
:mod:`.mux_guard`).

Programs are those held in the program memory (``PROG_LEN <= imem_depth``, preloaded:
``PROG_FETCH`` at least ``min(PROG_LEN, imem_depth)``); the fetch from DRAM of longer
ones is checked only for ``PROG_RANGE`` (docs/formal.md).
"""

from __future__ import annotations

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cat, Mux, Signal, Value
from amaranth.lib import data, memory

from systolica.arch import fabric, fetch, instructions, isa
from systolica.arch.config import ChipConfig
from systolica.arch.regs import ErrorCode
from systolica.formal.runner import Harness, Mutation
from systolica.rtl.mux_guard import MuxGuard
from systolica.rtl.sequencer import Sequencer

#: Logic whose removal the proof must notice.
MUTATIONS = {
    "busy-check-removed": Mutation("busy-check-removed", "seq.ready", 1,
                                   "an instruction issues to a unit that is not ready"),
    "bank-conflict-fault-dropped": Mutation("bank-conflict-fault-dropped", "seq.conflict_q", 0,
                                            "a bank conflict raises no fault"),
    "prog-range-fault-dropped": Mutation("prog-range-fault-dropped", "seq.region_bad", 0,
                                         "a program past the DRAM raises no PROG_RANGE"),
}


#: The checks of the head's word the reference takes from the sequencer's registers
#: rather than working them out again (docs/formal.md, "What is not proved").
PROBED = ("legal", "in_range", "cfg_ok", "limit_ok")


class SequencerHarness(Harness):
    """The sequencer of ``cfg`` with free inputs and the reference's assertions."""

    map_memories = True
    probes = {"probe_chk": "seq.chk", "probe_took": "seq.took",
              "probe_word_now": "seq.word_now", "probe_word_after": "seq.word_after"}

    def __init__(self, *, cfg: ChipConfig, probed: tuple[str, ...] = PROBED):
        super().__init__()
        self.cfg, self.probed = cfg, probed
        self.seq = Sequencer(cfg=cfg)

    def elaborate(self, platform):
        m = self.module()
        m.submodules.seq = seq = self.seq
        cfg, ctrl = self.cfg, seq.ctrl
        depth = cfg.imem_depth
        running = ctrl.running

        # -- the environment ---------------------------------------------------------
        # The run's registers change only while the chip is stopped; one value each
        # for the whole check (a new run may start with the same ones).
        prog_len, prog_addr, prog_fetch = AnyConst(32), AnyConst(32), AnyConst(32)
        m.d.comb += [ctrl.prog_len.eq(prog_len), ctrl.prog_addr.eq(prog_addr),
                     ctrl.prog_fetch.eq(prog_fetch),
                     Assume(prog_fetch >= Mux(prog_len > depth, depth, prog_len)),
                     seq.ubuf_base.eq(AnyConst(len(seq.ubuf_base))),
                     seq.ubuf_rows.eq(AnyConst(len(seq.ubuf_rows))),
                     ctrl.start.eq(AnySeq(1)), seq.mem_busy.eq(AnySeq(1)),
                     seq.bank_conflict.eq(AnySeq(1)),
                     seq.mem.rdata.eq(AnySeq(len(seq.mem.rdata)))]
        units = {name: getattr(seq, name) for name in seq.units}
        for unit in units.values():
            if unit.signature.handshake:
                m.d.comb += [unit.ready.eq(AnySeq(1)), unit.drained.eq(AnySeq(1))]
        # The host writes the program memory only while stopped, one register a cycle
        # (never with START), and not between a START and the run it starts.
        requested = Signal()
        m.d.sync += requested.eq(Mux(running, 0, requested | ctrl.start))
        m.d.comb += [ctrl.imem.en.eq(AnySeq(1)), ctrl.imem.addr.eq(AnySeq(32)),
                     ctrl.imem.data.eq(AnySeq(isa.WORD_BITS)),
                     Assume(~ctrl.imem.en | ~(running | requested | ctrl.start))]

        # -- the reference -------------------------------------------------------------
        m.submodules.program = program = memory.Memory(shape=isa.WORD_BITS, depth=depth,
                                                       init=[])
        load = program.write_port()
        m.d.comb += [load.en.eq(ctrl.imem.en & (ctrl.imem.addr < depth)),
                     load.addr.eq(ctrl.imem.addr), load.data.eq(ctrl.imem.data)]
        head_read = program.read_port(domain="comb")

        was_running = Signal()
        m.d.sync += was_running.eq(running)
        first = running & ~was_running                     # cycle 0 of a run
        pc_q, cycle_q = Signal(32), Signal(isa.CYCLE_BITS)
        pc = Mux(first, 0, pc_q)                           # instructions issued so far
        cycle = Mux(first, 0, cycle_q)
        issued = Cat(*(unit.valid for unit in units.values())).any()
        m.d.sync += [pc_q.eq(pc + issued), cycle_q.eq(cycle + 1)]
        m.d.comb += head_read.addr.eq(pc)
        word = data.View(isa.Word, head_read.data)
        opcode = Value.cast(word.opcode)

        short = prog_len <= depth
        head = pc < prog_len
        conflict = Signal()                                # a conflict a cycle ago
        m.d.sync += conflict.eq(running & seq.bank_conflict)

        # the sequencer's own view: the head's word and its registered checks
        n_mux = len(fabric.muxes(cfg))
        checks = data.StructLayout({"opcode": 4, "legal": 1, "due": 1, "late": 1,
                                    "in_range": 1, "cfg_ok": 1, "limit_ok": 1,
                                    "names": n_mux})
        chk = Signal(checks, name="probe_chk")
        took = Signal(name="probe_took")
        word_now = Signal(isa.WORD_BITS, name="probe_word_now")
        word_after = Signal(isa.WORD_BITS, name="probe_word_after")
        m.d.comb += [Value.cast(chk).eq(AnySeq(checks.size)), took.eq(AnySeq(1)),
                     word_now.eq(AnySeq(isa.WORD_BITS)), word_after.eq(AnySeq(isa.WORD_BITS))]
        seq_word = Mux(took, word_after, word_now)

        legal = Cat(*((opcode == op) & entry.legal(seq_at(seq), _view(word, op), select=Mux)
                      for op, entry in instructions.SPEC.items())).any()
        in_range, cfg_ok = seq._range_checks(m, word)
        limit_ok = seq._update_limits(m, word, cycle)
        own = {"legal": legal, "in_range": in_range, "cfg_ok": cfg_ok, "limit_ok": limit_ok}
        legal, in_range, cfg_ok, limit_ok = (chk[name] if name in self.probed else value
                                             for name, value in own.items())
        ready = Cat(*((opcode == op) & (unit.ready if unit.signature.handshake else 1)
                      for unit, op in zip(units.values(), seq.units.values()))).any()
        m.submodules.guard = guard = MuxGuard(cfg=cfg)
        m.d.comb += [guard.clear.eq(~running), guard.issue.eq(issued),
                     guard.opcode.eq(opcode), guard.payload.eq(word.payload),
                     guard.setcfg.eq(word.payload[:guard.setcfg.shape().size])]
        due, late = word.cycle == cycle, word.cycle < cycle

        code = Signal(range(max(ErrorCode) + 1))
        with m.If(conflict):
            m.d.comb += code.eq(ErrorCode.BANK_CONFLICT)
        with m.Elif(~head):
            m.d.comb += code.eq(ErrorCode.NONE)
        with m.Elif(~legal):
            m.d.comb += code.eq(ErrorCode.ILLEGAL_OPCODE)
        with m.Elif(late):
            m.d.comb += code.eq(ErrorCode.LATE)
        with m.Elif(~due):
            m.d.comb += code.eq(ErrorCode.NONE)
        with m.Elif(~ready):
            m.d.comb += code.eq(ErrorCode.UNIT_BUSY)
        with m.Elif(~in_range):
            m.d.comb += code.eq(ErrorCode.ADDR_RANGE)
        with m.Elif(~cfg_ok):
            m.d.comb += code.eq(ErrorCode.CFG_RANGE)
        with m.Elif(~limit_ok):
            m.d.comb += code.eq(ErrorCode.CFG_LIMIT)
        with m.Elif((opcode == seq.setcfg_op) & guard.in_use):
            m.d.comb += code.eq(ErrorCode.CFG_IN_USE)
        fault = code != ErrorCode.NONE
        issue = head & due & ~fault & ~conflict
        drained = Cat(*(u.drained for u in units.values() if u.signature.handshake)).all()
        done = ~head & drained & ~conflict

        # the long program's one check: its region, in cycle 0
        words = fetch.words_per_instruction(cfg)
        region_bad = (prog_len > depth) & (prog_addr + prog_len * words > cfg.dram_words)

        # -- the properties ----------------------------------------------------------
        with m.If(running):
            m.d.comb += Assert(ctrl.cycle == cycle)
            with m.If(short):
                with m.If(head & ~first):       # (cycle 0's: the payload, below)
                    m.d.comb += Assert(seq_word == head_read.data)
                m.d.comb += [Assert(ctrl.fault == fault), Assert(issued == issue),
                             Assert(ctrl.done == done)]
                for unit, op in zip(units.values(), seq.units.values()):
                    size = unit.payload.shape().size
                    m.d.comb += Assert(unit.valid == (issue & (opcode == op)))
                    if unit.signature.handshake:
                        m.d.comb += Assert(~unit.valid | unit.ready)
                    with m.If(unit.valid):
                        m.d.comb += Assert(Value.cast(unit.payload)
                                           == Value.cast(word.payload)[:size])
            with m.Elif(first & region_bad):
                m.d.comb += Assert(ctrl.fault)

        # what the stop latches, checked the cycle after
        stopped_q, known_q, code_q = Signal(), Signal(), Signal.like(code)
        fault_pc_q, fault_cycle_q = Signal(32), Signal(isa.CYCLE_BITS)
        m.d.sync += [stopped_q.eq(running & (ctrl.fault | ctrl.done)),
                     known_q.eq(short | (first & region_bad)),
                     code_q.eq(Mux(short, Mux(ctrl.done, ErrorCode.NONE, code),
                                   ErrorCode.PROG_RANGE)),
                     fault_pc_q.eq(pc), fault_cycle_q.eq(cycle)]
        with m.If(stopped_q):
            m.d.comb += [Assert(~running), Assert(ctrl.cycle == fault_cycle_q)]
        with m.If(stopped_q & known_q):
            m.d.comb += Assert(ctrl.error == code_q)
            with m.If(code_q != ErrorCode.NONE):
                m.d.comb += Assert(ctrl.fault_pc == fault_pc_q)
        return m


def seq_at(seq: Sequencer):
    """The chip's configuration with the UBUF registers, as the sequencer's checks
    see it."""
    from systolica.rtl.ports import UbufAt
    return UbufAt(seq.cfg, seq.ubuf_base, seq.ubuf_rows)


def _view(word, op):
    layout = isa.PAYLOAD[op]
    return data.View(layout, Value.cast(word.payload)[:layout.size])
