"""Elementwise steps: an ``Execute`` of one untiled ``Map`` / ``MapInPlace`` read as
``dest = expr(operands)``, and the plan of a vertex computing a rewritten expression.

Why: in-place fusion takes such steps apart (a producer's expression substituted into its
consumer's placeholders) and rebuilds them; the reading and the rebuilding must agree on how
placeholders number operands, so both live here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gruc.ir import expr as ex
from gruc.ir.codelets.elementwise import MAP, MAP_IN_PLACE
from gruc.ir.graph import ComputeSet, Graph
from gruc.ir.program import Execute, Program
from gruc.ir.tensor import Tensor


@dataclass(frozen=True, eq=False)
class ElementwiseStep:
    """An ``Execute`` of a compute set holding one untiled Map / MapInPlace: dest = expr(operands)."""

    node: Execute
    dest: Tensor
    operands: tuple[Tensor, ...]
    """``_k`` is ``operands[k-1]``; for MapInPlace ``operands[0]`` is ``dest``."""
    expr: ex.Expr
    """With every constant typed, so the tree keeps its types wherever it is moved."""
    in_place: bool


def elementwise_step(node: Program) -> ElementwiseStep | None:
    """``node`` as an elementwise step, or None if it is not one."""
    if not isinstance(node, Execute) or len(node.compute_set.vertices) != 1:
        return None
    vertex = node.compute_set.vertices[0]
    if vertex.tile is not None or vertex.kind not in (MAP, MAP_IN_PLACE):
        return None
    in_place = vertex.kind is MAP_IN_PLACE
    dest = vertex.fields["inout" if in_place else "out"]
    operands = ((dest,) if in_place else ()) + tuple(vertex.fields["ins"])
    expression = ex.bind_const_types(vertex.params["expr"], [t.dtype for t in operands])
    return ElementwiseStep(node, dest, operands, expression, in_place)


def substitute_placeholders(expression: ex.Expr, values: dict[int, ex.Expr]) -> ex.Expr:
    """``expression`` with each placeholder ``_k`` replaced by ``values[k]``."""
    if isinstance(expression, ex.PlaceHolder):
        return values[expression.index]
    return ex.with_children(expression, [substitute_placeholders(child, values)
                                         for child in ex.children(expression)])


@dataclass(frozen=True, eq=False)
class ElementwiseVertex:
    """A Map (or, ``in_place``, a MapInPlace with ``dest`` as ``inout``) to add to a graph."""

    dest: Tensor
    ins: tuple[Tensor, ...]
    expr: ex.Expr
    in_place: bool

    def add_to(self, graph: Graph, name: str) -> ComputeSet:
        cs = graph.add_compute_set(name)
        fields = {"inout" if self.in_place else "out": self.dest, "ins": list(self.ins)}
        graph.add_vertex(cs, MAP_IN_PLACE if self.in_place else MAP, fields, expr=self.expr)
        return cs


def plan_elementwise_vertex(dest: Tensor, operands: list[Tensor],
                            expression: ex.Expr) -> ElementwiseVertex | None:
    """One vertex computing ``dest = expression(operands)``: unused operands dropped, operands over
    the same elements merged, one equal to ``dest`` made the in-place ``_1``.  None if an operand
    overlaps ``dest`` other than element for element, or too many operands remain."""
    kept, kept_ids = [dest], [dest.flat_ids()]  # kept[0] is the output itself
    dest_variables = {v.index for v in dest.variables()}
    slot: dict[int, int] = {}
    for k in ex.placeholders(expression):
        tensor, ids = operands[k - 1], operands[k - 1].flat_ids()
        same = [m for m, other in enumerate(kept_ids) if np.array_equal(ids, other)]
        if not same:
            if dest_variables & {v.index for v in tensor.variables()} and \
                    np.intersect1d(ids, kept_ids[0]).size:
                return None
            kept.append(tensor)
            kept_ids.append(ids)
        slot[k] = same[0] if same else len(kept) - 1
    in_place = 0 in slot.values()
    if len(kept) - 1 + in_place > ex.MAX_PLACEHOLDER:
        return None
    values = {k: ex.PlaceHolder(m + 1 if in_place else m) for k, m in slot.items()}
    return ElementwiseVertex(dest, tuple(kept[1:]), substitute_placeholders(expression, values),
                             in_place)
