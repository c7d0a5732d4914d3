"""A backward product's weights transposed on their own tiles (poplin
``fullyConnectedWeightTranspose``): the block sizes, the layout, the numbers and the cycles of
popops' transposition codelets, worked by hand from their estimators."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from gruc import FLOAT, HALF, Engine, Graph, GrucValueError, Module, Sequence, Target
from gruc.ir.codelets.transpose import TRANSPOSE, can_use_fast_transpose
from gruc.ir.parser import parse_module
from gruc.ir.printer import print_module
from gruc.ir.program import Execute
from gruc.ops import mat_mul, plan_mat_mul, pre_arrange_mat_mul_input_rhs
from gruc.ops.weight_transpose import (common_divisors, transpose_block_sizes,
                                       transpose_weights, transposed_block_tiles)
from gruc.runtime.codelets.transpose import (fast_worker_cycles, transpose_2d_cycles,
                                             transpose_tile_cycles)

T16 = Target.custom(tiles_per_ipu=16)
BWD = {"fullyConnectedPass": "TRAINING_BWD"}


# ---- the codelets' estimates, worked by hand ---------------------------------------------------
@pytest.mark.parametrize("two_byte, rows, cols, blocks, expected", [
    # float, even sides: Transpose2d's fast loop, 30 blocks over six workers (5 each):
    # 27 + 5 * (11 + 8/2 * (6 + 3 * (8/2 - 1))) = 382 thread cycles, x 6 workers
    (False, 8, 8, 30, 6 * 382),
    # float, odd sides: the general loop, 13 + 1 * (8 + 5 * (5 + 3 * 4 / 2)) = 76
    (False, 3, 5, 1, 6 * 76),
    # half 16 x 16, 8 blocks: TransposeSupervisor, 2 blocks per worker:
    # worker 29 + 2 * (18 + 4 * (12 + 4 * 2)) + 1 (unpack) = 226; 7 + 6 * (226 + 1 - 7)
    (True, 16, 16, 8, 7 + 6 * 220),
    # half 16 x 16, one block: one single-worker Transpose, 29 + 98 + 1 = 128
    (True, 16, 16, 1, 6 * 128),
    # half 4 x 4, three blocks: one Transpose, 17 + 20 + (3 - 2) * 4 + 1 = 42
    (True, 4, 4, 3, 6 * 42),
    # half with a side of 2: no fast codelet, Transpose2d's 2-byte general loop,
    # 15 + 1 * (8 + 8 * (5 + 2 * 5 / 2)) = 103
    (True, 2, 8, 1, 6 * 103),
])
def test_tile_cycles_are_popops_estimates(two_byte, rows, cols, blocks, expected):
    assert transpose_tile_cycles(two_byte, rows, cols, blocks, workers=6) == expected


def test_estimator_branches_worked_by_hand():
    # half, 4 columns and 8 rows: 28 + 2 * (17 + (20 + 4 * (8/4 - 2))) = 102
    assert transpose_2d_cycles(True, 8, 4, 2) == 102
    # half, rows and columns of 8: 37 + 1 * (12 + 2 * (15 + 4 * 0)) = 79
    assert transpose_2d_cycles(True, 8, 8, 1) == 79
    # the fast worker with one column group: 27 + 2 * (15 + 20 + 4 * (3 - 2)) + 1 = 106
    assert fast_worker_cycles(12, 4, 2) == 106


@pytest.mark.parametrize("two_byte, rows, cols, blocks, fast", [
    (True, 16, 16, 100, True),
    (False, 16, 16, 100, False),           # 4-byte data never takes the fast codelets
    (True, 6, 16, 1, False),               # a side that is not a multiple of four
    (True, 16, 16, 70_000, False),         # more blocks than an unsigned short counts
    (True, 16, 1024, 1, False),            # 1024 / 4 * 3 - 1 = 767: past the largest stride
    (True, 4, 4, 4097, True),              # 4 x 4 blocks repeat up to 4095 + 2 times
    (True, 4, 4, 4098, False),
])
def test_fast_transposition_rule(two_byte, rows, cols, blocks, fast):
    assert can_use_fast_transpose(two_byte, rows, cols, blocks) is fast


def test_common_divisors_are_polins_order():
    assert common_divisors(16, 1024) == [16, 8, 4, 2, 1]
    assert common_divisors(12, 36) == [12, 6, 4, 3, 2, 1]
    assert common_divisors(8, 5) == [1]


# ---- the layer -------------------------------------------------------------------------------
def _layer(graph: Graph, inputs: int, outputs: int):
    """A fully connected layer's forward weights ``[I, O]`` and backward input ``[B, O]``."""
    weights = graph.add_variable(FLOAT, (inputs, outputs), "weights")
    graph.map_tensor_linearly(weights)
    grads = graph.add_variable(FLOAT, (5, outputs), "grads")
    graph.map_tensor_linearly(grads)
    return weights, grads


