"""Program text (``.stp``): latency-insensitive statements, parsed and checked.

Grammar (one item per line, ``#`` starts a comment)::

    file      := { line }
    line      := [ proc | latency | statement ] NEWLINE
    proc      := "proc" NAME "(" [ names ] ")" [ "->" ( "(" [ names ] ")" | NAME ) ]
    latency   := "latency" key "=" INT          key := NAME { "." NAME }
    statement := [ names "=" ] NAME NAME "(" [ arg { "," arg } ] ")"   # op component
                                                                       # or unit op
    arg       := NAME | INT | NAME "=" ( INT | STRING | NAME )

A datapath statement is ``op component(...)`` (``read ram(addr)``); a chip statement
names its unit first, ``unit op(...)`` (``dma load_cbuf(...)``). A statement reads the
values named by its positional arguments and defines the values left of ``=``;
nothing states when it runs (see docs/scheduling.md). Keyword arguments are
constants: for chip units they are instruction fields, for ``cfg set`` multiplexer
settings (a value its readers need, not an instruction).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from systolica.arch import fabric, instructions, isa
from systolica.arch.config import MAX_LATENCY, ChipConfig
from systolica.arch.isa import Opcode
from systolica.compiler.errors import CompileError
from systolica.compiler.microops.ir import MicroOp, make

#: Components that are chip units: each statement on them is one instruction.
CHIP_UNITS = instructions.UNITS

#: (unit, op) -> (opcode, fixed fields), from the instruction table
CHIP_OPS = instructions.TEXT_OPS


class ParseError(CompileError):
    """Program text that is not a valid program: names file, line, column and what was
    expected."""

    def __init__(self, filename: str, line: int, col: int, message: str):
        self.filename, self.line, self.col = filename, line, col
        super().__init__(f"{filename}:{line}:{col}: {message}")


@dataclass(frozen=True)
class Statement:
    """One statement. ``args`` are positional operands (value names as ``str``,
    constants as ``int``); ``kwargs`` keyword constants (``int`` or ``str``)."""
    outputs: tuple[str, ...]
    op: str
    component: str
    args: tuple[str | int, ...] = ()
    kwargs: dict = field(default_factory=dict)
    line: int = 0
    col: int = 0
    text: str = ""

    @property
    def operands(self) -> tuple[str, ...]:
        """The value names this statement reads (positional names, in order)."""
        return tuple(a for a in self.args if isinstance(a, str))

    @property
    def is_chip(self) -> bool:
        return self.component in CHIP_UNITS

    @property
    def name(self) -> str:
        """Short name for messages: its first output, else ``op component``."""
        if self.outputs:
            return self.outputs[0]
        return f"{self.component} {self.op}" if self.is_chip else f"{self.op} {self.component}"

    def where(self) -> str:
        return f"'{self.text or format_statement(self)}' (line {self.line})"


def format_statement(st: Statement) -> str:
    """The statement as program text."""
    def value(v):
        return f'"{v}"' if isinstance(v, str) and not _NAME.fullmatch(v) else str(v)
    args = [str(a) for a in st.args] + [f"{k}={value(v)}" for k, v in st.kwargs.items()]
    head = f"{', '.join(st.outputs)} = " if st.outputs else ""
    words = (st.component, st.op) if st.is_chip else (st.op, st.component)
    return f"{head}{words[0]} {words[1]}({', '.join(args)})"


@dataclass
class Program:
    """A parsed program: statements in text order, the optional ``proc`` header and
    the ``latency`` directives."""
    statements: list[Statement]
    name: str = ""
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    latency: dict = field(default_factory=dict)
    filename: str = "<text>"
    latency_at: dict = field(default_factory=dict)   # latency key -> (line, col)

    @property
    def chip(self) -> list[Statement]:
        return [s for s in self.statements if s.is_chip]

    @property
    def datapath(self) -> list[Statement]:
        return [s for s in self.statements if not s.is_chip]


# -- tokens ----------------------------------------------------------------------------
#: The longest number literal: 64 bits in binary, with its 0b (no field is wider).
MAX_NUMBER_CHARS = 67


def _cut(s: str) -> str:
    return repr(s) if len(s) <= 24 else repr(s[:20]) + f"... ({len(s)} characters)"


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r]+) | (?P<comment>\#[^\n]*) | (?P<nl>\n)
  | (?P<int>-?(?:0[xX][0-9a-fA-F]+|0[bB][01]+|[0-9]+))
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<str>"[^"\n]*"|'[^'\n]*')
  | (?P<op>->|[=,().])
""", re.VERBOSE)


