"""Tests of poplibs' RNN geometry: the worked tables of poplibs-notes §1.2 / §1.7, the sequence
layout against an independent re-enactment of poplibs' variable/concat construction, its
invariants (hypothesis), parameter validation and the FLOP estimators."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gruc.errors import GrucOptionError, GrucTypeError, GrucValueError
from gruc.rnn_geometry import (
    RnnParams, calculate_tile_usage, code_reuse_default, dither_seed, dither_tile,
    get_input_bytes_per_tile, get_max_shards, get_output_bytes_per_tile, gru_flops_bwd,
    gru_flops_fwd, gru_flops_wu, gru_num_shards, num_grains, sequence_tile_layout,
    shard_time_bounds, tiles_per_shard)
from gruc.target import Target
from gruc.types import FLOAT, HALF

TWO_32 = 1 << 32


def _target(num_tiles: int) -> Target:
    return Target.ipu2() if num_tiles == 1472 else Target.custom(tiles_per_ipu=num_tiles)


def _params(batch, input_size, hidden, steps, dtype=FLOAT, **kw) -> RnnParams:
    return RnnParams(dtype=dtype, batch_size=batch, max_time_steps=steps,
                     layer_sizes=(input_size, hidden), **kw)


# ------------------------------------------------------------------------------------------------
# §1.2 / §1.7 worked numbers
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tiles, B, I, H, S, dtype, per_shard, max_shards, in_bytes, out_bytes", [
    (20, 2, 16, 8, 200, HALF, 2, 10, 32, 16),
    (20, 2, 16, 8, 200, FLOAT, 2, 10, 64, 32),
    (20, 1, 16, 16, 1000, FLOAT, 1, 20, 64, 64),
    (16, 4, 40, 38, 2, HALF, 16, 1, 32, 20),
    (1472, 64, 256, 256, 512, HALF, 1024, 1, 32, 32),
])
def test_worked_table_of_section_1_2(tiles, B, I, H, S, dtype, per_shard, max_shards, in_bytes,
                                     out_bytes):
    target, params = _target(tiles), _params(B, I, H, S, dtype)
    assert target.bytes_per_tile == 638976
    assert tiles_per_shard(target, params) == per_shard
    assert get_max_shards(target, params) == max_shards
    assert get_input_bytes_per_tile(target, params) == in_bytes
    assert get_output_bytes_per_tile(target, params) == out_bytes


def test_grains_and_tile_usage_by_hand():
    assert num_grains(40) == (8, 5) and num_grains(38) == (2, 19) and num_grains(48) == (16, 3)
    assert num_grains(1) == (1, 1)
    # 19 grains per row x 4 rows = 76 grains over 16 tiles: 5 per tile, 16 tiles used.
    assert calculate_tile_usage(True, 16, 4, (40, 38)) == 16
    # 5 x 4 = 20 grains over 16 tiles: 2 per tile, so only 10 tiles used.
    assert calculate_tile_usage(False, 16, 4, (40, 38)) == 10
    with pytest.raises(GrucValueError, match="at least 1"):
        num_grains(0)


@pytest.mark.parametrize("output_full_sequence, reset_after, expected", [
    # operands (64 + 64 * (1 + k)) * 1000 bytes against 10% of 638976 = 63897.6 bytes:
    (True, False, 6),    # k=3: 320000 / 63897.6 = 5.008 -> 6 (the augru_16x1x16_seq_1000 test)
    (True, True, 7),     # k=4: 384000 / 63897.6 = 6.010 -> 7
    (False, True, 8),    # k=5: 448000 / 63897.6 = 7.011 -> 8
])
def test_gru_shard_heuristic_of_section_1_7(output_full_sequence, reset_after, expected):
    target, params = _target(20), _params(1, 16, 16, 1000)
    assert get_max_shards(target, params) == 20
    shards = gru_num_shards(target, params, output_full_sequence=output_full_sequence,
                            reset_after=reset_after)
    assert shards == expected and not code_reuse_default(shards)


def test_gru_shard_heuristic_is_capped_at_max_shards():
    target, params = _target(20), _params(1, 16, 16, 100_000)
    assert gru_num_shards(target, params, output_full_sequence=False, reset_after=True) == 20
    small = _params(4, 40, 38, 2, HALF)
    assert gru_num_shards(_target(16), small, output_full_sequence=True, reset_after=False) == 1


def test_requested_shards_override_the_heuristic_within_range():
    target, params = _target(20), _params(1, 16, 16, 1000)
    kw = dict(output_full_sequence=True, reset_after=False)
    assert gru_num_shards(target, params, requested=3, **kw) == 3
    assert gru_num_shards(target, params, requested=np.int64(20), **kw) == 20
    for bad in (0, 21, -1, True, 2.0):
        with pytest.raises(GrucOptionError, match=r"GRU numShards must be within interval \[1,20\]"
                           ) as info:
            gru_num_shards(target, params, requested=bad, **kw)
        assert repr(bad) in str(info.value)


def test_code_reuse_default_switches_above_fifteen_shards():
    assert not code_reuse_default(15) and code_reuse_default(16)


# ------------------------------------------------------------------------------------------------
# RnnParams
# ------------------------------------------------------------------------------------------------

def test_params_accept_dtype_names_and_lists():
    params = RnnParams(dtype="half", batch_size=2, max_time_steps=3, layer_sizes=[4, 5])
    assert params.dtype is HALF and params.layer_sizes == (4, 5)
    assert (params.input_size, params.output_size) == (4, 5)
    assert hash(params) == hash(_params(2, 4, 5, 3, HALF))


@pytest.mark.parametrize("batch, shape, variable, batch_variable", [
    (4, None, False, False),
    (4, (1,), True, False),
    (1, (1,), True, False),
    (4, (4,), True, True),
])
def test_time_step_predicates(batch, shape, variable, batch_variable):
    params = _params(batch, 3, 3, 5, var_time_steps_shape=shape)
    assert params.variable_time_steps is variable
    assert params.batch_variable_time_steps is batch_variable


@pytest.mark.parametrize("overrides, error, words", [
    (dict(var_time_steps_shape=(2, 1)), GrucValueError, r"Invalid RNN timeSteps tensor \(rank != 1\)"),
    (dict(var_time_steps_shape=()), GrucValueError, r"\(rank != 1\)"),
    (dict(var_time_steps_shape=(3,)), GrucValueError,
     r"Invalid RNN timeSteps tensor \(size != batchSize\) && \(size != 1\)"),
    (dict(batch_size=0), GrucValueError, "batch_size"),
    (dict(max_time_steps=0), GrucValueError, "max_time_steps"),
    (dict(layer_sizes=(4, 0)), GrucValueError, "layer_sizes"),
    (dict(layer_sizes=(4, 4, 4)), GrucValueError, "layer_sizes"),
    (dict(dtype="bfloat"), GrucTypeError, "unknown element type"),
    (dict(time_steps=3), GrucOptionError, "unknown field"),
])
def test_params_validation_errors(overrides, error, words):
    fields = dict(dtype=FLOAT, batch_size=2, max_time_steps=3, layer_sizes=(4, 4)) | overrides
    with pytest.raises(error, match=words):
        RnnParams(**fields)


# ------------------------------------------------------------------------------------------------
# Time split and dither
# ------------------------------------------------------------------------------------------------

def test_shard_time_bounds_by_hand():
    assert shard_time_bounds(10, 3) == [(0, 4), (4, 8), (8, 10)]
    assert shard_time_bounds(10, 3, multiple=2) == [(0, 8), (8, 16), (16, 20)]
    assert shard_time_bounds(7, 1) == [(0, 7)]
    assert shard_time_bounds(6, 6) == [(i, i + 1) for i in range(6)]
    # ceil(4/3) = 2 steps each leaves nothing for shard 2: an empty loop, not a wrapped length
    assert shard_time_bounds(4, 3) == [(0, 2), (2, 4), (4, 4)]


def test_dither_seed_is_the_classic_boost_hash_combine():
    seed = 0
    for value in (7, 3, 5, 9):
        seed ^= value + 0x9E3779B9 + ((seed << 6) % 2**64) + (seed >> 2)
        seed %= 2**64
    # Order (S, B, I, H) matters: _params takes (B, I, H, S).
    assert dither_seed(_params(3, 5, 9, 7)) == seed
    assert dither_seed(_params(7, 5, 9, 3)) != seed
    assert 0 <= dither_seed(_params(64, 256, 256, 100_000)) < 2**64


def test_dither_tile_wraps_in_32_bit_unsigned_like_poplibs():
    assert dither_tile(3, 5 + (7 << 32), 20) == 8             # high bits of the size_t are dropped
    assert dither_tile(0, TWO_32 - 1, 20) == (TWO_32 - 1) % 20 == 15
    assert dither_tile(1, TWO_32 - 1, 20) == 0                # wrapped: not (1 + 15) % 20


# ------------------------------------------------------------------------------------------------
# Sequence layout
# ------------------------------------------------------------------------------------------------

def test_layout_of_a_tiny_tensor_by_hand():
    # 4 tiles, B=2, I=H=2 (one grain of 2 per row), S=3: 2 tiles per shard, 2 shards of 2 + 1 steps.
    target, params = _target(4), _params(2, 2, 2, 3)
    assert get_max_shards(target, params) == 2
    layout = sequence_tile_layout(target, params, 2, 2)
    seed = dither_seed(params) % TWO_32
    assert seed + 3 < TWO_32 and layout.seed == seed        # no 32-bit wrap: a plain rotation
    assert (layout.grain, layout.num_groups, layout.grains_per_tile, layout.num_used_tiles,
            layout.grains_on_last_tile, layout.max_shards) == (2, 1, 1, 2, 1, 2)
    assert layout.shape == (3, 2, 2) and layout.shard_rows == ((0, 2), (2, 3))
    # Undithered: shard 0 on tiles 1, 3; shard 1 on tiles 0, 2; batch row b is tile-of-shard b.
    undithered = np.array([[[1, 1], [3, 3]], [[1, 1], [3, 3]], [[0, 0], [2, 2]]])
    assert layout.shard_tiles == (((1 + seed) % 4, (3 + seed) % 4), ((0 + seed) % 4, (2 + seed) % 4))
    np.testing.assert_array_equal(layout.element_tiles(), ((undithered + seed) % 4).ravel())
    # Storage: shard 0 tile 0 (rows 0-1 of b=0), shard 0 last tile (b=1), then shard 1 likewise.
    np.testing.assert_array_equal(layout.element_order(), [0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 10, 11])


def test_layout_variants_for_states_and_single_shards():
    target, params = _target(20), _params(2, 16, 8, 200, HALF)
    full = sequence_tile_layout(target, params, 8, 4)
    per_shard = sequence_tile_layout(target, params, 8, 4, sequences_per_shard=1, multiple=3)
    assert per_shard.shape == (12, 2, 8) and per_shard.shard_tiles == full.shard_tiles
    initial = sequence_tile_layout(target, params, 8, 4, sequences_per_shard=1, multiple=2,
                                   shard_index=0)
    assert initial.shape == (2, 2, 8) and initial.shards == (0,)
    assert initial.shard_tiles == full.shard_tiles[:1]
    last = sequence_tile_layout(target, params, 8, 4, shard_index=3)
    assert last.shape == (50, 2, 8) and last.shard_tiles == full.shard_tiles[3:]
    # A narrow tensor (attention, size 1) uses fewer tiles, so more of its shards would fit.
    # B=4, H=38 needs 16 tiles per shard; size 1 has 4 grains, one per tile, 4 tiles of 16.
    narrow = sequence_tile_layout(_target(16), _params(4, 40, 38, 2, HALF), 1, 1)
    assert (narrow.grain, narrow.num_used_tiles, narrow.max_shards) == (1, 4, 4)


def test_layout_rejects_impossible_requests():
    target, params = _target(20), _params(2, 16, 8, 200, HALF)
    with pytest.raises(GrucValueError, match="11 shards do not fit"):
        sequence_tile_layout(target, params, 16, 11)
    with pytest.raises(GrucValueError, match="shard_index 4 is not a shard of 4"):
        sequence_tile_layout(target, params, 16, 4, shard_index=4)
    with pytest.raises(GrucValueError, match="multiple"):
        sequence_tile_layout(target, params, 16, 4, multiple=0)
    with pytest.raises(GrucValueError, match="sequences_per_shard"):
        sequence_tile_layout(target, params, 16, 4, sequences_per_shard=0)


def test_layout_at_ipu2_scale_spreads_one_grain_per_tile():
    target, params = Target.ipu2(), _params(64, 256, 256, 8, HALF)
    layout = sequence_tile_layout(target, params, 256, 1)
    tiles = layout.element_tiles()
    counts = np.bincount(tiles, minlength=target.num_tiles)
    assert layout.num_used_tiles == 1024 and np.count_nonzero(counts) == 1024
    assert set(counts[counts > 0]) == {16 * 8}


def _poplibs_construction(layout):
    """Re-enact createMultiDynamicSliceTensor + createShardedTensor on arrays of tile numbers and
    storage ids: per shard a [U-1, L, gpt, grain] and a [L, lastGrains, grain] variable, each
    tile-of-shard mapped to its tile, viewed with dimRoll/flatten/concat/reshapePartial."""
    U, gpt, grain = layout.num_used_tiles, layout.grains_per_tile, layout.grain
    tile_views, id_views, next_id = [], [], 0
    for (begin, end), tiles in zip(layout.shard_rows, layout.shard_tiles):
        rows = end - begin
        excl_shape = (U - 1, rows, gpt, grain)
        last_shape = (rows, layout.grains_on_last_tile, grain)
        excl_tiles = np.broadcast_to(np.array(tiles[:-1]).reshape(U - 1, 1, 1, 1), excl_shape)
        last_tiles = np.full(last_shape, tiles[-1])
        excl_ids = next_id + np.arange(np.prod(excl_shape)).reshape(excl_shape)
        next_id += excl_ids.size
        last_ids = next_id + np.arange(np.prod(last_shape)).reshape(last_shape)
        next_id += last_ids.size
        for views, excl, last in ((tile_views, excl_tiles, last_tiles), (id_views, excl_ids, last_ids)):
            rolled = excl.transpose(1, 0, 2, 3).reshape(rows, (U - 1) * gpt, grain)
            views.append(np.concatenate([rolled, last], axis=1))

    def logical(views):
        whole = np.concatenate(views, axis=0)                     # [T, numGrains, grain]
        T = whole.shape[0]
        split = whole.reshape(T, layout.num_groups, layout.batch_size, grain)
        return split.transpose(0, 2, 1, 3).reshape(T, layout.batch_size, layout.size)

    return logical(tile_views), logical(id_views)


@st.composite
def layouts(draw):
    num_tiles = draw(st.integers(1, 24))
    params = _params(draw(st.integers(1, 4)), draw(st.integers(1, 40)), draw(st.integers(1, 40)),
                     draw(st.integers(1, 12)), draw(st.sampled_from([HALF, FLOAT])))
    target = _target(num_tiles)
    size = draw(st.sampled_from([params.input_size, params.output_size, 1, draw(st.integers(1, 40))]))
    num_shards = draw(st.integers(1, get_max_shards(target, params)))
    kw = dict(multiple=draw(st.integers(1, 3)))
    mode = draw(st.sampled_from(["sequence", "per_shard", "single"]))
    if mode == "per_shard":
        kw["sequences_per_shard"] = draw(st.integers(1, 3))
    if mode == "single":
        kw["shard_index"] = draw(st.integers(0, num_shards - 1))
    return target, params, size, num_shards, kw


@settings(deadline=None, max_examples=150)
@given(layouts())
def test_layout_properties(case):
    target, params, size, num_shards, kw = case
    layout = sequence_tile_layout(target, params, size, num_shards, **kw)
    # The dither wraps (and may merge shards) only for seeds within total_tiles of 2**32.
    assume(layout.seed + target.num_tiles <= TWO_32)
    rows, batch, _ = layout.shape
    tiles = layout.element_tiles()
    order = layout.element_order()

    expected_tiles, storage_ids = _poplibs_construction(layout)
    np.testing.assert_array_equal(tiles, expected_tiles.ravel())
    by_shard = np.concatenate([np.broadcast_to(row, (last - first, *row.shape)) for first, last,
                               row in layout.shard_row_tiles()])  # one row's tiles per shard
    np.testing.assert_array_equal(by_shard.reshape(-1), tiles)
    assert tiles.dtype == np.int64 and tiles.size == rows * batch * size
    assert tiles.min() >= 0 and tiles.max() < target.num_tiles

    tile_sets = [set(t) for t in layout.shard_tiles]
    assert all(len(s) == layout.num_used_tiles for s in tile_sets)
    assert sum(len(s) for s in tile_sets) == len(set().union(*tile_sets))   # pairwise disjoint

    by_row = tiles.reshape(rows, batch * size)
    for (begin, end), shard_tiles in zip(layout.shard_rows, tile_sets):
        block = by_row[begin:end]
        if end == begin:
            continue  # an empty trailing shard (more shards than the steps need)
        assert (block == block[0]).all()                # a slice at any time t is tile-local
        counts = np.bincount(block[0], minlength=target.num_tiles)
        assert counts.max() <= layout.grains_per_tile * layout.grain
        assert set(block[0]) == shard_tiles
    per_tile = np.bincount(tiles, minlength=target.num_tiles)
    bound = max(end - begin for begin, end in layout.shard_rows) * layout.grains_per_tile * layout.grain
    assert per_tile.max() <= bound

    assert order.dtype == np.int64 and np.array_equal(np.sort(order), np.arange(tiles.size))
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    np.testing.assert_array_equal(inverse, storage_ids.ravel())
    stored_tiles = tiles[order]
    runs = 1 + np.count_nonzero(np.diff(stored_tiles))
    assert runs == len(np.unique(stored_tiles))         # each tile's elements are one run
    run_starts = np.flatnonzero(np.r_[True, np.diff(stored_tiles) != 0])
    for run in np.split(order // (batch * size), run_starts[1:]):
        assert (np.diff(run) >= 0).all()                # time-major within a tile


# ------------------------------------------------------------------------------------------------
# FLOP estimators
# ------------------------------------------------------------------------------------------------

def test_flop_estimators_by_hand():
    # B=2, S=3, I=4, H=5: S*B = 6 rows, 3H = 15.
    # fwd: 2*4*15*6 + 2*5*15*6 + 3*6*5 + 2*6*5 = 720 + 900 + 90 + 60
    assert gru_flops_fwd(2, 3, 4, 5) == 1770
    # bwd: 5*6*5 + 3*6*5 + [2*4*15*6] + 2*5*30*6 = 150 + 90 + [720] + 1800
    assert gru_flops_bwd(2, 3, 4, 5, calc_input_gradients=True) == 2760
    assert gru_flops_bwd(2, 3, 4, 5, calc_input_gradients=False) == 2040
    # wu: 2*9*15*6 + 2*15*6 = 1620 + 180
    assert gru_flops_wu(2, 3, 4, 5) == 1800
