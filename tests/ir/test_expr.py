"""Expression trees: building, queries, typing, semantics, text and JSON forms.

The numerical property test checks :func:`evaluate` (float32 compute) against an independent float64
walk of the tree that also carries a first-order bound on the float32 error of every node, so that
cancellation and ill-conditioned ops tighten or loosen the tolerance exactly where they should.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gruc.errors import GrucError, GrucIndexError, GrucParseError, GrucShapeError, GrucTypeError
from gruc.errors import GrucValueError
from gruc.ir.expr import (OPS, SCALAR_SOURCE, BinaryOp, Binary, Cast, Const, Expr, PlaceHolder,
                          Ternary, TernaryOp, Unary, UnaryOp, _1, _2, _3, _4, _20, abs_, add,
                          bind_const_types, cast, children, clamp, compile_evaluator, div, eq,
                          evaluate, exp, from_json, gt, is_finite, logical_and, logical_not, lt,
                          max_placeholder, maximum, minimum, mul, ne, neg, num_ops, parse_expr,
                          placeholders, relu, rem, result_dtype, round_, scalar_source, select,
                          shift_placeholders, sigmoid, signum, sqrt, sub, tanh, to_json, to_text,
                          validate, walk, with_children)
from gruc.types import ALL_TYPES, BOOL, FLOAT, HALF, INT, UNSIGNED_INT

F32 = np.float32
NAN = float("nan")


# ------------------------------------------------------------------------------------ building
def test_python_operators_build_poplibs_style_trees():
    assert _1 + _2 * 2.0 == add(_1, mul(_2, Const(2.0)))
    assert 2 - _1 == sub(Const(2), _1)
    assert (1 / _1, 3 % _1, 2 ** _1) == (div(1, _1), rem(3, _1), BinaryOp(Binary.POW, Const(2), _1))
    assert (-_1, abs(_1)) == (neg(_1), abs_(_1))
    assert (_1 < 0) == lt(_1, Const(0))
    assert (0 < _1) == gt(_1, Const(0))  # Python reflects the comparison
    assert F32(2) * _1 == mul(Const(2.0), _1)  # numpy scalars defer to Expr, then become Const
    assert to_text(_1 / (Const(1) - _2)) == "div(_1, sub(const(1), _2))"  # from Gru.cpp


def test_equality_is_structural_and_nodes_are_hashable_and_frozen():
    assert _1 == PlaceHolder(1) and _1 != _2
    assert (_1 == _1) is True  # == never builds an EQ node; eq() does
    assert eq(_1, _2) == BinaryOp(Binary.EQ, _1, _2) and ne(_1, 2) == BinaryOp(Binary.NE, _1, Const(2))
    cache = {sigmoid(_1 + 1): "a"}
    assert cache[sigmoid(_1 + 1)] == "a"
    with pytest.raises(dataclasses.FrozenInstanceError):
        _1.index = 2  # type: ignore[misc]


def test_constants_compare_by_kind_and_exact_bits():
    assert Const(1) != Const(1.0) != Const(True)
    assert Const(0.0) != Const(-0.0)
    assert Const(NAN) == Const(float("nan")) and hash(Const(NAN)) == hash(Const(NAN))
    assert Const(F32(0.5)) == Const(0.5) and Const(np.int32(3)) == Const(3)
    assert Const(2.0, "f16") == Const(2.0, HALF) != Const(2.0)


def test_select_takes_the_condition_last_like_poplibs():
    e = select(_1, _2, gt(_3, 0))
    assert e == TernaryOp(Ternary.SELECT, _1, _2, gt(_3, 0))
    out = evaluate(e, [[1.0, 1.0], [2.0, 2.0], [-1.0, 1.0]], [FLOAT] * 3)
    np.testing.assert_array_equal(out, [2.0, 1.0])


def test_bad_construction_is_a_gruc_error():
    for build in (lambda: PlaceHolder(0), lambda: PlaceHolder(21), lambda: PlaceHolder(True),
                  lambda: Const("1"), lambda: Const(2**64), lambda: Const(2.5, INT),
                  lambda: Const(-1, UNSIGNED_INT), lambda: Const(2, BOOL), lambda: Cast(_1, "f64"),
                  lambda: UnaryOp(Binary.ADD, _1), lambda: _1 + np.ones(3), lambda: _1 + "x"):
        with pytest.raises(GrucError):
            build()


def test_an_expression_has_no_truth_value():
    with pytest.raises(GrucTypeError, match="truth value"):
        bool(_1 < _2)
    with pytest.raises(GrucTypeError):
        0 < _1 < 1  # a chained comparison would silently drop half of itself


def test_repr_is_the_text_form():
    assert repr(cast(_1 * 2, HALF)) == "cast(mul(_1, const(2)), f16)"
    assert str(Const(-math.inf, FLOAT)) == "const(-inf:f32)"


# ------------------------------------------------------------------------------------- queries
@pytest.mark.parametrize("expr, indices, ops", [
    (_1, (1,), 0),
    (Const(1.0), (), 0),
    (_1 + _2 * (_3 - _1), (1, 2, 3), 3),
    (((_1 * _2) + (_3 * _4)) + 20, (1, 2, 3, 4), 4),
    (cast(sigmoid(_3), HALF), (3,), 2),
    (select(_1, 0.0, gt(_20, _1)), (1, 20), 2),
])
def test_placeholders_and_num_ops(expr, indices, ops):
    assert placeholders(expr) == indices
    assert num_ops(expr) == ops
    assert max_placeholder(expr) == (indices[-1] if indices else 0)


def test_children_walk_and_with_children():
    e = select(_1, -_2, gt(_3, 0))
    assert children(e) == (_1, -_2, gt(_3, 0)) and children(_1) == () == children(Const(1))
    assert [to_text(n) for n in walk(-_2 * 2)] == ["_2", "neg(_2)", "const(2)", "mul(neg(_2), const(2))"]
    assert with_children(e, [_4, _1, _2]) == select(_4, _1, _2)
    assert with_children(cast(_1, HALF), [_2]) == cast(_2, HALF) and with_children(_1, []) == _1


def test_shift_placeholders_makes_room_for_an_output():
    assert shift_placeholders(_1 + _2 * 2, 1) == _2 + _3 * 2
    assert shift_placeholders(Const(1.0), 5) == Const(1.0)
    with pytest.raises(GrucValueError):
        shift_placeholders(_20 + 1, 1)


# ----------------------------------------------------------------------------------------- types
@pytest.mark.parametrize("expr, types, expected", [
    (_1 < _2, [FLOAT, FLOAT], BOOL),
    (eq(_1, _2), [BOOL, BOOL], BOOL),
    (cast(_1, INT), [FLOAT], INT),
    (_1 + _2 * 3, [INT, INT], INT),
    (_1 / 2.0, [UNSIGNED_INT], UNSIGNED_INT),  # an integral float constant fits an int
    (_1 * 2.5, [HALF], HALF),
    (Const(1) + Const(2), [], FLOAT),
    (Const(1, INT) + 2, [], INT),
    (select(_1, 0, _2 > 0), [HALF, FLOAT], HALF),
    (logical_and(_1 > 0, True), [FLOAT], BOOL),
    (is_finite(_1), [HALF], BOOL),
    (signum(_1), ["int"], INT),
    (clamp(_1, 0, 6), ["f16"], HALF),
])
def test_result_dtype(expr, types, expected):
    assert result_dtype(expr, types) == expected


def test_untyped_constants_take_the_type_of_their_place():
    assert bind_const_types(_1 * 2, [HALF]) == _1 * Const(2, HALF)
    assert bind_const_types(lt(1, 2), []) == lt(Const(1, FLOAT), Const(2, FLOAT))
    bound = bind_const_types(select(1, _1, logical_not(0)), [INT])
    assert bound == select(Const(1, INT), _1, logical_not(Const(0, BOOL)))


def test_placeholder_beyond_the_operands_names_index_and_count():
    with pytest.raises(GrucIndexError, match=r"_3 .*only 2 operand"):
        validate(_1 + _3, [FLOAT, FLOAT])


def test_mixing_types_names_both():
    with pytest.raises(GrucTypeError, match="half and float|float and half"):
        result_dtype(_1 + _2, [HALF, FLOAT])
    with pytest.raises(GrucTypeError, match="int and float"):
        result_dtype(_1 + Const(1.0, FLOAT), [INT])


@pytest.mark.parametrize("expr, types, words", [
    (sqrt(_1), [INT], ["sqrt", "int", "half, float"]),
    (sqrt(_1), [BOOL], ["sqrt", "bool"]),
    (_1 + _2, [BOOL, BOOL], ["add", "bool"]),
    (logical_and(_1, _2), [FLOAT, FLOAT], ["and", "float", "allowed: bool"]),
    (neg(_1), [UNSIGNED_INT], ["neg", "unsigned_int"]),
    (select(_1, _2, _1), [FLOAT, FLOAT], ["condition", "bool", "float"]),
    ((_1 > 0) + 1, [FLOAT], ["add", "bool"]),
])
def test_op_on_a_disallowed_type_names_op_type_and_allowed(expr, types, words):
    with pytest.raises(GrucTypeError) as info:
        validate(expr, types)
    for word in words:
        assert word in str(info.value)


def test_constant_that_its_place_cannot_hold():
    with pytest.raises(GrucValueError, match="2.5 is not representable as int"):
        validate(_1 + 2.5, [INT])


# ------------------------------------------------------------------------------------ semantics
def test_integer_division_and_remainder_follow_c():
    a, b = [7, -7, 7, -7, 5, -2**31], [2, 2, -2, -2, 0, 1]
    np.testing.assert_array_equal(evaluate(_1 / _2, [a, b], [INT, INT]), [3, -3, -3, 3, 0, -2**31])
    np.testing.assert_array_equal(evaluate(_1 % _2, [a, b], [INT, INT]), [1, -1, 1, -1, 0, 0])
    np.testing.assert_array_equal(evaluate(_1 / _2, [[7, 2**32 - 1], [2, 3]], [UNSIGNED_INT] * 2),
                                  [3, 1431655765])
    np.testing.assert_array_equal(evaluate(_1 % 3.0, [[-7.5]], [FLOAT]), [-1.5])


def test_rounding_ops():
    x = [0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997, -1.2, np.inf, NAN]
    np.testing.assert_array_equal(evaluate(round_(_1), [x], [FLOAT]),
                                  [1, -1, 2, 3, -3, 0, -1, np.inf, NAN])
    np.testing.assert_array_equal(evaluate(signum(_1), [[-3.0, 0.0, 2.0, NAN]], [FLOAT]),
                                  [-1, 0, 1, NAN])
    np.testing.assert_array_equal(evaluate(signum(_1), [[-3, 0, 2]], [INT]), [-1, 0, 1])


def test_nan_handling_of_max_min_relu_and_is_finite():
    a, b = [NAN, 1.0, 0.0, 2.0], [1.0, NAN, -0.0, 3.0]
    got = evaluate(maximum(_1, _2), [a, b], [FLOAT, FLOAT])
    np.testing.assert_array_equal(got, [NAN, NAN, 0.0, 3.0])
    assert not np.signbit(got[2])  # ties give the first operand
    np.testing.assert_array_equal(evaluate(minimum(_1, _2), [a, b], [FLOAT, FLOAT]),
                                  [NAN, NAN, 0.0, 2.0])
    np.testing.assert_array_equal(evaluate(relu(_1), [[NAN, -1.0, 2.0]], [FLOAT]), [NAN, 0, 2])
    np.testing.assert_array_equal(evaluate(is_finite(_1), [[NAN, np.inf, 1.0]], [HALF]),
                                  [False, False, True])


def test_clamp_raises_to_lo_before_lowering_to_hi():
    got = evaluate(clamp(_1, _2, _3), [[-5.0, 5.0, 0.5, 0.5], [0, 0, 0, 2], [1, 1, 1, 1]], [FLOAT] * 3)
    np.testing.assert_array_equal(got, [0, 1, 0.5, 1])  # lo > hi: the Clamp vertex gives hi


def test_sigmoid_is_stable_at_extremes():
    x = np.array([-1000.0, -20.0, 0.0, 20.0, 1000.0])
    got = evaluate(sigmoid(_1), [x], [FLOAT])
    ref = np.exp(-np.logaddexp(0, -x))
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)


def test_half_computes_in_float32_and_stores_float16():
    x = np.float16(0.1)
    got = evaluate(_1 * 3 + 0.1, [x], [HALF])
    assert got.dtype == np.float16
    assert got == np.float16(F32(x) * 3 + F32(np.float16(0.1)))  # the constant is a half too
    rounded = evaluate(cast(cast(_1, HALF), FLOAT), [F32(0.1)], [FLOAT])
    assert rounded.dtype == np.float32 and rounded == F32(np.float16(0.1))


def test_casts():
    x = [-2.7, -0.2, 0.0, 0.3, 2.7]
    np.testing.assert_array_equal(evaluate(cast(_1, INT), [x], [FLOAT]), [-2, 0, 0, 0, 2])
    np.testing.assert_array_equal(evaluate(cast(_1, BOOL), [x], [FLOAT]), [1, 1, 0, 1, 1])
    np.testing.assert_array_equal(evaluate(cast(_1 > 0, FLOAT) * 2, [x], [FLOAT]), [0, 0, 0, 2, 2])
    assert evaluate(cast(_1, UNSIGNED_INT), [[3]], [INT]).dtype == np.uint32


def test_operands_broadcast_like_numpy():
    rng = np.random.default_rng(0)
    a, b, c = rng.normal(size=(4, 3)), rng.normal(size=3), rng.normal(size=1)
    expr = _1 * _2 + sigmoid(_3) - _2
    got = evaluate(expr, [a, b, c], [FLOAT] * 3)
    want = evaluate(expr, [a, np.broadcast_to(b, (4, 3)), np.broadcast_to(c, (4, 3))], [FLOAT] * 3)
    assert got.shape == (4, 3)
    np.testing.assert_array_equal(got, want)
    # the output has the shape of all operands, like map's output, even those the tree ignores
    assert evaluate(_1 + 1, [b, a], [FLOAT, FLOAT]).shape == (4, 3)
    assert evaluate(Const(2.0), [], []).shape == ()
    with pytest.raises(GrucShapeError):
        evaluate(_1 + _2, [a, np.ones(4)], [FLOAT, FLOAT])
    with pytest.raises(GrucValueError):
        evaluate(_1, [a], [FLOAT, FLOAT])


def test_compiled_evaluator_types_once_and_runs_many_times():
    expr = tanh(_1) * _2 + 1
    run = compile_evaluator(expr, [HALF, HALF])
    for seed in range(3):
        a, b = np.random.default_rng(seed).normal(size=(2, 5)).astype(np.float16)
        np.testing.assert_array_equal(run([a, b]), evaluate(expr, [a, b], [HALF, HALF]))
    with pytest.raises(GrucValueError):
        run([a])
    with pytest.raises(GrucTypeError):
        compile_evaluator(expr, [HALF, FLOAT])


def test_floating_point_exceptions_are_results_not_warnings():
    with np.errstate(all="raise"):
        got = evaluate(_1 / _2 + exp(_3), [[1.0, 0.0], [0.0, 0.0], [1000.0, 0.0]], [FLOAT] * 3)
    np.testing.assert_array_equal(got, [np.inf, NAN])


def test_every_op_has_a_definition():
    all_ops = {*Unary, *Binary, *Ternary}
    assert set(OPS) == all_ops and set(SCALAR_SOURCE) == all_ops


# ------------------------------------------------------------------- scalar templates vs numpy
DIVISOR_POSITION = {Unary.INVERSE: 0, Binary.DIV: 1, Binary.REM: 1}


def _operand_values(op, position: int, rng: np.random.Generator) -> np.ndarray:
    """Float32 scalars inside the op's domain (CPython's math raises outside it), plus edge values."""
    low, high = -10.0, 10.0
    if op in (Unary.LOG, Unary.RSQRT) or (op is Binary.POW and position == 0):
        low = 0.01
    elif op is Unary.SQRT:
        low = 0.0
    elif op is Unary.LOG1P:
        low = -0.99
    elif op in (Unary.EXP, Unary.EXPM1):
        low, high = -30.0, 30.0
    values = rng.uniform(low, high, 200)
    edges = [v for v in (0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 2.0, -3.0, 0.49999997) if low <= v <= high]
    if DIVISOR_POSITION.get(op) == position:
        values = np.where(np.abs(values) < 0.1, 0.5, values)
        edges = [v for v in edges if v != 0]
    return np.concatenate([values, edges, edges[::-1]]).astype(F32)


def _arity(op) -> int:
    return {Unary: 1, Binary: 2, Ternary: 3}[type(op)]


def _node(op) -> Expr:
    operands = [_1, _2, _3][:_arity(op)]
    return {Unary: UnaryOp, Binary: BinaryOp, Ternary: TernaryOp}[type(op)](op, *operands)


def _run_template(op, dtype, columns) -> list:
    source = scalar_source(op, dtype).format(*"abc"[:len(columns)])
    namespace = {"math": math, "np": np}
    return [eval(source, namespace, dict(zip("abc", row))) for row in zip(*columns)]


@pytest.mark.parametrize("op", [op for op in OPS if FLOAT in OPS[op].types], ids=lambda op: op.value)
def test_scalar_source_matches_numpy_on_floats(op):
    rng = np.random.default_rng(sum(map(ord, op.value)))
    n = _arity(op)
    columns = [_operand_values(op, i, rng) for i in range(n)]
    size = min(len(c) for c in columns)
    columns = [c[:size] for c in columns]
    types = [FLOAT] * n
    if op is Ternary.SELECT:
        columns[2], types[2] = rng.uniform(size=size) < 0.5, BOOL
    got = evaluate(_node(op), columns, types)
    python_columns = [[x.item() for x in c] for c in columns]
    want = np.array(_run_template(op, FLOAT, python_columns)).astype(got.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


INTEGER_EDGES = {INT: [0, 7, -7, 2**31 - 1, -2**31, 123456789],
                 UNSIGNED_INT: [0, 7, 2**32 - 1, 2**31, 123456789]}


@pytest.mark.parametrize("op, dtype", [(op, t) for op in OPS for t in (INT, UNSIGNED_INT)
                                       if t in OPS[op].types], ids=str)
def test_scalar_source_matches_numpy_on_ints(op, dtype):
    """Exact, including 32-bit wrap-around (templates compute in Python ints; the generator's
    conversion to the compute type wraps as numpy does)."""
    rng = np.random.default_rng(sum(map(ord, op.value)))
    n = _arity(op)
    edges = INTEGER_EDGES[dtype]
    columns = [np.concatenate([rng.integers(-50 if dtype is INT else 0, 50, 200), edges, edges[::-1]])
               .astype(dtype.storage) for _ in range(n)]
    types = [dtype] * n
    if op is Ternary.SELECT:
        columns[2], types[2] = rng.uniform(size=len(columns[0])) < 0.5, BOOL
    got = evaluate(_node(op), columns, types)
    want = _run_template(op, dtype, [[x.item() for x in c] for c in columns])
    if got.dtype != np.bool_:
        want = np.array([int(w) & 0xFFFFFFFF for w in want], dtype=np.uint32).view(got.dtype)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", [op for op in OPS if BOOL in OPS[op].types], ids=lambda op: op.value)
def test_scalar_source_matches_numpy_on_bools(op):
    n = _arity(op)
    columns = [np.array(bits, dtype=bool) for bits in zip(*np.ndindex(*(2,) * n))]
    got = evaluate(_node(op), columns, [BOOL] * n)
    want = _run_template(op, BOOL, [[bool(x) for x in c] for c in columns])
    np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------- float property: vs float64 walk
U32 = 2.0**-24         # float32 unit roundoff
U16 = 2.0**-11         # float16 unit roundoff
TINY32 = 2.0**-149     # float32 denormal step
TINY16 = 2.0**-25      # half of float16's denormal step
SLACK = 8              # ulps allowed to numpy's float32 transcendental functions
FLT_MAX, HALF_MAX = float(np.finfo(np.float32).max), 65504.0

SMOOTH_UNARY = [Unary.NEG, Unary.ABS, Unary.SQUARE, Unary.SQRT, Unary.EXP, Unary.LOG, Unary.TANH,
                Unary.SIGMOID, Unary.RELU, Unary.SIN, Unary.COS, Unary.INVERSE]
SMOOTH_BINARY = [Binary.ADD, Binary.SUB, Binary.MUL, Binary.DIV, Binary.MAX, Binary.MIN]
BOUNDED_RESULT = {Unary.SIN, Unary.COS, Unary.TANH, Unary.SIGMOID, Unary.LOG}


def _round_through_other_float(x: Expr, dtype):
    """A double cast whose net effect is rounding to half, without changing the tree's type."""
    other = HALF if dtype is FLOAT else FLOAT
    return cast(cast(x, other), dtype)


