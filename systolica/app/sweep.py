"""``systolica sweep SPEC.toml``: a design-space sweep, chips x models, on Dask.

A spec file (TOML, docs/sweeps.md) names a base chip (a preset or a chip file), the
ChipConfig fields to sweep (the product of their values; an axis may also set several
fields together), the clock, and the models (built-in or ONNX files). Every point (a
chip and a model) is compiled, compile-only: the compiler's predicted cycles are the
chip's exact cycles. A chip the constructor refuses is recorded as ``refused`` with
ConfigError's text, a model the compiler cannot place on a chip as ``failed`` with
CompileError's; neither stops the sweep.

The points run as tasks on a Dask cluster: a local one (processes, ``--workers N``) by
default, an existing one by its scheduler's address, or one that dask-jobqueue
starts on a SLURM batch system. The client alone reads and writes the result cache
(``sweep/`` in the user cache directory), so workers need no shared file system;
finished points are reused by an interrupted or repeated sweep.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import inspect
import itertools
import json
import math
import numbers
import os
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from systolica.app.user_cache import cache_root, chip_hash
from systolica.app.user_cache import digest as _digest
from systolica.arch.config import PRESETS, ChipConfig, ConfigError

#: Sweep keys besides ChipConfig's fields: the clock (MHz) time is reckoned at.
CLOCK_KEY = "clock_mhz"
#: The spec file's top-level keys.
SPEC_KEYS = ("name", "base", "clock_mhz", "sweep", "models", "rtl_sample", "area")
#: A model table's keys.
MODEL_KEYS = ("name", "onnx", "args", "options", "seed", "label")
#: Bumped when what a cached result holds changes (:func:`point_metrics`, :func:`evaluate`).
RESULT_SCHEMA = 2


def builtin_models() -> dict[str, Callable]:
    """The models a spec may name: builders of a Graph or Network (keyword `args`)."""
    from systolica.app import demo
    from systolica.models import zoo
    return {"resnet50": zoo.resnet50, "vgg19": zoo.vgg19, "demo_cnn": demo.cnn,
            "demo_mlp": demo.mlp, "small_cnn": zoo.small_cnn,
            "bottleneck_block": zoo.bottleneck_block,
            "inception_block": zoo.inception_block,
            "inverted_residual_block": zoo.inverted_residual_block}


#: compile_network's keyword options a model may carry (``options = {chain = ...}``).
COMPILE_OPTIONS = ("chain", "weights", "buffers", "split", "mapping", "fetch_from")


# -- the spec ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Model:
    """One model of a sweep: a built-in by name (with builder arguments) or an ONNX
    file (with the seed of its random data), and compile_network's options."""
    label: str
    name: str | None = None
    onnx: str | None = None
    args: Mapping = field(default_factory=dict)
    options: Mapping = field(default_factory=dict)
    seed: int = 0

    @property
    def key(self) -> str:
        """The model's hash: what it is built from (an ONNX file by its bytes)."""
        what = {"name": self.name, "args": dict(self.args), "options": dict(self.options),
                "seed": self.seed}
        if self.onnx:
            what["onnx"] = hashlib.sha256(Path(self.onnx).read_bytes()).hexdigest()
        return _digest(what)

    def build(self):
        if self.onnx:
            from systolica.compiler.frontend import onnx_import
            return onnx_import.load(self.onnx, seed=self.seed)
        return builtin_models()[self.name](**dict(self.args))


@dataclass(frozen=True)
class Spec:
    name: str
    base: ChipConfig
    axes: tuple[tuple[str, tuple[dict, ...]], ...]   # axis name, the fields each value sets
    models: tuple[Model, ...]
    clock_mhz: float | None = None
    source: str = "<spec>"

    def points(self) -> list[dict]:
        """Every combination of the axes' values: the fields (and clock) each sets."""
        out = []
        for combo in itertools.product(*(values for _, values in self.axes)):
            merged: dict = {}
            for part in combo:
                merged.update(part)
            out.append(merged)
        return out


def _field_types() -> dict[str, type]:
    """ChipConfig's sweepable fields and the type each value must have."""
    return {f.name: {"int": int, "bool": bool}.get(str(f.type), Mapping)
            for f in dataclasses.fields(ChipConfig) if f.name != "name"}


