"""The Pareto front of a study's rows: the configurations no other beats on every axis.

A planner choosing between knob settings wants, for each size of layer, the fastest plan that
fits — and to see which settings ever give it.  :func:`pareto_front` answers that over rows:

* **candidates** are the rows that fit (``fits`` true; a refused row or one over capacity is
  no option) and hold a number in every axis column;
* an **axis** is a number column of the rows (:data:`~gruc.plan.planned.NUMBER_COLUMNS`, or a
  layer flag with a number value) and a direction, ``max`` or ``min``;
* a candidate is **dominated** when another is at least as good on every axis and better on
  one; the front is the candidates that are not, ordered by the first axis.

The default axes (:func:`default_axes`) are the size planned, to maximise — the searched flag
after ``--find-max``, else the layer's ``flops`` (the one size every configuration of a sweep
shares, whichever flags it varies) — and ``cycles_total``, to minimise.  ``--pareto-axes``
chooses others (``output_size:max,cycles_total:min,max_tile_bytes:min``).  The front is computed
from the study's rows as stored, so a resumed study gives it again without planning anything;
:func:`write_front` writes it as ``pareto.csv`` beside ``rows.csv``.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any, Sequence

from gruc.errors import GrucValueError
from gruc.plan.planned import NUMBER_COLUMNS
from gruc.plan.rows import cell_text
from gruc.files import write_text_atomically

PARETO_NAME = "pareto.csv"
DIRECTIONS = ("max", "min")

Axis = tuple[str, str]
"""A column and its direction (``max`` or ``min``)."""


def default_axes(searched: str | None) -> tuple[Axis, Axis]:
    """Size up (the searched flag, else the layer's FLOPs), cycles down."""
    return ((searched or "flops", "max"), ("cycles_total", "min"))


def parse_axes(text: str, flags: Sequence[str]) -> tuple[Axis, ...]:
    """``COLUMN:max,COLUMN:min,...`` (two axes or more) as axes; a column must be a number
    column of the rows or one of the layer ``flags``."""
    allowed = [*NUMBER_COLUMNS, *flags]
    axes = []
    for item in text.split(","):
        name, _, direction = item.strip().partition(":")
        name = name.strip().lstrip("-").replace("-", "_")
        if direction.strip() not in DIRECTIONS:
            raise GrucValueError(f"--pareto-axes {item.strip()!r} must be COLUMN:max or "
                                 "COLUMN:min")
        if name not in allowed:
            raise GrucValueError(f"--pareto-axes {name!r} is not a number column or a layer "
                                 f"flag; columns: {', '.join(NUMBER_COLUMNS)}")
        axes.append((name, direction.strip()))
    if len(axes) < 2 or len({name for name, _ in axes}) != len(axes):
        raise GrucValueError(f"--pareto-axes {text!r} needs two different columns or more")
    return tuple(axes)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _score(row: dict[str, Any], axes: Sequence[Axis]) -> tuple[float, ...]:
    """The row's axis values turned so that larger is better on every axis."""
    return tuple(row[name] if direction == "max" else -row[name] for name, direction in axes)


def candidates(rows: Sequence[dict[str, Any]], axes: Sequence[Axis]) -> list[dict[str, Any]]:
    """The rows that may be on the front: they fit and have a number on every axis."""
    return [row for row in rows if row.get("fits") is True and not row.get("error")
            and all(_number(row.get(name)) for name, _ in axes)]


def pareto_front(rows: Sequence[dict[str, Any]], axes: Sequence[Axis]) -> list[dict[str, Any]]:
    """The candidates no other candidate dominates (see the module), by the first axis."""
    pool = candidates(rows, axes)
    scores = [_score(row, axes) for row in pool]
    front = [row for row, mine in zip(pool, scores)
             if not any(all(o >= m for o, m in zip(other, mine)) and other != mine
                        for other in scores)]
    name, direction = axes[0]
    return sorted(front, key=lambda row: row[name], reverse=direction == "max")


def write_front(front: Sequence[dict[str, Any]], axes: Sequence[Axis],
                directory: str | os.PathLike) -> Path:
    """``pareto.csv`` in ``directory`` (atomically): the front's rows, the axis columns first,
    then every column of the rows in their order."""
    columns = [name for name, _ in axes]
    for row in front:
        columns += [column for column in row if column not in columns]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in front:
        writer.writerow({column: cell_text(row.get(column)) for column in columns})
    path = Path(directory) / PARETO_NAME
    write_text_atomically(path, buffer.getvalue())
    return path
