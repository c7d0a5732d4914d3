"""What people look at: a self-contained HTML report of a compiled program, DOT dataflow graphs,
and a one-line terminal status for long work.

Why static artefacts: PopVision's users rely on four views of a Poplar program — memory per tile
(by liveness and by category), the tile map, liveness over the program's steps, and the program
tree with each step's cycles (here with each tile's compute, exchange and sync cycles beside
them) — and its release notes are a list of reports too slow to open.  Here
each view is a plain picture or table in one HTML file: plots are PNGs embedded as base64 (drawn
with matplotlib's Agg renderer through :class:`matplotlib.figure.Figure`, so no GUI and no global
pyplot state), the program tree is nested ``<details>`` elements, and there is no script and no
network request, so the file opens anywhere, offline, and stays a few hundred kilobytes for a
1,472-tile target.

Memory categories are Poplar's (:mod:`gruc.runtime.footprint`), grouped: always-live *tensors*,
*code* (vertex, control and exchange code), *vertex state*, *not-always-live* bytes at the tile's
peak (temporaries, sequence buffers that share bytes over time, exchange buffers), plus the *gaps*
up to the tile's highest address (the interleaved region's start, where a tile has data there),
so a tile's stacked bar is its total including gaps.  Bytes are
shown in KiB = 1024 B (PopVision's binary units), with exact byte counts in tooltips and tables.

Liveness over steps uses the static steps of the program (a loop body appears once, as in the IR):
at step ``s`` a tile holds its always-live blocks and the not-always-live blocks whose variables
occupy memory at ``s`` (:meth:`gruc.passes.liveness.Liveness.step_matrix`).
"""

from __future__ import annotations

import base64
import html
import importlib
import io
import math
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

import numpy as np

from gruc.errors import GrucValueError
from gruc.ir.dataflow import dataflow_graph
from gruc.ir.module import Module
from gruc.ir.printer import format_type
from gruc.runtime.lower import (Block, Branch, CallFunction, CopyStep, ExecuteStep, Loop,
                                MarkStep, PrintStep, WhileLoop)

if TYPE_CHECKING:
    from gruc.runtime.engine import Engine

CATEGORIES = ("tensors (always-live)", "code", "vertex state", "not-always-live", "gaps")
"""Memory categories of a tile's bar, bottom to top (their bytes add up to the tile's total)."""
COLOURS = ("#3182bd", "#9e9ac8", "#6baed6", "#fd8d3c", "#d9d9d9")
CYCLE_COLOURS = ("#31a354", "#3182bd", "#bdbdbd")
"""Compute, exchange and sync, in the per-step and the per-tile cycle charts."""
TOP_TILES = 8
"""Tiles listed with their largest tensors, busiest first."""
LARGEST_PER_TILE = 5


