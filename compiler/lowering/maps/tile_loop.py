"""The tile loop of the map lowering: one layer's job as micro-ops, tile after tile
(docs/cnn.md). A tile loads the input rows its output rows need, every channel block,
into one of two tile buffers (the next tile's load overlaps this tile's compute), or
into one; per output block and weight step one window-walking MATMUL accumulates into
an accumulator half; the vector unit requantises the half into the output staging,
and a DMA stores it."""

from __future__ import annotations

from systolica.arch import isa
from systolica.arch.instructions import PARAM_ROWS
from systolica.arch.isa import DmaKind, Opcode
from systolica.compiler.errors import CompileError
from systolica.compiler.lowering.emitter import Emitter
from systolica.compiler.lowering.maps.jobs import (
    Job,
    WStep,
    check_window,
    group_blocks,
    input_cols,
    input_rows,
    picks_rows,
    placements,
    stage_parts,
)
from systolica.compiler.lowering.maps.layout import MAP_RING_BLOCKS, WEIGHT_GROUP, Layout, tiles_lo
from systolica.compiler.microops.ir import MicroOp
from systolica.compiler.planning import layout
from systolica.compiler.planning.map_tiling import (
    Tiling,
    channel_groups,
    job_layout,
    output_tiles,
)
from systolica.compiler.scheduling.pipeline import Block, Step


