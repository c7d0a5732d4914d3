"""Fuzz: the race search of :mod:`gruc.ir.races` (boxes, sweeps, halving) against the element
sets of random compute sets, whose fields are views of two variables with adjacent ids."""

from unittest import mock

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from gruc import FLOAT, Graph, Target, Vertex, concat
from gruc.ir import races
from gruc.ir.expr import _1
from gruc.ir.races import find_race
from gruc.ir.vertices import vertex_kind

from hardening_fuzz import fuzz_settings

T4 = Target.custom(tiles_per_ipu=4)

SHAPES = ([4, 6], [3, 6])  # adjacent ids: runs must not cross from one variable into the next


@st.composite
def views(draw, variables):
    """A view of one variable or a concatenation of two, through slices with steps, reversal,
    transposition, flattening and broadcast."""
    def simple():
        t = draw(st.sampled_from(variables))
        rows = draw(st.tuples(st.integers(0, 2), st.integers(3, 4), st.sampled_from([1, 2, -1])))
        cols = draw(st.tuples(st.integers(0, 2), st.integers(3, 6), st.sampled_from([1, 2, 3, -2])))
        t = t[slice(*rows) if rows[2] > 0 else slice(None, None, -1),
              slice(*cols) if cols[2] > 0 else slice(None, None, cols[2])]
        if draw(st.booleans()):
            t = t.transpose()
        return t.reshape([t.num_elements])
    t = simple()
    if draw(st.booleans()):
        t = concat([t, simple()])
        begin = draw(st.integers(0, t.num_elements - 1))
        t = t[begin:draw(st.integers(begin + 1, t.num_elements))]
    if draw(st.booleans()):
        t = t.broadcast(2, 0)
    return t


@st.composite
def compute_sets(draw):
    g = Graph(T4)
    variables = [g.add_variable(FLOAT, shape, name) for shape, name in zip(SHAPES, "yz")]
    vertices = []
    for k in range(draw(st.integers(2, 4))):
        own = g.add_variable(FLOAT, [1], f"own{k}")   # a vertex that writes nothing shared
        out = draw(views(variables)) if draw(st.booleans()) else own
        ins = tuple(draw(views(variables)) for _ in range(draw(st.integers(0, 2))))
        vertices.append(Vertex(vertex_kind("Map"), {"out": out, "ins": ins}, {"expr": _1}, None))
    return g, vertices


def brute_force_races(vertices) -> set[tuple[int, int]]:
    """Pairs (writer, other) of vertices that share an element the writer writes."""
    fields = [[(vertex.kind.fields[name.split("[")[0]].direction.writes, set(t.flat_ids().tolist()))
               for name, t in vertex.tensors()] for vertex in vertices]
    return {(i, j) for i, mine in enumerate(fields) for j, theirs in enumerate(fields) if i != j
            and any(w and ids & other for w, ids in mine for _, other in theirs)}


@pytest.mark.parametrize("listed, chunk", [(races.LISTED_IDS, races.PAIRS_PER_SWEEP_CHUNK), (2, 1)])
@fuzz_settings(150)
@given(case=compute_sets())
def test_find_race_agrees_with_the_element_sets(case, listed, chunk):
    g, vertices = case
    with mock.patch.object(races, "LISTED_IDS", listed), \
            mock.patch.object(races, "PAIRS_PER_SWEEP_CHUNK", chunk):
        race = find_race(vertices, g.variables)
    expected = brute_force_races(vertices)
    event("a race" if expected else "no race")
    assert (race is not None) == bool(expected)
    if race is not None:
        assert (race.first.vertex, race.second.vertex) in expected and race.first.writes
        for access in (race.first, race.second):
            tensor = dict(vertices[access.vertex].tensors())[access.field]
            assert race.element in set(tensor.flat_ids().tolist())