#: Fields that may be 0 (the others are sizes or counts of at least 1).
_MAY_BE_ZERO = ("ubuf_base", "ubuf_rows", "core_imem_bytes", "core_dmem_bytes")


def _check_value(where: str, key: str, value) -> None:
    """A value of the wrong kind for its field (a bool for a size, 0 tiles): an error
    naming the key, whichever combination it would be in."""
    if key == CLOCK_KEY:
        if not isinstance(value, numbers.Real) or isinstance(value, bool) \
                or not 0 < value < math.inf:
            raise ConfigError(f"{where}: {CLOCK_KEY} must be a positive number of MHz, "
                              f"not {value!r}")
        return
    kind = _field_types()[key]
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {key} must be true or false, not {value!r}")
    elif kind is int:
        lo = 0 if key in _MAY_BE_ZERO else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < lo:
            raise ConfigError(f"{where}: {key} must be an integer of at least {lo}, "
                              f"not {value!r}")
    elif key == "latency":
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: latency must be a table of operation -> cycles "
                              f"(e.g. {{acc_read = 2}}), not {value!r}")


def _axis_value(where: str, key: str, value) -> dict:
    """The fields one value of axis `key` sets: ``{key: value}``, or the table's keys
    for a table value (fields set together)."""
    fields = _field_types()
    if isinstance(value, Mapping) and key != "latency":
        if not value:
            raise ConfigError(f"{where}: an empty table sets nothing; give the fields "
                              f"it sets, e.g. {{tile_rows = 4, tile_cols = 4}}")
        out = {}
        for k, v in value.items():
            if k not in fields and k != CLOCK_KEY:
                raise ConfigError(f"{where}.{k}: {k!r} is not a ChipConfig field; the "
                                  f"fields are {', '.join(fields)} (and {CLOCK_KEY})")
            _check_value(f"{where}.{k}", k, v)
            out[k] = dict(v) if k == "latency" else v
        return out
    if key not in fields and key != CLOCK_KEY:
        raise ConfigError(f"{where}: {key!r} is not a ChipConfig field; sweep one of "
                          f"{', '.join(fields)} or {CLOCK_KEY}, or give a table of fields "
                          f"set together (e.g. grid = [{{tile_rows = 2, tile_cols = 2}}])")
    _check_value(where, key, value)
    if key == "latency":
        value = {**ChipConfig.__dataclass_fields__["latency"].default_factory(),
                 **dict(value)}
    return {key: value}


def _base_chip(where: str, text) -> ChipConfig:
    """The sweep's base chip: a preset, or a chip file (TOML or JSON; a relative path
    is the spec file's neighbour when it is there)."""
    from systolica.arch import chipfile
    if isinstance(text, str) and text.endswith((".toml", ".json")):
        path = Path(where.split(": ")[0]).parent / text
        return chipfile.load(path if path.exists() else text)
    if isinstance(text, str) and text in PRESETS:
        return PRESETS[text]
    raise ConfigError(f"{where}: base must be a preset ({', '.join(sorted(PRESETS))}) or "
                      f"a chip file ending in .toml or .json, not {text!r}")


def _model(where: str, table, spec_dir: Path) -> Model:
    if isinstance(table, str):
        table = {"name": table}
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: a model is a table, e.g. {{name = \"resnet50\"}} or "
                          f"{{onnx = \"model.onnx\"}}, not {table!r}")
    unknown = [k for k in table if k not in MODEL_KEYS]
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; a "
                          f"model has {', '.join(MODEL_KEYS)}")
    if ("name" in table) == ("onnx" in table):
        raise ConfigError(f"{where}: give a model either name (a built-in: "
                          f"{', '.join(builtin_models())}) or onnx (a file), one of them")
    builtins = builtin_models()
    onnx = None
    if "name" in table and table["name"] not in builtins:
        raise ConfigError(f"{where}.name: unknown model {table['name']!r}; the built-in "
                          f"ones are {', '.join(builtins)} (or give onnx = \"FILE\")")
    if "onnx" in table:
        path = Path(str(table["onnx"]))
        path = path if path.is_absolute() else spec_dir / path
        if not path.is_file():
            raise ConfigError(f"{where}.onnx: no file {str(path)!r}")
        onnx = str(path)
    args = table.get("args", {})
    if not isinstance(args, Mapping):
        raise ConfigError(f"{where}.args: a table of the builder's arguments, not {args!r}")
    if "name" in table:
        params = inspect.signature(builtins[table["name"]]).parameters
        bad = [k for k in args if k not in params]
        if bad:
            raise ConfigError(f"{where}.args: {table['name']} takes no argument(s) "
                              f"{', '.join(map(repr, bad))}; it takes "
                              f"{', '.join(params)}")
    elif args:
        raise ConfigError(f"{where}.args: an ONNX model takes no builder arguments; use "
                          f"seed for its random data")
    options = table.get("options", {})
    if not isinstance(options, Mapping) or any(k not in COMPILE_OPTIONS for k in options):
        raise ConfigError(f"{where}.options: compile_network's options are "
                          f"{', '.join(COMPILE_OPTIONS)}, not {options!r}")
    seed = table.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"{where}.seed: a non-negative integer, not {seed!r}")
    label = table.get("label") or table.get("name") or Path(onnx).stem
    if not isinstance(label, str):
        raise ConfigError(f"{where}.label: a string, not {label!r}")
    return Model(label=label, name=table.get("name"), onnx=onnx, args=dict(args),
                 options=dict(options), seed=seed)


