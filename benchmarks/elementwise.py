"""A 20-node fused elementwise expression over a [64, 4096] float tensor on ipu2, 100 times.

Compares the gruc engine (numba backend; the numpy reference engine too) running ``Repeat(100,
map_in_place(expr))`` with numpy evaluating the same expression 100 times on host arrays, in one
run.  Target (issue 2): numba engine <= 1.5x numpy's time.  Writes
``benchmarks/results/elementwise.json``.
"""

from __future__ import annotations

import time

import numpy as np

from _common import median_seconds, parse_no_options, write_result
from gruc import FLOAT, Engine, Graph, Repeat, Sequence, Target
from gruc.ir.expr import _1, _2, Const, num_ops, sigmoid, tanh
from gruc.ops import map_in_place

REPEATS = 100
SHAPE = (64, 4096)


def expression():
    """20 operation nodes: a bounded update that keeps values in range over 100 repeats."""
    a = _1 * Const(0.5) + _2 * Const(0.25)
    b = tanh(a) * Const(0.9) - sigmoid(_2) * Const(0.1)
    c = (b + Const(0.01)) * (_1 - _2) * Const(0.001)
    d = b + c - Const(0.02) * _1 + Const(0.003) * (_2 * _2)
    return d


def numpy_version(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    for _ in range(REPEATS):
        a = x * np.float32(0.5) + y * np.float32(0.25)
        b = np.tanh(a) * np.float32(0.9) - (1 / (1 + np.exp(-y))) * np.float32(0.1)
        c = (b + np.float32(0.01)) * (x - y) * np.float32(0.001)
        x = b + c - np.float32(0.02) * x + np.float32(0.003) * (y * y)
    return x


def build(backend: str):
    graph = Graph(Target.ipu2())
    x = graph.add_variable(FLOAT, SHAPE, "x")
    y = graph.add_variable(FLOAT, SHAPE, "y")
    graph.map_tensor_linearly(x)
    graph.map_tensor_linearly(y)
    body = Sequence()
    map_in_place(graph, expression(), [x, y], body)
    graph.create_host_write("x", x)
    graph.create_host_write("y", y)
    graph.create_host_read("x", x)
    return Engine(graph, Sequence(Repeat(REPEATS, body)), backend=backend)


def main() -> None:
    parse_no_options(__doc__)
    rng = np.random.default_rng(0)
    xv = rng.uniform(-1, 1, SHAPE).astype(np.float32)
    yv = rng.uniform(-1, 1, SHAPE).astype(np.float32)
    results = {}
    for backend in ("numba", "numpy"):
        start = time.perf_counter()
        engine = build(backend)
        compile_seconds = time.perf_counter() - start

        def run(engine=engine):
            engine.write_tensor("x", xv)
            engine.write_tensor("y", yv)
            engine.run()

        seconds = median_seconds(run, repeats=5, warmup=1)
        results[backend] = {"seconds": seconds, "compile_seconds": compile_seconds,
                            "result": engine.read_tensor("x")}
    numpy_seconds = median_seconds(lambda: numpy_version(xv, yv), repeats=5, warmup=1)
    expected = numpy_version(xv, yv)
    for backend in results:
        error = float(np.abs(results[backend].pop("result") - expected).max())
        results[backend]["max_abs_error_vs_numpy"] = error
        results[backend]["ratio_to_numpy"] = results[backend]["seconds"] / numpy_seconds
    payload = {"shape": list(SHAPE), "repeats": REPEATS, "expression_ops": num_ops(expression()),
               "target": "ipu2", "numpy_seconds": numpy_seconds, "engines": results,
               "target_ratio": 1.5}
    path = write_result("elementwise", payload)
    print(f"numpy {numpy_seconds * 1e3:.1f} ms; numba engine "
          f"{results['numba']['seconds'] * 1e3:.1f} ms ({results['numba']['ratio_to_numpy']:.2f}x); "
          f"numpy engine {results['numpy']['seconds'] * 1e3:.1f} ms "
          f"({results['numpy']['ratio_to_numpy']:.2f}x) -> {path}")


if __name__ == "__main__":
    main()
