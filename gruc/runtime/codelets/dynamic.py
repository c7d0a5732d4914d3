"""Dynamic slicing codelets (``DynamicSlice``, ``DynamicUpdate``) on both engines, and their cycles.

The kinds (:mod:`gruc.ir.codelets.dynamic`) give ``base`` as ``[N_1, ..., N_d, M]`` and the window
as ``[s_1, ..., s_d, M]``.  All index work is done once, when a vertex is prepared: the element
indices of ``base`` become a ``[N_1 * ... * N_d, M]`` table (one row per base row) and those of
the window a ``[s_1 * ... * s_d, M]`` table.  A run then only reads the offsets, picks the base
rows they select (``(o + i) mod N`` per sliced dim) and moves one window of elements — the gather
or scatter of one time step that an RNN loop pays every iteration.

numpy: fancy indexing over those tables, vertex by vertex.  numba: each run of slice (or update)
vertices of a step in one call of one kernel over the tables of all of them, compiled once per
memory dtype (moving data is bit copying, so every type is moved through the unsigned view of its
size: the element index of a typed view depends only on the size) and cached on disk.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from numba import njit

from gruc.ir.codelets.dynamic import DYNAMIC_SLICE, DYNAMIC_UPDATE
from gruc.ir.graph import Vertex
from gruc.ir.layout import ConcatOp, Strided
from gruc.ir.tensor import strided_columns_of
from gruc.runtime.codelets import poplibs_estimates as pe
from gruc.runtime.codelets.regions import variable_tiles
from gruc.runtime.cost import cycle_estimator
from gruc.runtime.interp import Prepared, RunHooks, numpy_vertex
from gruc.runtime.kernels import UNSIGNED_VIEWS, numba_executable_hook
from gruc.runtime.lower import DeviceMemory, Executable, ExecuteStep, LoweredVertex, Operand
from gruc.target import Target
from gruc.types import HALF, DType



class _Window:
    """The index tables of one dynamic slice or update vertex."""

    def __init__(self, vertex: LoweredVertex, window_field: str) -> None:
        base: Operand = vertex.fields["base"]
        window: Operand = vertex.fields[window_field]
        self.offset: Operand = vertex.fields["offset"]
        self.dtype: DType = base.dtype
        self.dim_sizes = np.array(base.shape[:-1], dtype=np.int64)
        self.window_sizes = np.array(window.shape[:-1], dtype=np.int64)
        columns = base.shape[-1]
        self.base_rows = np.ascontiguousarray(base.index.reshape(-1, columns))
        self.window_rows = np.ascontiguousarray(window.index.reshape(-1, columns))
        steps = [np.arange(s, dtype=np.int64) for s in window.shape[:-1]]
        self.window_coords = [c.reshape(-1) for c in np.meshgrid(*steps, indexing="ij")]
        """For each window row, its index along each sliced dim (row-major)."""
        self.row_strides = np.array([int(np.prod(base.shape[k + 1:-1])) for k in
                                     range(len(base.shape) - 1)], dtype=np.int64)

    def base_rows_at(self, memory: DeviceMemory) -> np.ndarray | None:
        """Base-row number of each window row at the current offsets, or None if out of range."""
        offsets = memory.view(self.offset.dtype)[self.offset.index].astype(np.int64)
        if np.any(offsets < 0) or np.any(offsets >= self.dim_sizes):
            return None
        rows = np.zeros(len(self.window_rows), dtype=np.int64)
        for coord, offset, size, stride in zip(self.window_coords, offsets, self.dim_sizes,
                                               self.row_strides):
            rows += (coord + offset) % size * stride
        return rows


# ---- numpy ------------------------------------------------------------------------------------
@numpy_vertex(DYNAMIC_SLICE)
def _numpy_slice(vertex: LoweredVertex) -> Prepared:
    """The definition of ``DynamicSlice``: the base rows at the offsets into ``out``; with an offset
    out of range the vertex does nothing and ``out`` keeps what it held."""
    w = _Window(vertex, "out")

    def run(memory: DeviceMemory) -> None:
        rows = w.base_rows_at(memory)
        if rows is not None:
            data = memory.view(w.dtype)
            data[w.window_rows] = data[w.base_rows[rows]]

    return run


@numpy_vertex(DYNAMIC_UPDATE)
def _numpy_update(vertex: LoweredVertex) -> Prepared:
    """The definition of ``DynamicUpdate``: ``update`` into the base rows at the offsets; with an
    offset out of range the base is left unchanged."""
    w = _Window(vertex, "update")

    def run(memory: DeviceMemory) -> None:
        rows = w.base_rows_at(memory)
        if rows is not None:
            data = memory.view(w.dtype)
            data[w.base_rows[rows]] = data[w.window_rows]

    return run


# ---- numba ------------------------------------------------------------------------------------
# An RNN step slices every sequence tensor with one vertex per tile: thousands of small vertices a
# step on a full IPU, each too cheap to be worth a Python call.  The numba backend therefore runs
# each run of consecutive slice (or update) vertices of a compute set as one kernel call over
# concatenated tables.  A row of a vertex's base or window is moved as *pieces*: column ranges in
# which every base row and every window row has consecutive addresses (one piece per row when the
# rows are blocks of tile memory, as the time-major layout of sequence tensors makes them).  The
# tables hold the address of every piece, so they grow with the rows, not the elements — or, for a
# sequence laid out alike at every step, the first row's pieces and how far each moves a row, so
# they do not grow with the sequence at all.  Semantics are the definition's, vertex after vertex
# (out-of-range offsets skip the vertex).
@njit(cache=True, nogil=True)
def _move_windows(data, offset_data, dim_start, dim_sizes, window_sizes, offset_index, width_start,
                  widths, window_count, base_start, base_pieces, piece_moves, window_start,
                  window_pieces, scatter):  # pragma: no cover (compiled)
    """Move the window of every vertex of a group, piece by piece: base into window, or window into
    base with ``scatter`` (DynamicUpdate).  With ``piece_moves`` non-empty a base piece is found
    from the first row's and how far it moves a row, else read from the table row by row."""
    moved_rows = piece_moves.shape[0] > 0
    for v in range(window_count.shape[0]):
        first, last = dim_start[v], dim_start[v + 1]
        in_range = True
        for k in range(first, last):
            offset = np.int64(offset_data[offset_index[k]])
            if offset < 0 or offset >= dim_sizes[k]:
                in_range = False
        if not in_range:
            continue
        first_width = width_start[v]
        count = width_start[v + 1] - first_width
        for q in range(window_count[v]):
            row = 0
            stride = 1
            rest = q
            for k in range(last - 1, first - 1, -1):
                # integer division is slow: windows are mostly one row deep, rarely wrap around
                position = np.int64(offset_data[offset_index[k]])
                if window_sizes[k] != 1:
                    position += rest % window_sizes[k]
                    rest //= window_sizes[k]
                    if position >= dim_sizes[k]:
                        position %= dim_sizes[k]
                row += position * stride
                stride *= dim_sizes[k]
            for p in range(count):
                width = widths[first_width + p]
                if moved_rows:
                    base = np.uint64(np.int64(base_pieces[base_start[v] + p])
                                     + row * piece_moves[first_width + p])
                else:
                    base = base_pieces[base_start[v] + row * count + p]
                window = window_pieces[window_start[v] + q * count + p]
                if scatter:
                    for m in range(width):
                        data[base + np.uint64(m)] = data[window + np.uint64(m)]
                else:
                    for m in range(width):
                        data[window + np.uint64(m)] = data[base + np.uint64(m)]


