"""Records a script can read: per layer and per run, from a compiled network alone
(docs/records.md; the schema: ``data/records.schema.json``).

Every figure is a function of the scheduled program: cycles and layer spans from the
compiler, each buffer's reads and writes counted from the instructions' fields (the
golden model counts the same accesses as it runs, independently: the witness in
testbenches/app/test_records.py), unit busy cycles from their occupancies, energy from
those counts and a :class:`~systolica.arch.energy.EnergyTable`.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from operator import itemgetter

import numpy as np

from systolica.arch import energy as energy_module
from systolica.arch import fetch, timing
from systolica.arch.config import ChipConfig
from systolica.arch.instructions import PARAM_ROWS
from systolica.arch.isa import CopyKind, DmaKind, Opcode
from systolica.compiler.backend import unit_use

#: The version of the records' layout (``schema_version`` in every record): a change
#: that renames or drops a field, or changes a field's meaning, makes a new version.
SCHEMA_VERSION = 1

#: The on-chip buffers whose accesses records count (docs/records.md, "Buffers").
BUFFERS = ("cbuf", "ubuf", "acc", "wbuf")

#: The counts per instruction, in the order of :func:`_instruction_counts`' vector.
_COUNTS = ("cbuf_reads", "cbuf_writes", "ubuf_reads", "ubuf_writes", "acc_reads",
           "acc_writes", "wbuf_reads", "wbuf_writes", "array_rows", "accumulates",
           "vector_lanes", "config_writes", "dram_rd_words", "dram_wr_words")
_AT = {name: i for i, name in enumerate(_COUNTS)}


@dataclass
class RunRecords:
    """One run's records: ``run`` (the per-run record) and ``layers`` (one record per
    layer, in program order)."""
    run: dict
    layers: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "run": self.run, "layers": self.layers}


def schema() -> dict:
    """The JSON Schema of a records file (:func:`write_json`)."""
    return json.loads(_schema_text())


@cache
def _schema_text() -> str:
    return resources.files("systolica.app").joinpath("data/records.schema.json").read_text()


def default_clock_hz(cfg: ChipConfig) -> float:
    """The clock a run's time is given at when none is: the board's built for this
    chip, else the function library's nominal one."""
    from systolica.arch.boards import BOARDS
    from systolica.compiler.assignment.library import NOMINAL_CLOCK_HZ
    for board in BOARDS.values():
        if board.config == cfg.name:
            return float(board.clock_hz)
    return float(NOMINAL_CLOCK_HZ)


def _instruction_counts(cfg: ChipConfig, op: Opcode, f: Mapping) -> tuple[int, ...]:
    """What one instruction moves, from its fields (docs/records.md, "Counts"): rows of
    each buffer read and written, weight banks loaded, rows streamed through the
    array, int32 accumulate-stage adds, vector lanes, configuration writes and DRAM
    words."""
    v = [0] * len(_COUNTS)

    def add(name: str, n: int) -> None:
        v[_AT[name]] += n

    rows = f.get("rows", 0)
    if op is Opcode.DMA:
        kind = f["kind"]
        buf = "acc" if kind in (DmaKind.LOAD_ACC, DmaKind.STORE_ACC) else "cbuf"
        load = kind in (DmaKind.LOAD_CBUF, DmaKind.LOAD_ACC)
        add(f"{buf}_writes" if load else f"{buf}_reads", rows)
        add("dram_rd_words" if load else "dram_wr_words", timing.dma_words(cfg, kind, rows))
    elif op is Opcode.WLOAD:
        add("cbuf_reads", cfg.weight_rows)
        add("wbuf_writes", 1)
    elif op is Opcode.MATMUL:
        add("cbuf_reads", rows)
        add("array_rows", rows)
        add("acc_writes", rows)
        if f.get("accumulate", 0):
            add("acc_reads", rows)
            add("accumulates", rows * cfg.cols)
    elif op is Opcode.VRUN:
        params = f.get("params", 0)
        add("acc_reads", rows + (PARAM_ROWS if params else 1 if f.get("use_bias", 0) else 0))
        add("acc_writes" if f.get("to_acc", 0) else "cbuf_writes", rows)
        if f.get("crop", 0):
            add("ubuf_writes", rows)
        add("vector_lanes", rows * cfg.cols)
    elif op is Opcode.COPY:
        if f["kind"] == CopyKind.CROP:
            add("cbuf_reads", rows)
            add("ubuf_writes", rows)
        else:
            add("ubuf_reads", rows)
            add("cbuf_writes", rows)
    elif op is Opcode.ROUTE:
        add("cbuf_reads", rows)
        add("cbuf_writes", rows)
    elif op in (Opcode.SETCFG, Opcode.SETCFGW, Opcode.CONVCFG, Opcode.TAPS):
        add("config_writes", 1)
    return tuple(v)


