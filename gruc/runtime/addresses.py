"""Addresses of a memory plan's elements: what lowering asks a plan, answered by compiled walks.

A plan stores, per run of consecutive elements of a variable on one tile, where the run starts
(:class:`~gruc.memory.plan.MemoryPlan`); a per-element table of the whole module would hold
hundreds of millions of addresses for a long sequence.  A variable whose element tiles repeat
row after row (a sequence laid out alike at every step) stores the runs of its first row only,
each with the bytes one row adds on its tile — so a sequence of 2,000 steps keeps as many runs as
one of 2.  :class:`PlanAddresses` answers lowering's queries (a view's addresses, its typed
indices, their runs, how a long sequence's rows move) with :func:`fill_addresses`, which walks
the runs — for an id array, or for a strided view without materialising its ids.  The walks are
numba kernels, which is why they live in the runtime and not beside the plan.
"""

from __future__ import annotations

from functools import lru_cache, partial

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from gruc.errors import GrucValueError
from gruc.ir.layout import ConcatOp, Strided, id_extent
from gruc.ir.tensor import Tensor
from gruc.memory.plan import MemoryPlan
from gruc.runtime.row_runs import ColumnRowRuns, RowRuns

__all__ = ["PlanAddresses", "fill_addresses", "row_moves"]

_NO_IDS = np.zeros(0, np.int64)


@lru_cache(maxsize=4096)
def _int64s(values: tuple[int, ...]) -> np.ndarray:
    """``values`` as an int64 array, made once per tuple: a lowering fills the addresses of tens
    of thousands of views of a few shapes, strides and placements.  Shared, so never written
    (left writeable: a read-only array is another type to numba, another compiled kernel)."""
    return np.array(values, dtype=np.int64)


