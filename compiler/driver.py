"""The compiler's entry point: network (Graph or Network) -> scheduled program, program
image, DRAM image, predicted cycles and traffic, and how to read the results back."""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from systolica.arch import disasm, fetch, isa, timing
from systolica.arch.config import ChipConfig, ConfigError
from systolica.arch.isa import CopyKind, DmaKind, Opcode
from systolica.arch.loadable import Loadable
from systolica.compiler.errors import CompileError
from systolica.compiler.graph.graph import Graph, Network
from systolica.compiler.graph.ops import Dense
from systolica.compiler.lowering import conv_mapping
from systolica.compiler.lowering.chain import ChainChoice
from systolica.compiler.lowering.exits import take_exits
from systolica.compiler.lowering.lower import lower
from systolica.compiler.lowering.registry import rule_for
from systolica.compiler.options import CompileOptions
from systolica.compiler.planning import layout, split
from systolica.compiler.planning.memory import DramMap, MemoryPlan, program_region
from systolica.compiler.scheduling.fetch_delay import delay_for_fetch
from systolica.compiler.scheduling.reconfigure import add_updates
from systolica.compiler.scheduling.schedule import schedule
from systolica.compiler.scheduling.verify import ScheduleError, begin_verify, check_regions


@dataclass(frozen=True)
class LayerRecord:
    name: str
    M: int
    K: int
    N: int
    macs: int          # useful multiply-accumulates, M*K*N
    first_cycle: int   # issue cycle of the layer's first instruction
    end_cycle: int     # cycle at which the last of its instructions is done
    index: int = 0     # its position in the graph (views such as Flatten have none)
    start_cycle: int = 0   # the latest end of the layers before it
    split: int = 1     # tile groups it ran in (docs/compiler.md, "Splitting the array")

    @property
    def cycles(self) -> int:
        """Its share of the run: from the end of the layers before it to its own end
        (its first loads may be hoisted into earlier layers' time; the shares of all
        layers add up to the run)."""
        return max(self.end_cycle - self.start_cycle, 0)