def _transposes(prog: Sequence) -> list:
    return [v for node in prog.walk() if isinstance(node, Execute)
            for v in node.compute_set.vertices if v.kind is TRANSPOSE]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_backward_product_transposes_its_weights_block_by_block(backend, rng):
    graph = Graph(T16)
    weights, grads = _layer(graph, 30, 70)
    prog = Sequence()
    result = mat_mul(graph, grads, weights.transpose(), prog, options=BWD)
    [vertex] = _transposes(prog)
    out = vertex.fields["out"]
    cols, rows = out.shape[-2:]
    assert rows > 1 and cols > 1
    # every block of the transposed weights lies on the tile of its source block's first element
    source = graph.element_tiles(weights.transpose()).reshape(1, 70, 30)
    transposed = vertex.fields["out"].variables()[0]
    assert np.array_equal(graph.element_tiles(transposed).reshape(1, 70, 30),
                          transposed_block_tiles(source, rows, cols))
    graph.create_host_write("weights", weights)
    graph.create_host_write("grads", grads)
    graph.create_host_read("result", result)
    engine = Engine(graph, prog, backend=backend)
    wv, gv = rng.uniform(-1, 1, (30, 70)).astype(np.float32), rng.uniform(
        -1, 1, (5, 70)).astype(np.float32)
    engine.write_tensor("weights", wv)
    engine.write_tensor("grads", gv)
    engine.run()
    np.testing.assert_allclose(engine.read_tensor("result"), gv.astype(np.float64) @ wv.T,
                               rtol=1e-5, atol=1e-5)
    # the transposition's step: each tile's compute is the estimate for the blocks it holds
    step = engine.costs[0]
    blocks = np.bincount(graph.element_tiles(out), minlength=16) // (rows * cols)
    assert step.compute_by_tile.tolist() == [
        transpose_tile_cycles(False, rows, cols, int(n), 6) for n in blocks]


def test_pre_arranged_backward_weights_are_the_transposition(rng):
    graph = Graph(T16)
    weights, grads = _layer(graph, 30, 70)
    prog = Sequence()
    arranged = pre_arrange_mat_mul_input_rhs(graph, (5, 70), weights.transpose(), prog, BWD)
    assert len(_transposes(prog)) == 1 and arranged.shape == (70, 30)
    body = Sequence()
    mat_mul(graph, grads, arranged, body, options={**BWD, "inputRHSIsPreArranged": True})
    assert not _transposes(body)                       # the product takes it as it is
    with pytest.raises(GrucValueError, match="inputRHSIsPreArranged"):
        mat_mul(graph, grads, weights.transpose(), Sequence(),
                options={**BWD, "inputRHSIsPreArranged": True})
    # the vertex prints and parses like any other
    text = print_module(Module(graph, [prog]))
    assert "Transpose" in text
    assert print_module(parse_module(text)) == text


