"""poplin's convolution-vertex estimates against values worked by hand from poplibs' formulas.

The expected numbers below were derived on paper from ``PerformanceEstimation.hpp`` (2020-21) for
the plan poplin chooses for a float ``[8, 2048] x [2048, 2048]`` product, not read back from the
code under test: on an ipu1 each tile holds 90 field elements, 5 groups of 8 input channels and one
group of 8 output channels, and the 52 partials of each output are reduced in two stages.
"""

import numpy as np
import pytest

from gruc.ir.codelets.conv_costs import (
    ConvMethod,
    amp_partials_cycles,
    cast_cycles,
    mac_partials_cycles,
    multi_stage_reduce_plan,
    reduce_add_cycles,
    reduce_stages,
    worker_split,
)
from gruc.ops.matmul_plan import _Problem, pass_cost
from gruc.target import Target
from gruc.types import FLOAT

AMP_FLOAT = ConvMethod("AMP", 8, 8, conv_units=8, weights_per_conv_unit=8)


def test_amp_partials_match_the_worked_ipu1_plan():
    # workers take 15 elements each: zeroing pass 6*204 + 14, others 6*142 + 14; loads 8*32/8
    # 50 + 12 + 4*(16 + 19 + 6 + 32 + 866) + (11 + 19 + 7 + 32 + 1238) = 5125
    assert amp_partials_cycles(90, 5, 1, 1, AMP_FLOAT, True, True, 8) == 5125


def test_amp_partials_match_the_worked_ipu2_plan():
    # four input groups per tile: 62 + 3*939 + 1307
    assert amp_partials_cycles(90, 4, 1, 1, AMP_FLOAT, True, True, 8) == 4186


def test_amp_partials_are_evaluated_for_many_plans_at_once():
    fields = np.array([90, 90, 6])
    cycles = amp_partials_cycles(fields, np.array([5, 4, 1]), 1, 1, AMP_FLOAT, True, True, 8)
    assert cycles.dtype == np.int64
    assert list(cycles[:2]) == [5125, 4186]
    assert cycles[2] < cycles[1]


@pytest.mark.parametrize("outputs, partials, expected", [
    (91, 8, 936),   # first stage of 52 partials: 7 groups of 8 over 13 outputs
    (13, 7, 354),   # the final stage
    (96, 8, 936),
    (12, 8, 378),
])
def test_reduce_add_matches_hand_worked_stages(outputs, partials, expected):
    assert reduce_add_cycles(outputs, partials, True, True) == expected


def test_reduce_add_is_free_on_a_tile_without_outputs():
    assert reduce_add_cycles(np.array([0, 4]), 8, True, True)[0] == 0


@pytest.mark.parametrize("depth, plan", [
    (1, ()),
    (10, ()),          # below 16 partials: one stage
    (52, (7,)),        # candidates floor(sqrt 52) = 7 and 8: 52/7 + 7 = 14.43 < 52/8 + 8 = 14.5
    (64, (8,)),        # 64/8 + 8 = 16 < 64/9 + 9 = 16.1
    (200, (35, 6)),    # three stages from 125: 200/35 + 35/6 + 6 narrowly beats 34
])
def test_multi_stage_reduce_plan(depth, plan):
    assert multi_stage_reduce_plan(depth) == plan


def test_reduce_stages_cut_the_partials_into_groups():
    assert reduce_stages(52) == [(7, 8), (1, 7)]
    assert reduce_stages(64) == [(8, 8), (1, 8)]
    assert reduce_stages(10) == [(1, 10)]
    assert reduce_stages(1) == []


def test_worker_split_follows_partition_by_worker():
    most, least, used = worker_split(np.array([15, 4, 0]))
    assert list(most) == [3, 1, 0]
    assert list(least) == [2, 0, 0]
    assert list(used) == [6, 4, 0]


def test_cast_takes_the_slower_of_reading_and_writing():
    # 12 elements, 2 per worker: max(ceil(2/2), ceil(2/4)) + 26 = 27 per worker
    assert cast_cycles(12, 2, 4) == 6 * 27
    assert cast_cycles(0, 2, 4) == 0


def test_mac_costs_more_than_amp_for_the_same_work():
    mac = ConvMethod("MAC", 8, 8)
    assert mac_partials_cycles(90, 5, 1, 1, mac, True, True) > 5125


def test_method_round_trips_through_its_vertex_parameter():
    assert ConvMethod.of_param(AMP_FLOAT.as_param()) == AMP_FLOAT
    with pytest.raises(ValueError, match="kind one of AMP, MAC"):
        ConvMethod.of_param(("SLIC", 8, 8, 0, 0))
    with pytest.raises(ValueError):
        ConvMethod.of_param(("AMP", 0, 8, 8, 8))


def test_inputs_shared_by_supertile_neighbours_cost_half_their_exchange():
    """poplin's ``ExchangeEstimator``: with an even output-channel split, the tiles receiving
    the same input elements are supertile neighbours and take them at twice the rate.  A float
    MAC tile of 64 field elements and one channel: of its 64 inputs it lacks all but
    ``64 // split``; the weight and partial terms do not change with the split."""
    problem = _Problem(Target.of("ipu1"), (1, 1, 1, 64), FLOAT, FLOAT, FLOAT)
    one = np.ones(4, dtype=np.int64)
    exchange = pass_cost(problem, ConvMethod("MAC", 1, 1), 64 * one, one, one, one,
                         in_divisor=np.array([1, 2, 3, 4]), weight_divisor=one,
                         depth=one)["exchange"]
    # split 2: 32 floats, 32 cycles at 4 B, halved; 3: 43 floats, not shared; 4: 48, halved
    assert (exchange - exchange[0]).tolist() == [0, 16, 43, 24]
