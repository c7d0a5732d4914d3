"""Fuzzing tensor views (issue #12, item 2): a random chain of views of a variable stands for the
same elements as the same chain applied to a numpy array of the variable's element ids.

Why against numpy: every view rule (``gruc.ir.layout``) has a numpy twin — slices, integer
indexing, reshape, ``np.transpose``, ``np.flip``, strided slicing, ``np.tile`` for Poplar's
broadcast, ``np.concatenate`` — and a view that names one wrong element makes every program over it
silently wrong.  Each step also checks what is derived from the ids: the tile of every element
(``element_tiles``, through the strided fast path), ``contiguous_start`` and a text-IR round trip
of the final view; and an argument the numpy twin refuses must be refused with a ``GrucError``.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import event, given
from hypothesis import strategies as st

from gruc import FLOAT, Graph, GrucError, Module, Sequence, Target, TileMapping, WriteUndef, concat
from gruc.ir.parser import parse_module
from gruc.ir.printer import print_module
from hardening_fuzz import fuzz_settings

TARGET = Target.custom(tiles_per_ipu=8)
OPS = ["slice", "index", "step_slice", "reshape", "flatten", "expand", "squeeze", "shuffle",
       "transpose", "dim_roll", "broadcast", "broadcast_to", "reverse", "subsample", "concat",
       "bad"]


def _factorisations(n: int, draw) -> list[int]:
    """A random shape with ``n`` elements (rank 0..4; ``n == 0`` gets a zero somewhere)."""
    if n == 0:
        shape = [draw(st.integers(0, 3)) for _ in range(draw(st.integers(0, 2)))]
        return shape[:draw(st.integers(0, len(shape)))] + [0] + shape
    shape = []
    rest = n
    for _ in range(draw(st.integers(0, 3))):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        d = draw(st.sampled_from(divisors))
        shape.append(d)
        rest //= d
    shape.append(rest)
    ones = draw(st.integers(0, 1))
    for _ in range(ones):
        shape.insert(draw(st.integers(0, len(shape))), 1)
    return shape if draw(st.booleans()) or n != 1 else []


def _apply(op: str, t, ids: np.ndarray, others: list, draw):
    """Apply view ``op`` with drawn arguments to the gruc tensor ``t`` and its numpy twin ``ids``;
    returns both results.  ``others`` are earlier (tensor, ids) pairs, for concat."""
    rank = t.rank
    dim = draw(st.integers(0, rank - 1)) if rank else 0
    if op == "slice" and rank:
        begin = [draw(st.integers(0, n)) for n in t.shape]
        end = [draw(st.integers(b, n)) for b, n in zip(begin, t.shape)]
        return t.slice(begin, end), ids[tuple(slice(b, e) for b, e in zip(begin, end))]
    if op == "index" and rank and t.shape[dim]:
        i = draw(st.integers(-t.shape[dim], t.shape[dim] - 1))
        key = (slice(None),) * dim + (i,)
        return t[key], ids[key]
    if op == "step_slice" and rank:
        n = t.shape[dim]
        key = (slice(None),) * dim + (slice(draw(st.none() | st.integers(-n - 1, n + 1)),
                                             draw(st.none() | st.integers(-n - 1, n + 1)),
                                             draw(st.sampled_from([1, 2, 3, -1, -2]))),)
        return t[key], ids[key]
    if op == "reshape":
        shape = _factorisations(t.num_elements, draw)
        return t.reshape(shape), ids.reshape(shape)
    if op == "flatten":
        if rank and draw(st.booleans()):
            begin = draw(st.integers(0, rank - 1))
            end = draw(st.integers(begin + 1, rank))
            shape = ids.shape[:begin] + (math.prod(ids.shape[begin:end]),) + ids.shape[end:]
            return t.flatten(begin, end), ids.reshape(shape)
        return t.flatten(), ids.reshape(-1)
    if op == "expand" and rank < 5:
        at = draw(st.integers(0, rank))
        return t.expand([at]), np.expand_dims(ids, at)
    if op == "squeeze":
        return t.squeeze(), np.squeeze(ids)
    if op == "shuffle":
        perm = draw(st.permutations(list(range(rank))))
        return t.dim_shuffle(perm), np.transpose(ids, perm)
    if op == "transpose" and rank == 2:
        return t.transpose(), ids.T
    if op == "dim_roll" and rank:
        to = draw(st.integers(0, rank - 1))
        return t.dim_roll(dim, to), np.moveaxis(ids, dim, to)
    if op == "broadcast" and rank:
        times = draw(st.integers(0, 3))
        reps = [1] * rank
        reps[dim] = times
        return t.broadcast(times, dim), np.tile(ids, reps)
    if op == "broadcast_to" and t.num_elements and t.num_elements <= 64:
        shape = [draw(st.integers(1, 3))] + [n if n != 1 else draw(st.integers(1, 3))
                                              for n in t.shape]
        return t.broadcast_to(shape), np.broadcast_to(ids, shape)
    if op == "reverse" and rank:
        return t.reverse(dim), np.flip(ids, dim)
    if op == "subsample" and rank:
        stride = draw(st.integers(1, 4))
        key = (slice(None),) * dim + (slice(None, None, stride),)
        return t.subsample(stride, dim), ids[key]
    if op == "concat" and rank:
        partners = [(o, oi) for o, oi in others
                    if o.rank == rank and all(a == b for k, (a, b) in
                                              enumerate(zip(o.shape, t.shape)) if k != dim)]
        if partners:
            o, oi = draw(st.sampled_from(partners))
            first = draw(st.booleans())
            pair = [(t, ids), (o, oi)] if first else [(o, oi), (t, ids)]
            return (concat([p for p, _ in pair], dim),
                    np.concatenate([q for _, q in pair], axis=dim))
    return None


def _bad_view(t, draw) -> None:
    """A view argument its numpy twin refuses: gruc must refuse it with a GrucError."""
    rank = t.rank
    choice = draw(st.sampled_from(["dim", "slice", "reshape", "perm", "stride", "times", "index"]))
    try:
        if choice == "dim":
            t.reverse(draw(st.sampled_from([-1, rank, rank + 3])))
        elif choice == "slice":
            t.slice([0] * rank, [n + 1 for n in t.shape]) if rank else t.slice([0], [1])
        elif choice == "reshape":
            t.reshape([t.num_elements + 1])
        elif choice == "perm":
            t.dim_shuffle([0] * (rank + 1))
        elif choice == "stride":
            t.subsample(draw(st.integers(-2, 0)), 0)
        elif choice == "times":
            t.broadcast(draw(st.integers(-2, -1)), 0)
        else:
            t[(0,) * (rank + 1)] if rank else t[0]
    except GrucError:
        return
    raise AssertionError(f"{choice}: an invalid view of {t!r} was accepted")


def _check(graph: Graph, view, ids: np.ndarray, tiles_of_id: np.ndarray) -> None:
    assert view.shape == ids.shape, (view.shape, ids.shape)
    got = view.ids()
    assert got.shape == ids.shape and np.array_equal(got, ids)
    assert np.array_equal(graph.element_tiles(view), tiles_of_id[ids.reshape(-1)])
    start = view.contiguous_start()
    flat = ids.reshape(-1)
    if start is not None:
        assert np.array_equal(flat, np.arange(start, start + len(flat)))


@fuzz_settings(ci=300)
@given(st.data())
def test_random_view_chains_match_numpy(data):
    draw = data.draw
    graph = Graph(TARGET)
    sizes = [draw(st.integers(0, 24)) for _ in range(draw(st.integers(1, 3)))]
    tensors, tiles = [], []
    for k, size in enumerate(sizes):
        var = graph.add_variable(FLOAT, _factorisations(size, draw), f"v{k}")
        element_tiles = np.array(draw(st.lists(st.integers(0, TARGET.num_tiles - 1),
                                               min_size=size, max_size=size)), dtype=np.int64)
        if size:
            graph.set_tile_mapping(var, TileMapping.from_element_tiles(element_tiles))
        tensors.append((var, var.ids()))
        tiles.append(element_tiles)
    tiles_of_id = np.concatenate(tiles) if tiles else np.zeros(0, np.int64)
    t, ids = draw(st.sampled_from(tensors))
    chain = []
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(OPS))
        if op == "bad":
            _bad_view(t, draw)
            continue
        result = _apply(op, t, ids, tensors, draw)
        if result is None:
            continue
        t, ids = result
        chain.append(op)
        _check(graph, t, ids, tiles_of_id)
        tensors.append((t, ids))
    event(f"chain length {len(chain)}")
    text = print_module(Module(graph, [Sequence(WriteUndef(t))]))
    parsed = parse_module(text)
    (node,) = parsed.programs[0].programs
    assert np.array_equal(node.tensor.ids(), ids)
    assert print_module(parsed) == text
