"""What poplin's convolution vertices cost: the partial-product and reduction estimates a matrix
product is planned and costed with, beside the matmul kinds they describe.

poplin runs a product ``[G, M, K] x [G, K, N]`` as a convolution (``lib/poplin/MatMul.cpp``): a
field of ``F`` elements per tile, ``Ci`` input channels in groups of ``inPG`` and ``Co`` output
channels in groups of ``outPG``.  A tile's partial products are one vertex:

* **AMP** (``ConvPartial1x1Out``): the accumulating matrix product units (``convUnits`` of them)
  each hold ``weightsPerConvUnit`` weights (pipeline depth x one 64-bit load of inputs) and take
  one input vector a cycle; the supervisor loads each group's weights, and six workers stream
  the field through (:func:`amp_partials_cycles`, poplibs'
  ``getConvPartial1x1SupervisorOuterLoopCycleEstimate`` / ``...InnerLoopCycleEstimate`` of
  ``lib/poplin/PerformanceEstimation.hpp``).  Its partial sums are written through a vector field
  that must lie in interleaved memory, 16-byte aligned.
* **MAC** (``ConvPartialHorizontalMac``): plain vector multiply-accumulates, for products the
  AMP cannot take (:func:`mac_partials_cycles`).

The partial sums of a product whose input channels are split over ``depth`` tiles are added by
``ReduceAdd`` supervisor vertices (:func:`reduce_add_cycles`, poplibs' ``getReduceCycleEstimate``),
in the stages :func:`multi_stage_reduce_plan` chooses (``lib/poplin/ConvReducePlan.cpp``).

Every function takes numpy integer arrays (one entry per candidate plan or per tile) and returns
int64 cycles, so the planner evaluates thousands of plans at once and the cost model every tile.
The formulas are the 2020-21 poplibs ones (the era of Poplar's published figures); see
``docs/cycle-model.md`` for each term's source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

NUM_WORKERS = 6
"""Worker contexts of a tile: a supervisor vertex splits its field over them."""


METHODS = ("AMP", "MAC")


@dataclass(frozen=True)
class ConvMethod:
    """How a tile computes its partial products: the vertex and its channel grouping."""

    kind: str
    """``"AMP"`` (ConvPartial1x1Out) or ``"MAC"`` (ConvPartialHorizontalMac)."""
    in_chans_per_group: int
    partial_chans_per_group: int
    conv_units: int = 0
    """AMP units used (AMP only)."""
    weights_per_conv_unit: int = 0
    """Weights an AMP unit holds (AMP only)."""

    @property
    def interleaved_partials(self) -> bool:
        """Whether the vertex's partials field must lie in interleaved memory (the AMP's
        ``Vector<..., 16, true>`` output: 128-bit stores)."""
        return self.kind == "AMP"

    def as_param(self) -> tuple[str, int, int, int, int]:
        """The method as a vertex parameter (printable IR): ``(kind, inPG, outPG, units,
        weights per unit)``."""
        return (self.kind, self.in_chans_per_group, self.partial_chans_per_group,
                self.conv_units, self.weights_per_conv_unit)

    @classmethod
    def of_param(cls, value: object) -> "ConvMethod":
        """The method a vertex parameter names; ValueError if it names none."""
        if (not isinstance(value, (tuple, list)) or len(value) != 5 or value[0] not in METHODS
                or not all(isinstance(v, int) and v >= 0 for v in value[1:])
                or min(value[1], value[2]) < 1):
            raise ValueError(f"a conv method is (kind, in chans per group, partial chans per "
                             f"group, units, weights per unit) with kind one of "
                             f"{', '.join(METHODS)}; got {value!r}")
        return cls(*value)

    def describe(self) -> str:
        if self.kind == "AMP":
            return (f"AMP x{self.conv_units}, {self.in_chans_per_group} in / "
                    f"{self.partial_chans_per_group} out chans per group")
        return f"MAC, {self.in_chans_per_group} in chans per group"


def _ints(value) -> np.ndarray:
    return np.asarray(value, dtype=np.int64)


def worker_split(field: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``partitionConvPartialByWorker``: worker ``w`` takes field elements ``[w*F//6,
    (w+1)*F//6)``.  Returns the largest and smallest share and how many workers have any."""
    field = _ints(field)
    most = -(-field // NUM_WORKERS)
    least = field // NUM_WORKERS
    used = np.minimum(field, NUM_WORKERS)
    return most, least, used


def _amp_worker(elements: np.ndarray, float_acts: bool, float_partials: bool, units: int,
                zeroing: bool) -> np.ndarray:
    """One AMP worker's cycles over ``elements`` field elements (its single worklist entry)."""
    e = _ints(elements)
    core = (8 if float_acts else 4) // (2 if units == 4 else 1)
    zc = 4 if float_partials else 2
    z = int(zeroing)
    if float_acts:
        table = (24, 47 + (2 + zc) * z, 46 + (2 + 2 * zc) * z)
        long = 46 + (2 + zc * e) * z + (e - 3) * core
    elif float_partials:
        extra = 2 if z else 4
        table = (20 + extra - 10, 31 + extra - 10, 40 + extra - 10)  # less the retention saving
        long = (38 if z else 40) + (e - 3) * core - 10
    else:
        table = (24, 39 + (2 + zc) * z, 40 + (2 + 2 * zc) * z)
        long = 41 + (2 + zc * e) * z + (e - 3) * core
    return np.where(e >= 3, long, np.choose(np.minimum(e, 2), table)).astype(np.int64)


def _amp_inner(field: np.ndarray, float_acts: bool, float_partials: bool, units: int,
               zeroing: bool) -> np.ndarray:
    """The supervisor's wait for its six workers: the slowest, and at least the fastest + 14
    cycles when all six run (the supervisor's own loop)."""
    most, least, used = worker_split(field)
    slowest = NUM_WORKERS * _amp_worker(most, float_acts, float_partials, units, zeroing)
    fastest = np.where(used == NUM_WORKERS,
                       NUM_WORKERS * _amp_worker(least, float_acts, float_partials, units,
                                                 zeroing), 0)
    return np.maximum(slowest, fastest + 14)


def amp_partials_cycles(field, in_groups, out_groups, conv_groups, method: ConvMethod,
                        float_acts: bool, float_partials: bool, coeff_load_bytes: int) -> np.ndarray:
    """``ConvPartial1x1Out``'s cycles on a tile: ``field`` elements, ``in_groups`` groups of
    ``inPG`` input channels, ``out_groups`` groups of ``outPG`` output channels, ``conv_groups``
    independent groups.  ``coeff_load_bytes``: bytes of weights loaded per cycle (64-bit loads:
    half the target's 128-bit figure).  The first input group zeroes the partials."""
    n_in, n_out, groups = _ints(in_groups), _ints(out_groups), _ints(conv_groups)
    units = method.conv_units
    passes = -(-method.partial_chans_per_group // units)
    weight_bytes = method.weights_per_conv_unit * (4 if float_acts else 2)
    loads = units * weight_bytes // coeff_load_bytes
    inner_zero = _amp_inner(field, float_acts, float_partials, units, True)
    inner = _amp_inner(field, float_acts, float_partials, units, False)
    r1, r2 = (10, 2) if (not float_acts and float_partials) else (0, 0)
    per_group = (12 + (n_in - 1) * (16 + n_out * (19 + passes * (6 + loads + inner)))
                 + (11 + n_out * (19 + passes * (7 + loads + inner_zero))))
    return (50 + NUM_WORKERS * (r1 + r2 * (n_in * groups - 1)) + groups * per_group).astype(
        np.int64)


def _mac_dot(size: int, float_acts: bool) -> int:
    """Cycles of one horizontal dot product over ``size`` input channels."""
    if float_acts:
        return 7 + size if size % 2 == 0 else 7 + 2 * size
    return 7 + size // 2 if size % 4 == 0 else 7 + size  # half: 4-wide multiply-accumulates


def mac_partials_cycles(field, in_groups, out_groups, conv_groups, method: ConvMethod,
                        float_acts: bool, float_partials: bool) -> np.ndarray:
    """``ConvPartialHorizontalMac``'s cycles on a tile (poplibs'
    ``estimateConvPartialHorizontalMacInnerLoopCycles`` and its outer loop) plus zeroing the
    partials first (``estimateZeroSupervisorCycles``).  A product's field is one row, which the
    six workers split: each runs a sixth of it per pair of channel groups."""
    field, n_in = _ints(field), _ints(in_groups)
    n_out, groups = _ints(out_groups), _ints(conv_groups)
    part = -(-field // NUM_WORKERS)
    row = np.where(part > 0, 35 + part * (7 + _mac_dot(method.in_chans_per_group, float_acts)), 7)
    inner = NUM_WORKERS * (16 + row)
    outer = (58 if float_acts else 63) + NUM_WORKERS * (9 if float_partials else 10)
    cycles = outer + groups * (23 + n_in * (15 + n_out * (10 + inner)))
    width = 2 if float_partials else 4
    per_worker = -(-(field * method.partial_chans_per_group) // NUM_WORKERS)
    zeroing = NUM_WORKERS * (-(-per_worker // width) + (14 if float_partials else 15))
    return (cycles + zeroing * n_out * groups).astype(np.int64)


def reduce_add_cycles(outputs, partials, float_out: bool, float_partials: bool) -> np.ndarray:
    """``ReduceAdd``'s cycles on a tile adding ``partials`` rows into ``outputs`` elements
    (0 where a tile has no outputs): six workers take the outputs a vector at a time."""
    out, depth = _ints(outputs), _ints(partials)
    acc = 4 if float_partials else 8
    loops = out // acc + np.array([bin(k).count("1") for k in range(acc)])[out & (acc - 1)]
    per_worker = loops // NUM_WORKERS
    remainder = (loops % NUM_WORKERS != 0)
    ragged = (out & (acc - 1)) != 0
    cycles = np.full(out.shape, 32, dtype=np.int64)
    cycles += np.where(remainder & ragged, 2 * depth + (13 if float_partials else 11), 0)
    per_worker = per_worker + (remainder & ~ragged)
    tail = (7 if float_out else 6) if float_partials else (9 if float_out else 8)
    cycles += (3 * depth + tail) * per_worker
    return np.where(out > 0, NUM_WORKERS * cycles, 0).astype(np.int64)


def cast_cycles(elements, in_width: int, out_width: int) -> np.ndarray:
    """A supervisor cast of partials to the result type (poplin's ``estimateCastCycles``)."""
    per_worker = -(-_ints(elements) // NUM_WORKERS)
    cycles = (np.maximum(-(-per_worker // in_width), -(-per_worker // out_width)) + 26)
    return np.where(_ints(elements) > 0, NUM_WORKERS * cycles, 0).astype(np.int64)


@lru_cache(maxsize=None)
def multi_stage_reduce_plan(depth: int, stages: int | None = None) -> tuple[int, ...]:
    """The depths after each intermediate stage of reducing ``depth`` partials (poplin's
    ``getMultiStageReducePlan``): one stage below 16 partials, two below 125, else three, each
    stage taking about the same root of the depth.  Empty: a single stage."""
    if stages is None:
        stages = 3 if depth >= 125 else 2 if depth >= 16 else 1
    plan, _ = _plan_cost(depth, stages)
    return plan


@lru_cache(maxsize=None)
def _plan_cost(depth: int, stages: int) -> tuple[tuple[int, ...], float]:
    if stages <= 1 or depth <= 1:
        return (), float(depth)
    guess = max(int(math.floor(depth ** ((stages - 1) / stages))), 1)
    best = None
    for nxt in (guess, guess + 1):
        plan, cost = _plan_cost(nxt, stages - 1)
        total = cost + depth / nxt
        if best is None or total <= best[1]:  # ties go to the larger intermediate depth
            best = ((nxt,) + plan, total)
    return best


def reduce_stages(depth: int) -> list[tuple[int, int]]:
    """``(groups, partials per group)`` of each stage reducing ``depth`` partials: the partials
    are cut into ``groups`` runs of at most ``partials per group``, each run summed into one."""
    stages, remaining = [], depth
    for target in multi_stage_reduce_plan(depth):
        per = -(-remaining // target)
        groups = -(-remaining // per)
        if per > 1:
            stages.append((groups, per))
        remaining = groups
    if remaining > 1:
        stages.append((1, remaining))
    return stages
