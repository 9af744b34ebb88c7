"""The vector unit: accumulator rows -> bias, requantise, ReLU (or per-column
requantise and clamp) -> CBUF or ACC."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from systolica.arch import fabric, isa
from systolica.arch.config import ChipConfig, ConfigError
from systolica.arch.instructions import PARAM_ROWS
from systolica.arch.isa import Opcode
from systolica.rtl.matmul import _group_select
from systolica.rtl.ports import Issue, buffer_read, buffer_write, check_config, delayed, ubuf_place

STAGES = 3  # bias add; multiply (+ rounding constant); shift, zero point, clamp, ReLU


class VectorUnit(wiring.Component):
    """Executes ``VRUN``. One segment per array column; one row per cycle.

    It reads the bias row first (with ``params = 1`` the four parameter rows, one per
    cycle), then ``rows`` accumulator rows; each row passes three register stages and
    is written to the CBUF (int8, through the ``wb_src`` partition routing) or back to
    the ACC (int32).

    Members: ``issue`` (:class:`~.ports.Issue` of ``VRUN``), ``acc_read``,
    ``cbuf_write``, ``acc_write``, ``crop_write`` (the fused crop's second CBUF write
    port: a row written to CBUF row ``a`` also goes to the UBUF's row ``a mod
    ubuf_rows``), the ``wb_src`` multiplexer settings, ``cbuf_keep``: the
    partitions of the groups whose ``wb_src`` is ``keep``, which neither CBUF write
    touches, and the UBUF registers ``ubuf_base`` / ``ubuf_rows``.
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
            "wb_src": In(fabric.value_bits(cfg)).array(cfg.tile_rows),
            "cbuf_write": In(buffer_write(cfg, "cbuf")),
            "acc_write": In(buffer_write(cfg, "acc")),
            "crop_write": In(buffer_write(cfg, "cbuf")),
            **ubuf_place(cfg),
            "cbuf_keep": Out(cfg.rows),     # partitions its CBUF writes leave alone
        })

    def elaborate(self, platform):
        # A VRUN first reads its parameter rows (the bias row, or with ``params`` the
        # bias, multiplier, shift and clamp rows) from ``bias_addr`` into per-column
        # registers, then streams its rows through three stages. Each row carries its
        # instruction's arguments down the pipeline. The parameter registers need no
        # copy per row: the next VRUN reads its parameter row k (bias, multiplier,
        # shift, clamp) k+1 cycles after this one's last row read, and the register
        # shows it k+3 cycles after, once that row has passed every stage using it
        # (bias: stage 1; multiplier: 2; shift and clamp: 2 and 3).
        m = Module()
        cfg, cols = self.cfg, self.cfg.cols
        args = Signal.like(self.issue.payload)
        active, par_phase = Signal(), Signal()
        par_idx = Signal(range(PARAM_ROWS))
        left = Signal(isa.ACC_ADDR_BITS)
        ptr = Signal(isa.ACC_ADDR_BITS)
        last = Signal()
        par_last = par_idx == Mux(args.params, PARAM_ROWS - 1, 0)
        m.d.comb += [last.eq(active & ~par_phase & (left == 1)),
                     self.issue.ready.eq(~active | last),
                     self.acc_read.addr.eq(Mux(par_phase, args.bias_addr + par_idx, ptr)),
                     # the parameter cycle reads the bias row only when it is used
                     self.acc_read.en.eq(active & (~par_phase | args.use_bias | args.params))]
        with m.If(self.issue.valid):
            m.d.sync += [args.eq(self.issue.payload), active.eq(1), par_phase.eq(1),
                         par_idx.eq(0), left.eq(self.issue.payload.rows),
                         ptr.eq(self.issue.payload.src)]
        with m.Elif(active):
            with m.If(par_phase):
                m.d.sync += [par_idx.eq(par_idx + 1), par_phase.eq(~par_last)]
            with m.Else():
                m.d.sync += [left.eq(left - 1), ptr.eq(ptr + 1), active.eq(~last)]

        # The read latency (cfg.latency["acc_read"]) after a read its data is on
        # acc_rdata. The parameter registers' timing above holds for any latency: a
        # row and the next VRUN's parameter rows are delayed alike.
        lat = cfg.latency["acc_read"]
        got_par = delayed(m, active & par_phase, lat, "got_par")
        got_idx = delayed(m, par_idx, lat, "got_idx")
        reading = [active & ~par_phase]          # a row read, and its wait for the data
        for k in range(lat):
            reading.append(delayed(m, reading[-1], 1, f"got_row_{k}"))
        got_row = reading[-1]
        rdata = [self.acc_read.data[32 * c:32 * c + 32] for c in range(cols)]
        bias = [Signal(signed(32), name=f"bias_{c}") for c in range(cols)]
        p_mult = [Signal(16, name=f"mult_{c}") for c in range(cols)]
        p_shift = [Signal(6, name=f"shift_{c}") for c in range(cols)]
        p_lo = [Signal(signed(8), name=f"lo_{c}") for c in range(cols)]
        p_hi = [Signal(signed(8), name=f"hi_{c}") for c in range(cols)]
        with m.If(got_par):
            with m.Switch(got_idx):
                with m.Case(0):
                    m.d.sync += [b.eq(d) for b, d in zip(bias, rdata)]
                with m.Case(1):
                    m.d.sync += [p.eq(d[:16]) for p, d in zip(p_mult, rdata)]
                with m.Case(2):
                    m.d.sync += [p.eq(d[:6]) for p, d in zip(p_shift, rdata)]
                with m.Case(3):
                    m.d.sync += [p.eq(d[:8]) for p, d in zip(p_lo, rdata)]
                    m.d.sync += [p.eq(d[8:16]) for p, d in zip(p_hi, rdata)]

        # Each row carries its instruction's arguments and destination down the
        # pipeline, so the next VRUN may issue while this one's rows are in flight.
        row_dst = Signal(isa.CBUF_ADDR_BITS)
        with m.If(self.issue.valid):
            m.d.sync += row_dst.eq(self.issue.payload.dst)
        with m.Elif(active & ~par_phase):
            m.d.sync += row_dst.eq(row_dst + 1)
        stage = []
        # a row's arguments wait out the read latency's extra cycles with it
        prev_args = delayed(m, args, lat - 1, "args_wait")
        prev_dst = delayed(m, row_dst, lat - 1, "dst_wait")
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
        # (multiply) with a2, s3 (shift, zero point, clamp, ReLU) with a3. With
        # ``params`` the multiplier, shift and clamp bounds are the column's own.
        out8, out32 = [], []
        for c in range(cols):
            x = rdata[c].as_signed()
            s1 = Signal(signed(32), name=f"s1_{c}")
            m.d.sync += s1.eq(Mux(a1.use_bias | a1.params, x + bias[c], x))
            # Round half up: add 2**(shift-1) (nothing for shift 0) before the shift.
            mult2 = Mux(a2.params, p_mult[c], a2.mult)
            shift2 = Mux(a2.params, p_shift[c], a2.shift)
            rnd = (Const(1, 1) << shift2)[1:]
            s2 = Signal(signed(66), name=f"s2_{c}")
            m.d.sync += s2.eq(Mux(a2.requant, s1 * mult2 + rnd, s1))
            # q = (requant ? (s2 >> shift) + zp : s2), then ReLU (q below its floor,
            # zp or 0, becomes the floor), then the int8 saturation or the params
            # clamp, or q itself (32 bits) into the ACC. Worked out narrow: q < floor
            # iff s2 < 0 (an arithmetic shift keeps the sign), and every comparison
            # with an int8 bound gives the same answer on qc, the shifted value held
            # to 12 bits (an overflow stays past +-1919 after adding zp) plus zp, so
            # no 66-bit carry chain lies on the path. For the clock rate stage 3
            # starts from what stage 2 could work out beside the multiply: which bits
            # of s2 must copy its sign for the shifted value to fit 12 bits, and each
            # bound less the floor, so the comparisons take vc (in parallel with
            # vc + floor) rather than qc after the adder.
            floor2 = Mux(a2.requant, a2.zp.as_signed(), 0)
            over = Signal(66, name=f"over_{c}")          # bits >= shift + 11
            sat_hi = Signal(signed(10), name=f"sat_hi_{c}")
            sat_lo = Signal(signed(10), name=f"sat_lo_{c}")
            cl_lo = Signal(signed(10), name=f"cl_lo_{c}")
            cl_hi = Signal(signed(10), name=f"cl_hi_{c}")
            below_lo = Signal(signed(8), name=f"below_lo_{c}")   # the clamp of q < lo
            ones = Const((1 << 66) - 1, 66)
            m.d.sync += [over.eq(ones << (Mux(a2.requant, shift2, 0) + 11)),
                         sat_hi.eq(127 - floor2), sat_lo.eq(-128 - floor2),
                         cl_lo.eq(p_lo[c] - floor2), cl_hi.eq(p_hi[c] - floor2),
                         below_lo.eq(Mux(p_lo[c] > p_hi[c], p_hi[c], p_lo[c]))]
            # the shift of stage 3 is stage 2's, registered with s2 (the shift
            # parameter holds through both stages of a row)
            shift3 = Signal(6, name=f"shift3_{c}")
            m.d.sync += shift3.eq(shift2)
            v = Signal(signed(66), name=f"v_{c}")
            m.d.comb += v.eq(Mux(a3.requant, s2 >> shift3, s2))
            zp = a3.zp.as_signed()
            neg = s2[-1]
            fits = ~((s2 ^ neg.replicate(66)) & over).any()
            vc = Signal(signed(12), name=f"vc_{c}")
            m.d.comb += vc.eq(Mux(fits, v[:12], Mux(neg, -2048, 2047)))
            floor = Mux(a3.requant, zp, 0)
            qc = Signal(signed(13), name=f"qc_{c}")
            m.d.comb += qc.eq(vc + floor)
            below = a3.relu & neg
            # saturate(below ? floor : qc), floor itself an int8
            sat = Mux(below, floor, Mux(vc > sat_hi, 127, Mux(vc < sat_lo, -128, qc)))
            # params: max with lo, then min with hi (hi wins if lo > hi)
            clamped = Mux(vc < cl_lo, below_lo, Mux(vc > cl_hi, p_hi[c], qc))
            wide = Mux(below, 0, s2[:32])     # requant = 0 into the ACC: floor 0
            s3 = Signal(signed(32), name=f"s3_{c}")
            m.d.sync += s3.eq(Mux(a3.params, clamped,
                                  Mux(a3.requant | ~a3.to_acc, sat, wide.as_signed())))
            out32.append(s3)
            out8.append(s3[:8])
        to_acc = a4.to_acc

        n = cfg.tile_size
        routed = []
        keep = fabric.by_name(cfg)["wb_src[0]"].value_of(fabric.KEEP)
        for g in range(cfg.tile_rows):
            routed += _group_select(m, out8, self.wb_src[g], 8, n, cfg.tile_cols)
            m.d.comb += self.cbuf_keep[g * n:(g + 1) * n].eq(
                (self.wb_src[g] == keep).replicate(n))
        # the fused crop: the same row into the UBUF, at the destination mod its size
        # (a crop needs a UBUF: without one the sequencer never issues it)
        crop_at = self.ubuf_base + (dst & (self.ubuf_rows - 1)[:len(dst)])
        m.d.comb += [
            self.crop_write.en.eq(v3 & ~to_acc & a4.crop), self.crop_write.addr.eq(crop_at),
            self.crop_write.data.eq(Cat(*routed)),
            self.cbuf_write.en.eq(v3 & ~to_acc), self.cbuf_write.addr.eq(dst),
            self.cbuf_write.data.eq(Cat(*routed)),
            self.acc_write.en.eq(v3 & to_acc), self.acc_write.addr.eq(dst),
            self.acc_write.data.eq(Cat(*out32)),
            self.issue.drained.eq(~(Cat(active, *reading[1:], got_par, v1, v2, v3).any())),
        ]
        return m
