"""Plots of a planning study (PNG, matplotlib's Agg canvas; the ``viz`` extra).

* :func:`plot_metrics`: for each swept flag, one figure of every metric against it — max tile
  memory with a line at the bytes per tile, total memory (always-live plus not-always-live peak)
  with a line at the system's memory, exchange bytes, cycles and cycles by kind — one line per
  combination of the other swept flags (Graphcore's ``plot_metric_variation`` layout).  A
  categorical flag (a type, a switch, a gate order) is drawn as grouped bars, one group per value
  and one bar per combination, since a line between categories would claim values between them;
  series that coincide in a panel (one would hide the other) are drawn dashed with open markers
  (hatched, as bars) and named in the panel ("same values: ...").
* :func:`plot_roles`: each configuration's memory by role (:mod:`gruc.plan.roles`) as stacked
  bars, over the chip and on its fullest tile, with the capacities.
* :func:`plot_roofline`: each configuration's FLOPs per cycle against the bytes it exchanges per
  FLOP, under the target's two ceilings (the AMP peak; the exchange's bytes a cycle over the
  bytes a FLOP needs).
* :func:`plot_pareto`: a study's rows that fit on two axes of its Pareto front
  (:mod:`gruc.plan.pareto`), the front drawn over them.
* :func:`plot_tile_heatmap`: one configuration's memory per tile on the grid of tiles of the
  report page's tile map (:func:`gruc.runtime.viz.tile_grid`, one block of rows per IPU), coloured
  on a scale fitted to the data, with the tiles over capacity marked.

Readable at any scale: an axis whose values span more than two decades is logarithmic (a
find-max doubles its flag from 1 into the thousands; a capacity line far above the data would
otherwise flatten it), a linear one is used otherwise; integer axes tick on integers only; a
capacity line is drawn where it is on the scale and named with its value either way; legends sit
outside the panels.

Figures are drawn on :class:`~matplotlib.figure.Figure` objects with an Agg canvas rather than
through ``pyplot``, so plotting never changes a caller's matplotlib backend or global state.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from gruc.files import atomic_file
from gruc.runtime.viz import require_matplotlib, tile_grid
from gruc.text import plural

PANELS = (
    ("max_tile_bytes", "max tile memory (B)", "bytes_per_tile", "tile capacity"),
    ("total_bytes", "always-live + not-always-live peak (B)", "total_capacity",
     "total capacity"),
    ("exchange_bytes", "exchange (B)", None, None),
    ("cycles_total", "cycles", None, None),
    ("cycles_compute", "compute cycles", None, None),
    ("cycles_exchange", "exchange cycles", None, None),
    ("cycles_sync", "sync cycles", None, None),
)
"""(metric, axis label, capacity column, capacity name) of each panel."""

DECADES = 100
"""Values whose largest is more than this times their smallest (positive) get a log axis."""


def _figure(width: float, height: float):
    """A matplotlib Figure on the Agg canvas, made without pyplot (no GUI backend, no global figure
    state to close); matplotlib missing is a GrucValueError saying what to install."""
    require_matplotlib("plots")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


SAME_NAMED = 2
"""Coinciding series a panel names; it counts the others."""

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


def spans_decades(values: Sequence[float]) -> bool:
    """Whether positive ``values`` span more than :data:`DECADES` (a log axis shows them)."""
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) > DECADES * min(positive)


def _integer_ticks(axis, log: bool) -> None:
    """Ticks on whole numbers only (no tile row 0.5, no 2.5 shards), written out in full on a
    log axis too."""
    from matplotlib.ticker import LogLocator, MaxNLocator, ScalarFormatter

    if log:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        formatter = ScalarFormatter()
        formatter.set_scientific(False)
        axis.set_major_formatter(formatter)
        axis.set_minor_locator(LogLocator(base=10, subs="auto", numticks=12))
    else:
        axis.set_major_locator(MaxNLocator(integer=True))


def metrics_figure(rows: Sequence[dict[str, Any]], parameter: str, parameters: Sequence[str],
                   title: str = "layer"):
    """The figure of every metric against swept flag ``parameter`` (one line per combination
    of the other flags; rows with an error left out by the caller)."""
    others = [p for p in parameters if p != parameter]
    values = list(dict.fromkeys(_label(r[parameter]) for r in rows))
    numeric = all(_is_number(r[parameter]) for r in rows)
    integer = numeric and all(isinstance(r[parameter], int) for r in rows)
    log_x = numeric and spans_decades([r[parameter] for r in rows])
    series: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        name = _configuration_label(row, others, "all")
        series.setdefault(name, []).append(row)
    figure = _figure(12, 13)
    axes = figure.subplots(4, 2).ravel()
    for unused in axes[len(PANELS):]:
        unused.set_axis_off()
    colours = _colours(len(series))
    for ax, (metric, label, capacity, capacity_name) in zip(axes, PANELS):
        drawn, shapes, same = [], {}, []
        for k, ((name, members), colour) in enumerate(zip(series.items(), colours)):
            members = sorted(members, key=lambda r: r[parameter] if numeric
                             else values.index(_label(r[parameter])))
            xs = ([r[parameter] for r in members] if numeric
                  else [values.index(_label(r[parameter])) for r in members])
            ys = [_metric(r, metric) for r in members]
            drawn += ys
            shape = (tuple(xs), tuple(ys))
            hidden = shape in shapes  # drawn exactly over an earlier series
            if hidden:
                same.append(f"{name} = {shapes[shape]}")
            else:
                shapes[shape] = name
            if numeric:
                ax.plot(xs, ys, marker="o", label=name, color=colour,
                        **({"linestyle": "--", "markerfacecolor": "none", "markersize": 10}
                           if hidden else {}))
            else:  # grouped bars: the series side by side within each category
                width = 0.8 / len(series)
                ax.bar([x - 0.4 + width * (k + 0.5) for x in xs], ys, width, label=name,
                       color=colour, **({"hatch": "//", "edgecolor": "black"} if hidden else {}))
        if same:
            more = f"; {len(same) - SAME_NAMED} more" if len(same) > SAME_NAMED else ""
            ax.text(0.01, 0.02, "same values: " + "; ".join(same[:SAME_NAMED]) + more,
                    transform=ax.transAxes, fontsize="x-small", va="bottom")
        log_y = spans_decades(drawn)
        if capacity is not None:
            limit = rows[0][capacity]
            text = f"{capacity_name} {limit:,} B"
            if max(drawn, default=0) >= limit / 4 or log_y:  # on a readable scale
                ax.axhline(limit, color="red", linestyle="--", label=text)
            else:  # named where it would be, without flattening the data under it
                ax.text(0.01, 0.98, f"{text} (far above the data)", transform=ax.transAxes,
                        va="top", fontsize="small", color="red")
        if log_y:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        if log_x:
            ax.set_xscale("log")
        if integer:
            _integer_ticks(ax.xaxis, log_x)
        if not numeric:
            ax.set_xticks(range(len(values)), values, rotation=30)
        ax.set_xlabel(parameter)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    if len(series) <= MAX_LEGEND_ENTRIES:
        handles, labels = axes[0].get_legend_handles_labels()
        figure.legend(handles, labels, loc="outside lower center", fontsize="small",
                      ncols=min(4, len(labels)))
    figure.suptitle(f"{title} plan: metrics against {parameter}")
    return figure


def plot_metrics(rows: Sequence[dict[str, Any]], parameters: Sequence[str],
                 directory: str | os.PathLike, title: str = "layer") -> list[Path]:
    """Write ``metrics-<flag>.png`` for each swept flag (:func:`metrics_figure`; ``title``:
    what was planned, ``GRU layer``); rows with an error are left out (none left: no plots)."""
    rows = [r for r in rows if not r.get("error")]
    if not rows:
        return []
    directory = Path(directory)
    return [_save(metrics_figure(rows, parameter, parameters, title),
                  directory / f"metrics-{parameter}.png") for parameter in parameters]


def _configuration_label(row: dict[str, Any], parameters: Sequence[str],
                         alone: str = "layer") -> str:
    """``flag=value, ...`` of ``parameters`` in ``row`` (``alone`` where there are none)."""
    return ", ".join(f"{p}={_label(row[p])}" for p in parameters) or alone


def _with_figures(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    """The rows planned (no error) with every column in ``columns`` filled (a row of an older
    gruc may lack newer figures)."""
    return [r for r in rows if not r.get("error") and all(r.get(c) is not None for c in columns)]


def roles_figure(rows: Sequence[dict[str, Any]], parameters: Sequence[str]):
    """Stacked bars of memory by role, one bar per configuration: over the chip (with the
    system's memory) and on the fullest tile (with a tile's)."""
    from gruc.plan.roles import ROLES

    figure = _figure(float(np.clip(4 + 0.5 * len(rows), 8, 20)), 9)
    colours = _colours(len(ROLES))
    labels = [_configuration_label(r, parameters) for r in rows]
    for ax, scope, capacity, name in zip(figure.subplots(2, 1), ("role_", "fullest_tile_role_"),
                                         ("total_capacity", "bytes_per_tile"),
                                         ("the chip", "the fullest tile")):
        bottom = np.zeros(len(rows))
        for role, colour in zip(ROLES, colours):
            heights = np.array([r[f"{scope}{role}"] for r in rows], dtype=float)
            ax.bar(range(len(rows)), heights, 0.8, bottom=bottom, color=colour,
                   label=role.replace("_", " "))
            bottom += heights
        limit = rows[0][capacity]
        if bottom.max(initial=0) >= limit / 4:
            ax.axhline(limit, color="red", linestyle="--", label=f"capacity {limit:,} B")
        else:
            ax.text(0.01, 0.98, f"capacity {limit:,} B (far above the data)",
                    transform=ax.transAxes, va="top", fontsize="small", color="red")
        ax.set_xticks(range(len(rows)), labels, rotation=30, ha="right", fontsize="small")
        ax.set_ylabel(f"bytes on {name}")
        ax.grid(alpha=0.3, axis="y")
    handles, names = figure.axes[0].get_legend_handles_labels()
    figure.legend(handles, names, loc="outside right center", fontsize="small")
    figure.suptitle("memory by role (always-live + not-always-live at each tile's peak step)")
    return figure


def plot_roles(rows: Sequence[dict[str, Any]], parameters: Sequence[str],
               path: str | os.PathLike) -> Path | None:
    """Write :func:`roles_figure` of the rows that have memory by role (None: none has)."""
    from gruc.plan.roles import ROLE_COLUMNS

    rows = _with_figures(rows, ROLE_COLUMNS[:-1])
    if not rows:
        return None
    return _save(roles_figure(rows, parameters), path)


ROOFLINE_COLUMNS = ("flops", "exchange_bytes", "flops_per_cycle", "amp_peak_flops_per_cycle",
                    "exchange_peak_bytes_per_cycle")


def roofline_figure(rows: Sequence[dict[str, Any]], parameters: Sequence[str]):
    """FLOPs per cycle against bytes exchanged per FLOP (log-log), one point per configuration,
    under each target's ceilings: the AMP peak (flat) and the exchange peak over the bytes a FLOP
    needs (falling).  A point's height under the lower ceiling is what the plan leaves unused."""
    figure = _figure(9, 6.5)
    ax = figure.subplots()
    xs = np.array([r["exchange_bytes"] / r["flops"] for r in rows])
    ys = np.array([r["flops_per_cycle"] for r in rows], dtype=float)
    ceilings = sorted({(r["amp_peak_flops_per_cycle"], r["exchange_peak_bytes_per_cycle"])
                       for r in rows})
    knees = [bandwidth / peak for peak, bandwidth in ceilings]
    span = np.array([min(xs.min(), *knees) / 10, max(xs.max(), *knees) * 10])
    line = np.geomspace(*span, 200)
    for peak, bandwidth in ceilings:
        ax.plot(line, np.minimum(peak, bandwidth / line), color="red", linestyle="--")
        ax.text(span[0], peak, f"AMP peak {peak:,} FLOP/cycle", ha="left", va="bottom",
                fontsize="small", color="red")
        ax.text(bandwidth / peak, peak / 4, f"exchange {bandwidth:,} B/cycle", rotation=-45,
                fontsize="small", color="red")
    colours = _colours(len(rows))
    for x, y, row, colour in zip(xs, ys, rows, colours):
        ax.scatter([x], [y], color=colour, label=_configuration_label(row, parameters))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*span)
    ax.set_xlabel("bytes exchanged per FLOP")
    ax.set_ylabel("FLOP per cycle")
    ax.grid(alpha=0.3, which="both")
    if len(rows) <= MAX_LEGEND_ENTRIES:
        ax.legend(fontsize="x-small", loc="lower left")
    ax.set_title("roofline: the plans against the target's ceilings")
    return figure


