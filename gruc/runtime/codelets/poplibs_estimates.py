"""poplibs' cycle estimators of the 2021-03 era, and the rules that turn vertices into tile cycles.

Poplar's IPUModel took every compute set's cycles per tile from the estimator poplibs registered
for each codelet (``popops/popopsCycleEstimators.cpp``, ``popnn/popnnCycleEstimators.cpp``,
``popops/reduction/CycleEstimationFunctions.cpp``).  This module restates those formulas, with
their constants, as vectorised numpy functions (one value per tile, or per worker vertex), and
the rules poplibs' builders used to pick and size the vertices a tile runs:

* ``splitRegionsBetweenWorkers`` (``poputil/Util.cpp`` ``splitRegions``): a tile's contiguous
  regions become at most six *worker* vertices of about equal work (:func:`split_regions`);
* the units: a *supervisor* estimate is in machine cycles (``6 x`` its slowest worker plus the
  supervisor's own code); a *worker* estimate is in thread cycles, and the six worker contexts
  of a tile run in turn, one cycle each, so a tile's worker vertices cost ``6 x`` the busiest
  context's sum (:func:`worker_tile_cycles`); supervisor vertices on a tile run one after the
  other and add up.

Which version.  The constants are those of the estimators that returned ``std::uint64_t`` through
``MAKE_CYCLE_ESTIMATOR_NAME`` and ``poplibs::CycleEstimatorTable`` — the era of the GRU figures
(Poplar SDK of 2021-03, poplibs ``f9273583``); ``/work/research/estimators.md`` §0 dates them.
Where two versions exist the choice is said at the constant (:data:`SUPERVISOR_OVERHEAD`, the
unary table).  Every function names its poplibs source.  The codes are not copied: each formula
is restated from the source's arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gruc.ir import expr as ex
from gruc.types import BOOL, FLOAT, HALF, INT, UNSIGNED_INT, DType

SUPERVISOR_OVERHEAD = 198
"""``basicOpSupervisorOverhead()`` (``poplibs_support/popopsPerformanceEstimation.cpp``): the
supervisor's own cycles in every popops 1D supervisor vertex.  198 (= 33 supervisor instructions
of 6 cycles) is the value of the 2021 sources that still used ``MAKE_CYCLE_ESTIMATOR_NAME``; the
pre-2019 sources have 47 and today's ``PerformanceEstimation.cpp`` 11.  The research note
(``estimators.md`` §0) argues for 198 at 2021-03: a switch would have moved the GRU's figures by
far more than the 2 % they moved over 2020-07..2021-03."""

ATOMIC_STORE_GRANULARITY = 4
"""``Target::getAtomicStoreGranularity()``, in bytes; poplibs compares it with a vector width in
*elements* (``max(vectorWidth, atomicStoreGranularity)``) and so does gruc."""

Info = tuple[int, bool, int]
"""popops' ``OpPerformanceInfo``: ``(cyclesPerLoop, naturalVectorWidth, loopUnrollFactor)``."""


