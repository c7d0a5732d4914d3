"""The HTML report: one self-contained, interactive page of a compiled program, as a PopVision
user reads one.

Why plotly: people who planned IPU memory hovered tiles, clicked them, zoomed into a run's
supersteps.  Static pictures cannot do that, and chart code of our own would be a second product
to keep.  Plotly ships its JavaScript inside its Python package, so the page inlines it
(``include_plotlyjs=True``) and opens offline, with no network request, anywhere.

Views (:func:`html_report`): memory per tile by each of Poplar's categories
(:mod:`gruc.runtime.footprint`); the tile map (one heatmap per IPU, tiles in rows and columns as
``gruc plan --plots`` lays them out: :func:`gruc.runtime.viz.tile_grid`); a tile's page on a click
(its memory map and its variables with their sizes, categories and live steps); liveness over the
program's steps, of all tiles and of one chosen tile, a hover listing what is live; the program
tree, each step linked to its executions, cycles and exchange; the cycles per tile and per step;
and the BSP trace of the last run.  Figures whose size is fixed by the program (the tile map,
liveness over steps, cycles per step) are drawn here with plotly's Python API; charts with a point
per tile and the trace are drawn in the browser (``page.js``) from the embedded data of
:mod:`gruc.runtime.page_data`, re-binned when the user zooms, so a 1,472-tile chart draws no more
points than it has pixels and a tile's page exists only once it is opened.

Bytes are shown in bytes and KiB = 1024 B (PopVision's binary units).
"""

from __future__ import annotations

import html
import importlib
import json
from importlib import resources
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from gruc.errors import GrucValueError
from gruc.runtime.page_data import CATEGORIES, CATEGORY_COLOURS, ReportDetails, page_data
from gruc.runtime.viz import tile_grid

if TYPE_CHECKING:
    from gruc.runtime.report import Report

CONFIG = {"displaylogo": False, "responsive": True,
          "modeBarButtonsToRemove": ["lasso2d", "select2d"]}
LAYOUT = {"template": "none", "plot_bgcolor": "white", "paper_bgcolor": "white",
          "font": {"family": "Helvetica, Arial, sans-serif", "size": 12}}
CYCLE_COLOURS = {"compute": "#31a354", "exchange": "#3182bd", "sync": "#bdbdbd"}
BUSIEST_TILES = 8


class Raw(str):
    """A table cell that is HTML already (a link), not text to escape."""


def require_plotly(what: str) -> None:
    """A GrucValueError naming ``what`` unless plotly imports: a command that writes a page
    checks this before its work, not after running a layer.  (The plain install brings plotly;
    an install without dependencies may not have it.)"""
    try:
        importlib.import_module("plotly")
    except ImportError:
        raise GrucValueError(f"{what} needs plotly, which is not installed: pip install "
                             "plotly") from None


def integer_axis(count: int, title: str) -> dict[str, Any]:
    """An axis of whole numbers 0..count-1 (steps, tiles): ticks on whole numbers only, at most
    about 20 of them (plotly's own ticks fall on 0.5 when there are few)."""
    step = next(base * 10 ** power for power in range(19) for base in (1, 2, 5)
                if count / (base * 10 ** power) <= 20)
    return {"title": {"text": title}, "tick0": 0, "dtick": step, "tickformat": "d",
            "range": [-0.5, max(count, 1) - 0.5], "showgrid": False}


def figure_html(figure, div_id: str, include_plotlyjs: bool, height: int,
                width: int | None = None) -> str:
    """One figure as a ``<div>`` and its script (the first figure of a page carries plotly's
    library, inlined); as wide as the page unless ``width`` (pixels) is given."""
    import plotly.io

    figure.update_layout(**LAYOUT, height=height, **({"width": width} if width else {}))
    return plotly.io.to_html(figure, include_plotlyjs=include_plotlyjs, full_html=False,
                             div_id=div_id, config=CONFIG,
                             default_width=f"{width}px" if width else "100%",
                             default_height=f"{height}px")


