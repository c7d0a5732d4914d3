"""Tensor views: every chain of view operations selects exactly the elements numpy selects."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gruc import (FLOAT, Engine, Graph, GrucError, GrucIndexError, GrucShapeError, Sequence,
                  Target, concat)
from gruc.ir.expr import _1, _2
from gruc.ir.layout import Strided, same_ids, strided_distinct, strided_view
from gruc.ir.tensor import strided_columns
from gruc.ops import map

SMALL = Target.custom(tiles_per_ipu=16)


def fresh(shape, graph=None):
    """A variable and the numpy array of the global ids it owns."""
    graph = graph or Graph(SMALL)
    var = graph.add_variable(FLOAT, shape)
    ids = np.arange(var.first_id, var.first_id + math.prod(shape)).reshape(shape)
    return graph, var, ids


def _dim(data, rank):
    return data.draw(st.integers(0, rank - 1))


def step(data, graph, t, a):
    """Apply one random view op to tensor ``t`` and the same op to numpy array ``a``."""
    rank = t.rank
    ops = ["reshape", "flatten", "expand", "getitem"]
    if rank >= 1:
        ops += ["slice", "reverse", "broadcast", "dim_roll", "dim_shuffle", "subsample", "concat",
                "reshape_partial", "concat_slices"]
        if t.shape[0] > 0:
            ops.append("index")
    if rank == 2:
        ops.append("transpose")
    if 1 in t.shape:
        ops.append("squeeze")
    op = data.draw(st.sampled_from(ops), label="op")
    if op == "slice":
        d = _dim(data, rank)
        b = data.draw(st.integers(0, t.shape[d]))
        e = data.draw(st.integers(b, t.shape[d]))
        index = [slice(None)] * rank
        index[d] = slice(b, e)
        return t.slice(b, e, d), a[tuple(index)]
    if op == "index":
        i = data.draw(st.integers(-t.shape[0], t.shape[0] - 1))
        return t[i], a[i]
    if op == "getitem":
        key = []
        for n in t.shape[:data.draw(st.integers(0, rank))]:
            start = data.draw(st.none() | st.integers(-n - 1, n + 1))
            stop = data.draw(st.none() | st.integers(-n - 1, n + 1))
            stride = data.draw(st.sampled_from([None, 1, 2, 3, -1, -2]))
            key.append(slice(start, stop, stride))
        return t[tuple(key)], a[tuple(key)]
    if op == "reshape":
        n = t.num_elements
        divisors = [k for k in range(1, n + 1) if n % k == 0] or [1]
        k = data.draw(st.sampled_from(divisors))
        shape = (k, n // k) if n else (0,)
        return t.reshape(shape), a.reshape(shape)
    if op == "reshape_partial":
        d = _dim(data, rank)
        n = t.shape[d]
        k = data.draw(st.sampled_from([k for k in range(1, n + 1) if n % k == 0] or [1]))
        dims = (k, n // k) if n else (0, 1)
        return t.reshape_partial(d, d + 1, dims), a.reshape(a.shape[:d] + dims + a.shape[d + 1:])
    if op == "flatten":
        if rank >= 2 and data.draw(st.booleans()):
            b = data.draw(st.integers(0, rank - 2))
            e = data.draw(st.integers(b + 1, rank))
            shape = a.shape[:b] + (math.prod(a.shape[b:e]),) + a.shape[e:]
            return t.flatten(b, e), a.reshape(shape)
        return t.flatten(), a.reshape(-1)
    if op == "expand":
        d = data.draw(st.integers(0, rank))
        return t.expand([d]), np.expand_dims(a, d)
    if op == "squeeze":
        dims = [d for d, n in enumerate(t.shape) if n == 1]
        chosen = data.draw(st.lists(st.sampled_from(dims), min_size=1, unique=True))
        return t.squeeze(chosen), np.squeeze(a, tuple(chosen))
    if op == "broadcast":
        d = _dim(data, rank)
        n = data.draw(st.integers(1, 3))
        return t.broadcast(n, d), np.concatenate([a] * n, axis=d)
    if op == "transpose":
        return t.transpose(), a.T
    if op == "dim_shuffle":
        perm = data.draw(st.permutations(range(rank)))
        return t.dim_shuffle(perm), np.transpose(a, perm)
    if op == "dim_roll":
        src, dst = _dim(data, rank), _dim(data, rank)
        return t.dim_roll(src, dst), np.moveaxis(a, src, dst)
    if op == "reverse":
        d = _dim(data, rank)
        return t.reverse(d), np.flip(a, d)
    if op == "subsample":
        d = _dim(data, rank)
        s = data.draw(st.integers(1, 3))
        index = [slice(None)] * rank
        index[d] = slice(None, None, s)
        return t.subsample(s, d), a[tuple(index)]
    if op == "concat_slices":  # slices of ``t`` itself, which may overlap
        d = _dim(data, rank)
        parts, arrays = [], []
        for _ in range(data.draw(st.integers(1, 3))):
            b = data.draw(st.integers(0, t.shape[d]))
            e = data.draw(st.integers(b, t.shape[d]))
            index = [slice(None)] * rank
            index[d] = slice(b, e)
            parts.append(t.slice(b, e, d))
            arrays.append(a[tuple(index)])
        return concat(parts, d), np.concatenate(arrays, d)
    # concat with a view of a different variable
    d = _dim(data, rank)
    shape = list(t.shape)
    shape[d] = data.draw(st.integers(0, 3))
    _, other, other_ids = fresh(tuple(shape), graph)
    if data.draw(st.booleans()):
        return concat([t, other.reverse(d)], d), np.concatenate([a, np.flip(other_ids, d)], d)
    return concat([other, t], d), np.concatenate([other_ids, a], d)


@settings(deadline=None, max_examples=300)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4), data=st.data())
def test_random_view_chains_select_what_numpy_selects(shape, data):
    graph, t, a = fresh(tuple(shape))
    length = data.draw(st.integers(6, 12), label="chain length")
    for _ in range(length):
        if t.num_elements > 2000:
            break
        t, a = step(data, graph, t, a)
        assert t.shape == a.shape
    assert np.array_equal(t.ids(), a)
    assert t.has_repeats() == (len(np.unique(a)) != a.size)


@settings(deadline=None, max_examples=200)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4), data=st.data())
def test_strided_shortcuts_answer_what_the_id_arrays_answer(shape, data):
    """``same_ids``, ``strided_distinct`` and ``strided_view`` decide from offset and strides what
    listing the ids would: checked on random view chains against the listed ids, pairing each
    view with another chain's view and with itself shifted by one along a dimension (same shape
    and strides, another offset — unless that dimension is a broadcast)."""
    graph, t, a = fresh(tuple(shape))
    views = []
    for _ in range(2):
        view, ids = t, a
        for _ in range(data.draw(st.integers(0, 5), label="chain length")):
            if view.num_elements > 2000:
                break
            view, ids = step(data, graph, view, ids)
        views.append((view, ids))
    first, first_ids = views[0]
    long_dims = [k for k, n in enumerate(first.shape) if n >= 2]
    if long_dims:
        d = data.draw(st.sampled_from(long_dims))
        index = [slice(None)] * first.rank
        index[d] = slice(1, None)
        views.append((first.slice(1, first.shape[d], d), first_ids[tuple(index)]))
        index[d] = slice(0, -1)
        first, first_ids = first.slice(0, first.shape[d] - 1, d), first_ids[tuple(index)]
    for second, second_ids in views[1:] + [(first, first_ids)]:
        expected = first_ids.size == second_ids.size and np.array_equal(
            first_ids.reshape(-1), second_ids.reshape(-1))
        assert same_ids(first.layout(), first.shape, second.layout(), second.shape) == expected
    layout = first.layout()
    if isinstance(layout, Strided):
        flat = first_ids.reshape(-1)
        assert strided_distinct(layout, first.shape) == (len(np.unique(flat)) == len(flat))
        table = np.arange(flat.max(initial=0) + 1)  # table[id] == id
        assert np.array_equal(strided_view(table, 0, layout, first.shape), first_ids)


def test_views_alias_not_copy():
    graph, x, ids = fresh((2, 3, 4))
    view = x.dim_shuffle((2, 0, 1))[1:3].flatten(1, 3)
    assert view.variables() == [x]
    assert np.array_equal(view.ids(), ids.transpose(2, 0, 1)[1:3].reshape(2, 6))
    assert len(graph.variables) == 1


def test_variables_are_listed_in_first_use_order_and_each_caller_gets_its_own_list():
    g, a, _ = fresh((2, 3))
    _, b, _ = fresh((2, 3), g)
    _, c, _ = fresh((1, 3), g)
    view = concat([concat([b, a]).reverse(0), c, b[:1]])
    assert view.variables() == [b, a, c]
    listed = view.variables()
    listed.append(a)
    assert view.variables() == [b, a, c] and view.sources[0].variables() == [b, a]
    assert view.contiguous_start() is None and b[1].contiguous_start() == b.first_id + 3


def test_has_repeats_of_concatenated_slices_follows_their_ids():
    """Slices of one tensor without repeats that do not overlap have none; overlapping ones,
    slices of a tensor with repeats, or slices of different tensors, are decided by their ids."""
    g, x, _ = fresh((4, 10))
    _, y, _ = fresh((4, 10), g)
    _, wide, _ = fresh((2, 64), g)
    broadcast = x[:1].broadcast(4, 0)

    def cols(t, b, e):
        return t.slice(b, e, 1)

    cases = {
        "disjoint columns": (concat([cols(x, 6, 9), cols(x, 0, 2), cols(x, 3, 5)], 1), False),
        "overlapping columns": (concat([cols(x, 0, 4), cols(x, 3, 5)], 1), True),
        "disjoint in rows, overlapping in columns": (
            concat([x.slice((0, 0), (2, 5)), x.slice((2, 3), (4, 8))], 0), False),
        "overlapping boxes": (concat([x.slice((0, 0), (3, 5)), x.slice((2, 3), (3, 8))], 0), True),
        "disjoint slices of a broadcast": (
            concat([cols(broadcast, 0, 2), cols(broadcast, 5, 7)], 1), True),
        "disjoint slices of a broadcast, one row": (
            concat([broadcast.slice((0, 0), (1, 2)), broadcast.slice((0, 5), (1, 7))], 1), False),
        "slices of two tensors": (concat([cols(x, 0, 2), cols(y, 0, 2)], 1), False),
        "one element twice across views": (
            concat([cols(x, 0, 2), x.transpose()[:2].transpose()], 1), True),
        # more than MAX_COMPARED_SLICES, differing in one dim: ordered along it, not listed
        "many disjoint column runs": (concat([cols(wide, b, b + 2) for b in range(60, 0, -3)], 1),
                                      False),
        "many column runs, two touching": (
            concat([cols(wide, b, b + 2) for b in range(0, 60, 3)] + [cols(wide, 58, 59)], 1),
            True),
        "many runs, in two dims": (
            concat([wide.slice((r, b), (r + 1, b + 2)) for r in (0, 1) for b in range(0, 30, 3)]
                   + [wide.slice((0, 1), (1, 2))], 1), True),
    }
    for name, (view, repeats) in cases.items():
        ids = view.flat_ids()
        assert (len(np.unique(ids)) != len(ids)) is repeats, name
        assert view.has_repeats() is repeats, name


def test_a_one_to_one_view_of_a_tensor_without_repeats_has_none_without_listing_ids(monkeypatch):
    """Slices, reshapes, subsamples, reversals and shuffles name each element of their source at
    most once: over a source without repeats the answer needs no ids (a wide layer's column pick
    is a reshape of strided runs that no layout describes).  Over a broadcast the ids decide."""
    import gruc.ir.tensor as tensor_module

    g, x, _ = fresh((4, 6, 10))
    pick = x.slice(2, 8, 2).reshape([4, 6, 2, 3]).slice(0, 2, 3).reshape([4, 24])
    views = [pick, pick.reverse(1).subsample(2, 1), pick.dim_shuffle([1, 0])]
    listed = []
    monkeypatch.setattr(tensor_module, "distinct", lambda ids: listed.append(ids) or np.unique(ids))
    for view in views:
        assert view.has_repeats() is False and len(np.unique(view.flat_ids())) == view.num_elements
    assert listed == []
    column = x[:1].broadcast(3, 0)
    assert column.slice(0, 1, 0).reshape([60]).has_repeats() is False  # one row of a broadcast
    assert column.slice(0, 2, 0).reshape([120]).has_repeats() is True


def test_strided_slices_of_huge_variables_do_not_materialise_the_variable():
    graph = Graph(Target.ipu2())
    big = graph.add_variable(FLOAT, (1000, 64, 256))
    piece = big[500, 3:5, ::-64]
    expected = big.first_id + 500 * 64 * 256 + np.array([[3 * 256 + 255 - 64 * k for k in range(4)],
                                                         [4 * 256 + 255 - 64 * k for k in range(4)]])
    assert np.array_equal(piece.ids(), expected)


def test_shape_queries():
    _, x, _ = fresh((2, 3, 4))
    assert x.rank == 3 and x.dim(1) == 3 and x.num_elements == 24
    assert x.element_type is FLOAT and x.nbytes == 96
    assert x.append(x[0], 0).shape == (3, 3, 4)
    # Poplar's expand: singletons before the named dimensions of the tensor, repeats allowed
    assert x.expand([0, 3]).shape == (1, 2, 3, 4, 1)
    assert x.expand([1, 1]).shape == (2, 1, 1, 3, 4)
    assert x.expand([2, 0]).shape == (1, 2, 3, 1, 4)


@pytest.mark.parametrize("build, error, words", [
    (lambda x: x.slice(0, 5, 1), GrucIndexError, ["[0, 5)", "dimension 1", "<= 3"]),
    (lambda x: x.slice(0, 1, 3), GrucIndexError, ["dimension 3", "0..2"]),
    (lambda x: x[2], GrucIndexError, ["index 2", "size 2", "-2..1"]),
    (lambda x: x.reshape((5, 5)), GrucShapeError, ["[2, 3, 4]", "[5, 5]"]),
    (lambda x: x.reshape((-1, 24)), GrucShapeError, ["negative"]),
    (lambda x: x.squeeze([0]), GrucShapeError, ["dimension 0", "size is 2"]),
    (lambda x: x.expand([4]), GrucIndexError, ["expand position 4", "0..3"]),
    (lambda x: x.transpose(), GrucShapeError, ["rank-2"]),
    (lambda x: x.dim_shuffle((0, 0, 1)), GrucError, ["not a permutation"]),
    (lambda x: concat([x, x[:, :2, :3]], 1), GrucShapeError, ["concat", "[2, 3, 4]", "[2, 2, 3]"]),
    (lambda x: x.broadcast(-1, 1), GrucError, ["broadcast count -1", ">= 0"]),
    (lambda x: x[0, 0, 0, 0], GrucIndexError, ["too many indices"]),
])
def test_bad_views_name_the_value_and_the_allowed_range(build, error, words):
    _, x, _ = fresh((2, 3, 4))
    with pytest.raises(error) as info:
        build(x)
    for word in words:
        assert word in str(info.value)


def test_tensor_refuses_to_be_used_as_host_data():
    _, x, _ = fresh((2, 3))
    with pytest.raises(GrucError, match="read_tensor"):
        np.asarray(x)


def test_broadcasting_to_a_zero_size_dimension_gives_an_empty_tensor():
    """numpy broadcasting ``[3] -> [0, 3]`` and Poplar's ``broadcast(0, dim)``: empty, not an
    error, and an elementwise op over such operands runs on both engines."""
    g = Graph(Target.custom(tiles_per_ipu=2))
    row = g.add_variable(FLOAT, (3,), "row")
    g.map_tensor_linearly(row)
    empty = g.add_variable(FLOAT, (0, 3), "empty")
    assert row.broadcast_to((0, 3)).shape == (0, 3) and row.broadcast(0, 0).shape == (0,)
    prog = Sequence()
    total = map(g, _1 + _2, [empty, row], prog)
    g.create_host_write("row", row)
    g.create_host_read("total", total)
    for backend in ("numpy", "numba"):
        engine = Engine(g, [prog], backend=backend)
        engine.write_tensor("row", np.ones(3))
        engine.run(0)
        assert engine.read_tensor("total").shape == (0, 3)



def test_runs_of_columns_concatenated_are_decided_by_their_runs_without_listing_ids(
        monkeypatch):
    """A dynamic slice's pick of a tile's columns joins runs of columns a row apart
    (``strided_columns``) and single runs: disjoint runs have no repeats, known from the runs
    alone; runs that meet have.  Parts of different variables have none if none has any."""
    import gruc.ir.tensor as tensor_module

    g, wide, _ = fresh((3, 64))
    _, broadcast_source, _ = fresh((1, 64), g)
    broadcast = broadcast_source.broadcast(3, 0)
    listed = []
    monkeypatch.setattr(tensor_module, "distinct", lambda ids: listed.append(ids) or np.unique(ids))
    apart = concat([strided_columns(wide, 0, 4, 16, 3), strided_columns(wide, 52, 2, 4, 2),
                    wide.slice(63, 64, 1)], 1)
    assert apart.has_repeats() is False and listed == []
    _, other, _ = fresh((3, 8), g)
    assert concat([wide, other.reverse(1)], 1).has_repeats() is False
    assert listed == []  # parts of different variables: decided without ids
    for view in (concat([strided_columns(wide, 0, 4, 16, 3), strided_columns(wide, 35, 2, 8, 2)],
                        1),
                 concat([strided_columns(broadcast, 0, 4, 16, 3), broadcast.slice(60, 62, 1)],
                        1)):
        ids = view.flat_ids()
        assert len(np.unique(ids)) != len(ids) and view.has_repeats() is True


def test_joined_gates_of_row_ranges_of_two_variables_are_decided_without_listing_ids(
        monkeypatch):
    """A training layer's joined weights: gates sliced (through slices of slices) from the input
    and the recurrent row ranges of two variables, each joined, then the two joins joined: no
    element twice, told from the slices and the id ranges alone; the same rows joined twice, or
    two overlapping gates, have repeats."""
    import gruc.ir.tensor as tensor_module

    g, ru, _ = fresh((10, 8))  # [input rows 0..4 | recurrent rows 5..9] x [gate 0 | gate 1]
    _, c, _ = fresh((10, 4), g)
    listed = []
    monkeypatch.setattr(tensor_module, "distinct", lambda ids: listed.append(ids) or np.unique(ids))

    def gates(first, last, ru_columns=((0, 4), (4, 8))):
        rows = ru[first:last].reshape([last - first, 2, 4]).dim_shuffle([1, 0, 2])
        picked = [rows[k:k + 1][0:1] for k in range(2)]
        if ru_columns != ((0, 4), (4, 8)):
            picked[1] = ru[first:last, 2:6].reshape([1, last - first, 4])
        return concat(picked + [c[first:last].reshape([1, last - first, 4])[0:1]], 0)

    joined = concat([gates(0, 5), gates(5, 10)], 1)
    assert joined.has_repeats() is False and listed == []
    for view in (concat([gates(0, 5), gates(0, 5)], 1), concat([gates(0, 5), gates(3, 8)], 1),
                 gates(0, 5, ((0, 4), (2, 6)))):
        ids = view.flat_ids()
        assert len(np.unique(ids)) != len(ids) and view.has_repeats() is True


def test_a_concatenation_s_tiles_are_its_parts_tiles_without_making_its_ids():
    """The tiles of a concatenation, or of a view of one, are its view op applied to its parts'
    tiles, and its ids, when asked for once, its view op over its parts' ids: the same as the
    view's own, which it would keep, and are not made."""
    g, x, _ = fresh((4, 6))
    _, y, _ = fresh((4, 3), g)
    g.set_tile_mapping(x, np.arange(24).reshape(4, 6) % 5)
    g.set_tile_mapping(y, np.arange(12).reshape(4, 3) % 3 + 7)
    views = [concat([x, y.reverse(1)], 1), concat([x.transpose(), y.transpose()], 0)[2:7],
             concat([x[:2], y.transpose()[1:3, :2]], 1).reshape([2, 2, 4]).dim_shuffle([2, 0, 1]),
             concat([x, y], 1)[::2].broadcast(2, 0)]
    for view in views:
        tiles, ids = g.element_tiles(view), view.passing_ids()
        assert view.ids_would_join()  # nothing worked out and kept
        np.testing.assert_array_equal(ids, view.ids())
        np.testing.assert_array_equal(tiles, g.element_tiles_of_ids(view.flat_ids()))
        assert not view.ids_would_join()