#: The fields that decide an instruction's counts and occupancy, for the opcodes a
#: network has most of (a WLOAD's depend on the chip alone; any other opcode's
#: instructions are told apart by all their fields).
_DECIDING = {Opcode.DMA: ("kind", "rows"), Opcode.MATMUL: ("rows", "accumulate"),
             Opcode.VRUN: ("rows", "params", "use_bias", "to_acc", "crop")}
_GETTERS = {op: itemgetter(*names) for op, names in _DECIDING.items()}


def _key(op: Opcode, f: Mapping) -> tuple:
    """An instruction's key (:data:`_DECIDING`) when its fields leave some out (an
    omitted field is 0)."""
    names = _DECIDING.get(op)
    if names is not None:
        return (op, tuple(f.get(n, 0) for n in names))
    return (op,) if op is Opcode.WLOAD else (op, *f.items())


@dataclass
class ProgramCounts:
    """A program's counts by layer, and each unit's busy intervals."""
    by_layer: np.ndarray                     # [layers, len(_COUNTS)]
    busy: dict[str, tuple[np.ndarray, np.ndarray]]   # unit -> (starts, ends), in order


def program_counts(cfg: ChipConfig, program: Sequence, layer_of: Sequence[int],
                   layers: int) -> ProgramCounts:
    """Each layer's counts (:func:`_instruction_counts`) summed over its instructions,
    and each unit's busy intervals (issue to :func:`~systolica.arch.timing.occupancy`,
    as :func:`~systolica.compiler.backend.unit_use.intervals`): one pass over the
    program, each distinct instruction worked out once."""
    table: list[tuple[int, ...]] = []
    units: list[str] = []
    occupancy: list[int] = []
    which = []
    cycles = []
    # (an Opcode hashes in Python: the common ones are told apart by identity, each
    # with a table of its own keyed by its deciding fields)
    mm, dma, vrun, wload = Opcode.MATMUL, Opcode.DMA, Opcode.VRUN, Opcode.WLOAD
    get_mm, get_dma, get_vrun = _GETTERS[mm], _GETTERS[dma], _GETTERS[vrun]
    ids_mm: dict = {}
    ids_dma: dict = {}
    ids_vrun: dict = {}
    ids_other: dict = {}
    wload_id = None
    for ins in program:
        op, f = ins.op, ins.fields
        try:
            if op is mm:
                key, into = get_mm(f), ids_mm
            elif op is wload:
                if wload_id is not None:
                    which.append(wload_id)
                    cycles.append(ins.cycle)
                    continue
                key, into = (), ids_other
            elif op is dma:
                key, into = get_dma(f), ids_dma
            elif op is vrun:
                key, into = get_vrun(f), ids_vrun
            else:
                key, into = (op, *f.items()), ids_other
        except KeyError:        # fields left out (hand-written): they are 0
            key, into = _key(op, f), ids_other
        k = into.get(key)
        if k is None:
            k = into[key] = len(table)
            table.append(_instruction_counts(cfg, op, f))
            units.append(timing.UNIT[op])
            occupancy.append(timing.occupancy(cfg, ins))
            if op is wload:
                wload_id = k
        which.append(k)
        cycles.append(ins.cycle)
    n = len(table)
    which_a = np.asarray(which, dtype=np.int64)
    owner = np.asarray(layer_of, dtype=np.int64)
    per = np.bincount(owner * n + which_a, minlength=layers * n).reshape(layers, n)
    by_layer = per @ np.asarray(table, dtype=np.int64).reshape(n, len(_COUNTS))
    start = np.asarray(cycles, dtype=np.int64)
    end = start + np.asarray(occupancy, dtype=np.int64)[which_a]
    names = list(dict.fromkeys(units))
    unit_of = np.asarray([names.index(u) for u in units], dtype=np.int64)[which_a]
    busy = {}
    for i, u in enumerate(names):
        if u not in unit_use.QUIET:
            mask = unit_of == i
            busy[u] = (start[mask], end[mask])
    return ProgramCounts(by_layer, busy)


