"""Dynamic slicing (popops ``dynamicSlice`` / ``dynamicUpdate``): windows chosen at run time.

``dynamic_slice(graph, t, offset, dims, sizes, prog)`` returns a new tensor shaped like ``t`` with
``dims[k]`` cut to ``sizes[k]``, holding the window that starts at the run-time ``offset`` (an INT
or UNSIGNED_INT tensor with one element per sliced dim — typically a loop counter on tile 0).
``dynamic_update(graph, t, s, offset, dims, sizes, prog)`` writes ``s`` into that window of ``t``.
Semantics (poplibs, ``docs/poplibs-notes.md`` §1.5):

* inside a window of several rows the index wraps: row ``i`` of dim ``d`` is ``(offset + i) mod
  t.dim(d)``;
* an out-of-range offset (``>= t.dim(d)``, or negative) on any sliced dim makes the operation do
  nothing: the slice result keeps whatever it held before (poplibs: undefined), the update is not
  applied.

Placement.  Work is split by *columns* — the elements of ``t`` that differ only in the sliced
dims: each tile holding the first element of some columns (their *home*) runs one vertex over
those columns.  When every column lives on one tile, as in poplibs' RNN sequence tensors
(time-major on each tile, ``gruc.ops.rnn``), a slice or update per time step is tile-local and
costs no exchange but the offset; otherwise the vertex reads the rest of its columns remotely, and
the cycle model counts it.  A vertex may read remote memory but only write its own tile's, so
the slice result is mapped like ``t``'s window at offset 0 with every column moved to its home
tile (the same mapping whenever columns do not straddle tiles), and an update of a ``t`` whose
columns straddle tiles goes through a staging copy of ``t`` with every column on its home tile:
copy in, update, copy back — the exchange such a layout costs.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from gruc.errors import GrucIndexError, GrucShapeError, GrucTypeError, GrucValueError, expect
from gruc.ir.codelets.dynamic import DYNAMIC_SLICE, DYNAMIC_UPDATE, OFFSET_TYPES
from gruc.ir.graph import ComputeSet, Graph, check_op_args
from gruc.ir.mapping import UNMAPPED, TileMapping
from gruc.ir.program import Copy, Execute, Sequence as Seq
from gruc.ir.tensor import (Tensor, as_ints, concat, require_writable, share_elements,
                             strided_columns)
from gruc.ir.vertices import VertexKind

__all__ = ["dynamic_slice", "dynamic_update"]


def _check_request(graph: Graph, t: Tensor, offset: Tensor, dims: Sequence[int],
                   sizes: Sequence[int], what: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Validated ``(dims, sizes)``; raises naming the bad argument and what is allowed."""
    for role, tensor in (("tensor", t), ("offset", offset)):
        expect(isinstance(tensor, Tensor), GrucTypeError,
               f"{what} {role} must be a gruc Tensor, got {type(tensor).__name__}")
        expect(tensor.graph is graph, GrucValueError, f"{what} {role} belongs to another graph")
    dims, sizes = as_ints(dims, f"{what} dims"), as_ints(sizes, f"{what} sizes")
    expect(len(dims) >= 1, GrucValueError, f"{what} needs at least one dimension to slice")
    expect(len(dims) == len(sizes), GrucValueError,
           f"{what} has {len(dims)} dims but {len(sizes)} sizes; give one size per dim")
    expect(len(set(dims)) == len(dims), GrucValueError, f"{what} dims {list(dims)} repeat a dim")
    for d, s in zip(dims, sizes):
        expect(0 <= d < t.rank, GrucIndexError,
               f"{what} dim {d} is out of range for shape {list(t.shape)} "
               f"(allowed 0..{t.rank - 1})")
        expect(1 <= s <= t.shape[d], GrucValueError,
               f"{what} size {s} of dim {d} must be within 1..{t.shape[d]}")
    expect(offset.dtype in OFFSET_TYPES, GrucTypeError,
           f"{what} offset must be int or unsigned_int, got {offset.dtype.name}")
    expect(offset.num_elements == len(dims) and offset.rank <= 1, GrucShapeError,
           f"{what} offset must hold one element per sliced dim ({len(dims)}), got shape "
           f"{list(offset.shape)}")
    for role, tensor in (("tensor", t), ("offset", offset)):
        expect(graph.is_fully_mapped(tensor), GrucValueError,
               f"{what} {role} must be mapped to tiles before it is sliced")
    return dims, sizes