# The common group — an RNN step's slice of every sequence tensor: each vertex one row deep, all
# reading one offset over bases of as many rows — is moved by a second kernel over a table laid
# out row after row: the pieces a row selects, across every vertex of the group, are consecutive.
# The first kernel reads, per vertex, one table entry a base's worth of rows away from the last —
# a cache miss the data load then waits on, about 100 ns a vertex with a 64-byte piece on each of
# a thousand tiles; here the table streams and the data loads are independent, so they overlap.
@njit(cache=True, nogil=True)
def _move_rows(data, offset_data, offset_index, rows, row_pieces, piece_moves, window_pieces,
               widths, scatter):  # pragma: no cover (compiled)
    """The one-row group above: every vertex moves row ``offset_data[offset_index]`` of bases of
    ``rows`` rows (nothing if it is out of range), ``scatter`` as in :func:`_move_windows`."""
    row = np.int64(offset_data[offset_index])
    if row < 0 or row >= rows:
        return
    moved_rows = piece_moves.shape[0] > 0
    first = 0 if moved_rows else row * widths.shape[0]
    for p in range(widths.shape[0]):
        base, window = row_pieces[first + p], window_pieces[p]
        if moved_rows:
            base = np.uint64(np.int64(base) + row * piece_moves[p])
        if scatter:
            for m in range(widths[p]):
                data[base + np.uint64(m)] = data[window + np.uint64(m)]
        else:
            for m in range(widths[p]):
                data[window + np.uint64(m)] = data[base + np.uint64(m)]