@st.composite
def float_trees(draw, num_operands: int, dtype, depth: int = 5) -> Expr:
    """Trees of the smooth float ops (no comparisons or rounding, whose float32 and float64 results
    may legitimately differ by a step), of depth at most ``depth``."""
    kind = "leaf" if depth == 0 else draw(st.sampled_from(
        ["leaf", "unary", "binary"] * 3 + ["clamp", "round"]))
    if kind == "leaf":
        return draw(st.one_of(st.integers(1, num_operands).map(PlaceHolder),
                              st.floats(-4, 4, width=32).map(Const)))
    sub = float_trees(num_operands, dtype, depth - 1)
    if kind == "unary":
        return UnaryOp(draw(st.sampled_from(SMOOTH_UNARY)), draw(sub))
    if kind == "binary":
        return BinaryOp(draw(st.sampled_from(SMOOTH_BINARY)), draw(sub), draw(sub))
    if kind == "clamp":
        return clamp(draw(sub), draw(sub), draw(sub))
    return _round_through_other_float(draw(sub), dtype)


def reference(expr: Expr, operands: list[np.ndarray], const_unit: float, const_tiny: float):
    """The exact (float64) value of each element and a bound on how far float32 evaluation strays.

    The bound propagates each operand's error through the op's modulus of continuity and adds the
    op's own rounding; it is infinite where float32 overflows or the op is too ill-conditioned.
    """
    def unit(result, bounded=False):
        return SLACK * U32 * (np.abs(result) + bounded) + TINY32

    match expr:
        case PlaceHolder(index=index):
            x = operands[index - 1]
            return x, np.zeros_like(x)
        case Const(value=value):
            return np.float64(value), abs(value) * const_unit + const_tiny
        case Cast(arg=Cast(arg=arg)):
            x, dx = reference(arg, operands, const_unit, const_tiny)
            err = dx + np.abs(x) * U16 + TINY16
            return x, np.where(np.abs(x) + dx < HALF_MAX, err, np.inf)
        case UnaryOp(op=op, arg=arg):
            x, dx = reference(arg, operands, const_unit, const_tiny)
            r, err = _unary_reference(op, x, dx)
            err = err + unit(r, op in BOUNDED_RESULT)
        case BinaryOp(op=op, lhs=lhs, rhs=rhs):
            a, da = reference(lhs, operands, const_unit, const_tiny)
            b, db = reference(rhs, operands, const_unit, const_tiny)
            r, err = _binary_reference(op, a, da, b, db)
            err = err + unit(r)
        case TernaryOp(op=Ternary.CLAMP, a=x_expr, b=lo_expr, c=hi_expr):
            (x, dx), (lo, dlo), (hi, dhi) = (reference(e, operands, const_unit, const_tiny)
                                             for e in (x_expr, lo_expr, hi_expr))
            raised = np.where(x < lo, lo, x)
            r = np.where(raised > hi, hi, raised)
            err = np.maximum(np.maximum(dx, dlo), dhi)
    overflow = (np.abs(r) + err) * 1.001 > FLT_MAX
    return r, np.where(overflow | np.isnan(err), np.inf, err)


