"""The vertex cycle estimators (popops / popnn, 2021-03): each gruc kind is costed as the poplibs
codelet Poplar would run for its work on each tile, with poplibs' formula.  Every expected value
is worked by hand from the formula in ``docs/cycle-model.md`` (the arithmetic is in the comments;
W = 6 worker contexts, SUP = 198, vector width: float 2, half 4)."""

from __future__ import annotations

import numpy as np
import pytest

from gruc import FLOAT, HALF, INT, Execute, Graph, Sequence, Target
from gruc.ir import expr as ex
from gruc.ir.codelets.elementwise import MAP_IN_PLACE
from gruc.ir.expr import _1, _2, _3
from gruc.ir.mapping import TileMapping
from gruc.ops import (add, add_in_place, cast, dynamic_slice, dynamic_update, map, map_in_place,
                      map_with_output, non_linearity, non_linearity_in_place,
                      non_linearity_input_gradient, reduce, reduce_with_output, scaled_add_to,
                      zero)
from gruc.runtime.codelets import poplibs_estimates as pe
from gruc.runtime.codelets.elementwise import FULL, SCALAR, VECTOR, MapCodelet, map_codelets
from gruc.runtime.codelets.regions import tile_regions
from gruc.runtime.cost import CYCLE_ESTIMATORS
from gruc.runtime.engine import compile_program

T4 = Target.custom(tiles_per_ipu=4)


def spread(g: Graph, dtype=FLOAT, shape=(2, 48), name="x"):
    """A variable spread over the 4 tiles, 24 elements (one region) on each."""
    t = g.add_variable(dtype, shape, name)
    g.map_tensor_linearly(t, grain_size=1, min_elements_per_tile=1)
    return t


def on_tile(g: Graph, shape, dtype=FLOAT, name="v", tile=0):
    t = g.add_variable(dtype, shape, name)
    g.set_tile_mapping(t, tile)
    return t


def vertex_cycles(g: Graph, prog: Sequence, which: int = -1) -> np.ndarray:
    """The estimate of the vertices of the ``which``-th compute set, per tile, called as the cost
    model calls it (an untiled vertex gets its split field's elements per tile)."""
    cs = [node.compute_set for node in prog.walk() if isinstance(node, Execute)][which]
    total = np.zeros(g.target.num_tiles, dtype=np.int64)
    for v in cs.vertices:
        if v.tile is None:
            elements = np.bincount(g.element_tiles(v.fields[v.kind.split]),
                                   minlength=g.target.num_tiles)
        else:
            elements = np.zeros(g.target.num_tiles, dtype=np.int64)
            elements[v.tile] = max(t.num_elements for _, t in v.tensors())
        total += CYCLE_ESTIMATORS[v.kind](v, elements, g.target)
    return total


# ---- shared rules ------------------------------------------------------------------------------
def test_split_regions_cuts_regions_at_grain_boundaries_into_at_most_six_vertices():
    # tile 0: 20 elements, grain 4 -> G = 5 grains; ceil(5/6) = 1 grain a vertex, but at least
    # ceil(8/4) = 2: at most 5 // 2 = 2 vertices -> ceil(5/2) = 3 grains a vertex, V = 2;
    # vertex 0 = elements [0, 2*4) = 8 of region 0; vertex 1 = [8, 20) = 2 + 3 + 7
    split = pe.split_regions(np.array([0, 0, 0, 3]), np.array([10, 3, 7, 5]), 4, 8, 6)
    assert split.vertex_tile.tolist() == [0, 0, 3]
    assert split.row_vertex.tolist() == [0, 1, 1, 1, 2]
    assert split.row_size.tolist() == [8, 2, 3, 7, 5]
    # 100 elements: G = 25, ceil(25/6) = 5 grains a vertex -> 5 vertices of 20, rows of 10 at most
    split = pe.split_regions(np.array([2]), np.array([100]), 4, 8, 6, max_region=10)
    assert split.vertex_rows().tolist() == [2] * 5 and set(split.row_size.tolist()) == {10}


