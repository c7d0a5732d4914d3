"""A module over a graph of its own (``gruc.ir.graph_copy``) and what a module keeps on itself.

The copy must be the same module (it prints alike, less what it erased; it runs alike), must keep
element ids (a caller's tensor names the same elements of it), and must not share anything a
later write could change: the tile table is shared only until one of the graphs writes to it.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_printer_parser import all_features, same_graph, small_program

from gruc import FLOAT, Call, Engine, Execute, Graph, Module, Repeat, Sequence, Target
from gruc.errors import GrucValueError
from gruc.ir.effects import EffectTable
from gruc.ir.expr import _1, Const, tanh
from gruc.ir.graph_copy import copy_module, without_unused
from gruc.ir.parser import parse_module
from gruc.ir.printer import print_module
from gruc.ir.verify import verify
from gruc.ops import map

T4 = Target.custom(tiles_per_ipu=4)


def leftovers() -> tuple[Module, dict]:
    """``y = tanh(x)`` read by the host, beside a compute set, a function and two variables
    nothing in the module uses (one of them mapped and read only by the unused compute set)."""
    g = Graph(T4)
    x = g.add_variable(FLOAT, (4, 8), "x")
    g.map_tensor_linearly(x)
    stale = g.add_variable(FLOAT, (4, 8), "stale")
    g.map_tensor_linearly(stale)
    g.set_tile_mapping(g.add_variable(FLOAT, (2,), "never_named"), 3)
    unused_prog = Sequence()
    map(g, _1 * Const(2.0), [stale], unused_prog, "unused")
    g.add_function(unused_prog, "uncalled")
    prog = Sequence()
    y = map(g, tanh(_1), [x[::-1]], prog, "y")
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    return Module(g, [prog]), {"x": x, "y": y, "stale": stale}


def run(module: Module) -> np.ndarray:
    engine = Engine(module.graph, module.programs, pipeline="", backend="numpy")
    engine.write_tensor("x", np.arange(32, dtype=np.float32).reshape(4, 8))
    engine.run()
    return engine.read_tensor("y")


def test_a_whole_copy_is_the_same_graph_and_module():
    verify(copy_module(small_program(), erase_unused=False))
    for module in (small_program(), all_features()):  # (all_features is printable, not valid)
        copy = copy_module(module, erase_unused=False)
        assert copy.graph is not module.graph
        same_graph(module, copy)
        assert print_module(copy) == print_module(module)
        assert all(t.graph is copy.graph for t in copy.graph.host_writes.values())


def test_what_nothing_uses_is_erased_and_the_caller_keeps_everything():
    module, tensors = leftovers()
    before = print_module(module)
    copy = without_unused(module)
    verify(copy)
    text = print_module(copy)
    for gone in ("stale", "never_named", "@unused", "@uncalled"):
        assert gone not in text
    assert [v.name for v in copy.graph.variables] == ["x", "y"]
    assert [v.index for v in copy.graph.variables] == [0, 1]  # indices close up
    assert [cs.name for cs in copy.graph.compute_sets] == ["y"] and not copy.graph.functions
    assert print_module(parse_module(text)) == text  # the copy's text round-trips
    assert print_module(module) == before  # the caller's graph and programs are untouched
    np.testing.assert_array_equal(run(copy), run(module))


def test_a_module_that_uses_everything_is_not_copied():
    module = small_program()
    assert without_unused(module) is module


def test_element_ids_and_tiles_are_kept():
    module, tensors = leftovers()
    copy = without_unused(module)
    by_name = {v.name: v for v in copy.graph.variables}
    for name in ("x", "y"):
        assert by_name[name].first_id == tensors[name].first_id
        np.testing.assert_array_equal(copy.graph.element_tiles(by_name[name]),
                                      module.graph.element_tiles(tensors[name]))
    (vertex,) = copy.graph.compute_sets[0].vertices
    reversed_x = vertex.fields["ins"][0]
    assert reversed_x.graph is copy.graph and reversed_x.variables() == [by_name["x"]]
    np.testing.assert_array_equal(reversed_x.flat_ids(), tensors["x"][::-1].flat_ids())


def test_tiles_are_copied_on_the_first_write_of_either_graph():
    module, tensors = leftovers()
    x = tensors["x"]
    copy = without_unused(module)
    copied_x = copy.graph.variables[0]
    tiles = module.graph.element_tiles(x).copy()
    module.graph.set_tile_mapping(x, 3)  # the caller maps again: the copy keeps its tiles
    np.testing.assert_array_equal(copy.graph.element_tiles(copied_x), tiles)
    again = without_unused(module)
    again.graph.set_tile_mapping(again.graph.variables[0], 1)  # and the other way round
    assert set(module.graph.element_tiles(x).tolist()) == {3}
    late = module.graph.add_variable(FLOAT, (3,), "late")  # new ids on both sides, no clash
    extra = again.graph.add_variable(FLOAT, (3,), "extra")
    module.graph.set_tile_mapping(late, 2)
    again.graph.set_tile_mapping(extra, 0)
    assert set(module.graph.element_tiles(late).tolist()) == {2}
    assert set(again.graph.element_tiles(extra).tolist()) == {0}
    assert set(again.graph.element_tiles(again.graph.variables[0]).tolist()) == {1}


def test_functions_calls_and_shared_steps_are_copied_as_they_were():
    g = Graph(T4)
    x = g.add_variable(FLOAT, (8,), "x")
    g.set_tile_mapping(x, 0)
    body = Sequence()
    map(g, _1 + Const(1.0), [x], body, "inc")
    late = g.add_function(Sequence(), "late")
    early = g.add_function(Sequence(Call(late)), "early")  # calls a function made after it
    late.program.add(Repeat(2, body))
    step = Execute(g.compute_sets[0])
    shared = Sequence(step, step)
    g.create_host_write("x", x)
    g.create_host_read("out", x)
    module = Module(g, [Sequence(Call(early), shared, shared)])
    copy = copy_module(module)
    verify(copy)
    assert print_module(copy) == print_module(module)
    first, second = copy.programs[0].programs[1:]
    assert first is second and first.programs[0] is first.programs[1]
    (call,) = [n for n in copy.graph.functions[1].program.walk() if isinstance(n, Call)]
    assert call.function is copy.graph.functions[0]


def test_the_effects_known_for_the_steps_come_with_the_copy():
    module, _ = leftovers()
    table = EffectTable(module.graph)
    for node in module.programs[0].walk():
        table.of(node)
    copy = without_unused(module)
    steps = [n for n in copy.programs[0].walk() if isinstance(n, Execute)]
    assert steps and all(id(step) in copy.graph.effects_memo for step in steps)  # carried
    parsed = parse_module(print_module(copy))  # the same steps, their effects worked out anew
    fresh = [EffectTable(parsed.graph).of(n) for n in parsed.programs[0].walk()
             if isinstance(n, Execute)]
    assert [EffectTable(copy.graph).of(step) for step in steps] == fresh


def test_a_sealed_module_keeps_what_is_derived_from_it_and_an_open_one_does_not():
    module, _ = leftovers()
    calls = []

    def analysis(m: Module) -> int:
        calls.append(m)
        return len(calls)

    assert module.derived(analysis) == 1 and module.derived(analysis) == 2  # open: afresh
    sealed = module.sealed()
    assert sealed is not module and sealed.sealed() is sealed and sealed.is_sealed
    assert not module.is_sealed
    assert sealed.derived(analysis) == 3 and sealed.derived(analysis) == 3  # kept on it
    assert copy_module(sealed).derived(analysis) == 4  # a new module starts with nothing


def test_a_copy_adopts_only_the_variables_of_its_source_in_order_and_views_keep_their_arity():
    module, tensors = leftovers()
    frame = module.graph.copy_frame()
    frame.adopt_variable(tensors["stale"])
    with pytest.raises(GrucValueError, match="in their order; got <var 'x'"):
        frame.adopt_variable(tensors["x"])  # x comes before stale
    with pytest.raises(GrucValueError, match="adopt_variable takes the variables"):
        frame.adopt_variable(frame.variables[0])  # its own
    with pytest.raises(GrucValueError, match="as many sources as it has"):
        tensors["x"][::-1].view_over(())
