"""Reduction codelets (``Reduce``, ``ReduceUpdate``) on both engines, and their cycle estimate.

numpy: the definition in :mod:`gruc.ir.codelets.reduce`, one ``ufunc.reduce`` per region.

numba: one generated kernel per (op, input type, output type, update) that walks a table of
vertices and their regions: a step's reductions (a thousand single-tile partial sums for a bias
gradient) are one call, not a Python call each.  Most regions are *affine* in memory (a region is
a block of one tile's copy of a variable: element ``(j, k)`` sits at ``base + j*sj + k*sk``), and
the kernel picks the loop order from the strides: a reduction over the batch axis (``sj == 1``:
output slots are consecutive, the reduced elements a row apart) streams row after row into the
accumulators, which LLVM vectorises; a reduction over the innermost dimension (``sk == 1``) sums
one contiguous run per output slot.
Regions that are not affine (concatenated partials) gather through per-element indices.  Vertices
touching HALF data run on numpy, since numba cannot load float16 on a CPU.
"""

from __future__ import annotations

import numpy as np

from gruc.ir.codelets.reduce import (REDUCE, REDUCE_UPDATE, Operation, accumulator_dtype,
                                     identity, operation_of)
from gruc.ir.graph import Vertex
from gruc.ir.layout import Strided
from gruc.runtime.codelets import poplibs_estimates as pe
from gruc.runtime.codelets.regions import variable_tiles
from gruc.runtime.cost import cycle_estimator
from gruc.runtime.interp import NUMPY_VERTICES, Prepared, RunHooks, numpy_vertex
from gruc.runtime.kernels import load_kernel, numba_executable_hook, numba_vertex
from gruc.runtime.lower import DeviceMemory, Executable, ExecuteStep, LoweredVertex, Operand
from gruc.target import Target
from gruc.types import FLOAT, HALF, INT, UNSIGNED_INT, DType

_UFUNC = {Operation.ADD: np.add, Operation.SQUARE_ADD: np.add, Operation.MUL: np.multiply,
          Operation.MAX: np.maximum, Operation.MIN: np.minimum}


def _parts(vertex: LoweredVertex) -> tuple[Operand, tuple[Operand, ...], Operation, list[int],
                                           float, bool]:
    return (vertex.fields["out"], tuple(vertex.fields["ins"]), operation_of(vertex.params["op"]),
            [int(o) for o in vertex.params["offsets"]], float(vertex.params["scale"]),
            vertex.kind is REDUCE_UPDATE)


# ---- numpy ------------------------------------------------------------------------------------
@numpy_vertex(REDUCE)
@numpy_vertex(REDUCE_UPDATE)
def _numpy_reduce(vertex: LoweredVertex) -> Prepared:
    """The definition of ``Reduce`` and ``ReduceUpdate``: each region reduced row by row in the
    accumulator type and combined into its output slots, then scaled, added to the output for an
    update, and rounded once to the output's type.  Overflow gives inf or wraps, without
    warnings."""
    out, ins, op, offsets, scale, update = _parts(vertex)
    size = len(out.index)
    if not ins:
        return lambda memory: None
    in_dtype = ins[0].dtype
    acc_type = accumulator_dtype(in_dtype).storage
    ufunc = _UFUNC[op]
    square = op is Operation.SQUARE_ADD
    start = identity(op, in_dtype)
    regions = [(offset, region.index.reshape(region.shape)) for offset, region in zip(offsets, ins)]
    factor = acc_type.type(scale)

    def run(memory: DeviceMemory) -> None:
        source = memory.view(in_dtype)
        acc = np.full(size, start, dtype=acc_type)
        with np.errstate(all="ignore"):
            for offset, index in regions:
                values = source[index].astype(acc_type)
                if square:
                    values = values * values
                n = index.shape[0]
                acc[offset:offset + n] = ufunc(acc[offset:offset + n], ufunc.reduce(values, axis=1))
            if scale != 1.0:
                acc = acc * factor
            target = memory.view(out.dtype)
            if update:
                acc = target[out.index].astype(acc_type) + acc
            target[out.index] = acc.astype(out.dtype.storage)

    return run


