"""The numba backend's cross-vertex fast paths keep the definition's results.

Each case is built so that the fast path is taken *and* could go wrong: a weights operand kept
between steps while the host or a step rewrites it, slice vertices grouped into one kernel whose
rows are not contiguous, copies moved as runs whose source and destination overlap.
"""

from __future__ import annotations

import numpy as np
import pytest

from gruc import FLOAT, HALF, INT, Copy, Engine, Graph, Repeat, Sequence, Target, TileMapping
from gruc.ir.expr import _1, _2, _3, Cast, Const, sigmoid, tanh
from gruc.ops import cast, map, map_in_place, map_with_output
from gruc.ops.dynamic import dynamic_slice, dynamic_update
from gruc.ops.reduce import reduce_with_output
from gruc.ops.matmul import (create_mat_mul_input_lhs, create_mat_mul_input_rhs, mat_mul,
                              mat_mul_acc)
from gruc.runtime.codelets import elementwise
from gruc.runtime.codelets.dynamic import _move_rows as MOVE_ROWS
from gruc.runtime.kernels import runs_by_address

T16 = Target.custom(tiles_per_ipu=16)


def engines(graph, program):
    return [Engine(graph, program, backend=backend) for backend in ("numpy", "numba")]


def spied(monkeypatch, module, name: str) -> list:
    """Every result of ``module.<name>`` from now on (it still runs and returns them)."""
    real, seen = getattr(module, name), []
    monkeypatch.setattr(module, name, lambda *args: seen.append(real(*args)) or seen[-1])
    return seen


def results_of_both(graph, program, written, values, result):
    """``result`` as each engine (numpy, then numba) leaves it after the host writes ``values``
    into the ``written`` tensors (by name) and runs ``program``; and the numba engine."""
    for name, tensor in written.items():
        graph.create_host_write(name, tensor)
    graph.create_host_read("result", result)
    results = []
    for engine in engines(graph, program):
        for name, value in values.items():
            engine.write_tensor(name, value)
        engine.run(0)
        results.append(engine.read_tensor("result"))
    return results, engine


def product_loop(touch: str, steps: int = 3, k: float = 1.0):
    """``acc += k * a @ b``, ``steps`` times; inside the loop also, by ``touch``: nothing, ``b *= 0.5``
    (the kept weights change), ``acc *= 0.5`` (the kept accumulator changes) or a snapshot copy
    of ``acc`` (the kept accumulator must be in tile memory when the copy reads it)."""
    g = Graph(T16)
    a = create_mat_mul_input_lhs(g, FLOAT, (8, 12), (12, 10), "a")
    b = create_mat_mul_input_rhs(g, FLOAT, (8, 12), (12, 10), "b")
    acc = g.add_variable(FLOAT, (8, 10), "acc")
    g.map_tensor_linearly(acc)
    snapshot = g.clone(acc, "snapshot")
    body = Sequence()
    mat_mul_acc(g, acc, k, a, b, body)
    if touch == "weights":
        map_in_place(g, _1 * Const(0.5), [b], body)
    elif touch == "accumulator":
        map_in_place(g, _1 * Const(0.5), [acc], body)
    elif touch == "snapshot":
        body.add(Copy(acc, snapshot))
    for name, tensor in (("a", a), ("b", b), ("acc", acc)):
        g.create_host_write(name, tensor)
    g.create_host_read("acc", acc)
    g.create_host_read("snapshot", snapshot)
    return g, Sequence(Copy(acc, snapshot), Repeat(steps, body))


def expected_accumulation(touch: str, a: np.ndarray, b: np.ndarray, steps: int = 3,
                          k: float = 1.0) -> np.ndarray:
    total = np.zeros((8, 10))
    for _ in range(steps):
        total = total + k * (a @ b)
        if touch == "weights":
            b = 0.5 * b
        elif touch == "accumulator":
            total = 0.5 * total
    return total


