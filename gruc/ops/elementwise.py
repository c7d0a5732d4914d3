"""Elementwise ops (popops ``map`` and friends): expression trees over tensors, fused when allowed.

``map(graph, expr, tensors, prog)`` follows poplibs' ``ElementWise.cpp``:

* operands broadcast like numpy; the output is a new tensor mapped like the "best" operand
  (``createOutputForElementWiseOp``: fewest elements on its busiest tile, then most tiles used,
  then fewest regions), or linearly when no operand has the output's shape;
* when every operand already has the output's shape (or is a single element), no operand holds
  repeated elements, and the tree has more than one operation, the whole tree becomes **one fused
  vertex per tile** in one compute set (poplibs' generated codelet);
* otherwise the tree is evaluated node by node, one compute set per operation, with temporaries
  for the inner nodes (poplibs' fallback, which is slower and uses more memory — what the
  ``inplace-fusion`` pass later measures).

The in-place forms write ``tensors[0]``; if it cannot be written in place (it repeats elements or is
a constant) the result is computed aside and copied in, as poplibs does.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from gruc.errors import GrucShapeError, GrucTypeError, GrucValueError
from gruc.ir import expr as ex
from gruc.ir.codelets.elementwise import MAP, MAP_IN_PLACE
from gruc.ir.graph import Graph, check_op_args
from gruc.ir.program import Copy, Execute, Sequence as Seq
from gruc.ir.tensor import Tensor, require_writable, share_elements
from gruc.types import DType, dtype_of


def _tensor_list(tensors: object, what: str) -> list:
    """The operand list of a map: a Tensor itself is refused by name (iterating one is an error
    about ``t[i]`` that would not say which argument was wrong)."""
    if isinstance(tensors, Tensor):
        raise GrucTypeError(f"{what} takes a list of tensors, got one Tensor; write [t]")
    try:
        return list(tensors)
    except TypeError:
        raise GrucTypeError(f"{what} takes a list of tensors, got {type(tensors).__name__}"
                            ) from None


def _check_operands(graph: Graph, expr: ex.Expr, tensors: Sequence[Tensor]) -> tuple[int, ...]:
    """The broadcast shape of ``tensors`` after checking they are this graph's and that ``expr``
    names no placeholder past them: shared by every map entry point, so each refuses alike."""
    for k, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise GrucTypeError(f"operand {k + 1} of map must be a Tensor, got {type(t).__name__}")
        if t.graph is not graph:
            raise GrucValueError(f"operand {k + 1} of map belongs to another graph")
    ex.check_nesting(expr)
    if ex.max_placeholder(expr) > len(tensors):
        raise GrucValueError(f"expression {ex.to_text(expr)} uses _{ex.max_placeholder(expr)} but "
                             f"only {len(tensors)} tensors were given")
    try:
        return tuple(np.broadcast_shapes(*(t.shape for t in tensors))) if tensors else ()
    except ValueError:
        shapes = ", ".join(str(list(t.shape)) for t in tensors)
        raise GrucShapeError(f"operand shapes {shapes} do not broadcast together") from None


def _check_number(value: object, what: str) -> None:
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, (bool, int, float)):
        raise GrucTypeError(f"{what} must be a number (bool, int or float), got {value!r}")


def finite_scale(value: object, what: str) -> float:
    """``value`` as a float scale factor: a number, not a bool, and finite — a NaN or infinite
    scale makes every element of the result NaN or infinite, never what a caller meant."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise GrucTypeError(f"{what} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise GrucValueError(f"{what} must be finite, got {value!r}")
    return float(value)


def create_output(graph: Graph, tensors: Sequence[Tensor], shape: tuple[int, ...], dtype: DType,
                  name: str) -> Tensor:
    """A new tensor for an elementwise result, mapped like the best full-shaped operand."""
    best, best_key = None, None
    for t in tensors:
        if t.shape != shape or t.num_elements <= 1 or t.has_repeats():
            continue
        mapping = graph.get_tile_mapping(t)
        per_tile = mapping.elements_per_tile(graph.target.num_tiles)
        key = (int(per_tile.max()), -int(np.count_nonzero(per_tile)), len(mapping.tiles))
        if best_key is None or key < best_key:
            best, best_key = t, key
    out = graph.add_variable(dtype, shape, name)
    if best is not None and graph.is_fully_mapped(best):
        graph.set_tile_mapping(out, graph.get_tile_mapping(best))
    else:
        graph.map_tensor_linearly(out)
    return out


def _fusable(expr: ex.Expr, tensors: Sequence[Tensor], shape: tuple[int, ...]) -> bool:
    """poplibs' rule for one generated codelet over the whole tree."""
    return (ex.num_ops(expr) > 1
            and all(t.shape == shape or t.num_elements == 1 for t in tensors)
            and not any(t.has_repeats() for t in tensors))


