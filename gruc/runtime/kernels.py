"""The numba backend: generated, compiled kernels for the vertex kinds that carry the work.

A fused elementwise vertex becomes one numba function generated from its expression tree: one
loop over the vertex's elements that loads each operand from tile memory, evaluates the whole tree
on scalars and stores the result — no temporaries, one pass.  Node values are converted to their
compute type at every node, as the numpy definition computes node by node in that type, and the
transcendentals use :mod:`gruc.runtime.fastmath`, so the two engines agree to float32 rounding.

Memory access comes in two shapes.  When the operands are long runs of consecutive addresses (a
tensor's elements on a tile are one block, so elementwise work over linearly mapped tensors is a
few runs per tile) the kernel walks *segments*: per segment a base address per operand, an operand
either streaming (+1 per element) or fixed (a broadcast scalar), which LLVM vectorises.  Otherwise
(transposed or scattered views) it gathers through per-element indices.

Generated sources are written to a cache directory (``GRUC_CACHE_DIR``, default
``~/.cache/gruc``) and imported from there with ``cache=True``, so numba's compiled code is reused
by the next process instead of being compiled again.  Kinds without a kernel here (and any vertex
touching HALF data, which numba cannot load on a CPU) run on the numpy definitions.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from gruc.ir import expr as ex
from gruc.runtime import fastmath
from gruc.runtime.interp import NUMPY_VERTICES, Prepared, PrepareVertex
from gruc.runtime.lower import DeviceMemory, LoweredVertex, Operand
from gruc.types import BOOL, FLOAT, HALF, INT, UNSIGNED_INT, DType

_CONSTRUCTOR = {FLOAT.name: "np.float32", INT.name: "np.int32", UNSIGNED_INT.name: "np.uint32",
                BOOL.name: "bool"}
_FAST_FLOAT32 = {ex.Unary.EXP: "exp32({0})", ex.Unary.TANH: "tanh32({0})",
                 ex.Unary.SIGMOID: "sigmoid32({0})"}
_FASTMATH_VERSION = hashlib.sha1(Path(fastmath.__file__).read_bytes()).hexdigest()[:12]
"""Part of every kernel's source: numba's cache cannot see changes in imported modules."""

SEGMENT_MIN_AVERAGE = 4
"""Use segment kernels when segments average at least this many elements."""


def cache_directory() -> Path:
    """Where generated kernel sources (and numba's compiled code beside them) live."""
    root = os.environ.get("GRUC_CACHE_DIR") or os.path.join(Path.home(), ".cache", "gruc")
    return Path(root) / "kernels"


def _literal(value: bool | int | float) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float) and not math.isfinite(value):
        return "math.nan" if math.isnan(value) else ("math.inf" if value > 0 else "-math.inf")
    return repr(value)


class _ScalarCode:
    """Statements computing one expression tree on scalar locals ``a1 .. aN``."""

    def __init__(self, operand_dtypes: list[DType], indent: str) -> None:
        self.dtypes = operand_dtypes
        self.indent = indent
        self.lines: list[str] = []
        self.count = 0

    def emit(self, node: ex.Expr) -> str:
        if isinstance(node, ex.PlaceHolder):
            return f"a{node.index}"
        node_type = ex.result_dtype(node, self.dtypes)
        if isinstance(node, ex.Const):
            value = _literal(node.value)
        elif isinstance(node, ex.Cast):
            value = self.emit(node.arg)
        else:
            args = [self.emit(child) for child in ex.children(node)]
            operand_type = ex.result_dtype(ex.children(node)[0], self.dtypes)
            template = (_FAST_FLOAT32[node.op] if operand_type is FLOAT and node.op in _FAST_FLOAT32
                        else ex.scalar_source(node.op, operand_type))
            value = template.format(*args)
        self.count += 1
        name = f"t{self.count}"
        self.lines.append(f"{self.indent}{name} = {_CONSTRUCTOR[node_type.name]}({value})")
        return name


def _header() -> list[str]:
    return ["import math", "import numpy as np", "from numba import njit",
            "from gruc.runtime.fastmath import exp32, sigmoid32, tanh32",
            f"# fastmath {_FASTMATH_VERSION}", "", "",
            '@njit(cache=True, nogil=True, error_model="numpy")']


def gather_kernel_source(expr: ex.Expr, operand_dtypes: list[DType]) -> str:
    """Source of ``kernel(out, out_index, m1, i1, ...)``: per-element indices."""
    code = _ScalarCode(operand_dtypes, " " * 8)
    result = code.emit(expr)
    params = "".join(f", m{k}, i{k}" for k in range(1, len(operand_dtypes) + 1))
    loads = [f"        a{k} = m{k}[i{k}[k]]" for k in range(1, len(operand_dtypes) + 1)]
    return "\n".join([*_header(), f"def kernel(out, out_index{params}):",
                      "    for k in range(out_index.shape[0]):",
                      *loads, *code.lines, f"        out[out_index[k]] = {result}", ""])


