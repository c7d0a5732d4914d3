"""Program trees: the fewest steps a run of one executes (what ``gruc viz --input`` checks before
running a saved module), and the time loop node: what it says, what it refuses, how rewrites
keep it."""

from __future__ import annotations

import pytest

from gruc import (BOOL, FLOAT, UNSIGNED_INT, Call, Copy, Graph, If, Module, Repeat,
                  RepeatWhileTrue, Sequence, Target, TimeLoop)
from gruc.errors import GrucTypeError, GrucValueError, GrucVerifyError
from gruc.ir.expr import _1, Const
from gruc.ir.program import fewest_executions
from gruc.ir.verify import verify
from gruc.ops import map_in_place
from gruc.passes.pipeline import run_pipeline

POPLAR_MOST = 4294967295
"""The largest ``Repeat`` count Poplar takes."""


def test_fewest_executions_multiplies_loops_and_takes_the_cheaper_way():
    graph = Graph(Target.custom(tiles_per_ipu=4))
    x = graph.add_variable(FLOAT, (8,), "x")
    graph.map_tensor_linearly(x)
    flag = graph.add_variable(BOOL, (1,), "flag")
    graph.set_tile_mapping(flag, 0)
    step = Sequence()
    map_in_place(graph, _1 * Const(0.5), [x], step)
    twice = graph.add_function(Sequence(step, step), "twice")

    assert fewest_executions(Sequence()) == 0
    assert fewest_executions(Sequence(step, step, step)) == 3
    assert fewest_executions(Repeat(3, Sequence(step, Repeat(4, step)))) == 15
    assert fewest_executions(Repeat(0, step)) == 0
    assert fewest_executions(If(flag, Sequence(step, step, step), step)) == 1
    assert fewest_executions(If(flag, step)) == 0  # the empty else
    # a data-dependent loop checks its condition at least once, and may never run its body
    assert fewest_executions(RepeatWhileTrue(step, flag, Repeat(10**6, step))) == 1
    assert fewest_executions(Repeat(5, Call(twice))) == 10
    # exact however large: counts multiply in Python integers, not 64-bit ones
    deep = Repeat(POPLAR_MOST, Repeat(POPLAR_MOST, Repeat(POPLAR_MOST, step)))
    assert fewest_executions(deep) == POPLAR_MOST ** 3


def _time_loop_parts(dtype=UNSIGNED_INT):
    """A graph, a reset of a one-element counter of ``dtype`` on tile 0, and a step moving it."""
    graph = Graph(Target.custom(tiles_per_ipu=4))
    counter = graph.add_variable(dtype, (1,), "counter")
    graph.set_tile_mapping(counter, 0)
    start = graph.add_constant(dtype, (1,), 0, "start")
    graph.set_tile_mapping(start, 0)
    step = Sequence()
    map_in_place(graph, _1 + Const(1), [counter], step)
    return graph, Copy(start, counter), step


def test_a_time_loop_names_its_counter_and_counts_its_trips_from_its_first_step():
    _, reset, step = _time_loop_parts()
    loop = TimeLoop(reset, Repeat(25, step), True, 50, 25, 2, 4)
    assert loop.counter is reset.dst and loop.direction == -1
    assert loop.children() == (reset, loop.loop)
    # rows 50..74: a longest sequence of 60 steps runs 10 of them, of 40 none, of 100 all 25
    assert [loop.trips(n) for n in (60, 40, 100, 50, 75)] == [10, 0, 25, 0, 25]
    # it runs as [reset, loop]
    assert fewest_executions(loop) == 1 + 25


@pytest.mark.parametrize("build, error, message", [
    (lambda r, s: TimeLoop(s, Repeat(2, s), False, 0, 2), GrucTypeError, "reset must be a Copy"),
    (lambda r, s: TimeLoop(r, s, False, 0, 2), GrucTypeError, "must be a Repeat or"),
    (lambda r, s: TimeLoop(r, Repeat(3, s), False, 0, 2), GrucValueError, "repeats 3 times"),
    (lambda r, s: TimeLoop(r, Repeat(2, s), "no", 0, 2), GrucTypeError, "reverse must be a bool"),
    (lambda r, s: TimeLoop(r, Repeat(2, s), False, 0, 2, 4, 4), GrucValueError, "shard 4 of 4"),
    (lambda r, s: TimeLoop(r, Repeat(2, s), False, -1, 2), GrucValueError, "first_step=-1"),
    (lambda r, s: TimeLoop(r, Repeat(2, s), False, 0.5, 2), GrucTypeError, "first_step must be"),
])
def test_a_time_loop_that_cannot_be_one_is_refused_naming_what(build, error, message):
    _, reset, step = _time_loop_parts()
    with pytest.raises(error, match=message):
        build(reset, step)


def test_a_rewrite_that_leaves_no_loop_leaves_the_sequence_it_runs_as():
    _, reset, step = _time_loop_parts()
    loop = TimeLoop(reset, Repeat(1, step), False, 3, 1, 3, 4)
    kept = loop.with_children([reset, Repeat(1, step)])
    assert isinstance(kept, TimeLoop) and (kept.first_step, kept.shard) == (3, 3)
    dissolved = loop.with_children([reset, step])  # canonicalize: a one-step Repeat is its body
    assert type(dissolved) is Sequence and dissolved.programs == [reset, step]


def test_canonicalize_keeps_time_loops_and_dissolves_a_one_step_one():
    graph, reset, step = _time_loop_parts()
    long = TimeLoop(reset, Repeat(4, step), False, 0, 4)
    short = TimeLoop(reset, Repeat(1, step), False, 4, 1, 1, 2)
    out = run_pipeline(Module(graph, [Sequence(Sequence(long), short)]), "canonicalize").module
    (program,) = out.programs
    assert program.programs[0] is long  # not spliced into its parent, kept as it was
    assert [type(node).__name__ for node in program.programs[1:]] == ["Copy", "Execute"]


def test_the_verifier_wants_an_integer_counter():
    graph, reset, step = _time_loop_parts(FLOAT)
    loop = TimeLoop(reset, Repeat(2, step), False, 0, 2)
    with pytest.raises(GrucVerifyError, match="TimeLoop counter is float"):
        verify(Module(graph, [Sequence(loop)]))
