"""Non-linearities (popnn ``nonLinearity``, ``nonLinearityInPlace``, ``nonLinearityInputGradient``).

Elementwise kinds are ``map`` / ``map_in_place`` over one expression, so each is one fused vertex
per tile (SIGMOID, TANH and RELU are single ops, poplibs' unary vertices):

* SIGMOID ``y = 1 / (1 + exp(−x))``; gradient ``g·y·(1 − y)`` (``g = dL/dy``);
* HARD_SIGMOID ``y = clamp(0.2·x + 0.5, 0, 1)``; gradient ``0.2·g`` where ``0 < y < 1``, else 0;
* RELU ``y = max(x, 0)``; gradient ``g`` where ``y > 0``, else 0;
* TANH ``y = tanh(x)``; gradient ``g·(1 − y²)``;
* GELU (tanh approximation) ``y = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``; gradient ``g``
  times the derivative of that expression, computed **from x**.

Gradients are computed from the activation *output* ``y``, as poplibs does, except GELU, whose
derivative cannot be written in terms of its output: its ``out`` argument is the non-linearity's
*input* (poplibs' rule for GELU and SWISH).  The hard-sigmoid derivative is the mathematically right
one (0.2 strictly inside the linear part, 0 where the output is clamped); poplibs tests
``|y| ≤ 2.5`` on the output, which always holds, so its derivative is 0.2 everywhere
(``docs/gru-deviations.md``).

Softmax kinds work over the innermost dimension, built from reductions (:mod:`gruc.ops.reduce`,
MAX and ADD over the last dim) and broadcasting maps, in poplibs' order of operations:

* SOFTMAX: ``e = exp(x)``, ``y = e · (1 / Σe)`` (no protection against overflow);
* SOFTMAX_STABLE: ``e = exp(x − max(x))``, then as above;
* SOFTMAX_SCALED: the stable form, scaled so that a row sums to :data:`SOFTMAX_SCALING` (62000,
  poplibs' ``SOFTMAX_SCALING``) instead of 1: ``e = exp(x − max + log S)``, ``y = e · (S / Σe)``
  = ``S · softmax(x)``; :func:`non_linearity_scaling` gives ``S`` (poplibs returns it through the
  ``nonLinearityScaling`` argument).  Scaling keeps half results away from the subnormal range.

The sum of ``e`` is accumulated and inverted in float (rounded to half for half tensors), as poplibs
does.  The softmax gradient is the Jacobian-vector product ``y·g − y·Σ(y·g)`` over the innermost
dim, evaluated as ``y·(g − s)`` with ``s = Σ(y·g)`` (the products ``y·g`` are formed in float for
half tensors, where a scaled output times an O(1) gradient would overflow; ``s`` is rounded to the
tensor's type).  For SOFTMAX_SCALED, where ``y = S·p``, gruc uses the derivative of the function
the forward computes, ``y·(g − Σ(y·g)/S)`` (the sum is reduced with ``scale = 1/S``); poplibs
applies the unscaled formula to the scaled output, which is off by the factor ``S`` in the second
term.  The result of every gradient is a new tensor mapped like ``out``.
"""

from __future__ import annotations

import enum
import math

from gruc.errors import GrucShapeError, GrucTypeError, GrucValueError
from gruc.ir import expr as ex
from gruc.ir.expr import _1, _2, Const
from gruc.ir.graph import Graph, check_op_args
from gruc.ir.program import Sequence as Seq
from gruc.ir.tensor import Tensor, require_writable
from gruc.ops.elementwise import cast, create_output, map, map_in_place, map_with_output
from gruc.ops.reduce import Operation, reduce
from gruc.types import FLOAT, HALF

__all__ = ["NonLinearity", "SOFTMAX_SCALING", "non_linearity", "non_linearity_in_place",
           "non_linearity_input_gradient", "non_linearity_of", "non_linearity_scaling"]

SOFTMAX_SCALING = 62000.0
"""What a SOFTMAX_SCALED row sums to (poplibs' ``SOFTMAX_SCALING``: near the largest half, 65504,
with room for the rounding of ``exp(log S + e)``)."""

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


class NonLinearity(enum.Enum):
    """popnn ``NonLinearityType``; the value is the lower-case name."""

    SIGMOID = "sigmoid"
    HARD_SIGMOID = "hard_sigmoid"
    RELU = "relu"
    TANH = "tanh"
    GELU = "gelu"
    SOFTMAX = "softmax"
    SOFTMAX_STABLE = "softmax_stable"
    SOFTMAX_SCALED = "softmax_scaled"

    @property
    def is_softmax(self) -> bool:
        return self in (NonLinearity.SOFTMAX, NonLinearity.SOFTMAX_STABLE,
                        NonLinearity.SOFTMAX_SCALED)


def non_linearity_of(value: NonLinearity | str) -> NonLinearity:
    """The :class:`NonLinearity` named by ``value`` (a member, or its name in any case)."""
    if isinstance(value, NonLinearity):
        return value
    if isinstance(value, str):
        key = value.strip().lower()
        for kind in NonLinearity:
            if key == kind.value:
                return kind
    raise GrucValueError(f"unknown non-linearity {value!r}; allowed: "
                         + ", ".join(kind.name for kind in NonLinearity))


