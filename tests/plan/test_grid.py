"""Sweep grids: value lists, inclusive ranges, tuple-valued flags, validation."""

from __future__ import annotations

import pytest

from gruc.cli.gru import FLAGS
from gruc.errors import GrucOptionError, GrucValueError
from gruc.plan import SweepSpec, parse_values

KIND = {field: kind for _, field, kind, _ in FLAGS}


@pytest.mark.parametrize("text, convert, values", [
    ("1,4,16", int, (1, 4, 16)),
    ("7", int, (7,)),
    ("128:1024:128", int, (128, 256, 384, 512, 640, 768, 896, 1024)),   # STOP included
    ("1:10:4", int, (1, 5, 9)),                                           # STOP not reached
    ("3:5", int, (3, 4, 5)),
    ("8:2:-3", int, (8, 5, 2)),
    ("0.1:0.4:0.1", float, (0.1, 0.2, 0.3, 0.4)),
    ("half, float", str, ("half", "float")),
    ("0,1", KIND["reset_after"], (False, True)),
    ("2,2,3,2", int, (2, 3)),                           # a value given twice is one configuration
])
def test_lists_and_ranges(text, convert, values):
    assert parse_values(text, convert, flag="--x") == values


def test_tuple_flags_separate_alternatives_with_a_slash():
    assert parse_values("97,67,87/50,50,50", KIND["variable_time_steps"],
                        flag="--variable-time-steps", tuple_valued=True) == (
        (97, 67, 87), (50, 50, 50))
    assert parse_values("reset,update,candidate/update,candidate,reset", KIND["cell_order"],
                        flag="--cell-order", tuple_valued=True) == (
        ("reset", "update", "candidate"), ("update", "candidate", "reset"))


@pytest.mark.parametrize("text, convert, words", [
    ("1,,2", int, ["empty item"]),
    ("1:5:0", int, ["step 0"]),
    ("5:1", int, ["empty"]),
    ("1:2:3:4", int, ["START:STOP"]),
    ("a:b", int, ["int bounds"]),
    ("nan:1", float, ["finite"]),
    ("0:inf", float, ["finite"]),
    ("0:1:nan", float, ["finite"]),
    ("1,x", int, ["'x'"]),
    ("a:b", str, ["takes no ranges"]),
    ("0,maybe", KIND["reset_after"], ["maybe", "not a boolean"]),
])
def test_bad_values_name_the_flag_and_the_value(text, convert, words):
    with pytest.raises(GrucValueError) as info:
        parse_values(text, convert, flag="--x")
    assert "--x" in str(info.value)
    for word in words:
        assert word in str(info.value)


def test_the_grid_is_the_cross_product_first_flag_outermost():
    spec = SweepSpec(fixed={"input_size": 3},
                     swept={"batch_size": (1, 2), "output_size": (4, 5, 6)})
    configs = spec.configs()
    assert [(c.batch_size, c.output_size) for c in configs] == [
        (1, 4), (1, 5), (1, 6), (2, 4), (2, 5), (2, 6)]
    assert all(c.input_size == 3 for c in configs)
    assert spec.parameters == ("batch_size", "output_size")


def test_spec_validation():
    with pytest.raises(GrucValueError, match="'bogus' is not a layer flag"):
        SweepSpec(swept={"bogus": (1, 2)})
    with pytest.raises(GrucValueError, match="'backend' is not a layer flag"):
        SweepSpec(fixed={"backend": "numpy"})
    with pytest.raises(GrucValueError, match="both fixed and swept"):
        SweepSpec(fixed={"batch_size": 1}, swept={"batch_size": (1, 2)})
    with pytest.raises(GrucValueError, match="no values"):
        SweepSpec(swept={"batch_size": ()})
    with pytest.raises(GrucOptionError):
        SweepSpec(fixd={})
    spec = SweepSpec(fixed={"variable_time_steps": (5,)}, swept={"sequence_size": (8, 3)})
    with pytest.raises(GrucValueError,
                       match=r"configuration sequence_size=3: .*outside 1..sequence-size \(3\)"):
        spec.configs()
