"""Ties and fixed products: derived flags in sweeps and searches, and the relations refused."""

from __future__ import annotations

import pytest

from gruc.errors import GrucValueError
from gruc.plan import SweepSpec, find_max
from gruc.plan.derived import parse_product, parse_tie
from gruc.plan.search import FindMaxResult

TIE = (("input_size", "output_size"),)
ONE_TILE = {"tiles_per_ipu": 1, "batch_size": 2, "sequence_size": 2}


def test_a_tie_gives_the_follower_the_drivers_value_in_a_sweep():
    spec = SweepSpec(fixed={"tiles_per_ipu": 4}, swept={"input_size": (4, 8)}, ties=TIE)
    assert [(c.input_size, c.output_size) for c in spec.configs()] == [(4, 4), (8, 8)]
    assert spec.derived == ("output_size",)


def test_a_tie_with_no_value_given_takes_the_sources_default():
    (config,) = SweepSpec(fixed={"tiles_per_ipu": 4, "output_size": 16},
                          ties=(("output_size", "batch_size"),)).configs()
    assert config.batch_size == 16
    (config,) = SweepSpec(fixed={"tiles_per_ipu": 4}, ties=TIE).configs()
    assert config.output_size == config.input_size == 64   # the layer's default I


def test_ties_chain_and_a_searched_follower_drives_its_group():
    spec = SweepSpec(fixed={"tiles_per_ipu": 4}, swept={"input_size": (4, 8)},
                     ties=(("input_size", "output_size"), ("output_size", "batch_size")))
    assert [(c.input_size, c.output_size, c.batch_size) for c in spec.configs()] == [
        (4, 4, 4), (8, 8, 8)]
    searched = SweepSpec(fixed={"output_size": 5}, ties=TIE, searched="output_size")
    assert searched.derivation.apply({"output_size": 7}) == {"output_size": 7, "input_size": 7}


def test_a_fixed_product_derives_the_other_factor_and_skips_what_does_not_divide():
    spec = SweepSpec(fixed={"tiles_per_ipu": 4}, swept={"batch_size": (1, 3, 4, 16)},
                     products=(("batch_size", "sequence_size", 8),))
    configs, skipped = spec.grid()
    assert [(c.batch_size, c.sequence_size) for c in configs] == [(1, 8), (4, 2)]
    assert len(skipped) == 2
    assert "batch_size=3" in skipped[0] and "does not divide" in skipped[0]
    assert "batch_size=16" in skipped[1]
    # either factor may drive: the one given
    (config,) = SweepSpec(fixed={"sequence_size": 4},
                          products=(("batch_size", "sequence_size", 8),)).configs()
    assert config.batch_size == 2


@pytest.mark.parametrize("spec, words", [
    (dict(ties=(("input_size", "output_size"), ("output_size", "input_size"))), ["cycle"]),
    (dict(ties=(("input_size", "output_size"),), fixed={"output_size": 4}),
     ["--output-size is tied to --input-size", "give the values to --input-size"]),
    (dict(ties=(("input_size", "output_size"),), fixed={"input_size": 4},
          searched="output_size"), ["both given or searched"]),
    (dict(ties=(("input_size", "bogus"),)), ["--bogus", "not a flag"]),
    (dict(ties=(("input_size", "output_size"), ("batch_size", "output_size"))),
     ["tied twice"]),
    (dict(ties=(("input_size", "input_size"),)), ["to itself"]),
    (dict(products=(("batch_size", "sequence_size", 8),)), ["neither given nor searched"]),
    (dict(products=(("batch_size", "sequence_size", 8),),
          fixed={"batch_size": 2, "sequence_size": 4}), ["both given"]),
    (dict(products=(("batch_size", "sequence_size", 0),), fixed={"batch_size": 2}),
     ["integer >= 1"]),
    (dict(products=(("batch_size", "data_type", 8),), fixed={"batch_size": 2}),
     ["--data-type is not an integer size flag"]),
    (dict(products=(("batch_size", "output_size", 8),), ties=TIE, fixed={"batch_size": 2}),
     ["--output-size is also tied"]),
])
def test_relations_that_leave_a_flag_without_one_value_are_refused(spec, words):
    with pytest.raises(GrucValueError) as info:
        SweepSpec(**spec).configs()
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("text, parse, words", [
    ("input-size", parse_tie, ["FLAG=FLAG"]),
    ("a=b=c", parse_tie, ["FLAG=FLAG"]),
    ("batch-size*sequence-size", parse_product, ["FLAG*FLAG=N"]),
    ("batch-size*sequence-size=x", parse_product, ["'x' is not an integer"]),
    ("batch-size=16", parse_product, ["FLAG*FLAG=N"]),
])
def test_bad_spellings_name_the_form(text, parse, words):
    with pytest.raises(GrucValueError) as info:
        parse(text)
    for word in words:
        assert word in str(info.value)


def test_spellings_take_the_command_lines_flags():
    assert parse_tie("--input-size=output-size") == ("input_size", "output_size")
    assert parse_product("batch-size * sequence-size = 1600") == (
        "batch_size", "sequence_size", 1600)


def test_a_search_of_a_tied_flag_moves_its_follower_along(tmp_path):
    spec = SweepSpec(fixed=ONE_TILE, swept={"available_memory_proportion": (0.6, 0.1)},
                     ties=TIE)
    results = find_max(spec, "output_size", tmp_path, executor=None)
    assert len(results) == 2   # one search per value of the knob
    for result in results:
        assert result.value is not None and result.fitting["fits"]
        assert not result.failing["fits"] and result.failing["output_size"] == result.value + 1
        assert all(row["input_size"] == row["output_size"] for row in result.probes)


def test_a_search_of_a_product_factor_moves_over_its_divisors(tmp_path):
    spec = SweepSpec(fixed={"tiles_per_ipu": 1, "input_size": 32, "output_size": 32},
                     products=(("batch_size", "sequence_size", 96),))
    (result,) = find_max(spec, "batch_size", tmp_path)
    assert result.domain == (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96)
    assert all(96 % row["batch_size"] == 0 and row["batch_size"] * row["sequence_size"] == 96
               for row in result.probes)
    assert result.fitting["fits"] and result.value in result.domain
    if result.failing is not None:   # the next divisor up does not fit
        assert not result.failing["fits"]
        assert result.domain.index(result.failing["batch_size"]) == (
            result.domain.index(result.value) + 1)


def _probe(value: int, fits: bool) -> dict:
    return {"config": str(value), "output_size": value, "fits": fits, "error": None}


def test_values_that_do_not_fit_between_two_that_do_are_reported():
    probes = [_probe(v, fits) for v, fits in [(1, True), (2, True), (3, False), (4, True),
                                              (5, False), (6, False), (7, True), (8, False)]]
    result = FindMaxResult("output_size", {}, 7, probes[6], probes[7], probes)
    assert result.non_monotone == ["fits at 2 and 4, not 3", "fits at 4 and 7, not 5, 6"]
    monotone = FindMaxResult("output_size", {}, 2, probes[1], probes[2], probes[:3])
    assert monotone.non_monotone == []