def test_worker_vertices_of_a_tile_cost_six_times_the_busiest_context():
    # tile 0: two vertices, contexts 5 and 7 -> 6 * 7 = 42; tile 2: eight vertices 1..8 packed
    # greedily on 6 contexts: 1..6 alone, 7 onto the context of 1 (8), 8 onto that of 2 (10)
    cycles = pe.worker_tile_cycles(np.array([0, 0, 1] + [2] * 8),
                                   np.array([5, 7, 3, 1, 2, 3, 4, 5, 6, 7, 8]), 4, 6)
    assert cycles.tolist() == [42, 18, 60, 0]


def test_a_column_block_of_a_row_mapped_matrix_is_one_region_on_its_tile():
    g = Graph(T4)
    m = g.add_variable(FLOAT, (4, 8), "m")
    g.set_tile_mapping(m, TileMapping.from_element_tiles(np.repeat([[0, 1]], 4, 0).repeat(4, 1)))
    tiles, sizes = tile_regions(m[:, 0:4])   # tile 0 holds exactly these 16: one block
    assert tiles.tolist() == [0] and sizes.tolist() == [16]
    tiles, sizes = tile_regions(m[:, 0:2])   # columns 2, 3 of each row lie between
    assert tiles.tolist() == [0] * 4 and sizes.tolist() == [2] * 4
    tiles, sizes = tile_regions(m)
    assert tiles.tolist() == [0, 1] and sizes.tolist() == [16, 16]


# ---- popops unary / binary -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype, expected", [
    (FLOAT, 366),  # ADD float: ceil(24/6) = 4 per worker, ceil(4/2) = 2 vectors * (1 + 2);
                   # 6 * (22 + 6) + 198 = 366
    (HALF, 348),   # ceil(4/4) = 1 vector * 3: 6 * (22 + 3) + 198 = 348
])
def test_a_binary_op_over_one_region_a_tile_is_a_supervisor(dtype, expected):
    g = Graph(T4)
    prog = Sequence()
    add(g, spread(g, dtype, name="a"), spread(g, dtype, name="b"), prog)
    assert vertex_cycles(g, prog).tolist() == [expected] * 4


def test_binary_in_place_and_integer_ops():
    g = Graph(T4)
    prog = Sequence()
    a, b = spread(g, name="a"), spread(g, name="b")
    add_in_place(g, a, b, prog)
    # BinaryOp1DInPlaceSupervisor: 6 * (13 + 2 * 3) + 198 = 312
    assert vertex_cycles(g, prog).tolist() == [312] * 4
    i, j = spread(g, INT, name="i"), spread(g, INT, name="j")
    map(g, _1 - _2, [i, j], prog)
    # SUB int {7, unroll 1}: ceil(4/1) * 7 = 28; 6 * (22 + 28) + 198 = 498
    assert vertex_cycles(g, prog).tolist() == [498] * 4


def test_a_binary_op_over_several_regions_a_tile_is_2d_workers():
    g = Graph(T4)
    prog = Sequence()
    v = on_tile(g, (4, 8))
    a, b = on_tile(g, (4, 4), name="a"), on_tile(g, (4, 4), name="b")
    map_with_output(g, _1 + _2, [a, b], v[:, 0:4], prog)
    # 4 regions of 4, grain max(2, 4) = 4, min 8: G = 4 -> 2 vertices of rows [4, 4];
    # BinaryOp2D: 5 + 2 * ceil(4/2) * 3 = 17; 6 * 17 = 102
    assert vertex_cycles(g, prog).tolist() == [102, 0, 0, 0]
    map_in_place(g, _1 + _2, [v[:, 0:4], b], prog)
    # BinaryOp2DInPlace: 20 + 12 = 32; 6 * 32 = 192
    assert vertex_cycles(g, prog).tolist() == [192, 0, 0, 0]