def non_linearity_scaling(kind: NonLinearity | str) -> float:
    """The factor the forward result is scaled by: :data:`SOFTMAX_SCALING` for SOFTMAX_SCALED,
    else 1 (poplibs' ``nonLinearityScaling`` output argument)."""
    return SOFTMAX_SCALING if non_linearity_of(kind) is NonLinearity.SOFTMAX_SCALED else 1.0


# ---- expressions ---------------------------------------------------------------------------------
def _gelu(x: ex.Expr) -> ex.Expr:
    inner = Const(_GELU_C) * (x + Const(_GELU_A) * x * x * x)
    return x * Const(0.5) * (Const(1.0) + ex.tanh(inner))


def _gelu_derivative(x: ex.Expr) -> ex.Expr:
    th = ex.tanh(Const(_GELU_C) * (x + Const(_GELU_A) * x * x * x))
    inner = Const(_GELU_C) * (Const(1.0) + Const(3.0 * _GELU_A) * x * x)
    return Const(0.5) * (Const(1.0) + th) + Const(0.5) * x * (Const(1.0) - th * th) * inner


def _in_float(build, dtype, arity: int) -> ex.Expr:
    """``build(_1, ..)`` with half operands read as float, so constants keep float precision; the
    result is rounded to half once (the tree stays one fused vertex)."""
    holders = [ex.PlaceHolder(k + 1) for k in range(arity)]
    if dtype is not HALF:
        return build(*holders)
    return ex.Cast(build(*(ex.Cast(h, FLOAT) for h in holders)), HALF)


def forward_expression(kind: NonLinearity, dtype) -> ex.Expr:
    """The elementwise expression of ``kind`` over ``_1`` (not for softmax kinds)."""
    if kind is NonLinearity.SIGMOID:
        return ex.sigmoid(_1)
    if kind is NonLinearity.TANH:
        return ex.tanh(_1)
    if kind is NonLinearity.RELU:
        return ex.relu(_1)
    if kind is NonLinearity.HARD_SIGMOID:
        return _in_float(lambda x: ex.clamp(x * Const(0.2) + Const(0.5), Const(0.0), Const(1.0)),
                         dtype, 1)
    if kind is NonLinearity.GELU:
        return _in_float(_gelu, dtype, 1)
    raise GrucValueError(f"{kind.name} is not elementwise")


def gradient_expression(kind: NonLinearity, dtype) -> ex.Expr:
    """The input gradient of ``kind`` over ``_1`` = output (GELU: input) and ``_2`` = output
    gradient (not for softmax kinds)."""
    builders = {
        NonLinearity.SIGMOID: lambda y, g: g * (y * (Const(1.0) - y)),
        NonLinearity.TANH: lambda y, g: g * (Const(1.0) - y * y),
        NonLinearity.RELU: lambda y, g: ex.select(g, Const(0.0), y > Const(0.0)),
        NonLinearity.HARD_SIGMOID: lambda y, g: ex.select(
            g * Const(0.2), Const(0.0), ex.logical_and(y > Const(0.0), y < Const(1.0))),
        NonLinearity.GELU: lambda x, g: g * _gelu_derivative(x),
    }
    if kind not in builders:
        raise GrucValueError(f"{kind.name} is not elementwise")
    return _in_float(builders[kind], dtype, 2)