def _unary_reference(op, x, dx):
    with np.errstate(all="ignore"):
        if op is Unary.NEG:
            return -x, dx
        if op is Unary.ABS:
            return np.abs(x), dx
        if op is Unary.RELU:
            return np.where(x > 0, x, 0.0), dx
        if op is Unary.SQUARE:
            return x * x, 2 * np.abs(x) * dx + dx * dx
        if op is Unary.SQRT:  # an argument that may round below zero may give NaN: not checked
            bound = np.minimum(np.sqrt(dx), dx / np.sqrt(np.abs(x)))
            return np.sqrt(x), np.where(x - dx >= 0, bound, np.inf)
        if op is Unary.EXP:
            r = np.exp(x)
            return r, r * np.expm1(dx)
        if op is Unary.LOG:
            return np.log(x), np.where(dx < x, -np.log1p(-dx / x), np.inf)
        if op is Unary.TANH:
            return np.tanh(x), dx
        if op is Unary.SIGMOID:
            return 1 / (1 + np.exp(-x)), dx / 4
        if op is Unary.SIN:
            return np.sin(x), dx
        if op is Unary.COS:
            return np.cos(x), dx
        assert op is Unary.INVERSE
        return 1 / x, np.where(np.abs(x) > dx, dx / (np.abs(x) * (np.abs(x) - dx)), np.inf)


