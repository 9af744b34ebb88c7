"""The lane router: ``ROUTE`` drives CBUF rows onto the general lanes' west edge and
writes what the south edge brings back (docs/contract.md, "ROUTE")."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from systolica.arch import geometry as geo
from systolica.arch import isa
from systolica.arch.config import ChipConfig
from systolica.arch.isa import Opcode
from systolica.rtl.array import LANE
from systolica.rtl.ports import Issue, buffer_read, buffer_write, check_config


class LaneRouter(wiring.Component):
    """Executes ``ROUTE``: reads row ``r`` of the source in cycle ``1 + r`` after issue
    and drives it onto ``gen_in_w`` when its data is back (zero in every other
    cycle). Each column group of ``gen_out_s`` runs through a delay line
    ``route_span_max`` deep; partition group ``g`` of the row written in cycle
    ``1 + L + r + span`` takes column group ``(g + col0) % Tc`` from its line's tap
    ``delay_j``, unless ``keep`` holds it. It takes the next instruction in the cycle
    of its last write.

    Members: ``issue`` (:class:`~.ports.Issue` of ``ROUTE``), a read and a write port on
    the CBUF (``cbuf_read``, ``cbuf_write``) and ``cbuf_keep``, the partitions that
    write leaves alone; ``gen_in_w`` (to the lanes' west edge, ``R`` bytes) and
    ``gen_out_s`` (from their south edge, ``C`` bytes).
    """

    def __init__(self, *, cfg: ChipConfig):
        self.cfg = check_config(cfg, "LaneRouter")
        if not cfg.general_lanes:
            raise ValueError(f"LaneRouter: {cfg.name} has general_lanes off")
        if cfg.latency["cbuf_read"] != 1:
            raise ValueError("LaneRouter: built for a CBUF read latency of 1")
        super().__init__({
            "issue": In(Issue(isa.PAYLOAD[Opcode.ROUTE])),
            "cbuf_read": In(buffer_read(cfg, "cbuf")),
            "cbuf_write": In(buffer_write(cfg, "cbuf")),
            "cbuf_keep": Out(cfg.rows),
            "gen_in_w": Out(LANE).array(cfg.rows),
            "gen_out_s": In(LANE).array(cfg.cols),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        n, tc, depth = cfg.tile_size, cfg.tile_cols, geo.route_span_max(cfg)
        args = self.issue.payload

        # Reads: one row a cycle from the cycle after issue.
        to_read = Signal(16)
        src = Signal(isa.CBUF_ADDR_BITS)
        reading = to_read != 0
        # Writes: after `wait` cycles, one row a cycle.
        wait = Signal(isa.ROUTE_SPAN_BITS + 1)
        to_write = Signal(16)
        dst = Signal(isa.CBUF_ADDR_BITS)
        writing = (to_write != 0) & (wait == 0)
        last = writing & (to_write == 1)
        col0 = Signal.like(args.col0)
        keep = Signal.like(args.keep)
        delays = [Signal(isa.ROUTE_SPAN_BITS - 1, name=f"delay{j}") for j in range(tc)]
        busy = (to_read != 0) | (to_write != 0)
        m.d.comb += [self.issue.ready.eq(~busy | last), self.issue.drained.eq(~busy)]

        with m.If(self.issue.valid):
            m.d.sync += [to_read.eq(args.rows), src.eq(args.src), to_write.eq(args.rows),
                         dst.eq(args.dst), wait.eq(cfg.latency["cbuf_read"] + args.span),
                         col0.eq(args.col0), keep.eq(args.keep)]
            m.d.sync += [d.eq(getattr(args, f"delay{j}")) for j, d in enumerate(delays)]
        with m.Else():
            with m.If(reading):
                m.d.sync += [to_read.eq(to_read - 1), src.eq(src + 1)]
            with m.If(wait != 0):
                m.d.sync += wait.eq(wait - 1)
            with m.Elif(writing):
                m.d.sync += [to_write.eq(to_write - 1), dst.eq(dst + 1)]

        # Drive: the row read in this cycle is on the west edge in the next.
        back = Signal()
        m.d.sync += back.eq(reading)
        m.d.comb += [self.cbuf_read.en.eq(reading), self.cbuf_read.addr.eq(src)]
        for r in range(cfg.rows):
            m.d.comb += self.gen_in_w[r].eq(Mux(back, self.cbuf_read.data[8 * r:8 * r + 8], 0))

        # Sample: a delay line per column group, tapped by the group's delay.
        taps = []
        for j in range(tc):
            now = Cat(*(self.gen_out_s[j * n + k] for k in range(n)))
            line = [Signal(8 * n, name=f"line{j}_{d}") for d in range(depth)]
            m.d.sync += [line[0].eq(now)] + [line[d].eq(line[d - 1]) for d in range(1, depth)]
            tap = now
            for d in range(depth):
                tap = Mux(delays[j] == d + 1, line[d], tap)
            taps.append(tap)

        # Write: partition group g takes column group (g + col0) % Tc, unless kept.
        row, kept = [], []
        for g in range(cfg.rows // n):
            data = taps[g % tc]
            for c in range(1, tc):
                data = Mux(col0 == c, taps[(g + c) % tc], data)
            row.append(data)
            kept.append(keep[g].replicate(n))
        m.d.comb += [self.cbuf_write.en.eq(writing), self.cbuf_write.addr.eq(dst),
                     self.cbuf_write.data.eq(Cat(*row)), self.cbuf_keep.eq(Cat(*kept))]
        return m
