"""The Pareto front of a study's rows, and its plot; categorical flags drawn as bars."""

from __future__ import annotations

import csv

import pytest

from gruc.errors import GrucValueError
from gruc.plan.pareto import default_axes, parse_axes, pareto_front, write_front
from gruc.plan.plots import metrics_figure, pareto_figure


def _row(size, cycles, fits=True, error=None, **more):
    return {"output_size": size, "cycles_total": cycles, "fits": fits, "error": error,
            "max_tile_bytes": 100, "exchange_bytes": 0, "cycles_compute": cycles,
            "cycles_exchange": 0, "cycles_sync": 0, "always_live_bytes": 1,
            "not_always_live_max_bytes": 1, "bytes_per_tile": 1000, "total_capacity": 4000,
            **more}


ROWS = [_row(8, 100), _row(8, 90), _row(16, 150), _row(16, 150), _row(12, 200),
        _row(32, 10, fits=False), _row(64, None, fits=None, error="GrucValueError: no"),
        _row(4, 95)]


def test_the_front_keeps_what_nothing_beats_on_every_axis():
    front = pareto_front(ROWS, default_axes("output_size"))
    # 8@100 loses to 8@90; 12@200 to 16@150; 4@95 to 8@90; rows that do not fit are no option
    assert [(r["output_size"], r["cycles_total"]) for r in front] == [(16, 150), (16, 150),
                                                                        (8, 90)]
    fewest = pareto_front(ROWS, (("cycles_total", "min"), ("output_size", "min")))
    assert [(r["output_size"], r["cycles_total"]) for r in fewest] == [(8, 90), (4, 95)]


def test_the_front_is_written_axes_first(tmp_path):
    axes = default_axes(None)
    rows = [_row(8, 100, flops=10), _row(8, 90, flops=5)]
    path = write_front(pareto_front(rows, axes), axes, tmp_path)
    lines = list(csv.DictReader(path.open()))
    assert list(lines[0])[:2] == ["flops", "cycles_total"]
    assert [(r["flops"], r["cycles_total"]) for r in lines] == [("10", "100"), ("5", "90")]


@pytest.mark.parametrize("text, words", [
    ("output_size:max", ["two different columns"]),
    ("output_size:up,cycles_total:min", ["COLUMN:max or COLUMN:min"]),
    ("bogus:max,cycles_total:min", ["'bogus'", "not a number column"]),
    ("cycles_total:max,cycles_total:min", ["two different columns"]),
])
def test_bad_axes_are_refused(text, words):
    with pytest.raises(GrucValueError) as info:
        parse_axes(text, ("output_size",))
    for word in words:
        assert word in str(info.value)


def test_axes_take_flags_as_typed():
    assert parse_axes("output-size:max, cycles_total:min", ("output_size",)) == (
        ("output_size", "max"), ("cycles_total", "min"))


def test_the_pareto_plot_draws_the_front_over_the_plans_that_fit():
    axes = default_axes("output_size")
    figure = pareto_figure(ROWS, pareto_front(ROWS, axes), axes)
    ax = figure.axes[0]
    (front_line,) = ax.get_lines()
    assert list(front_line.get_xdata()) == [8, 16, 16]
    assert len(ax.collections[0].get_offsets()) == 6   # the rows that fit


def test_a_categorical_flag_is_drawn_as_grouped_bars_and_coinciding_series_are_named():
    rows = [_row(8, c, partials_type=p, shards=s) for p, s, c in [
        ("half", 1, 100), ("float", 1, 120), ("half", 2, 100), ("float", 2, 120)]]
    figure = metrics_figure(rows, "partials_type", ("partials_type", "shards"))
    cycles = figure.axes[3]   # the compute cycles panel
    assert len(cycles.patches) == 4   # two series of two bars, side by side
    assert all(len(line.get_xdata()) <= 1 for line in cycles.get_lines())
    lefts = sorted(round(bar.get_x(), 3) for bar in cycles.patches)
    assert len(set(lefts)) == 4
    notes = [text.get_text() for text in cycles.texts]
    assert any("same values" in note and "shards=2 = shards=1" in note for note in notes)
    # a number flag keeps its lines, the hidden one dashed
    figure = metrics_figure(rows, "shards", ("partials_type", "shards"))
    lines = figure.axes[3].get_lines()
    assert [line.get_linestyle() for line in lines] == ["-", "-"]
    assert not any("same values" in t.get_text() for t in figure.axes[3].texts)
    memory = [line for line in figure.axes[0].get_lines()
              if line.get_label().startswith("partials_type")]
    assert [line.get_linestyle() for line in memory] == ["-", "--"]   # equal max tile bytes
    assert any("partials_type=float = partials_type=half" in t.get_text()
               for t in figure.axes[0].texts)
