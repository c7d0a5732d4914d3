"""The numba backend: generated, compiled kernels for the vertex kinds that carry the work.

A fused elementwise vertex becomes one numba function generated from its expression tree: a
single loop over the vertex's elements that gathers each operand from tile memory by its element
index, evaluates the whole tree on scalars and scatters the result — no temporaries, one pass.
Node values are converted to their compute type at every node, as the numpy definition computes
node by node in that type, so the two engines agree to float32 rounding.

Generated sources are written to a cache directory (``GRUC_CACHE_DIR``, default
``~/.cache/gruc``) and imported from there with ``cache=True``, so numba's compiled code is reused
by the next process instead of being compiled again (a first ``gruc gru`` pays for compilation
once per machine, not once per run).  Kinds without a kernel here (and any vertex touching HALF
data, which numba cannot load on a CPU) run on the numpy definitions.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from gruc.ir import expr as ex
from gruc.runtime.interp import NUMPY_VERTICES, VertexImpl
from gruc.runtime.lower import DeviceMemory, LoweredVertex, Operand
from gruc.types import BOOL, FLOAT, HALF, INT, UNSIGNED_INT, DType

_CONSTRUCTOR = {FLOAT.name: "np.float32", INT.name: "np.int32", UNSIGNED_INT.name: "np.uint32",
                BOOL.name: "bool"}


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

    def __init__(self, operand_dtypes: list[DType]) -> None:
        self.dtypes = operand_dtypes
        self.lines: list[str] = []
        self.count = 0

    def convert(self, value: str, dtype: DType) -> str:
        return f"{_CONSTRUCTOR[dtype.name]}({value})"

    def emit(self, node: ex.Expr) -> str:
        if isinstance(node, ex.PlaceHolder):
            return f"a{node.index}"
        node_type = ex.result_dtype(node, self.dtypes)
        if isinstance(node, ex.Const):
            source = self.convert(_literal(node.value), node_type)
        elif isinstance(node, ex.Cast):
            source = self.convert(self.emit(node.arg), node_type)
        else:
            args = [self.emit(child) for child in ex.children(node)]
            operand_type = ex.result_dtype(ex.children(node)[0], self.dtypes)
            source = self.convert(ex.scalar_source(node.op, operand_type).format(*args), node_type)
        self.count += 1
        name = f"t{self.count}"
        self.lines.append(f"        {name} = {source}")
        return name


def map_kernel_source(expr: ex.Expr, operand_dtypes: list[DType]) -> str:
    """Python source of a numba kernel computing ``out[k] = expr(operands[k])``."""
    code = _ScalarCode(operand_dtypes)
    result = code.emit(expr)
    params = ", ".join(f"m{k}, i{k}" for k in range(1, len(operand_dtypes) + 1))
    loads = [f"        a{k} = m{k}[i{k}[k]]" for k in range(1, len(operand_dtypes) + 1)]
    return "\n".join([
        "import math", "import numpy as np", "from numba import njit", "", "",
        "@njit(cache=True, nogil=True)",
        f"def kernel(out, out_index{', ' + params if params else ''}):",
        "    for k in range(out_index.shape[0]):",
        *loads, *code.lines,
        f"        out[out_index[k]] = {result}", ""])


_LOADED: dict[str, Callable] = {}


def _load(source: str) -> Callable:
    """Import (writing it first if needed) the kernel module holding ``source``."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:20]
    if digest in _LOADED:
        return _LOADED[digest]
    directory = cache_directory()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"map_{digest}.py"
    if not path.exists() or path.read_text() != source:
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            handle.write(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(f"gruc_kernel_{digest}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _LOADED[digest] = module.kernel
    return module.kernel


def map_kernel(expr: ex.Expr, operand_dtypes: list[DType]) -> Callable:
    """The compiled kernel for ``expr`` over operands of these types (cached)."""
    return _load(map_kernel_source(expr, operand_dtypes))


def _numba_map(memory: DeviceMemory, vertex: LoweredVertex, out: Operand,
               operands: tuple[Operand, ...]) -> None:
    if out.dtype is HALF or any(op.dtype is HALF for op in operands):
        NUMPY_VERTICES[vertex.kind](memory, vertex)
        return
    kernel = map_kernel(vertex.params["expr"], [op.dtype for op in operands])
    args = []
    for op in operands:
        args += [memory.view(op.dtype), op.index]
    kernel(memory.view(out.dtype), out.index, *args)


def _map(memory: DeviceMemory, vertex: LoweredVertex) -> None:
    _numba_map(memory, vertex, vertex.fields["out"], vertex.fields["ins"])


def _map_in_place(memory: DeviceMemory, vertex: LoweredVertex) -> None:
    inout = vertex.fields["inout"]
    _numba_map(memory, vertex, inout, (inout, *vertex.fields["ins"]))


NUMBA_VERTICES: dict[str, VertexImpl] = {"Map": _map, "MapInPlace": _map_in_place}