@njit(cache=True, nogil=True)
def _piece_tables(base_positions, base_firsts, base_moves, base_runs_at, window_index, window_at,
                  rows, window_rows, columns):  # pragma: no cover (compiled)
    """The pieces of every vertex of a group: a new piece starts at a column where some base row
    or window row stops being consecutive.  A vertex's base comes as its runs of consecutive
    indices (flat position and first index, from ``base_runs_at[v]``), so this costs per run
    and per piece, not per element; windows (a row or a few) come element by element.  Returns
    the width of each piece, the first piece of each vertex (and the total), the start address
    of each piece in every base row (a vertex's rows one after another) with each vertex's first
    entry, and the same for the window rows.

    With ``base_moves`` (one per base run, else empty) the runs are a base's first row only and
    ``rows`` is 1: each piece's start in row ``r`` is its first row's plus ``r`` times its run's
    move, returned per piece (empty without)."""
    count = columns.shape[0]
    starts = np.zeros(columns.sum(), np.bool_)
    pieces = np.zeros(count, np.int64)
    first_column = 0
    for v in range(count):
        n = columns[v]
        for j in range(base_runs_at[v], base_runs_at[v + 1]):
            starts[first_column + base_positions[j] % n] = True
        for c in range(n):
            start = c == 0 or starts[first_column + c]
            for r in range(window_rows[v]):
                k = window_at[v] + r * n + c
                if start or window_index[k] != window_index[k - 1] + 1:
                    start = True
                    break
            starts[first_column + c] = start
            pieces[v] += start
        first_column += n
    width_start = np.zeros(count + 1, np.int64)
    base_start = np.zeros(count + 1, np.int64)
    window_start = np.zeros(count + 1, np.int64)
    for v in range(count):
        width_start[v + 1] = width_start[v] + pieces[v]
        base_start[v + 1] = base_start[v] + rows[v] * pieces[v]
        window_start[v + 1] = window_start[v] + window_rows[v] * pieces[v]
    widths = np.empty(width_start[count], np.int64)
    piece_moves = np.zeros(width_start[count] if base_moves.shape[0] else 0, np.int64)
    piece_columns = np.empty(width_start[count], np.int64)
    base_pieces = np.empty(base_start[count], np.uint64)
    window_pieces = np.empty(window_start[count], np.uint64)
    first_column = 0
    for v in range(count):
        n, piece = columns[v], 0
        for c in range(n):
            if not starts[first_column + c]:
                continue
            end = c + 1
            while end < n and not starts[first_column + end]:
                end += 1
            widths[width_start[v] + piece] = end - c
            piece_columns[width_start[v] + piece] = c
            for r in range(window_rows[v]):
                window_pieces[window_start[v] + r * pieces[v] + piece] = \
                    window_index[window_at[v] + r * n + c]
            piece += 1
        first_column += n
        run, last_run = base_runs_at[v], base_runs_at[v + 1] - 1
        for r in range(rows[v]):  # positions only grow: one pass over the vertex's runs
            for p in range(pieces[v]):
                position = r * n + piece_columns[width_start[v] + p]
                while run < last_run and base_positions[run + 1] <= position:
                    run += 1
                base_pieces[base_start[v] + r * pieces[v] + p] = \
                    base_firsts[run] + (position - base_positions[run])
                if r == 0 and base_moves.shape[0]:
                    piece_moves[width_start[v] + p] = base_moves[run]
    return widths, width_start, base_pieces, piece_moves, base_start, window_pieces, window_start


def _flat_indices(operands: list[Operand]) -> tuple[np.ndarray, np.ndarray]:
    """The operands' element indices joined, and where each one's begin."""
    sizes = [op.index.size for op in operands]  # lowering's indices are int64: no copy
    return (np.concatenate([op.index.reshape(-1) for op in operands]).astype(np.int64, copy=False),
            np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))[:-1])


