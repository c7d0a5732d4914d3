"""Plan-only reports: static step counts give the report a run gives."""

from __future__ import annotations

import numpy as np
import pytest

from gruc import (FLOAT, INT, Call, Engine, Graph, GrucValueError, If, PrintTensor, Repeat,
                  RepeatWhileTrue, Sequence, Sync, Target)
from gruc.ir.expr import _1, Const, eq
from gruc.ops import fill, map_in_place, map_with_output
from gruc.plan import StaticProgram, plan_program
from gruc.runtime.engine import compile_program

T16 = Target.custom(tiles_per_ipu=16)


def without_time(report) -> dict:
    data = report.to_dict()
    data.pop("compile_seconds")
    return data


def control_flow_program(start: int):
    """Nested Repeat, a Call inside a RepeatWhileTrue, an If; ``n`` starts at ``start``."""
    g = Graph(T16)
    x = g.add_variable(FLOAT, (4,), "x")
    g.map_tensor_linearly(x)
    n = g.add_variable(INT, (1,), "n")
    g.set_tile_mapping(n, 0)
    more = g.add_variable("bool", (), "more")
    g.set_tile_mapping(more, 0)
    flag = g.add_variable("bool", (), "flag")
    g.set_tile_mapping(flag, 0)
    double = Sequence()
    map_in_place(g, _1 * Const(2.0), [x], double)
    doubler = g.add_function(double, "double")
    condition = Sequence()
    map_with_output(g, _1 < Const(3), [n], more.reshape((1,)), condition)
    body = Sequence(Call(doubler))
    map_in_place(g, _1 + Const(1), [n], body)
    inner = Sequence()
    map_in_place(g, _1 * Const(0.5), [x], inner)
    prog = Sequence(Repeat(3, Sequence(Repeat(2, inner), Call(doubler))))
    prog.add(RepeatWhileTrue(condition, more, body))
    map_with_output(g, eq(_1, Const(3)), [n], flag.reshape((1,)), prog)
    otherwise = Sequence()
    fill(g, x, -1.0, otherwise)
    prog.add(If(flag, Sequence(Call(doubler)), otherwise))
    prog.add(Sync())
    prog.add(PrintTensor("x", x))
    g.create_host_write("x", x)
    g.create_host_write("n", n)
    g.create_host_read("x_out", x)
    engine = Engine(g, prog, backend="numpy")
    engine.write_tensor("x", np.arange(4))
    engine.write_tensor("n", np.array([start]))
    engine.run(0)
    return g, prog, engine


@pytest.mark.parametrize("start, taken", [(0, True), (5, False)])
def test_plan_only_report_equals_the_run(start, taken):
    g, prog, engine = control_flow_program(start)
    static = StaticProgram(engine.plan.liveness)
    (loop,) = static.loops(0)
    (branch,) = static.branch_steps
    trips = max(3 - start, 0)
    report = plan_program(g, prog, trips={loop.index: trips}, branches={branch: taken})
    np.testing.assert_array_equal(report.step_counts, engine.report.step_counts)
    assert without_time(report) == without_time(engine.report)
    assert report.cycles.total > 0


def test_several_runs_add_up():
    g, prog, engine = control_flow_program(0)
    engine.write_tensor("n", np.array([0]))
    engine.run(0)
    static = StaticProgram(engine.plan.liveness)
    (loop,) = static.loops(0)
    (branch,) = static.branch_steps
    counts = static.step_counts((0, 0), trips={loop.index: 3}, branches={branch: True})
    np.testing.assert_array_equal(counts, engine.report.step_counts)


def test_counts_too_large_for_64_bits_are_refused_not_wrapped():
    """Two nested repeats of 2^32 - 1 (Poplar's largest count) run a step ~2^64 times; 2^31 x
    2^31 fits a step count but not the per-tile cycle totals."""
    g = Graph(T16)
    x = g.add_variable(FLOAT, (4,), "x")
    g.map_tensor_linearly(x)
    body = Sequence()
    map_in_place(g, _1 * Const(0.5), [x], body)
    with pytest.raises(GrucValueError, match=r"would run 18446744065119617025 times"):
        plan_program(g, Sequence(Repeat(2 ** 32 - 1, Repeat(2 ** 32 - 1, body))))
    report = plan_program(g, Sequence(Repeat(2 ** 31, Repeat(2 ** 31, body))))
    assert report.cycles.compute == 2 ** 62 * plan_program(g, body).cycles.compute
    with pytest.raises(GrucValueError, match="totals exceed 64-bit integers"):
        report.compute_cycles_by_tile  # noqa: B018 (a property)
    with pytest.raises(GrucValueError, match=r"0\.\.4294967295"):
        Repeat(2 ** 32, body)


def test_data_dependent_control_flow_must_be_given():
    g, prog, engine = control_flow_program(0)
    compiled = compile_program(g, prog)
    static = StaticProgram(compiled.plan.liveness)
    (loop,) = static.loops(0)
    with pytest.raises(GrucValueError, match=f"step {loop.index} .*trip count"):
        static.step_counts()
    with pytest.raises(GrucValueError, match="branch it takes"):
        static.step_counts(trips={loop.index: 1})
    with pytest.raises(GrucValueError, match="trips names step 0"):
        static.step_counts(trips={0: 1})
    with pytest.raises(GrucValueError, match="trip count -1"):
        static.step_counts(trips={loop.index: -1})
    with pytest.raises(GrucValueError, match="program 4 does not exist"):
        static.step_counts((4,))
