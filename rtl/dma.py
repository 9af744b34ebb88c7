"""The DMA engine: strided row transfers between external memory and the buffers."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from systolica.arch import isa
from systolica.arch.config import ChipConfig
from systolica.arch.isa import Opcode
from systolica.rtl.ports import DramMaster, Issue, buffer_read, buffer_write, check_config


class Dma(wiring.Component):
    """Executes ``DMA``: row ``i`` lives at ``dram_addr + i*dram_stride`` (an ACC row is
    ``acc_row_words`` consecutive words). One external-memory word moves per cycle:
    loads issue a read each cycle and write the buffer as rows complete; stores read a
    buffer row, then write its words out.

    Members: ``issue`` (:class:`~.ports.Issue` of ``DMA``), ``mem``
    (:class:`~.ports.DramMaster`), and a read and a write port on each buffer
    (``cbuf_read``, ``cbuf_write``, ``acc_read``, ``acc_write``).
    """

    def __init__(self, *, cfg: ChipConfig):
        self.cfg = check_config(cfg, "Dma")
        super().__init__({
            "issue": In(Issue(isa.PAYLOAD[Opcode.DMA])),
            "mem": Out(DramMaster.of(cfg)),
            "cbuf_read": In(buffer_read(cfg, "cbuf")),
            "cbuf_write": In(buffer_write(cfg, "cbuf")),
            "acc_read": In(buffer_read(cfg, "acc")),
            "acc_write": In(buffer_write(cfg, "acc")),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        words = cfg.acc_row_words
        wbits = cfg.dram_word_bytes * 8
        kind = Signal(2)
        to_acc = kind[1]           # LOAD_ACC / STORE_ACC
        is_store = kind[0]         # STORE_CBUF / STORE_ACC
        per_row = Mux(to_acc, words, 1)

        # Address generator: one word per cycle while active.
        active = Signal()
        rows_left = Signal(16)
        j = Signal(range(words + 1))          # word within the row
        row_base = Signal(isa.DRAM_ADDR_BITS)
        stride = Signal(16)
        buf = Signal(isa.CBUF_ADDR_BITS)
        row_end = Signal()
        last = Signal()
        m.d.comb += [row_end.eq(j == per_row - 1), last.eq(active & row_end & (rows_left == 1))]
        args = self.issue.payload
        with m.If(self.issue.valid):
            m.d.sync += [active.eq(1), kind.eq(args.kind), rows_left.eq(args.rows),
                         j.eq(0), row_base.eq(args.dram_addr),
                         stride.eq(args.dram_stride), buf.eq(args.buf_addr)]
        with m.Elif(active):
            with m.If(row_end):
                m.d.sync += [j.eq(0), row_base.eq(row_base + stride), buf.eq(buf + 1),
                             rows_left.eq(rows_left - 1), active.eq(~last)]
            with m.Else():
                m.d.sync += j.eq(j + 1)

        # Loads: read each word; the data returns the next cycle.
        m.d.comb += [self.mem.re.eq(active & ~is_store),
                     self.cbuf_read.addr.eq(buf), self.acc_read.addr.eq(buf),
                     # a bank's read port is busy only in a store's read cycles (a
                     # row's first word)
                     self.cbuf_read.en.eq(active & is_store & ~to_acc & (j == 0)),
                     self.acc_read.en.eq(active & is_store & to_acc & (j == 0))]
        r_valid, r_row_end = Signal(), Signal()
        r_buf = Signal(isa.CBUF_ADDR_BITS)
        m.d.sync += [r_valid.eq(active & ~is_store), r_row_end.eq(row_end), r_buf.eq(buf)]
        gather = Signal(wbits * (words - 1)) if words > 1 else None
        if gather is not None:
            with m.If(r_valid):
                m.d.sync += gather.eq(Cat(gather[wbits:], self.mem.rdata))
        m.d.comb += [
            self.cbuf_write.en.eq(r_valid & r_row_end & ~to_acc),
            self.cbuf_write.addr.eq(r_buf), self.cbuf_write.data.eq(self.mem.rdata),
            self.acc_write.en.eq(r_valid & r_row_end & to_acc),
            self.acc_write.addr.eq(r_buf),
            self.acc_write.data.eq(self.mem.rdata if gather is None
                                   else Cat(gather, self.mem.rdata)),
        ]

        # Stores: the buffer row read at the row's first word arrives a read latency
        # later (cfg.latency: the CBUF's, or the ACC's); word 0 goes out from the read
        # data, the rest from a held copy. The address side waits with it. With the
        # ACC slower than the CBUF an ACC store has a path of its own, and the next
        # DMA issues only once its last word is out.
        lat = {"cbuf": cfg.latency["cbuf_read"], "acc": cfg.latency["acc_read"]}
        store = active & is_store
        paths = ([(store, lat["cbuf"])] if lat["cbuf"] == lat["acc"] else
                 [(store & ~to_acc, lat["cbuf"]), (store & to_acc, lat["acc"])])
        arrived, waiting = [], []
        for k, (go, delay) in enumerate(paths):
            v, first, jj, addr, acc = go, j == 0, j, row_base + j, to_acc
            for d in range(delay):
                regs = (Signal(name=f"s{k}_valid_{d}"), Signal(name=f"s{k}_first_{d}"),
                        Signal.like(j, name=f"s{k}_j_{d}"),
                        Signal(isa.DRAM_ADDR_BITS, name=f"s{k}_addr_{d}"),
                        Signal(name=f"s{k}_acc_{d}"))
                m.d.sync += [r.eq(x) for r, x in zip(regs, (v, first, jj, addr, acc))]
                v, first, jj, addr, acc = regs
                if d < delay - 1:
                    waiting.append(v)
            arrived.append((v, first, jj, addr, acc))
        s_valid = Cat(*(a[0] for a in arrived)).any()

        def pick(i):
            out = arrived[0][i]
            for a in arrived[1:]:
                out = Mux(a[0], a[i], out)
            return out

        s_first, s_j, s_addr, s_acc = pick(1), pick(2), pick(3), pick(4)
        busy_after = Cat(*waiting).any() if waiting else 0
        m.d.comb += self.issue.ready.eq(~active & ~busy_after)
        # an ACC row padded to whole words (cfg.acc_row_words): its last word's rest
        # goes out as zero, and a load's rest is dropped (acc_write.data is 32C bits)
        row_data = Signal(words * wbits)
        m.d.comb += row_data.eq(Mux(s_acc, self.acc_read.data, self.cbuf_read.data))
        held = Signal(words * wbits)
        with m.If(s_valid & s_first):
            m.d.sync += held.eq(row_data)
        src = Mux(s_first, row_data, held)
        word = Signal(wbits)
        m.d.comb += word.eq(src.word_select(s_j, wbits))
        m.d.comb += [
            self.mem.we.eq(s_valid), self.mem.wdata.eq(word),
            self.mem.addr.eq(Mux(s_valid, s_addr, row_base + j)),
            self.issue.drained.eq(~(active | r_valid | s_valid | busy_after)),
        ]
        return m
