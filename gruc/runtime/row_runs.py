"""Row runs of column views, cut from their parent's: a slice group's bases without a walk each.

A long sequence's per-tile slice vertices each read a few columns of one ``[steps, columns]``
view of the sequence (a thousand vertices per group in a 64x256x256 GRU layer).  Walking each
one's first two rows through the memory plan costs ~40 µs of Python per vertex; the parent's
rows, walked once, already say everything: a column range's runs are the parent's runs clipped
to it, moving a row as the parent's do.  :meth:`gruc.runtime.addresses.PlanAddresses.row_index_runs`
uses these for views that are column slices of a 2-D view, runs of its columns a row apart
(:func:`~gruc.ir.tensor.strided_columns`) or concatenations of them along the columns; anything
else it walks as before.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from gruc.ir.layout import ConcatOp, SliceOp
from gruc.ir.tensor import Tensor, strided_columns_of

RowRuns = tuple[np.ndarray, np.ndarray, np.ndarray]
"""A first row's runs (flat positions from 0, first indices) and how far each moves a row."""


def run_ends(parent: RowRuns, row_length: int) -> np.ndarray:
    """Where each of a first row's runs ends (exclusive), for :func:`cut_columns`."""
    ends = np.empty_like(parent[0])
    ends[:-1] = parent[0][1:]
    ends[-1:] = row_length
    return ends


def cut_columns(parent: RowRuns, ends: np.ndarray, begin: int, end: int) -> RowRuns:
    """The row runs of columns ``[begin, end)`` of a view whose row runs are ``parent`` (ending
    at ``ends``, :func:`run_ends`): the parent's runs that reach into the range, clipped to it.
    They stay maximal: two of the parent's runs side by side do not continue each other."""
    positions, firsts, moves = parent
    lo = int(np.searchsorted(ends, begin, side="right"))  # the first run ending after begin
    hi = max(lo, int(np.searchsorted(positions, end, side="left"))) if end > begin else lo
    starts = positions[lo:hi].copy()
    firsts = firsts[lo:hi].copy()
    if hi > lo and starts[0] < begin:  # the first run began before the range
        firsts[0] += begin - starts[0]
        starts[0] = begin
    return starts - begin, firsts, moves[lo:hi].copy()


def join_columns(parts: list[RowRuns], widths: list[int]) -> RowRuns | None:
    """The row runs of views of ``widths`` columns joined along the columns, from each one's.
    Runs that continue each other across a join become one if they move alike; if they do not,
    the joined rows are not the first moved run by run (None), as a walk would find."""
    offsets = np.cumsum([0, *widths[:-1]], dtype=np.int64)
    positions = np.concatenate([part[0] + offset for part, offset in zip(parts, offsets)])
    firsts = np.concatenate([part[1] for part in parts])
    moves = np.concatenate([part[2] for part in parts])
    if len(positions) < 2:
        return positions, firsts, moves
    continues = firsts[1:] - firsts[:-1] == positions[1:] - positions[:-1]
    if np.any(continues & (moves[1:] != moves[:-1])):
        return None
    begins = np.concatenate(([True], ~continues))
    return positions[begins], firsts[begins], moves[begins]


class ColumnRowRuns:
    """Row runs of views, cut from their parents' where they are column slices: ``row_runs``
    finds any view's (cut or walked, the plan's ``row_index_runs``), ``walk`` walks a view's
    first two rows.  Each parent is walked once, and kept alive with its runs so that its id is
    never taken for another tensor's."""

    def __init__(self, row_runs: Callable[[Tensor], RowRuns | None],
                 walk: Callable[[Tensor], RowRuns | None]) -> None:
        self._row_runs = row_runs
        self._walk = walk
        self._parents: dict[int, tuple[Tensor, RowRuns | None, np.ndarray | None]] = {}

    def find(self, tensor: Tensor) -> RowRuns | None:
        """The row runs of ``tensor`` (of two rows or more): cut where it is a column slice of
        a 2-D view or a concatenation along the columns, walked where that does not say."""
        cut = self._cut(tensor)
        return self._walk(tensor) if cut is None else cut

    def _cut(self, tensor: Tensor) -> RowRuns | None:
        """The row runs of a 2-D view cut from what it is made of: a column slice (all rows) from
        its parent's runs (walked once, then cached), a concatenation along the columns from its
        parts'.  None where neither applies or a part has none, and the caller walks the view."""
        if tensor.rank != 2:
            return None
        op = tensor.op
        if isinstance(op, ConcatOp) and op.dim == 1:
            parts = [self._row_runs(part) for part in tensor.sources]
            if any(part is None for part in parts):
                return None
            return join_columns(parts, [part.shape[1] for part in tensor.sources])
        spaced = strided_columns_of(tensor)
        if spaced is not None:  # runs a row apart: each cut from the view's, then joined
            view, begin, length, stride, count = spaced
            found, ends = self._parent(view)
            if found is None:
                return None
            return join_columns([cut_columns(found, ends, begin + k * stride,
                                             begin + k * stride + length) for k in range(count)],
                                [length] * count)
        if not isinstance(op, SliceOp) or op.begin[0] != 0 or op.end[0] != tensor.shape[0] \
                or tensor.sources[0].rank != 2:
            return None
        found, ends = self._parent(tensor.sources[0])
        return None if found is None else cut_columns(found, ends, op.begin[1], op.end[1])

    def _parent(self, parent: Tensor) -> tuple[RowRuns | None, np.ndarray | None]:
        """A 2-D view's row runs and where each ends, walked once and then kept."""
        if self._parents.get(id(parent), (None,))[0] is not parent:
            found = self._walk(parent)
            ends = None if found is None else run_ends(found, parent.shape[1])
            self._parents[id(parent)] = (parent, found, ends)
        _, found, ends = self._parents[id(parent)]
        return found, ends
