"""Elementwise codelets (popops): one fused expression per vertex, out of place or in place."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gruc.errors import GrucShapeError, GrucTypeError
from gruc.ir import expr as ex
from gruc.ir.vertices import InOut, Input, Output, VertexKind, register
from gruc.types import DType

if TYPE_CHECKING:
    from gruc.ir.graph import Vertex


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
    if result != out.dtype:
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
