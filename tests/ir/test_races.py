"""Races between the vertices of one compute set: refused by the verifier, found from strided
boxes without listing elements (``tests/hardening/test_fuzz_races.py`` checks the search against
the element sets themselves)."""

import numpy as np
import pytest

from gruc import (FLOAT, Execute, Graph, GrucVerifyError, Module, Sequence, Target, Vertex, concat)
from gruc.ir.expr import _1, _2, Const
from gruc.ir.races import Box, _Sweep, boxes_of, find_race
from gruc.ir.verify import verify
from gruc.ir.vertices import vertex_kind

T4 = Target.custom(tiles_per_ipu=4)


def graph_with(*shapes):
    g = Graph(T4)
    tensors = []
    for k, shape in enumerate(shapes):
        t = g.add_variable(FLOAT, shape, "xyzw"[k])
        g.map_tensor_linearly(t)
        g.create_host_write("xyzw"[k], t)
        tensors.append(t)
    return g, tensors


def refused(g, cs) -> str:
    with pytest.raises(GrucVerifyError) as info:
        verify(Module(g, [Sequence(Execute(cs))]))
    return str(info.value)


def test_two_vertices_writing_one_element_are_refused_naming_it():
    g, (x, y) = graph_with([8], [8])
    cs = g.add_compute_set("overlap")
    g.add_vertex(cs, "Map", {"out": y[0:5], "ins": [x[0:5]]}, expr=_1 + Const(1.0))
    g.add_vertex(cs, "Map", {"out": y[4:8], "ins": [x[4:8]]}, expr=_1 * Const(2.0))
    message = refused(g, cs)
    assert "vertices 0 (Map) and 1 (Map) of compute set 'overlap'" in message
    assert "race on element [4] of 'y'" in message
    assert "field 'out' of the first writes it and field 'out' of the second writes it" in message
    marked = [line for line in message.splitlines() if line.startswith(">")]
    assert len(marked) == 1 and "expr=mul(_1, const(2.0))" in marked[0]  # the second


def test_reading_what_another_vertex_writes_is_refused():
    g, (x, y) = graph_with([4, 6], [4, 6])
    cs = g.add_compute_set("stale")
    g.add_vertex(cs, "MapInPlace", {"inout": x[1:3, 0:3], "ins": []}, expr=_1 * Const(2.0))
    g.add_vertex(cs, "Map", {"out": y[0], "ins": [x[2]]}, expr=_1)
    message = refused(g, cs)
    assert "race on element [2, 0] of 'x'" in message
    assert ("field 'inout' of the first writes it and field 'ins[0]' of the second reads it"
            in message)


def test_disjoint_writes_shared_reads_and_a_vertex_touching_its_own_elements_pass():
    g, (x, y) = graph_with([4, 6], [4, 6])
    cs = g.add_compute_set("fine")
    row = y[0:1, 0:3].broadcast(4, 0)
    g.add_vertex(cs, "MapInPlace", {"inout": x[:, ::2], "ins": [row]}, expr=_1 + _2)
    g.add_vertex(cs, "MapInPlace", {"inout": x[:, 1::2], "ins": [row]}, expr=_1 - _2)
    g.add_vertex(cs, "Map", {"out": y[1:], "ins": [y[0:1].broadcast(3, 0)]}, expr=_1)
    verify(Module(g, [Sequence(Execute(cs))]))


def test_interleaved_strides_that_meet_are_found():
    g, (x,) = graph_with([4, 6])
    cs = g.add_compute_set("comb")
    g.add_vertex(cs, "MapInPlace", {"inout": x.reshape([24])[::4], "ins": []}, expr=_1)
    g.add_vertex(cs, "MapInPlace", {"inout": x.reshape([24])[2::6], "ins": []}, expr=_1)
    assert "race on element [1, 2] of 'x'" in refused(g, cs)  # id 8 = 2 * 4 = 2 + 6


def test_views_that_name_the_same_set_race_like_their_source():
    g, (x, y) = graph_with([4, 6], [4, 6])
    cs = g.add_compute_set("views")
    g.add_vertex(cs, "Map", {"out": y[::-1, ::-1], "ins": [x]}, expr=_1)
    g.add_vertex(cs, "Map", {"out": x[3], "ins": [y.transpose()[5, 2:3].broadcast(6, 0)]},
                 expr=_1)
    message = refused(g, cs)
    assert "race on element [2, 5] of 'y'" in message


def test_concatenated_fields_and_slices_of_them():
    g, (x, y) = graph_with([8], [8])
    cs = g.add_compute_set("parts")
    g.add_vertex(cs, "Map", {"out": concat([y[0:2], y[6:8]]), "ins": [x[0:4]]}, expr=_1)
    g.add_vertex(cs, "Map", {"out": y[2:6], "ins": [concat([x[4:8], y[0:6]])[2:6]]}, expr=_1)
    assert "race on element [0] of 'y'" in refused(g, cs)
    g2, (x2, y2) = graph_with([8], [8])
    cs2 = g2.add_compute_set("parts")
    g2.add_vertex(cs2, "Map", {"out": concat([y2[0:2], y2[6:8]]), "ins": [x2[0:4]]}, expr=_1)
    g2.add_vertex(cs2, "Map", {"out": y2[2:6], "ins": [concat([x2[4:8], y2[0:6]])[0:4]]},
                  expr=_1)
    verify(Module(g2, [Sequence(Execute(cs2))]))


