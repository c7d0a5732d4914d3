"""Text and JSON forms of expression trees (split from :mod:`gruc.ir.expr`, which re-exports them).

Text: prefix calls such as ``add(_1, mul(_2, const(2.0:f32)))``; JSON: nested dicts
``{"op": "add", "args": [...]}`` with non-finite floats as strings.  Both round-trip exactly, and
malformed input only ever raises :class:`~gruc.errors.GrucParseError`.
"""

from __future__ import annotations

import enum
import math
import re
from typing import Any, Callable, Mapping, NoReturn

from gruc.errors import GrucError, GrucParseError, GrucTypeError
from gruc.ir.expr import (MAX_PARSE_DEPTH, MAX_PLACEHOLDER, Binary, BinaryOp, Cast, Const, Expr, Op,
                          PlaceHolder, Ternary, TernaryOp, Unary, UnaryOp, children)
from gruc.types import ALL_TYPES, DType


# ------------------------------------------------------------------------------------------ text
_OPS_BY_NAME: Mapping[str, Op] = {op.value: op for kind in (Unary, Binary, Ternary) for op in kind}
_NODE_FOR: Mapping[type[enum.Enum], type[Expr]] = {Unary: UnaryOp, Binary: BinaryOp,
                                                   Ternary: TernaryOp}
_ARITY: Mapping[type[enum.Enum], int] = {Unary: 1, Binary: 2, Ternary: 3}
_TYPES_BY_SHORT: Mapping[str, DType] = {t.short: t for t in ALL_TYPES}
_TYPE_NAMES = ", ".join(_TYPES_BY_SHORT)


def _literal(value: bool | int | float) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def to_text(expr: Expr) -> str:
    """The canonical text form: prefix calls such as ``add(_1, mul(_2, const(2.0:f32)))``.

    Constants are ``const(<literal>)`` or ``const(<literal>:<type>)`` with Python's ``repr`` for
    numbers (so floats round-trip exactly, including ``inf``, ``-inf`` and ``nan``) and ``true`` /
    ``false``; casts are ``cast(<expr>, <type>)``; types use their short names (``f16``, ``i32``...).
    """
    match expr:
        case PlaceHolder(index=index):
            return f"_{index}"
        case Const(value=value, dtype=dtype):
            suffix = "" if dtype is None else f":{dtype.short}"
            return f"const({_literal(value)}{suffix})"
        case Cast(arg=arg, dtype=dtype):
            return f"cast({to_text(arg)}, {dtype.short})"
        case UnaryOp(op=op) | BinaryOp(op=op) | TernaryOp(op=op):
            return f"{op.value}({', '.join(to_text(child) for child in children(expr))})"
    raise GrucTypeError(f"expected an expression, got {type(expr).__name__}")