@pytest.mark.parametrize("touch, steps, k", [
    ("nothing", 3, 1.0), ("weights", 3, 1.0), ("accumulator", 3, 1.0), ("snapshot", 3, 1.0),
    # more steps than the deferred products stack holds (1024 // 12 + 1), scaled
    ("nothing", 200, -0.25), ("weights", 200, 1.0), ("snapshot", 200, 0.5)])
def test_kept_operands_follow_host_writes_and_the_steps_that_touch_them(touch, steps, k, rng):
    g, program = product_loop(touch, steps, k)
    a, acc = rng.uniform(-1, 1, (8, 12)), np.zeros((8, 10))
    weights = [rng.uniform(-1, 1, (12, 10)) for _ in range(2)]
    results = []
    for engine in engines(g, program):
        runs = []
        for b in weights:
            for name, value in (("a", a), ("b", b), ("acc", acc)):
                engine.write_tensor(name, value)
            engine.run(0)
            expected = expected_accumulation(touch, a, b, steps, k)
            np.testing.assert_allclose(engine.read_tensor("acc"), expected, rtol=1e-5,
                                       atol=1e-5)
            if touch == "snapshot":
                np.testing.assert_array_equal(engine.read_tensor("snapshot"),
                                              engine.read_tensor("acc"))
            runs.append(engine.read_tensor("acc"))
        results.append(runs)
    # float32 sums of ``steps`` products, taken in different orders, drift apart with ``steps``
    for numpy_run, numba_run in zip(*results):
        np.testing.assert_allclose(numba_run, numpy_run, rtol=1e-6 * steps, atol=1e-6 * steps)


@pytest.mark.parametrize("groups, steps", [(2, 1), (3, 200)])
def test_grouped_accumulations_are_stacked_per_group(groups, steps, rng):
    """``acc[g] += a[g] @ b[g]`` for several groups, kept and stacked over steps (200 steps of
    k=6: past the stack's depth); the joined stacks once took their group count from the depth."""
    g = Graph(T16)
    a, b, acc = (g.add_variable(FLOAT, shape, name) for shape, name in
                 (((groups, 2, 6), "a"), ((groups, 6, 3), "b"), ((groups, 2, 3), "acc")))
    for tensor in (a, b, acc):
        g.map_tensor_linearly(tensor)
    body = Sequence()
    mat_mul_acc(g, acc, 1.0, a, b, body)
    values = {"a": rng.uniform(-1, 1, (groups, 2, 6)), "b": rng.uniform(-1, 1, (groups, 6, 3)),
              "acc": rng.uniform(-1, 1, (groups, 2, 3))}
    (numpy_run, numba_run), _ = results_of_both(g, Sequence(Repeat(steps, body)),
                                                {"a": a, "b": b, "acc": acc}, values, acc)
    expected = values["acc"] + steps * (values["a"] @ values["b"])
    np.testing.assert_allclose(numpy_run, expected, rtol=1e-5 * steps, atol=1e-5 * steps)
    np.testing.assert_allclose(numba_run, numpy_run, rtol=1e-6 * steps, atol=1e-6 * steps)


