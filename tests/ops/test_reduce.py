"""Reductions (popops reduce / reduceWithOutput) against a float64 numpy oracle, on both engines.

Property tests (hypothesis, numpy engine) cover shapes, every op, any set of dims, views as the
input (transposes, slices, reversals, broadcasts), tile mappings from one tile to one element per
tile, half inputs, scale and update; fixed cases hold the numba engine to the same answers.  The
plan itself is checked through the compiled program: partials on the input's tiles in the memory
plan, exchange bytes in the report, a single compute set when the reduction is local.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gruc import (FLOAT, HALF, INT, UNSIGNED_INT, Engine, Execute, Graph, Repeat, Sequence,
                  Target)
from gruc.errors import (GrucError, GrucIndexError, GrucMappingError, GrucShapeError,
                         GrucTypeError, GrucValueError)
from gruc.ir.module import Module
from gruc.ir.parser import parse_module
from gruc.ir.printer import print_module
from gruc.ir.verify import verify
from gruc.ops import Operation, reduce, reduce_with_output

T16 = Target.custom(tiles_per_ipu=16)
BACKENDS = ["numpy", "numba"]
OPS = ["add", "square_add", "mul", "max", "min"]
VIEWS = ["plain", "transpose", "slice", "reverse", "broadcast"]
MAPPINGS = ["linear", "spread", "chunks", "random", "single"]


# ---- helpers ------------------------------------------------------------------------------------
def oracle(x: np.ndarray, dims, op: str) -> np.ndarray:
    """float64 reference of a reduction over ``dims``."""
    x = np.asarray(x, dtype=np.float64)
    dims = tuple(d % x.ndim for d in dims) if x.ndim else ()
    if op == "add":
        return x.sum(axis=dims)
    if op == "square_add":
        return (x * x).sum(axis=dims)
    if op == "mul":
        return x.prod(axis=dims)
    if op == "max":
        return x.max(axis=dims) if x.size else np.full(np.delete(x.shape, dims), -np.inf)
    return x.min(axis=dims) if x.size else np.full(np.delete(x.shape, dims), np.inf)


def apply_mapping(graph: Graph, var, how: str, rng: np.random.Generator) -> None:
    if how == "linear":
        graph.map_tensor_linearly(var)
    elif how == "spread":
        graph.map_tensor_linearly(var, min_elements_per_tile=1, grain_size=1)
    elif how == "chunks":  # runs of a few elements: rows split between tiles, groups of outputs
        graph.map_tensor_linearly(var, min_elements_per_tile=int(rng.integers(2, 6)), grain_size=1)
    elif how == "random":
        graph.set_tile_mapping(var.flatten(), _mapping(rng.integers(0, 16, var.num_elements)))
    else:
        graph.set_tile_mapping(var, 3)


def _mapping(tiles: np.ndarray):
    from gruc.ir.mapping import TileMapping

    return TileMapping.from_element_tiles(np.asarray(tiles, dtype=np.int64))


def make_input(graph: Graph, shape, dtype, view: str, mapping: str, rng: np.random.Generator,
               name: str = "x"):
    """A view of shape ``shape`` over a new variable; returns (view, variable, numpy view fn)."""
    shape = tuple(shape)
    rank = len(shape)
    if view == "transpose" and rank >= 2:
        perm = tuple(reversed(range(rank)))
        var = graph.add_variable(dtype, tuple(shape[p] for p in perm), name)
        return var.dim_shuffle(perm), var, lambda a: a.transpose(perm), mapping
    if view == "slice" and rank >= 1:
        var = graph.add_variable(dtype, (shape[0] + 2,) + shape[1:], name)
        return var.slice(1, 1 + shape[0], 0), var, lambda a: a[1:1 + shape[0]], mapping
    if view == "reverse" and rank >= 1:
        var = graph.add_variable(dtype, shape, name)
        return var.reverse(rank - 1), var, lambda a: np.flip(a, rank - 1), mapping
    if view == "broadcast" and rank >= 1:
        var = graph.add_variable(dtype, (1,) + shape[1:], name)
        return (var.broadcast(shape[0], 0), var,
                lambda a: np.broadcast_to(a, shape), mapping)
    var = graph.add_variable(dtype, shape, name)
    return var, var, lambda a: a, mapping


def values(rng: np.random.Generator, shape, dtype, op: str) -> np.ndarray:
    if dtype in (INT, UNSIGNED_INT):
        return rng.integers(0 if dtype is UNSIGNED_INT else -5, 6, shape)
    if op == "mul":  # products of many numbers near 1 stay well inside half and float
        return rng.uniform(0.8, 1.25, shape) * rng.choice([-1, 1], shape)
    return rng.uniform(-2, 2, shape)


def compile_and_run(graph, prog, writes, reads, backend):
    engine = Engine(graph, prog, backend=backend)
    for name, value in writes.items():
        engine.write_tensor(name, value)
    engine.run()
    return engine, {name: engine.read_tensor(name) for name in reads}


def tolerance(dtype, op, x64, dims):
    """(rtol, atol) for comparing with the float64 oracle: float accumulation, one rounding of the
    result to the output type (half: 2^-11 relative; tighter than poplibs' rel 0.3 / abs 7e-2)."""
    magnitude = np.abs(x64).max() if x64.size else 1.0
    if dtype is HALF:
        return 1.5e-3, 1e-3 * max(magnitude, 1.0)
    if dtype in (INT, UNSIGNED_INT):
        return 0, 0
    return 2e-5, 1e-5 * max(magnitude, 1.0) * max(x64.size, 1) ** 0.5


# ---- property tests (numpy engine) ---------------------------------------------------------------
@st.composite
def reduction_cases(draw):
    rank = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=rank, max_size=rank)))
    dims = tuple(d for d in range(rank) if draw(st.booleans()))
    op = draw(st.sampled_from(OPS))
    dtype = draw(st.sampled_from([FLOAT, FLOAT, HALF, INT]))
    if dtype is INT and op == "mul":
        op = "add"
    view = draw(st.sampled_from(VIEWS))
    mapping = draw(st.sampled_from(MAPPINGS))
    scaled = op in ("add", "square_add") and dtype is not INT and draw(st.booleans())
    scale = draw(st.sampled_from([0.5, -2.0, 3.0])) if scaled else 1.0
    seed = draw(st.integers(0, 2**31))
    return shape, dims, op, dtype, view, mapping, scale, seed