def _add_map_vertex(graph: Graph, expr: ex.Expr, tensors: Sequence[Tensor], out: Tensor,
                    prog: Seq, name: str, in_place: bool) -> None:
    """One compute set with one (untiled, per-tile) Map or MapInPlace vertex."""
    cs = graph.add_compute_set(name or ("map_in_place" if in_place else "map"))
    ins = [t.broadcast_to(out.shape) for t in tensors]
    if in_place:
        graph.add_vertex(cs, MAP_IN_PLACE, {"inout": out, "ins": ins[1:]}, expr=expr)
    else:
        graph.add_vertex(cs, MAP, {"out": out, "ins": ins}, expr=expr)
    prog.add(Execute(cs))


def _unfused(graph: Graph, expr: ex.Expr, tensors: Sequence[Tensor], out: Tensor, prog: Seq,
             name: str) -> None:
    """Evaluate ``expr`` node by node: one compute set per operation, temporaries in between."""
    typed = ex.bind_const_types(expr, [t.dtype for t in tensors])

    def value(node: ex.Expr) -> ex.Expr | Tensor:
        if isinstance(node, ex.Const):
            return node
        if isinstance(node, ex.PlaceHolder):
            return tensors[node.index - 1]
        operands: list[Tensor] = []
        args: list[ex.Expr] = []
        for child in ex.children(node):
            v = value(child)
            if isinstance(v, Tensor):
                operands.append(v)
                v = ex.PlaceHolder(len(operands))
            args.append(v)
        single = ex.with_children(node, args)
        if node is typed:
            target = out
        else:
            shape = tuple(np.broadcast_shapes(*(t.shape for t in operands))) if operands else ()
            result_type = ex.result_dtype(single, [t.dtype for t in operands])
            target = create_output(graph, operands, shape, result_type, f"{name or 'map'}_tmp")
        _add_map_vertex(graph, single, operands, target, prog, name, in_place=False)
        return target

    value(typed)


def _emit(graph: Graph, expr: ex.Expr, tensors: Sequence[Tensor], out: Tensor, prog: Seq,
          name: str) -> None:
    """``out = expr(tensors)``: one fused Map vertex where poplibs' rule allows it (or the tree has
    at most one op), else node by node with temporaries."""
    dtypes = [t.dtype for t in tensors]
    if _fusable(expr, tensors, out.shape) or ex.num_ops(expr) <= 1:
        _add_map_vertex(graph, ex.bind_const_types(expr, dtypes), tensors, out, prog, name,
                        in_place=False)
    else:
        _unfused(graph, expr, tensors, out, prog, name)


def map(graph: Graph, expr: ex.ExprLike, tensors: Sequence[Tensor], prog: Seq,  # noqa: A001
        name: str = "") -> Tensor:
    """A new tensor holding ``expr`` over ``tensors`` (popops ``map``)."""
    check_op_args(graph, prog, "map")
    expr = ex.as_expr(expr)
    tensors = _tensor_list(tensors, "map")
    shape = _check_operands(graph, expr, tensors)
    out_type = ex.result_dtype(expr, [t.dtype for t in tensors])
    out = create_output(graph, tensors, shape, out_type, name or "map_out")
    _emit(graph, expr, tensors, out, prog, name)
    return out


def map_with_output(graph: Graph, expr: ex.ExprLike, tensors: Sequence[Tensor], out: Tensor,
                    prog: Seq, name: str = "") -> None:
    """Write ``expr`` over ``tensors`` into ``out`` (popops ``mapWithOutput``)."""
    check_op_args(graph, prog, "map_with_output")
    expr = ex.as_expr(expr)
    tensors = _tensor_list(tensors, "map_with_output")
    shape = _check_operands(graph, expr, tensors + [out])
    require_writable(out, "map_with_output")
    if shape != out.shape:
        raise GrucShapeError(f"map output has shape {list(out.shape)} but the operands broadcast "
                             f"to {list(shape)}")
    out_type = ex.result_dtype(expr, [t.dtype for t in tensors])
    if out_type != out.dtype:
        raise GrucTypeError(f"expression {ex.to_text(expr)} gives {out_type.name}, output is "
                            f"{out.dtype.name}")
    _emit(graph, expr, tensors, out, prog, name)


def map_in_place(graph: Graph, expr: ex.ExprLike, tensors: Sequence[Tensor], prog: Seq,
                 name: str = "") -> None:
    """``tensors[0] = expr(tensors...)`` (popops ``mapInPlace``)."""
    check_op_args(graph, prog, "map_in_place")
    expr = ex.as_expr(expr)
    tensors = _tensor_list(tensors, "map_in_place")
    if not tensors:
        raise GrucValueError("map_in_place needs at least the tensor to update")
    target = tensors[0]
    shape = _check_operands(graph, expr, tensors)
    require_writable(target, "map_in_place")
    if shape != target.shape:
        raise GrucShapeError(f"map_in_place target has shape {list(target.shape)} but the operands "
                             f"broadcast to {list(shape)}")
    dtypes = [t.dtype for t in tensors]
    if ex.result_dtype(expr, dtypes) != target.dtype:
        raise GrucTypeError(f"expression {ex.to_text(expr)} gives "
                            f"{ex.result_dtype(expr, dtypes).name}, the updated tensor is "
                            f"{target.dtype.name}")
    others_overlap = any(share_elements(target, t) for t in tensors[1:])
    if not others_overlap and (_fusable(expr, tensors, shape) or ex.num_ops(expr) <= 1):
        _add_map_vertex(graph, ex.bind_const_types(expr, dtypes), tensors, target, prog, name,
                        in_place=True)
        return
    result = map(graph, expr, tensors, prog, name)
    prog.add(Copy(result, target))


