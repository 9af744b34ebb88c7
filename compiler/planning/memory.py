"""The memory planner: where every tensor, parameter and scratch area lives in CBUF,
ACC and DRAM, and for which layers. Entry point: :func:`plan_memory`.

Lifetimes count layers in graph order: a region is live from the first layer that
writes (or loads) it to the last that reads it, inclusive, and two regions may share
addresses only if their lifetimes are disjoint.

* CBUF: the UBUF (the reserved overlap region at ``cfg.ubuf_base``, ``cfg.ubuf_rows``
  rows; live throughout, so nothing else is placed there); every int8 tensor a layer
  reads, in the resident layout (``layout.resident_rows``), from its producer to its
  last reader (a graph input: from the layer before its first reader, which loads
  it, as the pipeliner fetches a layer's first loads during the previous layer); and
  the scratch areas the layers' rules ask for (``rule.Need``: weight ring, output
  staging).
* ACC: the rules' scratch (accumulator halves, bias slots).
* DRAM: graph inputs, the layers' parameters, graph outputs, in that order. The host
  writes the first two before the run and reads the outputs after it, so all live
  throughout and none shares space; the outputs end up contiguous. The program image
  follows them (:func:`program_region`, placed once the program's length is known);
  the fetcher reads it when the program is longer than the instruction memory.

Placement: regions live throughout are placed first, bottom up in the order asked
for; then the others by decreasing size (greedy by size), each at the lowest address
free for its whole lifetime. In the CBUF every region starts at a bank boundary and
shares no bank with another live region (a bank has one read and one write port).

Rows per pass: a network of one layer computes M in passes of as many rows as fit
(at most what the rule allows, half the accumulator buffer), or a dense layer of one
weight block in the passes `lone_passes` models fastest; a network of several
layers keeps every activation on chip for the whole of M, which must fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from systolica.arch import fetch
from systolica.arch.config import ChipConfig, require_config
from systolica.compiler.errors import CompileError, InternalError
from systolica.compiler.graph.graph import Graph, Node, as_graph
from systolica.compiler.graph.ops import Concat, Dense, Transpose
from systolica.compiler.lowering.registry import rule_for
from systolica.compiler.planning import dense_passes as passes
from systolica.compiler.planning import layout, split

MEMORIES = ("cbuf", "acc", "dram")
UNITS = {"cbuf": "rows", "acc": "rows", "dram": "words"}


@dataclass(frozen=True)
class Region:
    """``[lo, lo + size)`` of one memory, live in layers ``first .. last``."""
    memory: str
    key: str        # "tensor <name>", "<layer>.<parameter>", a scratch key, or "ubuf"
    lo: int
    size: int
    first: int
    last: int
    what: str = ""  # for messages: "tensor 'x'", "weights of layer 'fc1'", ...

    @property
    def hi(self) -> int:
        return self.lo + self.size

    def overlaps(self, other: Region) -> bool:
        return (self.memory == other.memory and self.lo < other.hi and other.lo < self.hi
                and self.first <= other.last and other.first <= self.last)


@dataclass(frozen=True)
class DramMap:
    """Where the graph's inputs, parameters and outputs are, as ``(address, words)``."""
    inputs: Mapping[str, tuple[int, int]]
    params: Mapping[tuple[str, str], tuple[int, int]]   # (layer, parameter)
    outputs: Mapping[str, tuple[int, int]]
    end: int                                            # words used

    @property
    def input(self) -> int:
        return next(iter(self.inputs.values()))[0]

    @property
    def output(self) -> int:
        """Address of the first output; the outputs are contiguous from there."""
        return min(at for at, _ in self.outputs.values())

    @property
    def output_words(self) -> int:
        """Words from the first output to the end of the last (all outputs)."""
        return max(at + n for at, n in self.outputs.values()) - self.output


