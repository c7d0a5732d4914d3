"""End-to-end programs on the simulated IPU: both engines give numpy's answers."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from gruc import (FLOAT, INT, UNSIGNED_INT, Call, Copy, Engine, Graph, GrucError,
                  GrucOutOfMemory, GrucProgramError, If, PrintTensor, Repeat, RepeatWhileTrue,
                  Sequence, Sync, Target, WriteUndef)
from gruc.ir.expr import _1, _2, _3, Const, eq, exp, select, sigmoid, tanh
from gruc.ops import add, add_in_place, cast, fill, map, map_in_place, map_with_output, mul, zero
from gruc.runtime.lower import HOST_PAGE, TILE_STRIDE_ALIGNMENT, aligned_array, host_tile_stride

T16 = Target.custom(tiles_per_ipu=16)
BACKENDS = ["numpy", "numba"]


def linear(graph, dtype, shape, name):
    t = graph.add_variable(dtype, shape, name)
    graph.map_tensor_linearly(t)
    return t


def run(graph, progs, writes, reads, backend, program=0, **engine_args):
    engine = Engine(graph, progs, backend=backend, **engine_args)
    for name, value in writes.items():
        engine.write_tensor(name, value)
    engine.run(program)
    return engine, {name: engine.read_tensor(name) for name in reads}


@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_and_unfused_expressions_with_broadcasting(backend, rng):
    g = Graph(T16)
    x = linear(g, FLOAT, (6, 40), "x")
    y = linear(g, FLOAT, (40,), "y")
    s = linear(g, FLOAT, (1,), "s")
    prog = Sequence()
    fused = map(g, tanh(_1) * _2 + sigmoid(_1) - Const(0.5), [x, x], prog, "fused")
    unfused = map(g, exp(_1 * Const(0.1)) * _2 + _3, [x, y, s], prog, "unfused")
    total = add(g, fused, unfused, prog)
    scaled = mul(g, total, y, prog)
    for name, t in {"x": x, "y": y, "s": s}.items():
        g.create_host_write(name, t)
    for name, t in {"fused": fused, "unfused": unfused, "scaled": scaled}.items():
        g.create_host_read(name, t)
    xv, yv, sv = rng.uniform(-2, 2, (6, 40)), rng.uniform(-1, 1, 40), rng.uniform(-1, 1, 1)
    _, out = run(g, prog, {"x": xv, "y": yv, "s": sv}, ["fused", "unfused", "scaled"], backend)
    x32 = xv.astype(np.float32)
    f = np.tanh(x32) * x32 + 1 / (1 + np.exp(-x32)) - 0.5
    u = np.exp(x32 * 0.1) * yv.astype(np.float32) + sv.astype(np.float32)
    np.testing.assert_allclose(out["fused"], f, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["unfused"], u, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["scaled"], (f + u) * yv.astype(np.float32), rtol=1e-5, atol=1e-5)


def test_step_costs_wait_for_the_report(monkeypatch):
    """Compiling and running never estimates step costs; the first report (or trace) does, once,
    and its cycles count the runs made so far."""
    import gruc.runtime.engine as engine_module

    costed = []
    real = engine_module.step_costs
    monkeypatch.setattr(engine_module, "step_costs",
                        lambda graph, steps: costed.append(len(steps)) or real(graph, steps))
    g = Graph(T16)
    x = linear(g, FLOAT, (4, 8), "x")
    prog = Sequence()
    map_in_place(g, _1 * Const(2.0), [x], prog)
    g.create_host_write("x", x)
    engine, _ = run(g, prog, {"x": np.ones((4, 8))}, [], "numba")
    engine.run(0)
    assert costed == []
    once = engine.report.cycles.total
    assert len(costed) == 1 and once > 0 and engine.costs is engine.report.costs
    engine.run(0)
    assert engine.report.cycles.total == once * 3 // 2 and len(costed) == 1


def test_fusion_follows_poplibs_rule():
    g = Graph(T16)
    x = linear(g, FLOAT, (4, 8), "x")
    y = linear(g, FLOAT, (8,), "y")
    prog = Sequence()
    map(g, _1 * _2 + _1, [x, x], prog)            # same shapes, 2 ops: one fused compute set
    assert len(g.compute_sets) == 1
    map(g, _1 * _2 + _1, [x, y], prog)            # needs broadcasting: one compute set per op
    assert len(g.compute_sets) == 3
    map(g, _1 * _2 + _1, [x, x.transpose().transpose()], prog)  # aliases? no: still fused
    assert len(g.compute_sets) == 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_repeat_with_counter_copies_across_tiles_and_in_place_updates(backend):
    g = Graph(T16)
    acc = g.add_variable(FLOAT, (8,), "acc")
    g.set_tile_mapping(acc, 3)
    step = g.add_variable(FLOAT, (8,), "step")
    g.set_tile_mapping(step, 9)  # on another tile: every add is an exchange
    counter = g.add_variable(INT, (1,), "counter")
    g.set_tile_mapping(counter, 0)
    prog = Sequence()
    zero(g, acc, prog)
    zero(g, counter, prog)
    body = Sequence()
    add_in_place(g, acc, step, body)
    map_in_place(g, _1 + Const(1), [counter], body)
    prog.add(Repeat(5, body))
    moved = g.add_variable(FLOAT, (8,), "moved")
    g.map_tensor_linearly(moved, min_elements_per_tile=1, grain_size=1)
    prog.add(Copy(acc, moved))
    g.create_host_write("step", step)
    for name, t in {"acc": acc, "moved": moved, "counter": counter}.items():
        g.create_host_read(name, t)
    engine, out = run(g, prog, {"step": np.arange(8)}, ["acc", "moved", "counter"], backend)
    np.testing.assert_array_equal(out["acc"], 5 * np.arange(8))
    np.testing.assert_array_equal(out["moved"], 5 * np.arange(8))
    assert out["counter"].tolist() == [5]
    assert engine.report.exchange_bytes == 5 * 8 * 4 + 7 * 4  # 5 remote adds, 7 of 8 moved
    assert engine.report.cycles.exchange > 0 and engine.report.cycles.sync > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_if_repeat_while_true_call_print_and_sync(backend):
    g = Graph(T16)
    x = linear(g, FLOAT, (4,), "x")
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
    prog = Sequence()
    prog.add(RepeatWhileTrue(condition, more, body))   # doubles three times
    map_with_output(g, eq(_1, Const(3)), [n], flag.reshape((1,)), prog)
    then, otherwise = Sequence(Call(doubler)), Sequence()
    fill(g, x, -1.0, otherwise)
    prog.add(If(flag, then, otherwise))                # n == 3: doubles once more
    prog.add(Sync())
    prog.add(PrintTensor("x", x))
    g.create_host_write("x", x)
    g.create_host_write("n", n)
    g.create_host_read("x_out", x)
    engine, out = run(g, prog, {"x": np.arange(4), "n": np.zeros(1)}, ["x_out"], backend)
    np.testing.assert_array_equal(out["x_out"], 16 * np.arange(4))
    assert engine.printed[0][0] == "x"
    np.testing.assert_array_equal(engine.printed[0][1], 16 * np.arange(4))


@pytest.mark.parametrize("backend", BACKENDS)
def test_several_programs_share_device_state(backend):
    g = Graph(T16)
    x = linear(g, FLOAT, (10,), "x")
    init, step = Sequence(), Sequence()
    fill(g, x, 1.0, init)
    map_in_place(g, _1 * Const(3.0), [x], step)
    g.create_host_read("x", x)
    engine = Engine(g, [init, step], backend=backend)
    engine.run(0)
    engine.run(1)
    engine.run(1)
    np.testing.assert_array_equal(engine.read_tensor("x"), np.full(10, 9.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_cast_and_select(backend, rng):
    g = Graph(T16)
    x = linear(g, FLOAT, (3, 16), "x")
    prog = Sequence()
    ints = cast(g, x, INT, prog)
    chosen = map(g, select(_1, -_1, _1 > Const(0.0)), [x], prog)
    g.create_host_write("x", x)
    g.create_host_read("ints", ints)
    g.create_host_read("abs", chosen)
    xv = rng.uniform(-5, 5, (3, 16))
    _, out = run(g, prog, {"x": xv}, ["ints", "abs"], backend)
    np.testing.assert_array_equal(out["ints"], np.trunc(xv.astype(np.float32)).astype(np.int32))
    np.testing.assert_allclose(out["abs"], np.abs(xv.astype(np.float32)))


SPECIAL_FLOATS = [np.nan, np.inf, -np.inf, 3e9, -3e9, 2.7, -2.7, -0.5, 1e-30, 2147483520.0]
SATURATED = {INT: [0, 2**31 - 1, -2**31, 2**31 - 1, -2**31, 2, -2, 0, 0, 2147483520],
             UNSIGNED_INT: [0, 2**32 - 1, 0, 3000000000, 0, 2, 0, 0, 0, 2147483520]}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("target", [INT, UNSIGNED_INT])
def test_float_to_integer_casts_truncate_and_saturate(backend, target):
    """NaN gives 0 and values past the range its ends, on both engines alike (as defined in
    :mod:`gruc.ir.expr`; a bare conversion is undefined in LLVM and differed between them)."""
    g = Graph(T16)
    x = linear(g, FLOAT, (len(SPECIAL_FLOATS),), "x")
    prog = Sequence()
    g.create_host_write("x", x)
    g.create_host_read("y", cast(g, x, target, prog))
    _, out = run(g, prog, {"x": np.array(SPECIAL_FLOATS, np.float32)}, ["y"], backend)
    np.testing.assert_array_equal(out["y"], np.array(SATURATED[target], target.storage))


def test_memory_reuse_is_real_and_results_stay_right():
    """Two temporaries with disjoint lifetimes share bytes, and the program is still right."""
    g = Graph(Target.custom(tiles_per_ipu=2))
    x = linear(g, FLOAT, (64,), "x")
    prog = Sequence()
    first = map(g, _1 * Const(2.0), [x], prog, "first")
    out1 = map(g, _1 + Const(1.0), [first], prog, "out1")
    prog.add(WriteUndef(first))
    second = map(g, _1 * Const(3.0), [x], prog, "second")
    out2 = map(g, _1 + _2, [second, out1], prog, "out2")
    g.create_host_write("x", x)
    g.create_host_read("out2", out2)
    # no passes: fusion would fold the temporaries away, and they are what this test is about
    engine, out = run(g, prog, {"x": np.arange(64)}, ["out2"], "numpy", pipeline="")
    plan = engine.plan
    assert plan.blocks(first.index) == plan.blocks(second.index)  # same tiles, offsets, bytes
    np.testing.assert_array_equal(out["out2"], 3 * np.arange(64) + 2 * np.arange(64) + 1)


@pytest.mark.parametrize("max_tile_bytes", [0, 1, 64, 65, 128, 147_456, 147_457])
def test_host_tiles_are_an_odd_number_of_cache_lines_apart(max_tile_bytes):
    """Tiles an even number of lines apart share few cache sets (see ``host_tile_stride``)."""
    stride = host_tile_stride(max_tile_bytes)
    assert stride >= max_tile_bytes and stride % TILE_STRIDE_ALIGNMENT == 0
    assert (stride // TILE_STRIDE_ALIGNMENT) % 2 == 1
    assert stride - max_tile_bytes < 2 * TILE_STRIDE_ALIGNMENT  # at most one line more than needed


@pytest.mark.parametrize("shape, dtype, alignment", [
    (0, np.float32, 64), (7, np.uint8, 64), ((3, 5), np.float32, 64), ((2, 3, 4), np.int64, 4096)])
def test_host_arrays_start_on_the_boundary_asked_for(shape, dtype, alignment):
    array = aligned_array(shape, dtype, alignment)
    zeroed = aligned_array(shape, dtype, alignment, zeroed=True)
    assert array.shape == ((shape,) if isinstance(shape, int) else shape) and array.dtype == dtype
    assert array.flags.c_contiguous and not zeroed.any()
    if array.size:  # an empty array has no data to align
        assert array.ctypes.data % alignment == 0 and zeroed.ctypes.data % alignment == 0


def test_an_engine_lays_tiles_out_on_cache_lines_an_odd_number_of_lines_apart():
    g = Graph(Target.custom(tiles_per_ipu=4))
    x = linear(g, FLOAT, (4 * 32,), "x")  # 128 bytes a tile: two lines
    prog = Sequence()
    g.create_host_write("x", x)
    g.create_host_read("y", map(g, _1 * Const(2.0), [x], prog, "y"))
    engine, out = run(g, prog, {"x": np.arange(128)}, ["y"], "numba")
    assert engine.executable.tile_stride == host_tile_stride(engine.plan.max_total_bytes)
    assert (engine.executable.tile_stride // TILE_STRIDE_ALIGNMENT) % 2 == 1
    assert engine.memory.raw.ctypes.data % HOST_PAGE == 0  # so every tile starts a cache line
    np.testing.assert_array_equal(out["y"], 2 * np.arange(128))


def test_out_of_memory_compiles_and_reports_and_strict_raises():
    target = Target.custom(tiles_per_ipu=4, bytes_per_tile=1024)
    g = Graph(target)
    big = g.add_variable(FLOAT, (300,), "big")
    g.set_tile_mapping(big, 1)
    small = linear(g, FLOAT, (8,), "small")
    prog = Sequence()
    doubled = map(g, _1 * Const(2.0), [big], prog, "doubled")
    g.create_host_write("big", big)
    g.create_host_read("doubled", doubled)
    g.create_host_read("small", small)
    engine = Engine(g, prog, backend="numpy")
    report = engine.report
    assert not report.fits
    assert [o.tile for o in report.tiles_over_capacity] == [1]
    overflow = report.tiles_over_capacity[0]
    assert engine.plan.total_bytes[1] == 2400  # the tensors; the tile also holds code and state
    assert overflow.bytes == engine.footprint.total_including_gaps[1] > 2400
    assert overflow.capacity == 1024
    assert [name for name, _ in overflow.largest] == ["big", "doubled"]
    engine.write_tensor("big", np.arange(300))
    engine.run()  # like the IPUModel, an out-of-memory program still runs
    np.testing.assert_array_equal(engine.read_tensor("doubled"), 2 * np.arange(300))
    with pytest.raises(GrucOutOfMemory) as info:
        Engine(g, prog, strict_memory=True, backend="numpy")
    for word in ["tile 1", str(engine.footprint.total_including_gaps[1]), "1024", "big"]:
        assert word in str(info.value)


def test_report_json_has_poplar_like_keys_and_the_trace_nests(tmp_path):
    g = Graph(T16)
    x = linear(g, FLOAT, (4, 40), "x")
    prog = Sequence()
    body = Sequence()
    map_in_place(g, tanh(_1), [x], body)
    prog.add(Repeat(3, body))
    y = map(g, _1 * _1, [x], prog)
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    engine = Engine(g, prog, backend="numpy")
    engine.write_tensor("x", np.ones((4, 40)))
    engine.run()
    report = json.loads(engine.report.to_json(tmp_path / "report.json"))
    assert json.loads((tmp_path / "report.json").read_text()) == report
    memory, cycles = report["memory"], report["cycles"]
    assert len(memory["always_live_bytes_by_tile"]) == 16
    assert len(memory["not_always_live_max_bytes_by_tile"]) == 16
    assert len(memory["total_including_gaps_by_tile"]) == 16
    assert set(cycles) >= {"compute", "exchange", "sync", "total", "compute_by_tile"}
    assert cycles["total"] == cycles["compute"] + cycles["exchange"] + cycles["sync"] > 0
    assert "bytes_received_by_tile" in report["exchange"]
    assert [s["executions"] for s in report["steps"]] == [3, 1]
    text = io.StringIO()   # Poplar's printProfileSummary, with every step's cost
    engine.report.print_profile_summary(text, show_execution_steps=True)
    steps = text.getvalue().split("execution steps")[1].splitlines()[1:]
    assert [int(line.split()[1]) for line in steps] == [3, 1]
    engine.write_trace(tmp_path / "trace.json")
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert_properly_nested(trace["traceEvents"])


def assert_properly_nested(events):
    """On every (pid, tid) track, complete events either nest or are disjoint."""
    tracks: dict = {}
    for e in events:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    assert tracks
    for spans in tracks.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for start, end in spans:
            while stack and stack[-1] <= start:  # exact: times sit on a grid
                stack.pop()
            if stack:
                assert end <= stack[-1], "events overlap without nesting"
            stack.append(end)


def test_bad_host_access_is_named():
    g = Graph(T16)
    x = linear(g, FLOAT, (4,), "x")
    g.create_host_write("x", x)
    g.create_host_read("x", x)
    engine = Engine(g, Sequence(), backend="numpy")
    with pytest.raises(GrucError, match="shape \\[4\\]"):
        engine.write_tensor("x", np.zeros(5))
    with pytest.raises(GrucError, match="host writes: x"):
        engine.write_tensor("y", np.zeros(4))
    with pytest.raises(GrucError, match="programs 0..0"):
        engine.run(3)
    with pytest.raises(GrucError, match="backend"):
        Engine(g, Sequence(), backend="cuda")


def test_an_engine_that_never_ran_has_no_trace():
    g = Graph(Target.custom(tiles_per_ipu=4))
    x = g.add_variable(FLOAT, (8,), "x")
    g.map_tensor_linearly(x)
    g.create_host_write("x", x)
    engine = Engine(g, Sequence(WriteUndef(x)))
    with pytest.raises(GrucProgramError, match="no run to trace"):
        engine.chrome_trace()
    engine.run()
    assert "traceEvents" in engine.chrome_trace()


def test_the_trace_of_a_training_layer_nests_to_the_bit(tmp_path):
    """Thousands of events at a clock whose cycle is no binary fraction of a microsecond: with
    times as plain products, hundreds of events overran their parent by a rounding step."""
    from gruc.tools.gru_layer import GruLayerConfig, run_layer

    config = GruLayerConfig(sequence_size=4, input_size=4, output_size=4, batch_size=2,
                            tiles_per_ipu=16, phase="all", backend="numpy")
    run = run_layer(config)
    run.engine.write_trace(tmp_path / "trace.json")
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) > 1000
    assert_properly_nested(events)
