"""canonicalize (SPEC G4): one spelling for equivalent programs; results do not change."""

from __future__ import annotations

import numpy as np

from gruc import (FLOAT, INT, Engine, Execute, Graph, If, Module, Repeat, RepeatWhileTrue, Sequence,
                  Target)
from gruc.ir.expr import _1, Const
from gruc.passes.pipeline import run_pipeline

T4 = Target.custom(tiles_per_ipu=4)


def counter_program():
    g = Graph(T4)
    x = g.add_variable(FLOAT, (4,), "x")
    g.set_tile_mapping(x, 0)
    one = g.add_constant(INT, (1,), 1, "one")
    g.set_tile_mapping(one, 0)
    cs = g.add_compute_set("inc")
    g.add_vertex(cs, "MapInPlace", {"inout": x, "ins": []}, expr=_1 + Const(1.0))
    inc = Execute(cs)
    prog = Sequence(Repeat(1, Sequence(inc, Sequence())), Repeat(2, Sequence(Sequence(inc))),
                    If(one, Repeat(3, inc), inc), Repeat(0, inc))
    g.create_host_write("x", x)
    g.create_host_read("x", x)
    return g, prog, inc


def test_nested_programs_flatten_and_results_stay():
    g, prog, inc = counter_program()
    after = run_pipeline(Module(g, [prog]), "canonicalize", verify_each=True).module
    flat = after.programs[0]
    assert [type(n).__name__ for n in flat.programs] == ["Execute", "Repeat", "Repeat"]
    assert flat.programs[1].body.programs == [inc] and flat.programs[2].count == 3
    for programs in ([prog], after.programs):
        engine = Engine(g, programs, pipeline="", backend="numpy")
        engine.write_tensor("x", np.zeros(4))
        engine.run()
        np.testing.assert_array_equal(engine.read_tensor("x"), np.full(4, 6.0))


def test_a_program_that_does_nothing_becomes_an_empty_sequence():
    g, _, inc = counter_program()
    zero = g.add_constant(INT, (), 0, "zero")
    g.set_tile_mapping(zero, 0)
    prog = Sequence(Repeat(0, inc), RepeatWhileTrue(Sequence(), zero, inc), Sequence(Sequence()))
    after = run_pipeline(Module(g, [prog]), "canonicalize", verify_each=True).module
    assert isinstance(after.programs[0], Sequence) and len(after.programs[0]) == 0
