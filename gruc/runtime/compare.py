"""``gruc viz --compare A.json B.json``: what changed between two saved reports.

Why from saved reports: a comparison is asked after the fact — this morning's layer against
yesterday's, a pass or a planner option on and off — when the programs are gone and only their
``report.json`` (:meth:`gruc.runtime.report.Report.to_json`) is left.  So everything compared is
in the JSON: per tile, the bytes of each of Poplar's categories and the total including gaps;
per variable, its bytes, liveness and placement (runs of tiles holding equal blocks at an equal
offset).  The page shows the per-category totals side by side, each tile's difference (a line
over the tiles and a tile map on a diverging scale), and the variables that were added, removed,
resized or moved (placed on other tiles or at other offsets).
"""

from __future__ import annotations

import html
import json
import os
from typing import Any

import numpy as np

from gruc.errors import GrucFileError, GrucValueError
from gruc.runtime.page import (figure_html, integer_axis, page_html, require_plotly, table_html,
                               tile_map_figure)
from gruc.runtime.page_data import ALWAYS_LIVE_LABEL, CATEGORIES, GAPS, NOT_ALWAYS_LIVE_LABEL

MOST_READ = 512 * 1024 * 1024
"""The largest report read (an ipu2 training layer's is a few hundred KB)."""
VARIABLES_SHOWN = 200
"""Rows of the variables table (changed variables first)."""


def load_report(path: str | os.PathLike) -> dict[str, Any]:
    """A saved report, checked for what a comparison reads; anything else (not JSON, another
    file, a report saved before reports listed their variables) is refused naming ``path``."""
    try:
        if os.path.getsize(path) > MOST_READ:
            raise GrucValueError(f"{path}: more than {MOST_READ // 2 ** 20} MiB; a gruc report "
                                 "is far smaller")
        with open(path, encoding="utf-8") as handle:
            report = json.load(handle)
    except OSError as error:
        raise GrucFileError.about(path, "read", error) from None
    except (ValueError, UnicodeDecodeError) as error:
        raise GrucValueError(f"{path}: not a JSON report ({error})") from None
    try:
        memory = report["memory"]
        for key in ("total_including_gaps_by_tile", "always_live_by_category",
                    "not_always_live_peak_by_category"):
            memory[key]
        report["target"]["tiles_per_ipu"], report["cycles"]["total"]
    except (KeyError, TypeError):
        raise GrucValueError(f"{path}: not a gruc report (report.json of gruc gru --profile or "
                             "Report.to_json)") from None
    if "variables" not in report:
        raise GrucValueError(f"{path}: this report lists no variables (saved by an older gruc "
                             "or without its program); save it again to compare it")
    return report


def categories_of(report: dict[str, Any]) -> dict[str, np.ndarray]:
    """Per category (the page's :data:`~gruc.runtime.page_data.CATEGORIES`), bytes per tile."""
    memory = report["memory"]
    always, later = memory["always_live_by_category"], memory["not_always_live_peak_by_category"]
    result = {ALWAYS_LIVE_LABEL: np.asarray(always["variable"], dtype=np.int64)}
    for name in CATEGORIES:
        if name in always and name != "variable":
            result[name] = np.asarray(always[name], dtype=np.int64)
    result[NOT_ALWAYS_LIVE_LABEL] = np.asarray(later["variable"], dtype=np.int64)
    result["message"] = np.asarray(later["message"], dtype=np.int64)
    total = np.asarray(memory["total_including_gaps_by_tile"], dtype=np.int64)
    result[GAPS] = (total - sum(result.values())).clip(min=0)
    return result


def _per_tile(placement: list[list[int]]) -> dict[int, tuple[int, int]]:
    """A variable's placement runs as ``{tile: (bytes, offset)}``."""
    result = {}
    for first, count, nbytes, offset in placement:
        for tile in range(first, first + count):
            result[tile] = (nbytes, offset)
    return result


def _tiles_text(tiles: list[int]) -> str:
    """``0-15, 32`` for a sorted tile list (at most four runs, then how many more)."""
    runs: list[list[int]] = []
    for tile in tiles:
        if runs and tile == runs[-1][1] + 1:
            runs[-1][1] = tile
        else:
            runs.append([tile, tile])
    shown = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:4]]
    return ", ".join(shown) + (f" and {len(runs) - 4} more runs" if len(runs) > 4 else "") \
        if runs else "none"


