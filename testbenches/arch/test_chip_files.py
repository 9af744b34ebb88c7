"""Chip files (``ChipConfig.from_dict`` / ``from_json``, docs/chip.md "Chip files"):
every preset survives the trip through its file, and random or mutated chip
descriptions give a valid ChipConfig or a ConfigError naming the key at fault, never
another exception; a chip they give compiles a small GEMM or says why not."""

from __future__ import annotations

import copy
import json
import os
import pickle
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from systolica import golden
from systolica.arch.config import DEFAULT_LATENCY, PRESETS, ChipConfig, ConfigError, preset
from systolica.compiler import CompileError, compile_network, gemm

from tiers import examples

FIELDS = [f for f in ChipConfig.__dataclass_fields__]
CAMPAIGN = int(os.environ.get("SYSTOLICA_FUZZ_EXAMPLES", 0))
FUZZ = settings(database=None, derandomize=not CAMPAIGN, deadline=None,
                max_examples=CAMPAIGN or examples(150),
                suppress_health_check=[HealthCheck.too_slow])


# -- presets and their files -------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_round_trips_through_its_file(name, tmp_path):
    cfg = preset(name)
    path = tmp_path / f"{name}.json"
    path.write_text(cfg.to_json())
    again = ChipConfig.from_file(path)
    assert again == cfg and again.key == cfg.key and again.to_dict() == cfg.to_dict()
    assert pickle.loads(pickle.dumps(cfg)) == cfg and copy.deepcopy(cfg) == cfg


def test_presets_are_read_only():
    cfg = preset("tiny")
    with pytest.raises(TypeError):
        cfg.latency["vpu"] = 9                          # type: ignore[index]
    with pytest.raises(TypeError):
        PRESETS["tiny"] = cfg.replace(name="mine")      # type: ignore[index]
    with pytest.raises(TypeError):
        DEFAULT_LATENCY["vpu"] = 4                      # type: ignore[index]
    with pytest.raises(AttributeError):
        cfg.tile_size = 8                               # type: ignore[misc]
    assert isinstance(cfg.latency, types.MappingProxyType)


def test_a_latency_table_given_stays_the_callers():
    table = {**DEFAULT_LATENCY, "acc_read": 2}
    cfg = preset("tiny").replace(name="mine", latency=table)
    table["acc_read"] = 1
    assert cfg.latency["acc_read"] == 2
    assert cfg.replace(name="again").latency == cfg.latency


# -- random and mutated descriptions -----------------------------------------------------
ODD_VALUES = st.one_of(
    st.integers(-3, 70), st.sampled_from([0, 1, 2, 3, 4, 8, 255, 256, 1 << 16, 1 << 24,
                                          (1 << 32) - 1, 1 << 32, 1 << 64, 10 ** 30]),
    st.integers(), st.booleans(), st.none(), st.floats(allow_nan=True),
    st.text(max_size=8), st.lists(st.integers(0, 4), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(0, 4), max_size=2))
LATENCY_KEYS = st.one_of(st.sampled_from([*DEFAULT_LATENCY, "read.bigram", "mul", "x..y",
                                          "", "1abc", "vpu "]), st.text(max_size=6))


@st.composite
def mutated_latency(draw, table: dict):
    table = dict(table)
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["set", "drop", "add"]))
        if how == "drop" and table:
            del table[draw(st.sampled_from(sorted(table)))]
        else:
            key = draw(st.sampled_from(sorted(table))) if how == "set" and table else \
                draw(LATENCY_KEYS)
            table[key] = draw(ODD_VALUES)
    return table


@st.composite
def chip_descriptions(draw) -> tuple[dict, set[str]]:
    """A preset's description with 1 to 4 keys changed, dropped or added; and the keys
    touched."""
    data = preset(draw(st.sampled_from(sorted(PRESETS)))).to_dict()
    data["name"] = "fuzz"
    touched = set()
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["value", "value", "value", "drop", "unknown",
                                    "latency"]))
        if how == "latency":
            table = data.get("latency")
            table = table if isinstance(table, dict) else dict(DEFAULT_LATENCY)
            data["latency"] = draw(st.one_of(mutated_latency(table), ODD_VALUES))
            touched.add("latency")
            continue
        key = draw(st.sampled_from(FIELDS)) if how != "unknown" else \
            draw(st.one_of(st.sampled_from(["tile", "tiles", "Tile_size", "latency_vpu"]),
                           st.text(max_size=6)))
        touched.add(key)
        if how == "drop":
            data.pop(key, None)
        else:
            data[key] = draw(ODD_VALUES)
    return data, touched


def describe_or_refuse(data, touched) -> ChipConfig | None:
    """A ChipConfig, or None after a ConfigError that names a key of the description
    (one it touched, or one of ChipConfig's fields that a rule ties to it)."""
    try:
        cfg = ChipConfig.from_dict(data, source="fuzz.json")
    except ConfigError as e:
        message = str(e)
        assert message.startswith("fuzz.json: ") and "Traceback" not in message
        names = [str(k) for k in touched] + FIELDS + ["ROUTE", "multiplexer", "SETCFG"]
        assert any(n and n in message for n in names), message
        assert len(message) < 1000, message
        return None
    again = ChipConfig.from_json(cfg.to_json(), source="again.json")
    assert again == cfg and again.key == cfg.key
    return cfg