def parse_spec(data: Mapping, *, source: str = "<spec>",
               spec_dir: Path | None = None) -> Spec:
    """The sweep a spec's mapping describes; a ConfigError naming `source` and the key
    at fault otherwise."""
    spec_dir = spec_dir or Path.cwd()
    unknown = [k for k in data if k not in SPEC_KEYS]
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {', '.join(map(repr, unknown))}; a "
                          f"sweep spec has {', '.join(SPEC_KEYS)} (docs/sweeps.md)")
    name = data.get("name", Path(source).stem)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{source}: name must be a non-empty string, not {name!r}")
    base = _base_chip(f"{source}: base", data.get("base", "base"))
    sweep = data.get("sweep", {})
    if not isinstance(sweep, Mapping):
        raise ConfigError(f"{source}: [sweep] is a table of field = [values], not {sweep!r}")
    axes = []
    for key, values in sweep.items():
        where = f"{source}: sweep.{key}"
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}: give a non-empty list of values, e.g. "
                              f"{key} = [...], not {values!r}")
        axes.append((key, tuple(_axis_value(f"{where}[{i}]", key, v)
                                for i, v in enumerate(values))))
    setter: dict[str, str] = {}
    for key, values in axes:
        for f in dict.fromkeys(k for v in values for k in v):
            if f in setter:
                raise ConfigError(f"{source}: sweep.{key} and sweep.{setter[f]} both set "
                                  f"{f}; set each field on one axis only")
            setter[f] = key
    clock = data.get(CLOCK_KEY)
    if clock is not None:
        _check_value(f"{source}: {CLOCK_KEY}", CLOCK_KEY, clock)
    models = data.get("models")
    if not isinstance(models, list) or not models:
        raise ConfigError(f"{source}: models is missing or empty; give at least one, "
                          f"e.g. [[models]] name = \"demo_cnn\" (built-in: "
                          f"{', '.join(builtin_models())}) or onnx = \"model.onnx\"")
    parsed = tuple(_model(f"{source}: models[{i}]", m, spec_dir) for i, m in enumerate(models))
    labels = [m.label for m in parsed]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"{source}: models: two models are labelled alike ({labels}); "
                          f"give each a label of its own")
    return Spec(name=name, base=base, axes=tuple(axes), models=parsed,
                clock_mhz=clock, source=source)


