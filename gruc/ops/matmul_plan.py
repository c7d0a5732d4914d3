"""How a matrix product is cut over tiles: poplin's planner, re-derived.

poplin plans ``[G, M, K] x [G, K, N]`` as a convolution (``lib/poplin/MatMul.cpp``,
``ConvPlan.cpp``, ``ConvModel.cpp``): K is the input channels, and either N is the *field* and M
the output channels (the orientation poplin tries first, and the one that needs no rearrangement)
or the other way round.  A plan splits the conv groups, the field, the input channels and the
output channels over tiles (a tile per combination), chooses the vertex a tile runs (the AMP
``ConvPartial1x1Out``, else horizontal MACs) with its channel grouping, and adds the partial
sums of the input-channel split in stages.  Each candidate is costed as poplin costs it:

* **partial products**: the vertex's estimate for the tile's field and channel groups
  (:mod:`gruc.ir.codelets.conv_costs`);
* **exchange**: the input elements a tile needs from its output-channel neighbours, the weights
  it needs from its field neighbours, and the partial sums sent to the reducing tiles, at the
  target's exchange rate;
* **reduction**: ``ReduceAdd`` per stage of :func:`~gruc.ir.codelets.conv_costs.multi_stage_reduce_plan`,
  or a cast of the partials when there is nothing to add;
* **rearrangement**: the copies the other orientation needs (and regrouping the output when its
  channel grouping is not the AMP's weights per unit).

The plan with the fewest cycles whose temporary bytes per tile (the tile's inputs, weights and
partials, or the reduction's, whichever is more) fit ``availableMemoryProportion`` of a tile
wins; ties go to fewer temporary bytes, then to the candidate poplin tries first.  When none
fits, the product runs in serial slices of n (poplin's serial splits of the output channels, which
must divide them), as few as fit; failing that, the bound is doubled up to twice a tile's memory,
then dropped (poplin's later planner), and the plan says it does not fit.

Blocks are grain-aligned ceiling splits: a dimension of ``n`` cut into ``p`` parts gets blocks
of ``ceil(n / p)`` (in grains), the last shorter — the per-tile sizes poplin's model costs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from gruc.ir.codelets.conv_costs import (ConvMethod, amp_partials_cycles, cast_cycles,
                                         mac_partials_cycles, multi_stage_reduce_plan,
                                         reduce_add_cycles)
from gruc.ir.codelets.matmul import FIELD_M, FIELD_N, Blocking
from gruc.target import TILES_PER_SHARED_EXCHANGE_BUS, Target
from gruc.types import FLOAT, HALF, DType

FC_BWD = "fc-bwd"
FC_WU = "fc-wu"

MAX_SERIAL_SLICES = 64
"""Most serial slices of the output channels a plan uses (each is a pair of compute sets)."""

BROADCAST_REARRANGE = 7
"""poplin rearranges an operand into the plan's layout before a product when it is broadcast to
more than this many tiles (``inViewMaxBroadcastDests`` / ``weightViewMaxBroadcastDests``), so
the broadcast reads one tidy copy (``lib/poplin/Convolution.cpp``)."""

TRANSFORM_COPY_FACTOR = 5
"""poplin's cost of rearranging ``b`` bytes on a tile: ``5 b`` divided by the bytes a copy moves
per cycle (``addTransformCycleEstimate``)."""


@dataclass(frozen=True)
class MatMulPlan:
    """How a product is cut into blocks and tiles, and what poplin's model says it costs."""

    shape: tuple[int, int, int, int]
    """``(G, M, K, N)``."""
    block: tuple[int, int, int, int]
    """Block sizes ``(gb, mb, kb, nb)``."""
    serial: int
    """Slices of n run one after another (1: a single pass)."""
    slice_width: int
    """Columns of n per serial slice (the last may be narrower)."""
    partials_type: DType
    direct: bool
    """One k block and partials of the output's type: the partial products are the output."""
    cycles: int
    """Estimated cycles of the whole product (all slices)."""
    temporary_bytes: int
    """Estimated temporary bytes per tile (what ``availableMemoryProportion`` bounds)."""
    fits: bool
    """``temporary_bytes`` is within ``availableMemoryProportion`` of a tile."""
    orientation: str = FIELD_N
    method: ConvMethod = field(default_factory=lambda: ConvMethod("MAC", 1, 1))
    breakdown: tuple[tuple[str, int], ...] = ()
    """Estimated cycles by term (one slice): partials, exchange, reduce, transform."""
    tile_order: str = "standard"
    """How blocks are numbered onto tiles: poplin's standard order, or a training layer's
    backward (``FC_BWD``) or weight-update (``FC_WU``) order, which put every pass's block of a
    weight on the tile holding it."""
    joint: bool = False
    """Planned jointly with its training layer's other products (or derived from such a plan)."""
    joint_passes: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()
    """A joint forward plan's estimate of each pass, by term."""

    def slices(self) -> list[tuple[int, int]]:
        """``(begin, end)`` columns of n of every serial slice."""
        N, width = self.shape[3], self.slice_width
        return [(begin, min(begin + width, N)) for begin in range(0, N, width)]

    def blocking(self, width: int) -> Blocking:
        """The block geometry of a slice ``width`` columns wide."""
        G, M, K, _ = self.shape
        gb, mb, kb, nb = self.block
        return Blocking.of((G, M, K, width), (gb, mb, kb, min(nb, width)))

    @property
    def num_tiles(self) -> int:
        """Tiles the first slice uses (one per block)."""
        return self.blocking(self.slice_width).num_blocks

    @property
    def reduce_depth(self) -> int:
        """Partial sums per output element (k blocks)."""
        return self.blocking(self.slice_width).k.count

    def describe(self) -> str:
        """One line: the partition, the vertex and the estimate."""
        geometry = self.blocking(self.slice_width)
        G, M, K, N = self.shape
        field_axis, out_axis = ("n", "m") if self.orientation == FIELD_N else ("m", "n")
        splits = {"g": geometry.g.count, "k": geometry.k.count, "m": geometry.m.count,
                  "n": geometry.n.count}
        stages = multi_stage_reduce_plan(splits["k"]) if splits["k"] > 1 else ()
        text = ("joint " if self.joint else "") + (f"[{G}x]{M}x{K} x {K}x{N}: field {field_axis.upper()} split {splits[field_axis]}, "
                f"in chans K split {splits['k']}, out chans {out_axis.upper()} split "
                f"{splits[out_axis]}" + (f", groups split {splits['g']}" if G > 1 else "")
                + f"; {self.num_tiles} tiles; {self.method.describe()}; partials "
                f"{self.partials_type.name}; reduce "
                + ("none" if splits["k"] == 1 else f"{len(stages) + 1} stage(s)")
                + (f"; {self.serial} serial slices" if self.serial > 1 else "")
                + f"; ~{self.cycles} cycles, {self.temporary_bytes} B temporaries per tile")
        return text


