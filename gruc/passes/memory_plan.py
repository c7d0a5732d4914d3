"""The memory plan a ``plan-memory`` pass makes, and its queries: blocks, per-tile figures, and the
address of any view's elements.

The layout rule and the allocation are described in :mod:`gruc.passes.plan_memory`; this module
is what the rest of the compiler reads (lowering asks for addresses, indices and runs; the
report for per-tile figures).  Addresses come from the plan's runs by the compiled walks of
:mod:`gruc.passes.addresses`, never from a per-element table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache, partial

import numpy as np

from gruc.errors import GrucValueError
from gruc.ir.layout import ConcatOp, Strided
from gruc.ir.tensor import Tensor
from gruc.passes.addresses import fill_addresses, row_moves
from gruc.passes.liveness import Liveness
from gruc.passes.row_runs import ColumnRowRuns, RowRuns
from gruc.text import plural

__all__ = ["MemoryPlan", "TileOverflow"]

_NO_IDS = np.zeros(0, np.int64)


@lru_cache(maxsize=4096)
def _int64s(values: tuple[int, ...]) -> np.ndarray:
    """``values`` as an int64 array, made once per tuple: a lowering fills the addresses of tens
    of thousands of views of a few shapes, strides and placements.  Shared, so never written
    (left writeable: a read-only array is another type to numba, another compiled kernel)."""
    return np.array(values, dtype=np.int64)


@dataclass(frozen=True)
class TileOverflow:
    """A tile whose planned memory exceeds its capacity."""

    tile: int
    bytes: int
    """Highest allocated address on the tile (total including gaps)."""
    capacity: int
    largest: tuple[tuple[str, int], ...]
    """The largest variables on the tile: ``(name, bytes on this tile)``, largest first."""

    def __str__(self) -> str:
        shown = ", ".join(f"{name} ({nbytes} B)" for name, nbytes in self.largest)
        return (f"tile {self.tile} needs {self.bytes} bytes but has {self.capacity} "
                f"(largest tensors there: {shown})")


@dataclass(frozen=True, eq=False)
class MemoryPlan:
    """Where every allocated variable lives: one block per (variable, tile), and per-tile totals.

    Block arrays are parallel, sorted by (variable, tile).  Per-tile arrays have one entry per
    tile of the target.  All arrays are read-only.
    """

    liveness: Liveness
    num_tiles: int
    capacity: int
    """Bytes per tile (``target.bytes_per_tile``)."""
    alignment: int
    block_variable: np.ndarray
    block_tile: np.ndarray
    block_offset: np.ndarray
    block_nbytes: np.ndarray
    """Exact bytes of each block (``count * dtype.size``)."""
    block_size: np.ndarray
    """Bytes each block is accounted at (``block_nbytes`` rounded up to ``alignment``)."""
    always_live_bytes: np.ndarray
    not_always_live_bytes: np.ndarray
    """Per tile: peak over steps of the bytes of the not-always-live blocks live at the step."""
    total_bytes: np.ndarray
    """Per tile: the highest address its tensor data reaches, gaps included (the interleaved
    region, if the tile has data there, starts at ``target.interleaved_memory_start``)."""
    tiles_over_capacity: tuple[TileOverflow, ...]
    """Tiles whose tensor data alone exceeds their memory (the runtime's memory model adds the
    rest Poplar puts on a tile: :mod:`gruc.runtime.footprint`)."""
    allocated: frozenset[int]
    """Indices of the variables that received blocks."""
    num_signatures: int
    """Distinct tile signatures actually planned (the rest reused a plan)."""
    block_interleaved: np.ndarray
    """Whether each block lies in the interleaved region."""
    region_ends: np.ndarray
    """``[2, tiles]``: the highest offset tensor data reaches in each region, from its start."""
    interleaved_base: int
    """Host offset of a tile's interleaved region (region 0's largest extent, aligned)."""
    tile_signature: np.ndarray
    """Per tile: the number of its planned signature (-1: no tensor data)."""
    signature_not_always_live_by_step: np.ndarray
    """``[signatures, steps]``: not-always-live bytes a signature's tiles occupy at each step."""
    _graph: object = field(repr=False)
    _runs: np.ndarray = field(repr=False)
    """Runs of consecutive elements of a variable on one tile, sorted by global id (variables own
    increasing id ranges), one row each: first id, length, tile, byte offset on the tile, element
    size, and the bytes a row of the variable adds on that tile (a row is one cache line's read
    when a walk looks a run up).  Every address query walks these (:meth:`element_addresses`):
    a per-element table of the whole module would hold hundreds of millions of addresses for a
    long sequence.  A variable whose rows are laid out alike has runs for its first row only."""
    _segments: np.ndarray = field(repr=False)
    """One row per allocated variable, by first id: first id, period (elements of a row whose
    runs ``_runs`` holds, all of them if its rows are not laid out alike), rows."""

    # ---- queries --------------------------------------------------------------------------------
    @property
    def fits(self) -> bool:
        return not self.tiles_over_capacity

    @property
    def max_total_bytes(self) -> int:
        return int(self.total_bytes.max()) if self.num_tiles else 0

    @property
    def host_extent(self) -> int:
        """Bytes of a tile's host buffer: region 0, then region 1 from ``interleaved_base``."""
        return self.interleaved_base + int(self.region_ends[1].max(initial=0))

    def not_always_live_by_step(self, tile: int) -> np.ndarray:
        """Not-always-live tensor bytes ``tile`` occupies at each step."""
        signature = int(self.tile_signature[tile])
        if signature < 0:
            return np.zeros(self.liveness.num_steps, dtype=np.int64)
        return self.signature_not_always_live_by_step[signature]

    def _block_index(self, variable: int) -> tuple[int, int]:
        lo = int(np.searchsorted(self.block_variable, variable, side="left"))
        hi = int(np.searchsorted(self.block_variable, variable, side="right"))
        return lo, hi

    def blocks(self, variable: int) -> list[tuple[int, int, int]]:
        """``(tile, offset, nbytes)`` of each block of ``variable`` (an index), by tile."""
        lo, hi = self._block_index(variable)
        return list(zip(self.block_tile[lo:hi].tolist(), self.block_offset[lo:hi].tolist(),
                        self.block_nbytes[lo:hi].tolist()))

    def offset(self, variable: int, tile: int) -> int:
        """Byte offset on ``tile`` of ``variable``'s block there."""
        lo, hi = self._block_index(variable)
        at = lo + int(np.searchsorted(self.block_tile[lo:hi], tile))
        if at >= hi or self.block_tile[at] != tile:
            name = self._graph.variables[variable].name
            raise GrucValueError(f"variable {name!r} has no elements on tile {tile}")
        return int(self.block_offset[at])

    def tile_blocks(self, tile: int) -> list[tuple[str, int, int, bool]]:
        """``(variable name, offset, nbytes, always_live)`` of every block on ``tile``, by offset."""
        keep = np.flatnonzero(self.block_tile == tile)
        keep = keep[np.lexsort((self.block_variable[keep], self.block_offset[keep]))]
        always = self.liveness.always_live
        return [(self._graph.variables[v].name, off, nb, v in always) for v, off, nb in
                zip(self.block_variable[keep].tolist(), self.block_offset[keep].tolist(),
                    self.block_nbytes[keep].tolist())]

    def id_addresses(self, ids: np.ndarray, tile_stride: int | None = None) -> np.ndarray:
        """Byte address of each global element id in ``ids`` (int64); see :meth:`element_addresses`."""
        ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
        result = np.empty(len(ids), dtype=np.int64)
        self._fill(ids, 0, (len(ids),), (0,), tile_stride, 1, result, 0, (1,), _NO_IDS)
        return result

    def element_addresses(self, tensor: Tensor, tile_stride: int | None = None) -> np.ndarray:
        """Byte address of each element of ``tensor``'s flattened view, as int64:
        ``tile * tile_stride + offset + rank * dtype.size`` (``tile_stride`` defaults to the
        target's ``bytes_per_tile``; lowering passes its packed stride)."""
        return self._tensor_into(tensor, tile_stride, 1, None)

    def element_indices(self, tensor: Tensor, tile_stride: int) -> np.ndarray:
        """:meth:`element_addresses` divided by the element size: the typed index of each element
        in a memory laid out tile after tile, ``tile_stride`` bytes apart (what lowering needs)."""
        return self._tensor_into(tensor, tile_stride, tensor.dtype.size, None)

    def index_runs(self, tensor: Tensor, tile_stride: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`element_indices` as its runs of consecutive indices: the flat position where
        each run begins (ascending, from 0) and its first index — as many numbers as the tensor
        has runs, not elements (a slice group's bases are a long sequence's columns: a run or two
        per row)."""
        return self._index_runs(tensor, tile_stride, None)

    def row_index_runs(self, tensor: Tensor, tile_stride: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """:meth:`index_runs` of ``tensor``'s first row (index 0 of its first dim) and how far
        each run's indices move a row, when every row is the first moved run by run — a view
        stepping through a sequence laid out alike at every step (its ids a whole number of
        periods apart in one such variable, part by part for a concatenation along a later dim).
        Row ``r`` of run ``k`` then starts at ``firsts[k] + r * moves[k]``.  None otherwise, or
        for fewer than two rows: a caller wanting a long sequence's slices without listing every
        row's runs falls back to :meth:`index_runs`.  A 2-D view's column slices (and their
        concatenations along the columns) are cut from the view's runs, found once
        (:mod:`gruc.passes.row_runs`)."""
        if tensor.rank < 2 or tensor.shape[0] < 2:
            return None
        if tile_stride not in self._column_row_runs:
            self._column_row_runs[tile_stride] = ColumnRowRuns(
                partial(self.row_index_runs, tile_stride=tile_stride),
                partial(self._walked_row_runs, tile_stride=tile_stride))
        return self._column_row_runs[tile_stride].find(tensor)

    @cached_property
    def _column_row_runs(self) -> dict[int, ColumnRowRuns]:
        """Per tile stride, the row runs of the views whose column slices were asked for."""
        return {}

    def _walked_row_runs(self, tensor: Tensor, tile_stride: int) -> RowRuns | None:
        """:meth:`row_index_runs` found by walking ``tensor``'s first two rows."""
        if not self._rows_step_by_periods(tensor):
            return None
        positions, firsts = self._index_runs(tensor, tile_stride, 2)  # the first two rows
        moves = row_moves(positions, firsts, tensor.num_elements // tensor.shape[0])
        if moves is None:  # the rows' runs are cut differently: no fixed move
            return None
        return positions[:len(moves)], firsts[:len(moves)], moves

    def _rows_step_by_periods(self, tensor: Tensor) -> bool:
        """Whether each element's id moves a whole number of its variable's periods a row, within
        one variable whose rows are laid out alike (so its address moves by a fixed amount)."""
        if isinstance(tensor.op, ConcatOp) and tensor.op.dim != 0:
            return all(self._rows_step_by_periods(part) for part in tensor.sources)
        layout, variables = tensor.layout(), tensor.variables()
        if not isinstance(layout, Strided) or len(variables) != 1 or not tensor.num_elements:
            return False
        period = self._period_of.get(variables[0].first_id)
        return period is not None and layout.strides[0] % period == 0

    @cached_property
    def _period_of(self) -> dict[int, int]:
        """The period of each variable whose rows are laid out alike, by its first id."""
        return {first: period for first, period, rows in self._segments.tolist() if rows > 1}

    def _index_runs(self, tensor: Tensor, tile_stride: int, rows: int | None
                    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`index_runs` of ``tensor``, or of its first ``rows`` rows (see :meth:`_place`)."""
        capacity = (tensor.num_elements if rows is None
                    else tensor.num_elements // tensor.shape[0] * rows) + 1
        positions, firsts = np.empty(capacity, np.int64), np.empty(capacity, np.int64)
        count = self._tensor_into(tensor, tile_stride, tensor.dtype.size, firsts, positions, rows)
        positions, firsts = positions[:count], firsts[:count]
        if count > 1:  # the parts of a concatenation are walked one by one
            if np.any(positions[1:] < positions[:-1]):  # along an inner dim: interleaved
                order = np.argsort(positions, kind="stable")
                positions, firsts = positions[order], firsts[order]
            begins = np.ones(count, dtype=bool)  # a part's run may continue the last part's
            begins[1:] = firsts[1:] - firsts[:-1] != positions[1:] - positions[:-1]
            positions, firsts = positions[begins], firsts[begins]
        return positions.copy(), firsts.copy()

    def _tensor_into(self, tensor: Tensor, tile_stride: int | None, unit: int,
                     out: np.ndarray | None, run_places: np.ndarray = _NO_IDS,
                     rows: int | None = None) -> np.ndarray | int:
        """``out`` (made if None) filled with the addresses of ``tensor`` (or of its first
        ``rows`` rows), or, with ``run_places``, with where its runs begin: then the number of
        runs is returned."""
        shape = (tensor.shape if rows is None else (rows, *tensor.shape[1:])) or (1,)
        if out is None:
            out = np.empty(tensor.num_elements, dtype=np.int64)
        places = [1]  # row-major element strides of ``out``
        for size in shape[:0:-1]:
            places.insert(0, places[0] * size)
        runs = self._place(tensor, shape, tile_stride, unit, out, 0, tuple(places), run_places, 0,
                           rows)
        return runs if len(run_places) else out

    def _place(self, tensor: Tensor, shape: tuple[int, ...], tile_stride: int | None, unit: int,
               out: np.ndarray, at: int, places: tuple[int, ...], run_places: np.ndarray,
               written: int, rows: int | None) -> int:
        """Write the addresses of ``tensor`` (viewed as ``shape``) into ``out`` from ``at``, its
        elements ``places`` apart per dim; or, with ``run_places``, where its runs begin, after
        the ``written`` runs there: returns how many runs are there then.  With ``rows``, only
        its first ``rows`` rows (index < ``rows`` of its first dim, no view of them made), for a
        tensor of strided parts concatenated along later dims (:meth:`_rows_step_by_periods`)."""
        if isinstance(tensor.op, ConcatOp):  # part by part, each straight into its place: the
            # parts are mostly strided, and a long sequence's per-tile column picks would
            # otherwise list every id of the sequence
            dim = tensor.op.dim
            for part in tensor.sources:
                part_shape = part.shape if rows is None else (rows, *part.shape[1:])
                written = self._place(part, part_shape, tile_stride, unit, out, at, places,
                                      run_places, written, rows)
                at += part_shape[dim] * places[dim]
            return written
        layout = tensor.layout()
        if isinstance(layout, Strided):  # walked in the kernel: no id array is materialised
            ids, offset, strides = _NO_IDS, layout.offset, layout.strides or (0,)
        else:
            ids, offset, strides = np.ascontiguousarray(layout, dtype=np.int64).reshape(-1), 0, \
                (0,) * len(shape)
        if len(run_places):
            return written + self._fill(ids, offset, shape, strides, tile_stride, unit,
                                        out[written:], at, places, run_places[written:])
        self._fill(ids, offset, shape, strides, tile_stride, unit, out, at, places, _NO_IDS)
        return 0

    def _fill(self, ids: np.ndarray, offset: int, shape: tuple[int, ...],
              strides: tuple[int, ...], tile_stride: int | None, unit: int, out: np.ndarray,
              at: int, places: tuple[int, ...], run_places: np.ndarray) -> int:
        """Addresses (divided by ``unit``) of the elements named by ``ids`` or, if that is empty,
        by the strided view ``(offset, shape, strides)``, placed as :meth:`_place` says: one
        compiled pass over the runs.  Returns how many runs it wrote (with ``run_places``)."""
        stride = self.capacity if tile_stride is None else int(tile_stride)
        bad, runs = fill_addresses(ids, offset, _int64s(tuple(shape)), _int64s(tuple(strides)),
                                   self._runs, self._segments, stride, unit, out, at,
                                   _int64s(tuple(places)), run_places)
        if bad >= 0:
            bad_id = int(ids[bad]) if len(ids) else \
                offset + int(np.dot(np.unravel_index(bad, shape), strides))
            variable = self._graph.variables[int(self._graph.variable_of_id(np.array([bad_id]))[0])]
            raise GrucValueError(f"variable {variable.name!r} has no memory in this plan (it is "
                                 "not used by the module and not fully mapped)")
        return runs

    def summary(self) -> str:
        """A few lines: bytes per category and tiles that do not fit."""
        used = self.total_bytes > 0
        lines = [f"memory plan: {int(used.sum())} of {self.num_tiles} tiles used, "
                 f"{len(self.allocated)} variables, {len(self.block_variable)} blocks, "
                 f"{self.num_signatures} distinct tile layouts",
                 f"  always-live bytes     total {int(self.always_live_bytes.sum())}, "
                 f"max/tile {int(self.always_live_bytes.max(initial=0))}",
                 f"  not-always-live peak  total {int(self.not_always_live_bytes.sum())}, "
                 f"max/tile {int(self.not_always_live_bytes.max(initial=0))}",
                 f"  total incl. gaps      max/tile {self.max_total_bytes} of {self.capacity}"]
        if self.tiles_over_capacity:
            lines.append(f"  {plural(len(self.tiles_over_capacity), 'tile')} over capacity, e.g. "
                         f"{self.tiles_over_capacity[0]}")
        return "\n".join(lines)
