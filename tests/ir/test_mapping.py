"""Tile mappings: poplibs' linear rule, queries on views, clone, innermost grouping, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from gruc import (FLOAT, HALF, INT, Graph, GrucError, GrucIndexError, GrucMappingError,
                  GrucTypeError, Target, TileMapping, concat)

T16 = Target.custom(tiles_per_ipu=16)


def per_tile(graph, t):
    return graph.get_tile_mapping(t).per_tile(graph.target.num_tiles)


def test_linear_mapping_worked_example_float_respects_128_bytes_per_tile():
    # 100 floats, grain 2, >= 32 elements per tile: 50 grains split 16/17/17 -> 3 tiles
    g = Graph(T16)
    x = g.add_variable(FLOAT, (100,))
    g.map_tensor_linearly(x)
    assert per_tile(g, x)[:4] == [[(0, 32)], [(32, 66)], [(66, 100)], []]


def test_linear_mapping_worked_example_half_uses_grain_of_four():
    # 1000 halves: grain 4 -> 250 grains; >= 64 elements (16 grains) per tile -> 15 partitions
    g = Graph(T16)
    x = g.add_variable(HALF, (1000,))
    g.map_tensor_linearly(x)
    counts = g.get_tile_mapping(x).elements_per_tile(16)
    grain_bounds = [k * 250 // 15 for k in range(16)]
    assert counts.tolist() == [4 * (b - a) for a, b in zip(grain_bounds, grain_bounds[1:])] + [0]
    assert all(c % 4 == 0 and c >= 64 for c in counts[:15])


def test_linear_mapping_spreads_evenly_from_tile_zero_when_large():
    g = Graph(T16)
    x = g.add_variable(FLOAT, (4, 100))
    g.map_tensor_linearly(x)
    counts = g.get_tile_mapping(x).elements_per_tile(16)
    assert counts.sum() == 400 and counts[0] > 0 and (counts > 0).sum() == 12
    assert np.all(counts[:12] >= 32)
    starts = [iv[0][0] for iv in per_tile(g, x) if iv]
    assert starts == sorted(starts)  # tiles filled from 0 upward in element order


def test_linear_mapping_explicit_grain_and_minimum():
    g = Graph(T16)
    x = g.add_variable(INT, (10,))
    g.map_tensor_linearly(x, min_elements_per_tile=1, grain_size=1)
    assert per_tile(g, x)[:11] == [[(k, k + 1)] for k in range(10)] + [[]]


def test_mapping_of_views_follows_their_elements():
    g = Graph(T16)
    x = g.add_variable(FLOAT, (4, 8))
    g.set_tile_mapping(x[:2], 3)
    g.set_tile_mapping(x[2:], 5)
    m = g.get_tile_mapping(x.transpose())
    # transposed: each row of 4 elements alternates 3,3,5,5
    assert m.element_tiles().tolist() == [3, 3, 5, 5] * 8
    assert g.get_tile_mapping(x[1:3, 2]).element_tiles().tolist() == [3, 5]
    both = concat([x[3], x[0]])
    assert g.get_tile_mapping(both).per_tile(16)[5] == [(0, 8)]
    assert g.get_tile_mapping(both).per_tile(16)[3] == [(8, 16)]


def test_element_tile_view_is_shaped_like_the_view_and_read_only_where_strided():
    g = Graph(T16)
    x = g.add_variable(FLOAT, (4, 8))
    g.set_tile_mapping(x, [[(0, 5)], [(5, 20)], [(20, 32)]])
    table = np.repeat([0, 1, 2], [5, 15, 12]).reshape(4, 8)
    views = {"whole": (x, table), "columns": (x[:, 2:5], table[:, 2:5]),
             "reversed": (x.reverse(0).transpose(), table[::-1].T),
             "concat": (concat([x[3], x[0]]), np.concatenate([table[3], table[0]]))}
    for name, (view, expected) in views.items():
        tiles = g.element_tile_view(view)
        assert tiles.shape == view.shape and np.array_equal(tiles, expected), name
        assert np.array_equal(g.element_tiles(view), expected.reshape(-1)), name
        if name != "concat":
            assert not tiles.flags.writeable, name


def test_set_tile_mapping_of_a_strided_view_and_of_a_run_write_only_their_elements():
    g = Graph(T16)
    x = g.add_variable(FLOAT, (4, 8))
    g.set_tile_mapping(x, 1)
    g.set_tile_mapping(x[1], TileMapping.from_element_tiles(np.arange(8) % 3 + 4))
    g.set_tile_mapping(x[:, 6], 9)
    expected = np.full((4, 8), 1)
    expected[1] = np.arange(8) % 3 + 4
    expected[:, 6] = 9
    assert np.array_equal(g.element_tile_view(x), expected)
    with pytest.raises(GrucIndexError, match="tile 16 does not exist"):
        g.set_tile_mapping(x[2], 16)
    with pytest.raises(GrucMappingError, match="leaves 2 of 8 elements unmapped"):
        g.set_tile_mapping(x[3], TileMapping.from_element_tiles(np.array([0] * 6 + [-1] * 2)))
    assert np.array_equal(g.element_tile_view(x), expected)  # a refused mapping writes nothing


def test_partial_mapping_and_is_fully_mapped():
    g = Graph(T16)
    x = g.add_variable(FLOAT, (6,))
    assert not g.is_fully_mapped(x)
    g.set_tile_mapping(x[:3], 1)
    assert g.is_fully_mapped(x[:3]) and not g.is_fully_mapped(x)
    assert g.get_tile_mapping(x).tiles.tolist() == [1, -1]


def test_set_tile_mapping_accepts_poplar_form_and_tile_mapping():
    g = Graph(T16)
    x = g.add_variable(FLOAT, (2, 5))
    poplar_form = [[(0, 4)], [], [(4, 10)]]
    g.set_tile_mapping(x, poplar_form)
    assert g.get_tile_mapping(x).per_tile(3) == poplar_form
    y = g.add_variable(FLOAT, (10,))
    g.set_tile_mapping(y, g.get_tile_mapping(x))
    assert g.get_tile_mapping(y) == g.get_tile_mapping(x)


def test_set_tile_mapping_accepts_element_tiles_broadcast_over_the_tensor():
    g = Graph(T16)
    x = g.add_variable(FLOAT, (3, 2, 4))
    row = np.array([[0, 0, 1, 1], [2, 2, 3, 3]])
    g.set_tile_mapping(x, row)  # every [2, 4] row alike, written without a per-element copy
    assert g.element_tiles(x).tolist() == row.reshape(-1).tolist() * 3
    g.set_tile_mapping(x.dim_shuffle([2, 1, 0])[:, :, 1], np.arange(8).reshape(4, 2))  # strided
    assert g.element_tiles(x[1]).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert g.element_tiles(x[0]).tolist() == row.reshape(-1).tolist()
    with pytest.raises(GrucError, match=r"shape \[3\] cannot be broadcast to the tensor's shape "
                                        r"\[3, 2, 4\]"):
        g.set_tile_mapping(x, np.zeros(3, np.int64))
    with pytest.raises(GrucError, match="must hold integers .* float64"):
        g.set_tile_mapping(x, np.zeros(4))
    with pytest.raises(GrucError, match="tile 16 does not exist"):
        g.set_tile_mapping(x, np.full(4, 16))
    with pytest.raises(GrucError, match="tile -1 does not exist"):
        g.set_tile_mapping(x, np.array([0, -1, 0, 0]))
    assert g.element_tiles(x[0]).tolist() == row.reshape(-1).tolist()  # refused: nothing written


def test_clone_keeps_shape_type_and_mapping_of_a_view():
    g = Graph(T16)
    x = g.add_variable(HALF, (3, 40))
    g.map_tensor_linearly(x, grain_size=4, min_elements_per_tile=8)
    view = x.transpose()[5:20]
    c = g.clone(view, "c")
    assert c.shape == view.shape and c.dtype is HALF and c.name == "c"
    assert g.get_tile_mapping(c) == g.get_tile_mapping(view)
    assert c.first_id != x.first_id


def test_detect_innermost_grouping_matches_poplibs_definition():
    g = Graph(T16)
    x = g.add_variable(FLOAT, (4, 16))
    g.map_tensor_linearly(x, min_elements_per_tile=8, grain_size=8)  # 8 elements per tile
    assert g.detect_innermost_grouping(x) == 8          # gcd(longest on a tile 8, contiguous 16)
    assert g.detect_innermost_grouping(x.transpose()) == 1  # innermost row is strided
    y = g.add_variable(FLOAT, (2, 12))
    g.set_tile_mapping(y, 0)
    assert g.detect_innermost_grouping(y) == 12
    assert g.detect_innermost_grouping(y[:, :6]) == 6
    z = g.add_variable(FLOAT, (3, 6))
    g.set_tile_mapping(z, [[(0, 4)], [(4, 18)]])       # first row: 4 on tile 0, 2 on tile 1
    assert g.detect_innermost_grouping(z) == 2          # gcd(4 on one tile, 6 contiguous)
    w = g.add_variable(FLOAT, (2, 5))
    g.set_tile_mapping(w, [[(0, 2)], [(2, 10)]])       # gcd(3, 5) = 1
    assert g.detect_innermost_grouping(w) == 1
    with pytest.raises(GrucError, match="rank-0"):
        g.detect_innermost_grouping(g.add_variable(FLOAT, ()))


def test_contiguous_regions_split_at_variable_boundaries_and_strides():
    g = Graph(T16)
    a = g.add_variable(FLOAT, (2, 3))
    b = g.add_variable(FLOAT, (4,))
    assert g.contiguous_regions(concat([a.flatten(), b])) == [(0, 6), (6, 10)]
    assert g.contiguous_regions(a.transpose()) == [(k, k + 1) for k in range(6)]


@pytest.mark.parametrize("action, error, words", [
    (lambda g, x: g.set_tile_mapping(x, 16), GrucIndexError, ["tile 16", "0..15"]),
    (lambda g, x: g.set_tile_mapping(x, -1), GrucIndexError, ["tile -1", "0..15"]),
    (lambda g, x: g.set_tile_mapping(x, [[(0, 3)]]), GrucMappingError, ["unmapped"]),
    (lambda g, x: g.set_tile_mapping(x, TileMapping.from_element_tiles(np.zeros(3))),
     GrucMappingError, ["3 elements", "has 6"]),
    (lambda g, x: g.add_variable("float64", (2,)), GrucTypeError, ["'float64'", "half, float"]),
    (lambda g, x: g.add_variable(FLOAT, (2, -3)), GrucError, ["negative size -3"]),
    (lambda g, x: g.add_variable(FLOAT, "ab"), GrucTypeError, ["sequence of integers"]),
    (lambda g, x: g.add_constant(FLOAT, (2, 3), np.ones(4)), GrucError, ["[4]", "[2, 3]"]),
    (lambda g, x: g.map_tensor_linearly(x, grain_size=0), GrucError, ["grain_size 0"]),
    (lambda g, x: Graph(Target.custom(tiles_per_ipu=4)).set_tile_mapping(x, 0), GrucError,
     ["another graph"]),
    (lambda g, x: g.create_host_read("", x), GrucError, ["non-empty"]),
])
def test_bad_mapping_and_graph_input(action, error, words):
    g = Graph(T16)
    x = g.add_variable(FLOAT, (6,))
    with pytest.raises(error) as info:
        action(g, x)
    for word in words:
        assert word in str(info.value)


def test_host_stream_names_are_unique():
    g = Graph(T16)
    x = g.add_variable(FLOAT, (6,))
    g.create_host_write("x", x)
    with pytest.raises(GrucError, match="already exists"):
        g.create_host_write("x", x)


@pytest.mark.parametrize("reserve", ["granted", "refused"])
@pytest.mark.parametrize("prefault", ["done", "refused"])
def test_the_tile_table_keeps_every_mapping_as_it_grows(reserve, prefault, monkeypatch):
    """Variables added until the tile table outgrows its first allocation, with the address
    space reservation granted or refused (strict overcommit: the table then grows by doubling,
    copying what it holds) and the one-call page faulting done or refused (an older kernel):
    every variable keeps its own mapping, and new ones start unmapped."""
    import mmap

    from gruc.ir import tile_table as table_module

    monkeypatch.setattr(table_module, "TABLE_RESERVE", 5000)
    monkeypatch.setattr(table_module, "PREFAULT_BYTES", 1)
    real_mmap = mmap.mmap

    class Mapped(real_mmap):
        def __new__(cls, fileno, length, **kwargs):
            if reserve == "refused" and kwargs.get("flags", 0) & table_module._MAP_NORESERVE:
                raise OSError("reservation refused")
            return real_mmap.__new__(cls, fileno, length, **kwargs)

        def madvise(self, *args):
            if prefault == "refused":
                raise OSError("EINVAL")
            return super().madvise(*args)

    monkeypatch.setattr(table_module.mmap, "mmap", Mapped)
    g = Graph(T16)
    seq = g.add_variable(FLOAT, (30, 40), "seq")  # stored a row a shard: its rows kept as grown
    g.set_tile_mapping(seq[:12], np.arange(40) % 16)
    g.set_tile_mapping(seq[12:], (np.arange(40) + 5) % 16)
    variables = []
    for k in range(12):
        v = g.add_variable(FLOAT, (700 + k,), f"v{k}")
        assert not g.is_fully_mapped(v)
        g.set_tile_mapping(v, TileMapping.from_element_tiles((np.arange(700 + k) + k) % 16))
        variables.append(v)
    for k, v in enumerate(variables):
        np.testing.assert_array_equal(g.element_tiles(v), (np.arange(700 + k) + k) % 16)
    np.testing.assert_array_equal(g.element_tiles(seq).reshape(30, 40),
                                  np.concatenate([np.tile(np.arange(40) % 16, (12, 1)),
                                                  np.tile((np.arange(40) + 5) % 16, (18, 1))]))
    assert len(g._table.array) >= g._table.size > 5000


def test_a_graph_holds_past_2_to_the_32_elements_where_its_sequences_have_rows_alike():
    """An IPU-POD16 holds 7.5 billion half elements, so a graph of a layer that could fit one
    must hold past 2^32: a sequence of 2^32 elements mapped from one row's tiles costs its row,
    the ids after it are past 2^32, and every element's tile is read from the table."""
    from gruc.ir.graph import MAX_ELEMENTS

    assert MAX_ELEMENTS >= 2 ** 33
    g = Graph(T16)
    rows, width = (1 << 16) + 3, 1 << 16
    seq = g.add_variable(HALF, (rows, width), "seq")
    g.set_tile_mapping(seq[:5], np.arange(width) % 16)
    g.set_tile_mapping(seq[5:], (np.arange(width) + 3) % 16)
    after = g.add_variable(FLOAT, (6,), "after")
    g.set_tile_mapping(after, TileMapping.from_element_tiles(np.arange(6) + 10))
    assert int(after.flat_ids()[0]) > 1 << 32 and g._table.size > 1 << 32
    np.testing.assert_array_equal(g.element_tiles(after), np.arange(6) + 10)
    np.testing.assert_array_equal(g.element_tiles(seq[rows - 1, 7:11]), (np.arange(7, 11) + 3) % 16)
    np.testing.assert_array_equal(g.element_tiles(seq[4, :4]), np.arange(4))
    with pytest.raises(GrucError, match=r"2\^34"):
        g.add_variable(FLOAT, (MAX_ELEMENTS,), "too_many")