ROW_RUNS_MIN_ROWS = 128
"""Bases of fewer rows are listed row by row even when their rows are the first moved: their
tables are small, and finding the moves costs more Python per base than listing (a 64x256x256
GRU layer's slice groups: 0.39 s listed and 0.48 s by moves at 20 steps; 0.45 s by moves at
2,000, where listing took 2.1 s)."""


def _group_tables(bases: list[Operand], windows: list[Operand], rows: np.ndarray,
                  window_rows: np.ndarray, columns: np.ndarray) -> tuple[np.ndarray, ...]:
    """:func:`_piece_tables` of a group: its bases as runs (a long sequence's indices are never
    listed) — their first row's only, with how far each run moves a row, when every base's rows
    are its first moved run by run (see :meth:`Operand.row_runs`) — and its windows element by
    element.  Returns the number of base rows the tables hold per vertex (all, or 1) first."""
    row_runs = []
    for base in bases:
        found = base.row_runs() if len(base.shape) == 2 and base.shape[0] >= ROW_RUNS_MIN_ROWS \
            else None
        if found is None:
            break
        row_runs.append(found)
    if len(row_runs) == len(bases):
        runs, table_rows = row_runs, np.ones(len(bases), np.int64)
        base_moves = np.concatenate([moves for _, _, moves in row_runs])
    else:
        runs, table_rows = [base.index_runs() for base in bases], rows
        base_moves = np.zeros(0, np.int64)
    base_runs_at = np.concatenate(([0], np.cumsum([len(found[0]) for found in runs],
                                                  dtype=np.int64)))
    base_positions = np.concatenate([found[0] for found in runs])
    base_firsts = np.concatenate([found[1] for found in runs])
    window_index, window_at = _flat_indices(windows)
    return table_rows, *_piece_tables(base_positions, base_firsts, base_moves, base_runs_at,
                                      window_index, window_at, table_rows, window_rows, columns)


def _rows_table(rows: int, base_pieces: np.ndarray, base_start: np.ndarray,
                width_start: np.ndarray) -> np.ndarray:
    """The base-piece table of vertices with ``rows`` rows each, row by row across all of them:
    entry ``(r, p)`` is piece ``p`` (numbered across the group) of row ``r``."""
    pieces = np.diff(width_start)
    owner = np.repeat(np.arange(len(pieces)), pieces)
    within = np.arange(width_start[-1]) - width_start[owner]
    at = base_start[owner] + np.arange(rows)[:, None] * pieces[owner] + within
    return np.ascontiguousarray(base_pieces[at].reshape(-1))


def _prepare_group(vertices: list[LoweredVertex]) -> Prepared:
    """One kernel call running ``vertices`` (same kind, element size and offset type) in order."""
    window_field = "out" if vertices[0].kind is DYNAMIC_SLICE else "update"
    bases = [v.fields["base"] for v in vertices]
    windows = [v.fields[window_field] for v in vertices]
    offsets = [v.fields["offset"] for v in vertices]
    columns = np.array([b.shape[-1] for b in bases], np.int64)
    rows = np.array([math.prod(b.shape[:-1]) for b in bases], np.int64)
    window_count = np.array([math.prod(w.shape[:-1]) for w in windows], np.int64)
    table_rows, widths, width_start, base_pieces, piece_moves, base_start, window_pieces, \
        window_start = _group_tables(bases, windows, rows, window_count, columns)
    dim_start = np.cumsum([0] + [len(b.shape) - 1 for b in bases], dtype=np.int64)
    dim_sizes = np.concatenate([b.shape[:-1] for b in bases]).astype(np.int64)
    window_sizes = np.concatenate([w.shape[:-1] for w in windows]).astype(np.int64)
    offset_index = np.concatenate([o.index for o in offsets]).astype(np.int64)
    bits = UNSIGNED_VIEWS[bases[0].dtype.size]
    offset_dtype = offsets[0].dtype
    scatter = window_field == "update"
    one_row_each = len(dim_sizes) == len(vertices) and np.all(window_sizes == 1)
    if one_row_each and dim_sizes[0] > 0 and np.all(dim_sizes == dim_sizes[0]) \
            and np.all(offset_index == offset_index[0]):  # one sliced dim, one offset
        row_pieces = _rows_table(int(table_rows[0]), base_pieces, base_start, width_start)
        offset, count = int(offset_index[0]), int(dim_sizes[0])

        def run_rows(memory: DeviceMemory) -> None:
            _move_rows(memory.raw.view(bits), memory.view(offset_dtype), offset, count,
                       row_pieces, piece_moves, window_pieces, widths, scatter)

        return run_rows

    def run(memory: DeviceMemory) -> None:
        _move_windows(memory.raw.view(bits), memory.view(offset_dtype), dim_start, dim_sizes,
                      window_sizes, offset_index, width_start, widths, window_count, base_start,
                      base_pieces, piece_moves, window_start, window_pieces, scatter)

    return run


