"""Plan-only GRU layers: the report a run of ``gruc gru`` would give, without running it.

:func:`plan_layer` builds the layer exactly as :func:`~gruc.popnn.gru_layer.run_layer` does,
compiles it with the same pipeline (the engine's default unless told otherwise) up to the memory
plan and step costs — no lowering, no kernels — and counts steps statically
(:mod:`gruc.plan.static`).  The only data-dependent control flow of the layer is the time loop of
each shard when rows have lengths (``--variable-time-steps`` or ``--with-real-time-steps``): a
``RepeatWhileTrue`` that runs ``clamp(max(lengths) - begin, 0, steps)`` times for a shard of
``steps`` steps starting at ``begin`` — the loop limit the layer itself computes on tile 0, in
either direction.  The layer's program holds one forward time loop per shard (shards in order)
and, for the training phases, one or two reverse loops per shard (shards in reverse order).  The
lengths are the ones a run writes: the flag's values, or for real time steps the seeded random
lengths of :func:`~gruc.popnn.gru_layer.host_data` — so the plan equals the run exactly, not
under a maximum-length assumption.

:func:`plan_row` flattens a plan into one sweep row (:data:`ROW_COLUMNS`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

import gruc
from gruc.errors import GrucError, GrucProgramError
from gruc.ir.module import Module
from gruc.rnn_geometry import shard_time_bounds
from gruc.passes import DEFAULT_PIPELINE
from gruc.passes.steps import Step
from gruc.passes.pipeline import format_pipeline, parse_pipeline
from gruc.passes.shard import Shard, shard_count
from gruc.plan.rows import HOST_MEMORY_ERROR, short_text
from gruc.plan.static import StaticProgram, plan_report
from gruc.popnn.gru_layer import GruLayer, GruLayerConfig, build_layer, host_data
from gruc.runtime.engine import compile_program
from gruc.runtime.footprint import ALWAYS_LIVE_CATEGORIES
from gruc.runtime.report import Report
from gruc.target import Target

PLAN_IGNORED = ("backend", "rel_tolerance", "abs_tolerance", "weights_range")
"""Layer flags that change how a layer runs or is checked, never its plan."""

CATEGORY_COLUMNS = tuple(f"memory_{name}" for name in ALWAYS_LIVE_CATEGORIES) + (
    "memory_variable_not_always_live", "memory_message")
"""Memory by Poplar's category over all tiles (not-always-live ones at each tile's peak)."""

ROW_COLUMNS = (
    "config", "pipeline", "target", "tiles", "bytes_per_tile", "total_capacity", "shards_chosen",
    "fits", "tiles_over_capacity", "first_overflow_tile", "first_overflow_bytes",
    "first_overflow_tensors", "max_tile_bytes", "tiles_used", "always_live_bytes",
    "not_always_live_max_bytes", "total_memory", *CATEGORY_COLUMNS, "exchange_bytes",
    "cycles_compute", "cycles_exchange", "cycles_sync", "cycles_total", "flops", "build_seconds",
    "compile_seconds", "gruc_version", "error",
)
"""Columns of a sweep row after the swept parameters; ``config`` (the canonical JSON of the
layer's flags and the pipeline) is the row's key.  Totals are over all tiles; ``bytes_per_tile``
and ``total_capacity`` are the target's memory (per tile, all tiles), not what the layer uses;
``total_memory`` is Poplar's (always-live plus each tile's not-always-live peak), split by
category in the ``memory_*`` columns; ``*_seconds`` are host times."""

NUMBER_COLUMNS = tuple(c for c in ROW_COLUMNS if c not in (
    "config", "pipeline", "target", "first_overflow_tensors", "gruc_version", "error"))
"""Columns that hold a number (or a yes / no), or None where the configuration was refused."""

TIMING_COLUMNS = ("build_seconds", "compile_seconds")
"""Columns that vary from one computation of a row to the next."""


def effective_pipeline(pipeline: str | None) -> str:
    """The pipeline a compile runs, in canonical form (``a, b{x=1}`` and ``a,b{x=1}`` are one
    pipeline, so one row): ``pipeline``, or the engine's default for None.  A bad pipeline is
    refused here, before any work."""
    if pipeline is None:
        return DEFAULT_PIPELINE
    return format_pipeline(parse_pipeline(pipeline))


def config_key(config: GruLayerConfig, pipeline: str | None = None) -> str:
    """The canonical text of what decides a plan — the flags and the pipeline: a row's key."""
    flags = {k: v for k, v in config.model_dump(mode="json").items() if k not in PLAN_IGNORED}
    flags["pipeline"] = effective_pipeline(pipeline)
    return json.dumps(flags, sort_keys=True, separators=(",", ":"))


