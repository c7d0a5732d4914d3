"""Stacked and bidirectional GRUs (SPEC J2) against PyTorch: ``nn.GRU`` itself for reset-after,
and a reset-before GRU written here in torch ops (autograd gives its gradients) for the other
placement.  Device runs use the numpy backend on a 16-tile target."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gruc import FLOAT, Engine, Graph, GrucError, Sequence, Target
from gruc.popnn.gru_io import GruHostWeights, from_torch_stack, to_torch_stack
from gruc.popnn.gru_stack import GruStack, GruStackParams, weight_key

S, B, I, H = 3, 2, 5, 4
ORDER = ("update", "candidate", "reset")


def build(params: GruStackParams, training: bool, final_state_grad: bool = True):
    """The stack's graph with host streams: x, h0, weights, (grad_out, grad_hn) → y, hn, grads."""
    graph = Graph(Target.custom(tiles_per_ipu=16))
    stack = GruStack(graph, params, options={"inferenceOnly": not training})
    x, h0 = stack.create_input(), stack.create_initial_state()
    prog = Sequence()
    fwd = stack.forward(prog, x, h0, save_intermediates=training)
    writes = {"x": x, "h0": h0, **stack.weight_tensors()}
    reads = {"y": fwd.output, "hn": fwd.final_state}
    if training:
        grad_out = graph.add_variable(FLOAT, fwd.output.shape, "grad_out")
        graph.map_tensor_linearly(grad_out)
        writes["grad_out"] = grad_out
        grad_hn = None
        if final_state_grad:
            grad_hn = graph.add_variable(FLOAT, fwd.final_state.shape, "grad_hn")
            graph.map_tensor_linearly(grad_hn)
            writes["grad_hn"] = grad_hn
        grads = stack.backward(prog, fwd, grad_out, grad_hn)
        reads["h0_grad"] = grads.init_state_grad
        if grads.input_grad is not None:
            reads["x_grad"] = grads.input_grad
        for layer, directions in enumerate(grads.weights_grad):
            for d, weights in enumerate(directions):
                for field, tensor in weights._asdict().items():
                    reads["grad/" + weight_key(layer, d, field)] = tensor
    for name, tensor in writes.items():
        graph.create_host_write(name, tensor)
    for name, tensor in reads.items():
        graph.create_host_read(name, tensor)
    return stack, Engine(graph, [prog], backend="numpy"), reads


def run(stack, engine, reads, host, values):
    for name, value in {**stack.weight_values(host), **values}.items():
        engine.write_tensor(name, value)
    engine.run(0)
    return {name: engine.read_tensor(name) for name in reads}


def weight_grads(outputs, params):
    """The device's weight gradients as host weights ``[layer][direction]``."""
    return [[GruHostWeights(*(outputs["grad/" + weight_key(layer, d, f)]
                              for f in ("input_weights", "output_weights", "biases")),
                            params.cell_order)
             for d in range(params.num_directions)] for layer in range(params.num_layers)]


