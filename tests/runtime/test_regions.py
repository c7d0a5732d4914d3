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