@dataclass(frozen=True)
class Token:
    kind: str      # name, int, str, op, nl, eof
    value: object
    line: int
    col: int

    def show(self) -> str:
        if self.kind == "nl":
            return "end of line"
        if self.kind == "eof":
            return "end of file"
        return f"{self.kind} {self.value!r}" if self.kind != "op" else repr(self.value)


def tokenize(text: str, filename: str = "<text>") -> list[Token]:
    out: list[Token] = []
    line, line_start, pos = 1, 0, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        col = pos - line_start + 1
        if not m:
            if text[pos] in "\"'":
                raise ParseError(filename, line, col, f"string starting {text[pos]} is not "
                                 f"closed on this line; add the closing {text[pos]}")
            raise ParseError(filename, line, col, f"unexpected character {text[pos]!r}; "
                             f"program text holds ASCII names, numbers, quoted strings, "
                             f"'#' comments and = , ( ) . ->")
        kind = m.lastgroup
        s = m.group()
        if kind == "nl":
            out.append(Token("nl", "\n", line, col))
            line, line_start = line + 1, m.end()
        elif kind == "int":
            if m.end() < len(text) and (text[m.end()].isalnum() or text[m.end()] == "_"):
                raise ParseError(filename, line, col, f"malformed number starting {s!r}; "
                                 f"names start with a letter or '_'")
            if len(s) > MAX_NUMBER_CHARS:
                value = 1 << 64
            else:
                try:
                    value = int(s, 0)
                except ValueError:      # 08: Python's rule against octal look-alikes
                    raise ParseError(filename, line, col, f"number {s!r} starts with "
                                     f"0; write it without leading zeros (0x and 0b "
                                     f"start hexadecimal and binary)") from None
            if abs(value) >= 1 << 64:
                raise ParseError(filename, line, col, f"number {_cut(s)} does not fit "
                                 f"in 64 bits; no field or latency takes one that large")
            out.append(Token("int", value, line, col))
        elif kind == "str":
            out.append(Token("str", s[1:-1], line, col))
        elif kind in ("name", "op"):
            out.append(Token(kind, s, line, col))
        pos = m.end()
    out.append(Token("nl", "\n", line, pos - line_start + 1))
    out.append(Token("eof", None, line, pos - line_start + 1))
    return out


