"""Sweeps: every executor gives the same rows, rows land as they finish, re-runs resume."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time

import pytest

from gruc.errors import GrucValueError
from gruc.plan import ProcessExecutor, RowStore, SerialExecutor, SweepSpec, run_sweep
from gruc.plan.planned import TIMING_COLUMNS

# ipu2, plan-only: 2 x 2 x 3 x 2 = 24 configurations.  The executors are under test here, so the
# sweeps compile without the default pipeline, whose passes dominate small plans (the plan-only ==
# run tests and the CLI tests use the default pipeline).
GRID = SweepSpec(fixed={"input_size": 8}, pipeline="",
                 swept={"batch_size": (4, 16), "output_size": (16, 64),
                        "sequence_size": (4, 8, 16), "shards": (1, 2)})


def untimed(rows):
    return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in rows]


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    return run_sweep(GRID, tmp_path_factory.mktemp("serial"), executor=SerialExecutor())


def test_serial_sweep_completes_in_grid_order(serial):
    assert serial.computed == 24 and serial.skipped == 0 and not serial.errors
    assert [(r["batch_size"], r["output_size"], r["sequence_size"], r["shards"])
            for r in serial.rows][:3] == [(4, 16, 4, 1), (4, 16, 4, 2), (4, 16, 8, 1)]
    assert all(r["target"] == "ipu2" and r["tiles"] == 1472 and r["fits"] for r in serial.rows)
    on_disk = json.loads(serial.store.json_path.read_text())
    assert untimed(on_disk) == untimed(serial.rows)
    header = serial.store.csv_path.read_text().splitlines()[0].split(",")
    assert header[:4] == ["batch_size", "output_size", "sequence_size", "shards"]
    assert len(serial.store.csv_path.read_text().splitlines()) == 25


def test_process_pool_gives_the_serial_rows(serial, tmp_path):
    executor = ProcessExecutor(2)
    try:
        pooled = run_sweep(GRID, tmp_path, executor=executor)
    finally:
        executor.close()
    assert pooled.computed == 24
    assert untimed(pooled.rows) == untimed(serial.rows)


class LastFirstExecutor(SerialExecutor):
    """Finishes the items in reverse, as a pool's workers may."""

    def map_unordered(self, fn, items):
        for index in reversed(range(len(items))):
            yield index, fn(items[index])


def test_rows_finishing_out_of_order_are_written_in_grid_order(serial, tmp_path):
    result = run_sweep(GRID, tmp_path, executor=LastFirstExecutor())
    grid_order = [r["config"] for r in serial.rows]
    assert [r["config"] for r in result.rows] == grid_order
    assert [r["config"] for r in json.loads(result.store.json_path.read_text())] == grid_order
    with open(result.store.csv_path, newline="") as table:
        assert [r["config"] for r in csv.DictReader(table)] == grid_order


def test_dask_local_cluster_gives_the_serial_rows(serial, tmp_path):
    import distributed  # the test extra installs it: this test runs in CI

    from gruc.plan import DaskExecutor

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, host="127.0.0.1") as cluster:
        executor = DaskExecutor(cluster.scheduler_address)
        try:
            result = run_sweep(GRID, tmp_path, executor=executor)
        finally:
            executor.close()
    assert result.computed == 24
    assert untimed(result.rows) == untimed(serial.rows)


def test_rerun_skips_finished_rows(serial, tmp_path):
    half = GRID.with_value("batch_size", 4)   # rows without a batch_size column
    first = run_sweep(half, tmp_path, executor=SerialExecutor())
    assert first.computed == 12
    again = run_sweep(GRID, tmp_path, executor=SerialExecutor())
    assert again.computed == 12 and again.skipped == 12
    assert untimed(again.rows) == untimed(serial.rows)
    kept = {r["config"]: r["compile_seconds"] for r in first.rows}
    assert all(kept[r["config"]] == r["compile_seconds"] for r in again.rows if r["config"] in kept)


def test_a_row_the_host_ran_out_of_memory_for_is_planned_again(tmp_path, monkeypatch):
    import gruc.plan.layer as layer_module
    real = layer_module.plan_layer

    def short_of_memory(config, pipeline):
        if config.batch_size == 16:
            raise MemoryError("Unable to allocate 4.00 GiB")
        return real(config, pipeline)
    grid = GRID.with_value("shards", 1).with_value("sequence_size", 4)
    monkeypatch.setattr(layer_module, "plan_layer", short_of_memory)
    first = run_sweep(grid, tmp_path, executor=SerialExecutor())
    short = [r for r in first.rows if r["batch_size"] == 16]
    assert len(short) == 2 and all(r["fits"] is None and r["error"] ==
                                   "MemoryError: the host ran out of memory planning it "
                                   "(Unable to allocate 4.00 GiB)" for r in short)
    monkeypatch.setattr(layer_module, "plan_layer", real)
    again = run_sweep(grid, tmp_path, executor=SerialExecutor())
    assert again.computed == 2 and again.skipped == 2 and not again.errors
    assert all(r["fits"] for r in again.rows)


def test_rows_of_grids_sweeping_different_flags_share_one_table(tmp_path):
    by_batch = SweepSpec(fixed={"input_size": 8, "output_size": 16, "sequence_size": 4},
                         pipeline="", swept={"batch_size": (2, 4)})
    by_output = SweepSpec(fixed={"input_size": 8, "batch_size": 4, "sequence_size": 4},
                          pipeline="", swept={"output_size": (16, 32)})
    run_sweep(by_batch, tmp_path, executor=SerialExecutor())
    second = run_sweep(by_output, tmp_path, executor=SerialExecutor())
    assert (second.computed, second.skipped) == (1, 1)
    with open(tmp_path / "rows.csv", newline="") as handle:
        table = list(csv.reader(handle))
    assert table[0][:3] == ["batch_size", "output_size", "config"]
    assert [row[:2] for row in table[1:]] == [["2", "16"], ["4", "16"], ["4", "32"]]
    on_disk = json.loads((tmp_path / "rows.json").read_text())
    assert [list(row)[:3] for row in on_disk] == [["batch_size", "output_size", "config"]] * 3
    assert [(r["batch_size"], r["output_size"]) for r in second.rows] == [(4, 16), (4, 32)]


