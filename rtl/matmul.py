"""The two units that drive the grid: the weight loader (north edge) and the matmul
unit (west edge in, south edge out into the accumulator buffer)."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from systolica.arch import fabric, isa, timing
from systolica.arch.config import ChipConfig
from systolica.arch.isa import Opcode
from systolica.rtl.array import ACT, PSUM, WGT
from systolica.rtl.ports import (
    Issue,
    buffer_read,
    buffer_write,
    check_config,
    delayed,
    partitioned_read,
)


def _one_of(default, choices):
    """``value`` of the ``(select, value)`` choice whose select is high, ``default`` if
    none is (at most one may be: an AND-OR, no priority chain)."""
    if not choices:
        return default
    none = ~Cat(*(sel for sel, _ in choices)).any()
    out = default & none.replicate(len(default))
    for sel, value in choices:
        out = out | (value & sel.replicate(len(value)))
    return out


def _group_select(m, sources, sel, width, n, groups):
    """Mux of partition groups: output group = sources group ``sel``, or zero when
    ``sel`` names no group (the multiplexer's ``zero`` source)."""
    table = Array(Cat(*sources[g * n:(g + 1) * n]) for g in range(groups))
    out = Signal(width * n)
    with m.If(sel < groups):
        m.d.comb += out.eq(table[sel])
    return [out[k * width:(k + 1) * width] for k in range(n)]


class WeightLoader(wiring.Component):
    """Executes ``WLOAD``: reads one weight block (``cfg.weight_rows`` rows) row by row
    from the CBUF and shifts it into the grid's idle weight bank.

    The weight chain of a column has one stage per cell and one conveyor stage per tile
    boundary, so a load takes ``timing.weight_shifts`` shifts; the bottom row is read
    first, and conveyor slots are filled with don't-care data without a read.

    Every shift drives the row read both onto the north edge (partition groups by
    ``north_feed``, one lane per array column) and onto the west edge (by
    ``west_wfeed``, one lane per array row); the tiles' ``w_in`` settings decide
    which chain their cells take, so a tile taking the west lane ends with CBUF row
    ``c`` in array column ``c`` (the transposed load).

    Members: ``issue`` (:class:`~.ports.Issue` of ``WLOAD``), ``cbuf_read``, the
    ``north_feed`` and ``west_wfeed`` multiplexer settings, and the grid's weight
    inputs (``north_w``, ``west_w``, ``w_shift``, ``w_bank``).
    """

    def __init__(self, *, cfg: ChipConfig):
        self.cfg = check_config(cfg, "WeightLoader")
        super().__init__({
            "issue": In(Issue(isa.PAYLOAD[Opcode.WLOAD])),
            "cbuf_read": In(buffer_read(cfg, "cbuf")),
            "north_feed": In(fabric.value_bits(cfg)).array(cfg.tile_cols),
            "west_wfeed": In(fabric.value_bits(cfg)).array(cfg.tile_rows),
            "north_w": Out(WGT).array(cfg.cols), "west_w": Out(WGT).array(cfg.rows),
            "w_shift": Out(1), "w_bank": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, n = self.cfg, self.cfg.tile_size
        shifts = timing.weight_shifts(cfg)
        active = Signal()
        left = Signal(range(shifts + 1))
        off = Signal(range(n + 1))          # slot within the tile; n = conveyor slot
        row = Signal(range(cfg.weight_rows))
        base = Signal(isa.CBUF_ADDR_BITS)
        bank = Signal()
        last = Signal()
        m.d.comb += [last.eq(active & (left == 1)),
                     self.issue.ready.eq(~active | last),
                     self.cbuf_read.addr.eq(base + row),
                     # every shift reads, conveyor slots too (the CBUF bank port is
                     # busy in each of them: docs/contract.md)
                     self.cbuf_read.en.eq(active)]
        with m.If(self.issue.valid):
            m.d.sync += [active.eq(1), left.eq(shifts), off.eq(n - 1),
                         row.eq(cfg.weight_rows - 1), base.eq(self.issue.payload.w_addr),
                         bank.eq(self.issue.payload.bank)]
        with m.Elif(active):
            m.d.sync += [left.eq(left - 1), active.eq(~last)]
            with m.If(off == n):
                m.d.sync += off.eq(n - 1)
            with m.Else():
                m.d.sync += [off.eq(Mux(off == 0, n, off - 1)), row.eq(row - 1)]
        # Read data arrives one cycle later; shift it in that cycle (the bank travels
        # with it, so a load issued meanwhile cannot redirect the last shift).
        m.d.sync += [self.w_shift.eq(active), self.w_bank.eq(bank)]
        m.d.comb += self.issue.drained.eq(~active & ~self.w_shift)
        rbytes = [self.cbuf_read.data[8 * p:8 * p + 8] for p in range(cfg.rows)]
        for j in range(cfg.tile_cols):
            col = _group_select(m, rbytes, self.north_feed[j], 8, n, cfg.tile_rows)
            for k in range(n):
                m.d.comb += self.north_w[j * n + k].eq(col[k])
        for i in range(cfg.tile_rows):
            row = _group_select(m, rbytes, self.west_wfeed[i], 8, n, cfg.tile_rows)
            for k in range(n):
                m.d.comb += self.west_w[i * n + k].eq(row[k])
        return m


class MatmulUnit(wiring.Component):
    """Executes ``MATMUL``: streams activation rows from the CBUF into the grid's west
    edge and accumulates the column sums into the accumulator buffer.

    The feeder delays array row ``r`` by ``timing.skew(r)`` so each row meets its
    partial sum; the collector delays column ``c`` by ``skew_max - skew(c)`` so one
    accumulator row is written per cycle. A control word per activation row (ACC
    address, accumulate flag) travels a delay line of matching length. The accumulate
    stage forwards the previous cycle's write, so back-to-back MATMULs on the same ACC
    rows accumulate correctly.

    With ``early = u`` (partial-sum exits, docs/contract.md) the sums come from tile row
    ``T - 1 - u``'s ``exit_psum``, ``L = u*(n + 1)`` cycles sooner (a cell register per
    array row and a conveyor per tile row fewer). The de-skew is the same, so the row
    is collected from delay-line stage ``k_u = len - 1 - L``: the control word carries
    ``u`` (one-hot), each column's de-skew input takes the exit of the row ``d_c``
    stages before ``k_u``, and the accumulate stage's register loads the row leaving
    ``k_u - 1``; past ``k_u`` the row is no longer valid (so ``drained`` comes ``L``
    sooner too). Rows must reach the accumulate stage in issue order, one a cycle:
    ``ready`` also needs ``L_B <= L_A + `` the cycles since the previous MATMUL ``A``'s
    last read (the collector order; ``UNIT_BUSY`` otherwise).

    With ``conv = 1`` the read stage walks a window instead of consecutive rows
    (docs/cnn.md): each CBUF partition has its own read address, the sum of the
    output pixel's position and that partition's tap, and a pixel outside the tile
    reads the geometry's ``pad`` byte. The geometry (``CONVCFG``) and the tap tables
    (``TAPS``) are registers here; a MATMUL latches what it needs when it issues.

    Members: ``issue`` (:class:`~.ports.Issue` of ``MATMUL``), ``convcfg`` and ``taps``
    (their issue ports), ``row_fed`` (an
    activation row enters the array: the MAC counter), ``cbuf_read`` (one address per
    partition), ``acc_read``,
    ``acc_write``, the ``west_feed`` and ``acc_src`` multiplexer settings, and the
    grid's west inputs (``west_a``, ``west_sel``), south outputs (``south_psum``) and
    partial-sum exits (``exit_psum``, :class:`~.array.Grid`'s).
    """

    def __init__(self, *, cfg: ChipConfig):
        self.cfg = check_config(cfg, "MatmulUnit")
        t = cfg.tile_rows
        super().__init__({
            "issue": In(Issue(isa.PAYLOAD[Opcode.MATMUL], ahead=True)), "row_fed": Out(1),
            "convcfg": In(Issue(isa.PAYLOAD[Opcode.CONVCFG], handshake=False)),
            "taps": In(Issue(isa.PAYLOAD[Opcode.TAPS], handshake=False)),
            "cbuf_read": In(partitioned_read(cfg)),
            "acc_read": In(buffer_read(cfg, "acc")),
            "acc_write": In(buffer_write(cfg, "acc")),
            "west_feed": In(fabric.value_bits(cfg)).array(t),
            "acc_src": In(fabric.value_bits(cfg)).array(cfg.tile_cols),
            "west_a": Out(ACT).array(cfg.rows), "west_sel": Out(1).array(cfg.rows),
            "south_psum": In(PSUM).array(cfg.cols),
            "exit_psum": In(PSUM).array((t - 1) * cfg.cols),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, n, t_rows = self.cfg, self.cfg.tile_size, self.cfg.tile_rows

        # Read stage: one activation row per cycle.
        active = Signal()
        left = Signal(16)
        ptr = Signal(isa.CBUF_ADDR_BITS)
        acc_ptr = Signal(isa.ACC_ADDR_BITS)
        accum, use_max = Signal(), Signal()
        bank = Signal()
        last = Signal()
        hot = Signal(t_rows - 1)    # the exit: bit u - 1 for early = u >= 1
        args = self.issue.payload
        free = ~active | last
        m.d.comb += last.eq(active & (left == 1))
        with m.If(self.issue.valid):
            m.d.sync += [active.eq(1), left.eq(args.rows), ptr.eq(args.act_addr),
                         acc_ptr.eq(args.acc_addr), accum.eq(args.accumulate),
                         use_max.eq(args.max), bank.eq(args.bank),
                         hot.eq(Cat(*(args.early == u for u in range(1, t_rows))))]
        with m.Elif(active):
            m.d.sync += [active.eq(~last), left.eq(left - 1), ptr.eq(ptr + 1),
                         acc_ptr.eq(acc_ptr + 1)]
        # The collector order: MATMUL B (lead L_B = early*(n+1)) after A may issue once
        # L_B <= L_A + (cycles since A's read stage freed). ``lead`` and ``sub`` count
        # that sum as lead*(n+1) + sub, held from A's issue through its last read and
        # saturating at T - 1 tile rows; leads being multiples of n + 1, the test is
        # early <= lead (a short compare on the head's payload: ready is a deep path).
        order_ok = Const(1)
        if t_rows > 1:
            lead = Signal(range(t_rows), init=t_rows - 1)
            sub = Signal(range(n + 1))
            with m.If(self.issue.valid):
                m.d.sync += [lead.eq(args.early), sub.eq(0)]
            with m.Elif(free):
                m.d.sync += sub.eq(Mux(sub == n, 0, sub + 1))
                with m.If((sub == n) & (lead != t_rows - 1)):
                    m.d.sync += lead.eq(lead + 1)
            order_ok = args.early <= lead
        m.d.comb += self.issue.ready.eq(free & order_ok)
        addrs, inside, pad, conv = self._window(m, args, active, ptr)
        for p in range(cfg.rows):
            m.d.comb += self.cbuf_read.addr[p].eq(addrs[p])
        # The CBUF banks claimed: a row walk, the bank of its row; a window walk, every
        # bank meeting its tile (each partition reads its own pixel of it), latched at
        # issue.
        shift, nbanks = cfg.cbuf_bank_shift, cfg.cbuf_physical_banks
        tile_banks = Signal(nbanks)

        def banks_of(args, name):
            first = args.act_addr >> shift
            last = (args.act_addr + args.in_h * args.in_w - 1) >> shift
            out = Signal(nbanks, name=f"tile_banks_{name}")
            m.d.comb += out.eq(Cat(*((first <= b) & (b <= last) for b in range(nbanks))))
            return {"banks": out}
        with m.If(self.issue.valid):
            m.d.sync += tile_banks.eq(self._chosen(banks_of)["banks"])
        row_bank = Signal(nbanks)
        m.d.comb += row_bank.eq(1 << ptr[shift:ceil_log2(cfg.cbuf_physical_rows)])
        m.d.comb += [self.cbuf_read.en.eq(active),
                     self.cbuf_read.banks.eq(Mux(conv, tile_banks, row_bank))]

        # Control delay line: stage k holds the row whose data arrived k cycles ago
        # (valid, bank, accumulate, max, ACC address, the exit one-hot). The last
        # stage is the accumulate stage's: the row at k_u - 1 whose exit is u, else
        # the one before it. A row is valid until it is collected (its stage k_u).
        ctrl_len = timing.matmul_pipeline(cfg) - 1
        hot_at = 4 + isa.ACC_ADDR_BITS
        ctrl = [Signal(hot_at + t_rows - 1, name=f"ctrl_{k}") for k in range(ctrl_len)]
        tap = {u: ctrl_len - 1 - u * (n + 1) for u in range(t_rows)}     # k_u
        exits = {k: u for u, k in tap.items() if u}
        m.d.sync += ctrl[0].eq(Cat(active, bank, accum, use_max, acc_ptr,
                                   Mux(active, hot, 0)))
        for k in range(1, ctrl_len - 1):
            prev = ctrl[k - 1]
            if k in exits:      # collected from k_u - 1: invalid past it
                u = exits[k]
                prev = Cat(prev[0] & ~prev[hot_at + u - 1], prev[1:])
            m.d.sync += ctrl[k].eq(prev)
        m.d.sync += ctrl[-1].eq(_one_of(ctrl[-2], [(ctrl[tap[u] - 1][hot_at + u - 1],
                                                    ctrl[tap[u] - 1])
                                                   for u in range(1, t_rows)]))
        valid1, sel1 = ctrl[0][0], ctrl[0][1]
        m.d.comb += self.row_fed.eq(valid1)

        # Feeder: the pad byte where the pixel lies outside the tile, west-edge
        # partition routing, the feed register if the chip has one (it cuts the CBUF
        # read from the first cell's multiply-add), then per-row skew registers.
        rbytes = [Mux(inside[p], self.cbuf_read.data[8 * p:8 * p + 8], pad)
                  for p in range(cfg.rows)]
        for i in range(cfg.tile_rows):
            grp = _group_select(m, rbytes, self.west_feed[i], 8, n, cfg.tile_rows)
            for x in range(n):
                r = i * n + x
                a, s = Signal(ACT, name=f"feed_a_{r}"), Signal(name=f"feed_s_{r}")
                m.d.comb += [a.eq(Mux(valid1, grp[x].as_signed(), 0)), s.eq(sel1)]
                for stages, name in ((timing.feed_stages(cfg), "feed_reg"),
                                     (timing.skew(cfg, r), "skew")):
                    a = delayed(m, a, stages, f"{name}_a_{r}")
                    s = delayed(m, s, stages, f"{name}_s_{r}")
                m.d.comb += [self.west_a[r].eq(a), self.west_sel[r].eq(s)]

        # Collector: column de-skew, then ACC partition routing. Column c's de-skew
        # (d_c stages) takes the exit of a row d_c stages before its collection (k_u).
        smax = timing.skew_max(cfg)
        aligned = []
        for c in range(cfg.cols):
            d = smax - timing.skew(cfg, c)
            src = Signal(PSUM, name=f"collect_{c}")
            m.d.comb += src.eq(_one_of(
                self.south_psum[c],
                [(ctrl[tap[u] - d][hot_at + u - 1],
                  self.exit_psum[(t_rows - 1 - u) * cfg.cols + c])
                 for u in range(1, t_rows)]))
            aligned.append(delayed(m, src, d, f"deskew_{c}"))
        routed = []
        for g in range(cfg.tile_cols):
            routed += _group_select(m, aligned, self.acc_src[g], 32, n, cfg.tile_cols)

        # Accumulate: stage A reads the ACC, the row waits out the read latency L
        # (cfg.latency["acc_read"]: 1, or 2 with the banks' output registered), then
        # stage W adds and writes. The read misses this unit's writes of the L cycles
        # from its own on, so W forwards the newest of them to the same row.
        ca = ctrl[-1]
        a_valid, a_accum, a_max, a_addr = ca[0], ca[2], ca[3], ca[4:hot_at]
        lat = cfg.latency["acc_read"]
        # the ACC bank's read port is busy only for an accumulating MATMUL
        m.d.comb += [self.acc_read.addr.eq(a_addr), self.acc_read.en.eq(a_valid & a_accum)]
        valid, accum, maxed, addr = a_valid, a_accum, a_max, a_addr
        psum = Cat(*routed)
        stages = []         # the row's registers after A: [(valid, addr)], W last
        for k in range(lat):
            v, ac, mx = (Signal(name=f"{x}_{k}") for x in ("acc_valid", "acc_accum", "acc_max"))
            ad = Signal(isa.ACC_ADDR_BITS, name=f"acc_addr_{k}")
            ps = Signal(cfg.cols * 32, name=f"acc_psum_{k}")
            m.d.sync += [v.eq(valid), ac.eq(accum), mx.eq(maxed), ad.eq(addr), ps.eq(psum)]
            valid, accum, maxed, addr, psum = v, ac, mx, ad, ps
            stages.append((v, ad))
        w_valid, w_accum, w_max, w_addr, w_psum = valid, accum, maxed, addr, psum
        # ``f_data[d-1]``: what was written d cycles ago (d = 1 .. L). It is this
        # row's when the row then in W had this row's address: compared in that
        # cycle, both addresses from registers (for the clock rate), and the result
        # carried along to W.
        f_data = []
        prev = None
        for d in range(1, lat + 1):
            reg = Signal(cfg.cols * 32, name=f"fwd_data_{d}")
            m.d.sync += reg.eq(self.acc_write.data if prev is None else prev)
            f_data.append(reg)
            prev = reg
        hits = []
        for d in range(1, lat + 1):
            # d cycles before W this row was L - d stages past A
            here_addr = a_addr if d == lat else stages[lat - d - 1][1]
            hit = Signal(name=f"fwd_hit_{d}")
            m.d.sync += hit.eq(w_valid & (w_addr == here_addr))
            hits.append(delayed(m, hit, d - 1, f"fwd_hit_{d}_carry"))
        old = self.acc_read.data
        for d in range(lat, 0, -1):             # the newest write wins
            old = Mux(hits[d - 1], f_data[d - 1], old)
        total = Signal(cfg.cols * 32)
        for c in range(cfg.cols):
            lo = 32 * c
            o, ps = old[lo:lo + 32].as_signed(), w_psum[lo:lo + 32].as_signed()
            m.d.comb += total[lo:lo + 32].eq(
                Mux(w_accum, Mux(w_max, Mux(o > ps, o, ps), o + ps), ps))
        m.d.comb += [self.acc_write.en.eq(w_valid), self.acc_write.addr.eq(w_addr),
                     self.acc_write.data.eq(total)]

        busy = active
        for v, _ in stages:
            busy = busy | v
        for k in range(ctrl_len):
            busy = busy | ctrl[k][0]
        m.d.comb += self.issue.drained.eq(~busy)
        return m

    def _chosen(self, compute):
        """``compute(payload, name)`` (a dict of signals) of the head's payload, worked
        out from each of the two words that may be the head (``issue.now``,
        ``issue.after``, each a register) and chosen by ``issue.took`` after it: the
        same values (as unsigned bits) as from ``issue.payload``, with ``took`` (which
        drives every unit's payload) at the end of the path instead of in front of a
        multiply. The choice is an AND-OR, not a multiplexer: behind a multiplexer the
        synthesis shares one copy of the logic between both words (``opt_share``),
        which puts ``took`` back in front of it."""
        now = compute(self.issue.now, "now")
        after = compute(self.issue.after, "after")
        took = self.issue.took
        out = {}
        for key, value in now.items():
            width = len(value)
            out[key] = ((after[key].as_unsigned() & took.replicate(width))
                        | (value.as_unsigned() & (~took).replicate(width)))
        return out

    def _window(self, m, args, active, ptr):
        """The window walk: per partition, the CBUF address read this cycle, and
        (a cycle later, with the data) whether it lies inside the tile and the pad
        byte that replaces it otherwise."""
        cfg = self.cfg
        gb, tb = isa.GEOM_BITS, isa.TAP_DELTA_BITS
        # CONVCFG: the geometry registers
        g = self.convcfg.payload
        out_w = Signal(gb, init=1)
        sh, sw = Signal(3, init=1), Signal(3, init=1)
        top, left_, pad = Signal(isa.TAP_BITS), Signal(isa.TAP_BITS), Signal(8)
        with m.If(self.convcfg.valid):
            m.d.sync += [out_w.eq(g.out_w), sh.eq(g.sh), sw.eq(g.sw), top.eq(g.top),
                         left_.eq(g.left), pad.eq(g.pad)]
        # TAPS: per table and partition, the signed tap offsets
        t = self.taps.payload
        th = [[Signal(signed(tb), name=f"th_{k}_{p}") for p in range(cfg.rows)]
              for k in range(isa.TAP_TABLES)]
        tw = [[Signal(signed(tb), name=f"tw_{k}_{p}") for p in range(cfg.rows)]
              for k in range(isa.TAP_TABLES)]
        # Which entry writes a table's partition (at most one: entry e writes
        # partition first + e - 1) and its offsets come from the payload alone;
        # ``valid`` (a deep signal: the sequencer's issue) only enables the register.
        for k in range(isa.TAP_TABLES):
            for p in range(cfg.rows):
                hit = Signal(name=f"taps_{k}_{p}_hit")
                new_h = Signal(signed(tb), name=f"taps_{k}_{p}_th")
                new_w = Signal(signed(tb), name=f"taps_{k}_{p}_tw")
                for e in range(1, isa.TAPS_PER_WORD + 1):
                    with m.If((t.count >= e) & (t.table == k) & (t.first + (e - 1) == p)):
                        m.d.comb += [hit.eq(1), new_h.eq(t[f"th{e}"]),
                                     new_w.eq(t[f"tw{e}"])]
                with m.If(self.taps.valid & hit):
                    m.d.sync += [th[k][p].eq(new_h), tw[k][p].eq(new_w)]

        # MATMUL issue: latch the walk
        conv = Signal()
        in_w, in_h = Signal(gb), Signal(gb)
        w_out = Signal(gb)
        w_sh, w_sw = Signal(3), Signal(3)
        w_pad = Signal(8)
        ow = Signal(gb)
        ihb, iwb = Signal(signed(18)), Signal(signed(18))     # output pixel's tap 0
        w_left = Signal(signed(18))
        pix, rowpix = Signal(18), Signal(18)                  # its CBUF address
        row_step = Signal(18)
        kh = [Signal(signed(tb + 1), name=f"kh_{p}") for p in range(cfg.rows)]
        kw = [Signal(signed(tb + 1), name=f"kw_{p}") for p in range(cfg.rows)]
        off = [Signal(18, name=f"off_{p}") for p in range(cfg.rows)]
        # What takes a multiply by the payload's ``in_w`` is worked out from both
        # words that may be the head and chosen after (``_chosen``).
        def products(args, name):
            out = {"start": Signal(18, name=f"start_{name}"),
                   "row_step": Signal(18, name=f"row_step_{name}")}
            m.d.comb += [out["start"].eq(args.act_addr - top * args.in_w - left_),
                         out["row_step"].eq(sh * args.in_w)]
            for p in range(cfg.rows):
                khp = out[f"kh_{p}"] = Signal(signed(tb + 1), name=f"kh_{p}_{name}")
                kwp = out[f"kw_{p}"] = Signal(signed(tb + 1), name=f"kw_{p}_{name}")
                offp = out[f"off_{p}"] = Signal(18, name=f"off_{p}_{name}")
                th_sel = Array(th[k][p] for k in range(isa.TAP_TABLES))[args.taps]
                tw_sel = Array(tw[k][p] for k in range(isa.TAP_TABLES))[args.taps]
                m.d.comb += [khp.eq(args.dh + th_sel), kwp.eq(args.dw + tw_sel),
                             offp.eq(khp * args.in_w.as_signed() + kwp)]
            return out
        latched = self._chosen(products)
        with m.If(self.issue.valid):
            start = latched["start"]
            m.d.sync += [conv.eq(args.conv), in_w.eq(args.in_w), in_h.eq(args.in_h),
                         w_out.eq(out_w), w_sh.eq(sh), w_sw.eq(sw), w_pad.eq(pad),
                         ow.eq(0), ihb.eq(-top), iwb.eq(-left_), w_left.eq(-left_),
                         pix.eq(start), rowpix.eq(start), row_step.eq(latched["row_step"])]
            for p in range(cfg.rows):
                m.d.sync += [kh[p].eq(latched[f"kh_{p}"]), kw[p].eq(latched[f"kw_{p}"]),
                             off[p].eq(latched[f"off_{p}"])]
        with m.Elif(active):
            with m.If(ow == w_out - 1):
                m.d.sync += [ow.eq(0), iwb.eq(w_left), ihb.eq(ihb + w_sh),
                             rowpix.eq(rowpix + row_step), pix.eq(rowpix + row_step)]
            with m.Else():
                m.d.sync += [ow.eq(ow + 1), iwb.eq(iwb + w_sw), pix.eq(pix + w_sw)]

        addrs, inside = [], []
        for p in range(cfg.rows):
            ih, iw = ihb + kh[p], iwb + kw[p]
            ok = Signal(name=f"inside_{p}")
            m.d.sync += ok.eq(~conv | ((ih >= 0) & (ih < in_h) & (iw >= 0) & (iw < in_w)))
            a = Signal(isa.CBUF_ADDR_BITS, name=f"rd_addr_{p}")
            m.d.comb += a.eq(Mux(conv, (pix + off[p])[:isa.CBUF_ADDR_BITS], ptr))
            addrs.append(a)
            inside.append(ok)
        pad_d = Signal(8)
        m.d.sync += pad_d.eq(w_pad)
        return addrs, inside, pad_d, conv
