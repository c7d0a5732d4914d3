"""The pure arithmetic behind poplibs' RNN sequence tensors: grains, tiles, shards, FLOPs.

poplibs (``lib/popnn/Rnn.cpp``, ``Gru.cpp: getNumShards``) decides *where* every element of an RNN
sequence tensor lives before it builds anything.  Those decisions are plain integer formulas, so
they live here, beside the target and the types, below graph building and the passes: the
``rnn`` builder and the ``shard`` pass both call them, and a planning sweep can evaluate them
for thousands of configurations without a graph.

The model (``docs/poplibs-notes.md`` §1.2–1.3, §1.7):

* The feature dimension of size ``F`` is cut into *grains* of ``gcd(16, F)`` elements; with the
  batch there are ``F / grain * B`` grains per time step.  poplibs spreads one time step's grains
  over the tiles of a *shard*; ``tiles_per_shard`` is how many tiles the input or output needs
  when spread over the whole target.
* The time axis is cut into ``N`` shards of ``L = ceil(S / N)`` steps (the last gets the rest).
  Each shard is placed on its own tile set, and **on every tile a shard's whole time range is
  stored contiguously, time-major**, so the per-step dynamic slice inside the time loop reads
  only tile-local memory — no exchange per step.  This is the whole point of sharding: more
  shards means fewer steps, hence fewer bytes, per tile.
* Shard tile sets are interleaved from the high end of the tile range (tile 0 holds the loop
  counter) and then rotated by a seed hashed from the layer's shape, so that several layers do not
  all pile onto the same tiles (poplibs commit 86ff8cb0, "Dither Rnn tensor tile allocations").

Integer conventions follow poplibs: ``ceil`` divisions are exact integer arithmetic, and the tile
dither uses the same 32-bit unsigned wraparound (see :func:`dither_tile`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from gruc.errors import GrucOptionError, GrucTypeError, GrucValueError, expect
from gruc.target import Target
from gruc.types import DType, dtype_of
from gruc.validated import GrucModel

__all__ = [
    "RnnParams", "SequenceTileLayout",
    "GRAIN_LIMIT", "GRU_OPERAND_MEMORY_FRACTION", "LIMIT_SHARDING_WITHOUT_CODE_REUSE",
    "num_grains", "calculate_tile_usage", "tiles_per_shard", "get_max_shards",
    "get_input_bytes_per_tile", "get_output_bytes_per_tile", "gru_num_shards",
    "code_reuse_default", "shard_time_bounds", "dither_seed", "dither_tile",
    "sequence_tile_layout", "gru_flops_fwd", "gru_flops_bwd", "gru_flops_wu",
]

GRAIN_LIMIT = 16
"""Largest grain poplibs uses: ``grain = gcd(16, size)`` (hard-coded there, with a note, task
T12909, to take the grouping from the matmul instead)."""

GRU_OPERAND_MEMORY_FRACTION = 0.1
"""Share of one tile's memory the GRU heuristic lets the sequence operands of a shard take."""

LIMIT_SHARDING_WITHOUT_CODE_REUSE = 15
"""Above this many shards poplibs compiles the loop body once and calls it (``codeReuse``)."""

_SIZE_T_MASK = (1 << 64) - 1
_UNSIGNED_MASK = (1 << 32) - 1
_BOOST_HASH_COMBINE_CONSTANT = 0x9E3779B9

PositiveInt = Annotated[int, Field(ge=1)]


# ------------------------------------------------------------------------------------------------
# Parameters
# ------------------------------------------------------------------------------------------------

