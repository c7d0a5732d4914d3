"""``find_max``: the value it reports fits and the next one does not, found without a scan."""

from __future__ import annotations

import pytest

from gruc.errors import GrucValueError
from gruc.plan import (ProcessExecutor, RowStore, SerialExecutor, SweepSpec, find_max, plan_row,
                       search)
from gruc.tools.gru_layer import GruLayerConfig
from gruc.target import MAX_TILES_PER_IPU

LAYER = {"input_size": 64, "output_size": 64, "batch_size": 32, "tiles_per_ipu": 1, "shards": 1}
"""One tile of 624 KiB: the longest sequence that fits is a few dozen steps."""


def test_longest_sequence_that_fits_is_checked_directly(tmp_path):
    (result,) = find_max(SweepSpec(fixed=LAYER), "sequence_size", tmp_path)
    value = result.value
    assert value is not None and value > 1
    assert plan_row(GruLayerConfig(**LAYER, sequence_size=value))["fits"] is True
    over = plan_row(GruLayerConfig(**LAYER, sequence_size=value + 1))
    assert over["fits"] is False
    assert result.failing["sequence_size"] == value + 1
    assert result.failing["first_overflow_tile"] == over["first_overflow_tile"] == 0
    assert len(result.probes) <= 2 * value.bit_length() + 5   # a search, not a scan
    assert f"largest that fits = {value}" in result.describe()
    assert "tile 0 needs" in result.describe()
    assert len(RowStore(tmp_path)) == len(result.probes)     # every plan is a stored row
    (again,) = find_max(SweepSpec(fixed=LAYER), "sequence_size", tmp_path)
    assert again.value == value and len(RowStore(tmp_path)) == len(result.probes)
    (nothing,) = find_max(SweepSpec(fixed={**LAYER, "batch_size": 4096}), "sequence_size",
                          tmp_path)
    assert nothing.value is None and nothing.failing["sequence_size"] == 1
    assert "nothing fits; at 1: tile 0 needs" in nothing.describe()


def test_a_start_above_the_answer_searches_down(tmp_path):
    """A start value that does not fit is a guess: the search halves down to a fitting value and
    bisects, finding what a search from 1 finds."""
    (from_one,) = find_max(SweepSpec(fixed=LAYER), "sequence_size", tmp_path / "up")
    answer = from_one.value
    for start in (answer + 1, 8 * answer + 3):
        (result,) = find_max(SweepSpec(fixed={**LAYER, "sequence_size": start}),
                             "sequence_size", tmp_path / f"down{start}")
        assert result.value == answer and result.failing["sequence_size"] == answer + 1
        assert len(result.probes) <= 2 * start.bit_length() + 5
        assert f"largest that fits = {answer}" in result.describe()


def test_values_refused_below_every_accepted_one_are_stepped_over(tmp_path):
    """A sequence too short for the fixed shard count is refused, not over capacity: the search
    steps up past it instead of reporting that nothing fits."""
    spec = SweepSpec(fixed={"shards": 5, "batch_size": 2, "input_size": 16, "output_size": 8,
                            "tiles_per_ipu": 20})
    (result,) = find_max(spec, "sequence_size", tmp_path, limit=1000)
    assert result.value == 1000 and result.failing is None
    assert "numShards" in RowStore(tmp_path).rows[0]["error"]       # S = 1 was refused
    (refused,) = find_max(SweepSpec(fixed={**spec.fixed, "tiles_per_ipu": 5}), "sequence_size",
                          tmp_path / "never", limit=64)
    assert refused.value is None and refused.failing["sequence_size"] == 64
    assert "refuses every value tried, up to 64: GrucOptionError" in refused.describe()


def test_per_row_lengths_are_checked_against_the_start_batch_size(tmp_path):
    layer = {"sequence_size": 4, "tiles_per_ipu": 4, "variable_time_steps": (1, 2, 3)}
    (result,) = find_max(SweepSpec(fixed={**layer, "batch_size": 3}), "batch_size", tmp_path)
    assert result.value == 3 and "batch-size (4) lengths" in result.failing["error"]
    with pytest.raises(GrucValueError, match=r"batch-size \(5\)"):
        find_max(SweepSpec(fixed={**layer, "batch_size": 5}), "batch_size", tmp_path / "bad")


