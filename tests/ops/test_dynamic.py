"""dynamic_slice / dynamic_update: numpy's answers on both engines, poplibs' out-of-range and
wrap-around rules, one vertex per tile of columns, and exchange only for the offset."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gruc import (FLOAT, HALF, INT, UNSIGNED_INT, Engine, Execute, Graph, GrucIndexError,
                  GrucShapeError, GrucTypeError, GrucValueError, Sequence, Target)
from gruc.ir.mapping import TileMapping
from gruc.ir.tensor import strided_columns_of
from gruc.ops import dynamic_slice, dynamic_update

T8 = Target.custom(tiles_per_ipu=8)
BACKENDS = ["numpy", "numba"]


def window_rows(shape, dims, sizes, offsets):
    """numpy's index of the window: ``(offset + i) mod n`` on the sliced dims, all elsewhere."""
    index = [np.arange(n) for n in shape]
    for d, s, o in zip(dims, sizes, offsets):
        index[d] = (o + np.arange(s)) % shape[d]
    return np.ix_(*index)


def in_range(shape, dims, offsets):
    return all(0 <= o < shape[d] for d, o in zip(dims, offsets))


def build(shape, dims, sizes, offset_type=INT, dtype=FLOAT, element_tiles=None, target=T8):
    """A graph slicing and updating ``t``; ``t`` is mapped per ``element_tiles`` or linearly."""
    g = Graph(target)
    t = g.add_variable(dtype, shape, "t")
    if element_tiles is None:
        g.map_tensor_linearly(t, min_elements_per_tile=1, grain_size=1)
    else:
        g.set_tile_mapping(t, TileMapping.from_element_tiles(np.asarray(element_tiles)))
    offset = g.add_variable(offset_type, (len(dims),), "offset")
    g.set_tile_mapping(offset, 0)
    window_shape = list(shape)
    for d, s in zip(dims, sizes):
        window_shape[d] = s
    s = g.add_variable(dtype, window_shape, "s")
    g.map_tensor_linearly(s)
    prog = Sequence()
    out = dynamic_slice(g, t, offset, dims, sizes, prog, "slice")
    dynamic_update(g, t, s, offset, dims, sizes, prog, "update")
    for name, tensor in {"t": t, "offset": offset, "s": s, "out": out}.items():
        g.create_host_write(name, tensor)
    g.create_host_read("out", out)
    g.create_host_read("t", t)
    return g, prog


def run(g, prog, backend, values):
    engine = Engine(g, prog, backend=backend)
    for name, value in values.items():
        engine.write_tensor(name, value)
    engine.run(0)
    return engine, engine.read_tensor("out"), engine.read_tensor("t")


def check(shape, dims, sizes, offsets, backend, rng, dtype=FLOAT, **build_args):
    g, prog = build(shape, dims, sizes, dtype=dtype, **build_args)
    window = window_rows(shape, dims, sizes, offsets)
    tv = rng.uniform(-1, 1, shape).astype(dtype.storage)
    sv = rng.uniform(2, 3, np.empty(shape)[window].shape).astype(dtype.storage)
    before = np.full(sv.shape, -7.0, dtype.storage)  # what an unwritten slice result keeps
    _, out, t_after = run(g, prog, backend, {"t": tv, "offset": np.array(offsets), "s": sv,
                                             "out": before})
    expected_t = tv.copy()
    if in_range(shape, dims, offsets):
        np.testing.assert_array_equal(out, tv[window])
        expected_t[window] = sv
    else:
        np.testing.assert_array_equal(out, before)
    np.testing.assert_array_equal(t_after, expected_t)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, dims, sizes, offsets", [
    ((6, 3, 4), [0], [1], [4]),                 # one time step of a sequence
    ((6, 3, 4), [0], [2], [5]),                 # two rows wrapping from the last to the first
    ((5, 3, 4), [0, 2], [2, 3], [4, 2]),        # two dims, both wrapping
    ((3, 5), [1], [5], [3]),                    # a full-size window: a rotation
    ((6, 3, 4), [0], [1], [6]),                 # out of range: nothing happens
    ((5, 3, 4), [2, 0], [1, 2], [1, 9]),        # one of two offsets out of range
    ((6, 3, 4), [0], [1], [-1]),                # negative int offsets are out of range
])
def test_slice_and_update_match_numpy(backend, shape, dims, sizes, offsets, rng):
    check(shape, dims, sizes, offsets, backend, rng)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unsigned_offsets_and_half_data(backend, rng):
    check((4, 2, 6), [0, 1], [3, 1], [2, 1], backend, rng, offset_type=UNSIGNED_INT, dtype=HALF)
    check((4, 2, 6), [0], [1], [4], backend, rng, offset_type=UNSIGNED_INT, dtype=HALF)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_random_windows_and_mappings_match_numpy(data):
    rank = data.draw(st.integers(1, 3), label="rank")
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank),
                            label="shape"))
    dims = data.draw(st.permutations(range(rank)), label="order")[:data.draw(st.integers(1, rank))]
    sizes = [data.draw(st.integers(1, shape[d])) for d in dims]
    offsets = [data.draw(st.integers(-1, shape[d] + 1)) for d in dims]
    count = int(np.prod(shape))
    tiles = data.draw(st.one_of(st.none(), st.lists(st.integers(0, 7), min_size=count,
                                                     max_size=count)), label="tiles")
    check(shape, dims, sizes, offsets, "numpy", np.random.default_rng(0), element_tiles=tiles)


