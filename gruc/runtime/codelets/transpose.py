"""The block transposition codelet (``Transpose``) on the engines, and its cycles as poplibs'
estimators for popops ``Transpose2d``, ``Transpose`` and ``TransposeSupervisor`` give them.

The kind (:mod:`gruc.ir.codelets.transpose`) is ``out = in`` over a transposed view, so both
engines move it as one gather.  Its cycles are poplibs': a tile with ``N`` blocks of ``R x C``
source elements (``out``'s last two dims are ``[C, R]``) gets the vertices popops'
``addTransposeVertices`` (``popops/Rearrange.cpp``) would build there, costed by the estimators
of ``popops/popopsCycleEstimators.cpp`` (2021 era; the codelets of
``popops/codelets/Transpose*.cpp``):

* 2-byte data in blocks whose sides are multiples of four, within the repeat and stride limits
  (``canUseFastTranspose``): one single-worker ``Transpose`` when the tile has one block (or at
  most four 4 x 4 blocks), else one ``TransposeSupervisor`` whose six workers take
  ``ceil(N / 6)`` blocks each;
* anything else (every 4-byte type): the blocks split over up to six workers
  (``splitRegionsBetweenWorkers``), each a ``Transpose2d`` (or a ``Transpose`` if its share
  passes the fast test).

Worker estimates are in thread cycles and cost the tile six times the busiest worker
(:func:`~gruc.runtime.codelets.poplibs_estimates.worker_tile_cycles`' rule); the supervisor's
estimate is in tile cycles already.
"""

from __future__ import annotations

import numpy as np

from gruc.ir.codelets.transpose import TRANSPOSE, can_use_fast_transpose, tile_blocks
from gruc.ir.graph import Vertex
from gruc.runtime.cost import cycle_estimator
from gruc.runtime.interp import Prepared, numpy_vertex
from gruc.runtime.lower import DeviceMemory, LoweredVertex
from gruc.target import RPT_COUNT_MAX, STRIDE_LIMIT, Target

UNPACK_CYCLES = 1
"""``getUnpackCost`` of the fast vertices' ``COMPACT_PTR`` vectors aligned to 8 bytes (a scaled
64-bit pointer): one cycle to unpack."""

SUPERVISOR_CYCLES = 7
"""``TransposeSupervisor``'s own code: the supervisor runs 7 cycles and starts each worker past
the first 7 cycles of the worker codelet."""


@numpy_vertex(TRANSPOSE)
def _numpy_transpose(vertex: LoweredVertex) -> Prepared:
    """The definition: ``out = in`` (the transposition is ``in``'s view)."""
    out, source = vertex.fields["out"], vertex.fields["in"]

    def run(memory: DeviceMemory) -> None:
        data = memory.view(out.dtype)
        data[out.index] = data[source.index]

    return run


def fast_worker_cycles(rows: int, cols: int, blocks: int) -> int:
    """``TransposeWorkerCycles``: one worker transposing ``blocks`` 2-byte blocks with the fast
    codelet (sides in fours), with the unpacking of its pointers."""
    r4, c4 = rows // 4, cols // 4
    if r4 == 1 and c4 == 1:
        cycles = 17 + 12 if blocks == 1 else 17 + 20 + (blocks - 2) * 4
    elif c4 == 1:
        cycles = 27 + blocks * (15 + (20 + 4 * (r4 - 2)))
    else:
        cycles = 29 + blocks * (18 + r4 * (12 + 4 * (c4 - 2)))
    return cycles + UNPACK_CYCLES


def transpose_2d_cycles(two_byte: bool, rows: int, cols: int, blocks: int) -> int:
    """``Transpose2d``'s estimate: one worker transposing ``blocks`` blocks of ``rows x cols``."""
    if not two_byte:
        if (rows % 2 == 0 and cols % 2 == 0 and cols // 2 <= RPT_COUNT_MAX
                and rows * (cols - 2) // 2 < STRIDE_LIMIT and rows < STRIDE_LIMIT):
            return 27 + blocks * (11 + rows // 2 * (6 + 3 * (cols // 2 - 1)))
        return 13 + blocks * (8 + cols * (5 + rows * 4 // 2))
    if (rows % 4 == 0 and cols % 4 == 0 and cols >= 8 and cols // 4 <= RPT_COUNT_MAX
            and 1 + 3 * (cols // 4) < STRIDE_LIMIT):
        return 37 + blocks * (12 + rows // 4 * (15 + 4 * (cols // 4 - 2)))
    if rows % 4 == 0 and cols == 4 and rows // 4 <= RPT_COUNT_MAX \
            and 1 + 3 * (rows // 4) < STRIDE_LIMIT:
        if rows == 4:
            return 32 + 15 * blocks
        return 28 + blocks * (17 + (20 + 4 * (rows // 4 - 2)))
    return 15 + blocks * (8 + cols * (5 + rows * 5 // 2))


def transpose_tile_cycles(two_byte: bool, rows: int, cols: int, blocks: int,
                          workers: int) -> int:
    """The cycles of the vertices ``addTransposeVertices`` puts on a tile holding ``blocks``
    source blocks of ``rows x cols`` (see the module docstring)."""
    if blocks == 0:
        return 0
    if can_use_fast_transpose(two_byte, rows, cols, blocks):
        if blocks == 1 or (rows == 4 and cols == 4 and blocks <= 4):
            return workers * fast_worker_cycles(rows, cols, blocks)
        per_worker = -(-blocks // workers) if blocks > workers else 1
        worker = fast_worker_cycles(rows, cols, per_worker) + UNPACK_CYCLES - SUPERVISOR_CYCLES
        return SUPERVISOR_CYCLES + workers * worker
    share = -(-blocks // workers)  # the busiest of the balanced worker shares
    if can_use_fast_transpose(two_byte, rows, cols, share):
        return workers * fast_worker_cycles(rows, cols, share)
    return workers * transpose_2d_cycles(two_byte, rows, cols, share)


@cycle_estimator(TRANSPOSE)
def _transpose_cycles(vertex: Vertex, elements: np.ndarray, target: Target) -> np.ndarray:
    """Per tile, the cycles of transposing the blocks of ``out`` it holds."""
    rows, cols, blocks = tile_blocks(vertex, elements)
    two_byte = vertex.fields["out"].dtype.size == 2
    cycles = np.zeros(target.num_tiles, dtype=np.int64)
    for count in np.unique(blocks[blocks > 0]).tolist():
        cycles[blocks == count] = transpose_tile_cycles(two_byte, rows, cols, int(count),
                                                        target.num_worker_contexts)
    return cycles
