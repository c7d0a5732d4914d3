"""``gruc plan`` in process: sweeps, resumes, find-max, plots, one-line errors."""

from __future__ import annotations

import csv
import json

import pytest

from gruc.cli import main

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
    assert names == ["metrics-batch_size.png", "metrics-cell_order.png", "tile-heatmap.png"]


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
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["tile-heatmap.png"]


def test_plots_without_matplotlib_are_refused_before_the_sweep(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # as if not installed
    code = main(["plan", "--input-size", "4", "--output-size", "4", "--batch-size", "1,2",
                 "--tiles-per-ipu", "4", "--plots", "--out", str(tmp_path / "out")])
    assert code == 2
    assert "pip install 'gruc[viz]'" in capsys.readouterr().err
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
        return [{k: v for k, v in row.items() if not k.endswith("_seconds")}
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