@settings(max_examples=250)
@given(reduction_cases())
def test_reduce_matches_oracle(case):
    shape, dims, op, dtype, view, mapping, scale, seed = case
    rng = np.random.default_rng(seed)
    g = Graph(T16)
    x, var, as_view, _ = make_input(g, shape, dtype, view, mapping, rng)
    apply_mapping(g, var, mapping, rng)
    prog = Sequence()
    out = reduce(g, x, list(dims), op, prog, scale=scale)
    g.create_host_write("x", var)
    g.create_host_read("out", out)
    base = values(rng, var.shape, dtype, op)
    _, got = compile_and_run(g, prog, {"x": base}, ["out"], "numpy")
    x64 = as_view(base.astype(dtype.storage).astype(np.float64))
    want = scale * oracle(x64, dims, op)
    assert got["out"].shape == want.shape
    rtol, atol = tolerance(dtype, op, x64, dims)
    if dtype is INT:
        want = want.astype(np.int64).astype(np.int32)  # wraps like the device
    np.testing.assert_allclose(got["out"].astype(np.float64), want, rtol=rtol, atol=atol)


@settings(max_examples=100)
@given(reduction_cases(), st.booleans(), st.sampled_from(MAPPINGS))
def test_reduce_with_output_update_and_scale(case, update, out_mapping):
    shape, dims, op, dtype, view, mapping, scale, seed = case
    if dtype is INT:
        dtype = FLOAT
    if update and op not in ("add", "square_add"):
        op = "add"
    rng = np.random.default_rng(seed)
    g = Graph(T16)
    x, var, as_view, _ = make_input(g, shape, dtype, view, mapping, rng)
    apply_mapping(g, var, mapping, rng)
    out_shape = tuple(n for d, n in enumerate(shape) if d not in dims)
    out_dtype = FLOAT if dtype is HALF and rng.integers(2) else dtype
    out = g.add_variable(out_dtype, out_shape, "out")
    if out_mapping != "linear" or rng.integers(2):  # else leave it unmapped: reduce maps it
        apply_mapping(g, out, out_mapping, rng)
    prog = Sequence()
    reduce_with_output(g, x, out, list(dims), op, prog, update=update, scale=scale)
    g.create_host_write("x", var)
    g.create_host_write("out", out)
    g.create_host_read("out", out)
    base = values(rng, var.shape, dtype, op)
    before = rng.uniform(-1, 1, out_shape)
    _, got = compile_and_run(g, prog, {"x": base, "out": before}, ["out"], "numpy")
    x64 = as_view(base.astype(dtype.storage).astype(np.float64))
    want = scale * oracle(x64, dims, op)
    if update:
        want = want + before.astype(out_dtype.storage).astype(np.float64)
    rtol, atol = tolerance(HALF if HALF in (dtype, out_dtype) else dtype, op, x64, dims)
    np.testing.assert_allclose(got["out"].astype(np.float64), want, rtol=rtol, atol=atol + 1e-6)


