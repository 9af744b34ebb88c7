"""One object describes a chip; the RTL, compiler, golden model and tests all read it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import numbers
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from systolica.arch.errors import ConfigError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_LATENCY_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


#: Per-operation latencies in cycles. The scheduler takes every timing fact from here
#: (through :mod:`systolica.arch.timing`), so a program compiles for another revision of the
#: chip by changing this table; the RTL is generated from the same numbers. Read-only:
#: start a table of your own from it, ``{**DEFAULT_LATENCY, "acc_read": 2}``.
DEFAULT_LATENCY = types.MappingProxyType({
    "dram_read": 1,   # external memory: address in cycle t, data in t+1
    "cbuf_read": 1,   # convolution buffer read port
    "acc_read": 1,    # accumulator buffer read port
    "vpu": 3,         # vector unit stages: bias add, multiply, round/clamp
})

#: The vector unit's pipeline stages in this RTL revision (``rtl/vpu.py``).
VPU_STAGES = 3

#: The longest latency a datapath operation of the table (a key other than the chip's
#: own, e.g. ``read.bigram``) or of a ``.stp`` latency line may have, in cycles.
MAX_LATENCY = 1 << 16

#: The longest chip name (it names build directories).
MAX_NAME = 64

#: The largest external memory in bytes (``dram_words * R``): the golden model holds
#: the whole DRAM address space as one array (it takes memory only for the pages a run
#: touches, but the address space itself must be granted; 64 GiB was refused).
MAX_DRAM_BYTES = 1 << 32
#: The management core's memories, each (docs/management-core.md).
CORE_MEMORY_MIN = 4096
CORE_MEMORY_MAX = 1 << 20


@dataclass(frozen=True, kw_only=True)
class ChipConfig:
    """A tiled systolic chip.

    The compute array is ``tile_rows x tile_cols`` tiles of ``tile_size x tile_size``
    weight-stationary MAC cells. Array rows carry the reduction (K) dimension and
    array columns the output (N) dimension. One CBUF row holds one byte per array row
    (its partitions); one accumulator row holds one int32 per array column.
    """

    name: str
    tile_rows: int
    tile_cols: int
    tile_size: int
    cbuf_depth: int          # rows per CBUF partition
    cbuf_banks: int          # CBUF banks by address range, each one read and one write
                             # port (docs/contract.md, "CBUF banks")
    acc_depth: int           # rows of the accumulator buffer
    acc_banks: int           # ACC banks by address range, each one read and one write port
    dram_words: int          # external memory size in words of ``dram_word_bytes`` (at
                             # most 2**isa.DRAM_ADDR_BITS); the simulators and the golden
                             # model touch only what a run uses, so a large one costs
                             # nothing (docs/simulation.md)
    imem_depth: int          # program memory, instructions
    ubuf_base: int = 0       # reserved overlap region (UBUF): a bank range of the CBUF,
    ubuf_rows: int = 0       # its first row and size (whole banks); 0 rows = no UBUF
    ubuf_own_sram: bool = False  # the UBUF in banks of its own after the CBUF's rows
                                 # (ubuf_base = cbuf_depth), reached by crops and fetches only
    general_lanes: bool = False  # seed 002's general lanes (four directions, crossings,
                                 # skip links) in the grid: four multiplexers per tile
                                 # (docs/contract.md, "General lanes")
    feed_register: bool = False  # a register between the CBUF's read data and the
                                 # array's west edge: a MATMUL's rows reach the cells a
                                 # cycle later, for the clock rate (docs/fpga.md)
    max_config_updates_per_cycle: int = 4   # SETCFG pairs per instruction (<= isa.SETCFG_PAIRS)
    config_update_interval: int = 1         # SETCFG only on cycles that are multiples of this
    power_domain_budget: int = 2            # SETCFG pairs per power domain per instruction
    latency: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_LATENCY))
    core_imem_bytes: int = 8192   # the management core's instruction and data memories
    core_dmem_bytes: int = 8192   # (block RAMs of the chip); 0 and 0: no core
                                  # (docs/management-core.md)
    # (kept read-only: ``__post_init__`` stores a read-only copy of the table given)

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name) \
                or len(self.name) > MAX_NAME:
            raise ConfigError(f"ChipConfig name must be a non-empty string of at most "
                              f"{MAX_NAME} letters, digits, '_', '.' or '-' (it names "
                              f"build directories), not {_short(self.name)}")
        for n in ("tile_rows", "tile_cols", "tile_size", "cbuf_depth", "cbuf_banks",
                  "acc_depth", "acc_banks", "dram_words", "imem_depth",
                  "max_config_updates_per_cycle",
                  "config_update_interval", "power_domain_budget"):
            self._integer(n, 1)
        for n in ("ubuf_base", "ubuf_rows"):
            self._integer(n, 0)
        for n in ("general_lanes", "feed_register"):
            if not isinstance(getattr(self, n), bool):
                raise ConfigError(f"{self.name}: {n} must be True or False, not "
                                  f"{_short(getattr(self, n))}")
        from systolica.arch import isa  # field widths bound the sizes
        if self.max_config_updates_per_cycle > isa.SETCFG_PAIRS:
            raise ConfigError(f"{self.name}: max_config_updates_per_cycle "
                              f"{self.max_config_updates_per_cycle} exceeds the "
                              f"{isa.SETCFG_PAIRS} pairs one SETCFG can carry")
        if self.power_domain_budget > self.max_config_updates_per_cycle:
            raise ConfigError(f"{self.name}: power_domain_budget "
                              f"{self.power_domain_budget} exceeds "
                              f"max_config_updates_per_cycle "
                              f"{self.max_config_updates_per_cycle} (the pairs of one "
                              f"instruction, all a power domain can take); make it at "
                              f"most {self.max_config_updates_per_cycle}")
        for what, size, limit, field_ in (
                ("cbuf_depth", self.cbuf_depth, 1 << isa.CBUF_ADDR_BITS,
                 f"the ISA's {isa.CBUF_ADDR_BITS}-bit address field"),
                ("acc_depth", self.acc_depth, 1 << isa.ACC_ADDR_BITS,
                 f"the ISA's {isa.ACC_ADDR_BITS}-bit address field"),
                ("dram_words", self.dram_words, 1 << isa.DRAM_ADDR_BITS,
                 f"the ISA's {isa.DRAM_ADDR_BITS}-bit address field"),
                ("config_update_interval", self.config_update_interval,
                 (1 << isa.CYCLE_BITS) - 1, f"the ISA's {isa.CYCLE_BITS}-bit cycle field"),
                ("imem_depth", self.imem_depth, (1 << 32) - 1,
                 "the 32-bit PROG_LEN register"),
                ("tile_size", self.tile_size, (1 << 16) - 1,
                 "its 16-bit field in the HWCFG register")):
            if size > limit:
                raise ConfigError(f"{self.name}: {what} {size} exceeds {field_} "
                                  f"(at most {limit})")
        if self.dram_bytes > MAX_DRAM_BYTES:
            raise ConfigError(f"{self.name}: dram_words {self.dram_words} of "
                              f"{self.dram_word_bytes}-byte words (R, one CBUF row) are "
                              f"{self.dram_bytes / (1 << 30):g} GiB, more than the "
                              f"{MAX_DRAM_BYTES >> 30} GiB the golden model holds as one "
                              f"address space; make dram_words at most "
                              f"{MAX_DRAM_BYTES // self.dram_word_bytes}")
        if self.cbuf_depth % self.cbuf_banks:
            raise ConfigError(f"{self.name}: cbuf_depth {self.cbuf_depth} must be a multiple "
                              f"of cbuf_banks {self.cbuf_banks}")
        if self.cbuf_bank_rows & (self.cbuf_bank_rows - 1):
            raise ConfigError(f"{self.name}: a CBUF bank must hold a power of two rows, "
                              f"not {self.cbuf_bank_rows} (cbuf_depth {self.cbuf_depth} / "
                              f"cbuf_banks {self.cbuf_banks}); change either")
        if self.cbuf_depth < self.weight_rows:
            raise ConfigError(f"{self.name}: cbuf_depth {self.cbuf_depth} cannot hold one "
                              f"weight block ({self.weight_rows} rows); make it at least "
                              f"{self.weight_rows}")
        if self.acc_depth < 4:
            raise ConfigError(f"{self.name}: acc_depth must be at least 4, not {self.acc_depth}")
        if self.acc_depth % self.acc_banks or self.acc_bank_rows & (self.acc_bank_rows - 1):
            raise ConfigError(f"{self.name}: acc_depth {self.acc_depth} must be cut into "
                              f"acc_banks {self.acc_banks} banks of a power of two rows")
        if self.ubuf_own_sram and (self.ubuf_base != self.cbuf_depth or not self.ubuf_rows):
            raise ConfigError(f"{self.name}: a UBUF in its own SRAM follows the CBUF's rows: "
                              f"set ubuf_base = cbuf_depth ({self.cbuf_depth}) and "
                              f"ubuf_rows > 0")
        if self.cbuf_physical_rows > 1 << isa.CBUF_ADDR_BITS:
            raise ConfigError(f"{self.name}: the CBUF and its UBUF have "
                              f"{self.cbuf_physical_rows} rows, more than a "
                              f"{isa.CBUF_ADDR_BITS}-bit address reaches")
        if not self.ubuf_own_sram and self.ubuf_base + self.ubuf_rows > self.cbuf_depth:
            raise ConfigError(f"{self.name}: UBUF region [{self.ubuf_base}, "
                              f"{self.ubuf_base + self.ubuf_rows}) is outside the CBUF "
                              f"(depth {self.cbuf_depth}); move ubuf_base down or shrink "
                              f"ubuf_rows")
        if self.ubuf_rows and (self.ubuf_base % self.cbuf_bank_rows
                               or self.ubuf_rows % self.cbuf_bank_rows):
            raise ConfigError(f"{self.name}: the UBUF is a range of whole CBUF banks, but "
                              f"[{self.ubuf_base}, {self.ubuf_base + self.ubuf_rows}) "
                              f"(ubuf_base, ubuf_rows) does not start and end at multiples "
                              f"of the bank size {self.cbuf_bank_rows} rows (cbuf_depth / "
                              f"cbuf_banks); change either")
        if self.ubuf_rows & (self.ubuf_rows - 1):
            raise ConfigError(f"{self.name}: ubuf_rows must be a power of two (a fused "
                              f"crop writes CBUF row a to UBUF row a mod ubuf_rows), not "
                              f"{self.ubuf_rows}")
        self._check_latency()
        self._check_core()
        from systolica.arch import isa
        if self.general_lanes and max(self.tile_rows, self.tile_cols) > isa.ROUTE_GROUPS:
            raise ConfigError(f"{self.name}: a ROUTE names at most {isa.ROUTE_GROUPS} tile "
                              f"rows and columns (its keep and delay fields), not a "
                              f"{self.tile_rows}x{self.tile_cols} grid's; use "
                              f"general_lanes=False or fewer tiles")
        from systolica.arch import fabric  # every multiplexer needs a SETCFG index
        try:
            fabric.muxes(self)
        except ConfigError as e:
            raise ConfigError(f"{self.name}: {e}") from None

    def _check_core(self) -> None:
        for n in ("core_imem_bytes", "core_dmem_bytes"):
            self._integer(n, 0)
        sizes = (self.core_imem_bytes, self.core_dmem_bytes)
        if sizes == (0, 0):
            return
        for n, v in zip(("core_imem_bytes", "core_dmem_bytes"), sizes):
            if v < CORE_MEMORY_MIN or v > CORE_MEMORY_MAX or v & (v - 1):
                raise ConfigError(f"{self.name}: {n} must be a power of two from "
                                  f"{CORE_MEMORY_MIN} to {CORE_MEMORY_MAX} bytes (a block "
                                  f"RAM of the management core), or core_imem_bytes and "
                                  f"core_dmem_bytes both 0 for a chip without the core, "
                                  f"not {v}")
        if self.dram_word_bytes < 4:
            raise ConfigError(f"{self.name}: the management core reaches DRAM in words of "
                              f"at least 4 bytes, but this chip's are "
                              f"{self.dram_word_bytes} (its array rows); set "
                              f"core_imem_bytes=0 and core_dmem_bytes=0 (no core) or "
                              f"give the array at least 4 rows")

    @property
    def has_core(self) -> bool:
        """Whether the chip has the management core (docs/management-core.md)."""
        return self.core_imem_bytes > 0

    def _grid(self, short: int, long: int) -> str:
        """``short x long`` tiles in this grid's orientation (rows first)."""
        return f"{long}x{short}" if self.tile_rows > self.tile_cols else f"{short}x{long}"

    def _integer(self, name: str, lo: int) -> None:
        """A size field: an integer (numpy integers become ints) of at least `lo`."""
        v = getattr(self, name)
        if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < lo:
            kind = "a positive" if lo == 1 else "a non-negative"
            raise ConfigError(f"{self.name}: {name} must be {kind} integer, not "
                              f"{_short(v)}")
        object.__setattr__(self, name, int(v))

    def _check_latency(self) -> None:
        if not isinstance(self.latency, Mapping):
            raise ConfigError(f"{self.name}: latency must be a dict of operation -> cycles "
                              f"(start from DEFAULT_LATENCY), not {_short(self.latency)}")
        table = dict(self.latency)      # a copy: the caller's dict stays theirs
        missing = set(DEFAULT_LATENCY) - set(table)
        if missing:
            raise ConfigError(f"{self.name}: latency table lacks {sorted(missing)}; start "
                              f"from DEFAULT_LATENCY")
        for k, v in table.items():
            if not isinstance(k, str) or not _LATENCY_KEY.fullmatch(k):
                raise ConfigError(f"{self.name}: latency key {_short(k)} must be an "
                                  f"operation name like 'vpu' or 'read.bigram'")
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_LATENCY:
                raise ConfigError(f"{self.name}: latency[{k!r}] must be a positive "
                                  f"integer of at most {MAX_LATENCY} cycles, not "
                                  f"{_short(v)}")
        object.__setattr__(self, "latency", types.MappingProxyType(table))
        slow = [k for k in ("dram_read", "cbuf_read") if self.latency[k] != 1]
        if slow:
            raise ConfigError(f"{self.name}: this RTL revision implements memory read "
                              f"latency 1 only; set latency {', '.join(slow)} to 1")
        if self.latency["acc_read"] not in (1, 2):
            raise ConfigError(f"{self.name}: latency['acc_read'] is 1, or 2 with the ACC "
                              f"banks' outputs registered; not {self.latency['acc_read']}")
        if self.latency["vpu"] != VPU_STAGES:
            raise ConfigError(f"{self.name}: this RTL revision's vector unit has "
                              f"{VPU_STAGES} stages; set latency vpu to {VPU_STAGES}, not "
                              f"{self.latency['vpu']}")

    # -- derived geometry -------------------------------------------------------------
    @property
    def rows(self) -> int:
        """Array rows (the K dimension of one block)."""
        return self.tile_rows * self.tile_size

    @property
    def cols(self) -> int:
        """Array columns (the N dimension of one block)."""
        return self.tile_cols * self.tile_size

    @property
    def macs(self) -> int:
        return self.rows * self.cols

    @property
    def dram_word_bytes(self) -> int:
        """One external-memory word is one CBUF row."""
        return self.rows

    @property
    def sub_blocks(self) -> int:
        """N-blocks of ``cols`` columns in one block of ``rows`` columns (R / C; 1 on a
        wide grid)."""
        return max(1, self.rows // self.cols)

    @property
    def sides_divide(self) -> bool:
        """One of ``tile_rows`` and ``tile_cols`` divides the other: blocks of ``R``
        columns and N-blocks of ``C`` are sub-blocks or slices of each other. Where
        they do not (a 2x3 or 3x2 grid) an N-block's outputs go to the blocks they
        overlap, in pieces (docs/contract.md, "Grids whose sides do not divide")."""
        lo, hi = sorted((self.tile_rows, self.tile_cols))
        return hi % lo == 0

    @property
    def slices(self) -> int:
        """Blocks of ``rows`` columns in one N-block of ``cols`` columns (C / R on a wide
        grid, else 1; docs/contract.md, "Wide grids")."""
        return max(1, self.cols // self.rows)

    @property
    def wide(self) -> bool:
        """More array columns than rows: weights load from the west."""
        return self.cols > self.rows

    @property
    def weight_rows(self) -> int:
        """CBUF rows of one weight block: ``R`` (loaded from the north) or, on a wide
        grid, ``C`` (loaded transposed from the west)."""
        return max(self.rows, self.cols)

    @property
    def acc_row_words(self) -> int:
        """External-memory words in one accumulator row (``cols`` int32 values, ``4C``
        bytes, in ``R``-byte words). Where ``4C`` is not a whole number of words (a
        tall grid of ``R / C`` not in 1, 2, 4) the row's last word is padded: its bytes
        past ``4C`` are written as zero and ignored on loads."""
        return -(-4 * self.cols // self.dram_word_bytes)

    @property
    def acc_row_padded(self) -> bool:
        """An accumulator row ends in a partly used DRAM word (see ``acc_row_words``)."""
        return 4 * self.cols % self.dram_word_bytes != 0

    @property
    def cbuf_physical_rows(self) -> int:
        """Rows of the CBUF's memories: its own, and the UBUF's in their own SRAM."""
        return self.cbuf_depth + (self.ubuf_rows if self.ubuf_own_sram else 0)

    @property
    def cbuf_physical_banks(self) -> int:
        return self.cbuf_physical_rows // self.cbuf_bank_rows

    @property
    def cbuf_bank_rows(self) -> int:
        return self.cbuf_depth // self.cbuf_banks

    @property
    def acc_bank_rows(self) -> int:
        return self.acc_depth // self.acc_banks

    @property
    def acc_bank_shift(self) -> int:
        """Row ``a`` is in ACC bank ``a >> acc_bank_shift``."""
        return self.acc_bank_rows.bit_length() - 1

    @property
    def cbuf_bank_shift(self) -> int:
        """Row ``a`` is in CBUF bank ``a >> cbuf_bank_shift``."""
        return self.cbuf_bank_rows.bit_length() - 1

    @property
    def dram_bytes(self) -> int:
        return self.dram_words * self.dram_word_bytes

    # -- the UBUF registers -------------------------------------------------------------
    @property
    def ubuf_span(self) -> tuple[int, int]:
        """The CBUF rows ``[lo, hi)`` the UBUF registers may place the UBUF in: the
        whole CBUF, or with its own SRAM that SRAM (docs/contract.md, "The UBUF")."""
        if self.ubuf_own_sram:
            return self.cbuf_depth, self.cbuf_depth + self.ubuf_rows
        return 0, self.cbuf_depth

    def ubuf_problem(self, base: int, rows: int) -> str | None:
        """Why ``UBUF_BASE = base, UBUF_ROWS = rows`` is not a UBUF this chip can have
        (the rule the register file applies to a write), or None if it is."""
        lo, hi = self.ubuf_span
        bank = self.cbuf_bank_rows
        if base % bank or rows % bank:
            return (f"the UBUF is whole CBUF banks of {bank} rows: base {base} and rows "
                    f"{rows} must be multiples of {bank}")
        if rows & (rows - 1):
            return f"ubuf rows must be 0 or a power of two, not {rows}"
        if self.ubuf_own_sram and base != lo:
            return (f"the UBUF in its own SRAM starts at row {lo} (cbuf_depth); base "
                    f"{base} is not that")
        if not lo <= base or base + rows > hi:
            return (f"UBUF rows [{base}, {base + rows}) are outside the rows [{lo}, {hi}) "
                    f"it may take on chip {self.name!r}")
        return None

    def at_ubuf(self, base: int, rows: int) -> ChipConfig:
        """This chip with its UBUF registers set to ``base``, ``rows`` (what a program
        compiled for a moved UBUF assumes); a ConfigError if that is not allowed."""
        for what, v in (("base", base), ("rows", rows)):
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"{self.name}: UBUF {what} must be a non-negative "
                                  f"integer, not {v!r}")
        why = self.ubuf_problem(int(base), int(rows))
        if why:
            raise ConfigError(f"{self.name}: cannot set the UBUF registers to base "
                              f"{base}, rows {rows}: {why}")
        if (base, rows) == (self.ubuf_base, self.ubuf_rows):
            return self
        return self.replace(ubuf_base=int(base), ubuf_rows=int(rows))

    # -- identity -----------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Every field by name, the latency table as a plain dict: the inverse of
        :meth:`from_dict`, and what a chip file (:meth:`from_json`) holds."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["latency"] = dict(self.latency)
        return out

    def to_json(self) -> str:
        """A chip file's text for this chip (:meth:`from_json` reads it back)."""
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping, *, source: str | None = None) -> ChipConfig:
        """The chip a :meth:`to_dict` mapping describes: every field of ChipConfig by
        name (those with defaults may be left out), each value checked as the
        constructor checks it. A key that is not a field, a missing field or a bad value
        is a ConfigError naming the key (and `source`, the file it came from)."""
        where = f"{source}: " if source else ""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}a chip description is a JSON object (a dict) of "
                              f"ChipConfig fields, e.g. {{\"name\": \"mychip\", "
                              f"\"tile_rows\": 2, ...}}, not {type(data).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted((k for k in data if k not in fields), key=str)
        if unknown:
            raise ConfigError(f"{where}unknown key(s) {', '.join(map(_short, unknown))}; "
                              f"a chip description has the keys "
                              f"{', '.join(fields)}")
        missing = [n for n, f in fields.items() if n not in data
                   and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ConfigError(f"{where}missing key(s) {', '.join(missing)}; every chip "
                              f"description gives them (start from a preset's: "
                              f"systolica.arch.config.preset('tiny').to_json())")
        try:
            cfg = cls(**data)
        except ConfigError as e:
            raise ConfigError(f"{where}{e}") from None
        same = PRESETS.get(cfg.name)
        if same is not None and same != cfg:
            differ = [n for n in fields if getattr(cfg, n) != getattr(same, n)]
            raise ConfigError(f"{where}name {cfg.name!r} is a preset's, but this chip "
                              f"differs from it in {', '.join(differ)}; give it a name of "
                              f"its own (function libraries and reports go by the name)")
        return cfg

    @classmethod
    def from_json(cls, text: str | bytes, *, source: str = "<chip file>") -> ChipConfig:
        """The chip a chip file's text describes (JSON, :meth:`to_json`): a
        ConfigError naming `source` (with line and column for bad JSON) otherwise."""
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ConfigError(f"{source}: not UTF-8 text (byte 0x{text[e.start]:02x} "
                                  f"at offset {e.start}); a chip file is JSON saved as "
                                  f"UTF-8") from None
        if not isinstance(text, str):
            raise ConfigError(f"{source}: a chip file's text is a str or bytes, not "
                              f"{type(text).__name__}")

        def no_repeats(pairs):
            seen = {}
            for k, v in pairs:
                if k in seen:
                    raise ConfigError(f"{source}: key {_short(k)} is given twice; give it once")
                seen[k] = v
            return seen

        def no_constant(name):
            raise ConfigError(f"{source}: {name} is not a number a chip can have; give "
                              f"integers")
        if not text.strip():
            raise ConfigError(f"{source} is empty; a chip file is one JSON object of "
                              f"ChipConfig fields (start from a preset's: "
                              f"systolica.arch.config.preset('tiny').to_json())")
        try:
            data = json.loads(text, object_pairs_hook=no_repeats,
                              parse_constant=no_constant)
        except ConfigError:
            raise
        except json.JSONDecodeError as e:
            raise ConfigError(f"{source}:{e.lineno}:{e.colno}: not valid JSON ({e.msg}); "
                              f"a chip file is one JSON object of ChipConfig fields "
                              f"(docs/chip.md, \"Chip files\")") from None
        except RecursionError:
            raise ConfigError(f"{source}: nested too deeply to be a chip description; a "
                              f"chip file is one flat JSON object") from None
        except ValueError:              # an integer of more than 4300 digits
            raise ConfigError(f"{source}: a number of thousands of digits; a chip file's "
                              f"values are small integers, booleans and names") from None
        return cls.from_dict(data, source=source)

    @classmethod
    def from_file(cls, path: str | Path) -> ChipConfig:
        """The chip a chip file (JSON, :meth:`to_json`) describes."""
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise ConfigError(f"{path}: cannot read the chip file "
                              f"({e.strerror or e}); give the path of a JSON chip "
                              f"file") from None
        return cls.from_json(data, source=str(path))

    def __repr__(self) -> str:
        # the latency table shown as the dict it was given as: the repr identifies the
        # chip (function libraries are fingerprinted by it), not its read-only wrapper
        fields = ", ".join(f"{f.name}={getattr(self, f.name)!r}" if f.name != "latency"
                           else f"latency={dict(self.latency)!r}"
                           for f in dataclasses.fields(self))
        return f"ChipConfig({fields})"

    def __reduce__(self):
        # the latency table is a read-only view, which pickle and copy cannot take
        # apart: rebuild the chip from its fields instead
        return _rebuild, (self.to_dict(),)

    @property
    def key(self) -> str:
        """Stable short hash: build directories are keyed by it."""
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return f"{self.name}-{hashlib.sha256(blob).hexdigest()[:10]}"

    @property
    def program_key(self) -> str:
        """The fingerprint a program is stamped with (docs/image-format.md): :attr:`key`
        of this chip with its UBUF registers at their reset values. A program carries
        the placement it assumes itself (``Loadable.ubuf``, written by the host), so
        one compiled for a moved UBUF (:meth:`at_ubuf`) runs on the chip it was moved
        on. The management core's memories are left out too: a program runs alike on
        the chip with or without its core."""
        fields = {k: v for k, v in self.to_dict().items()
                  if k not in ("core_imem_bytes", "core_dmem_bytes")}
        blob = json.dumps({**fields, "ubuf_base": None, "ubuf_rows": None},
                          sort_keys=True).encode()
        return f"{self.name}-{hashlib.sha256(blob).hexdigest()[:10]}"

    def replace(self, **changes) -> ChipConfig:
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ConfigError(f"{self.name}: ChipConfig has no field(s) "
                              f"{', '.join(unknown)}; its fields are "
                              f"{', '.join(f.name for f in dataclasses.fields(self))}")
        return dataclasses.replace(self, **changes)


def _rebuild(fields: dict) -> ChipConfig:
    return ChipConfig(**fields)


def _short(value, limit: int = 60) -> str:
    """``repr(value)``, cut short: a message quotes a bad value, not a megabyte of it."""
    try:
        text = repr(value)
    except Exception:               # noqa: BLE001 -- a value whose repr fails
        text = f"a {type(value).__name__}"
    return text if len(text) <= limit else f"{text[:limit - 5]}...{text[-2:]}"


#: The chip presets by name, read-only (as is every ChipConfig and its latency table):
#: ``preset("tiny").replace(...)`` makes a changed copy.
PRESETS = types.MappingProxyType({
    "tiny": ChipConfig(name="tiny", tile_rows=2, tile_cols=2, tile_size=4,
                       cbuf_depth=2048, cbuf_banks=8, acc_depth=256, acc_banks=16,
                       dram_words=16384, imem_depth=2048,       # 128 KiB: small for tests
                       ubuf_base=1792, ubuf_rows=256, general_lanes=True),
    "base": ChipConfig(name="base", tile_rows=2, tile_cols=2, tile_size=8,
                       cbuf_depth=8192, cbuf_banks=32, acc_depth=1024, acc_banks=32,
                       # 256 MiB, all the ISA's 24-bit word address reaches: VGG-19
                       # (143.7 M weights) with its maps and program takes 188 MB
                       dram_words=1 << 24, imem_depth=4096,
                       ubuf_base=7168, ubuf_rows=1024),
    # tiny's tiles in a 4x2 grid: a 16x8 array (R = 2C), the seed's 128x64 shape scaled
    # down; eight configuration updates per cycle (the seed's widest SETCFG); the feed
    # register, so that the chip-level tests run it too
    "tiny_tall": ChipConfig(name="tiny_tall", tile_rows=4, tile_cols=2, tile_size=4,
                            cbuf_depth=2048, cbuf_banks=8, acc_depth=256, acc_banks=16,
                            dram_words=16384, imem_depth=2048,
                            ubuf_base=1792, ubuf_rows=256, general_lanes=True,
                            max_config_updates_per_cycle=8, power_domain_budget=8,
                            feed_register=True),
    # tiny's tiles in a 2x4 grid: an 8x16 array (C = 2R), weights loaded from the west
    # (docs/contract.md, "Wide grids")
    "tiny_wide": ChipConfig(name="tiny_wide", tile_rows=2, tile_cols=4, tile_size=4,
                            cbuf_depth=2048, cbuf_banks=8, acc_depth=256, acc_banks=16,
                            dram_words=16384, imem_depth=2048,
                            ubuf_base=1792, ubuf_rows=256, general_lanes=True,
                            max_config_updates_per_cycle=8, power_domain_budget=8),
    # tiny's tiles in a 2x3 grid: an 8x12 array whose sides do not divide, an N-block's
    # outputs in pieces across blocks (docs/contract.md, "Grids whose sides do not
    # divide")
    "tiny_2x3": ChipConfig(name="tiny_2x3", tile_rows=2, tile_cols=3, tile_size=4,
                           cbuf_depth=2048, cbuf_banks=8, acc_depth=256, acc_banks=16,
                           dram_words=16384, imem_depth=2048,
                           ubuf_base=1792, ubuf_rows=256, general_lanes=True,
                           max_config_updates_per_cycle=8, power_domain_budget=8),
    # an 8x8 grid of one-cell tiles: an 8x8 array like tiny's, but 232 multiplexers, so
    # its SETCFGs name two pages (docs/contract.md, "SETCFG pages")
    "tiny_8x8": ChipConfig(name="tiny_8x8", tile_rows=8, tile_cols=8, tile_size=1,
                           cbuf_depth=2048, cbuf_banks=8, acc_depth=256, acc_banks=16,
                           dram_words=16384, imem_depth=2048,
                           ubuf_base=1792, ubuf_rows=256),
    # the seed's 16x16 tile grid, its tiles shrunk to one cell: a 16x16 array, 848
    # multiplexers, `wb_src` of 18 sources, past SETCFG's reach: it takes SETCFGW
    # (docs/contract.md, "SETCFG formats")
    "tiny_16x16": ChipConfig(name="tiny_16x16", tile_rows=16, tile_cols=16, tile_size=1,
                             cbuf_depth=2048, cbuf_banks=8, acc_depth=256, acc_banks=16,
                             dram_words=16384, imem_depth=2048,
                             ubuf_base=1792, ubuf_rows=256),
    # The ULX3S 85F (ECP5, systolica.arch.boards) at 50 MHz: a 4x4 array of 2x2 tiles
    # with the feed register, one ACC bank (no ACC crossbar on the accumulate's path)
    # and the ACC's read latency 2 (its block RAM's output registered: the
    # accumulate's add starts from a register).
    # Each CBUF bank is one 18 Kbit block RAM (2048 x 8) per lane, 32 in all;
    # the DRAM 32 more (64 KiB), the program memory's four copies 60. The UBUF is the
    # last bank. Tiny's 8x8 array on the same board (tile_size=4, 4 ACC banks, no feed
    # register) does not reach 50 MHz (docs/fpga.md).
    "ulx3s": ChipConfig(name="ulx3s", tile_rows=2, tile_cols=2, tile_size=2,
                        cbuf_depth=16384, cbuf_banks=8, acc_depth=256, acc_banks=1,
                        dram_words=16384, imem_depth=2048,
                        ubuf_base=14336, ubuf_rows=2048, feed_register=True,
                        latency={**DEFAULT_LATENCY, "acc_read": 2}),
    # The Gowin boards (systolica.arch.boards): a 2x2 array, the smallest one, since
    # the chip's control (sequencer, registers, DMA, fabric, host link) alone takes
    # some 6,000 LUT4s whatever the array; with a 4x4 array the chip needs 18,400
    # (docs/fpga.md). Each CBUF bank is one block RAM per lane; the ACC is one bank.
    # Their 2-byte DRAM words are too narrow for the management core: the host
    # sequences their programs.
    # The program ring is 512 words: the sequencer keeps three copies of it (its
    # reads registered for the clock rate), 12 of the GW2A-18's 46 block RAMs.
    "tangnano9k": ChipConfig(name="tangnano9k", tile_rows=1, tile_cols=1, tile_size=2,
                             cbuf_depth=2048, cbuf_banks=4, acc_depth=256, acc_banks=1,
                             dram_words=4096, imem_depth=512,
                             ubuf_base=1536, ubuf_rows=512,
                             core_imem_bytes=0, core_dmem_bytes=0),
    "tangprimer20k": ChipConfig(name="tangprimer20k", tile_rows=1, tile_cols=1,
                                tile_size=2, cbuf_depth=2048, cbuf_banks=4, acc_depth=256,
                                acc_banks=1, dram_words=16384, imem_depth=512,
                                ubuf_base=1536, ubuf_rows=512,
                                core_imem_bytes=0, core_dmem_bytes=0),
})


def require_config(cfg, call: str, error: type[Exception] = TypeError) -> ChipConfig:
    """`cfg` if it is a ChipConfig; else `error` saying that `call` (``golden.run``)
    takes one and how to get one."""
    if isinstance(cfg, ChipConfig):
        return cfg
    hint = f"preset({cfg!r})" if isinstance(cfg, str) and cfg in PRESETS else \
        "preset('tiny'), or ChipConfig.from_file('chip.json')"
    raise error(f"{call}: cfg must be a ChipConfig (e.g. {hint}), not "
                f"{type(cfg).__name__}")


def preset(name: str | ChipConfig) -> ChipConfig:
    """The preset called `name` (see PRESETS); a ChipConfig (say one read from a chip
    file, :meth:`ChipConfig.from_file`) is returned as it is."""
    if isinstance(name, ChipConfig):
        return name
    if isinstance(name, str) and name in PRESETS:
        return PRESETS[name]
    raise ConfigError(f"unknown chip preset {_short(name)}; choose one of "
                      f"{', '.join(sorted(PRESETS))}")
