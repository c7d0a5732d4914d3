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
from gruc.ir.layout import (BroadcastOp, ConcatOp, DimShuffleOp, ReshapeOp, ReverseOp, SliceOp,
                             Strided, strided_view)
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


_ALL_OF_ITS_SOURCE = (ReshapeOp, DimShuffleOp, ReverseOp, BroadcastOp)
"""Views that name every element of their source and no other: a view of several variables
made by one (a weight update's joined gradients flattened, a product's joined weights
transposed) names what its source does, so it is taken as its source."""


def _sliced_parts(tensor: Tensor) -> list[Tensor] | None:
    """The elements ``tensor`` takes of a concatenation as slices of its parts, if ``tensor`` is
    slices (one or several in a row) of a concatenation; else None."""
    offset, joined = (0,) * tensor.rank, tensor
    while isinstance(joined.op, SliceOp):
        offset = tuple(at + begin for at, begin in zip(offset, joined.op.begin))
        joined = joined.sources[0]
    if joined is tensor or not isinstance(joined.op, ConcatOp):
        return None
    dim, stop = joined.op.dim, tuple(at + size for at, size in zip(offset, tensor.shape))
    parts, at = [], 0
    for part in joined.sources:
        begin, end = max(offset[dim], at), min(stop[dim], at + part.shape[dim])
        if begin < end:
            parts.append(part.slice(offset[:dim] + (begin - at,) + offset[dim + 1:],
                                    stop[:dim] + (end - at,) + stop[dim + 1:]))
        at += part.shape[dim]
    return parts


class _Elements:
    """The elements ``tensors`` name, per variable index.  Steps name thousands of small views (a
    per-tile vertex's fields), nearly all runs, strided slices or concatenations of those, of one
    variable: a concatenation is taken as its parts (a view of several variables that names all of
    its source, as its source; a slice of one, as slices of its parts), and a view of one
    variable is filed under it from its sources, without materialising and searching its element
    ids (the views over a long sequence tensor name tens of millions).  Only what is left over
    several variables is resolved by its ids.  Whether the views cover a variable
    (:meth:`fully_covered`) walks them as ranges of ids where a view is one run, through strided
    views (:func:`~gruc.ir.layout.strided_view`) where it is strided, and by its ids
    otherwise."""

    def __init__(self, graph: Graph, tensors: Iterable[Tensor]) -> None:
        self.graph = graph
        self.views: dict[int, list[Tensor]] = {}
        self.ids: dict[int, list[np.ndarray]] = {}
        mixed = []
        pending = list(tensors)
        pending.reverse()
        while pending:
            tensor = pending.pop()
            if not tensor.num_elements:
                continue
            variables = tensor.variables()
            if isinstance(tensor.op, ConcatOp) or len(variables) > 1 and isinstance(
                    tensor.op, _ALL_OF_ITS_SOURCE):
                pending.extend(reversed(tensor.sources))
                continue
            parts = _sliced_parts(tensor) if len(variables) > 1 else None
            if parts is not None:
                pending.extend(reversed(parts))
                continue
            if len(variables) == 1:
                self.views.setdefault(variables[0].index, []).append(tensor)
            else:
                mixed.append(tensor.passing_ids().reshape(-1))
        if mixed:
            ids = np.concatenate(mixed)
            owners = graph.variable_of_id(ids)
            order = np.argsort(owners, kind="stable")
            owners, ids = owners[order], ids[order]
            starts = np.flatnonzero(np.concatenate(([True], owners[1:] != owners[:-1])))
            for v, part in zip(owners[starts].tolist(), np.split(ids, starts[1:])):
                self.ids.setdefault(v, []).append(part)

    def variables(self) -> frozenset[int]:
        return frozenset(self.views) | frozenset(self.ids)

    def fully_covered(self, besides: frozenset[int] = frozenset()) -> frozenset[int]:
        """Variables, other than ``besides``, every element of which is named (a variable a
        step also reads is not asked about: a slice update names its whole sequence)."""
        return frozenset(v for v in self.variables() - besides if self._covers(v))

    def _covers(self, v: int) -> bool:
        """Whether the views and ids name every element of variable ``v``.  When all it has are runs
        they are merged as intervals, with no array the size of the variable; otherwise a mask of
        its elements is filled."""
        variable = self.graph.variables[v]
        first, count = variable.first_id, variable.num_elements
        ranges, strided, ids = [], [], list(self.ids.get(v, ()))
        for tensor in self.views.get(v, ()):
            start = tensor.contiguous_start()
            if start is not None:
                ranges.append((start, start + tensor.num_elements))
            elif isinstance(tensor.layout(), Strided):
                strided.append(tensor)
            else:
                ids.append(tensor.flat_ids())
        if not ids and not strided:  # merge the runs: do they leave no gap?
            reached = first
            for begin, end in sorted(ranges):
                if begin > reached:
                    return False
                reached = max(reached, end)
            return reached >= first + count
        named = np.zeros(count, dtype=bool)
        for begin, end in ranges:
            named[begin - first:end - first] = True
        for tensor in strided:
            strided_view(named, first, tensor.layout(), tensor.shape)[...] = True
        for part in ids:
            named[part - first] = True
        return bool(named.all())


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
    read_vars = _Elements(graph, reads).variables()
    written = _Elements(graph, writes)
    full = written.fully_covered(besides=read_vars)
    return Effect(read_vars, written.variables(), full, frozenset())