def row_problem(row: dict[str, Any]) -> str | None:
    """Why ``row``, read back from a study's ``rows.json``, is not a row of this gruc's sweeps
    (None when it is): a missing column, a config that is not a configuration of the layer
    flags this gruc has (another program's, or a gruc with other flags), a number column
    holding something else.  A sweep keeps other grids' rows and prints, plots and aligns
    them, so each must be whole (:class:`~gruc.plan.rows.RowStore` refuses the file)."""
    try:
        flags = json.loads(row["config"])
    except (ValueError, RecursionError):
        flags = None
    if not isinstance(flags, dict):
        return f"its config {short_text(row['config'])} is not a JSON object of layer flags"
    missing = [column for column in ROW_COLUMNS if column not in row]
    if missing:
        return f"it lacks the column {missing[0]!r}"
    known = {*GruLayerConfig.model_fields, "pipeline"} - set(PLAN_IGNORED)
    if set(flags) != known:
        unknown, lacking = sorted(set(flags) - known), sorted(known - set(flags))
        return (f"its config names flags this gruc does not have: {', '.join(map(repr, unknown))}"
                if unknown else f"its config lacks the flags {', '.join(map(repr, lacking))}")
    try:
        GruLayerConfig(**{k: v for k, v in flags.items() if k != "pipeline"})
    except GrucError as error:
        return f"its config is no layer: {error}"
    for column in NUMBER_COLUMNS:
        value = row[column]
        if value is not None and not isinstance(value, (int, float)):
            return f"{column} {short_text(value)} is not a number"
    return None


def run_lengths(config: GruLayerConfig) -> np.ndarray | None:
    """The row lengths a run of the layer writes (None when the layer has no lengths)."""
    if config.variable_time_steps is not None:
        return np.asarray(config.variable_time_steps, dtype=np.int64)
    if config.with_real_time_steps:
        return host_data(config)[1]
    return None


def shard_trips(config: GruLayerConfig, lengths: np.ndarray, num_shards: int) -> list[int]:
    """Trip count of each shard's time loop, in shard order, for rows of ``lengths``; shards
    with no steps (more shards than the steps need) have no loop and are left out."""
    longest = min(int(np.max(lengths)), config.sequence_size)
    return [min(max(longest - begin, 0), end - begin)
            for begin, end in shard_time_bounds(config.sequence_size, num_shards) if end > begin]