def variable_changes(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Each variable of either report with what changed: ``added``, ``removed``, ``resized``
    (its bytes), ``moved`` (other tiles or other offsets on its tiles), ``unchanged``."""
    first = {row["name"]: row for row in a["variables"]}
    second = {row["name"]: row for row in b["variables"]}
    changes = []
    for name in sorted(first.keys() | second.keys()):
        old, new = first.get(name), second.get(name)
        change = {"name": name, "bytes_a": old["bytes"] if old else 0,
                  "bytes_b": new["bytes"] if new else 0}
        if old is None or new is None:
            change["status"] = "added" if old is None else "removed"
            change["detail"] = f"tiles {_tiles_text(sorted(_per_tile((new or old)['placement'])))}"
        else:
            before, after = _per_tile(old["placement"]), _per_tile(new["placement"])
            gone = sorted(before.keys() - after.keys())
            came = sorted(after.keys() - before.keys())
            shifted = sum(1 for t in before.keys() & after.keys()
                          if before[t][1] != after[t][1])
            what = []
            if old["bytes"] != new["bytes"]:
                what.append("resized")
            if gone or came or shifted:
                what.append("moved")
            change["status"] = " and ".join(what) or "unchanged"
            parts = []
            if gone or came:
                parts.append(f"tiles {_tiles_text(sorted(before))} -> {_tiles_text(sorted(after))}")
            if shifted:
                parts.append(f"another offset on {shifted} tile{'s' if shifted > 1 else ''}")
            if old["always_live"] != new["always_live"]:
                parts.append("always-live" if new["always_live"] else "no longer always-live")
            change["detail"] = "; ".join(parts)
        changes.append(change)
    order = {"added": 0, "removed": 0, "resized and moved": 0, "moved": 1, "resized": 1,
             "unchanged": 2}
    changes.sort(key=lambda c: (order[c["status"]], -abs(c["bytes_b"] - c["bytes_a"]),
                                c["name"]))
    return changes


def _signed(value: int) -> str:
    return f"{value:+,}"


def _pad(values: np.ndarray, length: int) -> np.ndarray:
    return np.concatenate((values, np.zeros(length - len(values), dtype=values.dtype)))


def category_figure(a: dict[str, np.ndarray], b: dict[str, np.ndarray], names: tuple[str, str]):
    """Each category's bytes over all tiles in A and B, side by side (a log axis when the
    categories span more than two decades, so code and vertex state stay visible beside
    tensors)."""
    import plotly.graph_objects as go

    totals = [[int(side[name].sum()) for name in CATEGORIES] for side in (a, b)]
    positive = [v for side in totals for v in side if v > 0]
    log = bool(positive) and max(positive) / min(positive) > 100
    figure = go.Figure([go.Bar(x=list(CATEGORIES), y=values, name=name, marker_color=colour,
                               hovertemplate="%{x}: %{y:,} B<extra>" + html.escape(name)
                               + "</extra>")
                        for values, name, colour in zip(totals, names, ("#718096", "#3182bd"))])
    figure.update_layout(barmode="group", yaxis={"type": "log" if log else "linear",
                                                 "title": {"text": "bytes, all tiles"}},
                         legend={"orientation": "h", "y": -0.35},
                         margin={"l": 70, "r": 20, "t": 10, "b": 110})
    return figure


def tile_difference_figure(a: np.ndarray, b: np.ndarray, names: tuple[str, str]):
    """Each tile's total including gaps in B minus A, as a filled line over the tiles (a bar per
    tile would be a hairline at 1,472 tiles)."""
    import plotly.graph_objects as go

    tiles = list(range(len(a)))
    figure = go.Figure(go.Scatter(
        x=tiles, y=(b - a).tolist(), mode="lines", fill="tozeroy", line={"shape": "hvh",
                                                                        "color": "#3182bd"},
        customdata=np.column_stack((a, b)).tolist(),
        hovertemplate="tile %{x}: %{y:+,} B<br>" + html.escape(names[0]) + " %{customdata[0]:,}"
                      " B, " + html.escape(names[1]) + " %{customdata[1]:,} B<extra></extra>"))
    figure.update_layout(xaxis=integer_axis(len(tiles), "tile"),
                         yaxis={"title": {"text": f"bytes, {names[1]} - {names[0]}"},
                                "tickformat": ".3~s", "zeroline": True},
                         margin={"l": 70, "r": 20, "t": 10, "b": 50})
    return figure


def compare_html(a: dict[str, Any], b: dict[str, Any], names: tuple[str, str]) -> str:
    """The comparison page of reports ``a`` and ``b`` (see the module docstring)."""
    require_plotly("the comparison page")
    cat_a, cat_b = categories_of(a), categories_of(b)
    total_a = np.asarray(a["memory"]["total_including_gaps_by_tile"], dtype=np.int64)
    total_b = np.asarray(b["memory"]["total_including_gaps_by_tile"], dtype=np.int64)
    tiles = max(len(total_a), len(total_b))
    note = "" if len(total_a) == len(total_b) else (
        f"<p>The reports have {len(total_a):,} and {len(total_b):,} tiles: tiles only one "
        "has count as empty in the other.</p>")
    total_a, total_b = _pad(total_a, tiles), _pad(total_b, tiles)
    category_rows = []
    for name in CATEGORIES:
        first, second = _pad(cat_a[name], tiles), _pad(cat_b[name], tiles)
        category_rows.append([name, int(first.sum()), int(second.sum()),
                              _signed(int(second.sum() - first.sum())),
                              int(first.max(initial=0)), int(second.max(initial=0)),
                              int(np.count_nonzero(first != second))])
    summary_rows = [
        ["fits", str(a["memory"]["fits"]), str(b["memory"]["fits"]), ""],
        ["max tile memory", a["memory"]["max_tile_bytes"], b["memory"]["max_tile_bytes"],
         _signed(b["memory"]["max_tile_bytes"] - a["memory"]["max_tile_bytes"])],
        ["total memory", a["memory"]["total_memory"], b["memory"]["total_memory"],
         _signed(b["memory"]["total_memory"] - a["memory"]["total_memory"])],
        ["exchange bytes", a["exchange"]["total_bytes"], b["exchange"]["total_bytes"],
         _signed(b["exchange"]["total_bytes"] - a["exchange"]["total_bytes"])],
        ["cycles", a["cycles"]["total"], b["cycles"]["total"],
         _signed(b["cycles"]["total"] - a["cycles"]["total"])],
    ]
    changes = variable_changes(a, b)
    changed = [c for c in changes if c["status"] != "unchanged"]
    shown = changes[:VARIABLES_SHOWN]
    variable_rows = [[c["name"], c["status"], c["bytes_a"], c["bytes_b"],
                      _signed(c["bytes_b"] - c["bytes_a"]), c["detail"]] for c in shown]
    difference = (total_b - total_a).astype(np.int64)
    tiles_per_ipu = b["target"]["tiles_per_ipu"] if tiles == len(b["memory"][
        "total_including_gaps_by_tile"]) else a["target"]["tiles_per_ipu"]
    tile_map, map_height, map_width = tile_map_figure(
        [(f"{names[1]} - {names[0]}, total including gaps", difference, "KiB")], tiles_per_ipu,
        diverging=True)
    changed_tiles = int(np.count_nonzero(difference))
    sections = [
        ("summary", "Summary",
         table_html(["", names[0], names[1], "difference"], summary_rows, "compare-summary")),
        ("categories", "Memory by category",
         figure_html(category_figure(cat_a, cat_b, names), "compare-categories-chart", True, 380)
         + table_html(["category", f"bytes, {names[0]}", f"bytes, {names[1]}", "difference",
                       f"most on a tile, {names[0]}", f"most on a tile, {names[1]}",
                       "tiles that differ"], category_rows, "compare-categories")),
        ("tiles", "Per tile",
         f"{note}<p>{changed_tiles:,} of {tiles:,} tiles differ in their total including gaps "
         f"({names[1]} minus {names[0]}; red: more bytes, blue: fewer).</p>"
         + figure_html(tile_difference_figure(total_a, total_b, names), "compare-tiles-chart",
                       False, 320)
         + figure_html(tile_map, "compare-tile-map", False, map_height, map_width)),
        ("variables", "Variables",
         f"<p>{len(changed):,} of {len(changes):,} variables changed"
         + (f" (the first {VARIABLES_SHOWN} rows shown)" if len(changes) > VARIABLES_SHOWN
            else "") + ".</p>"
         + table_html(["variable", "change", f"bytes, {names[0]}", f"bytes, {names[1]}",
                       "difference", "where"], variable_rows, "compare-variables")),
    ]
    subtitle = f"{names[0]}: {_describe(a)}; {names[1]}: {_describe(b)}"
    return page_html(f"gruc compare: {names[0]} vs {names[1]}", subtitle, sections)


def _describe(report: dict[str, Any]) -> str:
    target = report["target"]
    tiles = len(report["memory"]["total_including_gaps_by_tile"])
    return f"{tiles:,} tiles of {target.get('bytes_per_tile', 0):,} B"

