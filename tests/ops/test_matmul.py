"""Planned matrix products (SPEC D5): numbers against a float64 oracle on both engines, the plan's
temporaries and exchange in the report, layouts, options and errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gruc import (FLOAT, HALF, INT, Copy, Engine, Graph, GrucError, GrucOptionError, GrucShapeError,
                  GrucTypeError, GrucValueError, Module, Repeat, Sequence, Target)
from gruc.ir.codelets.matmul import Blocking, block_tiles, blocking_of
from gruc.ir.parser import parse_module
from gruc.ir.printer import print_module
from gruc.ir.tensor import Tensor
from gruc.ops import (create_mat_mul_input_lhs, create_mat_mul_input_rhs, mat_mul, mat_mul_acc,
                      plan_mat_mul, pre_arrange_mat_mul_input_rhs)
from gruc.ops.matmul import MatMulOptions, matmul_options, spread_tiles
from gruc.ops.matmul_plan import block_tile_grid
from gruc.runtime.codelets.matmul import supertile_neighbour

T16 = Target.custom(tiles_per_ipu=16)
BACKENDS = ["numpy", "numba"]


def linear(graph, dtype, shape, name):
    t = graph.add_variable(dtype, shape, name)
    graph.map_tensor_linearly(t)
    return t


def run(graph, prog, writes, reads, backend):
    for name, (tensor, _) in writes.items():
        graph.create_host_write(name, tensor)
    for name, tensor in reads.items():
        graph.create_host_read(name, tensor)
    engine = Engine(graph, prog, backend=backend)
    for name, (_, value) in writes.items():
        engine.write_tensor(name, value)
    engine.run()
    return engine, {name: engine.read_tensor(name) for name in reads}


def values(rng, shape, dtype=np.float32):
    return rng.uniform(-1, 1, shape).astype(dtype)


def oracle(a, b):
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


# ---- numbers ----------------------------------------------------------------------------------
@settings(max_examples=25)
@given(g=st.sampled_from([None, 1, 3]), m=st.integers(1, 12), k=st.integers(1, 40),
       n=st.integers(1, 30), tiles=st.sampled_from([1, 5, 16]),
       layout=st.sampled_from(["linear", "planned", "one_tile"]),
       proportion=st.sampled_from([0.6, 0.002]), seed=st.integers(0, 2**16))
def test_matmul_equals_numpy_for_any_shape(g, m, k, n, tiles, layout, proportion, seed):
    """numpy engine, hypothesis shapes: blocks of every size (short last blocks, k split or not,
    serial slices when the memory budget is tiny), operands in any layout."""
    graph = Graph(Target.custom(tiles_per_ipu=tiles))
    a_shape, b_shape = ((m, k), (k, n)) if g is None else ((g, m, k), (g, k, n))
    options = {"availableMemoryProportion": proportion}
    if layout == "planned":
        a = create_mat_mul_input_lhs(graph, FLOAT, a_shape, b_shape, "a", options)
        b = create_mat_mul_input_rhs(graph, FLOAT, a_shape, b_shape, "b", options)
    else:
        a, b = graph.add_variable(FLOAT, a_shape, "a"), graph.add_variable(FLOAT, b_shape, "b")
        for t in (a, b):
            if layout == "linear":
                graph.map_tensor_linearly(t)
            else:
                graph.set_tile_mapping(t, 0)
    prog = Sequence()
    c = mat_mul(graph, a, b, prog, options=options, name="c")
    rng = np.random.default_rng(seed)
    av, bv = values(rng, a_shape), values(rng, b_shape)
    _, out = run(graph, prog, {"a": (a, av), "b": (b, bv)}, {"c": c}, "numpy")
    assert c.shape == oracle(av, bv).shape
    np.testing.assert_allclose(out["c"], oracle(av, bv), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("m, k, n, tiles", [(4, 78, 76, 16), (13, 57, 31, 20), (1, 1, 1, 16),
                                            (40, 300, 90, 16), (64, 512, 768, 1472)])
def test_fixed_shapes_on_both_engines(backend, m, k, n, tiles, rng):
    graph = Graph(Target.ipu2() if tiles == 1472 else Target.custom(tiles_per_ipu=tiles))
    a = create_mat_mul_input_lhs(graph, FLOAT, (m, k), (k, n), "a")
    b = create_mat_mul_input_rhs(graph, FLOAT, (m, k), (k, n), "b")
    prog = Sequence()
    c = mat_mul(graph, a, b, prog)
    av, bv = values(rng, (m, k)), values(rng, (k, n))
    _, out = run(graph, prog, {"a": (a, av), "b": (b, bv)}, {"c": c}, backend)
    np.testing.assert_allclose(out["c"], oracle(av, bv), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_views_as_operands(backend, rng):
    """Transposes, strided slices and reversed views read through the same vertex."""
    graph = Graph(T16)
    at = linear(graph, FLOAT, (37, 9), "at")           # A = at^T: [9, 37]
    big = linear(graph, FLOAT, (50, 60), "big")         # B = big[3:40, 10:58:2]: [37, 24]
    w = linear(graph, FLOAT, (24, 37), "w")             # second product: B = w^T reversed rows
    prog = Sequence()
    a = at.transpose()
    b = big[3:40, 10:58:2]
    c1 = mat_mul(graph, a, b, prog, name="c1")
    c2 = mat_mul(graph, a[::-1], w.transpose(), prog, name="c2")
    atv, bigv, wv = values(rng, (37, 9)), values(rng, (50, 60)), values(rng, (24, 37))
    _, out = run(graph, prog, {"at": (at, atv), "big": (big, bigv), "w": (w, wv)},
                 {"c1": c1, "c2": c2}, backend)
    np.testing.assert_allclose(out["c1"], oracle(atv.T, bigv[3:40, 10:58:2]), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(out["c2"], oracle(atv.T[::-1], wv.T), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_grouped_matmul(backend, rng):
    graph = Graph(T16)
    a = create_mat_mul_input_lhs(graph, FLOAT, (3, 5, 20), (3, 20, 7), "a")
    b = linear(graph, FLOAT, (3, 20, 7), "b")
    prog = Sequence()
    c = mat_mul(graph, a, b, prog)
    assert c.shape == (3, 5, 7)
    av, bv = values(rng, (3, 5, 20)), values(rng, (3, 20, 7))
    _, out = run(graph, prog, {"a": (a, av), "b": (b, bv)}, {"c": c}, backend)
    np.testing.assert_allclose(out["c"], oracle(av, bv), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mat_mul_acc_with_float_and_tensor_factor(backend, rng):
    graph = Graph(T16)
    a, b = linear(graph, FLOAT, (6, 50), "a"), linear(graph, FLOAT, (50, 33), "b")
    c = linear(graph, FLOAT, (6, 33), "c")
    d = graph.add_variable(FLOAT, (33, 50), "d")
    graph.set_tile_mapping(d, 2)                                # C on one tile: partials travel
    k = graph.add_variable(FLOAT, (1,), "k")
    graph.set_tile_mapping(k, 5)
    prog = Sequence()
    mat_mul_acc(graph, c, -0.5, a, b, prog)                       # c += -0.5 a b
    mat_mul_acc(graph, d, k, c.transpose(), a, prog)              # d += k c^T a
    av, bv, cv, dv = (values(rng, s) for s in ((6, 50), (50, 33), (6, 33), (33, 50)))
    _, out = run(graph, prog, {"a": (a, av), "b": (b, bv), "c": (c, cv), "d": (d, dv),
                               "k": (k, np.array([1.5], np.float32))}, {"c": c, "d": d}, backend)
    c_new = cv - 0.5 * oracle(av, bv)
    np.testing.assert_allclose(out["c"], c_new, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["d"], dv + 1.5 * oracle(c_new.T, av), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("partials", ["float", "half"])
def test_half_inputs(backend, partials, rng):
    """Half operands, float or half partials; products summed in float32, rounded once."""
    graph = Graph(T16)
    options = {"partialsType": partials}
    a = create_mat_mul_input_lhs(graph, HALF, (8, 96), (96, 40), "a", options)
    b = create_mat_mul_input_rhs(graph, HALF, (8, 96), (96, 40), "b", options)
    prog = Sequence()
    c = mat_mul(graph, a, b, prog, options=options)
    c32 = mat_mul(graph, a, b, prog, out_type=FLOAT, options=options, name="c32")
    assert c.dtype is HALF and c32.dtype is FLOAT
    av, bv = values(rng, (8, 96), np.float16), values(rng, (96, 40), np.float16)
    _, out = run(graph, prog, {"a": (a, av), "b": (b, bv)}, {"c": c, "c32": c32}, backend)
    exact = oracle(av, bv)
    np.testing.assert_allclose(out["c32"], exact, rtol=1e-5, atol=1e-4 if partials == "float"
                               else 3e-2)
    np.testing.assert_allclose(out["c"].astype(np.float64), exact, rtol=2e-3, atol=3e-2)


def test_engines_agree(rng):
    """Same sums, possibly in another order (BLAS vs per-block products): float32 rounding apart."""
    results = []
    for backend in BACKENDS:
        graph = Graph(T16)
        a, b = linear(graph, FLOAT, (10, 200), "a"), linear(graph, FLOAT, (200, 60), "b")
        prog = Sequence()
        c = mat_mul(graph, a, b, prog)
        av, bv = values(np.random.default_rng(7), (10, 200)), values(np.random.default_rng(8),
                                                                      (200, 60))
        results.append(run(graph, prog, {"a": (a, av), "b": (b, bv)}, {"c": c}, backend)[1]["c"])
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-5)


# ---- layouts ----------------------------------------------------------------------------------
def test_create_rhs_spreads_each_block_over_its_users():
    graph = Graph(T16)
    plan = plan_mat_mul(graph.target, FLOAT, (8, 64), (64, 48))
    b = create_mat_mul_input_rhs(graph, FLOAT, (8, 64), (64, 48), "b")
    a = create_mat_mul_input_lhs(graph, FLOAT, (8, 64), (64, 48), "a")
    geometry = plan.blocking(plan.slice_width)
    tiles = graph.element_tiles(b).reshape(64, 48)
    gb, mb, kb, nb = geometry.block
    grid = block_tile_grid(geometry, plan.orientation)
    for ik in range(geometry.k.count):
        for in_ in range(geometry.n.count):
            block = tiles[ik * kb:(ik + 1) * kb, in_ * nb:(in_ + 1) * nb]
            users = set(grid[0, ik, :, in_].tolist())       # the tiles that multiply this block
            assert set(np.unique(block).tolist()) <= users
    assert np.array_equal(graph.element_tiles(a),
                          spread_tiles(geometry, "gmk", plan.orientation).reshape(-1))
    # laid out as planned, a product exchanges only the broadcast of each block to its other users
    graph.create_host_write("a", a)
    graph.create_host_write("b", b)
    prog = Sequence()
    graph.create_host_read("c", mat_mul(graph, a, b, prog))
    engine = Engine(graph, prog)
    partials_step = engine.costs[0]
    counts = geometry.counts
    expected = 0
    for ig, ik, im, in_ in np.ndindex(*counts):
        tile = grid[ig, ik, im, in_]
        a_tiles = graph.element_tiles(a).reshape(8, 64)
        a_block = a_tiles[im * mb:(im + 1) * mb, ik * kb:(ik + 1) * kb]
        b_block = tiles[ik * kb:(ik + 1) * kb, in_ * nb:(in_ + 1) * nb]
        expected += 4 * (int(np.sum(a_block != tile)) + int(np.sum(b_block != tile)))
    assert partials_step.exchange_bytes == expected


@pytest.mark.parametrize("fc_pass, copies", [("TRAINING_WU", 2), ("TRAINING_FWD", 0)])
def test_a_weight_update_product_copies_both_operands_into_its_layout(fc_pass, copies, rng):
    """poplin's weight-update pass copies A and B into the plan's layout whatever theirs
    (``inputRearrangementIsExpensive`` / ``weightRearrangementIsExpensive``): two copies
    before the partial products, the product's numbers unchanged; another pass copies an
    operand already laid out as planned (and broadcast to few tiles) never.  Both operands have
    their input channels innermost here, so neither is regrouped first
    (tests/ops/test_regroup.py)."""
    graph = Graph(T16)
    options = {"fullyConnectedPass": fc_pass}
    a = create_mat_mul_input_lhs(graph, FLOAT, (8, 64), (64, 48), "a", options)
    b_stored = graph.add_variable(FLOAT, (48, 64), "b")          # [N, K]: K innermost
    graph.set_tile_mapping(b_stored, graph.get_tile_mapping(
        create_mat_mul_input_rhs(graph, FLOAT, (8, 64), (64, 48), "ref", options).transpose()))
    b = b_stored.transpose()
    prog = Sequence()
    c = mat_mul(graph, a, b, prog, options=options)
    steps = prog.programs
    assert [type(step).__name__ for step in steps[:copies + 1]] == ["Copy"] * copies + ["Execute"]
    for step in steps[:copies]:   # into fresh variables laid out as the operand already was
        assert np.array_equal(graph.element_tiles(step.src), graph.element_tiles(step.dst))
    av, bv = values(rng, (8, 64)), values(rng, (48, 64))
    _, out = run(graph, prog, {"a": (a, av), "b": (b_stored, bv)}, {"c": c}, "numpy")
    np.testing.assert_allclose(out["c"], oracle(av, bv.T), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pre_arranged_rhs(backend, rng):
    """A B that no backward pass transposes is copied into the product's layout (the backward
    pass's transposition: tests/ops/test_weight_transpose.py)."""
    graph = Graph(T16)
    options = {"fullyConnectedPass": "TRAINING_WU"}
    w = linear(graph, FLOAT, (30, 70), "w")                    # used as w^T: [70, 30]
    x = linear(graph, FLOAT, (5, 70), "x")
    prog = Sequence()
    arranged = pre_arrange_mat_mul_input_rhs(graph, (5, 70), w.transpose(), prog, options)
    assert arranged.shape == (70, 30)
    body = Sequence()
    y = mat_mul(graph, x, arranged, body, options={**options, "inputRHSIsPreArranged": True})
    prog.add(body)
    # the pre-arranged layout is the one the product wants: no exchange beyond the broadcasts
    plan = plan_mat_mul(graph.target, FLOAT, (5, 70), (70, 30), options)
    geometry = plan.blocking(plan.slice_width)
    assert np.array_equal(graph.element_tiles(arranged),
                          spread_tiles(geometry, "gkn", plan.orientation,
                                       plan.tile_order).reshape(-1))
    xv, wv = values(rng, (5, 70)), values(rng, (30, 70))
    _, out = run(graph, prog, {"x": (x, xv), "w": (w, wv)}, {"y": y}, backend)
    np.testing.assert_allclose(out["y"], oracle(xv, wv.T), rtol=1e-5, atol=1e-5)
    with pytest.raises(GrucValueError, match="inputRHSIsPreArranged"):
        mat_mul(graph, x, w.transpose(), Sequence(), options={"inputRHSIsPreArranged": True})


