"""``gruc plan`` in process: sweeps, resumes, find-max, plots, one-line errors."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gruc.cli import main
from gruc.plan.planned import TIMING_COLUMNS

GRUC = [sys.executable, "-c", "import sys; from gruc.cli import main; sys.exit(main())"]
"""``gruc`` in a process of its own, run by the interpreter running the tests."""

SMALL = ["--input-size", "4", "--output-size", "8", "--sequence-size", "3", "--tiles-per-ipu",
         "16", "--jobs", "1"]


def test_sweep_writes_rows_and_resumes(tmp_path, capsys):
    argv = ["plan", *SMALL, "--batch-size", "1,2", "--shards", "1:3", "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "6 planned now, 0 already" in out and "configurations per minute" in out
    rows = list(csv.DictReader((tmp_path / "rows.csv").open()))
    assert [(r["batch_size"], r["shards"]) for r in rows] == [
        ("1", "1"), ("1", "2"), ("1", "3"), ("2", "1"), ("2", "2"), ("2", "3")]
    assert len(json.loads((tmp_path / "rows.json").read_text())) == 6
    assert main(argv) == 0
    assert "0 planned now, 6 already" in capsys.readouterr().out


def test_find_max_and_plots(tmp_path, capsys):
    argv = ["plan", *SMALL, "--batch-size", "2", "--find-max", "shards", "--out", str(tmp_path),
            "--plots"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "shards: largest that fits = 3" in out and "at 4: GrucOptionError" in out
    plots = tmp_path / "plots"
    for name in ["metrics-shards.png", "tile-heatmap.png"]:
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_plots_one_figure_per_swept_flag(tmp_path, capsys):
    argv = ["plan", *SMALL, "--batch-size", "1,2", "--cell-order",
            "reset,update,candidate/update,candidate,reset", "--out", str(tmp_path), "--plots",
            "--heatmap", "1"]
    assert main(argv) == 0
    names = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert names == ["memory-by-role.png", "metrics-batch_size.png", "metrics-cell_order.png",
                     "roofline.png", "tile-heatmap.png"]


@pytest.mark.parametrize("argv, words", [
    (["plan", "--batch-size", "1:0"], ["--batch-size", "'1:0'", "empty"]),
    (["plan", "--batch-size", "1,x"], ["--batch-size", "'x'"]),
    (["plan", "--batch-size", "0,1"], ["batch_size=0", "greater than or equal to 1"]),
    (["plan", "--find-max", "data-type"], ["data-type", "searchable"]),
    (["plan", "--jobs", "0"], ["jobs", "0"]),
    (["plan", "--backend", "numpy"], ["unrecognized arguments", "--backend"]),
    (["plan", "--batch-size", "1,2", "--heatmap", "2", "--plots"], ["--heatmap 2", "there are 2"]),
    (["plan", "--find-max", "shards", "--heatmap", "-1", "--plots"], ["--heatmap -1", "0-based"]),
    (["plan", "--heatmap", "0"], ["--heatmap 0", "add --plots"]),
    (["plan", "--find-max-limit", "5"], ["--find-max-limit 5", "add --find-max"]),
])
def test_bad_input_is_one_line_and_exit_code_2(argv, words, capsys, tmp_path):
    with pytest.raises(SystemExit) as info:
        raise SystemExit(main([*argv, "--out", str(tmp_path)]))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err
    assert not list(tmp_path.iterdir()), "refused before anything is planned or written"


def test_plots_of_refused_configurations_are_skipped_with_a_note(tmp_path, capsys):
    argv = ["plan", *SMALL, "--shards", "4,5", "--out", str(tmp_path), "--plots"]
    assert main(argv) == 0   # more shards than the 3 steps: both are refused
    assert "plots             none: gruc refused every configuration" in capsys.readouterr().out
    assert not (tmp_path / "plots").exists()
    argv = ["plan", *SMALL, "--shards", "1,4", "--out", str(tmp_path / "one"), "--plots",
            "--heatmap", "1"]
    assert main(argv) == 0
    assert "heatmap           none: configuration 1 was refused" in capsys.readouterr().out
    assert not (tmp_path / "one" / "plots" / "tile-heatmap.png").exists()


@pytest.mark.parametrize("count", [3, 12, 25])
def test_every_line_of_a_metrics_plot_has_its_own_colour(count):
    from gruc.plan.plots import _colours

    assert len(set(_colours(count))) == count


def test_plots_with_nothing_swept_say_so_and_still_draw_the_heatmap(tmp_path, capsys):
    assert main(["plan", *SMALL, "--batch-size", "2", "--out", str(tmp_path), "--plots"]) == 0
    out = capsys.readouterr().out
    assert "plots             none: nothing is swept" in out and "refused" not in out.split(
        "rows              ")[1]
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "memory-by-role.png", "roofline.png", "tile-heatmap.png"]


def test_plots_without_matplotlib_are_refused_before_the_sweep(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # as if not installed
    code = main(["plan", "--input-size", "4", "--output-size", "4", "--batch-size", "1,2",
                 "--tiles-per-ipu", "4", "--plots", "--out", str(tmp_path / "out")])
    assert code == 2
    assert "--plots needs matplotlib, which is not installed" in capsys.readouterr().err
    assert not (tmp_path / "out" / "rows.json").exists()      # nothing was planned


def test_rows_too_big_for_the_host_are_counted_apart_from_refused_ones(tmp_path, capsys,
                                                                        monkeypatch):
    import gruc.plan.layer as layer_module
    real = layer_module.plan_layer

    def short_of_memory(config, pipeline):
        if config.batch_size == 2:
            raise MemoryError
        return real(config, pipeline)
    monkeypatch.setattr(layer_module, "plan_layer", short_of_memory)
    argv = ["plan", *SMALL, "--batch-size", "1,2", "--out", str(tmp_path)]
    assert main(argv) == 0
    assert ("configurations    2: 2 planned now, 0 already in " f"{tmp_path}, 0 refused, 1 too big "
            "for this host's memory (planned again next run)") in capsys.readouterr().out
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert rows[1]["error"] == ("MemoryError: the host ran out of memory planning it (an "
                                "allocation failed)")


def test_a_sweep_on_a_dask_scheduler_writes_the_rows_a_serial_one_does(tmp_path, capsys):
    """``--scheduler ADDRESS`` runs the rows as tasks of a running Dask cluster (an in-process
    one here); the table is the serial sweep's, timings aside."""
    import distributed  # the test extra installs it: this test runs in CI

    def planned(rows_csv):
        return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS}
                for row in csv.DictReader(rows_csv.open())]

    grid = [*SMALL, "--batch-size", "1,2", "--shards", "1,2"]
    assert main(["plan", *grid, "--out", str(tmp_path / "serial")]) == 0
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        assert SMALL[-2:] == ["--jobs", "1"]  # the cluster's workers run it: no --jobs
        argv = ["plan", *SMALL[:-2], "--batch-size", "1,2", "--shards", "1,2",
                "--scheduler", cluster.scheduler_address,
                "--out", str(tmp_path / "dask")]
        assert main(argv) == 0
    assert "4 planned now, 0 already" in capsys.readouterr().out
    assert planned(tmp_path / "dask" / "rows.csv") == planned(tmp_path / "serial" / "rows.csv")


