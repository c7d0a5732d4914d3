"""Dynamic slicing codelets (``DynamicSlice``, ``DynamicUpdate``) on both engines, and their cycles.

The kinds (:mod:`gruc.ir.codelets.dynamic`) give ``base`` as ``[N_1, ..., N_d, M]`` and the window
as ``[s_1, ..., s_d, M]``.  All index work is done once, when a vertex is prepared: the element
indices of ``base`` become a ``[N_1 * ... * N_d, M]`` table (one row per base row) and those of
the window a ``[s_1 * ... * s_d, M]`` table.  A run then only reads the offsets, picks the base
rows they select (``(o + i) mod N`` per sliced dim) and moves one window of elements — the gather
or scatter of one time step that an RNN loop pays every iteration.

numpy: fancy indexing over those tables.  numba: two small kernels, compiled once per memory
dtype (moving data is bit copying, so every type is moved through the unsigned view of its size:
the element index of a typed view depends only on the size) and cached on disk.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from gruc.ir.graph import Vertex
from gruc.runtime.cost import VERTEX_OVERHEAD_CYCLES, cycle_estimator
from gruc.runtime.interp import Prepared, numpy_vertex
from gruc.runtime.kernels import numba_vertex
from gruc.runtime.lower import DeviceMemory, LoweredVertex, Operand
from gruc.target import Target
from gruc.types import DType

_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32}
"""The unsigned view through which elements of each byte size are moved."""


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
@numpy_vertex("DynamicSlice")
def _numpy_slice(vertex: LoweredVertex) -> Prepared:
    w = _Window(vertex, "out")

    def run(memory: DeviceMemory) -> None:
        rows = w.base_rows_at(memory)
        if rows is not None:
            data = memory.view(w.dtype)
            data[w.window_rows] = data[w.base_rows[rows]]

    return run


@numpy_vertex("DynamicUpdate")
def _numpy_update(vertex: LoweredVertex) -> Prepared:
    w = _Window(vertex, "update")

    def run(memory: DeviceMemory) -> None:
        rows = w.base_rows_at(memory)
        if rows is not None:
            data = memory.view(w.dtype)
            data[w.base_rows[rows]] = data[w.window_rows]

    return run


# ---- numba ------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _base_row(window_row, offsets, dim_sizes, window_sizes):  # pragma: no cover (compiled)
    """Base-row number of ``window_row`` (row-major over the window) at ``offsets``."""
    row = 0
    stride = 1
    rest = window_row
    for k in range(dim_sizes.shape[0] - 1, -1, -1):
        step = rest % window_sizes[k]
        rest //= window_sizes[k]
        row += (offsets[k] + step) % dim_sizes[k] * stride
        stride *= dim_sizes[k]
    return row


@njit(cache=True, nogil=True)
def _offsets_in_range(offset_data, offset_index, dim_sizes):  # pragma: no cover (compiled)
    """The offsets as int64, or an empty array if one is out of range."""
    offsets = np.empty(dim_sizes.shape[0], dtype=np.int64)
    for k in range(dim_sizes.shape[0]):
        offsets[k] = np.int64(offset_data[offset_index[k]])
        if offsets[k] < 0 or offsets[k] >= dim_sizes[k]:
            return offsets[:0]
    return offsets


@njit(cache=True, nogil=True)
def _gather_window(data, base_rows, window_rows, offset_data, offset_index, dim_sizes,
                   window_sizes):  # pragma: no cover (compiled)
    offsets = _offsets_in_range(offset_data, offset_index, dim_sizes)
    if offsets.shape[0] == 0:
        return
    for q in range(window_rows.shape[0]):
        source = base_rows[_base_row(q, offsets, dim_sizes, window_sizes)]
        target = window_rows[q]
        for m in range(target.shape[0]):
            data[target[m]] = data[source[m]]


@njit(cache=True, nogil=True)
def _scatter_window(data, base_rows, window_rows, offset_data, offset_index, dim_sizes,
                    window_sizes):  # pragma: no cover (compiled)
    offsets = _offsets_in_range(offset_data, offset_index, dim_sizes)
    if offsets.shape[0] == 0:
        return
    for q in range(window_rows.shape[0]):
        target = base_rows[_base_row(q, offsets, dim_sizes, window_sizes)]
        source = window_rows[q]
        for m in range(source.shape[0]):
            data[target[m]] = data[source[m]]


def _prepare_numba(vertex: LoweredVertex, window_field: str, kernel) -> Prepared:
    w = _Window(vertex, window_field)
    bits = _BITS[w.dtype.size]
    offset_dtype, offset_index = w.offset.dtype, w.offset.index
    base_rows, window_rows, dim_sizes, window_sizes = (w.base_rows, w.window_rows, w.dim_sizes,
                                                       w.window_sizes)
    unsigned: dict[int, np.ndarray] = {}
    """The unsigned view of each memory run on: made once, not on every step."""

    def run(memory: DeviceMemory) -> None:
        data = unsigned.get(id(memory))
        if data is None or data.base is not memory.raw:
            data = unsigned[id(memory)] = memory.raw.view(bits)
        kernel(data, base_rows, window_rows, memory.view(offset_dtype), offset_index, dim_sizes,
               window_sizes)

    return run


@numba_vertex("DynamicSlice")
def _numba_slice(vertex: LoweredVertex) -> Prepared:
    return _prepare_numba(vertex, "out", _gather_window)


@numba_vertex("DynamicUpdate")
def _numba_update(vertex: LoweredVertex) -> Prepared:
    return _prepare_numba(vertex, "update", _scatter_window)


# ---- cycles -----------------------------------------------------------------------------------
ROW_CYCLES = 4
"""Per window row: computing its base row from the offset and setting up the copy."""


@cycle_estimator("DynamicSlice")
@cycle_estimator("DynamicUpdate")
def _window_cycles(vertex: Vertex, elements: np.ndarray, target: Target) -> np.ndarray:
    """Overhead, a little per row, and one vector of the window copied per cycle (64-bit path)."""
    window = vertex.fields["out" if "out" in vertex.fields else "update"]
    rows = window.num_elements // window.shape[-1] if window.shape[-1] else 0
    vectors = -(-window.num_elements // target.vector_width(window.dtype))
    cycles = np.zeros_like(elements)
    cycles[vertex.tile] = VERTEX_OVERHEAD_CYCLES + ROW_CYCLES * rows + vectors
    return cycles