def _profile(refused_below: int, fits_up_to: int) -> tuple[dict, callable]:
    rows: dict[int, dict] = {}

    def evaluate(value):
        rows.setdefault(value, {"error": "refused"} if value < refused_below
                        else {"fits": value <= fits_up_to})
        return rows[value]
    return rows, evaluate


@pytest.mark.parametrize("start", [1, 6, 40, 1000])
def test_the_bracket_takes_refused_low_values_as_a_floor(start):
    for refused_below, fits_up_to, answer in [(5, 300, (300, 301)), (5, 4, (None, 5)),
                                              (7, 9, (9, 10)), (5000, 9999, (None, 4096))]:
        rows, evaluate = _profile(refused_below, fits_up_to)
        assert search._bracket(evaluate, start, 4096) == answer, (refused_below, fits_up_to)
        assert len(rows) <= 40


def test_one_search_per_point_of_the_other_flags(tmp_path):
    spec = SweepSpec(fixed={"input_size": 4, "output_size": 4, "batch_size": 2,
                            "tiles_per_ipu": 16}, swept={"sequence_size": (3, 6)})
    results = find_max(spec, "shards", tmp_path, executor=SerialExecutor())
    assert [r.point for r in results] == [{"sequence_size": 3}, {"sequence_size": 6}]
    for result in results:   # more shards than the target allows is refused, not an overflow
        assert result.failing["shards"] == result.value + 1
        assert "numShards" in result.failing["error"]


def test_points_searched_side_by_side_find_what_one_process_finds(tmp_path):
    spec = SweepSpec(fixed={"input_size": 8, "tiles_per_ipu": 1, "shards": 1, "sequence_size": 16},
                     swept={"output_size": (8, 32, 64)})
    alone = find_max(spec, "batch_size", tmp_path / "serial", executor=SerialExecutor())
    executor = ProcessExecutor(2)
    try:
        pooled = find_max(spec, "batch_size", tmp_path / "pool", executor=executor)
        planned = len(RowStore(tmp_path / "pool"))
        again = find_max(spec, "batch_size", tmp_path / "pool", executor=executor)
    finally:
        executor.close()
    answers = [(r.point, r.value, r.failing["batch_size"]) for r in alone]
    assert [(r.point, r.value, r.failing["batch_size"]) for r in pooled] == answers
    assert [(r.point, r.value) for r in again] == [(point, value) for point, value, _ in answers]
    assert planned == sum(len(r.probes) for r in alone) == len(RowStore(tmp_path / "serial"))
    assert len(RowStore(tmp_path / "pool")) == planned   # the rerun planned nothing new
    in_order = [(row["output_size"], row["batch_size"]) for row in RowStore(tmp_path / "pool").rows]
    assert in_order == sorted(in_order)                   # by point, then by value
    assert alone[0].value > alone[1].value > alone[2].value > 1


