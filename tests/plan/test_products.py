"""Planning studies of poplibs' product tools (fc, gemm): rows equal single plans, searches,
resumes, studies mixing kinds of layer, and the registry of planned layers."""

from __future__ import annotations

import csv
import functools
import json
import pickle

import pytest

from gruc.errors import GrucValueError
from gruc.plan import (PLANNED_LAYERS, SerialExecutor, SweepSpec, config_key, find_max,
                       plan_config, plan_program, plan_row, run_sweep)
from gruc.plan.layers import PRODUCT_IGNORED, row_problem
from gruc.plan.planned import ROW_COLUMNS, TIMING_COLUMNS
from gruc.plan.sweep import plan_task
from gruc.tools.products import FcConfig, GemmConfig, build_fc, build_gemm

TINY_FC = {"input_size": 8, "tiles_per_ipu": 16}
TINY_GEMM = {"m": 8, "k": 4, "n": 6, "tiles_per_ipu": 16}


def figures_of(report) -> dict:
    """The row columns a report decides, read straight from the report."""
    return {"fits": report.fits, "max_tile_bytes": report.max_tile_bytes,
            "tiles_used": report.footprint.tiles_used, "total_memory": report.total_memory,
            "always_live_bytes": int(report.always_live_bytes.sum()),
            "not_always_live_max_bytes": int(report.not_always_live_max_bytes.sum()),
            "exchange_bytes": report.exchange_bytes, "cycles_compute": report.cycles.compute,
            "cycles_exchange": report.cycles.exchange, "cycles_sync": report.cycles.sync,
            "cycles_total": report.cycles.total,
            "tiles_over_capacity": len(report.tiles_over_capacity)}


def single_plan(config, build) -> dict:
    """What ``gruc fc --compile-only`` (or gemm) reports of ``config``, with its FLOPs."""
    layer = build(config)
    report = plan_program(layer.graph, layer.programs, runs=layer.runs,
                          memory_model=config.memory_model)
    return {**figures_of(report), "flops": layer.flops(), "tiles": report.target.num_tiles}


def untimed(rows):
    return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in rows]


@pytest.fixture(scope="module")
def fc_sweep(tmp_path_factory):
    spec = SweepSpec(layer="fc", fixed=TINY_FC,
                     swept={"batch_size": (1, 3), "output_size": (4, 12)})
    return spec, run_sweep(spec, tmp_path_factory.mktemp("fc"), executor=SerialExecutor())


def test_an_fc_sweep_has_the_rows_of_single_plans(fc_sweep):
    spec, result = fc_sweep
    assert result.computed == 4 and not result.errors
    assert [(r["batch_size"], r["output_size"]) for r in result.rows] == [
        (1, 4), (1, 12), (3, 4), (3, 12)]
    for row, config in zip(result.rows, spec.configs()):
        assert list(row) == ["batch_size", "output_size", *ROW_COLUMNS]
        expected = single_plan(config, build_fc)
        assert {k: row[k] for k in expected} == expected
        assert row["shards_chosen"] is None and row["error"] is None
        key = json.loads(row["config"])
        assert key["layer"] == "fc" and row["config"] == config_key(config)
        assert not set(PRODUCT_IGNORED) & set(key)
        assert row_problem(row) is None


def test_a_gemm_sweep_over_transposes(tmp_path):
    spec = SweepSpec(layer="gemm", fixed=TINY_GEMM,
                     swept={"transpose_a": (False, True), "transpose_b": (False, True)})
    result = run_sweep(spec, tmp_path, executor=SerialExecutor())
    assert [(r["transpose_a"], r["transpose_b"]) for r in result.rows] == [
        (False, False), (False, True), (True, False), (True, True)]
    for row, config in zip(result.rows, spec.configs()):
        expected = single_plan(config, build_gemm)
        assert {k: row[k] for k in expected} == expected and row["fits"]
        assert row["flops"] == 2 * 8 * 4 * 6
    assert len({row["config"] for row in result.rows}) == 4
    with open(tmp_path / "rows.csv", newline="") as handle:
        assert [r["transpose_a"] for r in csv.DictReader(handle)] == [
            "False", "False", "True", "True"]


def test_a_sweep_resumes_and_its_task_travels_to_workers(fc_sweep):
    spec, serial = fc_sweep
    again = run_sweep(spec, serial.store.directory, executor=SerialExecutor())
    assert (again.computed, again.skipped) == (0, 4)
    assert untimed(again.rows) == untimed(serial.rows)
    # what a process pool or Dask worker receives: the task pickled, the configuration as data
    task = pickle.loads(pickle.dumps(functools.partial(
        plan_task, swept=spec.parameters, pipeline=None, layer="fc")))
    config = spec.configs()[-1]
    assert untimed([task(config.model_dump())]) == untimed(serial.rows[-1:])


def test_find_max_of_an_fc_batch(tmp_path):
    """One ipu1 tile (256 KiB): the largest batch of a 64 x 64 layer that fits is a few hundred,
    found in about sixteen plans of a fraction of a second."""
    layer = {"input_size": 64, "output_size": 64, "tiles_per_ipu": 1, "device_type": "ipu1"}
    (result,) = find_max(SweepSpec(layer="fc", fixed=layer), "batch_size", tmp_path)
    value = result.value
    assert value is not None and 100 < value < 1000 and len(result.probes) < 30
    assert plan_row(FcConfig(**layer, batch_size=value))["fits"] is True
    over = plan_row(FcConfig(**layer, batch_size=value + 1))
    assert over["fits"] is False and over["first_overflow_tile"] == 0
    assert result.failing["batch_size"] == value + 1
    assert f"largest that fits = {value}" in result.describe()
    (again,) = find_max(SweepSpec(layer="fc", fixed=layer), "batch_size", tmp_path)
    assert again.value == value                              # every plan read back, none made