# ---- numba ------------------------------------------------------------------------------------
_NUMBA_TYPE = {FLOAT.name: "np.float32", INT.name: "np.int32", UNSIGNED_INT.name: "np.uint32"}
_COMBINE = {Operation.ADD: "({0} + {1})", Operation.MUL: "({0} * {1})",
            Operation.MAX: "({0} if {0} >= {1} or {0} != {0} else {1})",
            Operation.MIN: "({0} if {0} <= {1} or {0} != {0} else {1})"}


def _literal(value: float | int) -> str:
    if isinstance(value, float) and np.isinf(value):
        return "math.inf" if value > 0 else "-math.inf"
    return repr(value)


def kernel_source(op: Operation, in_dtype: DType, out_dtype: DType, update: bool) -> str:
    """Source of ``kernel(src, dst, out_index, out_start, scales, region_start, offsets, ns, ms,
    bases, sjs, sks, gstart, gidx)``: vertex ``v`` writes ``out_index[out_start[v]:out_start[v +
    1]]`` from regions ``region_start[v]`` to ``region_start[v + 1]`` of the region table, walked
    as the module docstring says, and scaled by ``scales[v]``."""
    acc = _NUMBA_TYPE[accumulator_dtype(in_dtype).name]
    out = _NUMBA_TYPE[out_dtype.name]
    start = f"{acc}({_literal(identity(op, in_dtype))})"
    combine = _COMBINE[op.combine]
    pre = "x * x" if op is Operation.SQUARE_ADD else "x"
    # reassociation lets LLVM vectorise float sums and products; max/min keep strict semantics
    fast = ', fastmath={"reassoc"}' if in_dtype.is_float and op is not Operation.MAX \
        and op is not Operation.MIN else ""
    body = [
        "import math", "import numpy as np", "from numba import njit", "", "",
        f'@njit(cache=True, nogil=True, error_model="numpy"{fast})',
        "def kernel(src, dst, out_index, out_start, scales, region_start, offsets, ns, ms, bases,",
        "           sjs, sks, gstart, gidx):",
        "    largest = 0",
        "    for v in range(out_start.shape[0] - 1):",
        "        largest = max(largest, out_start[v + 1] - out_start[v])",
        f"    acc = np.empty(largest, dtype={acc})",
        "    for v in range(out_start.shape[0] - 1):",
        "        first = out_start[v]",
        "        size = out_start[v + 1] - first",
        "        for i in range(size):",
        f"            acc[i] = {start}",
        "        for b in range(region_start[v], region_start[v + 1]):",
        "            off = offsets[b]",
        "            n = ns[b]",
        "            m = ms[b]",
        "            g = gstart[b]",
        "            if g < 0:",
        "                base = bases[b]",
        "                sj = sjs[b]",
        "                sk = sks[b]",
        "                if sj == 1 and n > 1:",
        "                    a = acc[off:off + n]",
        "                    for k in range(m):",
        "                        row = src[base + k * sk:base + k * sk + n]",
        "                        for j in range(n):",
        f"                            x = {acc}(row[j])",
        f"                            x = {pre}",
        f"                            a[j] = {combine.format('a[j]', 'x')}",
        "                elif sk == 1:",
        "                    for j in range(n):",
        "                        p = base + j * sj",
        "                        run = src[p:p + m]",
        f"                        s = {start}",
        "                        for k in range(m):",
        f"                            x = {acc}(run[k])",
        f"                            x = {pre}",
        f"                            s = {combine.format('s', 'x')}",
        f"                        acc[off + j] = {combine.format('acc[off + j]', 's')}",
        "                else:",
        "                    for j in range(n):",
        "                        p = base + j * sj",
        f"                        s = {start}",
        "                        for k in range(m):",
        f"                            x = {acc}(src[p + k * sk])",
        f"                            x = {pre}",
        f"                            s = {combine.format('s', 'x')}",
        f"                        acc[off + j] = {combine.format('acc[off + j]', 's')}",
        "            else:",
        "                for j in range(n):",
        f"                    s = {start}",
        "                    for k in range(m):",
        f"                        x = {acc}(src[gidx[g + j * m + k]])",
        f"                        x = {pre}",
        f"                        s = {combine.format('s', 'x')}",
        f"                    acc[off + j] = {combine.format('acc[off + j]', 's')}",
        *([f"        factor = {acc}(scales[v])"] if in_dtype.is_float else []),
        "        for i in range(size):",
        "            r = acc[i]" + (" * factor" if in_dtype.is_float else ""),
        *([f"            r = {acc}(dst[out_index[first + i]]) + r"] if update else []),
        f"            dst[out_index[first + i]] = {out}(r)",
        "",
    ]
    return "\n".join(body)


