"""What each pass buys on GRU forward+backward+WU programs: supersteps, memory, cycles — and
identical results.

For each program, the same graph is compiled with no passes, with each pass alone, and with the
default pipeline (``gruc.passes.DEFAULT_PIPELINE``; also followed by ``exchange``), run once on the
numba engine with poplibs' random host data, and compared with the no-pass run:

* ``compute_sets``: distinct compute sets the program executes; ``supersteps_per_time_step``:
  ``Execute`` and ``Copy`` steps in the first time loop's body (each is one BSP superstep, one sync);
  ``syncs``: synchronisations over the whole run;
* ``max_tile_bytes`` (highest address on any tile, gaps included), ``max_not_always_live_bytes``
  (per-tile peak of the not-always-live variables, worst tile), ``allocated_bytes`` (all blocks);
* ``cycles`` by kind, ``exchange_bytes``, and the pipeline's wall time;
* ``identical``: every output equal to the no-pass run's bit for bit (``max_abs_difference`` too).

Programs: the 40x4x38 (S=2) layer on 16 tiles and the 16x2x8 S=200 layer on 20 tiles, both
``phase="all"`` (forward, backward and weight update in one program), and an elementwise chain
whose temporaries dominate memory.

``shard`` section: the 16x2x8 S=200 ``phase="all"`` layer built with one shard and split by
``shard{num-shards=N}`` for N = 1, 3, 5 (and the heuristic, ``shard``): ``identical`` to the
unsharded run, ``peak_sequence_bytes_per_tile`` (the busiest tile's bytes of the sequence tensors,
:func:`gruc.passes.shard.sequence_variables`), ``max_tile_bytes`` and ``cycles``; the layer built
with ``shards=N`` by the builder is measured beside it (``built``).
Writes ``benchmarks/results/passes.json``.
"""

from __future__ import annotations

import time

import numpy as np

from _common import parse_no_options, write_result
from gruc import FLOAT, Engine, Graph, Sequence, Target
from gruc.ir.expr import _1, _2, Const, sigmoid, tanh
from gruc.ir.module import Module
from gruc.ir.program import Copy, Execute, Repeat
from gruc.ops import map
from gruc.passes import DEFAULT_PIPELINE
from gruc.passes.pipeline import run_pipeline
from gruc.passes.shard import sequence_variables
from gruc.tools.gru_layer import GruLayerConfig, build_layer, host_data

PIPELINES = ["", "canonicalize", "inplace-fusion", "copy-elim", "dce", "exchange",
             DEFAULT_PIPELINE, DEFAULT_PIPELINE + ",exchange"]

LAYERS = {
    "gru_all_40x4x38_S2_16tiles": GruLayerConfig(
        sequence_size=2, input_size=40, output_size=38, batch_size=4, tiles_per_ipu=16,
        phase="all"),
    "gru_all_16x2x8_S200_20tiles": GruLayerConfig(
        sequence_size=200, input_size=16, output_size=8, batch_size=2, tiles_per_ipu=20,
        shards=1, phase="all"),
}
SHARD_LAYER = LAYERS["gru_all_16x2x8_S200_20tiles"]


def gru_program(config: GruLayerConfig):
    """A fresh build of the layer: graph, programs, host data and the outputs to compare."""
    layer = build_layer(config)
    data, _ = host_data(config)
    known = {"input": data.x, "init_state": data.h0, "input_weights": data.input_weights,
             "output_weights": data.output_weights, "biases": data.biases}
    rng = np.random.default_rng(config.seed)  # the output gradient of the backward phases
    values = {name: known.get(name, rng.uniform(-1, 1, tensor.shape))
              for name, tensor in layer.writes.items()}
    return layer.graph, layer.programs, values, list(layer.reads)


def elementwise_chain():
    """sigmoid(x + b) (broadcast bias: two compute sets), halved, then tanh(.) + x, in a loop."""
    graph = Graph(Target.custom(tiles_per_ipu=16))
    x = graph.add_variable(FLOAT, (64, 512), "x")
    graph.map_tensor_linearly(x)
    b = graph.add_variable(FLOAT, (512,), "b")
    graph.map_tensor_linearly(b)
    body = Sequence()
    gate = map(graph, sigmoid(_1 + _2), [x, b], body, "gate")
    scaled = map(graph, _1 * Const(0.5), [gate], body, "scaled")
    out = map(graph, tanh(_1) + _2, [scaled, x], body, "out")
    body.add(Copy(out, x))
    graph.create_host_write("x", x)
    graph.create_host_write("b", b)
    graph.create_host_read("x", x)
    rng = np.random.default_rng(0)
    values = {"x": rng.uniform(-1, 1, (64, 512)), "b": rng.uniform(-1, 1, 512)}
    return graph, [Sequence(Repeat(10, body))], values, ["x"]


