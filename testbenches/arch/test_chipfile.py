"""Chip files in TOML (``systolica/arch/chipfile.py``, docs/chip.md "Chip files"): every
preset survives ``dump`` and ``load``, ``base`` starts from a preset, a chip's name is
its file's stem unless the file says one, ``[energy]`` is left to the energy model; a
bad file is a ConfigError naming the file, the line of the key at fault, the values it
may take and what to do (the catalogue ``BAD_FILES``); ``--config FILE.toml`` compiles
for the file's chip and ``config show`` prints a chip as such a file."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systolica.app import cli
from systolica.arch import chipfile, image_file
from systolica.arch.config import DEFAULT_LATENCY, PRESETS, ConfigError, preset

from test_bad_inputs import assert_clear, assert_refused, run_cli
from tiers import examples

TINY = preset("tiny")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_survives_its_file(name, tmp_path):
    text = chipfile.dump(PRESETS[name])
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    assert chipfile.load(path) == PRESETS[name]
    assert chipfile.resolve(str(path)) == PRESETS[name]


def test_dump_says_what_every_field_is():
    """A comment over every field: what it is (ChipConfig's own words where its source
    has them) and the values it may take."""
    text = chipfile.dump(preset("base"))
    what = chipfile.describe()
    for name in what:
        assert what[name], name
        assert f"{name} = " in text or name == "latency", name
    assert "# Rows per CBUF partition" in text
    assert "[latency]" in text and "acc_read = 1" in text
    # one comment over two fields in config.py goes over both
    assert what["ubuf_base"] == what["ubuf_rows"] and "0 rows = no UBUF" in what["ubuf_base"]


def test_base_name_latency_and_energy(tmp_path):
    path = tmp_path / "wide_one.toml"
    path.write_text('# a wider tiny\nbase = "tiny"\ntile_cols = 4\n'
                    "max_config_updates_per_cycle = 8\npower_domain_budget = 8\n\n"
                    '[latency]\nacc_read = 2\n"read.bigram" = 3\n\n'
                    "[energy]\nmac_pj = 0.25\n[energy.sram]\nread_pj = 1.5\n")
    cfg = chipfile.load(path)
    assert cfg == TINY.replace(name="wide_one", tile_cols=4, max_config_updates_per_cycle=8,
                               power_domain_budget=8,
                               latency={**DEFAULT_LATENCY, "acc_read": 2, "read.bigram": 3})
    assert chipfile.document(path)["energy"] == {"mac_pj": 0.25, "sram": {"read_pj": 1.5}}
    # the name the file gives wins over its stem; the file's text round-trips
    named = chipfile.loads('base = "tiny"\nname = "other"\n', source="x.toml", stem="x")
    assert named == TINY.replace(name="other")
    assert chipfile.loads(chipfile.dump(cfg)) == cfg


def test_a_file_without_base_gives_every_field():
    text = "\n".join(line for line in chipfile.dump(TINY).splitlines()
                     if not line.startswith(("#", "name", "ubuf_", "core_", "[latency]",
                                             "dram_read", "cbuf_read", "acc_read", "vpu")))
    assert chipfile.loads(text, stem="plain") == TINY.replace(name="plain", ubuf_base=0,
                                                              ubuf_rows=0)


@pytest.mark.parametrize("text, key, table, line", [
    ("a = 1\ntile_size = 4\n", "tile_size", None, 2),
    ('"tile_size" = 4\n', "tile_size", None, 1),
    ("tile_size_x = 1\ntile_size=4\n", "tile_size", None, 2),
    ("[latency]\nvpu = 3\n[energy]\nvpu = 1\n", "vpu", "latency", 2),
    ("[energy]\nvpu = 1\n[latency]\nvpu = 3\n", "vpu", "latency", 4),
    ("latency.vpu = 3\n", "vpu", "latency", 1),
    ("latency = {vpu = 3}\n", "vpu", "latency", 1),
    ("[latency]\nvpu = 3\n", "vpu", None, None),
    ("x = 1\n\n[power]\n", "power", None, 3),
])
def test_key_line(text, key, table, line):
    assert chipfile.key_line(text, key, table) == line


BAD_FILES = [
    # (id, the text of chip.toml, its line at fault or None, key words)
    ("not-toml", 'base = "tiny"\ntile_size = 8,\n', "2:14",
     ["not valid TOML", "key = value", "Chip files"]),
    ("key-twice", "tile_size = 4\ntile_size = 8\n", "2:", ["not valid TOML"]),
    ("unknown-key", 'base = "tiny"\ntile_rows = 2\ntiles_size = 8\n', 3,
     ["unknown key 'tiles_size'", "did you mean 'tile_size'", "rename or remove it"]),
    ("unknown-table", 'base = "tiny"\n\n[power]\nbudget = 3\n', 3,
     ["unknown table [power]", "[latency]", "[energy]", "remove or rename it"]),
    ("a-string-for-a-number", 'base = "tiny"\ntile_size = "8"\n', 2,
     ["tile_size must be an integer from 1 to 65535", "not a string ('8')",
      "tile_size = 8"]),
    ("a-float-for-a-number", "base = 'tiny'\ndram_words = 4096.0\n", 2,
     ["dram_words must be an integer", "number with a point", "dram_words = 4096"]),
    ("an-integer-for-a-flag", 'base = "tiny"\ngeneral_lanes = 1\n', 2,
     ["general_lanes must be true or false", "an integer (1)", "general_lanes = true"]),
    ("out-of-range", 'base = "tiny"\n\ntile_size = 0\n', 3,
     ["tile_size = 0 is out of range", "1 to 65535", "change it"]),
    ("past-the-address-field", 'base = "tiny"\nacc_depth = 8192\n', 2,
     ["acc_depth = 8192 is out of range", "4 to 4096"]),
    ("a-relation-chipconfig-refuses", 'base = "tiny"\ntile_size = 8\ncbuf_banks = 3\n', 3,
     ["cbuf_depth 2048 must be a multiple of cbuf_banks 3", "cbuf_banks: an integer",
      "Chip files"]),
    ("ubuf-not-whole-banks", 'base = "tiny"\nubuf_rows = 100\n', 2,
     ["whole CBUF banks", "ubuf_rows: 0 (no UBUF)"]),
    ("latency-the-rtl-lacks", 'base = "tiny"\n[latency]\nvpu = 4\n', 3,
     ["vector unit has 3 stages", "set latency vpu to 3"]),
    ("latency-not-cycles", 'base = "tiny"\n[latency]\nacc_read = "two"\n', 3,
     ["latency 'acc_read' must be a whole number of cycles", "not a string ('two')"]),
    ("latency-not-a-table", 'base = "tiny"\nlatency = 3\n', 2,
     ["latency must be a table", "[latency]"]),
    ("energy-not-a-table", 'base = "tiny"\nenergy = 3\n', 2, ["energy must be a table"]),
    ("base-not-a-preset", 'base = "tiny2"\n', 1,
     ["base must name a preset", "tiny_tall", "not a string ('tiny2')"]),
    ("fields-missing", "tile_size = 8\n", None,
     ["missing key(s) tile_rows, tile_cols", "base = \"tiny\""]),
    ("a-preset-name-on-another-chip", 'base = "tiny"\nname = "base"\n', 2,
     ["'base' is a preset's", "differs from it in", "a name of its own"]),
    ("a-bad-name", 'base = "tiny"\nname = "my chip"\n', 2, ["name", "'my chip'"]),
    ("not-utf8", b'base = "tiny"\nname = "m\xe9"\n', None, ["not UTF-8", "0xe9"]),
    ("a-field-under-latency", 'base = "tiny"\n[latency]\nacc_read = 2\ntile_size = 8\n', 4,
     ["tile_size is a key of the chip", "under [latency]", "move it above the first table"]),
    ("a-number-of-5000-digits", 'base = "tiny"\ndram_words = 1' + "0" * 5000 + "\n", None,
     ["thousands of digits", "small integers"]),
    ("nested-too-deep", "a = " + "[" * 100000, None, ["chip.toml"]),
    ("a-field-under-energy", 'base = "tiny"\n[energy]\nmac_pj = 0.2\ndram_words = 64\n', 4,
     ["dram_words is a key of the chip", "under [energy]"]),
]


@pytest.mark.parametrize("text, line, words",
                         [pytest.param(*row[1:], id=row[0]) for row in BAD_FILES])
def test_bad_files(text, line, words, tmp_path):
    path = tmp_path / "chip.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError) as info:
        chipfile.load(path)
    message = str(info.value)
    where = f"{path}:{line}" if line is not None else f"{path}: "
    assert message.startswith(where if isinstance(line, str) or line is None
                              else f"{where}: "), message
    assert_clear(message, words)
    assert len(message) < 700


def test_the_stem_names_the_chip_unless_the_file_does(tmp_path):
    (tmp_path / "tiny.toml").write_text('base = "tiny"\ntile_size = 8\n')
    with pytest.raises(ConfigError, match="rename the file, or give the chip a name"):
        chipfile.load(tmp_path / "tiny.toml")
    (tmp_path / "two words.toml").write_text('base = "tiny"\n')
    with pytest.raises(ConfigError, match="'two words' is not a chip name"):
        chipfile.load(tmp_path / "two words.toml")


@pytest.mark.parametrize("arg, words", [
    ("tny", ["unknown chip 'tny'", "did you mean 'tiny'", "ending in .toml",
             "config show tiny"]),
    ("missing.toml", ["missing.toml", "no such file", "chip file (TOML)"]),
    (3, ["not int"]),
])
def test_resolve_refuses(arg, words):
    with pytest.raises(ConfigError) as info:
        chipfile.resolve(arg)
    assert_clear(str(info.value), words)


# -- on the command line ------------------------------------------------------------------
def test_compile_for_a_chip_file(tmp_path, capsys):
    path = tmp_path / "grid4.toml"
    path.write_text('base = "tiny"\ntile_rows = 4\ntile_cols = 4\n'
                    "max_config_updates_per_cycle = 8\npower_domain_budget = 8\n")
    image = tmp_path / "gemm.img"
    status, out, err = run_cli(["compile", "--gemm", "32x32x32", "--config", str(path),
                                "--out", str(image)], capsys)
    assert status == 0, err
    assert "cycles predicted" in out
    header = image_file.unpack(image.read_bytes(), source=str(image))
    assert (header.chip, header.fingerprint) == ("grid4", chipfile.load(path).program_key)


@pytest.mark.parametrize("name", ["base", "tiny_16x16"])
def test_config_show_prints_a_chip_file(name, tmp_path, capsys):
    status, out, err = run_cli(["config", "show", name], capsys)
    assert status == 0 and err == ""
    (tmp_path / f"{name}.toml").write_text(out)
    assert chipfile.load(tmp_path / f"{name}.toml") == PRESETS[name]
    status, again, err = run_cli(["config", "show", str(tmp_path / f"{name}.toml")], capsys)
    assert (status, again) == (0, out)


def test_config_refusals(tmp_path, capsys):
    (tmp_path / "bad.toml").write_text('base = "tiny"\ntile_size = 0\n')
    assert_refused(*run_cli(["compile", "--gemm", "8x8x8", "--config",
                             str(tmp_path / "bad.toml")], capsys),
                   ["argument --config", "bad.toml:2: tile_size = 0 is out of range"])
    assert_refused(*run_cli(["config", "show", "tny"], capsys),
                   ["invalid choice: 'tny'", "ending in .toml or .json"])
    assert_refused(*run_cli(["config"], capsys), ["ACTION"])
    mine = tmp_path / "mine.toml"
    mine.write_text('base = "tiny"\n')
    assert_refused(*run_cli(["library", "--config", str(mine)], capsys),
                   ["--out: chip mine is not a preset", "--out mine.library.json",
                    "--library"])
    assert_refused(*run_cli(["sim", "--library", "x.json"], capsys),
                   ["--library is for --onnx"])
    assert cli  # the parser under test


TEXT = [line for line in chipfile.dump(TINY).splitlines() if line and not line.startswith("#")]
VALUES = st.one_of(st.integers(-2, 1 << 34).map(str), st.sampled_from(
    ["true", "false", '"x"', "1.5", "[1, 2]", "{a = 1}", "1979-05-27", "inf", "", "0x10",
     '"tiny"', "-0"]))


@settings(database=None, derandomize=True, deadline=None, max_examples=examples(200))
@given(st.lists(st.tuples(st.integers(0, len(TEXT) - 1), st.integers(0, 3), VALUES),
                min_size=1, max_size=4))
def test_edited_files_give_a_chip_or_a_config_error(edits):
    """Lines of a chip file given other values, dropped, doubled or moved under a
    table: a ChipConfig or a ConfigError saying where, never another exception."""
    lines = list(TEXT)
    for at, how, value in edits:
        at %= len(lines)
        key = lines[at].split("=")[0].strip()
        if how == 0 and "=" in lines[at]:
            lines[at] = f"{key} = {value}"
        elif how == 1:
            del lines[at]
        elif how == 2:
            lines.insert(at, lines[at])
        else:
            lines.append(lines.pop(at))
        if not lines:
            lines = ['base = "tiny"']
    try:
        chipfile.loads("\n".join(lines) + "\n", source="edited.toml", stem="edited")
    except ConfigError as e:
        assert str(e).startswith("edited.toml") and "Traceback" not in str(e)