def _affine(index: np.ndarray) -> tuple[int, int, int] | None:
    """``(base, sj, sk)`` if ``index[j, k] == base + j*sj + k*sk`` for the whole region."""
    n, m = index.shape
    base = int(index[0, 0])
    sj = int(index[1, 0]) - base if n > 1 else 0
    sk = int(index[0, 1]) - base if m > 1 else 0
    expected = base + np.arange(n, dtype=np.int64)[:, None] * sj + np.arange(m, dtype=np.int64) * sk
    return (base, sj, sk) if np.array_equal(index, expected) else None


def region_table(offsets: list[int], ins: tuple[Operand, ...]) -> tuple[np.ndarray, ...]:
    """The kernel's region arrays: offsets, ns, ms, bases, sjs, sks, gstart, gidx."""
    count = len(ins)
    table = {key: np.zeros(count, dtype=np.int64) for key in
             ("offsets", "ns", "ms", "bases", "sjs", "sks", "gstart")}
    gathered: list[np.ndarray] = []
    used = 0
    for b, (offset, region) in enumerate(zip(offsets, ins)):
        n, m = region.shape
        index = region.index.reshape(n, m)
        table["offsets"][b], table["ns"][b], table["ms"][b] = offset, n, m
        affine = _affine(index) if n * m else (0, 0, 0)
        if affine is None:
            table["gstart"][b] = used
            gathered.append(index.reshape(-1))
            used += n * m
        else:
            table["gstart"][b] = -1
            table["bases"][b], table["sjs"][b], table["sks"][b] = affine
    gidx = np.concatenate(gathered) if gathered else np.zeros(1, dtype=np.int64)
    return (table["offsets"], table["ns"], table["ms"], table["bases"], table["sjs"],
            table["sks"], table["gstart"], gidx.astype(np.int64))


def _compiled(vertex: LoweredVertex) -> bool:
    """Whether the generated kernel runs ``vertex``: it has regions and no half data (numba has
    no float16 on a CPU); the others run the numpy definition."""
    out, ins = vertex.fields["out"], vertex.fields["ins"]
    return bool(ins) and out.dtype is not HALF and ins[0].dtype is not HALF


def _prepare_group(vertices: list[LoweredVertex]) -> Prepared:
    """One kernel call running the compiled ``vertices`` (same kind, op and types) in order: a
    step of a thousand single-tile reductions (a bias gradient's partials) is one call, not a
    thousand."""
    parts = [_parts(vertex) for vertex in vertices]
    out, ins, op, _, _, update = parts[0]
    in_dtype = ins[0].dtype
    kernel = load_kernel(kernel_source(op, in_dtype, out.dtype, update))
    tables = region_table([o for part in parts for o in part[3]],
                          tuple(region for part in parts for region in part[1]))
    out_index = np.concatenate([part[0].index for part in parts]).astype(np.int64, copy=False)
    out_start = np.cumsum([0] + [part[0].index.size for part in parts], dtype=np.int64)
    region_start = np.cumsum([0] + [len(part[1]) for part in parts], dtype=np.int64)
    scales = np.array([part[4] for part in parts], dtype=np.float64)

    def run(memory: DeviceMemory) -> None:
        kernel(memory.view(in_dtype), memory.view(out.dtype), out_index, out_start, scales,
               region_start, *tables)

    return run