@pytest.mark.parametrize("kind, dtype, in_place, expected", [
    # SIGMOID float {1, scalar}: 5 per element; 4 per worker -> 6 * (20 + 20) + 9 + 198 = 447
    ("sigmoid", FLOAT, False, 447), ("sigmoid", FLOAT, True, 447),
    # SIGMOID half {2, vector}: ceil(4/4) * (2 + 4) = 6 -> 6 * 26 + 207 = 363
    ("sigmoid", HALF, False, 363),
    # TANH float {1, vector}: ceil(4/2) * 5 = 10 -> 6 * 30 + 207 = 387; in place {1, scalar}: 447
    ("tanh", FLOAT, False, 387), ("tanh", FLOAT, True, 447),
])
def test_non_linearities_are_popops_unary_ops(kind, dtype, in_place, expected):
    g = Graph(T4)
    prog = Sequence()
    x = spread(g, dtype)
    if in_place:
        non_linearity_in_place(g, kind, x, prog)
    else:
        non_linearity(g, kind, x, prog)
    assert vertex_cycles(g, prog).tolist() == [expected] * 4


def test_a_unary_op_over_several_regions_and_an_op_without_a_table_entry():
    g = Graph(T4)
    prog = Sequence()
    v, a = on_tile(g, (4, 8)), on_tile(g, (4, 4), name="a")
    map_with_output(g, ex.sigmoid(_1), [a], v[:, 0:4], prog)
    # UnaryOp2D: 2 vertices of rows [4, 4]: 20 + 2 * 4 * 5 = 60; 6 * 60 = 360
    assert vertex_cycles(g, prog).tolist() == [360, 0, 0, 0]
    map(g, ex.relu(_1), [spread(g)], prog)
    # RELU has no table entry: a one-op generated codelet, 3 vertices of 8 (grain 4, min 8):
    # 13 + 1 * (8/2 + 8%2) * 1 = 17; 6 * 17 = 102
    assert vertex_cycles(g, prog).tolist() == [102] * 4


def test_scalar_operands_are_broadcast_scalar_vertices():
    g = Graph(T4)
    prog = Sequence()
    a = spread(g, name="a")
    s = on_tile(g, (1,), name="s")
    map(g, _1 * _2, [a, s], prog)
    # BroadcastScalar1DSupervisor MUL float: ceil(ceil(24/6)/2) = 2 vectors * (1 + 1);
    # 6 * (20 + 4) + 198 = 342
    assert vertex_cycles(g, prog).tolist() == [342] * 4
    map(g, _1 * ex.Const(2.0), [a], prog)      # a constant operand: the same vertex
    assert vertex_cycles(g, prog).tolist() == [342] * 4
    map(g, _2 - _1, [a, s], prog)              # scalar first, not commutative: BinaryOp1D
    assert vertex_cycles(g, prog).tolist() == [366] * 4


def test_broadcast_scalar_over_several_regions():
    g = Graph(T4)
    prog = Sequence()
    s = on_tile(g, (1,), name="s")
    v, a = on_tile(g, (4, 8)), on_tile(g, (4, 4), name="a")
    map_with_output(g, _1 + _2, [a, s], v[:, 0:4], prog)
    # 4 regions of 4 < 3 grains (12): BroadcastScalar2DData workers, 2 vertices of rows [4, 4]:
    # 20 + 2 * (ceil(4/2) * (1 + 1) + 28) = 84; 6 * 84 = 504
    assert vertex_cycles(g, prog).tolist() == [504, 0, 0, 0]
    w, b = on_tile(g, (3, 32), name="w"), on_tile(g, (3, 16), name="b")
    map_with_output(g, _1 + _2, [b, s], w[:, 0:16], prog)
    # 3 regions of 16 >= 12, fewer than 6: a supervisor each, ceil(ceil(16/6)/2) = 2 vectors:
    # 6 * (20 + 2 * 2) + 198 = 342; 3 * 342 = 1026
    assert vertex_cycles(g, prog).tolist() == [1026, 0, 0, 0]


@pytest.mark.parametrize("source, target_type, expected", [
    # CastSupervisor: 24 elements = 6 grains of 4 -> workerElems 4;
    # castWorkerFloatCycles(4, half) = 1 + 3 + 26 + 2 = 32; 7 + 6 * (20 + 32) = 319
    (FLOAT, HALF, 319),
    # to float: 1 + 1 + 28 = 30; 7 + 6 * 50 = 307
    (HALF, FLOAT, 307),
])
def test_a_cast_over_one_region_is_a_cast_supervisor(source, target_type, expected):
    g = Graph(T4)
    prog = Sequence()
    cast(g, spread(g, source), target_type, prog)
    assert vertex_cycles(g, prog).tolist() == [expected] * 4


