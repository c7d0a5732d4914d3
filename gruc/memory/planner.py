"""The memory planner: every variable a byte offset on every tile that holds some of its elements.

Why: on the IPU all memory is allocated at compile time, per tile, and what does not fit on one
tile does not run — whatever the other 1471 tiles have free.  Poplar's answer, followed here, is
liveness-based reuse: *always-live* variables (constants, host-visible tensors, state carried
between runs) get an exclusive region packed from address 0; *not-always-live* variables share
the rest, two of them overlapping only if no program step needs both (``gruc.analysis.liveness``).
poplibs writes ``WriteUndef`` on sequence tensors precisely to move them into the second group.
A variable the module never uses (no step touches it, no host stream names it — such as a
temporary a pass rewrote away, left in the shared graph) gets no bytes.

Layout rule.  On each tile a variable occupies one contiguous block: its elements on that tile,
in flat element order, ``count_on_tile * dtype.size`` bytes, starting at a multiple of
``target.memory_alignment``.  Blocks are accounted at their size rounded up to the alignment (the
allocation granule), so per-tile figures are whole granules.  The byte address of an element is::

    tile * target.bytes_per_tile + offset[variable, tile] + rank * dtype.size

where ``rank`` is the element's position among its variable's elements on that tile.

Two regions, as on the IPU.  A tile's memory is a non-interleaved region and, from
``target.interleaved_memory_start``, an interleaved one, where consecutive 64-bit words alternate
between two banks so 128-bit loads and stores work; a variable a vertex field declared
``interleaved`` touches (the AMP's partial sums) must lie there, 16-byte aligned.  Each region
is planned on its own, from its start.

Allocation, per tile and region: always-live blocks in variable order from the region's start;
then not-always-live blocks, largest first (ties by variable index), each at the lowest aligned
offset that does not overlap an already placed block of an *interfering* variable (one live at a
common step).  This is first-fit, as in tinygrad's planner; it is deterministic, and it never
places two interfering variables on common bytes, which is the property the runtime depends on.
Tiles with the same *signature* (the same variables with the same byte counts) get the same plan,
computed once: a tensor spread linearly over 1472 tiles gives a handful of distinct signatures,
not 1472.  The plan also keeps, per signature, the not-always-live bytes at every step, which
the memory model (:mod:`gruc.runtime.footprint`) adds exchange buffers to.

Host layout.  The runtime keeps a tile's memory in one host buffer: region 0 from 0, region 1
from ``interleaved_base`` (the most region 0 holds on any tile, rounded up), so the host holds
what the tiles hold, not the unused address space below the interleaved start.

Out of memory does not stop planning (Poplar's IPUModel compiles and reports); the plan lists the
tiles that do not fit, and ``strict=True`` raises :class:`GrucOutOfMemory` naming the worst one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gruc.analysis.liveness import Liveness, analyse_liveness
from gruc.errors import GrucMappingError, GrucOutOfMemory
from gruc.ir.module import Module
from gruc.ir.program import Execute
from gruc.memory.plan import MemoryPlan, TileOverflow
from gruc.text import plural

__all__ = ["plan_memory", "tile_total", "LARGEST_SHOWN"]

LARGEST_SHOWN = 5


# ---- planning -------------------------------------------------------------------------------------
def _align(nbytes: np.ndarray | int, alignment: int):
    return -(-nbytes // alignment) * alignment


def _first_fit(starts: np.ndarray, ends: np.ndarray, base: int, size: int) -> int:
    """Lowest offset >= base where [offset, offset + size) misses every [starts, ends).

    One sweep over the intervals sorted by start: the free gaps are the spaces between the running
    maximum of the ends and the next start, in increasing address order.
    """
    keep = ends > base
    if not keep.any():
        return base
    order = np.argsort(starts[keep], kind="stable")
    begin, end = starts[keep][order], ends[keep][order]
    reach = np.maximum.accumulate(end)
    gap_start = np.maximum(np.concatenate(([base], reach[:-1])), base)
    fits = np.flatnonzero(begin - gap_start >= size)
    return int(gap_start[fits[0]]) if len(fits) else int(reach[-1])


def _periods(graph, variable) -> list[tuple[int, np.ndarray, int]]:
    """``(first id, tiles, rows)`` per stretch of ``variable`` whose rows have the same tiles:
    the tiles of its first row and how many rows repeat them — a sequence laid out alike at
    every step is one stretch, a sharded one a stretch per shard, planned and its addresses
    looked up from one step's runs each.  The graph knows them of a variable mapped from one
    row's tiles, whole or a range of rows at a time (its other rows' tiles are never read); any
    other variable's tiles are compared row with row, up to the first difference (one stretch
    of all its elements if its rows differ)."""
    stretches = graph.row_stretches(variable)
    if stretches:
        return stretches
    tiles = graph.element_tiles(variable)
    if variable.rank > 1 and variable.shape[0] > 1:
        row = variable.num_elements // variable.shape[0]
        if np.array_equal(tiles[row:], tiles[:-row]):
            return [(variable.first_id, tiles[:row], variable.shape[0])]
    return [(variable.first_id, tiles, 1)]


def run_starts(tiles: np.ndarray) -> np.ndarray:
    """Where each maximal run of equal values of ``tiles`` begins (positions, ascending): one
    compare per element, a position per run (a linearly mapped sequence of 33 million elements
    has a few thousand runs)."""
    if not len(tiles):
        return np.zeros(0, np.int64)
    changes = np.flatnonzero(tiles[1:] != tiles[:-1]) + 1
    return np.concatenate(([0], changes)).astype(np.int64, copy=False)


def tile_runs(tiles: np.ndarray, starts: np.ndarray, first_id: int, size: int,
              counts: np.ndarray, firsts: np.ndarray, lengths: np.ndarray, run_tiles: np.ndarray,
              ranks: np.ndarray) -> int:
    """The runs of a variable whose ids start at ``first_id``, whose elements are ``size`` bytes,
    whose element tiles are ``tiles`` and whose runs begin at ``starts`` (:func:`run_starts`):
    each run's first id, length and tile, and its byte ``rank`` — the bytes of the variable's
    elements before it on its tile — written into the four arrays.  ``counts`` (zeros, one per
    tile) ends holding the variable's elements per tile.  Returns how many elements are unmapped
    (tile ``-1``).  Work per run, not per element, past :func:`run_starts`."""
    if not len(starts):
        return 0
    firsts[:] = first_id + starts
    lengths[:] = np.diff(np.append(starts, len(tiles)))
    run_tiles[:] = tiles[starts]
    mapped = np.flatnonzero(run_tiles >= 0)
    ranks[:] = 0
    if len(mapped):
        # a run's rank: the elements of the runs before it on its tile.  With the runs ordered by
        # tile (stably: in run order within a tile), that is the elements before it in that order
        # less those of the tiles before its own (tiles sorted as 16 bits where they fit: a radix
        # sort in numpy)
        keys, sizes = run_tiles[mapped], lengths[mapped]
        order = np.argsort(keys.astype(np.uint16) if len(counts) <= 1 << 16 else keys,
                           kind="stable")
        in_order = sizes[order]
        before = np.empty(len(mapped), np.int64)
        before[order] = np.cumsum(in_order) - in_order
        per_tile = np.bincount(keys, weights=sizes, minlength=len(counts)).astype(np.int64)
        ranks[mapped] = (before - (np.cumsum(per_tile) - per_tile)[keys]) * size
        counts += per_tile
    return int(lengths.sum() - lengths[mapped].sum())


INTERLEAVED_ALIGNMENT = 16
"""Alignment of interleaved blocks: the AMP's partials field is declared 16-byte aligned."""


