"""The RNN utilities through the public API: poplibs' worked numbers, sequence tensors laid out
time-major per tile, shift_rnn_tensor, and the rnn loop builder against a float64 numpy RNN over
1,000 steps — 1, 3 and 6 shards, both directions, fixed / scalar / per-row lengths, with and
without code reuse — with an IR that does not grow with the sequence length."""

from __future__ import annotations

import numpy as np
import pytest

from gruc import (FLOAT, HALF, INT, UNSIGNED_INT, Call, Engine, Graph, GrucShapeError,
                  GrucTypeError, GrucValueError, Module, Repeat, RepeatWhileTrue, Sequence, Target)
from gruc.ir.expr import _1, _2, _3, _4, tanh
from gruc.ir.printer import print_module
from gruc.ops import (RnnParams, StateSequence, create_initial_state, create_input_tensor,
                      create_output_tensor, create_recurrent_tensor, get_input_bytes_per_tile,
                      get_max_shards, get_output_bytes_per_tile, map, map_in_place,
                      map_with_output, rnn, shift_rnn_tensor, zero)
from gruc.rnn_geometry import sequence_tile_layout
from gruc.runtime.addresses import PlanAddresses

T20 = Target.custom(tiles_per_ipu=20)
B, H = 3, 4
"""Batch rows and hidden size of the test RNN: 3 grains of 4, one tile each, so 20 tiles hold
6 disjoint shards."""


# ------------------------------------------------------------------------------------------------
# Geometry and sequence tensors
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tiles, batch, inputs, hidden, steps, dtype, max_shards, in_bytes, "
                         "out_bytes", [
                             (20, 2, 16, 8, 200, HALF, 10, 32, 16),
                             (20, 2, 16, 8, 200, FLOAT, 10, 64, 32),
                             (20, 1, 16, 16, 1000, FLOAT, 20, 64, 64),
                             (16, 4, 40, 38, 2, HALF, 1, 32, 20),
                             (1472, 64, 256, 256, 512, HALF, 1, 32, 32),
                         ])
def test_worked_table_of_poplibs_notes_1_2(tiles, batch, inputs, hidden, steps, dtype, max_shards,
                                           in_bytes, out_bytes):
    target = Target.ipu2() if tiles == 1472 else Target.custom(tiles_per_ipu=tiles)
    params = RnnParams(dtype=dtype, batch_size=batch, max_time_steps=steps,
                       layer_sizes=(inputs, hidden))
    assert get_max_shards(target, params) == max_shards
    assert get_input_bytes_per_tile(target, params) == in_bytes
    assert get_output_bytes_per_tile(target, params) == out_bytes


def test_sequence_tensors_are_laid_out_like_poplibs_and_time_major_on_every_tile():
    params = RnnParams(dtype=FLOAT, batch_size=2, max_time_steps=7, layer_sizes=(16, 8))
    g = Graph(T20)
    x = create_input_tensor(g, params, 3, "x")
    out = create_output_tensor(g, params, 3, "out", multiple=2)
    att = create_recurrent_tensor(g, params, 1, 3, "att")
    h0 = create_initial_state(g, params, True, 2, 3, "h0")
    assert (x.shape, out.shape, att.shape, h0.shape) == ((7, 2, 16), (14, 2, 8), (7, 2, 1),
                                                         (2, 2, 8))
    expected = {x: sequence_tile_layout(T20, params, 16, 3),
                out: sequence_tile_layout(T20, params, 8, 3, multiple=2),
                att: sequence_tile_layout(T20, params, 1, 3),
                h0: sequence_tile_layout(T20, params, 8, 3, multiple=2, sequences_per_shard=1,
                                         shard_index=0)}
    for tensor, layout in expected.items():
        np.testing.assert_array_equal(g.element_tiles(tensor), layout.element_tiles())
    g.create_host_write("x", x)
    engine = Engine(g, Sequence(), backend="numpy")
    addresses = PlanAddresses(engine.plan).element_addresses(x).reshape(7, -1)
    tiles = g.element_tiles(x).reshape(7, -1)
    for tile in np.unique(tiles):
        on_tile = tiles == tile
        steps = np.flatnonzero(on_tile.any(axis=1))
        block = np.stack([addresses[t][on_tile[t]] for t in steps])  # [steps, elements per step]
        assert np.all(np.diff(block.reshape(-1)) == 4), "one contiguous, time-major block per tile"


