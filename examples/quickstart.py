"""A first gruc program: a tanh recurrence on a simulated 16-tile IPU, checked against numpy.

Builds a graph, maps its tensors over tiles, records a loop, compiles it (memory planned per
tile), runs it, reads the result back and prints where memory and cycles went.
"""

from __future__ import annotations

import numpy as np

from gruc import FLOAT, Engine, Graph, Repeat, Sequence, Target
from gruc.ir.expr import _1, _2, Const, tanh
from gruc.ops import map, map_in_place


def main(steps: int = 10, backend: str = "numba") -> float:
    graph = Graph(Target.custom(tiles_per_ipu=16))
    h = graph.add_variable(FLOAT, (8, 64), "h")
    x = graph.add_variable(FLOAT, (8, 64), "x")
    graph.map_tensor_linearly(h)
    graph.map_tensor_linearly(x)
    body = Sequence()
    map_in_place(graph, tanh(_1 * Const(0.9) + _2), [h, x], body)   # one fused vertex per tile
    prog = Sequence(Repeat(steps, body))
    energy = map(graph, _1 * _1, [h], prog, "energy")
    graph.create_host_write("h", h)
    graph.create_host_write("x", x)
    graph.create_host_read("energy", energy)

    engine = Engine(graph, prog, backend=backend)
    rng = np.random.default_rng(0)
    h0, xv = rng.uniform(-1, 1, (8, 64)), rng.uniform(-1, 1, (8, 64))
    engine.write_tensor("h", h0)
    engine.write_tensor("x", xv)
    engine.run()

    expected = h0.astype(np.float32)
    for _ in range(steps):
        expected = np.tanh(expected * np.float32(0.9) + xv.astype(np.float32))
    error = float(np.abs(engine.read_tensor("energy") - expected ** 2).max())
    engine.report.print_summary()
    print(f"max abs error vs numpy: {error:.2e}")
    return error


if __name__ == "__main__":
    main()
