"""Planning studies: plan-only time per configuration, where it goes, and sweep throughput.

* Plan-only seconds per configuration (median; ``plan_row``, what a sweep runs) of a B x I x H =
  16 x 2 x 8 layer (S = 20) on 20 tiles and of a 64 x 256 x 256, S = 100 layer on an ipu2
  (target: <= 1 s), with the engine's default pipeline (what a run compiles) and with none
  (``--pipeline ''``); and of the same ipu2 layer with a batch of 4,096, near the largest that
  fits (default pipeline).
* The ipu2 layer's time by phase: build, each pass of the default pipeline, verify, liveness +
  memory plan, step costs, static step counts — and the lowering a run adds on top, which
  plan-only skips.
* Sweep throughput in configurations per minute, serial and on a local pool of two processes
  (worker start-up included), for small layers on 20 tiles and for ipu2 layers.
* The README's ``--find-max batch-size`` search on the ipu2 layer: its answer, how many layers it
  planned and in how many seconds.
* Planning at scale, against the targets of planning at IPU-POD scale: the CPU seconds and peak
  RSS of one ``gruc plan gru`` (its row's ``cpu_seconds`` and ``peak_rss_bytes``, each layer in
  a fresh process) of the largest training layer that fits one ipu2 (H = I = 2759, B = 16,
  S = 100; target <= 10 s and <= 1 GB), and of a forward layer (H = I = 256, B = 16) at S = 100
  and S = 10,000 under the default shard heuristic (target: S = 10,000 / S = 100 <= 1.2); the
  training layer of that size at S = 100, 10,000 and 100,000 (past 2^32 elements: a graph must
  hold what an IPU-POD16 could).

Writes ``benchmarks/results/plan.json``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time

from _common import median_seconds, parse_no_options, write_result
from gruc.ir.module import Module
from gruc.ir.verify import verify
from gruc.memory.planner import plan_memory
from gruc.passes import DEFAULT_PIPELINE
from gruc.passes.pipeline import run_pipeline
from gruc.plan import (ProcessExecutor, SerialExecutor, StaticProgram, SweepSpec, find_max,
                       plan_row, run_sweep)
from gruc.runtime.cost import step_costs
from gruc.runtime.lower import lower
from gruc.tools.gru_layer import GruLayerConfig, build_layer

SMALL = GruLayerConfig(batch_size=16, input_size=2, output_size=8, sequence_size=20,
                       tiles_per_ipu=20)
IPU2 = GruLayerConfig(batch_size=64, input_size=256, output_size=256, sequence_size=100)
LARGE = IPU2.model_copy(update={"batch_size": 4096})
"""The largest batches a ``--find-max batch-size`` search of the README's layer probes."""

SMALL_SWEEP = SweepSpec(fixed={"input_size": 2, "tiles_per_ipu": 20},
                        swept={"batch_size": (4, 8, 16, 32), "output_size": (8, 16, 32),
                               "sequence_size": (10, 20), "shards": (1, 2)})
IPU2_SWEEP = SweepSpec(fixed={"input_size": 256, "sequence_size": 100},
                       swept={"batch_size": (16, 64), "output_size": (128, 256),
                              "shards": (1, 2)})
IPU2_SWEEP_DEFAULT_PIPELINE = SweepSpec(fixed={"input_size": 256, "output_size": 256,
                                               "sequence_size": 100},
                                        swept={"batch_size": (16, 64), "shards": (1, 2)})


def phases(config: GruLayerConfig, repeats: int = 3) -> dict[str, float]:
    """Median seconds of each compile phase of ``config`` (plan-only ones, then lowering)."""
    times: dict[str, list[float]] = {}

    def timed(name: str, work):
        begin = time.perf_counter()
        result = work()
        times.setdefault(name, []).append(time.perf_counter() - begin)
        return result

    for _ in range(repeats):
        layer = timed("build", lambda: build_layer(config))
        run = run_pipeline(Module(layer.graph, layer.programs), DEFAULT_PIPELINE, time_passes=True)
        for name, seconds in run.timings:
            times.setdefault(f"pass {name}", []).append(seconds)
        module = run.module
        timed("verify", lambda: verify(module))
        plan = timed("liveness_and_memory_plan", lambda: plan_memory(module))
        timed("step_costs", lambda: step_costs(module.graph, plan.liveness.steps))
        timed("static_counts", lambda: StaticProgram(plan.liveness).step_counts())
        timed("lowering_skipped_by_plan_only", lambda: lower(module, plan))
    return {name: round(statistics.median(values), 4) for name, values in times.items()}


def throughput(spec: SweepSpec, executor) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        try:
            result = run_sweep(spec, out, executor=executor, progress=False)
        finally:
            executor.close()
    return {"configurations": result.computed, "seconds": round(result.seconds, 3),
            "configurations_per_minute": round(result.configs_per_minute, 1)}


def batch_search() -> dict[str, float]:
    """``gruc plan --find-max batch-size --input-size 256 --output-size 256
    --sequence-size 100``."""
    spec = SweepSpec(fixed={"input_size": 256, "output_size": 256, "sequence_size": 100})
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        (result,) = find_max(spec, "batch_size", out, progress=False)
        seconds = time.perf_counter() - start
    return {"largest_batch_that_fits": result.value, "plans": len(result.probes),
            "seconds": round(seconds, 1)}