def _busy_upto(busy: Mapping[str, tuple[np.ndarray, np.ndarray]], bounds: np.ndarray
               ) -> dict[str, np.ndarray]:
    """Per unit: its busy cycles before each cycle of `bounds` (a unit's intervals
    never overlap, and come in issue order)."""
    out = {}
    for unit, (s, e) in busy.items():
        cum = np.concatenate(([0], np.cumsum(e - s)))
        k = np.searchsorted(s, bounds, side="left")          # intervals starting before
        last = np.maximum(k - 1, 0)
        partial = np.where(k > 0, np.minimum(e[last], bounds) - s[last], 0)
        out[unit] = cum[last] + np.maximum(partial, 0) * (k > 0)
    return out


def _buffers(counts: np.ndarray, cfg: ChipConfig) -> dict[str, dict[str, int]]:
    width = {"cbuf": cfg.rows, "ubuf": cfg.rows, "acc": 4 * cfg.cols, "wbuf": cfg.macs}
    out = {}
    for b in BUFFERS:
        r, w = int(counts[_AT[f"{b}_reads"]]), int(counts[_AT[f"{b}_writes"]])
        out[b] = {"reads": r, "writes": w, "read_bytes": r * width[b],
                  "write_bytes": w * width[b]}
    return out


def _figures(cfg: ChipConfig, counts: np.ndarray, *, cycles: int, macs: int,
             fetch_bytes: int, instructions: int, clock_hz: float,
             table: energy_module.EnergyTable, busy: dict[str, int]) -> dict:
    """The fields a layer record and the run record share."""
    word = cfg.dram_word_bytes
    buffers = _buffers(counts, cfg)
    out = {
        "cycles": int(cycles),
        "time_s": cycles / clock_hz,
        "macs": int(macs),
        "array_macs": int(counts[_AT["array_rows"]]) * cfg.macs,
        "mac_utilization": macs / (cycles * cfg.macs) if cycles else 0.0,
        "dram_rd_bytes": int(counts[_AT["dram_rd_words"]]) * word,
        "dram_wr_bytes": int(counts[_AT["dram_wr_words"]]) * word,
        "fetch_rd_bytes": int(fetch_bytes),
        "ubuf_wr_bytes": buffers["ubuf"]["write_bytes"],
        "ubuf_rd_bytes": buffers["ubuf"]["read_bytes"],
        "buffers": buffers,
        "unit_busy_cycles": {u: int(n) for u, n in busy.items()},
        "instructions": int(instructions),
        "config_writes": int(counts[_AT["config_writes"]]),
        "accumulates": int(counts[_AT["accumulates"]]),
        "vector_lanes": int(counts[_AT["vector_lanes"]]),
    }
    out["energy_j"] = energy_module.estimate(out, table, cfg)
    return out


