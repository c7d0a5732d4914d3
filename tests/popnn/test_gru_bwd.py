"""The GRU backward pass and weight update against the float64 reference (and PyTorch autograd
for reset-after), over poplibs' training test matrix (``gru_layer --phase all``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gruc import (FLOAT, HALF, Engine, Graph, GrucError, Repeat, RepeatWhileTrue, Sequence, Target,
                  Tensor)
from gruc.cli import main as gruc_main
from gruc.ir.module import Module
from gruc.ir.parser import parse_module
from gruc.ir.printer import print_module
from gruc.popnn import gru, gru_reference
from gruc.tools.gru_layer import GruLayerConfig, build_layer, run_layer

ORDERS = [("reset", "update", "candidate"), ("update", "candidate", "reset")]
ACTIVATIONS = ["tanh", "sigmoid", "hard_sigmoid", "relu", "softmax"]
RECURRENT = ["tanh", "sigmoid", "hard_sigmoid", "softmax"]
GRADIENTS = ("input_grad", "init_state_grad", "attention_grad", "input_weights_grad",
             "output_weights_grad", "biases_grad")


def basic(**overrides) -> GruLayerConfig:
    """poplibs' basic_gru_40x4x38_seq_2 layer on 16 tiles, phase all."""
    settings = dict(sequence_size=2, input_size=40, output_size=38, batch_size=4,
                    tiles_per_ipu=16, phase="all", backend="numpy")
    settings.update(overrides)
    return GruLayerConfig(**settings)


def long(**overrides) -> GruLayerConfig:
    """poplibs' gru_16x2x32 shapes (H = 8) on 20 tiles."""
    settings = dict(sequence_size=200, input_size=16, output_size=8, batch_size=2,
                    tiles_per_ipu=20, phase="all", backend="numba")
    settings.update(overrides)
    return GruLayerConfig(**settings)


def assert_gradients_match(run, tolerance=1e-4):
    """Every value read, and every gradient the phase computes: max abs error within
    ``tolerance`` of the largest reference magnitude; and poplibs' checkIsClose."""
    config = run.layer.config
    expected_reads = {"input_grad": not config.ignore_input_gradient,
                      "attention_grad": config.with_attention,
                      "input_weights_grad": config.phase != "bwd"}
    for name, wanted in expected_reads.items():
        assert (name in run.outputs) == wanted, name
    assert "init_state_grad" in run.outputs
    for name, value in run.outputs.items():
        expected = run.expected[name]
        scale = max(1.0, float(np.abs(expected).max()))
        error = float(np.abs(value.astype(np.float64) - expected).max())
        assert error <= tolerance * scale, f"{name}: max abs error {error:.3g} (scale {scale:.3g})"
    assert run.passed, run.mismatches


# ---- poplibs' matrix through the gru_layer harness -------------------------------------------
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("reset_after", [False, True])
@pytest.mark.parametrize("attention", [False, True])
def test_basic_training_matrix(order, reset_after, attention):
    """40x4x38 S=2: I + H > B * S, so the weight update is a separate loop."""
    run = run_layer(basic(cell_order=order, reset_after=reset_after, with_attention=attention))
    assert not gru.interleaved_wu_is_beneficial(run.layer.params)
    assert_gradients_match(run)


@pytest.mark.parametrize("order, attention", [(ORDERS[0], False), (ORDERS[1], True)])
def test_half_data_within_poplibs_tolerances(order, attention):
    run = run_layer(basic(data_type="half", cell_order=order, with_attention=attention))
    assert run.passed, run.mismatches
    assert_gradients_match(run, tolerance=1e-2)   # well inside poplibs' rel 0.3 / abs 7e-2


