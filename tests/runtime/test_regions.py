"""Where a view's elements lie in tile memory (:mod:`gruc.runtime.codelets.regions`): the
question "is an element of this tile between two positions?" answered by scanning a short gap and
from the tiles sorted for a long one, the same way."""

from __future__ import annotations

import numpy as np
import pytest

from gruc import FLOAT, Graph, Target
from gruc.runtime.codelets import regions
from gruc.runtime.codelets.regions import VariableTiles


def _brute(tiles: VariableTiles, first: int, last: int, tile: int) -> bool:
    between = np.arange(first + 1, last, dtype=np.int64)
    return bool(np.any(tiles.tiles_of(between) == tile)) if len(between) else False


@pytest.mark.parametrize("alike", [True, False], ids=["rows alike", "rows differ"])
@pytest.mark.parametrize("scanned_gap", [0, 7, 1 << 16], ids=["sorted", "mixed", "scanned"])
def test_tile_between_agrees_with_a_scan(monkeypatch, alike, scanned_gap):
    monkeypatch.setattr(regions, "_SCANNED_GAP", scanned_gap)
    rng = np.random.default_rng(1)
    graph = Graph(Target.custom(tiles_per_ipu=6))
    steps, row = 9, 8
    x = graph.add_variable(FLOAT, (steps, row), "x")
    first_row = rng.integers(0, 6, row)
    mapping = first_row[None] if alike else np.stack([(first_row + k) % 6 for k in range(steps)])
    graph.set_tile_mapping(x, mapping)  # one row broadcast: stored as a repeating row
    tiles = VariableTiles(x, key=())
    assert tiles.repeats == alike
    for _ in range(400):
        first, last = sorted(rng.integers(0, steps * row, 2).tolist())
        tile = int(rng.integers(0, 6))
        assert tiles.tile_between(first, last, tile) == _brute(tiles, first, last, tile), \
            (first, last, tile)


@pytest.mark.parametrize("alike", [True, False], ids=["rows alike", "rows differ"])
def test_tiles_between_answers_each_pair_as_tile_between(alike):
    rng = np.random.default_rng(2)
    graph = Graph(Target.custom(tiles_per_ipu=6))
    steps, row = 9, 8
    x = graph.add_variable(FLOAT, (steps, row), "x")
    first_row = rng.integers(0, 6, row)
    graph.set_tile_mapping(x, first_row[None] if alike
                           else np.stack([(first_row + k) % 6 for k in range(steps)]))
    tiles = VariableTiles(x, key=())
    pairs = np.sort(rng.integers(0, steps * row, (500, 2)), axis=1)
    for tile in range(6):
        expected = [_brute(tiles, first, last, tile) for first, last in pairs.tolist()]
        assert tiles.tiles_between(pairs[:, 0], pairs[:, 1], tile).tolist() == expected


def test_whole_variables_joined_are_a_region_per_tile_and_variable_as_a_walk_finds():
    """A weight update joins its gradient variables whole: their regions come from each one's
    tiles, without listing ids, and are what walking the view's elements finds."""
    from gruc import concat

    rng = np.random.default_rng(3)
    graph = Graph(Target.custom(tiles_per_ipu=8))
    a = graph.add_variable(FLOAT, (4, 6), "a")
    b = graph.add_variable(FLOAT, (10,), "b")
    graph.set_tile_mapping(a, rng.integers(0, 8, (4, 6)))
    graph.set_tile_mapping(b, rng.integers(2, 5, 10))
    for joined in (concat([a.flatten(), b]), concat([b, a.reshape([24])])):
        walked = regions.tile_regions(joined.reverse(0).reverse(0))  # not seen as joined: walked
        found = regions.tile_regions(joined)
        for mine, theirs in zip(found, walked):
            np.testing.assert_array_equal(mine, theirs)


def test_a_shard_of_a_sharded_sequence_has_the_regions_its_expanded_twin_has():
    """A view inside one shard of a sequence mapped shard by shard (a strided view, or a join of
    several, as a training layer's saved intermediates are written) is read as that shard's
    repeating row (``variable_tiles(variable, within)``), never copied out; its slice regions
    and memory regions are those of a twin mapped element by element."""
    from gruc import TileMapping, concat
    from gruc.runtime.codelets.dynamic import slice_regions
    from gruc.runtime.codelets.regions import tile_regions, variable_tiles

    rng = np.random.default_rng(5)
    graph = Graph(Target.custom(tiles_per_ipu=6))
    steps, batch, width = 7, 2, 6
    x = graph.add_variable(FLOAT, (steps, batch, width), "x")
    bounds = [(0, 3), (3, 5), (5, 7)]
    rows = [rng.integers(0, 6, (batch, width)) for _ in bounds]
    for (begin, end), row in zip(bounds, rows):
        graph.set_tile_mapping(x[begin:end], row)
    twin = graph.add_variable(FLOAT, x.shape, "twin")
    graph.set_tile_mapping(twin, TileMapping.from_element_tiles(graph.element_tiles(x)))
    for begin, end in bounds:
        shard = variable_tiles(x, x[begin:end])
        assert shard.repeats and shard.origin == x[begin:end].contiguous_start()
        assert shard.length == batch * width
        joined = concat([x[begin:end, :, 4:6], x[begin:end, :, 0:2]], 2)  # no strided run
        assert variable_tiles(x, joined) is shard
        assert variable_tiles(x, concat([x[0:1], x[steps - 1:steps]])).length == x.num_elements
        for base, other in ((x[begin:end], twin[begin:end]),
                            (x[begin:end, :, 1:4], twin[begin:end, :, 1:4]),
                            (joined, concat([twin[begin:end, :, 4:6],
                                             twin[begin:end, :, 0:2]], 2))):
            columns = base.num_elements // (end - begin)
            for tile in range(6):
                assert [np.asarray(found).tolist() for found in slice_regions(
                    base.reshape([end - begin, columns]), end - begin, columns, tile)] == \
                    [np.asarray(found).tolist() for found in slice_regions(
                        other.reshape([end - begin, columns]), end - begin, columns, tile)]
            assert [part.tolist() for part in tile_regions(base)] == \
                [part.tolist() for part in tile_regions(other)]
