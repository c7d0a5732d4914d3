"""Reduction codelets (popops ``Reduce``): rows of 2-D regions reduced into slots of one output.

A reduction is planned by :func:`gruc.ops.reduce.reduce` as poplibs plans it: every tile first
reduces the input elements it holds into per-tile *partials*, then the partials of each output
element are exchanged to the output's tile and reduced there.  Both stages use the same two kinds,
after poplibs' generic ``Reduce`` vertex (``Vector<Input<Vector>> partials``, ``Vector<Output>
out``): a vertex on one tile reduces several 2-D *regions* into slots of its output.

``Reduce(out=o, ins=[r_0, r_1, ...]) op= offsets=[s_0, s_1, ...] scale=`` means::

    acc = identity(op)                         # one accumulator per element of o (flattened)
    for each region r_b of shape [n_b, m_b]:
        acc[s_b + j] = combine(acc[s_b + j], combine over k of pre(r_b[j, k]))   for j < n_b
    o = scale * acc                            # ReduceUpdate: o = o + scale * acc

Row ``j`` of a region is what one output slot gets from that region; regions may overlap in the
output (several regions on a tile feeding the same output elements are combined), and every output
slot must be covered by some region.  ``op`` is ``add``, ``square_add`` (``pre(x) = x*x``, then
add: only the first stage squares; later stages combine partials with ``add``), ``mul``, ``max``
or ``min`` (``max``/``min`` propagate NaN, like the elementwise ``max``/``min``).

Types: all regions have one element type.  Floating regions (half or float) accumulate in float32
(poplibs' default ``accumType`` for half); integer regions accumulate in their own type, wrapping
like the IPU's 32-bit integers.  The output of a floating reduction is half or float (rounded to
nearest on store); an integer reduction writes its own type.  ``scale`` multiplies the accumulated
value (``add`` family only; 1.0 otherwise and for integers).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import numpy as np

from gruc.errors import GrucShapeError, GrucTypeError, GrucValueError
from gruc.ir.vertices import InOut, Input, Output, VertexKind, register
from gruc.types import BOOL, FLOAT, HALF, DType

if TYPE_CHECKING:
    from gruc.ir.graph import Vertex


class Operation(enum.Enum):
    """Reduction operations (popops ``Operation``); the value is the name in the text IR."""

    ADD = "add"
    SQUARE_ADD = "square_add"
    MUL = "mul"
    MAX = "max"
    MIN = "min"

    @property
    def combine(self) -> "Operation":
        """The operation that merges partial results (``square_add`` partials are added)."""
        return Operation.ADD if self is Operation.SQUARE_ADD else self

    @property
    def is_add_family(self) -> bool:
        """True for the ops that may scale and update (poplibs: ADD, SQUARE_ADD)."""
        return self in (Operation.ADD, Operation.SQUARE_ADD)


ALLOWED_OPERATIONS = ", ".join(op.name for op in Operation)


def operation_of(value: "Operation | str") -> Operation:
    """The :class:`Operation` named by ``value``: an Operation, or a name in any case
    (``"ADD"``, ``"square_add"``)."""
    if isinstance(value, Operation):
        return value
    if isinstance(value, str):
        key = value.strip().lower()
        for op in Operation:
            if key == op.value:
                return op
    raise GrucValueError(f"unknown reduction operation {value!r}; allowed: {ALLOWED_OPERATIONS}")


def identity(op: Operation, dtype: DType) -> float | int:
    """The value a reduction of no elements gives: 0, 1, or the lowest / highest value of the
    type for ``max`` / ``min`` (``-inf`` / ``inf`` for floating types)."""
    if op.combine is Operation.ADD:
        return 0
    if op is Operation.MUL:
        return 1
    if dtype.is_float:
        return -float("inf") if op is Operation.MAX else float("inf")
    info = np.iinfo(dtype.storage)
    return int(info.min) if op is Operation.MAX else int(info.max)


def accumulator_dtype(dtype: DType) -> DType:
    """The type partials of ``dtype`` inputs are kept in: float for half and float, else itself."""
    return FLOAT if dtype.is_float else dtype


def partials_dtype(dtype: DType, op: Operation) -> DType:
    """The type of per-tile partials: the accumulator type, except that ``max`` / ``min`` of half
    values are exact in half and keep it (as poplibs' partials do)."""
    if op in (Operation.MAX, Operation.MIN):
        return dtype
    return accumulator_dtype(dtype)


def check_reduce_types(in_dtype: DType, out_dtype: DType, op: Operation, scale: float,
                       what: str = "reduce") -> None:
    """The type rules of a reduction (shared by the vertex check and the op builders)."""
    if in_dtype == BOOL:
        raise GrucTypeError(f"{what} of {in_dtype.name} elements is not supported; "
                            "allowed element types: half, float, int, unsigned_int")
    if in_dtype.is_float:
        if out_dtype not in (HALF, FLOAT):
            raise GrucTypeError(f"{what} of {in_dtype.name} elements cannot write "
                                f"{out_dtype.name}; allowed output types: half, float")
    elif out_dtype != in_dtype:
        raise GrucTypeError(f"{what} of {in_dtype.name} elements must write {in_dtype.name}, "
                            f"not {out_dtype.name}")
    if float(scale) != 1.0:
        if not op.is_add_family:
            raise GrucValueError(f"{what}: scale {scale!r} is only allowed with ADD or SQUARE_ADD, "
                                 f"not {op.name}")
        if not in_dtype.is_float:
            raise GrucValueError(f"{what}: scale {scale!r} needs floating-point elements, "
                                 f"got {in_dtype.name}")


def _check_reduce(vertex: "Vertex", update: bool) -> None:
    """2-D regions of one type, one int offset each, fitting the output and together covering every
    output element; ``update`` (ReduceUpdate, ``o + scale * acc``) only with the ``add`` family."""
    name = vertex.kind.name
    out = vertex.fields["out"]
    ins = vertex.fields["ins"]
    op = operation_of(vertex.params["op"])
    offsets = vertex.params["offsets"]
    scale = vertex.params["scale"]
    if not isinstance(scale, (float, int)) or isinstance(scale, bool):
        raise GrucTypeError(f"{name} scale must be a number, got {scale!r}")
    if update and not op.is_add_family:
        raise GrucValueError(f"{name} updates its output, which is only allowed with ADD or "
                             f"SQUARE_ADD, not {op.name}")
    if not isinstance(offsets, (list, tuple)) or len(offsets) != len(ins):
        raise GrucValueError(f"{name} needs one offset per region: {len(ins)} regions, "
                             f"offsets {offsets!r}")
    if not ins:
        if out.num_elements:
            raise GrucValueError(f"{name} has no regions but {out.num_elements} output elements")
        return
    in_dtype = ins[0].dtype
    size = out.num_elements
    cover = np.zeros(size + 1, dtype=np.int64)
    for k, (region, offset) in enumerate(zip(ins, offsets)):
        if region.dtype != in_dtype:
            raise GrucTypeError(f"{name} region {k} is {region.dtype.name}, region 0 is "
                                f"{in_dtype.name}; all regions must have one type")
        if region.rank != 2:
            raise GrucShapeError(f"{name} region {k} has shape {list(region.shape)}; regions are "
                                 "2-D [outputs, elements per output]")
        n, m = region.shape
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
            raise GrucTypeError(f"{name} offset {k} must be an int, got {offset!r}")
        if m < 1 or not 0 <= offset or offset + n > size:
            raise GrucShapeError(f"{name} region {k} of shape {list(region.shape)} at offset "
                                 f"{offset} does not fit an output of {size} elements (or has no "
                                 "elements per output)")
        cover[offset] += 1
        cover[offset + n] -= 1
    if size and np.any(np.cumsum(cover)[:size] == 0):
        missing = int(np.flatnonzero(np.cumsum(cover)[:size] == 0)[0])
        raise GrucValueError(f"{name} output element {missing} is covered by no region")
    check_reduce_types(in_dtype, out.dtype, op, float(scale), name)


REDUCE = register(VertexKind(
    "Reduce", {"out": Output(), "ins": Input(vector=True)}, params=("op", "offsets", "scale"),
    check=lambda v: _check_reduce(v, update=False),
    doc="out[offsets[b] + j] = scale * op over b, k of ins[b][j, k] (a reduction stage)."))

REDUCE_UPDATE = register(VertexKind(
    "ReduceUpdate", {"out": InOut(), "ins": Input(vector=True)},
    params=("op", "offsets", "scale"), check=lambda v: _check_reduce(v, update=True),
    doc="out[offsets[b] + j] += scale * op over b, k of ins[b][j, k] (the update form)."))