def _group_key(vertex: LoweredVertex):
    if vertex.kind not in (DYNAMIC_SLICE, DYNAMIC_UPDATE):
        return None
    return vertex.kind, vertex.fields["base"].dtype.size, vertex.fields["offset"].dtype.name


@numba_executable_hook
def _group_windows(executable: Executable, hooks: RunHooks) -> dict[int, Prepared | None]:
    """Each maximal run of groupable slice / update vertices in a step becomes one callable."""
    prepared: dict[int, Prepared | None] = {}
    for leaf in executable.leaves:
        if not isinstance(leaf, ExecuteStep):
            continue
        for key, run in itertools.groupby(leaf.vertices, key=_group_key):
            if key is None:
                continue
            group = list(run)
            prepared[id(group[0])] = _prepare_group(group)
            prepared.update((id(v), None) for v in group[1:])
    return prepared


# ---- cycles -----------------------------------------------------------------------------------
def _strided_rows(view, columns: np.ndarray) -> tuple[np.ndarray, int] | None:
    """The ids of ``columns`` of the first row of a strided 2-D ``view``, and its row stride."""
    layout = view.layout()
    if not isinstance(layout, Strided) or view.rank != 2:
        return None
    return layout.offset + columns * layout.strides[1], layout.strides[0]


def _first_row(part) -> tuple[np.ndarray, int] | None:
    """The ids of a 2-D view's first row and its row stride where the view says them without
    listing its ids: a strided view, or runs of a strided view's columns a row apart
    (:func:`~gruc.ir.tensor.strided_columns`)."""
    picked = strided_columns_of(part) if part.rank == 2 else None
    if picked is None:
        return _strided_rows(part, np.arange(part.shape[1]))
    view, begin, length, stride, count = picked
    return _strided_rows(view, (begin + np.arange(count)[:, None] * stride
                                + np.arange(length)).reshape(-1))


def _two_rows(base, rows: int, columns: int) -> tuple[np.ndarray, np.ndarray, int | None] | None:
    """The ids of ``base``'s first two rows and the row stride, read from the strided views a
    builder's column pick joins (:func:`~gruc.ir.tensor.strided_columns`, column runs, or a
    concatenation of them) without making the pick's own ids — those of every row of a long
    sequence."""
    if isinstance(base.op, ConcatOp) and base.rank == 2 and base.op.dim == 1:
        parts = [_first_row(part) for part in base.sources]
        if any(part is None for part in parts) or len({p[1] for p in parts}) != 1:
            return None
        found = np.concatenate([p[0] for p in parts]), parts[0][1]
    elif strided_columns_of(base) is not None:
        found = _first_row(base)
    else:
        return None
    if found is None:
        return None
    first, row_stride = found
    return first, first + row_stride if rows > 1 else first, row_stride


