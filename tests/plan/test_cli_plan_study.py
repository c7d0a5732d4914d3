"""``gruc plan`` as a planner's one command: ties, fixed products, per-knob searches with their
summary, the Pareto front, and the paper's columns in the rows."""

from __future__ import annotations

import csv
import json

import pytest

from gruc.cli import main

ONE_TILE = ["--batch-size", "2", "--sequence-size", "2", "--tiles-per-ipu", "1", "--jobs", "1"]


def test_find_max_of_a_tied_size_per_knob_value_with_summary_and_pareto(tmp_path, capsys):
    argv = ["plan", "gru", *ONE_TILE, "--tie", "input-size=output-size", "--find-max",
            "output-size", "--available-memory-proportion", "0.6,0.1", "--pareto",
            "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    head = lines.index("find-max summary")
    header = lines[head + 1].split()
    assert header[:3] == ["available_memory_proportion", "output_size", "input_size"]
    assert header[3:6] == ["cycles_total", "max_tile_bytes", "utilisation"]
    summary = [line.split() for line in lines[head + 2:head + 4]]
    assert [cells[0] for cells in summary] == ["0.6", "0.1"]
    rows = json.loads((tmp_path / "rows.json").read_text())
    for cells in summary:   # each line is its search's fitting row
        answer = next(r for r in rows if r["available_memory_proportion"] == float(cells[0])
                      and r["output_size"] == int(cells[1]))
        assert answer["fits"] and cells[2] == cells[1]
        assert int(cells[3]) == answer["cycles_total"]
        assert int(cells[4]) == answer["max_tile_bytes"]
    assert all(r["input_size"] == r["output_size"] for r in rows)
    assert all(r["cpu_seconds"] is not None and r["peak_rss_bytes"] for r in rows)
    front = list(csv.DictReader((tmp_path / "pareto.csv").open()))
    assert front and all(r["fits"] == "True" for r in front)
    sizes = [int(r["output_size"]) for r in front]
    assert sizes == sorted(sizes, reverse=True)
    assert max(sizes) == max(int(cells[1]) for cells in summary)
    # resumed: nothing planned, the same front from the rows on disk
    before = (tmp_path / "pareto.csv").read_text()
    (tmp_path / "pareto.csv").unlink()
    assert main(argv) == 0
    assert (tmp_path / "pareto.csv").read_text() == before
    assert f"pareto front      {len(front)} of" in capsys.readouterr().out


def test_a_fixed_product_sweep_skips_what_does_not_divide_and_says_so(tmp_path, capsys):
    argv = ["plan", "gru", "--input-size", "4", "--output-size", "4", "--tiles-per-ipu", "1",
            "--jobs", "1", "--batch-size", "1,3,4", "--fixed-product",
            "batch-size*sequence-size=4", "--out", str(tmp_path), "--pareto",
            "--pareto-axes", "batch-size:max,cycles_total:min,max_tile_bytes:min"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "2 planned now" in out
    assert "skipped           configuration batch_size=3: --batch-size 3 does not divide" in out
    rows = list(csv.DictReader((tmp_path / "rows.csv").open()))
    assert [(r["batch_size"], r["sequence_size"]) for r in rows] == [("1", "4"), ("4", "1")]
    front = list(csv.DictReader((tmp_path / "pareto.csv").open()))
    assert list(front[0])[:3] == ["batch_size", "cycles_total", "max_tile_bytes"]


@pytest.mark.parametrize("argv, words", [
    (["--tie", "input-size=output-size", "--output-size", "4"],
     ["--output-size is tied to --input-size"]),
    (["--tie", "input-size=nope"], ["--nope", "not a flag"]),
    (["--tie", "input-size=output-size", "--tie", "output-size=input-size"], ["cycle"]),
    (["--fixed-product", "batch-size*sequence-size=x"], ["'x' is not an integer"]),
    (["--fixed-product", "batch-size*sequence-size=8"], ["neither given nor searched"]),
    (["--pareto-axes", "flops:max,cycles_total:min"], ["add --pareto"]),
    (["--pareto", "--pareto-axes", "flops:max"], ["two different columns"]),
])
def test_bad_relations_and_axes_are_one_line_and_exit_code_2(argv, words, capsys, tmp_path):
    assert main(["plan", *argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err
    assert not (tmp_path / "out").exists(), "refused before anything is planned or written"


def test_the_help_spells_the_relations(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "gru", "--help"])
    out = capsys.readouterr().out
    for words in ["--tie A=B", "--fixed-product A*B=N", "batch-size*sequence-size=1600",
                  "--pareto-axes"]:
        assert words in out


def test_find_max_searches_each_recomputation_mode_and_draws_it_as_bars(tmp_path, capsys):
    argv = ["plan", "gru", *ONE_TILE[:-2], "--phase", "all", "--recomputation-mode",
            "none,full", "--find-max", "output-size", "--find-max-limit", "128", "--jobs", "2",
            "--plots", "--out", str(tmp_path)]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines.index("find-max summary")
    summary = [line.split() for line in lines[head + 2:head + 4]]
    assert [cells[0] for cells in summary] == ["none", "full"]
    saved, recomputed = (int(cells[1]) for cells in summary)
    assert recomputed >= saved   # saving no gates leaves room for at least as wide a layer
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert {row["recomputation_mode"] for row in rows} == {"none", "full"}
    assert all(row["cycles_fwd"] + row["cycles_bwd"] + row["cycles_wu"] == row["cycles_total"]
               for row in rows if row["fits"] is not None)
    assert (tmp_path / "plots" / "metrics-recomputation_mode.png").exists()
