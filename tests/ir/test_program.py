"""Program trees: the fewest steps a run of one executes (what ``gruc viz --input`` checks before
running a saved module)."""

from __future__ import annotations

from gruc import (BOOL, FLOAT, Call, Graph, If, Repeat, RepeatWhileTrue, Sequence, Target)
from gruc.ir.expr import _1, Const
from gruc.ir.program import fewest_executions
from gruc.ops import map_in_place

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