@pytest.mark.parametrize("s, b, i, h, tiles", [(5, 1, 3, 2, 16), (2, 2, 1, 7, 100)])
def test_half_weight_update_products_read_their_own_inputs(s, b, i, h, tiles):
    """The numba engine once shared one host copy between two products' operands of different
    variables that the memory plan put on the same bytes (the forward input slice and the weight
    update's): the weight update multiplied the forward's stale slice."""
    config = basic(sequence_size=s, batch_size=b, input_size=i, output_size=h, tiles_per_ipu=tiles,
                   data_type="half", reset_after=True, phase="wu", backend="numba")
    run = run_layer(config)
    assert run.passed, run.mismatches
    assert_gradients_match(run, tolerance=1e-2)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("recurrent", RECURRENT)
def test_activation_combinations(activation, recurrent):
    assert_gradients_match(run_layer(basic(batch_size=1, shards=1, activation=activation,
                                           recurrent_activation=recurrent)))


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("recurrent", RECURRENT)
def test_augru_activations(activation, recurrent):
    """poplibs' augru_act_config matrix: every pair with attention, where the update gate's
    derivative is taken at the pre-attention gate."""
    assert_gradients_match(run_layer(basic(batch_size=1, shards=1, activation=activation,
                                           recurrent_activation=recurrent,
                                           with_attention=True)))


def test_reset_after_with_softmax_and_hard_sigmoid():
    """poplibs' reset-after backward is broken when either activation is softmax or hard
    sigmoid (a shadowed ``d_c``); gruc's is not."""
    assert_gradients_match(run_layer(basic(batch_size=1, shards=1, reset_after=True,
                                           activation="softmax",
                                           recurrent_activation="hard_sigmoid")))


@pytest.mark.parametrize("shards", [3, 5])
@pytest.mark.parametrize("reset_after", [False, True])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("ignore_input_gradient", [False, True])
def test_long_sequence_sharded(shards, reset_after, order, ignore_input_gradient):
    """16x2x8 S=200 (poplibs' gru_16x2x32_seq_200 tests): I + H <= B * S, so the weight update
    runs inside the backward loop."""
    run = run_layer(long(shards=shards, reset_after=reset_after,
                         ignore_input_gradient=ignore_input_gradient, cell_order=order))
    assert run.layer.num_shards == shards
    assert gru.interleaved_wu_is_beneficial(run.layer.params)
    assert_gradients_match(run)


@pytest.mark.parametrize("shards", [3, 5])
@pytest.mark.parametrize("reset_after", [False, True])
def test_long_sequence_sharded_half(shards, reset_after):
    run = run_layer(long(shards=shards, reset_after=reset_after, data_type="half"))
    assert run.passed, run.mismatches


@pytest.mark.parametrize("lengths", [(97, 67, 87), (31,)])
@pytest.mark.parametrize("full", [True, False])
@pytest.mark.parametrize("attention", [False, True])
def test_sequence_lengths(lengths, full, attention):
    """Per-row and scalar lengths, full-sequence or last output (poplibs' augru_16x{2,3}x32_seq_99
    tests; tanh gates, where masking matters most, are checked on a short sequence below: over 99
    steps their recurrence amplifies rounding beyond any tolerance)."""
    run = run_layer(long(sequence_size=99, batch_size=len(lengths) if len(lengths) > 1 else 2,
                         shards=3, variable_time_steps=lengths, output_all_sequence=full,
                         with_attention=attention))
    assert_gradients_match(run)
    if len(lengths) > 1 and "input_grad" in run.outputs:
        assert np.all(run.outputs["input_grad"][67:, 1] == 0)


@pytest.mark.parametrize("reuse", [False, True])
def test_augru_1000_steps_auto_shards(reuse):
    """poplibs' augru_16x1x16_seq_1000_reuse_{false,true}."""
    run = run_layer(long(sequence_size=1000, output_size=16, batch_size=1,
                         with_attention=True, with_real_time_steps=True, code_reuse=reuse))
    assert run.layer.num_shards == 6
    assert_gradients_match(run)


def test_phase_bwd_builds_no_weight_update():
    run = run_layer(basic(phase="bwd", reset_after=True))
    assert_gradients_match(run)
    assert not any(name.endswith("weights_grad") for name in run.outputs)