def test_a_compute_set_nothing_executes_is_not_checked():
    g, (x, y) = graph_with([8], [8])
    cs = g.add_compute_set("left over")
    g.add_vertex(cs, "Map", {"out": y, "ins": [x]}, expr=_1)
    g.add_vertex(cs, "Map", {"out": y, "ins": [x]}, expr=_1)
    verify(Module(g, [Sequence()]))


def test_boxes_of_a_slice_of_a_concatenation_are_its_parts_not_its_elements():
    g, (x, y) = graph_with([512, 256], [512, 256])
    columns = concat([x, y], 1)[:, 200:300]
    boxes = boxes_of(columns)
    assert boxes == [Box.of(x.contiguous_start() + 200, (256, 1), (512, 56)),
                     Box.of(y.contiguous_start(), (256, 1), (512, 44))]


def test_dense_runs_are_cut_where_a_variable_starts():
    g, (x, y) = graph_with([4], [4])                 # ids of y follow those of x
    both = concat([x, y]).reshape([4, 2])[1:3]      # ids 2, 3 of x and 0, 1 of y: one run
    boxes = boxes_of(both)
    assert [(b.offset - x.contiguous_start(), b.size) for b in boxes] == [(2, 2), (4, 2)]


def test_interleaved_columns_of_many_vertices_are_told_apart_without_listing_ids(monkeypatch):
    """Columns ``k::64`` of 64 vertices: every pair's ranges, rows and columns meet, their
    residues modulo 64 do not (listing ids pair by pair took 1.5 s here)."""
    g, (x,) = graph_with([64, 4096])
    vertices = [Vertex(vertex_kind("MapInPlace"), {"inout": x[:, k::64], "ins": ()},
                       {"expr": _1}, None) for k in range(64)]
    listed = []
    monkeypatch.setattr(Box, "ids", lambda box: listed.append(box))
    assert find_race(vertices, g.variables) is None and not listed
    vertices.append(Vertex(vertex_kind("Map"), {"out": g.add_variable(FLOAT, [1], "one"),
                                                "ins": (x[5, 128:129],)}, {"expr": _1}, None))
    monkeypatch.undo()
    race = find_race(vertices, g.variables)
    element = x.contiguous_start() + 5 * 4096 + 128
    assert (race.first.vertex, race.second.vertex, race.element) == (0, 64, element)


def test_the_even_and_the_odd_rows_of_a_large_variable_are_told_apart_without_listing_ids(
        monkeypatch):
    g, (x,) = graph_with([16384, 1024])              # 8 M ids a vertex: 4 s of listing
    vertices = [Vertex(vertex_kind("MapInPlace"), {"inout": x[k::2], "ins": ()}, {"expr": _1},
                       None) for k in range(2)]
    listed = []
    monkeypatch.setattr(Box, "ids", lambda box: listed.append(box))
    assert find_race(vertices, g.variables) is None and not listed


def test_a_race_between_large_fields_is_found_from_a_few_listed_pieces(monkeypatch):
    g, (x,) = graph_with([16384, 1024])
    vertices = [Vertex(vertex_kind("MapInPlace"), {"inout": rows, "ins": ()}, {"expr": _1}, None)
                for rows in (x[0:16383], x[1:16384])]  # 16 M ids each: all but two rows shared
    listed, ids = [], Box.ids
    monkeypatch.setattr(Box, "ids", lambda box: (listed.append(box.size), ids(box))[1])
    race = find_race(vertices, g.variables)
    assert race.element == x.contiguous_start() + 1024 and 0 < len(listed) <= 8


def test_readers_are_paired_only_with_writers():
    """Ranges [0, 9] read by 1,000 vertices, [5, 14] and [20, 29] written: the sweep makes the
    pairs a writer is in (with itself included) and none of the 499,500 pairs of readers."""
    low = np.array([0] * 1000 + [5, 20])
    high = np.array([9] * 1000 + [14, 29])
    writes = np.array([False] * 1000 + [True, True])
    sweep = _Sweep(low, high, writes)
    pairs = {tuple(sorted(p)) for i, j in sweep.candidates() for p in zip(i.tolist(), j.tolist())}
    assert sweep.pairs == 1000 + 2 and pairs == {(k, 1000) for k in range(1001)} | {(1001, 1001)}


def test_box_halves_cover_the_box_exactly():
    box = Box.of(7, (-12, 3, 1), (5, 2, 3))
    low, high = box.halves()
    assert sorted(box.ids().tolist()) == sorted(low.ids().tolist() + high.ids().tolist())
    assert box.offset == 7 - 48 and box.last == 7 + 3 + 2
    assert np.array_equal(np.sort(box.ids()), np.unique(box.ids()))
