"""Elementwise expression trees, after poplibs' ``popops::expr`` (``Expr.hpp`` / ``ExprOp.hpp``).

An expression is an immutable tree of :class:`PlaceHolder` (``_1`` .. ``_20``, 1-based operands of a
``map``), :class:`Const`, :class:`Cast`, :class:`UnaryOp`, :class:`BinaryOp` and :class:`TernaryOp`.
Nodes are frozen slotted dataclasses, so ``==`` and ``hash`` are structural and trees can key caches;
Python's arithmetic operators build trees (``_1 + _2 * 2.0``) but ``==`` never does: use :func:`eq`
and :func:`ne`.

This module is the *definition* of elementwise semantics.  ``map``, fused vertices, the numpy reference
interpreter and the compiled backend's code generator all defer to it, and that backend is differentially
tested against :func:`evaluate`.  In the style of JAX's autodidax the meaning of each op is one row
of the :data:`OPS` table: the operand types it accepts, its numpy definition, and a scalar Python
template with the same result for code generators (also in :data:`SCALAR_SOURCE`).

Choices callers must know (each follows poplibs / C unless noted):

* Types: a node computes in ``DType.compute`` (HALF computes in float32, like the IPU's half vertices
  on a CPU without float16 arithmetic) and :func:`evaluate` returns the result type's ``storage``
  dtype.  Operands are first converted to their type's storage dtype, as if read from tile memory.
* A ``Const`` without a dtype takes the type its position asks for (poplibs' ``getConstType``): the
  type of its sibling operands; ``bool`` inside logical ops and as a select condition; ``float`` when
  nothing decides (a tree of constants only).  Arithmetic never mixes types: ``_1 + _2`` with a half
  and a float operand is an error; insert a :class:`Cast`.
* ``select(a, b, cond)`` is ``cond ? a : b``: the *third* operand is the condition, as in poplibs'
  ``Select`` vertex (``out = in3 ? in1 : in2``).  ``clamp(x, lo, hi)`` raises ``x`` to ``lo`` first,
  then lowers it to ``hi`` (the ``Clamp`` vertex's order, which matters only when ``lo > hi``).
* Integer ``div`` truncates toward zero and ``rem`` takes the dividend's sign (C's ``/`` and ``%``);
  an integer division or remainder by zero yields 0 instead of trapping.  Float ``rem`` is ``fmod``.
* ``round`` rounds halves away from zero (C ``round``); ``signum`` of 0 or NaN is its argument.
* ``max`` / ``min`` propagate NaN and return the first operand on ties; ``relu(NaN)`` is NaN.
* Casts: float to integer truncates toward zero and saturates: values past the type's range
  (infinities included) give its least or greatest value, NaN gives 0 (as Rust's ``as``; C leaves
  them undefined).  Integer to integer wraps (two's complement); to bool means ``!= 0``; to half
  rounds to nearest.
* inf and NaN are ordinary results: no floating-point warning is raised.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gruc.errors import GrucIndexError, GrucShapeError, GrucTypeError, GrucValueError
from gruc.types import ALL_TYPES, BOOL, FLOAT, HALF, INT, UNSIGNED_INT, DType, dtype_of

MAX_PLACEHOLDER = 20
"""Highest placeholder index (poplibs defines ``_1`` .. ``_20``)."""

MAX_PARSE_DEPTH = 200
"""Deepest nesting (:func:`nesting`) of an expression: expressions are vertex bodies, not
programs.  :func:`parse_expr` and the JSON loader accept no deeper text, the elementwise ops refuse
deeper trees (the recursive walks over a tree must stay within Python's recursion limit), and
in-place fusion stops short of it, so every module gruc builds prints and parses back."""


# ------------------------------------------------------------------------------------------ ops
class Unary(enum.Enum):
    """One-operand ops; the value is the op's name in the text form."""

    NEG = "neg"
    ABS = "abs"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    SQUARE = "square"
    INVERSE = "inverse"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    RELU = "relu"
    CEIL = "ceil"
    FLOOR = "floor"
    COS = "cos"
    SIN = "sin"
    SIGNUM = "signum"
    LOGICAL_NOT = "logical_not"
    IS_FINITE = "is_finite"
    EXPM1 = "expm1"
    LOG1P = "log1p"
    ROUND = "round"


class Binary(enum.Enum):
    """Two-operand ops; the value is the op's name in the text form."""

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MAX = "max"
    MIN = "min"
    POW = "pow"
    REM = "rem"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    EQ = "eq"
    NE = "ne"
    AND = "and"
    OR = "or"
    ATAN2 = "atan2"


class Ternary(enum.Enum):
    """Three-operand ops: ``select(a, b, cond)`` and ``clamp(x, lo, hi)``."""

    SELECT = "select"
    CLAMP = "clamp"


Op = Unary | Binary | Ternary

COMPARISONS = frozenset({Binary.LT, Binary.LE, Binary.GT, Binary.GE, Binary.EQ, Binary.NE})
LOGICAL_OPS = frozenset({Binary.AND, Binary.OR, Unary.LOGICAL_NOT})
BOOL_RESULT_OPS = COMPARISONS | LOGICAL_OPS | {Unary.IS_FINITE}
"""Ops whose result is ``bool`` whatever their operand type; every other op keeps its operand type."""


# ---------------------------------------------------------------------------------------- nodes
def _operator(op: Binary, reflected: bool = False) -> Callable[[Expr, ExprLike], BinaryOp]:
    """A Python operator method building ``op(self, other)`` (or ``op(other, self)`` reflected)."""
    if reflected:
        return lambda self, other: BinaryOp(op, other, self)
    return lambda self, other: BinaryOp(op, self, other)


class Expr:
    """Base of every node: Python operators build trees, and ``repr`` is the text form.

    ``+ - * / % **`` (and their reflected forms), unary ``-``, ``abs()`` and ``< <= > >=`` build
    nodes; Python numbers become :class:`Const`.  ``==`` stays structural equality.
    """

    __slots__ = ()
    __array_ufunc__ = None  # numpy must defer to our reflected operators, not build object arrays

    __add__, __radd__ = _operator(Binary.ADD), _operator(Binary.ADD, reflected=True)
    __sub__, __rsub__ = _operator(Binary.SUB), _operator(Binary.SUB, reflected=True)
    __mul__, __rmul__ = _operator(Binary.MUL), _operator(Binary.MUL, reflected=True)
    __truediv__, __rtruediv__ = _operator(Binary.DIV), _operator(Binary.DIV, reflected=True)
    __mod__, __rmod__ = _operator(Binary.REM), _operator(Binary.REM, reflected=True)
    __pow__, __rpow__ = _operator(Binary.POW), _operator(Binary.POW, reflected=True)
    __lt__, __le__ = _operator(Binary.LT), _operator(Binary.LE)
    __gt__, __ge__ = _operator(Binary.GT), _operator(Binary.GE)

    def __neg__(self) -> UnaryOp:
        return UnaryOp(Unary.NEG, self)

    def __abs__(self) -> UnaryOp:
        return UnaryOp(Unary.ABS, self)

    def __bool__(self) -> bool:
        raise GrucTypeError(f"expression {to_text(self)} has no truth value while the tree is built; "
                            "use select(a, b, cond), logical_and or logical_or")

    def __repr__(self) -> str:
        return to_text(self)


ExprLike = Expr | bool | int | float


def as_expr(value: ExprLike) -> Expr:
    """``value`` itself if it is an expression, else a :class:`Const` holding the Python number."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, (bool, int, float, np.generic)):
        return Const(value)
    raise GrucTypeError(f"cannot use a {type(value).__name__} in an expression; "
                        "expected an Expr or a Python number")


@dataclass(frozen=True, slots=True, repr=False)
class PlaceHolder(Expr):
    """The element of operand ``index`` (1-based) of the tensor list the expression is mapped over."""

    index: int

    def __post_init__(self) -> None:
        if isinstance(self.index, bool) or not isinstance(self.index, (int, np.integer)):
            raise GrucTypeError(f"placeholder index must be an int, got {self.index!r}")
        if not 1 <= self.index <= MAX_PLACEHOLDER:
            raise GrucValueError(f"placeholder index {self.index} is outside 1..{MAX_PLACEHOLDER}")
        object.__setattr__(self, "index", int(self.index))


@dataclass(frozen=True, slots=True, repr=False)
class Const(Expr):
    """A scalar constant; ``dtype=None`` means "the type of the operands around it" (see module doc)."""

    value: bool | int | float = field(compare=False)
    dtype: DType | None = None
    _value_key: tuple[str, Any] = field(init=False)
    """The value's kind and exact bits.  Equality uses this instead of ``value`` so that Const(1),
    Const(1.0) and Const(True) differ, 0.0 and -0.0 differ, and Const(nan) equals itself."""

    def __post_init__(self) -> None:
        value = self.value.item() if isinstance(self.value, np.generic) else self.value
        if not isinstance(value, (bool, int, float)):
            raise GrucTypeError(f"a constant must be a bool, int or float, got {self.value!r}")
        if type(value) is int and not -2**63 <= value < 2**64:
            raise GrucValueError(f"integer constant {value} does not fit in 64 bits")
        object.__setattr__(self, "value", value)
        if self.dtype is not None:
            object.__setattr__(self, "dtype", dtype_of(self.dtype))
            _check_representable(value, self.dtype)
        key = value.hex() if isinstance(value, float) else value
        object.__setattr__(self, "_value_key", (type(value).__name__, key))


def _check_representable(value: bool | int | float, dtype: DType) -> None:
    """Reject constants a ``dtype`` cannot hold exactly (floats hold any number, rounded)."""
    if dtype.is_float:
        return
    if dtype is BOOL:
        fits = value in (0, 1)
    else:
        bits = 8 * dtype.size
        low, high = (-2**(bits - 1), 2**(bits - 1)) if dtype is INT else (0, 2**bits)
        fits = float(value).is_integer() and low <= value < high
    if not fits:
        raise GrucValueError(f"constant {value!r} is not representable as {dtype.name}")


@dataclass(frozen=True, slots=True, repr=False)
class Cast(Expr):
    """``arg`` converted to ``dtype`` (see the module doc for the conversion rules)."""

    arg: Expr
    dtype: DType

    def __post_init__(self) -> None:
        object.__setattr__(self, "arg", as_expr(self.arg))
        object.__setattr__(self, "dtype", dtype_of(self.dtype))


def _check_op(op: Op, kind: type[enum.Enum], node: str) -> None:
    if not isinstance(op, kind):
        raise GrucTypeError(f"{node} needs a {kind.__name__} op, got {op!r}")


@dataclass(frozen=True, slots=True, repr=False)
class UnaryOp(Expr):
    """``op(arg)``."""

    op: Unary
    arg: Expr

    def __post_init__(self) -> None:
        _check_op(self.op, Unary, "UnaryOp")
        object.__setattr__(self, "arg", as_expr(self.arg))


@dataclass(frozen=True, slots=True, repr=False)
class BinaryOp(Expr):
    """``op(lhs, rhs)``."""

    op: Binary
    lhs: Expr
    rhs: Expr

    def __post_init__(self) -> None:
        _check_op(self.op, Binary, "BinaryOp")
        object.__setattr__(self, "lhs", as_expr(self.lhs))
        object.__setattr__(self, "rhs", as_expr(self.rhs))


@dataclass(frozen=True, slots=True, repr=False)
class TernaryOp(Expr):
    """``op(a, b, c)``: ``select(a, b, cond)`` = ``cond ? a : b``; ``clamp(x, lo, hi)``."""

    op: Ternary
    a: Expr
    b: Expr
    c: Expr

    def __post_init__(self) -> None:
        _check_op(self.op, Ternary, "TernaryOp")
        for name in ("a", "b", "c"):
            object.__setattr__(self, name, as_expr(getattr(self, name)))


(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10,
 _11, _12, _13, _14, _15, _16, _17, _18, _19, _20) = (PlaceHolder(i) for i in range(1, 21))


# ------------------------------------------------------------------------------------- builders
def _unary_builder(op: Unary) -> Callable[[ExprLike], UnaryOp]:
    def build(x: ExprLike) -> UnaryOp:
        return UnaryOp(op, x)
    build.__name__ = build.__qualname__ = op.value
    build.__doc__ = f"``{op.value}(x)``; its meaning is ``OPS[Unary.{op.name}]``."
    return build


def _binary_builder(op: Binary) -> Callable[[ExprLike, ExprLike], BinaryOp]:
    def build(x: ExprLike, y: ExprLike) -> BinaryOp:
        return BinaryOp(op, x, y)
    build.__name__ = build.__qualname__ = op.value
    build.__doc__ = f"``{op.value}(x, y)``; its meaning is ``OPS[Binary.{op.name}]``."
    return build


neg, abs_, exp, log = (_unary_builder(op) for op in (Unary.NEG, Unary.ABS, Unary.EXP, Unary.LOG))
sqrt, rsqrt, square = (_unary_builder(op) for op in (Unary.SQRT, Unary.RSQRT, Unary.SQUARE))
inverse, sigmoid, tanh = (_unary_builder(op) for op in (Unary.INVERSE, Unary.SIGMOID, Unary.TANH))
relu, ceil, floor = (_unary_builder(op) for op in (Unary.RELU, Unary.CEIL, Unary.FLOOR))
cos, sin, signum = (_unary_builder(op) for op in (Unary.COS, Unary.SIN, Unary.SIGNUM))
logical_not, is_finite = (_unary_builder(op) for op in (Unary.LOGICAL_NOT, Unary.IS_FINITE))
expm1, log1p, round_ = (_unary_builder(op) for op in (Unary.EXPM1, Unary.LOG1P, Unary.ROUND))
add, sub, mul, div = (_binary_builder(op) for op in (Binary.ADD, Binary.SUB, Binary.MUL, Binary.DIV))
maximum, minimum = (_binary_builder(op) for op in (Binary.MAX, Binary.MIN))
pow_, rem, atan2 = (_binary_builder(op) for op in (Binary.POW, Binary.REM, Binary.ATAN2))
lt, le, gt, ge = (_binary_builder(op) for op in (Binary.LT, Binary.LE, Binary.GT, Binary.GE))
eq, ne = (_binary_builder(op) for op in (Binary.EQ, Binary.NE))
logical_and, logical_or = (_binary_builder(op) for op in (Binary.AND, Binary.OR))


def select(a: ExprLike, b: ExprLike, cond: ExprLike) -> TernaryOp:
    """``cond ? a : b`` elementwise; note the condition comes *last*, as in poplibs' ``Select``."""
    return TernaryOp(Ternary.SELECT, a, b, cond)


def clamp(x: ExprLike, lo: ExprLike, hi: ExprLike) -> TernaryOp:
    """``x`` raised to ``lo`` and then lowered to ``hi``."""
    return TernaryOp(Ternary.CLAMP, x, lo, hi)


def cast(x: ExprLike, dtype: DType | str) -> Cast:
    """``x`` converted to ``dtype``."""
    return Cast(x, dtype)


# -------------------------------------------------------------------------------------- queries
def children(expr: Expr) -> tuple[Expr, ...]:
    """The operands of a node, in order (none for placeholders and constants)."""
    match expr:
        case Cast(arg=arg) | UnaryOp(arg=arg):
            return (arg,)
        case BinaryOp(lhs=lhs, rhs=rhs):
            return (lhs, rhs)
        case TernaryOp(a=a, b=b, c=c):
            return (a, b, c)
    return ()


def with_children(expr: Expr, new: Sequence[Expr]) -> Expr:
    """The same node over new operands (a leaf is returned as is): how rewrites rebuild a tree."""
    match expr:
        case Cast(dtype=dtype):
            return Cast(new[0], dtype)
        case UnaryOp(op=op) | BinaryOp(op=op) | TernaryOp(op=op):
            return type(expr)(op, *new)
    return expr


def nesting(expr: Expr) -> int:
    """How many levels below the root the deepest leaf is (0 for a leaf), measured level by level
    without recursion: a tree too deep for the recursive walks must be measured to be refused, and
    a subtree shared many times (``x = x + x`` in a loop) is counted once per level."""
    level, depth = {id(expr): expr}, -1
    while level:
        depth += 1
        level = {id(child): child for node in level.values() for child in children(node)}
    return depth


def check_nesting(expr: Expr) -> None:
    """Refuse a tree nested deeper than :data:`MAX_PARSE_DEPTH`, before anything walks it."""
    depth = nesting(expr)
    if depth > MAX_PARSE_DEPTH:
        raise GrucValueError(f"expression nested {depth} levels deep; at most {MAX_PARSE_DEPTH} "
                             "(split it into several maps)")


def walk(expr: Expr) -> Iterator[Expr]:
    """Every node, operands before the node that uses them (a shared subtree appears each time)."""
    for child in children(expr):
        yield from walk(child)
    yield expr


def placeholders(expr: Expr) -> tuple[int, ...]:
    """The placeholder indices the tree uses, sorted and without repeats."""
    return tuple(sorted({node.index for node in walk(expr) if isinstance(node, PlaceHolder)}))


def max_placeholder(expr: Expr) -> int:
    """The highest placeholder index used (0 for a tree of constants): the operands it needs."""
    return max(placeholders(expr), default=0)


def num_ops(expr: Expr) -> int:
    """How many operation nodes (unary, binary, ternary, cast) the tree has; poplibs fuses a tree
    into one codelet only when this is more than one."""
    return sum(isinstance(node, (Cast, UnaryOp, BinaryOp, TernaryOp)) for node in walk(expr))


def shift_placeholders(expr: Expr, by: int) -> Expr:
    """The tree with every ``_k`` replaced by ``_{k+by}`` (``map_with_output`` shifts by 1 to make
    room for the output as ``_1``)."""
    if isinstance(expr, PlaceHolder):
        return PlaceHolder(expr.index + by)
    return with_children(expr, [shift_placeholders(child, by) for child in children(expr)])


# ----------------------------------------------------------------------------------------- types
class _Typing:
    """Type inference over the nodes of one tree for one list of operand types.

    A node's *natural* type comes from its own leaves; it is None for a subtree of untyped constants,
    whose type the surrounding op decides (:meth:`bind`).  Memoised by node identity, which is stable
    while the caller holds the tree, so shared subtrees are typed once.
    """

    def __init__(self, operand_dtypes: Sequence[DType | str]) -> None:
        self.operand_dtypes = tuple(dtype_of(t) for t in operand_dtypes)
        self._natural: dict[int, DType | None] = {}

    def natural(self, expr: Expr) -> DType | None:
        key = id(expr)
        if key not in self._natural:
            self._natural[key] = self._infer(expr)
        return self._natural[key]

    def _infer(self, expr: Expr) -> DType | None:
        """The natural type of one node (:meth:`natural` memoises it).  A select's condition must be
        bool and takes no part in its type; other ops unify their operands' types, which must be
        ones the op accepts, and give bool if in BOOL_RESULT_OPS."""
        match expr:
            case PlaceHolder(index=index):
                count = len(self.operand_dtypes)
                if index > count:
                    raise GrucIndexError(f"placeholder _{index} refers to operand {index}, but only "
                                         f"{count} operand(s) were given")
                return self.operand_dtypes[index - 1]
            case Const(dtype=dtype):
                return dtype
            case Cast(arg=arg, dtype=dtype):
                self.natural(arg)
                return dtype
            case TernaryOp(op=Ternary.SELECT, a=a, b=b, c=cond):
                cond_type = self.natural(cond)
                if cond_type not in (None, BOOL):
                    raise GrucTypeError(f"the condition of {to_text(expr)} (its third operand) must "
                                        f"be bool, got {cond_type.name}")
                return _unify(expr, self.natural(a), self.natural(b))
        op = expr.op
        operand_type = _unify(expr, *(self.natural(child) for child in children(expr)))
        if operand_type is not None and operand_type not in OPS[op].types:
            allowed = ", ".join(t.name for t in OPS[op].types)
            raise GrucTypeError(f"{op.value} does not accept {operand_type.name} operands (in "
                                f"{to_text(expr)}); allowed: {allowed}")
        return BOOL if op in BOOL_RESULT_OPS else operand_type

    def bind(self, expr: Expr, expected: DType | None) -> Expr:
        """``expr`` with every untyped constant given the type its position asks for."""
        dtype = self.natural(expr)
        if dtype is None:
            dtype = FLOAT if expected is None else expected
        match expr:
            case Const(value=value, dtype=None):
                try:
                    return Const(value, dtype)
                except GrucValueError as err:
                    raise GrucValueError(f"{err}, the type its place in the expression asks for"
                                         ) from err
            case Cast(arg=arg):
                return Cast(self.bind(arg, None), expr.dtype)
            case TernaryOp(op=Ternary.SELECT, a=a, b=b, c=cond):
                return TernaryOp(Ternary.SELECT, self.bind(a, dtype), self.bind(b, dtype),
                                 self.bind(cond, BOOL))
            case UnaryOp(op=op) | BinaryOp(op=op) | TernaryOp(op=op):
                if op in LOGICAL_OPS:
                    context: DType | None = BOOL
                elif op in COMPARISONS or op is Unary.IS_FINITE:
                    context = _unify(expr, *(self.natural(child) for child in children(expr)))
                else:
                    context = dtype
                return with_children(expr, [self.bind(child, context) for child in children(expr)])
        return expr


def _unify(expr: Expr, *types: DType | None) -> DType | None:
    """The one type the given operand types agree on (None if all undecided); mixing is an error."""
    known = [t for t in types if t is not None]
    for other in known[1:]:
        if other != known[0]:
            raise GrucTypeError(f"{expr.op.value} mixes operand types {known[0].name} and "
                                f"{other.name} (in {to_text(expr)}); cast one operand to the other's "
                                "type")
    return known[0] if known else None


def _check(expr: Expr, operand_dtypes: Sequence[DType | str]) -> tuple[Expr, _Typing, DType]:
    """Validate ``expr``; return it with constants typed, its typing, and its result type."""
    if not isinstance(expr, Expr):
        raise GrucTypeError(f"expected an expression, got {type(expr).__name__}")
    check_nesting(expr)
    bound = _Typing(operand_dtypes).bind(expr, None)
    typing = _Typing(operand_dtypes)
    return bound, typing, typing.natural(bound)


def validate(expr: Expr, operand_dtypes: Sequence[DType | str]) -> None:
    """Raise a :class:`GrucError` unless ``expr`` is well typed for operands of these types."""
    _check(expr, operand_dtypes)


def result_dtype(expr: Expr, operand_dtypes: Sequence[DType | str]) -> DType:
    """The element type ``expr`` produces for operands of these types (validating it)."""
    return _check(expr, operand_dtypes)[2]


def bind_const_types(expr: Expr, operand_dtypes: Sequence[DType | str]) -> Expr:
    """``expr`` with every untyped constant given its inferred type, so that each node's type follows
    from its own subtree; what a code generator wants before it walks the tree."""
    return _check(expr, operand_dtypes)[0]


# ------------------------------------------------------------------------------------- semantics
def _sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))``, via ``exp(-|x|)`` so that no intermediate overflows."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C ``round``: to nearest, halves away from zero (``x - trunc(x)`` is exact)."""
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.copysign(x.dtype.type(1), x), t)