def _binary_reference(op, a, da, b, db):
    with np.errstate(all="ignore"):
        if op in (Binary.ADD, Binary.SUB):
            return (a + b if op is Binary.ADD else a - b), da + db
        if op is Binary.MUL:
            return a * b, np.abs(a) * db + np.abs(b) * da + da * db
        if op is Binary.DIV:
            r = a / b
            return r, np.where(np.abs(b) > db, (da + np.abs(r) * db) / (np.abs(b) - db), np.inf)
        assert op in (Binary.MAX, Binary.MIN)
        return (np.maximum(a, b) if op is Binary.MAX else np.minimum(a, b)), np.maximum(da, db)


@st.composite
def float_cases(draw):
    dtype = draw(st.sampled_from([FLOAT, FLOAT, HALF]))
    count = draw(st.integers(1, 4))
    expr = draw(float_trees(count, dtype))
    element = st.floats(-6, 6, width=16 if dtype is HALF else 32)
    operands = [np.array(draw(st.lists(element, min_size=4, max_size=4)), dtype=dtype.storage)
                for _ in range(count)]
    return expr, operands, dtype


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(float_cases())
def test_evaluate_matches_a_float64_walk_within_float32_error(case):
    expr, operands, dtype = case
    types = [dtype] * len(operands)
    got = evaluate(expr, operands, types).astype(np.float64)
    const_unit, const_tiny = (U16, TINY16) if dtype is HALF else (U32, TINY32)
    ref, bound = reference(expr, [x.astype(np.float64) for x in operands], const_unit, const_tiny)
    ref, bound = np.broadcast_to(ref, got.shape), np.broadcast_to(bound, got.shape)
    if result_dtype(expr, types) is HALF:
        bound = np.where(np.abs(ref) + bound < HALF_MAX, bound + np.abs(ref) * U16 + TINY16, np.inf)
    checked = np.isfinite(ref) & np.isfinite(bound)
    assert np.all(np.isfinite(got[checked])), (expr, got, ref)
    excess = np.abs(got[checked] - ref[checked]) - bound[checked]
    assert np.all(excess <= 0), (expr, got, ref, bound)