def test_a_cast_over_several_regions_is_cast_workers():
    g = Graph(T4)
    prog = Sequence()
    v, a = on_tile(g, (4, 8), HALF), on_tile(g, (4, 4), name="a")
    map_with_output(g, ex.Cast(_1, HALF), [a], v[:, 0:4], prog)
    # 16 elements, grain 2, min 4: G = 8, 2 grains a vertex -> 4 vertices of one row of 4:
    # Cast = castWorkerFloatCycles(4, half) = 32; 6 * 32 = 192
    assert vertex_cycles(g, prog).tolist() == [192, 0, 0, 0]


@pytest.mark.parametrize("dtype, expected", [
    # float: grain 2, min 4: G = 12 -> 6 vertices of 4; Fill(4) = 16 + 2 + 6 + 0 + 1 = 25; * 6
    (FLOAT, 150),
    # half: grain 4, min 8: G = 6 -> 3 vertices of 8; Fill(8) = 26 + 8/4 = 28; * 6
    (HALF, 168),
])
def test_zero_is_fill_workers(dtype, expected):
    g = Graph(T4)
    prog = Sequence()
    zero(g, spread(g, dtype), prog)
    assert vertex_cycles(g, prog).tolist() == [expected] * 4


def test_fill_of_several_short_regions_is_fill2d():
    g = Graph(T4)
    prog = Sequence()
    v = on_tile(g, (4, 4))
    zero(g, v[:, 0:2], prog)
    # 4 regions of 2: G = 4 -> 2 vertices of 2 rows; fill(2) = 16 + 1 + 6 + 0 + 1 = 24;
    # Fill2d = 5 + 1 + 2 * (24 - 3) = 48; 6 * 48 = 288
    assert vertex_cycles(g, prog).tolist() == [288, 0, 0, 0]


# ---- fused maps and the popnn gradient -----------------------------------------------------------
@pytest.mark.parametrize("dtype, in_place, expected", [
    # 3 vertices of 8 (grain 4, min 8); 13 + 3 inputs * (8/2 + 0) * 2 ops = 37; 6 * 37 = 222
    (FLOAT, False, 222), (FLOAT, True, 222),
    # half: 13 + 3 * (8/4) * 2 = 25; 6 * 25 = 150
    (HALF, False, 150),
])
def test_a_fusable_tree_is_one_generated_codelet(dtype, in_place, expected):
    g = Graph(T4)
    prog = Sequence()
    a, b, c = (spread(g, dtype, name=n) for n in "abc")
    if in_place:
        map_in_place(g, _1 + _2 * _3, [a, b, c], prog)
    else:
        map(g, _1 + _2 * _3, [a, b, c], prog)
    assert vertex_cycles(g, prog).tolist() == [expected] * 4


def test_a_tree_poplibs_would_not_fuse_is_costed_op_by_op():
    g = Graph(T4)
    prog = Sequence()
    a, b = spread(g, name="a"), spread(g, name="b")
    scale = on_tile(g, (1,), name="scale")
    map_in_place(g, _1 - _2 * _3, [a, b, scale], prog)  # one gruc vertex: a scalar operand
    # 2021-03 fused no scalar inputs: mul(_2, _3) as BroadcastScalar1DSupervisor (342), then
    # sub(_1, tmp) in place as BinaryOp1DInPlaceSupervisor (312): 654
    assert vertex_cycles(g, prog).tolist() == [654] * 4


@pytest.mark.parametrize("kind", ["sigmoid", "tanh"])
@pytest.mark.parametrize("dtype, expected", [
    # NonLinearityGradSupervisor: v = ceil((24/2)/6) = 2 vectors a worker;
    # worker = 25 + (4 + 3 + 1) + (2 + 2 + 0) = 37; 9 + 6 * 37 = 231
    (FLOAT, 231),
    # half: v = ceil(6/6) = 1: 25 + 5 + (2 + 2 + 0 + 2 + 0) = 36; 9 + 6 * 36 = 225
    (HALF, 225),
])
def test_a_non_linearity_gradient_is_popnn_non_linearity_grad(kind, dtype, expected):
    g = Graph(T4)
    prog = Sequence()
    non_linearity_input_gradient(g, kind, spread(g, dtype, name="y"), spread(g, dtype, name="g"),
                                 prog)
    assert vertex_cycles(g, prog).tolist() == [expected] * 4


