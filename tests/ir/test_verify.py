"""The verifier: each rule rejects a broken module and shows the culprit's line in context."""

import pytest

from gruc import (FLOAT, Copy, Execute, Graph, GrucMappingError, GrucVerifyError, Module, Sequence, Target, Vertex)
from gruc.ir.expr import _1, _2, Const
from gruc.ir.verify import verify
from gruc.ir.vertices import vertex_kind
from gruc.ops import map

T4 = Target.custom(tiles_per_ipu=4)


def base():
    g = Graph(T4)
    x = g.add_variable(FLOAT, (4, 8), "x")
    g.map_tensor_linearly(x)
    g.create_host_write("x", x)
    return g, x


def assert_context(error: GrucVerifyError, culprit_text: str) -> None:
    lines = str(error).splitlines()
    marked = [line for line in lines if line.startswith(">")]
    assert len(marked) == 1 and culprit_text in marked[0], str(error)
    assert len(lines) >= 4  # the message, the culprit and neighbours


def test_a_valid_module_passes():
    g, x = base()
    prog = Sequence()
    y = map(g, _1 * Const(2.0), [x], prog, "y")
    g.create_host_read("y", y)
    verify(Module(g, [prog]))


def test_unmapped_variable_is_rejected_with_context():
    g, x = base()
    loose = g.add_variable(FLOAT, (4, 8), "loose")
    prog = Sequence(Copy(x, loose))
    with pytest.raises(GrucMappingError) as info:  # a mapping problem, shown in the IR
        verify(Module(g, [prog]))
    assert "'loose'" in str(info.value) and "not fully mapped" in str(info.value)
    assert_context(info.value, "copy %x -> %loose")


def test_shape_mismatch_in_a_vertex_is_rejected_with_context():
    g, x = base()
    out = g.add_variable(FLOAT, (8,), "out")
    g.map_tensor_linearly(out)
    cs = g.add_compute_set("bad")
    # a broken pass could build this; add_vertex would refuse it, the verifier must too
    cs.vertices.append(Vertex(vertex_kind("Map"), {"out": out, "ins": (x,)}, {"expr": _1}, None))
    with pytest.raises(GrucVerifyError) as info:
        verify(Module(g, [Sequence(Execute(cs))]))
    assert "shape" in str(info.value) and "[4, 8]" in str(info.value)
    assert_context(info.value, "Map(out=%out")


def test_in_out_field_aliasing_another_field_is_rejected_with_context():
    g, x = base()
    cs = g.add_compute_set("alias")
    g.add_vertex(cs, "MapInPlace", {"inout": x[0:2], "ins": [x[1:3]]}, expr=_1 + _2)
    with pytest.raises(GrucVerifyError) as info:
        verify(Module(g, [Sequence(Execute(cs))]))
    assert "InOut field 'inout'" in str(info.value) and "aliases field 'ins[0]'" in str(info.value)
    assert_context(info.value, "MapInPlace(inout=")


def test_writing_the_same_element_twice_and_reading_what_nothing_writes():
    g, x = base()
    stretched = g.add_variable(FLOAT, (1, 8), "stretched")
    g.map_tensor_linearly(stretched)
    with pytest.raises(GrucVerifyError, match="more than once"):
        verify(Module(g, [Sequence(Copy(x, stretched.broadcast(4, 0)))]))
    g2, x2 = base()
    ghost = g2.add_variable(FLOAT, (4, 8), "ghost")
    g2.map_tensor_linearly(ghost)
    with pytest.raises(GrucVerifyError, match="'ghost' is read but nothing writes it"):
        verify(Module(g2, [Sequence(Copy(ghost, x2))]))


def test_locality_is_checked_after_exchange():
    g, x = base()
    cs = g.add_compute_set("remote")
    out = g.add_variable(FLOAT, (8,), "out")
    g.set_tile_mapping(out, 3)
    g.add_vertex(cs, "Map", {"out": out, "ins": [x[0]]}, tile=3, expr=_1)
    module = Module(g, [Sequence(Execute(cs))])
    verify(module)
    with pytest.raises(GrucVerifyError, match="has elements on tile 0"):
        verify(module, require_local=True)
