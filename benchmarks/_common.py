"""Shared helpers of the benchmark scripts: timing and atomic JSON results."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from gruc.runtime.blas import cpu_info
from gruc.files import atomic_file

RESULTS = Path(__file__).resolve().parent / "results"


def parse_no_options(doc: str | None) -> None:
    """The command line of a script that takes no options: ``--help`` prints what it measures
    (its docstring) and exits, and any argument is refused before minutes of measuring begin."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args()


def median_seconds(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs after ``warmup`` untimed runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def gruc_layer(shape: tuple[int, int, int, int], phase: str,
               prepare: Callable[[Any], Any] = lambda data: data) -> tuple[Any, Any, Any, dict]:
    """The reset-after GRU layer of ``shape`` (T, B, I, H) compiled into an engine, with poplibs'
    host data (passed through ``prepare`` first) written, as a training loop would have it on the
    device: the engine, the data, the layer and the seconds building and compiling took.  Imports
    the ``gruc`` this process finds (``ab.py``'s timing processes each find another build)."""
    from gruc import Engine
    from gruc.tools.gru_layer import GruLayerConfig, build_layer, host_data

    steps, batch, inputs, hidden = shape
    config = GruLayerConfig(sequence_size=steps, batch_size=batch, input_size=inputs,
                            output_size=hidden, phase=phase, reset_after=True)
    start = time.perf_counter()
    layer = build_layer(config)
    built = time.perf_counter()
    engine = Engine(layer.graph, layer.programs)
    compiled = time.perf_counter()
    data = prepare(host_data(config)[0])
    values = {"input": data.x, "init_state": data.h0, "input_weights": data.input_weights,
              "output_weights": data.output_weights, "biases": data.biases,
              "grad_output": data.grad_output}
    for name in layer.writes:
        engine.write_tensor(name, values[name])
    return engine, data, layer, {"build_seconds": built - start,
                                 "compile_seconds": compiled - built}


def cpu_model() -> str:
    """The processor's name (results from different machines are not comparable)."""
    return cpu_info("model name") or platform.processor() or "unknown"


def machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "machine": platform.machine(),
            "cpu": cpu_model(), "cpus": os.cpu_count(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%S")}


def write_result(name: str, payload: dict[str, Any]) -> Path:
    """Write ``results/<name>.json`` atomically (a reader never sees a torn file)."""
    target = RESULTS / f"{name}.json"
    with atomic_file(target) as handle:
        json.dump({"benchmark": name, "machine": machine(), **payload}, handle, indent=2,
                  sort_keys=True)
    return target
