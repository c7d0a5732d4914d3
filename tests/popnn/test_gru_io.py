"""Weight import / export (SPEC J1): PyTorch, Keras and ONNX layouts against independent oracles.

The oracles are written here from each framework's own documented formulas and layouts (torch's
``nn.GRU`` itself; Keras's ``GRUCell`` equations; the ONNX ``GRU`` operator's equations), not
from ``gru_io``; the device runs use the numpy backend on a 16-tile target.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from gruc import FLOAT, Engine, Graph, GrucError, Sequence, Target
from gruc.popnn import gru, gru_reference
from gruc.popnn.gru_io import (GruHostWeights, from_keras, from_onnx, from_torch,
                               from_torch_stack, to_keras, to_onnx, to_torch, to_torch_stack)

ORDERS = [("reset", "update", "candidate"), ("update", "candidate", "reset")]
S, B, I, H = 4, 3, 5, 6


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def assert_same_weights(a: GruHostWeights, b: GruHostWeights) -> None:
    assert a.cell_order == b.cell_order
    for name, value in a.arrays().items():
        np.testing.assert_array_equal(value, b.arrays()[name], err_msg=name)
        assert value.dtype == b.arrays()[name].dtype, name


def keras_gru(x, h0, kernel, recurrent_kernel, bias, reset_after):
    """Keras ``GRUCell.call`` in float64: columns z, r, h; ``h = z h_prev + (1 - z) hh``."""
    n = h0.shape[1]
    if reset_after:
        input_bias, recurrent_bias = bias[0], bias[1]
    else:
        input_bias, recurrent_bias = bias, None
    h, outputs = h0, []
    for xt in x:
        x_z = xt @ kernel[:, :n] + input_bias[:n]
        x_r = xt @ kernel[:, n:2 * n] + input_bias[n:2 * n]
        x_h = xt @ kernel[:, 2 * n:] + input_bias[2 * n:]
        if reset_after:
            inner = h @ recurrent_kernel + recurrent_bias
            z = sigmoid(x_z + inner[:, :n])
            r = sigmoid(x_r + inner[:, n:2 * n])
            recurrent_h = r * inner[:, 2 * n:]
        else:
            z = sigmoid(x_z + h @ recurrent_kernel[:, :n])
            r = sigmoid(x_r + h @ recurrent_kernel[:, n:2 * n])
            recurrent_h = (r * h) @ recurrent_kernel[:, 2 * n:]
        hh = np.tanh(x_h + recurrent_h)
        h = z * h + (1.0 - z) * hh
        outputs.append(h)
    return np.stack(outputs)


def onnx_gru(x, h0, W, R, B, linear_before_reset, direction=0):
    """The ONNX ``GRU`` equations for one direction in float64: rows z, r, h; B = Wb | Rb."""
    w, r_w, n = W[direction], R[direction], h0.shape[1]
    wb, rb = B[direction][:3 * n], B[direction][3 * n:]
    gate = {name: slice(k * n, (k + 1) * n) for k, name in enumerate("zrh")}
    h, outputs = h0, []
    for xt in x:
        z = sigmoid(xt @ w[gate["z"]].T + h @ r_w[gate["z"]].T + wb[gate["z"]] + rb[gate["z"]])
        r = sigmoid(xt @ w[gate["r"]].T + h @ r_w[gate["r"]].T + wb[gate["r"]] + rb[gate["r"]])
        if linear_before_reset:
            hh = np.tanh(xt @ w[gate["h"]].T + r * (h @ r_w[gate["h"]].T + rb[gate["h"]])
                         + wb[gate["h"]])
        else:
            hh = np.tanh(xt @ w[gate["h"]].T + (r * h) @ r_w[gate["h"]].T + rb[gate["h"]]
                         + wb[gate["h"]])
        h = (1.0 - z) * hh + z * h
        outputs.append(h)
    return np.stack(outputs)


def device_forward(weights: GruHostWeights, x: np.ndarray, h0: np.ndarray) -> np.ndarray:
    """The layer on the simulated IPU (numpy backend) with ``weights`` written as given."""
    graph = Graph(Target.custom(tiles_per_ipu=16))
    params = weights.layer_params(dtype=FLOAT, batch_size=x.shape[1], max_time_steps=x.shape[0])
    xt = gru.create_input(graph, params, "x")
    h0t = gru.create_initial_state(graph, params, "h0")
    wt = gru.create_weights(graph, params, "w")
    prog = Sequence()
    out, _ = gru.gru_fwd(graph, params, h0t, xt, wt, prog)
    streams = {"x": xt, "h0": h0t, **wt._asdict()}
    for name, tensor in streams.items():
        graph.create_host_write(name, tensor)
    graph.create_host_read("out", out)
    engine = Engine(graph, [prog], backend="numpy")
    for name, value in {"x": x, "h0": h0, **weights.arrays()}.items():
        engine.write_tensor(name, value)
    engine.run(0)
    return engine.read_tensor("out")


@pytest.fixture
def data(rng):
    return rng.uniform(-2, 2, (S, B, I)), rng.uniform(-1, 1, (B, H))


# ---- PyTorch ------------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ORDERS)
def test_torch_state_dict_round_trip_is_exact(order):
    torch.manual_seed(0)
    module = torch.nn.GRU(I, H, num_layers=2, bidirectional=True)
    state = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    stack = from_torch_stack(module, cell_order=order)
    assert [len(layer) for layer in stack] == [2, 2]
    assert stack[1][0].input_size == 2 * H and stack[0][1].cell_order == order
    back = to_torch_stack(stack)
    assert sorted(back) == sorted(state)
    for key, value in state.items():
        np.testing.assert_array_equal(back[key], value, err_msg=key)
    layer = from_torch(state, 1, 1, cell_order=order)
    assert_same_weights(layer, stack[1][1])
    assert set(to_torch(layer, 1, 1)) == {"weight_ih_l1_reverse", "weight_hh_l1_reverse",
                                          "bias_ih_l1_reverse", "bias_hh_l1_reverse"}


@pytest.mark.parametrize("order", ORDERS)
def test_torch_layer_on_the_device_equals_torch(order, data):
    torch.manual_seed(1)
    module = torch.nn.GRU(I, H)
    x, h0 = data
    weights = from_torch(module, cell_order=order)
    assert weights.reset_after and weights.biases.shape == (3, 2, H)
    expected, _ = module(torch.from_numpy(x).float(), torch.from_numpy(h0).float()[None])
    got = device_forward(weights, x, h0)
    np.testing.assert_allclose(got, expected.detach().numpy(), atol=1e-5)


def test_torch_without_bias_and_with_prefix():
    torch.manual_seed(2)
    outer = torch.nn.Module()
    outer.rnn = torch.nn.GRU(I, H, bias=False)
    weights = from_torch(outer, prefix="rnn.")
    assert np.all(weights.biases == 0) and weights.biases.shape == (3, 2, H)
    np.testing.assert_array_equal(weights.gates()[0]["reset"],
                                  outer.rnn.weight_ih_l0.detach().numpy()[:H].T)


# ---- Keras --------------------------------------------------------------------------------------
@pytest.mark.parametrize("reset_after", [False, True])
@pytest.mark.parametrize("order", ORDERS)
def test_keras_round_trip_is_exact(reset_after, order, rng):
    kernel = rng.standard_normal((I, 3 * H)).astype(np.float32)
    recurrent = rng.standard_normal((H, 3 * H)).astype(np.float32)
    bias = rng.standard_normal((2, 3 * H) if reset_after else (3 * H,)).astype(np.float32)
    weights = from_keras(kernel, recurrent, bias, reset_after=reset_after, cell_order=order)
    assert weights.reset_after == reset_after
    back = to_keras(weights)
    assert back.reset_after == reset_after
    for got, want in zip(back, (kernel, recurrent, bias)):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype


@pytest.mark.parametrize("reset_after", [False, True])
def test_keras_model_on_the_device_equals_the_keras_formulas(reset_after, rng, data):
    x, h0 = data
    kernel = rng.uniform(-0.5, 0.5, (I, 3 * H))
    recurrent = rng.uniform(-0.5, 0.5, (H, 3 * H))
    bias = rng.uniform(-0.5, 0.5, (2, 3 * H) if reset_after else (3 * H,))
    weights = from_keras(kernel, recurrent, bias, reset_after=reset_after,
                         cell_order=("update", "candidate", "reset"))
    expected = keras_gru(x, h0, kernel, recurrent, bias, reset_after)
    np.testing.assert_allclose(device_forward(weights, x, h0), expected, atol=1e-5)


def test_keras_gate_columns_land_on_the_named_gates(rng):
    kernel = np.concatenate([np.full((I, H), k, dtype=np.float64) for k in (1, 2, 3)], axis=1)
    weights = from_keras(kernel, np.zeros((H, 3 * H)), None, reset_after=False)
    assert [weights.gates()[0][g][0, 0] for g in ("update", "reset", "candidate")] == [1, 2, 3]
    assert weights.biases.shape == (3, H) and not weights.biases.any()


# ---- ONNX ---------------------------------------------------------------------------------------
def random_onnx(rng, directions=2):
    return (rng.uniform(-0.5, 0.5, (directions, 3 * H, I)),
            rng.uniform(-0.5, 0.5, (directions, 3 * H, H)),
            rng.uniform(-0.5, 0.5, (directions, 6 * H)))


@pytest.mark.parametrize("order", ORDERS)
def test_onnx_linear_before_reset_round_trip_is_exact(order, rng):
    W, R, B_ = random_onnx(rng)
    layers = [from_onnx(W, R, B_, linear_before_reset=1, direction=d, cell_order=order)
              for d in (0, 1)]
    back = to_onnx(layers)
    assert (back.linear_before_reset, back.direction, back.hidden_size) == (1, "bidirectional", H)
    for got, want in zip(back[:3], (W, R, B_)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_onnx_model_on_the_device_equals_the_onnx_equations(linear_before_reset, rng, data):
    x, h0 = data
    W, R, B_ = random_onnx(rng)
    weights = from_onnx(W, R, B_, linear_before_reset=linear_before_reset, direction=1)
    assert weights.reset_after == bool(linear_before_reset)
    expected = onnx_gru(x, h0, W, R, B_, linear_before_reset, direction=1)
    np.testing.assert_allclose(device_forward(weights, x, h0), expected, atol=1e-5)


def test_onnx_reset_before_folds_recurrent_biases_exactly(rng, data):
    """linear_before_reset=0 adds Rbh outside the reset product, so folding is exact; exporting
    writes the folded biases as Wb with Rb = 0 — the same model, and a fixed point."""
    x, h0 = data
    W, R, B_ = random_onnx(rng, directions=1)
    weights = from_onnx(W, R, B_, linear_before_reset=0)
    np.testing.assert_allclose(weights.gates()[2]["candidate"], B_[0, 2 * H:3 * H] + B_[0, 5 * H:])
    exported = to_onnx(weights)
    assert exported.linear_before_reset == 0 and exported.direction == "forward"
    assert not exported.B[0, 3 * H:].any()
    np.testing.assert_allclose(onnx_gru(x, h0, *exported[:3], 0), onnx_gru(x, h0, W, R, B_, 0),
                               atol=1e-12)
    assert_same_weights(from_onnx(*exported[:3], linear_before_reset=0), weights)


def test_onnx_from_torch_equals_torch(data):
    """A linear_before_reset=1 ONNX model laid out here from torch's parameters (r, z, n rows →
    z, r, h rows) gives torch's outputs through from_onnx, and to_onnx(from_torch) is that
    layout."""
    torch.manual_seed(3)
    module = torch.nn.GRU(I, H)
    p = {k: v.detach().numpy().astype(np.float64) for k, v in module.state_dict().items()}

    def zrh(rows):
        return np.concatenate([rows[H:2 * H], rows[:H], rows[2 * H:]])

    W = zrh(p["weight_ih_l0"])[None]
    R = zrh(p["weight_hh_l0"])[None]
    B_ = np.concatenate([zrh(p["bias_ih_l0"]), zrh(p["bias_hh_l0"])])[None]
    x, h0 = data
    expected, _ = module(torch.from_numpy(x).float(), torch.from_numpy(h0).float()[None])
    weights = from_onnx(W, R, B_, linear_before_reset=1)
    reference = gru_reference.forward(x, h0, *weights.arrays().values(), reset_after=True)
    np.testing.assert_allclose(reference.output, expected.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(device_forward(weights, x, h0), expected.detach().numpy(),
                               atol=1e-5)
    exported = to_onnx(from_torch(module))
    for got, want in zip(exported[:3], (W, R, B_)):
        np.testing.assert_array_equal(got, want)


# ---- host weights and errors -------------------------------------------------------------------
def test_host_weights_are_frozen_and_reorder_exactly(rng):
    weights = from_keras(rng.standard_normal((I, 3 * H)), rng.standard_normal((H, 3 * H)),
                         rng.standard_normal((2, 3 * H)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        weights.biases = None
    with pytest.raises(ValueError):
        weights.input_weights[0, 0, 0] = 1.0
    order = ("candidate", "reset", "update")
    moved = weights.in_order(order)
    assert moved.cell_order == order
    np.testing.assert_array_equal(moved.input_weights[0], weights.input_weights[2])
    assert_same_weights(moved.in_order(weights.cell_order), weights)
    params = moved.layer_params(dtype="float", batch_size=2, max_time_steps=7)
    assert (params.layer_sizes, params.reset_after, params.cell_order) == ((I, H), True, order)


def torch_layer(inputs: int, hidden: int = H) -> GruHostWeights:
    """A reset-after layer's weights (zeros) taking ``inputs`` features."""
    return GruHostWeights(np.zeros((3, inputs, hidden)), np.zeros((3, hidden, hidden)),
                          np.zeros((3, 2, hidden)))