@pytest.mark.parametrize("dtype, expected", [
    # 4 regions of 4, grain 2, min 4: 4 vertices of one row; row: v = 4/2 = 2 vectors,
    # 6 + 3 + (4 + 3 + 1) + (2 + 2 + 0) + 1 = 22; NonLinearityGrad2D 17 + 22 = 39; 6 * 39 = 234
    (FLOAT, 234),
    # half: grain 4, min 8: 2 vertices of 2 rows; row: v = 1, 6 + 3 + 5 + (2 + 2 + 2) + 1 = 21;
    # 17 + 2 * 21 = 59; 6 * 59 = 354
    (HALF, 354),
])
def test_a_gradient_over_several_regions_is_non_linearity_grad_2d(dtype, expected):
    from gruc.ops.nonlinearity import NonLinearity, gradient_expression
    g = Graph(T4)
    prog = Sequence()
    v = on_tile(g, (4, 8), dtype)
    y, grad = on_tile(g, (4, 4), dtype, name="y"), on_tile(g, (4, 4), dtype, name="g")
    map_with_output(g, gradient_expression(NonLinearity.SIGMOID, dtype), [y, grad], v[:, 0:4],
                    prog)
    assert vertex_cycles(g, prog).tolist() == [expected, 0, 0, 0]


def test_map_codelets_name_poplibs_choices():
    f = [FLOAT, FLOAT, FLOAT]
    output = map_codelets(_1 + _2 * (_3 - _1), f, [FULL] * 3, False)
    assert output == [MapCodelet("fused", FLOAT, inputs=3, fused_ops=3, out_dtype=FLOAT)]
    # a broadcast bias: not fusable; add in place on _1, then sigmoid in place on the result
    gates = map_codelets(ex.sigmoid(_1 + _2), f[:2], [FULL, VECTOR], True, MAP_IN_PLACE)
    assert [(c.family, c.op, c.in_place) for c in gates] == [
        ("binary", ex.Binary.ADD, True), ("unary", ex.Unary.SIGMOID, True)]
    # _1 twice: poplibs computes aside and copies, nothing in place
    twice = map_codelets(_1 - _2 * _1, f[:2], [FULL, SCALAR], True, MAP_IN_PLACE)
    assert [(c.family, c.in_place) for c in twice] == [("broadcast", False), ("binary", False)]
    # poplibs' expression optimisation: pow(x, 0.5) is sqrt
    assert map_codelets(ex.pow_(_1, ex.Const(0.5)), f[:1], [FULL], False)[0].op is ex.Unary.SQRT


# ---- popops scaledAddTo ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, scale, expected", [
    # ScaledAddSupervisor float, constant: n = 24: atom 2, atoms 24/6/2 = 2, final 0,
    # rem 4 % 6 + 0 = 4 <= 6 (worker 4 checks final: + 1); worker 15 + (6 + 3 * 1) + 2 + 1 + 1
    # = 28; supervisor 21 + 198 + 7 + 12 = 238; 238 + 6 * 28 = 406
    (FLOAT, 0.5, 406),
    # a tensor scale (isConstant false): supervisor + 6 -> 412
    (FLOAT, "tensor", 412),
    # half, constant: atom 4, atoms 24/6/4 = 1: worker 15 + 6 + 2 + 1 + 1 = 25; 238 + 150 = 388
    (HALF, 0.5, 388),
])
def test_scaled_add_to_over_one_region_is_a_scaled_add_supervisor(dtype, scale, expected):
    g = Graph(T4)
    prog = Sequence()
    a, b = spread(g, dtype, name="a"), spread(g, dtype, name="b")
    if scale == "tensor":
        scale = g.add_variable(dtype, (1,), "k")
        g.set_tile_mapping(scale, 0)
    scaled_add_to(g, a, b, scale, prog)
    assert vertex_cycles(g, prog).tolist() == [expected] * 4