@dataclass(frozen=True, eq=False)
class Compiled:
    cfg: ChipConfig               # the chip it was compiled for (hardware only)
    network: Network | Graph      # as given
    program: list[isa.Instr]      # sorted by issue cycle
    layer_of: tuple[int, ...]     # layer index of each program instruction
    image: bytes                  # isa.to_bytes of the encoded program
    dram: np.ndarray              # initial DRAM image from word 0, uint8
                                  # (dram_map.end, rows); the rest is zeros
    dram_map: DramMap
    predicted_cycles: int         # what the CYCLES register will read
    prog_addr: int                # DRAM word address of the program image (PROG_ADDR)
    fetch_delay: int              # cycles added so that fetched instructions are on time
    layers: tuple[LayerRecord, ...]
    array_macs: int               # what the MACS counter will read (rows streamed x R x C)
    dram_bytes_read: int
    dram_bytes_written: int
    plan: MemoryPlan
    phase_seconds: dict = field(default_factory=dict)   # compile time per phase
    ubuf_bytes_written: int = 0   # what UBUF_WR_BYTES will read (crops)
    ubuf_bytes_read: int = 0      # ... and UBUF_RD_BYTES (fetches)
    ubuf: tuple[int, int] = (0, 0)    # (UBUF_BASE, UBUF_ROWS) the program assumes (the
                                      # chip's reset values unless it was compiled for a
                                      # moved UBUF): the driver writes them before the run
    chain: object = None          # a chain's ChainLowered (choice, passes), else None
    segments: dict = field(default_factory=dict)  # a network's chains: first layer ->
                                                  # net_chains.Chained
    tiling: dict = field(default_factory=dict)    # CNN layer -> its cnn.Tiling
    mappings: dict = field(default_factory=dict)  # layer -> the matching.Mapping it runs
                                                  # (docs/matching.md)
    fetch_from: int | None = None  # the PROG_FETCH register it was scheduled for (None:
                                   # its reset value, the host preloads what fits):
                                   # the driver writes it and preloads the instructions
                                   # below min(fetch_from, imem_depth, len)
    dram_base: int = 0            # the first DRAM word its data use (CompileOptions)

    @property
    def graph(self) -> Graph:
        return self.plan.graph

    @property
    def weights(self) -> dict[str, str]:
        """Each CNN layer's weight placement (``stream`` or ``persistent``)."""
        return {name: t.weights for name, t in self.tiling.items()}

    @property
    def buffers(self) -> dict[str, int]:
        """Each CNN layer's tile buffers (2 or 1)."""
        return {name: t.buffers for name, t in self.tiling.items()}

    @property
    def loadable(self) -> Loadable:
        """What the chip is given to run it: the program and DRAM images, PROG_ADDR, the
        UBUF registers and PROG_FETCH."""
        dram = self.dram if not self.dram_base else [(self.dram_base,
                                                       self.dram[self.dram_base:])]
        return Loadable.for_chip(self.cfg, self.image, dram, self.prog_addr, self.ubuf,
                                 self.fetch_from)

    @property
    def macs(self) -> int:
        return sum(layer.macs for layer in self.layers)

    @property
    def fetch_bytes_read(self) -> int:
        """What the FETCH_RD_BYTES counter will read: every word of the instructions
        the fetcher reads (from ``min(fetch_from, imem_depth, len)`` on), each once."""
        beyond = len(self.program) - fetch.fetch_start(self.cfg, len(self.program),
                                                       self.fetch_from)
        return beyond * fetch.words_per_instruction(self.cfg) * self.cfg.dram_word_bytes

    @property
    def utilisation(self) -> float:
        """Useful MACs per cycle over the array's peak."""
        return self.macs / (self.predicted_cycles * self.cfg.macs) if self.predicted_cycles else 0.0

    @property
    def out_dtype(self) -> str:
        return self.graph.tensor(self._single_output()).dtype

    def _single_output(self) -> str:
        if len(self.graph.outputs) != 1:
            raise CompileError(f"network {self.graph.name!r} has {len(self.graph.outputs)} "
                               f"outputs {list(self.graph.outputs)}; read them with "
                               f"results()")
        return self.graph.outputs[0]

    @property
    def dram_used(self) -> np.ndarray:
        """The initial DRAM image up to the last word the program touches: ``dram``
        itself, which holds no more (base's 256 MiB are not carried around)."""
        return self.dram

    def result(self, dram_after: np.ndarray) -> np.ndarray:
        """The network's output ``[M, N]`` read from a DRAM image after the run (a
        network with several outputs: :meth:`results`)."""
        return self.results(dram_after)[self._single_output()]

    def results(self, dram_after: np.ndarray) -> dict[str, np.ndarray]:
        """Every graph output, by tensor name, read from a DRAM image after the run."""
        dram = np.asarray(dram_after) if isinstance(dram_after, np.ndarray) else None
        if dram is None or dram.ndim != 2 or dram.shape[1] != self.cfg.dram_word_bytes:
            shape = f"shape {dram.shape}" if dram is not None else \
                type(dram_after).__name__
            raise CompileError(f"results(dram_after): dram_after must be the DRAM after "
                               f"the run (run.dram of golden.run), a uint8 array of "
                               f"(words, {self.cfg.dram_word_bytes}), not {shape}")
        out = {}
        for name, (at, n) in self.dram_map.outputs.items():
            t = self.graph.tensor(name)
            words = np.asarray(dram_after)[at:at + n]
            unpack = layout.unpack_int32 if t.dtype == "int32" else layout.unpack_int8
            rows = int(np.prod(t.shape[:-1]))     # a map's pixels are its rows
            s = self.plan.split(self.graph.producer(name).name)
            if s > 1:       # split into tile groups: docs/contract.md, "Split dense layers"
                packed = unpack(self.cfg, words, split.rows(rows, s),
                                split.packed_cols(self.cfg, s))
                out[name] = split.unpack_output(self.cfg, packed, rows, t.shape[-1], s)
                continue
            out[name] = unpack(self.cfg, words, rows, t.shape[-1]).reshape(t.shape)
        return out

    def disassemble(self) -> str:
        return disasm.disassemble(self.image)