def test_limits_and_bad_flags(tmp_path):
    (capped,) = find_max(SweepSpec(fixed=LAYER), "sequence_size", tmp_path, limit=3)
    assert capped.value == 3 and capped.failing is None
    assert "search limit" in capped.describe()
    with pytest.raises(GrucValueError, match="cannot search flag 'data_type'"):
        find_max(SweepSpec(), "data_type", tmp_path)
    with pytest.raises(GrucValueError, match="both searched and swept"):
        find_max(SweepSpec(swept={"batch_size": (1, 2)}), "batch_size", tmp_path)
    with pytest.raises(GrucValueError, match="limit 0"):
        find_max(SweepSpec(), "batch_size", tmp_path, limit=0)
    with pytest.raises(GrucValueError, match="batch_size cannot start at 0: .*batch_size = 0"):
        find_max(SweepSpec(fixed={"batch_size": 0}), "batch_size", tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_more_tiles_run_to_the_most_a_target_may_have(tmp_path):
    """Doubling tiles per IPU passes the most a target may have: that value is refused as a
    configuration (counted as not fitting), not an error that ends the search."""
    layer = {"sequence_size": 3, "input_size": 4, "output_size": 4, "batch_size": 1}
    (result,) = find_max(SweepSpec(fixed={**layer, "tiles_per_ipu": 4096}), "tiles_per_ipu",
                         tmp_path)
    assert result.value == MAX_TILES_PER_IPU
    assert "tiles_per_ipu = 8193" in result.failing["error"]



@pytest.mark.parametrize("bytes_at", [
    lambda v: 300 * v + 1_000,                      # in proportion, as a layer's sizes
    lambda v: 4_096 * (v // 37) + 17 * v,           # in steps (whole grains per tile)
    lambda v: v * v // 3,                           # faster than linear
    lambda v: 638_800 + int(v ** 0.5),              # nearly flat
], ids=["linear", "stairs", "quadratic", "flat"])
def test_the_bracket_is_narrowed_to_the_same_answer_in_few_probes(bytes_at):
    """Interpolated probes find what bisection finds, whatever the bytes do between the probes;
    bytes in proportion to the value need a probe or two after doubling, and no profile needs
    more than three times bisection's."""
    capacity = 638_976
    answer = max(v for v in range(1, 1 << 16) if bytes_at(v) <= capacity)
    rows = {}

    def evaluate(value):
        if value not in rows:
            used = bytes_at(value)
            rows[value] = {"fits": used <= capacity, "max_tile_bytes": used,
                           "bytes_per_tile": capacity}
        return rows[value]

    assert search._bracket(evaluate, 1, 1 << 16) == (answer, answer + 1)
    doubling = answer.bit_length() + 1
    assert len(rows) <= doubling + 3 * answer.bit_length() + search.LOOK_PAST
    if bytes_at(3) - bytes_at(2) == 300:  # linear
        assert len(rows) <= doubling + 2 + search.LOOK_PAST


def test_a_dip_just_past_the_boundary_is_stepped_over():
    """Fitting is not quite monotone: a value a little past the first boundary may fit again
    (tile splits change); the search plans a few values past it and goes on from one that fits."""
    fits = set(range(1, 751)) | {752, 753} | set(range(755, 900))
    rows = {}

    def evaluate(value):
        return rows.setdefault(value, {"fits": value in fits})

    assert search._bracket(evaluate, 1, 4096) == (899, 900)
    assert all(rows[v]["fits"] is False for v in range(900, 900 + search.LOOK_PAST))
    rows.clear()
    fits = set(range(1, 751)) | {755}                      # further past than the search looks
    assert search._bracket(evaluate, 1, 4096) == (750, 751)


def test_a_study_killed_in_a_search_keeps_every_probe_planned_in_this_process(tmp_path,
                                                                              monkeypatch):
    """Searching several points one after another here (``--jobs 1``), each probe's row is on
    disk as soon as it is planned: a study the host kills in a big plan (the out-of-memory killer
    on an IPU-sized layer) resumes from its probes instead of planning them all again."""
    spec = SweepSpec(fixed={"input_size": 4, "output_size": 4, "tiles_per_ipu": 1, "shards": 1,
                            "sequence_size": 4}, swept={"batch_size": (2, 3)})
    planned = []
    real = search.plan_row

    def dies_on_the_fourth_plan(config, *args, **kwargs):
        if len(planned) == 3:
            raise KeyboardInterrupt  # as good as a kill: nothing after it runs
        planned.append(config)
        return real(config, *args, **kwargs)

    monkeypatch.setattr(search, "plan_row", dies_on_the_fourth_plan)
    with pytest.raises(KeyboardInterrupt):
        find_max(spec, "output_size", tmp_path, executor=SerialExecutor())
    assert [row["output_size"] for row in RowStore(tmp_path).rows] == \
        [config.output_size for config in planned]
