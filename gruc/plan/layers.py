"""The kinds of layer a planning study plans, and their rows whatever the kind.

:data:`PLANNED_LAYERS` lists them (:class:`~gruc.plan.planned.PlannedLayer`):

* ``gru``: the GRU layer of ``gruc gru`` (:func:`gruc.plan.layer.plan_layer`);
* ``fc``: poplibs' ``fully_connected_layer``, ``gruc fc`` (:func:`~gruc.tools.products.build_fc`);
* ``gemm``: poplibs' ``general_matrix_multiply``, ``gruc gemm``
  (:func:`~gruc.tools.products.build_gemm`).

A product tool is planned as ``gruc fc --compile-only`` plans it: every program of one invocation
run once (:func:`~gruc.plan.static.plan_program`), so its rows equal that report.  Its seed,
tolerances and backend only change a run or its check, and so does ``ignore_data``: the tools'
tensors are written by the host, so live, whether or not their results are read back.

:func:`config_key`, :func:`plan_row` and :func:`row_problem` take a configuration or row of any
kind; a key names its kind, so a study's directory may mix kinds (a sweep then adds a ``layer``
parameter column to every row).  Rows a gruc before fc and gemm plans wrote, whose keys name no
kind, are GRU rows: :func:`upgrade_row` gives them this gruc's key, so such studies resume.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from gruc.errors import GrucValueError
from gruc.plan import layer as gru_plan
from gruc.plan.figures import FIGURE_COLUMNS, USAGE_COLUMNS
from gruc.plan.planned import (ROW_COLUMNS, PlannedLayer, canonical, effective_pipeline,
                               number_problem)
from gruc.plan.roles import ROLE_COLUMNS
from gruc.plan.rows import short_text
from gruc.plan.static import plan_program
from gruc.tools.gru_layer import GruLayerConfig
from gruc.runtime.report import Report
from gruc.tools.products import (FcConfig, GemmConfig, ProductLayer, ProductToolConfig, build_fc,
                                 build_gemm)

PRODUCT_IGNORED = ("ignore_data", "seed", "rel_tolerance", "abs_tolerance", "backend")
"""Product tool flags that change how the tool runs or is checked, never its plan."""

PRODUCT_SIZES = ("tiles_per_ipu", "ipus")
"""Integer flags of every product tool ``find_max`` can search, after the tool's sizes."""


@dataclass
class ProductPlan:
    """A plan-only product tool: what was built and the report one invocation would produce."""

    config: ProductToolConfig
    pipeline: str
    layer: ProductLayer
    report: Report
    build_seconds: float
    compile_seconds: float
    shards: None = None
    """A product has no time loop to shard."""

    @property
    def flops(self) -> int:
        return self.layer.flops()

    def phases(self) -> dict:
        """None: a product tool's programs are not split into phases here (whole-tool figures
        only)."""
        return {}

    def describe(self) -> str:
        """The configuration in one line, for figures: ``fc B=16 I=1324 O=100 G=1 half all``."""
        c = self.config
        if isinstance(c, FcConfig):
            return (f"fc B={c.batch_size} I={c.input_size} O={c.output_size} G={c.num_groups} "
                    f"{c.data_type} {c.pass_}")
        return (f"gemm G={c.g} M={c.m} K={c.k} N={c.n} {c.data_type}"
                + (" A^T" if c.transpose_a else "") + (" B^T" if c.transpose_b else ""))


def plan_product(build: Callable[[Any], ProductLayer], config: ProductToolConfig,
                 pipeline: str | None = None) -> ProductPlan:
    """Build the tool's layer with ``build`` and plan every program of one invocation."""
    pipeline = effective_pipeline(pipeline)
    start = time.perf_counter()
    layer = build(config)
    built = time.perf_counter()
    report = plan_program(layer.graph, layer.programs, runs=layer.runs, pipeline=pipeline,
                          memory_model=config.memory_model)
    return ProductPlan(config, pipeline, layer, report, built - start, report.compile_seconds)


def _plan_gru(config: GruLayerConfig, pipeline: str | None) -> gru_plan.LayerPlan:
    """:func:`~gruc.plan.layer.plan_layer`, looked up when called (a test may replace it)."""
    return gru_plan.plan_layer(config, pipeline)


PLANNED_LAYERS: dict[str, PlannedLayer] = {
    "gru": PlannedLayer("gru", "GRU layer", GruLayerConfig, gru_plan.PLAN_IGNORED, _plan_gru,
                        gru_plan.SEARCHABLE, {}, gru_plan.TUPLE_FIELDS),
    "fc": PlannedLayer("fc", "fully connected layer", FcConfig, PRODUCT_IGNORED,
                       functools.partial(plan_product, build_fc),
                       ("batch_size", "input_size", "output_size", "num_groups", *PRODUCT_SIZES),
                       {"input_size": 1, "output_size": 1}),
    "gemm": PlannedLayer("gemm", "general matrix multiply", GemmConfig, PRODUCT_IGNORED,
                         functools.partial(plan_product, build_gemm),
                         ("m", "k", "n", "g", *PRODUCT_SIZES), {"m": 1, "k": 1, "n": 1}),
}
"""Every kind of layer a study plans, by name (``gru`` first: the default)."""


