"""Races between the vertices of one compute set, found without listing their elements.

The vertices of a compute set run at once (one BSP superstep), in no order.  Two vertices that
write one element, or one that reads an element another writes, give a result that depends on
an order nobody promises — gruc's engine runs vertices in the order they were added, which
would hide the bug until the program met a real scheduler.  The verifier refuses both.

Listing each field's element ids would cost as much as the data: at S = 2,000 the per-tile
vertices of one GRU sequence update name 98 million ids, where the compiler is otherwise flat in
the sequence length.  So a field is described by *boxes*, strided sets ``offset + sum(i_k * s_k)``
that each take O(rank) to describe: a strided view is one box, a concatenation is its parts'
boxes, and a reshape, transpose, reversal or broadcast names its source's set, so takes its
source's boxes.  Only a dense view that is none of these (a slice of a concatenation) is listed,
as runs of consecutive ids, cut where a variable starts.

Boxes are compared on one variable at a time, and only on variables some vertex of the compute set
writes. Two boxes can meet only if their id ranges meet, and — for each *period* ``P`` of the
variable (the length of a row, of a plane, ...) — their rows (``id // P``) and their columns
(``id % P``) meet; on each of these coordinates a box also covers only one residue class (modulo
the gcd of its steps there), which two boxes must share. Those tests prune the pairs a sweep makes
on the most selective coordinate (a writer with each box its range meets: readers are never paired
with readers); the few pairs that pass are settled exactly, by listing ids of boxes small enough
and by halving larger ones.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from gruc.ir.layout import (BroadcastOp, ConcatOp, DimShuffleOp, ReshapeOp, ReverseOp, SliceOp,
                            Strided)
from gruc.ir.mapping import consecutive_runs, distinct
from gruc.ir.tensor import Tensor, Variable

LISTED_IDS = 1 << 18
"""Boxes of at most this many elements are compared by listing their ids; larger ones are
halved first (so an exact comparison never lists more than this per box)."""

PAIRS_PER_SWEEP_CHUNK = 1 << 20
"""Candidate pairs made at once by the sweep (bounds its memory on a crowded variable)."""

_SAME_SET_OPS = (BroadcastOp, DimShuffleOp, ReshapeOp, ReverseOp)
"""View ops whose view names exactly the elements of its source (in another order or repeated)."""


@dataclass(frozen=True, slots=True)
class Box:
    """The ids ``offset + sum(i_k * strides_k)`` for ``0 <= i_k < sizes_k``: strides positive and
    decreasing, no dimension of size 1, so ``offset`` is the smallest id and ``last`` the
    largest."""

    offset: int
    strides: tuple[int, ...]
    sizes: tuple[int, ...]

    @staticmethod
    def of(offset: int, strides: tuple[int, ...], sizes: tuple[int, ...]) -> "Box":
        """The box of a strided layout, normalised: reversed dims turned forward, repeated
        (stride 0) and single dims dropped."""
        dims = []
        for size, stride in zip(sizes, strides):
            if size > 1 and stride != 0:
                if stride < 0:
                    offset += stride * (size - 1)
                dims.append((abs(stride), size))
        dims.sort(reverse=True)
        return Box(offset, tuple(s for s, _ in dims), tuple(n for _, n in dims))

    @property
    def last(self) -> int:
        return self.offset + sum(s * (n - 1) for s, n in zip(self.strides, self.sizes))

    @property
    def size(self) -> int:
        return math.prod(self.sizes)

    def ids(self) -> np.ndarray:
        ids = np.array([self.offset], dtype=np.int64)
        for stride, size in zip(self.strides, self.sizes):
            ids = (ids[:, None] + np.arange(size, dtype=np.int64) * stride).reshape(-1)
        return ids

    def halves(self) -> tuple["Box", "Box"]:
        """The box cut in two along its widest-strided dimension."""
        stride, size = self.strides[0], self.sizes[0]
        half = size // 2
        return (Box.of(self.offset, self.strides, (half,) + self.sizes[1:]),
                Box.of(self.offset + stride * half, self.strides, (size - half,) + self.sizes[1:]))


def boxes_of(tensor: Tensor) -> list[Box]:
    """Boxes whose union is the set of elements ``tensor`` names (see the module)."""
    if tensor.num_elements == 0:
        return []
    # concatenations first: their layout would list the ids
    if isinstance(tensor.op, ConcatOp):
        return [box for source in tensor.sources for box in boxes_of(source)]
    if isinstance(tensor.op, SliceOp) and (pieces := _sliced_parts(tensor)) is not None:
        return [box for piece in pieces for box in boxes_of(piece)]
    if isinstance(tensor.op, _SAME_SET_OPS):  # before its layout, which a reshape may list
        return boxes_of(tensor.sources[0])
    start = tensor.contiguous_start()
    if start is not None:
        return [Box.of(start, (1,), (tensor.num_elements,))]
    layout = tensor.layout()
    if isinstance(layout, Strided):
        return [Box.of(layout.offset, layout.strides, tensor.shape)]
    ids = distinct(layout.reshape(-1))
    starts = np.union1d(consecutive_runs(ids)[0],
                        np.searchsorted(ids, [v.first_id for v in tensor.variables()]))
    starts = starts[starts < len(ids)]
    lengths = np.diff(np.append(starts, len(ids)))
    return [Box.of(int(ids[s]), (1,), (int(n),)) for s, n in zip(starts, lengths)]


def _sliced_parts(tensor: Tensor) -> list[Tensor] | None:
    """The pieces of a slice (of slices) of a concatenation, each a slice of one part, or None
    if the slices are not of a concatenation.  A weight matrix's per-tile columns, cut from the
    gates' concatenation, would otherwise be listed id by id."""
    begin, end = list(tensor.op.begin), list(tensor.op.end)
    joined = tensor.sources[0]
    while isinstance(joined.op, SliceOp):  # ``t[:, a:b]`` slices every dimension in turn
        begin = [b + outer for b, outer in zip(begin, joined.op.begin)]
        end = [e + outer for e, outer in zip(end, joined.op.begin)]
        joined = joined.sources[0]
    if not isinstance(joined.op, ConcatOp):
        return None
    dim, pieces, offset = joined.op.dim, [], 0
    for part in joined.sources:
        low, high = max(begin[dim], offset), min(end[dim], offset + part.shape[dim])
        if low < high:
            pieces.append(part.slice(begin[:dim] + [low - offset] + begin[dim + 1:],
                                     end[:dim] + [high - offset] + end[dim + 1:]))
        offset += part.shape[dim]
    return pieces


