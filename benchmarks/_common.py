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
from gruc.runtime.report import atomic_file

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
