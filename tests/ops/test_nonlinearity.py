"""Non-linearities (popnn nonLinearity / InPlace / InputGradient) against float64 numpy oracles.

The gradient oracles are themselves checked against central finite differences of the forward
oracles, so a wrong derivative formula (poplibs' always-0.2 hard-sigmoid, the unscaled softmax
formula applied to a scaled softmax) cannot hide behind an oracle with the same mistake.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gruc import FLOAT, HALF, INT, Engine, Execute, Graph, Sequence, Target
from gruc.errors import GrucShapeError, GrucTypeError, GrucValueError
from gruc.ops import (SOFTMAX_SCALING, NonLinearity, non_linearity, non_linearity_in_place,
                      non_linearity_input_gradient, non_linearity_scaling)

T16 = Target.custom(tiles_per_ipu=16)
KINDS = list(NonLinearity)
ELEMENTWISE = [k for k in KINDS if not k.is_softmax]
C, A = math.sqrt(2 / math.pi), 0.044715


# ---- float64 oracles -----------------------------------------------------------------------------
def forward(kind: NonLinearity, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if kind is NonLinearity.SIGMOID:
        return 1 / (1 + np.exp(-x))
    if kind is NonLinearity.HARD_SIGMOID:
        return np.clip(0.2 * x + 0.5, 0, 1)
    if kind is NonLinearity.RELU:
        return np.maximum(x, 0)
    if kind is NonLinearity.TANH:
        return np.tanh(x)
    if kind is NonLinearity.GELU:
        return 0.5 * x * (1 + np.tanh(C * (x + A * x ** 3)))
    shifted = x if kind is NonLinearity.SOFTMAX else x - x.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    scale = SOFTMAX_SCALING if kind is NonLinearity.SOFTMAX_SCALED else 1.0
    return scale * e / e.sum(axis=-1, keepdims=True)


def gradient(kind: NonLinearity, x: np.ndarray, g: np.ndarray) -> np.ndarray:
    """dL/dx for dL/dy = g, written from the output y = forward(x) (GELU: from x)."""
    x, g = np.asarray(x, dtype=np.float64), np.asarray(g, dtype=np.float64)
    y = forward(kind, x)
    if kind is NonLinearity.SIGMOID:
        return g * y * (1 - y)
    if kind is NonLinearity.HARD_SIGMOID:
        return np.where((y > 0) & (y < 1), 0.2 * g, 0.0)
    if kind is NonLinearity.RELU:
        return np.where(y > 0, g, 0.0)
    if kind is NonLinearity.TANH:
        return g * (1 - y * y)
    if kind is NonLinearity.GELU:
        th = np.tanh(C * (x + A * x ** 3))
        return g * (0.5 * (1 + th) + 0.5 * x * (1 - th ** 2) * C * (1 + 3 * A * x ** 2))
    scale = non_linearity_scaling(kind)
    return y * g - y * (y * g).sum(axis=-1, keepdims=True) / scale


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_gradient_oracles_match_finite_differences(kind, rng):
    x = rng.uniform(-4, 4, (3, 7))
    x = np.where(np.abs(np.abs(0.2 * x) - 0.5) < 1e-3, x + 0.01, x)  # off the hard-sigmoid kinks
    x = np.where(np.abs(x) < 1e-3, 0.5, x)                            # and off relu's
    g = rng.uniform(-2, 2, (3, 7))
    h = 1e-6
    numeric = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[index] += h
        down[index] -= h
        numeric[index] = ((forward(kind, up) - forward(kind, down)) * g).sum() / (2 * h)
    np.testing.assert_allclose(gradient(kind, x, g), numeric, rtol=1e-5, atol=1e-5 * (
        SOFTMAX_SCALING if kind is NonLinearity.SOFTMAX_SCALED else 1))


# ---- helpers ------------------------------------------------------------------------------------
def make_operand(graph, shape, dtype, view, mapping, name):
    """A view of shape ``shape``; returns (view, variable, numpy function giving the view)."""
    shape = tuple(shape)
    rank = len(shape)
    if view == "transpose" and rank >= 2:
        perm = tuple(reversed(range(rank)))
        var = graph.add_variable(dtype, tuple(shape[p] for p in perm), name)
        t, as_view = var.dim_shuffle(perm), (lambda a: a.transpose(perm))
    elif view == "broadcast":
        var = graph.add_variable(dtype, (1,) + shape[1:], name)
        t, as_view = var.broadcast(shape[0], 0), (lambda a: np.broadcast_to(a, shape))
    elif view == "slice":
        var = graph.add_variable(dtype, (shape[0] + 3,) + shape[1:], name)
        t, as_view = var.slice(2, 2 + shape[0], 0), (lambda a: a[2:2 + shape[0]])
    else:
        var = graph.add_variable(dtype, shape, name)
        t, as_view = var, (lambda a: a)
    if mapping == "linear":
        graph.map_tensor_linearly(var)
    else:
        graph.map_tensor_linearly(var, min_elements_per_tile=3, grain_size=1)
    return t, var, as_view


def tolerances(dtype, kind):
    scale = SOFTMAX_SCALING if kind is NonLinearity.SOFTMAX_SCALED else 1.0
    if dtype is HALF:  # one rounding of the result to half, plus half intermediates in softmax
        return 4e-3, 2e-3 * scale
    return 2e-5, 2e-6 * scale


def run(graph, prog, writes, reads, backend):
    engine = Engine(graph, prog, backend=backend)
    for name, value in writes.items():
        engine.write_tensor(name, value)
    engine.run()
    return engine, {name: engine.read_tensor(name) for name in reads}


def stored(values, dtype):
    return np.asarray(values).astype(dtype.storage).astype(np.float64)


# ---- property tests (numpy engine) ---------------------------------------------------------------
cases = st.tuples(
    st.sampled_from(KINDS),
    st.lists(st.integers(1, 9), min_size=1, max_size=3),
    st.sampled_from([FLOAT, FLOAT, HALF]),
    st.sampled_from(["plain", "transpose", "slice", "broadcast"]),
    st.sampled_from(["plain", "transpose", "slice", "broadcast"]),
    st.sampled_from(["linear", "spread"]),
    st.integers(0, 2**31))


@settings(max_examples=150)
@given(cases)
def test_forward_in_place_and_gradient_match_oracles(case):
    kind, shape, dtype, view, grad_view, mapping, seed = case
    rng = np.random.default_rng(seed)
    g = Graph(T16)
    x, xv, x_view = make_operand(g, shape, dtype, view, mapping, "x")
    z, zv, z_view = make_operand(g, shape, dtype, "plain" if view == "broadcast" else view,
                                 mapping, "z")
    d, dv, d_view = make_operand(g, shape, dtype, grad_view, mapping, "d")
    prog = Sequence()
    y = non_linearity(g, kind, x, prog)
    non_linearity_in_place(g, kind, z, prog)
    source = x if kind is NonLinearity.GELU else y  # GELU's gradient takes the input
    grad = non_linearity_input_gradient(g, kind, source, d, prog)
    for name, t in {"x": xv, "z": zv, "d": dv}.items():
        g.create_host_write(name, t)
    for name, t in {"y": y, "z": zv, "grad": grad}.items():
        g.create_host_read(name, t)
    base_x = rng.uniform(-4, 4, xv.shape)
    base_d = rng.uniform(-2, 2, dv.shape)
    x64 = x_view(stored(base_x, dtype))
    base_z = np.zeros(zv.shape)
    z_view(base_z)[...] = x64  # z's view holds the same values as x's
    _, got = run(g, prog, {"x": base_x, "z": base_z, "d": base_d}, ["y", "z", "grad"], "numpy")
    rtol, atol = tolerances(dtype, kind)
    want_y = forward(kind, x64)
    np.testing.assert_allclose(got["y"], want_y, rtol=rtol, atol=atol)
    np.testing.assert_allclose(z_view(got["z"].astype(np.float64)), want_y, rtol=rtol, atol=atol)
    # the gradient is computed from the device's y, as a caller would use it
    y_dev = stored(got["y"], dtype)
    g64 = d_view(stored(base_d, dtype))
    if kind is NonLinearity.GELU:
        want_grad = gradient(kind, x64, g64)
    elif kind.is_softmax:
        want_grad = y_dev * g64 - y_dev * (y_dev * g64).sum(-1, keepdims=True) / \
            non_linearity_scaling(kind)
    else:
        want_grad = _gradient_from_output(kind, y_dev, g64)
    grad_atol = atol * (np.abs(g64).max() + 1) * (shape[-1] if kind.is_softmax else 1)
    np.testing.assert_allclose(got["grad"], want_grad, rtol=rtol, atol=grad_atol)


def _gradient_from_output(kind, y, g):
    if kind is NonLinearity.SIGMOID:
        return g * y * (1 - y)
    if kind is NonLinearity.HARD_SIGMOID:
        return np.where((y > 0) & (y < 1), 0.2 * g, 0.0)
    if kind is NonLinearity.RELU:
        return np.where(y > 0, g, 0.0)
    return g * (1 - y * y)


# ---- fixed cases on both engines -----------------------------------------------------------------
@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("dtype", [FLOAT, HALF], ids=["float", "half"])
def test_every_kind_on_both_engines(backend, dtype, rng):
    g = Graph(T16)
    x = g.add_variable(dtype, (4, 40), "x")
    g.map_tensor_linearly(x)
    d = g.add_variable(dtype, (40, 4), "d")  # the gradient comes in transposed
    g.map_tensor_linearly(d, min_elements_per_tile=1, grain_size=1)
    prog = Sequence()
    reads = {}
    for kind in KINDS:
        y = non_linearity(g, kind, x, prog)
        source = x if kind is NonLinearity.GELU else y
        reads[kind.value] = y
        reads[kind.value + "_grad"] = non_linearity_input_gradient(g, kind, source, d.transpose(),
                                                                   prog)
        copy = g.clone(x, f"{kind.value}_in_place")
        g.create_host_write(copy.name, copy)
        non_linearity_in_place(g, kind, copy, prog)
        reads[copy.name] = copy
    g.create_host_write("x", x)
    g.create_host_write("d", d)
    for name, t in reads.items():
        g.create_host_read(name, t)
    xv = rng.uniform(-4, 4, (4, 40))
    dv = rng.uniform(-2, 2, (40, 4))
    writes = {"x": xv, "d": dv} | {f"{k.value}_in_place": xv for k in KINDS}
    _, got = run(g, prog, writes, list(reads), backend)
    x64, g64 = stored(xv, dtype), stored(dv, dtype).T
    for kind in KINDS:
        rtol, atol = tolerances(dtype, kind)
        want = forward(kind, x64)
        np.testing.assert_allclose(got[kind.value], want, rtol=rtol, atol=atol, err_msg=kind.name)
        np.testing.assert_allclose(got[kind.value + "_in_place"], want, rtol=rtol, atol=atol,
                                   err_msg=kind.name)
        y_dev = stored(got[kind.value], dtype)
        if kind is NonLinearity.GELU:
            want_grad = gradient(kind, x64, g64)
        elif kind.is_softmax:
            want_grad = y_dev * g64 - y_dev * (y_dev * g64).sum(-1, keepdims=True) / \
                non_linearity_scaling(kind)
        else:
            want_grad = _gradient_from_output(kind, y_dev, g64)
        np.testing.assert_allclose(got[kind.value + "_grad"], want_grad, rtol=rtol,
                                   atol=atol * 3 * (40 if kind.is_softmax else 1),
                                   err_msg=kind.name + " gradient")


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_softmax_stability_scaling_and_rank_one(backend):
    g = Graph(T16)
    big = g.add_variable(FLOAT, (2, 5), "big")
    g.map_tensor_linearly(big)
    vec = g.add_variable(HALF, (7,), "vec")
    g.map_tensor_linearly(vec)
    prog = Sequence()
    plain = non_linearity(g, "SOFTMAX", big, prog)
    stable = non_linearity(g, NonLinearity.SOFTMAX_STABLE, big, prog)
    scaled = non_linearity(g, "softmax_scaled", vec, prog)
    g.create_host_write("big", big)
    g.create_host_write("vec", vec)
    for name, t in {"plain": plain, "stable": stable, "scaled": scaled}.items():
        g.create_host_read(name, t)
    values = np.array([[1000.0, 999.0, 0.0, -5.0, 998.0], [1.0, 2.0, 3.0, 4.0, 5.0]])
    v = np.linspace(-3, 3, 7)
    _, got = run(g, prog, {"big": values, "vec": v}, ["plain", "stable", "scaled"], backend)
    assert np.isnan(got["plain"][0]).any()  # exp(1000) overflows without the max subtracted
    np.testing.assert_allclose(got["stable"], forward(NonLinearity.SOFTMAX_STABLE, values),
                               rtol=1e-6, atol=1e-7)
    want = forward(NonLinearity.SOFTMAX_SCALED, stored(v, HALF))
    np.testing.assert_allclose(got["scaled"], want, rtol=2e-3)
    assert abs(float(got["scaled"].astype(np.float64).sum()) - SOFTMAX_SCALING) < 0.01 * \
        SOFTMAX_SCALING


def test_elementwise_kinds_are_one_fused_vertex_per_tile():
    g = Graph(T16)
    x = g.add_variable(FLOAT, (4, 40), "x")
    g.map_tensor_linearly(x)
    for kind in ELEMENTWISE:
        prog = Sequence()
        before = len(g.compute_sets)
        y = non_linearity(g, kind, x, prog)
        non_linearity_input_gradient(g, kind, x if kind is NonLinearity.GELU else y, x, prog)
        non_linearity_in_place(g, kind, g.clone(x), prog)
        assert len(g.compute_sets) - before == 3, kind
        assert all(isinstance(p, Execute) and len(p.compute_set.vertices) == 1
                   for p in prog.programs), kind
        assert g.get_tile_mapping(y) == g.get_tile_mapping(x)


def test_softmax_uses_reductions_over_the_innermost_dim():
    g = Graph(T16)
    x = g.add_variable(FLOAT, (16, 32), "x")  # one row per tile: the reductions stay local
    g.map_tensor_linearly(x)
    prog = Sequence()
    non_linearity(g, NonLinearity.SOFTMAX_STABLE, x, prog)
    kinds = [v.kind.name for p in prog.programs if isinstance(p, Execute)
             for v in p.compute_set.vertices]
    assert kinds.count("Reduce") == 32 and "Copy" not in [type(p).__name__ for p in prog.programs]
    g.create_host_write("x", x)
    engine = Engine(g, prog, backend="numpy")
    assert engine.report.exchange_bytes == 0


def test_scaling_and_names():
    assert non_linearity_scaling("softmax_scaled") == SOFTMAX_SCALING == 62000.0
    assert non_linearity_scaling(NonLinearity.TANH) == 1.0
    with pytest.raises(GrucValueError, match="SOFTMAXX"):
        non_linearity_scaling("SOFTMAXX")


def test_bad_input_raises_errors_that_name_the_value():
    g = Graph(T16)
    x = g.add_variable(FLOAT, (4, 6), "x")
    g.map_tensor_linearly(x)
    i = g.add_variable(INT, (4, 6), "i")
    g.map_tensor_linearly(i)
    h = g.add_variable(HALF, (4, 6), "h")
    g.map_tensor_linearly(h)
    s = g.add_variable(FLOAT, (), "s")
    g.set_tile_mapping(s, 0)
    prog = Sequence()
    with pytest.raises(GrucValueError, match="'swishy'"):
        non_linearity(g, "swishy", x, prog)
    with pytest.raises(GrucTypeError, match="int"):
        non_linearity(g, NonLinearity.TANH, i, prog)
    with pytest.raises(GrucShapeError, match=r"\[4, 6\].*\[6, 4\]"):
        non_linearity_input_gradient(g, "sigmoid", x, x.transpose(), prog)
    with pytest.raises(GrucTypeError, match="half"):
        non_linearity_input_gradient(g, "tanh", x, h, prog)
    with pytest.raises(GrucShapeError, match="rank"):
        non_linearity(g, NonLinearity.SOFTMAX, s, prog)
    with pytest.raises(GrucTypeError, match="Tensor"):
        non_linearity_in_place(g, "relu", np.zeros(3), prog)
    assert not prog.programs
