"""The compute fabric: weight-stationary MAC cells, tiles with conveyor lanes and
configured port multiplexers, and the tile grid."""

from amaranth.hdl import Array, Const, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from systolica.arch import fabric
from systolica.arch.config import ChipConfig
from systolica.rtl.ports import check_config

LANE = 8            # a general lane carries one byte per array row (column)
ACT = signed(8)
WGT = signed(8)
PSUM = signed(32)


class Cell(wiring.Component):
    """One int8 x int8 -> int32 multiply-accumulate cell with two weight banks.

    Activations enter from the west with the bank they use (``sel``) and leave east one
    cycle later; the partial sum enters from the north and leaves south one cycle later
    with ``a * w[sel]`` added. While ``w_shift`` is high, bank ``w_bank`` takes
    ``w_in`` (the weight chain shifts one cell south per cycle); ``w_out`` shows that
    bank so the chain continues below. The other bank keeps computing meanwhile.
    """

    a_in: In(ACT)
    sel_in: In(1)
    psum_in: In(PSUM)
    w_in: In(WGT)
    w_shift: In(1)
    w_bank: In(1)
    a_out: Out(ACT)
    sel_out: Out(1)
    psum_out: Out(PSUM)
    w_out: Out(WGT)

    def elaborate(self, platform):
        m = Module()
        w = Array([Signal(WGT, name="w0"), Signal(WGT, name="w1")])
        m.d.sync += [
            self.a_out.eq(self.a_in),
            self.sel_out.eq(self.sel_in),
            self.psum_out.eq(self.psum_in + self.a_in * w[self.sel_in]),
        ]
        with m.If(self.w_shift):
            m.d.sync += w[self.w_bank].eq(self.w_in)
        m.d.comb += self.w_out.eq(w[self.w_bank])
        return m


class Tile(wiring.Component):
    """An ``n x n`` block of cells with its own conveyor registers and port muxes.

    Ports on the west (activations + bank select), north (weights) and north
    (partial sums) pass through multiplexers whose control comes from the fabric's
    configuration registers: ``act_sel``/``w_sel`` choose the lane (0) or zero (1),
    ``psum_sel`` the partial-sum line from the north (0) or zero (1). With ``w_west``
    the cells take their weights from the west instead (``west_w``, shifting east
    along each cell row: the transposed load). Each outgoing lane (east activations,
    east weights, south weights, south partial sums) has one conveyor register per
    tile, so data moves one tile per clock between tiles.
    """

    def __init__(self, *, n: int):
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise TypeError(f"Tile size n must be a positive integer, not {n!r}")
        self.n = n
        super().__init__({
            "west_a": In(ACT).array(n), "west_sel": In(1).array(n),
            "north_w": In(WGT).array(n), "north_psum": In(PSUM).array(n),
            "west_w": In(WGT).array(n),
            "w_shift": In(1), "w_bank": In(1),
            "act_sel": In(1), "w_sel": In(1), "psum_sel": In(1), "w_west": In(1),
            "east_a": Out(ACT).array(n), "east_sel": Out(1).array(n),
            "east_w": Out(WGT).array(n),
            "south_w": Out(WGT).array(n), "south_psum": Out(PSUM).array(n),
        })

    def elaborate(self, platform):
        # Cells form a small systolic array; the tile's lane registers sit on its
        # east and south edges and feed the neighbouring tile's port muxes.
        m = Module()
        n = self.n
        cells = [[Cell() for _ in range(n)] for _ in range(n)]
        for r in range(n):
            for c in range(n):
                cell = cells[r][c]
                m.submodules[f"cell_{r}_{c}"] = cell
                m.d.comb += [cell.w_shift.eq(self.w_shift), cell.w_bank.eq(self.w_bank)]
                if c == 0:
                    # Zero source: the comb default of a_in/sel_in.
                    with m.If(self.act_sel == 0):
                        m.d.comb += [cell.a_in.eq(self.west_a[r]),
                                     cell.sel_in.eq(self.west_sel[r])]
                else:
                    m.d.comb += [cell.a_in.eq(cells[r][c - 1].a_out),
                                 cell.sel_in.eq(cells[r][c - 1].sel_out)]
                # The weight chain runs south (from the north port or the cell above)
                # or, with w_west, east (from the west port or the cell to the west).
                with m.If(self.w_west):
                    m.d.comb += cell.w_in.eq(self.west_w[r] if c == 0
                                             else cells[r][c - 1].w_out)
                with m.Else():
                    if r > 0:
                        m.d.comb += cell.w_in.eq(cells[r - 1][c].w_out)
                    else:
                        with m.If(self.w_sel == 0):     # zero: the comb default
                            m.d.comb += cell.w_in.eq(self.north_w[c])
                if r == 0:
                    with m.If(self.psum_sel == 0):
                        m.d.comb += cell.psum_in.eq(self.north_psum[c])
                else:
                    m.d.comb += cell.psum_in.eq(cells[r - 1][c].psum_out)
        for k in range(n):
            m.d.sync += [
                self.east_a[k].eq(cells[k][n - 1].a_out),
                self.east_sel[k].eq(cells[k][n - 1].sel_out),
                self.east_w[k].eq(cells[k][n - 1].w_out),
                self.south_w[k].eq(cells[n - 1][k].w_out),
                self.south_psum[k].eq(cells[n - 1][k].psum_out),
            ]
        return m