_SPACE = re.compile(r"\s*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACEHOLDER = re.compile(r"_([0-9]+)")
_LITERAL = re.compile(r"true|false|-?inf|nan|-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?")  # the module's FLOAT


class _Parser:
    """Recursive descent over the text form; every failure is a GrucParseError with a column."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, expected: str, at: int | None = None) -> NoReturn:
        pos = self.pos if at is None else at
        found = "end of text" if pos >= len(self.text) else repr(self.text[pos:pos + 12])
        raise GrucParseError(f"column {pos + 1}: expected {expected}, found {found}")

    def take(self, pattern: re.Pattern[str], expected: str) -> str:
        self.pos = _SPACE.match(self.text, self.pos).end()
        match = pattern.match(self.text, self.pos)
        if match is None:
            self.fail(expected)
        self.pos = match.end()
        return match.group()

    def punct(self, char: str, expected: str) -> None:
        if not self.at(char):
            self.fail(expected)
        self.pos += 1

    def at(self, char: str) -> bool:
        """Skip whitespace; is ``char`` next (``""``: is the text at its end)?"""
        self.pos = _SPACE.match(self.text, self.pos).end()
        return self.text.startswith(char, self.pos) if char else self.pos == len(self.text)

    def build(self, start: int, node: Callable[..., Expr], *args: Any) -> Expr:
        try:
            return node(*args)
        except GrucError as err:
            raise GrucParseError(f"column {start + 1}: {err}") from err

    def dtype(self) -> DType:
        name = self.take(_NAME, f"a type ({_TYPE_NAMES})")
        if name not in _TYPES_BY_SHORT:
            self.fail(f"a type ({_TYPE_NAMES})", at=self.pos - len(name))
        return _TYPES_BY_SHORT[name]

    def expr(self, depth: int) -> Expr:
        """One expression: a placeholder, ``const(literal[:type])``, ``cast(expr, type)`` or an op
        with as many operands as its arity.  ``depth`` caps the nesting, so deep text is a
        GrucParseError rather than a RecursionError."""
        if depth > MAX_PARSE_DEPTH:
            self.fail(f"at most {MAX_PARSE_DEPTH} levels of nesting")
        name = self.take(_NAME, "an expression (_N, const(...), cast(...) or an op such as add(...))")
        start = self.pos - len(name)
        if placeholder := _PLACEHOLDER.fullmatch(name):
            if len(placeholder.group(1)) > 2:
                self.fail(f"a placeholder _1 .. _{MAX_PLACEHOLDER}", at=start)
            return self.build(start, PlaceHolder, int(placeholder.group(1)))
        op = _OPS_BY_NAME.get(name)
        if op is None and name not in ("const", "cast"):
            self.fail("const, cast or an op name (" + ", ".join(_OPS_BY_NAME) + ")", at=start)
        self.punct("(", f"'(' after {name}")
        if name == "const":
            value = self.literal()
            dtype = None
            if self.at(":"):
                self.pos += 1
                dtype = self.dtype()
            node = self.build(start, Const, value, dtype)
        elif name == "cast":
            arg = self.expr(depth + 1)
            self.punct(",", "',' and the type cast converts to")
            node = self.build(start, Cast, arg, self.dtype())
        else:
            arity = _ARITY[type(op)]
            args = []
            for i in range(arity):
                if i:
                    self.punct(",", f"',' ({name} takes {arity} operands)")
                args.append(self.expr(depth + 1))
            node = self.build(start, _NODE_FOR[type(op)], op, *args)
        self.punct(")", f"')' closing {name}(")
        return node

    def literal(self) -> bool | int | float:
        """A constant's value: bool for true/false, int for an integer spelling, float otherwise
        (inf and nan included).  An integer spelt longer than any 64-bit one is refused before
        ``int()`` reads it."""
        literal = self.take(_LITERAL, "a number, inf, -inf, nan, true or false")
        if literal in ("true", "false"):
            return literal == "true"
        if not re.fullmatch(r"-?[0-9]+", literal):
            return float(literal)
        if len(literal) > 21:  # also keeps int() clear of its limit on digits
            self.fail("an integer constant of at most 64 bits", at=self.pos - len(literal))
        return int(literal)


def parse_expr(text: str) -> Expr:
    """The expression written in :func:`to_text`'s form (whitespace between tokens is free)."""
    if not isinstance(text, str):
        raise GrucTypeError(f"parse_expr takes a str, got {type(text).__name__}")
    parser = _Parser(text)
    expr = parser.expr(depth=0)
    if not parser.at(""):
        parser.fail("end of text")
    return expr


# ------------------------------------------------------------------------------------------ json
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
_JSON_KEYS = {"placeholder": {"op", "index"}, "const": {"op", "value", "dtype"},
              "cast": {"op", "args", "dtype"}}


def to_json(expr: Expr) -> dict[str, Any]:
    """A JSON-serialisable dict: ``{"op": "add", "args": [...]}``, ``{"op": "placeholder",
    "index": 1}``, ``{"op": "const", "value": 2.0, "dtype": "f32"}`` (non-finite floats as the
    strings ``"inf"``, ``"-inf"``, ``"nan"``; no ``dtype`` key when untyped) and
    ``{"op": "cast", "args": [...], "dtype": "f16"}``."""
    match expr:
        case PlaceHolder(index=index):
            return {"op": "placeholder", "index": index}
        case Const(value=value, dtype=dtype):
            finite = not isinstance(value, float) or math.isfinite(value)
            obj: dict[str, Any] = {"op": "const", "value": value if finite else repr(value)}
            if dtype is not None:
                obj["dtype"] = dtype.short
            return obj
        case Cast(arg=arg, dtype=dtype):
            return {"op": "cast", "args": [to_json(arg)], "dtype": dtype.short}
        case UnaryOp(op=op) | BinaryOp(op=op) | TernaryOp(op=op):
            return {"op": op.value, "args": [to_json(child) for child in children(expr)]}
    raise GrucTypeError(f"expected an expression, got {type(expr).__name__}")


def from_json(obj: Any) -> Expr:
    """The expression :func:`to_json` made ``obj`` from; a malformed object is a GrucParseError
    naming the JSON path of the culprit."""
    return _from_json(obj, "$", 0)


def _from_json(obj: Any, path: str, depth: int) -> Expr:
    """The expression of ``obj``, checked as strictly as the text form: unknown ops or keys, wrong
    arities, bad types and deep nesting are GrucParseErrors naming ``path`` (the JSON path so far),
    as are the nodes' own errors."""
    def fail(message: str) -> NoReturn:
        raise GrucParseError(f"{path}: {message}")

    if depth > MAX_PARSE_DEPTH:  # the text form's limit: deep JSON must not be a RecursionError
        fail(f"at most {MAX_PARSE_DEPTH} levels of nesting")
    if not isinstance(obj, dict) or not isinstance(obj.get("op"), str):
        fail(f"expected an object with a string 'op', got {obj!r:.80}")
    name = obj["op"]
    op = _OPS_BY_NAME.get(name)
    if op is None and name not in _JSON_KEYS:
        fail(f"unknown op {name!r}")
    keys = _JSON_KEYS.get(name, {"op", "args"})
    if unknown := set(obj) - keys:
        fail(f"unexpected keys {sorted(unknown)} for {name}; allowed: {sorted(keys)}")
    dtype = obj.get("dtype")
    if dtype is not None:
        if not isinstance(dtype, str) or dtype not in _TYPES_BY_SHORT:
            fail(f"unknown dtype {dtype!r}; allowed: {_TYPE_NAMES}")
        dtype = _TYPES_BY_SHORT[dtype]
    operands = []
    if "args" in keys:
        arity = 1 if op is None else _ARITY[type(op)]
        args = obj.get("args")
        if not isinstance(args, list) or len(args) != arity:
            fail(f"{name} needs 'args', a list of {arity} operand(s), got {args!r:.80}")
        operands = [_from_json(arg, f"{path}.args[{i}]", depth + 1)
                    for i, arg in enumerate(args)]
    if name == "cast" and dtype is None:
        fail("cast needs a 'dtype'")
    try:
        if name == "placeholder":
            return PlaceHolder(obj.get("index"))
        if name == "const":
            value = obj.get("value")
            return Const(_NON_FINITE.get(value, value) if isinstance(value, str) else value, dtype)
        if name == "cast":
            return Cast(operands[0], dtype)
        return _NODE_FOR[type(op)](op, *operands)
    except GrucError as err:
        raise GrucParseError(f"{path}: {err}") from err