# -- parser ----------------------------------------------------------------------------
class _Parser:
    def __init__(self, text: str, filename: str):
        self.filename = filename
        self.lines = text.split("\n")
        self.toks = tokenize(text, filename)
        self.i = 0

    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def error(self, expected: str, tok: Token | None = None) -> ParseError:
        tok = tok or self.tok
        return ParseError(self.filename, tok.line, tok.col,
                          f"expected {expected}, found {tok.show()}")

    def take(self, kind: str, value: str | None = None, expected: str = "") -> Token:
        t = self.tok
        if t.kind != kind or (value is not None and t.value != value):
            raise self.error(expected or (repr(value) if value else kind))
        self.i += 1
        return t

    def at(self, kind: str, value: str | None = None) -> bool:
        return self.tok.kind == kind and (value is None or self.tok.value == value)

    def names(self, what: str) -> list[str]:
        out = [self.take("name", expected=what).value]
        while self.at("op", ","):
            self.i += 1
            out.append(self.take("name", expected=what).value)
        return out

    def parse(self) -> Program:
        prog = Program([], filename=self.filename)
        seen_proc = False
        while not self.at("eof"):
            if self.at("nl"):
                self.i += 1
                continue
            t = self.tok
            if self.at("name", "proc") and self.peek().kind == "name" \
                    and self.peek(2).kind == "op" and self.peek(2).value == "(":
                if seen_proc or prog.statements or prog.latency:
                    raise ParseError(self.filename, t.line, t.col,
                                     "'proc' header must be the first line of the program")
                seen_proc = True
                self.proc(prog)
            elif self.at("name", "latency") and self.peek().kind == "name" \
                    and self.peek(2).kind == "op" and self.peek(2).value in ("=", "."):
                self.latency(prog)
            else:
                prog.statements.append(self.statement())
            self.take("nl", expected="end of line")
        return prog

    def proc(self, prog: Program) -> None:
        self.take("name", "proc")
        prog.name = self.take("name", expected="procedure name").value
        self.take("op", "(", expected="'(' after the procedure name")
        prog.inputs = tuple(self.names("input name") if self.at("name") else ())
        self.take("op", ")", expected="',' or ')' in the input list")
        if self.at("op", "->"):
            self.i += 1
            if self.at("op", "("):
                self.i += 1
                prog.outputs = tuple(self.names("output name") if self.at("name") else ())
                self.take("op", ")", expected="',' or ')' in the output list")
            else:
                prog.outputs = (self.take("name", expected="output name or '('").value,)
        for group in (prog.inputs, prog.outputs):
            dup = _first_duplicate(group)
            if dup:
                raise ParseError(self.filename, self.toks[self.i - 1].line, 1,
                                 f"'{dup}' appears twice in the proc header")

    def latency(self, prog: Program) -> None:
        t = self.take("name", "latency")
        parts = [self.take("name", expected="operation name").value]
        while self.at("op", "."):
            self.i += 1
            parts.append(self.take("name", expected="name after '.'").value)
        key = ".".join(parts)
        self.take("op", "=", expected="'=' after the latency key")
        v = self.take("int", expected="a latency in cycles (positive integer)")
        if not 1 <= v.value <= MAX_LATENCY:
            raise ParseError(self.filename, v.line, v.col,
                             f"latency {key} must be a positive integer of at most "
                             f"{MAX_LATENCY} cycles, not {v.value}")
        if key in prog.latency:
            raise ParseError(self.filename, t.line, t.col, f"latency {key} is given twice")
        prog.latency[key] = v.value
        prog.latency_at[key] = (t.line, t.col)

    def statement(self) -> Statement:
        start = self.tok
        outputs: list[str] = []
        if self.at("name") and self.peek().kind == "op" and self.peek().value in (",", "="):
            outputs = self.names("result name")
            self.take("op", "=", expected="'=' after the result names")
        op = self.take("name", expected="a statement (operation name)" if not outputs
                       else "operation name after '='").value
        comp = self.take("name", expected=f"component name after '{op}'").value
        self.take("op", "(", expected=f"'(' after '{op} {comp}'")
        if op in CHIP_UNITS:            # chip statements name the unit first
            op, comp = comp, op
        args: list = []
        kwargs: dict = {}
        if not self.at("op", ")"):
            while True:
                self.arg(args, kwargs)
                if self.at("op", ","):
                    self.i += 1
                    continue
                break
        self.take("op", ")", expected="',' or ')' in the argument list")
        text = self.lines[start.line - 1].split("#", 1)[0].strip()
        dup = _first_duplicate(outputs)
        if dup:
            raise ParseError(self.filename, start.line, start.col,
                             f"'{dup}' is defined twice by one statement")
        return Statement(tuple(outputs), op, comp, tuple(args), kwargs,
                         start.line, start.col, text)

    def arg(self, args: list, kwargs: dict) -> None:
        t = self.tok
        if t.kind == "name" and self.peek().kind == "op" and self.peek().value == "=":
            self.i += 2
            v = self.tok
            if v.kind not in ("int", "str", "name"):
                raise self.error("a number, string or name after '='")
            self.i += 1
            if t.value in kwargs:
                raise ParseError(self.filename, t.line, t.col,
                                 f"keyword '{t.value}' is given twice")
            kwargs[t.value] = v.value
        elif t.kind in ("name", "int"):
            if kwargs:
                raise ParseError(self.filename, t.line, t.col,
                                 "positional argument after keyword arguments")
            self.i += 1
            args.append(t.value)
        else:
            raise self.error("an argument (value name, number or key=value)")


def _first_duplicate(names) -> str | None:
    seen = set()
    for n in names:
        if n in seen:
            return n
        seen.add(n)
    return None


def check(prog: Program) -> None:
    """Every value read is defined exactly once (by a statement or as a proc input),
    and every proc output is defined."""
    defined: dict[str, Statement | None] = {n: None for n in prog.inputs}
    for st in prog.statements:
        for out in st.outputs:
            if out in defined:
                first = defined[out]
                was = (f"at line {first.line}" if first is not None else "as a proc input")
                raise ParseError(prog.filename, st.line, st.col,
                                 f"'{out}' is defined twice: {was} and here")
            defined[out] = st
    for st in prog.statements:
        for a in st.operands:
            if a not in defined:
                col = st.col
                m = re.search(rf"\b{re.escape(a)}\b", st.text.split("(", 1)[-1])
                if m:
                    col = st.col + len(st.text.split("(", 1)[0]) + 1 + m.start()
                raise ParseError(prog.filename, st.line, col,
                                 f"'{a}' is used but never defined (no statement "
                                 f"produces it and it is not a proc input)")
    for out in prog.outputs:
        if out not in defined or defined[out] is None:
            raise ParseError(prog.filename, 1, 1,
                             f"proc output '{out}' is not defined by any statement")


def parse(text: str, filename: str = "<text>") -> Program:
    """Parse and check program text."""
    if not isinstance(text, str):
        hint = " (decode it: data.decode('utf-8'), or give the file to parse_file)" \
            if isinstance(text, (bytes, bytearray)) else ""
        raise CompileError(f"parse(text, filename): text must be a str of program text"
                           f"{hint}, not {type(text).__name__}")
    prog = _Parser(text, filename).parse()
    check(prog)
    return prog