def _counted_bytes(cfg: ChipConfig, program: list[isa.Instr]) -> dict[str, int]:
    """What the byte counters read after `program`: DRAM bytes read and written by
    DMAs, UBUF bytes written (COPY crops and fused crops) and read (COPY fetches)."""
    loads = (DmaKind.LOAD_CBUF, DmaKind.LOAD_ACC)
    out = dict.fromkeys(("dram_read", "dram_written", "ubuf_written", "ubuf_read"), 0)
    words: dict[tuple[int, int], int] = {}      # (kind, rows) -> words, per distinct DMA
    for ins in program:
        f = ins.fields
        if ins.op is Opcode.DMA:
            key = (f["kind"], f["rows"])
            n = words.get(key)
            if n is None:
                n = words[key] = timing.dma_words(cfg, *key)
            out["dram_read" if f["kind"] in loads else "dram_written"] += n
        elif ins.op is Opcode.COPY:
            out["ubuf_written" if f["kind"] == CopyKind.CROP else "ubuf_read"] += f["rows"]
        elif ins.op is Opcode.VRUN and f.get("crop", 0):
            out["ubuf_written"] += f["rows"]
    return {k: v * cfg.rows for k, v in out.items()}


def _mkn(lowered, graph: Graph, node) -> tuple[int, int, int, int]:
    """A layer as a matrix product ``M x K x N`` and its useful MACs: a convolution's
    M is its output pixels, K its kernel taps times input channels."""
    job = lowered.jobs.get(node.name)
    if job is None:      # the dense lowering, or a 2-D view of any rank's tensor
        shape = graph.tensor(node.outputs[0]).shape
        M, N = int(np.prod(shape[:-1])), shape[-1]
        macs = rule_for(node).macs(graph, node)
        return M, node.op.K if isinstance(node.op, Dense) else macs // max(M * N, 1), N, macs
    N, Ho, Wo, C = job.out_shape
    M = N * Ho * Wo
    return M, job.macs // max(M * C, 1), C, job.macs


class _PhaseClock:
    """Seconds spent in each phase of a compile, in order (a phase may come back)."""

    def __init__(self):
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.laps[phase] = round(self.laps.get(phase, 0) + now - self._last, 3)
        self._last = now

    def part(self, phase: str, inner: str, seconds: float) -> None:
        """`seconds` of `phase` were `inner`'s: count them there."""
        self.laps[phase] = round(max(0.0, self.laps[phase] - seconds), 3)
        self.laps[inner] = round(self.laps.get(inner, 0) + seconds, 3)


def _ends_as_predicted(replayed: int, predicted: int, what: str) -> None:
    if replayed != predicted:
        raise ScheduleError(
            f"{what}: internal: the compiler predicts {predicted} cycles but the "
            f"program's effects end in cycle {replayed - 1}")


