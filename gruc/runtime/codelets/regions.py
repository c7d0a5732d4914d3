"""Where a view's elements lie in tile memory: Poplar's ``getSortedContiguousRegions``, for the
vertex choices of the cycle estimators (:mod:`gruc.runtime.codelets.poplibs_estimates`).

poplibs picks a codelet by the *memory* regions of an operand on a tile: one contiguous region
gets a supervisor vertex, several get worker vertices.  Poplar keeps a variable's elements on a
tile as one block, in element order, and so does gruc's memory plan (one block per variable and
tile).  So two elements of a view are neighbours in memory when they are on the same tile, in the
same variable, and no element of that variable on that tile lies between them — consecutive ids,
or ids whose gap holds only other tiles' elements (a column block of a row-mapped matrix is one
region on its tile).  This module finds those regions from the tile table and the view's ids;
a sequence the graph stores as one repeated row (``rows_alike``) is read row by row, never
expanded.
"""

from __future__ import annotations

import functools
import weakref

import numpy as np

from gruc.ir.mapping import distinct
from gruc.ir.tensor import Tensor, Variable, joined_parts
from gruc.ir.layout import Strided
from gruc.ir.tile_table import repeats_its_rows

_MEMO_ENTRIES = 256
_SCANNED_GAP = 1 << 16
"""Gaps of at most this many elements are read directly by :meth:`VariableTiles.tile_between`."""
_CHECKED_BELOW = 1 << 22
"""Rows of fewer tiles than this are compared with a copy at every use (a memo is never stale);
longer ones are trusted while the table's array and the variable's row length are unchanged."""

_MEMO: dict[tuple, "tuple[weakref.ref[Variable], VariableTiles]"] = {}
"""The last :class:`VariableTiles` of each variable (and of each shard of it), by ``id`` and
stretch: a step's thousand dynamic slice vertices read one sequence.  It holds its variables
weakly and forgets a variable's entry when the variable goes: a memo that held them would keep
each one's whole graph alive, and a study planning layer after layer in one process grew by a
graph a plan (378 MB a plan of a 768-wide training GRU on an ipu2)."""