def loop_trips(config: GruLayerConfig, layer: GruLayer, loops: Sequence[Step],
               lengths: np.ndarray) -> dict[int, int]:
    """Trip count of each time loop of the layer's program (``loops``, in program order)."""
    forward = shard_trips(config, lengths, layer.num_shards)
    if not loops or len(loops) % len(forward):
        raise GrucProgramError(f"internal error: the layer has {len(loops)} time loops, not a "
                               f"multiple of its {len(forward)} shards with steps")
    in_order = forward + forward[::-1] * (len(loops) // len(forward) - 1)
    return {step.index: trips for step, trips in zip(loops, in_order)}


def layer_step_counts(config: GruLayerConfig, layer: GruLayer, module: Module,
                      steps: Sequence[Step]) -> np.ndarray:
    """How often one run of the layer's program 0, as compiled into ``module`` (numbered as
    ``steps``), executes each step — counted from the program tree with the time loops' trips
    the layer's lengths give, equal to a run's counts."""
    static = StaticProgram(module, steps)
    lengths = run_lengths(config)
    trips = {} if lengths is None else loop_trips(config, layer, static.loops(0), lengths)
    return static.step_counts((0,), trips=trips)


@dataclass
class LayerPlan:
    """A plan-only layer: what was built and the report a run would produce."""

    config: GruLayerConfig
    pipeline: str
    """The pipeline the layer was compiled with."""
    layer: GruLayer
    report: Report
    build_seconds: float
    compile_seconds: float
    shards: int
    """Shards per time loop in the compiled program: the layer's, unless the pipeline's shard
    pass chose another count."""

    def row(self, swept: Sequence[str] = ()) -> dict[str, Any]:
        """One sweep row: the ``swept`` parameters, then :data:`ROW_COLUMNS`."""
        report, target = self.report, self.report.target
        cycles = report.cycles
        first = min(report.tiles_over_capacity, key=lambda o: o.tile, default=None)
        values = {
            "shards_chosen": self.shards, "fits": report.fits,
            "tiles_over_capacity": len(report.tiles_over_capacity),
            "first_overflow_tile": None if first is None else first.tile,
            "first_overflow_bytes": None if first is None else first.bytes,
            "first_overflow_tensors": None if first is None else ", ".join(
                f"{name} ({nbytes} B)" for name, nbytes in first.largest),
            "max_tile_bytes": report.max_tile_bytes,
            "tiles_used": report.footprint.tiles_used,
            "always_live_bytes": int(report.always_live_bytes.sum()),
            "not_always_live_max_bytes": int(report.not_always_live_max_bytes.sum()),
            "total_memory": report.total_memory,
            **{f"memory_{name}": int(values.sum())
               for name, values in report.footprint.always_live.items()},
            "memory_variable_not_always_live":
                int(report.footprint.not_always_live["variable"].sum()),
            "memory_message": int(report.footprint.not_always_live["message"].sum()),
            "exchange_bytes": report.exchange_bytes,
            "cycles_compute": cycles.compute, "cycles_exchange": cycles.exchange,
            "cycles_sync": cycles.sync, "cycles_total": cycles.total,
            "flops": self.layer.flops(),
            "build_seconds": round(self.build_seconds, 4),
            "compile_seconds": round(self.compile_seconds, 4),
        }
        return _row(self.config, self.pipeline, swept, target, values)


def _row(config: GruLayerConfig, pipeline: str | None, swept: Sequence[str], target: Target,
         values: dict[str, Any]) -> dict[str, Any]:
    """A row in :data:`ROW_COLUMNS` order after the swept parameters: the key and target columns
    from ``config`` and ``target``, the rest from ``values`` (None where missing), so a refused
    configuration's row has every column a planned one has."""
    row = parameter_values(config, swept)
    row.update({"config": config_key(config, pipeline), "pipeline": effective_pipeline(pipeline),
                "target": target.name, "tiles": target.num_tiles,
                "bytes_per_tile": target.bytes_per_tile, "total_capacity": target.total_memory})
    for column in ROW_COLUMNS[6:]:
        row[column] = values.get(column)
    row["gruc_version"] = gruc.__version__
    return row


def parameter_values(config: GruLayerConfig, names: Sequence[str]) -> dict[str, Any]:
    """The flags ``names`` of ``config`` as a row holds them (tuples become lists, as in JSON)."""
    values = {name: getattr(config, name) for name in names}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


def plan_layer(config: GruLayerConfig, pipeline: str | None = None) -> LayerPlan:
    """Build and compile the layer of ``config`` and report it as one run would, without running
    (``pipeline``: as :class:`~gruc.runtime.engine.Engine`'s; None runs the engine's default)."""
    pipeline = effective_pipeline(pipeline)
    start = time.perf_counter()
    layer = build_layer(config)
    built = time.perf_counter()
    compiled = compile_program(layer.graph, layer.programs, pipeline=pipeline,
                               memory_model=config.memory_model)
    counts = layer_step_counts(config, layer, compiled.module, compiled.plan.liveness.steps)
    report = plan_report(compiled, counts, time.perf_counter() - built)
    shards = layer.num_shards
    if any(isinstance(step, Shard) for step in parse_pipeline(pipeline)):
        shards = shard_count(compiled.module) or shards
    return LayerPlan(config, pipeline, layer, report, built - start, report.compile_seconds,
                     shards)


def plan_row(config: GruLayerConfig, swept: Sequence[str] = (),
             pipeline: str | None = None) -> dict[str, Any]:
    """:meth:`LayerPlan.row` of ``config``; a configuration gruc refuses (a ``GrucError`` while
    building or planning, e.g. more shards than the target allows) gives a row whose ``error``
    says why, so a sweep records it once and moves on; so does one too big for the host's memory
    (a ``MemoryError``, which a resumed sweep plans again)."""
    try:
        return plan_layer(config, pipeline).row(swept)
    except GrucError as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        return _row(config, pipeline, swept, config.target(),
                    {"error": f"{type(error).__name__}: {message}"})
    except MemoryError as error:  # this machine's limit: the row says so, a resumed sweep retries
        return _row(config, pipeline, swept, config.target(),
                    {"error": f"{HOST_MEMORY_ERROR}: the host ran out of memory planning it "
                              f"({str(error) or 'an allocation failed'})"})