def load_spec(path: str | Path) -> Spec:
    """The sweep the spec file at `path` describes (TOML)."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the sweep spec ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; a sweep spec is TOML") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML ({e}); see docs/sweeps.md") from None
    return parse_spec(data, source=str(path), spec_dir=path.parent)


def grid_spec(base: str, grid: Iterable[str], models: Iterable[str],
              clock_mhz: float | None = None) -> Spec:
    """The quick form: ``FIELD=V1,V2,...`` strings (``--grid``) and model names."""
    sweep: dict = {}
    for item in grid:
        key, eq, values = item.partition("=")
        if not eq or not values:
            raise ConfigError(f"--grid {item!r}: give FIELD=V1,V2,... (e.g. "
                              f"tile_size=4,8)")
        sweep[key.strip()] = [literal(v) for v in values.split(",")]
    data = {"name": "grid", "base": base, "sweep": sweep,
            "models": [{"name": m} if not m.endswith(".onnx") else {"onnx": m}
                       for m in models]}
    if clock_mhz is not None:
        data[CLOCK_KEY] = clock_mhz
    return parse_spec(data, source="--grid")


def literal(text: str):
    text = text.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


# -- one point -------------------------------------------------------------------------------
def chip_for(base: ChipConfig, params: Mapping) -> ChipConfig:
    """`base` with the point's fields (the clock is not the chip's), named after them:
    ``<base>-<8 hex digits>``. A ConfigError if the combination is not a chip."""
    fields = {k: v for k, v in params.items() if k != CLOCK_KEY}
    return dataclasses.replace(base, name=_chip_name(base, params), **fields)


def _chip_name(base: ChipConfig, params: Mapping) -> str:
    fields = {k: v for k, v in params.items() if k != CLOCK_KEY}
    return f"{base.name}-{_digest(fields)[:8]}" if fields else base.name


def chip_sram_bytes(cfg: ChipConfig) -> int:
    """On-chip SRAM: the CBUF (and UBUF), the accumulators, the instruction memory and
    the management core's memories."""
    from systolica.arch import isa
    return (cfg.cbuf_physical_rows * cfg.rows + cfg.acc_depth * cfg.cols * 4
            + cfg.imem_depth * isa.WORD_BITS // 8 + cfg.core_imem_bytes + cfg.core_dmem_bytes)


def point_metrics(cfg: ChipConfig, compiled, *, clock_hz: float | None = None
                  ) -> tuple[dict, list[dict]]:
    """Per run and per layer: the records of :mod:`systolica.app.records` (cycles, MAC
    utilisation, DRAM bytes, each buffer's accesses, unit busy cycles, time at the
    clock, energy; docs/records.md) as flat table columns: ``energy_j`` the total in
    joules, ``energy_j.<component>`` its parts."""
    from systolica.app import records
    recs = records.network_records(cfg, compiled, clock_hz=clock_hz)

    def columns(record: dict) -> dict:
        flat = records.flatten({k: v for k, v in record.items()
                                if k not in _NOT_COLUMNS})
        flat["energy_j"] = flat.pop("energy_j.total")
        return flat

    run = columns(recs.run)
    run["dram_bytes"] = run["dram_rd_bytes"] + run["dram_wr_bytes"]
    return run, [columns(layer) for layer in recs.layers]


#: Record fields a sweep's table leaves out: the chip is the point's own columns, the
#: layers its layer table, the rest constant over a sweep.
_NOT_COLUMNS = ("schema_version", "kind", "chip", "layers", "operations",
                "energy_table_pj", "energy_source", "network")


#: Graphs built in this process, by model key (a worker builds ResNet-50 once).
_GRAPHS: dict[str, object] = {}


def evaluate(point: dict) -> dict:
    """Run one point (a task on a worker): the chip, the model compiled for it, its
    metrics, and on request its RTL run and its area. Never raises for a chip or model
    that does not fit: the record says ``refused`` or ``failed`` and why."""
    from systolica.compiler import CompileError, compile_network
    record = {"status": "ok", "error": None}
    try:
        cfg = ChipConfig(**point["chip"])
    except ConfigError as e:
        return {**record, "status": "refused", "error": str(e), "layers": []}
    model = point["model"]
    graph = _GRAPHS.get(point["model_key"])
    if graph is None:               # once per worker and model
        graph = _GRAPHS[point["model_key"]] = Model(**model).build()
    # the wall time, and the worker's CPU time (on a shared machine the wall time
    # counts others' work too)
    began, cpu = time.perf_counter(), time.process_time()
    try:
        compiled = compile_network(cfg, graph, **model["options"])
    except (CompileError, ConfigError) as e:
        return {**record, "status": "failed", "error": str(e), "layers": [],
                "compile_s": time.perf_counter() - began}
    record["compile_s"] = time.perf_counter() - began
    record["compile_cpu_s"] = time.process_time() - cpu
    run, layers = point_metrics(cfg, compiled, clock_hz=point["clock_hz"])
    record.update(run)
    record["layers"] = layers
    if point.get("rtl"):
        from systolica.app.flow import run_network
        ran = run_network(compiled, per_layer=False, harness="cxx")
        record["rtl_cycles"] = ran.measured_cycles
        record["rtl_matches"] = bool(ran.rtl_matches_golden and ran.rtl_matches_numpy
                                     and ran.measured_cycles == compiled.predicted_cycles)
    return record


def synthesise(chip: dict) -> dict:
    """The area of one chip (a task): :func:`systolica.app.area.synthesise`, as a dict."""
    from systolica.app import area
    try:
        return dataclasses.asdict(area.synthesise(ChipConfig(**chip)))
    except area.AreaError as e:
        return {"error": str(e)}


# -- the cache -------------------------------------------------------------------------------
def tool_version() -> str:
    """The package's version and a hash of the sources a result depends on (the
    compiler, the chip's facts, the models): a change to any of them makes every cached
    result stale (a change to what :func:`point_metrics` records bumps
    :data:`RESULT_SCHEMA`)."""
    from importlib import metadata

    import systolica
    import systolica.compiler
    try:
        version = metadata.version("systolica")
    except metadata.PackageNotFoundError:
        version = "0"
    h = hashlib.sha256()
    roots = [Path(systolica.compiler.__file__).parent, Path(systolica.__file__).parent / "arch",
             Path(systolica.__file__).parent / "models"]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return f"{version}+{h.hexdigest()[:12]}"


class ResultCache:
    """One JSON file per (chip, model, tool version) under ``<root>/sweep/``; written
    atomically by the client only."""

    def __init__(self, root: Path | None = None, version: str | None = None):
        self.dir = (root or cache_root()) / "sweep"
        self.version = version or tool_version()

    def path(self, chip_key: str, model_key: str, clock_hz) -> Path:
        key = _digest([chip_key, model_key, clock_hz, self.version, RESULT_SCHEMA])[:24]
        return self.dir / key[:2] / f"{key}.json"

    def get(self, *key) -> dict | None:
        try:
            return json.loads(self.path(*key).read_text())
        except (OSError, ValueError):
            return None

    def put(self, record: dict, *key) -> None:
        path = self.path(*key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)


# -- the engine ------------------------------------------------------------------------------
@dataclass
class Engine:
    """Where the tasks run: a local cluster of `workers` processes (`threads`: one
    process, threads), the scheduler at `address`, or SLURM jobs (`slurm`: keyword
    arguments of dask_jobqueue.SLURMCluster, `jobs` of them)."""
    workers: int = 2
    address: str | None = None
    slurm: dict | None = None
    jobs: int = 1
    threads: bool = False

    def cluster(self):
        """The cluster this engine starts (None for a running one, by `address`)."""
        if self.address:
            return None
        if self.slurm is not None:
            from dask_jobqueue import SLURMCluster
            return SLURMCluster(**{"cores": 1, "memory": "4GB",
                                   "scheduler_options": {"dashboard_address": ":0"},
                                   **self.slurm})
        import logging

        from dask.distributed import LocalCluster
        # the workers' own log (a nanny's notes on a slow shutdown) only for errors
        return LocalCluster(n_workers=1 if self.threads else self.workers,
                            threads_per_worker=self.workers if self.threads else 1,
                            processes=not self.threads, dashboard_address=":0",
                            silence_logs=logging.ERROR)

    def client(self):
        """A client of the cluster, and the cluster if this engine started it."""
        from dask.distributed import Client
        cluster = self.cluster()
        if cluster is None:
            return Client(self.address), None
        if self.slurm is not None:
            cluster.scale(jobs=self.jobs)
        return Client(cluster), cluster


@dataclass
class SweepResult:
    spec: Spec
    points: list[dict]            # one row per (chip, model): params, status, metrics
    layers: list[dict]            # one row per layer of each ok point
    computed: int                 # points compiled by this run (the others came cached)
    seconds: float


def plan(spec: Spec, *, rtl_sample: int = 0) -> list[dict]:
    """The tasks of a sweep, in order: chip fields, model, clock and the keys."""
    out = []
    for index, params in enumerate(spec.points()):
        clock = params.get(CLOCK_KEY, spec.clock_mhz)
        try:
            cfg = chip_for(spec.base, params)
            chip, ckey, refused = cfg.to_dict(), chip_hash(cfg), None
        except ConfigError as e:
            fields = {k: v for k, v in params.items() if k != CLOCK_KEY}
            chip = {**spec.base.to_dict(), **fields, "name": _chip_name(spec.base, params)}
            ckey, refused = _digest(chip)[:16], str(e)
        for model in spec.models:
            out.append({"index": index, "params": params, "chip": chip, "chip_key": ckey,
                        "refused": refused, "model": dataclasses.asdict(model),
                        "model_label": model.label, "model_key": model.key,
                        "clock_hz": clock * 1e6 if clock else None, "rtl": False})
    if rtl_sample:
        # the RTL confirms the first K chips that compile the small models (ResNet-50
        # would take hours on the RTL); chosen before the run, the same every time
        small = [t for t in out if not t["refused"]
                 and t["model"]["name"] in ("demo_cnn", "demo_mlp", "small_cnn")]
        for t in small[:rtl_sample]:
            t["rtl"] = True
    return out


def run_sweep(spec: Spec, engine: Engine | None = None, *, cache: ResultCache | None = None,
              area: bool = False, rtl_sample: int = 0, progress: bool = False,
              on_result: Callable[[dict], None] | None = None) -> SweepResult:
    """Run every point of `spec` not in the cache on `engine`'s cluster; the rows of
    all of them. `on_result` is told of each record as it arrives (after it is cached)."""
    began = time.perf_counter()
    engine = engine or Engine()
    cache = cache or ResultCache()
    tasks = plan(spec, rtl_sample=rtl_sample)
    records: dict[int, dict] = {}
    todo = []
    for i, t in enumerate(tasks):
        key = (t["chip_key"], t["model_key"], t["clock_hz"])
        hit = cache.get(*key)
        if t["refused"]:
            records[i] = {"status": "refused", "error": t["refused"], "layers": []}
        elif hit is not None and (not t["rtl"] or "rtl_cycles" in hit):
            records[i] = hit
        else:
            todo.append(i)
    areas: dict[str, dict] = {}
    chips = {} if not area else {t["chip_key"]: t["chip"] for t in tasks if not t["refused"]}
    if chips:
        from systolica.app import area as area_
        for key, chip in list(chips.items()):
            known = area_.lookup(ChipConfig(**chip))
            if known is not None:
                areas[key] = dataclasses.asdict(known)
                del chips[key]
    if todo or chips:
        client, cluster = engine.client()
        try:
            _gather(client, tasks, todo, records, cache, chips, areas, progress, on_result)
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    points, layers = _rows(spec, tasks, records, areas)
    return SweepResult(spec, points, layers, len(todo), time.perf_counter() - began)


def _gather(client, tasks, todo, records, cache, chips, areas, progress, on_result) -> None:
    from dask.distributed import as_completed
    futures = {client.submit(evaluate, tasks[i], key=f"point-{tasks[i]['chip_key']}-"
                             f"{tasks[i]['model_key'][:12]}-{i}", pure=False): ("point", i)
               for i in todo}
    # the areas first: a chip's synthesis takes longer than most compiles, and the
    # workers run them side by side, one chip each
    futures.update({client.submit(synthesise, chip, key=f"area-{key}", pure=False,
                                  priority=1): ("area", key) for key, chip in chips.items()})
    bar = _progress(len(futures)) if progress else None
    try:
        for future in as_completed(futures):
            kind, what = futures[future]
            result = future.result()
            if kind == "area":
                areas[what] = result
                if not result.get("error"):
                    from systolica.app import area
                    area.store(ChipConfig(**chips[what]), area.Area(**result))
            else:
                t = tasks[what]
                cache.put(result, t["chip_key"], t["model_key"], t["clock_hz"])
                records[what] = result
                if on_result is not None:
                    on_result(result)
            if bar is not None:
                bar[0].advance(bar[1])
    finally:
        for future in futures:
            future.cancel()
        if bar is not None:
            bar[0].stop()


def _progress(total: int):
    from rich import progress as rp
    bar = rp.Progress(rp.TextColumn("sweep"), rp.BarColumn(), rp.MofNCompleteColumn(),
                      rp.TimeElapsedColumn(), rp.TextColumn("ETA"), rp.TimeRemainingColumn())
    bar.start()
    return bar, bar.add_task("points", total=total)


#: The point table's leading columns, in order; the swept fields follow them.
POINT_COLUMNS = ("point", "chip", "model", "status", "cycles", "mac_utilization",
                 "dram_bytes", "time_s", "energy_j", "chip_macs", "chip_sram_bytes", "luts",
                 "ffs", "dsps", "brams", "synth_s", "macs", "dram_rd_bytes", "dram_wr_bytes",
                 "ubuf_wr_bytes", "ubuf_rd_bytes", "instructions", "compile_s", "compile_cpu_s",
                 "rtl_cycles", "rtl_matches", "clock_mhz", "error")


def _rows(spec: Spec, tasks, records, areas) -> tuple[list[dict], list[dict]]:
    swept = []
    for t in tasks:
        swept += [k for k in t["params"] if k not in swept]
    points, layers = [], []
    for i, t in enumerate(tasks):
        rec = records.get(i)
        if rec is None:
            continue
        chip = t["chip"]
        try:
            cfg = ChipConfig(**chip) if not t["refused"] else None
        except ConfigError:
            cfg = None
        area = areas.get(t["chip_key"], {})
        row = {"point": t["index"], "chip": chip["name"], "model": t["model_label"],
               "status": rec["status"],
               "chip_macs": cfg.macs if cfg else None,
               "chip_sram_bytes": chip_sram_bytes(cfg) if cfg else None,
               "luts": area.get("luts"), "ffs": area.get("ffs"), "dsps": area.get("dsps"),
               "brams": area.get("brams"), "synth_s": area.get("seconds"),
               "clock_mhz": t["clock_hz"] / 1e6 if t["clock_hz"] else None}
        row.update({k: v for k, v in rec.items() if k != "layers"})
        if area.get("error"):
            row["error"] = "; ".join(filter(None, (row.get("error"), area["error"])))
        row = {**{c: row.get(c) for c in POINT_COLUMNS},
               **{k: _cell(t["params"].get(k, chip.get(k))) for k in swept}}
        points.append(row)
        for layer in rec.get("layers", []):
            layers.append({"point": t["index"], "chip": chip["name"],
                           "model": t["model_label"],
                           **{k: v for k, v in layer.items() if k not in ("chip", "model")}})
    return points, layers


def _cell(value):
    """A table cell: a latency table as its JSON text."""
    return json.dumps(dict(value), sort_keys=True) if isinstance(value, Mapping) else value


# -- output ----------------------------------------------------------------------------------
def write_csv(path: Path, rows: list[dict]) -> None:
    columns = list(dict.fromkeys(k for row in rows for k in row))
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", newline="") as f:
        out = csv.DictWriter(f, columns)
        out.writeheader()
        out.writerows(rows)
    os.replace(tmp, path)


def write_parquet(path: Path, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    columns = list(dict.fromkeys(k for row in rows for k in row))
    table = pa.Table.from_pylist([{c: row.get(c) for c in columns} for row in rows])
    pq.write_table(table, path)


def write_outputs(result: SweepResult, out: Path, *, png: bool = False) -> list[Path]:
    """``points.csv``, ``layers.csv`` (and ``.parquet``), ``report.html`` (and
    ``pareto.png``) in `out`; the paths written."""
    from systolica.app import sweep_report
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, rows in (("points", result.points), ("layers", result.layers)):
        write_csv(out / f"{stem}.csv", rows)
        written.append(out / f"{stem}.csv")
        if rows:
            write_parquet(out / f"{stem}.parquet", rows)
            written.append(out / f"{stem}.parquet")
    html = sweep_report.html(result.spec.name, result.points, result.layers,
                             seconds=result.seconds)
    (out / "report.html").write_text(html)
    written.append(out / "report.html")
    if png:
        sweep_report.pareto_png(out / "pareto.png", result.spec.name, result.points)
        written.append(out / "pareto.png")
    return written


def table_head(points: list[dict], count: int = 12) -> str:
    """The point table's first rows as aligned text (what the command prints)."""
    cols = ["point", "model", "status", "cycles", "mac_utilization", "dram_bytes",
            "time_s", "chip_macs", "chip_sram_bytes"]
    if any(p.get("luts") is not None for p in points):
        cols += ["luts", "ffs", "dsps", "brams"]
    if any(p.get("rtl_cycles") is not None for p in points):
        cols += ["rtl_cycles", "rtl_matches"]
    swept = [k for k in (points[0] if points else {}) if k not in POINT_COLUMNS]
    cols += swept

    def show(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        return "" if v is None else str(v)
    rows = [[show(p.get(c)) for c in cols] for p in points[:count]]
    width = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, width))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, width)) for r in rows]
    return "\n".join(lines)