class VariableTiles:
    """The tiles of one variable's elements as the graph stores them — or of one stretch of its
    rows, a sharded sequence's shard, from ``origin`` (its first id; positions count from it): a
    row of ``length`` tiles that repeats (a sequence laid out alike at every step), or every
    element (``length`` = its size); with the row's elements sorted by tile, made when first
    asked."""

    __slots__ = ("row", "length", "repeats", "key", "num_tiles", "origin", "_snapshot",
                 "_counts", "_order", "_starts")

    def __init__(self, tensor: Tensor, key: tuple) -> None:
        graph = tensor.graph
        view = graph.element_tile_view(tensor)
        self.origin = tensor.contiguous_start()
        self.key = key
        self.repeats = bool(view.ndim > 0 and repeats_its_rows(view))
        self.row = (view[0] if self.repeats else view).reshape(-1)
        self.length = max(len(self.row), 1)
        self.num_tiles = graph.target.num_tiles
        self._snapshot: bytes | None = None

    def _sorted(self) -> None:
        """Count and sort the row's elements by tile (again if its tiles changed since).  Tiles
        are small integers: sorted as 16 bits where they fit, which numpy's stable sort does by
        radix (a sharded sequence's 41 million elements in a fraction of a second, not seconds)."""
        if self._snapshot is not None and (len(self.row) >= _CHECKED_BELOW
                                           or self.row.tobytes() == self._snapshot):
            return
        row = np.maximum(self.row, 0)
        self._counts = np.bincount(row, minlength=self.num_tiles)
        keys = row.astype(np.uint16) if self.num_tiles <= 1 << 16 else row
        self._order = np.argsort(keys, kind="stable")
        self._starts = np.cumsum(self._counts) - self._counts
        self._snapshot = self.row.tobytes()

    def tiles_of(self, local: np.ndarray) -> np.ndarray:
        """The tile of each element, by its position ``local`` in the variable."""
        return self.row[local % self.length] if self.repeats else self.row[local]

    def tiles_of_run(self, first: int, count: int) -> np.ndarray:
        """The tiles of the ``count`` elements from position ``first``."""
        if self.repeats:
            start = first % self.length
            if start + count <= self.length:
                return self.row[start:start + count]
            return self.tiles_of(np.arange(first, first + count, dtype=np.int64))
        return self.row[first:first + count]

    def counts(self) -> np.ndarray:
        """How many elements of the row (or of the variable) each tile holds."""
        self._sorted()
        return self._counts

    def tile_between(self, first: int, last: int, tile: int) -> bool:
        """Whether an element strictly between positions ``first < last`` is on ``tile``.  A short
        gap (a row of a sequence, the usual question) is read directly; a long one is answered
        from the row sorted by tile."""
        if last - first <= 1:
            return False
        if last - first - 1 <= _SCANNED_GAP:
            between = np.arange(first + 1, last, dtype=np.int64)
            return bool(np.any(self.tiles_of(between) == tile))
        return bool(self.tiles_between(np.array([first]), np.array([last]), tile)[0])

    def tiles_between(self, firsts: np.ndarray, lasts: np.ndarray, tile: int) -> np.ndarray:
        """:meth:`tile_between` of each pair ``firsts[k] < lasts[k]`` at once, from the row
        sorted by tile (a long gap's answer for :meth:`tile_between` too): a wide layer's slice
        vertex asks it of every gap between its runs (half a million questions a training layer
        at H = 2,759, one at a time most of a second each thousand)."""
        gap = lasts - firsts > 1
        if not gap.any():
            return gap
        self._sorted()
        begin = self._starts[tile]
        at = self._order[begin:begin + self._counts[tile]]  # the tile's positions, ascending
        if not len(at):
            return np.zeros(len(gap), dtype=bool)
        if not self.repeats:
            return gap & (np.searchsorted(at, lasts) > np.searchsorted(at, firsts, side="right"))
        low, high = (firsts + 1) % self.length, (lasts - 1) % self.length
        straight = np.searchsorted(at, high, side="right") > np.searchsorted(at, low)
        wrapped = (at[-1] >= low) | (at[0] <= high)
        return gap & ((lasts - firsts - 1 >= self.length) | np.where(low <= high, straight,
                                                                     wrapped))

    def ranks(self, local: np.ndarray, tiles: np.ndarray) -> np.ndarray:
        """Each element's place in its tile's block of the variable (elements in id order)."""
        self._sorted()
        in_row = np.empty(len(self.row), dtype=np.int64)
        in_row[self._order] = np.arange(len(self.row)) \
            - self._starts[np.maximum(self.row[self._order], 0)]
        if not self.repeats:
            return in_row[local]
        rows, column = np.divmod(local, self.length)
        return rows * self._counts[tiles] + in_row[column]