class RnnParams(GrucModel):
    """poplibs' ``rnn::RnnParams``: the shape of one RNN layer, which fixes its tensor layouts.

    The lengths tensor itself belongs to the graph; only its shape matters for layout and for the
    two predicates, so that is all this model holds.
    """

    dtype: DType = Field(description="Element type of the sequence tensors (a DType or its name).")
    batch_size: PositiveInt = Field(description="Rows B of every sequence tensor.")
    max_time_steps: PositiveInt = Field(description="Time steps S (the longest sequence).")
    layer_sizes: tuple[PositiveInt, PositiveInt] = Field(
        description="(input size I, output size H), in elements.")
    var_time_steps_shape: tuple[int, ...] | None = Field(
        None, description="Shape of the per-sequence lengths tensor, or None for fixed length S.")

    @field_validator("dtype", mode="before")
    @classmethod
    def _dtype_from_name(cls, value: Any) -> DType:
        return dtype_of(value)

    @field_validator("var_time_steps_shape")
    @classmethod
    def _lengths_are_scalar_or_per_row(cls, shape: tuple[int, ...] | None,
                                       info: ValidationInfo) -> tuple[int, ...] | None:
        """poplibs' ``validateTimeSteps``, with its messages."""
        if shape is None:
            return None
        if len(shape) != 1:
            raise ValueError("Invalid RNN timeSteps tensor (rank != 1)")
        batch_size = info.data.get("batch_size")
        if shape[0] != 1 and shape[0] != batch_size:
            raise ValueError(f"Invalid RNN timeSteps tensor (size != batchSize) && (size != 1): "
                             f"size {shape[0]}, batchSize {batch_size}")
        return shape

    @property
    def input_size(self) -> int:
        return self.layer_sizes[0]

    @property
    def output_size(self) -> int:
        return self.layer_sizes[1]

    @property
    def variable_time_steps(self) -> bool:
        """A lengths tensor is given: the loops stop early (``variableTimeSteps()``)."""
        return self.var_time_steps_shape is not None

    @property
    def batch_variable_time_steps(self) -> bool:
        """Lengths differ per row: every step also builds per-row masks (``batchVariableTimeSteps()``).

        A single-element lengths tensor only shortens the loop, even when ``batch_size == 1``.
        """
        return self.var_time_steps_shape is not None and math.prod(self.var_time_steps_shape) > 1


# ------------------------------------------------------------------------------------------------
# Grain and tile geometry (Rnn.cpp helpers and RnnParams methods)
# ------------------------------------------------------------------------------------------------

def num_grains(size: int) -> tuple[int, int]:
    """``(grain, groups)``: ``size`` cut into ``groups`` grains of ``gcd(16, size)`` elements."""
    expect(size >= 1, GrucValueError, f"a feature size must be at least 1, got {size}")
    grain = math.gcd(GRAIN_LIMIT, size)
    return grain, size // grain


