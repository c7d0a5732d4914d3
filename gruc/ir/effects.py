"""What each program step reads and writes, per variable: the facts every dataflow analysis uses.

Liveness (memory planning), the verifier's use-before-write check and the networkx dataflow view
all need the same answer to "which variables does this step read, which does it write, and does
it overwrite all of them?".  It is computed here once, from element ids, so a write through a
view that covers a whole variable counts as a full definition and a partial one does not.

Variables are identified by their index in ``graph.variables``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from gruc.ir.graph import Graph, Vertex
from gruc.ir.mapping import distinct
from gruc.ir.program import (Copy, Execute, If, PrintTensor, Program, RepeatWhileTrue,
                             WriteUndef)
from gruc.ir.tensor import Tensor


@dataclass(frozen=True)
class Effect:
    """Variables a single program step touches."""

    reads: frozenset[int]
    writes: frozenset[int]
    full_writes: frozenset[int]
    """Written in every element, without being read first in the same step."""
    kills: frozenset[int]
    """Declared dead (``WriteUndef`` covering the whole variable)."""

    @property
    def touched(self) -> frozenset[int]:
        return self.reads | self.writes | self.kills


NO_EFFECT = Effect(frozenset(), frozenset(), frozenset(), frozenset())


def _variables_of(graph: Graph, tensors: Iterable[Tensor]) -> frozenset[int]:
    ids = [t.flat_ids() for t in tensors if t.num_elements]
    if not ids:
        return frozenset()
    return frozenset(distinct(graph.variable_of_id(np.concatenate(ids))).tolist())


def _fully_covered(graph: Graph, tensors: Iterable[Tensor]) -> frozenset[int]:
    """Variables every element of which appears in ``tensors``."""
    ids = [t.flat_ids() for t in tensors if t.num_elements]
    if not ids:
        return frozenset()
    owners = graph.variable_of_id(distinct(np.concatenate(ids)))  # sorted, like the ids
    starts = np.flatnonzero(np.concatenate(([True], owners[1:] != owners[:-1])))
    counts = np.diff(np.append(starts, len(owners)))
    return frozenset(v for v, c in zip(owners[starts].tolist(), counts.tolist())
                     if graph.variables[v].num_elements == c)


def vertex_tensors(vertices: Iterable[Vertex]) -> tuple[list[Tensor], list[Tensor]]:
    """Tensors the vertices read and write (an InOut field is both)."""
    reads, writes = [], []
    for vertex in vertices:
        for name, value in vertex.fields.items():
            direction = vertex.kind.fields[name].direction
            tensors = value if isinstance(value, tuple) else (value,)
            if direction.reads:
                reads.extend(tensors)
            if direction.writes:
                writes.extend(tensors)
    return reads, writes


def _effect(graph: Graph, reads: list[Tensor], writes: list[Tensor]) -> Effect:
    read_vars = _variables_of(graph, reads)
    full = _fully_covered(graph, writes) - read_vars
    return Effect(read_vars, _variables_of(graph, writes), full, frozenset())


class EffectTable:
    """Effects of program steps, computed on first request and remembered."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._cache: dict[int, Effect] = {}

    def of(self, step: Program) -> Effect:
        """Effect of one *leaf* step (for ``If`` / ``RepeatWhileTrue``: reading the predicate)."""
        key = id(step)
        if key not in self._cache:
            self._cache[key] = self._compute(step)
        return self._cache[key]

    def _compute(self, step: Program) -> Effect:
        graph = self.graph
        if isinstance(step, Execute):
            reads, writes = vertex_tensors(step.compute_set.vertices)
            return _effect(graph, reads, writes)
        if isinstance(step, Copy):
            return _effect(graph, [step.src], [step.dst])
        if isinstance(step, WriteUndef):
            return Effect(frozenset(), frozenset(), frozenset(),
                          _fully_covered(graph, [step.tensor]))
        if isinstance(step, PrintTensor):
            return _effect(graph, [step.tensor], [])
        if isinstance(step, (If, RepeatWhileTrue)):
            return _effect(graph, [step.predicate], [])
        return NO_EFFECT  # Sequence, Repeat, Call, Sync: the steps inside carry the effects