# --------------------------------------------------------------------- text and JSON round trips
CONSTANTS = st.one_of(
    st.booleans().map(Const),
    st.integers(-2**63, 2**64 - 1).map(Const),
    st.floats().map(Const),
    st.builds(Const, st.floats(), st.sampled_from([HALF, FLOAT])),
    st.builds(Const, st.integers(-2**31, 2**31 - 1), st.just(INT)),
    st.builds(Const, st.integers(0, 2**32 - 1), st.just(UNSIGNED_INT)),
    st.builds(Const, st.booleans(), st.just(BOOL)),
)


def any_trees(depth: int = 5) -> st.SearchStrategy[Expr]:
    """Syntactically valid trees over every op and constant kind (not necessarily well typed)."""
    leaf = st.one_of(st.integers(1, 20).map(PlaceHolder), CONSTANTS)
    if depth == 0:
        return leaf
    sub = any_trees(depth - 1)
    return st.one_of(leaf,
                     st.builds(Cast, sub, st.sampled_from(ALL_TYPES)),
                     st.builds(UnaryOp, st.sampled_from(list(Unary)), sub),
                     st.builds(BinaryOp, st.sampled_from(list(Binary)), sub, sub),
                     st.builds(TernaryOp, st.sampled_from(list(Ternary)), sub, sub, sub))