def test_slice_result_is_mapped_like_the_window_at_offset_zero_with_one_vertex_per_tile():
    g = Graph(T8)
    t = g.add_variable(FLOAT, (10, 2, 4), "seq")
    # time-major per tile: every row of each column on the same tile (row b -> tile 3 + b)
    g.set_tile_mapping(t, TileMapping.from_element_tiles(np.repeat([3, 4], 4)[None].repeat(10, 0)))
    counter = g.add_variable(UNSIGNED_INT, (1,), "counter")
    g.set_tile_mapping(counter, 0)
    prog = Sequence()
    out = dynamic_slice(g, t, counter, [0], [1], prog)
    assert out.shape == (1, 2, 4)
    assert g.get_tile_mapping(out) == g.get_tile_mapping(t[0:1])
    (cs,) = g.compute_sets
    assert sorted(v.tile for v in cs.vertices) == [3, 4]
    assert [v.fields["base"].shape for v in cs.vertices] == [(10, 4), (10, 4)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_step_of_a_time_major_sequence_exchanges_only_the_offset(backend):
    g = Graph(T8)
    t = g.add_variable(FLOAT, (10, 2, 4), "seq")
    g.set_tile_mapping(t, TileMapping.from_element_tiles(np.repeat([3, 4], 4)[None].repeat(10, 0)))
    counter = g.add_variable(UNSIGNED_INT, (1,), "counter")
    g.set_tile_mapping(counter, 0)
    prog = Sequence()
    row = dynamic_slice(g, t, counter, [0], [1], prog)
    dynamic_update(g, t, row, counter, [0], [1], prog)
    g.create_host_write("seq", t)
    g.create_host_write("counter", counter)
    engine = Engine(g, prog, backend=backend)
    engine.write_tensor("counter", np.array([7]))
    engine.run(0)
    offset_bytes = 2 * 4  # the 4-byte counter, to each of the two tiles
    assert engine.report.exchange_bytes == 2 * offset_bytes
    for cost in engine.costs:
        assert cost.compute_cycles > 0
        assert set(np.flatnonzero(cost.compute_by_tile).tolist()) == {3, 4}


def test_builders_reject_bad_requests():
    g = Graph(T8)
    t = g.add_variable(FLOAT, (4, 3), "t")
    g.map_tensor_linearly(t)
    offset = g.add_variable(INT, (1,), "offset")
    g.set_tile_mapping(offset, 0)
    two = g.add_variable(INT, (2,), "two")
    g.set_tile_mapping(two, 0)
    floats = g.add_variable(FLOAT, (1,), "floats")
    g.set_tile_mapping(floats, 0)
    unmapped = g.add_variable(FLOAT, (4, 3), "unmapped")
    prog = Sequence()
    cases = [
        (lambda: dynamic_slice(g, t, offset, [2], [1], prog), GrucIndexError, "dim 2"),
        (lambda: dynamic_slice(g, t, offset, [0], [5], prog), GrucValueError, "within 1..4"),
        (lambda: dynamic_slice(g, t, offset, [0], [0], prog), GrucValueError, "within 1..4"),
        (lambda: dynamic_slice(g, t, offset, [0, 0], [1, 1], prog), GrucValueError, "repeat"),
        (lambda: dynamic_slice(g, t, offset, [0], [1, 1], prog), GrucValueError, "one size"),
        (lambda: dynamic_slice(g, t, offset, [], [], prog), GrucValueError, "at least one"),
        (lambda: dynamic_slice(g, t, floats, [0], [1], prog), GrucTypeError, "int"),
        (lambda: dynamic_slice(g, t, two, [0], [1], prog), GrucShapeError, "one element"),
        (lambda: dynamic_slice(g, unmapped, offset, [0], [1], prog), GrucValueError, "mapped"),
        (lambda: dynamic_update(g, t, t[0:2], offset, [0], [1], prog), GrucShapeError, "[1, 3]"),
        (lambda: dynamic_update(g, t, t[1:2], offset, [0], [1], prog), GrucValueError, "shares"),
        (lambda: dynamic_update(g, t, unmapped[0:1].reshape([1, 3]).slice(0, 1, 0), floats,
                                [0], [1], prog), GrucTypeError, "int"),
    ]
    for call, error, words in cases:
        with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
            call()
    assert not any(isinstance(p, Execute) for p in prog.programs)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_columns_straddling_tiles_are_updated_through_a_staging_copy(backend):
    """Vertices only write their own tile: a column of ``t`` split over tiles 0 and 1 is updated
    in a staging copy with whole columns on their home tiles, and a slice result is mapped so."""
    g = Graph(Target.custom(tiles_per_ipu=4))
    t = g.add_variable(FLOAT, (2, 5), "t")
    g.set_tile_mapping(t, TileMapping.from_element_tiles(np.array([0] * 9 + [1])))
    rows = g.add_variable(FLOAT, (2, 5), "rows")
    g.set_tile_mapping(rows, 0)
    offset = g.add_variable(UNSIGNED_INT, (1,), "offset")
    g.set_tile_mapping(offset, 0)
    prog = Sequence()
    dynamic_update(g, t, rows[0:1], offset, [0], [1], prog)
    window = dynamic_slice(g, t, offset, [0], [2], prog)
    assert set(g.element_tiles(window).tolist()) == {0}
    for name, tensor in (("t", t), ("rows", rows), ("offset", offset)):
        g.create_host_write(name, tensor)
    g.create_host_read("t", t)
    g.create_host_read("window", window)
    engine = Engine(g, [prog], backend=backend, checked=True)
    engine.write_tensor("t", np.arange(10.0).reshape(2, 5))
    engine.write_tensor("rows", -np.ones((2, 5)))
    engine.write_tensor("offset", [1])
    engine.run(0)
    np.testing.assert_array_equal(engine.read_tensor("t"), [[0, 1, 2, 3, 4], [-1] * 5])
    np.testing.assert_array_equal(engine.read_tensor("window"), [[-1] * 5, [0, 1, 2, 3, 4]])


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_sequence_slices_by_moved_rows_match_numpy(data):
    """A sequence laid out alike at every step is sliced and updated from one row's pieces and
    how far each moves a row (both numba kernels: one row, and windows of several rows that wrap
    around); a sequence whose last row is mapped differently falls back to listing every row.
    Either way the numbers are numpy's."""
    from gruc.runtime.codelets import dynamic as codelets

    steps = data.draw(st.integers(2, 6), label="steps")
    row_shape = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=2), label="row")
    row_tiles = np.array(data.draw(st.lists(st.integers(0, 7), min_size=int(np.prod(row_shape)),
                                            max_size=int(np.prod(row_shape))), label="tiles"))
    tiles = np.tile(row_tiles, steps)
    alike = data.draw(st.booleans(), label="alike")
    if not alike:
        tiles[-1] = (tiles[-1] + 1) % 8
    size = data.draw(st.integers(1, steps), label="window")
    offset = data.draw(st.integers(-1, steps), label="offset")
    tables = []
    group_tables = codelets._group_tables
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(codelets, "ROW_RUNS_MIN_ROWS", 2)
        patch.setattr(codelets, "_group_tables",
                      lambda *args: tables.append(group_tables(*args)) or tables[-1])
        check((steps, *row_shape), [0], [size], [offset], "numba", np.random.default_rng(0),
              element_tiles=tiles)
    by_moves = [int(table_rows.max()) == 1 for table_rows, *_ in tables]
    assert by_moves and all(by_moves) == alike



