"""Planning studies: tile memory, exchange and cycles of layers across many configurations,
without running them (``gruc plan``): GRU layers, and poplibs' fully connected layer and general
matrix multiply (the kinds of :data:`PLANNED_LAYERS`).

* :func:`plan_layer` / :func:`plan_config` / :func:`plan_program`: the report a run would give,
  from compile + memory plan + static step counts (:mod:`gruc.plan.static`), with no lowering,
  kernels or execution — of a GRU layer, of a configuration of any kind, of any program.
* :class:`SweepSpec` + :func:`run_sweep`: the cross product of one kind's flags, one row per
  configuration in ``rows.csv`` / ``rows.json``, resumable, on a local process pool, serially or
  on Dask (:mod:`gruc.plan.executors`).
* :func:`find_max`: the largest value of one flag that still fits (per point of the other
  flags' grid); ties and fixed products derive flags from others (:mod:`gruc.plan.derived`).
* :func:`pareto_front`: the rows that fit and no other beats on every axis.
* :func:`plot_metrics`, :func:`plot_tile_heatmap`: PNG figures with capacity lines.
"""

from gruc.plan.executors import DaskExecutor, ProcessExecutor, SerialExecutor, make_executor
from gruc.plan.grid import SweepSpec, parse_values
from gruc.plan.layer import LayerPlan, plan_layer
from gruc.plan.layers import (PLANNED_LAYERS, ProductPlan, config_key, plan_config, plan_row,
                              planned_layer)
from gruc.plan.planned import ROW_COLUMNS, PlannedLayer
from gruc.plan.pareto import pareto_front
from gruc.plan.plots import plot_metrics, plot_pareto, plot_tile_heatmap
from gruc.plan.rows import RowStore
from gruc.plan.search import FindMaxResult, find_max
from gruc.plan.static import StaticProgram, plan_program, plan_report
from gruc.plan.sweep import SweepResult, run_sweep

__all__ = [
    "plan_layer", "plan_config", "plan_row", "plan_program", "plan_report", "StaticProgram",
    "LayerPlan", "ProductPlan", "PLANNED_LAYERS", "PlannedLayer", "planned_layer",
    "config_key", "ROW_COLUMNS", "SweepSpec", "parse_values", "run_sweep", "SweepResult",
    "RowStore", "find_max", "FindMaxResult", "make_executor", "SerialExecutor",
    "ProcessExecutor", "DaskExecutor", "plot_metrics", "plot_tile_heatmap", "pareto_front",
    "plot_pareto",
]