def planned_layer(name: str) -> PlannedLayer:
    """The kind called ``name``; another name is refused, naming the kinds there are."""
    if not isinstance(name, str) or name not in PLANNED_LAYERS:
        raise GrucValueError(f"layer {short_text(name)} is not one gruc plans; layers: "
                             f"{', '.join(PLANNED_LAYERS)}")
    return PLANNED_LAYERS[name]


def layer_of(config: Any) -> PlannedLayer:
    """The kind whose model ``config`` is."""
    for kind in PLANNED_LAYERS.values():
        if type(config) is kind.model:
            return kind
    raise GrucValueError(f"{type(config).__name__} is no layer gruc plans; configurations: "
                         f"{', '.join(k.model.__name__ for k in PLANNED_LAYERS.values())}")


def config_key(config: Any, pipeline: str | None = None) -> str:
    """The canonical text of what decides ``config``'s plan — its kind, flags and the
    pipeline: its row's key."""
    return layer_of(config).key(config, pipeline)


def plan_config(config: Any, pipeline: str | None = None) -> Any:
    """The plan of a configuration of any kind: the report a run would give (``.report``), what
    was built (``.layer``) and its times (``pipeline``: None runs the engine's default)."""
    return layer_of(config).plan(config, pipeline)


def plan_row(config: Any, swept: Sequence[str] = (), pipeline: str | None = None
             ) -> dict[str, Any]:
    """The sweep row of a configuration of any kind: the ``swept`` parameters, then
    :data:`~gruc.plan.planned.ROW_COLUMNS`; a configuration gruc refuses gives a row whose
    ``error`` says why (:meth:`~gruc.plan.planned.PlannedLayer.plan_row`)."""
    return layer_of(config).plan_row(config, swept, pipeline)


def row_layer(row: dict[str, Any]) -> str:
    """The kind of a checked row (see :func:`row_problem`)."""
    return json.loads(row["config"])["layer"]


NEW_COLUMNS = (*FIGURE_COLUMNS, *USAGE_COLUMNS, *ROLE_COLUMNS)
"""Columns a gruc before utilisation, host costs and memory by role did not write: empty in its
rows."""


def upgrade_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row``, read back, with this gruc's key if an older gruc wrote it — one before fc and
    gemm plans (its key, naming no kind, is a GRU layer's), or before a flag with a default was
    added (the key gets the default, which is what that gruc built) — and the columns of
    :data:`NEW_COLUMNS` empty if a gruc before them wrote it; any other row as it is."""
    try:
        flags = json.loads(row["config"])
    except (ValueError, RecursionError):
        return row
    if not isinstance(flags, dict):
        return row
    if "layer" not in flags:
        flags = {**flags, "layer": "gru"}
    kind = PLANNED_LAYERS.get(flags["layer"]) if isinstance(flags["layer"], str) else None
    if kind is not None:  # flags added since (GRU recomputation): the default the row was built with
        fields = kind.model.model_fields
        flags = {**{name: fields[name].default for name in kind.flags if name not in flags
                    and not fields[name].is_required()}, **flags}
    if canonical(flags) != row["config"]:
        row = {**row, "config": canonical(flags)}
    if "error" in row and any(column not in row for column in NEW_COLUMNS):
        row = {**row, **{column: None for column in NEW_COLUMNS if column not in row}}
    return row


def row_problem(row: dict[str, Any]) -> str | None:
    """Why ``row``, read back from a study's ``rows.json``, is not a row of this gruc's sweeps
    (None when it is): a missing column, a config that is not a configuration of a kind of
    layer this gruc plans (another program's, or a gruc with other flags), a number column
    holding something else.  A sweep keeps other grids' rows — of any kind — and prints, plots
    and aligns them, so each must be whole (:class:`~gruc.plan.rows.RowStore` refuses the
    file)."""
    try:
        flags = json.loads(row["config"])
    except (ValueError, RecursionError):
        flags = None
    if not isinstance(flags, dict):
        return f"its config {short_text(row['config'])} is not a JSON object of layer flags"
    missing = [column for column in ROW_COLUMNS if column not in row]
    if missing:
        return f"it lacks the column {missing[0]!r}"
    kind = PLANNED_LAYERS.get(flags["layer"]) if isinstance(flags.get("layer"), str) else None
    if kind is None:
        return (f"its config's layer {short_text(flags.get('layer'))} is none this gruc plans "
                f"({', '.join(PLANNED_LAYERS)})")
    return kind.flags_problem(flags) or number_problem(row)