# ---- plan, memory and report ------------------------------------------------------------------
def test_available_memory_proportion_bounds_the_temporaries_on_ipu2():
    """[64, 512] x [512, 768] on ipu2: a smaller proportion gives a plan whose temporaries (poplin's
    estimate: a tile's inputs, weights and partials) fit the smaller bound — smaller blocks, then
    serial slices of n — at more cycles; the memory the layer then holds shrinks with it."""
    peaks, plans = {}, {}
    target = Target.ipu2()
    for proportion in (0.6, 0.01, 0.003):
        graph = Graph(target)
        options = {"availableMemoryProportion": proportion}
        a = create_mat_mul_input_lhs(graph, FLOAT, (64, 512), (512, 768), "a", options)
        b = create_mat_mul_input_rhs(graph, FLOAT, (64, 512), (512, 768), "b", options)
        graph.create_host_write("a", a)
        graph.create_host_write("b", b)
        prog = Sequence()
        c = mat_mul(graph, a, b, prog, options=options, name="c")
        graph.create_host_read("c", c)
        engine = Engine(graph, prog)
        plan = plan_mat_mul(target, FLOAT, (64, 512), (512, 768), options)
        # a, b and c are host-visible (always live): the not-always-live bytes are the temporaries
        peaks[proportion] = int(engine.report.not_always_live_max_bytes.max())
        plans[proportion] = plan
        assert plan.fits and plan.temporary_bytes <= proportion * target.bytes_per_tile
    assert peaks[0.003] < peaks[0.01] < peaks[0.6]
    assert plans[0.6].serial == 1 and plans[0.003].serial > plans[0.01].serial > 1
    assert plans[0.6].cycles < plans[0.01].cycles < plans[0.003].cycles  # memory costs cycles


