"""A tile-memory planning study: how many time shards does a long-sequence GRU need to fit?

A small GRU layer (B=2, I=H=16) over thousands of steps puts very little on each tile per step,
so without sharding every step's slice of the input, output and intermediates sequences lands on
the same few tiles and those tiles overflow long before the chip is full.  poplibs' answer is
sequence sharding: split the time loop into shards whose sequences live on disjoint tile sets.
This study plans the layer for a grid of sequence lengths × shard counts on a 64-tile target
without running anything (:mod:`gruc.plan`: compile, memory plan and static cycle counts), then
reports, per sequence length, the fewest shards that fit and what more shards cost in cycles.
Up to 15 shards the cost is nearly nil; beyond that poplibs' default switches to code reuse (one
loop body called from every shard, so the program stays small), which costs about a quarter more
cycles here (``code_reuse=False`` in ``fixed`` trades that back for program size).  Rows go to
``rows.csv`` / ``rows.json`` (a rerun resumes from them) and the metrics are plotted with the tile
capacity marked.

The same study from the command line: ``gruc plan --sequence-size 2000,8000 --shards 1,4,16,32
--input-size 16 --output-size 16 --batch-size 2 --tiles-per-ipu 64 --out study``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from gruc.plan import SweepSpec, make_executor, plot_metrics, run_sweep


def main(out: str | Path | None = None, tiles: int = 64, sequences: tuple[int, ...] = (2000, 8000),
         shards: tuple[int, ...] = (1, 4, 16, 32), jobs: int | None = None,
         plots: bool = True) -> list[dict]:
    out = Path(out or tempfile.mkdtemp(prefix="gruc-planning-"))
    spec = SweepSpec(fixed={"tiles_per_ipu": tiles, "batch_size": 2, "input_size": 16,
                            "output_size": 16},
                     swept={"sequence_size": sequences, "shards": shards})
    result = run_sweep(spec, out, executor=make_executor(jobs), progress=False)
    print(f"{len(result.rows)} plans ({result.computed} computed, {result.skipped} resumed) "
          f"in {result.seconds:.1f} s → {out}")
    print(f"{'steps':>6} {'shards':>6} {'fits':>5} {'max tile B':>11} {'always-live B':>14} "
          f"{'cycles':>10} {'compute':>9} {'exchange':>9} {'sync':>9}")
    for row in result.rows:
        if row["error"]:
            print(f"{row['sequence_size']:>6} {row['shards']:>6}  refused: {row['error']}")
            continue
        print(f"{row['sequence_size']:>6} {row['shards']:>6} {str(row['fits']):>5} "
              f"{row['max_tile_bytes']:>11} {row['always_live_bytes']:>14} "
              f"{row['cycles_total']:>10} {row['cycles_compute']:>9} "
              f"{row['cycles_exchange']:>9} {row['cycles_sync']:>9}")
    for steps in sequences:
        fitting = [r for r in result.rows
                   if r["sequence_size"] == steps and not r["error"] and r["fits"]]
        if not fitting:
            print(f"{steps} steps: no shard count tried fits on {tiles} tiles")
            continue
        best = min(fitting, key=lambda r: r["shards"])
        most = max(fitting, key=lambda r: r["shards"])
        print(f"{steps} steps: fits from {best['shards']} shard(s) "
              f"(max tile {best['max_tile_bytes']} of {best['bytes_per_tile']} B); "
              f"{most['shards']} shards cost {most['cycles_total'] / best['cycles_total']:.2f}× "
              f"its cycles")
    if plots:
        for path in plot_metrics(result.rows, spec.parameters, out, "GRU layer"):
            print(f"plot: {path}")
    return result.rows


if __name__ == "__main__":
    main()