@settings(deadline=None, max_examples=300)
@given(any_trees())
def test_text_round_trip(expr):
    text = to_text(expr)
    assert parse_expr(text) == expr
    assert to_text(parse_expr(text)) == text


@settings(deadline=None, max_examples=200)
@given(any_trees())
def test_json_round_trip_through_strict_json(expr):
    text = json.dumps(to_json(expr), allow_nan=False)
    assert from_json(json.loads(text)) == expr


@settings(deadline=None, max_examples=100)
@given(any_trees(depth=3), st.integers(0, 3))
def test_whitespace_between_tokens_is_free(expr, spaces):
    pad = " " * spaces
    text = to_text(expr)
    for token in "(),":
        text = text.replace(token, f"{pad}{token}{pad}")
    assert parse_expr(f"{pad}\t{text}\n") == expr


def test_text_examples():
    assert to_text(_1 + _2 * Const(2.0, FLOAT)) == "add(_1, mul(_2, const(2.0:f32)))"
    assert parse_expr("select(_1, _2, gt(_3, const(0)))") == select(_1, _2, gt(_3, 0))
    assert parse_expr("cast(_1, f16)") == cast(_1, HALF)
    assert parse_expr("const(true:bool)") == Const(True, BOOL)
    assert parse_expr("const(1e+16)") == Const(1e16) and parse_expr("const(-0.0)") == Const(-0.0)
    # the module text's float forms: a trailing point is a float there and here
    assert parse_expr("const(1.:f32)") == Const(1.0, FLOAT) and parse_expr("const(2.e3)") == Const(2e3)
    assert to_json(_1 * 2.0) == {"op": "mul", "args": [{"op": "placeholder", "index": 1},
                                                        {"op": "const", "value": 2.0}]}


