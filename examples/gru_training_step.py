"""Training a GRU with SGD, every step on the simulated IPU: forward, loss, backward, update.

The task: follow an exponential moving average of the squashed input,
``y_t = λ·y_{t-1} + (1 − λ)·tanh(x_t)`` with ``y_{-1} = 0``.  A GRU can express it exactly — a
constant update gate ``u = λ`` and a candidate ``c = tanh(x)`` — but starts from random weights,
so the mean squared error between its output and ``y`` falls as it learns.

One program is one training step, built once and run once per batch:

1. ``gru_fwd`` with the intermediates the backward pass needs;
2. the loss ``mean((h − y)²)`` (one reduction) and its gradient ``2·(h − y)/N`` (one map);
3. ``gru_bwd_with_wu``: the weight and bias gradients (the input gradient is not asked for:
   ``calc_input_gradients=False`` lets the backward pass skip the input half of its products);
4. SGD, ``w ← w − lr·∇w``, in place on the device (``scaled_add_to``).

The weights stay on the device between steps; the host only writes each batch and reads the loss.
"""

from __future__ import annotations

import numpy as np

from gruc import FLOAT, Engine, Graph, Sequence, Target
from gruc.ir.expr import _1, _2, Const
from gruc.ops import map, reduce, scaled_add_to, zero
from gruc.popnn import gru

DECAY = 0.7
"""λ of the moving average the layer learns to follow."""


def make_batch(rng: np.random.Generator, steps: int, batch: int, size: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Inputs ``[S, B, size]`` and their moving-average targets, same shape."""
    x = rng.uniform(-2.0, 2.0, (steps, batch, size))
    target = np.zeros_like(x)
    running = np.zeros((batch, size))
    for t in range(steps):
        running = DECAY * running + (1.0 - DECAY) * np.tanh(x[t])
        target[t] = running
    return x, target


def build_training_step(graph: Graph, params: gru.GruParams, learning_rate: float
                        ) -> tuple[Sequence, dict]:
    """One SGD step as a program; returns it and the tensors the host writes and reads."""
    options = {"inferenceOnly": False}
    x = gru.create_input(graph, params, "x", options)
    h0 = gru.create_initial_state(graph, params, "h0", options)
    weights = gru.create_weights(graph, params, "weights", options)
    prog = Sequence()
    zero(graph, h0, prog, "zero_h0")
    output, intermediates = gru.gru_fwd(graph, params, h0, x, weights, prog,
                                        save_intermediates=True, options=options)
    target = graph.clone(output, "target")         # laid out like the output it is compared with
    error = map(graph, _1 - _2, [output, target], prog, "error")
    count = error.num_elements
    loss = reduce(graph, error, [0, 1, 2], "square_add", prog, scale=1.0 / count, name="loss")
    grad_output = map(graph, _1 * Const(2.0 / count), [error], prog, "grad_output")
    grads = gru.gru_bwd_with_wu(graph, params, prog, h0, intermediates, weights, x, output,
                                grad_output, options=options)
    for weight, gradient in zip(weights, grads.weights_grad):
        scaled_add_to(graph, weight, gradient, -learning_rate, prog, "sgd")
    return prog, {"writes": {"x": x, "target": target, **weights._asdict()},
                  "reads": {"loss": loss}}


def main(steps: int = 50, sequence: int = 12, batch: int = 8, size: int = 8,
         learning_rate: float = 0.5, backend: str = "numba", seed: int = 0) -> list[float]:
    """Train for ``steps`` batches; return the loss of each step (before its update)."""
    rng = np.random.default_rng(seed)
    graph = Graph(Target.custom(tiles_per_ipu=16))
    params = gru.GruParams(dtype=FLOAT, batch_size=batch, max_time_steps=sequence,
                           layer_sizes=(size, size), calc_input_gradients=False)
    prog, tensors = build_training_step(graph, params, learning_rate)
    for name, tensor in tensors["writes"].items():
        graph.create_host_write(name, tensor)
    for name, tensor in tensors["reads"].items():
        graph.create_host_read(name, tensor)
    engine = Engine(graph, prog, backend=backend)

    scale = 1.0 / np.sqrt(size)    # keeps the initial pre-activations O(1)
    engine.write_tensor("input_weights", rng.uniform(-scale, scale, (3, size, size)))
    engine.write_tensor("output_weights", rng.uniform(-scale, scale, (3, size, size)))
    engine.write_tensor("biases", np.zeros((3, size)))
    losses = []
    for step in range(steps):
        x, target = make_batch(rng, sequence, batch, size)
        engine.write_tensor("x", x)
        engine.write_tensor("target", target)
        engine.run()
        losses.append(float(engine.read_tensor("loss")))
        if step % 10 == 0 or step == steps - 1:
            print(f"step {step:3d}  loss {losses[-1]:.5f}", flush=True)
    engine.report.print_summary()
    print(f"loss fell from {losses[0]:.4f} to {losses[-1]:.4f} in {steps} steps")
    return losses


if __name__ == "__main__":
    main()
