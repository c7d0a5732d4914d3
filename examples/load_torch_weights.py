"""Run a trained PyTorch ``nn.GRU`` — stacked and bidirectional — on a simulated IPU.

PopTorch refuses ``nn.GRU(num_layers > 1)`` and ``bidirectional=True``, and PopART throws
"Bidirectional GRU has not yet been implemented".  gruc composes both from the poplibs layer:
:func:`gruc.popnn.gru_io.from_torch_stack` converts the module's state dict (torch's r, z, n rows
become poplibs' ``[3, I, H]`` gate blocks in any cell order), :class:`gruc.popnn.gru_stack.GruStack`
builds one GRU layer per layer and direction, and the outputs match torch's.  The same weights are
then exported to Keras and ONNX layouts, and back to a state dict torch loads.
"""

from __future__ import annotations

import numpy as np
import torch

from gruc import FLOAT, Engine, Graph, Sequence, Target
from gruc.popnn import gru_io
from gruc.popnn.gru_stack import GruStack, GruStackParams


def main(sequence: int = 12, batch: int = 4, input_size: int = 16, hidden: int = 32,
         num_layers: int = 2, tiles: int = 32, backend: str = "numba") -> dict[str, float]:
    torch.manual_seed(0)
    module = torch.nn.GRU(input_size, hidden, num_layers=num_layers, bidirectional=True)
    x = torch.randn(sequence, batch, input_size)
    h0 = torch.randn(2 * num_layers, batch, hidden)
    with torch.no_grad():
        expected_output, expected_state = module(x, h0)

    host = gru_io.from_torch_stack(module, cell_order=("update", "reset", "candidate"))
    params = GruStackParams.for_weights(host, dtype=FLOAT, batch_size=batch,
                                        max_time_steps=sequence)
    graph = Graph(Target.custom(tiles_per_ipu=tiles))
    stack = GruStack(graph, params)
    x_t, h0_t = stack.create_input(), stack.create_initial_state()
    prog = Sequence()
    result = stack.forward(prog, x_t, h0_t)
    for name, tensor in {"x": x_t, "h0": h0_t, **stack.weight_tensors()}.items():
        graph.create_host_write(name, tensor)
    graph.create_host_read("output", result.output)
    graph.create_host_read("final_state", result.final_state)

    engine = Engine(graph, prog, backend=backend)
    for name, value in {"x": x.numpy(), "h0": h0.numpy(), **stack.weight_values(host)}.items():
        engine.write_tensor(name, value)
    engine.run()
    errors = {"output": float(np.abs(engine.read_tensor("output")
                                     - expected_output.numpy()).max()),
              "final_state": float(np.abs(engine.read_tensor("final_state")
                                          - expected_state.numpy()).max())}
    print(f"nn.GRU({input_size}, {hidden}, num_layers={num_layers}, bidirectional=True) on "
          f"{graph.target.describe()}")
    for name, error in errors.items():
        print(f"  {name:<12} max abs error vs torch {error:.2e}")

    keras = gru_io.to_keras(host[0][0])
    onnx = gru_io.to_onnx(host[0])
    print(f"layer 0 as Keras GRU(reset_after={keras.reset_after}): kernel "
          f"{list(keras.kernel.shape)}, recurrent_kernel {list(keras.recurrent_kernel.shape)}, "
          f"bias {list(keras.bias.shape)}")
    print(f"layer 0 as ONNX GRU(direction={onnx.direction!r}, linear_before_reset="
          f"{onnx.linear_before_reset}): W {list(onnx.W.shape)}, R {list(onnx.R.shape)}, "
          f"B {list(onnx.B.shape)}")

    reloaded = torch.nn.GRU(input_size, hidden, num_layers=num_layers, bidirectional=True)
    reloaded.load_state_dict({k: torch.from_numpy(v)
                              for k, v in gru_io.to_torch_stack(host).items()})
    with torch.no_grad():
        errors["round_trip"] = float((reloaded(x, h0)[0] - expected_output).abs().max())
    print(f"  torch → gruc → torch round trip: max abs difference {errors['round_trip']:.1e}")
    return errors


if __name__ == "__main__":
    main()