# ---- every subset of dims of a rank-3 tensor, every op, both engines -----------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [FLOAT, HALF])
def test_every_subset_of_dims_and_every_op(backend, dtype, rng):
    g = Graph(T16)
    x = g.add_variable(dtype, (5, 6, 12), "x")
    g.map_tensor_linearly(x)
    prog = Sequence()
    reads = {}
    subsets = [c for k in range(4) for c in itertools.combinations(range(3), k)]
    for dims in subsets:
        for op in OPS:
            name = f"{op}_{''.join(map(str, dims)) or 'none'}"
            reads[name] = (dims, op, reduce(g, x, dims, op, prog, name=name))
            g.create_host_read(name, reads[name][2])
    g.create_host_write("x", x)
    base = rng.uniform(0.8, 1.25, (5, 6, 12)) * rng.choice([-1, 1], (5, 6, 12))
    engine, got = compile_and_run(g, prog, {"x": base}, list(reads), backend)
    x64 = base.astype(dtype.storage).astype(np.float64)
    for name, (dims, op, _) in reads.items():
        rtol, atol = tolerance(dtype, op, x64, dims)
        np.testing.assert_allclose(got[name], oracle(x64, dims, op), rtol=rtol, atol=atol,
                                   err_msg=name)
    assert engine.report.cycles.compute > 0