def parse_file(path: str | Path) -> Program:
    """Parse and check a program file (UTF-8 text)."""
    path = Path(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")     # a leading byte-order mark is fine
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        line_start = data.rfind(b"\n", 0, e.start) + 1
        col = len(data[line_start:e.start].decode("utf-8")) + 1
        raise ParseError(str(path), line, col,
                         f"not UTF-8 text (byte 0x{data[e.start]:02x}); program text "
                         f"must be saved as UTF-8") from None
    return parse(text, str(path))


# -- chip statements -> micro-ops ---------------------------------------------------------
def _fields(op: Opcode) -> list[str]:
    return [name for name, _ in isa.PAYLOAD[op]]


def cfg_settings(cfg: ChipConfig, st: Statement, filename: str = "<text>") -> dict[str, str]:
    """The multiplexer settings a ``cfg set`` statement names, ``{mux: source}``:
    ``cfg set(mux=NAME, source=NAME)``, further pairs as ``mux1=, source1=``,
    ``mux2=, ...``; a source may also be given by its number."""
    table = fabric.by_name(cfg)
    where = st.where()

    def fail(message: str) -> ParseError:
        return ParseError(filename, st.line, st.col, f"{where}: {message}")

    by_suffix: dict[str, dict] = {}
    for k, v in st.kwargs.items():
        m = re.fullmatch(r"(mux|source)(\d*)", k)
        if not m:
            raise fail(f"cfg set has no keyword {k!r}; it takes mux=NAME, source=NAME, "
                       f"and for further multiplexers mux1=, source1=, mux2=, ...")
        by_suffix.setdefault(m.group(2), {})[m.group(1)] = v
    if not by_suffix:
        raise fail("cfg set names no multiplexer; write cfg set(mux=NAME, source=NAME)")
    out: dict[str, str] = {}
    for suffix in sorted(by_suffix, key=lambda x: int(x) if x else -1):
        pair = by_suffix[suffix]
        if "mux" not in pair or "source" not in pair:
            raise fail(f"mux{suffix} and source{suffix} go together")
        mux = table.get(str(pair["mux"]))
        if mux is None:
            raise fail(f"unknown multiplexer {pair['mux']!r}; the {cfg.name} chip has "
                       f"{', '.join(table)}")
        src = pair["source"]
        if isinstance(src, int):
            if not 0 <= src < len(mux.sources):
                raise fail(f"multiplexer {mux.name} has no source number {src}; it has "
                           f"{len(mux.sources)} ({', '.join(mux.sources)})")
            src = mux.sources[src]
        try:
            mux.value_of(src)
        except ValueError as e:
            raise fail(str(e)) from None
        if mux.name in out:
            raise fail(f"multiplexer {mux.name} is set twice")
        out[mux.name] = src
    return out


def to_micro_op(cfg: ChipConfig, st: Statement, filename: str = "<text>") -> MicroOp:
    """One chip statement (not a ``cfg set``) as a checked micro-op."""
    key = (st.component, st.op)
    if key not in CHIP_OPS:
        ops = sorted(op for unit, op in CHIP_OPS if unit == st.component)
        raise ParseError(filename, st.line, st.col,
                         f"{st.where()}: unit {st.component} has no operation "
                         f"'{st.op}'; it has {', '.join(ops)}")
    opcode, fixed = CHIP_OPS[key]
    if opcode in isa.SETCFGS:
        raise ParseError(filename, st.line, st.col,
                         f"{st.where()}: a cfg set is not an instruction of its own; the "
                         f"statements that read its value need the setting, and the "
                         f"compiler places the SETCFG (docs/scheduling.md)")
    for a in st.args:
        if isinstance(a, int):
            raise ParseError(filename, st.line, st.col,
                             f"{st.where()}: chip instruction fields are given by keyword "
                             f"(e.g. rows=8), not as the positional {a}")
    valid = _fields(opcode)
    given = dict(st.kwargs)
    settable = [f for f in valid if f not in fixed]
    unknown = [k for k in given if k not in settable]
    if unknown:
        raise ParseError(filename, st.line, st.col,
                         f"{st.where()}: {opcode.name} has no field(s) {', '.join(unknown)}; "
                         f"its fields are {', '.join(settable)}")
    for k, v in given.items():
        if not isinstance(v, int):
            raise ParseError(filename, st.line, st.col,
                             f"{st.where()}: field {k} must be an integer, not {v!r}")
    try:
        return make(cfg, opcode, **{**given, **fixed})
    except CompileError as e:
        raise ParseError(filename, st.line, st.col, f"{st.where()}: {e}") from None


def to_micro_ops(cfg: ChipConfig, statements: list[Statement],
                 filename: str = "<text>") -> list[MicroOp]:
    return [to_micro_op(cfg, st, filename) for st in statements]