def test_the_graph_knows_which_sequences_have_rows_alike_and_which_variables_are_mapped():
    """Rows alike: unmapped, mapped whole from one row's tiles or onto one tile, or cloned from
    such a variable — forgotten as soon as any part is mapped anew; never claimed for a mapping
    that only happens to repeat.  Fully mapped: known from whole mappings, or found once by reading
    the tiles of the whole variable, never from a view that covers as many elements as the
    variable but not all of them."""
    g = Graph(T16)
    seq = g.add_variable(FLOAT, [5, 2, 3], "seq")
    assert g.rows_alike(seq) and not g.is_fully_mapped(seq)  # every row unmapped, alike
    g.set_tile_mapping(seq, np.arange(6).reshape(2, 3))
    assert g.rows_alike(seq) and g.is_fully_mapped(seq)
    copy = g.clone(seq, "copy")
    assert g.rows_alike(copy) and g.is_fully_mapped(copy)
    assert g.rows_alike(copy[1:4]) and g.rows_alike(copy.reshape([5, 6])[::2])
    assert not g.rows_alike(copy.reshape([10, 3])) and not g.rows_alike(copy.dim_shuffle([1, 0, 2]))
    assert not g.rows_alike(concat([seq, copy], 1))  # two variables: not known
    g.set_tile_mapping(seq[4, 1, 2], 9)  # one element elsewhere: rows differ now
    assert not g.rows_alike(seq) and g.rows_alike(copy)
    assert not g.rows_alike(g.clone(seq[0:2], "part"))  # a view's clone: not known
    one_tile = g.add_variable(FLOAT, [4, 2], "one_tile")
    g.set_tile_mapping(one_tile, 3)
    assert g.rows_alike(one_tile)
    scalar = g.add_variable(FLOAT, [], "scalar")
    g.set_tile_mapping(scalar, 3)
    assert g.rows_alike(scalar.broadcast_to([4, 2]))  # every row the one element
    intervals = g.add_variable(FLOAT, [2, 2], "intervals")  # repeating, but given per element
    g.set_tile_mapping(intervals, TileMapping.from_element_tiles(np.array([1, 2, 1, 2])))
    assert not g.rows_alike(intervals) and g.is_fully_mapped(intervals)
    spread = g.add_variable(FLOAT, [64, 8], "spread")
    g.map_tensor_linearly(spread)
    assert not g.rows_alike(spread) and g.is_fully_mapped(spread)

    pairs = g.add_variable(FLOAT, [4, 2], "pairs")  # mapped whole, but by rows of a reshape
    g.set_tile_mapping(pairs.reshape([2, 4]), np.array([0, 1, 2, 3]))
    assert not g.rows_alike(pairs) and g.is_fully_mapped(pairs)
    np.testing.assert_array_equal(g.element_tiles(pairs), [0, 1, 2, 3, 0, 1, 2, 3])
    column = g.add_variable(FLOAT, [2, 1], "column")  # its transpose: the same ids, one row
    g.set_tile_mapping(column.dim_shuffle([1, 0]), np.array([4, 5]))
    assert not g.rows_alike(column)
    np.testing.assert_array_equal(g.element_tiles(column), [4, 5])

    halves = g.add_variable(FLOAT, [4], "halves")
    g.set_tile_mapping(halves[0:2], 1)
    twice = concat([halves[0:2], halves[0:2]])  # four elements of halves, two of them twice
    assert g.is_fully_mapped(twice) and not g.is_fully_mapped(halves)
    assert not g.rows_alike(halves)
    g.set_tile_mapping(halves[2:4], 2)
    assert g.is_fully_mapped(halves)  # found by reading its tiles