@settings(deadline=None, max_examples=100)
@given(st.shared(any_trees(depth=3), key="tree"), st.integers(-12, 12))
def test_shift_placeholders_property(expr, by):
    indices = placeholders(expr)
    if indices and not (1 <= indices[0] + by and indices[-1] + by <= 20):
        with pytest.raises(GrucValueError):
            shift_placeholders(expr, by)
        return
    shifted = shift_placeholders(expr, by)
    assert placeholders(shifted) == tuple(i + by for i in indices)
    assert num_ops(shifted) == num_ops(expr)
    assert shift_placeholders(shifted, -by) == expr


# ---------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("text, column, expected", [
    ("", 1, "an expression"),
    ("add(_1)", 7, "','"),
    ("add(_1, _2", 11, "')'"),
    ("add(_1, _2))", 12, "end of text"),
    ("foo(_1)", 1, "op name"),
    ("_0", 1, "outside 1..20"),
    ("_123", 1, "placeholder"),
    ("neg _1", 5, "'('"),
    ("const()", 7, "a number"),
    ("const(1.5:i32)", 1, "not representable"),
    ("const(2:f64)", 9, "a type"),
    ("const(99999999999999999999999)", 7, "64 bits"),
    ("const(18446744073709551616)", 1, "64 bits"),
    ("cast(_1)", 8, "','"),
    ("add(_1, _2 _3)", 12, "')' closing add("),
    ("neg(" * 300 + "_1" + ")" * 300, 805, "nesting"),
])
def test_malformed_text_names_column_and_expectation(text, column, expected):
    with pytest.raises(GrucParseError) as info:
        parse_expr(text)
    assert f"column {column}:" in str(info.value) and expected in str(info.value)