def plot_roofline(rows: Sequence[dict[str, Any]], parameters: Sequence[str],
                  path: str | os.PathLike) -> Path | None:
    """Write :func:`roofline_figure` of the rows with FLOPs and exchange (None: none has)."""
    rows = [r for r in _with_figures(rows, ROOFLINE_COLUMNS)
            if r["flops"] > 0 and r["exchange_bytes"] > 0]
    if not rows:
        return None
    return _save(roofline_figure(rows, parameters), path)


def pareto_figure(rows: Sequence[dict[str, Any]], front: Sequence[dict[str, Any]],
                  axes: Sequence[tuple[str, str]]):
    """The rows that fit on the front's first two axes (grey), the front over them (red, in
    order of the first axis), and which way each axis is better."""
    from gruc.plan.pareto import candidates

    (x_name, x_way), (y_name, y_way) = axes[0], axes[1]
    pool = candidates(rows, axes)
    figure = _figure(8, 6)
    ax = figure.subplots()
    ax.scatter([r[x_name] for r in pool], [r[y_name] for r in pool], color="0.6",
               label=f"{plural(len(pool), 'plan')} that fit")
    front = sorted(front, key=lambda r: r[x_name])
    ax.plot([r[x_name] for r in front], [r[y_name] for r in front], color="red", marker="o",
            label=f"Pareto front ({plural(len(front), 'plan')})")
    for name, axis, setter in ((x_name, ax.xaxis, ax.set_xscale),
                               (y_name, ax.yaxis, ax.set_yscale)):
        if spans_decades([r[name] for r in pool]):
            setter("log")
    ax.set_xlabel(f"{x_name} ({x_way} is better)")
    ax.set_ylabel(f"{y_name} ({y_way} is better)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    more = ", ".join(f"{n} {w}" for n, w in axes[2:])
    ax.set_title("Pareto front" + (f" (also on {more})" if more else ""))
    return figure


def plot_pareto(rows: Sequence[dict[str, Any]], front: Sequence[dict[str, Any]],
                axes: Sequence[tuple[str, str]], path: str | os.PathLike) -> Path:
    """Write :func:`pareto_figure` to ``path`` (its directory made if need be)."""
    return _save(pareto_figure(rows, front, axes), path)


def heatmap_grid(values: np.ndarray, tiles_per_ipu: int) -> np.ndarray:
    """Per-tile values on the report page's tile map grid: each IPU's tiles in rows of
    :func:`~gruc.runtime.viz.tile_grid`'s columns, IPUs one under the other, NaN where an IPU's
    grid has no tile."""
    rows, columns = tile_grid(tiles_per_ipu)
    num_ipus = max(len(values) // tiles_per_ipu, 1)
    grid = np.full((num_ipus, rows * columns), np.nan)
    grid[:, :tiles_per_ipu] = np.asarray(values, dtype=float).reshape(num_ipus, tiles_per_ipu)
    return grid.reshape(num_ipus * rows, columns)


def heatmap_figure(plan):
    """Memory per tile (total including gaps) of one planned configuration (any kind's plan: its
    ``report`` and ``describe()``), on the tile map's
    grid, on a colour scale from the least to the most any tile holds (a scale pinned to the
    capacity paints every tile alike at a few percent use); tiles over capacity crossed."""
    from matplotlib import colormaps

    report = plan.report
    target = report.target
    totals = report.total_bytes.astype(float)
    grid = heatmap_grid(totals, target.tiles_per_ipu)
    rows, columns = tile_grid(target.tiles_per_ipu)
    figure = _figure(float(np.clip(3 + columns * 0.2, 6, 13)),
                     float(np.clip(2.5 + grid.shape[0] * 0.2, 4, 12)))
    ax = figure.subplots()
    low = float(totals.min()) if len(totals) else 0.0
    high = float(totals.max()) if len(totals) else 0.0
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=colormaps["viridis"].with_extremes(
        bad="white"), vmin=low, vmax=high if high > low else low + 1, aspect="equal",
        interpolation="nearest")
    figure.colorbar(image, ax=ax, label="bytes per tile (total including gaps)", shrink=0.8)
    for ipu in range(1, target.num_ipus):
        ax.axhline(ipu * rows - 0.5, color="black", linewidth=1)
    over = [o.tile for o in report.tiles_over_capacity]
    if over:
        ipu, local = np.divmod(np.asarray(over), target.tiles_per_ipu)
        ax.scatter(local % columns, ipu * rows + local // columns, marker="x", color="red",
                   label=f"{plural(len(over), 'tile')} over capacity")
        ax.legend(loc="upper left", bbox_to_anchor=(0, -0.12), fontsize="small")
    ax.set_title(f"{plan.describe()}, {target.describe()}\nmax tile "
                 f"{report.max_tile_bytes:,} B of {target.bytes_per_tile:,} B "
                 f"({100 * report.max_tile_bytes / target.bytes_per_tile:.1f}%); tile = IPU x "
                 f"{target.tiles_per_ipu} + row x {columns} + column", fontsize="medium")
    _integer_ticks(ax.xaxis, False)
    _integer_ticks(ax.yaxis, False)
    ax.set_xlabel("column")
    ax.set_ylabel("row" if target.num_ipus == 1 else f"row (IPUs of {rows} rows, top down)")
    return figure


def plot_tile_heatmap(plan, path: str | os.PathLike) -> Path:
    """Write :func:`heatmap_figure` of one planned configuration to ``path``."""
    return _save(heatmap_figure(plan), path)


def _save(figure, path: str | os.PathLike) -> Path:
    """Write ``figure`` as PNG to ``path`` atomically (a reader never sees half an image), its
    directory made if need be."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=80)
    return path