# ---- fixed cases on both engines -----------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_gru_shaped_reductions_views_and_integers(backend, rng):
    """The reductions a GRU uses (batch axis of [3,B,H], innermost of [B,H]) plus views and ints."""
    g = Graph(T16)
    acc = g.add_variable(FLOAT, (3, 4, 38), "acc")      # bias-gradient accumulator [3, B, H]
    g.map_tensor_linearly(acc)
    bias_grad = g.add_variable(FLOAT, (3, 38), "bias_grad")
    g.map_tensor_linearly(bias_grad)
    att = g.add_variable(FLOAT, (4, 38), "att")         # attention gradient: sum over H
    g.map_tensor_linearly(att)
    wide = g.add_variable(FLOAT, (40, 24), "wide")
    g.map_tensor_linearly(wide, min_elements_per_tile=1, grain_size=1)
    ints = g.add_variable(INT, (7, 9), "ints")
    g.map_tensor_linearly(ints, min_elements_per_tile=1, grain_size=1)
    prog = Sequence()
    reduce_with_output(g, acc, bias_grad, [1], "add", prog)
    att_grad = reduce(g, att, [1], Operation.ADD, prog, scale=-1.0)
    columns = reduce(g, wide.transpose(), [1], "max", prog)            # over wide's dim 0
    sliced = reduce(g, wide[3:30:2, 5:], [0, 1], "square_add", prog)   # strided slice, scalar
    flipped = reduce(g, wide.reverse(1)[:, ::3], [0], "min", prog)
    int_max = reduce(g, ints, [1], "MAX", prog)
    int_sum = reduce(g, ints.transpose(), [1], "add", prog)
    unsigned = g.add_variable(UNSIGNED_INT, (7, 9), "unsigned")
    g.map_tensor_linearly(unsigned, min_elements_per_tile=4, grain_size=1)
    uint_min = reduce(g, unsigned, [0], "min", prog)
    uint_prod = reduce(g, unsigned[:, :3], [1], "mul", prog)
    broadcast = reduce(g, att[1:2].broadcast(5, 0), [0, 1], "add", prog)
    outs = {"bias_grad": bias_grad, "att_grad": att_grad, "columns": columns, "sliced": sliced,
            "flipped": flipped, "int_max": int_max, "int_sum": int_sum, "broadcast": broadcast,
            "uint_min": uint_min, "uint_prod": uint_prod}
    for name, t in {"acc": acc, "att": att, "wide": wide, "ints": ints,
                    "unsigned": unsigned}.items():
        g.create_host_write(name, t)
    for name, t in outs.items():
        g.create_host_read(name, t)
    a, b = rng.uniform(-2, 2, (3, 4, 38)), rng.uniform(-2, 2, (4, 38))
    w = rng.uniform(-2, 2, (40, 24))
    i, u = rng.integers(-100, 100, (7, 9)), rng.integers(0, 50, (7, 9))
    _, got = compile_and_run(g, prog, {"acc": a, "att": b, "wide": w, "ints": i, "unsigned": u},
                             list(outs), backend)
    w32 = w.astype(np.float32).astype(np.float64)
    want = {"bias_grad": a.astype(np.float32).astype(np.float64).sum(1),
            "att_grad": -b.astype(np.float32).astype(np.float64).sum(1),
            "columns": w32.max(0), "sliced": (w32[3:30:2, 5:] ** 2).sum(),
            "flipped": np.flip(w32, 1)[:, ::3].min(0), "int_max": i.max(1), "int_sum": i.sum(0),
            "broadcast": 5 * b.astype(np.float32).astype(np.float64)[1].sum(),
            "uint_min": u.min(0), "uint_prod": u[:, :3].prod(1)}
    for name in outs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)
    assert got["int_max"].dtype == np.int32 and got["sliced"].shape == ()
    assert got["uint_prod"].dtype == np.uint32


