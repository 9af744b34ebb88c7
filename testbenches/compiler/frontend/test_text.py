"""Program text: tokens, grammar, parse errors with positions, name checks, and chip
statements turned into checked micro-ops."""

import pytest

from systolica.arch import isa
from systolica.arch.config import preset
from systolica.arch.isa import DmaKind, Opcode
from systolica.compiler import CompileError
from systolica.compiler.frontend.text import (
    ParseError,
    Statement,
    cfg_settings,
    format_statement,
    parse,
    parse_file,
    to_micro_op,
    to_micro_ops,
)

CFG = preset("tiny")

TABLE1 = """\
proc table1(addr)      # seed 002, Table 1
latency read.bigram = 2
x = read ram(addr)
y = read ram(addr)
z = read bigram(addr)
m = mul mul0(y, z)
s = add add0(m, x)
write ram(addr, s)
"""


def test_table1_statements():
    prog = parse(TABLE1, "t1.stp")
    assert prog.name == "table1" and prog.inputs == ("addr",) and prog.outputs == ()
    assert prog.latency == {"read.bigram": 2}
    assert [(s.outputs, s.op, s.component, s.args) for s in prog.statements] == [
        (("x",), "read", "ram", ("addr",)),
        (("y",), "read", "ram", ("addr",)),
        (("z",), "read", "bigram", ("addr",)),
        (("m",), "mul", "mul0", ("y", "z")),
        (("s",), "add", "add0", ("m", "x")),
        ((), "write", "ram", ("addr", "s")),
    ]
    m = prog.statements[3]
    assert (m.line, m.col, m.text) == (6, 1, "m = mul mul0(y, z)")
    assert m.operands == ("y", "z") and not m.is_chip


def test_args_kwargs_and_several_outputs():
    prog = parse("proc p(a) -> (lo, hi)\n  lo, hi = split sp0(a, -3, 0x10, mode=fast, tag='t x')\n")
    st = prog.statements[0]
    assert st.outputs == ("lo", "hi") and st.args == ("a", -3, 16)
    assert st.kwargs == {"mode": "fast", "tag": "t x"}
    assert (st.line, st.col) == (2, 3)
    assert st.operands == ("a",)
    assert prog.outputs == ("lo", "hi")
    assert format_statement(st) == 'lo, hi = split sp0(a, -3, 16, mode=fast, tag="t x")'


def test_proc_single_output_without_parentheses():
    prog = parse("proc p(a) -> b\nb = neg n0(a)\n")
    assert prog.outputs == ("b",)


@pytest.mark.parametrize("text, where, expected", [
    ("x = read ram(addr\n", "1:18", "expected ',' or ')' in the argument list, found end of line"),
    ("x = read (addr)\n", "1:10", "expected component name after 'read'"),
    ("x = read ram addr)\n", "1:14", "expected '(' after 'read ram'"),
    ("x, = read ram(a)\n", "1:4", "expected result name"),
    ("\n\nx = read ram(a) y\n", "3:17", "expected end of line"),
    ("x = read ram(a, k=1, b)\n", "1:22", "positional argument after keyword"),
    ("x = read ram(k=1, k=2)\n", "1:19", "keyword 'k' is given twice"),
    ("x = read ram(a, $)\n", "1:17", "unexpected character '$'"),
    ("latency read = 0\n", "1:16", "must be a positive integer"),
    ("latency read = 1\nlatency read = 2\n", "2:1", "latency read is given twice"),
    ("x = read ram(a)\nproc p(a)\n", "2:1", "'proc' header must be the first line"),
    ("x = read ram(12ab)\n", "1:14", "malformed number"),
])
def test_parse_errors_name_position_and_expectation(text, where, expected):
    with pytest.raises(ParseError) as e:
        parse(text, "bad.stp")
    assert str(e.value).startswith(f"bad.stp:{where}: ")
    assert expected in str(e.value)
    assert isinstance(e.value, CompileError)


def test_undefined_value_named_with_its_position():
    with pytest.raises(ParseError) as e:
        parse("proc p(addr)\nx = read ram(addr)\ns = add add0(x, q)\n", "u.stp")
    assert str(e.value).startswith("u.stp:3:17: 'q' is used but never defined")


def test_use_before_definition_in_text_order_is_allowed():
    # latency-insensitive: text order says nothing about time
    prog = parse("s = neg n0(x)\nx = read ram(0)\n")
    assert [s.outputs for s in prog.statements] == [("s",), ("x",)]