def _binary(op: ex.Binary, graph: Graph, a: Tensor, b: Tensor, prog: Seq, name: str) -> Tensor:
    return map(graph, ex.BinaryOp(op, ex.PlaceHolder(1), ex.PlaceHolder(2)), [a, b], prog, name)


def _binary_in_place(op: ex.Binary, graph: Graph, a: Tensor, b: Tensor, prog: Seq,
                     name: str) -> None:
    map_in_place(graph, ex.BinaryOp(op, ex.PlaceHolder(1), ex.PlaceHolder(2)), [a, b], prog, name)


def add(graph: Graph, a: Tensor, b: Tensor, prog: Seq, name: str = "") -> Tensor:
    return _binary(ex.Binary.ADD, graph, a, b, prog, name or "add")


def sub(graph: Graph, a: Tensor, b: Tensor, prog: Seq, name: str = "") -> Tensor:
    return _binary(ex.Binary.SUB, graph, a, b, prog, name or "sub")


def mul(graph: Graph, a: Tensor, b: Tensor, prog: Seq, name: str = "") -> Tensor:
    return _binary(ex.Binary.MUL, graph, a, b, prog, name or "mul")


def div(graph: Graph, a: Tensor, b: Tensor, prog: Seq, name: str = "") -> Tensor:
    return _binary(ex.Binary.DIV, graph, a, b, prog, name or "div")


def add_in_place(graph: Graph, a: Tensor, b: Tensor, prog: Seq, name: str = "") -> None:
    _binary_in_place(ex.Binary.ADD, graph, a, b, prog, name or "add_in_place")


def sub_in_place(graph: Graph, a: Tensor, b: Tensor, prog: Seq, name: str = "") -> None:
    _binary_in_place(ex.Binary.SUB, graph, a, b, prog, name or "sub_in_place")


def mul_in_place(graph: Graph, a: Tensor, b: Tensor, prog: Seq, name: str = "") -> None:
    _binary_in_place(ex.Binary.MUL, graph, a, b, prog, name or "mul_in_place")


def div_in_place(graph: Graph, a: Tensor, b: Tensor, prog: Seq, name: str = "") -> None:
    _binary_in_place(ex.Binary.DIV, graph, a, b, prog, name or "div_in_place")


def scaled_add_to(graph: Graph, a: Tensor, b: Tensor, scale: float | Tensor, prog: Seq,
                  name: str = "") -> None:
    """``a += scale * b``; ``scale`` is a number or a one-element tensor (popops ``scaledAddTo``)."""
    if isinstance(scale, Tensor):
        if scale.num_elements != 1:
            raise GrucShapeError(f"scaled_add_to scale must have one element, got shape "
                                 f"{list(scale.shape)}")
        scale_view = scale.reshape(())
        map_in_place(graph, ex.PlaceHolder(1) + ex.PlaceHolder(2) * ex.PlaceHolder(3),
                     [a, b, scale_view], prog, name or "scaled_add_to")
        return
    scale = finite_scale(scale, "scaled_add_to scale")
    map_in_place(graph, ex.PlaceHolder(1) + ex.PlaceHolder(2) * ex.Const(scale), [a, b],
                 prog, name or "scaled_add_to")


def fill(graph: Graph, t: Tensor, value: float | int | bool, prog: Seq, name: str = "") -> None:
    """Set every element of ``t`` to ``value`` (popops ``fill``)."""
    check_op_args(graph, prog, "fill")
    _check_operands(graph, ex.Const(0), [t])
    _check_number(value, "fill value")
    require_writable(t, "fill")
    _add_map_vertex(graph, ex.Const(value if not t.dtype.is_float else float(value), t.dtype), [],
                    t, prog, name or "fill", in_place=False)


def zero(graph: Graph, t: Tensor, prog: Seq, name: str = "") -> None:
    """Set every element of ``t`` to zero (popops ``zero``)."""
    fill(graph, t, 0, prog, name or "zero")


def cast(graph: Graph, t: Tensor, dtype: DType | str, prog: Seq, name: str = "") -> Tensor:
    """A new tensor holding ``t`` converted to ``dtype`` (popops ``cast``)."""
    return map(graph, ex.Cast(ex.PlaceHolder(1), dtype_of(dtype)), [t], prog, name or "cast")