def compile_network(cfg: ChipConfig, network: Network | Graph,
                    options: CompileOptions | None = None, *,
                    chain: ChainChoice | str | None = None,
                    weights: str | Mapping[str, str] | None = None,
                    buffers: int | Mapping[str, int] | None = None,
                    segments: Mapping | None = None,
                    ubuf: tuple[int, int] | None = None,
                    split: int | Mapping[str, int] | None = None,
                    mapping: str | None = None,
                    fetch_from: int | None = None) -> Compiled:
    """Compile `network` for chip `cfg`; raises CompileError when it cannot run there.
    With a ChainChoice `chain`, a graph that is one chain of convolutions runs in
    passes through the CBUF (:mod:`.chain_lower`) as it says. In a convolutional
    network, `chain` names the strategy of the runs of convolutions chained
    (``layer_by_layer``: none; ``baseline``, ``crop_fetch``, ``fused_crop``; None, the
    default: the cost model's pick per segment) and `segments` overrides the cut by
    a segment's first layer name: a number of layers (1: on its own), a ChainChoice,
    or both as a tuple (docs/cnn.md, "Chains in networks"). `weights` (``stream`` or
    ``persistent``) and
    `buffers` (2 or 1), for a convolutional network run layer by layer: each layer's
    tiling for every layer or per layer name, overriding the cost model (docs/cnn.md,
    "Weights and tile buffers per layer"). `ubuf` ``(base, rows)``: the UBUF registers
    the program assumes; None: the chip's, except that a convolutional network's
    chains take the cost model's (docs/cnn.md, "The UBUF a network takes");
    ``Compiled.ubuf`` says what the driver writes. `split`: the tile groups of dense
    layers with small K and N (docs/compiler.md, "Splitting the array"): None, the
    cost model's; 1, none; ``{layer: s}``, as given. `mapping`: how layers are put on
    the array (docs/matching.md), ``matcher`` (None) or ``static``. `fetch_from`: the
    PROG_FETCH register the program is scheduled for (None: the host preloads what fits
    the instruction memory; 0: the chip fetches it whole, as a program the management
    core starts; ``Compiled.fetch_from``). The same knobs may come as one
    :class:`~.options.CompileOptions` (`options`), not both."""
    knobs = CompileOptions(chain=chain, segments=segments, weights=weights,
                           buffers=buffers, ubuf=ubuf, split=split, mapping=mapping,
                           fetch_from=fetch_from)
    if options is None:
        options = knobs
    elif knobs != CompileOptions():
        raise CompileError("compile_network: give the options either as a CompileOptions "
                           "or as keywords, not both")
    elif not isinstance(options, CompileOptions):
        raise CompileError(f"compile_network: options must be a CompileOptions, not "
                           f"{type(options).__name__}")
    # A network's compile makes millions of small objects, nearly all alive until it
    # ends; the cyclic collector would only walk them over and over (a fifth of
    # ResNet-50's compile time), so it waits until the end.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _compile(cfg, network, options)
    finally:
        if enabled:
            gc.enable()


@conv_mapping.exact_cycles_by
def _cycles_alone(cfg: ChipConfig, graph: Graph, mapping: dict) -> int:
    """A convolution's exact cycles with a mapping, for ranking (:mod:`.conv_mapping`)."""
    return compile_network(cfg, graph, mapping=mapping).predicted_cycles


