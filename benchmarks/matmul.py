"""Planned matmuls on ipu2 against ``numpy.matmul`` on the same operands.

For each shape, A and B are created with ``create_mat_mul_input_lhs`` / ``_rhs`` (laid out as the
plan wants), written once, and the engine (numba backend) runs the product: every tile's partial
product read from and written to simulated tile memory, then the reduction over the k split.
One engine run is timed against one ``numpy.matmul`` of host float32 arrays (medians of several
runs).  Target (issue 3, part 2): engine <= 2x numpy.  Also measured: the per-execution overhead
of a tiny matmul run 1000 times in a ``Repeat`` (a GRU runs hundreds of matmuls per sequence).
Writes ``benchmarks/results/matmul.json``.

BLAS runs single-threaded on both sides (numpy's OpenBLAS; the engine's products are MKL's where
installed, see :mod:`gruc.runtime.blas`) unless ``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS`` say
otherwise: the comparison is about what the engine adds around the products, and a threaded BLAS
on a small shared machine makes both timings erratic (tens of times slower at random).  The JSON
records the settings used.
"""

from __future__ import annotations

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):  # before numpy loads its BLAS
    os.environ.setdefault(_variable, "1")

import time  # noqa: E402

import numpy as np  # noqa: E402

from _common import median_seconds, parse_no_options, write_result  # noqa: E402
from gruc import FLOAT, Engine, Graph, Repeat, Sequence, Target  # noqa: E402
from gruc.runtime.blas import library_name  # noqa: E402
from gruc.ops.matmul import (create_mat_mul_input_lhs, create_mat_mul_input_rhs,  # noqa: E402
                             mat_mul, plan_mat_mul)

SHAPES = [((64, 512), (512, 768)), ((32, 1024), (1024, 1536)), ((128, 2048), (2048, 3072))]
TARGET_RATIO = 2.0
OVERHEAD_SHAPE = ((4, 8), (8, 8))
OVERHEAD_REPEATS = 1000


def build(target: Target, a_shape, b_shape, repeats: int = 1) -> Engine:
    graph = Graph(target)
    a = create_mat_mul_input_lhs(graph, FLOAT, a_shape, b_shape, "a")
    b = create_mat_mul_input_rhs(graph, FLOAT, a_shape, b_shape, "b")
    body = Sequence()
    c = mat_mul(graph, a, b, body, name="c")
    graph.create_host_write("a", a)
    graph.create_host_write("b", b)
    graph.create_host_read("c", c)
    program = body if repeats == 1 else Sequence(Repeat(repeats, body))
    return Engine(graph, program, backend="numba")


def measure(target: Target, a_shape, b_shape, rng) -> dict:
    a = rng.uniform(-1, 1, a_shape).astype(np.float32)
    b = rng.uniform(-1, 1, b_shape).astype(np.float32)
    start = time.perf_counter()
    engine = build(target, a_shape, b_shape)
    compile_seconds = time.perf_counter() - start
    engine.write_tensor("a", a)
    engine.write_tensor("b", b)
    seconds = median_seconds(engine.run, repeats=7, warmup=2)
    numpy_seconds = median_seconds(lambda: np.matmul(a, b), repeats=7, warmup=2)

    def with_io():
        engine.write_tensor("a", a)
        engine.write_tensor("b", b)
        engine.run()
        return engine.read_tensor("c")

    io_seconds = median_seconds(with_io, repeats=5, warmup=1)
    result = engine.read_tensor("c")
    exact = a.astype(np.float64) @ b.astype(np.float64)
    plan = plan_mat_mul(target, FLOAT, a_shape, b_shape)
    report = engine.report
    cycles = report.cycles
    runs = int(report.step_counts.max())
    return {
        "a_shape": list(a_shape), "b_shape": list(b_shape),
        "engine_seconds": seconds, "numpy_seconds": numpy_seconds,
        "ratio_to_numpy": seconds / numpy_seconds,
        "engine_seconds_with_host_io": io_seconds,
        "compile_seconds": compile_seconds,
        "max_abs_error_vs_float64": float(np.abs(result - exact).max()),
        "numpy_max_abs_error_vs_float64": float(np.abs(np.matmul(a, b) - exact).max()),
        "plan": {"block_gmkn": list(plan.block), "serial_slices": plan.serial,
                 "tiles": plan.num_tiles, "direct": plan.direct,
                 "estimated_cycles": plan.cycles,
                 "estimated_temporary_bytes_per_tile": plan.temporary_bytes},
        "per_run": {"cycles_total": cycles.total // runs, "cycles_compute": cycles.compute // runs,
                    "cycles_exchange": cycles.exchange // runs, "cycles_sync": cycles.sync // runs,
                    "exchange_bytes": report.exchange_bytes // runs},
        "max_not_always_live_bytes_per_tile": int(report.not_always_live_max_bytes.max()),
    }


def overhead(target: Target, rng) -> dict:
    """Seconds per execution of a tiny matmul inside a Repeat: the engine's fixed cost."""
    a_shape, b_shape = OVERHEAD_SHAPE
    engine = build(target, a_shape, b_shape, repeats=OVERHEAD_REPEATS)
    engine.write_tensor("a", rng.uniform(-1, 1, a_shape))
    engine.write_tensor("b", rng.uniform(-1, 1, b_shape))
    seconds = median_seconds(engine.run, repeats=5, warmup=1)
    steps = len(engine.plan.liveness.steps)
    return {"a_shape": list(a_shape), "b_shape": list(b_shape), "repeats": OVERHEAD_REPEATS,
            "steps_per_matmul": steps, "microseconds_per_matmul": seconds / OVERHEAD_REPEATS * 1e6,
            "numpy_microseconds_per_matmul": median_seconds(
                lambda: np.matmul(np.ones(a_shape, np.float32), np.ones(b_shape, np.float32)),
                repeats=7, warmup=1) * 1e6}


def main() -> None:
    parse_no_options(__doc__)
    rng = np.random.default_rng(0)
    target = Target.ipu2()
    shapes = [measure(target, a_shape, b_shape, rng) for a_shape, b_shape in SHAPES]
    payload = {"target": "ipu2", "backend": "numba", "gruc_products": library_name(),
               "target_ratio": TARGET_RATIO,
               "blas_threads": {name: os.environ.get(name) for name in
                                ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")},
               "shapes": shapes, "overhead": overhead(target, rng)}
    path = write_result("matmul", payload)
    for row in shapes:
        print(f"{row['a_shape']} x {row['b_shape']}: engine {row['engine_seconds'] * 1e3:.2f} ms, "
              f"numpy {row['numpy_seconds'] * 1e3:.2f} ms ({row['ratio_to_numpy']:.2f}x); plan "
              f"{row['plan']['block_gmkn']} on {row['plan']['tiles']} tiles, compile "
              f"{row['compile_seconds']:.2f} s")
    print(f"overhead: {payload['overhead']['microseconds_per_matmul']:.1f} us per tiny matmul "
          f"-> {path}")


if __name__ == "__main__":
    main()