def segment_kernel_source(expr: ex.Expr, operand_dtypes: list[DType], streaming: list[bool],
                          same_as_out: list[bool]) -> str:
    """Source of ``kernel(out, out_base, m1, b1, ..., lengths)``: runs of consecutive elements.

    An operand that is the output itself (an in-place update) is read through the output's own
    slice: two slices of one buffer at the same address defeat LLVM's overlap check, one does not.
    """
    code = _ScalarCode(operand_dtypes, " " * 12)
    result = code.emit(expr)
    count = len(operand_dtypes)
    params = "".join(f", m{k}, b{k}" for k in range(1, count + 1))
    # Slicing each run out first lets LLVM see unit-stride, non-negative indexing and vectorise.
    runs = [f"        x{k} = y" if same_as_out[k - 1]
            else f"        x{k} = m{k}[b{k}[s]:b{k}[s] + n]" if streaming[k - 1]
            else f"        a{k} = m{k}[b{k}[s]]" for k in range(1, count + 1)]
    loads = [f"            a{k} = x{k}[j]" for k in range(1, count + 1) if streaming[k - 1]]
    return "\n".join([*_header(), f"def kernel(out, out_base{params}, lengths):",
                      "    for s in range(lengths.shape[0]):",
                      "        n = lengths[s]", "        y = out[out_base[s]:out_base[s] + n]", *runs,
                      "        for j in range(n):",
                      *loads, *code.lines, f"            y[j] = {result}", ""])


_LOADED: dict[str, Callable] = {}


def _load(source: str) -> Callable:
    """Import (writing it first if needed) the kernel module holding ``source``."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:20]
    if digest in _LOADED:
        return _LOADED[digest]
    directory = cache_directory()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"kernel_{digest}.py"
    if not path.exists() or path.read_text() != source:
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            handle.write(source)
        os.replace(tmp, path)
    name = f"gruc_kernel_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # numba's on-disk cache finds the function's module by name
    spec.loader.exec_module(module)
    _LOADED[digest] = module.kernel
    return module.kernel


@dataclass(frozen=True)
class Segments:
    """Runs of elements over which every operand is consecutive or fixed."""

    lengths: np.ndarray
    out_base: np.ndarray
    bases: tuple[np.ndarray, ...]
    streaming: tuple[bool, ...]


def find_segments(out: np.ndarray, operands: list[np.ndarray]) -> Segments | None:
    """Split the element range into segments, or None if they would be too short to pay."""
    n = len(out)
    if n == 0:
        return None
    streaming = tuple(not bool(np.all(op == op[0])) for op in operands)
    breaks = np.diff(out) != 1
    for op, moves in zip(operands, streaming):
        if moves:
            breaks |= np.diff(op) != 1
    starts = np.concatenate(([0], np.flatnonzero(breaks) + 1))
    if len(starts) * SEGMENT_MIN_AVERAGE > n:
        return None
    lengths = np.diff(np.append(starts, n))
    bases = tuple(op[starts] if moves else np.full(len(starts), op[0])
                  for op, moves in zip(operands, streaming))
    return Segments(lengths, out[starts], bases, streaming)


def _prepare_map(vertex: LoweredVertex, out: Operand, operands: tuple[Operand, ...]) -> Prepared:
    if out.dtype is HALF or any(op.dtype is HALF for op in operands):
        return NUMPY_VERTICES[vertex.kind](vertex)
    expression = ex.bind_const_types(vertex.params["expr"], [op.dtype for op in operands])
    dtypes = [op.dtype for op in operands]
    segments = find_segments(out.index, [op.index for op in operands])
    if segments is not None:
        same_as_out = [op.dtype == out.dtype and np.array_equal(base, segments.out_base)
                       for op, base in zip(operands, segments.bases)]
        kernel = _load(segment_kernel_source(expression, dtypes, list(segments.streaming),
                                             same_as_out))
        bases = segments.bases

        def run(memory: DeviceMemory) -> None:
            args = []
            for op, base in zip(operands, bases):
                args += [memory.view(op.dtype), base]
            kernel(memory.view(out.dtype), segments.out_base, *args, segments.lengths)

        return run
    kernel = _load(gather_kernel_source(expression, dtypes))

    def run_gather(memory: DeviceMemory) -> None:
        args = []
        for op in operands:
            args += [memory.view(op.dtype), op.index]
        kernel(memory.view(out.dtype), out.index, *args)

    return run_gather


def _map(vertex: LoweredVertex) -> Prepared:
    return _prepare_map(vertex, vertex.fields["out"], vertex.fields["ins"])


def _map_in_place(vertex: LoweredVertex) -> Prepared:
    inout = vertex.fields["inout"]
    return _prepare_map(vertex, inout, (inout, *vertex.fields["ins"]))


NUMBA_VERTICES: dict[str, PrepareVertex] = {"Map": _map, "MapInPlace": _map_in_place}