def test_bidirectional_two_layer_stack_equals_torch_with_gradients(rng):
    torch.manual_seed(0)
    module = torch.nn.GRU(I, H, num_layers=2, bidirectional=True)
    host = from_torch_stack(module, cell_order=ORDER)
    params = GruStackParams.for_weights(host, dtype=FLOAT, batch_size=B, max_time_steps=S)
    assert (params.num_layers, params.bidirectional, params.reset_after) == (2, True, True)
    x = torch.tensor(rng.uniform(-2, 2, (S, B, I)), dtype=torch.float32, requires_grad=True)
    h0 = torch.tensor(rng.uniform(-1, 1, (4, B, H)), dtype=torch.float32, requires_grad=True)
    grad_out = rng.uniform(-1, 1, (S, B, 2 * H)).astype(np.float32)
    grad_hn = rng.uniform(-1, 1, (4, B, H)).astype(np.float32)
    y, hn = module(x, h0)
    ((y * torch.from_numpy(grad_out)).sum() + (hn * torch.from_numpy(grad_hn)).sum()).backward()

    stack, engine, reads = build(params, training=True)
    out = run(stack, engine, reads, host, {"x": x.detach().numpy(), "h0": h0.detach().numpy(),
                                           "grad_out": grad_out, "grad_hn": grad_hn})
    assert out["y"].shape == (S, B, 2 * H) and out["hn"].shape == (4, B, H)
    np.testing.assert_allclose(out["y"], y.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(out["hn"], hn.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(out["x_grad"], x.grad.numpy(), atol=1e-5)
    np.testing.assert_allclose(out["h0_grad"], h0.grad.numpy(), atol=1e-5)
    device = to_torch_stack(weight_grads(out, params))
    for name, parameter in module.named_parameters():
        np.testing.assert_allclose(device[name], parameter.grad.numpy(), atol=1e-5, err_msg=name)


def reset_before_stack(x, h0, host, num_layers, directions):
    """A reset-before stacked GRU in torch ops (poplibs' formula), weights in cell order ORDER:
    ``c = tanh(x Wi_c + (r ∘ h) Wh_c + b_c)``; the reverse direction runs on reversed time."""
    layer_input, finals = x, []
    for layer in range(num_layers):
        outputs = []
        for d in range(directions):
            wi, wh, b = (host[layer][d][k] for k in range(3))
            r_i, u_i, c_i = (ORDER.index(g) for g in ("reset", "update", "candidate"))
            seq = layer_input if d == 0 else layer_input.flip(0)
            h, steps = h0[layer * directions + d], []
            for xt in seq:
                r = torch.sigmoid(xt @ wi[r_i] + h @ wh[r_i] + b[r_i])
                u = torch.sigmoid(xt @ wi[u_i] + h @ wh[u_i] + b[u_i])
                c = torch.tanh(xt @ wi[c_i] + (r * h) @ wh[c_i] + b[c_i])
                h = u * h + (1 - u) * c
                steps.append(h)
            out = torch.stack(steps)
            finals.append(h)
            outputs.append(out if d == 0 else out.flip(0))
        layer_input = torch.cat(outputs, 2)
    return layer_input, torch.stack(finals)


@pytest.mark.parametrize("num_layers, bidirectional", [(2, True), (3, False)])
def test_reset_before_stack_equals_torch_autograd(num_layers, bidirectional, rng):
    params = GruStackParams(dtype=FLOAT, batch_size=B, max_time_steps=S, input_size=I,
                            hidden_size=H, num_layers=num_layers, bidirectional=bidirectional,
                            cell_order=ORDER)
    d_count = params.num_directions
    host_arrays = [[[torch.tensor(rng.uniform(-0.7, 0.7, shape), dtype=torch.float64,
                                  requires_grad=True)
                     for shape in ((3, params.layer_input_size(layer), H), (3, H, H), (3, H))]
                    for _ in range(d_count)] for layer in range(num_layers)]
    host = [[GruHostWeights(*(t.detach().numpy() for t in arrays), ORDER) for arrays in layer]
            for layer in host_arrays]
    x = torch.tensor(rng.uniform(-2, 2, (S, B, I)), requires_grad=True)
    h0 = torch.tensor(rng.uniform(-1, 1, (params.num_states, B, H)), requires_grad=True)
    grad_out = rng.uniform(-1, 1, (S, B, d_count * H))
    y, hn = reset_before_stack(x, h0, host_arrays, num_layers, d_count)
    (y * torch.from_numpy(grad_out)).sum().backward()

    stack, engine, reads = build(params, training=True, final_state_grad=False)
    out = run(stack, engine, reads, host, {"x": x.detach().numpy(), "h0": h0.detach().numpy(),
                                           "grad_out": grad_out})
    np.testing.assert_allclose(out["y"], y.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(out["hn"], hn.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(out["x_grad"], x.grad.numpy(), atol=1e-5)
    np.testing.assert_allclose(out["h0_grad"], h0.grad.numpy(), atol=1e-5)
    for layer, directions in enumerate(weight_grads(out, params)):
        for d, grads in enumerate(directions):
            for got, want in zip(grads.arrays().values(), host_arrays[layer][d]):
                np.testing.assert_allclose(got, want.grad.numpy(), atol=1e-5,
                                           err_msg=f"layer {layer} direction {d}")


def test_inference_stack_and_weights_in_another_cell_order(rng):
    """Host weights in any cell order are permuted to the stack's; no input gradient is built
    when the stack does not want it."""
    torch.manual_seed(4)
    module = torch.nn.GRU(I, H, num_layers=1, bidirectional=True)
    params = GruStackParams(dtype=FLOAT, batch_size=B, max_time_steps=S, input_size=I,
                            hidden_size=H, bidirectional=True, reset_after=True)
    stack, engine, reads = build(params, training=False)
    x = rng.uniform(-2, 2, (S, B, I)).astype(np.float32)
    h0 = np.zeros((2, B, H), dtype=np.float32)
    out = run(stack, engine, reads, from_torch_stack(module, cell_order=ORDER), {"x": x, "h0": h0})
    y, hn = module(torch.from_numpy(x), torch.from_numpy(h0))
    np.testing.assert_allclose(out["y"], y.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(out["hn"], hn.detach().numpy(), atol=1e-5)

    no_input_grad = params.model_copy(update={"calc_input_gradients": False})
    _, _, training_reads = build(no_input_grad, training=True)
    assert "x_grad" not in training_reads and "h0_grad" in training_reads


def test_stack_refuses_what_does_not_fit():
    params = GruStackParams(dtype=FLOAT, batch_size=B, max_time_steps=S, input_size=I,
                            hidden_size=H, num_layers=2)
    graph = Graph(Target.custom(tiles_per_ipu=16))
    stack = GruStack(graph, params)
    x, h0, prog = stack.create_input(), stack.create_initial_state(), Sequence()
    with pytest.raises(GrucError, match=r"stack input has shape \[3, 2, 4\]"):
        stack.forward(prog, x[:, :, :4], h0)
    with pytest.raises(GrucError, match=r"layers × directions"):
        stack.forward(prog, x, h0[:1])
    fwd = stack.forward(prog, x, h0)
    with pytest.raises(GrucError, match="save_intermediates=True"):
        stack.backward(prog, fwd, fwd.output)
    with pytest.raises(GrucError, match="layer 2 is not in 0..1"):
        params.layer_params(2)
    wrong = GruHostWeights(np.zeros((3, I, H)), np.zeros((3, H, H)), np.zeros((3, 2, H)))
    with pytest.raises(GrucError, match="reset_after"):
        stack.weight_values([[wrong], [wrong]])
    with pytest.raises(GrucError, match="2 layers of 1 directions"):
        stack.weight_values([[wrong]])
    with pytest.raises(GrucError, match="GruStackParams"):
        GruStack(graph, {"input_size": I})
    with pytest.raises(GrucError, match="num_layers"):
        GruStackParams(dtype=FLOAT, batch_size=B, max_time_steps=S, input_size=I, hidden_size=H,
                       num_layers=0)