@pytest.mark.parametrize("multiple, shards", [(1, 3), (2, 3), (2, 6)])
def test_shift_rnn_tensor_is_the_sequence_one_step_later(multiple, shards, rng):
    """7 steps in 6 shards of 2 leave the last shard without steps."""
    params = RnnParams(dtype=FLOAT, batch_size=2, max_time_steps=7, layer_sizes=(4, 4))
    g = Graph(T20)
    base = create_output_tensor(g, params, shards, "base", multiple=multiple)
    single = create_initial_state(g, params, True, multiple, shards, "single")
    prog = Sequence()
    shifted = shift_rnn_tensor(g, params, base, single, prog, shards)
    assert shifted.shape == base.shape
    for name, t in {"base": base, "single": single}.items():
        g.create_host_write(name, t)
    g.create_host_read("shifted", shifted)
    engine = Engine(g, prog, backend="numpy")
    bv, sv = rng.uniform(-1, 1, base.shape), rng.uniform(-1, 1, single.shape)
    engine.write_tensor("base", bv)
    engine.write_tensor("single", sv)
    engine.run(0)
    expected = np.concatenate([sv, bv[:-multiple]]).astype(np.float32)
    np.testing.assert_array_equal(engine.read_tensor("shifted"), expected)
    np.testing.assert_array_equal(g.element_tiles(shifted), g.element_tiles(base))


# ------------------------------------------------------------------------------------------------
# The loop builder: h <- tanh(x_t * w + h * u), elementwise, on 20 tiles
# ------------------------------------------------------------------------------------------------

LENGTH_SHAPES = {"fixed": None, "scalar": (1,), "rows": (B,)}


def cell(w, u):
    """The test cell.  Without masks the state is updated in place and recorded by the loop's
    state sequence; with per-row masks the output row is the masked new state (0 past a row's
    length) and the state is latched."""

    def loop_fn(graph, step, state, slices, created, body):
        h, x = state[0], slices.inputs[0]
        if step.mask is None:
            map_in_place(graph, tanh(_2 * _3 + _1 * _4), [h, x, w, u], body, "cell")
            return
        new = map(graph, tanh(_2 * _3 + _1 * _4), [h, x, w, u], body, "cell")
        mask = step.mask.expand([1]).broadcast(H, 1)
        inverse = step.inverse.expand([1]).broadcast(H, 1)
        map_with_output(graph, _1 * _2, [new, mask], slices.outputs[0], body, "masked_output")
        map_in_place(graph, _1 * _2 + _3 * _4, [h, inverse, new, mask], body, "latch")

    return loop_fn


def build_rnn(steps, shards, reverse, lengths_kind, code_reuse):
    g = Graph(T20)
    shape = LENGTH_SHAPES[lengths_kind]
    params = RnnParams(dtype=FLOAT, batch_size=B, max_time_steps=steps, layer_sizes=(H, H),
                       var_time_steps_shape=shape)
    x = create_input_tensor(g, params, shards, "x")
    h0 = create_initial_state(g, params, True, 1, shards, "h0")
    w, u = g.clone(h0[0], "w"), g.clone(h0[0], "u")
    out = create_output_tensor(g, params, shards, "out")
    prog = Sequence()
    lengths = None
    if shape is not None:
        lengths = g.add_variable(UNSIGNED_INT, shape, "lengths")
        g.set_tile_mapping(lengths, 0)
        g.create_host_write("lengths", lengths)
        zero(g, out, prog)
    record = ({"outputs": [out]} if lengths_kind == "rows"
              else {"state_sequence": StateSequence(out, 0)})
    final = rnn(g, params, reverse=reverse, init_state=[h0[0]], inputs=[x], prog=prog,
                loop_fn=cell(w, u), num_shards=shards, var_time_steps=lengths,
                code_reuse=code_reuse, **record)
    for name, t in {"x": x, "h0": h0, "w": w, "u": u}.items():
        g.create_host_write(name, t)
    g.create_host_read("out", out)
    g.create_host_read("h", final[0])
    return g, prog


def reference_rnn(x, h0, w, u, lengths, reverse):
    """float64: the state stops at each row's length; outputs past it are 0."""
    h = h0.astype(np.float64)
    out = np.zeros(x.shape)
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    for t in steps:
        new = np.tanh(x[t] * w + h * u)
        running = (t < lengths)[:, None]
        out[t] = np.where(running, new, 0.0)
        h = np.where(running, new, h)
    return out, h