@dataclass(frozen=True)
class _SignaturePlan:
    offsets: np.ndarray
    """Each block's offset from its region's start (in the signature's block order)."""
    always_live: int
    not_always_live_by_step: np.ndarray
    """Bytes of not-always-live blocks occupied at each step (int64, one per step)."""
    ends: tuple[int, int]
    """Highest offset used in each region (gaps included)."""


def _plan_region(variables: np.ndarray, sizes: np.ndarray, always: np.ndarray,
                 liveness: Liveness, offsets: np.ndarray) -> tuple[int, np.ndarray, int]:
    """Place one region's blocks (writing ``offsets``): always-live bytes, not-always-live bytes
    by step, and the region's end."""
    al = np.flatnonzero(always)
    offsets[al] = np.cumsum(sizes[al]) - sizes[al]
    al_end = int(sizes[al].sum())
    nal = np.flatnonzero(~always)
    total = al_end
    by_step = np.zeros(liveness.num_steps, dtype=np.int64)
    if len(nal):
        nal = nal[np.lexsort((variables[nal], -sizes[nal]))]
        live = liveness.step_matrix(variables[nal])
        as_float = live.astype(np.float32)
        interferes = (as_float @ as_float.T) > 0
        nal_sizes = sizes[nal]
        placed_start = np.zeros(len(nal), dtype=np.int64)
        placed_end = np.zeros(len(nal), dtype=np.int64)
        for i in range(len(nal)):
            others = np.flatnonzero(interferes[i, :i])
            start = _first_fit(placed_start[others], placed_end[others], al_end, int(nal_sizes[i]))
            placed_start[i], placed_end[i] = start, start + nal_sizes[i]
        offsets[nal] = placed_start
        total = max(total, int(placed_end.max()))
        by_step = nal_sizes @ live.astype(np.int64)
    return al_end, by_step, total