@dataclass(frozen=True, slots=True)
class Access:
    """One box of one field of one vertex of a compute set."""

    vertex: int
    field: str
    writes: bool
    box: Box


@dataclass(frozen=True, slots=True)
class Race:
    """Two accesses of different vertices that share ``element`` (a global id), at least one of
    them a write (``first`` is one that writes)."""

    first: Access
    second: Access
    element: int


def find_race(vertices: list, variables: list[Variable]) -> Race | None:
    """The first race among the fields of ``vertices`` (one compute set's), or None.
    ``variables`` are the graph's, in id order."""
    fields = [(index, name, vertex.kind.fields[name.split("[")[0]].direction.writes, tensor)
              for index, vertex in enumerate(vertices) for name, tensor in vertex.tensors()]
    contested = _contested(fields)
    if not contested:
        return None
    starts = [v.first_id for v in variables]
    boxed: dict[int, list[Box]] = {}
    groups: dict[int, list[Access]] = {}
    for index, name, writes, tensor in fields:
        if not any(id(v) in contested for v in tensor.variables()):
            continue
        if id(tensor) not in boxed:
            boxed[id(tensor)] = boxes_of(tensor)
        for box in boxed[id(tensor)]:
            owner = bisect.bisect_right(starts, box.offset) - 1
            if id(variables[owner]) in contested:
                groups.setdefault(owner, []).append(Access(index, name, writes, box))
    for owner, group in groups.items():
        race = _race_on(variables[owner], group)
        if race is not None:
            return race
    return None


def _contested(fields: list[tuple]) -> set[int]:
    """Ids (``id()``) of the variables some vertex writes and another vertex reads or writes:
    the only ones a race can be on.  Told from each field's variables, before any box is made
    (the per-tile vertices of a GRU step write a few variables and read many)."""
    writers: dict[int, set[int]] = {}
    touchers: dict[int, set[int]] = {}
    for index, _, writes, tensor in fields:
        for variable in tensor.variables():
            touchers.setdefault(id(variable), set()).add(index)
            if writes:
                writers.setdefault(id(variable), set()).add(index)
    return {key for key, who in writers.items() if len(who | touchers[key]) > 1}