def test_a_broadcast_view_maps_when_every_copy_of_an_element_agrees():
    g = Graph(Target.custom(tiles_per_ipu=4))
    v = g.add_variable(FLOAT, (3,), "v")
    g.set_tile_mapping(v.broadcast(2, 0), 1)
    g.set_tile_mapping(v.broadcast(2, 0), np.array([2, 3, 0, 2, 3, 0]))
    assert g.element_tiles(v).tolist() == [2, 3, 0]


def test_a_graphs_tile_mapping_reads_as_poplars_per_tile_lists():
    g = Graph(Target.custom(tiles_per_ipu=4))
    v = g.add_variable(FLOAT, (2, 6), "v")
    g.set_tile_mapping(v, [[(0, 3)], [(3, 6), (9, 12)], [], [(6, 9)]])
    mapping = g.get_tile_mapping(v)
    assert len(mapping) == 4 and mapping[1] == [(3, 6), (9, 12)] and mapping[2] == []
    assert list(mapping) == [[(0, 3)], [(3, 6), (9, 12)], [], [(6, 9)]]
    g.set_tile_mapping(v, list(mapping))   # round trip through Poplar's form
    assert g.get_tile_mapping(v) == mapping
    with pytest.raises(GrucIndexError, match=r"tile 4 does not exist; the target has tiles 0..3"):
        mapping[4]
    with pytest.raises(GrucError, match=r"made without a target"):
        len(TileMapping.from_element_tiles(np.zeros(3, dtype=np.int64)))