@dataclass(frozen=True, eq=False)
class MemoryPlan:
    cfg: ChipConfig
    graph: Graph
    rows: Mapping[str, int]          # per layer: M rows computed per pass
    regions: tuple[Region, ...]
    dram: np.ndarray                 # initial DRAM image from word 0, uint8
                                     # (dram_map.end, rows); the rest is zeros
    dram_map: DramMap
    splits: Mapping = field(default_factory=dict)   # dense layer -> split.Split (the
                                                    # cost model's choice and why)
    passes: Mapping = field(default_factory=dict)   # layer -> rows per pass, where
                                                    # fewer than `rows` (dense_passes)

    def split(self, layer: str) -> int:
        """Tile groups `layer` runs in (1: the whole array; docs/compiler.md)."""
        choice = self.splits.get(layer)
        return 1 if choice is None else choice.s

    def region(self, memory: str, key: str) -> Region:
        for r in self.regions:
            if r.memory == memory and r.key == key:
                return r
        raise KeyError(f"no {memory} region {key!r}")

    def tensor(self, memory: str, name: str) -> Region:
        return self.region(memory, f"tensor {name}")

    def param(self, layer: str, what: str) -> Region:
        return self.region("dram", f"{layer}.{what}")

    def scratch(self, memory: str, key: str) -> Region:
        return self.region(memory, key)

    def live(self, memory: str, layer: int) -> list[Region]:
        """Regions of `memory` live during layer number `layer`, by address."""
        return sorted((r for r in self.regions if r.memory == memory
                       and r.first <= layer <= r.last), key=lambda r: r.lo)


def acc_half_rows(cfg: ChipConfig) -> int:
    """Mt: rows of one accumulator half (two halves plus two bias rows fill ACC)."""
    return (cfg.acc_depth - 2) // 2


def through_dram(graph: Graph) -> frozenset[str]:
    """Tensors made on chip that a transpose reads from DRAM in the GEMM lowering: of
    rank other than 2 (their rows are strided in DRAM) or int32 (moved DRAM to DRAM).
    Their producer stores them; only transposes read them."""
    return frozenset(
        n.inputs[0] for n in graph.nodes
        if isinstance(n.op, Transpose) and graph.producer(n.inputs[0]) is not None
        and (len(graph.tensor(n.inputs[0]).shape) != 2
             or graph.tensor(n.inputs[0]).dtype == "int32"))


def stored_at(plan, t: str) -> int | None:
    """The DRAM address a layer stores its output `t` at: a graph output or a tensor
    read through DRAM (:func:`through_dram`); None: kept on chip only."""
    graph = plan.graph
    if t in graph.outputs or t in through_dram(graph):
        return plan.tensor("dram", t).lo
    return None


def on_chip_readers(graph: Graph, t: str) -> list[Node]:
    """The layers that read `t` on chip (not through DRAM)."""
    return [] if t in through_dram(graph) else graph.consumers(t)


@dataclass
class _Item:
    key: str
    size: int
    first: int
    last: int
    what: str
    order: int = 0


def _capacity(cfg: ChipConfig, memory: str) -> int:
    return {"cbuf": cfg.cbuf_depth, "acc": cfg.acc_depth, "dram": cfg.dram_words}[memory]


#: Orders in which :func:`_place` tries the items after those live throughout: the
#: largest first, then (only where that leaves no room) the earliest first, and the
#: longest-lived first. First fit in address order each time.
PLACE_ORDERS = (lambda it: (-it.size, it.first, it.order),
                lambda it: (it.first, -it.size, it.order),
                lambda it: (it.first - it.last, -it.size, it.order))


