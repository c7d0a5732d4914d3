"""IR at ipu2 scale: map a [1000, 64, 256] float tensor linearly and query 1,000 slice mappings.

Target (issue 1): the whole script under 1 s on a 2-core machine.  Writes
``benchmarks/results/ir_scale.json``.
"""

from __future__ import annotations

import time

import numpy as np

from _common import parse_no_options, write_result
from gruc import FLOAT, Graph, Target


def main() -> None:
    parse_no_options(__doc__)
    start = time.perf_counter()
    graph = Graph(Target.ipu2())
    big = graph.add_variable(FLOAT, (1000, 64, 256), "big")
    graph.map_tensor_linearly(big)
    mapped = time.perf_counter()
    rng = np.random.default_rng(0)
    tiles_touched = 0
    for k in range(1000):
        kind = k % 4
        if kind == 0:
            view = big[int(rng.integers(1000))]
        elif kind == 1:
            b = int(rng.integers(990))
            view = big.slice(b, b + 10, 0)[:, int(rng.integers(64))]
        elif kind == 2:
            view = big[int(rng.integers(1000)), :, ::-2].transpose()
        else:
            view = big.slice(int(rng.integers(200)), 256, 2)[int(rng.integers(1000)), 8:40]
        tiles_touched += len(graph.get_tile_mapping(view).tiles_used())
    queried = time.perf_counter()
    result = {
        "shape": [1000, 64, 256], "target": "ipu2", "slices_queried": 1000,
        "map_seconds": mapped - start, "query_seconds": queried - mapped,
        "total_seconds": queried - start, "target_seconds": 1.0,
        "tiles_touched_total": tiles_touched,
    }
    path = write_result("ir_scale", result)
    print(f"map {result['map_seconds']:.3f} s, 1000 queries {result['query_seconds']:.3f} s, "
          f"total {result['total_seconds']:.3f} s (target < 1 s) -> {path}")


if __name__ == "__main__":
    main()
