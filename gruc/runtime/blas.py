"""The float32 products of the numba engine: Intel MKL on Intel processors where it is installed,
numpy otherwise.

Why not simply ``numpy.matmul``: a recurrent step multiplies a thin activation (a batch of 32 or
64 rows) by the same weights on every step, and a BLAS library re-lays the weights out into its
kernel's blocks ("packs" them) on every call.  For so few rows the packing costs as much as the
arithmetic: on an Intel VM (AVX-512) numpy's OpenBLAS took 420 us for a 32x512 by 512x1536
product (120 GFLOP/s, half its peak).  MKL's packed interface packs the weights once and
multiplies from the packed copy (210 us); its plain ``sgemm`` is also faster on thin products
(320 us).  So on Intel's processors the engine's products go to MKL when the ``mkl`` wheel is
importable (the ``mkl`` extra, ``pip install 'gruc[mkl]'``, on x86-64 Linux), and to
``numpy.matmul`` everywhere else — the same sums in another order, so results differ from one
library to the other in the last bits, as they do between BLAS builds.

Every product must have the same bits whenever it is taken — a layer split into time shards
must give the unsplit layer's results bit for bit (the ``shard`` pass's promise).  MKL is put in its strict
reproducible mode (``MKL_CBWR_Set(AUTO | STRICT)``: the same bits whatever the threads and the
alignment of the arrays; measured here, no slower).  Without it a packed and a plain product of
32x1536 by 1536x512 round differently, and a shard's first step would not have matched the
unsharded layer's.  A step's weights are also always multiplied packed, whether or not they just
changed, so no product's bits depend on when its weights were last written.

Every product that runs on both cores goes to the one library: two BLAS thread pools in one
process take turns badly (each spins on the cores after a call; a numpy product interleaved with
MKL ones ran 3x slower).  Small products (:data:`SMALL_PRODUCT`) stay numpy's: OpenBLAS takes
them on the calling thread.
MKL's OpenMP workers spin 200 ms after each call by default, which would steal the cores from
whatever runs next (torch, in the benchmark); gruc sets ``KMP_BLOCKTIME=1`` (1 ms: longer than the
gaps between the products of a step) unless the environment sets it, before MKL starts.

MKL is for Intel's processors.  On an AMD EPYC (2 cores, AVX2) its products were the slower ones:
a 2048-cubed product at 165 GFLOP/s against OpenBLAS's 187, a 6,400-row input projection 18.5 ms
against 13.7, a packed 32-row product no faster than OpenBLAS's plain one; and the GRU layers
built both ways in one process and run alternately took 2-7 % longer with MKL in 10 of 12
comparisons (the 512 training step 710 against 679 ms).

``GRUC_BLAS`` chooses: ``auto`` (the default: MKL on an Intel processor if it loads, else numpy),
``mkl`` (on any processor; an error if it does not load) or ``numpy``.  It is read when an engine
prepares its products.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
from functools import cache

import numpy as np

from gruc.errors import GrucValueError

CHOICES = ("auto", "mkl", "numpy")
"""The values ``GRUC_BLAS`` may take."""

_ROW_MAJOR, _NO_TRANS, _TRANS, _PACKED, _B_MATRIX = 101, 111, 112, 151, 162  # MKL's CBLAS enums
_CBWR_AUTO, _CBWR_STRICT = 2, 0x10000  # mkl_service.h: the CPU's own code path, strictly
_FLOAT = np.dtype(np.float32)
_ALIGNMENT = 64
"""Bytes to which a packed copy is aligned (MKL's own allocator aligns to 64)."""


def _mkl_runtime_path() -> str | None:
    """Where the ``mkl`` wheel put MKL's single dynamic library, if it is installed."""
    try:
        files = importlib.metadata.distribution("mkl").files or ()
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name.startswith("libmkl_rt.so"):
            path = file.locate()
            if os.path.exists(path):
                return str(path)
    return None


_INTEL_RUNTIMES = ("libiomp5", "libmkl_rt", "libmkl_core")


def foreign_intel_runtime(maps: str, ours: str) -> str | None:
    """A file of Intel's OpenMP or MKL runtimes that ``maps`` (``/proc/self/maps``) shows loaded
    from another folder than ``ours`` (the wheel's), or None.  Two copies of Intel's OpenMP runtime
    in one process abort it (a numpy or other library built on another MKL, under conda): gruc
    then leaves MKL alone."""
    for line in maps.splitlines():
        path = line.rsplit(maxsplit=1)[-1] if "/" in line else ""
        if (os.path.basename(path).startswith(_INTEL_RUNTIMES)
                and os.path.dirname(os.path.realpath(path)) != ours):
            return path
    return None


def _process_maps() -> str:
    """The shared objects and other mappings of this process, as Linux lists them."""
    try:
        with open("/proc/self/maps") as maps:
            return maps.read()
    except OSError:  # not Linux: the mkl wheel is for Linux only
        return ""


@cache
def _mkl() -> ctypes.CDLL | None:
    """MKL loaded with the signatures gruc calls, or None where it is missing, does not load, or
    another copy of Intel's runtimes is loaded already."""
    path = _mkl_runtime_path()
    if path is None or foreign_intel_runtime(_process_maps(),
                                             os.path.dirname(os.path.realpath(path))):
        return None
    os.environ.setdefault("KMP_BLOCKTIME", "1")  # read when MKL's OpenMP runtime starts
    try:
        library = ctypes.CDLL(path)
    except OSError:
        return None
    integer, size, real, pointer = ctypes.c_int, ctypes.c_size_t, ctypes.c_float, ctypes.c_void_p
    library.cblas_sgemm.argtypes = [integer] * 6 + [real, pointer, integer, pointer, integer, real,
                                                   pointer, integer]
    library.cblas_sgemm.restype = None
    library.cblas_sgemm_pack_get_size.argtypes = [integer] * 4
    library.cblas_sgemm_pack_get_size.restype = size
    library.cblas_sgemm_pack.argtypes = [integer] * 6 + [real, pointer, integer, pointer]
    library.cblas_sgemm_pack.restype = None
    library.cblas_sgemm_compute.argtypes = [integer] * 6 + [pointer, integer, pointer, integer,
                                                           real, pointer, integer]
    library.cblas_sgemm_compute.restype = None
    library.MKL_CBWR_Set.argtypes = [integer]
    library.MKL_CBWR_Set.restype = integer
    if library.MKL_CBWR_Set(_CBWR_AUTO | _CBWR_STRICT) != 0:
        return None  # no reproducible products: numpy's are
    return library


def cpu_info(field: str) -> str | None:
    """The first processor's ``field`` in Linux's ``/proc/cpuinfo`` (``vendor_id``, ``model
    name``, ...), or None where it does not say."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


@cache
def processor_vendor() -> str | None:
    """The processor's vendor as Linux names it (``GenuineIntel``, ``AuthenticAMD``, ...)."""
    return cpu_info("vendor_id")


def library_name() -> str:
    """The library the next engine's products use, as ``GRUC_BLAS`` and this machine allow:
    with ``auto``, MKL on Intel's processors only (see the module's docstring)."""
    choice = os.environ.get("GRUC_BLAS", "auto")
    if choice not in CHOICES:
        raise GrucValueError(f"GRUC_BLAS={choice!r} names no product library gruc has: allowed "
                             f"{', '.join(CHOICES)}")
    if choice == "numpy" or (choice == "auto" and processor_vendor() != "GenuineIntel"):
        return "numpy"
    if _mkl() is not None:
        return "mkl"
    if choice == "mkl":
        raise GrucValueError("GRUC_BLAS='mkl' but Intel MKL is not installed or does not load "
                             "here (pip install 'gruc[mkl]', on x86-64 Linux); allowed here: "
                             "auto, numpy")
    return "numpy"


SMALL_PRODUCT = 1 << 18
"""Products of at most this many multiply-adds are numpy's even where MKL is loaded: a call into
MKL costs about 2.5 us against numpy's 0.8 (measured, 4x8 by 8x8), and OpenBLAS takes products
this small on the calling thread alone (its threads start above 4 x 65536), so no second pool of
threads wakes up."""


def _layout(matrix: np.ndarray) -> tuple[int, int] | None:
    """A float32 matrix as CBLAS sees it in row-major order: (transposed flag, leading dimension),
    or None if its strides are not those of a matrix or of a matrix's transpose."""
    rows, columns = matrix.shape
    if matrix.dtype != _FLOAT or matrix.strides[0] % 4 or matrix.strides[1] % 4:
        return None
    if matrix.strides[1] == 4 or columns == 1:
        lead = matrix.strides[0] // 4 if rows > 1 else columns
        return (_NO_TRANS, lead) if lead >= max(columns, 1) else None
    if matrix.strides[0] == 4 or rows == 1:
        lead = matrix.strides[1] // 4 if columns > 1 else rows
        return (_TRANS, lead) if lead >= max(rows, 1) else None
    return None


class Product:
    """``out = a @ b`` on fixed float32 arrays: ``[..., M, K]`` by ``[..., K, N]`` into ``[..., M,
    N]`` (the same leading axes).  ``a`` and ``b`` may be transposed views: MKL reads them through
    their strides, no copy is made.  Each call's arguments are worked out once (working them out
    costs more than a small product)."""

    def __init__(self, a: np.ndarray, b: np.ndarray, out: np.ndarray, library: str) -> None:
        self.a, self.b, self.out = a, b, out
        M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
        self.library = "numpy" if library == "numpy" or M * K * N <= SMALL_PRODUCT else "mkl"
        self._calls = []
        for at in np.ndindex(a.shape[:-2]) if self.library == "mkl" else ():
            layouts = _layout(a[at]), _layout(b[at]), _layout(out[at])
            if None in layouts or layouts[2][0] != _NO_TRANS:
                self.library, self._calls = "numpy", []  # not a matrix MKL can take as it is
                break
            self._calls.append((_ROW_MAJOR, layouts[0][0], layouts[1][0], M, N, K, 1.0,
                                a[at].ctypes.data, layouts[0][1], b[at].ctypes.data,
                                layouts[1][1], 0.0, out[at].ctypes.data, layouts[2][1]))

    def __call__(self) -> None:
        if self.library == "numpy":
            np.matmul(self.a, self.b, out=self.out)
            return
        sgemm = _mkl().cblas_sgemm
        for arguments in self._calls:
            sgemm(*arguments)


class WeightsProduct:
    """``out = a @ b`` on the same contiguous float32 host arrays, call after call, for a ``b``
    that rarely changes (a step's weights).

    With MKL, ``b`` is packed whenever the caller says it changed, and products are taken from the
    packed copy (a ``b`` that changes on every call costs a pack per product: about 10 % more than
    a plain product, for products whose bits do not depend on when ``b`` last changed).  With
    numpy (and for products of at most :data:`SMALL_PRODUCT`), ``numpy.matmul``.  The arrays are
    C-contiguous and never move."""

    def __init__(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        self.a, self.b, self.out = a, b, out
        self.library = library_name()
        self.packs = 0
        """How many times ``b`` has been packed."""
        G, M, K = a.shape
        N = b.shape[2]
        if self.library == "numpy" or M * K * N <= SMALL_PRODUCT:
            self.library = "numpy"
            return
        size = int(_mkl().cblas_sgemm_pack_get_size(_B_MATRIX, M, N, K))
        self._buffers = [np.empty(size + _ALIGNMENT, np.uint8) for _ in range(G)]
        # addresses, taken once: the arrays never move
        self._groups = [(a[g].ctypes.data, b[g].ctypes.data, out[g].ctypes.data,
                         buffer.ctypes.data - buffer.ctypes.data % _ALIGNMENT + _ALIGNMENT)
                        for g, buffer in enumerate(self._buffers)]
        self._sizes = (M, N, K)

    def __call__(self, b_changed: bool) -> None:
        """The product, ``b_changed`` telling whether ``b`` holds other values than last call."""
        if self.library == "numpy":
            np.matmul(self.a, self.b, out=self.out)
            return
        mkl, (M, N, K) = _mkl(), self._sizes
        pack = b_changed or self.packs == 0
        for a, b, out, packed in self._groups:
            if pack:
                mkl.cblas_sgemm_pack(_ROW_MAJOR, _B_MATRIX, _NO_TRANS, M, N, K, 1.0, b, N, packed)
            mkl.cblas_sgemm_compute(_ROW_MAJOR, _NO_TRANS, _PACKED, M, N, K, a, K, packed, N, 0.0,
                                    out, N)
        self.packs += pack