@FUZZ
@given(chip_descriptions())
def test_mutated_chip_descriptions(case):
    describe_or_refuse(*case)


@FUZZ
@given(st.one_of(ODD_VALUES, st.lists(ODD_VALUES, max_size=3),
                 st.dictionaries(st.sampled_from(FIELDS), ODD_VALUES, max_size=12)))
def test_random_chip_descriptions(data):
    describe_or_refuse(data, set(data) if isinstance(data, dict) else set())


@FUZZ
@given(st.data())
def test_mutated_chip_file_text(data):
    """A chip file's text with bytes changed, inserted or cut: a chip, or a
    ConfigError naming the file."""
    text = bytearray(preset(data.draw(st.sampled_from(sorted(PRESETS)))).to_json().encode())
    for _ in range(data.draw(st.integers(1, 4))):
        k = data.draw(st.integers(0, len(text)))
        how = data.draw(st.sampled_from(["byte", "insert", "cut", "delete"]))
        if how == "byte" and k < len(text):
            text[k] = data.draw(st.integers(0, 255))
        elif how == "insert":
            text[k:k] = data.draw(st.sampled_from([b"{", b"[", b"1", b"\"", b",", b"0" * 5000,
                                                   b"NaN", b"\xff", b"-", b"e9"]))
        elif how == "cut":
            del text[k:]
        elif k < len(text):
            del text[k]
    try:
        ChipConfig.from_json(bytes(text), source="chip.json")
    except ConfigError as e:
        assert str(e).startswith("chip.json"), e


POW2 = [1 << k for k in range(17)]


@st.composite
def plausible_chips(draw) -> dict:
    """Descriptions near the presets' shapes, most of them valid: small grids, power
    of two memories and banks, the UBUF somewhere in the CBUF or in its own SRAM."""
    cbuf = draw(st.sampled_from(POW2[6:17]))
    banks = draw(st.sampled_from([b for b in POW2[:7] if b <= cbuf]))
    acc = draw(st.sampled_from(POW2[2:13]))
    ubuf_rows = draw(st.sampled_from([0, *[r for r in POW2 if cbuf // banks <= r <= cbuf]]))
    own = draw(st.booleans()) and ubuf_rows > 0
    pairs = draw(st.integers(1, 8))
    return dict(name="fuzz", tile_rows=draw(st.integers(1, 6)),
                tile_cols=draw(st.integers(1, 6)),
                tile_size=draw(st.sampled_from([1, 2, 4, 8, 8, 16, 64])),
                cbuf_depth=cbuf, cbuf_banks=banks, acc_depth=acc,
                acc_banks=draw(st.sampled_from([b for b in POW2[:6] if b <= acc])),
                dram_words=draw(st.sampled_from([1 << 10, 1 << 14, 1 << 20, 1 << 24])),
                imem_depth=draw(st.sampled_from([16, 512, 2048])),
                ubuf_base=cbuf if own else draw(st.sampled_from([0, cbuf - ubuf_rows])),
                ubuf_rows=ubuf_rows, ubuf_own_sram=own,
                general_lanes=draw(st.booleans()), feed_register=draw(st.booleans()),
                max_config_updates_per_cycle=pairs,
                config_update_interval=draw(st.sampled_from([1, 1, 2, 3])),
                power_domain_budget=draw(st.integers(1, pairs)),
                latency={**DEFAULT_LATENCY, "acc_read": draw(st.sampled_from([1, 2]))})


@pytest.mark.slow
@settings(database=None, derandomize=not CAMPAIGN, deadline=None,
          max_examples=CAMPAIGN // 10 or examples(30),
          suppress_health_check=[HealthCheck.too_slow])
@given(plausible_chips(), st.sampled_from([(8, 8, 8), (3, 17, 5), (40, 4, 70)]))
def test_a_chip_from_a_file_compiles_or_says_why(data, mkn):
    """A chip that a description gives compiles a GEMM and the golden model's run of
    it gives numpy's result, or the compiler refuses it with a CompileError or
    ConfigError; never another exception, never a wrong result."""
    try:
        cfg = ChipConfig.from_dict(data)
    except ConfigError:
        return
    m, k, n = mkn
    rng = np.random.default_rng(m * k * n)
    a, b = rng.integers(-128, 128, (m, k)), rng.integers(-128, 128, (k, n))
    network = gemm(a, b, out_dtype="int32")
    try:
        compiled = compile_network(cfg, network)
    except (CompileError, ConfigError):
        return
    run = golden.run(cfg, compiled.loadable)
    assert run.error.name == "NONE", (cfg, run.error)
    assert np.array_equal(compiled.results(run.dram)["gemm"], a @ b)


def test_json_keys_are_refused_by_name():
    data = json.loads(preset("tiny").to_json())
    data["tiles"] = 2
    with pytest.raises(ConfigError, match="unknown key.*'tiles'"):
        ChipConfig.from_dict(data)
