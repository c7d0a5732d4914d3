"""The engine's product library (:mod:`gruc.runtime.blas`): MKL and numpy give float64's products,
the packed weights follow every change, and ``GRUC_BLAS`` is checked."""

from __future__ import annotations

import platform

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gruc import FLOAT, Copy, Engine, Graph, GrucValueError, Repeat, Sequence, Target
from gruc.ir.expr import _1, Const
from gruc.ops import map_in_place
from gruc.ops.matmul import create_mat_mul_input_lhs, create_mat_mul_input_rhs, mat_mul
from gruc.runtime import blas
from gruc.runtime.codelets import matmul_fused as matmul_codelets

MKL_EXPECTED = platform.system() == "Linux" and platform.machine() == "x86_64"
"""Where the test extra installs the ``mkl`` wheel (as the ``mkl`` extra does), so it must load."""
LIBRARIES = ["numpy", pytest.param("mkl", marks=pytest.mark.skipif(
    not MKL_EXPECTED, reason="the mkl wheel exists for x86-64 only"))]


def test_mkl_loads_where_it_is_a_dependency(monkeypatch):
    assert (blas._mkl() is not None) == MKL_EXPECTED
    monkeypatch.setenv("GRUC_BLAS", "mkl")  # asked for, on any processor
    if MKL_EXPECTED:
        assert blas.library_name() == "mkl"


@pytest.mark.parametrize("vendor, chosen", [("GenuineIntel", "mkl"), ("AuthenticAMD", "numpy"),
                                            (None, "numpy")])
def test_auto_takes_mkl_on_intel_processors_only(vendor, chosen, monkeypatch):
    monkeypatch.delenv("GRUC_BLAS", raising=False)
    monkeypatch.setattr(blas, "processor_vendor", lambda: vendor)
    monkeypatch.setattr(blas, "_mkl", lambda: object())  # loaded, wherever the test runs
    assert blas.library_name() == chosen
    monkeypatch.setenv("GRUC_BLAS", "mkl")
    assert blas.library_name() == "mkl"


@pytest.mark.skipif(not MKL_EXPECTED, reason="x86-64 Linux names the vendor in /proc/cpuinfo")
def test_the_processor_vendor_is_read_from_linux():
    with open("/proc/cpuinfo") as info:
        named = next(line for line in info if line.startswith("vendor_id"))
    assert blas.processor_vendor() == named.split(":")[1].strip() != ""


@pytest.mark.parametrize("library", LIBRARIES)
@given(G=st.integers(1, 3), M=st.integers(0, 48), K=st.integers(0, 400), N=st.integers(0, 96),
       a_transposed=st.booleans(), b_transposed=st.booleans(), seed=st.integers(0, 2 ** 32 - 1))
def test_products_of_any_layout_match_float64(library, G, M, K, N, a_transposed, b_transposed,
                                              seed):
    rng = np.random.default_rng(seed)
    a64, b64 = rng.uniform(-1, 1, (G, M, K)), rng.uniform(-1, 1, (G, K, N))
    # a transposed operand is the transposed view of a contiguous array, as the engine's stacks are
    a = (np.ascontiguousarray(a64.transpose(0, 2, 1), np.float32).transpose(0, 2, 1)
         if a_transposed else a64.astype(np.float32))
    b = (np.ascontiguousarray(b64.transpose(0, 2, 1), np.float32).transpose(0, 2, 1)
         if b_transposed else b64.astype(np.float32))
    out = np.full((G, M, N), np.nan, np.float32)
    product = blas.Product(a, b, out, library)
    product()
    big = M * K * N > blas.SMALL_PRODUCT
    assert product.library == ("mkl" if library == "mkl" and big else "numpy")
    np.testing.assert_allclose(out, a64 @ b64, rtol=1e-5, atol=1e-5 * max(K, 1))


@pytest.mark.parametrize("library", LIBRARIES)
def test_packed_weights_follow_every_change(library, monkeypatch, rng):
    monkeypatch.setenv("GRUC_BLAS", library)
    G, M, K, N = 2, 32, 100, 90  # above SMALL_PRODUCT
    a, b = np.empty((G, M, K), np.float32), np.empty((G, K, N), np.float32)
    out = np.empty((G, M, N), np.float32)
    product = blas.WeightsProduct(a, b, out)
    assert product.library == library
    # b changes, then is reused twice, changes, is reused; a changes on every call
    for changed in (True, False, False, True, False, True, True):
        if changed:
            b[...] = rng.uniform(-1, 1, b.shape)
        a[...] = rng.uniform(-1, 1, a.shape)
        product(b_changed=changed)
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    # packed whenever it changed (and only then)
    assert product.packs == (4 if library == "mkl" else 0)