def test_cli_phase_all(capsys):
    code = gruc_main(["gru", "--phase", "all", "--sequence-size", "3", "--input-size", "8",
                      "--output-size", "8", "--batch-size", "2", "--tiles-per-ipu", "16",
                      "--backend", "numpy"])
    assert code == 0
    assert "PASSED" in capsys.readouterr().out


# ---- the builders directly ---------------------------------------------------------------------
def run_training(params: gru.GruParams, build, data: dict[str, np.ndarray], *, lengths=None,
                 options=None):
    """Forward with intermediates, then ``build(graph, params, prog, args, options)`` (``args``:
    h0, intermediates, weights, x, output, grad) returning the tensors to read; run on 16 tiles
    and read them.  ``lengths`` become ``params.var_time_steps``."""
    options = options or {"inferenceOnly": False}
    graph = Graph(Target.custom(tiles_per_ipu=16))
    writes = {}
    if lengths is not None:
        writes["lengths"] = graph.add_variable("unsigned_int", (len(lengths),), "lengths")
        graph.set_tile_mapping(writes["lengths"], 0)
        params = params.with_lengths(writes["lengths"])
        data = {**data, "lengths": np.asarray(lengths)}
    x = gru.create_input(graph, params, "x", options)
    h0 = gru.create_initial_state(graph, params, "h0", options)
    weights = gru.create_weights(graph, params, "w", options)
    prog = Sequence()
    forward = gru.gru_fwd(graph, params, h0, x, weights, prog, save_intermediates=True,
                          options=options)
    grad = graph.add_variable(params.dtype, forward.output.shape, "grad")
    graph.map_tensor_linearly(grad)
    reads = build(graph, params, prog, (h0, forward.intermediates, weights, x, forward.output,
                                        grad), options)
    writes.update({"x": x, "h0": h0, "wi": weights.input_weights, "wo": weights.output_weights,
                   "b": weights.biases, "grad": grad})
    for name, tensor in writes.items():
        graph.create_host_write(name, tensor)
    for name, tensor in reads.items():
        graph.create_host_read(name, tensor)
    engine = Engine(graph, prog, backend="numpy")
    for name in writes:
        engine.write_tensor(name, data[name])
    engine.run()
    return {name: engine.read_tensor(name).astype(np.float64) for name in reads}, graph, prog


def gradient_reads(prefix: str, grads: gru.GruGradients) -> dict:
    reads = {f"{prefix}{field}": t for field, t in grads._asdict().items()
             if isinstance(t, Tensor)}
    if grads.weights_grad is not None:
        reads.update({f"{prefix}{field}": t for field, t in grads.weights_grad._asdict().items()})
    return reads


def layer_data(s, b, i, h, *, reset_after=False, seed=1002) -> dict[str, np.ndarray]:
    d = gru_reference.random_inputs(s, b, i, h, reset_after=reset_after, round_to="float",
                                    seed=seed)
    return {"x": d.x, "h0": d.h0, "wi": d.input_weights, "wo": d.output_weights, "b": d.biases,
            "grad": d.grad_output}


def loops(prog: Sequence) -> int:
    return sum(isinstance(n, (Repeat, RepeatWhileTrue)) for n in prog.walk())