class Grid(wiring.Component):
    """The ``T x Tc`` grid of tiles (``cfg.tile_rows x cfg.tile_cols``): activations enter
    on the west edge (one lane per
    array row, already skewed by the feeder), weights on the north edge, and column
    partial sums leave on the south edge from the last tile row's conveyor registers.
    ``exit_psum`` shows the conveyor registers of the tile rows above it too (tile row
    ``i < T - 1``, column ``c`` at ``i*cols + c``: what tile row ``i + 1`` takes from
    the north), for a MATMUL whose sums leave early (docs/contract.md, "Partial-sum
    exits").

    ``act_sel``, ``w_sel``, ``psum_sel``, ``w_west`` hold one control bit per tile,
    row-major (tile ``(i, j)`` at ``i*Tc + j``). Weights also enter on the west edge
    (``west_w``, one lane per array row) for tiles with ``w_west``. A weight lane
    passes data between two tiles only if both take it (the receiving tile sees zeros
    from a neighbour that takes the other lane), so each chain is fed from its own
    edge only.

    With ``cfg.general_lanes`` the grid also holds the general lanes
    (:class:`GeneralLanes`, their ports ``gen_*`` passed through); ``lanes`` (keyword
    arguments of :class:`GeneralLanes`) builds a part of them, for cost figures.
    """

    def __init__(self, *, cfg: ChipConfig, lanes: dict | None = None):
        self.cfg = check_config(cfg, "Grid")
        if lanes is not None and not cfg.general_lanes:
            raise ValueError(f"Grid: lanes= needs a configuration with general_lanes "
                             f"({cfg.name} has none)")
        self.lanes = dict(lanes or {})
        t, rows, cols = cfg.tile_rows * cfg.tile_cols, cfg.rows, cfg.cols
        super().__init__({
            "west_a": In(ACT).array(rows), "west_sel": In(1).array(rows),
            "north_w": In(WGT).array(cols), "west_w": In(WGT).array(rows),
            "w_shift": In(1), "w_bank": In(1),
            "act_sel": In(t), "w_sel": In(t), "psum_sel": In(t),
            "w_west": In(t),
            "south_psum": Out(PSUM).array(cols),
            "exit_psum": Out(PSUM).array((cfg.tile_rows - 1) * cols),
            **(GeneralLanes.members(cfg) if cfg.general_lanes else {}),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        t, tc, n = cfg.tile_rows, cfg.tile_cols, cfg.tile_size
        tiles = [[Tile(n=n) for _ in range(tc)] for _ in range(t)]
        for i in range(t):
            for j in range(tc):
                tile = tiles[i][j]
                m.submodules[f"tile_{i}_{j}"] = tile
                k = i * tc + j
                m.d.comb += [
                    tile.w_shift.eq(self.w_shift), tile.w_bank.eq(self.w_bank),
                    tile.act_sel.eq(self.act_sel[k]), tile.w_sel.eq(self.w_sel[k]),
                    tile.psum_sel.eq(self.psum_sel[k]), tile.w_west.eq(self.w_west[k]),
                ]
                # a weight lane carries data on only from a tile that takes it
                from_west = Const(1) if j == 0 else self.w_west[k - 1]
                from_north = Const(1) if i == 0 else ~self.w_west[k - tc]
                for x in range(n):
                    if j == 0:
                        m.d.comb += [tile.west_a[x].eq(self.west_a[i * n + x]),
                                     tile.west_sel[x].eq(self.west_sel[i * n + x]),
                                     tile.west_w[x].eq(self.west_w[i * n + x])]
                    else:
                        m.d.comb += [tile.west_a[x].eq(tiles[i][j - 1].east_a[x]),
                                     tile.west_sel[x].eq(tiles[i][j - 1].east_sel[x])]
                        with m.If(from_west):
                            m.d.comb += tile.west_w[x].eq(tiles[i][j - 1].east_w[x])
                    if i == 0:
                        m.d.comb += tile.north_w[x].eq(self.north_w[j * n + x])
                    else:
                        m.d.comb += tile.north_psum[x].eq(tiles[i - 1][j].south_psum[x])
                        with m.If(from_north):
                            m.d.comb += tile.north_w[x].eq(tiles[i - 1][j].south_w[x])
                    if i == t - 1:
                        m.d.comb += self.south_psum[j * n + x].eq(tile.south_psum[x])
                    else:
                        m.d.comb += self.exit_psum[i * cfg.cols + j * n + x].eq(
                            tile.south_psum[x])
        if cfg.general_lanes:
            m.submodules.lanes = lanes = GeneralLanes(cfg=cfg, **self.lanes)
            for name in GeneralLanes.members(cfg):
                ours, theirs = getattr(self, name), getattr(lanes, name)
                for k in range(len(ours)):
                    if name.startswith("gen_out"):
                        m.d.comb += ours[k].eq(theirs[k])
                    else:
                        m.d.comb += theirs[k].eq(ours[k])
        return m


class GeneralLanes(wiring.Component):
    """Seed 002's general bus lines across the ``T x Tc`` tile grid
    (docs/contract.md, "General lanes, crossings and skip links").

    Every tile ``(i, j)`` has four lane registers of ``n`` bytes, one per direction
    (``E``, ``W``, ``S``, ``N``); multiplexer ``gen_<d>[i][j]`` (control value
    ``sel[k]``, ``k`` its place among the ``gen_*`` entries of
    :func:`systolica.arch.fabric.muxes`) picks what the register takes each cycle: a
    lane arriving at the tile (from its neighbour's register or the grid's edge input,
    named by the side it comes from: straight on, turned or back), the skip link from
    the register two tiles back, or zero (also for a value past the source list).
    ``gen_in_w[r]`` feeds the eastbound lanes of tile column 0 (byte ``r % n`` of tile
    row ``r // n``), ``gen_out_e[r]`` shows the eastbound registers of the last tile
    column; likewise ``gen_in_e``/``gen_out_w`` (rows), ``gen_in_n``/``gen_out_s`` and
    ``gen_in_s``/``gen_out_n`` (columns).

    For cost figures a part may be built: ``kinds`` (the directions that get
    registers; the others read as zero) and ``roles`` (the sources wired, of
    ``straight``, ``turn``, ``back``, ``skip``; the others act as zero).
    """

    ROLES = ("straight", "turn", "back", "skip")

    @staticmethod
    def members(cfg: ChipConfig) -> dict:
        rows, cols = cfg.rows, cfg.cols
        count = 4 * cfg.tile_rows * cfg.tile_cols
        return {"gen_in_w": In(LANE).array(rows), "gen_in_e": In(LANE).array(rows),
                "gen_in_n": In(LANE).array(cols), "gen_in_s": In(LANE).array(cols),
                "gen_sel": In(fabric.value_bits(cfg)).array(count),
                "gen_out_e": Out(LANE).array(rows), "gen_out_w": Out(LANE).array(rows),
                "gen_out_s": Out(LANE).array(cols), "gen_out_n": Out(LANE).array(cols)}

    def __init__(self, *, cfg: ChipConfig, kinds=fabric.GENERAL, roles=ROLES):
        self.cfg = check_config(cfg, "GeneralLanes")
        if not cfg.general_lanes:
            raise ValueError(f"GeneralLanes: {cfg.name} has general_lanes off")
        bad = set(kinds) - set(fabric.GENERAL) or set(roles) - set(self.ROLES)
        if bad:
            raise ValueError(f"GeneralLanes: unknown kinds or roles {sorted(bad)}; "
                             f"kinds are {fabric.GENERAL}, roles {self.ROLES}")
        self.kinds, self.roles = tuple(kinds), tuple(roles)
        table = fabric.muxes(cfg)
        self.gen_muxes = [mx for mx in table if mx.name.split("[")[0] in fabric.GENERAL]
        super().__init__(self.members(cfg))

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        t, tc, n = cfg.tile_rows, cfg.tile_cols, cfg.tile_size
        regs = {kind: [[[Signal(LANE, name=f"{kind}_{i}_{j}_{k}") if kind in self.kinds
                         else Const(0, LANE) for k in range(n)]
                        for j in range(tc)] for i in range(t)]
                for kind in fabric.GENERAL}

        def arriving(i, j, side):
            """The lane arriving at tile (i, j) from ``side``."""
            if side == "west":
                return [self.gen_in_w[i * n + k] for k in range(n)] if j == 0 \
                    else regs["gen_e"][i][j - 1]
            if side == "east":
                return [self.gen_in_e[i * n + k] for k in range(n)] if j == tc - 1 \
                    else regs["gen_w"][i][j + 1]
            if side == "north":
                return [self.gen_in_n[j * n + k] for k in range(n)] if i == 0 \
                    else regs["gen_s"][i - 1][j]
            return [self.gen_in_s[j * n + k] for k in range(n)] if i == t - 1 \
                else regs["gen_n"][i + 1][j]

        skip_from = {"gen_e": (0, -2), "gen_w": (0, 2), "gen_s": (-2, 0)}
        for k_mux, mux in enumerate(self.gen_muxes):
            kind, _, rest = mux.name.partition("[")
            if kind not in self.kinds:
                continue
            i, j = (int(x) for x in rest.rstrip("]").split("]["))
            reg = regs[kind][i][j]
            with m.Switch(self.gen_sel[k_mux]):
                for v, source in enumerate(mux.sources):
                    role = ("straight" if v == 0 else "turn" if v in (1, 2) else
                            "back" if v == 3 else "skip" if source == "skip" else None)
                    if role not in self.roles:
                        continue                          # zero, or not built
                    if source == "skip":
                        di, dj = skip_from[kind]
                        value = regs[kind][i + di][j + dj]
                    else:
                        value = arriving(i, j, source)
                    with m.Case(v):
                        m.d.sync += [reg[x].eq(value[x]) for x in range(n)]
                with m.Default():
                    m.d.sync += [reg[x].eq(0) for x in range(n)]
        for x in range(n):
            for i in range(t):
                m.d.comb += [self.gen_out_e[i * n + x].eq(regs["gen_e"][i][tc - 1][x]),
                             self.gen_out_w[i * n + x].eq(regs["gen_w"][i][0][x])]
            for j in range(tc):
                m.d.comb += [self.gen_out_s[j * n + x].eq(regs["gen_s"][t - 1][j][x]),
                             self.gen_out_n[j * n + x].eq(regs["gen_n"][0][j][x])]
        return m
