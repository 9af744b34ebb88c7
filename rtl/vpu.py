"""The vector unit: accumulator rows -> bias, requantise, ReLU -> CBUF or ACC."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from systolica.arch import isa
from systolica.arch.config import ChipConfig, ConfigError
from systolica.arch.isa import Opcode

from .matmul import _group_select
from .ports import Issue, buffer_read, buffer_write, check_config

STAGES = 3  # bias add; multiply (+ rounding constant); shift, zero point, clamp, ReLU


class VectorUnit(wiring.Component):
    """Executes ``VRUN``. One segment per array column; one row per cycle.

    It reads the bias row first, then ``rows`` accumulator rows; each row passes three
    register stages and is written to the CBUF (int8, through the ``wb_src`` partition
    routing) or back to the ACC (int32).

    Members: ``issue`` (:class:`~.ports.Issue` of ``VRUN``), ``acc_read``,
    ``cbuf_write``, ``acc_write``, and the ``wb_src`` multiplexer settings.
    """

    def __init__(self, *, cfg: ChipConfig):
        check_config(cfg, "VectorUnit")
        if cfg.latency["vpu"] != STAGES:
            raise ConfigError(f"{cfg.name}: this vector unit has {STAGES} stages; the "
                              f"latency table says {cfg.latency['vpu']}")
        self.cfg = cfg
        super().__init__({
            "issue": In(Issue(isa.PAYLOAD[Opcode.VRUN])),
            "acc_read": In(buffer_read(cfg, "acc")),
            "wb_src": In(4).array(cfg.tile_rows),
            "cbuf_write": In(buffer_write(cfg, "cbuf")),
            "acc_write": In(buffer_write(cfg, "acc")),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, cols = self.cfg, self.cfg.cols
        args = Signal.like(self.issue.payload)
        active, bias_phase = Signal(), Signal()
        left = Signal(isa.ACC_ADDR_BITS)
        ptr = Signal(isa.ACC_ADDR_BITS)
        last = Signal()
        m.d.comb += [last.eq(active & ~bias_phase & (left == 1)),
                     self.issue.ready.eq(~active | last),
                     self.acc_read.addr.eq(Mux(bias_phase, args.bias_addr, ptr))]
        with m.If(self.issue.valid):
            m.d.sync += [args.eq(self.issue.payload), active.eq(1), bias_phase.eq(1),
                         left.eq(self.issue.payload.rows), ptr.eq(self.issue.payload.src)]
        with m.Elif(active):
            m.d.sync += bias_phase.eq(0)
            with m.If(~bias_phase):
                m.d.sync += [left.eq(left - 1), ptr.eq(ptr + 1), active.eq(~last)]

        # The cycle after a read its data is on acc_rdata.
        got_bias, got_row = Signal(), Signal()
        m.d.sync += [got_bias.eq(active & bias_phase), got_row.eq(active & ~bias_phase)]
        bias = Signal(cols * 32)
        with m.If(got_bias):
            m.d.sync += bias.eq(self.acc_read.data)

        # Each row carries its instruction's arguments and destination down the
        # pipeline, so the next VRUN may issue while this one's rows are in flight.
        row_dst = Signal(isa.CBUF_ADDR_BITS)
        with m.If(self.issue.valid):
            m.d.sync += row_dst.eq(self.issue.payload.dst)
        with m.Elif(active & ~bias_phase):
            m.d.sync += row_dst.eq(row_dst + 1)
        stage = []
        prev_args, prev_dst = args, row_dst
        for k in (1, 2, 3, 4):
            a_k = Signal.like(self.issue.payload, name=f"args_{k}")
            d_k = Signal(isa.CBUF_ADDR_BITS, name=f"dst_{k}")
            m.d.sync += [a_k.eq(prev_args), d_k.eq(prev_dst)]
            stage.append((a_k, d_k))
            prev_args, prev_dst = a_k, d_k
        a1, a2, a3, a4 = (a for a, _ in stage)
        dst = stage[3][1]          # the write stage's row
        v1, v2, v3 = Signal(), Signal(), Signal()
        m.d.sync += [v1.eq(got_row), v2.eq(v1), v3.eq(v2)]

        # Stage k uses the arguments of the row it holds: s1 (bias) with a1, s2
        # (multiply) with a2, s3 (shift, zero point, clamp, ReLU) with a3.
        out8, out32 = [], []
        for c in range(cols):
            x = self.acc_read.data[32 * c:32 * c + 32].as_signed()
            b = bias[32 * c:32 * c + 32].as_signed()
            s1 = Signal(signed(32), name=f"s1_{c}")
            m.d.sync += s1.eq(Mux(a1.use_bias, x + b, x))
            # Round half up: add 2**(shift-1) (nothing for shift 0) before the shift.
            rnd = (Const(1, 1) << a2.shift)[1:]
            s2 = Signal(signed(66), name=f"s2_{c}")
            m.d.sync += s2.eq(Mux(a2.requant, s1 * a2.mult + rnd, s1))
            zp = a3.zp.as_signed()
            q = Signal(signed(66), name=f"q_{c}")
            m.d.comb += q.eq(Mux(a3.requant, (s2 >> a3.shift) + zp, s2))
            floor = Mux(a3.requant, zp, 0)
            y = Signal(signed(66), name=f"y_{c}")
            m.d.comb += y.eq(Mux(a3.relu & (q < floor), floor, q))
            sat = Mux(y > 127, 127, Mux(y < -128, -128, y))
            s3 = Signal(signed(32), name=f"s3_{c}")
            m.d.sync += s3.eq(Mux(a3.requant | ~a3.to_acc, sat, y))
            out32.append(s3)
            out8.append(s3[:8])
        to_acc = a4.to_acc

        n = cfg.tile_size
        routed = []
        for g in range(cfg.tile_rows):
            routed += _group_select(m, out8, self.wb_src[g], 8, n, cfg.tile_cols)
        m.d.comb += [
            self.cbuf_write.en.eq(v3 & ~to_acc), self.cbuf_write.addr.eq(dst),
            self.cbuf_write.data.eq(Cat(*routed)),
            self.acc_write.en.eq(v3 & to_acc), self.acc_write.addr.eq(dst),
            self.acc_write.data.eq(Cat(*out32)),
            self.issue.drained.eq(~(active | got_row | got_bias | v1 | v2 | v3)),
        ]
        return m