def _place(memory: str, capacity: int, fixed: list[Region], items: list[_Item],
           steps: int, align: int = 1, order=PLACE_ORDERS[0]
           ) -> tuple[list[Region], _Item | None]:
    """Place `items` around `fixed`, each starting at a multiple of `align` and
    sharing no `align`-row unit with another live one; returns the regions and the
    first item that did not fit (None if all did)."""
    def up(row: int) -> int:
        return -(-row // align) * align

    placed = list(fixed)
    whole = [it for it in items if it.first == 0 and it.last == steps - 1]
    rest = sorted((it for it in items if not (it.first == 0 and it.last == steps - 1)),
                  key=order)
    for it in whole + rest:
        busy = sorted((r for r in placed if r.first <= it.last and it.first <= r.last),
                      key=lambda r: r.lo)
        at = 0
        for r in busy:
            if at + it.size <= r.lo:
                break
            at = max(at, up(r.hi))
        if at + it.size > capacity:
            return placed, it
        placed.append(Region(memory, it.key, at, it.size, it.first, it.last, it.what))
    return placed, None


def _shortfall(cfg: ChipConfig, graph: Graph, memory: str, failed: _Item,
               items: list[_Item], fixed: list[Region], note: str = "",
               align: int = 1) -> CompileError:
    """What does not fit where: the layer (in `failed`'s lifetime) with the most
    demand, the parts live there and how far over the memory they are, in rows or,
    where each part takes whole `align`-row banks, in banks."""
    def live(step):
        return [it for it in items if it.first <= step <= it.last]

    step = max(range(failed.first, failed.last + 1),
               key=lambda s: sum(it.size for it in live(s)))
    parts = live(step)
    need = sum(it.size for it in parts)
    reserved = sum(r.size for r in fixed if r.first <= step <= r.last)
    usable = _capacity(cfg, memory) - reserved
    unit = UNITS[memory]
    layer = graph.nodes[step].name
    detail = " + ".join(f"{it.what} {it.size}" for it in parts)
    name = memory.upper()
    outside = (f" outside the UBUF ({cfg.ubuf_rows} rows)"
               if memory == "cbuf" and cfg.ubuf_rows and not cfg.ubuf_own_sram else "")
    depth = f"{memory}_depth" if memory != "dram" else "dram_words"
    banks = sum(-(-it.size // align) for it in parts)
    free_banks = (_capacity(cfg, memory) - reserved) // align
    if align > 1 and need <= usable and banks > free_banks:
        # the rows would fit; the banks, one per part at least, do not
        return CompileError(
            f"layer {layer!r}: {name} has {free_banks} banks of {align} rows free"
            f"{outside} and the {len(parts)} regions live here need {banks} ({detail})"
            f"{note}: each region starts in a bank of its own (a bank has one read and "
            f"one write port), so fewer rows do not help; keep fewer tensors live at "
            f"once (e.g. join fewer branches in one Concat, or compile the network in "
            f"parts) or use a chip with more {name} banks (cbuf_banks)")
    if need > usable:
        return CompileError(
            f"layer {layer!r}: {name} too small by {need - usable} {unit}: needs {need} "
            f"{unit} ({detail}){note}, but the configured {depth} "
            f"{_capacity(cfg, memory)} leaves {usable} usable{outside}; use a smaller "
            f"problem or a chip with a larger {name}")
    return CompileError(
        f"layer {layer!r}: {name} has {usable} {unit} free{outside} and needs {need} "
        f"({detail}){note}, but after placing the others no free range of {failed.size} "
        f"{unit} is left for {failed.what}; use a smaller problem or a chip with a "
        f"larger {name}")


def _dram(cfg: ChipConfig, graph: Graph, splits: Mapping[str, int], base: int
          ) -> tuple[list[Region], np.ndarray, DramMap]:
    """Inputs, parameters, outputs in order from word `base`; all live throughout. A
    split layer's input, parameters and output are in the split layouts
    (docs/contract.md)."""
    steps = len(graph.nodes)
    cursor = base
    regions, pieces = [], []
    inputs, params, outputs = {}, {}, {}

    def place(key: str, words, who: str, what: str) -> tuple[int, int]:
        nonlocal cursor
        n = words if isinstance(words, int) else words.shape[0]
        if cursor + n > cfg.dram_words:
            raise CompileError(
                f"{who}: DRAM too small by {cursor + n - cfg.dram_words} words for its "
                f"{what} ({n} words; {cursor} already used by earlier data); the "
                f"configured dram_words is {cfg.dram_words} words of {cfg.rows} bytes")
        regions.append(Region("dram", key, cursor, n, 0, steps - 1, f"{who}: {what}"))
        if not isinstance(words, int):
            pieces.append((cursor, words))
        cursor += n
        return regions[-1].lo, n

    for t in graph.inputs:
        reader = graph.consumers(t)[0].name
        who = f"layer {reader!r}" if len(graph.inputs) == 1 else \
            f"layer {reader!r} (input {t!r})"
        data = graph.data[t]
        if splits.get(reader, 1) > 1:
            data = split.pack_input(cfg, data, splits[reader])
        inputs[t] = place(f"tensor {t}", layout.pack_tensor(cfg, data), who,
                          "input activations")
    for node in graph.nodes:
        s = splits.get(node.name, 1)
        images = (rule_for(node).params(cfg, graph, node) if s == 1
                  else split.params(cfg, graph, node, s))
        for what, words in images:
            params[(node.name, what)] = place(f"{node.name}.{what}", words,
                                              f"layer {node.name!r}", what)
    for t in graph.outputs:
        tensor = graph.tensor(t)
        who = f"layer {graph.producer(t).name!r}"
        s = splits.get(graph.producer(t).name, 1)
        shape = tensor.shape if s == 1 else (split.rows(tensor.shape[0], s),
                                             split.packed_cols(cfg, s))
        outputs[t] = place(f"tensor {t}", layout.tensor_words(cfg, shape, tensor.dtype),
                           who, "output" if len(graph.outputs) == 1 else f"output {t!r}")
    for t in sorted(through_dram(graph) - set(graph.outputs)):
        tensor = graph.tensor(t)
        place(f"tensor {t}", layout.tensor_words(cfg, tensor.shape, tensor.dtype),
              f"layer {graph.producer(t).name!r}", f"{t!r}, which a transpose reads from DRAM")
    image = np.zeros((cursor, cfg.rows), dtype=np.uint8)
    for at, words in pieces:
        image[at:at + words.shape[0]] = words
    dmap = DramMap(MappingProxyType(inputs), MappingProxyType(params),
                   MappingProxyType(outputs), cursor)
    return regions, image, dmap


def _on_chip(cfg: ChipConfig, graph: Graph, rows: Mapping[str, int],
             splits: Mapping[str, int]) -> dict[str, list[_Item]]:
    """What CBUF and ACC must hold, in the order asked for: per layer its rules'
    shared needs (for a pass of its rows: dense_passes), the tensors it is the first
    to hold (whole), its own needs."""
    pass_rows = dense_passes(cfg, graph, rows)
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    items: dict[str, dict[str, _Item]] = {"cbuf": {}, "acc": {}}
    order = 0
    spilled = through_dram(graph)           # read from DRAM only

    def ask(memory: str, key: str, size: int, first: int, last: int, what: str) -> None:
        nonlocal order
        known = items[memory].get(key)
        if known is None:
            items[memory][key] = _Item(key, size, first, last, what, order)
            order += 1
        else:
            known.size = max(known.size, size)
            known.first, known.last = min(known.first, first), max(known.last, last)

    for i, node in enumerate(graph.nodes):
        # a rule whose ops may run before its layer's turn (a Concat's moves follow
        # the layers that make its inputs) holds its output and needs from then
        start = rule_for(node).first_layer(graph, node, index)
        needs = rule_for(node).needs(cfg, graph, node,
                                     pass_rows.get(node.name, rows[node.name]),
                                     split=splits.get(node.name, 1))
        for need in needs:
            if need.shared:
                ask(need.memory, need.key, need.size, i, i, need.what)
        for t in list(dict.fromkeys(node.inputs)) + list(node.outputs):
            readers = graph.consumers(t)
            producer = graph.producer(t)
            holder = index[producer.name] if producer is not None else index[readers[0].name]
            streamed = t in spilled or producer is None and all(
                rule_for(r).streams_input for r in readers)
            if readers and holder == i and not streamed:
                # a graph input's load is fetched ahead, during the layer before
                first = start if producer is not None else max(min(start, holder) - 1, 0)
                tensor = graph.tensor(t)
                m = split.rows(graph.tensor(node.outputs[0]).shape[0], splits.get(node.name, 1))
                per_block = (rule_for(node).input_rows(cfg, graph, node, t, rows[node.name], m)
                             if producer is None else rows[node.name])
                past = max(rule_for(r).reads_past(cfg, graph, r, t) for r in readers)
                ask("cbuf", f"tensor {t}", layout.resident_rows(cfg, tensor.shape[1],
                                                                per_block) + past,
                    first, index[readers[-1].name], f"tensor {t!r}")
        for need in needs:
            if not need.shared:
                ask(need.memory, need.key, need.size, start, i, need.what)
    return {m: list(v.values()) for m, v in items.items()}


def _chip(cfg: ChipConfig, graph: Graph, rows: Mapping[str, int],
          splits: Mapping[str, int], note: str = "") -> list[Region]:
    steps = len(graph.nodes)
    inside = cfg.ubuf_rows and not cfg.ubuf_own_sram      # the UBUF among the CBUF's rows
    fixed = {"cbuf": [Region("cbuf", "ubuf", cfg.ubuf_base, cfg.ubuf_rows, 0, steps - 1,
                             "UBUF")] if inside else [], "acc": []}
    regions = []
    for memory, items in _on_chip(cfg, graph, rows, splits).items():
        # A CBUF bank has one read and one write port (docs/contract.md, "CBUF
        # banks"): tensors, weights and staging each get banks of their own, so the
        # units streaming them never take turns at a port.
        align = cfg.cbuf_bank_rows if memory == "cbuf" else 1
        for order in PLACE_ORDERS:      # the first order that fits; most fit at once
            placed, failed = _place(memory, _capacity(cfg, memory), fixed[memory], items,
                                    steps, align, order)
            if failed is None:
                break
            if order is PLACE_ORDERS[0]:
                first_failed = failed
        else:
            failed = first_failed
        if failed is not None:
            raise _shortfall(cfg, graph, memory, failed, items, fixed[memory], note, align)
        regions += placed
    return regions


def _rows(cfg: ChipConfig, graph: Graph, splits: Mapping[str, int]
          ) -> tuple[dict[str, int], list[Region]]:
    """Rows per pass for each layer, and the on-chip regions they give (a layer in
    `s` tile groups streams ``ceil(M/s)`` rows)."""
    limits = {n.name: rule_for(n).max_rows(cfg) for n in graph.nodes}
    M = {n.name: split.rows(graph.tensor(n.outputs[0]).shape[0], splits.get(n.name, 1))
         for n in graph.nodes}
    if len(graph.nodes) > 1:
        # a network of dense layers goes in passes (dense_passes): its tensors are on
        # chip whole, but only a pass is in the accumulator
        over = [n for n in graph.nodes if M[n.name] > limits[n.name]
                and not _dense_only(graph)]
        if over:
            n = next((x for x in over if x is not graph.nodes[0]), over[0])
            Mt, s = limits[n.name], splits.get(n.name, 1)
            rows = graph.tensor(n.outputs[0]).shape[0]
            held = (f"M = {rows} in {split.groups(cfg, s)} ({M[n.name]} rows each) must "
                    f"be at most {Mt} rows each" if s > 1 else
                    f"M = {rows} must be at most {Mt}")
            raise CompileError(
                f"layer {n.name!r}: a network of several layers keeps every activation "
                f"on chip, so {held} (half the accumulator buffer, acc_depth "
                f"{cfg.acc_depth}); split the batch into parts of at most {Mt * s} rows")
        return M, _chip(cfg, graph, M, splits)
    (name,) = M
    lo, hi = 1, min(M[name], limits[name])      # the most rows per pass that fit
    best = None
    while lo <= hi:
        mid = (lo + hi) // 2
        try:
            best = mid, _chip(cfg, graph, {name: mid}, splits)
            lo = mid + 1
        except CompileError:
            if mid == 1:
                _chip(cfg, graph, {name: 1}, splits, note=" even with one row of M per pass")
            hi = mid - 1
    rows = lone_passes(cfg, graph, M[name], best[0], splits.get(name, 1))
    if rows != best[0]:
        try:        # two input buffers of fewer rows: almost always within one of more
            best = rows, _chip(cfg, graph, {name: rows}, splits)
        except CompileError:
            pass
    return {name: best[0]}, best[1]


def lone_passes(cfg: ChipConfig, graph: Graph, M: int, most: int, s: int = 1) -> int:
    """Rows per pass of a layer alone of `M` rows (a split layer's: each group's) that
    fit at most `most` a pass. A dense layer of one K-block and one N-block keeps its
    weights in their bank for every pass, so more passes cost only their overlap's
    fill: it takes the passes :mod:`.passes` models fastest (its DMA loads a pass while
    the array computes the one before; a 2048x4x4 GEMM in 4 groups on base: 1,355
    cycles in the two passes that fit, 1,132 in three). Layers of several blocks keep
    the most rows that fit: their weights do not stay in a bank, so every further pass
    repeats each block's loads and instructions."""
    node = graph.nodes[0]
    if type(node.op) is not Dense or not rule_for(node).one_block(cfg, graph, node) \
            or layout.blocks(node.op.N, cfg.cols) > 1:
        return most
    return passes.best(cfg, M, most, *split.lone_shape(cfg, graph, node, s))


#: rows a pass of a layer in a network of dense layers aims at (docs/compiler.md,
#: "Passes in a network of dense layers")
PASS_ROWS = 64


def dense_passes(cfg: ChipConfig, graph: Graph, rows: Mapping[str, int]) -> dict[str, int]:
    """Rows per pass of each layer of a network made of dense layers alone (several):
    its activations stay on chip whole (``rows``), and passes of about
    :data:`PASS_ROWS` rows let a layer's loads, MATMULs, VRUNs and stores of
    successive passes overlap. Other networks: none (one pass of ``rows``)."""
    if len(graph.nodes) < 2 or not _dense_only(graph):
        return {}
    out = {}
    for node in graph.nodes:
        if type(node.op) is not Dense:
            continue            # a Concat moves whole tensors, after their passes
        m = rows[node.name]
        count = max(-(-m // PASS_ROWS), -(-m // rule_for(node).max_rows(cfg)))
        if count > 1:
            out[node.name] = -(-m // count)
    return out


def _dense_only(graph: Graph) -> bool:
    """A network of dense layers (and the Concats that join them, which move whole
    tensors where the passes left them)."""
    return all(type(n.op) in (Dense, Concat) for n in graph.nodes) \
        and any(type(n.op) is Dense for n in graph.nodes)


def program_region(cfg: ChipConfig, plan: MemoryPlan, instructions: int,
                   at_least: bool = False, fetch_from: int | None = None) -> int:
    """The DRAM word address of the program image (PROG_ADDR): right after the data.
    A program that is fetched (longer than the instruction memory, or fetched from
    instruction `fetch_from`, the PROG_FETCH register) is read from there, so its
    region must fit the DRAM; CompileError saying by how much it does not. `at_least`:
    the count is a lower bound (before configuration updates join the program)."""
    at = plan.dram_map.end
    if fetch.fetches(cfg, instructions, fetch_from):
        need = fetch.region_words(cfg, instructions)
        if at + need > cfg.dram_words:
            raise CompileError(
                f"network {plan.graph.name!r}: DRAM too small by "
                f"{at + need - cfg.dram_words} words for the program image "
                f"({'at least ' if at_least else ''}{instructions} "
                f"instructions, {need} words: "
                + (f"longer than imem_depth {cfg.imem_depth}, so fetched from DRAM"
                   if fetch_from is None else f"fetched from DRAM (fetch_from {fetch_from})")
                + f"; {at} words already used by the data); the "
                f"configured dram_words is {cfg.dram_words} words of {cfg.rows} bytes: "
                f"split the network or the batch, or use a chip with a larger DRAM")
    return at


def check_plan(plan: MemoryPlan) -> None:
    """Raise CompileError (internal) unless every region lies inside its memory and no
    two regions live at the same time share an address."""
    cfg = plan.cfg
    for r in plan.regions:
        # a UBUF in its own SRAM follows the CBUF's rows
        end = cfg.cbuf_physical_rows if r.memory == "cbuf" else _capacity(cfg, r.memory)
        if not 0 <= r.lo <= r.hi <= end or r.size < 0:
            raise InternalError(f"{r.memory} region {r.key!r} [{r.lo}, {r.hi}) "
                               f"is outside the memory")
    for memory in MEMORIES:
        rs = sorted((r for r in plan.regions if r.memory == memory and r.size),
                    key=lambda r: r.lo)
        for i, a in enumerate(rs):
            for b in rs[i + 1:]:
                if b.lo >= a.hi:
                    break
                if a.overlaps(b):
                    raise InternalError(f"{memory} regions {a.key!r} and "
                                       f"{b.key!r} overlap while both are live")


def plan_memory(cfg: ChipConfig, network, split_groups=None, dram_base: int = 0
                ) -> MemoryPlan:
    """Place `network` (a Graph or Network) in `cfg`'s memories; CompileError naming
    the layer, the tensor and the shortfall when it does not fit. `split_groups`: the
    dense layers' tile groups, None for the cost model's, or what
    :func:`.split.choose_split` takes. `dram_base`: the first DRAM word its data may
    use (the image below it is zeros)."""
    require_config(cfg, "plan_memory(cfg, network)", CompileError)
    graph = as_graph(network)
    choices = split.choose_split(cfg, graph, split_groups)
    splits = {name: c.s for name, c in choices.items() if c.s > 1}
    rows, chip = _rows(cfg, graph, splits)
    dram_regions, image, dmap = _dram(cfg, graph, splits, dram_base)
    plan = MemoryPlan(cfg, graph, MappingProxyType(rows), tuple(chip + dram_regions),
                      image, dmap, MappingProxyType(choices),
                      MappingProxyType(dense_passes(cfg, graph, rows)))
    check_plan(plan)
    return plan