# ------------------------------------------------------------------------------------- DOT
def dot_string(text: str) -> str:
    """``text`` as a DOT quoted string: ``"`` and ``\\`` escaped, newlines as ``\\n`` (which
    Graphviz renders as a line break in labels)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\r", "").replace("\n", "\\n") + '"'


def dataflow_dot(module: Module, name: str = "dataflow") -> str:
    """The dataflow graph of ``module`` (:func:`gruc.ir.dataflow.dataflow_graph`) in DOT.

    Variables are boxes (the variable's name, type and bytes), steps are ellipses numbered
    in program order; an edge variable → step is a read, step → variable a write (dashed when the
    write covers only part of the variable).  Node ids are ``v<index>`` and ``s<index>``.
    """
    flow = dataflow_graph(module)
    variables = module.graph.variables
    ident = {node: f"{'v' if node[0] == 'var' else 's'}{node[1]}" for node in flow.nodes}
    lines = [f"digraph {dot_string(name)} {{",
             '  graph [rankdir=TB, fontname="Helvetica"];',
             '  node [fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=8];']
    for node, data in flow.nodes(data=True):
        if node[0] == "var":
            variable = variables[node[1]]
            label = (f"{data['name']}\n{format_type(variable.dtype, variable.shape)}\n"
                     f"{data['nbytes']} B")
            lines.append(f"  {dot_string(ident[node])} [shape=box, style=filled, "
                         f'fillcolor="#dbe9f6", label={dot_string(label)}];')
        else:
            label = f"{node[1]}: {data['text']}"
            lines.append(f"  {dot_string(ident[node])} [shape=ellipse, style=filled, "
                         f'fillcolor="#fdebd0", label={dot_string(label)}];')
    for a, b, data in flow.edges(data=True):
        style = "solid" if data["kind"] == "read" or data.get("full") else "dashed"
        lines.append(f"  {dot_string(ident[a])} -> {dot_string(ident[b])} "
                     f"[label={dot_string(data['kind'])}, style={style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ memory data
@dataclass(frozen=True)
class MemoryViews:
    """The numbers behind the memory views of one plan (every array in bytes)."""

    by_category: dict[str, np.ndarray]
    """Per category (:data:`CATEGORIES`), bytes on each tile."""
    total: np.ndarray
    """Per tile: total including gaps (the sum of the categories)."""
    live_total: np.ndarray
    """Per step: bytes held on all tiles together."""
    live_always: int
    """Bytes of always-live blocks on all tiles (held at every step)."""
    live_max_tile: np.ndarray
    """Per step: bytes held on the busiest tile at that step."""
    capacity: int


def memory_views(engine: "Engine") -> MemoryViews:
    """Memory by tile and category (Poplar's categories, grouped), and bytes live at each step,
    from ``engine``'s footprint and plan."""
    plan, graph = engine.plan, engine.module.graph
    liveness = plan.liveness
    num_tiles = plan.num_tiles
    always_live = np.zeros(len(graph.variables), dtype=bool)
    always_live[list(liveness.always_live)] = True
    footprint = engine.footprint
    always = footprint.always_live
    by_category = {
        "tensors (always-live)": always["variable"] + always["constant"],
        "code": always["vertexCode"] + always["controlCode"] + always["internalExchangeCode"],
        "vertex state": always["vertexInstanceState"] + always["vertexFieldData"],
        "not-always-live": footprint.not_always_live_peak.astype(np.int64),
        "gaps": (footprint.total_including_gaps - footprint.always_live_bytes
                 - footprint.not_always_live_peak).clip(min=0).astype(np.int64)}

    temporary = np.flatnonzero(~always_live[plan.block_variable])
    variables = np.unique(plan.block_variable[temporary])
    live = liveness.step_matrix(variables.tolist()) if len(variables) else \
        np.zeros((0, liveness.num_steps), dtype=bool)
    row = np.searchsorted(variables, plan.block_variable[temporary])
    tiles, sizes = plan.block_tile[temporary], plan.block_size[temporary]
    live_total = np.zeros(liveness.num_steps, dtype=np.int64)
    live_max = np.zeros(liveness.num_steps, dtype=np.int64)
    always_by_tile = plan.always_live_bytes.astype(np.int64)
    for step in range(liveness.num_steps):
        held = live[row, step] if len(row) else np.zeros(0, dtype=bool)
        on_tile = np.bincount(tiles[held], weights=sizes[held], minlength=num_tiles)
        live_total[step] = int(on_tile.sum())
        live_max[step] = int((always_by_tile + on_tile).max(initial=0))
    live_always = int(always_by_tile.sum())
    return MemoryViews(by_category, footprint.total_including_gaps.astype(np.int64),
                       live_total + live_always, live_always, live_max, plan.capacity)


def tile_grid(tiles_per_ipu: int) -> tuple[int, int]:
    """``(rows, columns)`` of one IPU's tiles in the heatmap: about twice as wide as tall, and
    exact (no padding) when ``tiles_per_ipu`` has a divisor near there (1472 → 32 x 46)."""
    target = math.sqrt(2 * tiles_per_ipu)
    divisors = [d for d in range(1, tiles_per_ipu + 1) if tiles_per_ipu % d == 0
                and target / 2 <= d <= 2 * target]
    columns = min(divisors, key=lambda d: abs(d - target)) if divisors else math.ceil(target)
    return -(-tiles_per_ipu // columns), columns


# ------------------------------------------------------------------------------------ plots
def _kib(nbytes: float) -> str:
    return f"{nbytes / 1024:.1f} KiB"


def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def require_matplotlib(what: str) -> None:
    """A GrucValueError naming ``what`` unless matplotlib imports: a command that draws checks
    this before its work, not after running a layer.  (The plain install brings matplotlib; an
    install without dependencies may not have it.)"""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        raise GrucValueError(f"{what} needs matplotlib, which is not installed: pip install "
                             "matplotlib") from None


def _figure(width: float, height: float):
    require_matplotlib("the HTML report")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _capacity_line(ax, capacity: int, top: float) -> None:
    """Draw the tile capacity when it is on a readable scale; else say where it is."""
    if top >= 0.25 * capacity:
        ax.axhline(capacity / 1024, color="red", linestyle="--", linewidth=1,
                   label=f"capacity {_kib(capacity)}")
    else:
        ax.plot([], [], color="red", linestyle="--", label=f"capacity {_kib(capacity)} (off scale)")


def _stacked_per_tile(ax, bands: list[tuple[str, np.ndarray, str]], tiles_per_ipu: int) -> None:
    """``(label, value per tile, colour)`` bands stacked over the tiles, IPUs split by lines."""
    tiles = np.arange(len(bands[0][1]))
    bottom = np.zeros(len(tiles))
    for label, per_tile, colour in bands:
        top = bottom + per_tile
        ax.fill_between(tiles, bottom, top, step="mid", color=colour, label=label, linewidth=0)
        bottom = top
    for boundary in range(tiles_per_ipu, len(tiles), tiles_per_ipu):
        ax.axvline(boundary - 0.5, color="black", linewidth=0.5)
    ax.set_xlim(-0.5, len(tiles) - 0.5)
    ax.set_xlabel("tile")


def memory_chart(views: MemoryViews, tiles_per_ipu: int) -> str:
    """PNG (base64): bytes per tile, stacked by category, with the capacity."""
    figure = _figure(13, 4)
    ax = figure.add_subplot()
    _stacked_per_tile(ax, [(label, views.by_category[label] / 1024, colour)
                           for label, colour in zip(CATEGORIES, COLOURS)], tiles_per_ipu)
    _capacity_line(ax, views.capacity, float(views.total.max(initial=0)))
    ax.set_ylim(bottom=0)
    ax.set_ylabel("KiB")
    ax.set_title("Memory per tile (total including gaps), by category")
    ax.legend(loc="upper right", fontsize=8)
    return _png(figure)


def tile_heatmap(views: MemoryViews, tiles_per_ipu: int) -> str:
    """PNG (base64): one cell per tile, IPUs stacked; colour = total bytes; tiles over capacity
    red.  The scale runs to the capacity when some tile exceeds it, else to the busiest tile."""
    rows, columns = tile_grid(tiles_per_ipu)
    num_ipus = len(views.total) // tiles_per_ipu
    grid = np.full((num_ipus, rows * columns), np.nan)
    grid[:, :tiles_per_ipu] = views.total.reshape(num_ipus, tiles_per_ipu) / 1024
    grid = grid.reshape(num_ipus * rows, columns)
    over = views.total.max(initial=0) > views.capacity
    top = views.capacity if over else max(float(views.total.max(initial=0)), 1.0)
    figure = _figure(float(np.clip(2.0 + columns * 0.25, 5, 13)),
                     float(np.clip(1.5 + num_ipus * rows * 0.25, 2.5, 9)))
    ax = figure.add_subplot()
    from matplotlib import colormaps

    cmap = colormaps["viridis"].with_extremes(over="red", bad="white")
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=top / 1024,
                      aspect="equal", interpolation="nearest")
    for ipu in range(1, num_ipus):
        ax.axhline(ipu * rows - 0.5, color="black", linewidth=1)
    bar = figure.colorbar(image, ax=ax, extend="max" if over else "neither", shrink=0.8)
    bar.set_label("KiB per tile" + (" (red: over capacity)" if over else ""))
    ax.set_title(f"Tile map: {num_ipus} IPU x {rows} x {columns} (tile = row x {columns} + "
                 f"column); capacity {_kib(views.capacity)}", fontsize=9)
    ax.set_xlabel("column")
    ax.set_ylabel("row")
    return _png(figure)


def liveness_chart(views: MemoryViews) -> str:
    """PNG (base64): bytes held at each step, on all tiles and on the busiest tile."""
    figure = _figure(13, 3.5)
    left, right = figure.subplots(1, 2)
    steps = np.arange(len(views.live_total))
    always = np.full(len(steps), views.live_always / 1024)
    left.fill_between(steps, 0, always, step="mid", color=COLOURS[1], label="always-live")
    left.fill_between(steps, always, views.live_total / 1024, step="mid", color=COLOURS[3],
                      label="not-always-live")
    left.set_title("Bytes live per step, all tiles")
    right.plot(steps, views.live_max_tile / 1024, drawstyle="steps-mid", color="black",
               label="busiest tile")
    _capacity_line(right, views.capacity, float(views.live_max_tile.max(initial=0)))
    right.set_title("Bytes live per step, busiest tile")
    for ax in (left, right):
        ax.set_xlabel("program step")
        ax.set_ylabel("KiB")
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper right", fontsize=8)
    return _png(figure)


def cycles_chart(engine: "Engine") -> str:
    """PNG (base64): cycles spent in each step over the runs so far, by kind."""
    counts = engine.report.step_counts.astype(np.int64)
    kinds = {"compute": [c.compute_cycles for c in engine.costs],
             "exchange": [c.exchange_cycles for c in engine.costs],
             "sync": [c.sync_cycles for c in engine.costs]}
    figure = _figure(13, 3)
    ax = figure.add_subplot()
    steps = np.arange(len(counts))
    bottom = np.zeros(len(steps))
    for (kind, cycles), colour in zip(kinds.items(), CYCLE_COLOURS):
        height = counts * np.asarray(cycles, dtype=np.int64)
        ax.bar(steps, height, bottom=bottom, color=colour, label=kind, width=0.8)
        bottom = bottom + height
    ax.set_xlabel("program step")
    ax.set_ylabel("cycles (all executions)")
    ax.set_title("Cycles per step")
    ax.legend(loc="upper right", fontsize=8)
    return _png(figure)


def tile_cycles_chart(engine: "Engine") -> str:
    """PNG (base64): cycles each tile spent computing, exchanging and in syncs (waiting for
    busier tiles included) over the runs so far; every tile's three add up to the run's total,
    so the sync band is the load imbalance."""
    report = engine.report
    figure = _figure(13, 3.5)
    ax = figure.add_subplot()
    per_tile = (report.compute_cycles_by_tile, report.exchange_cycles_by_tile,
                report.sync_cycles_by_tile)
    _stacked_per_tile(ax, list(zip(("compute", "exchange", "sync"), per_tile, CYCLE_COLOURS)),
                      engine.module.graph.target.tiles_per_ipu)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("cycles (all executions)")
    ax.set_title("Cycles per tile, by kind")
    ax.legend(loc="upper right", fontsize=8)
    return _png(figure)


# ------------------------------------------------------------------------------------- HTML
_STYLE = """
body { font-family: Helvetica, Arial, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
img { max-width: 100%; }
pre { background: #f6f6f6; padding: 0.6em; }
table { border-collapse: collapse; font-size: 0.85em; }
td, th { border: 1px solid #ddd; padding: 2px 6px; text-align: right; }
td.text, th.text { text-align: left; }
ul.tree { list-style: none; padding-left: 1.2em; font-family: monospace; font-size: 0.9em; }
.step { color: #08519c; } .cost { color: #777; }
nav a { margin-right: 1em; }
"""


class _Tree:
    """The lowered program tree (its leaves carry the step numbers the report uses) as HTML."""

    def __init__(self, engine: "Engine") -> None:
        self.engine = engine
        self.steps = engine.plan.liveness.steps
        self.counts = engine.report.step_counts.tolist()
        self.functions = engine.module.functions  # as lowered: CallFunction numbers index it

    def leaf(self, step: int) -> str:
        cost = self.engine.costs[step]
        return (f'<li><span class="step">step {step}</span> {html.escape(self.steps[step].text)} '
                f'<span class="cost">x{self.counts[step]}, {cost.total_cycles} cycles each</span>'
                "</li>")

    def group(self, title: str, body: str, open_: bool = True) -> str:
        return (f"<li><details{' open' if open_ else ''}><summary>{html.escape(title)}</summary>"
                f'<ul class="tree">{body}</ul></details></li>')

    def item(self, item) -> str:
        """``item`` of the lowered tree as HTML list items: a leaf per step with its count and
        cost, loops, ``while`` and ``if`` as groups with their predicate steps, a call by function
        name."""
        if isinstance(item, (ExecuteStep, CopyStep, MarkStep, PrintStep)):
            return self.leaf(item.step)
        if isinstance(item, Block):
            return "".join(self.item(child) for child in item.items)
        if isinstance(item, Loop):
            return self.group(f"repeat {item.count}", self.item(item.body))
        if isinstance(item, WhileLoop):
            return self.group("repeat while true", self.item(item.condition) + self.leaf(item.step)
                              + self.group("body", self.item(item.body)))
        if isinstance(item, Branch):
            return (self.group("if", self.leaf(item.step) + self.group("then", self.item(item.then))
                               + self.group("else", self.item(item.otherwise))))
        if isinstance(item, CallFunction):
            name = self.functions[item.function].name
            return f"<li>call function {html.escape(name)}</li>"
        raise GrucValueError(f"the program tree cannot show {type(item).__name__}")

    def html(self) -> str:
        executable = self.engine.executable
        parts = [self.group(f"program {k}", self.item(block))
                 for k, block in enumerate(executable.programs)]
        for function, block in zip(self.functions, executable.functions):
            parts.append(self.group(f"function {function.name}", self.item(block)))
        return f'<ul class="tree" id="program-tree">{"".join(parts)}</ul>'


def _table(headers: list[str], rows: list[list[object]], text_columns: set[int],
           table_id: str) -> str:
    """An HTML table, every cell escaped; columns in ``text_columns`` are marked ``text``
    (left-aligned, numbers are not)."""
    def cell(tag: str, k: int, value: object) -> str:
        kind = ' class="text"' if k in text_columns else ""
        return f"<{tag}{kind}>{html.escape(str(value))}</{tag}>"

    head = "".join(cell("th", k, h) for k, h in enumerate(headers))
    body = "".join("<tr>" + "".join(cell("td", k, v) for k, v in enumerate(row)) + "</tr>"
                   for row in rows)
    return f'<table id="{table_id}"><tr>{head}</tr>{body}</table>'


def _steps_table(engine: "Engine") -> str:
    """One row per step: executions, per-execution cycles and bytes, and its cycles over all
    executions with their share of the total (the steps that dominate a run)."""
    report = engine.report
    total = max(report.cycles.total, 1)
    rows = []
    for step, cost, count in zip(report.steps, report.costs, report.step_counts.tolist()):
        spent = count * cost.total_cycles
        rows.append([step.index, step.where, step.text, count, cost.compute_cycles,
                     cost.exchange_cycles, cost.sync_cycles, cost.exchange_bytes, spent,
                     f"{100.0 * spent / total:.1f}%"])
    headers = ["step", "where", "what", "executions", "compute", "exchange", "sync",
               "exchange bytes", "cycles (all executions)", "share"]
    return _table(headers, rows, {1, 2}, "compute-sets")


def _tiles_table(engine: "Engine", views: MemoryViews) -> str:
    """The tiles holding the most bytes (at most TOP_TILES, none empty), each with its largest
    tensors: where memory runs out first."""
    order = np.lexsort((np.arange(len(views.total)), -views.total))[:TOP_TILES]
    rows = []
    for tile in order.tolist():
        if views.total[tile] == 0:
            break
        blocks = sorted(engine.plan.tile_blocks(tile), key=lambda b: (-b[2], b[0]))
        largest = ", ".join(f"{name} ({nbytes} B{', always-live' if always else ''})"
                            for name, _, nbytes, always in blocks[:LARGEST_PER_TILE])
        rows.append([tile, int(views.total[tile]), f"{100.0 * views.total[tile] / views.capacity:.1f}%",
                     largest])
    return _table(["tile", "bytes", "of capacity", "largest tensors"], rows, {3}, "busiest-tiles")


def html_report(engine: "Engine", title: str = "gruc report") -> str:
    """One self-contained HTML page with every view of ``engine``'s program (see the module
    docstring); cycles are those of the runs so far (none before the first run)."""
    report, target = engine.report, engine.module.graph.target
    views = memory_views(engine)
    categories = _table(
        ["category", "bytes (all tiles)", "max per tile"],
        [[label, int(views.by_category[label].sum()), int(views.by_category[label].max(initial=0))]
         for label in CATEGORIES], {0}, "categories")
    sections = [
        ("summary", "Summary", f"<pre>{html.escape(chr(10).join(report.summary_lines()))}</pre>"),
        ("memory", "Memory per tile",
         f'<img id="memory-chart" alt="memory per tile" '
         f'src="data:image/png;base64,{memory_chart(views, target.tiles_per_ipu)}">{categories}'),
        ("tile-map", "Tile map",
         f'<img id="tile-heatmap" alt="tile heatmap" '
         f'src="data:image/png;base64,{tile_heatmap(views, target.tiles_per_ipu)}">'),
        ("busiest", "Busiest tiles", _tiles_table(engine, views)),
        ("liveness", "Liveness over program steps",
         f'<img id="liveness-chart" alt="bytes live per step" '
         f'src="data:image/png;base64,{liveness_chart(views)}">'),
        ("program", "Program tree", _Tree(engine).html()),
        ("tile-cycles", "Cycles per tile",
         f'<img id="tile-cycles-chart" alt="cycles per tile" '
         f'src="data:image/png;base64,{tile_cycles_chart(engine)}">'),
        ("steps", "Compute sets and steps (cycles per execution)",
         f'<img id="cycles-chart" alt="cycles per step" '
         f'src="data:image/png;base64,{cycles_chart(engine)}">{_steps_table(engine)}'),
    ]
    nav = "".join(f'<a href="#{anchor}">{html.escape(name)}</a>' for anchor, name, _ in sections)
    body = "".join(f'<section id="{anchor}"><h2>{html.escape(name)}</h2>{content}</section>'
                   for anchor, name, content in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
            f"<body><h1>{html.escape(title)}</h1><p>{html.escape(target.describe())}; bytes in "
            f"KiB = 1024 B</p><nav>{nav}</nav>{body}</body></html>\n")


# ----------------------------------------------------------------------------- terminal status
class StatusLine:
    """One rewritten line saying what long work is doing ("compiling...").

    It only draws when the user watches a terminal (stdout and ``stream`` are both TTYs), so
    pipes, files and tests get clean output; use as a context manager to erase it at the end.
    """

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        if enabled is None:
            enabled = sys.stdout.isatty() and self.stream.isatty()
        self.enabled = enabled
        self.shown = False

    def show(self, text: str) -> None:
        if self.enabled:
            self.stream.write("\r\033[K" + text)
            self.stream.flush()
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False

    def __enter__(self) -> "StatusLine":
        return self

    def __exit__(self, *exc) -> None:
        self.clear()