def test_scaled_add_to_over_several_regions_is_scaled_add_2d():
    g = Graph(T4)
    prog = Sequence()
    v = on_tile(g, (4, 8))
    b = on_tile(g, (4, 4), name="b")
    scaled_add_to(g, v[:, 0:4], b, 2.0, prog)
    # 4 regions of 4 floats, grain vw = 2, min 4: G = 8 grains -> 4 vertices of one row of 4;
    # ScaledAdd2D row: 15 + 5 + (4 / 2) * 2 (a constant scale: the swapped arguments' 2-cycle
    # loop) = 24; vertex 10 + 24 = 34; 6 * 34 = 204
    assert vertex_cycles(g, prog).tolist() == [204, 0, 0, 0]
    k = on_tile(g, (1,), name="k")
    scaled_add_to(g, v[:, 0:4], b, k, prog)
    # a tensor scale: the 3-cycle loop: 15 + 5 + 6 = 26; 6 * 36 = 216
    assert vertex_cycles(g, prog).tolist() == [216, 0, 0, 0]
    # the same tree out of place, or with a full third operand, is not scaledAddTo
    f = [FLOAT] * 3
    assert map_codelets(_1 + _2 * _3, f, [FULL] * 3, True, MAP_IN_PLACE)[0].family == "fused"
    assert map_codelets(_1 + _2 * ex.Const(2.0), f[:2], [FULL] * 2, False)[0].family == "fused"


# ---- reductions ----------------------------------------------------------------------------------
def test_an_innermost_axis_reduction_is_continuous_reduce_vertices():
    g = Graph(T4)
    prog = Sequence()
    reduce(g, on_tile(g, (4, 8)), [1], "add", prog)
    # 4 scalar reductions of one partial of 8: fewer than 6 and not worth splitting
    # (approx ceil(8/4) + 30 = 32; split: 60 + 1 >= 32), a vertex each;
    # ALL_REGIONS_CONTINUOUS with numOutputsM1 = 0 passed as the count: 0 + 0 + 0 + 10 + 7 = 17
    assert vertex_cycles(g, prog).tolist() == [6 * 17, 0, 0, 0]


def test_a_scalar_from_two_tiles_is_a_scalar_output_single_input_reduce():
    g = Graph(T4)
    x = g.add_variable(FLOAT, (8,), "x")
    g.set_tile_mapping(x, [[(0, 4)], [(4, 8)]])
    prog = Sequence()
    reduce(g, x, [0], "add", prog)
    # first stage: each tile's 4 elements, one partial: ALL_REGIONS_CONTINUOUS 17; 6 * 17 = 102
    assert vertex_cycles(g, prog, 0).tolist() == [102, 102, 0, 0]
    # final on tile 0: one output, two partials (its own, tile 1's): SCALAR_OUTPUT_SINGLE_INPUT,
    # 7 + 8 + 11 + 6 (fewer than 6 partials) = 32; 6 * 32 = 192
    assert vertex_cycles(g, prog, -1).tolist() == [192, 0, 0, 0]


@pytest.mark.parametrize("dtype, update, expected", [
    # one reduction of 4 outputs, one partial of 32 (8 rows): STRIDED_REDUCE, 2 a loop:
    # 7 + 17 + ceil(4/2) * 6 + 32/2 = 52; 6 * 52 = 312
    (FLOAT, False, 312),
    # update: default vertex, op width 4, store(w) = 3 min(w, 2) + 1, load 2 + 2 + 4/2 = 6:
    # 7 + 26 + (16 + 6 + 2*2 + 2) + 1 * (5 + 7 + 1) + 1 * 1 * 10 + 1 * 8 * (6 + 3) = 156
    (FLOAT, True, 936),
    # half partials, half output (not STRIDED): op width 8, no vector, 4 left over (bit 2):
    # 7 + 26 + (16 + 6 + 3*2 + 2) + (4 + (2*4 + 1) + 10) + 8 * (2 + 1 + 3) = 134
    (HALF, False, 804),
])
def test_a_batch_axis_reduction(dtype, update, expected):
    g = Graph(T4)
    prog = Sequence()
    x = on_tile(g, (8, 4), dtype)
    if update:
        out = on_tile(g, (4,), dtype, name="out")
        reduce_with_output(g, x, out, [0], "add", prog, update=True)
    else:
        reduce(g, x, [0], "add", prog)
    assert vertex_cycles(g, prog).tolist() == [expected, 0, 0, 0]