@pytest.mark.parametrize("between", ["nothing", "rewrite"])
def test_an_operand_two_products_read_is_gathered_once_while_it_cannot_change(between, rng,
                                                                              monkeypatch):
    """``y = x @ w``, then ``z = v @ x``, then ``x += 1``, in a loop: the second product copies
    ``x`` from the host array the first gathered it into — unless a step rewrites ``x`` between
    the two, when it must gather again."""
    from gruc.runtime.codelets import matmul

    gathered = []
    read = matmul.Transfer.read
    monkeypatch.setattr(matmul.Transfer, "read", lambda self, memory, into: (
        gathered.append(self.index.size), read(self, memory, into))[1])
    g = Graph(T16)
    x = create_mat_mul_input_lhs(g, FLOAT, (8, 12), (12, 10), "x")
    w = create_mat_mul_input_rhs(g, FLOAT, (8, 12), (12, 10), "w")
    v = create_mat_mul_input_lhs(g, FLOAT, (6, 8), (8, 12), "v")
    body = Sequence()
    y = mat_mul(g, x, w, body)
    if between == "rewrite":
        map_in_place(g, _1 * Const(0.5), [x], body)
    z = mat_mul(g, v, x, body)
    map_in_place(g, _1 + Const(1.0), [x], body)
    for name, tensor in (("x", x), ("w", w), ("v", v)):
        g.create_host_write(name, tensor)
    for name, tensor in (("y", y), ("z", z)):
        g.create_host_read(name, tensor)
    values = {"x": rng.uniform(-1, 1, (8, 12)), "w": rng.uniform(-1, 1, (12, 10)),
              "v": rng.uniform(-1, 1, (6, 8))}
    x_now = values["x"]
    for _ in range(3):
        y_expected = x_now @ values["w"]
        x_now = 0.5 * x_now if between == "rewrite" else x_now
        z_expected, x_now = values["v"] @ x_now, x_now + 1
    for engine in engines(g, Sequence(Repeat(3, body))):
        gathered.clear()
        for name, value in values.items():
            engine.write_tensor(name, value)
        engine.run(0)
        np.testing.assert_allclose(engine.read_tensor("y"), y_expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(engine.read_tensor("z"), z_expected, rtol=1e-5, atol=1e-5)
    assert gathered.count(x.num_elements) == (6 if between == "rewrite" else 3)


def test_grouped_windows_with_scattered_rows_match_the_definition(rng):
    """A transposed base (rows not contiguous on any tile) sliced and updated by many vertices."""
    g = Graph(T16)
    base = g.add_variable(FLOAT, (12, 40), "base")
    g.map_tensor_linearly(base)
    sliced_view = base.transpose()[:, :6].transpose()  # [6, 40] rows scattered in memory
    offset = g.add_variable(INT, (1,), "offset")
    g.set_tile_mapping(offset, 3)
    program = Sequence()
    window = dynamic_slice(g, sliced_view, offset, [0], [2], program, "slice")
    map_in_place(g, _1 + Const(1.0), [window], program)
    dynamic_update(g, base, window, offset, [0], [2], program, "update")
    g.create_host_write("base", base)
    g.create_host_write("offset", offset)
    g.create_host_read("base", base)
    g.create_host_read("window", window)
    values = rng.uniform(-1, 1, (12, 40))
    outputs = []
    for engine in engines(g, program):
        for at in (4, 5, 11):  # 5: the window wraps around the 6 rows; 11: out of range
            engine.write_tensor("base", values)
            engine.write_tensor("offset", np.array([at]))
            engine.run(0)
            outputs.append((engine.read_tensor("base"), engine.read_tensor("window")))
    half = len(outputs) // 2
    for (numpy_base, numpy_window), (numba_base, numba_window) in zip(outputs[:half],
                                                                      outputs[half:]):
        np.testing.assert_array_equal(numba_base, numpy_base)
        np.testing.assert_array_equal(numba_window, numpy_window)


def test_one_offset_slices_of_time_major_sequences_move_row_by_row(rng, monkeypatch):
    """An RNN step's slices: two sequence tensors, time-major on every tile, sliced then updated
    by one counter — the grouped row kernel, in range, at both ends and out of range."""
    from gruc.runtime.codelets import dynamic

    calls = []
    monkeypatch.setattr(dynamic, "_move_rows",
                        lambda *args: calls.append(args[-1]) or MOVE_ROWS(*args))
    g = Graph(T16)
    sequences = [g.add_variable(FLOAT, (7, 3, 16), name) for name in ("gates", "state")]
    for sequence in sequences:  # column c of every row on tile c: each tile holds whole rows
        g.set_tile_mapping(sequence, TileMapping.from_element_tiles(
            np.tile(np.arange(16), (7, 3, 1))))
    counter = g.add_variable(INT, (1,), "counter")
    g.set_tile_mapping(counter, 5)
    program = Sequence()
    windows = [dynamic_slice(g, s, counter, [0], [1], program, f"slice_{s.name}")
               for s in sequences]
    map_in_place(g, _1 * Const(-2.0), windows, program)
    for sequence, window in zip(sequences, windows):
        dynamic_update(g, sequence, window, counter, [0], [1], program, f"update_{sequence.name}")
    for sequence, window in zip(sequences, windows):
        g.create_host_write(sequence.name, sequence)
        g.create_host_read(sequence.name, sequence)
        g.create_host_read(f"{sequence.name}_window", window)
        g.create_host_write(f"{sequence.name}_window", window)
    g.create_host_write("counter", counter)
    values = {s.name: rng.uniform(-1, 1, s.shape) for s in sequences}
    for at in (0, 3, 6, 7, -1):
        results = []
        for engine in engines(g, program):
            for name, value in values.items():
                engine.write_tensor(name, value)
                engine.write_tensor(f"{name}_window", np.full((1, 3, 16), 9.0))
            engine.write_tensor("counter", np.array([at]))
            engine.run(0)
            results.append({name: engine.read_tensor(name) for name in engine.executable.host_reads})
        for name, value in results[0].items():
            np.testing.assert_array_equal(results[1][name], value, err_msg=f"{name} at {at}")
        if 0 <= at < 7:
            expected = values["gates"].astype(np.float32)
            expected[at] *= -2
            np.testing.assert_array_equal(results[1]["gates"], expected)
    assert calls.count(False) == calls.count(True) == 10  # per run: a slice, an update a tensor


@pytest.mark.parametrize("op", ["add", "square_add", "max"])
def test_a_step_of_many_reductions_is_one_kernel_call_and_matches_the_definition(op, rng):
    """A reduction over rows cut across tiles (partials on each tile, then a final sum), run three
    times in a loop, updating its output with a scale where the op allows: each step's vertices
    of one kind are one callable, even where the kinds alternate, and match the definition."""
    g = Graph(T16)
    x = g.add_variable(FLOAT, (64, 20), "x")
    g.map_tensor_linearly(x, grain_size=30)  # 80 elements a tile: rows cut across tiles
    out = g.add_variable(FLOAT, (64,), "out")
    g.map_tensor_linearly(out, min_elements_per_tile=4, grain_size=4)
    body = Sequence()
    update = op != "max"
    reduce_with_output(g, x, out, [1], op, body, update=update, scale=0.5 if update else 1.0)
    program = Sequence(Repeat(3, body))
    start = rng.uniform(-1, 1, 64)
    values = rng.uniform(-1, 1, (64, 20))
    (numpy_out, numba_out), engine = results_of_both(g, program, {"x": x, "out": out},
                                                     {"x": values, "out": start}, out)
    x32 = values.astype(np.float32).astype(np.float64)
    reduced = {"add": x32.sum(1), "square_add": (x32 ** 2).sum(1), "max": x32.max(1)}[op]
    expected = start.astype(np.float32) + 1.5 * reduced if update else reduced
    np.testing.assert_allclose(numpy_out, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(numba_out, numpy_out, rtol=1e-6, atol=1e-6)
    steps = [leaf for leaf in engine.executable.leaves if getattr(leaf, "vertices", None)]
    kinds = [{v.kind for v in leaf.vertices} for leaf in steps]  # partials: Reduce and Update
    assert max(len(leaf.vertices) for leaf in steps) >= 8
    assert [len(engine.interpreter.prepared[leaf.step]) for leaf in steps] == [len(k) for k in kinds]


@pytest.mark.parametrize("in_place", [False, True])
def test_transcendentals_over_short_runs_are_staged_and_match_the_definition(in_place, rng,
                                                                             monkeypatch):
    """A sigmoid over a strided view (runs of a few elements on each tile), with a streaming
    operand and a broadcast scalar: the staged kernel, against numpy's definition."""
    staged = spied(monkeypatch, elementwise, "_staged")
    g = Graph(T16)
    x = g.add_variable(FLOAT, (40, 30), "x")
    g.map_tensor_linearly(x)
    bias = g.add_variable(FLOAT, (1,), "bias")
    g.set_tile_mapping(bias, 2)
    out = g.add_variable(FLOAT, (40, 10), "out")
    g.map_tensor_linearly(out)
    result = g.add_variable(FLOAT, (40, 10), "result")
    g.map_tensor_linearly(result)
    program = Sequence()
    view = x[:, 3:13]  # runs of at most 10 elements, 30 apart
    expression = sigmoid(_1 * Const(2.0) + _2) - tanh(_3)
    operands = [view, out, bias.broadcast_to((40, 10))]
    if in_place:
        map_in_place(g, expression, operands, program)
    else:
        map_with_output(g, expression, operands, result, program)
    for name, tensor in (("x", x), ("out", out), ("bias", bias), ("result", result)):
        g.create_host_write(name, tensor)
        g.create_host_read(name, tensor)
    values = {"x": rng.uniform(-4, 4, (40, 30)), "out": rng.uniform(-4, 4, (40, 10)),
              "bias": np.array([0.75]), "result": np.zeros((40, 10))}
    results = []
    for engine in engines(g, program):
        for name, value in values.items():
            engine.write_tensor(name, value)
        engine.run(0)
        results.append({name: engine.read_tensor(name) for name in values})
    assert staged
    for name in values:
        np.testing.assert_allclose(results[1][name], results[0][name], rtol=2e-6, atol=2e-7)
    x32, out32 = (values[n].astype(np.float32) for n in ("x", "out"))
    expected = 1 / (1 + np.exp(-(2 * x32[:, 3:13] + out32))) - np.tanh(np.float32(0.75))
    np.testing.assert_allclose(results[1]["x"][:, 3:13] if in_place else results[1]["result"], expected,
                               rtol=1e-5, atol=1e-6)


def test_operands_with_misaligned_runs_are_staged_on_their_own_runs(rng, monkeypatch):
    """Runs of 3, 10 and 25 elements breaking at different places: too short together for the
    run kernel (it would go element by element), long enough one by one to be staged."""
    staged = spied(monkeypatch, elementwise, "_staged")
    g = Graph(T16)
    x = g.add_variable(FLOAT, (40, 30), "x")
    g.map_tensor_linearly(x)
    w = g.add_variable(FLOAT, (40, 10), "w")
    g.set_tile_mapping(w, TileMapping.from_element_tiles(np.arange(400).reshape(40, 10) // 3 % 16))
    result = g.add_variable(FLOAT, (40, 10), "result")
    g.map_tensor_linearly(result)
    program = Sequence()
    map_with_output(g, _1 * _2 + _2, [x[:, 3:13], w], result, program)
    values = {"x": rng.uniform(-4, 4, (40, 30)), "w": rng.uniform(-4, 4, (40, 10))}
    results, _ = results_of_both(g, program, {"x": x, "w": w}, values, result)
    assert staged and all(run is not None for run in staged)
    np.testing.assert_array_equal(results[1], results[0])
    x32, w32 = values["x"][:, 3:13].astype(np.float32), values["w"].astype(np.float32)
    np.testing.assert_array_equal(results[1], x32 * w32 + w32)


def _block_mapped(g: Graph, name: str):
    """An ``[8, 32]`` variable whose tiles each hold a ``[2, 8]`` block: 16 consecutive addresses
    that are two runs in flat order."""
    tensor = g.add_variable(FLOAT, (8, 32), name)
    rows, columns = np.indices((8, 32))
    g.set_tile_mapping(tensor, TileMapping.from_element_tiles(rows // 2 * 4 + columns // 8))
    return tensor


def test_staging_follows_the_output_addresses_when_that_leaves_fewer_runs(rng, monkeypatch):
    """Output and one operand in ``[2, 8]`` blocks per tile, the other operand a slice of a
    row-mapped tensor: staged in the output's address order (one run per block, not two), same
    values."""
    orders = spied(monkeypatch, elementwise, "_staging_order")
    g = Graph(T16)
    x = g.add_variable(FLOAT, (8, 96), "x")
    g.map_tensor_linearly(x)
    w, result = _block_mapped(g, "w"), _block_mapped(g, "result")
    program = Sequence()
    map_with_output(g, sigmoid(_1 + _2), [x[:, 1:33], w], result, program)
    values = {"x": rng.uniform(-4, 4, (8, 96)), "w": rng.uniform(-4, 4, (8, 32))}
    results, engine = results_of_both(g, program, {"x": x, "w": w}, values, result)
    (order,) = orders
    flat = np.arange(8 * 32)
    assert not np.array_equal(order, flat)
    index = engine.executable.host_reads["result"].index.reshape(-1)
    runs = [1 + np.count_nonzero(np.diff(index[o]) != 1) for o in (order, flat)]
    assert runs == [16, 32]
    np.testing.assert_allclose(results[1], results[0], rtol=2e-6, atol=2e-7)


@pytest.mark.parametrize("bias_written_by", ["host", "loop"])
def test_a_staged_operand_is_copied_again_only_when_it_may_have_changed(bias_written_by, rng,
                                                                        monkeypatch):
    """A staged sigmoid in a loop reads a bias no step writes (kept after the first iteration)
    and a state a step rewrites every iteration; the host then writes a new bias.  With the loop
    rewriting the bias too, it is copied on every iteration.  Both engines agree throughout.
    The bias is scattered element by element over the tiles: copied on every iteration that
    would not pay for staging, copied once it does."""
    from gruc.runtime import kernels

    answers = []
    ask = kernels.Unchanged.__call__
    monkeypatch.setattr(kernels.Unchanged, "__call__",
                        lambda self, memory: answers.append(ask(self, memory)) or answers[-1])
    g = Graph(T16)
    x = g.add_variable(FLOAT, (8, 96), "x")
    g.map_tensor_linearly(x)
    result = _block_mapped(g, "result")
    bias = g.add_variable(FLOAT, (8, 32), "bias")
    g.set_tile_mapping(bias, TileMapping.from_element_tiles(np.arange(8 * 32).reshape(8, 32) % 16))
    body = Sequence()
    map_with_output(g, sigmoid(_1 + _2), [x[:, 1:33], bias], result, body)
    map_in_place(g, _1 * Const(0.5) + Const(1.0), [x], body)
    if bias_written_by == "loop":
        map_in_place(g, _1 * Const(-1.0), [bias], body)
    for name, tensor in (("x", x), ("bias", bias)):
        g.create_host_write(name, tensor)
    g.create_host_read("result", result)
    start, results = rng.uniform(-4, 4, (8, 96)), []
    for engine in engines(g, Sequence(Repeat(3, body))):
        engine.write_tensor("x", start)
        outputs = []
        for run in range(2):
            engine.write_tensor("bias", np.full((8, 32), 2.0 * run - 1.0))
            engine.run(0)
            outputs.append(engine.read_tensor("result"))
        results.append(outputs)
    for numba_output, numpy_output in zip(results[1], results[0]):
        np.testing.assert_allclose(numba_output, numpy_output, rtol=2e-6, atol=2e-7)
    kept = answers.count(True)
    assert kept == (4 if bias_written_by == "host" else 0)  # iterations 2 and 3 of each run


def test_copies_as_runs_and_overlapping_copies(rng):
    g = Graph(T16)
    x = g.add_variable(FLOAT, (64,), "x")
    g.map_tensor_linearly(x)
    y = g.add_variable(FLOAT, (64,), "y")
    g.map_tensor_linearly(y)
    program = Sequence(Copy(x, y), Copy(x[:60], x[4:]), Copy(y[::-1], y))
    g.create_host_write("x", x)
    g.create_host_read("x", x)
    g.create_host_read("y", y)
    values = rng.uniform(-1, 1, 64)
    expected_x = values.astype(np.float32)
    expected_x[4:] = expected_x[:60].copy()
    for engine in engines(g, program):
        engine.write_tensor("x", values)
        engine.run(0)
        np.testing.assert_array_equal(engine.read_tensor("x"), expected_x)
        np.testing.assert_array_equal(engine.read_tensor("y"), values.astype(np.float32)[::-1])


def test_runs_are_found_along_the_operand_or_along_a_transposed_host_layout():
    index = np.arange(12, dtype=np.int64).reshape(3, 4).T.reshape(-1)  # a transposed [4, 3] view
    host = np.arange(12, dtype=np.int64).reshape(3, 4).T.reshape(-1)  # ... read back transposed
    bases, positions, lengths = runs_by_address(index)
    assert lengths.tolist() == [1] * 12  # along the operand: no two neighbours are neighbours
    bases, positions, lengths = runs_by_address(index, host, host_order=True)
    assert (bases.tolist(), positions.tolist(), lengths.tolist()) == ([0], [0], [12])
    partial_sums = np.arange(8, dtype=np.int64) % 4  # two partials summed into four positions
    bases, positions, lengths = runs_by_address(np.arange(8, dtype=np.int64) + 100, partial_sums)
    assert (bases.tolist(), positions.tolist(), lengths.tolist()) == ([100, 104], [0, 0], [4, 4])


@pytest.mark.parametrize("target, written, source, read, element_loop", [
    (lambda x: x.reverse(0), np.arange(16)[::-1], lambda x: x, np.arange(16), False),
    # element k writes what element k + 1 reads
    (lambda x: x[1:], np.arange(1, 16), lambda x: x[:-1], np.arange(15), False),
    # the reads run ahead of the writes: an element loop is safe
    (lambda x: x[:-1], np.arange(15), lambda x: x[1:], np.arange(1, 16), True),
])
def test_an_output_over_its_own_operand_reads_before_it_writes(target, written, source, read,
                                                                element_loop, rng, monkeypatch):
    """``map_with_output`` into a view of its own operand: the definition reads every operand,
    then writes; a numba element loop that would read an address it already wrote is not used."""
    g = Graph(Target.custom(tiles_per_ipu=4))
    x = g.add_variable(FLOAT, (16,), "x")
    g.map_tensor_linearly(x, 4, 1)
    program = Sequence()
    map_with_output(g, _1 * Const(2.0) + Const(1.0), [source(x)], target(x), program)
    on_numpy = spied(monkeypatch, elementwise, "_prepare_numpy")
    values = rng.uniform(-1, 1, 16).astype(np.float32)
    (numpy_run, numba_run), _ = results_of_both(g, program, {"x": x}, {"x": values}, x)
    expected = values.copy()
    expected[written] = 2 * values[read] + 1
    np.testing.assert_allclose(numpy_run, expected, rtol=1e-6)
    np.testing.assert_array_equal(numba_run, numpy_run)
    assert len(on_numpy) == (1 if element_loop else 2)  # the numpy engine's, and a fallback


@pytest.mark.parametrize("build", ["ops", "expression"])
def test_a_cast_to_half_inside_a_float_expression_runs(build, rng):
    """numba has no float16: such a tree (in-place fusion makes them) runs on the definition."""
    g = Graph(Target.custom(tiles_per_ipu=4))
    x = g.add_variable(FLOAT, (4, 40), "x")
    g.map_tensor_linearly(x)
    program = Sequence()
    if build == "ops":
        y = cast(g, cast(g, x, HALF, program), FLOAT, program)
    else:
        y = map(g, Cast(Cast(_1, HALF), FLOAT) + Const(0.0), [x], program)
    values = rng.uniform(-3, 3, (4, 40))
    (numpy_run, numba_run), _ = results_of_both(g, program, {"x": x}, {"x": values}, y)
    np.testing.assert_array_equal(numpy_run, values.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(numba_run, numpy_run)