@pytest.mark.parametrize("backend", BACKENDS)
def test_half_input_accumulates_in_float(backend):
    """4096 halves of 1 + 2^-10 sum exactly in float; a half accumulator would stall at 2048."""
    g = Graph(T16)
    x = g.add_variable(HALF, (4096,), "x")
    g.map_tensor_linearly(x)
    prog = Sequence()
    total = reduce(g, x, [0], "add", prog, out_type=FLOAT)
    half_total = reduce(g, x, [0], "add", prog)
    g.create_host_write("x", x)
    g.create_host_read("total", total)
    g.create_host_read("half_total", half_total)
    _, got = compile_and_run(g, prog, {"x": np.full(4096, 1 + 2**-10)}, ["total", "half_total"],
                             backend)
    assert float(got["total"]) == 4096 * (1 + 2**-10)
    assert float(got["half_total"]) == float(np.float16(4096 * (1 + 2**-10)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_update_inside_a_loop_and_empty_reductions(backend, rng):
    g = Graph(T16)
    x = g.add_variable(FLOAT, (6, 40), "x")
    g.map_tensor_linearly(x)
    acc = g.add_variable(FLOAT, (40,), "acc")
    g.map_tensor_linearly(acc)
    empty = g.add_variable(FLOAT, (0, 5), "empty")
    g.map_tensor_linearly(empty)
    prog = Sequence()
    body = Sequence()
    reduce_with_output(g, x, acc, [0], "square_add", body, update=True, scale=0.5)
    prog.add(Repeat(3, body))
    identity_max = reduce(g, empty, [0], "max", prog)
    identity_add = reduce(g, empty, [0], "add", prog)
    nothing = reduce(g, empty, [1], "add", prog)
    g.create_host_write("x", x)
    g.create_host_write("acc", acc)
    for name, t in {"acc": acc, "max": identity_max, "add": identity_add, "none": nothing}.items():
        g.create_host_read(name, t)
    xv, start = rng.uniform(-1, 1, (6, 40)), rng.uniform(-1, 1, 40)
    _, got = compile_and_run(g, prog, {"x": xv, "acc": start}, ["acc", "max", "add", "none"],
                             backend)
    x32 = xv.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(got["acc"], start.astype(np.float32) + 1.5 * (x32 ** 2).sum(0),
                               rtol=1e-5)
    assert np.all(got["max"] == -np.inf) and np.all(got["add"] == 0) and got["none"].shape == (0,)


# ---- the plan: partials in memory, exchange in the report ----------------------------------------
def test_partials_live_on_the_input_tiles_and_are_exchanged():
    g = Graph(T16)
    x = g.add_variable(FLOAT, (8, 64), "x")  # 32 floats a tile: every tile holds half a row
    g.map_tensor_linearly(x)
    prog = Sequence()
    out = reduce(g, x, [0], "add", prog, name="colsum")
    g.create_host_write("x", x)
    g.create_host_read("out", out)
    engine = Engine(g, prog, backend="numpy")
    partials = next(v for v in g.variables if v.name == "colsum/partials")
    gathered = next(v for v in g.variables if v.name == "colsum/gathered_partials")
    input_tiles = set(g.get_tile_mapping(x).tiles_used().tolist())
    partial_tiles = {tile for tile, _, _ in engine.plan.blocks(partials.index)}
    assert partial_tiles == input_tiles and len(input_tiles) == 16
    assert partials.num_elements == x.num_elements  # one partial per element a tile holds
    # the partials are temporaries (x and out are host streams, so always-live): they are what
    # makes the not-always-live bytes of every input tile
    assert partials.index not in engine.plan.liveness.always_live
    not_always = engine.report.not_always_live_max_bytes
    for tile, _, nbytes in engine.plan.blocks(partials.index):
        assert nbytes == 32 * 4 and not_always[tile] >= nbytes
    # exchange: the gathered partials cross tiles once per run
    xv = np.arange(512, dtype=np.float32).reshape(8, 64)
    engine.write_tensor("x", xv)
    assert engine.report.exchange_bytes == 0
    engine.run()
    np.testing.assert_array_equal(engine.read_tensor("out"), xv.sum(0))
    assert engine.report.exchange_bytes == gathered.num_elements * 4 > 0
    assert engine.report.cycles.exchange > 0
    kinds = [type(p).__name__ for p in prog.programs]
    assert kinds == ["Execute", "Copy", "Execute"]


def test_a_local_reduction_is_one_compute_set_without_exchange():
    g = Graph(T16)
    x = g.add_variable(FLOAT, (16, 32), "x")  # one row per tile: the innermost sum stays local
    g.map_tensor_linearly(x)
    prog = Sequence()
    out = reduce(g, x, [1], "add", prog)
    assert len(prog.programs) == 1 and isinstance(prog.programs[0], Execute)
    assert len(prog.programs[0].compute_set.vertices) == 16
    assert g.get_tile_mapping(out).tiles.tolist() == list(range(16))  # mapped like the rows
    g.create_host_write("x", x)
    g.create_host_read("out", out)
    engine, got = compile_and_run(g, prog, {"x": np.ones((16, 32))}, ["out"], "numba")
    assert got["out"].tolist() == [32.0] * 16
    assert engine.report.exchange_bytes == 0
    assert not any(v.name.endswith("partials") for v in g.variables)


def test_reduce_with_output_keeps_a_mapping_and_completes_a_partial_one():
    g = Graph(T16)
    x = g.add_variable(FLOAT, (16, 32), "x")
    g.map_tensor_linearly(x)
    mapped = g.add_variable(FLOAT, (16,), "mapped")
    g.set_tile_mapping(mapped, 5)
    half_mapped = g.add_variable(FLOAT, (16,), "half_mapped")
    g.set_tile_mapping(half_mapped[:4], 9)
    prog = Sequence()
    reduce_with_output(g, x, mapped, [1], "add", prog)
    reduce_with_output(g, x, half_mapped, [1], "add", prog)
    assert g.get_tile_mapping(mapped).tiles.tolist() == [5]
    assert g.element_tiles(half_mapped).tolist() == [9] * 4 + list(range(4, 16))


def test_reduction_ir_is_local_and_round_trips():
    g = Graph(T16)
    x = g.add_variable(HALF, (6, 40), "x")
    g.map_tensor_linearly(x, min_elements_per_tile=1, grain_size=1)
    out = g.add_variable(FLOAT, (40,), "out")
    g.map_tensor_linearly(out)
    prog = Sequence()
    reduce(g, x.transpose(), [1], "max", prog)
    reduce(g, x, [0, 1], "square_add", prog, scale=0.25)
    reduce_with_output(g, x, out, [0], "add", prog, update=True, scale=2.0)
    g.create_host_write("x", x)
    g.create_host_write("out", out)
    module = Module(g, [prog])
    verify(module, require_local=True)  # every vertex touches only its own tile
    text = print_module(module)
    assert "ReduceUpdate(" in text and "op=\"square_add\"" in text
    assert print_module(parse_module(text)) == text


# ---- bad input -----------------------------------------------------------------------------------
def test_bad_arguments_raise_errors_that_name_the_value():
    g = Graph(T16)
    x = g.add_variable(FLOAT, (4, 6), "x")
    g.map_tensor_linearly(x)
    out = g.add_variable(FLOAT, (5,), "out")
    g.map_tensor_linearly(out)
    prog = Sequence()
    with pytest.raises(GrucValueError, match="ADDD"):
        reduce(g, x, [0], "ADDD", prog)
    with pytest.raises(GrucValueError, match="unknown reduction operation"):
        reduce(g, x, [0], 3, prog)
    with pytest.raises(GrucIndexError, match="dimension 2 .*\\[4, 6\\]"):
        reduce(g, x, [2], "add", prog)
    with pytest.raises(GrucIndexError, match="-3"):
        reduce(g, x, [-3], "add", prog)
    with pytest.raises(GrucValueError, match="listed twice"):
        reduce(g, x, [1, -1], "add", prog)
    with pytest.raises(GrucValueError, match="MAX"):
        reduce_with_output(g, x, out.slice(0, 4, 0), [1], "max", prog, update=True)
    with pytest.raises(GrucValueError, match="scale .*MIN"):
        reduce(g, x, [1], "min", prog, scale=2.0)
    with pytest.raises(GrucShapeError, match=r"\[5\].*\[4\]"):
        reduce_with_output(g, x, out, [1], "add", prog)
    with pytest.raises(GrucTypeError, match="int"):
        reduce(g, x, [1], "add", prog, out_type=INT)
    with pytest.raises(GrucTypeError, match="bool"):
        flags = g.add_variable("bool", (3,), "flags")
        g.map_tensor_linearly(flags)
        reduce(g, flags, [0], "max", prog)
    with pytest.raises(GrucValueError, match="overlaps"):
        reduce_with_output(g, x, x[0], [0], "add", prog)
    with pytest.raises(GrucValueError, match="more than once"):
        reduce_with_output(g, x, out[0:1].broadcast(4, 0), [1], "add", prog)
    unmapped = g.add_variable(FLOAT, (3, 3), "unmapped")
    with pytest.raises(GrucMappingError, match="not fully mapped"):
        reduce(g, unmapped, [0], "add", prog)
    with pytest.raises(GrucTypeError, match="scale"):
        reduce(g, x, [0], "add", prog, scale="2")
    assert issubclass(GrucIndexError, GrucError) and not prog.programs


def test_operation_names_are_case_insensitive():
    from gruc.ops.reduce import operation_of

    assert operation_of("SQUARE_ADD") is Operation.SQUARE_ADD
    assert operation_of("max") is Operation.MAX and operation_of(Operation.MIN) is Operation.MIN