@numba_vertex(REDUCE)
@numba_vertex(REDUCE_UPDATE)
def _numba_reduce(vertex: LoweredVertex) -> Prepared:
    """The compiled reduction of one vertex (a group of one); see :func:`_compiled`."""
    if not _compiled(vertex):
        return NUMPY_VERTICES[vertex.kind](vertex)
    return _prepare_group([vertex])


def _group_key(vertex: LoweredVertex):
    if vertex.kind not in (REDUCE, REDUCE_UPDATE) or not _compiled(vertex):
        return None
    return (vertex.kind, vertex.params["op"], vertex.fields["ins"][0].dtype.name,
            vertex.fields["out"].dtype.name)


@numba_executable_hook
def _group_reductions(executable: Executable, hooks: RunHooks) -> dict[int, Prepared | None]:
    """A step's compiled reductions of one kind, op and types, two or more, become one callable
    (see :func:`_prepare_group`), run where the first of them was.  They need not be adjacent:
    the verifier refuses a compute set whose vertices race (one writing what another reads or
    writes), so its vertices give the same result in any order — a bias gradient's partials step
    alternates the tiles that update the output with those that only write partials."""
    prepared: dict[int, Prepared | None] = {}
    for leaf in executable.leaves:
        if not isinstance(leaf, ExecuteStep):
            continue
        groups: dict[tuple, list[LoweredVertex]] = {}
        for vertex in leaf.vertices:
            key = _group_key(vertex)
            if key is not None:
                groups.setdefault(key, []).append(vertex)
        for group in groups.values():
            if len(group) > 1:
                prepared[id(group[0])] = _prepare_group(group)
                prepared.update((id(v), None) for v in group[1:])
    return prepared


# ---- cycles -----------------------------------------------------------------------------------
def _strides(region) -> tuple[int, int] | None:
    """The id strides of a 2-D region, or None if its ids are not affine."""
    layout = region.layout()
    if isinstance(layout, Strided):
        return layout.strides
    ids = region.flat_ids().reshape(region.shape)
    n, m = region.shape
    s0 = int(ids[1, 0] - ids[0, 0]) if n > 1 else 0
    s1 = int(ids[0, 1] - ids[0, 0]) if m > 1 else 0
    affine = ids[0, 0] + s0 * np.arange(n)[:, None] + s1 * np.arange(m)
    return (s0, s1) if np.array_equal(ids, affine) else None


class _Neighbours:
    """Whether two elements of a region are neighbours in its tile's memory (one block per
    variable and tile, :mod:`gruc.runtime.codelets.regions`): the ids of a row of a column block
    are a row apart, yet adjacent on their tile."""

    def __init__(self, tile: int) -> None:
        self.tile = tile
        self.layouts: dict[int, object] = {}

    def __call__(self, region, first: int, step: int) -> bool:
        if step == 1:
            return True
        if step <= 0:
            return False
        variable = region.variables()[0]
        if variable.index not in self.layouts:
            self.layouts[variable.index] = variable_tiles(variable)
        local = first - variable.first_id
        return not self.layouts[variable.index].tile_between(local, local + step, self.tile)