# ---- candidate methods ------------------------------------------------------------------------
def conv_methods(target: Target, in_type: DType, partials_type: DType, inference: bool,
                 in_chans: int, joint: bool = False) -> list[ConvMethod]:
    """The vertex choices poplin tries for ``in_chans`` input channels, in its order: AMP
    configurations (``getConvVertexAMPCandidates``: the tile's units, and half of 16 units;
    partial channel groups of the units or of the weights per unit), then MAC
    (:func:`mac_methods`).  ``inference`` (``INFERENCE_FWD``) keeps AMP partial groups equal to
    the units; ``joint`` (a training layer planned jointly) keeps input groups the weight update
    can take as output groups."""
    float_acts = in_type == FLOAT
    if float_acts:
        on_tile = target.conv_units_float
    elif partials_type == FLOAT:
        on_tile = target.conv_units_half_float_partials
    else:
        on_tile = target.conv_units_half_half_partials
    load = target.data_path_width_bits // (8 * in_type.size)
    weights_per_unit = target.conv_unit_pipeline_depth * load
    units_options = [on_tile] + ([on_tile // 2] if on_tile == 16 else [])
    methods = []
    for units in units_options:
        for partials in dict.fromkeys((on_tile, weights_per_unit)):
            if partials % units:
                continue
            if not float_acts and partials not in (units, weights_per_unit * units // on_tile):
                continue
            if inference and partials != units:
                continue
            method = ConvMethod("AMP", weights_per_unit, partials, units, weights_per_unit)
            if method not in methods:
                methods.append(method)
    if joint:
        methods = [m for m in methods if m.in_chans_per_group % m.conv_units == 0]
    return methods + mac_methods(in_chans, float_acts, partials_type == FLOAT,
                                 on_tile if joint else 0)


def mac_methods(in_chans: int, float_acts: bool, float_partials: bool,
                joint_units: int = 0) -> list[ConvMethod]:
    """poplin's MAC candidates (``getConvVertexHMACCandidates``): every input group size in
    steps of the grain (two half channels, so activations never need padding on the exchange)
    up to the channels, skipping a size that does not lessen the number of groups (it would
    only add padding); with ``joint_units``, only sizes the weight update can take as its
    output groups (1 or multiples of the AMP units).  The vertex sums one output channel at a
    time with float partials, two with half."""
    grain = 1 if float_acts else 2
    rounded = -(-in_chans // grain) * grain
    methods, previous = [], 0
    for size in range(grain, rounded + 1, grain):
        groups = -(-rounded // size)
        if groups == previous or (joint_units and size != 1 and size % joint_units):
            continue
        methods.append(ConvMethod("MAC", size, 1 if float_partials else 2))
        previous = groups
    return methods


# ---- evaluating every split of one method ------------------------------------------------------
def _ceil_sizes(size: int) -> np.ndarray:
    """Every distinct ``ceil(size / p)``, p = 1..size, ascending."""
    return np.unique(-(-size // np.arange(1, size + 1, dtype=np.int64)))


def _exchange_cycles(elements: np.ndarray, size: int, target: Target) -> np.ndarray:
    """poplin's ``ExchangeEstimator``: bytes at the target's rate, rounded up."""
    return -(-(elements * size) // target.exchange_bytes_per_cycle)


FC_PASSES = ("NONE", "INFERENCE_FWD", "TRAINING_FWD", "TRAINING_BWD", "TRAINING_WU")
"""poplin's ``fullyConnectedPass`` values; NONE is a plain product."""


@dataclass(frozen=True)
class _Problem:
    target: Target
    shape: tuple[int, int, int, int]
    in_type: DType
    partials_type: DType
    out_type: DType
    fc_pass: str = "NONE"

    @property
    def plain_matmul(self) -> bool:
        """A plain ``matMul`` (poplin's NONE_MATMUL pass), not a fully connected layer's."""
        return self.fc_pass == "NONE"

    @property
    def inference(self) -> bool:
        return self.fc_pass == "INFERENCE_FWD"

    def with_shape(self, shape: tuple[int, int, int, int], fc_pass: str | None = None
                   ) -> "_Problem":
        return _Problem(self.target, shape, self.in_type, self.partials_type, self.out_type,
                        self.fc_pass if fc_pass is None else fc_pass)


def _evaluate(problem: _Problem, method: ConvMethod, orientation: str,
              field_grain: int = 1) -> dict[str, np.ndarray]:
    """Cycles and temporary bytes of every split of the product with ``method``: one entry per
    candidate, with its blocks ``(gb, mb, kb, nb)`` (the field cut in grains of
    ``field_grain``)."""
    target = problem.target
    G, M, K, N = problem.shape
    field_size, out_size = (N, M) if orientation == FIELD_N else (M, N)
    in_pg, out_pg = method.in_chans_per_group, method.partial_chans_per_group
    in_grains, out_grains = -(-K // in_pg), -(-out_size // out_pg)
    g_sizes = _ceil_sizes(G)
    f_sizes = np.minimum(_ceil_sizes(-(-field_size // field_grain)) * field_grain, field_size)
    k_sizes, o_sizes = _ceil_sizes(in_grains), _ceil_sizes(out_grains)
    grids = np.meshgrid(g_sizes, k_sizes, np.unique(f_sizes), o_sizes, indexing="ij")
    gb, kg, fb, og = (grid.reshape(-1) for grid in grids)
    kb = np.minimum(kg * in_pg, K)
    ob = np.minimum(og * out_pg, out_size)
    counts = [-(-G // gb), -(-K // kb), -(-field_size // fb), -(-out_size // ob)]
    tiles = counts[0] * counts[1] * counts[2] * counts[3]
    keep = tiles <= target.num_tiles
    gb, kg, fb, og, kb, ob, tiles = (x[keep] for x in (gb, kg, fb, og, kb, ob, tiles))
    pg, pk, pf, po = (c[keep] for c in counts)
    table = pass_cost(problem, method, fb, kg, og, gb, in_divisor=po, weight_divisor=pf,
                      depth=pk)
    transform, transform_temp = _transform_costs(problem, method, orientation, tiles,
                                                 og * out_pg * fb * gb)
    table["transform"] = transform
    table["cycles"] = table["cycles"] + transform
    table["temporary"] = np.maximum(table["temporary"], transform_temp)
    if orientation == FIELD_N:
        table["block"] = np.stack([gb, ob, kb, fb], axis=1)
    else:
        table["block"] = np.stack([gb, fb, kb, ob], axis=1)
    table["tiles"] = tiles
    table["direct"] = (pk == 1) & (problem.partials_type == problem.out_type)
    return table


def pass_cost(problem: _Problem, method: ConvMethod, field: np.ndarray, in_groups: np.ndarray,
              out_groups: np.ndarray, groups: np.ndarray, in_divisor: np.ndarray,
              weight_divisor: np.ndarray, depth: np.ndarray, standard_order: bool = True
              ) -> dict[str, np.ndarray]:
    """poplin's estimate of one pass of a product (``addEstimates``) on a tile computing
    ``field`` elements over ``in_groups`` / ``out_groups`` channel groups of ``groups`` conv
    groups: its vertex, the inputs it takes from the ``in_divisor`` tiles that share them, the
    weights from the ``weight_divisor`` tiles that share those, and the reduction of ``depth``
    partials (the first stage's exchange charged always, as poplin does).  In poplin's
    ``standard_order`` of tiles, the ``in_divisor`` tiles sharing an input are neighbours, so
    with an even count supertile pairs receive it together at twice the rate
    (:data:`~gruc.target.TILES_PER_SHARED_EXCHANGE_BUS`); a joint plan's backward and
    weight-update orders get no such discount.  Arrays, one entry per candidate: cycles by term
    and temporary bytes."""
    target = problem.target
    float_acts, float_partials = problem.in_type == FLOAT, problem.partials_type == FLOAT
    in_size, p_size = problem.in_type.size, problem.partials_type.size
    ci_t = in_groups * method.in_chans_per_group  # per tile, padded to whole groups
    co_t = out_groups * method.partial_chans_per_group
    if method.kind == "AMP":
        coeff = target.conv_unit_coeff_load_bytes_per_cycle // 2  # 64-bit loads (poplibs' default)
        partial_calc = amp_partials_cycles(field, in_groups, out_groups, groups, method,
                                           float_acts, float_partials, coeff)
    else:
        partial_calc = mac_partials_cycles(field, in_groups, out_groups, groups, method,
                                           float_acts, float_partials)
    inputs = field * ci_t * groups
    weights = ci_t * co_t * groups
    partials = field * co_t * groups
    shared = np.where(standard_order & (in_divisor % TILES_PER_SHARED_EXCHANGE_BUS == 0),
                      TILES_PER_SHARED_EXCHANGE_BUS, 1)
    exchange = (-(-_exchange_cycles(inputs - inputs // in_divisor, in_size, target) // shared)
                + _exchange_cycles(weights - weights // weight_divisor, in_size, target)
                + _exchange_cycles(partials, p_size, target))
    reduce_cycles = np.zeros_like(partial_calc)
    reduce_temp = np.zeros_like(partial_calc)
    float_out = problem.out_type == FLOAT
    for level in np.unique(depth).tolist():
        at = depth == level
        if level == 1:
            if problem.partials_type != problem.out_type:
                reduce_cycles[at] = cast_cycles(partials[at], target.vector_width(
                    problem.partials_type), target.vector_width(problem.out_type))
            continue
        stages = multi_stage_reduce_plan(level)
        sent, remaining = partials[at], level  # the later stages' exchange (addExchange...)
        for index, target_depth in enumerate(stages):
            if index:
                exchange[at] += _exchange_cycles(sent, p_size, target)
            step = -(-remaining // target_depth)
            sent, remaining = -(-sent // step), -(-remaining // step)
        if remaining > 1 and stages:
            exchange[at] += _exchange_cycles(sent, p_size, target)
        outputs = -(-partials[at] // level) * level  # the stages' vertices (addReduceCycle...)
        remaining = level
        cost, temp = np.zeros_like(outputs), np.zeros_like(outputs)
        for target_depth in stages:
            step = -(-remaining // target_depth)
            remaining, outputs = -(-remaining // step), -(-outputs // step)
            cost += reduce_add_cycles(outputs, np.full_like(outputs, step), float_out,
                                      float_partials)
            temp = np.maximum(temp, outputs * step)
        if remaining > 1:
            outputs = -(-outputs // remaining)
            cost += reduce_add_cycles(outputs, np.full_like(outputs, remaining), float_out,
                                      float_partials)
            temp = np.maximum(temp, outputs * remaining)
        reduce_cycles[at] = cost
        reduce_temp[at] = temp * problem.out_type.size
    conv_temp = in_size * (inputs + weights) + p_size * partials
    return {"cycles": (partial_calc + exchange + reduce_cycles).astype(np.int64),
            "temporary": np.maximum(conv_temp, reduce_temp).astype(np.int64),
            "partials": partial_calc, "exchange": exchange, "reduce": reduce_cycles}


def _transform_costs(problem: _Problem, method: ConvMethod, orientation: str,
                     tiles: np.ndarray, outputs_per_tile: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Cycles and temporary bytes of the rearrangements a candidate needs
    (``addTransformCycleEstimate``): the swapped orientation copies both operands and the
    output into its layout, as does a separately planned weight-update pass (its input and
    output) and backward pass (its input); a plain product whose partial groups are not the
    AMP's weights per unit regroups its output."""
    target = problem.target
    G, M, K, N = problem.shape
    memcpy = target.data_path_width_bits // 8
    out_size = problem.out_type.size
    pair = 2 if problem.in_type == FLOAT else 4
    cycles = np.zeros_like(tiles)
    temp = np.zeros_like(tiles)
    swapped = orientation == FIELD_M
    rearrange_in = swapped or problem.fc_pass in ("TRAINING_BWD", "TRAINING_WU")
    rearrange_out = swapped or problem.fc_pass == "TRAINING_WU"
    moved = out_bytes = np.zeros_like(tiles)
    if rearrange_in:
        f1 = 4 if (K * N) % pair == 0 else 3
        moved = -(-(G * (M * K + K * N)) // tiles) * out_size
        cycles += -(-moved // target.exchange_bytes_per_cycle) + -(
            -TRANSFORM_COPY_FACTOR * moved // (min(memcpy, out_size) * f1))
    if rearrange_out:
        out_bytes = -(-(G * M * N) // tiles) * out_size
        f1_out = 4 if N % pair == 0 else 3
        cycles += -(-out_bytes // target.exchange_bytes_per_cycle) + -(
            -TRANSFORM_COPY_FACTOR * out_bytes // (min(memcpy, out_size) * f1_out))
    if rearrange_in or rearrange_out:
        temp = 2 * np.maximum(moved, out_bytes)
    elif (problem.plain_matmul and method.kind == "AMP"
          and method.partial_chans_per_group != method.weights_per_conv_unit):
        out_bytes = outputs_per_tile * out_size
        copy_rate = min(memcpy, method.partial_chans_per_group * out_size)
        cycles += -(-TRANSFORM_COPY_FACTOR * out_bytes // (copy_rate * 4))
    return cycles, temp


# ---- choosing ---------------------------------------------------------------------------------
MAC_MACS_PER_TILE_CYCLE = 2
"""More multiply-accumulates a cycle than a tile's MAC vertex ever does: its inner loop takes
``7 + size / 2`` cycles for ``size`` half input channels (``7 + size`` for float), and the six
workers share the tile's issue slots (``conv_costs.mac_partials_cycles``).  So a product of
``W`` multiply-accumulates takes a MAC plan at least ``W / (2 tiles)`` cycles: a bound that
spares the planner evaluating MAC groupings that cannot beat the best plan found so far."""


@functools.lru_cache(maxsize=32)
def _candidates(problem: _Problem) -> tuple[tuple[str, ConvMethod], ...]:
    """Every (orientation, method), in the order poplin tries them."""
    return tuple((orientation, method) for orientation in (FIELD_N, FIELD_M)
                 for method in conv_methods(problem.target, problem.in_type,
                                            problem.partials_type, problem.inference,
                                            problem.shape[2]))


@functools.lru_cache(maxsize=128)
def _table(problem: _Problem, method: ConvMethod, orientation: str) -> dict[str, np.ndarray]:
    """:func:`_evaluate`, kept: the planner asks again under other bounds before it settles."""
    return _evaluate(problem, method, orientation)


def _best(problem: _Problem, bound: float | None):
    """The candidate with the fewest cycles (then temporary bytes, then poplin's order) whose
    temporaries fit ``bound``; None if none does.  MAC groupings whose least possible cycles
    (:data:`MAC_MACS_PER_TILE_CYCLE`) exceed the best found are not evaluated."""
    G, M, K, N = problem.shape
    mac_floor = G * M * K * N / (MAC_MACS_PER_TILE_CYCLE * problem.target.num_tiles)
    best = None
    for order, (orientation, method) in enumerate(_candidates(problem)):
        if method.kind == "MAC" and best is not None and mac_floor > best[0][0]:
            continue
        table = _table(problem, method, orientation)
        ok = np.ones(len(table["cycles"]), dtype=bool) if bound is None else \
            table["temporary"] <= bound
        if not ok.any():
            continue
        index = np.flatnonzero(ok)
        pick = index[np.lexsort((table["tiles"][index], table["temporary"][index],
                                 table["cycles"][index]))[0]]
        key = (int(table["cycles"][pick]), int(table["temporary"][pick]), order)
        if best is None or key < best[0]:
            best = (key, orientation, method, table, int(pick))
    return best


@functools.lru_cache(maxsize=512)
def plan_product(target: Target, shape: tuple[int, int, int, int], in_type: DType,
                 partials_type: DType, out_type: DType, proportion: float,
                 fc_pass: str = "NONE") -> MatMulPlan:
    """poplin's plan of ``shape`` for ``fc_pass`` (see the module docstring).  A training
    layer's forward product is planned jointly with its backward and weight-update products
    (:func:`_joint`), whose plans then follow from it.  Cached, as poplin's ``PlanningCache``."""
    problem = _Problem(target, shape, in_type, partials_type, out_type, fc_pass)
    bound = proportion * target.bytes_per_tile
    if fc_pass in ("TRAINING_BWD", "TRAINING_WU"):
        forward = plan_product(target, _forward_shape(shape, fc_pass), in_type, partials_type,
                               out_type, proportion, "TRAINING_FWD")
        if forward.joint:
            return _derived(problem, forward)
    separate = _separate(problem, bound)
    if fc_pass == "TRAINING_FWD" and proportion > 0:
        joint = _joint(problem, bound)
        if joint is not None and not _separate_is_cheaper(problem, separate, joint, bound):
            return joint
    return separate


def _separate(problem: _Problem, bound: float) -> MatMulPlan:
    """The product planned on its own: fewest cycles within ``bound``, else serial slices, else
    the bound doubled, else unbounded (poplin's ``runPlanner``)."""
    target, shape = problem.target, problem.shape
    G, M, K, N = shape
    if bound == 0:
        return _make_plan(problem, _least_temporary(problem), 1, N, fits=True)
    found = _best(problem, bound)
    if found is not None:
        return _make_plan(problem, found, 1, N, fits=True)
    for serial in _serial_counts(N):  # serial slices of N, as few as fit
        width = N // serial
        sliced = problem.with_shape((G, M, K, width))
        found = _best(sliced, bound)
        if found is not None:
            return _make_plan(sliced, found, serial, width, fits=True, shape=shape)
    limit = 2 * bound
    while limit <= 2 * target.bytes_per_tile:  # poplin: double the bound, then drop it
        found = _best(problem, limit)
        if found is not None:
            return _make_plan(problem, found, 1, N, fits=False)
        limit *= 2
    return _make_plan(problem, _best(problem, None), 1, N, fits=False)


# ---- a training layer's three products, planned together -------------------------------------
def _forward_shape(shape: tuple[int, int, int, int], fc_pass: str) -> tuple[int, int, int, int]:
    """The forward product of a layer whose backward (``[B, O] x [O, I]``) or weight-update
    (``[I, B] x [B, O]``) product has ``shape``: ``[B, I] x [I, O]``."""
    G, M, K, N = shape
    return (G, M, N, K) if fc_pass == "TRAINING_BWD" else (G, K, M, N)


def _pass_shapes(shape: tuple[int, int, int, int]) -> dict[str, tuple[int, int, int, int]]:
    """A forward product's shape and its layer's backward and weight-update products'."""
    G, B, I, O = shape
    return {"TRAINING_FWD": shape, "TRAINING_BWD": (G, B, O, I), "TRAINING_WU": (G, I, B, O)}


def _wu_method(method: ConvMethod) -> ConvMethod:
    """The weight update's vertex (``getFullyConnectedWUMethod``): its input groups are the
    forward's partial groups and its partial groups the forward's input groups (an AMP unless
    those are single channels)."""
    return ConvMethod(method.kind if method.in_chans_per_group > 1 else "MAC",
                      method.partial_chans_per_group, method.in_chans_per_group,
                      method.conv_units, method.weights_per_conv_unit)


def _joint_methods(problem: _Problem) -> list[ConvMethod]:
    """The forward vertices a joint plan may use: input groups the weight update can take as
    its output groups (the forward's input channels are its output channels)."""
    return conv_methods(problem.target, problem.in_type, problem.partials_type, False,
                        problem.shape[2], joint=True)


def _joint(problem: _Problem, bound: float) -> MatMulPlan | None:
    """poplin's joint plan of a training layer (``FC_TRAINING_FWD``): one partition of the
    forward product in its natural orientation, the batch (its output channels) never split,
    the field cut in groups of the input channels, costed as the forward, backward (field and
    input channels swapped) and weight-update (input and output channels swapped) products
    together (``addBwdEstimates``, ``addWuEstimates``); each pass's temporaries within
    ``bound``.  None if no partition fits."""
    G, M, K, N = problem.shape
    best = None
    for method in _joint_methods(problem):
        in_pg, out_pg = method.in_chans_per_group, method.partial_chans_per_group
        table = _evaluate(problem, method, FIELD_N, field_grain=in_pg)
        gb, mb, kb, fb = (table["block"][:, k] for k in range(4))
        full_m = mb >= M  # the batch is not split
        pk, pf = -(-K // kb), -(-N // fb)
        kg, og, fg = -(-kb // in_pg), -(-mb // out_pg), -(-fb // in_pg)
        wu = _wu_method(method)
        ones = np.ones_like(gb)
        backward = pass_cost(problem, method, kg * in_pg, fg, og, gb, ones, pk, pf,
                             standard_order=False)
        update = pass_cost(problem, wu, fb, -(-(og * out_pg) // wu.in_chans_per_group),
                           -(-(kg * in_pg) // wu.partial_chans_per_group), gb, pk, pf, ones,
                           standard_order=False)
        cycles = table["cycles"] + backward["cycles"] + update["cycles"]
        temporary = np.maximum(table["temporary"], np.maximum(backward["temporary"],
                                                              update["temporary"]))
        ok = full_m & (temporary <= bound)
        if not ok.any():
            continue
        index = np.flatnonzero(ok)
        pick = int(index[np.lexsort((temporary[index], cycles[index]))[0]])
        key = (int(cycles[pick]), int(temporary[pick]))
        if best is None or key < best[0]:
            passes = {"TRAINING_FWD": _terms(table, pick), "TRAINING_BWD": _terms(backward, pick),
                      "TRAINING_WU": _terms(update, pick)}
            best = (key, method, tuple(int(v) for v in table["block"][pick]), passes)
    if best is None:
        return None
    (cycles, temporary), method, block, passes = best
    return MatMulPlan(shape=problem.shape, block=block, serial=1, slice_width=N,
                      partials_type=problem.partials_type,
                      direct=block[2] >= K and problem.partials_type == problem.out_type,
                      cycles=cycles, temporary_bytes=temporary, fits=True, orientation=FIELD_N,
                      method=method, breakdown=passes["TRAINING_FWD"], joint=True,
                      joint_passes=tuple(sorted(passes.items())))


def _terms(table: dict[str, np.ndarray], pick: int) -> tuple[tuple[str, int], ...]:
    return tuple((name, int(table[name][pick])) for name in ("partials", "exchange", "reduce"))


def _separate_is_cheaper(problem: _Problem, forward: MatMulPlan, joint: MatMulPlan,
                         bound: float) -> bool:
    """Whether the three products planned apart (each with the rearrangements its pass then
    needs) beat the joint plan, strictly, on (cycles, largest temporaries): poplin keeps the
    joint plan otherwise."""
    shapes = _pass_shapes(problem.shape)
    others = [_separate(problem.with_shape(shapes[fc_pass], fc_pass), bound)
              for fc_pass in ("TRAINING_BWD", "TRAINING_WU")]
    plans = [forward, *others]
    separate = (sum(p.cycles for p in plans), max(p.temporary_bytes for p in plans))
    return separate < (joint.cycles, joint.temporary_bytes)


def _derived(problem: _Problem, forward: MatMulPlan) -> MatMulPlan:
    """The backward or weight-update plan that follows from a joint forward plan
    (``getFullyConnectedBwdPlan`` / ``...WUPlan``): the same tiles, the backward with the field
    and input channels swapped, the weight update with input and output channels swapped (no
    reduction: each weight's gradient is computed on the tile holding the weight).  A half
    weight update whose batch is one AMP input group keeps half partials where the AMP has as
    many units for half partials as for float ones (poplin's planner of the era: the batch is
    summed in one pass of the units, so the partials are the result)."""
    G, M, K, N = problem.shape
    gb, mb, kb, nb = forward.block
    passes = dict(forward.joint_passes)
    if problem.fc_pass == "TRAINING_BWD":  # [B, O] x [O, I]: field I, input channels O
        block, method, order = (gb, mb, nb, kb), forward.method, FC_BWD
    else:  # [I, B] x [B, O]: field O, input channels B, output channels I
        block, method, order = (gb, kb, mb, nb), _wu_method(forward.method), FC_WU
    terms = passes[problem.fc_pass]
    partials_type = problem.partials_type
    target = problem.target
    if (problem.fc_pass == "TRAINING_WU" and problem.out_type == HALF
            and K == method.in_chans_per_group
            and target.conv_units_half_half_partials == target.conv_units_half_float_partials):
        partials_type = HALF  # one AMP pass adds the whole batch: half partials lose nothing
    return MatMulPlan(shape=problem.shape, block=block, serial=1, slice_width=N,
                      partials_type=partials_type,
                      direct=block[2] >= K and partials_type == problem.out_type,
                      cycles=sum(value for _, value in terms),
                      temporary_bytes=forward.temporary_bytes, fits=forward.fits,
                      orientation=FIELD_N, method=method, breakdown=terms, tile_order=order,
                      joint=True)


def _serial_counts(size: int) -> list[int]:
    """Serial splits poplin allows: divisors of the channels (here n), up to
    :data:`MAX_SERIAL_SLICES`, fewest first."""
    return [count for count in range(2, min(size, MAX_SERIAL_SLICES) + 1) if size % count == 0]


def _least_temporary(problem: _Problem):
    """``availableMemoryProportion`` 0: the least temporary memory, then the fewest cycles."""
    best = None
    for order, (orientation, method) in enumerate(_candidates(problem)):
        table = _table(problem, method, orientation)
        pick = int(np.lexsort((table["cycles"], table["temporary"]))[0])
        key = (int(table["temporary"][pick]), int(table["cycles"][pick]), order)
        if best is None or key < best[0]:
            best = (key, orientation, method, table, pick)
    return best


def _make_plan(problem: _Problem, found, serial: int, width: int, fits: bool,
               shape: tuple[int, int, int, int] | None = None) -> MatMulPlan:
    _, orientation, method, table, pick = found
    terms = tuple((name, int(table[name][pick]))
                  for name in ("partials", "exchange", "reduce", "transform"))
    return MatMulPlan(shape=shape or problem.shape,
                      block=tuple(int(v) for v in table["block"][pick]), serial=serial,
                      slice_width=width, partials_type=problem.partials_type,
                      direct=bool(table["direct"][pick]),
                      cycles=int(table["cycles"][pick]) * serial,
                      temporary_bytes=int(table["temporary"][pick]), fits=fits,
                      orientation=orientation, method=method, breakdown=terms)


def block_tile_grid(geometry: Blocking, orientation: str, tile_order: str = "standard"
                    ) -> np.ndarray:
    """The tile of every block, ``[Pg, Pk, Pm, Pn]``, numbered as poplin numbers a partition's
    tiles (``linearizeConvIndices``): conv groups, then input channels, then the field, then the
    output channels innermost (tiles sharing an input are neighbours).  A training layer's
    backward order swaps the field and input channels, its weight-update order the input and
    output channels (``linearizeTileIndices``), so each pass's block of a weight lands on the
    tile holding it."""
    Pg, Pk, Pm, Pn = geometry.counts
    ig, ik, im, in_ = np.meshgrid(np.arange(Pg), np.arange(Pk), np.arange(Pm), np.arange(Pn),
                                  indexing="ij")
    if tile_order == FC_BWD:
        tiles = ((ig * Pn + in_) * Pk + ik) * Pm + im
    elif tile_order == FC_WU:
        tiles = ((ig * Pm + im) * Pn + in_) * Pk + ik
    elif orientation == FIELD_N:
        tiles = ((ig * Pk + ik) * Pn + in_) * Pm + im
    else:
        tiles = ((ig * Pk + ik) * Pm + im) * Pn + in_
    return tiles.astype(np.int64)