def ceil_div(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    return -(-np.asarray(a, dtype=np.int64) // b)


# ---- the per-op tables (popopsCycleEstimators.hpp, 2021-03 era) ----------------------------------
U, B = ex.Unary, ex.Binary
_F, _H, _I, _U, _B = FLOAT.name, HALF.name, INT.name, UNSIGNED_INT.name, BOOL.name


def _table(rows: dict) -> dict[tuple, Info]:
    """``{(op, type): info}`` from ``{op: {types: info}}`` (``info`` padded to three fields)."""
    out = {}
    for op, by_type in rows.items():
        for types, info in by_type.items():
            for name in types.split(","):
                out[(op, name)] = (info + (False, 0))[:2] + ((info[2],) if len(info) > 2 else (0,))
    return out


UNARY: dict[tuple, Info] = _table({
    U.ABS: {"float,half": (1, False), "int": (2, False)},
    U.CEIL: {"float,half": (2, True)}, U.FLOOR: {"float,half": (2, True)},
    U.ROUND: {"float,half": (2, True)},
    U.COS: {"float,half": (2300, False)}, U.SIN: {"float,half": (2300, False)},
    U.INVERSE: {"half": (15, True), "float": (5, True)},
    U.EXP: {"float,half": (2, True)},
    U.EXPM1: {"float": (4, False), "half": (5, True)},
    U.IS_FINITE: {"float,half": (5, True)},
    U.LOG: {"float": (60, True), "half": (15, True)},
    U.LOG1P: {"float,half": (180, True)},
    U.LOGICAL_NOT: {"bool": (17, False)},
    U.NEG: {"float,half": (1, True), "int": (2, False)},
    U.SIGNUM: {"float,half": (5, True), "int": (5, False)},
    U.SQRT: {"float,half": (23, False), "int": (110, False)},
    U.SQUARE: {"float,half,int,unsigned_int": (1, True)},
    U.TANH: {"float": (1, True), "half": (2, True)},
    U.SIGMOID: {"float": (1, False), "half": (2, True)},
    U.RSQRT: {"float": (1, False), "half": (3, True)},
})
"""``unaryOpPerfInfo``.  The 2021 sources pair this table (``{1, vectorised}``-style entries)
with the ``MAKE_CYCLE_ESTIMATOR_NAME`` estimators; today's re-benchmarked table (TANH float
``{12, unroll 2}`` ...) came with the later API, so gruc takes this one (``estimators.md`` §1.2,
open question 2).  RELU has no entry in this era's table."""

UNARY_IN_PLACE: dict[tuple, Info] = {**UNARY, **_table({
    U.ABS: {"float,half": (1, True), "int": (2, False)},
    U.LOGICAL_NOT: {"bool": (17, True)},
    U.TANH: {"float": (1, False), "half": (2, True)},
})}
"""``unaryOpInPlacePerfInfo``: as :data:`UNARY` but for these rows (IS_FINITE has none)."""
del UNARY_IN_PLACE[(U.IS_FINITE, _F)], UNARY_IN_PLACE[(U.IS_FINITE, _H)]

_ARITH = {"int,unsigned_int": (7, False, 1)}
BINARY: dict[tuple, Info] = _table({
    B.ADD: {"float,half": (1, True), **_ARITH}, B.SUB: {"float,half": (1, True), **_ARITH},
    B.MUL: {"float,half": (1, True), **_ARITH},
    B.ATAN2: {"float": (272, False, 2), "half": (578, False, 4)},
    B.DIV: {"float": (10, False, 2), "half": (21, False, 4), "int": (277, False, 1),
            "unsigned_int": (265, False, 1)},
    B.AND: {"bool": (49, False, 4)}, B.OR: {"bool": (23, False, 4)},
    B.MAX: {"float": (4, False, 2), "half": (4, False, 4), "int": (7, False, 1),
            "unsigned_int": (8, False, 1)},
    B.MIN: {"float": (4, False, 2), "half": (4, False, 4), "int": (7, False, 1),
            "unsigned_int": (8, False, 1)},
    B.POW: {"float": (312, False, 1), "half": (325, False, 1)},
    B.REM: {"float": (133, False, 2), "half": (300, False, 4), "int": (292, False, 1),
            "unsigned_int": (282, False, 1)},
    B.EQ: {"float": (14, False, 4), "half": (9, False, 4), "int,unsigned_int": (29, False, 2),
           "bool": (49, False, 4)},
    B.GT: {"float": (14, False, 4), "half": (9, False, 4), "int": (30, False, 2),
           "unsigned_int": (29, False, 2), "bool": (49, False, 4)},
    B.GE: {"float": (14, False, 4), "half": (9, False, 4), "int,unsigned_int": (31, False, 2),
           "bool": (17, False, 4)},
    B.LT: {"float": (14, False, 4), "half": (9, False, 4), "int,unsigned_int": (30, False, 2),
           "bool": (49, False, 4)},
    B.LE: {"float": (14, False, 4), "half": (9, False, 4), "int,unsigned_int": (31, False, 2),
           "bool": (17, False, 4)},
    B.NE: {"float": (20, False, 4), "half": (11, False, 4), "int,unsigned_int": (29, False, 2),
           "bool": (49, False, 4)},
})
"""``binaryOpPerfInfo``."""

BINARY_IN_PLACE: dict[tuple, Info] = {
    key: info for key, info in BINARY.items() if key[0] not in ex.COMPARISONS or key[1] == _B}
"""``binaryOpInPlacePerfInfo``: :data:`BINARY` (comparisons of bool only) but for these rows."""
BINARY_IN_PLACE.update(_table({
    B.DIV: {"unsigned_int": (264, False, 1)}, B.OR: {"bool": (11, False, 4)},
    B.GE: {"bool": (13, False, 4)}, B.LE: {"bool": (13, False, 4)},
}))

_BARITH = {"int,unsigned_int": (6, False, 1)}
BROADCAST: dict[tuple, Info] = _table({
    B.ADD: {"float,half": (1, True), **_BARITH}, B.SUB: {"float,half": (1, True), **_BARITH},
    B.MUL: {"float,half": (1, True), **_BARITH},
    B.ATAN2: {"float": (272, False, 2), "half": (578, False, 4)},
    B.DIV: {"float": (8, False, 2), "half": (21, False, 4), "int": (277, False, 1),
            "unsigned_int": (260, False, 1)},
    B.AND: {"bool": (12, False, 4)}, B.OR: {"bool": (12, False, 4)},
    B.MAX: {"float": (3, False, 2), "half": (3, False, 4), "int": (6, False, 1),
            "unsigned_int": (7, False, 1)},
    B.MIN: {"float": (3, False, 2), "half": (3, False, 4), "int": (6, False, 1),
            "unsigned_int": (8, False, 1)},
    B.POW: {"float": (312, False, 1), "half": (325, False, 1)},
    B.REM: {"float": (93, False, 2), "half": (225, False, 4), "int": (280, False, 1),
            "unsigned_int": (267, False, 1)},
    B.EQ: {"float": (12, False, 4), "half": (8, False, 4), "int,unsigned_int": (16, False, 4),
           "bool": (25, False, 4)},
    B.GT: {"float": (12, False, 4), "half": (8, False, 4), "int,unsigned_int": (16, False, 4),
           "bool": (12, False, 4)},
    B.GE: {"float": (12, False, 4), "half": (8, False, 4), "int,unsigned_int": (20, False, 4),
           "bool": (12, False, 4)},
    B.LT: {"float": (12, False, 4), "half": (8, False, 4), "int,unsigned_int": (16, False, 4),
           "bool": (16, False, 4)},
    B.LE: {"float": (12, False, 4), "half": (8, False, 4), "int,unsigned_int": (20, False, 4),
           "bool": (16, False, 4)},
    B.NE: {"float": (18, False, 4), "half": (10, False, 4), "int,unsigned_int": (16, False, 4),
           "bool": (25, False, 4)},
})
"""``broadcastOpPerfInfo`` (the scalar-broadcast vertices)."""

BROADCAST_IN_PLACE: dict[tuple, Info] = {
    key: info for key, info in BROADCAST.items() if key[0] not in ex.COMPARISONS or key[1] == _B}
"""``broadcastOpInPlacePerfInfo``: :data:`BROADCAST` with comparisons of bool only."""

EXTERNAL_CODELET_OPS = frozenset({B.ADD, B.SUB, B.MUL})
"""``hasExternalCodelet``: ADD, SUBTRACT, MULTIPLY of float or half have assembly inner loops."""


def has_external_codelet(op: ex.Binary, dtype: DType) -> bool:
    return op in EXTERNAL_CODELET_OPS and dtype in (FLOAT, HALF)


# ---- splitting regions between workers, and the six contexts -------------------------------------
@dataclass(frozen=True)
class WorkerSplit:
    """Worker vertices made from a tile's regions, and the rows (pieces of regions) of each."""

    vertex_tile: np.ndarray
    """Tile of each worker vertex (ascending)."""
    row_vertex: np.ndarray
    """Vertex of each row."""
    row_size: np.ndarray
    """Elements of each row."""

    def per_vertex(self, row_cycles: np.ndarray, base: int | np.ndarray) -> np.ndarray:
        """Each vertex's estimate: ``base`` plus the sum of its rows' ``row_cycles``."""
        total = np.bincount(self.row_vertex, weights=row_cycles, minlength=len(self.vertex_tile))
        return np.rint(total).astype(np.int64) + base

    def vertex_elements(self) -> np.ndarray:
        return self.per_vertex(self.row_size.astype(np.float64), 0)

    def vertex_rows(self) -> np.ndarray:
        return np.bincount(self.row_vertex, minlength=len(self.vertex_tile)).astype(np.int64)


def split_regions(region_tile: np.ndarray, region_size: np.ndarray, grain: int,
                  min_elements: int, num_workers: int,
                  max_region: int | None = None) -> WorkerSplit:
    """``splitRegionsBetweenWorkers(target, regions, grain, minElements, UINT_MAX, maxRegion)``
    (``poputil/Util.cpp`` ``splitRegions``), for every tile at once.

    A tile's regions (``region_tile`` ascending, in address order on each tile) are laid end to
    end and cut into ``G = ceil(total / grain)`` grains; at most ``num_workers`` vertices get
    ``ceil(G / vertices)`` grains or fewer, and each gets at least ``ceil(minElements / grain)``
    grains (fewer vertices if need be).  Vertex ``k`` of ``V`` takes the elements
    ``[(k G // V) grain, ((k + 1) G // V) grain)``; its rows are the pieces of regions in that
    range, each cut again into rows of at most ``max_region`` elements."""
    region_tile = np.asarray(region_tile, dtype=np.int64)
    region_size = np.asarray(region_size, dtype=np.int64)
    if not len(region_tile):
        empty = np.zeros(0, np.int64)
        return WorkerSplit(empty, empty, empty)
    tiles, first = np.unique(region_tile, return_index=True)
    totals = np.add.reduceat(region_size, first)
    groups = ceil_div(totals, grain)
    per_vertex = ceil_div(groups, num_workers)
    if min_elements:
        most = np.maximum(1, groups // ceil_div(min_elements, grain))
        per_vertex = np.maximum(per_vertex, ceil_div(groups, most))
    counts = ceil_div(groups, per_vertex)
    vertex_of = np.repeat(np.arange(len(tiles)), counts)          # tile index of each vertex
    k = np.arange(len(vertex_of)) - np.repeat(np.cumsum(counts) - counts, counts)
    begins = np.minimum(totals[vertex_of], k * groups[vertex_of] // counts[vertex_of] * grain)
    # cut points: where each region starts and where each vertex starts, per tile
    tile_index = np.repeat(np.arange(len(tiles)), np.diff(np.append(first, len(region_tile))))
    ends = np.cumsum(region_size)
    starts = ends - region_size - (ends - region_size)[first][tile_index]
    scale = int(totals.max()) + 1
    vertex_keys = vertex_of * scale + begins
    keys = np.union1d(tile_index * scale + starts, vertex_keys)
    key_tile = keys // scale
    stops = np.append(keys[1:], 0)
    last = np.append(key_tile[1:] != key_tile[:-1], True)
    stops = np.where(last, key_tile * scale + totals[key_tile], stops)
    sizes = stops - keys
    row_vertex = np.searchsorted(vertex_keys, keys, side="right") - 1
    if max_region is not None and max_region > 0 and sizes.size and sizes.max() > max_region:
        pieces = ceil_div(sizes, max_region)
        row_vertex = np.repeat(row_vertex, pieces)
        offset = np.arange(len(row_vertex)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        sizes = np.minimum(np.repeat(sizes, pieces) - offset * max_region, max_region)
    return WorkerSplit(tiles[vertex_of], row_vertex.astype(np.int64), sizes.astype(np.int64))


def worker_tile_cycles(vertex_tile: np.ndarray, vertex_cycles: np.ndarray, num_tiles: int,
                       num_workers: int) -> np.ndarray:
    """Machine cycles of each tile's worker vertices (thread-cycle estimates): ``num_workers``
    times the busiest context, vertices packed greedily (in order, each onto the context with
    least work so far).  poplibs makes at most ``num_workers`` worker vertices a tile per compute
    set, so each runs on a context of its own: the tile's cycles are ``6 x`` its slowest vertex.
    How Poplar's IPUModel packs more is not published; greedy packing is gruc's assumption."""
    result = np.zeros(num_tiles, dtype=np.int64)
    if not len(vertex_tile):
        return result
    vertex_tile = np.asarray(vertex_tile, dtype=np.int64)
    vertex_cycles = np.asarray(vertex_cycles, dtype=np.int64)
    counts = np.bincount(vertex_tile, minlength=num_tiles)
    np.maximum.at(result, vertex_tile, vertex_cycles)
    for tile in np.flatnonzero(counts > num_workers).tolist():
        contexts = np.zeros(num_workers, dtype=np.int64)
        for cycles in vertex_cycles[vertex_tile == tile].tolist():
            contexts[int(np.argmin(contexts))] += cycles
        result[tile] = contexts.max()
    return result * num_workers


# ---- popops element-wise codelets (popopsCycleEstimators.cpp) ------------------------------------
def binary_inner_loop(n: np.ndarray, info: Info, vector_width: int, external: bool) -> np.ndarray:
    """``binaryOpInnerLoopCycles``: per vector ``cyclesPerLoop + (external ? 2 : 5)``, or per
    ``loopUnrollFactor`` elements ``cyclesPerLoop``."""
    cycles, natural, unroll = info
    if natural:
        return ceil_div(n, vector_width) * (cycles + (2 if external else 5))
    return ceil_div(n, unroll) * cycles


def unary_inner_loop(n: np.ndarray, info: Info, vector_width: int) -> np.ndarray:
    """``unaryOpInnerLoopCycles``: ``ceil(n / unroll) * cyclesPerLoop`` for an unrolled entry,
    else ``basicOpLoopCycles(n, width, cyclesPerLoop + 4)`` (width: the vector, or 1)."""
    cycles, natural, unroll = info
    if not natural and unroll > 0:
        return ceil_div(n, unroll) * cycles
    return ceil_div(n, vector_width if natural else 1) * (cycles + 4)


def unary_op_1d_supervisor(n: np.ndarray, info: Info, vector_width: int,
                           workers: int) -> np.ndarray:
    """``UnaryOp1DSupervisor`` / ``UnaryOp1DInPlaceSupervisor``:
    ``W (20 + loop(ceil(n / W))) + 9 + SUP``."""
    per_worker = ceil_div(n, workers)
    return workers * (20 + unary_inner_loop(per_worker, info, vector_width)) + 9 \
        + SUPERVISOR_OVERHEAD


UNARY_2D_BASE = 20
"""``UnaryOp2D[InPlace]``: ``20 + sum over rows of loop(n_r)``."""


def binary_op_1d_supervisor(n: np.ndarray, info: Info, vector_width: int, external: bool,
                            workers: int, in_place: bool) -> np.ndarray:
    """``BinaryOp1DSupervisor``: ``W (22 + loop(ceil(n / W))) + SUP``; in place
    (``getBinaryOp1DInPlaceSupervisorEstimate``) the worker base is 13."""
    per_worker = ceil_div(n, workers)
    base = 13 if in_place else 22
    return workers * (base + binary_inner_loop(per_worker, info, vector_width, external)) \
        + SUPERVISOR_OVERHEAD


def binary_2d_base(in_place: bool) -> int:
    """``BinaryOp2D``: ``5 + sum of loop(n_r)``; ``BinaryOp2DInPlace``: 20 + the same."""
    return 20 if in_place else 5


def broadcast_loop(n: np.ndarray, info: Info, vector_width: int, overhead: int) -> np.ndarray:
    """The scalar-broadcast inner loop: ``ceil(n / vw) (cyclesPerLoop + overhead)``, or
    ``ceil(n / unroll) cyclesPerLoop`` (``broadcastArithmetic[Supervisor]CycleEstimate``)."""
    cycles, natural, unroll = info
    if natural:
        return ceil_div(n, vector_width) * (cycles + overhead)
    return ceil_div(n, unroll) * cycles


def broadcast_overhead(op: ex.Binary, dtype: DType) -> int:
    """``BroadcastScalar*[Data]``'s loop overhead: 1 with an assembly codelet, else 4."""
    return 1 if has_external_codelet(op, dtype) else 4


def broadcast_scalar_1d_supervisor(n: np.ndarray, info: Info, vector_width: int, overhead: int,
                                   workers: int) -> np.ndarray:
    """``BroadcastScalar1D[InPlace]Supervisor``: ``W (20 + loop(ceil(n / W))) + SUP``."""
    return workers * (20 + broadcast_loop(ceil_div(n, workers), info, vector_width, overhead)) \
        + SUPERVISOR_OVERHEAD


BROADCAST_2D_BASE, BROADCAST_2D_ROW = 20, 28
"""``BroadcastScalar2DData[InPlace]``: ``20 + sum over rows of (loop(n_r) + 28)``."""


def cast_worker_float(n: np.ndarray, to_half: bool) -> np.ndarray:
    """``castWorkerFloatCycles``: float <-> half in assembly."""
    n = np.asarray(n, dtype=np.int64)
    cycles = 1 + 1 + (2 if to_half else 0)
    return cycles + np.where(n < 4, 11 + (n * 14) // 3, 26 + 2 * (n // 4) + ((n & 3) * 14) // 3)


def cast_worker(n: np.ndarray, float_half: bool, to_half: bool) -> np.ndarray:
    """``Cast`` (one region): :func:`cast_worker_float` between float and half, else
    ``ceil(n / 2) + 5``."""
    if float_half:
        return cast_worker_float(n, to_half)
    return ceil_div(n, 2) + 5


def cast_supervisor(n: np.ndarray, to_half: bool, workers: int) -> np.ndarray:
    """``CastSupervisor``: ``7 + W (20 + castWorkerFloatCycles(workerElems))``, with
    ``workerElems`` as ``popops/Cast.cpp`` packs it: grains of 4 over the workers, rounded up."""
    grains = ceil_div(n, 4)
    worker_elements = np.where(grains <= workers, 1, ceil_div(grains, workers)) * 4
    return 7 + workers * (20 + cast_worker_float(worker_elements, to_half))


CAST_2D_BASE, CAST_2D_ROW = 5, 6
"""``Cast2d``: ``5 + sum over rows of (6 + ceil(n_r / 2))``."""


def fill(n: np.ndarray, half: bool) -> np.ndarray:
    """``_fillCycleEstimate`` (``Fill``): half 15 / 21 / ``26 + n/4``; other types
    ``16 + n/2 + 6 + (n % 2 == 1) + 1``."""
    n = np.asarray(n, dtype=np.int64)
    if half:
        return np.where(n == 1, 15, np.where(n == 2, 21, 26 + n // 4))
    return 16 + n // 2 + 6 + (n % 2 == 1) + 1


def fill_2d_base(half: bool) -> int:
    """``Fill2d``: ``5 + (type != HALF) + sum of (fill(n_r) - 2 - (type != HALF))``."""
    return 5 + (not half)


def fill_2d_row(n: np.ndarray, half: bool) -> np.ndarray:
    return fill(n, half) - (2 + (not half))


SELECT_BASE = CLAMP_BASE = 5
"""``Select``, ``Clamp``, ``BroadcastClamp`` (and in place): ``5 + sum over rows``."""


def select_row(n: np.ndarray) -> np.ndarray:
    """``selectCycles``: ``6 + 5 n``."""
    return 6 + 5 * np.asarray(n, dtype=np.int64)


def clamp_row(n: np.ndarray, dtype: DType) -> np.ndarray:
    """``clampCycles``: ``6 + ceil(n / w) c`` with ``(w, c)`` float (2, 2), half (4, 2), int
    (1, 7), else (1, 1)."""
    width, cycles = {FLOAT: (2, 2), HALF: (4, 2), INT: (1, 7)}.get(dtype, (1, 1))
    return 6 + ceil_div(n, width) * cycles


BROADCAST_SELECT_BASE = 10
"""``BroadcastSelect`` (both choices scalars): ``10 + sum over rows``."""


def broadcast_select_row(n: np.ndarray, dtype: DType) -> np.ndarray:
    n = np.asarray(n, dtype=np.int64)
    if dtype.size == 4:
        return 5 + 4 * n + 3
    if dtype.size == 2:
        return np.where(n & 1, 23 + 4 * n, 30 + 4 * n)
    return 40 + (n // 4) * 17 + 26


def fused_map_vertex(elements: np.ndarray, inputs: int, vector_width: int,
                     fused_ops: int) -> np.ndarray:
    """A generated map codelet (``popops/ExpressionGenerator.cpp`` ``executeCodelet``, set by
    ``graph.setCycleEstimate``): ``13 + sum over inputs of (n / vw + n % vw) ops`` — each
    input is as long as the vertex's output; ``vw`` is the first input's vector width."""
    elements = np.asarray(elements, dtype=np.int64)
    return 13 + inputs * (elements // vector_width + elements % vector_width) * fused_ops


# ---- popops scaledAddTo (popopsCycleEstimators.cpp, ScaledAdd.cpp) --------------------------------
def scaled_add_supervisor(n: np.ndarray, float_data: bool, constant: bool,
                          workers: int) -> np.ndarray:
    """``ScaledAddSupervisor<T, T, S, isConstant, memConstrained=false>``
    (``scaledArithmeticSupervisorCycleEstimate``, A and B of one float type; ``memConstrained``
    is ScaledAdd.cpp's ``optimizeForSpeed``, off by default, so the inner loop takes 3 cycles an
    atom of 8 bytes).  Every worker id ``0..W`` (the estimator's loop runs to ``W`` inclusive)
    loops over ``n / W / atom`` atoms; the one whose id is ``rem`` also does the last ``n % W``
    elements.  Machine cycles: the supervisor's plus ``W x`` the slowest worker."""
    n = np.asarray(n, dtype=np.int64)
    atom = 2 if float_data else 4
    atoms = n // workers // atom
    final = n % workers
    rem = (n // workers) % workers + ceil_div(final, atom)
    supervisor = 21 + SUPERVISOR_OVERHEAD + np.where(final == 0, 7, 13) + 12 + (0 if constant
                                                                                 else 6)
    worker = 15 + np.where(atoms != 0, 6 + 3 * (atoms - 1), 0) + 2 + 1
    if float_data:
        last = np.where(final != 0, 8, 0)
    else:
        last = np.where(final != 0, 5 + np.where(final >= 2, 7 + np.where(final == 3, 6, 0), 0),
                        0)
    slowest = worker + np.where(rem <= workers, 1 + last, 0)
    return supervisor + workers * slowest


def scaled_add_2d_row(n: np.ndarray, float_data: bool, constant: bool) -> np.ndarray:
    """A row of ``ScaledAdd2D`` (``ScaledArithmetic2DCycleEstimate``).  poplibs' ``ScaledAdd2D``
    estimator passes ``(memConstrained, isConstant)`` into the ``(isConstant, memConstrained)``
    slots, so a constant scale gets the 2-cycle inner loop and every vertex the non-constant
    base (:func:`scaled_add_2d_base`): the published estimates carry the swap, and so does gruc."""
    n = np.asarray(n, dtype=np.int64)
    grain = 2 if float_data else 4
    inner = 2 if constant else 3
    cycles = 15 + np.where(n // grain != 0, 5, 0) + (n // grain) * inner
    rest = n % grain
    if float_data:
        return cycles + np.where(rest != 0, 7, 0)
    return cycles + np.where(rest > 0, 4, 0) + np.where(rest >= 2, 6, 0) \
        + np.where(rest % 2 == 1, 7, 0)


SCALED_ADD_2D_BASE = 9 + 1
"""A ``ScaledAdd2D`` vertex's prologue and epilogue, plus the non-constant cycle its estimator
charges every vertex (the swapped arguments of :func:`scaled_add_2d_row`)."""


# ---- popnn non-linearity gradients (popnnCycleEstimators.cpp) ------------------------------------
def _grad_remainder(remainder: np.ndarray, is_float: bool) -> np.ndarray:
    if is_float:
        return 2 + 2 + (remainder != 0) * 4
    return 2 + 2 + ((remainder & 2) != 0) * 5 + 2 + ((remainder & 1) != 0) * 7


def non_linearity_grad_supervisor(n: np.ndarray, vector_width: int, is_float: bool,
                                  workers: int) -> np.ndarray:
    """``NonLinearityGradSupervisor``: ``9 + W worker``, a worker of ``v = ceil((n / vw) / W)``
    vectors costing ``25 + (v ? 4 + 3 (v - 1) + 1 : 0) + remainder`` (same for every kind)."""
    n = np.asarray(n, dtype=np.int64)
    vectors = ceil_div(n // vector_width, workers)
    worker = 8 + 5 + 2 + 3 + 3 + 3 + 1 + np.where(vectors > 0, 4 + 3 * (vectors - 1) + 1, 0)
    return 9 + workers * (worker + _grad_remainder(n % vector_width, is_float))


GRAD_2D_BASE = 5 + 4 + 3 + 3 + 2
"""``NonLinearityGrad2D``: ``17 + sum over rows``."""


def non_linearity_grad_2d_row(n: np.ndarray, vector_width: int, is_float: bool) -> np.ndarray:
    """A row of ``NonLinearityGrad2D``: ``9 + (v ? 4 + 3 (v - 1) + 1 : 0) + remainder + 1``."""
    n = np.asarray(n, dtype=np.int64)
    vectors = n // vector_width
    return 6 + 3 + np.where(vectors > 0, 4 + 3 * (vectors - 1) + 1, 0) \
        + _grad_remainder(n % vector_width, is_float) + 1


# ---- popops dynamic slices (popopsCycleEstimators.cpp) -------------------------------------------
def dynamic_slice_1d(region_size: int, num_sub: int, vector_width: int, workers: int) -> int:
    """``getDynamicSlice1dEstimate`` (``DynamicSlice1d`` and ``DynamicUpdateSlice1d``):
    ``SUP + 14 + W (41 + (27 + ceil(regionSize / W) / vw) numSubElements)``."""
    copies = -(-region_size // workers) // vector_width
    return SUPERVISOR_OVERHEAD + 1 + 6 + 1 + 6 + workers * (41 + (27 + copies) * num_sub)


DYNAMIC_SLICE_2D_BASE = 23
"""``DynamicSlice2d`` / ``DynamicUpdateSlice2d``: ``23 + sum over regions`` (today's sources
start at 27)."""


def dynamic_slice_2d_region(size: np.ndarray, num_sub: int, vector_width: int,
                            half: bool) -> np.ndarray:
    """A region of ``DynamicSlice2d``: ``(29 + ceil(size / vw)) numSub + 13``; half
    ``(31 + 2 ceil(size / vw)) numSub + 13``."""
    vectors = ceil_div(size, vector_width)
    return ((31 + 2 * vectors) if half else (29 + vectors)) * num_sub + 13


# ---- popops reductions (reduction/CycleEstimationFunctions.cpp, ReductionConnection.cpp) ---------
@dataclass(frozen=True)
class Reduction:
    """poplibs' ``RegionReduction`` as its estimator sees it: one contiguous output region and the
    sizes of its partials, each a whole number of rows of ``out_size`` elements."""

    out_size: int
    partials: tuple[int, ...]

    @property
    def rows(self) -> int:
        return sum(self.partials) // self.out_size


STRIDED, SCALAR_SINGLE, CONTINUOUS, SCALAR_REGIONS, DEFAULT = (
    "STRIDED_REDUCE", "SCALAR_OUTPUT_SINGLE_INPUT", "ALL_REGIONS_CONTINUOUS",
    "SCALAR_OUTPUT_REGIONS", "DEFAULT")
"""``ReductionSpecialisation`` values of the era of the research's estimator (id 9999590333)."""

_ACCUMULATING = ("add", "square_add")


@dataclass(frozen=True)
class ReduceTypes:
    """The types of one reduction vertex: partials, output, operation, update and scale."""

    partials: DType
    out: DType
    op: str
    update: bool = False
    scaled: bool = False


def _ceil_log2(value: int) -> int:
    return max(value - 1, 0).bit_length()


def _acc_width(dtype: DType) -> int:
    return 8 if dtype is HALF else 4 if dtype is FLOAT else 1


def reduce_specialisation(reductions: list[Reduction], types: ReduceTypes,
                          contiguous: bool) -> str:
    """``getReductionVertexSpecialisation``: all-regions-continuous (ADD family, scalar outputs,
    one equal partial each, all contiguous: ``contiguous``), then a single I/O reduction (no
    update, scalar or 8-byte output, aligned partials): scalar output without scale or a float
    output of whole 8-byte words (strided reduce), then scalar output regions, else default."""
    accumulating = types.op in _ACCUMULATING
    scalar = all(r.out_size == 1 for r in reductions)
    if accumulating and scalar and contiguous and all(len(r.partials) == 1 for r in reductions) \
            and len({r.partials[0] for r in reductions}) == 1 and reductions[0].partials[0] > 1:
        return CONTINUOUS
    if accumulating and not types.update and len(reductions) == 1:
        r = reductions[0]
        fits = r.out_size == 1 or r.out_size * types.out.size % 8 == 0
        aligned = all(p * types.partials.size % 4 == 0 for p in r.partials[:-1])
        if fits and aligned:
            if r.out_size == 1 and not types.scaled:
                return SCALAR_SINGLE
            if types.out is FLOAT and r.out_size * 4 % 8 == 0 \
                    and r.out_size * types.partials.size % 8 == 0:
                return STRIDED
    return SCALAR_REGIONS if scalar else DEFAULT


def reduce_vertex(reductions: list[Reduction], types: ReduceTypes, specialisation: str,
                  target_vector_width) -> int:
    """``getCycleEstimateForReduceVertex`` / ``getCyclesEstimateForReduce`` (thread cycles of one
    worker vertex).  ``target_vector_width(dtype)`` is ``Target::getVectorWidth``."""
    partials, out = types.partials, types.out
    acc_width = _acc_width(partials)
    path = max(1, 64 // (8 * partials.size))
    width = target_vector_width(partials)
    out_width = target_vector_width(out)
    accumulating = types.op in _ACCUMULATING
    op_width = acc_width if accumulating else width
    update = int(types.update)
    if specialisation == CONTINUOUS:  # numOutputsM1 passed as the output count (a quirk kept)
        outputs, size = len(reductions) - 1, reductions[0].partials[0]
        per_loop = min(acc_width, path)
        return outputs * (size // per_loop) + (2 if size & 1 else 0) + 12 * outputs + 10 \
            + update + 7
    cycles = 7
    if specialisation == STRIDED:
        r = reductions[0]
        per_loop = int(np.gcd(min(op_width, path), r.out_size))  # stride = out_size
        return cycles + 17 + -(-r.out_size // per_loop) * 6 + sum(r.partials) // per_loop
    if specialisation == SCALAR_SINGLE:
        size = sum(reductions[0].partials)
        per_cycle = min(acc_width, width)
        cycles += 8 + 11 + (6 if size < 6 else size // per_cycle + size % per_cycle)
        return cycles + (5 if out is not FLOAT else 0)
    cycles += 3 + 23  # every gruc op (ADD, SQUARE_ADD, MUL, MAX, MIN) is vectorised

    def store(w: int) -> int:
        return (2 + update) * min(w, out_width) + accumulating

    load = (2 if accumulating else 0) + 2 + op_width // min(op_width, path)
    checks = _ceil_log2(op_width)
    for r in reductions:
        vectors, remaining = divmod(r.out_size, op_width)
        count = len(r.partials)
        cycles += 16 + 6 + 2 * checks + 2
        cycles += vectors * ((5 if accumulating else 3) + store(op_width) + 1)
        cycles += vectors * count * (7 + 3)
        for bit in range(checks):
            if remaining & (1 << bit):
                cycles += (4 if accumulating else 2) + store(1 << bit) + count * (7 + 3)
        for size in r.partials:
            rows = size // r.out_size
            cycles += vectors * rows * (load + 3)
            for bit in range(checks):
                if remaining & (1 << bit):
                    cycles += rows * (2 + (1 << bit) // min(1 << bit, width) + 3)
    return cycles


def _ops_per_cycle(out_size: int, dtype: DType, op: str, target_vector_width) -> int:
    """``opsPerCycle`` (ReductionConnection.cpp), a rough rate for splitting work."""
    if out_size == 0:
        return 1
    width = target_vector_width(dtype) * (2 if op in _ACCUMULATING and dtype.is_float else 1)
    w = width
    while w > 0:
        if out_size == w:
            return width
        w //= 2
    w = width
    while w > 0:
        if out_size % w == 0:
            return w
        w //= 2
    return 1


def approximate_reduction_cycles(r: Reduction, out: DType, op: str, target_vector_width) -> int:
    """``approximateCyclesForReduction``: the partials' elements over ``opsPerCycle``."""
    return -(-sum(r.partials) // _ops_per_cycle(r.out_size, out, op, target_vector_width))


def distribute_reductions(reductions: list[Reduction], out: DType, op: str, workers: int,
                          target_vector_width) -> list[list[int]]:
    """``distributeReductionsBetweenWorkers``: reductions by approximate cycles, *ascending* (the
    source sorts with ``a < b`` under a comment saying most first), the first ``workers`` each to
    a vertex of its own, each later one to the vertex with the least so far."""
    approx = [approximate_reduction_cycles(r, out, op, target_vector_width) for r in reductions]
    loads: list[int] = []
    groups: list[list[int]] = []
    for index in sorted(range(len(reductions)), key=lambda i: approx[i]):
        if len(groups) < workers:
            groups.append([index])
            loads.append(approx[index])
        else:
            least = int(np.argmin(loads))
            groups[least].append(index)
            loads[least] += approx[index]
    return groups


def split_two_stage(reductions: list[Reduction], out: DType, op: str, workers: int,
                    target_vector_width) -> list[int]:
    """``splitTwoStageReductionsBetweenWorkers``: with fewer reductions than workers, split the
    slowest (by approximate cycles plus 30, or 60 once split) into more pieces of at least two
    rows and four cycles while that lowers it and workers are free; no split at all if the
    slowest did not get faster."""
    base = [approximate_reduction_cycles(r, out, op, target_vector_width) for r in reductions]
    approx = [30 + b for b in base]
    most = [min(r.rows // 2, a // 4) for r, a in zip(reductions, approx)]
    splits = [1] * len(reductions)
    baseline = max(approx)
    free = workers - len(reductions)
    while free > 0:
        i = int(np.argmax(approx))
        if splits[i] + 1 >= most[i]:
            break
        after = (30 if splits[i] + 1 == 1 else 60) + base[i] // (splits[i] + 1)
        if after >= approx[i]:
            break
        approx[i] = after
        splits[i] += 1
        free -= 1
    return [1] * len(reductions) if max(approx) == baseline else splits


def split_rows_to_workers(rows: int, pieces: int, grain: int) -> list[int]:
    """``splitRowsToWorkers``: ``rows`` into at most ``pieces`` groups of at least two rows, in
    grains, the remainder on the last."""
    if rows <= 3 or pieces <= 1:
        return [rows]
    most_rows = -(-rows // pieces)
    count = min(rows // 2, -(-rows // most_rows))
    split = [grain * (rows // (count * grain))] * count
    extra = rows % (count * grain)
    for k in range(extra // grain):
        split[k] += grain
    split[-1] += extra % grain
    return split


def split_partials_by_rows(r: Reduction, rows: list[int]) -> list[Reduction]:
    """``splitPartialsByRows``: consecutive rows of the partials for each piece."""
    left = [size // r.out_size for size in r.partials]
    pieces = []
    current = 0
    for wanted in rows:
        sizes = []
        while wanted > 0:
            take = min(wanted, left[current])
            sizes.append(take * r.out_size)
            wanted -= take
            left[current] -= take
            if left[current] == 0:
                current += 1
        pieces.append(Reduction(r.out_size, tuple(sizes)))
    return pieces


def reduce_tile_cycles(reductions: list[Reduction], types: ReduceTypes, contiguous: bool,
                       workers: int, target_vector_width) -> int:
    """A tile's machine cycles for its reductions, vertices made as ``connectReductions`` makes
    them: with at least ``workers`` reductions, :func:`distribute_reductions` over ``workers``
    vertices; with fewer, :func:`split_two_stage` — each split reduction's rows cut into pieces
    (:func:`split_rows_to_workers`) reduced by vertices of their own, then combined by a vertex
    per reduction in a second compute set (its cycles added here: gruc has one compute set where
    poplibs has two, so its sync is not counted).  ``contiguous``: the reductions' outputs and
    partials, in order, are each one contiguous run (what all-regions-continuous needs)."""
    if not reductions:
        return 0

    def estimate(group: list[Reduction], group_types: ReduceTypes, together: bool) -> int:
        special = reduce_specialisation(group, group_types, together)
        return reduce_vertex(group, group_types, special, target_vector_width)

    if len(reductions) >= workers:
        groups = distribute_reductions(reductions, types.out, types.op, workers,
                                       target_vector_width)
        return workers * max(
            estimate([reductions[i] for i in sorted(group)], types,
                     len(group) == 1 or (contiguous and max(group) - min(group) + 1 == len(group)))
            for group in groups)
    splits = split_two_stage(reductions, types.out, types.op, workers, target_vector_width)
    first, second = [], []
    plain = ReduceTypes(types.partials, types.out, types.op)
    combine = ReduceTypes(types.out, types.out, "add" if types.op == "square_add" else types.op,
                          types.update, types.scaled)
    for r, pieces in zip(reductions, splits):
        if pieces == 1:
            first.append(estimate([r], types, True))
            continue
        grain = target_vector_width(types.partials) if r.out_size == 1 else 1
        parts = split_partials_by_rows(r, split_rows_to_workers(r.rows, pieces, grain))
        first.extend(estimate([part], plain, True) for part in parts)
        second.append(estimate([Reduction(r.out_size, (r.out_size * len(parts),))], combine, True))
    return workers * max(first) + (workers * max(second) if second else 0)