class TileLoop:
    """Emits a map network's layers as tile loops (docs/cnn.md), through the lowering's
    one :class:`~systolica.compiler.lowering.emitter.Emitter` (`em`: its op cache and
    the counters the layers share), in the network's layout `lay`; what it keeps
    between layers: the block each weight bank holds, the staging slot in use."""

    def __init__(self, em: Emitter, lay: Layout):
        self.em, self.cfg, self.lay = em, em.cfg, lay
        self.base = lay                 # the network's layout; job() sets each layer's
        self.tile_no = 0
        self.tables: dict[tuple, int] = {}     # tap deltas -> table, per layer
        self.bank_holds: list[int | None] = [None, None]   # DRAM block in each bank
        self.stage_slot = None          # tall grid: the staging half of the block begun
        self.staged = 0                 # blocks staged by earlier tiles (pieces)

    def op(self, opcode: Opcode, layer: int, sub=0, **fields) -> MicroOp:
        return self.em.op(opcode, layer, sub, **fields)

    def job(self, job: Job, w_dram: int, post_dram: int | None, out_dram: int,
            tiling: Tiling = Tiling()) -> list[Block]:
        cfg, em = self.cfg, self.em
        lay = self.lay = job_layout(cfg, self.base, job, tiling)
        R, arw = cfg.rows, cfg.acc_row_words
        i = job.index
        N, Ho, Wo, Cout = job.out_shape
        check_window(job)
        tiles, stage_half = output_tiles(cfg, lay, job)
        self.tables = {}
        table_ops = self._tables(job)
        step_table = [[self.tables.get(self._deltas(st), 0) for st in steps]
                      for steps in job.steps]
        tiles_at = tiles_lo(cfg, lay, stage_half * stage_parts(cfg, job))
        area = lay.top - tiles_at
        blocks: list[Block] = []
        # a layer cut along its channels: a tile per group of channel blocks, each
        # loading and computing only those (docs/cnn.md, "Channel-wise layers deeper
        # than the CBUF"); else one group, None, of every block
        work = [(n, t, g) for n in range(N) for t in tiles
                for g in channel_groups(cfg, lay, job)]
        order = [group_blocks(job, g) for _, _, g in work]     # each tile's N-blocks
        whole = len(work) == 1      # one tile: it may take both buffers
        single = lay.buffers == 1 and not whole
        # one buffer: a channel block sits at the same rows in every tile, so the next
        # tile's block loads once this tile's last read of that block has issued
        most = max(input_rows(job, *t[:2])[1] - input_rows(job, *t[:2])[0] for t in tiles) \
            if single else 0
        # one buffer: a source's channel blocks are its widest tile's input rows apart
        # in every tile (the width of the map, unless it is cut along the width)
        widest = [max(c1 - c0 for c0, c1 in (input_cols(job, s.shape[2], *t[2:])
                                             for t in tiles)) for s in job.sources]

        def tile_loads(wi: int) -> tuple[list[MicroOp], list[int], int, list, int,
                                         list[int], list[int]]:
            """Tile `wi`'s input loads, where each source starts, its input rows, the
            (source, channel block) each load fills, the rows between blocks, and per
            source the input row's pixels and the words between channel blocks per
            input row. A tile of a layer cut along its width loads its input columns
            row by row."""
            n, (oh0, oh1, ow0, ow1), group = work[wi]
            buf = tiles_at + (0 if whole or single
                              else ((self.tile_no + wi) % 2) * (area // 2))
            lo, hi = input_rows(job, oh0, oh1)
            each = most or hi - lo
            picks = picks_rows(job)
            loads, bases, keys, at = [], [], [], buf
            widths, pitches = [], []
            for si, s in enumerate(job.sources):
                H, W = s.shape[1], s.shape[2]
                c0, c1 = input_cols(job, W, ow0, ow1)
                width = c1 - c0
                cut = width != W
                pitch = widest[si] if single else width
                widths.append(width)
                pitches.append(pitch)
                bases.append(at)
                first = 0 if group is None else group[0]
                mine = range(s.blocks(R)) if group is None else range(*group)
                for cb in mine:
                    at = bases[si] + (cb - first) * each * pitch
                    keys += [(si, cb)] * ((hi - lo) if (picks or cut) and s.gather is None
                                          else 1)
                    if s.gather is not None:
                        # row m of K-block cb is word m of pixel p in channel block c
                        hw, cbs = s.gather
                        c, p = cb % cbs, cb // cbs
                        loads.append(self.op(
                            Opcode.DMA, i, kind=DmaKind.LOAD_CBUF,
                            dram_addr=s.dram + c * H * hw + lo * hw + p, dram_stride=hw,
                            buf_addr=at, rows=hi - lo))
                        at += hi - lo
                        continue
                    plane = s.dram + (cb * N + n) * H * W
                    if picks or cut:
                        rows_read = ([oh * job.stride[0] for oh in range(oh0, oh1)]
                                     if picks else range(lo, hi))
                        for r in rows_read:
                            loads.append(self.op(
                                Opcode.DMA, i, kind=DmaKind.LOAD_CBUF,
                                dram_addr=plane + r * W + c0, dram_stride=1,
                                buf_addr=at, rows=width))
                            at += width
                        continue
                    loads.append(self.op(
                        Opcode.DMA, i, kind=DmaKind.LOAD_CBUF,
                        dram_addr=plane + lo * W, dram_stride=1,
                        buf_addr=at, rows=(hi - lo) * W))
                at = bases[si] + len(mine) * each * pitch
            return loads, bases, hi - lo, keys, each, widths, pitches

        # Tile wi + 1's input loads fill the other buffer while tile wi computes, in
        # pieces, one per step, that fit beside the step's weight load in the DMA's time
        # (the DMA is in order: one long load would hold up the weights). With one
        # buffer, each comes right after the last MATMUL of tile wi reading the block it
        # overwrites, and the first tile's each half a weight group before the first
        # step reading its block, taking turns with the weights.
        flat = [st for steps in job.steps for st in steps]
        last_read = {(st.src, st.cb): t for t, st in enumerate(flat)}
        first_read = {(st.src, st.cb): t for t, st in reversed(list(enumerate(flat)))}
        weights_at = self._weight_groups(job, order, w_dram)
        f = 0                                   # the job's step number
        prepared = tile_loads(0)
        behind: list[MicroOp] = []              # one buffer: the next tile's first loads
        for wi, (n, (oh0, oh1, ow0, ow1), group) in enumerate(work):
            loads, src_base, in_h, _, each, widths, pitches = prepared
            first_cb = 0 if group is None else group[0]
            steps_per_tile = sum(len(job.steps[nb]) for nb in order[wi])
            ahead: list[MicroOp] = []
            after: dict[int, list[MicroOp]] = {}    # one buffer: step -> loads before it
            if wi == 0 and single:
                for mop, key in zip(loads, prepared[3]):
                    after.setdefault(max(0, first_read[key] - WEIGHT_GROUP // 2), []
                                     ).append(mop)
                loads = after.pop(0, [])
            rows = (oh1 - oh0) * (ow1 - ow0)
            if wi + 1 < len(work):
                prepared = tile_loads(wi + 1)
                if single:
                    for mop, key in zip(prepared[0], prepared[3]):
                        after.setdefault(last_read[key] + 1, []).append(mop)
                else:
                    total = sum(m.fields["rows"] for m in prepared[0])
                    # spread evenly over the tile's steps, within each step's spare time
                    size = min(max(R // 2, -(-total // max(steps_per_tile - 1, 1))),
                               max(R, rows - R - 4))
                    ahead = self._pieces(prepared[0], size)
            if wi > 0:
                loads = behind              # loaded ahead, with the previous tile
            behind = after.pop(steps_per_tile, [])
            lo, _ = input_rows(job, oh0, oh1)
            ts = 0
            if picks_rows(job):
                sh, top = 1, 0
            else:
                sh, top = job.stride[0], lo + job.pads[0] - oh0 * job.stride[0]
            # the tile's first input column is c0: the columns left of it, to the
            # first output column's window, read as padding (none inside the map)
            c0, _ = input_cols(job, job.sources[0].shape[2], ow0, ow1)
            left = c0 - ow0 * job.stride[1] + job.pads[1]
            geom = self.op(Opcode.CONVCFG, i, out_w=ow1 - ow0, sh=sh, sw=job.stride[1],
                           top=top, left=left, pad=job.pad_byte)
            # the output pixels' runs: (first pixel in the output plane, first row of
            # the tile's staging, pixels); one output row each in a tile of a cut width
            if (ow0, ow1) == (0, Wo):
                runs = [(n * Ho * Wo + oh0 * Wo, 0, rows)]
            else:
                runs = [(n * Ho * Wo + oh * Wo + ow0, (oh - oh0) * (ow1 - ow0), ow1 - ow0)
                        for oh in range(oh0, oh1)]
            for nb in order[wi]:
                blk = Block(i)
                half = em.blocks % 2
                em.blocks += 1
                acc_at = lay.halves + half * lay.half_rows
                slot = lay.slots + half * PARAM_ROWS
                if job.post is not None:
                    per = PARAM_ROWS if job.post == "params" else 1
                    blk.bias.append(self.op(
                        Opcode.DMA, i, kind=DmaKind.LOAD_ACC,
                        dram_addr=post_dram + nb * per * arw, dram_stride=arw,
                        buf_addr=slot, rows=per))
                for k, st in enumerate(job.steps[nb]):
                    ring = lay.ring + (st.block if lay.persistent
                                       else em.steps % MAP_RING_BLOCKS) * cfg.weight_rows
                    bank = em.steps % 2
                    em.steps += 1
                    pre = weights_at.get(f, [])
                    f += 1
                    if nb == order[wi][0] and k == 0:
                        pre += loads + [geom] + (table_ops if wi == 0 else [])
                    pre += after.pop(ts, [])
                    ts += 1
                    if ts == steps_per_tile:
                        pre += ahead
                    elif ahead:
                        pre.append(ahead.pop(0))
                    block = w_dram + st.block * R
                    if self.bank_holds[bank] != block:   # else the bank has it already
                        pre.append(self.op(Opcode.WLOAD, i, w_addr=ring, bank=bank))
                        self.bank_holds[bank] = block
                    base = src_base[st.src] + (st.cb - first_cb) * each * pitches[st.src]
                    dh, dw = st.taps[0]
                    mm = self.op(Opcode.MATMUL, i, act_addr=base, rows=rows, acc_addr=acc_at,
                                 accumulate=int(k > 0), max=int(job.use_max and k > 0),
                                 bank=bank, conv=1, dh=dh, dw=dw,
                                 taps=step_table[nb][k],
                                 in_w=widths[st.src], in_h=in_h)
                    blk.steps.append(Step(pre, mm))
                blk.epilogue = self._epilogue(job, i, nb, acc_at, slot, rows, half,
                                              stage_half, out_dram, runs, N * Ho * Wo)
                blocks.append(blk)
        self.tile_no += len(work)
        return blocks

    def _weight_groups(self, job: Job, order: list[list[int]], w_dram: int
                       ) -> dict[int, list[MicroOp]]:
        """The weight loads of a job's steps (all its tiles, in order: `order` the
        N-blocks of each), one DMA per group of up to WEIGHT_GROUP blocks consecutive
        in DRAM and in the ring, each attached to the step half a group before the
        first that uses it (its slots were last read a group earlier still)."""
        R, i = self.cfg.rows, job.index
        persistent = self.lay.persistent
        whole = [nb for nb in range(len(job.steps))]
        # kept weights: those of the first tile, or of every tile of a channel cut
        tiles = order[:1] if persistent and order[0] == whole else order
        blocks = [st.block for mine in tiles for nb in mine for st in job.steps[nb]]
        e0 = self.em.steps
        # a step whose bank already holds its block loads nothing (as job() decides);
        # kept weights load each block once, in the first tile
        holds, need, seen = list(self.bank_holds), [], set()
        for f, b in enumerate(blocks):
            bank = (e0 + f) % 2
            need.append(b not in seen if persistent else holds[bank] != w_dram + b * R)
            holds[bank] = w_dram + b * R
            seen.add(b)
        out: dict[int, list[MicroOp]] = {}
        f = 0
        while f < len(blocks):
            if not need[f]:
                f += 1
                continue
            n = 1
            while f + n < len(blocks) and (n < WEIGHT_GROUP if persistent
                                           else (e0 + f + n) % WEIGHT_GROUP) \
                    and need[f + n] and blocks[f + n] == blocks[f] + n:
                n += 1
            WR = self.cfg.weight_rows
            slot = self.lay.ring + (blocks[f] if persistent
                                    else (e0 + f) % MAP_RING_BLOCKS) * WR
            out.setdefault(max(0, f - WEIGHT_GROUP // 2), []).append(self.op(
                Opcode.DMA, i, kind=DmaKind.LOAD_CBUF, dram_addr=w_dram + blocks[f] * WR,
                dram_stride=1, buf_addr=slot, rows=n * WR))
            f += n
        return out

    def _pieces(self, loads: list[MicroOp], size: int) -> list[MicroOp]:
        """`loads` (contiguous CBUF loads) cut into loads of at most `size` rows."""
        out = []
        for mop in loads:
            f = mop.fields
            for k in range(0, f["rows"], size):
                out.append(self.op(mop.op, mop.layer, kind=f["kind"],
                                   dram_addr=f["dram_addr"] + k * f["dram_stride"],
                                   dram_stride=f["dram_stride"],
                                   buf_addr=f["buf_addr"] + k, rows=min(size, f["rows"] - k)))
        return out

    @staticmethod
    def _deltas(st: WStep) -> tuple:
        dh, dw = st.taps[0]
        return tuple((h - dh, w - dw) for h, w in st.taps)

    def _tables(self, job: Job) -> list[MicroOp]:
        """TAPS for every distinct packing pattern of the layer (table 0: no packing)."""
        cfg, ops = self.cfg, []
        patterns = []
        for steps in job.steps:
            for st in steps:
                d = self._deltas(st)
                if len(d) > 1 and d not in patterns:
                    patterns.append(d)
        if len(patterns) > isa.TAP_TABLES - 1:
            raise CompileError(f"layer {job.name!r}: needs {len(patterns)} tap tables, "
                               f"the chip has {isa.TAP_TABLES - 1}")
        C = job.sources[0].shape[3]
        for t, d in enumerate(patterns, start=1):
            self.tables[d] = t
            entries = [(0, 0)] * cfg.rows
            for p in range(cfg.rows):
                r = p // C
                entries[p] = d[r] if r < len(d) else (0, 0)
            for first in range(0, cfg.rows, isa.TAPS_PER_WORD):
                chunk = entries[first:first + isa.TAPS_PER_WORD]
                ops.append(self.op(Opcode.TAPS, job.index, table=t, first=first,
                                   count=len(chunk),
                                   **{f"t{a}{k}": isa.signed_field(v[j], isa.TAP_DELTA_BITS)
                                      for k, v in enumerate(chunk, start=1)
                                      for j, a in enumerate("hw")}))
        return ops

    def _stores(self, i: int, kind: DmaKind, dram: int, stride: int, buf: int,
                runs: list[tuple[int, int, int]]) -> list[MicroOp]:
        """The stores of a tile's output pixels from buffer row `buf` to the output
        plane at `dram` (`stride` words a pixel): one per run ``(first pixel, first
        buffer row, pixels)``."""
        return [self.op(Opcode.DMA, i, kind=kind, dram_addr=dram + first * stride,
                        dram_stride=stride, buf_addr=buf + off, rows=count)
                for first, off, count in runs]

    def _epilogue(self, job, i, nb, acc_at, slot, rows, half, stage_half, out_dram, runs,
                  plane) -> list[MicroOp]:
        """N-block `nb`'s vector-unit pass and store: int32 as accumulator rows (block
        `nb`, `plane` rows per block, the pixels of `runs`), int8 into the output's
        channel blocks (:func:`placements`): on a tall grid each sub-block into its
        block's staging half (``wb_src`` keeping the others), stored once the block's
        last is in; on a wide grid one VRUN and store per slice, each with its own
        staging. A store is one DMA per run of `runs` (:meth:`_stores`)."""
        cfg, lay = self.cfg, self.lay
        arw = cfg.acc_row_words
        v = dict(job.vrun)
        if job.out_dtype == "int32":
            ops = []
            if v.get("use_bias") or v.get("relu"):
                ops.append(self.op(Opcode.VRUN, i, src=acc_at, rows=rows, to_acc=1,
                                   dst=acc_at, bias_addr=slot, **v))
            return ops + self._stores(i, DmaKind.STORE_ACC, out_dram + nb * plane * arw,
                                      arw, acc_at, runs)
        span, R = job.span or cfg.rows, cfg.rows
        if not cfg.sides_divide:
            # pieces: a block's later pieces keep its earlier ones, stored once whole
            # blocks counted across tiles, so a tile's first block is not in the slot
            # the tile before's is stored from
            ops = []
            slots = 2 * stage_parts(cfg, job)
            for pc in layout.pieces(cfg, nb, job.out_shape[3], span):
                staging = lay.staging + ((self.staged + pc.block) % slots) * stage_half
                ops.append(self.op(Opcode.VRUN, i, sub=pc, src=acc_at, rows=rows,
                                   to_acc=0, dst=staging, bias_addr=slot, **v))
                if pc.last:
                    ops += self._stores(i, DmaKind.STORE_CBUF, out_dram + pc.block * plane,
                                        1, staging, runs)
            if nb == len(job.steps) - 1:
                self.staged += layout.blocks(job.out_shape[3], R)
            return ops
        if span < R:                    # tall: sub-blocks of a block share its staging
            (b, sub), = placements(cfg, job, nb)
            if sub == 0:            # the accumulator half's, unless the last block's
                self.stage_slot = half if half != self.stage_slot else 1 - half
            staging = lay.staging + self.stage_slot * stage_half
            ops = [self.op(Opcode.VRUN, i, sub=sub, src=acc_at, rows=rows, to_acc=0,
                           dst=staging, bias_addr=slot, **v)]
            if sub == R // span - 1 or nb == len(job.steps) - 1:
                ops += self._stores(i, DmaKind.STORE_CBUF, out_dram + b * plane, 1,
                                    staging, runs)
            return ops
        ops = []
        parts = stage_parts(cfg, job)
        for b, s in placements(cfg, job, nb):
            staging = lay.staging + (half * parts + s) * stage_half
            ops.append(self.op(Opcode.VRUN, i, sub=s, src=acc_at, rows=rows, to_acc=0,
                               dst=staging, bias_addr=slot, **v))
            ops += self._stores(i, DmaKind.STORE_CBUF, out_dram + b * plane, 1, staging,
                                runs)
        return ops
