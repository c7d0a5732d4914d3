"""The tile table against a plain per-element model: sequences stored as one row (or a row per
range of rows mapped from one row's tiles, as a sequence's shards are) until written in part,
read through strided views, gathers, clones and comparisons, whatever is mapped how."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gruc import FLOAT, Graph, Target, TileMapping

_spec = importlib.util.spec_from_file_location(
    "_plan_memory_tests", Path(__file__).parents[1] / "memory" / "test_plan_memory.py")
_plan_memory_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_plan_memory_tests)
_view = _plan_memory_tests._view  # random views: slices, reversals, transposes, concatenations...
T8 = Target.custom(tiles_per_ipu=8)


@settings(deadline=None, max_examples=150)
@given(st.data())
def test_the_tile_table_answers_like_a_table_of_every_element(data):
    graph = Graph(T8)
    model = np.zeros(0, np.int64)  # the tile of every id, kept element by element
    variables = []

    for _ in range(3):
        shape = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3), label="shape")
        variables.append(graph.add_variable(FLOAT, shape, f"v{len(variables)}"))
        model = np.concatenate([model, np.full(variables[-1].num_elements, -1)])
    tiles = st.integers(0, T8.num_tiles - 1)
    for _ in range(data.draw(st.integers(1, 8), label="operations")):
        variable = data.draw(st.sampled_from(variables))
        ids = variable.flat_ids()
        operation = data.draw(st.sampled_from(["rows", "tile", "part", "elements", "linear",
                                               "clone", "shard"]), label="operation")
        if operation == "shard" and variable.rank > 1:  # rows a..b from one row's tiles
            begin = data.draw(st.integers(0, variable.shape[0] - 1), label="begin")
            end = data.draw(st.integers(begin + 1, variable.shape[0]), label="end")
            row = np.array(data.draw(st.lists(tiles, min_size=ids.size // variable.shape[0],
                                              max_size=ids.size // variable.shape[0])), np.int64)
            graph.set_tile_mapping(variable[begin:end], row.reshape(variable.shape[1:]))
            model[variable[begin:end].flat_ids()] = np.tile(row, end - begin)
        elif operation == "rows" and variable.rank > 1:
            row = np.array(data.draw(st.lists(tiles, min_size=ids.size // variable.shape[0],
                                              max_size=ids.size // variable.shape[0])), np.int64)
            graph.set_tile_mapping(variable, row.reshape(variable.shape[1:]))
            model[ids] = np.tile(row, variable.shape[0])
        elif operation in ("tile", "rows"):
            tile = data.draw(tiles)
            graph.set_tile_mapping(variable, tile)
            model[ids] = tile
        elif operation == "part":
            view = _view(data.draw, variable)
            if view.has_repeats():
                continue
            tile = data.draw(tiles)
            graph.set_tile_mapping(view, tile)
            model[view.flat_ids()] = tile
        elif operation == "elements":
            each = np.array(data.draw(st.lists(tiles, min_size=ids.size, max_size=ids.size)),
                            np.int64)
            graph.set_tile_mapping(variable, TileMapping.from_element_tiles(each))
            model[ids] = each
        elif operation == "linear":
            graph.map_tensor_linearly(variable, min_elements_per_tile=1, grain_size=1)
            model[ids] = graph.element_tiles(variable)  # poplibs' rule: tested elsewhere
        else:
            source = _view(data.draw, variable)
            if not source.num_elements:  # (the views may be empty; variables here are not)
                continue
            copy = graph.clone(source, f"v{len(variables)}")
            assert copy.first_id == len(model)
            model = np.concatenate([model, model[source.flat_ids()]])
            variables.append(copy)
        for checked in variables:
            view = _view(data.draw, checked)
            np.testing.assert_array_equal(graph.element_tiles(view), model[view.flat_ids()])
            ids = checked.flat_ids()
            assert graph.is_fully_mapped(checked) == bool(np.all(model[ids] >= 0))
            for alike in (checked, view):
                if graph.rows_alike(alike) and alike.rank > 1 and alike.num_elements:
                    rows = model[alike.flat_ids()].reshape(alike.shape[0], -1)
                    assert np.all(rows == rows[0])
            other = _view(data.draw, data.draw(st.sampled_from(variables)))
            if other.shape == view.shape:
                assert graph.same_tiles(view, other) == \
                    np.array_equal(model[view.flat_ids()], model[other.flat_ids()])
        picked = np.array(data.draw(st.lists(st.integers(0, len(model) - 1), max_size=6)),
                          np.int64)
        np.testing.assert_array_equal(graph.element_tiles_of_ids(picked), model[picked])


def test_same_tiles_compares_long_sequences_to_their_last_element():
    """Long views are compared block of rows by block of rows, stopping at the first that
    differs: a difference in the last element only, past the first block, still tells them apart;
    a sequence stored as one row compares equal to one mapped element by element alike."""
    graph = Graph(T8)
    shape = [4, 64, 300]  # 76,800 elements: more than one block of rows
    row = (np.arange(19200) % 8).reshape(64, 300)
    alike = graph.add_variable(FLOAT, shape, "alike")
    graph.set_tile_mapping(alike, np.broadcast_to(row, shape).copy())  # every element's tile
    rows = graph.add_variable(FLOAT, shape, "rows")
    graph.set_tile_mapping(rows, row)  # one row's tiles: stored as that row
    last = graph.add_variable(FLOAT, shape, "last")
    tiles = np.broadcast_to(row, shape).copy()
    tiles[-1, -1, -1] = (tiles[-1, -1, -1] + 1) % 8
    graph.set_tile_mapping(last, tiles)
    assert graph.same_tiles(alike, rows) and graph.same_tiles(rows, alike)
    assert not graph.same_tiles(alike, last) and not graph.same_tiles(last, rows)
    assert graph.same_tiles(alike[1:], rows[1:]) and not graph.same_tiles(alike[3:], last[3:])


def test_sharded_sequences_are_stored_and_compared_a_row_a_shard():
    """A sequence mapped shard by shard, each shard's rows from one row's tiles, keeps a row a
    shard; its views read shard by shard; two such sequences (or one and a twin mapped element by
    element) compare row by row, told apart by a difference in the last shard's row only."""
    graph = Graph(T8)
    shape, bounds = [12, 2, 3], [(0, 5), (5, 10), (10, 12)]
    rows = [np.arange(6).reshape(2, 3) % 8, (np.arange(6).reshape(2, 3) + 3) % 8,
            (np.arange(6).reshape(2, 3) + 5) % 8]
    a, b, c = (graph.add_variable(FLOAT, shape, name) for name in "abc")
    for variable, last in ((a, rows[2]), (b, rows[2]), (c, rows[2] ^ np.eye(2, 3, dtype=int))):
        for (begin, end), row in zip(bounds, [*rows[:2], last]):
            graph.set_tile_mapping(variable[begin:end], row)
    expected = np.concatenate([np.broadcast_to(row, (end - begin, 2, 3))
                               for (begin, end), row in zip(bounds, rows)])
    twin = graph.add_variable(FLOAT, shape, "twin")
    graph.set_tile_mapping(twin, TileMapping.from_element_tiles(expected.reshape(-1)))
    table = graph._table  # noqa: SLF001 (what the table stores)
    assert [(first - a.first_id, count, row) for first, count, row in
            table.regions(a.first_id, a.num_elements)] == [(0, 30, 6), (30, 30, 6), (60, 12, 6)]
    np.testing.assert_array_equal(graph.element_tiles(a), expected.reshape(-1))
    np.testing.assert_array_equal(graph.element_tiles(a[3:8, 1]), expected[3:8, 1].reshape(-1))
    assert graph.rows_alike(a[5:10]) and not graph.rows_alike(a[4:10])
    assert graph.same_tiles(a, b) and graph.same_tiles(a, twin) and graph.same_tiles(a[1:], b[1:])
    assert not graph.same_tiles(a, c) and not graph.same_tiles(a[::-1], b)
    assert graph.same_tiles(a[2:11], twin[2:11]) and not graph.same_tiles(c[2:11], twin[2:11])
    assert graph.is_fully_mapped(a)
    whole = graph.add_variable(FLOAT, shape, "whole")  # every step on the first shard's tiles
    graph.set_tile_mapping(whole, rows[0])
    assert graph.same_tiles(a[0:5], whole[0:5]) and not graph.same_tiles(a, whole)
    assert [(start, count) for start, count, _ in graph.row_pieces(a[1:11])] == \
        [(0, 4), (4, 5), (9, 1)]
    assert graph.row_pieces(whole[2:9]) is not None and graph.row_pieces(twin) is None
