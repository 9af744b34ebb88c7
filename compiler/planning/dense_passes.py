"""How many passes a dense layer alone takes when its weights are one block (they stay
in their bank, docs/compiler.md "Splitting the array"), and what they cost: a small
event model of its units, each pass's load, MATMUL, VRUNs and stores with the buffers
`DenseRule` gives them. The memory planner picks the passes with it, and the split's
cost model weighs each number of groups with it. A model, not a witness: the schedule
and the golden model decide what a program takes."""

from __future__ import annotations

from systolica.arch import timing
from systolica.arch.config import ChipConfig
from systolica.arch.isa import DmaKind, Instr, Opcode

#: the most passes :func:`best` weighs beyond the fewest that fit
MORE_PASSES = 8

#: how much faster than fewer passes more must be (the model is within 5 % of the
#: schedule, 2 % on average, on chips whose configuration prelude is short: it does
#: not see the SETCFGs before the first MATMUL, 232 on tiny_16x16)
CLOSE = 0.01


def _times(cfg: ChipConfig, op: Opcode, **fields) -> tuple[int, int]:
    """(occupancy, done) of one instruction: when its unit is free again, when its
    effects are visible."""
    ins = Instr(op, 0, fields)
    return timing.occupancy(cfg, ins), timing.done(cfg, ins)


def cycles(cfg: ChipConfig, M: int, rows: int, int32: bool = False, slices: int = 1,
           bias: bool = True, vector: bool = True, early: int = 0) -> int:
    """Cycles of a lone one-block dense layer of `M` rows in passes of `rows` (the
    last takes the rest), its output int32 or int8 in `slices` R-byte slices, with or
    without a `bias`; an int32 output passes the `vector` unit (bias, ReLU) or not;
    its MATMULs' sums leave the array `early` tile rows up.

    The order and the buffers are the dense rule's: the weights' DMA, its WLOAD, pass
    0's rows and the bias slots first; pass ``i``'s rows load into the input buffer
    pass ``i - 2`` read (two of them), once that MATMUL is done; its MATMUL writes the
    accumulator half pass ``i - 2`` used, once that pass's VRUNs (int8) or store
    (int32) have read it; its VRUNs write the staging slots pass ``i - 2``'s stores
    read. The DMA takes whichever of the next load and the next store is ready first
    (the load on a tie); the other units go in program order."""
    sizes = [rows] * (-(-M // rows))
    sizes[-1] = M - rows * (len(sizes) - 1)
    passes = len(sizes)
    per_pass = 1 if int32 else slices
    outs = [(i, k) for i in range(passes) for k in range(per_pass)]
    vector = vector or not int32
    dma_free = 0

    def dma(ready: int, kind: DmaKind, n: int) -> int:
        nonlocal dma_free
        occ, done = _times(cfg, Opcode.DMA, kind=kind, rows=n)
        start = max(ready, dma_free)
        dma_free = start + occ
        return start + done

    weights = dma(0, DmaKind.LOAD_CBUF, cfg.weight_rows)
    wload = weights + _times(cfg, Opcode.WLOAD)[1]
    loaded = {0: dma(0, DmaKind.LOAD_CBUF, sizes[0])}
    for _ in range(min(passes, 2) if bias else 0):
        dma(0, DmaKind.LOAD_ACC, 1)                    # the bias slots
    stored: dict[tuple[int, int], int] = {}
    mm: dict[int, tuple[int, int]] = {}                # pass -> (issue, done)
    vr: dict[tuple[int, int], tuple[int, int]] = {}   # (pass, slice) -> (issue, done)

    def half_free(i: int) -> int | None:
        """When pass `i`'s accumulator half may be written again (None: not known)."""
        if i < 0:
            return 0
        if int32:
            return stored.get((i, 0))
        ends = [vrun(i, k) for k in range(slices)]
        return None if None in ends else max(e[1] for e in ends)

    def matmul(i: int) -> tuple[int, int] | None:
        if i not in mm:
            before = matmul(i - 1) if i else (0, 0)
            free = half_free(i - 2)
            if i not in loaded or before is None or free is None:
                return None
            occ_prev = sizes[i - 1] if i else 0
            occ, done = _times(cfg, Opcode.MATMUL, rows=sizes[i], early=early)
            start = max(loaded[i], wload, before[0] + occ_prev, free)
            mm[i] = start, start + done
        return mm[i]

    def vrun(i: int, k: int) -> tuple[int, int] | None:
        if not vector:
            return matmul(i)
        if (i, k) not in vr:
            at = i * per_pass + k
            before = vrun(*outs[at - 1]) if at else (0, 0)
            made = matmul(i)
            staged = 0 if int32 or i < 2 else stored.get((i - 2, k))
            if before is None or made is None or staged is None:
                return None
            occ_prev = _times(cfg, Opcode.VRUN, rows=sizes[outs[at - 1][0]], params=0)[0] \
                if at else 0
            occ, done = _times(cfg, Opcode.VRUN, rows=sizes[i], params=0)
            start = max(before[0] + occ_prev, made[1], staged)
            vr[i, k] = start, start + done
        return vr[i, k]

    store_kind = DmaKind.STORE_ACC if int32 else DmaKind.STORE_CBUF
    next_load, next_out = 1, 0
    while next_out < len(outs):
        load_ready = None
        if next_load < passes:
            load_ready = 0 if next_load < 2 else (matmul(next_load - 2) or (None, None))[1]
        ran = vrun(*outs[next_out])
        store_ready = ran[1] if ran else None
        if load_ready is not None and (store_ready is None or load_ready <= store_ready):
            loaded[next_load] = dma(load_ready, DmaKind.LOAD_CBUF, sizes[next_load])
            next_load += 1
        else:
            i, k = outs[next_out]
            stored[i, k] = dma(store_ready, store_kind, sizes[i])
            next_out += 1
    return max(stored.values())


def best(cfg: ChipConfig, M: int, most_rows: int, int32: bool = False, slices: int = 1,
         bias: bool = True, vector: bool = True, early: int = 0) -> int:
    """Rows per pass for a lone one-block dense layer of `M` rows that fit at most
    `most_rows` a pass: of the fewest passes that fit and up to :data:`MORE_PASSES`
    more, the fewest whose :func:`cycles` are within :data:`CLOSE` of the least (a
    pass more for a gain below the model's error only lengthens the program)."""
    fewest = -(-M // most_rows)
    options = sorted({-(-M // p) for p in range(fewest, fewest + MORE_PASSES + 1)},
                     reverse=True)
    cost = {r: cycles(cfg, M, r, int32, slices, bias, vector, early) for r in options}
    least = min(cost.values())
    return next(r for r in options if cost[r] <= least * (1 + CLOSE))