KILLED = SweepSpec(fixed={"input_size": 16, "output_size": 32}, pipeline="",
                   swept={"batch_size": (2, 4, 8, 16, 32), "sequence_size": (4, 8, 12, 16, 20, 24)})
KILLED_ARGV = ["plan", "--input-size", "16", "--output-size", "32", "--batch-size", "2,4,8,16,32",
               "--sequence-size", "4:24:4", "--pipeline", "", "--jobs", "1", "--no-progress"]


def test_a_killed_sweep_loses_nothing_and_resumes(tmp_path):
    out = tmp_path / "out"
    code = ("import sys; from gruc.cli import main; "
            f"sys.exit(main({KILLED_ARGV + ['--out', str(out)]!r}))")
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    rows = []
    deadline = time.monotonic() + 60
    try:
        while len(rows) < 3 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.02)
            if (out / "rows.json").exists():
                rows = json.loads((out / "rows.json").read_text())  # never torn
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert 3 <= len(rows) < 30, f"not killed midway: {process.stderr.read().decode()[-2000:]}"
    stored = RowStore(out).rows   # what the killed run left is complete, valid JSON
    assert len(stored) >= len(rows)
    resumed = run_sweep(KILLED, out, executor=SerialExecutor())
    assert resumed.skipped == len(stored) and resumed.computed == 30 - len(stored)
    assert len(resumed.rows) == 30 and len(RowStore(out)) == 30
    before = {r["config"]: r for r in stored}
    assert all(before[r["config"]] == r for r in resumed.rows if r["config"] in before)


def test_progress_bar_on_request_or_on_a_terminal(tmp_path, capsys):
    spec = SweepSpec(fixed={"input_size": 4, "output_size": 4, "sequence_size": 2,
                            "tiles_per_ipu": 4}, swept={"batch_size": (1, 2)}, pipeline="")
    run_sweep(spec, tmp_path / "shown", executor=SerialExecutor(), progress=True)
    err = capsys.readouterr().err
    assert "2/2" in err and "[" + "#" * 30 + "]" in err
    run_sweep(spec, tmp_path / "quiet", executor=SerialExecutor())   # stderr is no terminal
    assert capsys.readouterr().err == ""


class InterruptedAfter(SerialExecutor):
    """A serial executor whose user presses Ctrl-C after ``count`` rows."""

    def __init__(self, count: int) -> None:
        self.count = count

    def map_unordered(self, fn, items):
        for done, result in enumerate(super().map_unordered(fn, items)):
            if done == self.count:
                raise KeyboardInterrupt
            yield result


def test_an_interrupted_sweep_leaves_csv_and_json_in_step(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run_sweep(GRID, tmp_path, executor=InterruptedAfter(3))
    rows = json.loads((tmp_path / "rows.json").read_text())
    table = list(csv.DictReader((tmp_path / "rows.csv").open()))
    assert len(rows) == len(table) == 3
    assert [r["config"] for r in rows] == [r["config"] for r in table]


def test_one_sweep_at_a_time_per_directory(tmp_path):
    """Two sweeps rewriting one directory's files from their own rows would drop each other's."""
    with RowStore(tmp_path):
        with pytest.raises(GrucValueError, match=r"another gruc plan is writing rows in .*one "
                                                 r"sweep at a time per --out"):
            run_sweep(GRID, tmp_path, executor=SerialExecutor())
    assert run_sweep(GRID, tmp_path, executor=SerialExecutor()).computed == 24  # released


def test_a_pipeline_spelt_differently_is_the_same_row(tmp_path):
    spec = SweepSpec(fixed={"input_size": 8, "sequence_size": 4}, swept={"batch_size": (1, 2)},
                     pipeline="canonicalize,dce")
    assert run_sweep(spec, tmp_path, executor=SerialExecutor()).computed == 2
    respelt = spec.model_copy(update={"pipeline": " canonicalize , dce "})
    again = run_sweep(respelt, tmp_path, executor=SerialExecutor())
    assert again.computed == 0 and again.skipped == 2


def test_rewrites_take_a_bounded_share_of_a_sweep(tmp_path, monkeypatch):
    """Rewriting both files grows with the rows, so a store rewrites them only once ten times
    the last rewrite's time has passed; closing writes the rest."""
    import gruc.plan.rows as rows_module

    clock = [0.0]
    monkeypatch.setattr(rows_module.time, "monotonic", lambda: clock[0])
    real_write = rows_module.write_text_atomically

    def slow_write(path, text):            # each file takes one second of the fake clock
        clock[0] += 1.0
        real_write(path, text)

    monkeypatch.setattr(rows_module, "write_text_atomically", slow_write)

    def on_disk():
        return len(json.loads((tmp_path / "rows.json").read_text()))

    with RowStore(tmp_path) as store:
        store.add({"config": "a"})             # the first row is written at once
        assert on_disk() == 1
        clock[0] += 17.0                       # 2 s of writing allow 18 s of work before the next
        store.add({"config": "b"})
        assert on_disk() == 1
        clock[0] += 1.0
        store.add({"config": "c"})
        assert on_disk() == 3
        store.add({"config": "d"})
    assert on_disk() == 4 and len(list(csv.DictReader((tmp_path / "rows.csv").open()))) == 4