def product_from_tile_0() -> tuple[Graph, Tensor, Engine]:
    """``c = a x b``, ``[12, 90] x [90, 40]`` float on 16 tiles, both operands on tile 0."""
    graph = Graph(T16)
    a, b = graph.add_variable(FLOAT, (12, 90), "a"), graph.add_variable(FLOAT, (90, 40), "b")
    graph.set_tile_mapping(a, 0)
    graph.set_tile_mapping(b, 0)
    graph.create_host_write("a", a)
    graph.create_host_write("b", b)
    prog = Sequence()
    c = mat_mul(graph, a, b, prog, name="c")
    graph.create_host_read("c", c)
    return graph, c, Engine(graph, prog)


def test_report_shows_exchange_and_temporaries():
    """Operands all on tile 0: every other tile receives the elements of its a and b blocks (into
    buffers that live while the partials are computed), and the reduction brings the partials of
    every output element to its tile."""
    graph, c, engine = product_from_tile_0()
    engine.run()
    plan = plan_mat_mul(graph.target, FLOAT, (12, 90), (90, 40))
    geometry = Blocking.of(plan.shape, plan.block)
    assert not plan.direct and 1 < geometry.k.count < 16        # one reduction stage
    gb, kb, mb, nb = (d.reshape(-1) for d in geometry.block_dims())
    vertex = next(v for cs in graph.compute_sets for v in cs.vertices
                  if v.kind.name == "MatMulPartials")
    tiles = block_tiles(vertex).reshape(-1)
    sizes = gb * kb * (mb + nb)
    operand_bytes = 4 * np.where(tiles == 0, 0, sizes)           # what each block's tile receives
    out_tiles = graph.element_tiles(c).reshape(12, 40)
    partial_tiles = graph.element_tiles(vertex.fields["partials"]).reshape(
        geometry.partials_shape)[0]
    reduce_bytes = 4 * int(np.sum(partial_tiles != out_tiles[None]))
    report = engine.report
    steps = report.to_dict()["steps"]
    assert [s["what"].split()[-1] for s in steps] == ["c.partials", "c.reduce"]
    assert [s["exchange_bytes"] for s in steps] == [int(operand_bytes.sum()), reduce_bytes]
    assert report.cycles.exchange > 0 and report.cycles.compute > 0
    # temporaries: the partials on their block's tile, and the received operands beside them
    footprint = engine.footprint
    for tile, received in zip(tiles.tolist(), operand_bytes.tolist()):
        blocks = {name: (nbytes, always) for name, _, nbytes, always in
                  engine.plan.tile_blocks(tile)}
        assert not blocks["c.partials"][1]
        if footprint.peak_step[tile] == 0:                       # its peak: the partials step
            assert footprint.not_always_live["message"][tile] == received