def _signum(x: np.ndarray) -> np.ndarray:
    one = x.dtype.type(1)
    return np.where(x > 0, one, np.where(x < 0, -one, x))


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Float division, or C integer division (toward zero; 0 for a zero divisor)."""
    if a.dtype.kind == "f":
        return a / b
    nonzero = np.where(b == 0, 1, b)
    return np.where(b == 0, 0, (a - np.fmod(a, b)) // nonzero)


def _remainder(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C ``fmod`` / ``%``: the sign of the dividend; an integer remainder by zero is 0."""
    if a.dtype.kind == "f":
        return np.fmod(a, b)
    return np.where(b == 0, 0, np.fmod(a, np.where(b == 0, 1, b)))


def _clamp(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    raised = np.where(x < lo, lo, x)
    return np.where(raised > hi, hi, raised)


@dataclass(frozen=True, slots=True)
class OpDef:
    """What one op means: the operand types it accepts, its numpy definition (on arrays already in
    the operands' compute dtype), the equivalent scalar Python template (see SCALAR_SOURCE), and
    whether it is ``costly``: many times an add for a host CPU (a transcendental, a division),
    which the runtime weighs when it chooses how to evaluate a fused expression.  A field of the
    op, not a list kept elsewhere, so a new op cannot leave it out.  (What an op costs on the
    IPU is poplibs' per-codelet table, :mod:`gruc.runtime.codelets.poplibs_estimates`.)"""

    types: tuple[DType, ...]
    numpy: Callable[..., np.ndarray]
    source: str
    costly: bool


_FLOATS = (HALF, FLOAT)
_NUMBERS = (HALF, FLOAT, INT, UNSIGNED_INT)
_SIGNED = (HALF, FLOAT, INT)
_SIGMOID_SOURCE = ("(1.0 / (1.0 + math.exp(-abs({0}))) if {0} >= 0"
                   " else math.exp(-abs({0})) / (1.0 + math.exp(-abs({0}))))")
_ROUND_SOURCE = ("(np.trunc({0}) + math.copysign(1.0, {0}) if abs({0} - np.trunc({0})) >= 0.5"
                 " else np.trunc({0}))")
_CLAMP_SOURCE = "({2} if ({1} if {0} < {1} else {0}) > {2} else ({1} if {0} < {1} else {0}))"

OPS: Mapping[Op, OpDef] = {
    Unary.NEG: OpDef(_SIGNED, np.negative, "(-{0})", False),
    Unary.ABS: OpDef(_SIGNED, np.abs, "abs({0})", False),
    Unary.EXP: OpDef(_FLOATS, np.exp, "math.exp({0})", True),
    Unary.LOG: OpDef(_FLOATS, np.log, "math.log({0})", True),
    Unary.SQRT: OpDef(_FLOATS, np.sqrt, "math.sqrt({0})", True),
    Unary.RSQRT: OpDef(_FLOATS, lambda x: x.dtype.type(1) / np.sqrt(x),
                       "(1.0 / math.sqrt({0}))", True),
    Unary.SQUARE: OpDef(_NUMBERS, lambda x: x * x, "({0} * {0})", False),
    Unary.INVERSE: OpDef(_FLOATS, lambda x: x.dtype.type(1) / x, "(1.0 / {0})", True),
    Unary.SIGMOID: OpDef(_FLOATS, _sigmoid, _SIGMOID_SOURCE, True),
    Unary.TANH: OpDef(_FLOATS, np.tanh, "math.tanh({0})", True),
    Unary.RELU: OpDef(_FLOATS, lambda x: np.where(x <= 0, x.dtype.type(0), x),
                      "(0.0 if {0} <= 0 else {0})", False),
    Unary.CEIL: OpDef(_FLOATS, np.ceil, "np.ceil({0})", False),
    Unary.FLOOR: OpDef(_FLOATS, np.floor, "np.floor({0})", False),
    Unary.COS: OpDef(_FLOATS, np.cos, "math.cos({0})", True),
    Unary.SIN: OpDef(_FLOATS, np.sin, "math.sin({0})", True),
    Unary.SIGNUM: OpDef(_SIGNED, _signum, "(1 if {0} > 0 else (-1 if {0} < 0 else {0}))", False),
    Unary.LOGICAL_NOT: OpDef((BOOL,), np.logical_not, "(not {0})", False),
    Unary.IS_FINITE: OpDef(_FLOATS, np.isfinite, "math.isfinite({0})", False),
    Unary.EXPM1: OpDef(_FLOATS, np.expm1, "math.expm1({0})", True),
    Unary.LOG1P: OpDef(_FLOATS, np.log1p, "math.log1p({0})", True),
    Unary.ROUND: OpDef(_FLOATS, _round_half_away, _ROUND_SOURCE, False),
    Binary.ADD: OpDef(_NUMBERS, np.add, "({0} + {1})", False),
    Binary.SUB: OpDef(_NUMBERS, np.subtract, "({0} - {1})", False),
    Binary.MUL: OpDef(_NUMBERS, np.multiply, "({0} * {1})", False),
    Binary.DIV: OpDef(_NUMBERS, _divide, "({0} / {1})", True),
    Binary.MAX: OpDef(_NUMBERS, lambda a, b: np.where((a >= b) | (a != a), a, b),
                      "({0} if {0} >= {1} or {0} != {0} else {1})", False),
    Binary.MIN: OpDef(_NUMBERS, lambda a, b: np.where((a <= b) | (a != a), a, b),
                      "({0} if {0} <= {1} or {0} != {0} else {1})", False),
    Binary.POW: OpDef(_FLOATS, np.power, "math.pow({0}, {1})", True),
    Binary.REM: OpDef(_NUMBERS, _remainder, "np.fmod({0}, {1})", True),  # compiled: no math.fmod there
    Binary.LT: OpDef(_NUMBERS, np.less, "({0} < {1})", False),
    Binary.LE: OpDef(_NUMBERS, np.less_equal, "({0} <= {1})", False),
    Binary.GT: OpDef(_NUMBERS, np.greater, "({0} > {1})", False),
    Binary.GE: OpDef(_NUMBERS, np.greater_equal, "({0} >= {1})", False),
    Binary.EQ: OpDef(ALL_TYPES, np.equal, "({0} == {1})", False),
    Binary.NE: OpDef(ALL_TYPES, np.not_equal, "({0} != {1})", False),
    Binary.AND: OpDef((BOOL,), np.logical_and, "({0} and {1})", False),
    Binary.OR: OpDef((BOOL,), np.logical_or, "({0} or {1})", False),
    Binary.ATAN2: OpDef(_FLOATS, np.arctan2, "math.atan2({0}, {1})", True),
    Ternary.SELECT: OpDef(ALL_TYPES, lambda a, b, cond: np.where(cond, a, b),
                          "({0} if {2} else {1})", False),
    Ternary.CLAMP: OpDef(_NUMBERS, _clamp, _CLAMP_SOURCE, False),
}
"""The meaning of every op, in one place.  ``types`` of select are its two values' types (the
condition is always bool); ops in BOOL_RESULT_OPS give bool, every other op its operands' type."""

SCALAR_SOURCE: Mapping[Op, str] = {op: d.source for op, d in OPS.items()}
"""A Python expression template per op, for code generators (``str.format`` with operand names).

Each template must give the numpy definition's result on scalars (the tests check every op).  The
rules a generator must follow: substitute *names* (bind each operand to a local first, as templates
may use an operand more than once); provide ``math`` and ``np`` (numpy) in the generated module;
convert each result to the node's compute type; use :func:`scalar_source`, which picks
:data:`INTEGER_SCALAR_SOURCE` for integer operands.  Templates are written for the compiled (LLVM) backend, whose ``math``
functions return inf/NaN where CPython's raise (``math.log(0.0)``, ``1.0 / 0.0``).  Casts have no
template: rounding to half is backend specific.
"""


class _Evaluator:
    """Computes each node of a const-bound tree in its type's compute dtype."""

    def __init__(self, typing: _Typing, operands: Sequence[np.ndarray]) -> None:
        self.typing = typing
        self.operands = operands

    def value(self, expr: Expr) -> np.ndarray:
        """The node's values in its type's compute dtype: every intermediate result stays there
        (half computes in float32, as the compiled backend does) and only the caller rounds to
        storage."""
        match expr:
            case PlaceHolder(index=index):
                result = self.operands[index - 1]
            case Const(value=value, dtype=dtype):
                result = np.asarray(value, dtype=dtype.storage)
            case Cast(arg=arg, dtype=dtype):
                result = cast_values(self.value(arg), dtype)
            case UnaryOp(op=op) | BinaryOp(op=op) | TernaryOp(op=op):
                result = OPS[op].numpy(*(self.value(child) for child in children(expr)))
        return np.asarray(result, dtype=self.typing.natural(expr).compute)


def cast_values(values: np.ndarray, dtype: DType) -> np.ndarray:
    """``values`` converted to ``dtype`` as :class:`Cast` defines it (see the module notes)."""
    if values.dtype.kind == "f" and dtype.storage.kind in "iu":
        limits = np.iinfo(dtype.storage)
        wide = np.clip(values.astype(np.float64), limits.min, limits.max)
        return np.where(np.isnan(wide), 0, wide).astype(dtype.storage)
    return values.astype(dtype.storage)


def compile_evaluator(expr: Expr, operand_dtypes: Sequence[DType | str]
                      ) -> Callable[[Sequence[Any]], np.ndarray]:
    """:func:`evaluate` with the typing done once: a function of the operand arrays only.

    Engines call an elementwise vertex many times with the same tree and types; checking and
    typing the tree on every call would cost more than the arithmetic on small tiles.
    """
    bound, typing, dtype = _check(expr, operand_dtypes)
    count = len(typing.operand_dtypes)

    def run(operands: Sequence[Any]) -> np.ndarray:
        if len(operands) != count:
            raise GrucValueError(f"{len(operands)} operand arrays but {count} operand types")
        arrays = [np.asarray(x).astype(t.storage).astype(t.compute)
                  for x, t in zip(operands, typing.operand_dtypes)]
        try:
            shape = np.broadcast_shapes(*(a.shape for a in arrays))
        except ValueError as err:
            shapes = ", ".join(str(a.shape) for a in arrays)
            raise GrucShapeError(f"operand shapes {shapes} do not broadcast together") from err
        with np.errstate(all="ignore"):
            value = _Evaluator(typing, arrays).value(bound)
            return np.broadcast_to(value, shape).astype(dtype.storage)

    return run


def evaluate(expr: Expr, operands: Sequence[Any], operand_dtypes: Sequence[DType | str]) -> np.ndarray:
    """The value of ``expr`` over ``operands`` (``_k`` is ``operands[k-1]``), with numpy broadcasting.

    This is the reference semantics of every elementwise vertex.  The result has the broadcast shape
    of *all* operands (like ``map``'s output, even if the tree ignores some) and the storage dtype of
    :func:`result_dtype`.
    """
    if len(operands) != len(operand_dtypes):
        raise GrucValueError(f"{len(operands)} operand arrays but {len(operand_dtypes)} operand types")
    return compile_evaluator(expr, operand_dtypes)(operands)


INTEGER_SCALAR_SOURCE: Mapping[Binary, str] = {
    Binary.DIV: "(0 if {1} == 0 else int({0} / {1}))",
    Binary.REM: "(0 if {1} == 0 else {0} - {1} * int({0} / {1}))",
}
"""Templates for ops whose integer meaning differs (C division and remainder, which truncate
toward zero); exact for 32-bit operands.  Not ``np.fmod``: the compiled backend's integer fmod
gave 1 for fmod(-7, 2)."""


def scalar_source(op: Op, operand_dtype: DType) -> str:
    """The :data:`SCALAR_SOURCE` template for ``op`` on operands of ``operand_dtype``."""
    if operand_dtype in (INT, UNSIGNED_INT) and op in INTEGER_SCALAR_SOURCE:
        return INTEGER_SCALAR_SOURCE[op]
    return SCALAR_SOURCE[op]


# The text and JSON forms live in their own module; re-exported here (kept last: it imports us).
from gruc.ir.expr_text import from_json, parse_expr, to_json, to_text  # noqa: E402,F401