def table_html(headers: Sequence[str], rows: Sequence[Sequence[object]], table_id: str) -> str:
    """An HTML table: numbers right-aligned with thousands separators, text left-aligned and
    escaped, :class:`Raw` cells as they are."""
    def cell(tag: str, value: object) -> str:
        if isinstance(value, Raw):
            return f'<{tag} class="text">{value}</{tag}>'
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return f"<{tag}>{int(value):,}</{tag}>"
        return f'<{tag} class="text">{html.escape(str(value))}</{tag}>'

    head = "".join(cell("th", h) for h in headers)
    body = "".join("<tr>" + "".join(cell("td", v) for v in row) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def page_html(title: str, subtitle: str, sections: Sequence[tuple[str, str, str]],
              tail: str = "") -> str:
    """The page around ``sections`` (``(anchor, heading, content)``; an empty heading: a section
    hidden until the page's script opens it): a navigation bar, the style, ``tail`` (scripts)."""
    style = resources.files("gruc.runtime").joinpath("page.css").read_text(encoding="utf-8")
    nav = "".join(f'<a href="#{anchor}">{html.escape(name)}</a>'
                  for anchor, name, _ in sections if name)
    body = "".join(f'<section id="{anchor}"{"" if name else " hidden"}>'
                   + (f"<h2>{html.escape(name)}</h2>" if name else "") + f"{content}</section>"
                   for anchor, name, content in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{style}</style></head>"
            f"<body><header><h1>{html.escape(title)}</h1><p>{html.escape(subtitle)}</p>"
            f"<nav>{nav}</nav></header>{body}{tail}</body></html>\n")


def data_script(data: dict[str, Any]) -> str:
    """``data`` as the page's JSON island (``</`` escaped, so no name can close the script)."""
    text = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return f'<script type="application/json" id="gruc-data">{text}</script>'


# ---- figures drawn here ---------------------------------------------------------------------------
Metric = tuple[str, np.ndarray, str]
"""A tile map's colouring: its name, its value per tile, and its unit (``KiB`` of bytes, or as
they are)."""


def _scale(values: np.ndarray, diverging: bool) -> dict[str, Any]:
    """A colour axis fitted to ``values``: from their least to their most (a scale pinned to the
    capacity paints every tile alike at a few percent use), or centred on zero."""
    if diverging:
        limit = max(float(np.abs(values).max(initial=0)), 1e-9)
        return {"colorscale": "RdBu_r", "cmin": -limit, "cmax": limit}
    low = float(values.min()) if len(values) else 0.0
    high = float(values.max()) if len(values) else 0.0
    return {"colorscale": "Viridis", "cmin": low, "cmax": high if high > low else low + 1}


def tile_map_figure(metrics: Sequence[Metric], tiles_per_ipu: int, capacity_over: np.ndarray
                    | None = None, diverging: bool = False):
    """One heatmap of tiles per IPU (row x column as :func:`~gruc.runtime.viz.tile_grid` lays
    them out), coloured by the first of ``metrics`` on a scale fitted to the data, the others a
    menu away; tiles in ``capacity_over`` marked with a red cross.  A cell's ``customdata`` is
    its tile number (what a click opens).  Returns the figure, its rows of cells and its
    width in pixels (cells stay square)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows, columns = tile_grid(tiles_per_ipu)
    num_tiles = len(metrics[0][1])
    num_ipus = max(num_tiles // tiles_per_ipu, 1)
    figure = make_subplots(rows=num_ipus, cols=1, vertical_spacing=0.08 / num_ipus,
                           subplot_titles=[f"IPU {k}" for k in range(num_ipus)])
    tiles = np.full((num_ipus, rows * columns), -1)
    tiles[:, :tiles_per_ipu] = np.arange(num_ipus * tiles_per_ipu).reshape(num_ipus, -1)
    tiles = tiles.reshape(num_ipus, rows, columns)

    def shown(values: np.ndarray, unit: str) -> np.ndarray:
        return values / 1024 if unit == "KiB" else values.astype(float)

    def grids(values: np.ndarray, unit: str) -> list:
        scaled = shown(values, unit)
        return [np.where(t >= 0, scaled[np.maximum(t, 0)], np.nan).tolist() for t in tiles]

    name, values, unit = metrics[0]
    heatmaps = []
    for ipu in range(num_ipus):
        heatmaps.append(len(figure.data))
        figure.add_trace(go.Heatmap(
            z=grids(values, unit)[ipu], customdata=tiles[ipu].tolist(), coloraxis="coloraxis",
            hoverongaps=False, xgap=1, ygap=1,
            hovertemplate="tile %{customdata}<br>row %{y}, column %{x}<br>%{z:,.1f}"
                          "<extra></extra>"), row=ipu + 1, col=1)
        over = np.flatnonzero(capacity_over[ipu * tiles_per_ipu:(ipu + 1) * tiles_per_ipu]) \
            if capacity_over is not None else []
        if len(over):
            figure.add_trace(go.Scatter(
                x=(over % columns).tolist(), y=(over // columns).tolist(), mode="markers",
                marker={"symbol": "x", "color": "red", "size": 9}, hoverinfo="skip",
                name="over capacity", showlegend=ipu == 0), row=ipu + 1, col=1)
        figure.update_xaxes(integer_axis(columns, "column" if ipu == num_ipus - 1 else ""),
                            row=ipu + 1, col=1)
        figure.update_yaxes({**integer_axis(rows, "row"), "autorange": "reversed",
                             "range": None}, row=ipu + 1, col=1)

    def axis(name: str, values: np.ndarray, unit: str) -> dict[str, Any]:
        return {**_scale(shown(values, unit), diverging),
                "colorbar": {"title": {"text": f"{name} ({unit})", "side": "right"}}}

    menu = [{"label": f"{name} ({unit})", "method": "update",
             "args": [{"z": grids(values, unit)}, {"coloraxis": axis(name, values, unit)},
                      heatmaps]} for name, values, unit in metrics]
    figure.update_layout(
        coloraxis=axis(name, values, unit),
        updatemenus=[{"buttons": menu, "x": 0, "xanchor": "left", "y": 1.0, "yanchor": "bottom",
                      "pad": {"b": 22 if num_ipus == 1 else 30}}] if len(metrics) > 1 else [],
        legend={"orientation": "h", "y": -0.12 / num_ipus},
        margin={"l": 60, "r": 20, "t": 80 if len(metrics) > 1 else 30, "b": 50})
    cell = int(np.clip(min(900 / columns, 1400 / (num_ipus * rows)), 6, 40))
    return figure, 110 + cell * num_ipus * rows + (50 if len(metrics) > 1 else 0), \
        max(120 + cell * columns + 160, 480)


def liveness_figure(data: dict[str, Any]):
    """Bytes of tensor data live at each step on all tiles (always-live and not-always-live),
    and on the busiest tile at that step (right axis)."""
    import plotly.graph_objects as go

    total = np.asarray(data["live"]["total"], dtype=np.int64)
    steps = list(range(len(total)))
    always = [data["live"]["always"]] * len(steps)
    figure = go.Figure([
        go.Scatter(x=steps, y=always, name="always-live", stackgroup="all", mode="lines",
                   line={"width": 0, "shape": "hvh"},
                   fillcolor=CATEGORY_COLOURS["variable (always live)"],
                   hovertemplate="%{y:,} B<extra>always-live</extra>"),
        go.Scatter(x=steps, y=(total - data["live"]["always"]).tolist(), name="not-always-live",
                   stackgroup="all", mode="lines", line={"width": 0, "shape": "hvh"},
                   fillcolor=CATEGORY_COLOURS["variable (not always live)"],
                   hovertemplate="%{y:,} B<extra>not-always-live</extra>"),
        go.Scatter(x=steps, y=data["live"]["maxTile"], name="busiest tile (right axis)",
                   yaxis="y2", mode="lines", line={"color": "black", "shape": "hvh", "width": 1},
                   hovertemplate="%{y:,} B<extra>busiest tile</extra>")])
    figure.update_layout(
        hovermode="x unified", xaxis=integer_axis(len(steps), "program step"),
        yaxis={"title": {"text": "bytes, all tiles"}, "tickformat": ".3~s", "rangemode": "tozero"},
        yaxis2={"title": {"text": "bytes, busiest tile"}, "tickformat": ".3~s", "overlaying": "y",
                "side": "right", "rangemode": "tozero", "showgrid": False},
        legend={"orientation": "h", "y": -0.25}, margin={"l": 70, "r": 70, "t": 10, "b": 60})
    return figure


def steps_figure(data: dict[str, Any]):
    """Cycles each step took over all its executions, by kind (click a bar for the step)."""
    import plotly.graph_objects as go

    steps = data["steps"]
    x = list(range(len(steps)))
    custom = [[s["where"], s["what"], s["executions"]] for s in steps]
    figure = go.Figure([
        go.Bar(x=x, y=[s["executions"] * s[kind] for s in steps], name=kind, customdata=custom,
               marker_color=colour, hovertemplate="step %{x}: %{customdata[1]}<br>"
               "%{customdata[0]}<br>x%{customdata[2]:,}: %{y:,} " + kind +
               " cycles<extra></extra>")
        for kind, colour in CYCLE_COLOURS.items()])
    figure.update_layout(barmode="stack", xaxis=integer_axis(len(steps), "program step"),
                         yaxis={"title": {"text": "cycles (all executions)"},
                                "tickformat": ".3~s"},
                         legend={"orientation": "h", "y": -0.25},
                         margin={"l": 70, "r": 20, "t": 10, "b": 60})
    return figure


# ---- tables -------------------------------------------------------------------------------------
def categories_table(data: dict[str, Any]) -> str:
    """Each category's bytes over all tiles, its most on one tile and that tile."""
    rows = []
    for name in CATEGORIES:
        values = np.asarray(data["tiles"][name], dtype=np.int64)
        tile = int(np.argmax(values)) if len(values) else 0
        rows.append([name, int(values.sum()), int(values.max(initial=0)),
                     Raw(f'<a href="#tile={tile}" data-tile="{tile}">{tile}</a>')])
    return table_html(["category", "bytes (all tiles)", "most on a tile", "that tile"], rows,
                      "categories")


def busiest_table(report: "Report", details: ReportDetails) -> str:
    """The tiles holding the most bytes, each with its largest tensors: where memory runs out
    first (a tile's number opens its page)."""
    total = report.total_bytes
    order = np.lexsort((np.arange(len(total)), -total))[:BUSIEST_TILES]
    capacity = report.target.bytes_per_tile
    rows = []
    for tile in order.tolist():
        blocks = sorted(details.plan.tile_blocks(tile), key=lambda b: (-b[2], b[0]))
        largest = ", ".join(f"{name} ({nbytes:,} B)" for name, _, nbytes, _ in blocks[:5])
        rows.append([Raw(f'<a href="#tile={tile}" data-tile="{tile}">{tile}</a>'),
                     int(total[tile]), f"{100.0 * total[tile] / capacity:.1f}%", largest])
    return table_html(["tile", "bytes", "of capacity", "largest tensors"], rows, "busiest-tiles")


def steps_table(data: dict[str, Any]) -> str:
    """One row per step: executions, cycles and exchange bytes per execution, its cycles over
    all executions and their share of the run."""
    total = max(sum(s["executions"] * (s["compute"] + s["exchange"] + s["sync"])
                    for s in data["steps"]), 1)
    rows = []
    for k, s in enumerate(data["steps"]):
        spent = s["executions"] * (s["compute"] + s["exchange"] + s["sync"])
        rows.append([Raw(f'<a href="#step={k}" data-step="{k}">{k}</a>'), s["where"], s["what"],
                     s["executions"], s["compute"], s["exchange"], s["sync"],
                     s["exchangeBytes"], spent, f"{100.0 * spent / total:.1f}%"])
    return table_html(["step", "where", "what", "executions", "compute", "exchange", "sync",
                       "exchange bytes", "cycles (all executions)", "share"], rows,
                      "compute-sets")


# ---- the page -------------------------------------------------------------------------------------
def html_report(report: "Report", details: ReportDetails, title: str) -> str:
    """The report page of ``report`` (see the module docstring)."""
    require_plotly("the HTML report")
    data = page_data(report, details, title)
    target = report.target
    rows, columns = data["grid"]
    busiest = int(np.argmax(report.total_bytes)) if target.num_tiles else 0
    categories = {name: np.asarray(values) for name, values in data["tiles"].items()}
    metrics = [("total including gaps", report.total_bytes, "KiB"),
               ("in use (no gaps)", report.always_live_bytes + report.not_always_live_max_bytes,
                "KiB"),
               ("tensor data", categories["variable (always live)"] + categories["constant"]
                + categories["variable (not always live)"], "KiB"),
               ("code and vertex state", report.always_live_bytes - categories[
                   "variable (always live)"] - categories["constant"], "KiB")]
    if data["ran"]:
        metrics.append(("compute + exchange cycles", report.compute_cycles_by_tile
                        + report.exchange_cycles_by_tile, "cycles"))
    tile_map, map_height, map_width = tile_map_figure(
        metrics, target.tiles_per_ipu, report.total_bytes > target.bytes_per_tile)
    script = resources.files("gruc.runtime").joinpath("page.js").read_text(encoding="utf-8")
    summary = "\n".join(report.summary_lines())
    trace = ("<p>Each row is a track of tiles (the busiest tile of its group); zoom in to see "
             "each superstep's phases; hover for the step.</p>"
             '<div id="trace-chart" class="chart"></div><div id="trace-info" class="info"></div>'
             if data["trace"] else
             '<p id="trace-chart">No run to trace: the program was compiled but not run '
             "(a trace needs a run's loop trips and branches).</p>")
    sections = [
        ("summary", "Summary", f'<pre id="summary-text">{html.escape(summary)}</pre>'),
        ("memory", "Memory per tile",
         "<p>Every category Poplar counts on a tile, stacked; with <i>gaps</i> (hidden at "
         "first: click it in the legend) each stack reaches the tile's total including gaps, "
         "the interleaved region's start on a tile with data there.  Drag to zoom (each point "
         "is one tile once there are fewer tiles than pixels); click a tile for its page.</p>"
         '<div id="memory-chart" class="chart"></div>' + categories_table(data)),
        ("tile-map", "Tile map",
         f"<p>{target.num_ipus} IPU{'s' if target.num_ipus > 1 else ''} of {rows} rows x "
         f"{columns} columns: tile = IPU x {target.tiles_per_ipu} + row x {columns} + column; "
         f"colour: the figure chosen in the menu, scaled to the data; capacity "
         f"{target.bytes_per_tile:,} B.  Click a tile for its page.</p>"
         + figure_html(tile_map, "tile-heatmap", True, map_height, map_width)
         + '<div id="tile-map-info" class="info">Hover a tile for its categories.</div>'
         + busiest_table(report, details)),
        ("tile-page", "",
         '<h2 id="tile-title">Tile</h2><button id="tile-close" type="button">close</button>'
         '<div id="tile-figures"></div><h3>Memory map</h3><div id="tile-memory-map"></div>'
         '<h3>Variables</h3><div id="tile-variables"></div><h3>Liveness on this tile</h3>'
         '<div id="tile-page-liveness" class="chart"></div>'
         '<div id="tile-live-info" class="info"></div>'),
        ("liveness", "Liveness over program steps",
         "<p>Tensor data held at each step (a loop body's steps appear once, as in the "
         "program); hover a step for what is live.</p>"
         + figure_html(liveness_figure(data), "liveness-chart", False, 340)
         + '<div id="liveness-info" class="info">Hover a step.</div>'
         f'<p><label>One tile: <input id="liveness-tile" type="number" min="0" '
         f'max="{target.num_tiles - 1}" value="{busiest}"></label> (the busiest is '
         f"{busiest})</p>"
         '<div id="tile-liveness-chart" class="chart"></div>'),
        ("program", "Program tree",
         "<p>Each step with its executions, cycles and exchange per execution; click one for "
         'its figures.</p><div class="split"><div id="program-tree"></div>'
         '<div id="step-detail" class="info">Click a step.</div></div>'),
        ("steps", "Cycles per step",
         figure_html(steps_figure(data), "steps-chart", False, 320) + steps_table(data)),
        ("tile-cycles", "Cycles per tile",
         "<p>Each tile's compute, exchange and sync (waiting for busier tiles included) over "
         "the runs so far: every tile's three add up to the run's cycles.</p>"
         '<div id="tile-cycles-chart" class="chart"></div>'),
        ("trace", "BSP trace", trace),
    ]
    tail = data_script(data) + f"<script>{script}</script>"
    return page_html(title, f"{target.describe()}; bytes in B and KiB = 1024 B", sections, tail)
