"""The memory plan's compiled kernels: a variable's runs on tiles, and element addresses.

A plan stores, per run of consecutive elements of a variable on one tile, where the run starts
(:class:`~gruc.passes.memory_plan.MemoryPlan`); a per-element table of the whole module would hold
hundreds of millions of addresses for a long sequence.  A variable whose element tiles repeat
row after row (a sequence laid out alike at every step: :func:`repeats_rows`) stores the runs of
its first row only, each with the bytes one row adds on its tile — so a sequence of 2,000 steps
keeps as many runs as one of 2.  :func:`tile_runs` finds a row's runs and their place in its
per-tile blocks in one pass over its element tiles (no sort); :func:`fill_addresses` answers an
address query by walking the runs — for an id array, or for a strided view without
materialising its ids.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic


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
def count_runs(tiles):  # pragma: no cover (compiled)
    """How many maximal runs of equal values ``tiles`` has."""
    if tiles.shape[0] == 0:
        return 0
    count = 1
    for k in range(1, tiles.shape[0]):
        count += tiles[k] != tiles[k - 1]
    return count


@njit(cache=True, nogil=True)
def tile_runs(tiles, first_id, size, counts, firsts, lengths, run_tiles,
              ranks):  # pragma: no cover (compiled)
    """The maximal runs of equal tiles in the element tiles of a variable whose ids start at
    ``first_id`` and whose elements are ``size`` bytes: each run's first id, length and tile, and
    its byte ``rank`` — the bytes of the variable's elements before it on its tile (written into
    arrays sized by :func:`count_runs`).  ``counts`` (zeros, one per tile) ends holding the
    variable's elements per tile.  Returns how many elements are unmapped (tile ``-1``).

    Two passes: where each run starts (one compare per element, a store per run: a linearly
    mapped sequence of 33 million elements has a few thousand runs), then each run's facts."""
    n = tiles.shape[0]
    if n == 0:
        return 0
    firsts[0] = first_id
    count = 1
    for k in range(1, n):
        if tiles[k] != tiles[k - 1]:
            firsts[count] = first_id + k
            count += 1
    unmapped = 0
    for run in range(count):
        end = firsts[run + 1] if run + 1 < count else first_id + n
        length = end - firsts[run]
        tile = tiles[firsts[run] - first_id]
        lengths[run], run_tiles[run] = length, tile
        if tile < 0:
            unmapped += length
            ranks[run] = 0
        else:
            ranks[run] = counts[tile] * size
            counts[tile] += length
    return unmapped


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
def repeats_rows(tiles, period):  # pragma: no cover (compiled)
    """Whether ``tiles`` is its first ``period`` values over and over (a sequence laid out alike
    at every step); stops at the first difference."""
    for k in range(period, tiles.shape[0]):
        if tiles[k] != tiles[k - period]:
            return False
    return True


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
