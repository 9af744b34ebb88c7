"""Program text (``.stp``) fuzzed: random and mutated text through the whole
``systolica schedule`` path (parse, check, datapath and chip schedules with and
without ``--insert-delays``, the listing and the image, on every preset) ends in a
schedule or in the documented error, a CompileError naming the file, never in another
exception, and within a deadline per example. Every failure these found is a row of the bad-input
catalogue (``testbenches/app/test_bad_inputs_api.py``, section "program text")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from systolica.arch import isa
from systolica.arch.config import PRESETS, ConfigError, preset
from systolica.compiler import CompileError
from systolica.compiler.backend import trace
from systolica.compiler.errors import InternalError
from systolica.compiler.frontend import stp, text

from deadlines import deadline
from paths import EXAMPLES as EXAMPLE_DIR
from tiers import examples

CFG = preset("tiny")
FILE = "fuzz.stp"
#: One example's budget (seconds): a hang is a failure, not a stuck test run.
DEADLINE = 10
#: ``SYSTOLICA_FUZZ_EXAMPLES=n`` runs a campaign of `n` new random examples a test
#: (by hand; what it finds becomes a catalogue row); otherwise the same examples in
#: every run.
CAMPAIGN = int(os.environ.get("SYSTOLICA_FUZZ_EXAMPLES", 0))
FUZZ = settings(database=None, derandomize=not CAMPAIGN, deadline=None,
                max_examples=CAMPAIGN or examples(100),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

SEEDS = [p.read_text() for p in sorted(EXAMPLE_DIR.glob("*.stp"))]

# -- the vocabulary of program text ---------------------------------------------------
FIELDS = sorted({name for op in isa.PAYLOAD for name, _ in isa.PAYLOAD[op]})
WORDS = ["proc", "latency", "read", "ram", "add", "add0", "mul", "mul0", "shift", "sh0",
         "delay", "dreg", "write", "bigram", "occupancy", "a", "b", "x", "y", "addr",
         "dma", "load_cbuf", "store_cbuf", "load_acc", "store_acc", "wload", "load", "mm",
         "matmul", "vpu", "vrun", "cfg", "set", "setw", "convcfg", "taps", "ubuf", "crop",
         "fetch", "lanes", "route", "mux", "source", "mux1", "source1", *FIELDS]
NUMBERS = st.one_of(st.integers(-2, 70), st.sampled_from([
    255, 256, 2047, 2048, 4095, 4096, 65535, 65536, 1 << 24, (1 << 32) - 1, 1 << 32,
    (1 << 64) - 1, 1 << 64, -(1 << 63), 10 ** 30]), st.integers())
STRINGS = st.sampled_from(['"west_feed[0]"', '"cbuf.g0"', '"nope"', '""', '"acc_src[1]"',
                           '"col.g0"', "'zero'", '"north_feed[1]"'])
TOKENS = st.one_of(st.sampled_from(WORDS), NUMBERS.map(str), STRINGS,
                   st.sampled_from(["=", ",", "(", ")", ".", "->", "#", "\n", " ", "\t"]),
                   st.sampled_from(["0x1F", "0b101", "0x", "1e3", "-", "\r", "\f", "\x00",
                                    "é", "$", '"', "'", "\ufeff"]))


@st.composite
def token_lines(draw) -> str:
    """Lines of tokens from the grammar's words, numbers and punctuation."""
    lines = draw(st.lists(st.lists(TOKENS, max_size=14), max_size=12))
    return "\n".join(" ".join(line) for line in lines) + draw(st.sampled_from(["", "\n"]))


SMALL = st.one_of(*[st.integers(0, 300)] * 6, NUMBERS)
DATAPATH_OPS = ["read ram", "add add0", "mul mul0", "shift sh0", "add add1", "delay dreg"]