@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_a_tile_s_columns_a_grain_of_every_row_are_one_view_and_right(backend, data):
    """A sequence's columns laid out as poplibs lays them out (a grain of each batch row per
    tile: runs of ``grain`` columns, a row of features apart) are picked per tile as one view
    where the runs' span fits in the row (else a concat of the runs), in column order, and slice
    and update as numpy does."""
    grain = data.draw(st.integers(1, 3), label="grain")
    grains = data.draw(st.integers(1, 3), label="grains per row")
    features = grain * grains
    batch = data.draw(st.integers(2, 5), label="batch")
    tiles = data.draw(st.integers(grains, 8), label="tiles")  # a grain of a row per tile
    steps = data.draw(st.integers(1, 3), label="steps")
    shift = data.draw(st.integers(0, 7), label="first tile")
    columns = np.arange(batch * features)
    column_tiles = (shift + columns % features // grain) % tiles
    g, prog = build((steps, batch * features), [0], [1],
                    element_tiles=np.tile(column_tiles, steps))
    slicing = next(cs for cs in g.compute_sets if cs.name == "slice")
    for vertex in slicing.vertices:
        expected = np.flatnonzero(column_tiles == vertex.tile)
        base = vertex.fields["base"]
        assert base.shape == (steps, len(expected))
        np.testing.assert_array_equal(base.ids() - base.variables()[0].first_id,
                                      np.arange(steps)[:, None] * len(columns) + expected)
        runs = np.count_nonzero(np.diff(expected) != 1) + 1
        fits = expected[0] + runs * features <= len(columns)
        assert (strided_columns_of(base) is not None) == (1 < runs and fits)
    offset = data.draw(st.integers(0, steps - 1), label="offset")
    check((steps, batch * features), [0], [1], [offset], backend, np.random.default_rng(0),
          element_tiles=np.tile(column_tiles, steps))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("batch, grains_per_tile, blocks", [(3, 4, 4), (5, 7, 5), (8, 10, 4),
                                                            (16, 21, 6)])
def test_a_tile_s_runs_of_two_lengths_are_a_few_views_and_right(backend, batch, grains_per_tile,
                                                                 blocks):
    """poplibs deals a sequence's grains to tiles a batch row at a time, so a tile holding more
    grains than there are rows holds one grain more of some rows than of the others: runs of two
    lengths, each stretch of equal runs a row apart.  The pick is a strided view per stretch (a
    slice for a run on its own) — a handful of views, not one a run — and slices and updates as
    numpy does."""
    grain, steps = 2, 3
    features = grain * blocks
    grains = np.arange(batch * blocks)  # grain g: batch row g % batch, block g // batch
    grain_tiles = grains // grains_per_tile
    columns = np.arange(batch * features)
    row, block = columns // features, columns % features // grain
    column_tiles = grain_tiles[block * batch + row]
    g, prog = build((steps, batch * features), [0], [1], target=Target.custom(
        tiles_per_ipu=int(grain_tiles.max()) + 1), element_tiles=np.tile(column_tiles, steps))
    slicing = next(cs for cs in g.compute_sets if cs.name == "slice")
    for vertex in slicing.vertices:
        expected = np.flatnonzero(column_tiles == vertex.tile)
        base = vertex.fields["base"]
        np.testing.assert_array_equal(base.ids() - base.variables()[0].first_id,
                                      np.arange(steps)[:, None] * len(columns) + expected)
        assert not base.has_repeats()
        parts = base.sources if base.op.__class__.__name__ == "ConcatOp" else [base]
        runs = np.count_nonzero(np.diff(expected) != 1) + 1
        assert len(parts) <= min(runs, 4), (vertex.tile, runs, len(parts))
    check((steps, batch * features), [0], [1], [1], backend, np.random.default_rng(0),
          target=Target.custom(tiles_per_ipu=int(grain_tiles.max()) + 1),
          element_tiles=np.tile(column_tiles, steps))


def test_a_long_gru_layer_s_slice_groups_never_list_a_sequence_row_by_row():
    """Compile time flat in the sequence length rests on this: every slice group of a training
    layer's loop takes its bases' first row and how far each run moves a row, never every row —
    including bases picked as one view of runs a row apart (a wide batch on few tiles)."""
    from gruc.tools.gru_layer import GruLayerConfig, build_layer
    from gruc.runtime.codelets import dynamic as codelets

    steps = codelets.ROW_RUNS_MIN_ROWS + 2
    layer = build_layer(GruLayerConfig(sequence_size=steps, batch_size=32, input_size=8,
                                       output_size=32, phase="all", tiles_per_ipu=16))
    bases = [v.fields["base"] for cs in layer.graph.compute_sets for v in cs.vertices
             if v.kind.name in ("DynamicSlice", "DynamicUpdate")]
    assert any(strided_columns_of(base) is not None for base in bases)
    tables = []
    group_tables = codelets._group_tables
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(codelets, "_group_tables",
                      lambda *args: tables.append(group_tables(*args)) or tables[-1])
        Engine(layer.graph, layer.programs)
    assert tables and [int(table_rows.max()) for table_rows, *_ in tables] == [1] * len(tables)