def _parse_or_parse_error(text: str) -> None:
    try:
        expr = parse_expr(text)
    except GrucParseError:
        return
    assert parse_expr(to_text(expr)) == expr


@settings(deadline=None, max_examples=300)
@given(st.one_of(st.text(max_size=40),
                 st.text(alphabet="_0123456789(),:.-+e adcnostlrufbixmpgq\t", max_size=40)))
def test_fuzzed_text_only_ever_raises_parse_errors(text):
    _parse_or_parse_error(text)


@settings(deadline=None, max_examples=300)
@given(any_trees(depth=3), st.data())
def test_mutated_text_only_ever_raises_parse_errors(expr, data):
    text = to_text(expr)
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, min(len(text), start + 4)))
    insert = data.draw(st.text(alphabet="_0(),:.-e1 xf", max_size=2))
    _parse_or_parse_error(text[:start] + insert + text[end:])


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    | st.sampled_from(["add", "const", "cast", "placeholder", "f16", "nan"]),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.sampled_from(["op", "args", "index", "value", "dtype", "x"]), children,
                      max_size=4),
    max_leaves=12)


@settings(deadline=None, max_examples=300)
@given(JSON_VALUES)
def test_malformed_json_only_ever_raises_parse_errors(obj):
    try:
        expr = from_json(obj)
    except GrucParseError:
        return
    assert from_json(to_json(expr)) == expr


def test_nesting_is_measured_without_recursion_and_refused_past_the_limit():
    from gruc.ir.expr import MAX_PARSE_DEPTH, check_nesting, nesting, parse_expr, to_text

    assert nesting(PlaceHolder(1)) == 0 and nesting(PlaceHolder(1) + Const(1.0)) == 1
    shared = PlaceHolder(1)
    for _ in range(60):                  # 2^60 leaves, 61 distinct nodes: counted once a level
        shared = shared + shared
    assert nesting(shared) == 60
    deepest = PlaceHolder(1)
    for _ in range(MAX_PARSE_DEPTH):
        deepest = deepest + Const(1.0)
    check_nesting(deepest)
    assert parse_expr(to_text(deepest)) == deepest   # the deepest allowed tree round-trips
    too_deep = PlaceHolder(1)
    for _ in range(5000):
        too_deep = Const(1.0) * too_deep
    with pytest.raises(GrucValueError, match=r"nested 5000 levels deep; at most 200"):
        check_nesting(too_deep)
    with pytest.raises(GrucValueError, match="nested 5000 levels deep"):
        result_dtype(too_deep, [FLOAT])