# ---- checks --------------------------------------------------------------------------------------
def _check(graph: Graph, t: object, what: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise GrucTypeError(f"{what} must be a gruc Tensor, got {type(t).__name__}")
    if t.graph is not graph:
        raise GrucValueError(f"{what} belongs to another graph")
    if not t.dtype.is_float:
        raise GrucTypeError(f"{what} is {t.dtype.name}; non-linearities need half or float")
    return t


def _check_softmax_rank(t: Tensor) -> None:
    if t.rank < 1:
        raise GrucShapeError("softmax needs a tensor of rank >= 1 (it works over the innermost "
                             f"dimension), got shape {list(t.shape)}")


# ---- softmax -------------------------------------------------------------------------------------
def _softmax(graph: Graph, kind: NonLinearity, t: Tensor, prog: Seq, name: str,
             in_place: bool) -> Tensor:
    """Softmax of ``t`` over its innermost dim, into ``t`` (in place) or a new tensor."""
    _check_softmax_rank(t)
    inner = t.rank - 1
    stable = kind is not NonLinearity.SOFTMAX
    scaled = kind is NonLinearity.SOFTMAX_SCALED
    if stable:
        biggest = reduce(graph, t, [inner], Operation.MAX, prog, name=f"{name}/max")
        if in_place:
            map_in_place(graph, _1 - _2, [t, biggest.expand([inner])], prog, f"{name}/sub_max")
            e = t
        else:
            e = map(graph, _1 - _2, [t, biggest.expand([inner])], prog, f"{name}/sub_max")
        exponent = ex.exp(_1 + Const(math.log(SOFTMAX_SCALING))) if scaled else ex.exp(_1)
        map_in_place(graph, exponent, [e], prog, f"{name}/exp")
    elif in_place:
        map_in_place(graph, ex.exp(_1), [t], prog, f"{name}/exp")
        e = t
    else:
        e = map(graph, ex.exp(_1), [t], prog, f"{name}/exp")
    total = reduce(graph, e, [inner], Operation.ADD, prog, out_type=FLOAT, name=f"{name}/sum")
    inverse = ex.inverse(_1) * Const(SOFTMAX_SCALING) if scaled else ex.inverse(_1)
    map_in_place(graph, inverse, [total], prog, f"{name}/inverse")
    if t.dtype is HALF:
        total = cast(graph, total, HALF, prog, f"{name}/cast")
    map_in_place(graph, _1 * _2, [e, total.expand([inner])], prog, f"{name}/normalise")
    return e


def _softmax_gradient(graph: Graph, kind: NonLinearity, out: Tensor, out_grad: Tensor, prog: Seq,
                      name: str) -> Tensor:
    """The softmax input gradient ``(g - sum(y * g)) * y`` over the innermost dim, from the output
    ``y``.  For the scaled softmax the sum is divided by the scaling, so the result is scaled as the
    output is; for half, ``y * g`` is formed in float."""
    _check_softmax_rank(out)
    inner = out.rank - 1
    # y·g is formed in float: a scaled half output times an O(1) gradient overflows half
    product = ex.Cast(_1, FLOAT) * ex.Cast(_2, FLOAT) if out.dtype is HALF else _1 * _2
    y_g = map(graph, product, [out, out_grad], prog, f"{name}/y_g")
    total = reduce(graph, y_g, [inner], Operation.ADD, prog, out_type=out.dtype,
                   scale=1.0 / non_linearity_scaling(kind), name=f"{name}/sum")
    result = create_output(graph, [out], out.shape, out.dtype, name)
    map_with_output(graph, _1 - _2, [out_grad, total.expand([inner])], result, prog,
                    f"{name}/sub")
    map_in_place(graph, _1 * _2, [result, out], prog, f"{name}/mul")
    return result


# ---- public API ----------------------------------------------------------------------------------
def non_linearity(graph: Graph, kind: NonLinearity | str, t: Tensor, prog: Seq,
                  name: str = "") -> Tensor:
    """A new tensor holding ``kind`` applied to ``t`` (popnn ``nonLinearity``), mapped like
    ``t``."""
    check_op_args(graph, prog, "non_linearity")
    kind = non_linearity_of(kind)
    t = _check(graph, t, "non-linearity input")
    name = name or kind.value
    if kind.is_softmax:
        return _softmax(graph, kind, t, prog, name, in_place=False)
    return map(graph, forward_expression(kind, t.dtype), [t], prog, name)


def non_linearity_in_place(graph: Graph, kind: NonLinearity | str, t: Tensor, prog: Seq,
                           name: str = "") -> None:
    """Apply ``kind`` to ``t`` in place (popnn ``nonLinearityInPlace``)."""
    check_op_args(graph, prog, "non_linearity_in_place")
    kind = non_linearity_of(kind)
    t = _check(graph, t, "non-linearity input")
    require_writable(t, "non_linearity_in_place")  # before a softmax's first reduction is added
    name = name or kind.value
    if kind.is_softmax:
        _softmax(graph, kind, t, prog, name, in_place=True)
        return
    map_in_place(graph, forward_expression(kind, t.dtype), [t], prog, name)


def non_linearity_input_gradient(graph: Graph, kind: NonLinearity | str, out: Tensor,
                                 out_grad: Tensor, prog: Seq, name: str = "") -> Tensor:
    """The gradient with respect to the non-linearity's input, from its output ``out`` (for GELU:
    its *input*) and the gradient ``out_grad`` of its output (popnn
    ``nonLinearityInputGradient``).  A new tensor mapped like ``out``."""
    check_op_args(graph, prog, "non_linearity_input_gradient")
    kind = non_linearity_of(kind)
    out = _check(graph, out, "non-linearity output")
    out_grad = _check(graph, out_grad, "non-linearity output gradient")
    if out.shape != out_grad.shape:
        raise GrucShapeError(f"non-linearity output has shape {list(out.shape)} but its gradient "
                             f"has {list(out_grad.shape)}; they must match")
    if out.dtype != out_grad.dtype:
        raise GrucTypeError(f"non-linearity output is {out.dtype.name} but its gradient is "
                            f"{out_grad.dtype.name}; they must match")
    name = name or f"{kind.value}_grad"
    if kind.is_softmax:
        return _softmax_gradient(graph, kind, out, out_grad, prog, name)
    result = create_output(graph, [out], out.shape, out.dtype, name)
    map_with_output(graph, gradient_expression(kind, out.dtype), [out, out_grad], result, prog,
                    name)
    return result