def supersteps_per_time_step(module: Module) -> int:
    loop = next((n for n in module.walk() if isinstance(n, Repeat)), None)
    return 0 if loop is None else sum(isinstance(n, (Execute, Copy)) for n in loop.body.walk())


def measure(build, pipeline: str) -> tuple[dict, dict[str, np.ndarray]]:
    graph, programs, values, outputs = build()
    sequences = sequence_variables(Module(graph, programs))
    start = time.perf_counter()
    module = run_pipeline(Module(graph, programs), pipeline).module if pipeline else \
        Module(graph, programs)
    pass_seconds = time.perf_counter() - start
    engine = Engine(module.graph, module.programs, pipeline="")  # shard returns a graph copy
    for name, value in values.items():
        engine.write_tensor(name, value)
    engine.run()
    report = engine.report
    cycles = report.cycles
    executed = {id(n.compute_set) for n in module.walk() if isinstance(n, Execute)}
    row = {
        "compute_sets": len(executed),
        "supersteps_per_time_step": supersteps_per_time_step(module),
        "syncs": int(sum(count for count, cost in zip(report.step_counts.tolist(), report.costs)
                         if cost.sync_cycles)),
        "max_tile_bytes": report.max_tile_bytes,
        "max_not_always_live_bytes": int(report.not_always_live_max_bytes.max()),
        "allocated_bytes": int(engine.plan.block_size.sum()),
        "cycles": {"compute": cycles.compute, "exchange": cycles.exchange, "sync": cycles.sync,
                   "total": cycles.total},
        "exchange_bytes": report.exchange_bytes,
        "pipeline_seconds": round(pass_seconds, 4),
        "time_loops": sum(isinstance(n, Repeat) for n in module.walk()),
        "peak_sequence_bytes_per_tile": peak_sequence_bytes(engine.plan, sequences),
    }
    return row, {name: engine.read_tensor(name) for name in outputs}


def peak_sequence_bytes(plan, sequences) -> int:
    """The busiest tile's bytes of the sequence tensors (variable indices survive shard's copy)."""
    per_tile = np.zeros(plan.num_tiles, dtype=np.int64)
    for variable in sequences:
        for tile, _, nbytes in plan.blocks(variable.index):
            per_tile[tile] += nbytes
    return int(per_tile.max())


def compare(row: dict, outputs: dict, baseline: dict) -> dict:
    row["identical"] = all(np.array_equal(outputs[k], baseline[k]) for k in outputs)
    row["max_abs_difference"] = max(
        float(np.max(np.abs(outputs[k].astype(np.float64) - baseline[k]))) for k in outputs)
    return row


def shard_section() -> dict:
    """shard{num-shards=N} on the one-shard layer, against the unsharded run and the builder."""
    rows = {}
    _, baseline = measure(lambda: gru_program(SHARD_LAYER), "")
    for count in (1, 3, 5, None):
        pipeline = "shard" if count is None else f"shard{{num-shards={count}}}"
        row, outputs = measure(lambda: gru_program(SHARD_LAYER), pipeline)
        rows[pipeline] = compare(row, outputs, baseline)
        if count is not None:
            config = SHARD_LAYER.model_copy(update={"shards": count})
            built, outputs = measure(lambda: gru_program(config), "")
            rows[f"built shards={count}"] = compare(built, outputs, baseline)
    for name, row in rows.items():
        print(f"shard {name:24s} loops={row['time_loops']:3d} "
              f"seq/tile={row['peak_sequence_bytes_per_tile']:6d} "
              f"max_tile={row['max_tile_bytes']:6d} cycles={row['cycles']['total']:8d} "
              f"identical={row['identical']}")
    return rows


def main() -> None:
    parse_no_options(__doc__)
    programs = {name: (lambda config=config: gru_program(config))
                for name, config in LAYERS.items()}
    programs["elementwise_chain_64x512_16tiles"] = elementwise_chain
    results = {}
    for name, build in programs.items():
        rows = {}
        baseline = None
        for pipeline in PIPELINES:
            row, outputs = measure(build, pipeline)
            if baseline is None:
                baseline = outputs
            rows[pipeline or "none"] = compare(row, outputs, baseline)
            print(f"{name:38s} {pipeline or 'none':52s} cs={row['compute_sets']:3d} "
                  f"steps/t={row['supersteps_per_time_step']:3d} syncs={row['syncs']:6d} "
                  f"max_tile={row['max_tile_bytes']:7d} nal={row['max_not_always_live_bytes']:6d} "
                  f"cycles={row['cycles']['total']:8d} identical={row['identical']}")
        results[name] = rows
    path = write_result("passes", {"backend": "numba", "default_pipeline": DEFAULT_PIPELINE,
                                   "programs": results, "shard": {
                                       "layer": "gru_all_16x2x8_S200_20tiles",
                                       "rows": shard_section()}})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
