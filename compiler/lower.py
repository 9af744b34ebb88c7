"""Lower a Network to a latency-insensitive micro-op program and its DRAM image.

Tiling, with R x C the array: the output is computed per N-block of C columns, each
a sum over K-blocks of R rows. For every (N-block, K-block) step a weight block is
DMA'd into a ring of CBUF slots, WLOADed into weight bank ``step % 2`` and streamed
against the activations' K-block by one MATMUL into one half of the accumulator
buffer (halves alternate between N-blocks, so the vector unit drains one while the
array fills the other). The vector unit then adds the bias, requantises and writes the
N-block to CBUF (or back to ACC for int32), and a DMA stores it.

Memory map:
  ACC   [0, Mt) and [Mt, 2 Mt) the two halves, the last two rows the two bias slots.
  CBUF  weight ring | activation region(s) | output ping-pong, below the UBUF.
  DRAM  input | per layer weights, bias | output.
Activations occupy ``K-blocks x Mc`` CBUF rows (row ``kb*Mc + m``), which is also how a
layer writes its output for the next one, so a chain never leaves the chip.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..arch import fabric
from ..arch.config import ChipConfig
from ..arch.isa import DmaKind, Opcode
from . import layout
from .graph import CompileError, Network
from .ir import MicroOp, conflict, make, verify_reorder

WEIGHT_SLOTS = 4  # CBUF weight blocks in flight: DMA, WLOAD and two of slack


@dataclass(frozen=True)
class DramMap:
    input: int
    weights: tuple[int, ...]
    bias: tuple[int | None, ...]
    output: int
    output_words: int
    end: int


@dataclass
class _Step:
    loads: list[MicroOp]      # DMAs (activation, weight block) and the WLOAD
    matmul: MicroOp


@dataclass
class _Block:
    """One N-block of one M-chunk of one layer."""
    layer: int
    bias: list[MicroOp] = field(default_factory=list)
    steps: list[_Step] = field(default_factory=list)
    epilogue: list[MicroOp] = field(default_factory=list)


@dataclass
class Lowered:
    ops: list[MicroOp]          # software-pipelined program order
    sequential: list[MicroOp]   # the same ops in plain loop order (for verification)
    dram: np.ndarray
    dram_map: DramMap
    chunk_rows: int


def acc_half_rows(cfg: ChipConfig) -> int:
    """Mt: rows of one accumulator half (two halves plus two bias rows fill ACC)."""
    return (cfg.acc_depth - 2) // 2


def cbuf_span(cfg: ChipConfig) -> tuple[int, int]:
    """The largest CBUF range outside the UBUF (reserved for overlap tiles)."""
    below = (0, cfg.ubuf_base) if cfg.ubuf_rows else (0, cfg.cbuf_depth)
    above = (cfg.ubuf_base + cfg.ubuf_rows, cfg.cbuf_depth) if cfg.ubuf_rows else (0, 0)
    return max(below, above, key=lambda s: s[1] - s[0])


def _cbuf_too_small(cfg: ChipConfig, who: str, parts: dict[str, int]) -> CompileError:
    lo, hi = cbuf_span(cfg)
    need = sum(parts.values())
    detail = " + ".join(f"{k} {v}" for k, v in parts.items())
    return CompileError(
        f"layer {who!r}: CBUF too small by {need - (hi - lo)} rows: needs {need} rows "
        f"({detail}) but the configured cbuf_depth {cfg.cbuf_depth} leaves {hi - lo} "
        f"usable outside the UBUF ({cfg.ubuf_rows} rows); use a smaller problem or a "
        f"chip with a larger CBUF")


def _chunk_rows(cfg: ChipConfig, net: Network) -> int:
    """Rows of M computed per pass (Mc), checking ACC and CBUF capacity."""
    R, M, Mt = cfg.rows, net.M, acc_half_rows(cfg)
    lo, hi = cbuf_span(cfg)
    ring = WEIGHT_SLOTS * R
    last = net.layers[-1]
    out_rows = 2 if last.out_dtype == "int8" else 0   # ping-pong output, per row of Mc
    kbs = [layout.blocks(layer.K, R) for layer in net.layers]
    if len(net.layers) == 1:
        fit = (hi - lo - ring) // (kbs[0] + out_rows)
        if fit < 1:
            raise _cbuf_too_small(cfg, last.name, {"weight ring": ring,
                                                   "one activation row per K-block": kbs[0],
                                                   "output": out_rows})
        return min(M, Mt, fit)
    if M > Mt:
        raise CompileError(
            f"layer {net.layers[1].name!r}: a chain keeps every activation on chip, so "
            f"M = {M} must be at most {Mt} (half the accumulator buffer, acc_depth "
            f"{cfg.acc_depth}); split the batch into parts of at most {Mt} rows")
    regions = [max(kbs[i] * M for i in range(p, len(kbs), 2)) for p in (0, 1)]
    parts = {"weight ring": ring, "activations (even layers)": regions[0],
             "activations (odd layers)": regions[1], "output": out_rows * M}
    if sum(parts.values()) > hi - lo:
        big = max(range(len(kbs)), key=lambda i: kbs[i])
        raise _cbuf_too_small(cfg, net.layers[big].name, parts)
    return M


def _dram(cfg: ChipConfig, net: Network) -> tuple[np.ndarray, DramMap]:
    """Place input, weights and biases; check everything (with the output) fits."""
    cursor = 0
    pieces: list[tuple[int, np.ndarray]] = []

    def place(words: np.ndarray | int, who: str, what: str) -> int:
        nonlocal cursor
        n = words if isinstance(words, int) else words.shape[0]
        if cursor + n > cfg.dram_words:
            raise CompileError(
                f"layer {who!r}: DRAM too small by {cursor + n - cfg.dram_words} words for "
                f"its {what} ({n} words; {cursor} already used by earlier data); the "
                f"configured dram_words is {cfg.dram_words} words of {cfg.rows} bytes")
        at = cursor
        if not isinstance(words, int):
            pieces.append((at, words))
        cursor += n
        return at

    first, last = net.layers[0], net.layers[-1]
    a_at = place(layout.pack_activations(cfg, net.input), first.name, "input activations")
    w_at, b_at = [], []
    for layer in net.layers:
        w_at.append(place(layout.pack_weights(cfg, layer.weights), layer.name, "weights"))
        b_at.append(None if layer.bias is None else
                    place(layout.pack_bias(cfg, layer.bias), layer.name, "bias"))
    out_words = layout.output_words(cfg, net.M, last.N, last.out_dtype)
    o_at = place(out_words, last.name, "output")
    image = np.zeros((cfg.dram_words, cfg.rows), dtype=np.uint8)
    for at, words in pieces:
        image[at:at + words.shape[0]] = words
    return image, DramMap(a_at, tuple(w_at), tuple(b_at), o_at, out_words, cursor)


def _blocks(cfg: ChipConfig, net: Network, dmap: DramMap, Mc: int) -> list[_Block]:
    """The plain loop nest: (layer, M-chunk, N-block, K-block)."""
    R, C, M = cfg.rows, cfg.cols, net.M
    Mt, arw = acc_half_rows(cfg), cfg.acc_row_words
    lo, _ = cbuf_span(cfg)
    kbs = [layout.blocks(layer.K, R) for layer in net.layers]
    ring = lo
    act = [ring + WEIGHT_SLOTS * R]
    act.append(act[0] + max(kbs[i] * Mc for i in range(0, len(kbs), 2)))
    out_base = act[1] + (max((kbs[i] * Mc for i in range(1, len(kbs), 2)), default=0))
    blocks: list[_Block] = []
    step = 0
    for li, layer in enumerate(net.layers):
        KB, NB = kbs[li], layout.blocks(layer.N, C)
        src = act[li % 2]
        final = li == len(net.layers) - 1
        for m0 in range(0, M, Mc):
            rows = min(Mc, M - m0)
            for nb in range(NB):
                blk = _Block(li)
                half = len(blocks) % 2
                acc_at, bias_at = half * Mt, cfg.acc_depth - 2 + half
                if layer.bias is not None:
                    blk.bias.append(make(cfg, Opcode.DMA, li, kind=DmaKind.LOAD_ACC,
                                         dram_addr=dmap.bias[li] + nb * arw,
                                         dram_stride=arw, buf_addr=bias_at, rows=1))
                for kb in range(KB):
                    # the (short) weight block first, so its WLOAD overlaps the
                    # activation load
                    slot = ring + (step % WEIGHT_SLOTS) * R
                    loads = [make(cfg, Opcode.DMA, li, kind=DmaKind.LOAD_CBUF,
                                  dram_addr=dmap.weights[li] + (nb * KB + kb) * R,
                                  dram_stride=1, buf_addr=slot, rows=R)]
                    if li == 0 and nb == 0:
                        loads.append(make(cfg, Opcode.DMA, li, kind=DmaKind.LOAD_CBUF,
                                          dram_addr=dmap.input + kb * M + m0,
                                          dram_stride=1, buf_addr=src + kb * Mc, rows=rows))
                    loads.append(make(cfg, Opcode.WLOAD, li, w_addr=slot, bank=step % 2))
                    mm = make(cfg, Opcode.MATMUL, li, act_addr=src + kb * Mc, rows=rows,
                              acc_addr=acc_at, accumulate=int(kb > 0), bank=step % 2)
                    blk.steps.append(_Step(loads, mm))
                    step += 1
                post = dict(src=acc_at, rows=rows, bias_addr=bias_at if layer.bias is not None
                            else 0, use_bias=int(layer.bias is not None),
                            relu=int(layer.relu))
                if layer.out_dtype == "int8":
                    post.update(requant=1, mult=layer.mult, shift=layer.shift,
                                zp=layer.zp & 0xFF)
                if not final:
                    blk.epilogue.append(make(cfg, Opcode.VRUN, li, to_acc=0,
                                             dst=act[(li + 1) % 2] + nb * M, **post))
                elif layer.out_dtype == "int8":
                    buf = out_base + half * Mc
                    blk.epilogue.append(make(cfg, Opcode.VRUN, li, to_acc=0, dst=buf, **post))
                    blk.epilogue.append(make(cfg, Opcode.DMA, li, kind=DmaKind.STORE_CBUF,
                                             dram_addr=dmap.output + nb * M + m0,
                                             dram_stride=1, buf_addr=buf, rows=rows))
                else:
                    if layer.bias is not None or layer.relu:
                        # in place: each row is read before it is rewritten
                        blk.epilogue.append(make(cfg, Opcode.VRUN, li, to_acc=1,
                                                 dst=acc_at, **post))
                    blk.epilogue.append(make(cfg, Opcode.DMA, li, kind=DmaKind.STORE_ACC,
                                             dram_addr=dmap.output + (nb * M + m0) * arw,
                                             dram_stride=arw, buf_addr=acc_at, rows=rows))
                blocks.append(blk)
    return blocks


def _sequential(setup: list[MicroOp], blocks: list[_Block]) -> list[MicroOp]:
    out = list(setup)
    for blk in blocks:
        out += blk.bias
        for st in blk.steps:
            out += st.loads
            out.append(st.matmul)
        out += blk.epilogue
    return out


def _any_conflict(xs: list[MicroOp], ys: list[MicroOp]) -> bool:
    return any(conflict(x, y) for x in xs for y in ys)


def _pipelined(setup: list[MicroOp], blocks: list[_Block]) -> list[MicroOp]:
    """Software-pipelined order: the loads of step s+1 before the MATMUL of step s, an
    N-block's epilogue after the first MATMUL of the next N-block of the same layer,
    the bias of N-block b+1 right after the epilogue that frees its slot. A move is
    made only when the ops moved past each other are independent."""
    steps = [(b, st) for b, blk in enumerate(blocks) for st in blk.steps]
    first = steps[0][1]
    out = [m for m in first.loads if m.op is Opcode.DMA]
    for blk in blocks[:2]:
        out += blk.bias
    out += setup
    out += [m for m in first.loads if m.op is not Opcode.DMA]
    for i, (b, st) in enumerate(steps):
        pending: list[MicroOp] = []
        if b > 0 and st is blocks[b].steps[0]:
            pending = blocks[b - 1].epilogue + (blocks[b + 1].bias if b + 1 < len(blocks)
                                                else [])
        nxt = steps[i + 1][1].loads if i + 1 < len(steps) else []
        if pending and (blocks[b - 1].layer != blocks[b].layer
                        or _any_conflict(pending, [st.matmul] + nxt)):
            out += pending
            pending = []
        if _any_conflict(nxt, [st.matmul]):
            out += [st.matmul] + nxt
        else:
            out += nxt + [st.matmul]
        out += pending
    out += blocks[-1].epilogue
    return out


def lower(cfg: ChipConfig, net: Network) -> Lowered:
    if cfg.rows != cfg.cols:
        raise CompileError(f"chip {cfg.name!r}: the DRAM layouts assume a square array, "
                           f"not {cfg.rows}x{cfg.cols}")
    Mc = _chunk_rows(cfg, net)
    image, dmap = _dram(cfg, net)
    setup: list[MicroOp] = []   # fabric settings are added after scheduling (reconfigure)
    blocks = _blocks(cfg, net, dmap, Mc)
    sequential = _sequential(setup, blocks)
    ops = _pipelined(setup, blocks)
    verify_reorder(cfg, sequential, ops)
    return Lowered(ops, sequential, image, dmap, Mc)
