"""Plots of a planning study (PNG, matplotlib's Agg canvas; the ``viz`` extra).

* :func:`plot_metrics`: for each swept flag, one figure of every metric against it — max tile
  memory with a line at the bytes per tile, total memory (always-live plus not-always-live peak)
  with a line at the system's memory, exchange bytes, and cycles by kind — one line per
  combination of the other swept flags (Graphcore's ``plot_metric_variation`` layout).
* :func:`plot_tile_heatmap`: one configuration's memory per tile on a grid of tiles, scaled to the
  tile capacity, with the tiles over capacity marked.

Figures are drawn on :class:`~matplotlib.figure.Figure` objects with an Agg canvas rather than
through ``pyplot``, so plotting never changes a caller's matplotlib backend or global state.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from gruc.errors import GrucValueError
from gruc.plan.layer import LayerPlan
from gruc.runtime.report import atomic_file
from gruc.runtime.viz import require_matplotlib
from gruc.text import plural

PANELS = (
    ("max_tile_bytes", "max tile memory (B)", "bytes_per_tile", "bytes per tile"),
    ("total_bytes", "always-live + not-always-live peak (B)", "total_capacity",
     "total capacity"),
    ("exchange_bytes", "exchange (B)", None, None),
    ("cycles_compute", "compute cycles", None, None),
    ("cycles_exchange", "exchange cycles", None, None),
    ("cycles_sync", "sync cycles", None, None),
)
"""(metric, axis label, capacity column, capacity label) of each panel."""


def _figure(width: float, height: float):
    """A matplotlib Figure on the Agg canvas, made without pyplot (no GUI backend, no global figure
    state to close); matplotlib missing is a GrucValueError saying what to install."""
    require_matplotlib("plots")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


MAX_LEGEND_ENTRIES = 40
"""More lines than this get no legend: it would take more room than the panels."""


def _colours(count: int) -> list:
    """A distinct colour per line: matplotlib's 10-colour cycle repeats after ten, so more lines
    take evenly spaced colours of a continuous map instead."""
    from matplotlib import colormaps

    if count <= 10:
        return [colormaps["tab10"](k) for k in range(count)]
    if count <= 20:
        return [colormaps["tab20"](k) for k in range(count)]
    return [colormaps["viridis"](k / (count - 1)) for k in range(count)]


def _label(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def _metric(row: dict[str, Any], name: str) -> float:
    if name == "total_bytes":
        return row["always_live_bytes"] + row["not_always_live_max_bytes"]
    return row[name]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def plot_metrics(rows: Sequence[dict[str, Any]], parameters: Sequence[str],
                 directory: str | os.PathLike) -> list[Path]:
    """Write ``metrics-<flag>.png`` for each swept flag; rows with an error are left out (none
    left: no plots).  Each combination of the other flags is a line of its own colour, named in
    a legend under the panels."""
    rows = [r for r in rows if not r.get("error")]
    if not rows:
        return []
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for parameter in parameters:
        others = [p for p in parameters if p != parameter]
        values = list(dict.fromkeys(_label(r[parameter]) for r in rows))
        numeric = all(_is_number(r[parameter]) for r in rows)
        series: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            name = ", ".join(f"{p}={_label(row[p])}" for p in others) or "all"
            series.setdefault(name, []).append(row)
        figure = _figure(12, 10)
        axes = figure.subplots(3, 2).ravel()
        colours = _colours(len(series))
        for ax, (metric, label, capacity, capacity_label) in zip(axes, PANELS):
            for (name, members), colour in zip(series.items(), colours):
                members = sorted(members, key=lambda r: r[parameter] if numeric
                                 else values.index(_label(r[parameter])))
                xs = ([r[parameter] for r in members] if numeric
                      else [values.index(_label(r[parameter])) for r in members])
                ax.plot(xs, [_metric(r, metric) for r in members], marker="o", label=name,
                        color=colour)
            if capacity is not None:
                ax.axhline(rows[0][capacity], color="red", linestyle="--", label=capacity_label)
                ax.set_yscale("log")  # the data stay visible however far below capacity
            if not numeric:
                ax.set_xticks(range(len(values)), values, rotation=30)
            ax.set_xlabel(parameter)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
        if len(series) <= MAX_LEGEND_ENTRIES:
            handles, labels = axes[0].get_legend_handles_labels()
            figure.legend(handles, labels, loc="outside lower center", fontsize="small",
                          ncols=min(4, len(labels)))
        figure.suptitle(f"GRU layer plan: metrics against {parameter}")
        written.append(_save(figure, directory / f"metrics-{parameter}.png"))
    return written


def tile_grid(values: np.ndarray) -> np.ndarray:
    """Per-tile values laid on a near-square grid (row-major, padded with NaN)."""
    count = len(values)
    columns = max(1, math.ceil(math.sqrt(count)))
    grid = np.full(columns * math.ceil(count / columns), np.nan)
    grid[:count] = values
    return grid.reshape(-1, columns)


def plot_tile_heatmap(plan: LayerPlan, path: str | os.PathLike) -> Path:
    """Memory per tile (total including gaps) of one planned configuration."""
    report = plan.report
    target = report.target
    grid = tile_grid(report.total_bytes.astype(float))
    figure = _figure(9, 7)
    from matplotlib.ticker import MaxNLocator

    ax = figure.subplots()
    image = ax.imshow(grid, cmap="viridis", vmin=0,
                      vmax=max(target.bytes_per_tile, report.max_tile_bytes), aspect="auto",
                      interpolation="nearest")
    figure.colorbar(image, ax=ax, label="bytes (capacity = top of the scale)")
    over = [o.tile for o in report.tiles_over_capacity]
    if over:
        columns = grid.shape[1]
        ax.scatter([t % columns for t in over], [t // columns for t in over], marker="x",
                   color="red", label=f"{plural(len(over), 'tile')} over capacity")
        ax.legend(loc="upper right")
    config = plan.config
    ax.set_title(f"S={config.sequence_size} B={config.batch_size} I={config.input_size} "
                 f"H={config.output_size} {config.data_type}, {plural(plan.layer.num_shards, 'shard')} on "
                 f"{target.describe()}\nmax tile {report.max_tile_bytes} B of "
                 f"{target.bytes_per_tile} B", fontsize="medium")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"tile mod {grid.shape[1]}")
    ax.set_ylabel(f"tile // {grid.shape[1]}")
    return _save(figure, Path(path))


def _save(figure, path: Path) -> Path:
    """Write ``figure`` as PNG to ``path`` atomically (a reader never sees half an image)."""
    with atomic_file(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=80)
    return path
