"""The text IR parser: docs/ir.md's grammar back into a real :class:`~gruc.ir.module.Module`.

The parser builds the graph through its public API (``add_variable``, ``add_constant``,
``set_tile_mapping``, ``Tensor.apply_view``, ``add_compute_set``, ``add_vertex``, ``add_function``,
host streams) and the program node constructors, so a parsed module obeys every rule a built one
does, and variables are created in text order so global element ids come back unchanged.

It is a tokenizer plus recursive descent over the token list.  The graph side, from decoded values,
is :class:`~gruc.ir.builder.ModuleBuilder`, shared with the JSON loader (``gruc.ir.serialize``).  Every failure is a :class:`~gruc.errors.GrucParseError` whose message
starts ``line L, column C:`` and shows the line with a caret: a ``GrucError`` the graph API raises
is re-raised as one, located at the statement that caused it.
"""

from __future__ import annotations

import bisect
import json
import re
from contextlib import contextmanager
from dataclasses import fields as dataclass_fields
from typing import Any, Iterator, NoReturn

from gruc.errors import GrucError, GrucParseError, GrucTypeError
from gruc.ir import expr as ex
from gruc.ir.builder import INT_LIMIT, DTYPES, ModuleBuilder, is_tuple_field
from gruc.ir.graph import ComputeSet
from gruc.ir.layout import VIEW_OPS, SliceOp
from gruc.ir.mapping import UNMAPPED
from gruc.ir.module import Module
from gruc.ir.printer import MappingGroup
from gruc.ir.program import (Call, Copy, Execute, If, PrintTensor, Program, Repeat,
                             RepeatWhileTrue, Sequence, Sync, TimeLoop, WriteUndef)
from gruc.ir.tensor import Tensor
from gruc.target import Target
from gruc.types import DType

__all__ = ["parse_module"]

MAX_DEPTH = 200
"""Deepest program nesting the parser accepts."""


# ------------------------------------------------------------------------------ tokens
_TOKEN = re.compile(r"""
    (?P<skip>[ \t\r\n]+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<value>%[A-Za-z0-9_.]+)
  | (?P<symbol>@[A-Za-z0-9_.]+)
  | (?P<float>-?(?:[0-9]+\.[0-9]*(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+|inf\b|nan\b))
  | (?P<int>-?[0-9]+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>->|[{}()\[\],:;=~/])
""", re.VERBOSE)
_PLACEHOLDER = re.compile(r"_[0-9]+")
_EXPR_COLUMN = re.compile(r"column (\d+): (.*)", re.DOTALL)
EOF = "eof"


