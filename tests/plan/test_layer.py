"""Plan-only GRU layers equal runs of the same layer, and flatten into sweep rows."""

from __future__ import annotations

import json

import pytest

from gruc.errors import GrucParseError
from gruc.plan import ROW_COLUMNS, config_key, plan_layer, plan_row
from gruc.tools.gru_layer import GruLayerConfig, run_layer

SMALL = dict(sequence_size=7, input_size=5, output_size=4, batch_size=3, tiles_per_ipu=64,
             backend="numpy")


def without_time(report) -> dict:
    data = report.to_dict()
    data.pop("compile_seconds")
    return data


@pytest.mark.parametrize("flags", [
    dict(shards=3),
    dict(shards=3, variable_time_steps=(5, 2, 3)),
    dict(shards=3, variable_time_steps=(2,), code_reuse=True),
    dict(shards=2, with_real_time_steps=True, with_attention=True),
    dict(shards=3, variable_time_steps=(5, 2, 3), phase="bwd"),
    dict(shards=2, with_real_time_steps=True, phase="all", code_reuse=True),
    # 4 steps in 3 shards of 2: the third shard has no steps and no loop
    dict(sequence_size=4, shards=3, variable_time_steps=(1,), reset_after=True),
    dict(sequence_size=4, shards=3, variable_time_steps=(1,), reset_after=True, phase="all"),
], ids=["fixed", "per-row lengths", "one length, code reuse", "real time steps, AUGRU",
        "backward, per-row lengths", "weight update, real time steps",
        "an empty shard, forward", "an empty shard, training"])
def test_plan_only_equals_a_run(flags):
    config = GruLayerConfig(**{**SMALL, **flags})
    run = run_layer(config)
    assert run.passed
    plan = plan_layer(config)
    assert without_time(plan.report) == without_time(run.engine.report)
    assert plan.report.cycles.total == run.engine.report.cycles.total > 0


def test_row_has_the_columns_and_the_key():
    config = GruLayerConfig(**SMALL, shards=2)
    row = plan_row(config, ("batch_size", "shards"))
    assert list(row) == ["batch_size", "shards", *ROW_COLUMNS]
    assert row["config"] == config_key(config) != config_key(config, "")
    key = json.loads(row["config"])
    assert key["shards"] == 2 and key["pipeline"] == row["pipeline"] and "backend" not in key
    assert row["fits"] is True and row["shards_chosen"] == 2 and row["error"] is None
    cycles = row["cycles_compute"] + row["cycles_exchange"] + row["cycles_sync"]
    assert row["cycles_total"] == cycles
    assert row["flops"] > 0 and row["tiles"] == 64 and row["target"] == "custom"


def test_a_refused_configuration_is_an_error_row():
    row = plan_row(GruLayerConfig(**{**SMALL, "tiles_per_ipu": 16}, shards=9))
    assert row["error"].startswith("GrucOptionError") and "numShards" in row["error"]
    assert row["fits"] is None and row["max_tile_bytes"] is None


def test_a_pipeline_can_be_chosen_and_a_bad_one_is_refused():
    config = GruLayerConfig(**SMALL, shards=2)
    bare = plan_row(config, pipeline="")
    assert bare["pipeline"] == "" and bare["fits"] is True
    with pytest.raises(GrucParseError):
        plan_row(config, pipeline="no such pass{")


def test_shards_chosen_by_the_shard_pass_are_the_rows_shards():
    config = GruLayerConfig(**SMALL, shards=1)
    by_pass = plan_row(config, pipeline="canonicalize,shard{num-shards=3}")
    built = plan_row(GruLayerConfig(**SMALL, shards=3), pipeline="canonicalize")
    assert by_pass["shards_chosen"] == built["shards_chosen"] == 3
    assert plan_row(config, pipeline="canonicalize")["shards_chosen"] == 1


def test_overflow_names_the_first_tile():
    # input and output alone, always live: 2 x 64 x 32 x 64 x 4 B > 624 KiB on the one tile
    row = plan_row(GruLayerConfig(sequence_size=64, input_size=64, output_size=64, batch_size=32,
                                  tiles_per_ipu=1, shards=1), pipeline="")
    assert row["fits"] is False and row["tiles_over_capacity"] >= 1
    assert row["first_overflow_tile"] == 0 and row["first_overflow_bytes"] > row["bytes_per_tile"]
    assert "B)" in row["first_overflow_tensors"]



def test_planning_layer_after_layer_keeps_no_graph_alive():
    """A study plans hundreds of layers in one process; each plan's graph must go with it.  A
    memo of the cycle estimators held its variables, and with them their whole graphs: a
    768-wide training layer on an ipu2 grew the process by 378 MB a plan."""
    import gc

    from gruc.ir.graph import Graph
    from gruc.plan.layers import plan_config

    config = GruLayerConfig(phase="all", sequence_size=3, input_size=8, output_size=8,
                            batch_size=2, tiles_per_ipu=8)

    def graphs_alive() -> int:
        gc.collect()
        return sum(type(o) is Graph for o in gc.get_objects())  # isinstance would warn on torch

    plan_config(config)
    before = graphs_alive()
    for _ in range(3):
        plan_config(config)
    assert graphs_alive() <= before
