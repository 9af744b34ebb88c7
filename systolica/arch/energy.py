"""Energy per access: a table of per-operation energies and the estimate a run's exact
counts make with it (docs/records.md, "Energy").

The defaults are M. Horowitz's 45 nm figures, "Computing's energy problem (and what we
can do about it)", ISSCC 2014, pp. 10-14 (the slide "Energy numbers", Figure 1.1.9 of
the paper): 8-bit integer multiply 0.2 pJ, 32-bit integer add 0.1 pJ, 32-bit multiply
3.1 pJ; a 64-bit SRAM read 10 pJ from an 8 KB array, 20 pJ from 32 KB, 100 pJ from
1 MB; DRAM 1.3-2.6 nJ per 64-bit access; an instruction's I-cache access 25 pJ and a
register-file access 6 pJ (of the 70 pJ a 32-bit add instruction costs). How they are
scaled to what the chip does:

* an array MAC is an 8-bit multiply plus the 32-bit add of the partial-sum chain:
  0.2 + 0.1 = 0.3 pJ, charged for every cell of every row streamed (the MACS counter:
  the array computes in cells a layer does not use too);
* an accumulate-stage add into the ACC is a 32-bit add, 0.1 pJ per int32;
* SRAM per byte is the 64-bit access over 8 bytes at the three sizes the paper gives
  (8 KiB 1.25 pJ/B, 32 KiB 2.5 pJ/B, 1 MiB 12.5 pJ/B); a buffer of another size takes
  the power law through the two sizes around it (a straight line in log energy
  against log size: 64 KiB 3.45 pJ/B), the end figure below 8 KiB or above 1 MiB;
  writes cost what reads do (the paper gives reads only);
* DRAM per byte: the middle of 1.3-2.6 nJ per 8 bytes, 243.75 pJ/B;
* a weight bank's byte shifted in and a configuration register written are register
  accesses: 6 pJ per 8 bytes, 0.75 pJ/B, and 6 pJ per SETCFG, CONVCFG or TAPS;
* an instruction issued reads the instruction memory: 25 pJ (the I-cache figure);
  instruction words fetched from DRAM are DRAM bytes besides;
* a vector-unit element (bias add, requantising multiply, clamp) is a 32-bit add and a
  32-bit multiply: 3.2 pJ per int32 lane.

The chip file's ``[energy]`` table (:func:`from_toml`) or
:meth:`EnergyTable.with_overrides` replace any of them by key.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from systolica.arch.config import ConfigError

SOURCE = ("M. Horowitz, \"Computing's energy problem (and what we can do about it)\", "
          "ISSCC 2014, 45 nm figures")

#: The SRAM sizes the paper gives figures for: (bytes, the table key of its per-byte
#: energy), by size.
SRAM_POINTS = ((8 * 1024, "sram_8kib_pj_per_byte"), (32 * 1024, "sram_32kib_pj_per_byte"),
               (1024 * 1024, "sram_1mib_pj_per_byte"))

#: The components a breakdown has, in order.
COMPONENTS = ("mac", "accumulate", "cbuf", "ubuf", "acc", "wbuf", "dram", "fetch",
              "instruction", "config", "vector")


@dataclass(frozen=True)
class EnergyTable:
    """Energies in picojoules per operation, access or byte (see the module's text for
    where each default comes from)."""

    mac_pj: float = 0.3                      # int8 multiply + int32 add, per array cell
    accumulate_pj: float = 0.1               # int32 add in the accumulate stage, per int32
    sram_8kib_pj_per_byte: float = 1.25      # an 8 KiB SRAM (10 pJ / 64 bits)
    sram_32kib_pj_per_byte: float = 2.5      # 32 KiB (20 pJ / 64 bits)
    sram_1mib_pj_per_byte: float = 12.5      # 1 MiB (100 pJ / 64 bits); sizes between
                                             # on the power law through two of them
    dram_pj_per_byte: float = 243.75         # 1.3-2.6 nJ / 64 bits, the middle
    register_pj_per_byte: float = 0.75       # a register access (6 pJ / 64 bits)
    instruction_pj: float = 25.0             # an instruction memory read per issue
    config_pj: float = 6.0                   # a SETCFG, CONVCFG or TAPS register write
    vector_pj: float = 3.2                   # a vector-unit int32 lane: add + multiply

    def __post_init__(self):
        for f in dataclasses.fields(self):
            _check_value(f.name, getattr(self, f.name), "EnergyTable")

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def to_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in self.keys()}

    def with_overrides(self, mapping: Mapping, where: str = "[energy]") -> EnergyTable:
        """This table with the entries of `mapping` replaced; a key it does not have or
        a value that is not a non-negative finite number is a ConfigError naming it
        and `where` it came from."""
        if not isinstance(mapping, Mapping):
            raise ConfigError(f"{where}: the energy table must be a table of key = "
                              f"number, not {type(mapping).__name__}")
        known = self.keys()
        out = self.to_dict()
        for key, value in mapping.items():
            if key not in known:
                raise ConfigError(f"{where}: unknown energy key {key!r}; the keys are "
                                  f"{', '.join(known)} (docs/records.md, \"Energy\")")
            _check_value(key, value, where)
            out[key] = float(value)
        return EnergyTable(**out)

    def sram_pj_per_byte(self, size_bytes: int) -> float:
        """The per-byte energy of an SRAM of `size_bytes`: the figure of a size the
        table has, the power law through the two around it between them, the end
        figure beyond them."""
        points = [(size, getattr(self, key)) for size, key in SRAM_POINTS]
        if size_bytes <= points[0][0]:
            return points[0][1]
        for (s0, e0), (s1, e1) in zip(points, points[1:]):
            if size_bytes <= s1:
                if e0 <= 0 or e1 <= 0:      # no power law through a zero: a straight line
                    return e0 + (e1 - e0) * (size_bytes - s0) / (s1 - s0)
                t = math.log(size_bytes / s0) / math.log(s1 / s0)
                return e0 * (e1 / e0) ** t
        return points[-1][1]


def _check_value(key: str, value, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{where}: energy {key} must be a non-negative number of "
                          f"picojoules, not {value!r}")


#: The published defaults.
DEFAULT = EnergyTable()


def from_toml(source: str | Path | Mapping, base: EnergyTable = DEFAULT, *,
              name: str | None = None) -> EnergyTable:
    """The energy table of a chip file: its top-level ``[energy]`` table over `base`
    (a file without one: `base`). `source` is a TOML file's path or the mapping
    ``tomllib`` makes of the whole file, `name` what errors call it (default: the path;
    the ``[energy]`` table alone: :meth:`EnergyTable.with_overrides`). A key or value
    it cannot use is a ConfigError naming the file, the key and what to give."""
    if isinstance(source, Mapping):
        data = source
    else:
        name = name or str(source)
        try:
            with open(source, "rb") as f:
                data = tomllib.load(f)
        except OSError as e:
            raise ConfigError(f"{source}: cannot read it ({e.strerror or e})") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{source}: not valid TOML ({e})") from None
    where = f"{name}: [energy]" if name else "[energy]"
    return base.with_overrides(data.get("energy", {}), where)


def sram_sizes(cfg) -> dict[str, int]:
    """Each on-chip buffer's size in bytes, which sets its SRAM class: the CBUF, the
    UBUF (the CBUF's when it is a region of it), the ACC."""
    cbuf = cfg.cbuf_depth * cfg.rows
    return {"cbuf": cbuf,
            "ubuf": cfg.ubuf_rows * cfg.rows if cfg.ubuf_own_sram else cbuf,
            "acc": cfg.acc_depth * 4 * cfg.cols}


def estimate(counts: Mapping, table: EnergyTable = DEFAULT, cfg=None) -> dict[str, float]:
    """Joules per component (:data:`COMPONENTS`) and ``total`` for `counts`, a record's
    counts (``array_macs``, ``accumulates``, ``buffers`` -> per buffer ``read_bytes``
    and ``write_bytes``, ``dram_rd_bytes``, ``dram_wr_bytes``, ``fetch_rd_bytes``,
    ``instructions``, ``config_writes``, ``vector_lanes``). `cfg` sets the SRAM size
    classes (None: counts carry ``sram_bytes``, buffer -> size)."""
    sizes = sram_sizes(cfg) if cfg is not None else counts["sram_bytes"]
    buffers = counts["buffers"]
    pj = {"mac": counts["array_macs"] * table.mac_pj,
          "accumulate": counts["accumulates"] * table.accumulate_pj}
    for name in ("cbuf", "ubuf", "acc"):
        b = buffers[name]
        pj[name] = (b["read_bytes"] + b["write_bytes"]) * table.sram_pj_per_byte(sizes[name])
    w = buffers["wbuf"]
    pj["wbuf"] = (w["read_bytes"] + w["write_bytes"]) * table.register_pj_per_byte
    pj["dram"] = (counts["dram_rd_bytes"] + counts["dram_wr_bytes"]) * table.dram_pj_per_byte
    pj["fetch"] = counts["fetch_rd_bytes"] * table.dram_pj_per_byte
    pj["instruction"] = counts["instructions"] * table.instruction_pj
    pj["config"] = counts["config_writes"] * table.config_pj
    pj["vector"] = counts["vector_lanes"] * table.vector_pj
    out = {k: pj[k] * 1e-12 for k in COMPONENTS}
    out["total"] = sum(out.values())
    return out