def _columns(t: Tensor, dims: tuple[int, ...]) -> Tensor:
    """``t`` as ``[t.dim(dims[0]), ..., M]``: sliced dims first, all others flattened to columns."""
    order = list(dims) + [d for d in range(t.rank) if d not in dims]
    moved = t.dim_shuffle(order) if order != list(range(t.rank)) else t
    columns = math.prod(t.shape[d] for d in order[len(dims):])
    return moved.reshape([t.shape[d] for d in dims] + [columns])


def _column_tiles(graph: Graph, t: Tensor, dims: tuple[int, ...]) -> tuple[np.ndarray, bool]:
    """Home tile of every column of ``t``'s columns view (``[N..., M]``) and whether whole columns
    are there: known without reading every row when ``t`` is sliced along its first dim and the
    graph knows its rows are alike (a sequence)."""
    base = _columns(t, dims)
    if dims == (0,) and graph.rows_alike(t):
        return graph.element_tiles(base[0]), True
    tiles = graph.element_tiles(base).reshape(-1, base.shape[-1])
    return tiles[0], bool(np.all(tiles == tiles[0]))


def _map_columns_home(graph: Graph, fresh: Tensor, dims: tuple[int, ...], home: np.ndarray) -> None:
    """Map the new variable ``fresh`` with each of its columns wholly on ``home``'s tile."""
    columns = _columns(fresh, dims)
    tiles = np.empty(fresh.num_elements, dtype=np.int64)
    tiles[columns.flat_ids() - fresh.first_id] = np.broadcast_to(home, (
        columns.num_elements // max(len(home), 1), len(home))).reshape(-1)
    graph.set_tile_mapping(fresh, TileMapping.from_element_tiles(tiles))


def _spaced_groups(runs: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """``runs`` (ascending ``(begin, end)`` column ranges) as ``(begin, length, stride, count)``
    groups, in order: each a maximal stretch of runs equally long and equally far apart (a run
    on its own is a group of one, stride 0)."""
    groups: list[tuple[int, int, int, int]] = []
    at = 0
    while at < len(runs):
        begin, end = runs[at]
        length, stride, count = end - begin, 0, 1
        if at + 1 < len(runs) and runs[at + 1][1] - runs[at + 1][0] == length:
            stride = runs[at + 1][0] - begin
            while at + count < len(runs) and runs[at + count] == (
                    begin + count * stride, begin + count * stride + length):
                count += 1
        groups.append((begin, length, stride, count))
        at += count
    return groups


def _add_column_vertices(graph: Graph, cs: ComputeSet, kind: VertexKind, offset: Tensor,
                         base: Tensor, window_field: str, window: Tensor) -> None:
    """One ``kind`` vertex per tile, over the columns whose first base element is on that tile.

    A tile's columns are given in column order: as one :func:`strided_columns` view where its runs
    of consecutive columns are equally long and equally far apart (a grain of every batch row, in
    a sequence's layout: 45 runs a tile for a batch of 4,096), else as a concat of a few: a
    strided view for each stretch of such runs (a tile holding two grains of the first rows and
    one of the rest has two), a slice for a run on its own.  A concat of one slice a run took
    32 views a vertex at B=16, H=2,759, and every analysis of the vertex paid for each.  The
    runs of every tile are found in one numpy pass (a GRU layer adds thousands of these vertices:
    per-tile numpy calls were most of its build time)."""
    sliced = base.rank - 1
    columns = base.shape[-1]
    first_row = base.slice([0] * base.rank, [1] * sliced + [columns])
    home = graph.element_tiles(first_row)
    mapped = np.flatnonzero(home != UNMAPPED)
    by_tile = mapped[np.argsort(home[mapped], kind="stable")]  # columns ascending on each tile
    tiles = home[by_tile]
    breaks = np.flatnonzero((np.diff(by_tile) != 1) | (np.diff(tiles) != 0)) + 1
    firsts = np.concatenate(([0], breaks)) if len(by_tile) else breaks
    lasts = np.concatenate((breaks, [len(by_tile)])) - 1 if len(by_tile) else breaks
    runs_on: dict[int, list[tuple[int, int]]] = {}  # tile -> its runs of consecutive columns
    for tile, begin, end in zip(tiles[firsts].tolist(), by_tile[firsts].tolist(),
                                (by_tile[lasts] + 1).tolist()):
        runs_on.setdefault(tile, []).append((begin, end))

    def pick(view: Tensor, runs: list[tuple[int, int]]) -> Tensor:
        if runs == [(0, columns)]:
            return view
        parts = []
        for begin, length, stride, count in _spaced_groups(runs):
            if count > 1 and begin + stride * count > columns:  # the span would pass the end
                parts.append(strided_columns(view, begin, length, stride, count - 1)
                             if count > 2 else view.slice(begin, begin + length, sliced))
                begin, count = begin + (count - 1) * stride, 1
            parts.append(strided_columns(view, begin, length, stride, count) if count > 1
                         else view.slice(begin, begin + length, sliced))
        return parts[0] if len(parts) == 1 else concat(parts, sliced)

    offsets = offset.reshape([sliced])
    for tile, runs in runs_on.items():
        graph.add_vertex(cs, kind, {"offset": offsets, "base": pick(base, runs),
                                    window_field: pick(window, runs)}, tile=tile)


def dynamic_slice(graph: Graph, t: Tensor, offset: Tensor, dims: Sequence[int],
                  sizes: Sequence[int], prog: Seq, name: str = "") -> Tensor:
    """A new tensor: the window of ``t`` at the run-time ``offset`` (popops ``dynamicSlice``).

    The result has ``t``'s shape with ``dims[k]`` of size ``sizes[k]``, and is mapped like
    ``t``'s window at offset 0.  Out-of-range offsets leave it unwritten (see the module doc).
    """
    check_op_args(graph, prog, "dynamic_slice")
    dims, sizes = _check_request(graph, t, offset, dims, sizes, "dynamic_slice")
    ends = list(t.shape)
    for d, s in zip(dims, sizes):
        ends[d] = s
    out = graph.clone(t.slice([0] * t.rank, ends), name or "dynamic_slice")
    home, whole = _column_tiles(graph, t, dims)
    if not whole:
        _map_columns_home(graph, out, dims, home)
    cs = graph.add_compute_set(name or "dynamic_slice")
    _add_column_vertices(graph, cs, DYNAMIC_SLICE, offset, _columns(t, dims), "out",
                         _columns(out, dims))
    prog.add(Execute(cs))
    return out


def dynamic_update(graph: Graph, t: Tensor, s: Tensor, offset: Tensor, dims: Sequence[int],
                   sizes: Sequence[int], prog: Seq, name: str = "") -> None:
    """Write ``s`` into the window of ``t`` at the run-time ``offset`` (popops ``dynamicUpdate``).

    ``s`` has ``t``'s shape with ``dims[k]`` of size ``sizes[k]`` and must not share elements
    with ``t``.  An out-of-range offset leaves ``t`` unchanged (see the module doc).
    """
    check_op_args(graph, prog, "dynamic_update")
    dims, sizes = _check_request(graph, t, offset, dims, sizes, "dynamic_update")
    expect(isinstance(s, Tensor) and s.graph is graph, GrucTypeError,
           "dynamic_update slice must be a gruc Tensor of the same graph")
    window_shape = list(t.shape)
    for d, size in zip(dims, sizes):
        window_shape[d] = size
    expect(list(s.shape) == window_shape, GrucShapeError,
           f"dynamic_update slice has shape {list(s.shape)}; slicing {list(t.shape)} by sizes "
           f"{list(sizes)} of dims {list(dims)} needs {window_shape}")
    expect(s.dtype == t.dtype, GrucTypeError,
           f"dynamic_update slice is {s.dtype.name} but the tensor is {t.dtype.name}")
    for role, other in (("slice", s), ("offset", offset)):
        expect(not share_elements(t, other), GrucValueError,
               f"dynamic_update {role} shares elements with the updated tensor")
    require_writable(t, "dynamic_update")
    home, whole = _column_tiles(graph, t, dims)
    target = t
    if not whole:
        target = graph.add_variable(t.dtype, t.shape, f"{name or 'dynamic_update'}/staging")
        _map_columns_home(graph, target, dims, home)
        prog.add(Copy(t, target))
    cs = graph.add_compute_set(name or "dynamic_update")
    _add_column_vertices(graph, cs, DYNAMIC_UPDATE, offset, _columns(target, dims), "update",
                         _columns(s, dims))
    prog.add(Execute(cs))
    if target is not t:
        prog.add(Copy(target, t))