def slice_regions(base, rows: int, columns: int, tile: int) -> tuple[np.ndarray, bool]:
    """The contiguous memory regions of ``base``'s first slice (row) on ``tile``, and whether all
    of ``base``'s rows there are one region — what ``popops/DynamicSlice.cpp`` looks at to pick
    ``DynamicSlice1d`` (one region, contiguous base) or ``DynamicSlice2d``.

    ``base`` is ``[rows, columns]`` (the sliced dims flattened).  Rows are assumed laid out alike
    (one pair of neighbouring rows is looked at): every base gruc's builders make is a run of
    rows of one variable."""
    variables = base.variables()
    rows_ids = _two_rows(base, rows, columns)
    if rows_ids is None:
        layout = base.layout()
        if len(variables) == 1 and isinstance(layout, Strided) and base.rank == 2 \
                and layout.strides[1] == 1:  # the tile's columns are one run of ids: the usual case
            tiles = variable_tiles(variables[0], base)
            local = layout.offset - tiles.origin
            if (tiles.tiles_of_run(local, columns) == tile).all():
                sizes = np.array([columns], dtype=np.int64)
                if rows == 1:
                    return sizes, True
                if tiles.repeats and layout.strides[0] == tiles.length:
                    # consecutive rows of a sequence: its rows' elements on the tile are these
                    return sizes, bool(tiles.counts()[tile] == columns)
                after = local + layout.strides[0]
                return sizes, bool(after > local + columns - 1 and not tiles.tile_between(
                    local + columns - 1, after, tile))
        if isinstance(layout, Strided) and base.rank == 2:
            row_stride, column_stride = layout.strides
            first = layout.offset + np.arange(columns, dtype=np.int64) * column_stride
            rows_ids = first, first + row_stride if rows > 1 else first, row_stride
        else:  # two rows' ids, not all of them (a long sequence has thousands of rows)
            rows_view = base.reshape((rows, columns))
            first = rows_view[0].flat_ids()
            rows_ids = first, rows_view[1].flat_ids() if rows > 1 else first, None
    first, second, row_stride = rows_ids
    first = np.sort(first)
    if len(variables) != 1:  # parts of several variables: a region per run of ids
        breaks = np.flatnonzero(np.diff(first) != 1)
        return np.diff(np.concatenate(([0], breaks + 1, [len(first)]))), False
    layout_tiles = variable_tiles(variables[0], base)
    local = first - layout_tiles.origin
    tiles = layout_tiles.tiles_of(local)
    breaks = np.flatnonzero((np.diff(local) != 1) | (np.diff(tiles) != 0))
    cuts = breaks[(tiles[breaks] != tiles[breaks + 1])
                  | layout_tiles.tiles_between(local[breaks], local[breaks + 1], tile)] + 1
    sizes = np.diff(np.concatenate(([0], cuts, [len(local)])).astype(np.int64))
    if len(sizes) != 1 or rows == 1:
        return sizes, len(sizes) == 1
    if layout_tiles.repeats and row_stride == layout_tiles.length:
        return sizes, bool(layout_tiles.counts()[tile] == columns)
    after = int(np.min(second)) - layout_tiles.origin
    return sizes, bool(after > local[-1] and not layout_tiles.tile_between(
        int(local[-1]), after, tile))


@cycle_estimator(DYNAMIC_SLICE)
@cycle_estimator(DYNAMIC_UPDATE)
def _window_cycles(vertex: Vertex, elements: np.ndarray, target: Target) -> np.ndarray:
    """poplibs' dynamic slice vertex on the vertex's tile: ``DynamicSlice1d`` /
    ``DynamicUpdateSlice1d`` (supervisor) when the first slice of ``base`` is one contiguous
    region there and all of ``base`` is contiguous, else ``DynamicSlice2d`` /
    ``DynamicUpdateSlice2d`` workers over the first slice's regions, split between the workers
    (``numBaseElements`` = the rows of ``base``, ``numSubElements`` = the window's rows)."""
    cycles = np.zeros(target.num_tiles, dtype=np.int64)
    base = vertex.fields["base"]
    window = vertex.fields["out" if "out" in vertex.fields else "update"]
    columns = base.shape[-1]
    rows = base.num_elements // columns if columns else 0
    if not rows or vertex.tile is None:
        return cycles
    sub = window.num_elements // columns
    half = base.dtype is HALF
    width = 4 if half else 2  # getDataPathWidth() / (half ? 16 : 32)
    workers = target.num_worker_contexts
    sizes, contiguous = slice_regions(base, rows, columns, vertex.tile)
    if len(sizes) == 1 and contiguous:
        cycles[vertex.tile] = pe.dynamic_slice_1d(columns, sub, width, workers)
        return cycles
    split = pe.split_regions(np.full(len(sizes), vertex.tile), sizes, width, 2 * width, workers)
    per_vertex = split.per_vertex(pe.dynamic_slice_2d_region(split.row_size, sub, width, half),
                                  pe.DYNAMIC_SLICE_2D_BASE)
    cycles[vertex.tile] = workers * int(per_vertex.max())
    return cycles