@intrinsic
def prefetch(typingctx, array, row):
    """Start loading row ``row`` of a 2-D C-contiguous int64 ``array`` into the cache, without
    waiting for it (LLVM's ``prefetch``: no effect on what the program computes, no fault on any
    address).  For walks whose next lookup is predictable but whose data is far from the last."""
    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0])
        width = builder.extract_value(data.shape, 1)
        address = builder.gep(data.data, [builder.mul(args[1], width)])
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        function = builder.module.declare_intrinsic(
            "llvm.prefetch", fnty=ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]))
        builder.call(function, [builder.bitcast(address, byte_pointer), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(array, row), codegen


@njit(cache=True, nogil=True)
def find_run(i, run, jump, runs):  # pragma: no cover (compiled)
    """The run holding global id ``i``, or -1.  Views walk their variables in a few regular
    strides, so before a binary search it tries the current run, the run as far from it as the
    last jump went (a strided view's next row on the same tile) and the next one."""
    count = runs.shape[0]
    for guess in (run, run + jump, run + 1):
        if 0 <= guess < count and runs[guess, 0] <= i < runs[guess, 0] + runs[guess, 1]:
            return guess
    last = last_starting_by(i, runs)  # then the last run starting at or before ``i``
    if last < 0 or i >= runs[last, 0] + runs[last, 1]:
        return -1
    return last


@njit(cache=True, nogil=True)
def last_starting_by(i, table):  # pragma: no cover (compiled)
    """The last row of ``table`` (sorted by its first column) whose first column is at most
    ``i``, or -1: a binary search."""
    low, high = 0, table.shape[0]
    while low < high:
        middle = (low + high) // 2
        if table[middle, 0] <= i:
            low = middle + 1
        else:
            high = middle
    return low - 1


@njit(cache=True, nogil=True)
def find_segment(i, segment, segments):  # pragma: no cover (compiled)
    """The segment (a variable: first id, period, repeats) holding global id ``i``, or -1;
    ``segment`` is tried first."""
    count = segments.shape[0]
    if 0 <= segment < count and segments[segment, 0] <= i < \
            segments[segment, 0] + segments[segment, 1] * segments[segment, 2]:
        return segment
    last = last_starting_by(i, segments)
    if last < 0 or i >= segments[last, 0] + segments[last, 1] * segments[last, 2]:
        return -1
    return last


def row_moves(positions: np.ndarray, firsts: np.ndarray, row: int) -> np.ndarray | None:
    """How far each run of a view's first row moves into its second, given the runs of the two
    rows (flat positions from 0, first indices; a run may go on from one row into the next), or
    None if the second row's runs do not begin where the first row's do."""
    moves = np.empty(len(positions), np.int64)
    count = _row_moves(positions, firsts, row, moves)
    return None if count < 0 else moves[:count]


@njit(cache=True, nogil=True)
def _row_moves(positions, firsts, row, moves):  # pragma: no cover (compiled)
    """:func:`row_moves` into ``moves``: how many runs the first row has, or -1."""
    count = positions.shape[0]
    second = 0  # the first run beginning in row 1
    while second < count and positions[second] < row:
        second += 1
    carried = second == count or positions[second] != row  # a run goes on into row 1
    if count - second + carried != second:
        return -1
    for k in range(second):  # the k-th run of row 1
        if carried and k == 0:
            at, first = row, firsts[second - 1] + row - positions[second - 1]
        else:
            at, first = positions[second + k - carried], firsts[second + k - carried]
        if at - row != positions[k]:
            return -1
        moves[k] = first - firsts[k]
    return second


@njit(cache=True, nogil=True)
def fill_addresses(ids, offset, shape, strides, runs, segments, stride, unit, result, at,
                   result_strides, run_places):  # pragma: no cover (compiled)
    """Byte address // ``unit`` of every element of a view of ``shape``, in row-major order: the
    element's id is the next of ``ids`` if ``ids`` is not empty, else that of the strided view
    ``offset + sum(index_d * strides[d])`` (walked with an odometer, so no id array is
    materialised).  Element ``index`` goes to ``result[at + sum(index_d * result_strides[d])]``,
    so a concatenation's parts are written straight into their places in its result.

    With ``run_places`` not empty, only where runs of consecutive addresses begin is written:
    ``run_places[n]`` the place of the ``n``-th run's first element and ``result[n]`` its address
    (both arrays from their start, in walking order; a run continues the one before when both its
    place and its address do).  Returns the row-major position of the first id in no run (an
    unallocated variable) or -1, and how many runs were written.

    ``segments`` holds one row per allocated variable — first id, period (elements a row),
    rows — and ``runs`` the runs of each variable's first row, sorted by first id: an element
    ``turn`` rows on from a run's is ``turn * runs[run, 5]`` bytes further on the run's tile.

    Addresses of a run are ``start + j * step`` with ``start`` divided once per run: every
    ``unit`` used divides the element size and the tile stride, and blocks are aligned to it.  A
    strided view whose rows are consecutive ids, written to consecutive places, is filled a run
    at a time: a loop the compiler vectorises, not a run lookup per element."""
    rank = shape.shape[0]
    inner = shape[rank - 1]
    total = 1
    for d in range(rank):
        total *= shape[d]
    walk = ids.shape[0] == 0
    only_runs = run_places.shape[0] > 0
    chunked = walk and strides[rank - 1] == 1 and result_strides[rank - 1] == 1
    counter = np.zeros(rank, dtype=np.int64)
    row_id, row_at = offset, at
    run = jump = segment = -1
    run_first = run_end = start = step = 0
    runs_written = 0
    next_place = next_address = -1  # where the last run written would continue
    k = 0
    while k < total:
        c = 0
        while c < inner:
            i = row_id + c * strides[rank - 1] if walk else ids[k]
            if not run_first <= i < run_end:
                segment = find_segment(i, segment, segments)
                if segment < 0:
                    return k, runs_written
                turn = (i - segments[segment, 0]) // segments[segment, 1]
                shift = turn * segments[segment, 1]
                found = find_run(i - shift, run, jump, runs)
                if run >= 0 and found != run + 1:
                    jump = found - run
                run = found
                ahead = run + 4 * jump  # four rows on, where a strided walk goes
                if jump > 1 and ahead < runs.shape[0]:
                    prefetch(runs, ahead)
                run_first = runs[run, 0] + shift
                run_end = run_first + runs[run, 1]
                step = runs[run, 4] // unit
                start = (runs[run, 2] * stride + runs[run, 3] + turn * runs[run, 5]) // unit \
                    - run_first * step
            place = row_at + c * result_strides[rank - 1]
            count = min(inner - c, run_end - i) if chunked else 1
            first = start + i * step
            if only_runs:
                if place != next_place or first != next_address:
                    run_places[runs_written] = place
                    result[runs_written] = first
                    runs_written += 1
                next_place, next_address = place + count, first + count * step
            elif chunked:
                for j in range(count):
                    result[place + j] = first + j * step
            else:
                result[place] = first
            c += count
            k += count
        d = rank - 2
        while d >= 0:
            counter[d] += 1
            row_id += strides[d]
            row_at += result_strides[d]
            if counter[d] < shape[d]:
                break
            row_id -= strides[d] * shape[d]
            row_at -= result_strides[d] * shape[d]
            counter[d] = 0
            d -= 1
    return -1, runs_written


class PlanAddresses:
    """A memory plan's address queries (one per plan and lowering: it keeps, per tile stride, the
    row runs of the views whose column slices were asked for)."""

    def __init__(self, plan: MemoryPlan) -> None:
        self.plan = plan
        self._column_row_runs: dict[int, ColumnRowRuns] = {}
        """Per tile stride, the row runs of the views whose column slices were asked for."""

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
        (:mod:`gruc.runtime.row_runs`)."""
        if tensor.rank < 2 or tensor.shape[0] < 2:
            return None
        if tile_stride not in self._column_row_runs:
            self._column_row_runs[tile_stride] = ColumnRowRuns(
                partial(self.row_index_runs, tile_stride=tile_stride),
                partial(self._walked_row_runs, tile_stride=tile_stride))
        return self._column_row_runs[tile_stride].find(tensor)

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
        """Whether each element's id moves a whole number of periods a row, within one stretch
        of a variable's rows laid out alike (so its address moves by a fixed amount)."""
        if isinstance(tensor.op, ConcatOp) and tensor.op.dim != 0:
            return all(self._rows_step_by_periods(part) for part in tensor.sources)
        layout, variables = tensor.layout(), tensor.variables()
        if not isinstance(layout, Strided) or len(variables) != 1 or not tensor.num_elements:
            return False
        low, high = id_extent(layout, tensor.shape)
        segments = self.plan.segments
        at = int(np.searchsorted(segments[:, 0], low, side="right")) - 1
        if at < 0:
            return False
        first, period, rows = segments[at].tolist()
        return rows > 1 and high < first + period * rows and layout.strides[0] % period == 0

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
        stride = self.plan.capacity if tile_stride is None else int(tile_stride)
        bad, runs = fill_addresses(ids, offset, _int64s(tuple(shape)), _int64s(tuple(strides)),
                                   self.plan.runs, self.plan.segments, stride, unit, out, at,
                                   _int64s(tuple(places)), run_places)
        if bad >= 0:
            bad_id = int(ids[bad]) if len(ids) else \
                offset + int(np.dot(np.unravel_index(bad, shape), strides))
            variable = self.plan.graph.variables[int(self.plan.graph.variable_of_id(np.array([bad_id]))[0])]
            raise GrucValueError(f"variable {variable.name!r} has no memory in this plan (it is "
                                 "not used by the module and not fully mapped)")
        return runs
