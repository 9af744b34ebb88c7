"""Chips described in files (docs/chip.md, "Chip files"): a TOML file of ChipConfig
fields, read with the standard library's :mod:`tomllib`, and written back by :func:`dump`.

A chip file holds ChipConfig's fields by name, the latency table as the table
``[latency]``; ``base = "tiny"`` starts from a preset, so that the file gives only what
differs. The table ``[energy]`` belongs to the energy model (per-access energies a chip
may override) and is left to it here. A chip's name is the file's stem unless the file
says ``name``.

Every fault is a :class:`ConfigError` that names the file, the key and its line, the
allowed range or values, and what to do. The JSON chip files of
:meth:`ChipConfig.from_json` are read too (a path ending in ``.json``).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import re
import textwrap
import tomllib
from pathlib import Path

from systolica import files
from systolica.arch import isa
from systolica.arch.config import (
    _NAME,
    CORE_MEMORY_MAX,
    CORE_MEMORY_MIN,
    DEFAULT_LATENCY,
    MAX_LATENCY,
    MAX_NAME,
    PRESETS,
    VPU_STAGES,
    ChipConfig,
    _short,
)
from systolica.arch.errors import ConfigError

#: Where the docs describe chip files (quoted by every message).
DOCS = 'docs/chip.md, "Chip files"'

#: Keys of a chip file besides ChipConfig's fields, and the tables it may hold.
BASE_KEY = "base"
TABLES = {"latency": "operation = cycles, e.g. acc_read = 2",
          "energy": "per-access energies, read by the energy model"}

_FIELDS = {f.name: f for f in dataclasses.fields(ChipConfig)}
_INTEGER_KEYS = [n for n, f in _FIELDS.items() if f.type == "int"]
_FLAG_KEYS = [n for n, f in _FIELDS.items() if f.type == "bool"]

#: The values a key may take, as a chip file's reader says them, and the bounds checked
#: before the chip is built (ChipConfig checks the relations between keys itself).
RANGES: dict[str, tuple[str, int | None, int | None]] = {
    "name": (f"1 to {MAX_NAME} letters, digits, '_', '.' or '-'", None, None),
    "tile_rows": (f"an integer of at least 1 (at most {isa.ROUTE_GROUPS} with "
                  f"general_lanes)", 1, None),
    "tile_cols": (f"an integer of at least 1 (at most {isa.ROUTE_GROUPS} with "
                  f"general_lanes)", 1, None),
    "tile_size": ("an integer from 1 to 65535 (its 16-bit field in the HWCFG register)",
                  1, (1 << 16) - 1),
    "cbuf_depth": (f"an integer from 1 to {1 << isa.CBUF_ADDR_BITS}, a multiple of "
                   f"cbuf_banks, a power of two rows a bank, at least one weight block",
                   1, 1 << isa.CBUF_ADDR_BITS),
    "cbuf_banks": ("an integer of at least 1 that divides cbuf_depth into banks of a "
                   "power of two rows", 1, 1 << isa.CBUF_ADDR_BITS),
    "acc_depth": (f"an integer from 4 to {1 << isa.ACC_ADDR_BITS}, a power of two rows "
                  f"a bank", 4, 1 << isa.ACC_ADDR_BITS),
    "acc_banks": ("an integer of at least 1 that divides acc_depth into banks of a "
                  "power of two rows", 1, 1 << isa.ACC_ADDR_BITS),
    "dram_words": (f"an integer from 1 to {1 << isa.DRAM_ADDR_BITS} (and at most 4 GiB: "
                   f"dram_words * tile_rows * tile_size bytes)", 1,
                   1 << isa.DRAM_ADDR_BITS),
    "imem_depth": (f"an integer from 1 to {(1 << 32) - 1}", 1, (1 << 32) - 1),
    "ubuf_base": ("an integer of at least 0, a multiple of a CBUF bank's rows, inside "
                  "the CBUF (cbuf_depth with ubuf_own_sram)", 0, 1 << isa.CBUF_ADDR_BITS),
    "ubuf_rows": ("0 (no UBUF), or a power of two of whole CBUF banks inside the CBUF",
                  0, 1 << isa.CBUF_ADDR_BITS),
    "ubuf_own_sram": ("true or false", None, None),
    "general_lanes": ("true or false", None, None),
    "feed_register": ("true or false", None, None),
    "max_config_updates_per_cycle": (f"an integer from 1 to {isa.SETCFG_PAIRS}", 1,
                                     isa.SETCFG_PAIRS),
    "config_update_interval": (f"an integer from 1 to {(1 << isa.CYCLE_BITS) - 1}", 1,
                               (1 << isa.CYCLE_BITS) - 1),
    "power_domain_budget": ("an integer from 1 to max_config_updates_per_cycle", 1,
                            isa.SETCFG_PAIRS),
    "latency": (f"a table: dram_read = 1, cbuf_read = 1, acc_read = 1 or 2, vpu = "
                f"{VPU_STAGES}; a datapath operation (\"read.bigram\") 1 to {MAX_LATENCY}",
                None, None),
    "core_imem_bytes": (f"0 (no management core, with core_dmem_bytes 0) or a power of "
                        f"two from {CORE_MEMORY_MIN} to {CORE_MEMORY_MAX}", 0,
                        CORE_MEMORY_MAX),
    "core_dmem_bytes": (f"0 (no management core, with core_imem_bytes 0) or a power of "
                        f"two from {CORE_MEMORY_MIN} to {CORE_MEMORY_MAX}", 0,
                        CORE_MEMORY_MAX),
}

#: What a field is, where ChipConfig's source says it only in its class docstring.
_WHAT = {
    "name": "the chip's name (build directories, function libraries and reports go by it)",
    "tile_rows": "tiles down the array (array rows carry the reduction, K)",
    "tile_cols": "tiles across the array (array columns carry the outputs, N)",
    "tile_size": "MAC cells along each side of a tile",
    "latency": "per-operation latencies in cycles (the scheduler's timing table)",
}


# -- reading -----------------------------------------------------------------------------
def resolve(arg: str | ChipConfig) -> ChipConfig:
    """The chip `arg` names: a preset's name, or the path of a chip file (``.toml``, or
    ``.json`` as :meth:`ChipConfig.to_json` writes it). What the command line's
    ``--config`` takes."""
    if isinstance(arg, ChipConfig):
        return arg
    if not isinstance(arg, str):
        raise ConfigError(f"a chip is a preset's name or a chip file's path, not "
                          f"{type(arg).__name__}")
    if arg in PRESETS:
        return PRESETS[arg]
    if arg.endswith((".toml", ".json")):
        return load(arg)
    close = difflib.get_close_matches(arg, list(PRESETS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"unknown chip {_short(arg)}{hint}: give a preset "
                      f"({', '.join(sorted(PRESETS))}) or a chip file ending in .toml "
                      f"(`systolica config show tiny > my_chip.toml` writes one to start "
                      f"from)")


def load(path: str | Path) -> ChipConfig:
    """The chip the chip file at `path` describes (TOML; ``.json``: the form of
    :meth:`ChipConfig.to_json`)."""
    data = _read(path)
    if str(path).endswith(".json"):
        return ChipConfig.from_json(data, source=str(path))
    return loads(data, source=str(path), stem=Path(path).stem)


def document(path: str | Path) -> dict:
    """The chip file at `path` as TOML, unchecked: for readers of its other tables
    (``[energy]``)."""
    return _parse(_decode(_read(path), str(path)), str(path))


def loads(text: str | bytes, *, source: str = "<chip file>",
          stem: str | None = None) -> ChipConfig:
    """The chip a chip file's TOML text describes; `source` names it in messages and
    `stem` is its name unless the text gives ``name``."""
    text = _decode(text, source)
    doc = _parse(text, source)
    return _Reader(text, source).chip(doc, stem)


def _read(path) -> bytes:
    kind = "JSON" if str(path).endswith(".json") else "TOML"
    try:
        return files.read_input(path, f"a chip file ({kind})", kind="chip")
    except files.FileError as e:
        raise ConfigError(str(e)) from None


def _decode(text, source: str) -> str:
    if isinstance(text, bytes):
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"{source}: not UTF-8 text (byte 0x{text[e.start]:02x} at "
                              f"offset {e.start}); save the chip file as UTF-8") from None
    if not isinstance(text, str):
        raise ConfigError(f"{source}: a chip file's text is a str or bytes, not "
                          f"{type(text).__name__}")
    return text


_TOML_AT = re.compile(r"^(?P<msg>.*?)\s*\(at line (?P<line>\d+), column (?P<col>\d+)\)$")


def _parse(text: str, source: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = _TOML_AT.match(str(e))
        where, msg = (f"{source}:{m['line']}:{m['col']}", m["msg"]) if m else (source, str(e))
        raise ConfigError(f"{where}: not valid TOML ({msg.rstrip('.')}); a chip file is "
                          f"lines of key = value, e.g. tile_size = 4 ({DOCS})") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply to be a chip file") from None
    except ValueError:                  # an integer of more than 4300 digits
        raise ConfigError(f"{source}: a number of thousands of digits; a chip file's "
                          f"values are small integers, booleans and names") from None


class _Reader:
    """Checks one chip file's document against ChipConfig's fields, saying where."""

    def __init__(self, text: str, source: str):
        self.text, self.source = text, source

    def at(self, key: str, table: str | None = None) -> str:
        """``file:line`` of `key` (in `table`), or the file alone."""
        line = key_line(self.text, key, table)
        return f"{self.source}:{line}" if line else self.source

    def fail(self, key: str, message: str, table: str | None = None):
        raise ConfigError(f"{self.at(key, table)}: {message}")

    def chip(self, doc: dict, stem: str | None) -> ChipConfig:
        values = {}
        for key, value in doc.items():
            if key == BASE_KEY or key in TABLES and key != "latency":
                continue
            if key not in _FIELDS:
                self.unknown(key, value)
            values[key] = self.checked(key, value)
        if "energy" in doc and not isinstance(doc["energy"], dict):
            self.fail("energy", f"energy must be a table ([energy]: {TABLES['energy']}), "
                                f"not {_kind(doc['energy'])}")
        for key in doc.get("energy", {}):
            if key in _FIELDS or key == BASE_KEY:      # else it would be ignored here
                self.fail(key, f"{key} is a key of the chip, but it stands under [energy] "
                               f"(a table runs to the next table's header): move it above "
                               f"the first table", "energy")
        start = self.base(doc)
        if "latency" in values:
            values["latency"] = {**(start or {}).get("latency", DEFAULT_LATENCY),
                                 **values["latency"]}
        named = "name" in values
        fields = {**(start or {}), **values}
        if not named:
            fields["name"] = self.stem_name(stem)
        missing = [n for n, f in _FIELDS.items() if n not in fields
                   and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ConfigError(f"{self.source}: missing key(s) {', '.join(missing)}; give "
                              f"them, or start from a preset with base = \"tiny\" (then "
                              f"the file gives only what differs; {DOCS})")
        try:
            cfg = ChipConfig(**fields)
        except ConfigError as e:
            self.refused(str(e), values)
        same = PRESETS.get(cfg.name)
        if same is not None and same != cfg:
            differ = [n for n in _FIELDS if getattr(cfg, n) != getattr(same, n)]
            how = ("give the chip a name of its own" if named else
                   f"the file's name is the chip's: rename the file, or give the chip a "
                   f"name of its own with name = \"my_{cfg.name}\"")
            self.fail("name", f"name {cfg.name!r} is a preset's, but this chip differs "
                              f"from it in {', '.join(differ)}; {how} (function libraries "
                              f"and reports go by the name)")
        return cfg

    def unknown(self, key: str, value) -> None:
        if isinstance(value, dict):
            self.fail(key, f"unknown table [{key}]; a chip file has the tables "
                           f"{', '.join(f'[{t}] ({w})' for t, w in TABLES.items())}: "
                           f"remove or rename it ({DOCS})")
        close = difflib.get_close_matches(key, [*_FIELDS, BASE_KEY], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        self.fail(key, f"unknown key {_short(key)}{hint}; a chip file's keys are "
                       f"{', '.join(_FIELDS)} and base: rename or remove it ({DOCS})")

    def checked(self, key: str, value):
        """`value` of field `key` if it has the field's type and bounds."""
        what, lo, hi = RANGES[key]
        if key == "latency":
            return self.latency(value)
        if key in _FLAG_KEYS:
            if not isinstance(value, bool):
                self.fail(key, f"{key} must be true or false, not {_kind(value)}; write "
                               f"{key} = true or {key} = false")
            return value
        if key == "name":
            if not isinstance(value, str):
                self.fail(key, f"name must be a string of {what}, not {_kind(value)}; "
                               f"write name = \"my_chip\"")
            return value
        if not isinstance(value, int) or isinstance(value, bool):
            example = lo
            if isinstance(value, float) and value.is_integer():
                example = int(value)
            elif isinstance(value, str) and value.strip().isdigit():
                example = int(value)
            self.fail(key, f"{key} must be {what}, not {_kind(value)}; write it as a "
                           f"whole number, e.g. {key} = {example}")
        if value < lo or hi is not None and value > hi:
            self.fail(key, f"{key} = {value} is out of range: it is {what}; change it "
                           f"({DOCS})")
        return value

    def latency(self, value) -> dict:
        if not isinstance(value, dict):
            self.fail("latency", f"latency must be a table ([latency] with lines "
                                 f"operation = cycles), not {_kind(value)}")
        out = {}
        for op, cycles in _flat(value):
            if op in _FIELDS or op == BASE_KEY:
                self.fail(op, f"{op} is a key of the chip, but it stands under [latency] "
                              f"(a table runs to the next table's header): move it above "
                              f"the first table", "latency")
            if not isinstance(cycles, int) or isinstance(cycles, bool) \
                    or not 1 <= cycles <= MAX_LATENCY:
                self.fail(op.split(".")[0], f"latency {op!r} must be a whole number of "
                                            f"cycles from 1 to {MAX_LATENCY}, not "
                                            f"{_kind(cycles)} ({RANGES['latency'][0]})",
                          "latency")
            out[op] = cycles
        return out

    def base(self, doc: dict) -> dict | None:
        if BASE_KEY not in doc:
            return None
        name = doc[BASE_KEY]
        if not isinstance(name, str) or name not in PRESETS:
            self.fail(BASE_KEY, f"base must name a preset to start from, one of "
                                f"{', '.join(sorted(PRESETS))}; not {_kind(name)}")
        return PRESETS[name].to_dict()

    def stem_name(self, stem: str | None) -> str:
        if stem is None:
            raise ConfigError(f"{self.source}: the chip has no name; give it one, "
                              f"name = \"my_chip\"")
        if not _NAME.fullmatch(stem) or len(stem) > MAX_NAME:
            raise ConfigError(f"{self.source}: the file's name {stem!r} is not a chip "
                              f"name ({RANGES['name'][0]}), and the file gives no name; "
                              f"add name = \"my_chip\" or rename the file")
        return stem

    def refused(self, message: str, given: dict):
        """ChipConfig's own refusal, at the line of the first key it names that the file
        gives."""
        text = message.split(": ", 1)[1] if ": " in message else message
        named = sorted((m.start(), k) for k in given
                       for m in [re.search(rf"\b{re.escape(k)}\b", text)] if m)
        if not named:
            raise ConfigError(f"{self.source}: {text}")
        key = named[0][1]
        where = self.at(key)
        if key == "latency":            # at the line of the operation it names
            ops = sorted((m.start(), op) for op in given["latency"]
                         for m in [re.search(rf"\b{re.escape(op)}\b", text)] if m)
            if ops and key_line(self.text, ops[0][1].split(".")[0], "latency"):
                where = self.at(ops[0][1].split(".")[0], "latency")
        raise ConfigError(f"{where}: {text} ({key}: {RANGES[key][0]}; {DOCS})")


