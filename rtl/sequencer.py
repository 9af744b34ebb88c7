"""The sequencer: issues each instruction of the program at its scheduled cycle."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from systolica.arch import fabric, fetch, instructions, isa
from systolica.arch.config import ChipConfig
from systolica.arch.isa import Opcode
from systolica.arch.regs import ErrorCode
from systolica.rtl.mux_guard import MuxGuard
from systolica.rtl.ports import (
    PC_BITS,
    DramMaster,
    Issue,
    RunControl,
    UbufAt,
    check_config,
    mux_lookup,
    setcfg_numbers,
    setcfg_page_ok,
    ubuf_place,
)


class Sequencer(wiring.Component):
    """Holds the program memory and issues instruction ``pc`` when the cycle counter
    equals its ``cycle`` field, strobing its unit's issue port with the payload.

    Members: ``ctrl`` (:class:`~.ports.RunControl`, from the register file), one
    :class:`~.ports.Issue` port per unit (:attr:`UNITS`; ``fabric``, the configuration
    registers, without a handshake), and the instruction fetcher's DRAM port ``mem``
    (:class:`~.ports.DramMaster`, reads only) with ``mem_busy`` (the DMA uses the
    port this cycle: the fetcher keeps off it), and ``bank_conflict`` (two units use
    one port of a CBUF or ACC bank this cycle: a ``BANK_CONFLICT`` fault the next
    cycle), and the UBUF registers ``ubuf_base`` / ``ubuf_rows`` (a COPY or fused crop
    checked against them).

    Faults (see ``docs/contract.md``) stop issue, latch the error code, the program
    index and the cycle, and end the run; so does the end of the program once every
    unit has drained. It never waits on a unit: an instruction whose unit is not ready
    at its cycle is a fault, not a stall, so the schedule the compiler predicted is
    the schedule that runs. Programs longer than the memory are fetched from DRAM
    (:mod:`systolica.arch.fetch` states the cycle rule).

    For the clock rate, the issue decision starts from registers: the head's checks
    of its own word are worked out a cycle ahead (for both words that may be the head
    then), the word the units latch at issue comes from the same registers (the
    matmul unit's port carries both candidate words and which one it is, ``ahead``),
    and the bank conflict is registered (its fault comes a cycle later).
    """

    #: Issue port -> the opcode it carries (``fabric``'s: SETCFG or SETCFGW, the chip's
    #: format, :func:`fabric.setcfg_format`).
    UNITS = {("fabric" if entry.unit == "cfg" else entry.unit): op   # cfg: the config
             for op, entry in instructions.SPEC.items()             # object's name
             if op is not Opcode.SETCFGW}
    #: Opcodes whose port also carries the head's two candidate words (``ahead``):
    #: the MATMUL's unit multiplies by its fields at issue.
    AHEAD = frozenset({Opcode.MATMUL})

    def __init__(self, *, cfg: ChipConfig):
        self.cfg = check_config(cfg, "Sequencer")
        members = {"ctrl": In(RunControl()), "mem": Out(DramMaster.of(cfg)),
                   "mem_busy": In(1), "bank_conflict": In(1), **ubuf_place(cfg)}
        self.setcfg_op = fabric.setcfg_format(cfg).op
        self.units = {name: self.setcfg_op if name == "fabric" else op
                      for name, op in self.UNITS.items()}
        for name, op in self.units.items():
            members[name] = Out(Issue(isa.PAYLOAD[op],
                                      handshake=instructions.SPEC[op].handshake,
                                      ahead=op in self.AHEAD))
        super().__init__(members)

    def elaborate(self, platform):
        # The program memory is a ring of D slots; instruction p lives in slot p % D.
        # The head (pc) is read one cycle ahead: the address in cycle c is the head of
        # cycle c + 1, and ``present`` says the slot held that instruction when read
        # (``filled`` counts the instructions written into the ring). The fetcher
        # reads the words of instruction ``fetch_pc`` once its slot is free
        # (``fetch_pc - D`` has issued) in the cycles the DMA leaves the port idle.
        # The memory has one write port: the host loads the program while the chip
        # is stopped, the fetcher writes only while it runs (a word arriving after a
        # fault is dropped: the run is over, the next one reloads the ring).
        m = Module()
        cfg, ctrl = self.cfg, self.ctrl
        depth = cfg.imem_depth
        running, cycle = ctrl.running, ctrl.cycle
        m.submodules.imem = imem = memory.Memory(shape=isa.WORD_BITS, depth=depth,
                                                 init=[])
        wr = imem.write_port()
        # ``reads[k]`` reads slot ``base + k`` (k = 0..3), ``base`` a register: the
        # head of the cycle (0 once a run has ended). Each sees a word written in the
        # same cycle. Their words are registered, and the head's checks are worked out
        # from those registers a cycle ahead (below): no path starts at the block
        # RAMs' outputs, and none ends at their addresses but from registers.
        reads = [imem.read_port(transparent_for=(wr,)) for _ in range(4)]

        def wrap(slot):
            return Mux(slot == depth - 1, 0, slot + 1)

        def plus(slot, k):
            """``(slot + k) % depth``."""
            k %= depth
            return Mux(slot + k >= depth, slot + k - depth, slot + k)[:len(slot)]

        # A START in the two cycles after a run ends is taken in the third: the read
        # registers hold the program's first words only from then on. (No cycle of
        # the run moves: its cycle counter starts at the START it takes.)
        ended = Signal(2)                         # the run ended 1 or 2 cycles ago
        start_pending = Signal()
        start = Signal()
        blocked = ended.any()
        m.d.comb += start.eq(((ctrl.start & ~running) | start_pending) & ~blocked)
        m.d.sync += start_pending.eq(((ctrl.start & ~running) | start_pending) & blocked)
        pc = Signal(PC_BITS)
        slot = Signal(range(depth))               # pc % depth
        filled = Signal(32)                       # instructions in the ring so far
        present = Signal()                        # ir holds instruction pc
        waited = Signal()                         # the head waited for its word
        issue = Signal()
        took, took2 = Signal(name="took"), Signal(name="took2")   # issued 1, 2 cycles ago
        fault = Signal()
        finished = Signal()
        # the run goes on next cycle; else the reads go back to slot 0 (and the three
        # after it), ready for a START
        goes_on = running & ~fault & ~finished
        # the read addresses of c + 1: the head of c + 1 and the slots after it, each
        # a sum of registers that the issue only selects
        for k, port in enumerate(reads):
            addr = Signal(range(depth), name=f"read_base_{k}", init=k % depth)
            m.d.sync += addr.eq(Mux(goes_on, Mux(issue, plus(slot, k + 1), plus(slot, k)),
                                    k % depth))
            m.d.comb += port.addr.eq(addr)
        m.d.sync += ended.eq(Cat(running & ~goes_on, ended[0]))

        # pc < PROG_LEN for both heads c + 1 may have (the run's PROG_LEN changes only
        # at a START, and ``ctrl`` shows the new one in START's cycle): issue only
        # selects
        below, below_next = Signal(), Signal()
        pc_from = Mux(start, 0, pc)
        m.d.sync += [below.eq(pc_from < ctrl.prog_len), below_next.eq(pc_from + 1 < ctrl.prog_len)]
        head = running & Mux(took, below_next, below)
        ready_head = head & present

        # The head's own checks of its word alone (and of the cycle it is checked in)
        # are registered: in cycle c the checks of both words that may be the head in
        # c + 1 are worked out, the head's (no issue in c) and the next one's (the
        # head issues in c), for cycle c + 1 (0 in a START's cycle), and the issue
        # only chooses between them. So the issue decision of c + 1 starts from
        # registers rather than from the program memory's data through its checks.
        next_cycle = Mux(start, 0, (cycle + 1)[:len(cycle)])
        at = UbufAt(cfg, self.ubuf_base, self.ubuf_rows)   # the UBUF as the registers say
        n_mux = len(fabric.muxes(cfg))
        Checks = data.StructLayout({"opcode": 4, "legal": 1, "due": 1, "late": 1,
                                    "in_range": 1, "cfg_ok": 1, "limit_ok": 1,
                                    "names": n_mux})

        def checks(word):
            view = data.View(isa.Word, word)
            opcode = Value.cast(view.opcode)
            in_range, cfg_ok = self._range_checks(m, view)
            # the multiplexers a SETCFG names (for CFG_IN_USE, against the guard's busy)
            sc = self._view(view, self.setcfg_op)
            indices = [number for number, _ in setcfg_numbers(cfg, sc)]
            named = [Cat(*((k <= sc.more) & (ix == x) for k, ix in enumerate(indices))).any()
                     for x in range(n_mux)]
            out = Signal(Checks)
            m.d.comb += [
                out.opcode.eq(opcode),
                # an opcode of the ISA, with a field combination its entry defines
                out.legal.eq(Cat(*((opcode == op) & entry.legal(at, self._view(view, op),
                                                                select=Mux)
                                   for op, entry in instructions.SPEC.items())).any()),
                out.due.eq(view.cycle == next_cycle), out.late.eq(view.cycle < next_cycle),
                out.in_range.eq(in_range), out.cfg_ok.eq(cfg_ok),
                out.names.eq(Mux(opcode == self.setcfg_op, Cat(*named), 0)),
                out.limit_ok.eq(self._update_limits(m, view, next_cycle))]
            return out

        # Both words' checks are registered and the issue of cycle c chooses between
        # them after the registers (``took``): choosing before them let the synthesis
        # share one copy of each check's logic (a multiply among them) between the
        # two words behind a multiplexer that ``issue`` drives, which put the whole
        # issue decision in front of the checks in one cycle.
        #
        # The words come from registers too: ``held[k]`` holds the word of slot
        # ``s + k`` in cycle c, read in c - 1 from the addresses of c - 2 (``s`` the
        # head of c - 2), or the word written in c - 1 into that slot. The head of c
        # is ``s + took2 + took`` (the issues of c - 2 and c - 1), so the two
        # candidates of c + 1 are ``held[took2 + took]`` and the next one. A word the
        # fetcher writes in c is in no check before c + 2, when ``present`` first
        # says its instruction is there.
        m.d.sync += [took.eq(issue), took2.eq(took)]
        held = []
        for k, port in enumerate(reads):
            at_q = Signal(range(depth), name=f"read_addr_{k}")
            word = Signal(isa.WORD_BITS, name=f"held_{k}")
            m.d.sync += [at_q.eq(port.addr),
                         word.eq(Mux(wr.en & (wr.addr == at_q), wr.data, port.data))]
            held.append(word)
        now_word, after_word = Signal(isa.WORD_BITS), Signal(isa.WORD_BITS)
        # ``took & took2`` and ``took | took2`` in registers of their own (the same
        # values a cycle later): the words' multiplexers, in front of the checks'
        # multiplies, start from a register, and ``took`` drives fewer of them.
        both, either = Signal(name="took_both"), Signal(name="took_either")
        m.d.sync += [both.eq(issue & took), either.eq(issue | took)]
        m.d.comb += [now_word.eq(Mux(both, held[2], Mux(either, held[1], held[0]))),
                     after_word.eq(Mux(both, held[3], Mux(either, held[2], held[1])))]
        now_q, after_q = Signal(Checks), Signal(Checks)
        m.d.sync += [now_q.eq(checks(now_word)), after_q.eq(checks(after_word))]
        chk = Signal(Checks)
        m.d.comb += chk.eq(Mux(took, after_q, now_q))
        # The head's word itself (the units latch their fields from it at issue, some
        # through a multiply) comes from the same registers' words.
        word_now = Signal(isa.WORD_BITS, name="word_now")
        word_after = Signal(isa.WORD_BITS, name="word_after")
        m.d.sync += [word_now.eq(now_word), word_after.eq(after_word)]
        ir = data.View(isa.Word, Mux(took, word_after, word_now))
        opcode = chk.opcode
        legal, due, late = chk.legal, chk.due, chk.late
        in_range, cfg_ok, cfg_limit_ok = chk.in_range, chk.cfg_ok, chk.limit_ok
        units = [getattr(self, name) for name in self.units]
        ready_of = [Const(1)] * (1 << len(opcode))   # register writes: every cycle
        for unit, op in zip(units, self.units.values()):
            if unit.signature.handshake:
                ready_of[op] = unit.ready
        ready = Signal()                              # the head's unit takes it now
        m.d.comb += ready.eq(Array(ready_of)[opcode])
        m.submodules.guard = guard = MuxGuard(cfg=cfg)
        m.d.comb += [guard.clear.eq(start), guard.issue.eq(issue),
                     guard.opcode.eq(opcode), guard.payload.eq(ir.payload),
                     guard.setcfg.eq(ir.payload[:guard.setcfg.shape().size])]
        in_use = (chk.names & guard.busy).any()

        words = fetch.words_per_instruction(cfg)
        # P = min(PROG_FETCH, D, PROG_LEN): the fetcher reads instructions [P, PROG_LEN)
        # (systolica.arch.fetch); the host has written those below P into slots 0 ..
        fits = Mux(ctrl.prog_len > depth, depth, ctrl.prog_len)
        first = Signal(32)
        m.d.comb += first.eq(Mux(ctrl.prog_fetch < fits, ctrl.prog_fetch, fits))
        fetched = first < ctrl.prog_len
        region_end = ctrl.prog_addr + ctrl.prog_len * words
        # The bank conflict (the units' accesses of a cycle: a deep path through every
        # unit's address and the crossbars' claims) is registered: a conflict in cycle
        # c faults in cycle c + 1, before the head's own faults there, and nothing
        # issues in c + 1. The head's issue in c does not wait for it.
        conflict_q = Signal()
        m.d.sync += conflict_q.eq(running & self.bank_conflict)
        # The program's DRAM region is checked in cycle 0 from registers: ``ctrl``
        # shows the run's registers from a START's cycle on, so the check of that
        # cycle is cycle 0's.
        region_bad = Signal()
        m.d.sync += region_bad.eq(fetched & (region_end > cfg.dram_words))
        code = Signal.like(ctrl.error)
        with m.If(running & (cycle == 0) & region_bad):
            m.d.comb += [fault.eq(1), code.eq(ErrorCode.PROG_RANGE)]
        with m.Elif(running & conflict_q):
            m.d.comb += [fault.eq(1), code.eq(ErrorCode.BANK_CONFLICT)]
        with m.Elif(ready_head & ~legal):
            m.d.comb += [fault.eq(1), code.eq(ErrorCode.ILLEGAL_OPCODE)]
        with m.Elif(ready_head & late):
            m.d.comb += [fault.eq(1),
                         code.eq(Mux(waited, ErrorCode.FETCH_LATE, ErrorCode.LATE))]
        with m.Elif(ready_head & due & ~ready):
            m.d.comb += [fault.eq(1), code.eq(ErrorCode.UNIT_BUSY)]
        with m.Elif(ready_head & due & ~in_range):
            m.d.comb += [fault.eq(1), code.eq(ErrorCode.ADDR_RANGE)]
        with m.Elif(ready_head & due & ~cfg_ok):
            m.d.comb += [fault.eq(1), code.eq(ErrorCode.CFG_RANGE)]
        with m.Elif(ready_head & due & ~cfg_limit_ok):
            m.d.comb += [fault.eq(1), code.eq(ErrorCode.CFG_LIMIT)]
        with m.Elif(ready_head & due & in_use):
            m.d.comb += [fault.eq(1), code.eq(ErrorCode.CFG_IN_USE)]
        with m.Elif(ready_head & due):
            m.d.comb += issue.eq(1)
        for unit, op in zip(units, self.units.values()):
            size = unit.payload.shape().size
            m.d.comb += [unit.valid.eq(issue & (opcode == op)),
                         unit.payload.eq(ir.payload[:size])]
            if unit.signature.ahead:
                m.d.comb += [unit.took.eq(took),
                             unit.now.eq(data.View(isa.Word, word_now).payload[:size]),
                             unit.after.eq(data.View(isa.Word, word_after).payload[:size])]

        all_drained = Cat(*(u.drained for u in units if u.signature.handshake)).all()
        m.d.comb += finished.eq(running & ~head & all_drained & ~fault)
        m.d.comb += [ctrl.done.eq(finished), ctrl.fault.eq(fault)]
        with m.If(start):
            m.d.sync += [running.eq(1), pc.eq(0), slot.eq(0), cycle.eq(0),
                         present.eq(first != 0), waited.eq(0),
                         ctrl.error.eq(ErrorCode.NONE), ctrl.fault_pc.eq(0)]
        with m.Elif(fault):
            m.d.sync += [running.eq(0), ctrl.error.eq(code), ctrl.fault_pc.eq(pc)]
        with m.Elif(finished):
            m.d.sync += running.eq(0)
        with m.Elif(running):
            m.d.sync += [cycle.eq(cycle + 1), pc.eq(pc + issue),
                         # both sums from registers: issue only selects
                         present.eq(Mux(issue, pc + 1 < filled, pc < filled)),
                         waited.eq(~issue & (waited | (head & ~present)))]
            with m.If(issue):
                m.d.sync += slot.eq(wrap(slot))

        # The fetcher: the words of instruction fetch_pc from fetch_addr, one per
        # cycle it may use the port; each returns the next cycle and the last one
        # writes the instruction into its slot.
        fetch_pc = Signal(32)
        fetch_addr = Signal(isa.DRAM_ADDR_BITS)
        fetch_slot = Signal(range(depth))
        part = Signal(range(words))
        wbits = 8 * cfg.dram_word_bytes
        go = Signal()
        m.d.comb += [go.eq(running & (fetch_pc < ctrl.prog_len) & (fetch_pc < pc + depth)
                           & ~self.mem_busy),
                     self.mem.re.eq(go), self.mem.addr.eq(fetch_addr),
                     self.mem.we.eq(0), self.mem.wdata.eq(0)]
        back, back_last = Signal(), Signal()
        m.d.sync += [back.eq(go), back_last.eq(go & (part == words - 1))]
        gathered = self.mem.rdata
        if words > 1:
            held = Signal(wbits * (words - 1))
            with m.If(back):
                m.d.sync += held.eq(Cat(held[wbits:], self.mem.rdata))
            gathered = Cat(held, self.mem.rdata)
        with m.If(running):
            m.d.comb += [wr.addr.eq(fetch_slot), wr.data.eq(gathered[:isa.WORD_BITS]),
                         wr.en.eq(back & back_last)]
        with m.Else():
            m.d.comb += [wr.addr.eq(ctrl.imem.addr), wr.data.eq(ctrl.imem.data),
                         wr.en.eq(ctrl.imem.en & (ctrl.imem.addr < depth))]
        with m.If(start):
            m.d.sync += [fetch_pc.eq(first),
                         fetch_addr.eq(ctrl.prog_addr + first * words),
                         fetch_slot.eq(Mux(first == depth, 0, first[:len(fetch_slot)])),
                         part.eq(0), filled.eq(first)]
        with m.Else():
            with m.If(go):
                m.d.sync += fetch_addr.eq(fetch_addr + 1)
                with m.If(part == words - 1):
                    m.d.sync += [part.eq(0), fetch_pc.eq(fetch_pc + 1)]
                with m.Else():
                    m.d.sync += part.eq(part + 1)
            with m.If(back & back_last):
                m.d.sync += [filled.eq(filled + 1), fetch_slot.eq(wrap(fetch_slot))]
        return m

    @staticmethod
    def _view(ir, op):
        """The head's payload as ``op``'s fields."""
        layout = isa.PAYLOAD[op]
        return data.View(layout, Value.cast(ir.payload)[:layout.size])

    def _update_limits(self, m, ir, cycle):
        """Whether a SETCFG keeps the chip's configuration-update limits in ``cycle``:
        pairs per instruction, the update interval, and the per-power-domain budget."""
        cfg = self.cfg
        sc = self._view(ir, self.setcfg_op)
        pairs = sc.more + 1
        ok = pairs <= cfg.max_config_updates_per_cycle
        if cfg.config_update_interval > 1:
            ok = ok & (cycle % cfg.config_update_interval == 0)
        muxes = fabric.muxes(cfg)
        domains = fabric.domains(cfg)
        bits = ceil_log2(len(domains) + 1)          # and a pad no domain has
        domain_of = mux_lookup(cfg, [domains.index(x.domain) for x in muxes], bits,
                               (1 << bits) - 1)
        indices = [number for number, _ in setcfg_numbers(cfg, sc)]
        for d in range(len(domains)):
            hits = [(k < pairs) & (domain_of(ix) == d) for k, ix in enumerate(indices)]
            count = sum(hit.as_unsigned() for hit in hits)
            ok = ok & (count <= cfg.power_domain_budget)
        limit_ok = Signal()
        m.d.comb += limit_ok.eq((Value.cast(ir.opcode) != self.setcfg_op) | ok)
        return limit_ok

    def _range_checks(self, m, ir):
        """Whether the head instruction's memory ranges lie inside their memories,
        and whether a SETCFG names an existing multiplexer source."""
        cfg = self.cfg
        at = UbufAt(cfg, self.ubuf_base, self.ubuf_rows)   # the UBUF as the registers say
        op = Value.cast(ir.opcode)
        def view(op):
            layout = isa.PAYLOAD[op]
            return data.View(layout, Value.cast(ir.payload)[:layout.size])

        # ADDR_RANGE: each instruction's ranges and bounds from its table entry. Every
        # opcode's check is worked out and the opcode only chooses among the results
        # (AND-OR, no case statement): behind a case statement the synthesis shares
        # one multiplier between the DMA's and the MATMUL's checks, with the opcode's
        # multiplexer in front of it on the program memory's path.
        in_range = Signal()
        known = Cat(*(op == opcode for opcode in instructions.SPEC)).any()
        m.d.comb += in_range.eq(~known | Cat(*(
            (op == opcode) & entry.in_range(at, view(opcode), select=Mux)
            for opcode, entry in instructions.SPEC.items())).any())

        sc = view(self.setcfg_op)
        muxes = fabric.muxes(cfg)
        n_sources = mux_lookup(cfg, [len(x.sources) for x in muxes],
                               ceil_log2(max(len(x.sources) for x in muxes) + 1), 0)
        pair_ok = [(k > sc.more) | (value < n_sources(number))
                   for k, (number, value) in enumerate(setcfg_numbers(cfg, sc))]
        cfg_ok = Signal()
        m.d.comb += cfg_ok.eq((op != self.setcfg_op)
                              | (Cat(*pair_ok).all() & setcfg_page_ok(cfg, sc)))
        return in_range, cfg_ok