def _compile(cfg: ChipConfig, network: Network | Graph, options: CompileOptions) -> Compiled:
    if not isinstance(cfg, ChipConfig):
        raise CompileError(f"compile_network(cfg, network): cfg must be a ChipConfig "
                           f"(e.g. preset('tiny')), not {type(cfg).__name__}")
    if not isinstance(network, (Network, Graph)):
        raise CompileError(f"compile_network takes a Network or Graph, not "
                           f"{type(network).__name__}")
    chip = cfg                      # the hardware; cfg becomes the registers' view
    ubuf = options.ubuf
    if ubuf is not None:
        if not (isinstance(ubuf, tuple) and len(ubuf) == 2):
            raise CompileError(f"compile_network: ubuf must be (base, rows), not {ubuf!r}")
        try:
            cfg = cfg.at_ubuf(*ubuf)
        except ConfigError as e:
            raise CompileError(f"compile_network: ubuf {ubuf}: {e}") from None
    clock = _PhaseClock()
    matching = conv_mapping.seconds_spent()
    lowered = lower(cfg, network, options, choose_ubuf=ubuf is None)
    cfg = lowered.plan.cfg          # with the UBUF the program assumes
    clock.lap("lower")
    clock.part("lower", "match", conv_mapping.seconds_spent() - matching)
    graph = lowered.plan.graph
    # A program too long for the DRAM is refused now, not after scheduling it: the
    # configuration updates scheduling adds only make it longer.
    fetch_from = options.fetch_from
    program_region(cfg, lowered.plan, len(lowered.ops), at_least=True, fetch_from=fetch_from)
    lowered.ops = take_exits(cfg, lowered.ops)
    cycles = schedule(cfg, lowered.ops)
    clock.lap("schedule")
    cycles, updates = add_updates(cfg, lowered.ops, cycles)
    clock.lap("config_updates")
    done_of: dict[int, int] = {}    # per fields dict: lowering shares them among copies

    def done(op) -> int:
        d = done_of.get(id(op.fields))
        if d is None:
            d = done_of[id(op.fields)] = timing.done(cfg, op.instr(0))
        return d

    tagged = sorted([(c, op.instr(c), op.layer, done(op))
                     for op, c in zip(lowered.ops, cycles)]
                    + [(ins.cycle, ins, lowered.ops[served].layer, timing.done(cfg, ins))
                       for ins, served in updates],
                    key=lambda x: x[0])
    layer_of = tuple(x[2] for x in tagged)
    dones = [x[3] for x in tagged]
    prog_addr = program_region(cfg, lowered.plan, len(tagged), fetch_from=fetch_from)
    scheduled = [x[1] for x in tagged]
    # the same instructions, some later
    program = delay_for_fetch(cfg, scheduled, fetch_from)
    clock.lap("order")
    predicted = max((ins.cycle + d for ins, d in zip(program, dones)), default=0)
    what = f"network {graph.name!r}"
    replayed = begin_verify(cfg, program, what, prog_addr=prog_addr, fetch_from=fetch_from)
    # The region check and the encoding while the golden model's forked process
    # finishes; the verdicts still come in their order: the replay's, the regions',
    # the predicted cycles', the encoding's.
    try:
        check_regions(cfg, lowered.plan.regions, program, layer_of, what)
    except ScheduleError:
        replayed()
        raise
    clock.lap("verify")
    try:
        image = isa.to_bytes(isa.encode_all(program))
    except isa.EncodingError:
        _ends_as_predicted(replayed(), predicted, what)
        raise
    clock.lap("encode")
    _ends_as_predicted(replayed(), predicted, what)
    clock.lap("verify")

    spans: dict[int, tuple[int, int]] = {}     # layer -> (first issue, last done)
    for ins, owner, d in zip(program, layer_of, dones):
        first, end = spans.get(owner, (ins.cycle, 0))
        spans[owner] = (min(first, ins.cycle), max(end, ins.cycle + d))
    records = []
    running_end = 0
    for li, node in enumerate(graph.nodes):
        if li not in spans:     # a view (Flatten): no instructions of its own
            continue
        first, end = spans[li]
        records.append(LayerRecord(node.name, *_mkn(lowered, graph, node), first, end, li,
                                   min(running_end, end), lowered.plan.split(node.name)))
        running_end = max(running_end, end)
    counted = _counted_bytes(cfg, program)
    return Compiled(
        cfg=chip, network=network, program=program,
        layer_of=layer_of, image=image, dram=lowered.dram,
        dram_map=lowered.dram_map, predicted_cycles=predicted,
        prog_addr=prog_addr,
        fetch_delay=predicted - max((ins.cycle + d for ins, d in zip(scheduled, dones)),
                                    default=0),
        layers=tuple(records),
        array_macs=sum(i.fields["rows"] for i in program if i.op is Opcode.MATMUL)
        * cfg.macs,
        dram_bytes_read=counted["dram_read"], dram_bytes_written=counted["dram_written"],
        plan=lowered.plan, phase_seconds=clock.laps,
        ubuf_bytes_written=counted["ubuf_written"], ubuf_bytes_read=counted["ubuf_read"],
        ubuf=(cfg.ubuf_base, cfg.ubuf_rows),
        chain=lowered if isinstance(options.chain, ChainChoice) else None,
        segments=dict(lowered.segments), tiling=dict(lowered.tiling),
        mappings={name: job.mapping for name, job in lowered.jobs.items()
                  if job is not None and job.mapping is not None},
        fetch_from=fetch_from, dram_base=options.dram_base or 0)