@st.composite
def statement_programs(draw) -> str:
    """Programs of well-formed statements on defined values, with random fields,
    operands and latencies: past the parser, into both schedulers."""
    inputs = draw(st.lists(st.sampled_from("abq"), max_size=3, unique=True))
    head = [f"proc p({', '.join(inputs)})"] if inputs or draw(st.booleans()) else []
    out, used = [], set()
    defined = list(inputs)
    for k in range(draw(st.integers(1, 10))):
        if draw(st.booleans()):                               # a datapath statement
            op = draw(st.sampled_from(DATAPATH_OPS))
            used.add(op.split()[0])
            names = st.sampled_from(defined) if defined else st.nothing()
            args = draw(st.lists(st.one_of(names, SMALL.map(str)), min_size=1,
                                 max_size=3))
        else:                                                 # a chip statement
            unit, op_name = draw(st.sampled_from(sorted(text.CHIP_OPS)))
            op = f"{unit} {op_name}"
            opcode = text.CHIP_OPS[(unit, op_name)][0]
            fields = [n for n, _ in isa.PAYLOAD[opcode]]
            kw = draw(st.dictionaries(st.sampled_from(fields), SMALL.map(str),
                                      max_size=len(fields)))
            if unit == "cfg":
                kw = {"mux": draw(STRINGS), "source": draw(STRINGS)}
            chip_values = [v for v in defined if v.startswith("c")]
            args = (draw(st.lists(st.sampled_from(chip_values), max_size=2))
                    if chip_values else []) + [f"{k_}={v}" for k_, v in kw.items()]
        name = f"{'c' if op.split()[0] in text.CHIP_UNITS else 'v'}{k}"
        out.append(f"{name} = {op}({', '.join(args)})")
        defined.append(name)
    if not draw(st.integers(0, 4)):                            # now and then one extra
        used.add(draw(st.sampled_from(["read", "mul.mul.occupancy", "vpu", "write"])))
    for key in sorted(used):
        if draw(st.integers(0, 19)):                           # now and then none
            cycles = draw(st.one_of(st.integers(1, 9), st.integers(1, 9),
                                    st.integers(-1, 70000)))
            head.append(f"latency {key} = {cycles}")
    return "\n".join(head + out) + "\n"


@st.composite
def mutated_examples(draw) -> str:
    """An example program with lines dropped, repeated or swapped, numbers changed
    and characters inserted or deleted."""
    lines = draw(st.sampled_from(SEEDS)).splitlines()
    for _ in range(draw(st.integers(1, 6))):
        if not lines:
            break
        k = draw(st.integers(0, len(lines) - 1))
        how = draw(st.sampled_from(["drop", "repeat", "swap", "number", "char", "cut"]))
        if how == "drop":
            del lines[k]
        elif how == "repeat":
            lines.insert(k, lines[k])
        elif how == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[k], lines[j] = lines[j], lines[k]
        elif how == "number":
            digits = [i for i, c in enumerate(lines[k]) if c.isdigit()]
            if digits:
                i = draw(st.sampled_from(digits))
                lines[k] = lines[k][:i] + str(draw(NUMBERS)) + lines[k][i + 1:]
        elif how == "char":
            i = draw(st.integers(0, len(lines[k])))
            lines[k] = lines[k][:i] + draw(st.characters()) + lines[k][i:]
        else:
            i = draw(st.integers(0, len(lines[k])))
            lines[k] = lines[k][:i]
    return "\n".join(lines) + "\n"


# -- the property ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("stp")


def schedule_or_refuse(source: str | bytes, tmp: Path, cfg=CFG) -> None:
    """What ``systolica schedule FILE --insert-delays? --image`` does with `source`:
    a schedule, or a CompileError (or ConfigError, the CLI's other documented one)
    that names the file."""
    path = tmp / FILE
    path.write_bytes(source if isinstance(source, bytes) else source.encode("utf-8",
                                                                            "surrogatepass"))
    for delays in (False, True):
        with deadline(DEADLINE):
            try:
                result = stp.compile_program(cfg, text.parse_file(path), insert_delays=delays)
                trace.listing(result.rows(cfg))
                result.events(cfg)
                if result.chip is not None:
                    assert result.chip.image
            except InternalError:
                raise
            except (CompileError, ConfigError, isa.EncodingError) as e:
                assert FILE in str(e), f"the message does not name the file: {e}"
                assert "Traceback" not in str(e)


@FUZZ
@given(token_lines())
def test_random_tokens(workdir, source):
    schedule_or_refuse(source, workdir)


CHIPS = st.sampled_from(sorted(PRESETS)).map(preset)


@FUZZ
@given(statement_programs(), CHIPS)
def test_random_statements(workdir, source, cfg):
    schedule_or_refuse(source, workdir, cfg)


@FUZZ
@given(mutated_examples(), CHIPS)
def test_mutated_examples(workdir, source, cfg):
    schedule_or_refuse(source, workdir, cfg)


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes(workdir, source):
    schedule_or_refuse(source, workdir)