class _Parser:
    """Recursive descent over the token list of one text, building through a :class:`ModuleBuilder`
    (made by the header, which names the target); every failure is a GrucParseError with a line, a
    column and the line itself."""
    def __init__(self, text: str) -> None:
        self.text = text
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.kinds: list[str] = []
        self.texts: list[str] = []
        self.offsets: list[int] = []
        self._tokenize()
        self.pos = 0
        self.builder: ModuleBuilder | None = None

    # ---- errors ------------------------------------------------------------------------------
    def location(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1

    def fail_at(self, offset: int, message: str) -> NoReturn:
        line, column = self.location(offset)
        start = self.line_starts[line - 1]
        end = self.text.find("\n", start)
        source = self.text[start:end if end >= 0 else len(self.text)]
        raise GrucParseError(f"line {line}, column {column}: {message}\n  {source}\n"
                             f"  {' ' * (column - 1)}^")

    def describe(self, k: int) -> str:
        if self.kinds[k] == EOF:
            return "end of text"
        text = self.texts[k]
        return repr(text if len(text) <= 30 else text[:27] + "...")

    def fail(self, expected: str, k: int | None = None) -> NoReturn:
        k = self.pos if k is None else k
        self.fail_at(self.offsets[k], f"expected {expected}, found {self.describe(k)}")

    @contextmanager
    def at(self, k: int) -> Iterator[None]:
        """Re-raise a GrucError of the graph API as a parse error located at token ``k``."""
        try:
            yield
        except GrucParseError:
            raise
        except GrucError as error:
            self.fail_at(self.offsets[k], str(error))

    # ---- tokens ------------------------------------------------------------------------------
    def _tokenize(self) -> None:
        """Split the whole text up front into parallel lists of kinds, texts and offsets, ending in
        ``eof``: the descent looks ahead by index (function declarations are found before anything
        is built), and offsets locate every error."""
        text, pos, n = self.text, 0, len(self.text)
        match = _TOKEN.match
        while pos < n:
            m = match(text, pos)
            if m is None:
                if text[pos] == '"':
                    self.fail_at(pos, "unterminated string (strings end on the line they start)")
                self.fail_at(pos, f"unexpected character {text[pos]!r}")
            kind = m.lastgroup
            if kind != "skip":
                self.kinds.append(kind)
                self.texts.append(m.group())
                self.offsets.append(pos)
            pos = m.end()
        self.kinds.append(EOF)
        self.texts.append("")
        self.offsets.append(n)

    def peek(self, ahead: int = 0) -> str:
        k = min(self.pos + ahead, len(self.kinds) - 1)
        return self.texts[k] if self.kinds[k] in ("punct", "ident") else self.kinds[k]

    def is_punct(self, text: str, ahead: int = 0) -> bool:
        k = min(self.pos + ahead, len(self.kinds) - 1)
        return self.kinds[k] in ("punct", "ident") and self.texts[k] == text

    def take(self, kind: str, expected: str) -> str:
        if self.kinds[self.pos] != kind:
            self.fail(expected)
        self.pos += 1
        return self.texts[self.pos - 1]

    def punct(self, text: str, expected: str | None = None) -> None:
        if not self.is_punct(text):
            self.fail(expected or repr(text))
        self.pos += 1

    def accept(self, text: str) -> bool:
        if self.is_punct(text):
            self.pos += 1
            return True
        return False

    def int_(self, expected: str = "an integer") -> int:
        k = self.pos
        text = self.take("int", expected)
        if len(text) > 20 or not -INT_LIMIT <= int(text) < INT_LIMIT:
            self.fail_at(self.offsets[k], f"integer {text[:24]} is out of range (at most 63 bits)")
        return int(text)

    def nonneg(self, expected: str) -> int:
        k = self.pos
        value = self.int_(expected)
        if value < 0:
            self.fail(expected, k)
        return value

    def string(self, expected: str = "a string") -> str:
        """A string token's value, read with JSON escapes.  A lone surrogate is refused: no UTF-8
        file can store it, so the printer could not write the module back."""
        k = self.pos
        raw = self.take("string", expected)
        try:
            value = json.loads(raw)
            value.encode("utf-8")
        except UnicodeEncodeError:
            self.fail_at(self.offsets[k], f"string {raw[:30]} holds a lone surrogate, which no "
                                          "UTF-8 file can store")
        except ValueError:
            self.fail_at(self.offsets[k], f"bad escape in string {raw[:30]}")
        return value

    def comma_list(self, close: str, item) -> list:
        """Items separated by commas up to ``close``, possibly none; a trailing comma is an
        error."""
        result = []
        if self.accept(close):
            return result
        while True:
            result.append(item())
            if self.accept(close):
                return result
            self.punct(",", f"',' or {close!r}")

    def ref(self, expected: str = "a tensor (%name)") -> str:
        """A tensor token that names a defined tensor."""
        k = self.pos
        name = self.take("value", expected)
        if name not in self.builder.tensors:
            self.fail_at(self.offsets[k], f"{name} is not defined (a tensor is defined before "
                                          "it is used)")
        return name

    def symbol_ref(self, table: dict[str, Any], what: str) -> Any:
        k = self.pos
        symbol = self.take("symbol", f"a {what} (@name)")
        if symbol not in table:
            self.fail_at(self.offsets[k], f"{what} {symbol} is not defined")
        return table[symbol]

    def dtype(self) -> DType:
        k = self.pos
        name = self.take("ident", "a type (" + ", ".join(DTYPES) + ")")
        if name not in DTYPES:
            self.fail("a type (" + ", ".join(DTYPES) + ")", k)
        return DTYPES[name]

    def type_(self) -> tuple[DType, tuple[int, ...]]:
        dtype = self.dtype()
        self.punct("[", "'[' and the shape")
        shape = tuple(self.comma_list("]", lambda: self.nonneg("a dimension size >= 0")))
        return dtype, shape

    # ---- module ------------------------------------------------------------------------------
    def module(self) -> Module:
        """The module: the header, then definitions in any order, tensors before their use and
        programs numbered from 0.  Functions are declared before the walk, so a call may precede its
        body; one never given a body is an error at the end of the text."""
        self.header()
        self.declare_functions()
        builder = self.builder
        programs: list[Program] = []
        while self.kinds[self.pos] != EOF:
            k = self.pos
            kind = self.peek()
            if self.kinds[k] == "value":
                self.tensor_definition()
            elif kind in ("host_write", "host_read"):
                self.pos += 1
                stream = self.string("the stream name (a string)")
                tensor = self.ref()
                with self.at(k):
                    builder.host_stream(kind == "host_write", stream, tensor)
            elif kind == "cs":
                self.compute_set()
            elif kind == "func":
                self.pos += 1
                symbol = self.take("symbol", "a function symbol (@name)")
                if self.kinds[self.pos] == "string":
                    self.pos += 1
                program = self.program(0)
                with self.at(k):
                    builder.define_function(symbol, program)
            elif kind == "program":
                self.pos += 1
                index = self.int_("the program number")
                if index != len(programs):
                    self.fail(f"program number {len(programs)}", self.pos - 1)
                programs.append(self.program(0))
            else:
                self.fail("a definition (%name = ..., host_write, host_read, cs, func or program)")
        for symbol, function in builder.functions.items():
            if symbol not in builder.defined_functions:
                self.fail_at(len(self.text), f"function {symbol} is declared but has no body")
        return builder.finish(programs)

    def header(self) -> None:
        """``module target(key=value, ...)``: the target, and the builder every later statement goes
        through.  A field given twice is refused, not left to the last value."""
        k = self.pos
        self.punct("module", "the header 'module target(...)'")
        self.punct("target", "'target'")
        self.punct("(", "'('")

        def item() -> tuple[str, Any]:
            key = self.take("ident", "a target field name")
            self.punct("=", "'='")
            kind = self.kinds[self.pos]
            if kind == "int":
                return key, self.int_()
            if kind == "float":
                self.pos += 1
                return key, float(self.texts[self.pos - 1])
            if kind == "string":
                return key, self.string()
            if self.peek() in ("true", "false"):
                self.pos += 1
                return key, self.texts[self.pos - 1] == "true"
            self.fail("a number, a string, true or false")

        items = self.comma_list(")", item)
        values = dict(items)
        if len(values) != len(items):
            self.fail_at(self.offsets[k], "a target field is given twice")
        with self.at(k):
            self.builder = ModuleBuilder(Target(**values))

    def declare_functions(self) -> None:
        """Create every function up front, so a Call may name one defined later in the text."""
        kinds, texts = self.kinds, self.texts
        for k in range(len(kinds) - 1):
            if kinds[k] == "ident" and texts[k] == "func" and kinds[k + 1] == "symbol":
                name = texts[k + 1][1:]
                if kinds[k + 2] == "string":
                    saved, self.pos = self.pos, k + 2
                    name = self.string()
                    self.pos = saved
                with self.at(k):
                    self.builder.declare_function(texts[k + 1], name)

    # ---- tensors -----------------------------------------------------------------------------
    def tensor_definition(self) -> None:
        k = self.pos
        name = self.take("value", "a tensor")
        self.punct("=", "'='")
        keyword = self.peek()
        if keyword in ("var", "const"):
            self.pos += 1
            dtype, shape = self.type_()
            label = self.string("the variable's name (a string)")
            self.punct("map", "'map='")
            self.punct("=", "'='")
            self.punct("[", "'['")
            groups = self.comma_list("]", self.mapping_group)
            values = None
            if keyword == "const":
                self.punct("values", "'values='")
                self.punct("=", "'='")
                self.punct("[", "'['")
                values = self.comma_list("]", self.value_run)
            with self.at(k):
                self.builder.variable(name, label, dtype, shape, groups, values)
        elif keyword in VIEW_OPS:
            self.view(k, name, keyword)
        else:
            self.fail("var, const or a view op (" + ", ".join(VIEW_OPS) + ")")

    def mapping_group(self) -> MappingGroup:
        """One group ``(tile, step, count, elements, grain)``: a tile, a range ``start:stop[:step]``
        or ``_`` (unmapped), then ``x run`` (every tile ``run`` elements) or ``~elements/grain``."""
        k = self.pos
        if self.accept("_"):
            tile, step, count = UNMAPPED, 0, 1
        else:
            tile = self.nonneg("a tile, a tile range start:stop[:step] or _")
            step, count = 0, 1
            if self.accept(":"):
                stop = self.int_("the end of the tile range")
                step = self.int_("the tile step") if self.accept(":") else 1
                if step == 0:
                    self.fail_at(self.offsets[k], "a tile range needs a non-zero step")
                count = len(range(tile, stop, step))
                if count == 0:
                    self.fail_at(self.offsets[k], "the tile range is empty")
                if tile + (count - 1) * step < 0:
                    self.fail_at(self.offsets[k], f"the tile range reaches tile "
                                                  f"{tile + (count - 1) * step}; tiles are >= 0")
        if self.accept("x"):
            grain = self.nonneg("the run length")
            return tile, step, count, count * grain, grain
        self.punct("~", "'x' and a run length, or '~' and elements/grain")
        elements = self.nonneg("the number of elements")
        self.punct("/", "'/' and the grain size")
        return tile, step, count, elements, self.nonneg("the grain size")

    def value_run(self) -> tuple[Any, int]:
        kind = self.kinds[self.pos]
        if kind == "int":
            value: Any = self.int_()
        elif kind == "float":
            value = float(self.texts[self.pos])
            self.pos += 1
        elif self.peek() in ("true", "false"):
            value = self.texts[self.pos] == "true"
            self.pos += 1
        else:
            self.fail("a constant value (a number, true or false)")
        count = self.nonneg("a repeat count") if self.accept("x") else 1
        return value, count

    def view(self, k: int, name: str, keyword: str) -> None:
        self.pos += 1
        cls = VIEW_OPS[keyword]
        sources = [self.ref("a source tensor")]
        while self.accept(","):
            sources.append(self.ref("a source tensor"))
        args: dict[str, Any] = {}
        if cls is SliceOp:
            self.punct("[", "'[' and the slice bounds")

            def bound() -> tuple[int, int]:
                begin = self.int_("a slice start")
                self.punct(":", "':'")
                return begin, self.int_("a slice end")

            bounds = self.comma_list("]", bound)
            args = {"begin": [b for b, _ in bounds], "end": [e for _, e in bounds]}
        else:
            self.view_arguments(cls, args)
        self.punct(":", "':' and the view's type")
        dtype, shape = self.type_()
        with self.at(k):
            self.builder.view(name, keyword, sources, args, dtype, shape)

    def view_arguments(self, cls: type, args: dict[str, Any]) -> None:
        """``name=value`` for every field of the view op ``cls``, in any order, each once."""
        fields = {f.name: f for f in dataclass_fields(cls)}
        while len(args) < len(fields):
            missing = [name for name in fields if name not in args]
            expected = " or ".join(f"'{name}='" for name in missing)
            at = self.pos
            name = self.take("ident", expected)
            if name in args:
                self.fail_at(self.offsets[at], f"{name} is given twice")
            if name not in fields:
                self.fail(expected, at)
            self.punct("=", "'='")
            if is_tuple_field(fields[name]):
                self.punct("[", "'['")
                args[name] = self.comma_list("]", self.int_)
            else:
                args[name] = self.int_()

    # ---- compute sets ------------------------------------------------------------------------
    def compute_set(self) -> None:
        k = self.pos
        self.pos += 1
        symbol = self.take("symbol", "a compute set symbol (@name)")
        name = self.string() if self.kinds[self.pos] == "string" else symbol[1:]
        with self.at(k):
            cs = self.builder.compute_set(symbol, name)
        self.punct("{", "'{'")
        while not self.accept("}"):
            self.vertex(cs)

    def vertex(self, cs: ComputeSet) -> None:
        """One vertex: its fields in parentheses, then ``key=value`` parameters, each key once;
        ``tile`` is not a parameter but where the vertex runs."""
        k = self.pos
        kind = self.take("ident", "a vertex kind or '}'")
        self.punct("(", "'(' and the vertex's fields")

        def connection() -> tuple[str, str | list[str]]:
            name = self.take("ident", "a field name")
            self.punct("=", "'='")
            if self.accept("["):
                return name, self.comma_list("]", self.ref)
            return name, self.ref("a tensor or a list of tensors")

        connected = self.comma_list(")", connection)
        params: dict[str, Any] = {}
        tile = None
        seen: set[str] = set()
        while self.kinds[self.pos] == "ident" and self.is_punct("=", 1):
            key_at = self.pos
            key = self.texts[self.pos]
            self.pos += 2
            if key in seen:
                self.fail_at(self.offsets[key_at], f"{key} is given twice")
            seen.add(key)
            if key == "tile":
                tile = self.nonneg("a tile number")
            else:
                params[key] = self.param()
        fields = dict(connected)
        if len(fields) != len(connected):
            self.fail_at(self.offsets[k], "a vertex field is given twice")
        with self.at(k):
            self.builder.vertex(cs, kind, fields, params, tile)

    def param(self, depth: int = 0) -> Any:
        """A parameter value; tuples and lists nest at most MAX_DEPTH deep (Python recursion)."""
        if depth > MAX_DEPTH:
            self.fail(f"at most {MAX_DEPTH} levels of nested tuples and lists")
        kind = self.kinds[self.pos]
        text = self.texts[self.pos]
        if kind == "int":
            return self.int_()
        if kind in ("float", "string"):
            return self.string() if kind == "string" else self._float()
        if self.accept("("):
            items = []
            while not self.accept(")"):
                items.append(self.param(depth + 1))
                if not self.accept(","):
                    self.punct(")", "',' or ')'")
                    break
            return tuple(items)
        if self.accept("["):
            return self.comma_list("]", lambda: self.param(depth + 1))
        if kind == "ident":
            constants = {"true": True, "false": False, "none": None}
            if text in constants:
                self.pos += 1
                return constants[text]
            if _PLACEHOLDER.fullmatch(text) or self.is_punct("(", 1):
                return self.expression()
            if text in DTYPES:
                self.pos += 1
                return DTYPES[text]
        self.fail("a parameter value (number, string, true, false, none, type, expression, "
                  "tuple or list)")

    def _float(self) -> float:
        self.pos += 1
        return float(self.texts[self.pos - 1])

    def expression(self) -> ex.Expr:
        """An expression parameter.  Its tokens are only skipped here (balanced parentheses); the
        text they span goes to :func:`~gruc.ir.expr.parse_expr`, whose column is moved to the
        module's text."""
        start = self.pos
        self.pos += 1
        if self.accept("("):
            depth = 1
            while depth:
                kind, text = self.kinds[self.pos], self.texts[self.pos]
                if kind not in ("ident", "int", "float") and text not in ("(", ")", ",", ":"):
                    self.fail("')' closing the expression")
                depth += {"(": 1, ")": -1}.get(text, 0) if kind == "punct" else 0
                self.pos += 1
        begin = self.offsets[start]
        end = self.offsets[self.pos - 1] + len(self.texts[self.pos - 1])
        try:
            return ex.parse_expr(self.text[begin:end])
        except GrucParseError as error:
            found = _EXPR_COLUMN.match(str(error))
            if found is None:
                self.fail_at(begin, str(error))
            self.fail_at(begin + int(found.group(1)) - 1, found.group(2))
        except GrucError as error:
            self.fail_at(begin, str(error))

    # ---- programs ----------------------------------------------------------------------------
    def program(self, depth: int) -> Program:
        if depth > MAX_DEPTH:
            self.fail(f"at most {MAX_DEPTH} levels of nested programs")
        k = self.pos
        keyword = self.peek()
        builder = self.builder

        def tensor() -> Tensor:
            return builder.tensor(self.ref())

        if self.accept("{"):
            children = []
            while not self.accept("}"):
                if self.kinds[self.pos] == EOF:
                    self.fail("'}' closing the block")
                children.append(self.program(depth + 1))
            return Sequence(*children)
        if keyword not in ("execute", "copy", "write_undef", "repeat", "while", "timeloop", "if",
                           "call", "print", "sync"):
            self.fail("a program ({...}, execute, copy, write_undef, repeat, while, timeloop, "
                      "if, call, print or sync)")
        self.pos += 1
        if keyword == "timeloop":
            return self.time_loop(k, depth)
        if keyword == "execute":
            return Execute(self.symbol_ref(builder.compute_sets, "compute set"))
        if keyword == "call":
            return Call(self.symbol_ref(builder.functions, "function"))
        if keyword == "sync":
            return Sync()
        if keyword == "copy":
            src = tensor()
            self.punct("->", "'->'")
            dst = tensor()
            with self.at(k):
                return Copy(src, dst)
        if keyword == "write_undef":
            return WriteUndef(tensor())
        if keyword == "print":
            label = self.string("the print label (a string)")
            return PrintTensor(label, tensor())
        if keyword == "repeat":
            count = self.nonneg("a repeat count >= 0")
            body = self.program(depth + 1)
            with self.at(k):
                return Repeat(count, body)
        if keyword == "while":
            condition = self.program(depth + 1)
            predicate = tensor()
            body = self.program(depth + 1)
            with self.at(k):
                return RepeatWhileTrue(condition, predicate, body)
        predicate = tensor()
        then = self.program(depth + 1)
        self.punct("else", "'else' and the else branch")
        otherwise = self.program(depth + 1)
        with self.at(k):
            return If(predicate, then, otherwise)


    def time_loop(self, k: int, depth: int) -> TimeLoop:
        """``timeloop forward|reverse first N steps N shard K of N { reset loop }``."""
        direction = self.take("ident", "'forward' or 'reverse'")
        if direction not in ("forward", "reverse"):
            self.fail("'forward' or 'reverse'", self.pos - 1)
        values = {}
        for word in ("first", "steps", "shard", "of"):
            self.punct(word, f"'{word}'")
            values[word] = self.nonneg(f"the time loop's {word} (an integer >= 0)")
        self.punct("{", "'{' opening the time loop's reset and loop")
        reset = self.program(depth + 1)
        loop = self.program(depth + 1)
        self.punct("}", "'}' closing the time loop (its reset, then its loop)")
        with self.at(k):
            return TimeLoop(reset, loop, direction == "reverse", values["first"],
                            values["steps"], values["shard"], values["of"])


def parse_module(text: str) -> Module:
    """The module written in the text IR of docs/ir.md (what ``print_module`` writes).

    Raises :class:`~gruc.errors.GrucParseError` (with line and column) and nothing else on bad text.
    """
    if not isinstance(text, str):
        raise GrucTypeError(f"parse_module takes a str, got {type(text).__name__}")
    return _Parser(text).module()