def test_jobs_beside_a_scheduler_is_refused_before_anything_runs(tmp_path, capsys):
    """The Dask cluster's workers run a sweep given ``--scheduler``; a local ``--jobs`` beside it
    would be silently ignored, so the command refuses it, naming both, and writes nothing."""
    argv = ["plan", *SMALL, "--jobs", "2", "--scheduler", "tcp://127.0.0.1:1",
            "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "jobs=2" in err and "tcp://127.0.0.1:1" in err
    assert not (tmp_path / "out").exists()


# ---- issue 42, item 4: one line, exit 2, nothing lost ------------------------------------------------
def _a_real_row(tmp_path) -> dict:
    """A row as a sweep of this gruc writes it."""
    assert main(["plan", *SMALL, "--batch-size", "1", "--out", str(tmp_path / "real")]) == 0
    return json.loads((tmp_path / "real" / "rows.json").read_text())[0]


def _foreign_grid(row: dict) -> list:
    flags = json.loads(row["config"])
    del flags["batch_size"]
    flags["bogus"] = 1
    return [{**row, "config": json.dumps(flags)}]


@pytest.mark.parametrize("content, words", [
    (b"\xff" + np.random.default_rng(42).bytes(300), ["not UTF-8"]),
    (b"[" * 100_000 + b"]" * 100_000, ["nested too deeply"]),
    (b'{"config": "x"}', ["a JSON list of rows"]),
    (b'[{"config": 5}]', ["row 0", "'config' is 5, not text"]),
    (b'[{"config": [1, 2]}]', ["row 0", "'config' is [1, 2], not text"]),
    (b'[{"config": "not json"}]', ["row 0", "config 'not json' is not"]),
    (lambda row: [{"config": row["config"]}], ["row 0", "lacks the column 'pipeline'"]),
    (lambda row: [{**row, "max_tile_bytes": "many"}], ["row 0", "max_tile_bytes 'many'"]),
    (_foreign_grid, ["row 0", "'bogus'"]),
    (lambda row: [row, row], ["two rows for one configuration"]),
], ids=["random-bytes", "nested", "not-a-list", "config-int", "config-list", "config-not-json",
        "columns-missing", "metric-text", "another-grid", "twice"])
def test_a_corrupt_rows_file_is_one_line_and_kept_as_it_was(content, words, tmp_path, capsys):
    """Every corrupt ``rows.json`` is refused before planning, naming the file: none ends in a
    traceback, and none — planned, then failing to write the rows — loses the new rows or the
    old file."""
    if callable(content):
        content = json.dumps(content(_a_real_row(tmp_path))).encode()
        capsys.readouterr()
    out = tmp_path / "out"
    out.mkdir()
    (out / "rows.json").write_bytes(content)
    for extra in ([], ["--find-max", "shards"], ["--plots"]):
        code = main(["plan", *SMALL, "--batch-size", "1,2", "--out", str(out), *extra])
        std = capsys.readouterr()
        assert code == 2 and "planned" not in std.out, std
        assert std.err.count("\n") == 1 and std.err.startswith("gruc plan: error: "), std.err
        for word in [str(out / "rows.json"), *words]:
            assert word in std.err, std.err
        assert (out / "rows.json").read_bytes() == content
        assert not (out / "rows.csv").exists()


def test_a_scheduler_address_of_no_known_scheme_is_one_line(tmp_path, capsys):
    code = main(["plan", *SMALL[:-2], "--scheduler", "nonsense://", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("gruc plan: error: cannot reach the Dask scheduler at 'nonsense://': ")


def _spawned_workers(pid: int) -> int:
    """How many pool workers (processes running multiprocessing's spawn_main) ``pid`` started."""
    count = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                count += b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:  # gone already
                pass
    return count


def _ignores_ctrl_c(pid: int) -> bool:
    """Whether process ``pid`` ignores SIGINT now (as gruc does while it starts its workers)."""
    status = Path(f"/proc/{pid}/status").read_text()
    ignored = int(next(line for line in status.splitlines() if line.startswith("SigIgn:"))
                  .split()[1], 16)
    return bool(ignored & (1 << (signal.SIGINT - 1)))


def test_ctrl_c_while_the_workers_start_is_one_line(tmp_path, hears_ctrl_c):
    """A terminal's Ctrl-C reaches the whole process group; the pool's workers, still importing
    gruc, used to print a KeyboardInterrupt traceback each (exit 130 is right, the noise is
    not)."""
    plan = subprocess.Popen(
        [*GRUC, "plan", *SMALL[:-2], "--jobs", "2", "--batch-size", "1:64", "--out",
         str(tmp_path / "out")],  # more plans than a loaded machine finishes before the signal
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=hears_ctrl_c)
    for _ in range(6000):  # both workers are importing gruc (about a second), and the parent
        if (_spawned_workers(plan.pid) == 2 and not _ignores_ctrl_c(plan.pid)  # is done starting
                or plan.poll() is not None):                                   # them
            break
        time.sleep(0.01)
    os.killpg(plan.pid, signal.SIGINT)
    _, err = plan.communicate(timeout=120)
    assert plan.returncode == 130, err
    assert err == (f"gruc plan: interrupted; the finished rows are in {tmp_path / 'out'}; run "
                   "the same command again to go on\n")


def _rows(parameter: str, values: list[int], scale: float = 1.0) -> list[dict]:
    """Plan rows of a flag swept over ``values``, metrics growing with it, far under capacity."""
    return [{parameter: v, "batch_size": b, "max_tile_bytes": int(1000 * v * scale),
             "always_live_bytes": 500 * v, "not_always_live_max_bytes": 100 * v,
             "exchange_bytes": 10 * v, "cycles_compute": 1000 + v, "cycles_exchange": 50 * v,
             "cycles_sync": 7, "cycles_total": 1007 + 51 * v, "bytes_per_tile": 638976, "total_capacity": 638976 * 1472}
            for v in values for b in (1, 2)]


def test_metrics_plots_use_log_axes_over_decades_and_integer_ticks():
    """Issue 41: a find-max's flag doubles into the thousands (every point was near 0 on a
    linear axis), ticks fell on 2.5 shards, the capacity line was labelled "bytes per tile"."""
    from gruc.plan.plots import metrics_figure

    doubling = metrics_figure(_rows("sequence_size", [1, 2, 4, 8, 64, 512, 4096]),
                              "sequence_size", ["sequence_size", "batch_size"])
    axes = doubling.axes[:7]
    assert all(ax.get_xscale() == "log" for ax in axes)
    assert axes[0].get_yscale() == "log" and axes[4].get_yscale() == "linear"  # 1001..5096
    ticks = [t for t in axes[0].get_xticks() if 1 <= t <= 4096]
    assert ticks and all(float(t).is_integer() for t in ticks)
    assert [line.get_label() for line in axes[0].lines][-1] == "tile capacity 638,976 B"
    few = metrics_figure(_rows("shards", [1, 2, 3, 4, 5]), "shards", ["shards", "batch_size"])
    ax = few.axes[0]
    assert ax.get_xscale() == "linear" and ax.get_yscale() == "linear"
    assert all(float(t).is_integer() for t in ax.get_xticks())
    assert any("(far above the data)" in t.get_text() for t in ax.texts)  # no line at 624 KiB
    few.canvas.draw()
    legend = few.legends[0].get_window_extent()
    assert all(legend.y1 <= a.get_window_extent().y0 for a in few.axes[:7])  # off the data


def test_heatmap_is_the_tile_maps_grid_on_a_scale_fitted_to_the_data():
    from gruc.plan.layer import plan_layer
    from gruc.plan.plots import heatmap_figure
    from gruc.tools.gru_layer import GruLayerConfig
    from gruc.runtime.viz import tile_grid

    plan = plan_layer(GruLayerConfig(sequence_size=3, input_size=8, output_size=8,
                                     batch_size=2))
    figure = heatmap_figure(plan)
    image = figure.axes[0].images[0]
    assert image.get_array().shape == tile_grid(1472) == (32, 46)
    totals = plan.report.total_bytes
    assert image.get_clim() == (totals.min(), totals.max())  # not pinned to the capacity
    assert image.get_array()[0, 5] == totals[5] and image.get_array()[1, 0] == totals[46]
    for axis in (figure.axes[0].xaxis, figure.axes[0].yaxis):
        assert all(float(t).is_integer() for t in axis.get_ticklocs())