def variable_tiles(variable: Variable, within: Tensor | None = None) -> VariableTiles:
    """The :class:`VariableTiles` of ``variable`` — of the one stretch of its rows alike that
    holds every element of ``within`` (a view of it), if it has several (a sharded sequence,
    whose shard's rows are read as one repeated row, not copied out) — kept while its graph's
    table keeps its array and the variable its stretches of rows alike."""
    table = variable.graph._table  # noqa: SLF001 (read only: which array, which stretches)
    stretches = table.regions(variable.first_id, variable.num_elements)
    stretch = _stretch_holding(table, variable, within) if len(stretches) > 1 \
        and within is not None and within.num_elements else None
    if stretch is not None:
        first, count, row = stretch
        begin = (first - variable.first_id) // row
        rows = variable[begin:begin + count // row]
        return _memoised(variable, first, (id(table.array), count, row, table.array[
            first:first + row].tobytes()), lambda key: VariableTiles(rows, key))
    # stretches of rows alike are copied out row by row: their rows' tiles are the key too
    key = (id(table.array), tuple(stretches), b"".join(
        table.array[first:first + row].tobytes() for first, _, row in stretches)
        if len(stretches) > 1 else b"")
    return _memoised(variable, None, key, lambda key: VariableTiles(variable, key))


def _stretch_holding(table, variable: Variable, within: Tensor) -> tuple[int, int, int] | None:
    """The one stretch of ``variable``'s rows alike ``(first id, ids, row length)`` holding
    every element of ``within``, found part by part of a concatenation (a training layer's
    saved intermediates are written through two column slices of one shard's rows: their
    join's ids are no strided run, but each part's are), or None."""
    span = [(variable.first_id, variable.num_elements)]
    found = None
    for part in joined_parts(within):
        layout = part.layout()
        if not part.num_elements or not isinstance(layout, Strided):
            return None
        stretch = table.region_of_view(layout, part.shape, span)
        if stretch is None or found not in (None, stretch):
            return None
        found = stretch
    return found


def _memoised(variable: Variable, stretch: int | None, key: tuple, make) -> VariableTiles:
    """The memo's entry of ``variable`` (of its stretch from id ``stretch``, or all of it) if
    made under ``key``, else ``make(key)``, remembered."""
    slot = (id(variable), stretch)
    entry = _MEMO.get(slot)
    if entry is not None and entry[0]() is variable and entry[1].key == key:
        return entry[1]
    if len(_MEMO) >= _MEMO_ENTRIES:
        _MEMO.pop(next(iter(_MEMO)))
    found = make(key)
    _MEMO[slot] = (weakref.ref(variable, functools.partial(_forget, slot)), found)
    return found


def _forget(slot: tuple, _gone: "weakref.ref[Variable]") -> None:
    """A memo entry's variable has gone: drop the entry (its tiles view the graph's table)."""
    entry = _MEMO.get(slot)
    if entry is not None and entry[0] is _gone:
        del _MEMO[slot]


def whole_variable(tensor: Tensor) -> bool:
    """Whether ``tensor`` is all of one variable, in order (its tiles' blocks, whole)."""
    variables = tensor.variables()
    return (len(variables) == 1 and tensor.contiguous_start() == variables[0].first_id
            and tensor.num_elements == variables[0].num_elements)


def _whole_variables_regions(parts: list[Tensor]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`tile_regions` of a view joining whole variables (``parts``, in id order), each
    once: a region per tile and variable (a weight update's gradients, joined, are tens of
    millions of elements a wide layer: not listed)."""
    num_tiles = parts[0].graph.target.num_tiles
    elements = np.stack([np.bincount(part.graph.element_tiles(part), minlength=num_tiles)
                         for part in parts], axis=1)  # [tile, part]: in tile, then id, order
    tiles, _ = np.nonzero(elements)
    return tiles.astype(np.int64), elements[elements > 0].astype(np.int64)


def tile_regions(tensor: Tensor, elements: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``(tile, size)`` of every contiguous memory region of ``tensor``, by tile, then address.

    A whole variable is one region on each tile that holds some of it (``elements``, when given,
    are its elements per tile), and so is each of several whole variables joined.  Any other
    view is walked element by element: its elements' blocks and places in them
    (:meth:`VariableTiles.ranks`), sorted, cut where the place does not step by one."""
    if whole_variable(tensor):
        if elements is None:
            elements = np.bincount(tensor.graph.element_tiles(tensor),
                                   minlength=tensor.graph.target.num_tiles)
        tiles = np.flatnonzero(elements)
        return tiles.astype(np.int64), np.asarray(elements, dtype=np.int64)[tiles]
    parts = list(joined_parts(tensor))
    if len(parts) > 1 and all(whole_variable(part) for part in parts) \
            and len({part.variables()[0].index for part in parts}) == len(parts):
        return _whole_variables_regions(sorted(parts,
                                               key=lambda part: part.variables()[0].first_id))
    ids = distinct(tensor.flat_ids())
    if not len(ids):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    variables = sorted(tensor.variables(), key=lambda v: v.first_id)
    span = max(v.num_elements for v in variables) + 1
    keys = np.empty(len(ids), dtype=np.int64)
    tile_of = np.empty(len(ids), dtype=np.int64)
    for index, variable in enumerate(variables):
        lo, hi = np.searchsorted(ids, [variable.first_id,
                                       variable.first_id + variable.num_elements])
        if lo == hi:
            continue
        layout = variable_tiles(variable, tensor if len(variables) == 1 else None)
        local = ids[lo:hi] - layout.origin
        tiles = layout.tiles_of(local).astype(np.int64)
        tile_of[lo:hi] = tiles
        keys[lo:hi] = (tiles * len(variables) + index) * span + layout.ranks(local, tiles)
    order = np.argsort(keys, kind="stable")
    keys, tile_of = keys[order], tile_of[order]
    starts = np.flatnonzero(np.concatenate(([True], np.diff(keys) != 1)))
    sizes = np.diff(np.append(starts, len(keys)))
    return tile_of[starts], sizes.astype(np.int64)
