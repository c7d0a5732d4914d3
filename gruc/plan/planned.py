"""Planned layers: what a planning study needs of a kind of layer, and the rows it makes.

A sweep, a search, their rows and executors are the same whatever layer they plan; what differs
is one :class:`PlannedLayer` per kind — the GRU layer and poplibs' two product tools, listed in
:data:`gruc.plan.layers.PLANNED_LAYERS` — which names the kind, its configuration model (its
command's flags), the flags that never change a plan, and how one configuration is built and
planned (into a :class:`Planned`: the report a run would give, and what a row adds to it).  This
module holds what does not depend on the kind: the row columns, the row key, a row from a plan.

Why a small record of functions and not subclasses of the layer configurations: the models
belong to the layers (``gruc.popnn``, ``gruc.tools``), which know nothing of plans (data flows
one way), and a kind is a handful of facts about a model, not a new kind of model.

A row's key (its ``config`` column) is the canonical JSON of every flag that decides the plan,
the pipeline and the layer's name, so rows of two kinds never share a key, and a study's
directory may hold rows of several kinds (each row carries its kind in its key).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import gruc
from gruc.errors import GrucError
from gruc.passes import DEFAULT_PIPELINE
from gruc.passes.pipeline import format_pipeline, parse_pipeline
from gruc.plan.figures import (FIGURE_COLUMNS, USAGE_COLUMNS, Usage, amp_peak_flops_per_cycle,
                               figure_values, measured)
from gruc.plan.roles import ROLE_COLUMNS, memory_by_role
from gruc.plan.rows import HOST_MEMORY_ERROR, short_text
from gruc.runtime.footprint import ALWAYS_LIVE_CATEGORIES
from gruc.runtime.report import Cycles, Report
from gruc.target import Target
from gruc.validated import GrucModel

CATEGORY_COLUMNS = tuple(f"memory_{name}" for name in ALWAYS_LIVE_CATEGORIES) + (
    "memory_variable_not_always_live", "memory_message")
"""Memory by Poplar's category over all tiles (not-always-live ones at each tile's peak)."""

ROW_COLUMNS = (
    "config", "pipeline", "target", "tiles", "bytes_per_tile", "total_capacity", "shards_chosen",
    "fits", "tiles_over_capacity", "first_overflow_tile", "first_overflow_bytes",
    "first_overflow_tensors", "max_tile_bytes", "tiles_used", "always_live_bytes",
    "not_always_live_max_bytes", "total_memory", *CATEGORY_COLUMNS, *ROLE_COLUMNS,
    "exchange_bytes",
    "cycles_compute", "cycles_exchange", "cycles_sync", "cycles_total", "flops", *FIGURE_COLUMNS,
    "build_seconds", "compile_seconds", *USAGE_COLUMNS, "gruc_version", "error",
)
"""Columns of a sweep row after the swept parameters, for every kind of layer; ``config`` (the
canonical JSON of the layer's flags, the pipeline and the layer's kind) is the row's key.  Totals
are over all tiles; ``bytes_per_tile`` and ``total_capacity`` are the target's memory (per tile,
all tiles), not what the layer uses; ``total_memory`` is Poplar's (always-live plus each tile's
not-always-live peak), split by category in the ``memory_*`` columns and by what the bytes are
for in the ``role_*`` ones, over the chip and on the fullest tile (:mod:`gruc.plan.roles`);
``shards_chosen`` is the GRU layer's shards per time loop, None (an empty cell) for a layer
with no time loop to shard (fc, gemm); ``*_seconds`` are host times.  The IPU's use (utilisation against the AMP peak,
exchange and sync shares, by phase for a GRU layer) and the host's cost of the plan (CPU
seconds, peak resident bytes) are :mod:`gruc.plan.figures`'."""

NUMBER_COLUMNS = tuple(c for c in ROW_COLUMNS if c not in (
    "config", "pipeline", "target", "first_overflow_tensors", "peak_rss_scope", "gruc_version",
    "error"))
"""Columns that hold a number (or a yes / no), or None where the configuration was refused."""

TIMING_COLUMNS = ("build_seconds", "compile_seconds", "cpu_seconds", "peak_rss_bytes")
"""Columns that vary from one computation of a row to the next."""

KEY_NAMES = ("layer", "pipeline")
"""What a row's key holds besides the layer's flags."""


def effective_pipeline(pipeline: str | None) -> str:
    """The pipeline a compile runs, in canonical form (``a, b{x=1}`` and ``a,b{x=1}`` are one
    pipeline, so one row): ``pipeline``, or the engine's default for None.  A bad pipeline is
    refused here, before any work."""
    if pipeline is None:
        return DEFAULT_PIPELINE
    return format_pipeline(parse_pipeline(pipeline))


def canonical(flags: dict[str, Any]) -> str:
    """The one text of a key's flags (sorted, no spaces): equal flags, equal keys."""
    return json.dumps(flags, sort_keys=True, separators=(",", ":"))


class Planned(Protocol):
    """One configuration planned: the report a run would give, and what its row adds."""

    report: Report
    build_seconds: float
    compile_seconds: float
    shards: int | None
    """Shards per time loop as compiled, or None for a layer without one."""

    @property
    def flops(self) -> int: ...

    def phases(self) -> dict[str, tuple[Cycles, int]]:
        """Cycles and FLOPs of each phase the layer has (empty: whole-layer figures only)."""