def _plan_signature(variables: np.ndarray, sizes: np.ndarray, always: np.ndarray,
                    interleaved: np.ndarray, liveness: Liveness) -> _SignaturePlan:
    """Each region of one tile signature planned on its own (see the module docstring)."""
    offsets = np.zeros(len(variables), dtype=np.int64)
    always_live, by_step, ends = 0, np.zeros(liveness.num_steps, dtype=np.int64), []
    for region in (~interleaved, interleaved):
        at = np.flatnonzero(region)
        if not len(at):
            ends.append(0)
            continue
        part = np.zeros(len(at), dtype=np.int64)
        al, steps, end = _plan_region(variables[at], sizes[at], always[at], liveness, part)
        offsets[at] = part
        always_live += al
        by_step = by_step + steps
        ends.append(end)
    return _SignaturePlan(offsets, always_live, by_step, (ends[0], ends[1]))


def interleaved_variables(module: Module, liveness: Liveness) -> np.ndarray:
    """Per variable of the graph: whether some vertex the module runs touches it through a field
    that must lie in interleaved memory."""
    flags = np.zeros(len(module.graph.variables), dtype=bool)
    seen = set()
    for step in liveness.steps:
        node = step.node
        if not isinstance(node, Execute) or id(node.compute_set) in seen:
            continue
        seen.add(id(node.compute_set))
        for vertex in node.compute_set.vertices:
            for name in vertex.kind.interleaved_fields(vertex):
                tensors = vertex.fields[name]
                for tensor in tensors if isinstance(tensors, tuple) else (tensors,):
                    for variable in tensor.variables():
                        flags[variable.index] = True
    return flags


def tile_total(ends: np.ndarray, interleaved_start: int) -> np.ndarray:
    """A tile's highest address (gaps included) from its regions' ends ``[2, tiles]``: the
    interleaved region starts at ``interleaved_start``, or right after a non-interleaved region
    that has outgrown it (Poplar's overflowed allocations)."""
    base = np.maximum(ends[0], interleaved_start)
    return np.where(ends[1] > 0, base + ends[1], ends[0])


