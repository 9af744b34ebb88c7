"""The crop/fetch path: ``COPY`` moves rows between the CBUF and the UBUF, the
reserved overlap region (a bank range of the CBUF, docs/contract.md "UBUF")."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from systolica.arch import isa
from systolica.arch.config import ChipConfig
from systolica.arch.isa import CopyKind, Opcode
from systolica.rtl.ports import Issue, buffer_read, buffer_write, check_config, ubuf_place


class CopyUnit(wiring.Component):
    """Executes ``COPY``: reads row ``i`` of the source in cycle ``1 + i`` after issue
    and writes it to the destination the cycle its data is back. It takes the next
    instruction in the cycle of its last read, so copies run back to back.

    Members: ``issue`` (:class:`~.ports.Issue` of ``COPY``), a read and a write port
    on the CBUF (``cbuf_read``, ``cbuf_write``), and ``cropped`` / ``fetched``: a row
    written into / read out of the UBUF this cycle (the chip's UBUF counters);
    ``ubuf_base`` / ``ubuf_rows``: the UBUF registers (``ubuf_addr`` counts from
    ``ubuf_base``; the sequencer has checked the range).
    """

    def __init__(self, *, cfg: ChipConfig):
        self.cfg = check_config(cfg, "CopyUnit")
        super().__init__({
            "issue": In(Issue(isa.PAYLOAD[Opcode.COPY])),
            "cbuf_read": In(buffer_read(cfg, "cbuf")),
            "cbuf_write": In(buffer_write(cfg, "cbuf")),
            "cropped": Out(1), "fetched": Out(1), **ubuf_place(cfg),
        })

    def elaborate(self, platform):
        m = Module()
        active = Signal()
        fetch = Signal()
        rows_left = Signal(16)
        src, dst = Signal(isa.CBUF_ADDR_BITS), Signal(isa.CBUF_ADDR_BITS)
        last = Signal()
        m.d.comb += [last.eq(active & (rows_left == 1)),
                     self.issue.ready.eq(~active | last)]
        args = self.issue.payload
        ubuf = self.ubuf_base + args.ubuf_addr
        is_fetch = args.kind == CopyKind.FETCH
        with m.If(self.issue.valid):
            m.d.sync += [active.eq(1), fetch.eq(is_fetch), rows_left.eq(args.rows),
                         src.eq(Mux(is_fetch, ubuf, args.cbuf_addr)),
                         dst.eq(Mux(is_fetch, args.cbuf_addr, ubuf))]
        with m.Elif(active):
            m.d.sync += [rows_left.eq(rows_left - 1), src.eq(src + 1), dst.eq(dst + 1),
                         active.eq(~last)]

        # the row read in this cycle is written, a cycle later, at its destination
        w_valid, w_fetch = Signal(), Signal()
        w_addr = Signal(isa.CBUF_ADDR_BITS)
        m.d.sync += [w_valid.eq(active), w_fetch.eq(fetch), w_addr.eq(dst)]
        m.d.comb += [self.cbuf_read.en.eq(active), self.cbuf_read.addr.eq(src),
                     self.cbuf_write.en.eq(w_valid), self.cbuf_write.addr.eq(w_addr),
                     self.cbuf_write.data.eq(self.cbuf_read.data),
                     self.cropped.eq(w_valid & ~w_fetch), self.fetched.eq(active & fetch),
                     self.issue.drained.eq(~(active | w_valid))]
        return m