def network_records(cfg: ChipConfig, compiled, *, clock_hz: float | None = None,
                    energy: energy_module.EnergyTable | None = None,
                    processors: Mapping[str, str] | None = None,
                    operations: Sequence[Mapping] | None = None) -> RunRecords:
    """The records of `compiled` (:func:`systolica.compiler.compile_network`'s result)
    for chip `cfg`: a record per layer that has instructions and one for the run.
    `clock_hz`: the clock time is given at (None: :func:`default_clock_hz`);
    `energy`: the table (None: the published defaults). `processors`: layer name ->
    the processor an assignment put it on (default ``chip``); `operations`: the run
    record's operations (``name``, ``kind``, ``processor``; default its layers, on the
    chip)."""
    if clock_hz is not None and not clock_hz > 0:
        raise ValueError(f"network_records: clock_hz must be above 0 (Hz), not {clock_hz!r}")
    if compiled.cfg.to_dict() != cfg.to_dict():
        raise ValueError(f"network_records: the program was compiled for chip "
                         f"{compiled.cfg.name!r}, not for the {cfg.name!r} given: pass "
                         f"the chip it was compiled for (compiled.cfg)")
    clock_hz = float(clock_hz or default_clock_hz(cfg))
    table = energy or energy_module.DEFAULT
    graph = compiled.graph
    program, layer_of = compiled.program, compiled.layer_of
    nodes = len(graph.nodes)
    counted = program_counts(cfg, program, layer_of,
                             max(nodes, max(layer_of, default=-1) + 1))
    counts = counted.by_layer
    # instruction words fetched from DRAM: those from the fetcher's first on
    first = fetch.fetch_start(cfg, len(program), compiled.fetch_from)
    per_fetch = fetch.words_per_instruction(cfg) * cfg.dram_word_bytes
    owners = np.asarray(layer_of, dtype=np.int64)
    fetched = np.bincount(owners[first:], minlength=len(counts)) * per_fetch
    issued = np.bincount(owners, minlength=len(counts))
    spans = [(rec.start_cycle, rec.end_cycle) for rec in compiled.layers]
    bounds = np.array([c for span in spans for c in span] + [0, compiled.predicted_cycles],
                      dtype=np.int64)
    upto = _busy_upto(counted.busy, bounds)
    chip = cfg.to_dict()
    name = graph.name
    processors = processors or {}
    layers = []
    for k, rec in enumerate(compiled.layers):
        node = graph.nodes[rec.index]
        busy = {u: int(f[2 * k + 1] - f[2 * k]) for u, f in upto.items()}
        figures = _figures(cfg, counts[rec.index], cycles=rec.cycles, macs=rec.macs,
                           fetch_bytes=int(fetched[rec.index]),
                           instructions=int(issued[rec.index]), clock_hz=clock_hz,
                           table=table, busy={u: n for u, n in busy.items() if n})
        layers.append({"schema_version": SCHEMA_VERSION, "kind": "layer", "network": name,
                       "layer": rec.name, "index": rec.index, "op": type(node.op).__name__,
                       "processor": processors.get(rec.name, "chip"),
                       "M": rec.M, "K": rec.K, "N": rec.N, "split": rec.split,
                       "first_cycle": rec.first_cycle, "start_cycle": rec.start_cycle,
                       "end_cycle": rec.end_cycle, **figures, "chip": chip})
    total = counts.sum(axis=0)
    busy = {u: int(f[-1] - f[-2]) for u, f in upto.items()}
    run = {"schema_version": SCHEMA_VERSION, "kind": "run", "network": name,
           **_figures(cfg, total, cycles=compiled.predicted_cycles, macs=compiled.macs,
                      fetch_bytes=int(fetched.sum()), instructions=len(program),
                      clock_hz=clock_hz, table=table, busy=busy),
           "clock_hz": clock_hz, "layers": len(layers),
           "operations": list(operations) if operations is not None else
           [{"name": layer["layer"], "kind": layer["op"], "processor": layer["processor"]}
            for layer in layers],
           "energy_table_pj": table.to_dict(), "energy_source": energy_module.SOURCE,
           "sram_bytes": energy_module.sram_sizes(cfg), "chip": chip}
    return RunRecords(run, layers)


#: The run figures :func:`merge` adds up.
_SUMMED = ("cycles", "time_s", "macs", "array_macs", "dram_rd_bytes", "dram_wr_bytes",
           "fetch_rd_bytes", "ubuf_wr_bytes", "ubuf_rd_bytes", "instructions",
           "config_writes", "accumulates", "vector_lanes", "layers")