@pytest.mark.parametrize("shape, interleaved", [((2, 4, 40, 38), False), ((12, 3, 8, 8), True)])
@pytest.mark.parametrize("reset_after", [False, True])
def test_bwd_with_wu_equals_bwd_plus_wu(shape, interleaved, reset_after):
    """Both weight-update paths of gru_bwd_with_wu give gru_bwd + gru_wu's gradients."""
    s, b, i, h = shape
    params = gru.GruParams(dtype=FLOAT, batch_size=b, max_time_steps=s, layer_sizes=(i, h),
                           reset_after=reset_after, cell_order=ORDERS[1])
    assert gru.interleaved_wu_is_beneficial(params) == interleaved

    def build(graph, params, prog, args, options):
        before = loops(prog)
        together = gru.gru_bwd_with_wu(graph, params, prog, *args, options=options)
        # one reverse loop when interleaved, two (backward, then weight update) when not
        assert loops(prog) - before == (1 if interleaved else 2)
        assert together.bwd_intermediates is None and together.attentions_grad is None
        apart = gru.gru_bwd(graph, params, prog, *args, save_bwd_intermediates=True,
                            options=options)
        assert apart.weights_grad is None
        h0, inter, weights, x, out, _ = args
        update = gru.gru_wu(graph, params, prog, h0, inter, apart.bwd_intermediates, weights, x,
                            out, options=options)
        assert update.init_state_grad is None and update.input_grad is None
        return {**gradient_reads("together_", together), **gradient_reads("apart_", apart),
                **gradient_reads("wu_", update)}

    data = layer_data(s, b, i, h, reset_after=reset_after)
    got, _, _ = run_training(params, build, data)
    fwd = gru_reference.forward(data["x"], data["h0"], data["wi"], data["wo"], data["b"],
                                cell_order=params.cell_order, reset_after=reset_after)
    bwd = gru_reference.backward(fwd, data["grad"])
    wu = gru_reference.weight_update(fwd, bwd)
    np.testing.assert_allclose(got["apart_bwd_intermediates"], bwd.bwd_intermediates, atol=1e-5)
    for field in ("init_state_grad", "input_grad"):
        np.testing.assert_allclose(got[f"together_{field}"], got[f"apart_{field}"], rtol=1e-6)
    for field in ("input_weights", "output_weights", "biases"):
        np.testing.assert_allclose(got[f"together_{field}"], got[f"wu_{field}"], rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_allclose(got[f"wu_{field}"], getattr(wu, field), atol=1e-4)


def test_au_gru_wu_is_defined_and_equals_gru_wu():
    s, b, i, h = 3, 2, 6, 5
    params = gru.GruParams(dtype=FLOAT, batch_size=b, max_time_steps=s, layer_sizes=(i, h))

    def build(graph, params, prog, args, options):
        h0, inter, weights, x, out, grad = args
        apart = gru.gru_bwd(graph, params, prog, *args, save_bwd_intermediates=True,
                            options=options)
        plain = gru.gru_wu(graph, params, prog, h0, inter, apart.bwd_intermediates, weights, x,
                           out, options=options)
        au = gru.au_gru_wu(graph, params, prog, h0, inter, apart.bwd_intermediates, weights, x,
                           out, options=options)
        return {**gradient_reads("plain_", plain), **gradient_reads("au_", au)}

    got, _, _ = run_training(params, build, layer_data(s, b, i, h))
    for field in ("input_weights", "output_weights", "biases"):
        np.testing.assert_array_equal(got[f"au_{field}"], got[f"plain_{field}"])


def test_reset_after_gradients_equal_torch_autograd():
    torch.manual_seed(0)
    for s, b, i, h in [(3, 2, 5, 4), (6, 3, 7, 6)]:
        model = torch.nn.GRU(i, h).double()
        x = torch.randn(s, b, i, dtype=torch.float64, requires_grad=True)
        h0 = torch.randn(1, b, h, dtype=torch.float64, requires_grad=True)
        grad_out = torch.randn(s, b, h, dtype=torch.float64)
        out, _ = model(x, h0)
        (out * grad_out).sum().backward()

        def gates(t):  # torch rows (r, z, n) x columns -> gruc [3, columns, H]
            return t.detach().numpy().reshape(3, h, -1).transpose(0, 2, 1)

        data = {"x": x.detach().numpy(), "h0": h0[0].detach().numpy(),
                "wi": gates(model.weight_ih_l0), "wo": gates(model.weight_hh_l0),
                "b": np.stack([model.bias_ih_l0.detach().numpy().reshape(3, h),
                               model.bias_hh_l0.detach().numpy().reshape(3, h)], axis=1),
                "grad": grad_out.numpy()}
        params = gru.GruParams(dtype=FLOAT, batch_size=b, max_time_steps=s, layer_sizes=(i, h),
                               reset_after=True)
        got, _, _ = run_training(params, lambda graph, params, prog, args, options:
                                 gradient_reads("", gru.gru_bwd_with_wu(
                                     graph, params, prog, *args, options=options)), data)
        expected = {"input_grad": x.grad.numpy(), "init_state_grad": h0.grad[0].numpy(),
                    "input_weights": gates(model.weight_ih_l0.grad),
                    "output_weights": gates(model.weight_hh_l0.grad),
                    "biases": np.stack([model.bias_ih_l0.grad.numpy().reshape(3, h),
                                        model.bias_hh_l0.grad.numpy().reshape(3, h)], axis=1)}
        for name, value in expected.items():
            np.testing.assert_allclose(got[name], value, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("lengths", [(5, 2, 4), (3,)])
def test_saved_gate_gradients_are_zero_at_padded_steps(lengths):
    """With lengths, dr, du, dc are zero wherever a row has ended (and where a scalar length
    stops the loop), like the reference; tanh gates would leak a gradient there otherwise."""
    s, b, i, h = 6, 3, 4, 8
    params = gru.GruParams(dtype=FLOAT, batch_size=b, max_time_steps=s, layer_sizes=(i, h),
                           recurrent_activation="tanh")
    data = layer_data(s, b, i, h)
    got, _, _ = run_training(
        params, lambda graph, params, prog, args, options: {"d_gates": gru.gru_bwd(
            graph, params, prog, *args, save_bwd_intermediates=True).bwd_intermediates},
        data, lengths=lengths)
    fwd = gru_reference.forward(data["x"], data["h0"], data["wi"], data["wo"], data["b"],
                                lengths=np.asarray(lengths), recurrent_activation="tanh")
    np.testing.assert_allclose(got["d_gates"], gru_reference.backward(fwd, data["grad"])
                               .bwd_intermediates, rtol=1e-5, atol=1e-5)  # gradients reach ~7
    padded = np.arange(s)[:, None] >= np.broadcast_to(lengths, (b,))[None, :]
    assert np.all(got["d_gates"].transpose(0, 2, 1, 3)[padded] == 0)


def test_training_ir_does_not_grow_with_the_sequence_and_round_trips():
    """Both lengths interleave the weight update (I + H = 32 <= B * S), so the IRs match."""
    sizes = []
    for steps in (16, 10_000):
        layer = build_layer(GruLayerConfig(sequence_size=steps, input_size=16, output_size=16,
                                           batch_size=2, tiles_per_ipu=16, shards=1,
                                           phase="all", with_attention=True))
        text = print_module(Module(layer.graph, layer.programs))
        sizes.append(len(text.splitlines()))
        if steps == 16:
            assert print_module(parse_module(text)) == text
    assert sizes[0] == sizes[1]


def test_poplibs_error_cases():
    graph = Graph(Target.custom(tiles_per_ipu=16))
    s, b, i, h = 2, 3, 4, 5
    params = gru.GruParams(dtype=FLOAT, batch_size=b, max_time_steps=s, layer_sizes=(i, h))
    x, h0 = gru.create_input(graph, params), gru.create_initial_state(graph, params)
    weights = gru.create_weights(graph, params)
    prog = Sequence()
    out, inter = gru.gru_fwd(graph, params, h0, x, weights, prog, save_intermediates=True)
    grad = graph.add_variable(FLOAT, (s, b, h), "grad")
    lengths = graph.add_variable("unsigned_int", (b,), "lengths")
    last_only = params.model_copy(update={"output_full_sequence": False})
    with_lengths = params.with_lengths(lengths)
    attention = gru.create_attention(graph, params)
    d_gates = graph.add_variable(FLOAT, (s, 3, b, h), "d_gates")
    other = Graph(Target.custom(tiles_per_ipu=16))

    cases = [
        (lambda: gru.gru_bwd(graph, last_only, prog, h0, inter, weights, x, out[0], grad[0],
                             real_time_steps=lengths), "outputFullSequence should be true"),
        (lambda: gru.gru_bwd_with_wu(graph, with_lengths, prog, h0, inter, weights, x, out,
                                     grad, real_time_steps=lengths),
         "not supported when used with real time steps"),
        (lambda: gru.gru_bwd(graph, params, prog, h0, None, weights, x, out, grad),
         "save_intermediates=True"),
        (lambda: gru.gru_bwd(graph, last_only, prog, h0, inter, weights, x, out[0], grad[0]),
         r"forward intermediates has shape \[2, 3, 3, 5\], the layer needs \[2, 4, 3, 5\]"),
        (lambda: gru.gru_bwd(graph, params, prog, h0, inter, weights, x, out, grad[0]),
         r"grad_layer_next\) has shape \[3, 5\], the layer needs \[2, 3, 5\]"),
        (lambda: gru.au_gru_bwd(graph, params, prog, h0, inter, weights, x, out, grad,
                                attention.transpose()), r"attention scores has shape \[2, 3\]"),
        (lambda: gru.gru_wu(graph, params, prog, h0, inter, d_gates[:, :2], weights, x, out),
         "backward intermediates has shape"),
        (lambda: gru.gru_bwd(graph, params, prog, h0, inter, weights, x, out,
                             graph.add_variable(HALF, (s, b, h))), "is half, the layer is float"),
        (lambda: gru.gru_bwd(graph, params, prog, h0, inter, weights, x, out, grad,
                             options={"numshards": 2}), "Unrecognised GRU option 'numshards'"),
        (lambda: gru.gru_bwd_with_wu(graph, params, prog, h0, inter, weights, x, out, grad,
                                     options={"numShards": 3}),
         r"numShards must be within interval \[1,1\]; got 3"),
        (lambda: gru.gru_bwd(graph, params, prog, h0, inter, weights._replace(
            biases=graph.add_variable(FLOAT, (3, 2, h))), x, out, grad), "biases has shape"),
        (lambda: gru.gru_bwd(graph, params, prog, h0, inter, weights, x, out,
                             other.add_variable(FLOAT, (s, b, h))),
         "output gradient belongs to another graph"),
        (lambda: gru.gru_wu(graph, params, prog, h0, inter, d_gates, weights,
                            gru.create_input(other, params), out),
         "forward input belongs to another graph"),
        (lambda: gru.gru_fwd(graph, params, gru.create_initial_state(other, params), x, weights,
                             prog), "initial state belongs to another graph"),
        (lambda: gru.gru_fwd(graph, params, h0, x, weights, prog,
                             real_time_steps=np.array([1, 2, 2])), "real_time_steps must be a gruc"),
    ]
    for build, message in cases:
        with pytest.raises(GrucError, match=message):
            build()


@pytest.mark.parametrize("shards", [3, 5])
@pytest.mark.parametrize("reset_after", [False, True])
@pytest.mark.parametrize("attention", [False, True])
@pytest.mark.parametrize("real_time_steps", [False, True])
@pytest.mark.parametrize("data_type", ["float", "half"])
def test_augru_seq_102_matrix(shards, reset_after, attention, real_time_steps, data_type):
    """poplibs' augru_16x2x32_seq_102 tests: shards x reset-after x attention x real time steps
    x data type."""
    run = run_layer(long(sequence_size=102, shards=shards, reset_after=reset_after,
                         with_attention=attention, with_real_time_steps=real_time_steps,
                         data_type=data_type))
    assert run.layer.num_shards == shards
    if data_type == "float":
        assert_gradients_match(run)
    else:
        assert run.passed, run.mismatches
