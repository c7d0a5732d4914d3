"""Element addresses from a memory plan's runs, in one compiled pass.

A plan stores, per run of consecutive elements of a variable on one tile, where the run starts
(:class:`~gruc.passes.plan_memory.MemoryPlan`); a per-element table of the whole module would hold
hundreds of millions of addresses for a long sequence.  These kernels answer an address query by
walking the runs — for an id array, or for a strided view without materialising its ids.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def find_run(i, run, jump, first_id, length):  # pragma: no cover (compiled)
    """The run holding global id ``i``, or -1.  Views walk their variables in a few regular
    strides, so before a binary search it tries the current run, the next one and the run as far
    from the current one as the last jump went (a strided view's next row on the same tile)."""
    for guess in (run, run + 1, run + jump):
        if 0 <= guess < first_id.shape[0] and first_id[guess] <= i < first_id[guess] + length[guess]:
            return guess
    guess = np.searchsorted(first_id, i, side="right") - 1
    if guess < 0 or i >= first_id[guess] + length[guess]:
        return -1
    return guess


@njit(cache=True, nogil=True)
def fill_addresses(ids, offset, shape, strides, first_id, length, tile, within, elem_size,
                    stride, unit, result):  # pragma: no cover (compiled)
    """``result[k]`` = byte address // ``unit`` of the ``k``-th id: ``ids[k]`` if ``ids`` is not
    empty, else the ``k``-th id of the strided view ``offset + sum(index_d * strides[d])`` in
    row-major order (walked with an odometer, so no id array is materialised).  Returns the
    position of the first id in no run (an unallocated variable), or -1.  Addresses of a run are
    ``start + j * step`` with ``start`` divided once per run: every ``unit`` used divides the
    element size and the tile stride, and blocks are aligned to it."""
    rank = shape.shape[0]
    counter = np.zeros(rank, dtype=np.int64)
    walk = ids.shape[0] == 0
    i = offset
    run = jump = -1
    start = step = 0
    for k in range(result.shape[0]):
        if not walk:
            i = ids[k]
        if not (run >= 0 and first_id[run] <= i < first_id[run] + length[run]):
            found = find_run(i, run, jump, first_id, length)
            if found < 0:
                return k
            if run >= 0 and found != run + 1:
                jump = found - run
            run = found
            start = (tile[run] * stride + within[run]) // unit - first_id[run] * (elem_size[run] // unit)
            step = elem_size[run] // unit
        result[k] = start + i * step
        if walk:
            d = rank - 1
            while d >= 0:
                counter[d] += 1
                i += strides[d]
                if counter[d] < shape[d]:
                    break
                i -= strides[d] * shape[d]
                counter[d] = 0
                d -= 1
    return -1
