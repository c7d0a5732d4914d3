"""GRU inference on a simulated IPU: build the layer, run it, check it, see where memory went.

A reset-after GRU layer (the PyTorch / Keras formula) over a batch of sequences, built with the
poplibs-style API: creators lay the input, state and weights out the way the layer's matmuls
want them, ``gru_fwd`` records the time loop once (its size does not depend on the sequence
length), and the engine plans every tile's memory before running.  The result is checked against
the float64 reference, and the report shows the memory per tile and the cycles by kind — then the
same layer is split into as many time shards as the target allows (each shard's steps on its own
tiles), which gives the same numbers from fewer bytes of data on the busiest tile (the fullest
tile's address range ends in the interleaved region either way, where the matmul's partial sums
lie, and each shard's loop brings code of its own).
"""

from __future__ import annotations

import numpy as np

from gruc import FLOAT, Engine, Graph, Sequence, Target
from gruc.rnn_geometry import get_max_shards
from gruc.popnn import gru, gru_reference


def build_and_run(params: gru.GruParams, target: Target, shards: int | None, backend: str,
                  data: gru_reference.RandomInputs):
    """Build, compile and run the layer; return its output and the engine (for the report)."""
    graph = Graph(target)
    options = {"inferenceOnly": True} | ({"numShards": shards} if shards else {})
    x = gru.create_input(graph, params, "x", options)
    h0 = gru.create_initial_state(graph, params, "h0", options)
    weights = gru.create_weights(graph, params, "weights", options)
    prog = Sequence()
    output, _ = gru.gru_fwd(graph, params, h0, x, weights, prog, options=options)
    for name, tensor in {"x": x, "h0": h0, **weights._asdict()}.items():
        graph.create_host_write(name, tensor)
    graph.create_host_read("output", output)

    engine = Engine(graph, prog, backend=backend)
    values = {"x": data.x, "h0": data.h0, "input_weights": data.input_weights,
              "output_weights": data.output_weights, "biases": data.biases}
    for name, value in values.items():
        engine.write_tensor(name, value)
    engine.run()
    return engine.read_tensor("output"), engine


def main(sequence: int = 32, batch: int = 8, input_size: int = 64, hidden: int = 64,
         tiles: int = 64, backend: str = "numba") -> dict[str, float]:
    data = gru_reference.random_inputs(sequence, batch, input_size, hidden, reset_after=True,
                                       round_to="float", seed=7)
    params = gru.GruParams(dtype=FLOAT, batch_size=batch, max_time_steps=sequence,
                           layer_sizes=(input_size, hidden), reset_after=True)
    target = Target.custom(tiles_per_ipu=tiles)
    output, engine = build_and_run(params, target, None, backend, data)
    expected = gru_reference.forward(data.x, data.h0, data.input_weights, data.output_weights,
                                     data.biases, reset_after=True).output
    error = float(np.abs(output - expected).max())
    engine.report.print_summary()
    print(f"output {list(output.shape)}, max abs error vs float64 reference: {error:.2e}")

    shards = get_max_shards(target, params.rnn)
    sharded_output, sharded = build_and_run(params, target, shards, backend, data)
    busiest, sharded_busiest = busiest_tile_bytes(engine), busiest_tile_bytes(sharded)
    print(f"{gru.num_shards(Graph(target), params)} shard(s) (poplibs' heuristic): busiest tile "
          f"holds {busiest} B; {shards} shards: {sharded_busiest} B; same output: "
          f"{np.array_equal(output, sharded_output)}")
    return {"error": error, "busiest_tile_bytes": float(busiest), "shards": float(shards),
            "sharded_busiest_tile_bytes": float(sharded_busiest),
            "sharded_error": float(np.abs(sharded_output - expected).max())}


def busiest_tile_bytes(engine: Engine) -> int:
    """The most bytes of data any tile holds at its peak: its tensors and exchange buffers."""
    footprint = engine.footprint
    data = footprint.always_live["variable"] + footprint.always_live["constant"]
    return int((data + footprint.not_always_live_peak).max())


if __name__ == "__main__":
    main()