def calculate_tile_usage(output: bool, num_tiles: int, batch_size: int,
                         layer_sizes: tuple[int, int]) -> int:
    """Tiles one time step of the input (or output) occupies when spread over ``num_tiles``.

    Grains are dealt ``ceil(grains / num_tiles)`` per tile, so fewer than ``num_tiles`` tiles may
    end up used.
    """
    expect(num_tiles >= 1, GrucValueError, f"num_tiles must be at least 1, got {num_tiles}")
    _, groups = num_grains(layer_sizes[1] if output else layer_sizes[0])
    grains = groups * batch_size
    grains_per_tile = -(-grains // num_tiles)
    return -(-grains // grains_per_tile)


def check_geometry_args(what: str, target: Any, params: Any) -> None:
    """The (target, params) pair every geometry query takes: refuse anything else by name."""
    expect(isinstance(target, Target), GrucTypeError,
           f"{what} needs a gruc Target, got {type(target).__name__}")
    expect(isinstance(params, RnnParams), GrucTypeError,
           f"{what} needs RnnParams, got {type(params).__name__}")


def tiles_per_shard(target: Target, params: RnnParams) -> int:
    """Tiles of one shard: the larger of the input's and the output's tile usage."""
    check_geometry_args("tiles_per_shard", target, params)
    return max(calculate_tile_usage(output, target.num_tiles, params.batch_size, params.layer_sizes)
               for output in (False, True))


def get_max_shards(target: Target, params: RnnParams) -> int:
    """Most shards poplibs allows (``RnnParams::getMaxShards``).

    As many shards as disjoint tile sets fit, but never more than an equal ``ceil`` split of the
    time steps needs, so every shard keeps at least one step.
    """
    check_geometry_args("get_max_shards", target, params)
    fitting = target.num_tiles // tiles_per_shard(target, params)
    steps_per_shard = -(-params.max_time_steps // fitting)
    return -(-params.max_time_steps // steps_per_shard)


def _bytes_per_tile(num_tiles: int, batch_size: int, size: int, dtype: DType) -> int:
    grain, groups = num_grains(size)
    grains_per_tile = -(-(groups * batch_size) // num_tiles)
    return grains_per_tile * grain * dtype.size


def get_input_bytes_per_tile(target: Target, params: RnnParams) -> int:
    """Bytes of **one time step** of the input on its busiest tile, spread over all tiles."""
    check_geometry_args("get_input_bytes_per_tile", target, params)
    return _bytes_per_tile(target.num_tiles, params.batch_size, params.input_size, params.dtype)


def get_output_bytes_per_tile(target: Target, params: RnnParams) -> int:
    """Bytes of **one time step** of the output on its busiest tile, spread over all tiles."""
    check_geometry_args("get_output_bytes_per_tile", target, params)
    return _bytes_per_tile(target.num_tiles, params.batch_size, params.output_size, params.dtype)


# ------------------------------------------------------------------------------------------------
# Shard count (Gru.cpp getNumShards) and the codeReuse default (Rnn.cpp)
# ------------------------------------------------------------------------------------------------

def gru_num_shards(target: Target, params: RnnParams, *, output_full_sequence: bool,
                   reset_after: bool, requested: int | None = None) -> int:
    """Shards of a GRU layer: ``requested`` if given, else poplibs' memory heuristic.

    The heuristic lets all sequence operands of a shard (input, output and the forward
    intermediates saved for training: r, u, c, plus h when the output is not the full sequence,
    plus the recurrent candidate with ``reset_after``) take 10% of a tile, and caps the result at
    :func:`get_max_shards`.  poplibs evaluates it independently in every GRU entry point, so they
    agree only if called with the same parameters.
    """
    max_shards = get_max_shards(target, params)
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, numbers.Integral) \
                or not 1 <= requested <= max_shards:
            raise GrucOptionError(f"GRU numShards must be within interval [1,{max_shards}]; "
                                  f"got {requested!r}")
        return int(requested)
    num_intermediates = 3 + (not output_full_sequence) + reset_after
    operand_bytes = (get_input_bytes_per_tile(target, params)
                     + get_output_bytes_per_tile(target, params) * (1 + num_intermediates)) \
        * params.max_time_steps
    estimated = math.ceil(operand_bytes / (target.bytes_per_tile * GRU_OPERAND_MEMORY_FRACTION))
    return min(estimated, max_shards)


def code_reuse_default(num_shards: int) -> bool:
    """poplibs' ``codeReuse`` default: share one loop body between shards beyond 15 of them."""
    return num_shards > LIMIT_SHARDING_WITHOUT_CODE_REUSE


# ------------------------------------------------------------------------------------------------
# Sequence layout (createShardedTensor / createMultiDynamicSliceTensor)
# ------------------------------------------------------------------------------------------------

def shard_time_bounds(time_steps: int, num_shards: int, multiple: int = 1) -> list[tuple[int, int]]:
    """``(begin, end)`` rows of each shard along a ``[time_steps * multiple, ...]`` sequence.

    Every shard has ``L = ceil(time_steps / num_shards)`` steps until the sequence runs out; each
    step is ``multiple`` rows.  When ``L * (num_shards - 1) >= time_steps`` (e.g. 7 shards of 30
    steps: 5 each) the trailing shards get no steps — poplibs computes their length as an
    unsigned difference that wraps; gruc gives them empty loops, so every shard count from 1 to
    :func:`get_max_shards` builds the same computation.
    """
    expect(time_steps >= 1, GrucValueError, f"time_steps must be at least 1, got {time_steps}")
    expect(num_shards >= 1, GrucValueError, f"num_shards must be at least 1, got {num_shards}")
    expect(multiple >= 1, GrucValueError, f"multiple must be at least 1, got {multiple}")
    steps = -(-time_steps // num_shards)
    return [(min(i * steps, time_steps) * multiple, min((i + 1) * steps, time_steps) * multiple)
            for i in range(num_shards)]


def dither_seed(params: RnnParams) -> int:
    """The layer's dither seed: Boost ``hash_combine`` over (S, B, I, H), as a 64-bit ``size_t``.

    We implement the classic Boost formula ``seed ^= v + 0x9e3779b9 + (seed << 6) + (seed >> 2)``
    with ``hash<size_t>(v) == v`` and 64-bit wraparound, starting from 0.  Boost 1.81 changed the
    mixing, so the seed of a real poplibs build depends on its Boost version; any fixed choice
    gives the same guarantees (disjoint shard tile sets, a per-shape rotation), and this one is
    the formula the poplibs sources were written against.
    """
    seed = 0
    for value in (params.max_time_steps, params.batch_size, *params.layer_sizes):
        seed ^= (value + _BOOST_HASH_COMBINE_CONSTANT + (seed << 6) + (seed >> 2)) & _SIZE_T_MASK
    return seed


def dither_tile(tile: int, seed: int, total_tiles: int) -> int:
    """Rotate ``tile`` by ``seed`` the way poplibs does: ``(tile + seed) % total_tiles`` in ``unsigned``.

    poplibs passes the ``size_t`` seed through an ``unsigned`` parameter (keeping its low 32 bits)
    and adds it to an ``unsigned`` tile number, so the sum wraps at 2**32 before the modulo.  For
    the rare seeds within ``total_tiles`` of 2**32 the wrap breaks the rotation and two shards can
    share a tile; we keep that quirk rather than invent a different placement.
    """
    return ((tile + (seed & _UNSIGNED_MASK)) & _UNSIGNED_MASK) % total_tiles


@dataclass(frozen=True, slots=True)
class SequenceTileLayout:
    """Where poplibs puts each element of an RNN sequence tensor ``[rows, batch_size, size]``.

    ``rows`` is the sum of the shards' row counts.  Shard ``shards[p]`` owns rows
    ``shard_rows[p]`` and tiles ``shard_tiles[p]`` (indexed by tile-of-shard).  Element
    ``(t, b, f)`` with ``f = group * grain + k`` belongs to grain ``group * batch_size + b``, and
    grain ``g`` lives on tile-of-shard ``g // grains_per_tile`` (the last tile holds
    ``grains_on_last_tile``).
    """

    size: int
    """Innermost (feature) dimension of the tensor."""
    batch_size: int
    grain: int
    """Elements per grain: ``gcd(16, size)``."""
    num_groups: int
    """Grains per batch row: ``size // grain``."""
    grains_per_tile: int
    num_used_tiles: int
    """Tiles of each shard this tensor uses (at most ``tiles_per_shard``)."""
    grains_on_last_tile: int
    max_shards: int
    """Disjoint tile sets of ``num_used_tiles`` tiles the target holds; the shard stride."""
    total_tiles: int
    seed: int
    """The dither seed as applied: the low 32 bits of :func:`dither_seed`."""
    shards: tuple[int, ...]
    """Shard numbers present in this tensor (all shards, or the one ``shard_index``)."""
    shard_rows: tuple[tuple[int, int], ...]
    """``(begin, end)`` rows of dim 0 held by each present shard, in order, covering all rows."""
    shard_tiles: tuple[tuple[int, ...], ...]
    """Tile of each tile-of-shard, for each present shard."""

    @property
    def num_grains(self) -> int:
        """Grains in one row: ``num_groups * batch_size``."""
        return self.num_groups * self.batch_size

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.shard_rows[-1][1], self.batch_size, self.size

    def _tile_of_shard(self) -> np.ndarray:
        """``[batch_size, size]``: tile-of-shard of every (b, f), the same for every row."""
        batch = np.arange(self.batch_size, dtype=np.int64)[:, None]
        group = np.arange(self.size, dtype=np.int64)[None, :] // self.grain
        return (group * self.batch_size + batch) // self.grains_per_tile

    def element_tiles(self) -> np.ndarray:
        """Tile of every element of the row-major flattened tensor, as int64."""
        rows_per_shard = [end - begin for begin, end in self.shard_rows]
        shard_of_row = np.repeat(np.arange(len(self.shards)), rows_per_shard)
        tiles = np.asarray(self.shard_tiles, dtype=np.int64)
        return tiles[shard_of_row[:, None, None], self._tile_of_shard()[None]].ravel()

    def shard_row_tiles(self) -> list[tuple[int, int, np.ndarray]]:
        """:meth:`element_tiles` shard by shard: ``(first row, end row, tiles)`` with the
        ``[batch_size, size]`` tiles every row of the shard has, so a long sequence is mapped by
        broadcasting one row (``Graph.set_tile_mapping`` with an array) without listing its
        elements."""
        pattern = self._tile_of_shard()
        return [(first, last, np.asarray(tiles, dtype=np.int64)[pattern])
                for (first, last), tiles in zip(self.shard_rows, self.shard_tiles)]

    def element_order(self) -> np.ndarray:
        """Flat element indices in poplibs' storage order: a permutation of all element indices.

        poplibs allocates per shard a ``[num_used_tiles - 1, rows, grains_per_tile, grain]``
        variable and a ``[rows, grains_on_last_tile, grain]`` one, so the order is shard, tile of
        shard, row (time-major), grain, element of grain.  Each tile's elements therefore form one
        contiguous run, which a runtime can allocate as one block.
        """
        rows, batch, size = self.shape
        grain_index = np.arange(self.num_grains, dtype=np.int64)
        grain_start = (grain_index % batch) * size + (grain_index // batch) * self.grain
        within_row = grain_start[:, None] + np.arange(self.grain, dtype=np.int64)[None, :]
        flat = np.arange(rows, dtype=np.int64)[:, None, None] * (batch * size) + within_row[None]
        split = (self.num_used_tiles - 1) * self.grains_per_tile
        pieces = []
        for begin, end in self.shard_rows:
            block = flat[begin:end]
            all_but_last = block[:, :split].reshape(
                end - begin, self.num_used_tiles - 1, self.grains_per_tile, self.grain)
            pieces.append(all_but_last.transpose(1, 0, 2, 3).ravel())
            pieces.append(block[:, split:].ravel())
        return np.concatenate(pieces)


def sequence_tile_layout(target: Target, params: RnnParams, size: int, num_shards: int, *,
                         multiple: int = 1, sequences_per_shard: int | None = None,
                         shard_index: int | None = None) -> SequenceTileLayout:
    """The layout poplibs' ``createShardedTensor`` gives a sequence tensor of feature ``size``.

    * default: ``[S * multiple, B, size]`` split over ``num_shards`` shards by
      :func:`shard_time_bounds` (``createInputTensor`` / ``createOutputTensor``);
    * ``sequences_per_shard=n``: every shard holds ``n * multiple`` rows, giving
      ``[num_shards * n * multiple, B, size]`` (per-shard state copies inside the loop);
    * ``shard_index=i``: only shard ``i``'s rows, on shard ``i``'s tiles (``createInitialState``
      uses ``sequences_per_shard=1, shard_index=0``).

    Grains are dealt over ``tiles_per_shard`` tiles (fixed by the layer, not by ``size``), so a
    narrow tensor such as the attention scores may use fewer tiles per shard.
    """
    expect(multiple >= 1, GrucValueError, f"multiple must be at least 1, got {multiple}")
    expect(num_shards >= 1, GrucValueError, f"num_shards must be at least 1, got {num_shards}")
    expect(sequences_per_shard is None or sequences_per_shard >= 1, GrucValueError,
           f"sequences_per_shard must be at least 1, got {sequences_per_shard}")
    expect(shard_index is None or 0 <= shard_index < num_shards, GrucValueError,
           f"shard_index {shard_index} is not a shard of {num_shards}")
    grain, groups = num_grains(size)
    grains = groups * params.batch_size
    grains_per_tile = -(-grains // tiles_per_shard(target, params))
    used_tiles = -(-grains // grains_per_tile)
    total_tiles = target.num_tiles
    max_shards = total_tiles // used_tiles
    # poplibs relies on numShards <= getMaxShards (<= max_shards); beyond it tile numbers would
    # go negative and shards would overlap.
    expect(num_shards <= max_shards, GrucValueError,
           f"{num_shards} shards do not fit: {total_tiles} tiles hold at most {max_shards} "
           f"disjoint sets of the {used_tiles} tiles a shard of size {size} uses")

    if sequences_per_shard is None:
        rows = [end - begin for begin, end in
                shard_time_bounds(params.max_time_steps, num_shards, multiple)]
    else:
        rows = [sequences_per_shard * multiple] * num_shards
    shards = tuple(range(num_shards)) if shard_index is None else (shard_index,)
    starts = np.cumsum([0] + [rows[s] for s in shards]).tolist()
    seed = dither_seed(params) & _UNSIGNED_MASK
    shard_tiles = tuple(
        tuple(dither_tile((k + 1) * max_shards - 1 - s, seed, total_tiles) for k in range(used_tiles))
        for s in shards)
    return SequenceTileLayout(
        size=size, batch_size=params.batch_size, grain=grain, num_groups=groups,
        grains_per_tile=grains_per_tile, num_used_tiles=used_tiles,
        grains_on_last_tile=grains - (used_tiles - 1) * grains_per_tile, max_shards=max_shards,
        total_tiles=total_tiles, seed=seed, shards=shards,
        shard_rows=tuple(zip(starts[:-1], starts[1:])), shard_tiles=shard_tiles)


# ------------------------------------------------------------------------------------------------
# FLOP estimators (popnn::gru::getFwdFlops / getBwdFlops / getWuFlops)
# ------------------------------------------------------------------------------------------------

def gru_flops_fwd(batch_size: int, time_steps: int, input_size: int, hidden_size: int) -> int:
    """Forward FLOPs: the two 3-gate matmuls plus 5 elementwise ops per output element.

    Like poplibs, non-linearities and bias adds are not counted, and reset-after, AUGRU and
    variable lengths do not change the figure.
    """
    steps_rows = time_steps * batch_size
    return (2 * input_size * 3 * hidden_size * steps_rows
            + 2 * hidden_size * 3 * hidden_size * steps_rows
            + 3 * steps_rows * hidden_size + 2 * steps_rows * hidden_size)


def gru_flops_bwd(batch_size: int, time_steps: int, input_size: int, hidden_size: int, *,
                  calc_input_gradients: bool) -> int:
    """Backward FLOPs: 8 elementwise ops per output element, the state-gradient matmul and,
    if input gradients are wanted, the input-gradient matmul (poplibs' formula, 6H wide)."""
    steps_rows = time_steps * batch_size
    input_gradient = 2 * input_size * 3 * hidden_size * steps_rows if calc_input_gradients else 0
    return (5 * steps_rows * hidden_size + 3 * steps_rows * hidden_size + input_gradient
            + 2 * hidden_size * 6 * hidden_size * steps_rows)


def gru_flops_wu(batch_size: int, time_steps: int, input_size: int, hidden_size: int) -> int:
    """Weight-update FLOPs: the ``[I+H, 3H]`` weight-gradient matmul and the bias accumulation."""
    steps_rows = time_steps * batch_size
    return (2 * (input_size + hidden_size) * 3 * hidden_size * steps_rows
            + 2 * 3 * hidden_size * steps_rows)
