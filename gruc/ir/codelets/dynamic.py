"""Dynamic slicing codelets (popops ``DynamicSlice2D`` / ``DynamicUpdateSlice2D``): a window of a
tensor chosen at run time by an offset tensor.

Both kinds see the sliced tensor in one canonical shape, so the engines need no view logic:
``base`` is ``[N_1, ..., N_d, M]`` — the ``d`` sliced dimensions first, every other dimension
flattened into the columns ``M`` — and the window (``out`` / ``update``) is ``[s_1, ..., s_d, M]``
with ``1 <= s_k <= N_k``.  ``offset`` holds the ``d`` offsets (INT or UNSIGNED_INT).  Semantics,
which follow the poplibs codelets (``docs/poplibs-notes.md`` §1.5):

* window row ``(i_1, ..., i_d)`` is base row ``((o_1 + i_1) mod N_1, ..., (o_d + i_d) mod N_d)``:
  within a multi-row window the index wraps around the dimension;
* if any offset is out of range (``o_k >= N_k``, or negative for INT) the vertex does nothing:
  a slice leaves ``out`` unwritten, an update leaves ``base`` unchanged.  (poplibs' slice vertex
  returns without writing as well, unless ``remapOutOfBoundIndices`` is set; gruc has no such
  option.)

Each vertex runs on one tile (``split=None``): the builders in :mod:`gruc.ops.dynamic` add one
vertex per tile over the columns that tile holds, as poplibs does, so the offset is the only
operand that crosses tiles — and, being an ``Input`` field, liveness and the exchange model see it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gruc.errors import GrucShapeError, GrucTypeError
from gruc.ir.vertices import InOut, Input, Output, VertexKind, register
from gruc.types import INT, UNSIGNED_INT

if TYPE_CHECKING:
    from gruc.ir.graph import Vertex

OFFSET_TYPES = (INT, UNSIGNED_INT)
"""Element types an offset tensor may have."""


def _check_window(vertex: "Vertex", window_field: str) -> None:
    """``base`` ``[N..., M]``, window ``[s..., M]`` with ``1 <= s <= N``, one offset per ``N``."""
    base = vertex.fields["base"]
    window = vertex.fields[window_field]
    offset = vertex.fields["offset"]
    name = vertex.kind.name
    if base.rank < 2 or window.rank != base.rank:
        raise GrucShapeError(f"{name} base must be [N..., M] and {window_field} [s..., M] of the "
                             f"same rank >= 2; got {list(base.shape)} and {list(window.shape)}")
    sliced = base.rank - 1
    if window.shape[-1] != base.shape[-1] or not all(
            1 <= s <= n for s, n in zip(window.shape[:-1], base.shape[:-1])):
        raise GrucShapeError(f"{name} {window_field} {list(window.shape)} is not a window of base "
                             f"{list(base.shape)}: the last dims must agree and every other "
                             f"window size must be within 1..its base size")
    if offset.shape != (sliced,):
        raise GrucShapeError(f"{name} offset must have shape [{sliced}] (one per sliced dim), "
                             f"got {list(offset.shape)}")
    if offset.dtype not in OFFSET_TYPES:
        raise GrucTypeError(f"{name} offset must be int or unsigned_int, got {offset.dtype.name}")
    if window.dtype != base.dtype:
        raise GrucTypeError(f"{name} {window_field} is {window.dtype.name} but base is "
                            f"{base.dtype.name}")


DYNAMIC_SLICE = register(VertexKind(
    "DynamicSlice", {"offset": Input(), "base": Input(), "out": Output()},
    check=lambda v: _check_window(v, "out"),
    doc="out[i..., m] = base[(offset + i) mod N..., m]; nothing written if an offset is out of "
        "range."))

DYNAMIC_UPDATE = register(VertexKind(
    "DynamicUpdate", {"offset": Input(), "base": InOut(), "update": Input()},
    check=lambda v: _check_window(v, "update"),
    doc="base[(offset + i) mod N..., m] = update[i..., m]; nothing written if an offset is out "
        "of range."))