def region_reductions(vertex: Vertex) -> tuple[list[pe.Reduction], bool]:
    """poplibs' ``RegionReduction`` for a gruc reduce vertex's regions, and whether all its
    outputs and partials are contiguous runs.

    A region ``[n, m]`` is ``n`` output slots from ``offset``.  Laid out with the outputs
    contiguous in memory (a batch-axis reduction, column-major on the tile) it is one reduction of
    ``n`` outputs whose partials are its ``m`` rows — one partial where the rows are neighbours
    in memory; laid out with each output's elements contiguous (an innermost-axis reduction) it is
    ``n`` scalar reductions of one partial each; otherwise ``n`` scalar reductions of ``m``
    single-element partials.  Regions feeding the same output slots join one reduction, as
    poplibs gathers every partial of an output region (regions that overlap otherwise stay apart:
    a deviation)."""
    neighbours = _Neighbours(vertex.tile)
    reductions: dict[tuple[int, int], list[int]] = {}
    contiguous, last_id, last_slot = True, None, None
    for region, offset in zip(vertex.fields["ins"], vertex.params["offsets"]):
        n, m = region.shape
        if not n * m:
            continue
        strides = _strides(region)
        if strides is None or len(region.variables()) != 1:
            pieces = [((offset + j, 1), [1] * m) for j in range(n)]
            contiguous = False
        else:
            s0, s1 = strides
            first = int(region.layout().offset) if isinstance(region.layout(), Strided) \
                else int(region.flat_ids()[0])
            along_row = m == 1 or neighbours(region, first, s1)
            along_column = n == 1 or neighbours(region, first, s0)
            if n > 1 and along_column and (m == 1 or s0 == 1 or not along_row):
                joined = m == 1 or neighbours(region, first + (n - 1) * s0, s1 - (n - 1) * s0)
                pieces = [((offset, n), [n * m] if joined else [n] * m)]
                contiguous = False
            else:
                row = [m] if along_row else [1] * m
                pieces = [((offset + j, 1), row) for j in range(n)]
                rows_joined = n == 1 or neighbours(region, first + (m - 1) * s1,
                                                   s0 - (m - 1) * s1)
                start, end = first, first + (n - 1) * s0 + (m - 1) * s1
                contiguous &= along_row and rows_joined and (last_id is None or (
                    start == last_id + 1 and offset == last_slot))
                last_id, last_slot = end, offset + n
        for key, partials in pieces:
            reductions.setdefault(key, []).extend(partials)
    result = [pe.Reduction(size, tuple(partials)) for (_, size), partials in reductions.items()]
    out = vertex.fields["out"]
    return result, contiguous and out.contiguous_start() is not None


@cycle_estimator(REDUCE)
@cycle_estimator(REDUCE_UPDATE)
def _reduce_cycles(vertex: Vertex, elements: np.ndarray, target: Target) -> np.ndarray:
    """popops' reduce vertices for the vertex's regions on its tile
    (:func:`~gruc.runtime.codelets.poplibs_estimates.reduce_tile_cycles`): partials of the regions'
    type, output of the output's type, the update and scale as given."""
    cycles = np.zeros(target.num_tiles, dtype=np.int64)
    ins = vertex.fields["ins"]
    if vertex.tile is None or not ins:
        return cycles
    reductions, contiguous = region_reductions(vertex)
    types = pe.ReduceTypes(ins[0].dtype, vertex.fields["out"].dtype,
                           operation_of(vertex.params["op"]).value,
                           vertex.kind is REDUCE_UPDATE,
                           float(vertex.params["scale"]) != 1.0)
    key = (tuple(reductions), types, contiguous, target.num_worker_contexts,
           target.data_path_width_bits)
    if key not in _TILE_CYCLES:
        if len(_TILE_CYCLES) >= 4096:
            _TILE_CYCLES.clear()
        _TILE_CYCLES[key] = pe.reduce_tile_cycles(reductions, types, contiguous,
                                                  target.num_worker_contexts,
                                                  target.vector_width)
    cycles[vertex.tile] = _TILE_CYCLES[key]
    return cycles


_TILE_CYCLES: dict[tuple, int] = {}
"""A tile's reduce cycles by its reductions and types: a bias gradient's thousand vertices are
a few shapes."""