def check_rnn(steps, shards, reverse, lengths_kind, code_reuse, backend, rng):
    g, prog = build_rnn(steps, shards, reverse, lengths_kind, code_reuse)
    engine = Engine(g, prog, backend=backend)
    values = {"x": rng.uniform(-1, 1, (steps, B, H)), "h0": rng.uniform(-1, 1, (1, B, H)),
              "w": rng.uniform(-1, 1, (B, H)), "u": rng.uniform(-1, 1, (B, H))}
    values = {k: v.astype(np.float32) for k, v in values.items()}
    lengths = {"fixed": np.full(B, steps), "scalar": np.array([steps * 2 // 3]),
               "rows": np.array([steps // 3, steps, steps // 2 + 1])}[lengths_kind]
    if lengths_kind != "fixed":
        values["lengths"] = lengths
    for name, value in values.items():
        engine.write_tensor(name, value)
    engine.run(0)
    out, h = reference_rnn(values["x"], values["h0"][0], values["w"], values["u"],
                           np.broadcast_to(lengths, (B,)), reverse)
    np.testing.assert_allclose(engine.read_tensor("out"), out, atol=2e-6)
    np.testing.assert_allclose(engine.read_tensor("h"), h, atol=2e-6)
    return engine


@pytest.mark.parametrize("code_reuse", [False, True])
@pytest.mark.parametrize("lengths_kind", ["fixed", "scalar", "rows"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shards", [1, 3, 6])
def test_rnn_over_1000_steps_gives_numpys_answer(shards, reverse, lengths_kind, code_reuse, rng):
    engine = check_rnn(1000, shards, reverse, lengths_kind, code_reuse, "numpy", rng)
    loops = [n for n in engine.module.walk() if isinstance(n, (Repeat, RepeatWhileTrue))]
    assert len(loops) == shards
    assert all(isinstance(n, Repeat) == (lengths_kind == "fixed") for n in loops)
    calls = [n for n in engine.module.walk() if isinstance(n, Call)]
    assert len(calls) == (shards if code_reuse else 0)
    assert len(engine.module.functions) == int(code_reuse)


@pytest.mark.parametrize("shards, reverse, lengths_kind, code_reuse", [
    (6, False, "rows", True), (3, True, "scalar", False), (1, True, "fixed", False)])
def test_rnn_on_the_numba_engine(shards, reverse, lengths_kind, code_reuse, rng):
    check_rnn(1000, shards, reverse, lengths_kind, code_reuse, "numba", rng)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("lengths_kind, code_reuse", [("fixed", False), ("rows", True)])
def test_trailing_shards_without_steps_build_no_loop(reverse, lengths_kind, code_reuse, rng):
    """10 steps in 6 shards of ceil(10 / 6) = 2: the last shard has none."""
    engine = check_rnn(10, 6, reverse, lengths_kind, code_reuse, "numpy", rng)
    loops = [n for n in engine.module.walk() if isinstance(n, (Repeat, RepeatWhileTrue))]
    assert len(loops) == 5


@pytest.mark.parametrize("lengths_kind, code_reuse", [("fixed", False), ("rows", True)])
def test_program_does_not_grow_with_the_sequence_length(lengths_kind, code_reuse):
    sizes = []
    for steps in (10, 1000):
        g, prog = build_rnn(steps, 3, True, lengths_kind, code_reuse)
        module = Module(g, [prog])
        sizes.append((sum(1 for _ in module.walk()), len(g.compute_sets), len(g.variables),
                      sum(len(cs.vertices) for cs in g.compute_sets),
                      len(print_module(module).splitlines())))
    assert sizes[0] == sizes[1]


def test_shard_steps_are_tile_local_but_for_scalars_from_tile_0():
    """Per step, the slice and the store exchange only the 4-byte counter, to each other tile."""
    g, prog = build_rnn(60, 3, False, "fixed", False)
    engine = Engine(g, prog, backend="numpy")
    slices = [s for s in engine.plan.liveness.steps if "input0" in s.text or "store" in s.text]
    assert len(slices) == 6
    for step in slices:
        tiles = {v.tile for v in step.node.compute_set.vertices}
        assert len(tiles) == B
        assert engine.costs[step.index].exchange_bytes == 4 * len(tiles - {0})


# ------------------------------------------------------------------------------------------------
# Interim tensors, created sequences, errors
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("code_reuse", [False, True])
def test_interim_in_out_and_created_sequences(code_reuse, rng):
    """Per step: interim_out = [interim_in[0] + h, interim_in[1] * x]; created = 2 * h[:, 0];
    h <- h + x (the state after the step)."""
    steps, shards = 50, 3
    params = RnnParams(dtype=FLOAT, batch_size=B, max_time_steps=steps, layer_sizes=(H, H))
    g = Graph(T20)
    x = create_input_tensor(g, params, shards, "x")
    h0 = create_initial_state(g, params, True, 1, shards, "h0")
    interim_in = create_output_tensor(g, params, shards, "interim_in", multiple=2)
    interim_out = create_output_tensor(g, params, shards, "interim_out", multiple=2)
    made = create_recurrent_tensor(g, params, 1, shards, "made").reshape([steps, B])

    def loop_fn(graph, step, state, slices, created, body):
        h, xt, before = state[0], slices.inputs[0], slices.interim_in
        map_with_output(graph, _1 + _2, [before[0], h], slices.interim_out[0], body)
        map_with_output(graph, _1 * _2, [before[1], xt], slices.interim_out[1], body)
        created[0] = map(graph, _1 * 2.0, [h[:, 0]], body)
        map_in_place(graph, _1 + _2, [h, xt], body)

    prog = Sequence()
    rnn(g, params, init_state=[h0[0]], inputs=[x], prog=prog, num_shards=shards,
        interim_in=interim_in.reshape([steps, 2, B, H]),
        interim_out=interim_out.reshape([steps, 2, B, H]), created=[made], loop_fn=loop_fn,
        code_reuse=code_reuse)
    for name, t in {"x": x, "h0": h0, "interim_in": interim_in}.items():
        g.create_host_write(name, t)
    g.create_host_read("interim_out", interim_out)
    g.create_host_read("made", made)
    engine = Engine(g, prog, backend="numpy")
    xv, hv = rng.uniform(-1, 1, (steps, B, H)), rng.uniform(-1, 1, (1, B, H))
    iv = rng.uniform(-1, 1, (2 * steps, B, H))
    for name, value in {"x": xv, "h0": hv, "interim_in": iv}.items():
        engine.write_tensor(name, value)
    engine.run(0)
    h_before = np.concatenate([hv, hv + np.cumsum(xv, axis=0)[:-1]])
    iv = iv.reshape(steps, 2, B, H)
    expected = np.stack([iv[:, 0] + h_before, iv[:, 1] * xv], axis=1).reshape(2 * steps, B, H)
    np.testing.assert_allclose(engine.read_tensor("interim_out"), expected, atol=1e-5)
    np.testing.assert_allclose(engine.read_tensor("made"), 2 * h_before[:, :, 0], atol=1e-5)


def test_rnn_rejects_bad_arguments():
    params = RnnParams(dtype=FLOAT, batch_size=B, max_time_steps=10, layer_sizes=(H, H))
    per_row = params.model_copy(update={"var_time_steps_shape": (B,)})
    g = Graph(T20)
    x = create_input_tensor(g, params, 1, "x")
    h0 = create_initial_state(g, params, True, 1, 1, "h0")[0]
    lengths = g.add_variable(UNSIGNED_INT, (B,), "lengths")
    g.set_tile_mapping(lengths, 0)
    float_lengths = g.add_variable(FLOAT, (B,), "float_lengths")
    g.set_tile_mapping(float_lengths, 0)
    seq = g.add_variable(FLOAT, (10, B, H), "seq")
    g.map_tensor_linearly(seq)

    def nothing(graph, step, state, slices, created, body):
        pass

    def call(**overrides):
        args = dict(params=params, init_state=[h0], inputs=[x], prog=Sequence(), loop_fn=nothing,
                    num_shards=1)
        args.update(overrides)
        rnn(g, **args)

    cases = [
        (dict(num_shards=0), GrucValueError, "num_shards"),
        (dict(num_shards=8), GrucValueError, "do not fit"),
        (dict(inputs=[x[0:5]]), GrucShapeError, "10 time steps"),
        (dict(init_state=[]), GrucValueError, "at least one"),
        (dict(init_state=[h0[0]]), GrucShapeError, "init_state"),
        (dict(var_time_steps=lengths), GrucValueError, "var_time_steps_shape is None"),
        (dict(params=per_row), GrucValueError, "pass the lengths"),
        (dict(params=per_row, var_time_steps=float_lengths), GrucTypeError, "int"),
        (dict(params=per_row, var_time_steps=lengths[0:1]), GrucShapeError, "shape"),
        (dict(state_sequence=StateSequence(seq, 1)), GrucValueError, "state_index"),
        (dict(state_sequence=StateSequence(seq[:, :, 0:2], 0)), GrucShapeError, "rows"),
        (dict(created=[seq]), GrucValueError, "created\\[0\\] unset"),
        (dict(inputs=[INT]), GrucTypeError, "inputs\\[0\\]"),
    ]
    for overrides, error, words in cases:
        with pytest.raises(error, match=words):
            call(**overrides)