@dataclass(frozen=True)
class PlannedLayer:
    """A kind of layer a planning study plans (see the module doc)."""

    name: str
    """What ``SweepSpec(layer=...)``, ``gruc plan LAYER`` and a row's key call the kind."""
    title: str
    """The kind in words (``fully connected layer``), for messages."""
    model: type[GrucModel]
    """The configuration model: its fields are the flags."""
    ignored: tuple[str, ...]
    """Fields that change how a layer runs or is checked, never its plan: not in keys, refused
    by sweeps."""
    plan: Callable[[Any, str | None], Planned]
    """Build and plan one configuration with a pipeline (None: the engine's default)."""
    searchable: tuple[str, ...]
    """Integer flags ``find_max`` can search."""
    required: dict[str, Any]
    """The least a configuration must give (the flags without defaults), to check the value of
    one other flag alone."""
    tuple_fields: tuple[str, ...] = ()
    """Flags whose one value is a comma list (their alternatives are separated by ``/``)."""

    @property
    def flags(self) -> tuple[str, ...]:
        """The flags a plan depends on, in the model's order."""
        return tuple(f for f in self.model.model_fields if f not in self.ignored)

    def key(self, config: Any, pipeline: str | None = None) -> str:
        """The canonical text of what decides a plan — the flags, the pipeline and the kind: a
        row's key."""
        flags = {k: v for k, v in config.model_dump(mode="json").items() if k not in self.ignored}
        flags.update(layer=self.name, pipeline=effective_pipeline(pipeline))
        return canonical(flags)

    def row(self, config: Any, swept: Sequence[str], pipeline: str | None,
            plan: Planned | None = None, error: str | None = None,
            usage: Usage | None = None) -> dict[str, Any]:
        """A row in :data:`ROW_COLUMNS` order after the ``swept`` parameters: the key and target
        columns from ``config``, the figures from ``plan`` and the host's cost from ``usage`` —
        or, for a configuration gruc refused, None but for ``error`` (and the cost of finding
        that out), so a refused row has every column a planned one has."""
        target: Target = config.target() if plan is None else plan.report.target
        row = parameter_values(config, swept)
        row.update({"config": self.key(config, pipeline), "pipeline": effective_pipeline(pipeline),
                    "target": target.name, "tiles": target.num_tiles,
                    "bytes_per_tile": target.bytes_per_tile,
                    "total_capacity": target.total_memory})
        values = {} if plan is None else plan_values(plan)
        if usage is not None:
            values.update(cpu_seconds=round(usage.cpu_seconds, 4),
                          peak_rss_bytes=usage.peak_rss_bytes, peak_rss_scope=usage.peak_rss_scope)
        for column in ROW_COLUMNS[6:]:
            row[column] = values.get(column)
        row["gruc_version"] = gruc.__version__
        row["error"] = error
        return row

    def plan_row(self, config: Any, swept: Sequence[str] = (),
                 pipeline: str | None = None) -> dict[str, Any]:
        """The row of ``config`` planned now; a configuration gruc refuses (a ``GrucError`` while
        building or planning, e.g. more shards than the target allows) gives a row whose
        ``error`` says why, so a sweep records it once and moves on; so does one too big for the
        host's memory (a ``MemoryError``, which a resumed sweep plans again)."""
        try:
            with measured() as usage:
                plan = self.plan(config, pipeline)
            return self.row(config, swept, pipeline, plan, usage=usage)
        except GrucError as error:
            message = str(error).splitlines()[0] if str(error) else type(error).__name__
            return self.row(config, swept, pipeline, error=f"{type(error).__name__}: {message}",
                            usage=usage)
        except MemoryError as error:  # this host's limit: a resumed sweep plans it again
            return self.row(config, swept, pipeline,
                            error=f"{HOST_MEMORY_ERROR}: the host ran out of memory planning it "
                                  f"({str(error) or 'an allocation failed'})", usage=usage)

    def flags_problem(self, flags: dict[str, Any]) -> str | None:
        """Why the flags of a row's key are not a configuration of this kind (None: they are)."""
        known = {*self.flags, *KEY_NAMES}
        if set(flags) != known:
            unknown, lacking = sorted(set(flags) - known), sorted(known - set(flags))
            return (f"its config names {self.name} flags this gruc does not have: "
                    f"{', '.join(map(repr, unknown))}" if unknown
                    else f"its config lacks the {self.name} flags {', '.join(map(repr, lacking))}")
        try:
            self.model(**{k: v for k, v in flags.items() if k not in KEY_NAMES})
        except GrucError as error:
            return f"its config is no {self.title}: {error}"
        return None


def plan_values(plan: Planned) -> dict[str, Any]:
    """The figure columns of a row from a plan's report (see :data:`ROW_COLUMNS`)."""
    report = plan.report
    cycles = report.cycles
    first = min(report.tiles_over_capacity, key=lambda o: o.tile, default=None)
    return {
        "shards_chosen": plan.shards, "fits": report.fits,
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
        **memory_by_role(report),
        "exchange_bytes": report.exchange_bytes,
        "cycles_compute": cycles.compute, "cycles_exchange": cycles.exchange,
        "cycles_sync": cycles.sync, "cycles_total": cycles.total,
        "flops": plan.flops,
        **figure_values(report, plan.flops,
                        amp_peak_flops_per_cycle(report.target, plan.config.data_type,
                                                 plan.config.partials_type), plan.phases()),
        "build_seconds": round(plan.build_seconds, 4),
        "compile_seconds": round(plan.compile_seconds, 4),
    }


def parameter_values(config: Any, names: Sequence[str]) -> dict[str, Any]:
    """The flags ``names`` of ``config`` as a row holds them (tuples become lists, as in JSON)."""
    values = {name: getattr(config, name) for name in names}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


def number_problem(row: dict[str, Any]) -> str | None:
    """Why a row's number columns do not hold numbers (None: they do)."""
    for column in NUMBER_COLUMNS:
        value = row[column]
        if value is not None and not isinstance(value, (int, float)):
            return f"{column} {short_text(value)} is not a number"
    return None