def reset_before() -> GruHostWeights:
    return GruHostWeights(np.zeros((3, I, H)), np.zeros((3, H, H)), np.zeros((3, H)))


@pytest.mark.parametrize("call, message", [
    (lambda: to_torch(reset_before()), "reset-before"),
    (lambda: from_torch({"weight_ih_l0": np.zeros((3 * H, I))}, 1), "weight_ih_l1"),
    (lambda: from_torch({"weight_ih_l0": np.zeros((3 * H, I)), "weight_hh_l0": np.zeros((3 * H, H)),
                         "bias_ih_l0": np.zeros(3 * H)}), "only one of"),
    (lambda: from_torch({"weight_ih_l0": np.zeros((4 * H, I)),
                         "weight_hh_l0": np.zeros((4 * H, H))}), "[3H, H]"),
    (lambda: from_torch({}, direction=2), "direction"),
    (lambda: from_torch(42), "nn.GRU"),
    (lambda: from_keras(np.zeros((I, 3 * H)), np.zeros((H, 3 * H)), np.zeros(3 * H),
                        reset_after=True), "reset_after=True"),
    (lambda: from_keras(np.zeros((I, 3 * H)), np.zeros((H, 3 * H)), np.zeros((2, 3 * H)),
                        reset_after=False), "reset_after=False"),
    (lambda: from_keras(np.zeros((I, 3 * H + 1)), np.zeros((H, 3 * H))), "multiple of 3"),
    (lambda: from_onnx(np.zeros((1, 3 * H, I)), np.zeros((1, 3 * H, H)),
                       linear_before_reset=2), "linear_before_reset"),
    (lambda: from_onnx(np.zeros((1, 3 * H, I)), np.zeros((1, 3 * H, H)), direction=1),
     "direction 1"),
    (lambda: from_onnx(np.zeros((1, 3 * H, I)), np.zeros((1, 3 * H, H)), np.zeros((1, 3 * H))),
     "6H"),
    (lambda: to_onnx([reset_before(), from_torch(torch.nn.GRU(I, H))]), "linear_before_reset"),
    (lambda: to_onnx([]), "1 or 2"),
    (lambda: from_keras([[1, 2], [3]], np.zeros((H, 3 * H))), "kernel is not an array of one"),
    (lambda: to_torch_stack([]), "at least one layer"),
    (lambda: to_torch_stack([[torch_layer(I), torch_layer(I)], [torch_layer(2 * H)]]),
     "layer 1 has 1 directions, layer 0 has 2"),
    (lambda: to_torch_stack([[torch_layer(I)], [torch_layer(2 * H)]]),
     f"layer 1 direction 0 takes {2 * H} inputs; after layer 0 it must take 1 x {H}"),
    (lambda: to_torch_stack([[torch_layer(I)], [torch_layer(H, hidden=H + 1)]]),
     f"hidden size {H + 1}, layer 0 has {H}"),
    (lambda: GruHostWeights(np.zeros((3, I, H)), np.zeros((3, H, H)), np.zeros((2, H))),
     "biases"),
    (lambda: GruHostWeights(np.zeros((3, I, H)), np.zeros((3, H, H)), np.zeros((3, H)),
                            ("reset", "reset", "update")), "permutation"),
    (lambda: GruHostWeights(np.zeros((3, I, H), dtype=complex), np.zeros((3, H, H)),
                            np.zeros((3, H))), "real numbers"),
    (lambda: reset_before().layer_params(dtype="float", batch_size=1, max_time_steps=1,
                                         reset_after=True), "from the weights"),
])
def test_what_cannot_be_represented_is_refused_by_name(call, message):
    with pytest.raises(GrucError, match=None) as info:
        call()
    assert message in str(info.value)