def test_gemm_find_max_and_its_bad_flags(tmp_path):
    spec = SweepSpec(layer="gemm", fixed={"k": 16, "n": 16, "tiles_per_ipu": 1,
                                          "device_type": "ipu1"})
    (result,) = find_max(spec, "m", tmp_path)
    assert result.value > 1 and result.failing["fits"] is False
    with pytest.raises(GrucValueError, match="cannot search flag 'batch_size'; searchable flags "
                                             "of gemm layers: m, k, n, g"):
        find_max(spec, "batch_size", tmp_path)
    with pytest.raises(GrucValueError, match="m cannot start at 0: GemmConfig.m = 0"):
        find_max(spec.with_value("m", 0), "m", tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_rows_of_several_kinds_share_a_study(tmp_path):
    """A study's directory may hold GRU and fc rows: keys never collide, each row carries its kind
    in its key, and the table gains a ``layer`` column filled on every row."""
    gru = SweepSpec(fixed={"input_size": 8, "output_size": 12, "sequence_size": 2,
                           "tiles_per_ipu": 16}, swept={"batch_size": (1, 3)}, pipeline="")
    fc = SweepSpec(layer="fc", fixed={**TINY_FC, "output_size": 12}, swept={"batch_size": (1, 3)},
                   pipeline="")
    run_sweep(gru, tmp_path, executor=SerialExecutor())
    mixed = run_sweep(fc, tmp_path, executor=SerialExecutor())
    assert (mixed.computed, mixed.skipped) == (2, 0)
    with open(tmp_path / "rows.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [(r["layer"], r["batch_size"]) for r in table] == [
        ("gru", "1"), ("gru", "3"), ("fc", "1"), ("fc", "3")]
    assert len({r["config"] for r in table}) == 4
    again = run_sweep(gru, tmp_path, executor=SerialExecutor())
    assert (again.computed, again.skipped) == (0, 2)
    assert all(row["layer"] == "gru" for row in again.rows)


def test_a_study_from_before_the_kinds_resumes(tmp_path):
    """Rows whose key names no kind (written before fc and gemm plans) are GRU rows: read back
    with this gruc's key, not planned again."""
    spec = SweepSpec(fixed={"input_size": 4, "output_size": 4, "sequence_size": 2,
                            "tiles_per_ipu": 4}, swept={"batch_size": (1, 2)}, pipeline="")
    first = run_sweep(spec, tmp_path, executor=SerialExecutor())
    rows = json.loads((tmp_path / "rows.json").read_text())
    for row in rows:
        flags = json.loads(row["config"])
        del flags["layer"]
        row["config"] = json.dumps(flags, sort_keys=True, separators=(",", ":"))
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    again = run_sweep(spec, tmp_path, executor=SerialExecutor())
    assert (again.computed, again.skipped) == (0, 2)
    assert [r["config"] for r in again.rows] == [r["config"] for r in first.rows]
    on_disk = json.loads((tmp_path / "rows.json").read_text())
    assert [r["config"] for r in on_disk] == [r["config"] for r in first.rows]


@pytest.mark.parametrize("model, build, sizes", [
    (FcConfig, build_fc, {"batch_size": 2, "input_size": 16, "output_size": 24}),
    (GemmConfig, build_gemm, {"m": 16, "k": 8, "n": 24, "beta": 0.5}),
])
def test_ignore_data_and_the_seed_do_not_change_a_product_plan(model, build, sizes):
    """Why fc and gemm sweeps refuse them: the tools' tensors are host-written, so live, whether
    or not results are read back, and the seed only draws data."""
    plans = [single_plan(model(**sizes, tiles_per_ipu=16, **flags), build)
             for flags in ({}, {"ignore_data": True}, {"seed": 7})]
    assert plans[0] == plans[1] == plans[2]


def test_bad_specs_name_the_flag_and_what_is_allowed():
    with pytest.raises(GrucValueError, match="layer 'conv' is not one gruc plans; layers: gru, "
                                             "fc, gemm"):
        SweepSpec(layer="conv")
    with pytest.raises(GrucValueError, match="'seed' is not a layer flag a fc plan depends on"):
        SweepSpec(layer="fc", swept={"seed": (1, 2)})
    with pytest.raises(GrucValueError, match="'phase' is not a layer flag a gemm plan"):
        SweepSpec(layer="gemm", fixed={"phase": "fwd"})
    with pytest.raises(GrucValueError, match=r"fc plans need input_size, output_size "
                                             r"\(--input-size, --output-size\)"):
        SweepSpec(layer="fc", fixed={"batch_size": 2}).configs()
    with pytest.raises(GrucValueError, match="configuration output_size=0"):
        SweepSpec(layer="fc", fixed=TINY_FC, swept={"output_size": (0, 4)}).configs()


def test_every_kind_plans_and_keys_its_own_configurations():
    assert list(PLANNED_LAYERS) == ["gru", "fc", "gemm"]
    fc = FcConfig(**TINY_FC, output_size=4)
    gemm = GemmConfig(**TINY_GEMM)
    assert plan_config(fc).report.fits and plan_config(gemm).layer.plans["gemm"]
    assert json.loads(config_key(gemm, ""))["layer"] == "gemm"
    with pytest.raises(GrucValueError, match="int is no layer gruc plans"):
        config_key(5)
    for kind in PLANNED_LAYERS.values():
        assert set(kind.searchable) <= set(kind.flags) and set(kind.tuple_fields) <= set(
            kind.flags)
        kind.model(**kind.required)                  # the least a configuration must give