def plan_memory(module: Module, liveness: Liveness | None = None, *,
                strict: bool = False) -> MemoryPlan:
    """Plan the memory of ``module`` (see the module docstring); never mutates it.

    ``liveness`` may be passed if already computed for this module.  Raises
    :class:`GrucMappingError` if a variable the module uses is not fully mapped, and, with
    ``strict``, :class:`GrucOutOfMemory` if some tile does not fit.
    """
    graph = module.graph
    target = graph.target
    if liveness is None:
        liveness = analyse_liveness(module)
    num_tiles, capacity, alignment = target.num_tiles, target.bytes_per_tile, target.memory_alignment

    # Runs of consecutive elements on one tile, and blocks (a variable's elements on one tile),
    # for every variable that gets memory: found over the first row of each stretch of rows
    # alike (a sequence, or each shard of one), else over all of it.
    allocated = [index for index, variable in enumerate(graph.variables)
                 if variable.num_elements and index in liveness.used]
    periods_of = [[(first, np.ascontiguousarray(tiles), rows)
                   for first, tiles, rows in _periods(graph, graph.variables[index])]
                  for index in allocated]
    starts_of = [[run_starts(tiles) for _, tiles, _ in periods] for periods in periods_of]
    counts = [len(starts) for starts_list in starts_of for starts in starts_list]
    run_at = np.concatenate(([0], np.cumsum(counts, dtype=np.int64))).tolist()
    runs = np.empty((run_at[-1], 6), dtype=np.int64)
    run_first, run_length, run_tile, run_within, run_size, run_turn = runs.T
    run_block = np.empty(run_at[-1], dtype=np.int64)
    segments = np.array([(first, len(tiles), rows) for periods in periods_of
                         for first, tiles, rows in periods], dtype=np.int64).reshape(-1, 3)
    blocks, first_block, segment = [], 0, 0
    for index, periods, starts_list in zip(allocated, periods_of, starts_of):
        variable = graph.variables[index]
        size = variable.dtype.size
        per_tile = np.zeros(num_tiles, dtype=np.int64)  # the variable's elements on each tile
        begin = run_at[segment]
        for (first, tiles, rows), starts in zip(periods, starts_list):
            start, end = run_at[segment], run_at[segment + 1]
            segment += 1
            in_row = np.zeros(num_tiles, dtype=np.int64)
            unmapped = tile_runs(tiles, starts, first, size, in_row, run_first[start:end],
                                 run_length[start:end], run_tile[start:end],
                                 run_within[start:end])
            if unmapped:
                raise GrucMappingError(
                    f"variable {variable.name!r} ({variable.dtype}{list(variable.shape)}) is "
                    f"used by the module but {unmapped * rows} of its {variable.num_elements} "
                    "elements have no tile; map it (set_tile_mapping / map_tensor_linearly) "
                    "before planning memory")
            np.multiply(in_row.take(run_tile[start:end]), size, out=run_turn[start:end])
            run_within[start:end] += per_tile.take(run_tile[start:end], mode="clip") * size
            per_tile += in_row * rows
        end = run_at[segment]
        block_tiles = np.flatnonzero(per_tile)
        block_of_tile = np.zeros(num_tiles, dtype=np.int64)
        block_of_tile[block_tiles] = np.arange(first_block, first_block + len(block_tiles))
        np.take(block_of_tile, run_tile[begin:end], out=run_block[begin:end], mode="clip")
        run_size[begin:end] = size
        blocks.append((np.full(len(block_tiles), index, dtype=np.int64), block_tiles,
                       per_tile[block_tiles] * size))
        first_block += len(block_tiles)
    joined = (lambda k: np.concatenate([block[k] for block in blocks]) if blocks
              else np.zeros(0, np.int64))
    block_variable, block_tile, block_nbytes = joined(0), joined(1), joined(2)
    interleaved_set = interleaved_variables(module, liveness)
    block_interleaved = interleaved_set[block_variable]
    block_size = _align(block_nbytes, np.where(block_interleaved,
                                               max(alignment, INTERLEAVED_ALIGNMENT), alignment))
    always_set = np.zeros(len(graph.variables), dtype=bool)
    always_set[list(liveness.always_live)] = True
    block_always = always_set[block_variable]

    # Plan each distinct tile signature once.
    by_tile = np.lexsort((block_variable, block_tile))
    tiles_sorted = block_tile[by_tile]
    cuts = np.flatnonzero(np.diff(tiles_sorted)) + 1
    block_offset = np.zeros(len(block_variable), dtype=np.int64)
    always_live_bytes = np.zeros(num_tiles, dtype=np.int64)
    region_ends = np.zeros((2, num_tiles), dtype=np.int64)
    tile_signature = np.full(num_tiles, -1, dtype=np.int64)
    plans: dict[tuple, int] = {}
    signature_plans: list[_SignaturePlan] = []
    for group in np.split(by_tile, cuts) if len(by_tile) else []:
        variables, sizes = block_variable[group], block_size[group]
        signature = (variables.tobytes(), sizes.tobytes())
        number = plans.get(signature)
        if number is None:
            number = plans[signature] = len(signature_plans)
            signature_plans.append(_plan_signature(variables, sizes, block_always[group],
                                                   block_interleaved[group], liveness))
        plan = signature_plans[number]
        tile = int(block_tile[group[0]])
        block_offset[group] = plan.offsets
        always_live_bytes[tile] = plan.always_live
        region_ends[:, tile] = plan.ends
        tile_signature[tile] = number
    nal_by_step = (np.stack([plan.not_always_live_by_step for plan in signature_plans])
                   if signature_plans else np.zeros((0, liveness.num_steps), dtype=np.int64))
    nal_bytes = np.zeros(num_tiles, dtype=np.int64)
    used = tile_signature >= 0
    if nal_by_step.shape[1]:
        nal_bytes[used] = nal_by_step.max(axis=1)[tile_signature[used]]
    interleaved_base = int(_align(int(region_ends[0].max(initial=0)), INTERLEAVED_ALIGNMENT))
    block_offset[block_interleaved] += interleaved_base
    total_bytes = tile_total(region_ends, target.interleaved_memory_start)

    overflows = []
    for tile in np.flatnonzero(total_bytes > capacity).tolist():
        on_tile = np.flatnonzero(block_tile == tile)
        on_tile = on_tile[np.lexsort((block_variable[on_tile], -block_nbytes[on_tile]))]
        largest = tuple((graph.variables[int(v)].name, int(n)) for v, n in
                        zip(block_variable[on_tile[:LARGEST_SHOWN]], block_nbytes[on_tile[:LARGEST_SHOWN]]))
        overflows.append(TileOverflow(tile, int(total_bytes[tile]), capacity, largest))

    # a run's place on its tile: the bytes of its variable before it there, past its block's start
    run_within += block_offset[run_block]
    arrays = [block_variable, block_tile, block_offset, block_nbytes, block_size,
              always_live_bytes, nal_bytes, total_bytes, runs, block_interleaved, region_ends,
              tile_signature, nal_by_step]
    for array in arrays:
        array.flags.writeable = False
    segments.flags.writeable = False
    plan = MemoryPlan(
        liveness=liveness, num_tiles=num_tiles, capacity=capacity, alignment=alignment,
        block_variable=block_variable, block_tile=block_tile, block_offset=block_offset,
        block_nbytes=block_nbytes, block_size=block_size, always_live_bytes=always_live_bytes,
        not_always_live_bytes=nal_bytes, total_bytes=total_bytes,
        tiles_over_capacity=tuple(overflows), allocated=frozenset(allocated),
        num_signatures=len(plans), block_interleaved=block_interleaved,
        region_ends=region_ends, interleaved_base=interleaved_base,
        tile_signature=tile_signature, signature_not_always_live_by_step=nal_by_step,
        graph=graph, runs=runs, segments=segments)
    if strict and overflows:
        worst = max(overflows, key=lambda o: (o.bytes, -o.tile))
        others = len(overflows) - 1
        raise GrucOutOfMemory(f"out of memory: {worst}"
                              + (f"; {plural(others, 'other tile')} over capacity too"
                                 if others else ""))
    return plan