def _flat(table: dict, prefix: str = ""):
    """``(dotted key, value)`` of a TOML table whose keys may be dotted
    (``read.bigram = 2`` is a nested table to tomllib)."""
    for k, v in table.items():
        if isinstance(v, dict):
            yield from _flat(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def _kind(value) -> str:
    """What a TOML value is, for a message."""
    kinds = {bool: "a boolean", int: "an integer", float: "a number with a point",
             str: "a string", list: "an array", dict: "a table"}
    kind = next((w for t, w in kinds.items() if isinstance(value, t)),
                f"a {type(value).__name__}")
    if isinstance(value, bool):
        return f"{kind} ({str(value).lower()})"
    return f"{kind} ({_short(value)})" if not isinstance(value, dict) else kind


_HEADER = re.compile(r"^\s*\[\s*(?P<name>[^\[\]]+?)\s*\]")


def key_line(text: str, key: str, table: str | None = None) -> int | None:
    """The line (from 1) that gives `key` at the top level of a TOML text, or in
    `table` (under its header, dotted as ``table.key``, or the ``table = {...}`` line);
    None if none does. tomllib keeps no positions, so the text is searched."""
    quoted = rf"""(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')"""
    top = re.compile(rf"^\s*{quoted}\s*[=.]")
    inner = re.compile(rf"^\s*{quoted}\s*=")
    dotted = re.compile(rf"^\s*{re.escape(table)}\s*\.\s*{quoted}\s*=") if table else None
    whole = re.compile(rf"^\s*{re.escape(table)}\s*=") if table else None
    current = None
    for number, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header:
            current = header["name"].strip().strip("\"'")
            if table is None and current == key:
                return number
            continue
        if table is None and current is None and top.match(line):
            return number
        if table is not None:
            if current == table and inner.match(line):
                return number
            if current is None and (dotted.match(line) or whole.match(line)):
                return number
    return None


# -- writing -----------------------------------------------------------------------------
def describe() -> dict[str, str]:
    """What each field is, in the words of ChipConfig's source (its comments), or the
    class docstring's where a field has none."""
    lines = inspect.getsource(ChipConfig).splitlines()
    out: dict[str, list[str]] = {}
    current = None
    start = re.compile(r"^    (?P<name>\w+): [^#]*(?:#\s?(?P<note>.*))?$")
    more = re.compile(r"^\s{5,}#\s?(?P<note>.*)$")
    for line in lines:
        m = start.match(line)
        if m and m["name"] in _FIELDS:
            current = m["name"]
            out[current] = [m["note"].strip()] if m["note"] else []
        elif current and (c := more.match(line)):
            out[current].append(c["note"].strip())
        else:
            current = None
    text = {n: " ".join(out.get(n) or [_WHAT.get(n, "")]).strip() for n in _FIELDS}
    # one comment over two fields (ubuf_base and ubuf_rows: "... of the CBUF," / "its
    # first row and size ..."): both fields get the whole of it
    names = list(_FIELDS)
    for a, b in zip(names, names[1:]):
        if out.get(a) and out.get(b) and (text[a].endswith(",") or text[b].startswith("(")):
            text[a] = text[b] = f"{text[a]} {text[b]}"
    return text


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else f'"{k}"'


def dump(cfg: ChipConfig) -> str:
    """`cfg` as a chip file: every field, each under a comment saying what it is and
    the values it may take; :func:`loads` reads it back as `cfg`."""
    what = describe()
    out = [f"# Chip {cfg.name!r}: a Systolica chip file ({DOCS}).",
           "# Edit it and pass it as --config FILE.toml; `base = \"tiny\"` at the top",
           "# starts from a preset, so a file need give only what differs.", ""]
    for name in _FIELDS:
        if name == "latency":
            continue
        out += _comment(what[name], RANGES[name][0])
        out += [f"{name} = {_value(getattr(cfg, name))}", ""]
    out += _comment(what["latency"], RANGES["latency"][0])
    out.append("[latency]")
    out += [f"{_toml_key(k)} = {_value(v)}" for k, v in cfg.latency.items()]
    return "\n".join(out) + "\n"


def _comment(what: str, values: str) -> list[str]:
    text = f"{what[:1].upper()}{what[1:]}" if what else ""
    lines = textwrap.wrap(text, 86) if text else []
    lines += textwrap.wrap(f"Values: {values}.", 86)
    return [f"# {line}" for line in lines]


def is_chip_file(arg: str) -> bool:
    """Whether `arg` names a chip file rather than a preset (by its ending)."""
    return isinstance(arg, str) and arg.endswith((".toml", ".json"))


__all__ = ["RANGES", "TABLES", "describe", "document", "dump", "is_chip_file", "key_line",
           "load", "loads", "resolve"]
