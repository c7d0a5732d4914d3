"""Reductions (popops ``reduce`` / ``reduceWithOutput``), planned over tiles as poplibs plans them.

``reduce(graph, t, dims, op, prog)`` reduces the dimensions ``dims`` of ``t`` with ``op`` (ADD,
SQUARE_ADD, MUL, MAX, MIN); the result has the remaining dimensions in their order (shape ``()``
when every dimension is reduced; an empty ``dims`` applies the op to each element alone — a copy
for ADD, MUL, MAX, MIN, the square for SQUARE_ADD).  ``scale`` multiplies the result and
``update=True`` adds it to the output (``out += scale * reduce(t)``); both are for the ADD family
only, as in poplibs.  Half inputs accumulate in float (poplibs' default ``accumType``) and are
rounded once, when the result is stored.

Why two stages.  A vertex only touches its own tile's memory, so a reduction whose inputs are
spread over tiles cannot be one vertex.  As in poplibs' ``Reduce.cpp``:

1. **partials** — every tile reduces the input elements it holds into one partial value per output
   element it contributes to (one ``Reduce`` vertex per tile).  Where a tile holds *all* the inputs
   of an output element that also lives on that tile, the vertex writes the result directly (with
   the scale and update applied), so a reduction whose rows are local — the innermost dimension
   of a row-mapped tensor, the common case — is one compute set and moves nothing;
2. **exchange** — the other partials (a float variable on the contributing tiles, so it shows in
   their not-always-live memory) are copied to the tile of their output element (one ``Copy``
   whose bytes the report counts as exchange);
3. **final** — on each output tile one ``Reduce`` (or ``ReduceUpdate``) vertex combines the
   partials of its output elements.

How a tile's elements become vertex regions.  The input is walked in *memory order*: the dims of
a strided view are ordered by decreasing stride (a transposed view is read as the variable lies),
so the runs of one tile's elements are long.  Each run is cut into at most ``2·rank − 1`` boxes
(fixed leading indices, one partial dimension, full trailing dimensions); a box is a 2-D region
``[outputs, elements per output]`` whose outputs are consecutive — a row chunk reduced over the
batch axis, or whole rows reduced over the innermost axis.  The vertex regions, partial slots and
exchange list are computed with numpy over these boxes, not per element.

The output of ``reduce`` is mapped like the input reduced: each output element goes to the tile
holding most of its inputs (the lowest such tile on a tie), so local reductions stay local.
``reduce_with_output`` keeps the output's mapping and maps only elements that have none (poplibs
sets the mapping only if it is incomplete).
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from gruc.errors import (GrucIndexError, GrucMappingError, GrucShapeError, GrucTypeError,
                         GrucValueError)
from gruc.ir.codelets.reduce import (REDUCE, REDUCE_UPDATE, Operation, check_reduce_types,
                                     identity, operation_of, partials_dtype)
from gruc.ir.graph import Graph, check_op_args
from gruc.ir.layout import Strided, contiguous_strides
from gruc.ir.mapping import UNMAPPED, TileMapping
from gruc.ir.program import Copy, Execute
from gruc.ir.program import Sequence as Seq
from gruc.ir.tensor import Tensor, concat, require_writable, share_elements
from gruc.ops.elementwise import fill, finite_scale
from gruc.types import DType, dtype_of

__all__ = ["Operation", "operation_of", "reduce", "reduce_with_output"]


# ---- arguments ----------------------------------------------------------------------------------
def _check_tensor(graph: Graph, t: object, what: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise GrucTypeError(f"{what} must be a gruc Tensor, got {type(t).__name__}")
    if t.graph is not graph:
        raise GrucValueError(f"{what} belongs to another graph")
    return t


def _normalise_dims(t: Tensor, dims: Iterable[int] | int) -> tuple[int, ...]:
    """``dims`` as sorted non-negative dimensions of ``t`` (negative ones count from the end)."""
    if isinstance(dims, (int, np.integer)) and not isinstance(dims, bool):
        dims = [dims]
    try:
        given = list(dims)
    except TypeError:
        raise GrucTypeError(f"reduce dims must be a sequence of ints, got {dims!r}") from None
    result: list[int] = []
    for d in given:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise GrucTypeError(f"reduce dimension {d!r} is not an int (dims {given!r})")
        if not -t.rank <= d < t.rank:
            allowed = f"0..{t.rank - 1} or {-t.rank}..-1" if t.rank else "none: it is a scalar"
            raise GrucIndexError(f"reduce dimension {int(d)} is out of range for a tensor of shape "
                                 f"{list(t.shape)} (allowed {allowed})")
        d = int(d) % t.rank
        if d in result:
            raise GrucValueError(f"reduce dimension {d} is listed twice in dims {given!r}")
        result.append(d)
    return tuple(sorted(result))


def _result_shape(t: Tensor, dims: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(n for d, n in enumerate(t.shape) if d not in dims)


# ---- the walk over the input's tiles -------------------------------------------------------------
def _memory_order(t: Tensor) -> list[int]:
    """A permutation of ``t``'s dims that reads a strided view in its variable's order: dims of
    size > 1 by decreasing |stride| (stable), singleton dims left in place."""
    order = list(range(t.rank))
    layout = t.layout()
    if t.rank < 2 or not isinstance(layout, Strided):
        return order
    moving = [d for d in order if t.shape[d] > 1]
    ranked = iter(sorted(moving, key=lambda d: -abs(layout.strides[d])))
    return [d if t.shape[d] == 1 else next(ranked) for d in order]


def split_run(begin: int, end: int, shape: tuple[int, ...]) -> list[tuple[tuple[int, int], ...]]:
    """Cut the flat row-major range ``[begin, end)`` of ``shape`` into boxes (a ``(lo, hi)`` per
    dimension): fixed leading indices, one partial dimension, full trailing dimensions."""
    if begin >= end:
        return []
    if not shape:
        return [()]
    inner = math.prod(shape[1:])
    first, first_rem = divmod(begin, inner)
    last, last_rem = divmod(end, inner)
    rest = shape[1:]
    if first == last:
        return [((first, first + 1),) + box for box in split_run(first_rem, last_rem, rest)]
    boxes = []
    if first_rem:
        boxes += [((first, first + 1),) + box for box in split_run(first_rem, inner, rest)]
        first += 1
    if last > first:
        boxes.append(((first, last),) + tuple((0, n) for n in rest))
    if last_rem:
        boxes += [((last, last + 1),) + box for box in split_run(0, last_rem, rest)]
    return boxes


def _runs(positions: np.ndarray) -> list[tuple[int, int]]:
    """``(begin, end)`` of the runs of consecutive values in a sorted int array."""
    if len(positions) == 0:
        return []
    breaks = np.flatnonzero(np.diff(positions) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [len(positions)]))
    return [(int(positions[s]), int(positions[e - 1]) + 1) for s, e in zip(starts, ends)]


def _gather(flat: Tensor, positions: np.ndarray) -> Tensor:
    """The elements ``positions`` (sorted) of the 1-D tensor ``flat``, as a view."""
    runs = _runs(positions)
    if len(runs) == 1 and runs[0] == (0, flat.num_elements):
        return flat
    return concat([flat.slice(b, e, 0) for b, e in runs], 0)


def _distinct_sorted(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted distinct keys, the sort order and the start of each key's group in that order
    (sorting, not ``np.unique``, whose hash path is slow on millions of keys in numpy >= 2.3)."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    first = np.concatenate(([True], ordered[1:] != ordered[:-1])) if len(keys) else \
        np.zeros(0, dtype=bool)
    starts = np.flatnonzero(first)
    return ordered[starts], order, starts


class _Plan:
    """Where each input element goes: boxes per tile and the (tile, output) pairs they feed."""

    def __init__(self, graph: Graph, t: Tensor, dims: tuple[int, ...]) -> None:
        rank = t.rank
        perm = _memory_order(t)
        self.tp = t if perm == list(range(rank)) else t.dim_shuffle(perm)
        kept_pos = [i for i, d in enumerate(perm) if d not in dims]
        red_pos = [i for i, d in enumerate(perm) if d in dims]
        kept = [d for d in range(rank) if d not in dims]
        self.out_perm = [kept.index(perm[i]) for i in kept_pos]
        self.shuffle = kept_pos + red_pos
        self.num_outputs = math.prod(self.tp.shape[i] for i in kept_pos)
        mapping = graph.get_tile_mapping(self.tp)
        if not mapping.is_complete:
            raise GrucMappingError(f"reduce input {t!r} is not fully mapped to tiles; map it first")
        out_strides = contiguous_strides(tuple(self.tp.shape[i] for i in kept_pos))
        boxes = []
        for begin, end, tile in zip(mapping.begins.tolist(), mapping.ends.tolist(),
                                    mapping.tiles.tolist()):
            for box in split_run(begin, end, self.tp.shape):
                n = math.prod(box[i][1] - box[i][0] for i in kept_pos)
                m = math.prod(box[i][1] - box[i][0] for i in red_pos)
                o0 = sum(box[i][0] * s for i, s in zip(kept_pos, out_strides))
                boxes.append((tile, o0, n, m, box))
        boxes.sort(key=lambda b: (b[0], b[1]))
        self.boxes = boxes
        self.box_tile = np.array([b[0] for b in boxes], dtype=np.int64)
        self.box_o0 = np.array([b[1] for b in boxes], dtype=np.int64)
        self.box_n = np.array([b[2] for b in boxes], dtype=np.int64)
        box_m = np.array([b[3] for b in boxes], dtype=np.int64)
        # every (tile, output) pair, with the number of input elements behind it
        total = int(self.box_n.sum())
        before = np.cumsum(self.box_n) - self.box_n
        outputs = np.repeat(self.box_o0 - before, self.box_n) + np.arange(total, dtype=np.int64)
        tiles = np.repeat(self.box_tile, self.box_n)
        keys, order, starts = _distinct_sorted(tiles * self.num_outputs + outputs)
        self.pair_tile = keys // max(self.num_outputs, 1)
        self.pair_o = keys % max(self.num_outputs, 1)
        weights = np.add.reduceat(np.repeat(box_m, self.box_n)[order], starts)
        self.pair_key = keys
        self.count = np.bincount(self.pair_o, minlength=self.num_outputs)
        by_output = np.lexsort((self.pair_tile, -weights, self.pair_o))
        chosen = by_output[np.concatenate(([True], np.diff(self.pair_o[by_output]) != 0))] \
            if len(by_output) else by_output
        self.best_tile = np.full(self.num_outputs, UNMAPPED, dtype=np.int64)
        self.best_tile[self.pair_o[chosen]] = self.pair_tile[chosen]

    def region(self, box: tuple, rows: tuple[int, int] | None = None) -> Tensor:
        """The 2-D ``[outputs, elements]`` view of ``box``, or of its rows ``[a, b)``."""
        begins = [lo for lo, _ in box]
        ends = [hi for _, hi in box]
        view = self.tp.slice(begins, ends) if self.tp.rank else self.tp
        moving = [d for d in self.shuffle if ends[d] - begins[d] > 1]
        if moving != sorted(moving):  # moving singleton dims never changes the element order
            view = view.dim_shuffle(self.shuffle)
        n = math.prod(ends[i] - begins[i] for i in self.shuffle[:len(self.out_perm)])
        shape = (n, view.num_elements // n if n else 0)
        if view.shape != shape:
            view = view.reshape(shape)
        if rows is not None and rows != (0, n):
            view = view.slice(rows[0], rows[1], 0)
        return view


# ---- emission -----------------------------------------------------------------------------------
def _emit(graph: Graph, plan: _Plan, flat_out: Tensor, out_tiles: np.ndarray, op: Operation,
          in_dtype: DType, update: bool, scale: float, prog: Seq, name: str) -> None:
    """Add the partials compute set, the exchange copy and the final compute set to ``prog``."""
    num = plan.num_outputs
    final_kind = REDUCE_UPDATE if update else REDUCE
    direct = (plan.count == 1) & (plan.best_tile == out_tiles)
    pair_direct = direct[plan.pair_o]
    direct_keys = plan.pair_key[pair_direct]
    nd_keys = plan.pair_key[~pair_direct]
    nd_tile, nd_o = plan.pair_tile[~pair_direct], plan.pair_o[~pair_direct]
    prefix = np.concatenate(([0], np.cumsum(direct)))

    partials = None
    if len(nd_keys):
        partials = graph.add_variable(partials_dtype(in_dtype, op), (len(nd_keys),),
                                      f"{name}/partials")
        graph.set_tile_mapping(partials, TileMapping.from_element_tiles(nd_tile))

    # stage 1: per tile, direct outputs (vertex A) and partials (vertex B)
    direct_regions: dict[int, list[tuple[int, Tensor]]] = {}
    partial_regions: dict[int, list[tuple[int, Tensor]]] = {}
    for tile, o0, n, _, box in plan.boxes:
        if n == 0:
            continue
        base = tile * num
        direct_count = int(prefix[o0 + n] - prefix[o0])
        if direct_count == n:
            pieces = [(0, n, True)]
        elif direct_count == 0:
            pieces = [(0, n, False)]
        else:
            flags = direct[o0:o0 + n]
            cuts = np.concatenate(([0], np.flatnonzero(np.diff(flags)) + 1, [n])).tolist()
            pieces = [(a, b, bool(flags[a])) for a, b in zip(cuts[:-1], cuts[1:])]
        for a, b, is_direct in pieces:
            region = plan.region(box, (a, b))
            if is_direct:
                first = int(np.searchsorted(direct_keys, base))
                slot = int(np.searchsorted(direct_keys, base + o0 + a)) - first
                direct_regions.setdefault(tile, []).append((slot, region))
            else:
                first = int(np.searchsorted(nd_keys, base))
                slot = int(np.searchsorted(nd_keys, base + o0 + a)) - first
                partial_regions.setdefault(tile, []).append((slot, region))
    single_stage = partials is None
    stage1 = graph.add_compute_set(name if single_stage else f"{name}/partials")
    for tile in sorted(set(direct_regions) | set(partial_regions)):
        base = tile * num
        if tile in direct_regions:
            lo, hi = np.searchsorted(direct_keys, [base, base + num])
            outputs = direct_keys[lo:hi] - base
            regions = direct_regions[tile]
            graph.add_vertex(stage1, final_kind, {"out": _gather(flat_out, outputs),
                                                  "ins": [r for _, r in regions]}, tile=tile,
                             op=op.value, offsets=[s for s, _ in regions], scale=scale)
        if tile in partial_regions:
            lo, hi = np.searchsorted(nd_keys, [base, base + num])
            regions = partial_regions[tile]
            graph.add_vertex(stage1, REDUCE, {"out": partials.slice(int(lo), int(hi), 0),
                                              "ins": [r for _, r in regions]}, tile=tile,
                             op=op.value, offsets=[s for s, _ in regions], scale=1.0)
    prog.add(Execute(stage1))
    if single_stage:
        return
    _final_stage(graph, partials, nd_tile, nd_o, flat_out, out_tiles, op, final_kind, scale,
                 prog, name)


def _runs_of_pairs(*keys: np.ndarray, position: np.ndarray) -> np.ndarray:
    """Starts of the runs where every key stays equal and ``position`` goes up by one."""
    if len(position) == 0:
        return np.zeros(0, dtype=np.int64)
    change = np.diff(position) != 1
    for key in keys:
        change |= np.diff(key) != 0
    return np.concatenate(([0], np.flatnonzero(change) + 1))


def _final_stage(graph: Graph, partials: Tensor, nd_tile: np.ndarray, nd_o: np.ndarray,
                 flat_out: Tensor, out_tiles: np.ndarray, op: Operation, final_kind: str,
                 scale: float, prog: Seq, name: str) -> None:
    """Exchange the partials to their outputs' tiles and combine them there.

    The partials are handled in *blocks*: runs of consecutive outputs that one source tile sends to
    one home tile (consecutive partial slots, since a tile's partials are sorted by output).  Each
    remote block is one slice of the exchange copy; on the home tile each block is a ``[len, 1]``
    region, and remote blocks covering the same outputs (laid out side by side in the gathered
    variable) merge into one ``[len, sources]`` region — one region for a whole home tile when
    every source covers all of its outputs, the batch-axis reduction's usual shape.
    """
    homes = out_tiles[nd_o]
    order = np.lexsort((nd_o, nd_tile, homes))           # by home, then source, then output
    starts = _runs_of_pairs(homes[order], nd_tile[order], position=nd_o[order])
    lengths = np.diff(np.append(starts, len(order)))
    slots = order[starts]                               # first partial slot of each block
    block_home, block_source, block_first = homes[slots], nd_tile[slots], nd_o[slots]
    remote = np.flatnonzero(block_source != block_home)
    # gathered layout: by home, then the block's outputs, then source, so equal blocks sit together
    remote = remote[np.lexsort((block_source[remote], lengths[remote], block_first[remote],
                                block_home[remote]))]
    gathered_at = np.full(len(starts), -1, dtype=np.int64)
    gathered_at[remote] = np.cumsum(lengths[remote]) - lengths[remote]
    used = int(lengths[remote].sum())
    gathered = None
    if used:
        gathered = graph.add_variable(partials.dtype, (used,), f"{name}/gathered_partials")
        graph.set_tile_mapping(gathered, TileMapping.from_element_tiles(
            np.repeat(block_home[remote], lengths[remote])))
        # the partial slot each gathered element comes from; one copy slice per run of them
        size = lengths[remote]
        sources = np.repeat(slots[remote] - gathered_at[remote], size) + np.arange(used)
        bounds = np.append(_runs_of_pairs(position=sources), used).tolist()
        prog.add(Copy(concat([partials.slice(int(sources[a]), int(sources[a]) + (b - a), 0)
                              for a, b in zip(bounds[:-1], bounds[1:])], 0), gathered))

    final = graph.add_compute_set(f"{name}/final")
    outputs, _, _ = _distinct_sorted(nd_o)
    outputs = outputs[np.argsort(out_tiles[outputs], kind="stable")]   # by home, then output
    output_homes = out_tiles[outputs]
    local = np.flatnonzero(block_source == block_home)                   # blocks are by home
    for home in np.unique(block_home).tolist():
        lo, hi = np.searchsorted(output_homes, [home, home + 1])
        mine = outputs[lo:hi]
        lo, hi = np.searchsorted(block_home[local], [home, home + 1])
        mine_local = local[lo:hi]
        lo, hi = np.searchsorted(block_home[remote], [home, home + 1])
        far = remote[lo:hi]
        regions: list[Tensor] = []
        offsets: list[int] = []
        for b in mine_local.tolist():
            n, s = int(lengths[b]), int(slots[b])
            regions.append(partials.slice(s, s + n, 0).reshape((n, 1)))
            offsets.append(int(np.searchsorted(mine, block_first[b])))
        k = 0
        while k < len(far):
            b = far[k]
            same = k + 1
            while same < len(far) and block_first[far[same]] == block_first[b] and \
                    lengths[far[same]] == lengths[b]:
                same += 1
            n, count, at = int(lengths[b]), same - k, int(gathered_at[b])
            block = gathered.slice(at, at + n * count, 0)
            regions.append(block.reshape((n, 1)) if count == 1
                           else block.reshape((count, n)).transpose())
            offsets.append(int(np.searchsorted(mine, block_first[b])))
            k = same
        graph.add_vertex(final, final_kind, {"out": _gather(flat_out, mine), "ins": regions},
                         tile=home, op=op.combine.value, offsets=offsets, scale=scale)
    prog.add(Execute(final))


def _reduce_into(graph: Graph, t: Tensor, out: Tensor, dims: tuple[int, ...], op: Operation,
                 prog: Seq, update: bool, scale: float, name: str, new_output: bool) -> None:
    """Reduce ``t`` into ``out`` for both public entry points.  Elements of ``out`` left unmapped
    are mapped first (to a tile holding their inputs) so the final stage has a home for each; an
    empty input writes the op's identity (or leaves ``out`` alone when updating)."""
    if out.num_elements == 0:
        if new_output:
            graph.set_tile_mapping(out, 0)
        return
    if t.num_elements == 0:  # reduced dims of size 0: every output is the op's identity
        tiles = graph.element_tiles(out)
        if np.all(tiles == UNMAPPED):
            graph.map_tensor_linearly(out)
        elif np.any(tiles == UNMAPPED):
            graph.set_tile_mapping(out, TileMapping.from_element_tiles(
                np.where(tiles == UNMAPPED, 0, tiles)))
        if not update:
            value = identity(op, out.dtype)
            fill(graph, out, value, prog, f"{name}/identity")
        return
    plan = _Plan(graph, t, dims)
    flat_out = out.dim_shuffle(plan.out_perm) if plan.out_perm != sorted(plan.out_perm) else out
    if flat_out.shape != (plan.num_outputs,):
        flat_out = flat_out.reshape((plan.num_outputs,))
    out_tiles = np.array(graph.element_tiles(flat_out), dtype=np.int64)
    unmapped = out_tiles == UNMAPPED
    if np.any(unmapped):
        out_tiles = np.where(unmapped, plan.best_tile, out_tiles)
        graph.set_tile_mapping(flat_out, TileMapping.from_element_tiles(out_tiles))
    _emit(graph, plan, flat_out, out_tiles, op, t.dtype, update, scale, prog, name)


# ---- public API ---------------------------------------------------------------------------------
def reduce(graph: Graph, t: Tensor, dims: Iterable[int] | int, op: Operation | str, prog: Seq, *,
           out_type: DType | str | None = None, scale: float = 1.0, name: str = "") -> Tensor:
    """A new tensor: ``t`` reduced over ``dims`` with ``op`` and multiplied by ``scale``
    (popops ``reduce``).  The result is ``out_type`` (default: ``t``'s type) and mapped like the
    input reduced (see the module docstring)."""
    check_op_args(graph, prog, "reduce")
    t = _check_tensor(graph, t, "reduce input")
    op = operation_of(op)
    dims = _normalise_dims(t, dims)
    scale = finite_scale(scale, "reduce scale")
    out_dtype = t.dtype if out_type is None else dtype_of(out_type)
    check_reduce_types(t.dtype, out_dtype, op, scale)
    name = name or "reduce"
    out = graph.add_variable(out_dtype, _result_shape(t, dims), f"{name}/out")
    _reduce_into(graph, t, out, dims, op, prog, False, scale, name, new_output=True)
    return out


def reduce_with_output(graph: Graph, t: Tensor, out: Tensor, dims: Iterable[int] | int,
                       op: Operation | str, prog: Seq, *, update: bool = False, scale: float = 1.0,
                       name: str = "") -> None:
    """Write ``t`` reduced over ``dims`` into ``out`` (popops ``reduceWithOutput``); with
    ``update=True`` add it instead (``out += scale * reduce(t)``, ADD and SQUARE_ADD only).
    ``out``'s tile mapping is kept; elements it leaves unmapped are mapped like the input
    reduced."""
    check_op_args(graph, prog, "reduce_with_output")
    t = _check_tensor(graph, t, "reduce input")
    out = _check_tensor(graph, out, "reduce output")
    op = operation_of(op)
    dims = _normalise_dims(t, dims)
    scale = finite_scale(scale, "reduce scale")
    if not isinstance(update, (bool, np.bool_)):
        raise GrucTypeError(f"reduce update must be True or False, got {update!r}")
    if update and not op.is_add_family:
        raise GrucValueError(f"reduce with update=True needs ADD or SQUARE_ADD, not {op.name}")
    expected = _result_shape(t, dims)
    if out.shape != expected:
        raise GrucShapeError(f"reduce output has shape {list(out.shape)}, but reducing shape "
                             f"{list(t.shape)} over dims {list(dims)} gives {list(expected)}")
    check_reduce_types(t.dtype, out.dtype, op, scale)
    require_writable(out, "reduce_with_output")
    if share_elements(out, t):
        raise GrucValueError("reduce output overlaps its input; reduce into a separate tensor")
    _reduce_into(graph, t, out, dims, op, prog, bool(update), scale, name or "reduce",
                 new_output=False)