def test_a_group_of_one_leaves_the_transposition_to_the_product():
    graph = Graph(T16)
    weights, grads = _layer(graph, 70, 5)          # 5 output channels: gcd with any group is 1
    plan = plan_mat_mul(graph.target, FLOAT, (5, 5), (5, 70), BWD)
    assert plan.method.in_chans_per_group % 5
    prog = Sequence()
    mat_mul(graph, graph.add_variable(FLOAT, (5, 5), "g5"), weights.transpose(), prog,
            options=BWD)
    assert not _transposes(prog)


def test_products_other_than_the_backward_pass_never_transpose():
    graph = Graph(T16)
    weights, grads = _layer(graph, 30, 70)
    prog = Sequence()
    for fc_pass in ("NONE", "TRAINING_FWD", "TRAINING_WU"):
        mat_mul(graph, grads, weights.transpose(), prog, options={"fullyConnectedPass": fc_pass})
    assert not _transposes(prog)


@pytest.mark.parametrize("dtype, shape, sizes, record, field_data", [
    # float: 12 blocks of 2 x 4 on tile 0, six Transpose2d workers, each a 16-byte record
    # (a vector span, a pointer and two 16-bit sizes); a pointer per block each way
    (FLOAT, (1, 8, 12), (2, 4), 6 * 16, 12 * 8),
    # half 4 x 4, four blocks: one fast Transpose, two block spans and four 16-bit counts
    (HALF, (1, 8, 8), (4, 4), 2 * 8 + 4 * 2, 0),
])
def test_the_transpositions_vertex_state_is_popops(dtype, shape, sizes, record, field_data):
    graph = Graph(Target.custom(tiles_per_ipu=2))
    source = graph.add_variable(dtype, shape, "source")
    graph.set_tile_mapping(source, 0)
    prog = Sequence()
    transposed = transpose_weights(graph, source, sizes, prog, "t")
    graph.create_host_write("source", source)
    graph.create_host_read("t", transposed)
    engine = Engine(graph, prog, backend="numpy", pipeline="")
    always = engine.footprint.always_live
    assert always["vertexInstanceState"].tolist() == [record, 0]
    assert always["vertexFieldData"].tolist() == [field_data, 0]
    rows, cols = sizes
    blocks = shape[1] * shape[2] // (rows * cols)
    assert engine.costs[0].compute_by_tile.tolist() == [
        transpose_tile_cycles(dtype is HALF, rows, cols, blocks, 6), 0]
    value = np.arange(np.prod(shape)).reshape(shape).astype(np.float32)
    engine.write_tensor("source", value)
    engine.run()
    np.testing.assert_array_equal(engine.read_tensor("t"), value)


def test_block_sizes_follow_poplins_block_score():
    """Not jointly planned: every pair scored.  A 16 x 16 source in four 8 x 8 quarters on four
    tiles, both plans in groups of 16, half data (every pair fast).  (16, 16) is one block on
    one tile: 5.  (16, 8): two blocks on tiles 0 and 1: 10.  (8, 8) spreads over all four tiles
    but its rows are half a group, so its destination blocks are not contiguous: 4 x 5 / 3.
    So (16, 8), which also wins the tie with (16, 4) by coming first."""
    k, n = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    source = ((k // 8) * 2 + n // 8).reshape(1, 16, 16)
    group16 = SimpleNamespace(in_chans_per_group=16)
    forward = SimpleNamespace(method=group16, joint=False)
    backward = SimpleNamespace(method=group16, joint=False, shape=(1, 4, 16, 16))
    assert transpose_block_sizes(forward, backward, source, two_byte=True) == (16, 8)
    # a joint plan takes the largest sizes without scoring
    joint = SimpleNamespace(method=group16, joint=True, shape=(1, 4, 16, 16))
    assert transpose_block_sizes(SimpleNamespace(method=group16, joint=True), joint, source,
                                 two_byte=True) == (16, 16)
