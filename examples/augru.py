"""AUGRU (DIEN's interest-evolution layer) on a simulated IPU: forward and gradients.

DIEN (arXiv 1809.03672) runs a GRU over a user's behaviour sequence with its update gate scaled
by how relevant each behaviour is to the candidate item: ``u ← (1 − a) u``, with ``a`` one
attention score per row and step.  A relevant step (large ``a``) lets the candidate state in; an
irrelevant one (``a → 0``) leaves the interest state almost untouched.  poplibs added this layer
(``auGruFwd`` / ``auGruBwdWithWU``) on user request; here the scores come from a softmax over time
of each behaviour's dot product with a target embedding, the layer runs forward and backward, and
everything — output, input, initial-state, weight and attention gradients — is checked against
the float64 reference.
"""

from __future__ import annotations

import numpy as np

from gruc import FLOAT, Engine, Graph, Sequence, Target
from gruc.popnn import gru, gru_reference


def attention_scores(behaviours: np.ndarray, target: np.ndarray) -> np.ndarray:
    """``[B, S]`` softmax over time of each behaviour's affinity with the target item."""
    logits = np.einsum("sbi,bi->bs", behaviours, target)
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    return weights / weights.sum(axis=1, keepdims=True)


def main(sequence: int = 16, batch: int = 4, input_size: int = 32, hidden: int = 24,
         tiles: int = 32, backend: str = "numba") -> dict[str, float]:
    rng = np.random.default_rng(11)
    data = gru_reference.random_inputs(sequence, batch, input_size, hidden, round_to="float",
                                       seed=11)
    behaviours = data.x / 4.0
    scores = attention_scores(behaviours, rng.standard_normal((batch, input_size)))
    scores = scores.astype(np.float32).astype(np.float64)
    grad_output = rng.uniform(-1, 1, (sequence, batch, hidden)).astype(np.float32)

    graph = Graph(Target.custom(tiles_per_ipu=tiles))
    params = gru.GruParams(dtype=FLOAT, batch_size=batch, max_time_steps=sequence,
                           layer_sizes=(input_size, hidden))
    options = {"inferenceOnly": False}
    x = gru.create_input(graph, params, "behaviours", options)
    h0 = gru.create_initial_state(graph, params, "h0", options)
    weights = gru.create_weights(graph, params, "weights", options)
    attention = gru.create_attention(graph, params, "attention", options)
    prog = Sequence()
    output, intermediates = gru.au_gru_fwd(graph, params, h0, x, weights, prog, attention,
                                           save_intermediates=True, options=options)
    grad_out = graph.clone(output, "grad_output")       # laid out like the output it belongs to
    grads = gru.au_gru_bwd_with_wu(graph, params, prog, h0, intermediates, weights, x, output,
                                   grad_out, attention, options=options)
    writes = {"x": x, "h0": h0, "attention": attention, "grad_output": grad_out,
              **weights._asdict()}
    reads = {"output": output, "input_grad": grads.input_grad, "h0_grad": grads.init_state_grad,
             "attention_grad": grads.attentions_grad,
             **{f"{name}_grad": t for name, t in grads.weights_grad._asdict().items()}}
    for name, tensor in writes.items():
        graph.create_host_write(name, tensor)
    for name, tensor in reads.items():
        graph.create_host_read(name, tensor)

    engine = Engine(graph, prog, backend=backend)
    values = {"x": behaviours, "h0": data.h0, "attention": scores, "grad_output": grad_output,
              "input_weights": data.input_weights, "output_weights": data.output_weights,
              "biases": data.biases}
    for name, value in values.items():
        engine.write_tensor(name, value)
    engine.run()

    step = gru_reference.train_step(behaviours, data.h0, data.input_weights,
                                    data.output_weights, data.biases, grad_output,
                                    attention=scores)
    expected = {"output": step.forward.output, "input_grad": step.backward.input_grad,
                "h0_grad": step.backward.init_state_grad,
                "attention_grad": step.backward.attention_grad,
                "input_weights_grad": step.weight_grads.input_weights,
                "output_weights_grad": step.weight_grads.output_weights,
                "biases_grad": step.weight_grads.biases}
    errors = {name: float(np.abs(engine.read_tensor(name) - value).max())
              for name, value in expected.items()}
    for name, error in errors.items():
        print(f"{name:<20} {str(list(expected[name].shape)):<14} max abs error {error:.2e}")
    attention_grad = engine.read_tensor("attention_grad")
    print(f"per row, the step whose attention score the loss is most sensitive to: "
          f"{np.abs(attention_grad).argmax(axis=1).tolist()}")
    engine.report.print_summary()
    return errors


if __name__ == "__main__":
    main()
