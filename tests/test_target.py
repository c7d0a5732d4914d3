"""Target presets, custom targets and their validation."""

import pytest

from gruc import FLOAT, HALF, GrucError, GrucOptionError, Target


def test_presets_carry_the_published_figures():
    ipu1, ipu2 = Target.ipu1(), Target.ipu2()
    assert (ipu1.tiles_per_ipu, ipu1.bytes_per_tile) == (1216, 256 * 1024)
    assert (ipu2.tiles_per_ipu, ipu2.bytes_per_tile) == (1472, 624 * 1024)
    assert ipu2.num_worker_contexts == 6 and ipu2.min_bytes_per_tile == 128
    assert Target.ipu2(num_ipus=2).num_tiles == 2944
    assert ipu2.total_memory == 1472 * 624 * 1024


def test_vector_width_per_type():
    t = Target.custom()
    assert t.vector_width(FLOAT) == 2 and t.vector_width(HALF) == 4 and t.vector_width("bool") == 8


def test_custom_targets_are_small_and_frozen_and_hashable():
    t = Target.custom(tiles_per_ipu=20)
    assert t.num_tiles == 20 and t.bytes_per_tile == Target.ipu2().bytes_per_tile
    assert hash(t) == hash(Target.custom(tiles_per_ipu=20))
    with pytest.raises(Exception):
        t.tiles_per_ipu = 3  # type: ignore[misc]


@pytest.mark.parametrize("kwargs, words", [
    ({"tiles_per_ipu": 0}, ["tiles_per_ipu = 0", "greater than or equal to 1"]),
    ({"bytes_per_tile": -5}, ["bytes_per_tile = -5"]),
    ({"num_ipus": 0}, ["num_ipus = 0"]),
    # a block aligned to 2 bytes could start a float between two elements' addresses
    ({"memory_alignment": 2}, ["memory_alignment = 2", "multiple of 4"]),
    ({"memory_alignment": 6}, ["memory_alignment = 6", "multiple of 4"]),
])
def test_bad_target_values_are_named(kwargs, words):
    with pytest.raises(GrucError) as info:
        Target.custom(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_unknown_target_field_lists_the_allowed_ones():
    with pytest.raises(GrucOptionError, match="tiles_per_ipu"):
        Target.custom(tiles=3)