def test_the_library_choice_is_checked(monkeypatch):
    monkeypatch.setenv("GRUC_BLAS", "openblas")
    with pytest.raises(GrucValueError, match=r"GRUC_BLAS='openblas'.*allowed auto, mkl, numpy"):
        blas.library_name()
    monkeypatch.setenv("GRUC_BLAS", "numpy")
    assert blas.library_name() == "numpy"
    monkeypatch.setattr(blas, "_mkl", lambda: None)  # a machine without MKL
    monkeypatch.setattr(blas, "processor_vendor", lambda: "GenuineIntel")
    monkeypatch.setenv("GRUC_BLAS", "auto")
    assert blas.library_name() == "numpy"
    monkeypatch.setenv("GRUC_BLAS", "mkl")
    with pytest.raises(GrucValueError, match=r"'mkl' but Intel MKL is not installed"):
        blas.library_name()


def test_another_intel_runtime_in_the_process_keeps_gruc_off_mkl():
    ours = "/venv/lib"
    maps = ("7f00-7f10 r-xp 00000000 08:01 12 /venv/lib/libmkl_rt.so.3\n"
            "7f20-7f30 r-xp 00000000 08:01 13 /venv/lib/libiomp5.so\n"
            "7f40-7f50 rw-p 00000000 00:00 0 \n"
            "7f60-7f70 r-xp 00000000 08:01 14 /usr/lib/libm.so.6\n")
    assert blas.foreign_intel_runtime(maps, ours) is None
    conda = "7f80-7f90 r-xp 00000000 08:01 15 /opt/conda/lib/libiomp5.so\n"
    assert blas.foreign_intel_runtime(maps + conda, ours) == "/opt/conda/lib/libiomp5.so"


def recurrence(steps: int, rows: int, width: int):
    """``h = 0.5 * (h @ w)``, ``steps`` times: the weights a loop multiplies by on every step."""
    g = Graph(Target.custom(tiles_per_ipu=16))
    h = create_mat_mul_input_lhs(g, FLOAT, (rows, width), (width, width), "h")
    w = create_mat_mul_input_rhs(g, FLOAT, (rows, width), (width, width), "w")
    body = Sequence()
    product = mat_mul(g, h, w, body)
    map_in_place(g, _1 * Const(0.5), [product], body)
    body.add(Copy(product, h))
    g.create_host_write("h", h)
    g.create_host_write("w", w)
    g.create_host_read("h", h)
    return g, Repeat(steps, body)


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("rows, width, fused", [
    (6, 8, False),  # one k block: the partials are the product (a small one: numpy's)
    (8, 256, True)])  # k split over tiles: partials and reduction fused, the weights packed
def test_a_recurrent_product_sees_new_weights_written_between_runs(library, rows, width, fused,
                                                                   monkeypatch, rng):
    monkeypatch.setenv("GRUC_BLAS", library)
    products = []

    class Recorded(blas.WeightsProduct):
        def __init__(self, *args) -> None:
            super().__init__(*args)
            products.append(self)

    monkeypatch.setattr(matmul_codelets, "WeightsProduct", Recorded)
    graph, program = recurrence(6, rows, width)
    engine = Engine(graph, program, backend="numba")
    for _ in range(3):  # new weights each run: packed ones from the last run must not be used
        h = rng.uniform(-1, 1, (rows, width))
        w = rng.uniform(-1, 1, (width, width)) * (3 / width) ** 0.5  # h keeps its size
        engine.write_tensor("h", h)
        engine.write_tensor("w", w)
        engine.run(0)
        for _ in range(6):
            h = 0.5 * (h @ w)
        np.testing.assert_allclose(engine.read_tensor("h"), h, rtol=1e-4, atol=1e-5)
    # a fused product's weights are packed once per run (after the run's first product)
    assert [p.packs for p in products] == ([3 if library == "mkl" else 0] if fused else [])


def _at_offset(shape: tuple[int, ...], offset: int) -> np.ndarray:
    """An empty float32 array whose data starts ``offset`` bytes past a 64-byte boundary."""
    size = int(np.prod(shape))
    buffer = np.empty(size + 32, np.float32)
    start = (-buffer.ctypes.data % 64 + offset) // 4
    return buffer[start:start + size].reshape(shape)


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("M, K, N", [(32, 1536, 512), (64, 256, 768), (7, 300, 45)])
def test_products_have_the_same_bits_packed_or_plain_at_any_alignment(library, M, K, N,
                                                                      monkeypatch, rng):
    """What lets a layer split into time shards give the unsplit layer's bits (SPEC G2): each
    shard's loop packs its weights at its own first step, from arrays of its own alignment."""
    monkeypatch.setenv("GRUC_BLAS", library)
    values_a, values_b = rng.uniform(-1, 1, (1, M, K)), rng.uniform(-1, 1, (1, K, N))
    results = []
    for offset in (0, 4, 16, 36):
        a, b = _at_offset((1, M, K), offset), _at_offset((1, K, N), 60 - offset)
        out = _at_offset((1, M, N), offset // 2)
        a[...], b[...] = values_a, values_b
        blas.Product(a, b, out, library)()
        results.append(out.copy())
        blas.WeightsProduct(a, b, out)(b_changed=True)
        results.append(out.copy())
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])
