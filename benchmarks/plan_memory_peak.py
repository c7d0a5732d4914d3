"""Where a plan's peak memory goes: the Python allocations alive at the peak of one plan, by the
line of gruc that made them.

Planning at IPU-POD scale (``benchmarks/plan.py``'s ``scale``) is bounded by the plan's peak
resident memory, and a peak is made of whatever happens to be alive at one moment, which a
profile of time does not show.  This plans one GRU layer (``plan_config``, the plan a study row
runs) under ``tracemalloc`` (numpy reports its buffers to it) while a thread watches the traced
total and snapshots it each time it grows by :data:`GROWTH` — the last snapshot is the peak's,
within that growth.  The snapshot's allocations are grouped by the innermost line of gruc on
their stack (numpy's own frames skipped, so a ``np.concatenate`` counts where gruc called it).

``python benchmarks/plan_memory_peak.py [--size H] [--phase all|fwd] [--top N]``: a training
layer B = 16, S = 100, I = H on an ipu2 by default (H = 1024: a few minutes under tracing).
Writes ``benchmarks/results/plan_memory_peak.json``.
"""

from __future__ import annotations

import argparse
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path

from _common import write_result
from gruc.plan import plan_config
from gruc.tools.gru_layer import GruLayerConfig

GROWTH = 1.02
"""A new snapshot each time the traced total grows by this factor over the last one's."""

POLL_SECONDS = 0.2

FRAMES = 6
"""Frames kept of each allocation's stack, innermost first: enough to pass numpy's own."""

PACKAGE = str(Path(__file__).resolve().parent.parent / "gruc")


def peak_snapshot(plan) -> tuple[int, tracemalloc.Snapshot]:
    """Run ``plan()`` traced; the traced peak in bytes and the last snapshot taken on the way
    up to it."""
    tracemalloc.start(FRAMES)
    latest: list = [0, None]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            current, _ = tracemalloc.get_traced_memory()
            if current > latest[0] * GROWTH:
                latest[:] = [current, tracemalloc.take_snapshot()]
            time.sleep(POLL_SECONDS)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        plan()
    finally:
        done.set()
        watcher.join()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, latest[1]


def by_gruc_line(snapshot: tracemalloc.Snapshot) -> Counter:
    """Bytes alive in ``snapshot`` by the innermost frame inside gruc that made them."""
    totals: Counter = Counter()
    for statistic in snapshot.statistics("traceback"):
        frame = next((f for f in reversed(statistic.traceback)  # innermost last
                      if f.filename.startswith(PACKAGE)), None)
        where = ("outside gruc" if frame is None
                 else f"{Path(frame.filename).relative_to(Path(PACKAGE).parent)}:{frame.lineno}")
        totals[where] += statistic.size
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1024, help="H = I (default 1024)")
    parser.add_argument("--phase", default="all", choices=("all", "fwd"))
    parser.add_argument("--top", type=int, default=12, help="lines to keep (default 12)")
    args = parser.parse_args()
    config = GruLayerConfig(phase=args.phase, batch_size=16, sequence_size=100,
                            input_size=args.size, output_size=args.size, device_type="ipu2")
    plan_config(config.model_copy(update={"input_size": 8, "output_size": 8}))  # first calls
    peak, snapshot = peak_snapshot(lambda: plan_config(config))
    totals = by_gruc_line(snapshot)
    seen = sum(totals.values())
    lines = [{"where": where, "mb": round(size / 1e6, 1), "share": round(size / seen, 3)}
             for where, size in totals.most_common(args.top)]
    for line in lines:
        print(f"{line['mb']:8.1f} MB  {line['share']:6.1%}  {line['where']}")
    print(f"traced peak {peak / 1e6:.0f} MB; the snapshot holds {seen / 1e6:.0f} MB")
    path = write_result("plan_memory_peak", {
        "layer": {"phase": args.phase, "batch_size": 16, "sequence_size": 100,
                  "input_size": args.size, "output_size": args.size, "device_type": "ipu2"},
        "traced_peak_mb": round(peak / 1e6, 1), "snapshot_mb": round(seen / 1e6, 1),
        "by_line": lines})
    print(f"-> {path}")


if __name__ == "__main__":
    main()