SCALE_LAYERS = {
    "training_H2759_B16_S100_ipu2": ["--phase", "all", "--batch-size", "16", "--sequence-size",
                                     "100", "--input-size", "2759", "--output-size", "2759"],
    "forward_H256_B16_S100_ipu2": ["--batch-size", "16", "--sequence-size", "100",
                                   "--input-size", "256", "--output-size", "256"],
    "forward_H256_B16_S10000_ipu2": ["--batch-size", "16", "--sequence-size", "10000",
                                     "--input-size", "256", "--output-size", "256"],
    **{f"training_H256_B16_S{steps}_ipu2": [
        "--phase", "all", "--batch-size", "16", "--sequence-size", str(steps), "--input-size",
        "256", "--output-size", "256"] for steps in (100, 10000, 100000)},
}
"""Layers planned at scale (``gruc plan gru`` flags, on the default ipu2)."""


def plan_at_scale(flags: list[str]) -> dict[str, float]:
    """One ``gruc plan gru`` of a layer in a fresh process: its row's CPU seconds and peak RSS
    (the plan's own, ``peak_rss_scope`` plan), whether it fits and its shards."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-m", "gruc", "plan", "gru", *flags, "--jobs", "1",
                        "--out", out], check=True, capture_output=True, text=True)
        with open(f"{out}/rows.json", encoding="utf-8") as file:
            (row,) = json.load(file)
    return {"cpu_seconds": row["cpu_seconds"], "peak_rss_mb": round(row["peak_rss_bytes"] / 2**20),
            "fits": row["fits"], "shards": row["shards_chosen"]}


def scale() -> dict[str, object]:
    """:data:`SCALE_LAYERS` planned, with the targets beside them."""
    planned = {name: plan_at_scale(flags) for name, flags in SCALE_LAYERS.items()}
    def ratio(phase: str) -> dict[str, float]:
        short, long = (planned[f"{phase}_H256_B16_S{s}_ipu2"] for s in (100, 10000))
        return {"cpu": round(long["cpu_seconds"] / short["cpu_seconds"], 2),
                "rss": round(long["peak_rss_mb"] / short["peak_rss_mb"], 2)}

    return {"layers": planned, "S10000_over_S100": ratio("forward"),
            "training_S10000_over_S100": ratio("training"),
            "targets": {"training_H2759_B16_S100_ipu2": {"cpu_seconds": 10, "peak_rss_mb": 1024},
                        "S10000_over_S100": 1.2}}


def main() -> None:
    parse_no_options(__doc__)
    plan_row(SMALL)  # imports and first-call costs out of the way
    per_configuration = {}
    for name, config, repeats in [("16x2x8_S20_on_20_tiles", SMALL, 5),
                                  ("64x256x256_S100_on_ipu2", IPU2, 3)]:
        for label, pipeline in [("default_pipeline", None), ("no_pipeline", "")]:
            seconds = median_seconds(lambda: plan_row(config, (), pipeline), repeats=repeats)
            per_configuration[f"{name}/{label}"] = round(seconds, 4)
    seconds = median_seconds(lambda: plan_row(LARGE), repeats=3)
    per_configuration["4096x256x256_S100_on_ipu2/default_pipeline"] = round(seconds, 4)
    no_pipeline = IPU2_SWEEP.model_copy(update={"pipeline": ""})
    result = {
        "plan_only_seconds_per_configuration": per_configuration,
        "target_seconds_ipu2": 1.0,
        "ipu2_phases_seconds": phases(IPU2),
        "sweeps": {
            "small_20_tiles/serial": throughput(SMALL_SWEEP, SerialExecutor()),
            "small_20_tiles/pool_2": throughput(SMALL_SWEEP, ProcessExecutor(2)),
            "ipu2_no_pipeline/serial": throughput(no_pipeline, SerialExecutor()),
            "ipu2_no_pipeline/pool_2": throughput(no_pipeline, ProcessExecutor(2)),
            "ipu2/serial": throughput(IPU2_SWEEP_DEFAULT_PIPELINE, SerialExecutor()),
            "ipu2/pool_2": throughput(IPU2_SWEEP_DEFAULT_PIPELINE, ProcessExecutor(2)),
        },
        "find_max_batch_ipu2_256x256_S100": batch_search(),
        "scale": scale(),
    }
    path = write_result("plan", result)
    for name, seconds in per_configuration.items():
        print(f"plan-only {name}: {seconds:.3f} s per configuration")
    print(f"ipu2 phases: {result['ipu2_phases_seconds']}")
    for name, sweep in result["sweeps"].items():
        print(f"sweep {name}: {sweep['configurations']} configurations in {sweep['seconds']} s = "
              f"{sweep['configurations_per_minute']} per minute")
    search = result["find_max_batch_ipu2_256x256_S100"]
    print(f"find-max batch: {search['largest_batch_that_fits']} after {search['plans']} plans in "
          f"{search['seconds']} s")
    for name, row in result["scale"]["layers"].items():
        print(f"plan at scale {name}: {row['cpu_seconds']} s CPU, {row['peak_rss_mb']} MB peak RSS")
    print(f"S = 10,000 / S = 100: {result['scale']['S10000_over_S100']} (forward), "
          f"{result['scale']['training_S10000_over_S100']} (training)")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