def test_a_long_reduction_is_split_in_two_stages():
    g = Graph(T4)
    prog = Sequence()
    reduce(g, on_tile(g, (64, 4)), [0], "add", prog)
    # approx ceil(256/4) = 64 (+30 = 94); splits 2..6 give 60 + 64//k = 92, 81, 76, 72, 70: 6 pieces
    # of rows [11, 11, 11, 11, 10, 10]; first stage STRIDED 7 + 17 + 12 + 44/2 = 58 (11 rows);
    # second stage one partial of 6 rows: 7 + 17 + 12 + 24/2 = 48; 6 * 58 + 6 * 48 = 636
    assert vertex_cycles(g, prog).tolist() == [636, 0, 0, 0]


# ---- dynamic slices ------------------------------------------------------------------------------
def test_a_time_major_sequence_slice_is_dynamic_slice_1d():
    g = Graph(T4)
    t = g.add_variable(FLOAT, (5, 8), "seq")
    g.set_tile_mapping(t, TileMapping.from_element_tiles(np.repeat([[1, 2]], 5, 0).repeat(4, 1)))
    counter = on_tile(g, (1,), INT, name="counter")
    prog = Sequence()
    row = dynamic_slice(g, t, counter, [0], [1], prog)
    # per tile one region of 4, the tile's 5 x 4 block contiguous: DynamicSlice1d,
    # 198 + 14 + 6 * (41 + (27 + ceil(4/6)/2) * 1) = 212 + 6 * 68 = 620
    assert vertex_cycles(g, prog).tolist() == [0, 620, 620, 0]
    dynamic_update(g, t, row, counter, [0], [1], prog)
    assert vertex_cycles(g, prog).tolist() == [0, 620, 620, 0]


@pytest.mark.parametrize("dtype, expected", [
    # rows of the slice are apart in memory: DynamicSlice2d, one vertex, one region of 4:
    # 23 + (29 + ceil(4/2)) * 1 + 13 = 67; 6 * 67 = 402
    (FLOAT, 402),
    # half: 23 + (31 + 2 * ceil(4/4)) + 13 = 69; 6 * 69 = 414
    (HALF, 414),
])
def test_a_slice_of_rows_apart_in_memory_is_dynamic_slice_2d(dtype, expected):
    g = Graph(T4)
    t = on_tile(g, (5, 2, 4), dtype, name="t", tile=1)
    counter = on_tile(g, (1,), INT, name="counter")
    prog = Sequence()
    dynamic_slice(g, t[:, 0, :], counter, [0], [1], prog)
    assert vertex_cycles(g, prog).tolist() == [0, expected, 0, 0]


# ---- a program -----------------------------------------------------------------------------------
def test_a_programs_compute_sets_cost_the_hand_computed_sums():
    g = Graph(T4)
    a, b = spread(g, name="a"), spread(g, name="b")
    prog = Sequence()
    zero(g, a, prog)                                 # Fill: 150 a tile
    c = add(g, a, b, prog)                           # BinaryOp1DSupervisor: 366
    non_linearity_in_place(g, "sigmoid", c, prog)    # UnaryOp1DInPlaceSupervisor: 447
    g.create_host_write("b", b)
    compiled = compile_program(g, prog, pipeline="")
    computed = [cost.compute_by_tile.tolist() for step, cost in
                zip(compiled.plan.liveness.steps, compiled.costs)
                if isinstance(step.node, Execute)]
    assert computed == [[150] * 4, [366] * 4, [447] * 4]
    assert np.sum(computed, axis=0).tolist() == [150 + 366 + 447] * 4
