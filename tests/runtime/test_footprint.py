"""The memory footprint Poplar would report (``gruc.runtime.footprint``): every category of a small
program worked out by hand, and the two-region allocator's invariants on planned products."""

from __future__ import annotations

import numpy as np
import pytest

from gruc import FLOAT, Engine, Graph, GrucError, Sequence, Target
from gruc.ir.expr import _1, _2
from gruc.memory.planner import INTERLEAVED_ALIGNMENT
from gruc.ops import create_mat_mul_input_lhs, create_mat_mul_input_rhs, map, mat_mul


def _sum_of_remote_operand(compile_ipu_code: bool, memory_model: str = "poplar") -> Engine:
    """``z = x + y`` on tile 0 with ``y`` held on tile 1: 16 floats each."""
    graph = Graph(Target.custom(tiles_per_ipu=2, compile_ipu_code=compile_ipu_code))
    x = graph.add_variable(FLOAT, (16,), "x")
    y = graph.add_variable(FLOAT, (16,), "y")
    graph.set_tile_mapping(x, 0)
    graph.set_tile_mapping(y, 1)
    prog = Sequence()
    z = map(graph, _1 + _2, [x, y], prog, "z")  # laid out like its first operand: tile 0
    graph.create_host_write("x", x)
    graph.create_host_write("y", y)
    graph.create_host_read("z", z)
    return Engine(graph, prog, backend="numpy", pipeline="", memory_model=memory_model)


def test_every_category_of_a_small_program_without_code():
    footprint = _sum_of_remote_operand(compile_ipu_code=False).footprint
    always = {name: values.tolist() for name, values in footprint.always_live.items()}
    assert always["variable"] == [128, 64]           # x and z on tile 0, y on tile 1
    assert always["constant"] == [0, 0]
    # one Map vertex on tile 0: its output's span (8) and a pointer to its list of two inputs (4),
    # the list holding the inputs' spans (2 x 8)
    assert always["vertexInstanceState"] == [12, 0]
    assert always["vertexFieldData"] == [16, 0]
    for name in ("vertexCode", "controlCode", "internalExchangeCode"):  # nothing compiled
        assert always[name] == [0, 0]
    # y's 64 bytes land in a buffer on tile 0 while the compute set runs
    assert footprint.not_always_live["message"].tolist() == [64, 0]
    assert footprint.not_always_live["variable"].tolist() == [0, 0]
    assert footprint.total_including_gaps.tolist() == [128 + 12 + 16 + 64, 64]
    assert footprint.total_memory() == 220 + 64
    assert footprint.tiles_used == 2


def test_code_categories_when_the_program_is_compiled():
    footprint = _sum_of_remote_operand(compile_ipu_code=True).footprint
    always = {name: values.tolist() for name, values in footprint.always_live.items()}
    assert always["vertexCode"] == [320, 0]          # the Map codelet, on the tile running it
    # one superstep on both tiles (sync, branch) and one vertex launch on tile 0: 4 bytes each
    assert always["controlCode"] == [4 * (2 + 2), 4 * 2]
    # tile 0 receives and tile 1 sends one message: entry, return and a set-up each
    assert always["internalExchangeCode"] == [4 * (2 + 2), 4 * (2 + 2)]
    assert footprint.total_including_gaps.tolist() == [220 + 320 + 16 + 16, 64 + 8 + 16]


def test_tensor_model_counts_tensor_data_only():
    engine = _sum_of_remote_operand(compile_ipu_code=True, memory_model="tensors")
    footprint = engine.footprint
    assert footprint.total_including_gaps.tolist() == engine.plan.total_bytes.tolist() == [128, 64]
    assert all(not values.any() for name, values in footprint.always_live.items()
               if name not in ("variable", "constant"))


def test_unknown_memory_model_is_named():
    with pytest.raises(GrucError, match="'bytes'.*poplar, tensors"):
        _sum_of_remote_operand(compile_ipu_code=False, memory_model="bytes")


@pytest.mark.parametrize("device_type", ["ipu1", "ipu2"])
def test_interleaved_partials_and_the_allocator_invariants(device_type):
    """An AMP product's partials lie in the interleaved region, 16-byte aligned, and no two
    blocks live at the same step overlap in either region of any tile."""
    target = Target.of(device_type, 1, 16)
    graph = Graph(target)
    lhs, rhs = (16, 256), (256, 64)
    a = create_mat_mul_input_lhs(graph, FLOAT, lhs, rhs, "a")
    b = create_mat_mul_input_rhs(graph, FLOAT, lhs, rhs, "b")
    prog = Sequence()
    c = mat_mul(graph, a, b, prog)
    graph.create_host_write("a", a)
    graph.create_host_write("b", b)
    graph.create_host_read("c", c)
    engine = Engine(graph, prog, backend="numpy")
    plan, footprint = engine.plan, engine.footprint
    names = [variable.name for variable in graph.variables]
    interleaved = plan.block_interleaved
    assert interleaved.any(), "an AMP product's partials should be interleaved"
    assert all(names[v].endswith("partials") for v in plan.block_variable[interleaved])
    region_offsets = plan.block_offset[interleaved] - plan.interleaved_base
    assert (region_offsets >= 0).all() and (region_offsets % INTERLEAVED_ALIGNMENT == 0).all()
    assert (plan.block_offset[~interleaved] + plan.block_size[~interleaved]
            <= plan.interleaved_base).all()

    liveness = plan.liveness
    live = liveness.step_matrix(range(liveness.num_variables))
    live[list(liveness.always_live)] = True
    for tile in range(target.num_tiles):
        on_tile = np.flatnonzero(plan.block_tile == tile)
        for i, first in enumerate(on_tile):
            for second in on_tile[i + 1:]:
                if not (live[plan.block_variable[first]] & live[plan.block_variable[second]]).any():
                    continue
                lo = max(plan.block_offset[first], plan.block_offset[second])
                hi = min(plan.block_offset[first] + plan.block_size[first],
                         plan.block_offset[second] + plan.block_size[second])
                assert lo >= hi, (tile, names[plan.block_variable[first]],
                                  names[plan.block_variable[second]])

    # a tile holding interleaved data ends at the interleaved start plus what lies there
    holding = np.unique(plan.block_tile[interleaved])
    assert (footprint.total_including_gaps[holding]
            == target.interleaved_memory_start + plan.region_ends[1][holding]).all()
    assert footprint.max_tile_bytes > target.interleaved_memory_start
