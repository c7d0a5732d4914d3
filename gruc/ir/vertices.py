"""Vertex kinds: the codelets a compute set can run, with named fields.

As in Poplar, a vertex reads and writes tensors only through named fields, each with a direction:
``Input`` (read), ``Output`` (written, previous value irrelevant) or ``InOut`` (read then written
in place).  In-place work is a different field kind, not a flag, so passes can reason about it.
A field may be a *vector* field (Poplar's ``Vector<Input<...>>``): a tuple of tensors.

A kind is declared once, in its codelet family under :mod:`gruc.ir.codelets` (elementwise, reduce,
matmul, dynamic slicing, ...), with :func:`register`; the IR, printer, verifier and both runtime
engines refer to a kind by the object the family declares.  A kind's name is its identity in text
only: the text IR, its JSON form and a user's ``add_vertex`` by name find the kind in
:data:`VERTEX_KINDS`.  Each family's engine implementations and cycle estimates live under
:mod:`gruc.runtime.codelets`, keyed by the kind objects.

*Elementwise* kinds may be added without a tile: the vertex then stands for one vertex on every
tile that holds elements of its ``split`` field, each computing the elements on its own tile
(what poplibs builds for a ``map``), which keeps a compute set over 1472 tiles one IR line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Callable

from gruc.errors import GrucValueError

if TYPE_CHECKING:
    from gruc.ir.graph import Vertex


class Direction(Enum):
    """How a vertex field uses its tensor, as Poplar's field types do: ``INOUT`` (in place) both
    ``reads`` and ``writes``; an ``OUTPUT``'s previous value is never read."""
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
    interleaved: bool = False
    """The field's data must lie in the tile's interleaved memory (Poplar's ``Vector<T, layout,
    align, true>``: what the vertex reads or writes with 128-bit accesses)."""


def Input(vector: bool = False, optional: bool = False) -> Field:  # noqa: N802 (Poplar's names)
    return Field(Direction.INPUT, vector, optional)


def Output(vector: bool = False, optional: bool = False, interleaved: bool = False  # noqa: N802
           ) -> Field:
    return Field(Direction.OUTPUT, vector, optional, interleaved)


def InOut(vector: bool = False, optional: bool = False) -> Field:  # noqa: N802
    return Field(Direction.INOUT, vector, optional)


@dataclass(frozen=True, eq=False)
class VertexKind:
    """A codelet: its fields, its parameters and the rule that checks a vertex of it.

    A kind is one object, the one :func:`register` holds: kinds compare and hash by identity, so
    code names a kind by that object (``vertex.kind is MAP``) and tables of per-kind code are keyed
    by it."""

    name: str
    fields: dict[str, Field]
    params: tuple[str, ...] = ()
    split: str | None = None
    """Field whose tile mapping places an untiled (elementwise) vertex; None: needs a tile."""
    check: Callable[["Vertex"], None] | None = field(default=None, compare=False)
    doc: str = ""
    interleaved_when: Callable[["Vertex"], bool] | None = field(default=None, compare=False)
    """Whether a vertex of the kind needs its ``interleaved`` fields there (None: always): a
    codelet whose variants differ, like poplin's AMP and MAC partial products, says which."""

    def interleaved_fields(self, vertex: "Vertex") -> tuple[str, ...]:
        """The fields of ``vertex`` whose data must lie in interleaved memory."""
        if self.interleaved_when is not None and not self.interleaved_when(vertex):
            return ()
        return tuple(name for name, spec in self.fields.items()
                     if spec.interleaved and name in vertex.fields)


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




# The codelet families declare their kinds on import; keep this last (they import this module).
from gruc.ir import codelets  # noqa: E402,F401