def merge(parts: Sequence[RunRecords], name: str, *,
          operations: Sequence[Mapping] | None = None,
          segments: Sequence[int] | None = None) -> RunRecords:
    """One run of several programs run one after the other on one chip (an ONNX
    model's chip segments): the layers of all, each with its ``segment`` (its index
    in `segments`, default its place in `parts`), and a run record whose counts,
    cycles, time and energy are the parts' sums. `operations`: the run's operations
    and their processors (default: the parts' own)."""
    if not parts:
        raise ValueError("merge: no runs to merge")
    first = parts[0].run
    run = {k: v for k, v in first.items()}
    run["network"] = name
    for key in _SUMMED:
        run[key] = sum(p.run[key] for p in parts)
    chip = first["chip"]
    macs_per_cycle = 1
    for k in ("tile_rows", "tile_cols", "tile_size", "tile_size"):
        macs_per_cycle *= chip[k]
    run["mac_utilization"] = run["macs"] / (run["cycles"] * macs_per_cycle) \
        if run["cycles"] else 0.0
    run["buffers"] = {b: {k: sum(p.run["buffers"][b][k] for p in parts)
                          for k in first["buffers"][b]} for b in BUFFERS}
    busy: dict[str, int] = {}
    for p in parts:
        for u, n in p.run["unit_busy_cycles"].items():
            busy[u] = busy.get(u, 0) + n
    run["unit_busy_cycles"] = busy
    run["energy_j"] = {k: sum(p.run["energy_j"][k] for p in parts)
                       for k in first["energy_j"]}
    run["operations"] = list(operations) if operations is not None else \
        [op for p in parts for op in p.run["operations"]]
    run["segments"] = len(parts)
    segments = list(range(len(parts))) if segments is None else list(segments)
    layers = [{**layer, "network": name, "segment": seg}
              for seg, p in zip(segments, parts) for layer in p.layers]
    return RunRecords(run, layers)


# -- files ----------------------------------------------------------------------------
def _as_runs(records: RunRecords | Sequence[RunRecords]) -> list[RunRecords]:
    return [records] if isinstance(records, RunRecords) else list(records)


def json_text(records: RunRecords | Sequence[RunRecords]) -> str:
    """A records file's text: one run's ``{"schema_version", "run", "layers"}``, or
    ``{"schema_version", "runs": [...]}`` for several."""
    runs = _as_runs(records)
    doc = runs[0].to_json() if len(runs) == 1 else {
        "schema_version": SCHEMA_VERSION, "runs": [r.to_json() for r in runs]}
    return json.dumps(doc, indent=1) + "\n"


def write_json(path: str, records: RunRecords | Sequence[RunRecords]) -> None:
    """Write `records` (one run's or several) as JSON, atomically."""
    from systolica import files
    files.write_atomic(path, json_text(records).encode())


def flatten(record: Mapping, prefix: str = "") -> dict:
    """A record as flat columns: nested keys joined by dots (``buffers.cbuf.reads``,
    ``energy_j.total``, ``chip.tile_rows``); lists as JSON text."""
    out = {}
    for k, v in record.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{key}."))
        elif isinstance(v, (list, tuple)):
            out[key] = json.dumps(v)
        else:
            out[key] = v
    return out


def csv_text(records: RunRecords | Sequence[RunRecords]) -> str:
    """One row per layer of every run, flat columns (:func:`flatten`), in the order
    of the first layer's; the header names them."""
    rows = [flatten(layer) for r in _as_runs(records) for layer in r.layers]
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def write_csv(path: str, records: RunRecords | Sequence[RunRecords]) -> None:
    """Write the layer records of `records` as CSV (:func:`csv_text`), atomically."""
    from systolica import files
    files.write_atomic(path, csv_text(records).encode())


def with_chips(bench: Sequence[dict]) -> list[dict]:
    """The bench's records (build/bench.json), each that names its chip by a preset's
    name (``config``) with that chip's full configuration (``chip``) and the schema
    version added (docs/records.md, "Bench records"); the others as they are."""
    from systolica.arch.config import PRESETS
    out = []
    for record in bench:
        name = record.get("config")
        if isinstance(name, str) and name in PRESETS:
            record = {**record, "schema_version": SCHEMA_VERSION,
                      "chip": PRESETS[name].to_dict()}
        out.append(record)
    return out