class _Bounds:
    """Necessary conditions for boxes of one variable to meet.  A box is seen on *coordinates*:
    its ids, and per period ``P`` its rows (``id // P``) and its columns (``id % P``).  On each it
    covers part of an arithmetic progression, from ``low`` to ``high`` in multiples of ``step``
    (0: one value), so two boxes can meet only if, on every coordinate, their ranges meet and
    their lows agree modulo the gcd of their steps: the even and the odd rows, or the columns
    ``k::V`` of V vertices, are told apart without listing an id.  A box whose columns wrap
    round a row tells nothing of its rows and columns but their range."""

    def __init__(self, variable: Variable, boxes: list[Box]) -> None:
        shape = variable.shape
        periods = sorted({math.prod(shape[k:]) for k in range(1, len(shape))}
                         - {1, variable.num_elements})
        rank = max((len(b.strides) for b in boxes), default=0)
        # strides and sizes padded to one rank (stride 0, size 1: a dimension that adds nothing)
        strides = np.array([b.strides + (0,) * (rank - len(b.strides)) for b in boxes],
                           dtype=np.int64).reshape(len(boxes), rank)
        spans = strides * (np.array([b.sizes + (1,) * (rank - len(b.sizes)) for b in boxes],
                                    dtype=np.int64).reshape(len(boxes), rank) - 1)
        low = np.array([b.offset for b in boxes], dtype=np.int64) - variable.first_id
        high = low + spans.sum(axis=1)
        self.ids = (low, high, np.gcd.reduce(strides, axis=1))
        self.rows, self.columns = [], []
        for period in periods:
            within = strides % period != 0          # the dimensions that move along a row
            end = low + (spans * within).sum(axis=1)
            flat = low // period == end // period   # the box's columns do not wrap round a row
            self.rows.append((low // period, high // period,
                              np.where(flat, np.gcd.reduce(strides // period * ~within, axis=1),
                                       1)))
            self.columns.append((np.where(flat, low % period, 0),
                                 np.where(flat, end % period, period - 1),
                                 np.where(flat, np.gcd.reduce(strides * within, axis=1), 1)))

    def sweep_keys(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        return [self.ids] + self.columns

    def may_meet(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Whether boxes ``i`` and ``j`` pass the test of every coordinate."""
        keep = np.ones(len(i), dtype=bool)
        for low, high, step in [self.ids] + self.rows + self.columns:
            common = np.maximum(np.gcd(step[i], step[j]), 1)  # steps both 0: the ranges decide
            keep &= (low[i] <= high[j]) & (low[j] <= high[i]) & ((low[i] - low[j]) % common == 0)
        return keep


def _race_on(variable: Variable, group: list[Access]) -> Race | None:
    """The first race among accesses of one variable."""
    bounds = _Bounds(variable, [a.box for a in group])
    vertex = np.array([a.vertex for a in group], dtype=np.int64)
    writes = np.array([a.writes for a in group], dtype=bool)
    sweeps = [_Sweep(low, high, writes) for low, high, _ in bounds.sweep_keys()]
    for i, j in min(sweeps, key=lambda sweep: sweep.pairs).candidates():
        keep = vertex[i] != vertex[j]
        keep[keep] = bounds.may_meet(i[keep], j[keep])
        for a, b in zip(i[keep].tolist(), j[keep].tolist()):
            first, second = (group[a], group[b]) if group[a].writes else (group[b], group[a])
            element = _common_element(first.box, second.box)
            if element is not None:
                return Race(first, second, element)
    return None


class _Sweep:
    """The pairs of boxes whose ranges ``[low, high]`` meet and of which one writes: two ranges
    meet when one starts within the other, so each writer pairs with the boxes that start within
    it, and each reader with the writers that start within it after its own start.  Pairs of
    readers, which cannot race however many there are, are never made."""

    def __init__(self, low: np.ndarray, high: np.ndarray, writes: np.ndarray) -> None:
        order = np.argsort(low, kind="stable")
        writers, readers = np.flatnonzero(writes), np.flatnonzero(~writes)
        by_start = writers[np.argsort(low[writers], kind="stable")]
        self.queries = [  # (boxes, their ranges' first and end positions among targets, targets)
            (writers, np.searchsorted(low[order], low[writers], "left"),
             np.searchsorted(low[order], high[writers], "right"), order),
            (readers, np.searchsorted(low[by_start], low[readers], "right"),
             np.searchsorted(low[by_start], high[readers], "right"), by_start)]
        self.pairs = sum(int((end - first).sum()) for _, first, end, _ in self.queries)

    def candidates(self):
        """The pairs as index arrays ``(i, j)``, in chunks of about PAIRS_PER_SWEEP_CHUNK."""
        for boxes, first, end, targets in self.queries:
            counts = end - first
            made = np.cumsum(counts)
            start = 0
            while start < len(boxes):
                before = int(made[start - 1]) if start else 0
                stop = max(start + 1, int(np.searchsorted(made, before + PAIRS_PER_SWEEP_CHUNK,
                                                          "right")))
                chunk = counts[start:stop]
                within = np.arange(int(chunk.sum())) - np.repeat(np.cumsum(chunk) - chunk, chunk)
                yield (np.repeat(boxes[start:stop], chunk),
                       targets[np.repeat(first[start:stop], chunk) + within])
                start = stop


def _common_element(first: Box, second: Box) -> int | None:
    """An id both boxes hold, or None: ids listed when both boxes are small, else the larger one
    halved and each half, in turn, compared with the other; the first id found is the answer
    (the same every time, so is the verifier's message)."""
    if first.offset > second.last or second.offset > first.last:
        return None
    if first.size <= LISTED_IDS and second.size <= LISTED_IDS:
        common = np.intersect1d(first.ids(), second.ids(), assume_unique=False)
        return int(common[0]) if len(common) else None
    larger, other = (first, second) if first.size >= second.size else (second, first)
    for half in larger.halves():
        element = _common_element(half, other)
        if element is not None:
            return element
    return None
