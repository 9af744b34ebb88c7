"""The host link's bridge: requests from the UART to the chip's register bus and to
the DRAM, responses back (:mod:`systolica.arch.link` defines the frames)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from systolica.arch import link, regs
from systolica.arch.config import ChipConfig
from systolica.arch.link import Command, Status
from systolica.arch.regs import Reg
from systolica.rtl.ports import DramMaster, check_config


class LinkBridge(wiring.Component):
    """Turns requests arriving on ``rx`` into register and DRAM accesses and sends
    the responses on ``tx``.

    Members: ``rx`` / ``tx`` (byte streams from and to the UART); the register bus
    master (``reg_addr``, ``reg_wdata``, ``reg_we``, ``reg_rdata``; between requests
    ``reg_addr`` is ``STATUS``, whose low bits ``status`` holds, a cycle late:
    running, done, error; on a chip with the management core it is ``STATUS`` and
    ``CORE_STATUS`` in turn, ``status`` up to two cycles late); ``dram`` (a
    :class:`~systolica.rtl.ports.DramMaster` on the DRAM, used only while neither the
    chip nor its management core runs: ``BUSY`` else); ``chip_reset`` (one cycle, the
    cycle after the bridge takes a ``RESET``). ``idle_timeout`` is the quiet time, in
    clock cycles, after which a
    request that broke off is answered ``TIMEOUT`` and after which the line is read
    again once an error was answered.
    """

    def __init__(self, *, cfg: ChipConfig, idle_timeout: int):
        self.cfg = check_config(cfg, "LinkBridge")
        if not isinstance(idle_timeout, int) or isinstance(idle_timeout, bool) \
                or idle_timeout < 16:
            raise TypeError(f"LinkBridge idle_timeout must be an integer of at least 16 "
                            f"clock cycles, not {idle_timeout!r}")
        self.idle_timeout = idle_timeout
        super().__init__({
            "rx": In(stream.Signature(8, always_ready=True)),
            "tx": Out(stream.Signature(8)),
            "reg_addr": Out(regs.ADDR_BITS), "reg_wdata": Out(32), "reg_we": Out(1),
            "reg_rdata": In(32), "status": Out(3),
            "dram": Out(DramMaster.of(cfg)),
            "chip_reset": Out(1),
        })

    def elaborate(self, platform):
        # One request at a time: hunt for the sync byte, take the header and check its
        # CRC, execute (a DRAM write takes its data word by word, writing each as it
        # completes), then answer: sync, status, length, the data (a register, the
        # INFO bytes, or DRAM words read one at a time), CRC. After an error answer the
        # line is drained until quiet, so the rest of a rejected frame is never taken
        # for a new one.
        m = Module()
        cfg = self.cfg
        wb = cfg.dram_word_bytes
        max_words = link.max_transfer_words(wb)
        byte = self.rx.payload
        got = self.rx.valid

        header = Signal(8 * link.HEADER_FIELDS)
        command, addr, arg = header[:8], header[8:40], header[40:72]
        # the answer's and the request's CRC (link.CRC): restarted by ``start``, a byte
        # added by ``valid`` with ``data``; ``crc`` is its register
        m.submodules.crc = crc_unit = link.CRC.create()
        crc = crc_unit.crc

        def crc_restart():
            m.d.comb += crc_unit.start.eq(1)

        def crc_add(value):
            m.d.comb += [crc_unit.valid.eq(1), crc_unit.data.eq(value)]
        count = Signal(range(max(link.HEADER_FIELDS, wb, link.INFO_BYTES) + 1))
        cur = Signal.like(self.dram.addr)
        left = Signal(range(max_words + 1))
        word = Signal(max(8 * wb, 8 * link.INFO_BYTES))
        status = Signal(Status)
        length = Signal(16)
        drain = Signal()                       # drain the line after this answer
        from_dram = Signal()                   # the answer's data are DRAM words

        quiet = Signal(range(self.idle_timeout + 1))
        with m.If(got):
            m.d.sync += quiet.eq(0)
        with m.Elif(quiet != self.idle_timeout):
            m.d.sync += quiet.eq(quiet + 1)
        timed_out = quiet == self.idle_timeout

        # Between requests the register bus shows STATUS; on a chip with the management
        # core, STATUS and CORE_STATUS in turn (the core will reach the DRAM itself,
        # so the DRAM is the bridge's only while neither the chip nor the core runs).
        reg_access = Signal()
        idle_reg = Signal(regs.ADDR_BITS)
        core_running = Signal()
        m.d.comb += self.reg_addr.eq(Mux(reg_access, addr[:regs.ADDR_BITS], idle_reg))
        if cfg.has_core:
            poll_core = Signal()
            m.d.sync += poll_core.eq(~poll_core)
            m.d.comb += idle_reg.eq(Mux(poll_core, Reg.CORE_STATUS, Reg.STATUS))
            with m.If(~reg_access & poll_core):
                m.d.sync += core_running.eq(self.reg_rdata[0])     # CORE_STATUS.RUNNING
            with m.If(~reg_access & ~poll_core):
                m.d.sync += self.status.eq(self.reg_rdata[:3])
        else:
            m.d.comb += idle_reg.eq(Reg.STATUS)
            with m.If(~reg_access):
                m.d.sync += self.status.eq(self.reg_rdata[:3])
        running = self.status[0] | core_running

        def answer(code, *, size=0, dram=False, drain_after=False):
            m.d.sync += [status.eq(code), length.eq(size), from_dram.eq(dram),
                         drain.eq(drain_after)]
            m.next = "SYNC"

        def send(value, next_state=None, *, checked=True):
            """Offer ``value`` to the UART; once taken, go to ``next_state`` and (if
            ``checked``) add it to the answer's CRC."""
            m.d.comb += [self.tx.valid.eq(1), self.tx.payload.eq(value)]
            with m.If(self.tx.ready):
                if checked:
                    crc_add(value)
                if next_state is not None:
                    m.next = next_state

        # The header's checks, registered: the header is complete a whole byte
        # (the CRC's) before EXEC reads them, so EXEC starts from registers, and the
        # register bus and the chip's reset with it.
        is_dram, bad_length, bad_range, bad_reg = Signal(), Signal(), Signal(), Signal()
        dram_cmd = (command == Command.DRAM_WRITE) | (command == Command.DRAM_READ)
        reg_cmd = (command == Command.REG_WRITE) | (command == Command.REG_READ)
        m.d.sync += [is_dram.eq(dram_cmd),
                     bad_length.eq(dram_cmd & ((arg == 0) | (arg > max_words))),
                     bad_range.eq(dram_cmd & (addr + arg > cfg.dram_words)),  # 33 bits
                     bad_reg.eq(reg_cmd & (addr >= 1 << regs.ADDR_BITS))]
        # RESET resets the chip the cycle after EXEC (a register: the reset reaches
        # every register of the chip)
        reset = Signal()
        m.d.sync += self.chip_reset.eq(reset)

        with m.FSM():
            with m.State("HUNT"):
                with m.If(got & (byte == link.REQUEST_SYNC)):
                    m.d.sync += count.eq(0)
                    crc_restart()
                    m.next = "HEADER"

            with m.State("HEADER"):
                with m.If(got):
                    with m.If(count == link.HEADER_FIELDS):
                        with m.If(byte == crc):
                            m.next = "EXEC"
                        with m.Else():
                            answer(Status.BAD_CRC, drain_after=True)
                    with m.Else():
                        m.d.sync += [header.eq(Cat(header[8:], byte)), count.eq(count + 1)]
                        crc_add(byte)
                with m.Elif(timed_out):
                    answer(Status.TIMEOUT)

            with m.State("EXEC"):
                m.d.sync += [cur.eq(addr), left.eq(arg), count.eq(0)]
                crc_restart()
                with m.If(bad_length):
                    answer(Status.BAD_LENGTH, drain_after=True)
                with m.Elif(bad_range):
                    answer(Status.BAD_RANGE, drain_after=True)
                with m.Elif(is_dram & running):
                    answer(Status.BUSY, drain_after=True)
                with m.Elif(bad_reg):
                    answer(Status.BAD_RANGE, drain_after=True)
                with m.Else():
                    with m.Switch(command):
                        with m.Case(Command.REG_WRITE):
                            m.d.comb += [reg_access.eq(1), self.reg_we.eq(1),
                                         self.reg_wdata.eq(arg)]
                            answer(Status.OK)
                        with m.Case(Command.REG_READ):
                            m.d.comb += reg_access.eq(1)
                            m.d.sync += word.eq(self.reg_rdata)
                            answer(Status.OK, size=4)
                        with m.Case(Command.DRAM_WRITE):
                            m.next = "WDATA"
                        with m.Case(Command.DRAM_READ):
                            answer(Status.OK, size=(arg * wb)[:16], dram=True)
                        with m.Case(Command.RESET):
                            m.d.comb += reset.eq(1)
                            answer(Status.OK)
                        with m.Case(Command.INFO):
                            m.d.sync += word.eq(Cat(Const(link.VERSION, 8), Const(wb, 8),
                                                    Const(cfg.dram_words, 32)))
                            answer(Status.OK, size=link.INFO_BYTES)
                        with m.Default():
                            answer(Status.BAD_COMMAND, drain_after=True)

            with m.State("WDATA"):
                with m.If(got):
                    full = Cat(word[8:8 * wb], byte)
                    m.d.sync += [word.eq(full), count.eq(count + 1)]
                    crc_add(byte)
                    with m.If(count == wb - 1):
                        m.d.comb += [self.dram.we.eq(1), self.dram.addr.eq(cur),
                                     self.dram.wdata.eq(full)]
                        m.d.sync += [cur.eq(cur + 1), left.eq(left - 1), count.eq(0)]
                        with m.If(left == 1):
                            m.next = "WCRC"
                with m.Elif(timed_out):
                    answer(Status.TIMEOUT)

            with m.State("WCRC"):
                with m.If(got):
                    with m.If(byte == crc):
                        answer(Status.OK)
                    with m.Else():
                        answer(Status.BAD_CRC, drain_after=True)
                with m.Elif(timed_out):
                    answer(Status.TIMEOUT)

            # The answer; ``crc`` restarts with the status byte.
            with m.State("SYNC"):
                m.d.sync += count.eq(0)
                crc_restart()
                send(link.RESPONSE_SYNC, "STATUS", checked=False)
            with m.State("STATUS"):
                send(status, "LEN0")
            with m.State("LEN0"):
                send(length[:8], "LEN1")
            with m.State("LEN1"):
                send(length[8:])
                with m.If(self.tx.ready):
                    with m.If(from_dram):
                        m.next = "DREAD"
                    with m.Elif(length != 0):
                        m.next = "WORD"
                    with m.Else():
                        m.next = "CRC"
            with m.State("WORD"):
                send(word[:8])
                with m.If(self.tx.ready):
                    m.d.sync += [word.eq(word >> 8), count.eq(count + 1)]
                    with m.If(count == length - 1):
                        m.next = "CRC"
            with m.State("DREAD"):
                m.d.comb += [self.dram.re.eq(1), self.dram.addr.eq(cur)]
                m.d.sync += cur.eq(cur + 1)
                m.next = "DWAIT"
            with m.State("DWAIT"):
                m.d.sync += [word.eq(self.dram.rdata), count.eq(0)]
                m.next = "DSEND"
            with m.State("DSEND"):
                send(word[:8])
                with m.If(self.tx.ready):
                    m.d.sync += [word.eq(word >> 8), count.eq(count + 1)]
                    with m.If(count == wb - 1):
                        m.d.sync += left.eq(left - 1)
                        with m.If(left == 1):
                            m.next = "CRC"
                        with m.Else():
                            m.next = "DREAD"
            with m.State("CRC"):
                send(crc, checked=False)
                with m.If(self.tx.ready):
                    with m.If(drain):
                        m.next = "DRAIN"
                    with m.Else():
                        m.next = "HUNT"

            with m.State("DRAIN"):
                with m.If(timed_out):
                    m.next = "HUNT"
        return m