@pytest.mark.parametrize("text, expected", [
    ("x = read ram(0)\nx = read ram(1)\n", "2:1: 'x' is defined twice: at line 1 and here"),
    ("proc p(x)\nx = read ram(0)\n", "2:1: 'x' is defined twice: as a proc input and here"),
    ("a, a = f g()\n", "1:1: 'a' is defined twice by one statement"),
    ("proc p(a) -> (b)\nc = neg n0(a)\n", "proc output 'b' is not defined"),
])
def test_definition_errors(text, expected):
    with pytest.raises(ParseError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        parse(text)


# -- chip statements -----------------------------------------------------------------------
def chip(line):
    return to_micro_op(CFG, parse(line).statements[0])


@pytest.mark.parametrize("op, kind", [("load_cbuf", DmaKind.LOAD_CBUF),
                                      ("store_cbuf", DmaKind.STORE_CBUF),
                                      ("load_acc", DmaKind.LOAD_ACC),
                                      ("store_acc", DmaKind.STORE_ACC)])
def test_dma_kinds(op, kind):
    m = chip(f"t = dma {op}(dram_addr=8, dram_stride=1, buf_addr=4, rows=2)")
    assert m.op is Opcode.DMA
    assert m.fields == {"kind": kind, "dram_addr": 8, "dram_stride": 1, "buf_addr": 4,
                        "rows": 2}


def test_chip_statements_name_the_unit_first():
    st = parse("a = dma load_cbuf(rows=1)\n").statements[0]
    assert (st.component, st.op, st.is_chip) == ("dma", "load_cbuf", True)
    assert format_statement(st) == "a = dma load_cbuf(rows=1)"


def test_every_unit_converts():
    text = """\
a = dma load_cbuf(dram_addr=0, dram_stride=1, buf_addr=0, rows=8)
w = wload load(a, w_addr=0, bank=1)
c = mm matmul(w, act_addr=8, rows=4, acc_addr=2, accumulate=1, bank=1)
v = vpu vrun(c, src=2, rows=4, dst=64, relu=1)
"""
    ops = to_micro_ops(CFG, parse(text).statements)
    assert [m.op for m in ops] == [Opcode.DMA, Opcode.WLOAD, Opcode.MATMUL, Opcode.VRUN]
    assert ops[1].fields == {"w_addr": 0, "bank": 1}
    assert ops[2].fields["acc_addr"] == 2 and ops[2].fields["accumulate"] == 1
    assert ops[3].fields["relu"] == 1 and ops[3].fields["to_acc"] == 0
    assert all(isa.decode(isa.encode(m.instr(5))).fields == m.fields for m in ops)


def settings(line):
    return cfg_settings(CFG, parse(line + "\n").statements[0])


def test_cfg_set_names_multiplexers_and_sources():
    assert settings('r = cfg set(mux="north_feed[1]", source="zero")') == \
        {"north_feed[1]": "zero"}


def test_cfg_set_several_pairs_and_source_numbers():
    line = ('r = cfg set(mux="west_feed[0]", source="cbuf.g1", mux1="acc_src[1]", '
            'source1="col.g0", mux2="wb_src[0]", source2=1)')
    assert settings(line) == {"west_feed[0]": "cbuf.g1", "acc_src[1]": "col.g0",
                              "wb_src[0]": "col.g1"}


def test_cfg_set_is_not_an_instruction_of_its_own():
    with pytest.raises(ParseError, match="a cfg set is not an instruction of its own"):
        chip('r = cfg set(mux="west_feed[0]", source="zero")')


@pytest.mark.parametrize("line, expected", [
    ('r = cfg set(mux="west_feed[9]", source="zero")', "unknown multiplexer 'west_feed[9]'"),
    ('r = cfg set(mux="west_feed[0]", source="cbuf.g7")', "has no source 'cbuf.g7'"),
    ('r = cfg set(mux="west_feed[0]", source=9)', "west_feed[0] has no source number 9"),
    ('r = cfg set(mux="west_feed[0]")', "mux and source go together"),
    ('r = cfg set(index=3, value=1)', "cfg set has no keyword 'index'"),
    ('r = cfg set()', "cfg set names no multiplexer"),
    ('r = cfg set(mux="west_feed[0]", source="zero", mux1="west_feed[0]", source1="zero")',
     "multiplexer west_feed[0] is set twice"),
])
def test_cfg_set_errors_name_statement_and_keyword(line, expected):
    with pytest.raises(ParseError) as e:
        cfg_settings(CFG, parse(line + "\n", "c.stp").statements[0], "c.stp")
    msg = str(e.value)
    assert msg.startswith("c.stp:1:1: 'r = cfg set(") and expected in msg


@pytest.mark.parametrize("line, expected", [
    ("a = dma load_cbuf(dram_addr=0, rowz=3)",
     "DMA has no field(s) rowz; its fields are dram_addr, dram_stride, buf_addr, rows"),
    ("a = dma load_cbuf(kind=1, rows=3)", "DMA has no field(s) kind"),
    ("a = dma fetch(rows=3)", "unit dma has no operation 'fetch'; it has load_acc, "
                              "load_cbuf, store_acc, store_cbuf"),
    ("a = wload load(3, w_addr=0)", "fields are given by keyword"),
    ("a = wload load(w_addr=zero)", "field w_addr must be an integer"),
    ("a = mm matmul(act_addr=0, rows=0)", "rows must be at least 1"),
])
def test_chip_errors_name_statement_and_fields(line, expected):
    with pytest.raises(ParseError) as e:
        to_micro_op(CFG, parse(line + "\n", "c.stp").statements[0], "c.stp")
    msg = str(e.value)
    assert msg.startswith("c.stp:1:1: '") and expected in msg
    assert line.split("(")[0] in msg        # the statement is named


def test_statement_is_a_value():
    a = Statement(("x",), "read", "ram", ("addr",), {}, 3, 1, "x = read ram(addr)")
    assert a == parse("proc p(addr)\n\nx = read ram(addr)\n").statements[0]


@pytest.mark.parametrize("data, where", [
    (b"x = read ram(0)\n# caf\xe9\n", "2:6"),            # Latin-1, not UTF-8
    (b"\xff\xfex = read ram(0)\n", "1:1"),                 # UTF-16
    ("y = read ram(0)  # \u00e9t\u00e9\nz = \xff".encode("utf-8")[:-2] + b"\x80", "2:5"),
])
def test_program_file_that_is_not_utf8_is_named(tmp_path, data, where):
    path = tmp_path / "latin.stp"
    path.write_bytes(data)
    with pytest.raises(ParseError) as e:
        parse_file(path)
    assert str(e.value).startswith(f"{path}:{where}: not UTF-8 text (byte 0x")
    assert "saved as UTF-8" in str(e.value)


def test_program_file_with_a_byte_order_mark_parses(tmp_path):
    path = tmp_path / "bom.stp"
    path.write_bytes("\ufeffx = read ram(0)\n".encode("utf-8"))
    assert parse_file(path).statements[0].outputs == ("x",)