def _stamp(step: Program) -> object:
    """What may change about ``step`` after its effect was computed: for an ``Execute``, the
    vertices of its compute set (appended to only: their count and the last one tell; vertices
    compare by identity)."""
    if isinstance(step, Execute):
        vertices = step.compute_set.vertices
        return len(vertices), vertices[-1] if vertices else None
    return None


class EffectTable:
    """Effects of program steps, computed on first request and remembered.

    Every table over one graph shares one memo: passes, the verifier, liveness and the dataflow
    view ask about the same steps many times in one compile (a rebuilt program keeps its
    untouched steps), and an effect costs a walk over every element the step names.  A step's
    effect never changes — program nodes are immutable, views too, and a graph only gains
    variables — except an ``Execute`` whose compute set gained vertices since (compute sets are
    only appended to), which is recomputed.  The memo holds each step it describes, so an id is
    never reused while its entry exists; it lives on the graph (``Graph.effects_memo``), as the
    steps it holds refer to the graph, so both go together."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._cache = graph.effects_memo

    def of(self, step: Program) -> Effect:
        """Effect of one *leaf* step (for ``If`` / ``RepeatWhileTrue``: reading the predicate)."""
        entry = self._cache.get(id(step))
        stamp = _stamp(step)
        if entry is None or entry[1] != stamp:
            entry = (step, stamp, self._compute(step))
            self._cache[id(step)] = entry
        return entry[2]

    def carry(self, step: Program, copy: Program, indices: dict[int, int],
              into: "EffectTable") -> None:
        """Give ``into`` (a table of a copy of this graph, :mod:`gruc.ir.graph_copy`) the effect
        of ``copy`` (``step`` made again over the copy's objects), if this table knows
        ``step``'s: the same elements, so the same effect, its variables renumbered by
        ``indices`` (this graph's index -> the copy's).  A copied module is analysed at once
        (its memory plan), and this saves a walk over every element of every step."""
        entry = self._cache.get(id(step))
        if entry is None or entry[0] is not step or entry[1] != _stamp(step):
            return
        effect = entry[2]
        renumbered = [frozenset(indices[v] for v in variables) for variables in
                      (effect.reads, effect.writes, effect.full_writes, effect.kills)]
        into._cache[id(copy)] = (copy, _stamp(copy), Effect(*renumbered))

    def _compute(self, step: Program) -> Effect:
        """The effect of one leaf step, not memoised.  A ``WriteUndef`` kills only the variables it
        covers whole; ``If`` and ``RepeatWhileTrue`` read their predicate; containers have none of
        their own (their steps carry it)."""
        graph = self.graph
        if isinstance(step, Execute):
            reads, writes = vertex_tensors(step.compute_set.vertices)
            return _effect(graph, reads, writes)
        if isinstance(step, Copy):
            return _effect(graph, [step.src], [step.dst])
        if isinstance(step, WriteUndef):
            return Effect(frozenset(), frozenset(), frozenset(),
                          _Elements(graph, [step.tensor]).fully_covered())
        if isinstance(step, PrintTensor):
            return _effect(graph, [step.tensor], [])
        if isinstance(step, (If, RepeatWhileTrue)):
            return _effect(graph, [step.predicate], [])
        return NO_EFFECT  # Sequence, Repeat, Call, Sync: the steps inside carry the effects
