"""Compile time of a GRU training layer against its sequence length.

The layer (forward + backward + weight update, 64x256x256 — batch 64, input 256, hidden 256 — on
``Target.ipu2()``, default pipeline) is built and compiled for each sequence length ``S`` in a
fresh process (nothing cached in memory; numba kernels from the on-disk cache, as for a user's
second run), measuring:

* ``build_seconds``: recording the graph and programs (``build_layer``);
* ``plan_seconds``: passes, verification, memory plan and cost model (``compile_program``, what a
  planning study pays per configuration);
* ``engine_seconds``: a whole ``Engine(...)`` — the above but the step costs (an engine leaves
  them to its report, which estimates them when first asked), plus lowering to addresses and
  preparing kernels — and ``peak_rss_mb`` of the process.

The loop body does not grow with ``S``, so an ideal compiler's time would not either; the ratio
``S=2000 / S=20`` of build + engine seconds says how far gruc is from that.  Each length is
measured ``--repeats`` times, the lengths interleaved (a slow spell of a shared machine lands on
all of them, not one); each figure is the median of its repeats, and the fastest repeat's build
+ engine seconds are kept too (the least disturbed by the rest of the machine).  A length whose
process fails or exceeds ``--timeout`` seconds or ``--memory-gb`` is recorded as such, not
dropped.  Writes ``benchmarks/results/compile.json``.
``python benchmarks/compile.py [--lengths 20,200,2000] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

from _common import write_result

SHAPE = {"batch_size": 64, "input_size": 256, "output_size": 256}

CHILD = """
import json, resource, time
from gruc import Engine
from gruc.tools.gru_layer import GruLayerConfig, build_layer
from gruc.runtime.engine import compile_program
config = GruLayerConfig(sequence_size={length}, phase="all", **{shape})
start = time.perf_counter()
layer = build_layer(config)
built = time.perf_counter()
compile_program(layer.graph, layer.programs)
planned = time.perf_counter()
Engine(layer.graph, layer.programs)
done = time.perf_counter()
print(json.dumps({{"build_seconds": built - start, "plan_seconds": planned - built,
                  "engine_seconds": done - planned,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def measure(length: int, timeout: float, memory_gb: float) -> dict:
    limit = int(memory_gb * 2 ** 30)

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", CHILD.format(length=length, shape=SHAPE)],
                              capture_output=True, text=True, timeout=timeout,
                              preexec_fn=cap_memory)
    except subprocess.TimeoutExpired:
        return {"S": length, "failed": f"over the {timeout:.0f} s timeout"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return {"S": length, "failed": f"exit {done.returncode} after "
                                       f"{time.perf_counter() - start:.0f} s "
                                       f"(memory cap {memory_gb} GB): {last}"}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["build_and_compile_seconds"] = result["build_seconds"] + result["engine_seconds"]
    return {"S": length, **result}


def median_row(runs: list[dict]) -> dict:
    """One length's repeats folded into their medians (the first failure, if any run failed)."""
    failed = [run for run in runs if "failed" in run]
    if failed:
        return failed[0]
    keys = [key for key in runs[0] if key != "S"]
    return {"S": runs[0]["S"], "repeats": len(runs),
            **{key: round(statistics.median(run[key] for run in runs), 3) for key in keys},
            "fastest_build_and_compile_seconds":
                round(min(run["build_and_compile_seconds"] for run in runs), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="20,200,2000")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--memory-gb", type=float, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    lengths = [int(s) for s in args.lengths.split(",")]
    runs: dict[int, list[dict]] = {length: [] for length in lengths}
    for _ in range(args.repeats):
        for length in lengths:
            runs[length].append(measure(length, args.timeout, args.memory_gb))
    rows = [median_row(runs[length]) for length in lengths]
    for row in rows:
        if "failed" in row:
            print(f"S={row['S']:>5}: failed: {row['failed']}")
        else:
            print(f"S={row['S']:>5}: build {row['build_seconds']:6.2f} s  plan "
                  f"{row['plan_seconds']:6.2f} s  engine {row['engine_seconds']:6.2f} s  "
                  f"peak {row['peak_rss_mb']:7.0f} MB")
    first, last = rows[0], rows[-1]
    ratios = {}
    for figure, name in (("build_and_compile_seconds", "ratio"),
                         ("fastest_build_and_compile_seconds", "fastest_ratio")):
        ratios[f"{name}_S{last['S']}_over_S{first['S']}"] = \
            round(last[figure] / first[figure], 2) if figure in first and figure in last else None
    print(f"build + compile S={last['S']} / S={first['S']}: " + ", ".join(
        f"{name.split('_S')[0]} {value}" for name, value in ratios.items()))
    write_result("compile", {"layer": {**SHAPE, "phase": "all", "target": "ipu2"},
                             "results": rows, **ratios})


if __name__ == "__main__":
    main()