def test_supertile_neighbours_take_the_operand_elements_both_receive_at_twice_the_rate():
    """Operands on tile 0 again: a tile receives its a and b blocks, and the part of them the
    other tile of its supertile (tile ``t ^ 1``) receives too arrives at twice a tile's rate
    (``TILES_PER_SHARED_EXCHANGE_BUS``), so each receiving tile's exchange is worked here from
    the blocks and who uses them."""
    graph, _, engine = product_from_tile_0()
    step = engine.costs[0]
    vertex = next(v for cs in graph.compute_sets for v in cs.vertices
                  if v.kind.name == "MatMulPartials")
    geometry, grid = blocking_of(vertex), block_tiles(vertex)
    gb, kb, mb, nb = (d for d in geometry.block_dims())
    a_bytes = 4 * np.broadcast_to(gb * kb * mb, grid.shape)     # [g, k, m, n] grid of blocks
    b_bytes = 4 * np.broadcast_to(gb * kb * nb, grid.shape)
    shared_a = np.zeros(grid.shape, dtype=bool)  # a's block is shared over n, b's over m
    shared_b = np.zeros(grid.shape, dtype=bool)
    for index in np.ndindex(*grid.shape):
        g, k, m, n = index
        partner = grid[index] ^ 1
        shared_a[index] = partner != 0 and partner in grid[g, k, m, :]
        shared_b[index] = partner != 0 and partner in grid[g, k, :, n]
    received = a_bytes + b_bytes
    halved = np.where(shared_a, a_bytes // 2, 0) + np.where(shared_b, b_bytes // 2, 0)
    assert shared_a.any() or shared_b.any()      # the case is one where sharing happens
    for index in np.ndindex(*grid.shape):
        tile = int(grid[index])
        if tile:
            assert step.bytes_in_by_tile[tile] == received[index]
            assert step.exchange_by_tile[tile] == -(-(received - halved)[index] // 4), index


@pytest.mark.parametrize("backend", BACKENDS)
def test_serial_slices_share_temporary_memory(backend, rng):
    graph = Graph(T16)
    options = {"availableMemoryProportion": 0.004}
    a = create_mat_mul_input_lhs(graph, FLOAT, (16, 64), (64, 200), "a", options)
    b = create_mat_mul_input_rhs(graph, FLOAT, (16, 64), (64, 200), "b", options)
    prog = Sequence()
    c = mat_mul(graph, a, b, prog, options=options, name="c")
    plan = plan_mat_mul(graph.target, FLOAT, (16, 64), (64, 200), options)
    assert plan.serial > 1 and plan.fits
    av, bv = values(rng, (16, 64)), values(rng, (64, 200))
    engine, out = run(graph, prog, {"a": (a, av), "b": (b, bv)}, {"c": c}, backend)
    np.testing.assert_allclose(out["c"], oracle(av, bv), rtol=1e-5, atol=1e-5)
    partials = [cs for cs in graph.compute_sets if cs.name.endswith(".partials")]
    assert len(partials) == plan.serial
    # each slice has its own partials, never live together: they share bytes
    plan_memory = engine.plan
    slice_bytes = [sum(nb for name, _, nb, _ in plan_memory.tile_blocks(tile)
                       if name == f"c.{k}.partials") for k in range(plan.serial)
                   for tile in range(T16.num_tiles)]
    assert int(plan_memory.region_ends[1].max()) == max(slice_bytes)


def test_plans_are_cached_and_direct_when_k_is_not_split():
    target = T16
    first = plan_mat_mul(target, FLOAT, (4, 8), (8, 40))
    assert first is plan_mat_mul(target, FLOAT, (4, 8), (8, 40), {"partialsType": "float"})
    assert first.direct and first.block[2] == 8         # one k block: partials are the output
    graph = Graph(target)
    a, b = linear(graph, FLOAT, (4, 8), "a"), linear(graph, FLOAT, (8, 40), "b")
    prog = Sequence()
    mat_mul(graph, a, b, prog)
    assert [cs.vertices[0].kind.name for cs in graph.compute_sets] == ["MatMulPartials"]


def test_one_vertex_per_step_whatever_the_tile_count():
    graph = Graph(Target.ipu2())
    a, b = linear(graph, FLOAT, (64, 512), "a"), linear(graph, FLOAT, (512, 768), "b")
    prog = Sequence()
    mat_mul(graph, a, b, prog)
    assert [len(cs.vertices) for cs in graph.compute_sets] == [1, 1]
    vertex = graph.compute_sets[0].vertices[0]
    assert len(np.unique(block_tiles(vertex))) > 1000


def test_text_ir_round_trip():
    graph = Graph(T16)
    a, b = linear(graph, FLOAT, (6, 50), "a"), linear(graph, FLOAT, (50, 33), "b")
    c = linear(graph, FLOAT, (6, 33), "c")
    k = linear(graph, FLOAT, (1,), "k")
    prog = Sequence()
    mat_mul(graph, a, b, prog)
    mat_mul_acc(graph, c, k, a, b, prog)
    text = print_module(Module(graph, [prog]))
    assert "MatMulPartials(" in text and "blocks=(" in text and "method=(\"AMP\"" in text
    assert "matmul_acc.product.partials" in text       # matMulAcc: a product, then a scaled add
    assert print_module(parse_module(text)) == text


# ---- options and errors -----------------------------------------------------------------------
def test_options_by_poplibs_name_or_model():
    options = matmul_options({"availableMemoryProportion": "0.25", "partialsType": "half",
                              "fullyConnectedPass": "training_wu", "inputRHSIsPreArranged": "true"})
    assert options == MatMulOptions(available_memory_proportion=0.25, partials_type=HALF,
                                    fully_connected_pass="TRAINING_WU",
                                    input_rhs_is_pre_arranged=True)
    assert matmul_options(options) is options
    assert matmul_options(None) == MatMulOptions()


@pytest.mark.parametrize("options, words", [
    ({"availableMemoryProportions": 0.5}, "availableMemoryProportion, fullyConnectedPass, "
                                          "inputRHSIsPreArranged, partialsType"),
    ({"availableMemoryProportion": -0.1}, "availableMemoryProportion = -0.1"),
    ({"partialsType": "int"}, "partialsType = 'int': .*half or float"),
    ({"fullyConnectedPass": "FORWARD"}, "fullyConnectedPass = 'FORWARD'"),
    ({"inputRHSIsPreArranged": "maybe"}, "inputRHSIsPreArranged"),
])
def test_bad_options_are_rejected_by_name(options, words):
    graph = Graph(T16)
    a, b = linear(graph, FLOAT, (2, 3), "a"), linear(graph, FLOAT, (3, 4), "b")
    with pytest.raises(GrucOptionError, match=words):
        mat_mul(graph, a, b, Sequence(), options=options)


def test_bad_inputs_raise_gruc_errors():
    graph = Graph(T16)
    a, b = linear(graph, FLOAT, (2, 3), "a"), linear(graph, FLOAT, (4, 5), "b")
    with pytest.raises(GrucShapeError, match=r"mat_mul: .*A \[2, 3\] by B \[4, 5\].*3 columns"
                                             r".*4 rows"):
        mat_mul(graph, a, b, Sequence())
    with pytest.raises(GrucShapeError, match=r"A \[2, 3\] and B \[3, 4, 5\]"):
        mat_mul(graph, a, linear(graph, FLOAT, (3, 4, 5), "g"), Sequence())
    with pytest.raises(GrucShapeError, match=r"A \[2, 2, 3\] by B \[3, 3, 5\].*2 groups"):
        create_mat_mul_input_rhs(graph, FLOAT, (2, 2, 3), (3, 3, 5))
    half = linear(graph, HALF, (3, 4), "h")
    with pytest.raises(GrucTypeError, match="A is float but B is half"):
        mat_mul(graph, a, half, Sequence())
    with pytest.raises(GrucTypeError, match="half or float, got int"):
        mat_mul(graph, linear(graph, INT, (2, 3), "i"), linear(graph, INT, (3, 4), "j"),
                Sequence())
    with pytest.raises(GrucTypeError, match="half or float"):
        create_mat_mul_input_lhs(graph, INT, (2, 3), (3, 4))
    b34 = linear(graph, FLOAT, (3, 4), "b34")
    with pytest.raises(GrucShapeError, match=r"C \[2, 5\] does not match A \[2, 3\] x B \[3, 4\]"):
        mat_mul_acc(graph, linear(graph, FLOAT, (2, 5), "c"), 1.0, a, b34, Sequence())
    with pytest.raises(GrucShapeError, match="k must have one element"):
        mat_mul_acc(graph, linear(graph, FLOAT, (2, 4), "c2"), linear(graph, FLOAT, (2,), "k2"),
                    a, b34, Sequence())
    with pytest.raises(GrucTypeError, match="one-element tensor. must be a number"):
        mat_mul_acc(graph, linear(graph, FLOAT, (2, 4), "c3"), "2", a, b34, Sequence())
    with pytest.raises(GrucValueError, match="must be finite, got nan"):
        mat_mul_acc(graph, linear(graph, FLOAT, (2, 4), "c5"), float("nan"), a, b34, Sequence())
    c4 = linear(graph, FLOAT, (2, 4), "c4")
    with pytest.raises(GrucValueError, match="k is an element of C"):
        mat_mul_acc(graph, c4, c4[1, 2:3], a, b34, Sequence())
    mat_mul_acc(graph, c4[:1], c4[1, 2:3], a[:1], b34, Sequence())  # another row of C: allowed
    with pytest.raises(GrucShapeError, match="must not be empty"):
        plan_mat_mul(T16, FLOAT, (0, 3), (3, 4))
    with pytest.raises(GrucError):
        mat_mul(graph, a, b34, Sequence(), out_type=INT)


def test_vertex_checks_catch_hand_built_vertices():
    graph = Graph(T16)
    a, b = linear(graph, FLOAT, (1, 4, 8), "a"), linear(graph, FLOAT, (1, 8, 6), "b")
    partials = linear(graph, FLOAT, (1, 3, 4, 6), "p")    # blocks of k=4 give 2, not 3
    cs = graph.add_compute_set()
    amp = ("AMP", 8, 8, 8, 8)
    fields = {"a": a, "b": b, "partials": partials}
    with pytest.raises(GrucShapeError, match=r"partials must be \[1, 2, 4, 6\]"):
        graph.add_vertex(cs, "MatMulPartials", fields, blocks=(1, 4, 4, 6), method=amp,
                         orientation="field-n")
    with pytest.raises(GrucValueError, match="four positive integers"):
        graph.add_vertex(cs, "MatMulPartials", fields, blocks=(1, 4, 0, 6), method=amp,
                         orientation="field-n")
    with pytest.raises(GrucValueError, match="method: a conv method is"):
        graph.add_vertex(cs, "MatMulPartials", fields, blocks=(1, 4, 3, 6), method=("TPU", 1),
                         orientation="field-n")
    with pytest.raises(GrucValueError, match="orientation must be one of field-n, field-m"):
        graph.add_vertex(cs, "MatMulPartials", fields, blocks=(1, 4, 3, 6), method=amp,
                         orientation="sideways")


# ---- the numba engine's fused partials + reduction -----------------------------------------------

def _fused_chains(engine):
    from gruc.runtime.codelets.matmul_fused import _fusible_chains
    return _fusible_chains(engine.executable)


def _k_split_on_ipu2(graph, m, k, n, prog, acc=None, factor=None):
    a = create_mat_mul_input_lhs(graph, FLOAT, (m, k), (k, n), "a")
    b = create_mat_mul_input_rhs(graph, FLOAT, (m, k), (k, n), "b")
    if acc is None:
        return a, b, mat_mul(graph, a, b, prog, name="c")
    mat_mul_acc(graph, acc, factor, a, b, prog)
    return a, b, acc


@pytest.mark.parametrize("m, k, n, one_stage", [(64, 512, 768, True), (5, 300, 7, False)])
def test_fused_k_split_on_ipu2_gives_numpy_engine_result(m, k, n, one_stage):
    """On ipu2 with k split over tiles, the numba engine computes the product with one BLAS call
    over all of k and skips the partials in tile memory, whether one reduction stage adds them
    (fewer than 16 blocks) or two (the first stage's rows skipped too); it equals the numpy
    engine up to summation order."""
    plan = plan_mat_mul(Target.ipu2(), FLOAT, (m, k), (k, n))
    assert plan.reduce_depth > 1 and (plan.reduce_depth < 16) == one_stage
    av, bv = values(np.random.default_rng(1), (m, k)), values(np.random.default_rng(2), (k, n))
    results = {}
    for backend in BACKENDS:
        graph = Graph(Target.ipu2())
        prog = Sequence()
        a, b, c = _k_split_on_ipu2(graph, m, k, n, prog)
        engine, out = run(graph, prog, {"a": (a, av), "b": (b, bv)}, {"c": c}, backend)
        if backend == "numba":
            (chain,) = _fused_chains(engine)
            assert (not chain[1]) == one_stage  # intermediate stages only with two stages
            engine.run()  # runs again from the same state: same answer
            out["c"] = engine.read_tensor("c")
        results[backend] = out["c"]
    np.testing.assert_allclose(results["numba"], results["numpy"], rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(results["numba"], oracle(av, bv), rtol=1e-5, atol=2e-5)


def _accumulations(engine):
    from gruc.runtime.codelets import matmul_fused
    readers = matmul_fused._Readers.of(engine.executable)
    chains = matmul_fused._fusible_chains(engine.executable, readers)
    return matmul_fused._accumulations(engine.executable, chains, readers)


@pytest.mark.parametrize("tensor_factor", [True, False])
def test_fused_mat_mul_acc_on_ipu2(tensor_factor):
    """``c += s a b`` in a loop (poplin's matMulAcc: the product, then a scaled add): the numba
    engine keeps ``c`` on the host and takes the products of both steps at once, as the numpy
    engine's definition gives up to summation order."""
    m, k, n = 16, 96, 40
    av, bv = values(np.random.default_rng(3), (m, k)), values(np.random.default_rng(4), (k, n))
    cv = values(np.random.default_rng(5), (m, n))
    results = {}
    for backend in BACKENDS:
        graph = Graph(Target.ipu2())
        c = linear(graph, FLOAT, (m, n), "c")
        s = graph.add_variable(FLOAT, (1,), "s")
        graph.set_tile_mapping(s, 3)
        prog = Sequence(Repeat(2, Sequence()))  # c += s a b, twice
        a, b, _ = _k_split_on_ipu2(graph, m, k, n, prog.programs[0].body, acc=c,
                                   factor=s if tensor_factor else -0.75)
        engine, out = run(graph, prog, {"a": (a, av), "b": (b, bv), "c": (c, cv),
                                        "s": (s, np.array([-0.75], np.float32))}, {"c": c},
                          backend)
        if backend == "numba":
            assert len(_fused_chains(engine)) == 1 and len(_accumulations(engine)) == 1
        results[backend] = out["c"]
    np.testing.assert_allclose(results["numba"], results["numpy"], rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(results["numba"], cv - 1.5 * oracle(av, bv), rtol=1e-5, atol=1e-4)


def test_partials_read_elsewhere_or_half_are_not_fused():
    """Partials another step reads (here a Copy after the reduction) keep their memory, and half
    partials (rounded before the sum) keep the definition: both engines agree."""
    m, k, n = 8, 256, 24
    av, bv = values(np.random.default_rng(6), (m, k)), values(np.random.default_rng(7), (k, n))
    results = {}
    for backend in BACKENDS:
        graph = Graph(Target.ipu2())
        prog = Sequence()
        a, b, c = _k_split_on_ipu2(graph, m, k, n, prog)
        partials = next(v.fields["partials"] for cs in graph.compute_sets for v in cs.vertices
                        if v.kind.name == "MatMulPartials")
        seen = graph.add_variable(FLOAT, partials.shape, "seen")
        graph.map_tensor_linearly(seen)
        prog.add(Copy(partials, seen))
        options = {"partialsType": "half"}
        ah = create_mat_mul_input_lhs(graph, HALF, (m, k), (k, n), "ah", options)
        bh = create_mat_mul_input_rhs(graph, HALF, (m, k), (k, n), "bh", options)
        ch = mat_mul(graph, ah, bh, prog, options=options, name="ch")
        engine, out = run(graph, prog, {"a": (a, av), "b": (b, bv), "ah": (ah, av.astype(
            np.float16)), "bh": (bh, bv.astype(np.float16))}, {"c": c, "seen": seen, "ch": ch},
            backend)
        if backend == "numba":
            assert _fused_chains(engine) == []
        results[backend] = out
    for name in ("c", "seen", "ch"):
        np.testing.assert_allclose(results["numba"][name], results["numpy"][name], rtol=1e-5,
                                   atol=2e-5 if name != "ch" else 2e-3)
    np.testing.assert_allclose(results["numba"]["seen"].sum(axis=1)[0], oracle(av, bv), rtol=1e-5,
                               atol=2e-5)


def test_supertiles_pair_the_tiles_of_one_ipu():
    """Tiles ``2i`` and ``2i + 1`` of each IPU; an odd IPU's last tile has no neighbour."""
    tiles = np.arange(14)
    assert supertile_neighbour(tiles, 7).tolist() == [1, 0, 3, 2, 5, 4, -1,
                                                      8, 7, 10, 9, 12, 11, -1]
    assert supertile_neighbour(tiles, 14).tolist() == (tiles ^ 1).tolist()
