"""Vertex kinds: the codelets a compute set can run, with named fields.

As in Poplar, a vertex reads and writes tensors only through named fields, each with a direction:
``Input`` (read), ``Output`` (written, previous value irrelevant) or ``InOut`` (read then written
in place).  In-place work is a different field kind, not a flag, so passes can reason about it.
A field may be a *vector* field (Poplar's ``Vector<Input<...>>``): a tuple of tensors.

A kind is declared once, here or by the module that owns it (``gruc.ops``), with
:func:`register`; the IR, printer, verifier and both runtime engines look kinds up by name in
:data:`VERTEX_KINDS`.  Cycle estimates live beside the runtime, keyed by the same names.

*Elementwise* kinds may be added without a tile: the vertex then stands for one vertex on every
tile that holds elements of its ``split`` field, each computing the elements on its own tile
(what poplibs builds for a ``map``), which keeps a compute set over 1472 tiles one IR line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Callable

from gruc.errors import GrucShapeError, GrucTypeError, GrucValueError
import gruc.ir.expr as ex
from gruc.types import BOOL, DType

if TYPE_CHECKING:
    from gruc.ir.graph import Vertex


class Direction(Enum):
    INPUT = "in"
    OUTPUT = "out"
    INOUT = "inout"

    @property
    def reads(self) -> bool:
        return self is not Direction.OUTPUT

    @property
    def writes(self) -> bool:
        return self is not Direction.INPUT


@dataclass(frozen=True)
class Field:
    """One named vertex field."""

    direction: Direction
    vector: bool = False
    """True if the field takes a tuple of tensors."""
    optional: bool = False


def Input(vector: bool = False, optional: bool = False) -> Field:  # noqa: N802 (Poplar's names)
    return Field(Direction.INPUT, vector, optional)


def Output(vector: bool = False, optional: bool = False) -> Field:  # noqa: N802
    return Field(Direction.OUTPUT, vector, optional)


def InOut(vector: bool = False, optional: bool = False) -> Field:  # noqa: N802
    return Field(Direction.INOUT, vector, optional)


@dataclass(frozen=True)
class VertexKind:
    """A codelet: its fields, its parameters and the rule that checks a vertex of it."""

    name: str
    fields: dict[str, Field]
    params: tuple[str, ...] = ()
    split: str | None = None
    """Field whose tile mapping places an untiled (elementwise) vertex; None: needs a tile."""
    check: Callable[["Vertex"], None] | None = field(default=None, compare=False)
    doc: str = ""


VERTEX_KINDS: dict[str, VertexKind] = {}


def register(kind: VertexKind) -> VertexKind:
    """Add ``kind`` to the registry (a kind's name is its identity in the IR)."""
    if kind.name in VERTEX_KINDS:
        raise GrucValueError(f"vertex kind {kind.name!r} is already registered")
    VERTEX_KINDS[kind.name] = kind
    return kind


def vertex_kind(name: str) -> VertexKind:
    if name not in VERTEX_KINDS:
        raise GrucValueError(f"unknown vertex kind {name!r}; known kinds: "
                             + ", ".join(sorted(VERTEX_KINDS)))
    return VERTEX_KINDS[name]


def _check_map(vertex: "Vertex", out_field: str) -> None:
    """A fused elementwise vertex: all operands shaped like the output, types as the expr says."""
    out = vertex.fields[out_field]
    ins = vertex.fields.get("ins", ())
    expression = vertex.params["expr"]
    if not isinstance(expression, ex.Expr):
        raise GrucTypeError(f"{vertex.kind.name} expr must be an Expr, got {expression!r}")
    operands = ((out,) if out_field == "inout" else ()) + tuple(ins)
    for k, t in enumerate(operands):
        if t.shape != out.shape:
            raise GrucShapeError(f"{vertex.kind.name} operand _{k + 1} has shape {list(t.shape)}, "
                                 f"output has {list(out.shape)}; broadcast operands first")
    dtypes = [t.dtype for t in operands]
    ex.validate(expression, dtypes)
    result: DType = ex.result_dtype(expression, dtypes)
    if result != out.dtype and not (result == BOOL and out.dtype == BOOL):
        raise GrucTypeError(f"{vertex.kind.name} expression {ex.to_text(expression)} gives "
                            f"{result.name}, but the output is {out.dtype.name}")


MAP = register(VertexKind(
    "Map", {"out": Output(), "ins": Input(vector=True)}, params=("expr",), split="out",
    check=lambda v: _check_map(v, "out"),
    doc="out = expr(ins...): one fused elementwise expression (poplibs' generated codelet)."))

MAP_IN_PLACE = register(VertexKind(
    "MapInPlace", {"inout": InOut(), "ins": Input(vector=True)}, params=("expr",), split="inout",
    check=lambda v: _check_map(v, "inout"),
    doc="inout = expr(inout, ins...): the in-place form; _1 is the updated operand."))
